//! Datapath flows (megaflows) as `ovs-appctl dpctl/dump-flows -m --no-names` prints them,
//! and the test of two of them overlapping: the evidence [`crate::datapath::megaflow_guard`] looks
//! for.
//!
//! Why overlaps matter: OVS 3.1's userspace datapath (dpif-netdev) applies a revalidator's
//! "modify" to the flow a classifier lookup of the flow's *key* finds, not to the flow with
//! that ufid. When a broader megaflow installed after a rule change overlaps an older,
//! narrower one, the new actions can land on the broader flow while the revalidator
//! records them for the older one, which then keeps its old actions (for example a
//! NetworkPolicy's old "allow") until it idles out or is purged. Within one PMD thread's
//! table, megaflows translated from one rule set never overlap with different actions; two
//! that do mean one of them is stale.

use std::net::{Ipv4Addr, Ipv6Addr};

/// One datapath flow of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Megaflow {
    /// The thread whose table holds it (`main thread`, `pmd on cpu core: 1`), as the dump
    /// heads each section.
    pub thread: String,
    pub ufid: String,
    /// The match, one leaf per (sub)field: `ipv4.src` → value, mask.
    pub fields: Vec<Field>,
    pub actions: String,
    pub packets: u64,
    /// Time since a packet last hit it, in ms (`None`: never).
    pub used_ms: Option<u64>,
    /// The match as printed (value/mask pairs).
    pub matched: String,
}

impl Megaflow {
    /// The flow's key without its masks, as `ofproto/trace` takes it: what the tables say
    /// now for the packet that installed the flow.
    pub fn trace_key(&self) -> String {
        let mut out = String::with_capacity(self.matched.len());
        let mut skip = false;
        for c in self.matched.chars() {
            match c {
                '/' => skip = true,
                ',' | ')' | '}' => {
                    skip = false;
                    out.push(c);
                }
                _ if !skip => out.push(c),
                _ => {}
            }
        }
        out
    }

    /// The recirculation id it matches (`0x0` before any recirculation).
    pub fn recirc_id(&self) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.path == "recirc_id")
            .map(|f| f.value.as_str())
    }
}

/// The `Datapath actions:` of an `ofproto/trace` text.
pub fn traced_actions(trace: &str) -> Option<&str> {
    trace
        .lines()
        .find_map(|l| l.strip_prefix("Datapath actions:"))
        .map(str::trim)
}

/// Whether a flow's actions and the traced ones say the same, recirculation ids aside (a
/// trace may allocate its own id for the same continuation: the frozen state holds the
/// tunnel metadata of the traced packet) and a controller action's `dont_send` aside (a
/// trace never sends to the controller, the datapath flow does).
pub fn same_actions(flow: &str, traced: &str) -> bool {
    fn strip(a: &str) -> String {
        let mut out = String::with_capacity(a.len());
        let mut rest = a;
        loop {
            let next = ["recirc(", "dont_send="]
                .iter()
                .filter_map(|k| rest.find(k).map(|i| (i, k.len())))
                .min();
            let Some((i, n)) = next else { break };
            out.push_str(&rest[..i + n]);
            rest = &rest[i + n..];
            rest = rest.find([')', ',']).map_or("", |j| &rest[j..]);
        }
        out.push_str(rest);
        out
    }
    strip(flow) == strip(traced)
}

/// Whether a flow sends every packet to ovs-vswitchd (`slow_path`): it caches no verdict,
/// so it cannot be stale (and its trace gives the actions userspace executes instead).
pub fn is_slow_path(actions: &str) -> bool {
    actions.contains("slow_path(")
}

/// The recirculation ids a flow's actions continue at (`recirc(0x1a)` → `0x1a`).
pub fn recirc_targets(actions: &str) -> impl Iterator<Item = &str> {
    actions.split("recirc(").skip(1).filter_map(|rest| {
        let id = &rest[..rest.find(')')?];
        (!id.is_empty()).then_some(id)
    })
}

/// One matched (sub)field: its path (`ct_state`, `ipv4.dst`, `tunnel.geneve.1`), value and
/// mask as printed (no mask: exact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub path: String,
    pub value: String,
    pub mask: Option<String>,
}

/// The flows of a `dpctl/dump-flows -m` text; lines that are not flows are skipped.
pub fn parse_dump(text: &str) -> Vec<Megaflow> {
    let mut thread = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(t) = line.strip_prefix("flow-dump from ") {
            thread = t.trim_end_matches(':').to_string();
            continue;
        }
        if let Some(f) = parse_line(&thread, line) {
            out.push(f);
        }
    }
    out
}

fn parse_line(thread: &str, line: &str) -> Option<Megaflow> {
    let rest = line.strip_prefix("ufid:")?;
    let (ufid, rest) = rest.split_once(", ")?;
    let (matches, stats) = rest.split_once(", packets:")?;
    let packets = stats.split(',').next()?.trim().parse().ok()?;
    let actions = stats.split_once(", actions:")?.1;
    let actions = actions
        .split_once(", dp-extra-info:")
        .map_or(actions, |(a, _)| a);
    let mut fields = Vec::new();
    for item in split_top(matches) {
        leaves("", item, &mut fields);
    }
    Some(Megaflow {
        thread: thread.to_string(),
        ufid: ufid.to_string(),
        fields,
        actions: actions.trim().to_string(),
        packets,
        used_ms: used_ms(stats),
        matched: matches.to_string(),
    })
}

/// `used:0.012s` (or `used:never`) of a dump line's statistics, in ms.
fn used_ms(stats: &str) -> Option<u64> {
    let v = stats.split_once("used:")?.1.split(',').next()?.trim();
    let secs: f64 = v.strip_suffix('s')?.parse().ok()?;
    Some((secs * 1000.0) as u64)
}

/// The busiest flows first: the most recently hit, then the most hit.
pub fn busiest_first(flows: &[Megaflow]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..flows.len()).collect();
    order.sort_by_key(|&i| {
        (
            flows[i].used_ms.unwrap_or(u64::MAX),
            std::cmp::Reverse(flows[i].packets),
        )
    });
    order
}

/// Splits on commas outside parentheses and braces.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '{' => depth += 1,
            ')' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < s.len() {
        out.push(s[start..].trim());
    }
    out.into_iter().filter(|x| !x.is_empty()).collect()
}

/// `name(body)`, `key=value` or a bare value (at `prefix`), flattened into leaves.
fn leaves(prefix: &str, item: &str, out: &mut Vec<Field>) {
    let join = |name: &str| match prefix {
        "" => name.to_string(),
        p => format!("{p}.{name}"),
    };
    // `key=value` where the value may itself be `name(...)`-free text
    let eq = item.find('=');
    let paren = item.find('(');
    let brace = item.find('{');
    match (eq, paren, brace) {
        (Some(e), p, b) if p.is_none_or(|p| e < p) && b.is_none_or(|b| e < b) => {
            let (k, v) = (&item[..e], &item[e + 1..]);
            leaf(&join(k), v, out);
        }
        (_, Some(p), _) if item.ends_with(')') => {
            let (name, body) = (&item[..p], &item[p + 1..item.len() - 1]);
            let path = join(name);
            let body = body.trim();
            if let Some(inner) = body.strip_prefix('{').and_then(|b| b.strip_suffix('}')) {
                // `geneve({class=..,type=..,len=4,0xa/0xff})`: positional items
                for (i, x) in split_top(inner).into_iter().enumerate() {
                    leaves(&format!("{path}.{i}"), x, out);
                }
            } else if body.contains('=') || body.contains('(') {
                for x in split_top(body) {
                    leaves(&path, x, out);
                }
            } else {
                leaf(&path, body, out);
            }
        }
        _ => leaf(prefix, item, out),
    }
}

fn leaf(path: &str, v: &str, out: &mut Vec<Field>) {
    let (value, mask) = match v.split_once('/') {
        Some((a, m)) => (a, Some(m.to_string())),
        None => (v, None),
    };
    out.push(Field {
        path: path.to_string(),
        value: value.to_string(),
        mask,
    });
}

/// A printed value as bytes: IPv4, IPv6, MAC, hex (`0x..`) or decimal numbers.
fn bytes(s: &str) -> Option<Vec<u8>> {
    if let Ok(a) = s.parse::<Ipv4Addr>() {
        return Some(a.octets().to_vec());
    }
    if s.contains(':') {
        if let Ok(a) = s.parse::<Ipv6Addr>() {
            return Some(a.octets().to_vec());
        }
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() == 6 {
            return parts
                .iter()
                .map(|p| u8::from_str_radix(p, 16).ok())
                .collect();
        }
        return None;
    }
    let n = match s.strip_prefix("0x") {
        Some(h) => u128::from_str_radix(h, 16).ok()?,
        None => s.parse::<u128>().ok()?,
    };
    Some(n.to_be_bytes().to_vec())
}

/// A leaf ready for the overlap test: value and mask as bytes, or text the parser does not
/// know (`frag=no`, tunnel flags).
#[derive(Debug, Clone)]
enum Leaf {
    Bytes { value: Vec<u8>, mask: Vec<u8> },
    Text { field: Field, wildcard: bool },
}

impl Leaf {
    fn of(f: &Field) -> Leaf {
        let parsed = (|| {
            let value = bytes(&f.value)?;
            let mask = match &f.mask {
                Some(m) => bytes(m)?,
                None => vec![0xff; value.len()],
            };
            (mask.len() == value.len()).then_some(Leaf::Bytes { value, mask })
        })();
        parsed.unwrap_or_else(|| Leaf::Text {
            field: f.clone(),
            wildcard: f
                .mask
                .as_deref()
                .and_then(bytes)
                .is_some_and(|m| m.iter().all(|x| *x == 0)),
        })
    }

    /// Whether some packet can match both leaves (same path).
    fn overlaps(&self, other: &Leaf) -> bool {
        match (self, other) {
            (
                Leaf::Bytes {
                    value: va,
                    mask: ma,
                },
                Leaf::Bytes {
                    value: vb,
                    mask: mb,
                },
            ) if va.len() == vb.len() => {
                (0..va.len()).all(|i| (va[i] & ma[i] & mb[i]) == (vb[i] & ma[i] & mb[i]))
            }
            // a fully wildcarded field always overlaps; otherwise equal text does
            (Leaf::Text { wildcard: true, .. }, _) | (_, Leaf::Text { wildcard: true, .. }) => true,
            (Leaf::Text { field: a, .. }, Leaf::Text { field: b, .. }) => {
                a.value == b.value && a.mask == b.mask
            }
            _ => false,
        }
    }
}

/// A flow ready for the overlap test: its leaves sorted by path.
struct Prepared {
    thread: String,
    leaves: Vec<(String, Leaf)>,
}

impl Prepared {
    fn of(f: &Megaflow) -> Prepared {
        let mut leaves: Vec<(String, Leaf)> = f
            .fields
            .iter()
            .map(|x| (x.path.clone(), Leaf::of(x)))
            .collect();
        leaves.sort_by(|a, b| a.0.cmp(&b.0));
        Prepared {
            thread: f.thread.clone(),
            leaves,
        }
    }

    /// A merge of both sorted leaf lists: a path in one flow only is wildcarded in the
    /// other.
    fn overlaps(&self, other: &Prepared) -> bool {
        if self.thread != other.thread {
            return false;
        }
        let (mut i, mut j) = (0, 0);
        while i < self.leaves.len() && j < other.leaves.len() {
            let (pa, la) = &self.leaves[i];
            let (pb, lb) = &other.leaves[j];
            match pa.cmp(pb) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    if !la.overlaps(lb) {
                        return false;
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        true
    }
}

/// Whether some packet can match both flows (in one thread's table). A field present in
/// one flow only is wildcarded in the other.
pub fn overlaps(a: &Megaflow, b: &Megaflow) -> bool {
    Prepared::of(a).overlaps(&Prepared::of(b))
}

/// The most flows [`conflicting_overlaps`] looks at (the busiest, see [`busiest_first`]):
/// the test is
/// quadratic within a (thread, recirculation id, in_port) group.
pub const MAX_OVERLAP_FLOWS: usize = 512;

/// Pairs of flows (indices into `flows`) that overlap in one thread's table with
/// different actions: one of each pair is stale. Only the [`MAX_OVERLAP_FLOWS`] busiest
/// flows are looked at.
pub fn conflicting_overlaps(flows: &[Megaflow]) -> Vec<(usize, usize)> {
    let mut order = busiest_first(flows);
    order.truncate(MAX_OVERLAP_FLOWS);
    order.sort_unstable();
    // the quadratic test runs within groups that must be equal to overlap anyway
    let key = |f: &Megaflow| {
        let get = |p: &str| {
            f.fields
                .iter()
                .find(|x| x.path == p)
                .map(|x| x.value.clone())
        };
        (f.thread.clone(), get("recirc_id"), get("in_port"))
    };
    let mut groups: std::collections::BTreeMap<_, Vec<usize>> = Default::default();
    for &i in &order {
        groups.entry(key(&flows[i])).or_default().push(i);
    }
    let prepared: std::collections::HashMap<usize, Prepared> = order
        .iter()
        .map(|&i| (i, Prepared::of(&flows[i])))
        .collect();
    let mut out = Vec::new();
    for idx in groups.values() {
        for (n, &i) in idx.iter().enumerate() {
            for &j in &idx[n + 1..] {
                if flows[i].actions != flows[j].actions && prepared[&i].overlaps(&prepared[&j]) {
                    out.push((i, j));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // From a stuck NetworkPolicy step (issue #7): S allowed udp/81 from z/c into x/a
    // after the policy that denies it; B is the broad drop flow the revalidator's
    // modify landed on instead.
    const DUMP: &str = "flow-dump from the main thread:
ufid:f0961e1f-4490-4ac1-af50-f836958f8800, skb_priority(0/0),tunnel(tun_id=0x3,src=172.16.0.2,dst=172.16.0.1,ttl=64/0,tp_dst=6081,geneve({class=0x102,type=0x80,len=4,0x10002/0x7fffffff}),flags(-df+csum+key)),skb_mark(0/0),ct_state(0/0),ct_zone(0/0),ct_mark(0/0),ct_label(0/0),recirc_id(0),dp_hash(0/0),in_port(1),packet_type(ns=0,id=0),eth(src=0a:58:0a:4d:02:0a,dst=0a:58:0a:4d:01:0b),eth_type(0x0800),ipv4(src=10.77.2.10/0.0.0.0,dst=10.77.1.11/0.0.0.0,proto=6/0,tos=0/0x3,ttl=64/0,frag=no), packets:3, bytes:222, used:1.0s, dp:ovs, actions:5, dp-extra-info:miniflow_bits(6,1)
ufid:aaaa1f1f-4490-4ac1-af50-f836958f8800, skb_priority(0/0),tunnel(tun_id=0x3,src=172.16.0.2,dst=172.16.0.1,ttl=64/0,tp_dst=6081,geneve({class=0x102,type=0x80,len=4,0x20002/0x7fffffff}),flags(-df+csum+key)),skb_mark(0/0),ct_state(0/0),ct_zone(0/0),ct_mark(0/0),ct_label(0/0),recirc_id(0),dp_hash(0/0),in_port(1),packet_type(ns=0,id=0),eth(src=0a:58:0a:4d:02:0a,dst=0a:58:0a:4d:01:0c),eth_type(0x0800),ipv4(src=10.77.2.10/0.0.0.0,dst=10.77.1.12/0.0.0.0,proto=6/0,tos=0/0x3,ttl=64/0,frag=no), packets:3, bytes:222, used:1.0s, dp:ovs, actions:7, dp-extra-info:miniflow_bits(6,1)
flow-dump from pmd on cpu core: 1
ufid:6c4e4c8b-90dd-4d8b-930e-ceb30faeac26, skb_priority(0/0),skb_mark(0/0),ct_state(0x21/0x3f),ct_zone(0x8/0),ct_mark(0/0x1),ct_label(0/0),ct_tuple4(src=10.77.3.12/0.0.0.0,dst=10.77.1.10/0.0.0.0,proto=17/0,tp_src=49345/0,tp_dst=81/0),recirc_id(0xad),dp_hash(0/0),in_port(8),packet_type(ns=0,id=0),eth(src=0a:58:0a:4d:03:0c,dst=0a:58:0a:4d:01:0a),eth_type(0x0800),ipv4(src=10.77.3.12/192.0.0.0,dst=10.77.1.10,proto=17,tos=0/0,ttl=64/0,frag=no),udp(src=49345/0,dst=81), packets:189, bytes:9072, used:0.012s, dp:ovs, actions:ct(commit,zone=8,mark=0/0x1),6, dp-extra-info:miniflow_bits(5,3)
ufid:343f1791-9266-4915-9d7b-a8f8db223df6, skb_priority(0/0),skb_mark(0/0),ct_state(0x21/0x3f),ct_zone(0x8/0),ct_mark(0/0x1),ct_label(0/0),ct_tuple4(src=10.77.3.12/0.0.0.0,dst=10.77.1.10/0.0.0.0,proto=17/0,tp_src=49424/0,tp_dst=80/0),recirc_id(0xad),dp_hash(0/0),in_port(8),packet_type(ns=0,id=0),eth(src=0a:58:0a:4d:03:0c,dst=0a:58:0a:4d:01:0a/00:00:00:00:00:00),eth_type(0x0800),ipv4(src=10.77.3.12/192.0.0.0,dst=10.77.1.10/0.0.0.0,proto=17,tos=0/0,ttl=64/0,frag=no),udp(src=49424/0,dst=80/0), packets:1, bytes:48, used:4.328s, dp:ovs, actions:drop, dp-extra-info:miniflow_bits(5,2)
ufid:025d92db-27ff-4cbc-a2be-8bbda45ccc2e, skb_priority(0/0),skb_mark(0/0),ct_state(0x21/0x3f),ct_zone(0x8/0),ct_mark(0/0x1),ct_label(0/0),ct_tuple4(src=10.77.3.12/0.0.0.0,dst=10.77.1.10/0.0.0.0,proto=6/0,tp_src=38264/0,tp_dst=80/0),recirc_id(0xad),dp_hash(0/0),in_port(8),packet_type(ns=0,id=0),eth(src=0a:58:0a:4d:03:0c,dst=0a:58:0a:4d:01:0a),eth_type(0x0800),ipv4(src=10.77.3.12/192.0.0.0,dst=10.77.1.10,proto=6,tos=0/0,ttl=64/0,frag=no),tcp(src=38264/0,dst=80),tcp_flags(0/0), packets:4, bytes:296, used:4.327s, flags:S, dp:ovs, actions:drop, dp-extra-info:miniflow_bits(5,3)
ufid:b89b6462-d43a-47c1-b0d6-67c8194b8846, skb_priority(0/0),skb_mark(0/0),ct_state(0x22/0x3f),ct_zone(0x8/0),ct_mark(0/0x1),ct_label(0/0),ct_tuple4(src=10.77.3.12/0.0.0.0,dst=10.77.1.10/0.0.0.0,proto=17/0,tp_src=49345/0,tp_dst=81/0),recirc_id(0xad),dp_hash(0/0),in_port(8),packet_type(ns=0,id=0),eth(src=0a:58:0a:4d:03:0c,dst=0a:58:0a:4d:01:0a),eth_type(0x0800),ipv4(src=10.77.3.12/192.0.0.0,dst=10.77.1.10,proto=17,tos=0/0,ttl=64/0,frag=no),udp(src=49345/0,dst=81), packets:10, bytes:480, used:0.012s, dp:ovs, actions:6, dp-extra-info:miniflow_bits(5,3)
";

    #[test]
    fn parses_threads_fields_actions() {
        let f = parse_dump(DUMP);
        assert_eq!(f.len(), 6);
        assert_eq!(f[0].thread, "the main thread");
        assert_eq!(f[2].thread, "pmd on cpu core: 1");
        assert_eq!(f[2].ufid, "6c4e4c8b-90dd-4d8b-930e-ceb30faeac26");
        assert_eq!(f[2].actions, "ct(commit,zone=8,mark=0/0x1),6");
        assert_eq!(f[2].packets, 189);
        assert_eq!(f[2].used_ms, Some(12));
        assert_eq!(f[3].used_ms, Some(4328));
        // the busiest: most recently hit first (S and its established twin at 12 ms)
        assert_eq!(&busiest_first(&f)[..2], &[2, 5]);
        let get = |p: &str| f[2].fields.iter().find(|x| x.path == p).cloned();
        assert_eq!(
            get("ipv4.src"),
            Some(Field {
                path: "ipv4.src".into(),
                value: "10.77.3.12".into(),
                mask: Some("192.0.0.0".into())
            })
        );
        assert_eq!(
            get("udp.dst").map(|x| (x.value, x.mask)),
            Some(("81".into(), None))
        );
        assert_eq!(get("ct_state").and_then(|x| x.mask), Some("0x3f".into()));
        // tunnel options: positional leaves; flags as text
        let t = &f[0].fields;
        assert!(
            t.iter()
                .any(|x| x.path == "tunnel.geneve.3" && x.value == "0x10002")
        );
        assert!(
            t.iter()
                .any(|x| x.path == "tunnel.flags" && x.value == "-df+csum+key")
        );
    }

    #[test]
    fn the_stale_allow_overlaps_the_broad_drop() {
        let f = parse_dump(DUMP);
        let pairs = conflicting_overlaps(&f);
        let names: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(i, j)| (&f[*i].ufid[..8], &f[*j].ufid[..8]))
            .collect();
        // S (udp/81 allowed) within B (all udp dropped); the tcp/80 drop is disjoint from
        // both (protocol), the established flow differs in ct_state, and the two tunnel
        // flows differ in their geneve option (the logical port)
        assert_eq!(names, vec![("6c4e4c8b", "343f1791")]);
    }

    #[test]
    fn masks_decide_overlap() {
        let fl = |fields: &[(&str, &str, Option<&str>)], actions: &str| Megaflow {
            thread: "t".into(),
            ufid: "u".into(),
            fields: fields
                .iter()
                .map(|(p, v, m)| Field {
                    path: p.to_string(),
                    value: v.to_string(),
                    mask: m.map(str::to_string),
                })
                .collect(),
            actions: actions.into(),
            packets: 0,
            used_ms: None,
            matched: String::new(),
        };
        let a = fl(&[("ipv4.dst", "10.0.0.1", None)], "1");
        let b = fl(&[("ipv4.dst", "10.0.0.0", Some("255.255.255.0"))], "2");
        let c = fl(&[("ipv4.dst", "10.0.1.0", Some("255.255.255.0"))], "2");
        let d = fl(
            &[("eth.src", "0a:00:00:00:00:01", Some("00:00:00:00:00:00"))],
            "2",
        );
        let e = fl(&[("ipv6.dst", "fd00::1", None)], "1");
        let g = fl(&[("ipv6.dst", "fd00::", Some("ffff::"))], "2");
        let h = fl(&[("ipv4.frag", "no", None)], "1");
        let k = fl(&[("ipv4.frag", "first", None)], "2");
        assert!(overlaps(&a, &b));
        assert!(!overlaps(&a, &c));
        assert!(overlaps(&a, &d), "a field one flow wildcards");
        assert!(overlaps(&e, &g));
        assert!(!overlaps(&h, &k), "unknown text: equal or disjoint");
        let mut other_thread = b.clone();
        other_thread.thread = "pmd".into();
        assert!(!overlaps(&a, &other_thread));
    }

    #[test]
    fn trace_key_drops_masks() {
        let f = parse_dump(DUMP);
        let k = f[2].trace_key();
        assert!(
            k.contains("ipv4(src=10.77.3.12,dst=10.77.1.10,proto=17,tos=0,ttl=64,frag=no)"),
            "{k}"
        );
        assert!(
            k.contains("ct_state(0x21)") && k.contains("recirc_id(0xad)"),
            "{k}"
        );
        assert_eq!(f[2].recirc_id(), Some("0xad"));
        let t = "Flow: ...\n\nFinal flow: unchanged\nMegaflow: recirc_id=0xad\nDatapath actions: drop\n";
        assert_eq!(traced_actions(t), Some("drop"));
        assert_eq!(traced_actions("no"), None);
        assert!(same_actions(
            "ct(zone=10,nat),recirc(0xe)",
            "ct(zone=10,nat),recirc(0x56)"
        ));
        assert!(!same_actions("ct(commit,zone=8,mark=0/0x1),6", "drop"));
        assert!(!same_actions("10", "ct(commit,zone=11,mark=0x1/0x1)"));
        // a controller action as installed and as traced (from a corpus run's purge log)
        let ctl = |d| {
            format!(
                "userspace(pid=0,controller(reason=1,dont_send={d},continuation=0,\
                 recirc_id=3911,rule_cookie=0xc8539339,controller_id=0,max_len=65535))"
            )
        };
        assert!(same_actions(&ctl(0), &ctl(1)));
        assert!(!same_actions(&ctl(0), "drop"));
        assert!(!same_actions(
            "ct(zone=1),recirc(0x1),2",
            "ct(zone=1),recirc(0x2),3"
        ));
    }

    #[test]
    fn slow_path_and_recirculation_targets() {
        assert!(is_slow_path("userspace(pid=0,slow_path(action))"));
        assert!(!is_slow_path("ct(zone=12,nat),recirc(0x133)"));
        let ids: Vec<_> =
            recirc_targets("ct(zone=12,nat),recirc(0x133),ct(zone=3),recirc(0x9)").collect();
        assert_eq!(ids, ["0x133", "0x9"]);
        assert_eq!(recirc_targets("drop").count(), 0);
        assert_eq!(recirc_targets("recirc(").count(), 0);
    }

    #[test]
    fn garbage_is_skipped() {
        assert!(parse_dump("nothing here\nufid:x\n").is_empty());
        assert!(conflicting_overlaps(&[]).is_empty());
    }
}
