//! The Service and endpoint model.

use std::net::IpAddr;

/// An L4 protocol of a Service port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    Tcp,
    Udp,
    Sctp,
}

/// A Service port's `protocol` that is none of Kubernetes' three.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("protocol {0:?} is not one of TCP, UDP, SCTP")]
pub struct UnknownProto(pub String);

impl Proto {
    /// Kubernetes' spelling (`TCP`); absent means TCP.
    pub fn parse(s: Option<&str>) -> Result<Proto, UnknownProto> {
        match s.unwrap_or("TCP") {
            "TCP" => Ok(Proto::Tcp),
            "UDP" => Ok(Proto::Udp),
            "SCTP" => Ok(Proto::Sctp),
            other => Err(UnknownProto(other.to_string())),
        }
    }

    /// Kubernetes' spelling.
    pub fn k8s(self) -> &'static str {
        match self {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
            Proto::Sctp => "SCTP",
        }
    }

    /// OVN's spelling (`Load_Balancer.protocol`).
    pub fn ovn(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        }
    }
}

/// `targetPort`: a number, or the name of a container port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

/// One port of a Service.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServicePort {
    /// Empty for a single unnamed port.
    pub name: String,
    pub protocol: Proto,
    pub port: u16,
    pub target_port: TargetPort,
    pub node_port: Option<u16>,
}

/// A Service as the control plane sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceInfo {
    pub namespace: String,
    pub name: String,
    /// `spec.clusterIPs` (or `spec.clusterIP`), parsed; empty when headless or not yet set.
    pub cluster_ips: Vec<IpAddr>,
    /// `clusterIP: None`: no load balancing, the Service is ignored.
    pub headless: bool,
    /// `ExternalName` Services are DNS only: ignored.
    pub external_name: bool,
    /// `NodePort` or `LoadBalancer`: served on every node's address at each `node_port`.
    pub node_ports: bool,
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` (type LoadBalancer).
    pub ingress_ips: Vec<IpAddr>,
    /// `sessionAffinity: ClientIP`: the affinity timeout in seconds.
    pub affinity_timeout: Option<u32>,
    /// `externalTrafficPolicy: Local`.
    pub external_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    /// What was wrong with the object (skipped parts); empty when all is well.
    pub problems: Vec<String>,
}

impl ServiceInfo {
    /// `<namespace>/<name>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// True when the Service gets load balancers (not headless, not ExternalName).
    pub fn balanced(&self) -> bool {
        !self.headless && !self.external_name
    }

    /// What a valid Service asks for that OVN cannot give it (reported as Warning events
    /// like [`Self::problems`], but the Service is not wrong: an apiserver accepts it).
    ///
    /// - `sessionAffinity: ClientIP` with `internalTrafficPolicy: Local`: the cluster IPs
    ///   are on template load balancers (the controller's `translate::service::local`), and OVN
    ///   23.03's northd builds the affinity flows of a template VIP as IPv6 and takes the
    ///   backends variable for one address (they never match, or ovn-controller cannot
    ///   parse them), so affinity is not set there.
    pub fn limitations(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.balanced() && self.internal_local && self.affinity_timeout.is_some() {
            out.push(
                "sessionAffinity: ClientIP is not applied to the cluster IPs of an \
                 internalTrafficPolicy: Local Service (OVN 23.03 template load balancers \
                 cannot keep affinity); node ports, externalIPs and ingress IPs keep it"
                    .to_string(),
            );
        }
        out
    }
}

/// One endpoint (a pod) of a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    pub addresses: Vec<IpAddr>,
    /// `conditions.ready` (absent means ready).
    pub ready: bool,
    /// `conditions.serving` (absent means the value of ready).
    pub serving: bool,
    /// `conditions.terminating` (absent means false).
    pub terminating: bool,
    pub node: Option<String>,
}

/// One port of a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointPort {
    /// The name of the Service port it serves (empty for an unnamed one).
    pub name: String,
    pub port: u16,
    pub protocol: Proto,
}

/// An EndpointSlice (or the one slice a core v1 `Endpoints` object amounts to).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointSliceInfo {
    pub namespace: String,
    pub name: String,
    /// The Service it belongs to (label `kubernetes.io/service-name`).
    pub service: String,
    pub endpoints: Vec<EndpointInfo>,
    pub ports: Vec<EndpointPort>,
}

impl EndpointSliceInfo {
    /// `<namespace>/<name>` of the slice.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `<namespace>/<service>`.
    pub fn service_key(&self) -> String {
        format!("{}/{}", self.namespace, self.service)
    }
}
