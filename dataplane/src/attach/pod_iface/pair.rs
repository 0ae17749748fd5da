//! Whether an existing veth of the host end's name is the pod's pair ([`super::setup`]
//! reuses it), or why it is stale (it is deleted and recreated).

use api::mac::format_bytes as fmt_mac;

use super::{PlumbError, PodInterfaceSpec, StepExt, netns, nl};

/// Why an existing veth is not the right pair for the pod (logged, then recreated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum StalePair {
    #[error("peer is not in another netns")]
    PeerNotInOtherNetns,
    #[error("peer is in netns id {nsid}, not the pod's")]
    PeerInOtherNetns { nsid: i32 },
    #[error("peer ifindex {peer} missing in the pod netns")]
    PeerMissing { peer: u32 },
    #[error("pod ifindex {peer} is not the peer")]
    NotThePeer { peer: u32 },
    #[error("peer is named {found}, not {want}")]
    PeerName { found: String, want: String },
    #[error("peer MAC {} != {}", fmt_mac(found), fmt_mac(want))]
    PeerMac { found: Vec<u8>, want: [u8; 6] },
}

/// Is `host` (a veth in the host netns) the right pair for `spec`? `Err(why)` if not.
pub(super) fn matches(
    spec: &PodInterfaceSpec,
    host: &nl::Link,
    pod_nsid: Option<i32>,
) -> Result<Result<(), StalePair>, PlumbError> {
    let (Some(peer), Some(nsid)) = (host.peer_index, host.link_netnsid) else {
        return Ok(Err(StalePair::PeerNotInOtherNetns));
    };
    if pod_nsid != Some(nsid) {
        return Ok(Err(StalePair::PeerInOtherNetns { nsid }));
    }
    let host_index = host.index;
    let peer_link = netns::run_in_netns(Some(&spec.netns_path), move |h| async move {
        nl::link_by_index(&h, peer)
            .await
            .step(|| format!("look up ifindex {peer} in pod netns"))
    })?;
    Ok(match peer_link {
        None => Err(StalePair::PeerMissing { peer }),
        Some(p) if p.peer_index != Some(host_index) => Err(StalePair::NotThePeer { peer }),
        Some(p) if p.name != spec.ifname => Err(StalePair::PeerName {
            found: p.name,
            want: spec.ifname.clone(),
        }),
        Some(p) if p.mac != spec.mac => Err(StalePair::PeerMac {
            found: p.mac,
            want: spec.mac,
        }),
        Some(_) => Ok(()),
    })
}
