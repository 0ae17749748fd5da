//! The client against a real `ovsdb-server` (OVN_Northbound), with `ovn-nbctl` as the
//! second opinion. Every test starts its own server in its own temp dir.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use ovsdb::ops::row;
use ovsdb::{
    Client, ClientConfig, Condition, Error, MonitorRequest, Mutation, OpResult, Operation, Remote,
    TlsConfig, Value,
};

const BOUND: Duration = Duration::from_secs(20);

fn unix(srv: &Server) -> ClientConfig {
    ClientConfig::new(vec![Remote::Unix(srv.sock.clone())])
        .with_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .with_request_timeout(BOUND)
}

fn by_name(name: &str) -> Vec<Condition> {
    vec![Condition::eq("name", Value::string(name))]
}

async fn select_one(c: &Client, table: &str, name: &str) -> ovsdb::Row {
    let r = c
        .transact(NB, vec![Operation::select(table, by_name(name))])
        .await
        .unwrap();
    let rows = r[0].rows();
    assert_eq!(rows.len(), 1, "{table} {name}: {rows:?}");
    rows[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_on_nb_tables() {
    if !real_env("crud_on_nb_tables") {
        return;
    }
    let dir = tempdir("crud");
    let srv = Server::standalone(dir.path(), &[]);
    let c = Client::connect(unix(&srv)).await.unwrap();
    assert!(c.list_dbs().await.unwrap().contains(&NB.to_string()));
    c.echo().await.unwrap();
    let schema = c.get_schema(NB).await.unwrap();
    assert_eq!(schema["name"], NB);

    // Logical_Switch, then a port inserted with a uuid-name and linked in the same txn.
    let r = c
        .transact(
            NB,
            vec![Operation::insert(
                "Logical_Switch",
                row([
                    ("name", Value::string("ls1")),
                    ("external_ids", Value::string_map([("owner", "zovn")])),
                ]),
            )],
        )
        .await
        .unwrap();
    let ls = r[0].uuid().unwrap();
    let r = c
        .transact(
            NB,
            vec![
                Operation::insert(
                    "Logical_Switch_Port",
                    row([
                        ("name", Value::string("lsp1")),
                        (
                            "addresses",
                            Value::string_set(["00:00:00:00:00:01 10.0.0.2"]),
                        ),
                    ]),
                )
                .with_uuid_name("newport"),
                Operation::mutate(
                    "Logical_Switch",
                    by_name("ls1"),
                    vec![Mutation::insert("ports", Value::named_uuid("newport"))],
                ),
            ],
        )
        .await
        .unwrap();
    let lsp = r[0].uuid().unwrap();
    assert_eq!(r[1], OpResult::Count(1));
    assert!(nbctl(&srv.sock, &["lsp-list", "ls1"]).contains("lsp1"));
    assert_eq!(
        nbctl_column(&srv.sock, "Logical_Switch_Port", "name"),
        ["lsp1"]
    );
    let row_ls = select_one(&c, "Logical_Switch", "ls1").await;
    assert_eq!(row_ls["_uuid"], Value::uuid(ls));
    let ports: Vec<ovsdb::Uuid> = ovsdb::value::column(&row_ls, "ports").unwrap();
    assert_eq!(ports, [lsp]);

    // Load_Balancer referenced by the switch; ACL (non-root) linked to the switch.
    c.transact(
        NB,
        vec![
            Operation::insert(
                "Load_Balancer",
                row([
                    ("name", Value::string("lb1")),
                    ("protocol", Value::Set(vec![ovsdb::Atom::string("tcp")])),
                    (
                        "vips",
                        Value::string_map([("10.96.0.10:80", "10.0.0.2:8080")]),
                    ),
                ]),
            )
            .with_uuid_name("lb"),
            Operation::insert(
                "ACL",
                row([
                    ("priority", Value::integer(1001)),
                    ("direction", Value::string("to-lport")),
                    ("match", Value::string("ip4.src == 10.0.0.0/24")),
                    ("action", Value::string("allow-related")),
                ]),
            )
            .with_uuid_name("acl"),
            Operation::mutate(
                "Logical_Switch",
                by_name("ls1"),
                vec![
                    Mutation::insert("load_balancer", Value::named_uuid("lb")),
                    Mutation::insert("acls", Value::named_uuid("acl")),
                ],
            ),
        ],
    )
    .await
    .unwrap();
    assert_eq!(nbctl_column(&srv.sock, "Load_Balancer", "name"), ["lb1"]);
    let lbs = nbctl(&srv.sock, &["ls-lb-list", "ls1"]);
    assert!(
        lbs.contains("lb1") && lbs.contains("10.96.0.10:80"),
        "{lbs}"
    );
    let acls = nbctl(&srv.sock, &["acl-list", "ls1"]);
    assert!(
        acls.contains("1001") && acls.contains("allow-related"),
        "{acls}"
    );

    // Port_Group and Address_Set (both have a unique index on name).
    c.transact(
        NB,
        vec![
            Operation::insert(
                "Port_Group",
                row([
                    ("name", Value::string("pg1")),
                    ("ports", Value::Set(vec![ovsdb::Atom::Uuid(lsp)])),
                ]),
            ),
            Operation::insert(
                "Address_Set",
                row([
                    ("name", Value::string("as1")),
                    ("addresses", Value::string_set(["10.0.0.1", "10.0.0.2"])),
                ]),
            ),
        ],
    )
    .await
    .unwrap();
    assert_eq!(nbctl_column(&srv.sock, "Port_Group", "name"), ["pg1"]);
    assert_eq!(
        nbctl_column(&srv.sock, "Address_Set", "addresses"),
        ["10.0.0.1 10.0.0.2"]
    );

    // update + mutate
    let r = c
        .transact(
            NB,
            vec![
                Operation::update(
                    "Address_Set",
                    by_name("as1"),
                    row([("addresses", Value::string_set(["10.0.0.3"]))]),
                ),
                Operation::mutate(
                    "Address_Set",
                    by_name("as1"),
                    vec![Mutation::insert(
                        "addresses",
                        Value::string_set(["10.0.0.9"]),
                    )],
                ),
                Operation::mutate(
                    "Load_Balancer",
                    by_name("lb1"),
                    vec![Mutation::insert(
                        "vips",
                        Value::string_map([("10.96.0.11:53", "10.0.0.3:53")]),
                    )],
                ),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        r.iter().map(|r| r.count()).collect::<Vec<_>>(),
        [Some(1); 3]
    );
    let a: BTreeSet<String> =
        ovsdb::value::column(&select_one(&c, "Address_Set", "as1").await, "addresses").unwrap();
    assert_eq!(a, BTreeSet::from(["10.0.0.3".into(), "10.0.0.9".into()]));
    assert_eq!(
        nbctl_column(&srv.sock, "Address_Set", "addresses"),
        ["10.0.0.3 10.0.0.9"]
    );
    let vips: BTreeMap<String, String> =
        ovsdb::value::column(&select_one(&c, "Load_Balancer", "lb1").await, "vips").unwrap();
    assert_eq!(vips.len(), 2);

    // A failing op names itself: unknown column.
    let err = c
        .transact(
            NB,
            vec![
                Operation::comment("zovn test"),
                Operation::insert(
                    "Logical_Switch_Port",
                    row([("no_such_column", Value::integer(1))]),
                ),
            ],
        )
        .await
        .unwrap_err();
    match &err {
        Error::Transaction { index, op, .. } => {
            assert_eq!(*index, 1);
            assert_eq!(op, "insert into Logical_Switch_Port");
        }
        other => panic!("expected a transaction error, got {other:?}"),
    }
    // A commit-time failure: duplicate name in the indexed Address_Set table.
    let err = c
        .transact(
            NB,
            vec![Operation::insert(
                "Address_Set",
                row([("name", Value::string("as1"))]),
            )],
        )
        .await
        .unwrap_err();
    match &err {
        Error::Transaction {
            index, op, error, ..
        } => {
            assert_eq!(*index, 1, "{err}");
            assert!(op.starts_with("commit"), "{err}");
            assert!(error.contains("constraint violation"), "{err}");
        }
        other => panic!("expected a transaction error, got {other:?}"),
    }
    assert_eq!(nbctl_column(&srv.sock, "Address_Set", "name"), ["as1"]);

    // Deleting a row that is still referenced strongly (Logical_Switch.ports) fails at
    // commit time.
    let err = c
        .transact(
            NB,
            vec![Operation::delete("Logical_Switch_Port", by_name("lsp1"))],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Transaction { error, .. } if error.contains("referential integrity")),
        "{err}"
    );
    // delete for real
    let lb = uuid_of(&select_one(&c, "Load_Balancer", "lb1").await);
    let r = c
        .transact(
            NB,
            vec![
                Operation::mutate(
                    "Logical_Switch",
                    by_name("ls1"),
                    vec![Mutation::delete(
                        "load_balancer",
                        Value::Set(vec![ovsdb::Atom::Uuid(lb)]),
                    )],
                ),
                Operation::delete("Load_Balancer", by_name("lb1")),
                Operation::delete("Port_Group", by_name("pg1")),
                Operation::delete("Address_Set", by_name("as1")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        r[1..].iter().map(|r| r.count()).collect::<Vec<_>>(),
        [Some(1); 3]
    );
    for t in ["Load_Balancer", "Port_Group", "Address_Set"] {
        assert!(nbctl_column(&srv.sock, t, "name").is_empty(), "{t}");
    }
    let r = c
        .transact(
            NB,
            vec![Operation::delete("Logical_Switch", by_name("ls1"))],
        )
        .await
        .unwrap();
    assert_eq!(r[0].count(), Some(1));
    // the port and the ACL were not roots: garbage-collected with the switch
    assert!(nbctl_column(&srv.sock, "Logical_Switch_Port", "name").is_empty());
    assert!(nbctl_column(&srv.sock, "ACL", "priority").is_empty());
    c.close().await;
}

fn uuid_of(row: &ovsdb::Row) -> ovsdb::Uuid {
    ovsdb::value::column(row, "_uuid").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbctl_changes_reach_the_replica() {
    if !real_env("nbctl_changes_reach_the_replica") {
        return;
    }
    let dir = tempdir("repl");
    let srv = Server::standalone(dir.path(), &[]);
    let c = Client::connect(unix(&srv)).await.unwrap();
    let replica = c
        .monitor(
            NB,
            vec![
                MonitorRequest::table("Logical_Switch"),
                MonitorRequest::table("Logical_Switch_Port"),
            ],
        )
        .await
        .unwrap();
    // A conditional monitor only sees matching rows.
    let only_sw1 = c
        .monitor(
            NB,
            vec![
                MonitorRequest::table("Logical_Switch")
                    .with_columns(["name"])
                    .with_where(by_name("sw1")),
            ],
        )
        .await
        .unwrap();
    assert!(replica.is_synced());
    assert_eq!(replica.len("Logical_Switch"), 0);

    nbctl(&srv.sock, &["ls-add", "sw0"]);
    nbctl(&srv.sock, &["ls-add", "sw1"]);
    replica
        .wait_for(BOUND, |v| {
            v.find("Logical_Switch", |r| r.str("name") == "sw0")
                .is_some()
        })
        .await
        .unwrap();
    only_sw1
        .wait_for(BOUND, |v| {
            v.rows("Logical_Switch")
                .map(|r| r.str("name"))
                .collect::<Vec<_>>()
                == ["sw1"]
        })
        .await
        .unwrap();

    nbctl(&srv.sock, &["lsp-add", "sw0", "p0"]);
    replica
        .wait_for(BOUND, |v| {
            let Some(p) = v.find("Logical_Switch_Port", |r| r.str("name") == "p0") else {
                return false;
            };
            v.find("Logical_Switch", |r| r.str("name") == "sw0")
                .is_some_and(|sw| {
                    sw.get("ports")
                        .is_some_and(|ps| ps.atoms() == [ovsdb::Atom::Uuid(p.uuid())])
                })
        })
        .await
        .unwrap();

    let addr1 = "00:00:00:00:00:01 10.0.0.5";
    let addr2 = "00:00:00:00:00:02 10.0.0.6";
    nbctl(&srv.sock, &["lsp-set-addresses", "p0", addr1, addr2]);
    let addresses = |v: &ovsdb::View<'_>| -> Option<BTreeSet<String>> {
        v.find("Logical_Switch_Port", |r| r.str("name") == "p0")
            .and_then(|r| r.get_as("addresses").ok())
    };
    replica
        .wait_for(BOUND, |v| {
            addresses(v) == Some(BTreeSet::from([addr1.to_string(), addr2.to_string()]))
        })
        .await
        .unwrap();
    nbctl(&srv.sock, &["lsp-set-addresses", "p0", addr2]);
    replica
        .wait_for(BOUND, |v| {
            addresses(v) == Some(BTreeSet::from([addr2.to_string()]))
        })
        .await
        .unwrap();
    nbctl(
        &srv.sock,
        &[
            "set",
            "Logical_Switch_Port",
            "p0",
            "external_ids:a=1",
            "external_ids:b=2",
        ],
    );
    nbctl(
        &srv.sock,
        &["set", "Logical_Switch_Port", "p0", "external_ids:a=9"],
    );
    nbctl(
        &srv.sock,
        &["remove", "Logical_Switch_Port", "p0", "external_ids", "b"],
    );
    replica
        .wait_for(BOUND, |v| {
            v.find("Logical_Switch_Port", |r| r.str("name") == "p0")
                .and_then(|r| r.get_as::<BTreeMap<String, String>>("external_ids").ok())
                == Some(BTreeMap::from([("a".into(), "9".into())]))
        })
        .await
        .unwrap();

    nbctl(&srv.sock, &["ls-del", "sw0"]);
    replica
        .wait_for(BOUND, |v| {
            v.find("Logical_Switch", |r| r.str("name") == "sw0")
                .is_none()
                && v.is_empty("Logical_Switch_Port")
        })
        .await
        .unwrap();
    // the replica agrees with ovn-nbctl
    let names: Vec<String> = replica.read(|v| {
        v.rows("Logical_Switch")
            .map(|r| r.str("name").to_string())
            .collect()
    });
    assert_eq!(names, nbctl_column(&srv.sock, "Logical_Switch", "name"));
    // a bounded wait that cannot succeed times out
    let err = replica
        .wait_for(Duration::from_millis(100), |v| v.len("Logical_Switch") == 7)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)));
    drop(only_sw1);
    c.close().await;
}

fn key_of(i: usize) -> String {
    format!("k{i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_server_mid_stream_reconnects_and_resyncs() {
    if !real_env("kill9_server_mid_stream_reconnects_and_resyncs") {
        return;
    }
    let dir = tempdir("kill");
    let mut srv = Server::standalone(dir.path(), &[]);
    let c = Client::connect(unix(&srv)).await.unwrap();
    let replica = c
        .monitor(NB, vec![MonitorRequest::table("Logical_Switch")])
        .await
        .unwrap();
    // Rows created before the crash and deleted while the client is away must vanish.
    nbctl(&srv.sock, &["ls-add", "doomed"]);

    const N: usize = 60;
    let c2 = c.clone();
    let inserter = tokio::spawn(async move {
        let mut outcomes = Vec::new();
        for i in 0..N {
            let r = c2
                .transact(
                    NB,
                    vec![Operation::insert(
                        "Logical_Switch",
                        row([
                            ("name", Value::string(format!("ls{i}"))),
                            (
                                "external_ids",
                                Value::string_map([("zovn-test", key_of(i))]),
                            ),
                        ]),
                    )],
                )
                .await;
            outcomes.push(r.map(|_| ()));
        }
        outcomes
    });
    replica
        .wait_for(BOUND, |v| v.len("Logical_Switch") >= 20)
        .await
        .unwrap();
    srv.kill9();
    // change the db while the server is down: a row the client knew disappears
    run(
        "ovsdb-tool",
        &[
            "transact",
            srv.db.to_str().unwrap(),
            r#"["OVN_Northbound",{"op":"delete","table":"Logical_Switch","where":[["name","==","doomed"]]}]"#,
        ],
    );
    srv.start();
    let outcomes = inserter.await.unwrap();

    let lost = outcomes.iter().filter(|o| o.is_err()).count();
    eprintln!("{lost} of {N} inserts had an unknown outcome");
    for o in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert!(
            matches!(o, Error::ConnectionLost { .. } | Error::Timeout(_)),
            "unexpected error {o}"
        );
    }
    let listed = nbctl_column(&srv.sock, "Logical_Switch", "external_ids");
    for (i, o) in outcomes.iter().enumerate() {
        let want = format!("zovn-test={}", key_of(i));
        let n = listed.iter().filter(|l| **l == want).count();
        match o {
            Ok(()) => assert_eq!(n, 1, "ls{i} reported committed, found {n} times"),
            Err(_) => assert!(n <= 1, "ls{i} inserted {n} times"),
        }
    }
    let mut names = nbctl_column(&srv.sock, "Logical_Switch", "name");
    names.sort();
    replica
        .wait_for(BOUND, |v| {
            let mut got: Vec<&str> = v.rows("Logical_Switch").map(|r| r.str("name")).collect();
            got.sort();
            got == names
        })
        .await
        .unwrap();
    assert!(replica.is_synced());
    assert!(c.status().connections >= 2, "{:?}", c.status());
    // and the connection works
    c.echo().await.unwrap();
    c.close().await;
}

mod tls {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };

    /// PEM texts: (ca, server cert, server key, client cert, client key).
    pub fn generate() -> (String, String, String, String, String) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "zovn test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |sans: Vec<String>, cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(sans).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            let cert = p.signed_by(&key, &issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (srv, srv_key) = leaf(vec!["127.0.0.1".into()], "127.0.0.1");
        let (cli, cli_key) = leaf(vec![], "zovn-client");
        (ca_cert.pem(), srv, srv_key, cli, cli_key)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_ssl_with_client_certificate() {
    if !real_env("tcp_and_ssl_with_client_certificate") {
        return;
    }
    let dir = tempdir("ssl");
    let (ca, srv_cert, srv_key, cli_cert, cli_key) = tls::generate();
    let p = |n: &str| dir.path().join(n);
    for (name, text) in [
        ("ca.pem", &ca),
        ("server.pem", &srv_cert),
        ("server-key.pem", &srv_key),
        ("client.pem", &cli_cert),
        ("client-key.pem", &cli_key),
    ] {
        std::fs::write(p(name), text).unwrap();
    }
    let (tcp_port, ssl_port) = (free_port(), free_port());
    let srv = Server::standalone(
        dir.path(),
        &[
            format!("--remote=ptcp:{tcp_port}:127.0.0.1"),
            format!("--remote=pssl:{ssl_port}:127.0.0.1"),
            format!("--private-key={}", p("server-key.pem").display()),
            format!("--certificate={}", p("server.pem").display()),
            format!("--ca-cert={}", p("ca.pem").display()),
        ],
    );

    let tcp = Client::connect(
        ClientConfig::parse(&format!("tcp:127.0.0.1:{tcp_port}"))
            .unwrap()
            .with_request_timeout(BOUND),
    )
    .await
    .unwrap();
    tcp.transact(
        NB,
        vec![Operation::insert(
            "Logical_Switch",
            row([("name", Value::string("via-tcp"))]),
        )],
    )
    .await
    .unwrap();

    let tls = TlsConfig::from_files(&p("ca.pem"), Some((&p("client.pem"), &p("client-key.pem"))))
        .unwrap();
    let ssl = Client::connect(
        ClientConfig::parse(&format!("ssl:127.0.0.1:{ssl_port}"))
            .unwrap()
            .with_tls(tls)
            .with_request_timeout(BOUND),
    )
    .await
    .unwrap();
    let replica = ssl
        .monitor(NB, vec![MonitorRequest::table("Logical_Switch")])
        .await
        .unwrap();
    ssl.transact(
        NB,
        vec![Operation::insert(
            "Logical_Switch",
            row([("name", Value::string("via-ssl"))]),
        )],
    )
    .await
    .unwrap();
    replica
        .wait_for(BOUND, |v| v.len("Logical_Switch") == 2)
        .await
        .unwrap();
    assert_eq!(
        nbctl_column(&srv.sock, "Logical_Switch", "name"),
        ["via-ssl", "via-tcp"]
    );

    // A client that does not trust the server's CA cannot connect.
    let (other_ca, ..) = tls::generate();
    let untrusting = TlsConfig::from_pem(
        other_ca.as_bytes(),
        Some((cli_cert.as_bytes(), cli_key.as_bytes())),
    )
    .unwrap();
    let err = Client::connect(
        ClientConfig::parse(&format!("ssl:127.0.0.1:{ssl_port}"))
            .unwrap()
            .with_tls(untrusting)
            .with_request_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");
    tcp.close().await;
    ssl.close().await;
}

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
    let dir = tempdir("fake");
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
