//! What the controller has not caught up with yet (for the `wait` request).
//!
//! Settled means: every Subnet carries a status computed from its current spec (the
//! `Ready` condition's `observedGeneration` is the Subnet's `generation`); every pod that
//! needs an address (not hostNetwork, on a node) carries `k8s.ovn.org/pod-networks` or a
//! non-empty `network.zstack.io/ipam-error`; and, when the NB is given, the NB agrees:
//! each addressed pod has its Logical_Switch_Port with those addresses, and no port of
//! ours is left for a pod that is gone.

use std::collections::{BTreeMap, BTreeSet};

use control::annotation::{POD_NETWORKS, decode_pod_networks};
use control::controller::IPAM_ERROR;
use control::crd::CONDITION_READY;
use control::names::{KIND, OBJECT, OWNER};
use ovsdb::Replica;
use ovsdb::nb::LogicalSwitchPort;
use ovsdb::typed::Table;

use super::store::LabStore;

/// Everything still outstanding, one line each (empty when settled). `owner` is the
/// controller's cluster id (`external_ids:zstack.io/owner`).
pub fn pending(store: &LabStore, nb: Option<&Replica>, owner: &str) -> Vec<String> {
    let mut out = Vec::new();
    for s in store.memory().subnets() {
        let name = s.metadata.name.clone().unwrap_or_default();
        let observed = s
            .status
            .as_ref()
            .and_then(|st| st.condition(CONDITION_READY))
            .map(|c| c.observed_generation);
        match observed {
            None => out.push(format!("subnet/{name}: no status yet")),
            Some(g) if g != s.metadata.generation => out.push(format!(
                "subnet/{name}: status is for generation {}, the spec is at {}",
                g.unwrap_or(0),
                s.metadata.generation.unwrap_or(0)
            )),
            Some(_) => {}
        }
    }
    // pod key → the "MAC IP..." its port should carry (None: no port expected)
    let mut want: BTreeMap<String, Option<(String, BTreeSet<String>)>> = BTreeMap::new();
    for p in store.network_pods() {
        let key = p.key();
        let error = p.annotations.get(IPAM_ERROR).is_some_and(|e| !e.is_empty());
        let nets = p.annotations.get(POD_NETWORKS).filter(|v| !v.is_empty());
        match (error, nets) {
            (true, _) => {
                want.insert(key, None);
            }
            (false, Some(v)) => match decode_pod_networks(v) {
                Ok(n) => {
                    let ips = n
                        .ip_addresses
                        .iter()
                        .map(|a| a.split('/').next().unwrap_or(a).to_string())
                        .collect();
                    want.insert(key, Some((n.mac_address, ips)));
                }
                Err(e) => out.push(format!("pod/{key}: unreadable {POD_NETWORKS}: {e}")),
            },
            (false, None) => out.push(format!("pod/{key}: no address yet")),
        }
    }
    if let Some(nb) = nb {
        out.extend(nb_pending(nb, owner, &want));
    }
    out
}

fn nb_pending(
    nb: &Replica,
    owner: &str,
    want: &BTreeMap<String, Option<(String, BTreeSet<String>)>>,
) -> Vec<String> {
    // pod key → addresses of its port
    let ports: BTreeMap<String, Vec<String>> = nb.read(|v| {
        v.rows(LogicalSwitchPort::TABLE)
            .filter(|r| r.map_get("external_ids", OWNER) == Some(owner))
            .filter(|r| r.map_get("external_ids", KIND) == Some(api::external_ids::kind::POD))
            .filter_map(|r| {
                let key = r.map_get("external_ids", OBJECT)?.to_string();
                Some((
                    key,
                    r.get_as::<Vec<String>>("addresses").unwrap_or_default(),
                ))
            })
            .collect()
    });
    let mut out = Vec::new();
    for (key, w) in want {
        let Some((mac, ips)) = w else { continue };
        let matches = ports.get(key).is_some_and(|addrs| {
            addrs.iter().any(|a| {
                let mut words = a.split_whitespace();
                words.next() == Some(mac.as_str())
                    && words.map(str::to_string).collect::<BTreeSet<_>>() == *ips
            })
        });
        if !matches {
            out.push(format!("pod/{key}: its port is not in the NB yet"));
        }
    }
    for key in ports.keys() {
        if !matches!(want.get(key), Some(Some(_))) {
            out.push(format!("pod/{key}: its port is still in the NB"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use control::source::Writer;
    use control::source::memory::MemoryStore;
    use serde_json::json;

    use super::*;
    use crate::apiserver::objects::LabObject;
    use crate::apiserver::store::LabNode;

    #[test]
    fn pods_and_subnets_pending_until_written() {
        let (mem, _rx) = MemoryStore::new();
        let s = LabStore::new(
            mem.clone(),
            vec![LabNode {
                name: "n1".into(),
                index: 1,
                address: "172.16.0.1".parse().expect("ip"),
            }],
        );
        let objs = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"},
                "spec": {"containers": []}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "h"},
                "spec": {"hostNetwork": true}}),
            json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
                "metadata": {"name": "sn"}, "spec": {"cidr": "10.0.0.0/24"}}),
        ];
        let objs = objs
            .into_iter()
            .map(|v| LabObject::from_value(v).expect("obj"));
        s.apply(objs.collect()).expect("apply");
        let p = pending(&s, None, "zstack-ovn");
        assert_eq!(
            p,
            ["subnet/sn: no status yet", "pod/default/a: no address yet"]
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        let err = BTreeMap::from([(IPAM_ERROR.to_string(), "no Subnet".to_string())]);
        rt.block_on(mem.annotate_pod("default", "a", &err))
            .expect("annotate");
        let mut st = control::crd::SubnetStatus::default();
        st.conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: CONDITION_READY.into(),
                status: "True".into(),
                reason: "Active".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ),
                observed_generation: Some(1),
            });
        rt.block_on(mem.subnet_status("sn", &st)).expect("status");
        assert!(pending(&s, None, "zstack-ovn").is_empty());
    }
}
