//! The ovsdb client against a real standalone `ovsdb-server` (OVN_Northbound, started by
//! `lab::Central`), with `ovn-nbctl` as the second opinion. Every test starts its own
//! server in its own scratch dir, so these tests run in parallel.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lab::{Central, CentralConfig, Db, Signal, SslFiles};
use ovsdb::ops::row;
use ovsdb::{
    Client, ClientConfig, Condition, Error, MonitorRequest, Mutation, OpResult, Operation,
    TlsConfig, Value,
};
use tests::nbctl::{column as nbctl_column, nbctl};

const NB: &str = "OVN_Northbound";
const BOUND: Duration = Duration::from_secs(20);

/// A standalone NB (and SB) server in the scratch dir, no northd.
fn standalone(s: &tests::Scratch, tcp: bool) -> Central {
    Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: false,
        northd: false,
        tcp,
    })
    .expect("central starts")
}

/// The client on the server's unix socket, reconnecting quickly.
fn unix(central: &Central) -> ClientConfig {
    ClientConfig::parse(&central.nb_remote())
        .unwrap()
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
    if !tests::require_real("crud_on_nb_tables", tests::CENTRAL_DB_BINS) {
        return;
    }
    let s = tests::scratch("crud");
    let central = standalone(&s, false);
    let nb = central.nb_remote();
    let c = Client::connect(unix(&central)).await.unwrap();
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
    assert!(nbctl(&nb, &["lsp-list", "ls1"]).contains("lsp1"));
    assert_eq!(nbctl_column(&nb, "Logical_Switch_Port", "name"), ["lsp1"]);
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
    assert_eq!(nbctl_column(&nb, "Load_Balancer", "name"), ["lb1"]);
    let lbs = nbctl(&nb, &["ls-lb-list", "ls1"]);
    assert!(
        lbs.contains("lb1") && lbs.contains("10.96.0.10:80"),
        "{lbs}"
    );
    let acls = nbctl(&nb, &["acl-list", "ls1"]);
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
    assert_eq!(nbctl_column(&nb, "Port_Group", "name"), ["pg1"]);
    assert_eq!(
        nbctl_column(&nb, "Address_Set", "addresses"),
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
        nbctl_column(&nb, "Address_Set", "addresses"),
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
    assert_eq!(nbctl_column(&nb, "Address_Set", "name"), ["as1"]);

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
        assert!(nbctl_column(&nb, t, "name").is_empty(), "{t}");
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
    assert!(nbctl_column(&nb, "Logical_Switch_Port", "name").is_empty());
    assert!(nbctl_column(&nb, "ACL", "priority").is_empty());
    c.close().await;
}

fn uuid_of(row: &ovsdb::Row) -> ovsdb::Uuid {
    ovsdb::value::column(row, "_uuid").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbctl_changes_reach_the_replica() {
    if !tests::require_real("nbctl_changes_reach_the_replica", tests::CENTRAL_DB_BINS) {
        return;
    }
    let s = tests::scratch("repl");
    let central = standalone(&s, false);
    let nb = central.nb_remote();
    let c = Client::connect(unix(&central)).await.unwrap();
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

    nbctl(&nb, &["ls-add", "sw0"]);
    nbctl(&nb, &["ls-add", "sw1"]);
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

    nbctl(&nb, &["lsp-add", "sw0", "p0"]);
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
    nbctl(&nb, &["lsp-set-addresses", "p0", addr1, addr2]);
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
    nbctl(&nb, &["lsp-set-addresses", "p0", addr2]);
    replica
        .wait_for(BOUND, |v| {
            addresses(v) == Some(BTreeSet::from([addr2.to_string()]))
        })
        .await
        .unwrap();
    nbctl(
        &nb,
        &[
            "set",
            "Logical_Switch_Port",
            "p0",
            "external_ids:a=1",
            "external_ids:b=2",
        ],
    );
    nbctl(
        &nb,
        &["set", "Logical_Switch_Port", "p0", "external_ids:a=9"],
    );
    nbctl(
        &nb,
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

    nbctl(&nb, &["ls-del", "sw0"]);
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
    assert_eq!(names, nbctl_column(&nb, "Logical_Switch", "name"));
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
    if !tests::require_real(
        "kill9_server_mid_stream_reconnects_and_resyncs",
        tests::CENTRAL_DB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("kill");
    let mut central = standalone(&s, false);
    let nb = central.nb_remote();
    let c = Client::connect(unix(&central)).await.unwrap();
    let replica = c
        .monitor(NB, vec![MonitorRequest::table("Logical_Switch")])
        .await
        .unwrap();
    // Rows created before the crash and deleted while the client is away must vanish.
    nbctl(&nb, &["ls-add", "doomed"]);

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
    let killed = central.nb_members()[0].clone();
    central
        .kill_member(Db::Nb, 0, Signal::SIGKILL)
        .expect("kill -9 the server");
    assert!(!lab::process::is_alive(killed.pid));
    // change the db while the server is down: a row the client knew disappears
    lab::process::run_args(
        "ovsdb-tool",
        [
            "transact",
            killed.db_file.to_str().unwrap(),
            r#"["OVN_Northbound",{"op":"delete","table":"Logical_Switch","where":[["name","==","doomed"]]}]"#,
        ],
    )
    .expect("ovsdb-tool transact on the stopped server's db");
    // the same db file and socket
    central
        .restart_member(Db::Nb, 0)
        .expect("restart the server");
    let restarted = &central.nb_members()[0];
    assert_eq!(
        (&restarted.db_file, &restarted.remote),
        (&killed.db_file, &nb)
    );
    assert_ne!(restarted.pid, killed.pid);
    let outcomes = inserter.await.unwrap();

    let lost = outcomes.iter().filter(|o| o.is_err()).count();
    eprintln!("{lost} of {N} inserts had an unknown outcome");
    for o in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert!(
            matches!(o, Error::ConnectionLost { .. } | Error::Timeout(_)),
            "unexpected error {o}"
        );
    }
    let listed = nbctl_column(&nb, "Logical_Switch", "external_ids");
    for (i, o) in outcomes.iter().enumerate() {
        let want = format!("zovn-test={}", key_of(i));
        let n = listed.iter().filter(|l| **l == want).count();
        match o {
            Ok(()) => assert_eq!(n, 1, "ls{i} reported committed, found {n} times"),
            Err(_) => assert!(n <= 1, "ls{i} inserted {n} times"),
        }
    }
    let mut names = nbctl_column(&nb, "Logical_Switch", "name");
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
    if !tests::require_real(
        "tcp_and_ssl_with_client_certificate",
        tests::CENTRAL_DB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("ssl");
    let (ca, srv_cert, srv_key, cli_cert, cli_key) = tls::generate();
    let p = |n: &str| s.dir.path().join(n);
    for (name, text) in [
        ("ca.pem", &ca),
        ("server.pem", &srv_cert),
        ("server-key.pem", &srv_key),
        ("client.pem", &cli_cert),
        ("client-key.pem", &cli_key),
    ] {
        std::fs::write(p(name), text).unwrap();
    }
    let mut central = Central::start_with_ssl(
        CentralConfig {
            dir: s.dir.path().join("central"),
            raft: false,
            northd: false,
            tcp: true,
        },
        SslFiles {
            key: p("server-key.pem"),
            cert: p("server.pem"),
            ca: p("ca.pem"),
        },
    )
    .expect("central with TCP and SSL starts");
    let nb = central.nb_remote();
    let tcp_remote = central.nb_tcp_remote().expect("tcp remote");
    let ssl_remote = central.nb_ssl_remote().expect("ssl remote");
    assert!(tcp_remote.starts_with("tcp:127.0.0.1:"), "{tcp_remote}");
    assert!(ssl_remote.starts_with("ssl:127.0.0.1:"), "{ssl_remote}");

    let tcp = Client::connect(
        ClientConfig::parse(&tcp_remote)
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
        ClientConfig::parse(&ssl_remote)
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
        nbctl_column(&nb, "Logical_Switch", "name"),
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
        ClientConfig::parse(&ssl_remote)
            .unwrap()
            .with_tls(untrusting)
            .with_request_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");

    // A restarted server listens on the same TCP and SSL ports: the TCP client reconnects
    // and writes, the SSL replica reconnects and sees it.
    central
        .restart_member(Db::Nb, 0)
        .expect("restart the server");
    assert_eq!(central.nb_tcp_remote().as_ref(), Some(&tcp_remote));
    assert_eq!(central.nb_ssl_remote().as_ref(), Some(&ssl_remote));
    tcp.transact(
        NB,
        vec![Operation::insert(
            "Logical_Switch",
            row([("name", Value::string("after-restart"))]),
        )],
    )
    .await
    .unwrap();
    replica
        .wait_for(BOUND, |v| {
            v.find("Logical_Switch", |r| r.str("name") == "after-restart")
                .is_some()
        })
        .await
        .unwrap();
    tcp.close().await;
    ssl.close().await;
}
