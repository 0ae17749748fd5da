//! Why an IPAM request was refused. Every message names the address, the subnet and,
//! where one exists, the current owner, so it can go straight into a pod event.

use std::net::IpAddr;

use crate::model::Mac;

use super::family::Family;
pub use super::family::ReservedKind;

/// An IPAM failure. IPAM state is unchanged whenever one is returned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpamError {
    #[error("{0} is not an IP address")]
    NotAnIp(String),

    #[error("{ip} is outside subnet {subnet} ({cidrs})")]
    OutsideSubnet {
        ip: IpAddr,
        subnet: String,
        cidrs: String,
    },

    #[error("{ip} is excluded in subnet {subnet}")]
    Excluded { ip: IpAddr, subnet: String },

    #[error("{ip} is the {kind} of subnet {subnet}")]
    Reserved {
        ip: IpAddr,
        subnet: String,
        kind: ReservedKind,
    },

    #[error("{ip} is already assigned to {owner}")]
    AlreadyAssigned { ip: IpAddr, owner: String },

    #[error("subnet {subnet} has no free {family} address")]
    Exhausted { subnet: String, family: Family },

    #[error("subnet {subnet} has no free {family} address left in ip_pool ({pool})")]
    PoolExhausted {
        subnet: String,
        family: Family,
        pool: String,
    },

    #[error("no address of ip_pool ({pool}) is inside subnet {subnet} ({cidrs})")]
    PoolOutsideSubnet {
        pool: String,
        subnet: String,
        cidrs: String,
    },

    #[error("{first} and {second} are both {family}: request at most one address per family")]
    DuplicateFamily {
        first: IpAddr,
        second: IpAddr,
        family: Family,
    },

    #[error("MAC {mac} is already assigned to {owner}")]
    MacInUse { mac: Mac, owner: String },

    #[error("could not generate a MAC address unused in the cluster")]
    MacExhausted,

    #[error(
        "{owner} already holds {held} in subnet {subnet}, not the requested {requested}; release it first"
    )]
    LeaseMismatch {
        owner: String,
        subnet: String,
        held: String,
        requested: String,
    },

    #[error("{owner} already has addresses in subnet {held}, not {requested}; release it first")]
    SubnetMismatch {
        owner: String,
        held: String,
        requested: String,
    },

    #[error(
        "restore conflict in subnet {subnet}: {claimed} claimed by {claimant} is already assigned to {owner}"
    )]
    RestoreConflict {
        subnet: String,
        claimed: String,
        claimant: String,
        owner: String,
    },

    #[error("nothing to restore for {0}: no IP address given")]
    NothingToRestore(String),

    #[error("unknown subnet {0}")]
    UnknownSubnet(String),

    #[error("subnet {0} already exists")]
    SubnetExists(String),

    #[error("subnet {subnet}: {reason}")]
    BadSubnet { subnet: String, reason: String },

    #[error("subnet {subnet} is still used by {}: release them first", owners.join(", "))]
    SubnetInUse { subnet: String, owners: Vec<String> },

    #[error(
        "subnet {subnet}: CIDRs cannot change from {old} to {new} while {used} addresses are in use"
    )]
    CidrChangeInUse {
        subnet: String,
        old: String,
        new: String,
        used: u128,
    },

    #[error("invalid owner key {0:?}: expected <namespace>/<name>")]
    BadKey(String),
}
