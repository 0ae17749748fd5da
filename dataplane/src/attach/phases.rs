//! Where a CNI ADD's time went, per phase: one `CNI ADD phases` log line per ADD and the
//! `zstack_ovn_cni_add_phase_seconds{phase,datapath}` histogram.
//!
//! Phases, in order (a phase an attachment does not have is absent):
//! - `annotation`: waiting for the controller's `k8s.ovn.org/pod-networks`;
//! - `plumb`: the pod interface — a veth pair configured in the pod's netns, or a
//!   vhost-user socket directory;
//! - `ovs`: the sandbox record and the OVS port transaction;
//! - `open`: an AF_XDP port until ovs-vswitchd has opened it (ofport) — the XDP program,
//!   the umem and the PMD reconfiguration; none for a fast-start port (`then=afxdp`: it
//!   starts on the kernel path and moves later, see [`super::promote`]);
//! - `installed`: until ovn-controller has bound the port (`ovn-installed`).
//!
//! `zovn-perf cni-add` reads the log line (see `docs/performance.md`).

use std::time::{Duration, Instant};

use crate::attach::node::NodeCtx;

/// The phase names, in order.
pub const PHASES: [&str; 5] = ["annotation", "plumb", "ovs", "open", "installed"];

/// The ADD's clock: laps recorded as the ADD goes.
#[derive(Debug, Clone)]
pub struct AddPhases {
    start: Instant,
    last: Instant,
    laps: Vec<(&'static str, Duration)>,
    /// `veth` or `vhost`.
    pub kind: &'static str,
    /// The port's datapath (`kernel`, `afxdp`, `dpdk`).
    pub datapath: String,
    /// The datapath the port moves to after the ADD (fast start, see
    /// [`super::promote`]), `-` for none.
    pub then: String,
}

impl AddPhases {
    /// A clock started at `start` (when the request arrived).
    pub fn new(start: Instant) -> AddPhases {
        AddPhases {
            start,
            last: start,
            laps: Vec::new(),
            kind: "veth",
            datapath: String::new(),
            then: "-".into(),
        }
    }

    /// When the request arrived.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// Ends phase `name` now (the time since the previous lap).
    pub fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.laps.push((name, now - self.last));
        self.last = now;
    }

    /// The time phase `name` took (summed if it was lapped twice).
    pub fn get(&self, name: &str) -> Option<Duration> {
        let v: Vec<Duration> = self
            .laps
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, d)| *d)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }

    /// Logs the line and feeds the histogram.
    pub fn report(&self, ctx: &NodeCtx, pod: &str, container: &str) {
        let ms = |name: &str| {
            self.get(name)
                .map_or(-1.0, |d| (d.as_secs_f64() * 1e4).round() / 10.0)
        };
        let total = (self.start.elapsed().as_secs_f64() * 1e4).round() / 10.0;
        tracing::info!(
            container,
            pod,
            kind = self.kind,
            datapath = %self.datapath,
            then = %self.then,
            annotation_ms = ms("annotation"),
            plumb_ms = ms("plumb"),
            ovs_ms = ms("ovs"),
            open_ms = ms("open"),
            installed_ms = ms("installed"),
            total_ms = total,
            "CNI ADD phases"
        );
        for (name, d) in &self.laps {
            ctx.metrics().observe_add_phase(name, &self.datapath, *d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_add_up_and_absent_phases_are_none() {
        let t0 = Instant::now();
        let mut p = AddPhases::new(t0);
        p.lap("annotation");
        p.lap("plumb");
        p.lap("plumb");
        assert!(p.get("plumb").is_some());
        assert!(p.get("open").is_none());
        let sum: Duration = p.laps.iter().map(|(_, d)| *d).sum();
        assert!(sum <= t0.elapsed());
        assert_eq!(p.laps.len(), 3);
    }
}
