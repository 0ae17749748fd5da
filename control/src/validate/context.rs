//! What a Subnet is validated against: the other Subnets, the cluster's networks, the
//! platform's switch in external mode (gathered by the caller).

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::SubnetSpec;
use crate::model::IpRange;

/// Everything validation checks a Subnet against, gathered by the caller.
#[derive(Clone, Debug, Default)]
pub struct ValidationContext {
    /// `metadata.creationTimestamp` of the Subnet being validated (`None`: not stored yet,
    /// which counts as newest).
    pub created: Option<Time>,
    /// All other Subnets by name (an entry with the validated Subnet's own name is ignored).
    pub others: BTreeMap<String, OtherSubnet>,
    /// The cluster's service CIDR(s).
    pub service_cidrs: Vec<IpNet>,
    /// The join (node-to-pod) CIDR(s).
    pub join_cidrs: Vec<IpNet>,
    /// The node/underlay networks, when known (host prefixes like `/32` are fine).
    pub node_networks: Vec<IpNet>,
    /// `Some` in external mode (the controller shares the platform's OVN), `None` standalone.
    pub external: Option<ExternalContext>,
    /// The validated Subnet is the controller-managed default: it counts as newest.
    pub yields: bool,
}

/// Another Subnet, as far as conflicts go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtherSubnet {
    pub cidrs: Vec<IpNet>,
    pub created: Option<Time>,
    pub default: bool,
    pub namespaces: Vec<String>,
    /// The controller-managed default Subnet: it counts as newest.
    pub yields: bool,
}

impl OtherSubnet {
    /// Reads another Subnet's spec leniently: every CIDR entry that parses counts (host bits
    /// cleared), whether or not that Subnet is itself valid.
    pub fn from_spec(spec: &SubnetSpec, created: Option<Time>) -> Self {
        OtherSubnet {
            cidrs: spec
                .cidr
                .split(',')
                .filter_map(|c| c.trim().parse::<IpNet>().ok())
                .map(|c| c.trunc())
                .collect(),
            created,
            default: spec.default,
            namespaces: spec.namespaces.clone(),
            yields: false,
        }
    }
}

/// External mode: what the platform's Northbound database holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExternalContext {
    /// Names of the Logical_Switch rows in the Northbound database.
    pub switches: BTreeSet<String>,
    /// Per switch: addresses already used by the platform's own ports.
    pub platform_excludes: BTreeMap<String, Vec<IpRange>>,
    /// Per switch: the networks the platform declares for it, with where it says so
    /// (`other_config:subnet` / `ipv6_prefix`, or the networks of a router port on it).
    pub switch_networks: BTreeMap<String, Vec<(ipnet::IpNet, String)>>,
    /// The platform's Port_Group names (ours left out).
    pub port_groups: BTreeSet<String>,
    /// Whether pods may join them (`--platform-security-groups`).
    pub security_groups: bool,
}
