//! Fixtures shared by the unit tests of the Service code.

use super::{EndpointInfo, EndpointPort, EndpointSliceInfo, Proto};

/// An endpoint on `node` with `ips`, ready or not (serving = ready, not terminating).
pub(crate) fn endpoint(ips: &[&str], node: &str, ready: bool) -> EndpointInfo {
    EndpointInfo {
        addresses: ips.iter().map(|i| i.parse().expect("ip")).collect(),
        ready,
        serving: ready,
        terminating: false,
        node: Some(node.into()),
    }
}

/// A slice `<service>-1` of Service `<namespace>/<service>` with `ports` (name, port,
/// protocol).
pub(crate) fn slice(
    namespace: &str,
    service: &str,
    endpoints: Vec<EndpointInfo>,
    ports: &[(&str, u16, Proto)],
) -> EndpointSliceInfo {
    EndpointSliceInfo {
        namespace: namespace.into(),
        name: format!("{service}-1"),
        service: service.into(),
        endpoints,
        ports: ports
            .iter()
            .map(|(name, port, protocol)| EndpointPort {
                name: (*name).into(),
                port: *port,
                protocol: *protocol,
            })
            .collect(),
    }
}
