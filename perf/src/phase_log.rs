//! The node agent's churn log lines, parsed, and their statistics.
//!
//! Two lines matter (both at info level, tracing's default format:
//! `<RFC3339 ts>  INFO <target>: <message> key=value ...`):
//! - `CNI ADD phases container=<cid> pod=<ns/name> kind=veth|vhost datapath=<dp>
//!   then=afxdp|- annotation_ms=.. plumb_ms=.. ovs_ms=.. open_ms=.. installed_ms=..
//!   total_ms=..` — one per successful ADD (`dataplane::attach::phases`); a phase the ADD
//!   did not have is `-1`;
//! - `pod port moved to AF_XDP pod=<ns/name> port=<name> datapath=afxdp|kernel
//!   waited_ms=<n> switch_ms=<n>` — one per fast-start port switched in the background
//!   (`datapath=kernel`: the AF_XDP open failed and the port stayed on the kernel path).
//!
//! [`PhaseStats`] turns a set of phase lines into p50/p99 per phase.

use serde_json::{Value, json};

/// The phase fields of the `CNI ADD phases` line, in order (the agent's
/// `dataplane::attach::phases::PHASES`, then the total).
pub const PHASES: [&str; 6] = ["annotation", "plumb", "ovs", "open", "installed", "total"];

/// One `CNI ADD phases` line.
#[derive(Debug, Clone, PartialEq)]
pub struct AddPhases {
    /// Wall-clock time of the line (seconds since the epoch).
    pub at: f64,
    pub container: String,
    /// `namespace/name`.
    pub pod: String,
    pub kind: String,
    pub datapath: String,
    /// `afxdp` for a fast-start port, `-` for none.
    pub then: String,
    /// Milliseconds per phase, in [`PHASES`] order; `None` for a phase the ADD did not have.
    pub ms: [Option<f64>; 6],
    /// The `pool` field when the agent logs one (`hit`, `miss`).
    pub pool: Option<String>,
}

impl AddPhases {
    /// The ADD's duration as the agent saw it (request arrival → result), seconds.
    pub fn total_s(&self) -> Option<f64> {
        self.ms[5].map(|ms| ms / 1e3)
    }
    /// When the request arrived (wall clock, seconds since the epoch).
    pub fn started_at(&self) -> f64 {
        self.at - self.total_s().unwrap_or(0.0)
    }
}

/// One `pod port moved to AF_XDP` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Moved {
    pub at: f64,
    pub pod: String,
    pub port: String,
    /// `afxdp`, or `kernel` when the open failed and the port fell back.
    pub datapath: String,
    pub waited_ms: f64,
    pub switch_ms: f64,
}

/// Everything of interest in one agent log.
#[derive(Debug, Clone, Default)]
pub struct AgentLog {
    pub adds: Vec<AddPhases>,
    pub moved: Vec<Moved>,
}

impl AgentLog {
    /// Parses a whole log; lines that are not ours (or are cut) are skipped.
    pub fn parse(text: &str) -> AgentLog {
        let mut log = AgentLog::default();
        for line in text.lines() {
            if let Some(a) = parse_phases(line) {
                log.adds.push(a);
            } else if let Some(m) = parse_moved(line) {
                log.moved.push(m);
            }
        }
        log
    }

    /// Reads and parses `path` (a missing file is an empty log).
    pub fn read(path: &std::path::Path) -> AgentLog {
        AgentLog::parse(&std::fs::read_to_string(path).unwrap_or_default())
    }

    /// Appends another log (the agents of several nodes).
    pub fn extend(&mut self, other: AgentLog) {
        self.adds.extend(other.adds);
        self.moved.extend(other.moved);
    }

    /// The phase line of `container` (the last one if it was added twice).
    pub fn add_of(&self, container: &str) -> Option<&AddPhases> {
        self.adds.iter().rev().find(|a| a.container == container)
    }

    /// The phase lines of the pods `pods` (`namespace/name`), the last one per pod.
    pub fn adds_of<'a>(&'a self, pods: &[String]) -> Vec<&'a AddPhases> {
        pods.iter()
            .filter_map(|p| self.adds.iter().rev().find(|a| &a.pod == p))
            .collect()
    }

    /// The move lines of the pods `pods`, the last one per pod.
    pub fn moved_of<'a>(&'a self, pods: &[String]) -> Vec<&'a Moved> {
        pods.iter()
            .filter_map(|p| self.moved.iter().rev().find(|m| &m.pod == p))
            .collect()
    }
}

/// Parses a `CNI ADD phases` line.
pub fn parse_phases(line: &str) -> Option<AddPhases> {
    if !line.contains("CNI ADD phases") {
        return None;
    }
    let at = line.split_whitespace().next().and_then(parse_rfc3339)?;
    let mut ms = [None; 6];
    for (slot, name) in ms.iter_mut().zip(PHASES) {
        let v: f64 = field(line, &format!("{name}_ms"))?.parse().ok()?;
        *slot = (v >= 0.0).then_some(v);
    }
    Some(AddPhases {
        at,
        container: field(line, "container")?,
        pod: field(line, "pod")?,
        kind: field(line, "kind")?,
        datapath: field(line, "datapath")?,
        then: field(line, "then")?,
        ms,
        pool: field(line, "pool"),
    })
}

/// Parses a `pod port moved to AF_XDP` line.
pub fn parse_moved(line: &str) -> Option<Moved> {
    if !line.contains("pod port moved to AF_XDP") {
        return None;
    }
    Some(Moved {
        at: line.split_whitespace().next().and_then(parse_rfc3339)?,
        pod: field(line, "pod")?,
        port: field(line, "port")?,
        datapath: field(line, "datapath")?,
        waited_ms: field(line, "waited_ms")?.parse().ok()?,
        switch_ms: field(line, "switch_ms")?.parse().ok()?,
    })
}

/// `key=value` in a log line (value up to the next space, or the closing quote when
/// quoted).
pub fn field(line: &str, key: &str) -> Option<String> {
    let pat = format!(" {key}=");
    let start = line.find(&pat)? + pat.len();
    let rest = &line[start..];
    if let Some(q) = rest.strip_prefix('"') {
        let end = q.find('"')?;
        return Some(q[..end].to_string());
    }
    let v = rest.split_whitespace().next()?;
    Some(v.to_string())
}

/// `YYYY-MM-DDTHH:MM:SS[.frac]Z` (or `+00:00`) → seconds since the epoch.
pub fn parse_rfc3339(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00"))?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, dd) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let ss = t.next()?.parse::<f64>().ok()?;
    // days from civil (Howard Hinnant)
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + dd - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60) as f64 + ss)
}

/// Nearest-rank percentile (`q` in 0..=1) of `v`; NaN when empty.
pub fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// p50/p99 per phase over a set of ADDs, and how many started fast or hit a pool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseStats {
    /// ADDs counted.
    pub adds: usize,
    /// Per phase ([`PHASES`] order): (ADDs that had it, p50 ms, p99 ms).
    pub phases: Vec<(&'static str, usize, f64, f64)>,
    /// ADDs that started on the kernel path and move to AF_XDP later (`then=afxdp`).
    pub fast: usize,
    /// ADDs with `pool=hit` (none while the agent logs no pool field).
    pub pool_hits: usize,
}

impl PhaseStats {
    pub fn of<'a>(adds: impl IntoIterator<Item = &'a AddPhases>) -> PhaseStats {
        let adds: Vec<&AddPhases> = adds.into_iter().collect();
        let phases = PHASES
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let v: Vec<f64> = adds.iter().filter_map(|a| a.ms[i]).collect();
                (*name, v.len(), percentile(&v, 0.5), percentile(&v, 0.99))
            })
            .collect();
        PhaseStats {
            adds: adds.len(),
            phases,
            fast: adds.iter().filter(|a| a.then == "afxdp").count(),
            pool_hits: adds
                .iter()
                .filter(|a| a.pool.as_deref() == Some("hit"))
                .count(),
        }
    }

    /// `p50/p99` per phase in one line, `-` for a phase no ADD had.
    pub fn line(&self) -> String {
        let mut s = String::new();
        for (name, n, p50, p99) in &self.phases {
            if *n == 0 {
                s += &format!(" {name} -");
            } else {
                s += &format!(" {name} {p50:.0}/{p99:.0}");
            }
        }
        format!(
            "{} ADDs, p50/p99 ms:{s}; fast start {}, pool hits {}",
            self.adds, self.fast, self.pool_hits
        )
    }

    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (name, n, p50, p99) in &self.phases {
            m.insert(
                (*name).into(),
                json!({"adds": n, "p50_ms": finite(*p50), "p99_ms": finite(*p99)}),
            );
        }
        json!({"adds": self.adds, "fast_start": self.fast, "pool_hits": self.pool_hits,
               "phases": Value::Object(m)})
    }
}

/// NaN/inf as JSON null.
pub fn finite(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD: &str = "2026-11-27T04:20:01.500000Z  INFO dataplane::attach::phases: CNI ADD phases container=abc123 pod=\"default/b7\" kind=veth datapath=kernel then=afxdp annotation_ms=12.5 plumb_ms=20.1 ovs_ms=3.2 open_ms=-1 installed_ms=40.0 total_ms=80.3";
    const MOVED: &str = "2026-11-27T04:20:03.000000Z  INFO dataplane::attach::promote: pod port moved to AF_XDP pod=default/b7 port=abc123ab_h datapath=afxdp waited_ms=1200 switch_ms=150";

    #[test]
    fn parses_the_phase_line() {
        let a = parse_phases(ADD).expect("a phase line");
        assert_eq!(a.container, "abc123");
        assert_eq!(a.pod, "default/b7", "quotes stripped");
        assert_eq!((a.datapath.as_str(), a.then.as_str()), ("kernel", "afxdp"));
        assert_eq!(
            a.ms,
            [
                Some(12.5),
                Some(20.1),
                Some(3.2),
                None,
                Some(40.0),
                Some(80.3)
            ]
        );
        assert_eq!(a.pool, None);
        let t = parse_rfc3339("2026-11-27T04:20:01.500000Z").expect("ts");
        assert!((a.at - t).abs() < 1e-9);
        assert!((a.started_at() - (t - 0.0803)).abs() < 1e-6);
    }

    #[test]
    fn parses_the_move_line_and_skips_others() {
        let m = parse_moved(MOVED).expect("a move line");
        assert_eq!(
            (m.pod.as_str(), m.datapath.as_str()),
            ("default/b7", "afxdp")
        );
        assert_eq!((m.waited_ms, m.switch_ms), (1200.0, 150.0));
        let log = AgentLog::parse(&format!(
            "{ADD}\n2026-11-27T04:20:01Z  INFO x: CNI request done command=ADD\n{MOVED}\n{}",
            &ADD[..60]
        ));
        assert_eq!((log.adds.len(), log.moved.len()), (1, 1));
        assert!(log.add_of("abc123").is_some() && log.add_of("abc").is_none());
        assert_eq!(log.moved_of(&["default/b7".into()]).len(), 1);
    }

    #[test]
    fn a_line_missing_a_phase_is_not_counted() {
        assert!(parse_phases(&ADD.replace(" ovs_ms=3.2", "")).is_none());
        assert!(parse_phases(&ADD.replace("total_ms=80.3", "total_ms=x")).is_none());
    }

    #[test]
    fn rfc3339_is_epoch_seconds() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            parse_rfc3339("2000-03-01T00:00:01.25Z"),
            Some(951_868_801.25)
        );
        assert_eq!(parse_rfc3339("2000-03-01 00:00:01Z"), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn stats_count_fast_starts_and_skip_absent_phases() {
        let a = parse_phases(ADD).expect("line");
        let mut b = a.clone();
        b.then = "-".into();
        b.ms[3] = Some(150.0);
        b.pool = Some("hit".into());
        let s = PhaseStats::of([&a, &b]);
        assert_eq!((s.adds, s.fast, s.pool_hits), (2, 1, 1));
        let open = s.phases[3];
        assert_eq!((open.0, open.1, open.2), ("open", 1, 150.0));
        assert_eq!(s.phases[0].1, 2);
        assert!(s.line().contains("open 150/150"));
        let empty = PhaseStats::of([]);
        assert!(empty.line().contains("open -"));
    }
}
