//! The node's local `Open_vSwitch` database, through the [`ovsdb`] client only.
//!
//! [`Ovs`] holds one connection and one monitor (a live replica of `Open_vSwitch`,
//! `Bridge`, `Port` and `Interface`). Every row the agent creates carries
//! `external_ids:zstack.io/owner=zstack-ovn-node`; rows without that mark are never
//! modified or deleted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ovsdb::{
    Client, ClientConfig, Condition, MonitorRequest, Mutation, Operation, Replica, Uuid, Value,
};

/// The local database.
pub const DB: &str = "Open_vSwitch";
/// The integration bridge ovn-controller programs.
pub const BR_INT: &str = "br-int";
/// `external_ids` key marking rows the agent owns.
pub const OWNER_KEY: &str = "zstack.io/owner";
/// Its value.
pub const OWNER: &str = "zstack-ovn-node";
/// `external_ids` key: the pod (`namespace/name`) of a pod port.
pub const POD_KEY: &str = "zstack.io/pod";
/// `external_ids` key: the sandbox (container id) of a pod port.
pub const SANDBOX_KEY: &str = "zstack.io/sandbox";
/// `external_ids` key: the CNI ifname of a pod port (GC matches container id + ifname).
pub const IFNAME_KEY: &str = "zstack.io/ifname";
/// Set by ovn-controller on an Interface once its flows are installed.
pub const OVN_INSTALLED: &str = "ovn-installed";

/// Errors talking to the local OVSDB.
#[derive(Debug, thiserror::Error)]
pub enum OvsError {
    #[error("OVSDB {remote}: {source}")]
    Db {
        remote: String,
        #[source]
        source: ovsdb::Error,
    },
    #[error("{what}: {source}")]
    Op {
        what: String,
        #[source]
        source: ovsdb::Error,
    },
    #[error("bridge {0} does not exist")]
    NoBridge(String),
    #[error("port {port}: {detail}")]
    Foreign { port: String, detail: String },
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },
}

/// What a port the agent creates should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// Port and Interface name (the host-side device name).
    pub name: String,
    /// Interface type: `""` (system device) or `"internal"`.
    pub iface_type: String,
    /// Interface `mac` column (internal ports only).
    pub mac: Option<String>,
    /// Interface `external_ids` (the owner mark is added).
    pub iface_external_ids: BTreeMap<String, String>,
    /// Port `external_ids` (the owner mark is added).
    pub port_external_ids: BTreeMap<String, String>,
    /// Interface `options` (e.g. `xdp-mode`/`n_rxq` of an `afxdp` port,
    /// `vhost-server-path` of a `dpdkvhostuserclient` port).
    pub options: BTreeMap<String, String>,
    /// Interface `other_config` (e.g. `pmd-rxq-affinity`).
    pub other_config: BTreeMap<String, String>,
    /// Interface `mtu_request`.
    pub mtu_request: Option<i64>,
}

impl PortSpec {
    /// A plain port (type `""`) with the given external ids and nothing else.
    pub fn new(name: impl Into<String>) -> PortSpec {
        PortSpec {
            name: name.into(),
            iface_type: String::new(),
            mac: None,
            iface_external_ids: BTreeMap::new(),
            port_external_ids: BTreeMap::new(),
            options: BTreeMap::new(),
            other_config: BTreeMap::new(),
            mtu_request: None,
        }
    }

    /// The Interface columns this spec sets, besides `name` and `external_ids`.
    fn iface_columns(&self) -> Vec<(&'static str, Value)> {
        let mut cols = vec![
            ("type", Value::string(self.iface_type.clone())),
            ("options", str_map(&self.options)),
            ("other_config", str_map(&self.other_config)),
            (
                "mtu_request",
                match self.mtu_request {
                    Some(m) => Value::Atom(ovsdb::Atom::Integer(m)),
                    None => Value::Set(vec![]),
                },
            ),
        ];
        if let Some(m) = &self.mac {
            cols.push(("mac", Value::string(m.clone())));
        }
        cols
    }
}

/// What the replica shows of an Interface (see [`Ovs::interface`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IfaceView {
    pub uuid: Option<Uuid>,
    pub iface_type: String,
    pub external_ids: BTreeMap<String, String>,
    pub options: BTreeMap<String, String>,
    pub other_config: BTreeMap<String, String>,
    pub mtu_request: Option<i64>,
    pub ofport: Option<i64>,
    /// The `error` column: why ovs-vswitchd could not open the device.
    pub error: Option<String>,
}

/// One port of ours, as read from the replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedPort {
    pub uuid: Uuid,
    pub name: String,
    pub external_ids: BTreeMap<String, String>,
}

/// External ids of the `Open_vSwitch` row that configure ovn-controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvnConfig {
    pub remote: String,
    pub encap_type: String,
    pub encap_ip: String,
    pub system_id: String,
}

/// The local OVSDB: a client and a live replica of the tables the agent uses.
#[derive(Clone, Debug)]
pub struct Ovs {
    remote: String,
    client: Client,
    replica: Replica,
    adds: Arc<PortBatch>,
}

/// A new port waiting to be inserted (see [`Ovs::insert_port`]).
struct NewPort {
    name: String,
    iface: ovsdb::Row,
    port_ids: Value,
    br: Uuid,
    /// `Ok`: committed; `Err(())`: the shared transaction failed, insert alone.
    done: tokio::sync::oneshot::Sender<Result<(), ()>>,
}

/// Group commit of port inserts: concurrent ADDs share one transaction, so ovs-vswitchd
/// reconfigures its datapath (and ovn-controller recomputes) once per batch, not once
/// per port.
#[derive(Default)]
struct PortBatch {
    queue: Mutex<Vec<NewPort>>,
    commit: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for PortBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortBatch").finish_non_exhaustive()
    }
}

fn insert_ops(batch: &[(String, ovsdb::Row, Value, Uuid)]) -> Vec<Operation> {
    let mut ops = Vec::with_capacity(batch.len() * 3);
    for (i, (name, iface, port_ids, br)) in batch.iter().enumerate() {
        let (ni, np) = (format!("iface{i}"), format!("port{i}"));
        ops.push(Operation::insert("Interface", iface.clone()).with_uuid_name(ni.clone()));
        ops.push(
            Operation::insert(
                "Port",
                ovsdb::ops::row([
                    ("name", Value::string(name.clone())),
                    ("interfaces", Value::named_uuid(ni)),
                    ("external_ids", port_ids.clone()),
                ]),
            )
            .with_uuid_name(np.clone()),
        );
        ops.push(Operation::mutate(
            "Bridge",
            vec![Condition::uuid(*br)],
            vec![Mutation::insert("ports", Value::named_uuid(np))],
        ));
    }
    ops
}

fn str_map(m: &BTreeMap<String, String>) -> Value {
    Value::string_map(m.iter().map(|(k, v)| (k.clone(), v.clone())))
}

fn owned(mut m: BTreeMap<String, String>) -> BTreeMap<String, String> {
    m.insert(OWNER_KEY.into(), OWNER.into());
    m
}

fn map_of(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(|v| BTreeMap::<String, String>::from_value(v).ok())
        .unwrap_or_default()
}

use ovsdb::FromValue;

mod ct_zero_snat;
/// Whether an `ovs_version` gets the agent's `ct_zero_snat` correction.
pub use ct_zero_snat::affected as ct_zero_snat_affected;

impl Ovs {
    /// Connects to `remote` (`unix:PATH`) and starts the monitor.
    pub async fn connect(remote: &str) -> Result<Ovs, OvsError> {
        let db_err = |source| OvsError::Db {
            remote: remote.to_string(),
            source,
        };
        let cfg = ClientConfig::parse(remote)
            .map_err(db_err)?
            .with_leader_only(false)
            .with_request_timeout(Duration::from_secs(10))
            .with_backoff(Duration::from_millis(100), Duration::from_secs(2));
        let client = Client::connect(cfg).await.map_err(db_err)?;
        let replica = client
            .monitor(
                DB,
                vec![
                    MonitorRequest::table("Open_vSwitch").with_columns([
                        "bridges",
                        "external_ids",
                        "other_config",
                        "dpdk_initialized",
                        "dpdk_version",
                        "ovs_version",
                        "iface_types",
                        "datapath_types",
                        "datapaths",
                    ]),
                    // `capabilities` (see `ct_zero_snat`)
                    MonitorRequest::table("Datapath").with_columns(["capabilities"]),
                    MonitorRequest::table("Bridge").with_columns([
                        "name",
                        "ports",
                        "datapath_type",
                        "external_ids",
                    ]),
                    MonitorRequest::table("Port").with_columns([
                        "name",
                        "interfaces",
                        "external_ids",
                    ]),
                    MonitorRequest::table("Interface").with_columns([
                        "name",
                        "type",
                        "external_ids",
                        "mac",
                        "ofport",
                        "error",
                        "options",
                        "other_config",
                        "mtu_request",
                        "statistics",
                    ]),
                ],
            )
            .await
            .map_err(db_err)?;
        Ok(Ovs {
            remote: remote.to_string(),
            client,
            replica,
            adds: Arc::default(),
        })
    }

    pub fn remote(&self) -> &str {
        &self.remote
    }

    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// True while the connection is up and the monitor synced.
    pub fn is_synced(&self) -> bool {
        self.client.status().connected && self.replica.is_synced()
    }

    async fn transact(&self, what: &str, ops: Vec<Operation>) -> Result<(), OvsError> {
        self.client
            .transact(DB, ops)
            .await
            .map(|_| ())
            .map_err(|source| OvsError::Op {
                what: what.to_string(),
                source,
            })
    }

    /// Round trip to the server and check that `br-int` exists (a fresh `select`, not
    /// the replica).
    pub async fn status(&self) -> Result<(), OvsError> {
        let r = self
            .client
            .transact(
                DB,
                vec![
                    Operation::select("Bridge", vec![Condition::eq("name", Value::string(BR_INT))])
                        .with_columns(["name"]),
                ],
            )
            .await
            .map_err(|source| OvsError::Db {
                remote: self.remote.clone(),
                source,
            })?;
        if r.first().is_some_and(|r| !r.rows().is_empty()) {
            Ok(())
        } else {
            Err(OvsError::NoBridge(BR_INT.into()))
        }
    }

    fn bridge_uuid(&self, name: &str) -> Option<Uuid> {
        self.replica.read(|v| {
            v.rows("Bridge")
                .find(|r| r.str("name") == name)
                .map(|r| r.uuid())
        })
    }

    /// Waits until the replica shows the server's current contents (after a transaction of
    /// ours, before reading the replica again).
    async fn settle(&self, mut cond: impl FnMut(&ovsdb::View<'_>) -> bool) {
        let _ = self
            .replica
            .wait_for(Duration::from_secs(5), |v| cond(v))
            .await;
    }

    /// Creates `br-int` (netdev, `fail_mode=secure`, owned) if missing.
    pub async fn ensure_br_int(&self, datapath_type: &str) -> Result<(), OvsError> {
        if self.bridge_uuid(BR_INT).is_some() {
            return Ok(());
        }
        let ops = vec![
            Operation::insert(
                "Interface",
                ovsdb::ops::row([
                    ("name", Value::string(BR_INT)),
                    ("type", Value::string("internal")),
                    ("external_ids", str_map(&owned(BTreeMap::new()))),
                ]),
            )
            .with_uuid_name("iface"),
            Operation::insert(
                "Port",
                ovsdb::ops::row([
                    ("name", Value::string(BR_INT)),
                    ("interfaces", Value::named_uuid("iface")),
                    ("external_ids", str_map(&owned(BTreeMap::new()))),
                ]),
            )
            .with_uuid_name("port"),
            Operation::insert(
                "Bridge",
                ovsdb::ops::row([
                    ("name", Value::string(BR_INT)),
                    ("datapath_type", Value::string(datapath_type)),
                    ("fail_mode", Value::string("secure")),
                    ("ports", Value::named_uuid("port")),
                    ("external_ids", str_map(&owned(BTreeMap::new()))),
                ]),
            )
            .with_uuid_name("br"),
            Operation::mutate(
                "Open_vSwitch",
                vec![],
                vec![Mutation::insert("bridges", Value::named_uuid("br"))],
            ),
        ];
        match self.transact("create br-int", ops).await {
            Ok(()) => {
                tracing::info!(bridge = BR_INT, datapath_type, "bridge created");
                self.settle(|v| v.rows("Bridge").any(|r| r.str("name") == BR_INT))
                    .await;
                Ok(())
            }
            // a concurrent creator (unique index on name) won: fine
            Err(e) => {
                self.settle(|v| v.rows("Bridge").any(|r| r.str("name") == BR_INT))
                    .await;
                if self.bridge_uuid(BR_INT).is_some() {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Sets `external_ids:ovn-remote/ovn-encap-type/ovn-encap-ip/system-id/hostname` and
    /// `ovn-bridge-datapath-type=netdev` on the `Open_vSwitch` row (only keys that differ).
    pub async fn set_ovn_config(&self, cfg: &OvnConfig) -> Result<(), OvsError> {
        let want: BTreeMap<String, String> = [
            ("ovn-remote", cfg.remote.as_str()),
            ("ovn-encap-type", cfg.encap_type.as_str()),
            ("ovn-encap-ip", cfg.encap_ip.as_str()),
            ("system-id", cfg.system_id.as_str()),
            ("hostname", cfg.system_id.as_str()),
            ("ovn-bridge-datapath-type", "netdev"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let have = self.replica.read(|v| {
            v.rows("Open_vSwitch")
                .next()
                .map(|r| map_of(r.get("external_ids")))
        });
        let Some(have) = have else {
            // ovs-vswitchd creates the row; without it there is nothing to configure yet
            return Err(OvsError::Op {
                what: "configure ovn-controller".into(),
                source: ovsdb::Error::Config("the Open_vSwitch table has no row".into()),
            });
        };
        let diff: BTreeMap<String, String> = want
            .into_iter()
            .filter(|(k, v)| have.get(k) != Some(v))
            .collect();
        if diff.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = diff.keys().cloned().collect();
        self.transact(
            "set Open_vSwitch external_ids",
            vec![Operation::mutate(
                "Open_vSwitch",
                vec![],
                vec![
                    Mutation::delete("external_ids", Value::string_set(keys)),
                    Mutation::insert("external_ids", str_map(&diff)),
                ],
            )],
        )
        .await?;
        tracing::info!(?diff, "ovn-controller configuration set");
        Ok(())
    }

    /// The named port and its interface (uuids, interface external_ids and type), if any.
    fn find_port(&self, name: &str) -> Option<(Uuid, Vec<Uuid>, BTreeMap<String, String>)> {
        self.replica.read(|v| {
            let p = v.rows("Port").find(|r| r.str("name") == name)?;
            let ifaces: Vec<Uuid> = p
                .get("interfaces")
                .map(|val| {
                    val.atoms()
                        .iter()
                        .filter_map(|a| match a {
                            ovsdb::Atom::Uuid(u) => Some(*u),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some((p.uuid(), ifaces, map_of(p.get("external_ids"))))
        })
    }

    /// The Interface `name` as the replica shows it.
    pub fn interface(&self, name: &str) -> Option<IfaceView> {
        self.replica.read(|v| {
            v.rows("Interface")
                .find(|r| r.str("name") == name)
                .map(|r| {
                    let int = |col: &str| {
                        r.get(col).and_then(|v| match v.atoms().first() {
                            Some(ovsdb::Atom::Integer(i)) => Some(*i),
                            _ => None,
                        })
                    };
                    IfaceView {
                        uuid: Some(r.uuid()),
                        iface_type: r.str("type").to_string(),
                        external_ids: map_of(r.get("external_ids")),
                        options: map_of(r.get("options")),
                        other_config: map_of(r.get("other_config")),
                        mtu_request: int("mtu_request"),
                        ofport: int("ofport"),
                        error: Some(r.str("error").to_string()).filter(|e| !e.is_empty()),
                    }
                })
        })
    }

    /// Adds (or updates in place) a port of ours on `br-int`, in one transaction.
    /// A port of that name that is not ours is an error (never touched).
    pub async fn ensure_port(&self, spec: &PortSpec) -> Result<(), OvsError> {
        let br = self
            .bridge_uuid(BR_INT)
            .ok_or_else(|| OvsError::NoBridge(BR_INT.into()))?;
        let want_iface = owned(spec.iface_external_ids.clone());
        let want_port = owned(spec.port_external_ids.clone());
        let name = spec.name.as_str();
        let on_bridge = |port: Uuid| {
            self.replica.read(|v| {
                v.get("Bridge", &br)
                    .and_then(|b| b.get("ports"))
                    .is_some_and(|p| p.atoms().contains(&ovsdb::Atom::Uuid(port)))
            })
        };
        if let Some((port_uuid, _, port_ids)) = self.find_port(name) {
            if port_ids.get(OWNER_KEY).map(String::as_str) != Some(OWNER) {
                return Err(OvsError::Foreign {
                    port: name.into(),
                    detail: "exists and is not owned by the node agent".into(),
                });
            }
            let mut ops = Vec::new();
            if port_ids != want_port {
                ops.push(Operation::update(
                    "Port",
                    vec![Condition::uuid(port_uuid)],
                    ovsdb::ops::row([("external_ids", str_map(&want_port))]),
                ));
            }
            if let Some(have) = self.interface(name)
                && let Some(iface_uuid) = have.uuid
            {
                // keep what ovn-controller added (ovn-installed) unless our keys changed
                let ours_same = want_iface
                    .iter()
                    .all(|(k, v)| have.external_ids.get(k) == Some(v));
                if !ours_same
                    || have.iface_type != spec.iface_type
                    || have.options != spec.options
                    || have.other_config != spec.other_config
                    || have.mtu_request != spec.mtu_request
                {
                    let mut r = ovsdb::ops::row([("external_ids", str_map(&want_iface))]);
                    for (k, v) in spec.iface_columns() {
                        r.insert(k.into(), v);
                    }
                    ops.push(Operation::update(
                        "Interface",
                        vec![Condition::uuid(iface_uuid)],
                        r,
                    ));
                }
            }
            if !on_bridge(port_uuid) {
                ops.push(Operation::mutate(
                    "Bridge",
                    vec![Condition::uuid(br)],
                    vec![Mutation::insert("ports", Value::uuid(port_uuid))],
                ));
            }
            if !ops.is_empty() {
                self.transact(&format!("update port {name}"), ops).await?;
                tracing::info!(port = name, "OVS port updated");
            }
            return Ok(());
        }
        let mut iface = ovsdb::ops::row([
            ("name", Value::string(name)),
            ("external_ids", str_map(&want_iface)),
        ]);
        for (k, v) in spec.iface_columns() {
            iface.insert(k.into(), v);
        }
        self.insert_port(name, iface, str_map(&want_port), br)
            .await?;
        tracing::info!(port = name, "OVS port added");
        let n = name.to_string();
        self.settle(move |v| v.rows("Port").any(|r| r.str("name") == n))
            .await;
        Ok(())
    }

    /// Inserts a new Interface + Port on bridge `br`. Concurrent callers are grouped: the
    /// first one to get the commit lock sends every queued insert in one transaction; if
    /// that shared transaction fails, each caller retries alone (so one bad port cannot
    /// fail the others, and each gets its own error).
    async fn insert_port(
        &self,
        name: &str,
        iface: ovsdb::Row,
        port_ids: Value,
        br: Uuid,
    ) -> Result<(), OvsError> {
        let what = format!("add port {name} to {BR_INT}");
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.adds
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(NewPort {
                name: name.to_string(),
                iface: iface.clone(),
                port_ids: port_ids.clone(),
                br,
                done: tx,
            });
        let commit = self.adds.commit.lock().await;
        let batch: Vec<NewPort> =
            std::mem::take(&mut *self.adds.queue.lock().unwrap_or_else(|e| e.into_inner()));
        if !batch.is_empty() {
            let items: Vec<(String, ovsdb::Row, Value, Uuid)> = batch
                .iter()
                .map(|p| (p.name.clone(), p.iface.clone(), p.port_ids.clone(), p.br))
                .collect();
            let n = items.len();
            let r = self.client.transact(DB, insert_ops(&items)).await;
            if n > 1 {
                tracing::debug!(
                    ports = n,
                    ok = r.is_ok(),
                    "OVS ports added in one transaction"
                );
            }
            let ok = r.is_ok();
            if let Err(source) = r
                && n == 1
                && batch[0].name == name
            {
                // only ours: its error is ours
                return Err(OvsError::Op { what, source });
            }
            for p in batch {
                let _ = p.done.send(if ok { Ok(()) } else { Err(()) });
            }
        }
        drop(commit);
        if !matches!(rx.await, Ok(Ok(()))) {
            self.transact(
                &what,
                insert_ops(&[(name.to_string(), iface, port_ids, br)]),
            )
            .await?;
        }
        Ok(())
    }

    /// Removes a port of ours by name; a missing port is Ok, a foreign one is left alone
    /// (an error). Returns whether something was removed.
    pub async fn delete_port(&self, name: &str) -> Result<bool, OvsError> {
        let Some((uuid, _, ids)) = self.find_port(name) else {
            return Ok(false);
        };
        if ids.get(OWNER_KEY).map(String::as_str) != Some(OWNER) {
            return Err(OvsError::Foreign {
                port: name.into(),
                detail: "is not owned by the node agent: not deleting it".into(),
            });
        }
        self.delete_port_uuid(name, uuid).await?;
        Ok(true)
    }

    async fn delete_port_uuid(&self, name: &str, uuid: Uuid) -> Result<(), OvsError> {
        // The Port (and its Interface) are garbage collected once no Bridge refers to it.
        self.transact(
            &format!("remove port {name}"),
            vec![Operation::mutate(
                "Bridge",
                vec![Condition::includes("ports", Value::uuid(uuid))],
                vec![Mutation::delete("ports", Value::uuid(uuid))],
            )],
        )
        .await?;
        tracing::info!(port = name, "OVS port removed");
        self.settle(move |v| v.get("Port", &uuid).is_none()).await;
        Ok(())
    }

    /// Changes `Open_vSwitch.other_config` and `external_ids` by key, in one transaction:
    /// the `*_remove` keys and the changed keys are deleted, then the `*_set` pairs
    /// inserted. Keys not named are untouched (other writers' keys stay).
    pub async fn update_open_vswitch_maps(
        &self,
        oc_set: &BTreeMap<String, String>,
        oc_remove: &[String],
        ext_set: &BTreeMap<String, String>,
        ext_remove: &[String],
    ) -> Result<(), OvsError> {
        let mut mutations = Vec::new();
        for (col, set, remove) in [
            ("other_config", oc_set, oc_remove),
            ("external_ids", ext_set, ext_remove),
        ] {
            let del: Vec<String> = remove.iter().chain(set.keys()).cloned().collect();
            if !del.is_empty() {
                mutations.push(Mutation::delete(
                    col,
                    Value::Set(del.into_iter().map(ovsdb::Atom::String).collect()),
                ));
            }
            if !set.is_empty() {
                mutations.push(Mutation::insert(col, str_map(set)));
            }
        }
        if mutations.is_empty() {
            return Ok(());
        }
        self.transact(
            "update Open_vSwitch other_config/external_ids",
            vec![Operation::mutate("Open_vSwitch", vec![], mutations)],
        )
        .await?;
        let (want_set, want_gone): (BTreeMap<String, String>, Vec<String>) =
            (oc_set.clone(), oc_remove.to_vec());
        self.settle(move |v| {
            v.rows("Open_vSwitch").next().is_some_and(|r| {
                want_set
                    .iter()
                    .all(|(k, val)| r.map_get("other_config", k) == Some(val.as_str()))
                    && want_gone
                        .iter()
                        .all(|k| r.map_get("other_config", k).is_none())
            })
        })
        .await;
        Ok(())
    }

    /// Every Port of ours (from the replica).
    pub fn owned_ports(&self) -> Vec<OwnedPort> {
        self.replica.read(|v| {
            v.rows("Port")
                .filter(|r| r.map_get("external_ids", OWNER_KEY) == Some(OWNER))
                .map(|r| OwnedPort {
                    uuid: r.uuid(),
                    name: r.str("name").to_string(),
                    external_ids: map_of(r.get("external_ids")),
                })
                .collect()
        })
    }

    /// Removes one of our ports by its uuid.
    pub async fn delete_owned(&self, port: &OwnedPort) -> Result<(), OvsError> {
        self.delete_port_uuid(&port.name, port.uuid).await
    }

    /// The Interface `external_ids` of a port (replica), if the interface exists.
    pub fn iface_external_ids(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.interface(name).map(|i| i.external_ids)
    }

    /// Waits until ovn-controller sets `external_ids:ovn-installed="true"` on the
    /// Interface `name` bound to `iface_id`.
    pub async fn wait_installed(
        &self,
        name: &str,
        iface_id: &str,
        timeout: Duration,
    ) -> Result<(), OvsError> {
        self.replica
            .wait_for(timeout, |v| {
                v.rows("Interface").any(|r| {
                    r.str("name") == name
                        && r.map_get("external_ids", "iface-id") == Some(iface_id)
                        && r.map_get("external_ids", OVN_INSTALLED) == Some("true")
                })
            })
            .await
            .map_err(|_| OvsError::Timeout {
                what: format!(
                    "ovn-controller to mark port {name} (iface-id {iface_id}) {OVN_INSTALLED}"
                ),
                timeout,
            })
    }
}
