//! The client against a misbehaving server: bad input is an error, never a panic. The
//! tests against a real `ovsdb-server` live in the `tests` crate (`tests/tests/ovsdb_*.rs`).

use std::time::Duration;

use ovsdb::{Client, ClientConfig, Error, Remote};

/// The bad-input tests use a fake server (a tokio `UnixListener`): the real ovsdb-server
/// cannot be made to send malformed JSON, oversized messages or half replies.
mod fake {
    use ovsdb::codec::Decoder;
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;

    #[derive(Clone, Copy)]
    pub enum Bad {
        /// Garbage instead of the `_Server` answer.
        Handshake,
        Malformed,
        Mismatched,
        Oversized,
        CloseMidReply,
    }

    pub async fn serve(listener: UnixListener, bad: Bad) {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut d = Decoder::new(1 << 20);
            let mut buf = [0u8; 4096];
            'conn: loop {
                let n = match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                d.push(&buf[..n]);
                while let Ok(Some(msg)) = d.decode() {
                    let id = msg["id"].clone();
                    let server_db = msg["params"][0] == "_Server";
                    let reply: Vec<u8> = match bad {
                        Bad::Handshake => b"hello, I am not JSON".to_vec(),
                        _ if server_db => {
                            json!({"id": id, "result": null, "error": "unknown database"})
                                .to_string()
                                .into_bytes()
                        }
                        Bad::Malformed => format!(r#"{{"id":{id},"result":[1,,2]}}"#).into_bytes(),
                        Bad::Mismatched => format!(r#"{{"id":{id},"result":[}}"#).into_bytes(),
                        Bad::Oversized => json!({"id": id, "result": ["x".repeat(8192)]})
                            .to_string()
                            .into_bytes(),
                        Bad::CloseMidReply => {
                            let _ = s
                                .write_all(format!(r#"{{"id":{id},"result":["OVN_"#).as_bytes())
                                .await;
                            break 'conn;
                        }
                    };
                    if s.write_all(&reply).await.is_err() {
                        break 'conn;
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_server_input_is_an_error_not_a_panic() {
    use fake::Bad;
    let dir = tempfile::Builder::new()
        .prefix("ovsdb-fake-")
        .tempdir()
        .expect("create temp dir");
    for (i, (bad, expect)) in [
        (Bad::Malformed, "malformed JSON"),
        (Bad::Mismatched, "mismatched"),
        (Bad::Oversized, "maximum size"),
        (Bad::CloseMidReply, "closed"),
    ]
    .into_iter()
    .enumerate()
    {
        let sock = dir.path().join(format!("fake{i}.sock"));
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let server = tokio::spawn(fake::serve(listener, bad));
        let c = Client::connect(
            ClientConfig::new(vec![Remote::Unix(sock)])
                .with_max_message_size(1024)
                .with_request_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        let err = c.list_dbs().await.unwrap_err();
        match &err {
            Error::ConnectionLost { method, reason } => {
                assert_eq!(method, "list_dbs");
                assert!(reason.contains(expect), "{err}");
            }
            other => panic!("expected ConnectionLost, got {other:?}"),
        }
        c.close().await;
        server.abort();
    }

    // Garbage during the connection handshake: connect fails with the reason.
    let sock = dir.path().join("garbage.sock");
    let listener = tokio::net::UnixListener::bind(&sock).unwrap();
    let server = tokio::spawn(fake::serve(listener, Bad::Handshake));
    let err = Client::connect(
        ClientConfig::new(vec![Remote::Unix(sock)])
            .with_backoff(Duration::from_millis(20), Duration::from_millis(100))
            .with_request_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, Error::Disconnected(r) if r.contains("unexpected byte")),
        "{err:?}"
    );
    server.abort();

    // Nothing listening at all.
    let err = Client::connect(
        ClientConfig::new(vec![Remote::Unix(dir.path().join("nobody.sock"))])
            .with_request_timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Disconnected(_)), "{err:?}");
}
