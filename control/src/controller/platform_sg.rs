//! External mode: the platform's security groups our pods are in, read from the NB with
//! their ACLs, for NetworkPolicy on top of them ([`crate::netpol::platform_sg`]).

use std::collections::{BTreeMap, BTreeSet};

use ovsdb::nb::{Acl, PortGroup};
use ovsdb::replica::View;

use crate::netpol::platform_sg::PlatformGroup;

/// The groups of `membership` (a platform group's name → our ports in it) with the ACLs
/// the NB holds for each; a group the NB lacks has none (its Subnet is refused anyway).
pub fn platform_groups(
    view: &View<'_>,
    membership: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<PlatformGroup> {
    let wanted = membership.iter().filter(|(_, ports)| !ports.is_empty());
    let read = view
        .typed::<PortGroup>()
        .and_then(|g| Ok((g, view.typed::<Acl>()?)));
    let (groups, acls) = match read {
        Ok(r) => r,
        Err(e) => {
            // cannot happen with a schema-checked replica; if it does, fail closed
            tracing::warn!(error = %e, "cannot read the platform's security groups");
            return wanted
                .map(|(name, ports)| PlatformGroup {
                    name: name.clone(),
                    members: ports.clone(),
                    acls: Vec::new(),
                    unreadable: true,
                })
                .collect();
        }
    };
    let rows: BTreeMap<&str, &PortGroup> = groups
        .iter()
        .filter(|g| membership.contains_key(&g.name))
        .map(|g| (g.name.as_str(), g))
        .collect();
    let acls: BTreeMap<ovsdb::Uuid, &Acl> = acls.iter().map(|a| (a.uuid, a)).collect();
    wanted
        .map(|(name, ports)| PlatformGroup {
            name: name.clone(),
            members: ports.clone(),
            acls: rows
                .get(name.as_str())
                .into_iter()
                .flat_map(|g| {
                    g.acls
                        .iter()
                        .filter_map(|u| acls.get(u).map(|a| (*a).clone()))
                })
                .collect(),
            unreadable: false,
        })
        .collect()
}
