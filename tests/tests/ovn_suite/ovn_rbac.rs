//! OVN central as the chart runs it with its PKI, on real ovsdb-servers, ovn-northd and
//! ovn-controller: what a node's certificate can and cannot do.
//!
//! - NB listens on TLS only and trusts only the OVN CA (central, controller): plain TCP and
//!   a node's chassis certificate are refused at the connection.
//! - SB's network listener applies OVN's RBAC (`role=ovn-controller`) to every client and
//!   trusts the OVN CA and the chassis CA: ovn-controller registers its own chassis with
//!   the certificate the agent put in the OVS `SSL` table; with node1's certificate,
//!   inserting, changing or deleting node2's `Chassis` and `Encap` rows, deleting or
//!   readdressing a `Port_Binding` and deleting `Logical_Flow`s is refused with
//!   ovsdb-server's "permission error".
//! - The controller removes a deleted node's chassis as that node (a certificate it mints
//!   from the chassis CA), the only identity the RBAC lets do it.
//!
//! Attacks are made with `ovsdb-client`, as an attacker on a node would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use control::chassis::{ChassisLogin, Southbound};
use control::chassis_signer::ChassisCa;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use tests::process_group::ProcessGroup;
use tests::zovn::wait_until;

const SERVER_NAME: &str = "zstack-ovn-central";

struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn path(&self, f: &str) -> PathBuf {
        self.dir.join(f)
    }
    fn s(&self, f: &str) -> String {
        self.path(f).display().to_string()
    }
    fn write(&self, f: &str, data: &str) {
        std::fs::write(self.path(f), data).expect("write PKI file");
    }
}

/// The chart's PKI, made here: the OVN CA (central's server certificate, the controller's
/// client certificate) and the chassis CA (node certificates), and SB's trust bundle.
fn pki(dir: &Path) -> (Pki, Arc<ChassisCa>) {
    let p = Pki {
        dir: dir.to_path_buf(),
    };
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::default();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "zstack-ovn OVN CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    p.write("ovn-ca.crt", &ca_cert.pem());
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |cn: &str, sans: Vec<SanType>, name: &str| {
        let key = KeyPair::generate().expect("key");
        let mut c = CertificateParams::default();
        c.distinguished_name = DistinguishedName::new();
        c.distinguished_name.push(DnType::CommonName, cn);
        c.subject_alt_names = sans;
        let cert = c.signed_by(&key, &issuer).expect("leaf");
        p.write(&format!("{name}.crt"), &cert.pem());
        p.write(&format!("{name}.key"), &key.serialize_pem());
    };
    leaf(
        SERVER_NAME,
        vec![SanType::DnsName(SERVER_NAME.try_into().expect("name"))],
        "server",
    );
    leaf("zstack-ovnkube-controller", vec![], "controller");
    let (chassis_cert, chassis_key) =
        control::chassis_signer::issue::new_ca("zstack-ovn chassis CA").expect("chassis CA");
    p.write("chassis-ca.crt", &chassis_cert);
    p.write("sb-trust.crt", &format!("{}{chassis_cert}", ca_cert.pem()));
    let chassis = Arc::new(ChassisCa::from_pem(&chassis_cert, &chassis_key).expect("CA"));
    for node in ["node1", "node2"] {
        let (c, k) = chassis
            .mint(node, Duration::from_secs(3600))
            .expect("node cert");
        p.write(&format!("{node}.crt"), &c);
        p.write(&format!("{node}.key"), &k);
    }
    (p, chassis)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn must(cmd: &mut Command) -> String {
    let (ok, text) = run(cmd);
    assert!(ok, "{cmd:?} failed: {text}");
    text
}

/// `ovsdb-client` with a client certificate `who` (None: no TLS options).
fn client(p: &Pki, who: Option<&str>, ca: &str) -> Command {
    let mut c = Command::new("ovsdb-client");
    c.arg("--timeout=5");
    if let Some(w) = who {
        c.args([
            format!("--private-key={}", p.s(&format!("{w}.key"))),
            format!("--certificate={}", p.s(&format!("{w}.crt"))),
            format!("--ca-cert={}", p.s(ca)),
        ]);
    }
    c
}

/// One SB transaction as `who`; the server's answer (or the client's error).
fn sb_as(p: &Pki, who: &str, sb: &str, ops: &str) -> String {
    let (_, text) = run(client(p, Some(who), "ovn-ca.crt").args([
        "transact",
        sb,
        &format!("[\"OVN_Southbound\",{ops}]"),
    ]));
    text
}

fn sbctl(sock: &Path, args: &[&str]) -> String {
    must(
        Command::new("ovn-sbctl")
            .arg(format!("--db=unix:{}", sock.display()))
            .args(args),
    )
}

fn register(node: &str, ip: &str) -> String {
    format!(
        r#"{{"op":"insert","table":"Encap","uuid-name":"e","row":{{"type":"geneve","ip":"{ip}","chassis_name":"{node}","options":["map",[["csum","true"]]]}}}},
           {{"op":"insert","table":"Chassis","row":{{"name":"{node}","hostname":"{node}","encaps":["named-uuid","e"]}}}}"#
    )
}

fn refused(answer: &str, what: &str) {
    assert!(
        answer.contains("permission error"),
        "{what}: expected ovsdb-server's permission error, got {answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_reaches_its_own_chassis_rows_only() {
    let test = "ovn_rbac::a_node_certificate_reaches_its_own_chassis_rows_only";
    if !tests::require_real(test, tests::LAB_BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("rbac");
    let d = s.dir.path();
    let (p, chassis_ca) = pki(d);
    let (nb_port, sb_port) = (free_port(), free_port());
    let nb = format!("ssl:127.0.0.1:{nb_port}");
    let sb = format!("ssl:127.0.0.1:{sb_port}");
    let (nb_sock, sb_sock) = (d.join("nb.sock"), d.join("sb.sock"));

    // NB: TLS only, the OVN CA only
    must(Command::new("ovsdb-tool").args([
        "create",
        &d.join("nb.db").display().to_string(),
        "/usr/share/ovn/ovn-nb.ovsschema",
    ]));
    must(Command::new("ovsdb-tool").args([
        "create",
        &d.join("sb.db").display().to_string(),
        "/usr/share/ovn/ovn-sb.ovsschema",
    ]));
    let server = |db: &str, sock: &Path, remote: &str, ca: &str| {
        let mut c = Command::new("ovsdb-server");
        c.arg(d.join(format!("{db}.db")))
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(format!("--remote={remote}"))
            .arg(format!("--private-key={}", p.s("server.key")))
            .arg(format!("--certificate={}", p.s("server.crt")))
            .arg(format!("--ca-cert={}", p.s(ca)))
            .arg(format!(
                "--unixctl={}",
                d.join(format!("{db}.ctl")).display()
            ))
            .arg("-vconsole:off")
            .arg(format!(
                "--log-file={}",
                d.join(format!("{db}.log")).display()
            ));
        ProcessGroup::spawn(&mut c).expect("ovsdb-server")
    };
    let _nb_server = server(
        "nb",
        &nb_sock,
        &format!("pssl:{nb_port}:127.0.0.1"),
        "ovn-ca.crt",
    );
    // SB: listeners from its Connection rows (role=ovn-controller), trusting both CAs
    let _sb_server = server(
        "sb",
        &sb_sock,
        "db:OVN_Southbound,SB_Global,connections",
        "sb-trust.crt",
    );
    wait_until("NB and SB sockets", Duration::from_secs(10), || {
        nb_sock.exists() && sb_sock.exists()
    });
    let _northd = ProcessGroup::spawn(
        Command::new("ovn-northd")
            .arg(format!("--ovnnb-db=unix:{}", nb_sock.display()))
            .arg(format!("--ovnsb-db=unix:{}", sb_sock.display()))
            .arg(format!("--unixctl={}", d.join("northd.ctl").display()))
            .arg("-vconsole:off")
            .arg(format!("--log-file={}", d.join("northd.log").display())),
    )
    .expect("ovn-northd");
    // northd writes the ovn-controller role's permissions
    wait_until(
        "the ovn-controller RBAC role",
        Duration::from_secs(20),
        || {
            run(Command::new("ovn-sbctl")
                .arg(format!("--db=unix:{}", sb_sock.display()))
                .args(["--bare", "--columns=name", "list", "RBAC_Role"]))
            .1
            .contains("ovn-controller")
        },
    );
    sbctl(
        &sb_sock,
        &[
            "set-connection",
            "role=ovn-controller",
            &format!("pssl:{sb_port}:127.0.0.1"),
        ],
    );

    // plain TCP: nothing answers the protocol on either port
    for port in [nb_port, sb_port] {
        let (ok, text) = run(
            client(&p, None, "ovn-ca.crt").args(["list-dbs", &format!("tcp:127.0.0.1:{port}")])
        );
        assert!(!ok, "plain TCP to {port} answered: {text}");
    }
    // NB: the controller's certificate is served (the control), node1's is not
    let (ok, text) = run(client(&p, Some("controller"), "ovn-ca.crt").args(["list-dbs", &nb]));
    assert!(ok && text.contains("OVN_Northbound"), "{text}");
    let (ok, text) = run(client(&p, Some("node1"), "ovn-ca.crt").args(["list-dbs", &nb]));
    assert!(!ok, "NB served node1's chassis certificate: {text}");

    // node1's ovn-controller, TLS from the OVS SSL table as the agent writes it
    let ovs_sock = d.join("ovs.sock");
    must(Command::new("ovsdb-tool").args([
        "create",
        &d.join("conf.db").display().to_string(),
        "/usr/share/openvswitch/vswitch.ovsschema",
    ]));
    let _ovs = ProcessGroup::spawn(
        Command::new("ovsdb-server")
            .arg(d.join("conf.db"))
            .arg(format!("--remote=punix:{}", ovs_sock.display()))
            .arg(format!("--unixctl={}", d.join("ovs.ctl").display()))
            .arg("-vconsole:off"),
    )
    .expect("ovsdb-server (Open_vSwitch)");
    wait_until("the OVS socket", Duration::from_secs(10), || {
        ovs_sock.exists()
    });
    let vsctl = |args: &[&str]| {
        must(
            Command::new("ovs-vsctl")
                .arg(format!("--db=unix:{}", ovs_sock.display()))
                .arg("--no-wait")
                .args(args),
        )
    };
    vsctl(&["init"]);
    vsctl(&[
        "set-ssl",
        &p.s("node1.key"),
        &p.s("node1.crt"),
        &p.s("ovn-ca.crt"),
    ]);
    vsctl(&[
        "set",
        "Open_vSwitch",
        ".",
        "external_ids:system-id=node1",
        &format!("external_ids:ovn-remote={sb}"),
        "external_ids:ovn-encap-type=geneve",
        "external_ids:ovn-encap-ip=192.0.2.1",
    ]);
    let _ovn_controller = ProcessGroup::spawn(
        Command::new("ovn-controller")
            // its control socket (no --unixctl in ovn-controller 23.03)
            .env("OVN_RUNDIR", d)
            .arg(format!("unix:{}", ovs_sock.display()))
            .arg(format!(
                "--pidfile={}",
                d.join("ovn-controller.pid").display()
            ))
            .arg("-vconsole:off")
            .arg(format!(
                "--log-file={}",
                d.join("ovn-controller.log").display()
            )),
    )
    .expect("ovn-controller");
    wait_until(
        "node1's chassis, registered over TLS",
        Duration::from_secs(30),
        || {
            run(Command::new("ovn-sbctl")
                .arg(format!("--db=unix:{}", sb_sock.display()))
                .args(["--bare", "--columns=name", "list", "Chassis"]))
            .1
            .contains("node1")
        },
    );

    // node2 registers itself: allowed
    let a = sb_as(&p, "node2", &sb, &register("node2", "192.0.2.2"));
    assert!(!a.contains("error"), "node2 registering itself: {a}");

    // node1 against node2's rows, and beyond its role
    refused(
        &sb_as(&p, "node1", &sb, &register("node3", "192.0.2.3")),
        "node1 inserting another chassis",
    );
    refused(
        &sb_as(
            &p,
            "node1",
            &sb,
            r#"{"op":"update","table":"Chassis","where":[["name","==","node2"]],"row":{"external_ids":["map",[["x","y"]]]}}"#,
        ),
        "node1 updating node2's Chassis",
    );
    refused(
        &sb_as(
            &p,
            "node1",
            &sb,
            r#"{"op":"update","table":"Encap","where":[["chassis_name","==","node2"]],"row":{"ip":"192.0.2.66"}}"#,
        ),
        "node1 moving node2's tunnel endpoint",
    );
    refused(
        &sb_as(
            &p,
            "node1",
            &sb,
            r#"{"op":"delete","table":"Chassis","where":[["name","==","node2"]]}"#,
        ),
        "node1 deleting node2's Chassis",
    );
    // a logical port's binding: northd makes it from an NB port
    must(
        Command::new("ovn-nbctl")
            .arg(format!("--db=unix:{}", nb_sock.display()))
            .args(["ls-add", "ls0", "--", "lsp-add", "ls0", "victim"]),
    );
    wait_until("victim's Port_Binding", Duration::from_secs(20), || {
        run(Command::new("ovn-sbctl")
            .arg(format!("--db=unix:{}", sb_sock.display()))
            .args(["--bare", "--columns=logical_port", "list", "Port_Binding"]))
        .1
        .contains("victim")
    });
    // (OVN's role lets any chassis set a binding's chassis, encap, up and options: ports
    // move between chassis, docs/security.md; the rest of the row is northd's)
    refused(
        &sb_as(
            &p,
            "node1",
            &sb,
            r#"{"op":"update","table":"Port_Binding","where":[["logical_port","==","victim"]],"row":{"mac":["set",["0a:00:00:00:00:66 10.0.0.66"]]}}"#,
        ),
        "node1 rewriting a Port_Binding's addresses",
    );
    refused(
        &sb_as(
            &p,
            "node1",
            &sb,
            r#"{"op":"delete","table":"Port_Binding","where":[["logical_port","==","victim"]]}"#,
        ),
        "node1 deleting a Port_Binding",
    );
    refused(
        &sb_as(
            &p,
            "node1",
            &sb,
            r#"{"op":"delete","table":"Logical_Flow","where":[]}"#,
        ),
        "node1 deleting logical flows",
    );
    // nothing of node2 moved
    let encap = sbctl(
        &sb_sock,
        &[
            "--bare",
            "--columns=ip",
            "find",
            "Encap",
            "chassis_name=node2",
        ],
    );
    assert_eq!(encap.trim(), "192.0.2.2");

    // the controller removes node2's chassis as node2, and only it
    let login = ChassisLogin {
        config: ovsdb::ClientConfig::parse(&sb).expect("remote"),
        server_ca_pem: std::fs::read(p.path("ovn-ca.crt")).expect("CA"),
        server_name: Some(SERVER_NAME.into()),
        ca: chassis_ca,
    };
    let deleted = Southbound::AsChassis(Box::new(login))
        .delete_node_chassis("node2", "node2")
        .await
        .expect("node2's chassis removed as node2");
    assert_eq!(deleted, 1);
    let names = sbctl(&sb_sock, &["--bare", "--columns=name", "list", "Chassis"]);
    assert!(
        names.contains("node1") && !names.contains("node2"),
        "{names}"
    );
}
