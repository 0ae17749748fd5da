//! One line per packet, in the manner of tcpdump: Ethernet (with 802.1Q/802.1ad tags) →
//! ARP, IPv4 or IPv6 → ICMP, ICMPv6, TCP (flags) or UDP. A frame too short for a header
//! says so instead of guessing.

use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const ETH_IPV4: u16 = 0x0800;
const ETH_ARP: u16 = 0x0806;
const ETH_IPV6: u16 = 0x86dd;
const ETH_VLAN: u16 = 0x8100;
const ETH_QINQ: u16 = 0x88a8;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn v4(b: &[u8], at: usize) -> Option<Ipv4Addr> {
    let o: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(o))
}

fn v6(b: &[u8], at: usize) -> Option<Ipv6Addr> {
    let o: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
    Some(Ipv6Addr::from(o))
}

/// The summary of one Ethernet frame, e.g.
/// `10.0.0.5 > 10.0.0.6: ICMP echo request id 7 seq 1`.
pub fn summarize(frame: &[u8]) -> String {
    let Some(mut ethertype) = be16(frame, 12) else {
        return format!("truncated Ethernet frame ({} bytes)", frame.len());
    };
    let mut off = 14;
    let mut out = String::new();
    while ethertype == ETH_VLAN || ethertype == ETH_QINQ {
        let (Some(tci), Some(next)) = (be16(frame, off), be16(frame, off + 2)) else {
            return out + "truncated VLAN tag";
        };
        let _ = write!(out, "vlan {}, ", tci & 0x0fff);
        ethertype = next;
        off += 4;
    }
    let payload = &frame[off..];
    let rest = match ethertype {
        ETH_ARP => arp(payload),
        ETH_IPV4 => ipv4(payload),
        ETH_IPV6 => ipv6(payload),
        t => Some(format!(
            "{} > {}, ethertype {t:#06x}, {} bytes",
            mac(&frame[6..12]),
            mac(&frame[0..6]),
            frame.len()
        )),
    };
    out + &rest.unwrap_or_else(|| format!("truncated packet (ethertype {ethertype:#06x})"))
}

fn arp(p: &[u8]) -> Option<String> {
    // Ethernet/IPv4 ARP only: hlen 6, plen 4
    if p.get(4) != Some(&6) || p.get(5) != Some(&4) {
        return Some("ARP, not Ethernet/IPv4".into());
    }
    let (sha, spa, tpa) = (mac(p.get(8..14)?), v4(p, 14)?, v4(p, 24)?);
    Some(match be16(p, 6)? {
        1 => format!("ARP, Request who-has {tpa} tell {spa}"),
        2 => format!("ARP, Reply {spa} is-at {sha}"),
        op => format!("ARP, op {op} {spa} > {tpa}"),
    })
}

fn ipv4(p: &[u8]) -> Option<String> {
    let ihl = usize::from(p.first()? & 0x0f) * 4;
    let total = usize::from(be16(p, 2)?);
    let frag = be16(p, 6)?;
    let proto = *p.get(9)?;
    let (src, dst) = (IpAddr::V4(v4(p, 12)?), IpAddr::V4(v4(p, 16)?));
    let end = total.clamp(ihl, p.len());
    let l4 = p.get(ihl..end)?;
    if frag & 0x1fff != 0 {
        return Some(format!(
            "{src} > {dst}: IP fragment offset {}, proto {proto}",
            (frag & 0x1fff) * 8
        ));
    }
    Some(l4_summary(src, dst, proto, l4))
}

fn ipv6(p: &[u8]) -> Option<String> {
    let plen = usize::from(be16(p, 4)?);
    let mut next = *p.get(6)?;
    let (src, dst) = (IpAddr::V6(v6(p, 8)?), IpAddr::V6(v6(p, 24)?));
    let end = (40 + plen).min(p.len());
    let mut off = 40;
    // hop-by-hop, routing, destination options, fragment
    while matches!(next, 0 | 43 | 60 | 44) {
        let h = p.get(off..end)?;
        if next == 44 {
            if be16(h, 2)? & 0xfff8 != 0 {
                return Some(format!(
                    "{src} > {dst}: IPv6 fragment, next header {}",
                    h[0]
                ));
            }
            next = h[0];
            off += 8;
        } else {
            next = h[0];
            off += (usize::from(*h.get(1)?) + 1) * 8;
        }
    }
    Some(l4_summary(src, dst, next, p.get(off..end)?))
}

fn endpoint(a: IpAddr, port: u16) -> String {
    format!("{a}.{port}")
}

fn l4_summary(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8]) -> String {
    let body = match proto {
        1 => icmp(l4),
        58 => icmp6(l4),
        6 => tcp(l4)
            .map(|(sp, dp, rest)| format!("{} > {}: {rest}", endpoint(src, sp), endpoint(dst, dp))),
        17 => udp(l4)
            .map(|(sp, dp, rest)| format!("{} > {}: {rest}", endpoint(src, sp), endpoint(dst, dp))),
        p => Some(format!("{src} > {dst}: ip-proto {p}, {} bytes", l4.len())),
    };
    match (proto, body) {
        (1 | 58, Some(b)) => format!("{src} > {dst}: {b}"),
        (_, Some(b)) => b,
        (_, None) => format!("{src} > {dst}: truncated (ip-proto {proto})"),
    }
}

fn icmp(m: &[u8]) -> Option<String> {
    let (t, c) = (*m.first()?, *m.get(1)?);
    Some(match t {
        0 | 8 => format!(
            "ICMP echo {} id {} seq {}",
            if t == 8 { "request" } else { "reply" },
            be16(m, 4)?,
            be16(m, 6)?
        ),
        3 => format!("ICMP destination unreachable code {c}"),
        11 => format!("ICMP time exceeded code {c}"),
        _ => format!("ICMP type {t} code {c}"),
    })
}

fn icmp6(m: &[u8]) -> Option<String> {
    let (t, c) = (*m.first()?, *m.get(1)?);
    Some(match t {
        128 | 129 => format!(
            "ICMP6 echo {} id {} seq {}",
            if t == 128 { "request" } else { "reply" },
            be16(m, 4)?,
            be16(m, 6)?
        ),
        133 => "ICMP6 router solicitation".into(),
        134 => "ICMP6 router advertisement".into(),
        135 => format!("ICMP6 neighbor solicitation, who has {}", v6(m, 8)?),
        136 => format!("ICMP6 neighbor advertisement, tgt is {}", v6(m, 8)?),
        130 => "ICMP6 multicast listener query".into(),
        131 | 143 => "ICMP6 multicast listener report".into(),
        132 => "ICMP6 multicast listener done".into(),
        1 => format!("ICMP6 destination unreachable code {c}"),
        3 => format!("ICMP6 time exceeded code {c}"),
        _ => format!("ICMP6 type {t} code {c}"),
    })
}

fn tcp(s: &[u8]) -> Option<(u16, u16, String)> {
    let (sp, dp, seq, ack) = (be16(s, 0)?, be16(s, 2)?, be32(s, 4)?, be32(s, 8)?);
    let doff = usize::from(s.get(12)? >> 4) * 4;
    let f = *s.get(13)?;
    let mut flags = String::new();
    for (bit, ch) in [
        (0x02, 'S'),
        (0x01, 'F'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x20, 'U'),
        (0x10, '.'),
    ] {
        if f & bit != 0 {
            flags.push(ch);
        }
    }
    if flags.is_empty() {
        flags.push_str("none");
    }
    let len = s.len().saturating_sub(doff);
    let mut rest = format!("TCP [{flags}] seq {seq}");
    if f & 0x10 != 0 {
        let _ = write!(rest, " ack {ack}");
    }
    let _ = write!(rest, " len {len}");
    Some((sp, dp, rest))
}

fn udp(s: &[u8]) -> Option<(u16, u16, String)> {
    let (sp, dp, len) = (be16(s, 0)?, be16(s, 2)?, be16(s, 4)?);
    Some((sp, dp, format!("UDP len {}", len.saturating_sub(8))))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 0, 5];
    const B: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 0, 6];

    fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = B.to_vec();
        f.extend_from_slice(&A);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn ip4(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
        h.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 5, 10, 0, 0, 6]);
        h.extend_from_slice(l4);
        h
    }

    fn ip6(next: u8, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        h.extend_from_slice(&[next, 64]);
        let a: Ipv6Addr = "fd00::5".parse().expect("addr");
        let b: Ipv6Addr = "fd00::6".parse().expect("addr");
        h.extend_from_slice(&a.octets());
        h.extend_from_slice(&b.octets());
        h.extend_from_slice(l4);
        h
    }

    #[test]
    fn icmp_echo_with_id_and_seq() {
        let f = eth(ETH_IPV4, &ip4(1, &[8, 0, 0, 0, 0, 7, 0, 1, 0xde, 0xad]));
        assert_eq!(
            summarize(&f),
            "10.0.0.5 > 10.0.0.6: ICMP echo request id 7 seq 1"
        );
        let f = eth(ETH_IPV4, &ip4(1, &[0, 0, 0, 0, 0, 7, 0, 2]));
        assert_eq!(
            summarize(&f),
            "10.0.0.5 > 10.0.0.6: ICMP echo reply id 7 seq 2"
        );
    }

    #[test]
    fn tcp_flags_ports_and_length() {
        let mut seg = vec![
            0x82, 0x35, 0, 80, 0, 0, 0, 1, 0, 0, 0, 9, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0,
        ];
        seg.extend_from_slice(b"hello");
        let f = eth(ETH_IPV4, &ip4(6, &seg));
        assert_eq!(
            summarize(&f),
            "10.0.0.5.33333 > 10.0.0.6.80: TCP [S.] seq 1 ack 9 len 5"
        );
    }

    #[test]
    fn udp_over_a_vlan_tag() {
        let dgram = [0x13, 0x89, 0, 53, 0, 11, 0, 0, 1, 2, 3];
        let mut tagged = vec![0x00, 0x64];
        tagged.extend_from_slice(&ETH_IPV4.to_be_bytes());
        tagged.extend_from_slice(&ip4(17, &dgram));
        let f = eth(ETH_VLAN, &tagged);
        assert_eq!(
            summarize(&f),
            "vlan 100, 10.0.0.5.5001 > 10.0.0.6.53: UDP len 3"
        );
    }

    #[test]
    fn arp_request_and_reply() {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
        a.extend_from_slice(&A);
        a.extend_from_slice(&[10, 0, 0, 5]);
        a.extend_from_slice(&[0; 6]);
        a.extend_from_slice(&[10, 0, 0, 6]);
        assert_eq!(
            summarize(&eth(ETH_ARP, &a)),
            "ARP, Request who-has 10.0.0.6 tell 10.0.0.5"
        );
        a[7] = 2;
        assert_eq!(
            summarize(&eth(ETH_ARP, &a)),
            "ARP, Reply 10.0.0.5 is-at 0a:58:0a:00:00:05"
        );
    }

    #[test]
    fn icmpv6_echo_and_neighbor_discovery() {
        let f = eth(ETH_IPV6, &ip6(58, &[128, 0, 0, 0, 0, 3, 0, 4]));
        assert_eq!(
            summarize(&f),
            "fd00::5 > fd00::6: ICMP6 echo request id 3 seq 4"
        );
        let mut ns = vec![135, 0, 0, 0, 0, 0, 0, 0];
        ns.extend_from_slice(&"fd00::6".parse::<Ipv6Addr>().expect("addr").octets());
        let f = eth(ETH_IPV6, &ip6(58, &ns));
        assert_eq!(
            summarize(&f),
            "fd00::5 > fd00::6: ICMP6 neighbor solicitation, who has fd00::6"
        );
        // behind a hop-by-hop header
        let mut hbh = vec![58, 0, 0, 0, 0, 0, 0, 0];
        hbh.extend_from_slice(&[129, 0, 0, 0, 0, 3, 0, 4]);
        let f = eth(ETH_IPV6, &ip6(0, &hbh));
        assert_eq!(
            summarize(&f),
            "fd00::5 > fd00::6: ICMP6 echo reply id 3 seq 4"
        );
    }

    #[test]
    fn short_and_unknown_frames_say_so() {
        assert_eq!(summarize(&[1, 2, 3]), "truncated Ethernet frame (3 bytes)");
        assert_eq!(
            summarize(&eth(ETH_IPV4, &[0x45, 0])),
            "truncated packet (ethertype 0x0800)"
        );
        assert!(summarize(&eth(0x88cc, &[0; 10])).contains("ethertype 0x88cc, 24 bytes"));
    }
}
