//! An `ipBlock` peer as a match term: its `cidr` minus its `except`s, written as the set
//! of prefixes that remain (`ip4.dst == {10.16.0.0/23, 10.16.3.0/24, ...}`).
//!
//! Not `ip4.dst == C && ip4.dst != {E}`: OVN expands a negated prefix into one
//! disjunct per bit of its mask, and those multiply with the rule's other terms (ports,
//! the port group) into hundreds of OpenFlow flows per rule. The remaining prefixes are
//! at most (except's length − cidr's length) per `except`, each one flow.

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::IPBlock;

use super::{Direction, Family};

/// An `ipBlock` field that is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ipBlock.{field} {value:?} is not a CIDR")]
pub(super) struct NotACidr {
    /// `cidr` or `except`.
    pub field: &'static str,
    pub value: String,
}

/// The match term of `block` with warnings for ignored excepts; an error when the block is
/// unusable. `None` in the term's place when the excepts leave nothing (the peer matches
/// no address).
pub(super) fn term(
    block: &IPBlock,
    dir: Direction,
) -> Result<(Option<String>, Vec<String>), NotACidr> {
    let cidr: IpNet = block.cidr.trim().parse().map_err(|_| NotACidr {
        field: "cidr",
        value: block.cidr.clone(),
    })?;
    let cidr = cidr.trunc();
    let field = format!("{}.{}", Family::of(&cidr.addr()).field(), dir.peer_field());
    let mut excepts = Vec::new();
    let mut warnings = Vec::new();
    for e in block.except.iter().flatten() {
        let ex: IpNet = e.trim().parse().map_err(|_| NotACidr {
            field: "except",
            value: e.clone(),
        })?;
        let ex = ex.trunc();
        if cidr.contains(&ex) {
            excepts.push(ex);
        } else {
            warnings.push(format!(
                "ipBlock.except {ex} is outside cidr {cidr}; it excludes nothing"
            ));
        }
    }
    let remaining = subtract(cidr, &excepts);
    let t = match remaining.as_slice() {
        [] => None,
        [one] => Some(format!("{field} == {one}")),
        many => Some(format!(
            "{field} == {{{}}}",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    };
    Ok((t, warnings))
}

/// `cidr` minus every prefix of `excepts` (each inside `cidr`), as disjoint prefixes in
/// address order.
pub(super) fn subtract(cidr: IpNet, excepts: &[IpNet]) -> Vec<IpNet> {
    let mut out = vec![cidr];
    for ex in excepts {
        let mut next = Vec::with_capacity(out.len() + 1);
        for p in out {
            if ex.contains(&p) {
                continue; // wholly excluded
            }
            if !p.contains(ex) {
                next.push(p); // disjoint
                continue;
            }
            // split p down to ex, keeping every half that does not hold it
            let mut cur = p;
            while cur != *ex {
                let Some((low, high)) = halves(cur) else {
                    break;
                };
                if low.contains(ex) {
                    next.push(high);
                    cur = low;
                } else {
                    next.push(low);
                    cur = high;
                }
            }
        }
        out = next;
    }
    out.sort();
    out
}

/// The two halves of `p`, `None` for a single address.
fn halves(p: IpNet) -> Option<(IpNet, IpNet)> {
    let len = p.prefix_len().checked_add(1)?;
    let mut subs = p.subnets(len).ok()?;
    Some((subs.next()?, subs.next()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().expect("cidr")
    }

    fn strs(v: &[IpNet]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn one_except_leaves_one_prefix_per_bit_between_the_lengths() {
        let r = subtract(net("10.16.0.0/16"), &[net("10.16.2.0/24")]);
        assert_eq!(
            strs(&r),
            [
                "10.16.0.0/23",
                "10.16.3.0/24",
                "10.16.4.0/22",
                "10.16.8.0/21",
                "10.16.16.0/20",
                "10.16.32.0/19",
                "10.16.64.0/18",
                "10.16.128.0/17"
            ]
        );
    }

    #[test]
    fn nested_equal_and_whole_excepts() {
        // an except inside another adds nothing
        let r = subtract(net("10.0.0.0/8"), &[net("10.1.0.0/16"), net("10.1.2.0/24")]);
        assert_eq!(r, subtract(net("10.0.0.0/8"), &[net("10.1.0.0/16")]));
        assert_eq!(r.len(), 8);
        // the whole block excepted: nothing remains
        assert!(subtract(net("10.0.0.0/8"), &[net("10.0.0.0/8")]).is_empty());
        assert_eq!(
            strs(&subtract(net("192.0.2.0/31"), &[net("192.0.2.1/32")])),
            ["192.0.2.0/32"]
        );
        // IPv6, and no except at all
        let v6 = subtract(net("fd00::/64"), &[net("fd00::5/128")]);
        assert_eq!(v6.len(), 64);
        assert_eq!(subtract(net("fd00::/64"), &[]), [net("fd00::/64")]);
    }

    /// Every address of a small block is kept exactly when no except holds it.
    #[test]
    fn the_remaining_prefixes_hold_exactly_the_addresses_not_excepted() {
        let cidr = net("10.9.0.0/24");
        let excepts = [
            net("10.9.0.16/28"),
            net("10.9.0.130/31"),
            net("10.9.0.255/32"),
        ];
        let r = subtract(cidr, &excepts);
        for host in cidr.hosts().chain([cidr.network(), cidr.broadcast()]) {
            let kept = r.iter().filter(|p| p.contains(&host)).count();
            let excepted = excepts.iter().any(|e| e.contains(&host));
            assert_eq!(kept, usize::from(!excepted), "{host}");
        }
    }

    #[test]
    fn the_term_lists_the_remaining_prefixes_without_a_negation() {
        let block = IPBlock {
            cidr: "10.16.0.0/16".into(),
            except: Some(vec!["10.16.2.0/24".into(), "192.168.0.0/24".into()]),
        };
        let (t, warnings) = term(&block, Direction::Egress).expect("term");
        let t = t.expect("some addresses remain");
        assert!(
            t.starts_with("ip4.dst == {10.16.0.0/23, 10.16.3.0/24,"),
            "{t}"
        );
        assert!(!t.contains("!="), "{t}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let all = IPBlock {
            cidr: "10.16.0.0/16".into(),
            except: Some(vec!["10.16.0.0/16".into()]),
        };
        assert_eq!(term(&all, Direction::Ingress).expect("term").0, None);
    }
}
