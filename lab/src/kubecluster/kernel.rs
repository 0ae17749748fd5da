//! Host kernel settings kubelet changes. With `--protect-kernel-defaults=false` (kubelet's
//! default) kubelet writes these at start; they are machine-wide (not per network
//! namespace), so `zovn cluster up` records them first and `down` writes them back.

use std::path::Path;

use tracing::info;

use crate::error::{LabError, Result};

/// What kubelet 1.20's container manager sets (pkg/kubelet/cm, setupKernelTunables).
pub const KUBELET_TUNABLES: &[&str] = &[
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/vm/panic_on_oom",
    "/proc/sys/kernel/panic",
    "/proc/sys/kernel/panic_on_oops",
    "/proc/sys/kernel/keys/root_maxkeys",
    "/proc/sys/kernel/keys/root_maxbytes",
];

/// The current values, `(path, value)`.
pub fn snapshot() -> Vec<(String, String)> {
    KUBELET_TUNABLES
        .iter()
        .filter_map(|p| {
            std::fs::read_to_string(p)
                .ok()
                .map(|v| (p.to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Writes back what [`snapshot`] recorded, where it changed.
pub fn restore(saved: &[(String, String)]) -> Result<()> {
    for (path, value) in saved {
        let now = std::fs::read_to_string(path).unwrap_or_default();
        if now.trim() != value {
            std::fs::write(path, value).map_err(|e| LabError::io("restore", Path::new(path), e))?;
            info!(%path, from = now.trim(), to = %value, "restored kernel setting");
        }
    }
    Ok(())
}
