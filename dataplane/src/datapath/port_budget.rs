//! The node's AF_XDP port budget as the datapath decision chooses it (`afxdp.maxPorts`, or
//! a share of the node's memory); [`crate::attach::afxdp_budget`] enforces it per pod.

use serde::{Deserialize, Serialize};

/// What one AF_XDP queue costs ovs-vswitchd (64 MiB umem plus rings and buffers;
/// measured 73 MiB per single-queue pod).
pub const MIB_PER_QUEUE: u64 = 72;
/// The share of the node's memory the default budget spends on AF_XDP ports.
pub const DEFAULT_MEMORY_PERCENT: u64 = 10;

/// The budget the decision chose, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortBudget {
    /// `None`: no limit (the node's memory is unknown and nothing was configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ports: Option<u32>,
    /// Why this number, for the operator.
    pub source: String,
}

impl PortBudget {
    /// `afxdp.maxPorts` when configured, else [`DEFAULT_MEMORY_PERCENT`] of the node's
    /// `MemTotal` (kB) at [`MIB_PER_QUEUE`] × `queues` per port.
    pub fn decide(configured: Option<u32>, queues: u32, mem_total_kib: Option<u64>) -> Self {
        if let Some(n) = configured {
            return PortBudget {
                max_ports: Some(n),
                source: format!("afxdp.maxPorts {n}"),
            };
        }
        let per_port_mib = MIB_PER_QUEUE * u64::from(queues.max(1));
        match mem_total_kib {
            Some(kib) => {
                let share_mib = kib / 1024 * DEFAULT_MEMORY_PERCENT / 100;
                let n = u32::try_from(share_mib / per_port_mib).unwrap_or(u32::MAX);
                PortBudget {
                    max_ports: Some(n),
                    source: format!(
                        "default: {DEFAULT_MEMORY_PERCENT} % of the node's {} MiB at {per_port_mib} MiB per port ({queues} queue(s) × {MIB_PER_QUEUE} MiB umem)",
                        kib / 1024
                    ),
                }
            }
            None => PortBudget {
                max_ports: None,
                source: "unlimited: /proc/meminfo unreadable and no afxdp.maxPorts".into(),
            },
        }
    }
}
