//! [`Ovs`]: the real [`NodeOvs`], one connection to the local `Open_vSwitch` database and
//! a live replica of the tables the agent reads, through the typed rows of
//! [`ovsdb::vswitch`] (no table or column is named by a string here).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use ovsdb::typed::{Column, Table};
use ovsdb::vswitch::{
    Bridge, BridgeColumn as BC, Datapath, DatapathColumn, Interface, InterfaceColumn as IC,
    OpenVSwitch, OpenVSwitchColumn as OC, Port, PortColumn as PC,
};
use ovsdb::{
    Client, ClientConfig, Condition, Function, MonitorRequest, Mutation, Mutator, Operation,
    Replica, Uuid, Value, View,
};

use super::spec::{is_owned, owned};
use super::{
    BR_INT, DB, IfaceView, NodeOvs, OVN_INSTALLED, OvnConfig, OvsError, OwnedPort, PortSpec,
};

/// The local OVSDB: a client and a live replica of the tables the agent uses.
#[derive(Clone, Debug)]
pub struct Ovs {
    remote: String,
    client: Client,
    pub(super) replica: Replica,
    adds: Arc<PortBatch>,
}

/// A new port waiting to be inserted (see [`Ovs::insert_port`]).
struct NewPort {
    iface: Interface,
    iface_cols: Vec<IC>,
    port_ids: BTreeMap<String, String>,
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

/// A new Interface + Port on a bridge: the interface, its columns to set, the Port's
/// `external_ids`, the bridge.
pub(super) type Insert<'a> = (&'a Interface, &'a [IC], &'a BTreeMap<String, String>, Uuid);

/// The inserts of `batch`; the `i`-th Port is named `port{i}` in the transaction.
pub(super) fn insert_ops(batch: &[Insert<'_>]) -> Vec<Operation> {
    let mut ops = Vec::with_capacity(batch.len() * 3);
    for (i, (iface, cols, port_ids, br)) in batch.iter().enumerate() {
        let (ni, np) = (format!("iface{i}"), format!("port{i}"));
        ops.push(
            Operation::insert(Interface::TABLE, iface.to_row_of(cols)).with_uuid_name(ni.clone()),
        );
        let mut port = ovsdb::ops::row([(PC::Interfaces.name(), Value::named_uuid(ni))]);
        port.extend(
            Port {
                name: iface.name.clone(),
                external_ids: (*port_ids).clone(),
                ..Port::default()
            }
            .to_row_of(&[PC::Name, PC::ExternalIds]),
        );
        ops.push(Operation::insert(Port::TABLE, port).with_uuid_name(np.clone()));
        ops.push(Operation::mutate(
            Bridge::TABLE,
            vec![Condition::uuid(*br)],
            vec![Mutation::on(
                BC::Ports,
                Mutator::Insert,
                Value::named_uuid(np),
            )],
        ));
    }
    ops
}

fn str_map(m: &BTreeMap<String, String>) -> Value {
    Value::string_map(m.iter().map(|(k, v)| (k.clone(), v.clone())))
}

/// The rows of `T` in `v` that fit the type (a row that does not is logged and skipped).
pub(super) fn rows<'a, T: Table>(v: &View<'a>) -> impl Iterator<Item = T> + 'a {
    v.iter_typed::<T>().filter_map(|r| match r {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(table = T::TABLE, error = %e, "skipping a row that does not fit its type");
            None
        }
    })
}

pub(super) fn find_bridge(v: &View<'_>, name: &str) -> Option<Bridge> {
    rows::<Bridge>(v).find(|b| b.name == name)
}

fn find_port(v: &View<'_>, name: &str) -> Option<Port> {
    rows::<Port>(v).find(|p| p.name == name)
}

pub(super) fn find_interface(v: &View<'_>, name: &str) -> Option<Interface> {
    rows::<Interface>(v).find(|i| i.name == name)
}

fn open_vswitch(v: &View<'_>) -> Option<OpenVSwitch> {
    rows::<OpenVSwitch>(v).next()
}

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
                    MonitorRequest::of_columns::<OpenVSwitch>(&[
                        OC::Bridges,
                        OC::ExternalIds,
                        OC::OtherConfig,
                        OC::DpdkInitialized,
                        OC::DpdkVersion,
                        OC::OvsVersion,
                        OC::IfaceTypes,
                        OC::DatapathTypes,
                        OC::Datapaths,
                        OC::CurCfg,
                        OC::Ssl,
                    ]),
                    // ovn-controller's TLS files (see `ssl`)
                    MonitorRequest::table(ovsdb::vswitch::Ssl::TABLE),
                    // `capabilities` (see `ct_zero_snat`)
                    MonitorRequest::of_columns::<Datapath>(&[DatapathColumn::Capabilities]),
                    MonitorRequest::of_columns::<Bridge>(&[
                        BC::Name,
                        BC::Ports,
                        BC::DatapathType,
                        BC::ExternalIds,
                    ]),
                    MonitorRequest::of_columns::<Port>(&[
                        PC::Name,
                        PC::Interfaces,
                        PC::ExternalIds,
                    ]),
                    MonitorRequest::of_columns::<Interface>(&[
                        IC::Name,
                        IC::Type,
                        IC::ExternalIds,
                        IC::Mac,
                        IC::Ofport,
                        IC::Error,
                        IC::Options,
                        IC::OtherConfig,
                        IC::MtuRequest,
                        IC::Statistics,
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

    pub(super) async fn transact(&self, what: &str, ops: Vec<Operation>) -> Result<(), OvsError> {
        self.client
            .transact(DB, ops)
            .await
            .map(|_| ())
            .map_err(|source| OvsError::Op {
                what: what.to_string(),
                source,
            })
    }

    /// A transaction whose results the caller reads (inserted uuids, selected rows).
    pub(super) async fn transact_results(
        &self,
        what: &str,
        ops: Vec<Operation>,
    ) -> Result<Vec<ovsdb::OpResult>, OvsError> {
        self.client
            .transact(DB, ops)
            .await
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
                    Operation::select(
                        Bridge::TABLE,
                        vec![Condition::on(BC::Name, Function::Eq, Value::string(BR_INT))],
                    )
                    .with_columns([BC::Name.name()]),
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

    /// The `Open_vSwitch` row as the replica shows it.
    pub fn open_vswitch(&self) -> Option<OpenVSwitch> {
        self.replica.read(open_vswitch)
    }

    /// The bridge `name` as the replica shows it.
    pub fn bridge(&self, name: &str) -> Option<Bridge> {
        self.replica.read(|v| find_bridge(v, name))
    }

    /// The names of every bridge.
    pub fn bridge_names(&self) -> Vec<String> {
        self.replica
            .read(|v| rows::<Bridge>(v).map(|b| b.name).collect())
    }

    /// The interfaces of bridge `name`'s ports: (name, type, ofport), as the replica shows
    /// them (empty for a bridge that does not exist).
    pub fn bridge_interfaces(&self, name: &str) -> Vec<(String, String, Option<i64>)> {
        self.replica.read(|v| {
            let Some(b) = find_bridge(v, name) else {
                return Vec::new();
            };
            let ifaces: Vec<Uuid> = rows::<Port>(v)
                .filter(|p| b.ports.contains(&p.uuid))
                .flat_map(|p| p.interfaces.into_iter())
                .collect();
            rows::<Interface>(v)
                .filter(|i| ifaces.contains(&i.uuid))
                .map(|i| (i.name, i.type_, i.ofport))
                .collect()
        })
    }

    /// ovn-controller's tunnel ports to the other chassis (Ports whose
    /// `external_ids:ovn-chassis-id` names a chassis, their Interface's
    /// `options:remote_ip` its endpoint), as the replica shows them; see
    /// [`crate::pinger`].
    pub fn tunnel_ports(&self) -> Vec<super::TunnelPort> {
        self.replica.read(|v| {
            let ifaces: Vec<Interface> = rows::<Interface>(v).collect();
            rows::<Port>(v)
                .filter_map(|p| {
                    let chassis = p.external_ids.get("ovn-chassis-id")?;
                    let i = ifaces.iter().find(|i| p.interfaces.contains(&i.uuid))?;
                    let remote = i.options.get("remote_ip")?.parse().ok()?;
                    // `<chassis>@<encap ip>` when a chassis has several encapsulations
                    let chassis = chassis.split('@').next().unwrap_or(chassis).to_string();
                    Some(super::TunnelPort {
                        chassis,
                        remote_ip: remote,
                        kind: i.type_.clone(),
                    })
                })
                .collect()
        })
    }

    /// A `Datapath` row by uuid.
    pub fn datapath(&self, uuid: &Uuid) -> Option<Datapath> {
        self.replica
            .read(|v| v.get_typed::<Datapath>(uuid).and_then(Result::ok))
    }

    /// Waits (at most `timeout`) until the `Open_vSwitch` row satisfies `cond`.
    pub async fn wait_open_vswitch(
        &self,
        timeout: Duration,
        cond: impl Fn(&OpenVSwitch) -> bool,
    ) -> bool {
        self.replica
            .wait_for(timeout, |v| open_vswitch(v).is_some_and(|r| cond(&r)))
            .await
            .is_ok()
    }

    /// Waits until the replica shows the server's current contents (after a transaction of
    /// ours, before reading the replica again).
    pub(super) async fn settle(&self, mut cond: impl FnMut(&View<'_>) -> bool) {
        let _ = self
            .replica
            .wait_for(Duration::from_secs(5), |v| cond(v))
            .await;
    }

    /// Creates `br-int` (netdev, `fail_mode=secure`, owned) if missing.
    pub async fn ensure_br_int(&self, datapath_type: &str) -> Result<(), OvsError> {
        if self.bridge(BR_INT).is_some() {
            return Ok(());
        }
        let mark = owned(BTreeMap::new());
        let iface = Interface {
            name: BR_INT.into(),
            type_: "internal".into(),
            external_ids: mark.clone(),
            ..Interface::default()
        };
        let mut port = ovsdb::ops::row([(PC::Interfaces.name(), Value::named_uuid("iface"))]);
        port.extend(
            Port {
                name: BR_INT.into(),
                external_ids: mark.clone(),
                ..Port::default()
            }
            .to_row_of(&[PC::Name, PC::ExternalIds]),
        );
        let mut br = ovsdb::ops::row([(BC::Ports.name(), Value::named_uuid("port"))]);
        br.extend(
            Bridge {
                name: BR_INT.into(),
                datapath_type: datapath_type.into(),
                fail_mode: Some("secure".into()),
                external_ids: mark,
                ..Bridge::default()
            }
            .to_row_of(&[BC::Name, BC::DatapathType, BC::FailMode, BC::ExternalIds]),
        );
        let ops = vec![
            Operation::insert(
                Interface::TABLE,
                iface.to_row_of(&[IC::Name, IC::Type, IC::ExternalIds]),
            )
            .with_uuid_name("iface"),
            Operation::insert(Port::TABLE, port).with_uuid_name("port"),
            Operation::insert(Bridge::TABLE, br).with_uuid_name("br"),
            Operation::mutate(
                OpenVSwitch::TABLE,
                vec![],
                vec![Mutation::on(
                    OC::Bridges,
                    Mutator::Insert,
                    Value::named_uuid("br"),
                )],
            ),
        ];
        let r = self.transact("create br-int", ops).await;
        self.settle(|v| find_bridge(v, BR_INT).is_some()).await;
        match r {
            Ok(()) => {
                tracing::info!(bridge = BR_INT, datapath_type, "bridge created");
                Ok(())
            }
            // a concurrent creator (unique index on name) won: fine
            Err(e) => {
                if self.bridge(BR_INT).is_some() {
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
        let Some(have) = self.open_vswitch().map(|r| r.external_ids) else {
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
        self.update_open_vswitch_maps(&BTreeMap::new(), &[], &diff, &[])
            .await?;
        tracing::info!(?diff, "ovn-controller configuration set");
        Ok(())
    }

    /// Adds (or updates in place) a port of ours on `br-int`, in one transaction.
    /// A port of that name that is not ours is an error (never touched).
    pub async fn ensure_port(&self, spec: &PortSpec) -> Result<(), OvsError> {
        let br = self
            .bridge(BR_INT)
            .ok_or_else(|| OvsError::NoBridge(BR_INT.into()))?;
        let want_port = spec.port_ids();
        let name = spec.name.as_str();
        let (want_iface, iface_cols) = spec.interface();
        if let Some(port) = self.replica.read(|v| find_port(v, name)) {
            if !is_owned(&port.external_ids) {
                return Err(OvsError::Foreign {
                    port: name.into(),
                    detail: "exists and is not owned by the node agent".into(),
                });
            }
            let mut ops = Vec::new();
            if port.external_ids != want_port {
                let p = Port {
                    external_ids: want_port.clone(),
                    ..Port::default()
                };
                ops.push(Operation::update_typed(
                    &p,
                    &[PC::ExternalIds],
                    vec![Condition::uuid(port.uuid)],
                ));
            }
            if let Some(have) = self.interface(name)
                && let Some(iface_uuid) = have.uuid
                && spec.iface_differs(&have)
            {
                // what ovn-controller added (ovn-installed) goes only when our keys changed
                let cols: Vec<IC> = iface_cols
                    .iter()
                    .copied()
                    .filter(|c| *c != IC::Name)
                    .collect();
                ops.push(Operation::update_typed(
                    &want_iface,
                    &cols,
                    vec![Condition::uuid(iface_uuid)],
                ));
            }
            if !br.ports.contains(&port.uuid) {
                ops.push(Operation::mutate(
                    Bridge::TABLE,
                    vec![Condition::uuid(br.uuid)],
                    vec![Mutation::on(
                        BC::Ports,
                        Mutator::Insert,
                        Value::uuid(port.uuid),
                    )],
                ));
            }
            if !ops.is_empty() {
                self.transact(&format!("update port {name}"), ops).await?;
                tracing::info!(port = name, "OVS port updated");
            }
            return Ok(());
        }
        self.insert_port(want_iface, iface_cols, want_port, br.uuid)
            .await?;
        tracing::info!(port = name, "OVS port added");
        self.settle(|v| find_port(v, name).is_some()).await;
        Ok(())
    }

    /// Inserts a new Interface + Port on bridge `br`. Concurrent callers are grouped: the
    /// first one to get the commit lock sends every queued insert in one transaction; if
    /// that shared transaction fails, each caller retries alone (so one bad port cannot
    /// fail the others, and each gets its own error).
    async fn insert_port(
        &self,
        iface: Interface,
        iface_cols: Vec<IC>,
        port_ids: BTreeMap<String, String>,
        br: Uuid,
    ) -> Result<(), OvsError> {
        let name = iface.name.clone();
        let what = format!("add port {name} to {BR_INT}");
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.adds
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(NewPort {
                iface: iface.clone(),
                iface_cols: iface_cols.clone(),
                port_ids: port_ids.clone(),
                br,
                done: tx,
            });
        let commit = self.adds.commit.lock().await;
        let batch: Vec<NewPort> =
            std::mem::take(&mut *self.adds.queue.lock().unwrap_or_else(|e| e.into_inner()));
        if !batch.is_empty() {
            let items: Vec<Insert<'_>> = batch
                .iter()
                .map(|p| (&p.iface, p.iface_cols.as_slice(), &p.port_ids, p.br))
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
                && batch[0].iface.name == name
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
            self.transact(&what, insert_ops(&[(&iface, &iface_cols, &port_ids, br)]))
                .await?;
        }
        Ok(())
    }

    /// Removes a port of ours by name; a missing port is Ok, a foreign one is left alone
    /// (an error). Returns whether something was removed.
    pub async fn delete_port(&self, name: &str) -> Result<bool, OvsError> {
        let Some(port) = self.replica.read(|v| find_port(v, name)) else {
            return Ok(false);
        };
        if !is_owned(&port.external_ids) {
            return Err(OvsError::Foreign {
                port: name.into(),
                detail: "is not owned by the node agent: not deleting it".into(),
            });
        }
        self.delete_port_uuid(name, port.uuid).await?;
        Ok(true)
    }

    async fn delete_port_uuid(&self, name: &str, uuid: Uuid) -> Result<(), OvsError> {
        // The Port (and its Interface) are garbage collected once no Bridge refers to it.
        self.transact(
            &format!("remove port {name}"),
            vec![Operation::mutate(
                Bridge::TABLE,
                vec![Condition::on(
                    BC::Ports,
                    Function::Includes,
                    Value::uuid(uuid),
                )],
                vec![Mutation::on(BC::Ports, Mutator::Delete, Value::uuid(uuid))],
            )],
        )
        .await?;
        tracing::info!(port = name, "OVS port removed");
        self.settle(move |v| v.get_typed::<Port>(&uuid).is_none())
            .await;
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
            (OC::OtherConfig, oc_set, oc_remove),
            (OC::ExternalIds, ext_set, ext_remove),
        ] {
            let del: Vec<String> = remove.iter().chain(set.keys()).cloned().collect();
            if !del.is_empty() {
                mutations.push(Mutation::on(col, Mutator::Delete, Value::string_set(del)));
            }
            if !set.is_empty() {
                mutations.push(Mutation::on(col, Mutator::Insert, str_map(set)));
            }
        }
        if mutations.is_empty() {
            return Ok(());
        }
        self.transact(
            "update Open_vSwitch other_config/external_ids",
            vec![Operation::mutate(OpenVSwitch::TABLE, vec![], mutations)],
        )
        .await?;
        let settled = |r: &OpenVSwitch| {
            let has =
                |m: &BTreeMap<String, String>, set: &BTreeMap<String, String>, gone: &[String]| {
                    set.iter().all(|(k, val)| m.get(k) == Some(val))
                        && gone.iter().all(|k| !m.contains_key(k))
                };
            has(&r.other_config, oc_set, oc_remove) && has(&r.external_ids, ext_set, ext_remove)
        };
        self.settle(|v| open_vswitch(v).is_some_and(|r| settled(&r)))
            .await;
        Ok(())
    }

    /// Every Port of ours (from the replica).
    pub fn owned_ports(&self) -> Vec<OwnedPort> {
        self.replica.read(|v| {
            rows::<Port>(v)
                .filter(|p| is_owned(&p.external_ids))
                .map(|p| OwnedPort {
                    uuid: p.uuid,
                    name: p.name,
                    external_ids: p.external_ids,
                })
                .collect()
        })
    }

    /// Removes one of our ports by its uuid.
    pub async fn delete_owned(&self, port: &OwnedPort) -> Result<(), OvsError> {
        self.delete_port_uuid(&port.name, port.uuid).await
    }

    /// The Interface `name` as the replica shows it.
    pub fn interface(&self, name: &str) -> Option<IfaceView> {
        self.replica
            .read(|v| find_interface(v, name))
            .map(IfaceView::from)
    }

    /// The Interface `external_ids` of a port (replica), if the interface exists.
    pub fn iface_external_ids(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.interface(name).map(|i| i.external_ids)
    }

    /// The Interface `status` column, read fresh from the server (the replica does not
    /// monitor it: ovs-vswitchd rewrites it often).
    pub async fn interface_status(&self, name: &str) -> Result<BTreeMap<String, String>, OvsError> {
        let r = self
            .client
            .transact(
                DB,
                vec![
                    Operation::select(
                        Interface::TABLE,
                        vec![Condition::on(IC::Name, Function::Eq, Value::string(name))],
                    )
                    .with_columns([IC::Status.name()]),
                ],
            )
            .await
            .map_err(|source| OvsError::Op {
                what: format!("select Interface {name}"),
                source,
            })?;
        Ok(r.first()
            .and_then(|r| r.rows().first())
            .and_then(|row| Interface::from_partial_row(Uuid::nil(), row).ok())
            .map(|i| i.status)
            .unwrap_or_default())
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
                find_interface(v, name).is_some_and(|i| {
                    i.external_ids.get("iface-id").map(String::as_str) == Some(iface_id)
                        && i.external_ids.get(OVN_INSTALLED).map(String::as_str) == Some("true")
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

    /// Waits until ovs-vswitchd opened (ofport) or refused (error) the Interface `name`.
    pub async fn wait_settled(&self, name: &str, timeout: Duration) -> bool {
        self.replica
            .wait_for(timeout, |v| {
                find_interface(v, name).is_some_and(|i| IfaceView::from(i).settled())
            })
            .await
            .is_ok()
    }
}

impl Ovs {
    /// See [`NodeOvs::wait_applied`].
    pub async fn wait_applied(&self, timeout: Duration) -> Result<bool, OvsError> {
        let Some(row) = self.open_vswitch() else {
            return Ok(false);
        };
        let ops = vec![
            Operation::mutate(
                OpenVSwitch::TABLE,
                vec![Condition::uuid(row.uuid)],
                vec![Mutation::new("next_cfg", Mutator::Add, Value::integer(1))],
            ),
            Operation::select(OpenVSwitch::TABLE, vec![Condition::uuid(row.uuid)])
                .with_columns(["next_cfg"]),
        ];
        let r = self
            .client
            .transact(DB, ops)
            .await
            .map_err(|source| OvsError::Op {
                what: "bump next_cfg".into(),
                source,
            })?;
        let next = r
            .get(1)
            .and_then(|s| s.rows().first())
            .and_then(|row| row.get("next_cfg"))
            .and_then(|v| match v.atoms().first() {
                Some(ovsdb::Atom::Integer(i)) => Some(*i),
                _ => None,
            });
        let Some(next) = next else {
            return Ok(false);
        };
        Ok(self.wait_open_vswitch(timeout, |o| o.cur_cfg >= next).await)
    }
}

impl NodeOvs for Ovs {
    fn wait_applied(&self, timeout: Duration) -> BoxFuture<'_, Result<bool, OvsError>> {
        Box::pin(Ovs::wait_applied(self, timeout))
    }

    fn ensure_port<'a>(&'a self, spec: &'a PortSpec) -> BoxFuture<'a, Result<(), OvsError>> {
        Box::pin(Ovs::ensure_port(self, spec))
    }

    fn delete_port<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, OvsError>> {
        Box::pin(Ovs::delete_port(self, name))
    }

    fn delete_owned<'a>(&'a self, port: &'a OwnedPort) -> BoxFuture<'a, Result<(), OvsError>> {
        Box::pin(Ovs::delete_owned(self, port))
    }

    fn owned_ports(&self) -> Vec<OwnedPort> {
        Ovs::owned_ports(self)
    }

    fn interface(&self, name: &str) -> Option<IfaceView> {
        Ovs::interface(self, name)
    }

    fn interface_status<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, OvsError>> {
        Box::pin(Ovs::interface_status(self, name))
    }

    fn wait_installed<'a>(
        &'a self,
        name: &'a str,
        iface_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), OvsError>> {
        Box::pin(Ovs::wait_installed(self, name, iface_id, timeout))
    }

    fn wait_settled<'a>(&'a self, name: &'a str, timeout: Duration) -> BoxFuture<'a, bool> {
        Box::pin(Ovs::wait_settled(self, name, timeout))
    }

    fn open_vswitch(&self) -> Option<OpenVSwitch> {
        Ovs::open_vswitch(self)
    }
}
