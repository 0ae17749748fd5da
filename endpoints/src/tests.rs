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

#[test]
fn listen_addresses_with_and_without_brackets() {
    let ok = |s: &str| parse_listen_addr(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    assert_eq!(ok("10.0.0.5:10665").to_string(), "10.0.0.5:10665");
    assert_eq!(ok("[fd00::5]:10665").to_string(), "[fd00::5]:10665");
    // $(HOST_IP):PORT on an IPv6 node
    assert_eq!(ok("fd00::5:10665").to_string(), "[fd00::5]:10665");
    assert_eq!(ok("0.0.0.0:0").port(), 0);
    for bad in ["10.0.0.5", "node1:10665", "10.0.0.5:99999", ":10665", ""] {
        let e = parse_listen_addr(bad).expect_err(bad);
        assert_eq!(
            e.to_string(),
            format!("{bad:?} is not IP:PORT (e.g. 10.0.0.5:10665 or [fd00::5]:10665)")
        );
    }
}

/// An address the host does not hold (yet) is bound all the same (`IP_FREEBIND`): the
/// daemon starts while the node's address moves between interfaces.
#[tokio::test]
async fn binds_an_address_not_on_the_host() {
    // TEST-NET-2: on no interface of a test machine
    let (l, bound) = bind("198.51.100.77:0".parse().expect("addr"))
        .await
        .expect("freebind");
    assert_eq!(bound.ip().to_string(), "198.51.100.77");
    assert_ne!(bound.port(), 0);
    drop(l);
}
