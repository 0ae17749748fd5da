//! JSON-RPC 1.0 messages as OVSDB uses them (RFC 7047 §4 and the OVS extensions).

use serde_json::{Value as Json, json};

use crate::error::{Error, Result};

/// Method and notification names.
pub mod method {
    pub const TRANSACT: &str = "transact";
    pub const MONITOR: &str = "monitor";
    pub const MONITOR_COND: &str = "monitor_cond";
    pub const MONITOR_COND_SINCE: &str = "monitor_cond_since";
    pub const MONITOR_CANCEL: &str = "monitor_cancel";
    pub const ECHO: &str = "echo";
    pub const GET_SCHEMA: &str = "get_schema";
    pub const LIST_DBS: &str = "list_dbs";
    /// Notification carrying `table-updates` (plain `monitor`).
    pub const UPDATE: &str = "update";
    /// Notification carrying `table-updates2` (`monitor_cond`).
    pub const UPDATE2: &str = "update2";
    /// Notification carrying a last transaction id and `table-updates2`
    /// (`monitor_cond_since`).
    pub const UPDATE3: &str = "update3";
}

/// One message received from (or sent to) the peer.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request expecting a response (`id` is not null).
    Request {
        id: Json,
        method: String,
        params: Json,
    },
    /// A notification (`id` null or absent).
    Notification { method: String, params: Json },
    /// A response: `Ok(result)` or `Err(error)`.
    Response {
        id: Json,
        result: std::result::Result<Json, Json>,
    },
}

impl Message {
    /// Classifies a JSON text received from the peer.
    pub fn from_json(j: Json) -> Result<Self> {
        let Json::Object(mut o) = j else {
            return Err(Error::protocol("JSON-RPC message is not an object"));
        };
        let id = o.remove("id").unwrap_or(Json::Null);
        if let Some(m) = o.remove("method") {
            let Json::String(method) = m else {
                return Err(Error::protocol("JSON-RPC method is not a string"));
            };
            let params = o.remove("params").unwrap_or(Json::Array(Vec::new()));
            return Ok(if id.is_null() {
                Message::Notification { method, params }
            } else {
                Message::Request { id, method, params }
            });
        }
        let result = o.remove("result");
        let error = o.remove("error").unwrap_or(Json::Null);
        match (result, error) {
            (_, e) if !e.is_null() => Ok(Message::Response { id, result: Err(e) }),
            (Some(r), _) => Ok(Message::Response { id, result: Ok(r) }),
            (None, _) => Err(Error::protocol(
                "JSON-RPC message has neither method nor result/error",
            )),
        }
    }

    /// The wire form.
    pub fn to_json(&self) -> Json {
        match self {
            Message::Request { id, method, params } => {
                json!({"id": id, "method": method, "params": params})
            }
            Message::Notification { method, params } => {
                json!({"id": null, "method": method, "params": params})
            }
            Message::Response { id, result } => match result {
                Ok(r) => json!({"id": id, "result": r, "error": null}),
                Err(e) => json!({"id": id, "result": null, "error": e}),
            },
        }
    }
}

/// A request with a numeric id.
pub fn request(id: u64, method: &str, params: Json) -> Json {
    json!({"id": id, "method": method, "params": params})
}

/// The numeric id of a response, if it is one of ours.
pub fn response_id(id: &Json) -> Option<u64> {
    id.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify() {
        let m = Message::from_json(json!({"id":"echo","method":"echo","params":[]})).unwrap();
        assert!(matches!(m, Message::Request { ref method, .. } if method == "echo"));
        let m =
            Message::from_json(json!({"id":null,"method":"update2","params":["x",{}]})).unwrap();
        assert!(matches!(m, Message::Notification { .. }));
        let m = Message::from_json(json!({"id":3,"result":[1],"error":null})).unwrap();
        assert_eq!(
            m,
            Message::Response {
                id: json!(3),
                result: Ok(json!([1]))
            }
        );
        let m = Message::from_json(json!({"id":4,"result":null,"error":"unknown method"})).unwrap();
        assert_eq!(
            m,
            Message::Response {
                id: json!(4),
                result: Err(json!("unknown method"))
            }
        );
        assert!(Message::from_json(json!([1])).is_err());
        assert!(Message::from_json(json!({"id":1})).is_err());
        assert!(Message::from_json(json!({"method":5})).is_err());
    }

    #[test]
    fn round_trip() {
        for m in [
            Message::Request {
                id: json!(1),
                method: "echo".into(),
                params: json!([]),
            },
            Message::Notification {
                method: "update3".into(),
                params: json!([]),
            },
            Message::Response {
                id: json!("echo"),
                result: Ok(json!([])),
            },
        ] {
            assert_eq!(Message::from_json(m.to_json()).unwrap(), m);
        }
    }
}
