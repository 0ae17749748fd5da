//! Stream framing: OVSDB peers send concatenated JSON texts with no delimiter.
//!
//! [`Decoder`] scans a growing byte buffer (bracket depth, strings, escapes) and splits
//! off complete top-level objects/arrays. A message larger than the configured maximum is
//! an error, so memory stays bounded by `max + one read chunk`.

use serde_json::Value as Json;

use crate::error::{Error, Result};

/// Default maximum size of one message (256 MiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 256 * 1024 * 1024;

/// Deepest bracket nesting accepted (serde_json itself stops at 128).
const MAX_DEPTH: usize = 1024;

/// Incremental splitter of a byte stream into JSON messages.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Bytes before this offset are consumed (returned messages or whitespace).
    consumed: usize,
    /// Scan position.
    pos: usize,
    /// Start of the message being scanned, if inside one.
    start: Option<usize>,
    /// Open brackets of the message being scanned (`{` or `[`).
    stack: Vec<u8>,
    in_string: bool,
    escape: bool,
    max: usize,
    failed: bool,
}

impl Decoder {
    pub fn new(max: usize) -> Self {
        Decoder {
            buf: Vec::new(),
            consumed: 0,
            pos: 0,
            start: None,
            stack: Vec::new(),
            in_string: false,
            escape: false,
            max: max.max(2),
            failed: false,
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, data: &[u8]) {
        if self.consumed > 0 {
            self.buf.drain(..self.consumed);
            self.pos -= self.consumed;
            self.start = self.start.map(|s| s - self.consumed);
            self.consumed = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered but not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.consumed
    }

    /// The next complete message as raw bytes, `Ok(None)` if more input is needed.
    /// After an error the stream is unusable and every further call fails.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>> {
        if self.failed {
            return Err(Error::protocol("stream already failed"));
        }
        match self.scan() {
            Ok(Some((s, e))) => Ok(Some(&self.buf[s..e])),
            Ok(None) => Ok(None),
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    /// The next complete message parsed as JSON.
    pub fn decode(&mut self) -> Result<Option<Json>> {
        match self.next_frame()? {
            None => Ok(None),
            Some(bytes) => match serde_json::from_slice(bytes) {
                Ok(j) => Ok(Some(j)),
                Err(e) => {
                    self.failed = true;
                    Err(Error::protocol(format!("malformed JSON: {e}")))
                }
            },
        }
    }

    fn scan(&mut self) -> Result<Option<(usize, usize)>> {
        while self.pos < self.buf.len() {
            let b = self.buf[self.pos];
            let at = self.pos;
            self.pos += 1;
            if self.start.is_none() {
                match b {
                    b' ' | b'\t' | b'\r' | b'\n' => {
                        self.consumed = self.pos;
                        continue;
                    }
                    b'{' | b'[' => {
                        self.start = Some(at);
                        self.stack.clear();
                        self.stack.push(b);
                        continue;
                    }
                    other => {
                        return Err(Error::protocol(format!(
                            "unexpected byte 0x{other:02x} between messages"
                        )));
                    }
                }
            }
            if self.in_string {
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => {
                        if self.stack.len() >= MAX_DEPTH {
                            return Err(Error::protocol("malformed JSON: nesting too deep"));
                        }
                        self.stack.push(b);
                    }
                    b'}' | b']' => {
                        let open = if b == b'}' { b'{' } else { b'[' };
                        if self.stack.pop() != Some(open) {
                            return Err(Error::protocol(format!(
                                "malformed JSON: mismatched '{}'",
                                b as char
                            )));
                        }
                        if self.stack.is_empty() {
                            let start = self.start.take().unwrap_or(at);
                            self.consumed = self.pos;
                            return Ok(Some((start, self.pos)));
                        }
                    }
                    _ => {}
                }
            }
            if let Some(s) = self.start
                && self.pos - s > self.max
            {
                return Err(Error::MessageTooLarge { max: self.max });
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn all(d: &mut Decoder) -> Vec<Json> {
        let mut out = Vec::new();
        while let Some(j) = d.decode().unwrap() {
            out.push(j);
        }
        out
    }

    #[test]
    fn splits_concatenated_messages() {
        let mut d = Decoder::new(1024);
        d.push(br#"{"id":1,"result":[]} {"id":2}[1,2]"#);
        assert_eq!(
            all(&mut d),
            vec![json!({"id":1,"result":[]}), json!({"id":2}), json!([1, 2])]
        );
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn braces_and_escapes_inside_strings() {
        let text = r#"{"a":"}{][","b":"quote \" brace } \\","c":"\\\"}"}{"n":1}"#;
        let mut d = Decoder::new(1024);
        d.push(text.as_bytes());
        let got = all(&mut d);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["a"], "}{][");
        assert_eq!(got[0]["b"], "quote \" brace } \\");
        assert_eq!(got[0]["c"], "\\\"}");
        assert_eq!(got[1], json!({"n":1}));
    }

    #[test]
    fn chunked_input_byte_by_byte() {
        let text = r#"{"method":"update2","params":["m",{"T":{"u":{"insert":{"s":"x\"}"}}}}],"id":null}  {"id":"echo","method":"echo","params":[]}"#;
        let mut d = Decoder::new(1024);
        let mut got = Vec::new();
        for b in text.as_bytes() {
            d.push(std::slice::from_ref(b));
            while let Some(j) = d.decode().unwrap() {
                got.push(j);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["params"][1]["T"]["u"]["insert"]["s"], "x\"}");
        assert_eq!(got[1]["method"], "echo");
    }

    #[test]
    fn oversized_message_is_an_error() {
        let mut d = Decoder::new(16);
        d.push(br#"{"a":"0123456789012345678901234567890"#);
        assert!(matches!(
            d.decode(),
            Err(Error::MessageTooLarge { max: 16 })
        ));
        // poisoned afterwards
        assert!(d.decode().is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        for bad in [&b"hello"[..], b"}", b"{\"a\":}", b"{\"id\":1,\"result\":[}"] {
            let mut d = Decoder::new(1024);
            d.push(bad);
            assert!(d.decode().is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn multibyte_utf8_is_passed_through() {
        let mut d = Decoder::new(1024);
        let text = "{\"name\":\"żółw}\"}";
        let bytes = text.as_bytes();
        d.push(&bytes[..9]);
        assert!(d.decode().unwrap().is_none());
        d.push(&bytes[9..]);
        assert_eq!(d.decode().unwrap(), Some(json!({"name":"żółw}"})));
    }
}
