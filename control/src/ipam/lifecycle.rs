//! Subnet lifecycle on [`Ipam`]: add, update, remove, usage.

use crate::model::ValidSubnet;

use super::{Ipam, IpamError, SubnetPool, Usage};

impl Ipam {
    /// Starts serving `spec`. Refused if a subnet of that name exists.
    pub fn add_subnet(&mut self, spec: &ValidSubnet) -> Result<(), IpamError> {
        if self.subnets.contains_key(&spec.name) {
            return Err(IpamError::SubnetExists(spec.name.clone()));
        }
        let pool = SubnetPool::new(spec)?;
        self.subnets.insert(spec.name.clone(), pool);
        Ok(())
    }

    /// Applies a changed spec: new excludes and gateway take effect at once for new
    /// requests, addresses already handed out stay valid. CIDRs may change only while
    /// the subnet is unused.
    pub fn update_subnet(&mut self, spec: &ValidSubnet) -> Result<(), IpamError> {
        self.subnets
            .get_mut(&spec.name)
            .ok_or_else(|| IpamError::UnknownSubnet(spec.name.clone()))?
            .update(spec)
    }

    /// [`add_subnet`](Self::add_subnet) or [`update_subnet`](Self::update_subnet), for
    /// reconcilers that see every version of a Subnet.
    pub fn apply_subnet(&mut self, spec: &ValidSubnet) -> Result<(), IpamError> {
        if self.subnets.contains_key(&spec.name) {
            self.update_subnet(spec)
        } else {
            self.add_subnet(spec)
        }
    }

    /// Stops serving subnet `name`. **Refused while any address is in use**: the error
    /// lists the owners (pod keys, VM keys), so the caller can report who blocks the
    /// deletion. Removing an unknown subnet is a no-op.
    pub fn remove_subnet(&mut self, name: &str) -> Result<(), IpamError> {
        let Some(pool) = self.subnets.get(name) else {
            return Ok(());
        };
        let owners = pool.owners();
        if !owners.is_empty() {
            return Err(IpamError::SubnetInUse {
                subnet: name.to_string(),
                owners: owners.iter().map(|o| o.to_string()).collect(),
            });
        }
        self.subnets.remove(name);
        Ok(())
    }

    /// `(available, used)` addresses of subnet `name`, both families summed.
    pub fn usage(&self, name: &str) -> Result<Usage, IpamError> {
        self.subnets
            .get(name)
            .map(SubnetPool::usage)
            .ok_or_else(|| IpamError::UnknownSubnet(name.to_string()))
    }

    /// The spec IPAM serves for subnet `name`.
    pub fn subnet_spec(&self, name: &str) -> Option<&ValidSubnet> {
        self.subnets.get(name).map(SubnetPool::spec)
    }

    /// Names of the subnets served, sorted.
    pub fn subnet_names(&self) -> impl Iterator<Item = &str> {
        self.subnets.keys().map(String::as_str)
    }
}
