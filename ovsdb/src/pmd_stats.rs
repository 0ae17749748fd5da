//! Parsers for the text of `ovs-appctl dpif-netdev/pmd-stats-show` and
//! `dpif-netdev/pmd-rxq-show` (OVS 3.1; older lines such as `miss:`/`lost:` are
//! understood too). Unknown lines are skipped, so newer OVS versions with more counters
//! still parse; a known counter with a value that is not a number is an error naming the
//! line.
//!
//! The fixtures under `dataplane/tests/fixtures/ovs/` are real outputs of the lab's
//! ovs-vswitchd-dpdk 3.1.0 (see their README).

use serde::Serialize;

/// A line that looked like a known counter but did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{command} line {line}: {detail}: {text:?}")]
pub struct ParseError {
    pub command: &'static str,
    pub line: usize,
    pub text: String,
    pub detail: String,
}

impl ParseError {
    fn new(command: &'static str, line: usize, text: &str, detail: &str) -> ParseError {
        ParseError {
            command,
            line,
            text: text.to_string(),
            detail: detail.to_string(),
        }
    }
}

/// The non-blank lines of `text`: (1-based number, raw line, trimmed line).
fn lines(text: &str) -> impl Iterator<Item = (usize, &str, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, raw)| (i + 1, raw, raw.trim()))
        .filter(|(_, _, l)| !l.is_empty())
}

/// Which thread a block of statistics belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PmdThread {
    /// The main thread polls the non-PMD ports (AF_PACKET `system` ports, internal ports).
    Main,
    /// A PMD thread pinned to `core` on NUMA node `numa`.
    Pmd { numa: u32, core: u32 },
}

impl PmdThread {
    /// `(core, numa)` label values: `("main", "")` for the main thread.
    pub fn labels(&self) -> (String, String) {
        match self {
            PmdThread::Main => ("main".into(), String::new()),
            PmdThread::Pmd { numa, core } => (core.to_string(), numa.to_string()),
        }
    }
}

/// The counters of one thread in `pmd-stats-show` (cumulative since start or the last
/// `pmd-stats-clear`). Cycle counters exist for PMD threads only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PmdThreadStats {
    pub thread: PmdThread,
    pub packets_received: u64,
    pub packet_recirculations: u64,
    pub avg_datapath_passes: f64,
    pub phwol_hits: u64,
    pub mfex_opt_hits: u64,
    pub simple_match_hits: u64,
    pub emc_hits: u64,
    pub smc_hits: u64,
    pub megaflow_hits: u64,
    pub avg_subtable_lookups_per_megaflow_hit: f64,
    /// Flow-table misses answered by an upcall (`miss with success upcall`, older `miss`).
    pub miss_upcall_ok: u64,
    /// Misses whose upcall failed (`miss with failed upcall`, older `lost`).
    pub miss_upcall_failed: u64,
    pub avg_packets_per_output_batch: f64,
    pub idle_cycles: Option<u64>,
    pub processing_cycles: Option<u64>,
    pub avg_cycles_per_packet: Option<f64>,
    pub avg_processing_cycles_per_packet: Option<f64>,
}

impl PmdThreadStats {
    fn new(thread: PmdThread) -> PmdThreadStats {
        PmdThreadStats {
            thread,
            packets_received: 0,
            packet_recirculations: 0,
            avg_datapath_passes: 0.0,
            phwol_hits: 0,
            mfex_opt_hits: 0,
            simple_match_hits: 0,
            emc_hits: 0,
            smc_hits: 0,
            megaflow_hits: 0,
            avg_subtable_lookups_per_megaflow_hit: 0.0,
            miss_upcall_ok: 0,
            miss_upcall_failed: 0,
            avg_packets_per_output_batch: 0.0,
            idle_cycles: None,
            processing_cycles: None,
            avg_cycles_per_packet: None,
            avg_processing_cycles_per_packet: None,
        }
    }

    /// Share of the PMD's measured cycles spent processing packets, 0..=100 (None for
    /// the main thread or before any cycle was counted).
    pub fn busy_percent(&self) -> Option<f64> {
        let (idle, busy) = (self.idle_cycles?, self.processing_cycles?);
        let total = idle.checked_add(busy)?;
        (total > 0).then(|| busy as f64 * 100.0 / total as f64)
    }
}

/// Parses `dpif-netdev/pmd-stats-show`.
pub fn parse_pmd_stats(text: &str) -> Result<Vec<PmdThreadStats>, ParseError> {
    const CMD: &str = "pmd-stats-show";
    let mut out: Vec<PmdThreadStats> = Vec::new();
    for (i, raw, line) in lines(text) {
        let err = |detail: &str| ParseError::new(CMD, i, raw, detail);
        if !raw.starts_with(char::is_whitespace) {
            // a thread header
            let thread = parse_thread_header(line).ok_or_else(|| err("unknown thread header"))?;
            out.push(PmdThreadStats::new(thread));
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let Some(cur) = out.last_mut() else {
            return Err(err("counter before any thread header"));
        };
        // `idle cycles: 373651616 (1.09%)`, `avg cycles per packet: 8700.44 (a/b)`
        let first = value.split_whitespace().next().unwrap_or("");
        let int = || first.parse::<u64>().map_err(|_| err("not an integer"));
        let float = || first.parse::<f64>().map_err(|_| err("not a number"));
        match key.trim() {
            "packets received" => cur.packets_received = int()?,
            "packet recirculations" => cur.packet_recirculations = int()?,
            "avg. datapath passes per packet" => cur.avg_datapath_passes = float()?,
            "phwol hits" => cur.phwol_hits = int()?,
            "mfex opt hits" => cur.mfex_opt_hits = int()?,
            "simple match hits" => cur.simple_match_hits = int()?,
            "emc hits" => cur.emc_hits = int()?,
            "smc hits" => cur.smc_hits = int()?,
            "megaflow hits" => cur.megaflow_hits = int()?,
            "avg. subtable lookups per megaflow hit" => {
                cur.avg_subtable_lookups_per_megaflow_hit = float()?
            }
            "miss with success upcall" | "miss" => cur.miss_upcall_ok = int()?,
            "miss with failed upcall" | "lost" => cur.miss_upcall_failed = int()?,
            "avg. packets per output batch" => cur.avg_packets_per_output_batch = float()?,
            "idle cycles" => cur.idle_cycles = Some(int()?),
            "processing cycles" => cur.processing_cycles = Some(int()?),
            "avg cycles per packet" => cur.avg_cycles_per_packet = Some(float()?),
            "avg processing cycles per packet" => {
                cur.avg_processing_cycles_per_packet = Some(float()?)
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `main thread:` or `pmd thread numa_id 0 core_id 1:`.
fn parse_thread_header(line: &str) -> Option<PmdThread> {
    let line = line.strip_suffix(':')?.trim();
    if line == "main thread" {
        return Some(PmdThread::Main);
    }
    let rest = line.strip_prefix("pmd thread")?;
    let mut numa = None;
    let mut core = None;
    let mut words = rest.split_whitespace();
    while let Some(w) = words.next() {
        match w {
            "numa_id" => numa = words.next()?.parse().ok(),
            "core_id" => core = words.next()?.parse().ok(),
            _ => {}
        }
    }
    Some(PmdThread::Pmd {
        numa: numa?,
        core: core?,
    })
}

/// One receive queue polled by a PMD (`pmd-rxq-show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RxqUsage {
    pub port: String,
    pub queue: u32,
    pub enabled: bool,
    /// Share of the PMD's processing cycles over the window spent on this queue; `None`
    /// while OVS has no measurement yet (`NOT AVAIL`).
    pub usage_percent: Option<u32>,
}

/// One PMD thread in `pmd-rxq-show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PmdRxqs {
    pub numa: u32,
    pub core: u32,
    pub isolated: bool,
    pub rxqs: Vec<RxqUsage>,
    /// Cycles of the PMD not attributed to any rxq (`overhead:`), when measured.
    pub overhead_percent: Option<u32>,
}

/// The whole of `pmd-rxq-show`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RxqShow {
    /// The measurement window (`Displaying last 60 seconds pmd usage %`).
    pub window_secs: Option<u32>,
    pub pmds: Vec<PmdRxqs>,
}

/// Parses `dpif-netdev/pmd-rxq-show`.
pub fn parse_pmd_rxq(text: &str) -> Result<RxqShow, ParseError> {
    const CMD: &str = "pmd-rxq-show";
    let mut show = RxqShow::default();
    for (i, raw, line) in lines(text) {
        let err = |detail: &str| ParseError::new(CMD, i, raw, detail);
        if let Some(rest) = line.strip_prefix("Displaying last ") {
            show.window_secs = rest.split_whitespace().next().and_then(|n| n.parse().ok());
            continue;
        }
        if !raw.starts_with(char::is_whitespace) {
            match parse_thread_header(line) {
                Some(PmdThread::Pmd { numa, core }) => show.pmds.push(PmdRxqs {
                    numa,
                    core,
                    isolated: false,
                    rxqs: Vec::new(),
                    overhead_percent: None,
                }),
                _ => return Err(err("unknown thread header")),
            }
            continue;
        }
        let Some(pmd) = show.pmds.last_mut() else {
            return Err(err("queue line before any pmd thread header"));
        };
        if let Some(rest) = line.strip_prefix("isolated") {
            let v = rest.trim_start().trim_start_matches(':').trim();
            pmd.isolated = match v {
                "true" => true,
                "false" => false,
                _ => return Err(err("isolated is neither true nor false")),
            };
        } else if let Some(rest) = line.strip_prefix("overhead:") {
            pmd.overhead_percent = parse_percent(rest).map_err(err)?;
        } else if let Some(rest) = line.strip_prefix("port:") {
            pmd.rxqs.push(parse_rxq_line(rest).map_err(err)?);
        }
    }
    Ok(show)
}

/// `obsvha            queue-id:  0 (enabled)   pmd usage: 14 %` (after `port:`).
fn parse_rxq_line(rest: &str) -> Result<RxqUsage, &'static str> {
    let (port, after) = rest.rsplit_once("queue-id:").ok_or("no queue-id")?;
    let port = port.trim();
    if port.is_empty() {
        return Err("empty port name");
    }
    let mut words = after.split_whitespace();
    let queue = words
        .next()
        .and_then(|q| q.parse().ok())
        .ok_or("queue-id is not a number")?;
    let enabled = match words.next() {
        Some("(enabled)") => true,
        Some("(disabled)") => false,
        _ => return Err("queue state is neither (enabled) nor (disabled)"),
    };
    let usage = match after.split_once("pmd usage:") {
        Some((_, u)) => parse_percent(u)?,
        None => None,
    };
    Ok(RxqUsage {
        port: port.to_string(),
        queue,
        enabled,
        usage_percent: usage,
    })
}

/// ` 14 %` → Some(14); ` NOT AVAIL` → None.
fn parse_percent(s: &str) -> Result<Option<u32>, &'static str> {
    let s = s.trim();
    if s == "NOT AVAIL" {
        return Ok(None);
    }
    s.trim_end_matches('%')
        .trim()
        .parse()
        .map(Some)
        .map_err(|_| "usage is neither a percentage nor NOT AVAIL")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../dataplane/tests/fixtures/ovs")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn stats_with_traffic_through_afxdp_ports() {
        let t = parse_pmd_stats(&fixture("pmd-stats-show.afxdp.txt")).unwrap();
        assert_eq!(t.len(), 2);
        let pmd = &t[0];
        assert_eq!(pmd.thread, PmdThread::Pmd { numa: 0, core: 1 });
        assert_eq!(pmd.packets_received, 3_923_058);
        assert_eq!(pmd.packet_recirculations, 0);
        assert_eq!(pmd.avg_datapath_passes, 1.0);
        assert_eq!(pmd.emc_hits, 3_921_320);
        assert_eq!(pmd.smc_hits, 0);
        assert_eq!(pmd.megaflow_hits, 1_726);
        assert_eq!(pmd.miss_upcall_ok, 11);
        assert_eq!(pmd.miss_upcall_failed, 1);
        assert_eq!(pmd.avg_packets_per_output_batch, 19.34);
        assert_eq!(pmd.idle_cycles, Some(373_651_616));
        assert_eq!(pmd.processing_cycles, Some(33_758_678_912));
        assert_eq!(pmd.avg_cycles_per_packet, Some(8700.44));
        assert_eq!(pmd.avg_processing_cycles_per_packet, Some(8605.19));
        let busy = pmd.busy_percent().unwrap();
        assert!((busy - 98.91).abs() < 0.01, "{busy}");
        // hits + misses account for every packet
        assert_eq!(
            pmd.emc_hits
                + pmd.smc_hits
                + pmd.megaflow_hits
                + pmd.miss_upcall_ok
                + pmd.miss_upcall_failed,
            pmd.packets_received
        );

        let main = &t[1];
        assert_eq!(main.thread, PmdThread::Main);
        assert_eq!(main.thread.labels(), ("main".to_string(), String::new()));
        assert_eq!(main.packets_received, 35);
        assert_eq!(main.megaflow_hits, 19);
        assert_eq!(main.miss_upcall_ok, 16);
        assert_eq!(main.idle_cycles, None);
        assert_eq!(main.busy_percent(), None);
    }

    #[test]
    fn stats_without_pmd_threads() {
        let t = parse_pmd_stats(&fixture("pmd-stats-show.no-pmd.txt")).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].thread, PmdThread::Main);
        assert_eq!(t[0].packets_received, 20);
    }

    #[test]
    fn stats_errors_name_the_line() {
        let e = parse_pmd_stats("main thread:\n  packets received: many\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("not an integer"), "{e}");
        let e = parse_pmd_stats("  emc hits: 1\n").unwrap_err();
        assert!(e.detail.contains("before any thread header"), "{e}");
        let e = parse_pmd_stats("pmd thread numa_id x core_id 1:\n").unwrap_err();
        assert!(e.detail.contains("unknown thread header"), "{e}");
        // older OVS names and unknown counters
        let t = parse_pmd_stats(
            "pmd thread numa_id 1 core_id 3:\n  miss: 4\n  lost: 2\n  new counter: x\n",
        )
        .unwrap();
        assert_eq!(t[0].thread, PmdThread::Pmd { numa: 1, core: 3 });
        assert_eq!((t[0].miss_upcall_ok, t[0].miss_upcall_failed), (4, 2));
    }

    #[test]
    fn rxq_usage_with_traffic() {
        let s = parse_pmd_rxq(&fixture("pmd-rxq-show.afxdp.txt")).unwrap();
        assert_eq!(s.window_secs, Some(60));
        assert_eq!(s.pmds.len(), 1);
        let p = &s.pmds[0];
        assert_eq!((p.numa, p.core, p.isolated), (0, 1, false));
        assert_eq!(p.overhead_percent, Some(0));
        assert_eq!(
            p.rxqs,
            vec![
                RxqUsage {
                    port: "obsvha".into(),
                    queue: 0,
                    enabled: true,
                    usage_percent: Some(14)
                },
                RxqUsage {
                    port: "obsvhb".into(),
                    queue: 0,
                    enabled: true,
                    usage_percent: Some(4)
                },
            ]
        );
    }

    #[test]
    fn rxq_usage_not_measured_yet_and_no_pmd() {
        let s = parse_pmd_rxq(&fixture("pmd-rxq-show.not-avail.txt")).unwrap();
        let p = &s.pmds[0];
        assert_eq!(p.rxqs.len(), 2);
        assert!(
            p.rxqs
                .iter()
                .all(|q| q.usage_percent.is_none() && q.enabled)
        );
        assert_eq!(p.overhead_percent, None);
        let s = parse_pmd_rxq(&fixture("pmd-rxq-show.no-pmd.txt")).unwrap();
        assert_eq!(s.window_secs, Some(60));
        assert!(s.pmds.is_empty());
    }

    #[test]
    fn rxq_line_variants_and_errors() {
        let s = parse_pmd_rxq(
            "pmd thread numa_id 0 core_id 2:\n  isolated : true\n  port: my port  queue-id:  3 (disabled)  pmd usage:  0 %\n",
        )
        .unwrap();
        let p = &s.pmds[0];
        assert!(p.isolated);
        assert_eq!(p.rxqs[0].port, "my port");
        assert_eq!((p.rxqs[0].queue, p.rxqs[0].enabled), (3, false));
        assert_eq!(p.rxqs[0].usage_percent, Some(0));
        let e = parse_pmd_rxq(
            "pmd thread numa_id 0 core_id 2:\n  port: a  queue-id:  0 (enabled)  pmd usage: lots\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_pmd_rxq("  port: a  queue-id:  0 (enabled)\n").unwrap_err();
        assert!(e.detail.contains("before any pmd"), "{e}");
    }
}
