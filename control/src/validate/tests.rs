use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{SubnetPhase, SubnetSpec};
use crate::ipam::{Family, Owner, SubnetPool};
use crate::model::{IpRange, Protocol, ValidSubnet};

use super::address::*;
use super::context::*;
use super::problem::*;
use super::spec::*;
use super::status::*;
use proptest::prelude::*;

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}
fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
fn t(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
}
fn spec(cidr: &str) -> SubnetSpec {
    SubnetSpec::with_cidr(cidr)
}
/// The reasons, as a person reads them.
fn reasons(spec: &SubnetSpec, ctx: &ValidationContext) -> Vec<String> {
    match validate("red", spec, ctx) {
        Ok(v) => panic!("expected problems, got {v:?}"),
        Err(p) => p.iter().map(ToString::to_string).collect(),
    }
}
fn reasons_of(spec: &SubnetSpec) -> Vec<String> {
    reasons(spec, &ValidationContext::default())
}
fn valid(spec: &SubnetSpec, ctx: &ValidationContext) -> ValidSubnet {
    match validate("red", spec, ctx) {
        Ok(v) => v,
        Err(p) => panic!("expected valid, got {p:?}"),
    }
}
fn valid_of(spec: &SubnetSpec) -> ValidSubnet {
    valid(spec, &ValidationContext::default())
}
fn other(cidr: &str, created: Option<i64>) -> OtherSubnet {
    OtherSubnet::from_spec(&spec(cidr), created.map(t))
}
fn range(a: &str, b: &str) -> IpRange {
    IpRange {
        start: ip(a),
        end: ip(b),
    }
}

// ---- cidr ----------------------------------------------------------------------------

#[test]
fn cidr_invalid() {
    assert_eq!(
        reasons_of(&spec("10.0.0.0/33")),
        [r#"cidr "10.0.0.0/33" is not a valid CIDR"#]
    );
    assert_eq!(
        reasons_of(&spec("10.0.0.0")),
        [r#"cidr "10.0.0.0" is not a valid CIDR"#]
    );
    assert_eq!(
        reasons_of(&spec("10.0.0.0/24,banana")),
        [r#"cidr "banana" is not a valid CIDR"#]
    );
}

#[test]
fn cidr_empty() {
    for c in ["", "  "] {
        assert_eq!(
            reasons_of(&spec(c)),
            [
                "cidr is empty: give one CIDR like 10.16.0.0/16, or an IPv4 and an IPv6 CIDR separated by a comma"
            ]
        );
    }
}

#[test]
fn cidr_host_bits_rejected_with_suggestion() {
    assert_eq!(
        reasons_of(&spec("10.0.0.5/24")),
        ["cidr 10.0.0.5/24 has host bits set (did you mean 10.0.0.0/24?)"]
    );
    assert_eq!(
        reasons_of(&spec("fd00::1/64")),
        ["cidr fd00::1/64 has host bits set (did you mean fd00::/64?)"]
    );
    // the other fields are still checked, against the network
    let mut s = spec("10.0.0.5/24");
    s.gateway = Some("10.1.0.1".into());
    s.exclude_ips = vec!["10.0.0.7".into()];
    assert_eq!(
        reasons_of(&s),
        [
            "cidr 10.0.0.5/24 has host bits set (did you mean 10.0.0.0/24?)",
            "gateway 10.1.0.1 is outside cidr 10.0.0.0/24"
        ]
    );
}

#[test]
fn cidr_too_many_same_family_and_order() {
    assert_eq!(
        reasons_of(&spec("10.0.0.0/24,10.1.0.0/24,fd00::/64")),
        [
            r#"cidr "10.0.0.0/24,10.1.0.0/24,fd00::/64" has 3 entries: give one CIDR, or one IPv4 and one IPv6 CIDR separated by a comma"#
        ]
    );
    assert_eq!(
        reasons_of(&spec("10.0.0.0/24,10.1.0.0/24")),
        [
            r#"cidr "10.0.0.0/24,10.1.0.0/24" has two IPv4 CIDRs: dual stack needs one IPv4 and one IPv6 CIDR"#
        ]
    );
    assert_eq!(
        reasons_of(&spec("fd00::/64,fd01::/64")),
        [
            r#"cidr "fd00::/64,fd01::/64" has two IPv6 CIDRs: dual stack needs one IPv4 and one IPv6 CIDR"#
        ]
    );
    assert_eq!(
        reasons_of(&spec("fd00::/64,10.0.0.0/24")),
        [
            r#"cidr "fd00::/64,10.0.0.0/24" lists IPv6 first: write the IPv4 CIDR first (10.0.0.0/24,fd00::/64)"#
        ]
    );
}

#[test]
fn cidr_reserved_ranges() {
    assert_eq!(
        reasons_of(&spec("127.0.0.0/8")),
        ["cidr 127.0.0.0/8 overlaps the loopback range 127.0.0.0/8"]
    );
    assert_eq!(
        reasons_of(&spec("169.254.1.0/24")),
        ["cidr 169.254.1.0/24 overlaps the link-local range 169.254.0.0/16"]
    );
    assert_eq!(
        reasons_of(&spec("fe80::/64")),
        ["cidr fe80::/64 overlaps the link-local range fe80::/10"]
    );
    assert_eq!(
        reasons_of(&spec("239.0.0.0/24")),
        ["cidr 239.0.0.0/24 overlaps the multicast range 224.0.0.0/4"]
    );
}

#[test]
fn cidr_whitespace_tolerated() {
    let v = valid_of(&spec(" 10.0.0.0/24 , fd00::/64 "));
    assert_eq!(v.cidrs, [net("10.0.0.0/24"), net("fd00::/64")]);
}

// ---- protocol ------------------------------------------------------------------------

#[test]
fn protocol_derived() {
    assert_eq!(valid_of(&spec("10.0.0.0/24")).protocol, Protocol::IPv4);
    assert_eq!(valid_of(&spec("fd00::/64")).protocol, Protocol::IPv6);
    assert_eq!(
        valid_of(&spec("10.0.0.0/24,fd00::/64")).protocol,
        Protocol::Dual
    );
    let mut s = spec("10.0.0.0/24,fd00::/64");
    s.protocol = Some("Dual".into());
    assert_eq!(valid_of(&s).protocol, Protocol::Dual);
    s.protocol = Some(String::new());
    assert_eq!(valid_of(&s).protocol, Protocol::Dual);
}

#[test]
fn protocol_mismatch() {
    let mut s = spec("10.0.0.0/24");
    s.protocol = Some("Dual".into());
    assert_eq!(
        reasons_of(&s),
        [r#"protocol Dual does not match cidr "10.0.0.0/24", which is IPv4 only"#]
    );
    let mut s = spec("fd00::/64");
    s.protocol = Some("IPv4".into());
    assert_eq!(
        reasons_of(&s),
        [r#"protocol IPv4 does not match cidr "fd00::/64", which is IPv6 only"#]
    );
    let mut s = spec("10.0.0.0/24,fd00::/64");
    s.protocol = Some("IPv6".into());
    assert_eq!(
        reasons_of(&s),
        [
            r#"protocol IPv6 does not match cidr "10.0.0.0/24,fd00::/64", which is dual-stack (IPv4 and IPv6)"#
        ]
    );
}

#[test]
fn protocol_invalid_even_when_cidr_is_bad() {
    let mut s = spec("10.0.0.0/24");
    s.protocol = Some("ipv4".into());
    assert_eq!(
        reasons_of(&s),
        [r#"protocol "ipv4" is not one of IPv4, IPv6, Dual"#]
    );
    s.cidr = "nope".into();
    assert_eq!(
        reasons_of(&s),
        [
            r#"cidr "nope" is not a valid CIDR"#,
            r#"protocol "ipv4" is not one of IPv4, IPv6, Dual"#
        ]
    );
}

// ---- gateway -------------------------------------------------------------------------

#[test]
fn gateway_default_is_first_usable() {
    let cases = [
        ("10.0.0.0/24", "10.0.0.1"),
        ("10.0.0.0/30", "10.0.0.1"),
        ("10.0.0.0/31", "10.0.0.0"),
        ("fd00::/64", "fd00::1"),
        ("fd00::/127", "fd00::"),
    ];
    for (c, g) in cases {
        assert_eq!(valid_of(&spec(c)).gateways, [ip(g)], "{c}");
    }
    let v = valid_of(&spec("10.16.0.0/16,fd00:10:16::/64"));
    assert_eq!(v.gateways, [ip("10.16.0.1"), ip("fd00:10:16::1")]);
    let mut s = spec("10.0.0.0/24");
    s.gateway = Some(" ".into());
    assert_eq!(valid_of(&s).gateways, [ip("10.0.0.1")]);
}

#[test]
fn gateway_explicit() {
    let mut s = spec("10.0.0.0/24,fd00::/64");
    s.gateway = Some("10.0.0.254, fd00::fe".into());
    assert_eq!(valid_of(&s).gateways, [ip("10.0.0.254"), ip("fd00::fe")]);
    // /31 and /32: every address usable, the gateway may be any of them
    let mut s = spec("10.0.0.0/31");
    s.gateway = Some("10.0.0.1".into());
    assert_eq!(valid_of(&s).gateways, [ip("10.0.0.1")]);
}

#[test]
fn gateway_outside_network_broadcast() {
    let mut s = spec("10.0.0.0/24");
    s.gateway = Some("10.1.0.1".into());
    assert_eq!(
        reasons_of(&s),
        ["gateway 10.1.0.1 is outside cidr 10.0.0.0/24"]
    );
    s.gateway = Some("10.0.0.0".into());
    assert_eq!(
        reasons_of(&s),
        ["gateway 10.0.0.0 is the network address of cidr 10.0.0.0/24"]
    );
    s.gateway = Some("10.0.0.255".into());
    assert_eq!(
        reasons_of(&s),
        ["gateway 10.0.0.255 is the broadcast address of cidr 10.0.0.0/24"]
    );
    let mut s = spec("fd00::/64");
    s.gateway = Some("fd00::".into());
    assert_eq!(
        reasons_of(&s),
        ["gateway fd00:: is the network address of cidr fd00::/64"]
    );
}

#[test]
fn gateway_invalid() {
    let mut s = spec("10.0.0.0/24");
    s.gateway = Some("10.0.0.x".into());
    assert_eq!(
        reasons_of(&s),
        [r#"gateway "10.0.0.x" is not an IP address"#]
    );
    // reported even when cidr is broken too
    s.cidr = "10.0.0.0/99".into();
    assert_eq!(
        reasons_of(&s),
        [
            r#"cidr "10.0.0.0/99" is not a valid CIDR"#,
            r#"gateway "10.0.0.x" is not an IP address"#
        ]
    );
}

#[test]
fn gateway_count_family_order() {
    let mut s = spec("10.0.0.0/24,fd00::/64");
    s.gateway = Some("10.0.0.1".into());
    assert_eq!(
        reasons_of(&s),
        [
            r#"gateway "10.0.0.1" has 1 address(es) but cidr "10.0.0.0/24,fd00::/64" has 2: give one gateway per CIDR, comma-separated"#
        ]
    );
    s.gateway = Some("fd00::1,10.0.0.1".into());
    assert_eq!(
        reasons_of(&s),
        [
            r#"gateway "fd00::1,10.0.0.1" lists IPv6 first: write the IPv4 gateway first, as in cidr"#
        ]
    );
    s.gateway = Some("10.0.0.1,10.0.0.2".into());
    assert_eq!(
        reasons_of(&s),
        ["gateway 10.0.0.2 is IPv4 but cidr fd00::/64 is not"]
    );
    let mut s = spec("10.0.0.0/24");
    s.gateway = Some("fd00::1".into());
    assert_eq!(
        reasons_of(&s),
        ["gateway fd00::1 is IPv6 but cidr 10.0.0.0/24 is not"]
    );
}

// ---- excludeIPs ----------------------------------------------------------------------

#[test]
fn excludes_both_range_syntaxes() {
    let mut s = spec("10.0.0.0/24,fd00::/64");
    s.exclude_ips = vec![
        "10.0.0.50".into(),
        "10.0.0.10..10.0.0.20".into(),
        " 10.0.0.30-10.0.0.40 ".into(),
        "fd00::10-fd00::20".into(),
        "fd00::30..fd00::40".into(),
    ];
    assert_eq!(
        valid_of(&s).excludes,
        [
            range("10.0.0.10", "10.0.0.20"),
            range("10.0.0.30", "10.0.0.40"),
            range("10.0.0.50", "10.0.0.50"),
            range("fd00::10", "fd00::20"),
            range("fd00::30", "fd00::40"),
        ]
    );
}

#[test]
fn excludes_merged() {
    let mut s = spec("10.0.0.0/24");
    s.exclude_ips = vec![
        "10.0.0.5..10.0.0.9".into(),
        "10.0.0.10".into(),
        "10.0.0.8-10.0.0.12".into(),
        "10.0.0.5".into(),
    ];
    assert_eq!(valid_of(&s).excludes, [range("10.0.0.5", "10.0.0.12")]);
}

#[test]
fn excludes_invalid_reversed_mixed() {
    let mut s = spec("10.0.0.0/24");
    s.exclude_ips = vec![
        "10.0.0.x".into(),
        "10.0.0.9..10.0.0.3".into(),
        "10.0.0.1..fd00::1".into(),
        "".into(),
        "10.0.0.1..".into(),
    ];
    assert_eq!(
        reasons_of(&s),
        [
            r#"excludeIPs entry "10.0.0.x" is not an address or range (like 10.16.0.5, 10.16.0.10..10.16.0.20 or 10.16.0.10-10.16.0.20)"#,
            "excludeIPs range 10.0.0.9..10.0.0.3 is reversed (did you mean 10.0.0.3..10.0.0.9?)",
            "excludeIPs range 10.0.0.1..fd00::1 mixes IPv4 and IPv6",
            r#"excludeIPs entry "" is not an address or range (like 10.16.0.5, 10.16.0.10..10.16.0.20 or 10.16.0.10-10.16.0.20)"#,
            r#"excludeIPs entry "10.0.0.1.." is not an address or range (like 10.16.0.5, 10.16.0.10..10.16.0.20 or 10.16.0.10-10.16.0.20)"#,
        ]
    );
}

#[test]
fn excludes_outside() {
    let mut s = spec("10.0.0.0/24");
    s.exclude_ips = vec![
        "10.1.0.5".into(),
        "10.0.0.250..10.0.1.5".into(),
        "fd00::1".into(),
    ];
    assert_eq!(
        reasons_of(&s),
        [
            "excludeIPs 10.1.0.5 is outside cidr 10.0.0.0/24",
            "excludeIPs 10.0.0.250..10.0.1.5 reaches outside cidr 10.0.0.0/24",
            "excludeIPs fd00::1 is outside cidr 10.0.0.0/24",
        ]
    );
    let mut s = spec("10.0.0.0/24,fd00::/64");
    s.exclude_ips = vec!["fd01::1".into(), "10.0.1.1".into()];
    assert_eq!(
        reasons_of(&s),
        [
            "excludeIPs fd01::1 is outside cidr fd00::/64",
            "excludeIPs 10.0.1.1 is outside cidr 10.0.0.0/24",
        ]
    );
}

// ---- vlanID, provider ----------------------------------------------------------------

#[test]
fn vlan_range() {
    for bad in [0, 4095, 5000, -1, i64::MAX, i64::MIN] {
        let mut s = spec("10.0.0.0/24");
        s.vlan_id = Some(bad);
        assert_eq!(reasons_of(&s), [format!("vlanID {bad} is outside 1-4094")]);
    }
    for good in [1, 100, 4094] {
        let mut s = spec("10.0.0.0/24");
        s.vlan_id = Some(good);
        assert_eq!(valid_of(&s).vlan_id, Some(good as u16));
    }
}

#[test]
fn provider_and_namespaces_carried() {
    let mut s = spec("10.0.0.0/24");
    s.provider = Some(" ovn ".into());
    s.namespaces = vec!["a".into(), "team-b".into(), "a".into()];
    s.default = true;
    let v = valid_of(&s);
    assert_eq!(v.provider.as_deref(), Some("ovn"));
    assert_eq!(v.namespaces, ["a", "team-b"]);
    assert!(v.default);
    assert_eq!(v.name, "red");
    s.provider = Some(String::new());
    assert_eq!(valid_of(&s).provider, None);
}

#[test]
fn namespace_invalid() {
    let mut s = spec("10.0.0.0/24");
    s.namespaces = vec!["Team_A".into(), "-x".into(), "ok".into(), "a".repeat(64)];
    assert_eq!(
        reasons_of(&s),
        [
            r#"namespaces entry "Team_A" is not a valid namespace name (lowercase letters, digits and '-', at most 63)"#.to_string(),
            r#"namespaces entry "-x" is not a valid namespace name (lowercase letters, digits and '-', at most 63)"#.to_string(),
            format!(r#"namespaces entry "{}" is not a valid namespace name (lowercase letters, digits and '-', at most 63)"#, "a".repeat(64)),
        ]
    );
}

// ---- external mode -------------------------------------------------------------------

fn external_ctx() -> ValidationContext {
    ValidationContext {
        external: Some(ExternalContext {
            switches: ["ls-zstack-1".to_string()].into(),
            platform_excludes: [(
                "ls-zstack-1".to_string(),
                vec![
                    range("10.0.0.1", "10.0.0.1"),
                    range("10.0.0.200", "10.0.1.10"), // clipped to the cidr
                    range("192.168.0.1", "192.168.0.9"), // outside: dropped
                    range("10.0.0.9", "10.0.0.3"),    // malformed: dropped
                ],
            )]
            .into(),
            switch_networks: [(
                "ls-zstack-1".to_string(),
                vec![(
                    "10.0.0.1/24".parse().unwrap(),
                    "router port lrp-1 10.0.0.1/24".to_string(),
                )],
            )]
            .into(),
            port_groups: ["sg-web".to_string()].into(),
            security_groups: true,
        }),
        ..Default::default()
    }
}

#[test]
fn security_groups_are_the_platforms_and_only_when_allowed() {
    let mut s = spec("10.0.0.0/24");
    s.external_logical_switch = Some("ls-zstack-1".into());
    s.security_groups = vec!["sg-web".into(), " sg-web ".into()];
    let v = valid(&s, &external_ctx());
    assert_eq!(v.security_groups, ["sg-web"]);
    // the status names them, in its field and its Ready condition
    let st = active_status(&v, "ls-zstack-1", None);
    assert_eq!(st.security_groups, ["sg-web"]);
    assert!(
        st.conditions[0]
            .message
            .ends_with("its pods are in the platform's security groups sg-web"),
        "{:?}",
        st.conditions
    );
    s.security_groups = vec!["sg-web".into(), "sg-db".into()];
    assert_eq!(
        reasons(&s, &external_ctx()),
        [
            r#"security group "sg-db" not found: no Port_Group of that name in the platform's Northbound database"#
        ]
    );
    let mut off = external_ctx();
    if let Some(e) = off.external.as_mut() {
        e.security_groups = false;
    }
    s.security_groups = vec!["sg-web".into()];
    assert_eq!(
        reasons(&s, &off),
        [
            "securityGroups is off in this controller: start it with --platform-security-groups (Helm: ovn.securityGroups=true)"
        ]
    );
    let problems = validate("x", &s, &off).unwrap_err();
    assert_eq!(problems[0].field(), "securityGroups");
    // not on a platform switch: nothing of the platform's to join
    let mut own = spec("10.0.0.0/24");
    own.security_groups = vec!["sg-web".into()];
    assert_eq!(
        reasons(&own, &external_ctx()),
        ["securityGroups needs external mode and externalLogicalSwitch: they are the platform's"]
    );
}

#[test]
fn external_switch_of_another_network_is_refused() {
    let mut s = spec("10.0.1.0/24");
    s.external_logical_switch = Some("ls-zstack-1".into());
    assert_eq!(
        reasons(&s, &external_ctx()),
        [
            r#"externalLogicalSwitch "ls-zstack-1" serves 10.0.0.0/24 (as the platform declares it: router port lrp-1 10.0.0.1/24), not cidr 10.0.1.0/24"#
        ]
    );
    let problems = validate("x", &s, &external_ctx()).unwrap_err();
    assert_eq!(problems[0].field(), "externalLogicalSwitch");
    // the same network, and a family the platform declares nothing for, are fine
    let mut s = spec("10.0.0.0/24,fd00:1::/64");
    s.external_logical_switch = Some("ls-zstack-1".into());
    valid(&s, &external_ctx());
}

#[test]
fn external_switch_needs_external_mode() {
    let mut s = spec("10.0.0.0/24");
    s.external_logical_switch = Some("ls-zstack-1".into());
    assert_eq!(
        reasons_of(&s),
        [
            r#"externalLogicalSwitch "ls-zstack-1" needs external mode; this controller runs standalone"#
        ]
    );
}

#[test]
fn nat_outgoing_is_refused_in_external_mode_and_kept_standalone() {
    for v in [true, false] {
        let mut s = spec("10.0.0.0/24");
        s.external_logical_switch = Some("ls-zstack-1".into());
        s.nat_outgoing = Some(v);
        assert_eq!(
            reasons(&s, &external_ctx()),
            [
                "natOutgoing does not apply in external mode: the platform's router carries the pods' egress (its NAT rules decide); remove the field"
            ]
        );
        let problems = validate("x", &s, &external_ctx()).unwrap_err();
        assert_eq!(problems[0].field(), "natOutgoing");
    }
    let mut s = spec("10.0.0.0/24");
    assert!(
        validate("x", &s, &ValidationContext::default())
            .unwrap()
            .nat_outgoing
    );
    s.nat_outgoing = Some(false);
    assert!(
        !validate("x", &s, &ValidationContext::default())
            .unwrap()
            .nat_outgoing
    );
}

#[test]
fn external_switch_not_found() {
    let mut s = spec("10.0.0.0/24");
    s.external_logical_switch = Some("ls-zstack-2".into());
    assert_eq!(
        reasons(&s, &external_ctx()),
        [r#"externalLogicalSwitch "ls-zstack-2" not found in the OVN Northbound database"#]
    );
}

#[test]
fn external_switch_platform_excludes_merged() {
    let mut s = spec("10.0.0.0/24");
    s.external_logical_switch = Some("ls-zstack-1".into());
    s.gateway = Some("10.0.0.1".into());
    s.exclude_ips = vec!["10.0.0.2..10.0.0.5".into()];
    let v = valid(&s, &external_ctx());
    assert_eq!(v.external_logical_switch.as_deref(), Some("ls-zstack-1"));
    assert_eq!(
        v.excludes,
        [
            range("10.0.0.1", "10.0.0.5"),
            range("10.0.0.200", "10.0.0.255")
        ]
    );
    // without a switch, external mode changes nothing
    let v = valid(&spec("10.0.0.0/24"), &external_ctx());
    assert!(v.excludes.is_empty());
}

// ---- conflicts with the cluster ------------------------------------------------------

#[test]
fn overlaps_older_subnet() {
    let ctx = ValidationContext {
        created: Some(t(200)),
        others: [("blue".to_string(), other("10.0.0.0/16", Some(100)))].into(),
        ..Default::default()
    };
    assert_eq!(
        reasons(&spec("10.0.0.0/24"), &ctx),
        [r#"cidr 10.0.0.0/24 overlaps Subnet "blue" (10.0.0.0/16)"#]
    );
    // the older one stays valid: the newcomer is the one that fails
    let older_ctx = ValidationContext {
        created: Some(t(100)),
        others: [("blue".to_string(), other("10.0.0.0/24", Some(200)))].into(),
        ..Default::default()
    };
    valid(&spec("10.0.0.0/16"), &older_ctx);
}

#[test]
fn overlap_order_ties_and_unknown_times() {
    // same timestamp: the name decides ("blue" < "red", so red fails)
    let ctx = ValidationContext {
        created: Some(t(100)),
        others: [("blue".to_string(), other("10.0.0.0/24", Some(100)))].into(),
        ..Default::default()
    };
    assert_eq!(
        reasons(&spec("10.0.0.0/24"), &ctx),
        [r#"cidr 10.0.0.0/24 overlaps Subnet "blue" (10.0.0.0/24)"#]
    );
    let ctx = ValidationContext {
        created: Some(t(100)),
        others: [("zed".to_string(), other("10.0.0.0/24", Some(100)))].into(),
        ..Default::default()
    };
    valid(&spec("10.0.0.0/24"), &ctx);
    // not yet stored (no timestamp): newest
    let ctx = ValidationContext {
        created: None,
        others: [("zed".to_string(), other("10.0.0.0/24", Some(100)))].into(),
        ..Default::default()
    };
    assert_eq!(
        reasons(&spec("10.0.0.0/24"), &ctx),
        [r#"cidr 10.0.0.0/24 overlaps Subnet "zed" (10.0.0.0/24)"#]
    );
    // its own entry is ignored
    let ctx = ValidationContext {
        created: Some(t(100)),
        others: [("red".to_string(), other("10.0.0.0/24", Some(1)))].into(),
        ..Default::default()
    };
    valid(&spec("10.0.0.0/24"), &ctx);
}

#[test]
fn overlaps_dual_stack_only_same_family() {
    let ctx = ValidationContext {
        created: Some(t(200)),
        others: [
            (
                "blue".to_string(),
                other("10.1.0.0/16,fd00::/48", Some(100)),
            ),
            ("green".to_string(), other("10.2.0.0/16", Some(100))),
        ]
        .into(),
        ..Default::default()
    };
    assert_eq!(
        reasons(&spec("10.0.0.0/16,fd00:0:0:1::/64"), &ctx),
        [r#"cidr fd00:0:0:1::/64 overlaps Subnet "blue" (fd00::/48)"#]
    );
}

#[test]
fn other_subnet_from_spec_is_lenient() {
    let o = OtherSubnet::from_spec(&spec("10.0.0.5/24, junk, fd00::/64"), None);
    assert_eq!(o.cidrs, [net("10.0.0.0/24"), net("fd00::/64")]);
}

#[test]
fn overlaps_service_join_nodes() {
    let ctx = ValidationContext {
        service_cidrs: vec![net("10.96.0.0/16")],
        join_cidrs: vec![net("100.64.0.0/16")],
        node_networks: vec![net("192.168.1.0/24")],
        ..Default::default()
    };
    assert_eq!(
        reasons(&spec("10.96.0.0/12"), &ctx),
        ["cidr 10.96.0.0/12 overlaps the service CIDR 10.96.0.0/16"]
    );
    assert_eq!(
        reasons(&spec("100.64.0.0/24"), &ctx),
        ["cidr 100.64.0.0/24 overlaps the join CIDR 100.64.0.0/16"]
    );
    assert_eq!(
        reasons(&spec("192.168.0.0/16"), &ctx),
        [
            "cidr 192.168.0.0/16 overlaps the node network 192.168.1.0/24 (only an underlay Subnet, with vlanID or externalLogicalSwitch, may)"
        ]
    );
    // an underlay Subnet lives on the node network
    let mut s = spec("192.168.1.0/24");
    s.vlan_id = Some(10);
    valid(&s, &ctx);
    valid(&spec("10.16.0.0/16"), &ctx);
}

#[test]
fn default_taken_by_older() {
    let mut blue = other("10.1.0.0/16", Some(1));
    blue.default = true;
    let ctx = ValidationContext {
        created: Some(t(2)),
        others: [("blue".to_string(), blue.clone())].into(),
        ..Default::default()
    };
    let mut s = spec("10.0.0.0/16");
    s.default = true;
    assert_eq!(
        reasons(&s, &ctx),
        [r#"default is true but Subnet "blue" is already the default Subnet"#]
    );
    s.default = false;
    valid(&s, &ctx);
    // the older default stays
    let ctx = ValidationContext {
        created: Some(t(0)),
        others: [("blue".to_string(), blue)].into(),
        ..Default::default()
    };
    s.default = true;
    valid(&s, &ctx);
}

#[test]
fn namespace_taken_by_older() {
    let mut blue = other("10.1.0.0/16", Some(1));
    blue.namespaces = vec!["team-a".into()];
    let ctx = ValidationContext {
        created: Some(t(2)),
        others: [("blue".to_string(), blue)].into(),
        ..Default::default()
    };
    let mut s = spec("10.0.0.0/16");
    s.namespaces = vec!["team-a".into(), "team-b".into()];
    assert_eq!(
        reasons(&s, &ctx),
        [r#"namespace "team-a" already belongs to Subnet "blue""#]
    );
}

// ---- capacity ------------------------------------------------------------------------

#[test]
fn no_usable_addresses() {
    assert_eq!(
        reasons_of(&spec("10.0.0.1/32")),
        [
            "cidr 10.0.0.1/32 has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
        ]
    );
    assert_eq!(
        reasons_of(&spec("fd00::1/128")),
        [
            "cidr fd00::1/128 has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
        ]
    );
    let mut s = spec("10.0.0.0/30");
    s.exclude_ips = vec!["10.0.0.2".into()];
    assert_eq!(
        reasons_of(&s),
        [
            "cidr 10.0.0.0/30 has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
        ]
    );
    // the platform can use the last addresses up too
    let mut s = spec("10.0.0.0/30");
    s.external_logical_switch = Some("ls-zstack-1".into());
    let mut ctx = external_ctx();
    if let Some(e) = ctx.external.as_mut() {
        e.platform_excludes
            .insert("ls-zstack-1".into(), vec![range("10.0.0.2", "10.0.0.2")]);
        e.switch_networks.clear();
    }
    assert_eq!(
        reasons(&s, &ctx),
        [
            "cidr 10.0.0.0/30 has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
        ]
    );
    // one address left is enough
    valid_of(&spec("10.0.0.0/30"));
    valid_of(&spec("10.0.0.0/31"));
}

#[test]
fn capacity_counts() {
    assert_eq!(capacity(&valid_of(&spec("10.0.0.0/24"))), 253);
    assert_eq!(capacity(&valid_of(&spec("10.0.0.0/31"))), 1);
    assert_eq!(capacity(&valid_of(&spec("fd00::/120"))), 254);
    assert_eq!(capacity(&valid_of(&spec("fd00::/64"))), (1u128 << 64) - 2);
    let mut s = spec("10.0.0.0/24,fd00::/120");
    s.exclude_ips = vec!["10.0.0.1..10.0.0.10".into(), "fd00::ff".into()];
    // v4: 256 - net - bcast - 10 (gateway inside the excludes); v6: 256 - net - gw - 1
    assert_eq!(capacity(&valid_of(&s)), 244 + 253);
    assert_eq!(family_capacity(&net("::/0"), ip("::1"), &[]), u128::MAX - 2);
}

// ---- everything at once --------------------------------------------------------------

#[test]
fn all_problems_collected() {
    let s = SubnetSpec {
        cidr: "10.0.0.0/24".into(),
        gateway: Some("10.1.0.1".into()),
        exclude_ips: vec!["nope".into()],
        protocol: Some("IPv6".into()),
        vlan_id: Some(5000),
        provider: None,
        external_logical_switch: Some("ls".into()),
        security_groups: vec![],
        namespaces: vec!["BAD".into()],
        default: false,
        nat_outgoing: None,
    };
    let p = validate("red", &s, &ValidationContext::default()).unwrap_err();
    let fields: Vec<&str> = p.iter().map(SubnetProblem::field).collect();
    assert_eq!(
        fields,
        [
            "protocol",
            "gateway",
            "excludeIPs",
            "vlanID",
            "externalLogicalSwitch",
            "namespaces"
        ]
    );
    for problem in &p {
        assert!(
            problem.to_string().starts_with(problem.field())
                || problem.to_string().starts_with("namespace"),
            "{problem}"
        );
    }
}

// ---- status --------------------------------------------------------------------------

#[test]
fn failed_status_joins_reasons() {
    let mut s = spec("10.0.0.0/24");
    s.vlan_id = Some(5000);
    s.gateway = Some("10.1.0.1".into());
    let p = validate("red", &s, &ValidationContext::default()).unwrap_err();
    let st = failed_status(&p);
    let want = "gateway 10.1.0.1 is outside cidr 10.0.0.0/24; vlanID 5000 is outside 1-4094";
    assert_eq!(st.phase, SubnetPhase::Failed);
    assert_eq!(st.reason, want);
    assert_eq!(st.available_ips, None);
    let c = st.condition("Ready").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert_eq!(c.message, want);
    assert_eq!(failed_status(&[]).reason, "the spec is invalid");
}

#[test]
fn active_status_numbers() {
    let v = valid_of(&spec("10.0.0.0/24,fd00::/120"));
    let mut pool = SubnetPool::new(&v).unwrap();
    let owner: Owner = "default/p".into();
    for _ in 0..3 {
        pool.allocate_next(Family::V4, &owner).unwrap();
    }
    let st = active_status(&v, "red", Some(pool.usage()));
    assert_eq!(st.phase, SubnetPhase::Active);
    assert_eq!(st.reason, "");
    assert_eq!(st.protocol.as_deref(), Some("Dual"));
    assert_eq!(st.gateway.as_deref(), Some("10.0.0.1,fd00::1"));
    assert_eq!(st.available_ips, Some(253.0 + 254.0 - 3.0));
    assert_eq!(st.used_ips, Some(3.0));
    assert_eq!(st.logical_switch.as_deref(), Some("red"));
    let c = st.condition("Ready").unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Active"));
    assert_eq!(
        c.message,
        "logical switch red serves 10.0.0.0/24,fd00::/120"
    );
    // JSON: numbers, printed plainly by kubectl
    let json = serde_json::to_value(&st).unwrap();
    assert_eq!(json["availableIPs"], serde_json::json!(504.0));
    assert_eq!(json["usedIPs"], serde_json::json!(3.0));
    assert!(json.get("reason").is_none());
    // no allocator yet: the Subnet's capacity, nothing used
    let fresh = active_status(&v, "red", None);
    assert_eq!(fresh.available_ips, Some(253.0 + 254.0));
    assert_eq!(fresh.used_ips, Some(0.0));
}

/// `availableIPs` is what the allocator can still hand out: an address handed out and
/// then excluded is used, not also subtracted as excluded (it was counted twice when the
/// status did its own arithmetic), and validation's capacity agrees with a fresh
/// allocator.
#[test]
fn available_ips_is_the_allocators_free_count() {
    let v = valid_of(&spec("10.0.0.0/29"));
    let mut pool = SubnetPool::new(&v).unwrap();
    assert_eq!(pool.usage().available, capacity(&v));
    let owner: Owner = "default/p".into();
    let ip = pool.allocate_next(Family::V4, &owner).unwrap();
    let mut excluded = spec("10.0.0.0/29");
    excluded.exclude_ips = vec![ip.to_string()];
    let v2 = valid_of(&excluded);
    pool.update(&v2).unwrap();
    let st = active_status(&v2, "red", Some(pool.usage()));
    // /29: 8 - network - broadcast - gateway = 5; one excluded but held by the pod
    assert_eq!(st.used_ips, Some(1.0));
    assert_eq!(st.available_ips, Some(4.0));
    assert_eq!(capacity(&v2), 4, "capacity excludes the held address");
}

#[test]
fn transition_times_kept_when_status_unchanged() {
    let v = valid_of(&spec("10.0.0.0/24"));
    let mut old = active_status(&v, "red", None);
    old.conditions[0].last_transition_time = t(5);
    let new = active_status(&v, "red", None)
        .keep_transition_times(Some(&old))
        .with_observed_generation(Some(7));
    assert_eq!(new.conditions[0].last_transition_time, t(5));
    assert_eq!(new.conditions[0].observed_generation, Some(7));
    let failed =
        failed_status(&[SubnetProblem::VlanOutOfRange(0)]).keep_transition_times(Some(&old));
    assert_ne!(failed.conditions[0].last_transition_time, t(5));
    let fresh = active_status(&v, "red", None).keep_transition_times(None);
    assert_ne!(fresh.conditions[0].last_transition_time, t(5));
}

// ---- properties ----------------------------------------------------------------------

/// Strings that look like addresses often enough to reach deep into the parsers.
fn addressish() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9a-f:./,\\- ]{0,40}",
        "([0-9]{1,3}\\.){3}[0-9]{1,3}(/[0-9]{1,3})?(,[0-9a-f:]{2,20}(/[0-9]{1,3})?)?",
        "([0-9]{1,3}\\.){3}[0-9]{1,3}(\\.\\.|-)([0-9]{1,3}\\.){3}[0-9]{1,3}",
    ]
}

fn any_spec() -> impl Strategy<Value = SubnetSpec> {
    (
        addressish(),
        proptest::option::of(addressish()),
        proptest::collection::vec(addressish(), 0..4),
        proptest::option::of(prop_oneof![
            any::<String>(),
            Just("IPv4".to_string()),
            Just("IPv6".to_string()),
            Just("Dual".to_string())
        ]),
        proptest::option::of(any::<i64>()),
        proptest::option::of(any::<String>()),
        proptest::option::of(prop_oneof![
            any::<String>(),
            Just("ls-zstack-1".to_string())
        ]),
        proptest::collection::vec(any::<String>(), 0..3),
        any::<bool>(),
    )
        .prop_map(
            |(
                cidr,
                gateway,
                exclude_ips,
                protocol,
                vlan_id,
                provider,
                ext,
                namespaces,
                default,
            )| {
                SubnetSpec {
                    cidr,
                    gateway,
                    exclude_ips,
                    protocol,
                    vlan_id,
                    provider,
                    external_logical_switch: ext,
                    security_groups: vec![],
                    namespaces,
                    default,
                    nat_outgoing: None,
                }
            },
        )
}

fn v4_net() -> impl Strategy<Value = IpNet> {
    (any::<u32>(), 8u8..=30)
        .prop_map(|(a, p)| {
            IpNet::new(IpAddr::V4(Ipv4Addr::from(a)), p)
                .unwrap()
                .trunc()
        })
        .prop_filter("not reserved", |n| {
            reserved_ranges().iter().all(|(_, r)| !overlaps(n, r))
        })
}

fn v6_net() -> impl Strategy<Value = IpNet> {
    (any::<u128>(), 48u8..=126)
        .prop_map(|(a, p)| {
            IpNet::new(IpAddr::V6(Ipv6Addr::from(a)), p)
                .unwrap()
                .trunc()
        })
        .prop_filter("not reserved", |n| {
            reserved_ranges().iter().all(|(_, r)| !overlaps(n, r))
        })
}

/// A gateway inside `n` that is not reserved, or `None` for the default.
fn gateway_in(n: IpNet) -> impl Strategy<Value = Option<IpAddr>> {
    let (v6, lo) = bits(n.network());
    let (_, hi) = bits(n.broadcast());
    proptest::option::of((lo + 1..hi).prop_map(move |b| from_bits(v6, b)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_specs_never_panic(s in any_spec(), created in proptest::option::of(0i64..10)) {
        let ctx = ValidationContext {
            created: created.map(t),
            others: [("blue".to_string(), OtherSubnet {
                cidrs: vec![net("10.0.0.0/8"), net("fd00::/16")],
                created: Some(t(5)),
                default: true,
                namespaces: vec!["a".into()],
                yields: false,
            })].into(),
            service_cidrs: vec![net("10.96.0.0/16")],
            join_cidrs: vec![net("100.64.0.0/16")],
            node_networks: vec![net("192.168.0.0/16")],
            external: created.map(|_| external_ctx().external.unwrap_or_default()),
            yields: false,
        };
        match validate("red", &s, &ctx) {
            Ok(v) => {
                prop_assert_eq!(v.cidrs.len(), v.gateways.len());
                prop_assert!(capacity(&v) > 0);
                let _ = active_status(&v, "red", None);
            }
            Err(p) => {
                prop_assert!(!p.is_empty());
                let st = failed_status(&p);
                prop_assert!(!st.reason.is_empty());
            }
        }
        let _ = OtherSubnet::from_spec(&s, None);
    }

    #[test]
    fn valid_single_stack_round_trips(
        (n, gw) in prop_oneof![v4_net(), v6_net()].prop_flat_map(|n| (Just(n), gateway_in(n))),
        with_protocol in any::<bool>(),
    ) {
        let mut s = spec(&n.to_string());
        s.gateway = gw.map(|g| g.to_string());
        if with_protocol {
            s.protocol = Some(if n.addr().is_ipv4() { "IPv4" } else { "IPv6" }.into());
        }
        let v = valid_of(&s);
        prop_assert_eq!(&v.cidrs, &vec![n]);
        prop_assert_eq!(v.protocol, if n.addr().is_ipv4() { Protocol::IPv4 } else { Protocol::IPv6 });
        prop_assert_eq!(v.gateways.clone(), vec![gw.unwrap_or_else(|| default_gateway(&n))]);
        prop_assert!(n.contains(&v.gateways[0]));
        prop_assert!(reserved_kind(&n, v.gateways[0]).is_none());
        prop_assert!(capacity(&v) > 0);
    }

    #[test]
    fn valid_dual_stack_round_trips(
        (n4, g4) in v4_net().prop_flat_map(|n| (Just(n), gateway_in(n))),
        (n6, g6) in v6_net().prop_flat_map(|n| (Just(n), gateway_in(n))),
        with_protocol in any::<bool>(),
    ) {
        let mut s = spec(&format!("{n4},{n6}"));
        let g4v = g4.unwrap_or_else(|| default_gateway(&n4));
        let g6v = g6.unwrap_or_else(|| default_gateway(&n6));
        if g4.is_some() || g6.is_some() {
            s.gateway = Some(format!("{g4v},{g6v}"));
        }
        if with_protocol {
            s.protocol = Some("Dual".into());
        }
        let v = valid_of(&s);
        prop_assert_eq!(v.protocol, Protocol::Dual);
        prop_assert_eq!(v.cidrs, vec![n4, n6]);
        prop_assert_eq!(v.gateways, vec![g4v, g6v]);
    }
}
