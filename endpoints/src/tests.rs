//! The server over a real TCP socket.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

async fn start(ready: Arc<AtomicBool>) -> SocketAddr {
    let render: Render = Arc::new(|| Box::pin(async { "m_total 1\n".to_string() }));
    let ready: Ready = Arc::new(move || {
        if ready.load(Ordering::SeqCst) {
            Readiness::ready("leader: synced")
        } else {
            Readiness::not_ready("not ready: NB not connected")
        }
    });
    let (l, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    tokio::spawn(serve(l, Endpoints::new(render, ready)));
    addr
}

async fn request(addr: SocketAddr, req: &str) -> (u16, String) {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1.to_string();
    (code, body)
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    request(addr, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")).await
}

#[tokio::test]
async fn status_codes_and_bodies() {
    let ready = Arc::new(AtomicBool::new(false));
    let addr = start(ready.clone()).await;
    assert_eq!(get(addr, "/metrics").await, (200, "m_total 1\n".into()));
    assert_eq!(get(addr, "/healthz").await, (200, "ok\n".into()));
    assert_eq!(
        get(addr, "/readyz").await,
        (503, "not ready: NB not connected\n".into())
    );
    ready.store(true, Ordering::SeqCst);
    assert_eq!(get(addr, "/readyz").await, (200, "leader: synced\n".into()));
    assert_eq!(get(addr, "/readyz?verbose").await.0, 200);
}

#[tokio::test]
async fn unknown_path_and_method() {
    let addr = start(Arc::new(AtomicBool::new(true))).await;
    assert_eq!(get(addr, "/").await.0, 404);
    assert_eq!(get(addr, "/metricsx").await.0, 404);
    let (code, _) = request(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
    assert_eq!(code, 405);
}
