//! Where the lab's far side of the wire runs.
//!
//! The underlay bridge, the router and the external host stand for other machines, but
//! they share this machine's CPUs with the nodes. A frame a node's PMD thread sends into
//! its uplink veth is received, bridged, routed and taken up by the external host's TCP
//! stack inside that send, on the PMD's core: the node would pay for the other machines'
//! work, which a real node never does (measured: `shared` egress from an AF_XDP pod at
//! ~0.5× pod-to-pod with that work on the PMD's core, ~0.95× without). Receive steering
//! (RPS) on the underlay's end of each node's veth moves it to the CPUs no node's PMD
//! uses: the lab pins its PMDs to CPU 1 (hand-made DPDK) and the agents derive the
//! highest-numbered CPU, so those two are left out. Nothing of a node is steered.

use std::collections::BTreeSet;

/// The RPS mask (hex) of the CPUs the far side may use, from the online CPU list; `None`
/// when no CPU is left (a 1-CPU machine: nothing to steer to).
pub fn far_side_mask(online: &str) -> Option<String> {
    let cpus = dataplane::datapath::cpus::parse_list(online.trim()).ok()?;
    let pmd: BTreeSet<u32> = [1].into_iter().chain(cpus.last().copied()).collect();
    let mask = cpus
        .iter()
        .filter(|c| !pmd.contains(c) && **c < 64)
        .fold(0u64, |m, c| m | (1 << c));
    (mask != 0).then(|| format!("{mask:x}"))
}

/// [`far_side_mask`] of this machine.
pub fn far_side_mask_here() -> Option<String> {
    far_side_mask(&std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pmd_cpus_are_left_out() {
        assert_eq!(far_side_mask("0-1\n").as_deref(), Some("1"));
        assert_eq!(far_side_mask("0-3").as_deref(), Some("5"));
        assert_eq!(far_side_mask("0"), None);
        assert_eq!(far_side_mask("garbage"), None);
    }
}
