//! `zovn capture`'s side of OVS: a `Mirror` of one pod port (both directions) onto a
//! temporary internal port, created and removed in one transaction each, and the node
//! agent's garbage collection of those left behind by a capture that was killed.
//!
//! Design decisions:
//! - The Mirror and the temporary Port and Interface carry
//!   `external_ids:zstack.io/owner=zovn-capture` ([`CAPTURE_OWNER`]), never the agent's own
//!   mark: the agent's port reconciliation and stale-port GC (which only touch
//!   `zstack-ovn-node` rows) leave a live capture alone, and the capture GC ([`gc`]) touches
//!   nothing but rows with this mark.
//! - The owner is a process, named by its pid *and* its start time (field 22 of
//!   `/proc/<pid>/stat`, [`CaptureOwner`]): a pid reused by another process is not taken
//!   for the capture. A zombie counts as gone.
//! - The GC reads the rows fresh (`select`), not from the agent's replica, which does not
//!   monitor the `Mirror` table; it runs on its own timer ([`GC_PERIOD`]).
//! - Mirror, Port and Interface are not root tables: removing the references from the
//!   Bridge (`mirrors`, `ports`) makes ovsdb-server delete the rows, and ovs-vswitchd the
//!   tap device.

use std::collections::BTreeMap;
use std::time::Duration;

use ovsdb::typed::{Column, Table};
use ovsdb::vswitch::{
    Bridge, BridgeColumn as BC, Interface, InterfaceColumn as IC, Mirror, MirrorColumn as MC, Port,
    PortColumn as PC,
};
use ovsdb::{Condition, Function, Mutation, Mutator, Operation, Row, Uuid, Value, View};

use super::client::{find_bridge, insert_ops, rows};
use super::{OWNER_KEY, Ovs, OvsError};

/// The value of [`OWNER_KEY`] on every row a capture creates, and the `external_ids` keys
/// of its rows: the capturing process's pid (in the node agent's pid namespace), its
/// start time (`/proc/<pid>/stat` field 22, clock ticks since boot), the captured pod
/// port's `iface-id` ([`api::external_ids`]).
pub use api::external_ids::CAPTURE_OWNER;
pub use api::external_ids::ovs::{
    CAPTURE_IFACE_ID as CAPTURE_IFACE_ID_KEY, CAPTURE_PID as CAPTURE_PID_KEY,
    CAPTURE_START as CAPTURE_START_KEY,
};
/// How often the node agent looks for captures whose process is gone.
pub const GC_PERIOD: Duration = Duration::from_secs(10);

/// Why a capture could not be set up. [`CaptureError::is_input`] errors are the
/// operator's (a pod that has no port on this node).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("bridge {0} does not exist on this node")]
    NoBridge(String),
    #[error("no port with iface-id {iface_id} on bridge {bridge} of this node")]
    NoPort { iface_id: String, bridge: String },
    #[error(transparent)]
    Ovs(#[from] OvsError),
}

impl CaptureError {
    /// The operator's mistake, not the system's.
    pub fn is_input(&self) -> bool {
        !matches!(self, CaptureError::Ovs(_))
    }
}

/// The process a capture belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureOwner {
    pub pid: u32,
    /// `/proc/<pid>/stat` field 22.
    pub start_time: u64,
}

impl CaptureOwner {
    /// This process.
    pub fn current() -> std::io::Result<CaptureOwner> {
        let pid = std::process::id();
        let stat = std::fs::read_to_string("/proc/self/stat")?;
        let (_, start_time) = parse_stat(&stat).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "unreadable /proc/self/stat",
            )
        })?;
        Ok(CaptureOwner { pid, start_time })
    }

    /// The marks of a capture of `iface_id` owned by this process.
    pub fn marks(&self, iface_id: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (OWNER_KEY.to_string(), CAPTURE_OWNER.to_string()),
            (CAPTURE_PID_KEY.to_string(), self.pid.to_string()),
            (CAPTURE_START_KEY.to_string(), self.start_time.to_string()),
            (CAPTURE_IFACE_ID_KEY.to_string(), iface_id.to_string()),
        ])
    }

    /// The owner named by a row's marks (`None`: not a capture's row, or no valid owner).
    pub fn from_marks(ids: &BTreeMap<String, String>) -> Option<CaptureOwner> {
        if !is_capture(ids) {
            return None;
        }
        Some(CaptureOwner {
            pid: ids.get(CAPTURE_PID_KEY)?.parse().ok()?,
            start_time: ids.get(CAPTURE_START_KEY)?.parse().ok()?,
        })
    }
}

/// Whether a row carries the capture mark.
pub fn is_capture(ids: &BTreeMap<String, String>) -> bool {
    ids.get(OWNER_KEY).map(String::as_str) == Some(CAPTURE_OWNER)
}

/// (state, start time) from the text of `/proc/<pid>/stat`.
pub fn parse_stat(stat: &str) -> Option<(char, u64)> {
    // the command name (field 2) may hold spaces and parentheses: fields 3.. follow the
    // last ')'
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    // field 3 is `state`; field 22 is 19 further
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether a capture's owner still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    Alive,
    /// No such process (or a zombie).
    Gone,
    /// A process with that pid runs, started at another time.
    PidReused,
    /// The row has the capture mark but no valid pid and start time.
    Unknown,
}

impl OwnerState {
    /// Why a row with this owner is removed (`None`: it stays).
    pub fn reason(self) -> Option<&'static str> {
        match self {
            OwnerState::Alive => None,
            OwnerState::Gone => Some("its capturing process is gone"),
            OwnerState::PidReused => Some("its capturing process is gone (pid reused)"),
            OwnerState::Unknown => Some("it names no valid capturing process"),
        }
    }
}

/// The state of the owner named by `ids`, `stat` reading `/proc/<pid>/stat`.
pub fn owner_state(
    ids: &BTreeMap<String, String>,
    stat: impl Fn(u32) -> Option<String>,
) -> OwnerState {
    let Some(owner) = CaptureOwner::from_marks(ids) else {
        return OwnerState::Unknown;
    };
    match stat(owner.pid).as_deref().and_then(parse_stat) {
        None => OwnerState::Gone,
        Some(('Z' | 'X', _)) => OwnerState::Gone,
        Some((_, t)) if t != owner.start_time => OwnerState::PidReused,
        Some(_) => OwnerState::Alive,
    }
}

/// `/proc/<pid>/stat` of this pid namespace.
pub fn proc_stat(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// A capture set up by [`Ovs::create_capture`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureMirror {
    /// The temporary internal port (and its tap device).
    pub port_name: String,
    /// The captured pod port.
    pub pod_port: String,
    pub mirror: Uuid,
    pub port: Uuid,
}

/// A row the GC removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// `Mirror` or `Port`.
    pub table: &'static str,
    pub name: String,
    /// The captured pod port's iface-id, as marked.
    pub iface_id: String,
    /// The owner's pid, as marked.
    pub pid: String,
    pub reason: &'static str,
}

/// The pod port of `bridge` whose interface has `external_ids:iface-id=iface_id` (the
/// opened one when several do).
fn pod_port(v: &View<'_>, bridge: &Bridge, iface_id: &str) -> Option<(Uuid, String)> {
    let ifaces: Vec<Interface> = rows::<Interface>(v)
        .filter(|i| i.external_ids.get("iface-id").map(String::as_str) == Some(iface_id))
        .collect();
    let mut found: Vec<(bool, Uuid, String)> = rows::<Port>(v)
        .filter(|p| bridge.ports.contains(&p.uuid))
        .filter_map(|p| {
            let i = ifaces.iter().find(|i| p.interfaces.contains(&i.uuid))?;
            Some((i.ofport.is_some_and(|o| o > 0), p.uuid, p.name))
        })
        .collect();
    found.sort_by_key(|f| !f.0);
    found.into_iter().next().map(|(_, u, n)| (u, n))
}

/// A free name for the temporary port: `zc<pid>`, then `zc<pid>a`… (≤ 15 bytes).
fn port_name(v: &View<'_>, pid: u32) -> String {
    let base = format!("zc{pid}");
    std::iter::once(base.clone())
        .chain(('a'..='z').map(|c| format!("{base}{c}")))
        .find(|n| {
            !rows::<Port>(v).any(|p| &p.name == n) && !rows::<Interface>(v).any(|i| &i.name == n)
        })
        .unwrap_or(base)
}

impl Ovs {
    /// Mirrors both directions of the port bound to `iface_id` on `bridge` onto a new
    /// internal port, all in one transaction; the rows carry `owner`'s marks.
    pub async fn create_capture(
        &self,
        bridge: &str,
        iface_id: &str,
        owner: CaptureOwner,
    ) -> Result<CaptureMirror, CaptureError> {
        // the monitor's first contents may still be on the way
        let _ = self
            .replica()
            .wait_for(Duration::from_secs(5), |v| find_bridge(v, bridge).is_some())
            .await;
        let (br, (pod_uuid, pod_name), name) = self.replica().read(|v| {
            let br = find_bridge(v, bridge).ok_or(CaptureError::NoBridge(bridge.into()))?;
            let pod = pod_port(v, &br, iface_id).ok_or_else(|| CaptureError::NoPort {
                iface_id: iface_id.into(),
                bridge: bridge.into(),
            })?;
            Ok::<_, CaptureError>((br.uuid, pod, port_name(v, owner.pid)))
        })?;
        let marks = owner.marks(iface_id);
        let iface = Interface {
            name: name.clone(),
            type_: "internal".into(),
            external_ids: marks.clone(),
            ..Interface::default()
        };
        // Interface, Port ("port0") and the Bridge's `ports`, then the Mirror
        let mut ops = insert_ops(&[(&iface, &[IC::Name, IC::Type, IC::ExternalIds], &marks, br)]);
        let mut mirror = ovsdb::ops::row([(MC::OutputPort.name(), Value::named_uuid("port0"))]);
        mirror.extend(
            Mirror {
                name: format!("zovn-capture-{name}"),
                select_src_port: [pod_uuid].into(),
                select_dst_port: [pod_uuid].into(),
                external_ids: marks,
                ..Mirror::default()
            }
            .to_row_of(&[
                MC::Name,
                MC::SelectSrcPort,
                MC::SelectDstPort,
                MC::ExternalIds,
            ]),
        );
        let mirror_at = ops.len();
        ops.push(Operation::insert(Mirror::TABLE, mirror).with_uuid_name("mirror"));
        ops.push(Operation::mutate(
            Bridge::TABLE,
            vec![Condition::uuid(br)],
            vec![Mutation::on(
                BC::Mirrors,
                Mutator::Insert,
                Value::named_uuid("mirror"),
            )],
        ));
        let r = self
            .transact_results(&format!("mirror port {pod_name} to {name}"), ops)
            .await?;
        let uuid = |i: usize| r.get(i).and_then(ovsdb::OpResult::uuid).unwrap_or_default();
        let c = CaptureMirror {
            port_name: name,
            pod_port: pod_name,
            port: uuid(1),
            mirror: uuid(mirror_at),
        };
        tracing::info!(port = %c.port_name, pod_port = %c.pod_port, "capture mirror created");
        Ok(c)
    }

    /// Removes a capture's Mirror and temporary port, in one transaction.
    pub async fn remove_capture(&self, c: &CaptureMirror) -> Result<(), OvsError> {
        self.transact(
            &format!("remove capture mirror and port {}", c.port_name),
            remove_ops(Some(c.mirror), Some(c.port)),
        )
        .await
    }

    /// Every Mirror and Port carrying the capture mark (read fresh from the server).
    async fn capture_rows(&self) -> Result<Vec<MarkedRow>, OvsError> {
        let mark = Value::string_map([(OWNER_KEY, CAPTURE_OWNER)]);
        let ops = vec![
            Operation::select(
                Mirror::TABLE,
                vec![Condition::on(
                    MC::ExternalIds,
                    Function::Includes,
                    mark.clone(),
                )],
            )
            .with_columns(["_uuid", MC::Name.name(), MC::ExternalIds.name()]),
            Operation::select(
                Port::TABLE,
                vec![Condition::on(PC::ExternalIds, Function::Includes, mark)],
            )
            .with_columns(["_uuid", PC::Name.name(), PC::ExternalIds.name()]),
        ];
        let r = self.transact_results("list capture rows", ops).await?;
        let mut out = Vec::new();
        for (table, res) in [Mirror::TABLE, Port::TABLE].into_iter().zip(&r) {
            out.extend(
                res.rows()
                    .iter()
                    .filter_map(|row| MarkedRow::parse(table, row)),
            );
        }
        Ok(out)
    }
}

/// The operations that drop a Mirror and a Port from whatever bridge holds them.
fn remove_ops(mirror: Option<Uuid>, port: Option<Uuid>) -> Vec<Operation> {
    let mut ops = Vec::new();
    if let Some(m) = mirror {
        ops.push(Operation::mutate(
            Bridge::TABLE,
            vec![Condition::on(
                BC::Mirrors,
                Function::Includes,
                Value::uuid(m),
            )],
            vec![Mutation::on(BC::Mirrors, Mutator::Delete, Value::uuid(m))],
        ));
    }
    if let Some(p) = port {
        ops.push(Operation::mutate(
            Bridge::TABLE,
            vec![Condition::on(BC::Ports, Function::Includes, Value::uuid(p))],
            vec![Mutation::on(BC::Ports, Mutator::Delete, Value::uuid(p))],
        ));
    }
    ops
}

/// A Mirror or Port row with the capture mark.
#[derive(Debug, Clone)]
struct MarkedRow {
    table: &'static str,
    uuid: Uuid,
    name: String,
    external_ids: BTreeMap<String, String>,
}

impl MarkedRow {
    fn parse(table: &'static str, row: &Row) -> Option<MarkedRow> {
        let uuid: Uuid = ovsdb::value::column(row, "_uuid").ok()?;
        let name: String = ovsdb::value::column(row, "name").ok()?;
        let external_ids: BTreeMap<String, String> =
            ovsdb::value::column(row, "external_ids").ok()?;
        Some(MarkedRow {
            table,
            uuid,
            name,
            external_ids,
        })
    }
}

/// Removes every Mirror and Port marked as a capture's whose owner is gone ([`owner_state`]
/// with `stat`), in one transaction; rows without the mark are never read nor touched.
pub async fn gc_with(
    ovs: &Ovs,
    stat: impl Fn(u32) -> Option<String>,
) -> Result<Vec<Removed>, OvsError> {
    let marked = ovs.capture_rows().await?;
    let mut ops = Vec::new();
    let mut removed = Vec::new();
    for r in marked {
        let Some(reason) = owner_state(&r.external_ids, &stat).reason() else {
            continue;
        };
        let is_mirror = r.table == Mirror::TABLE;
        ops.extend(remove_ops(
            is_mirror.then_some(r.uuid),
            (!is_mirror).then_some(r.uuid),
        ));
        let get = |k: &str| r.external_ids.get(k).cloned().unwrap_or_default();
        removed.push(Removed {
            table: r.table,
            name: r.name,
            iface_id: get(CAPTURE_IFACE_ID_KEY),
            pid: get(CAPTURE_PID_KEY),
            reason,
        });
    }
    if ops.is_empty() {
        return Ok(removed);
    }
    ovs.transact("remove leftover capture rows", ops).await?;
    for r in &removed {
        tracing::info!(
            table = r.table,
            name = %r.name,
            iface_id = %r.iface_id,
            pid = %r.pid,
            reason = r.reason,
            "leftover capture removed"
        );
    }
    Ok(removed)
}

/// [`gc_with`] on this pid namespace's `/proc`.
pub async fn gc(ovs: &Ovs) -> Result<Vec<Removed>, OvsError> {
    gc_with(ovs, proc_stat).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (zovn (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 12345 67 18446744073709551615";

    #[test]
    fn stat_gives_state_and_start_time_past_a_strange_command_name() {
        assert_eq!(parse_stat(STAT), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_has_a_start_time() {
        let me = CaptureOwner::current().expect("own stat");
        assert_eq!(me.pid, std::process::id());
        assert_eq!(
            owner_state(&me.marks("ns_pod"), proc_stat),
            OwnerState::Alive
        );
    }

    #[test]
    fn marks_name_the_owner_and_round_trip() {
        let o = CaptureOwner {
            pid: 4242,
            start_time: 987654,
        };
        let m = o.marks("default_web");
        assert!(is_capture(&m));
        assert_eq!(m[CAPTURE_IFACE_ID_KEY], "default_web");
        assert_eq!(CaptureOwner::from_marks(&m), Some(o));
        // the agent's own mark is not a capture's
        let agent = BTreeMap::from([(OWNER_KEY.to_string(), super::super::OWNER.to_string())]);
        assert!(!is_capture(&agent));
        assert_eq!(CaptureOwner::from_marks(&agent), None);
    }

    #[test]
    fn owner_state_tells_alive_gone_reused_and_zombie_apart() {
        let o = CaptureOwner {
            pid: 4242,
            start_time: 987654,
        };
        let m = o.marks("p");
        assert_eq!(owner_state(&m, |_| Some(STAT.into())), OwnerState::Alive);
        assert_eq!(owner_state(&m, |_| None), OwnerState::Gone);
        let zombie = STAT.replacen(") S ", ") Z ", 1);
        assert_eq!(owner_state(&m, |_| Some(zombie.clone())), OwnerState::Gone);
        let other = STAT.replace(" 987654 ", " 11 ");
        assert_eq!(
            owner_state(&m, |_| Some(other.clone())),
            OwnerState::PidReused
        );
        let mut bad = m.clone();
        bad.remove(CAPTURE_PID_KEY);
        assert_eq!(
            owner_state(&bad, |_| Some(STAT.into())),
            OwnerState::Unknown
        );
        assert!(OwnerState::Alive.reason().is_none());
        assert!(OwnerState::PidReused.reason().is_some());
    }
}
