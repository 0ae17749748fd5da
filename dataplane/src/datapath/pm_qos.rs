//! The CPU wake-up latency the agent asks the kernel for (`cpuDmaLatencyUs`), through
//! the PM QoS device `/dev/cpu_dma_latency` — what tuned's `network-latency` and
//! `cpu-partitioning` profiles do with `force_latency`.
//!
//! Why a datapath setting: with a PMD thread on its own core, every packet a pod receives
//! is handed over from that core to the pod's core. When the pod's core is idle in a deep
//! C-state (or, in a VM, halted: a wake-up is a VM exit), that hand-over costs tens of
//! µs per packet. A request of 0 keeps idle CPUs polling instead; small values allow only
//! shallow states. The price is power (and, in a VM, host CPU time) while CPUs idle.
//!
//! The kernel keeps a request only while the file descriptor that made it is open, so the
//! request lives exactly as long as the agent (a crash releases it) and there is nothing
//! to clean up or to leak.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Device path below the root the manager probes (`/`).
pub const DEVICE: &str = "dev/cpu_dma_latency";

/// Largest request the kernel accepts (`PM_QOS_DEFAULT_VALUE`-style s32 range, µs).
pub const MAX_US: u32 = 2_000_000_000;

#[derive(Debug, thiserror::Error)]
pub enum PmQosError {
    #[error("cpuDmaLatencyUs {0} is larger than {MAX_US}")]
    OutOfRange(u32),
    #[error("cpuDmaLatencyUs: cannot open {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cpuDmaLatencyUs: writing {value} to {path}: {source}")]
    Write {
        path: String,
        value: u32,
        #[source]
        source: std::io::Error,
    },
}

/// The agent's one PM QoS request (none, or a value held through an open descriptor).
#[derive(Debug, Default)]
pub struct PmQos {
    held: Option<(File, u32)>,
}

impl PmQos {
    /// The value currently requested, if any.
    pub fn held(&self) -> Option<u32> {
        self.held.as_ref().map(|(_, v)| *v)
    }

    /// Makes the request `want` (or releases it for `None`). Idempotent: nothing happens
    /// when `want` is already held. On error the previous request is released, so the
    /// node never keeps a value the operator no longer asks for.
    pub fn set(&mut self, root: &Path, want: Option<u32>) -> Result<(), PmQosError> {
        if self.held() == want {
            return Ok(());
        }
        let Some(value) = want else {
            tracing::info!("datapath: releasing the CPU wake-up latency request");
            self.held = None;
            return Ok(());
        };
        if value > MAX_US {
            self.held = None;
            return Err(PmQosError::OutOfRange(value));
        }
        let path = root.join(DEVICE);
        // an open descriptor can be rewritten in place: the kernel updates the request
        let mut file = match self.held.take() {
            Some((f, _)) => f,
            None => open(&path)?,
        };
        // the device takes a native-endian s32
        let bytes = (value as i32).to_ne_bytes();
        file.write_all(&bytes).map_err(|source| PmQosError::Write {
            path: path.display().to_string(),
            value,
            source,
        })?;
        tracing::info!(
            us = value,
            "datapath: holding the CPU wake-up latency request"
        );
        self.held = Some((file, value));
        Ok(())
    }
}

fn open(path: &PathBuf) -> Result<File, PmQosError> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|source| PmQosError::Open {
            path: path.display().to_string(),
            source,
        })
}

/// The latency the kernel currently enforces (the minimum over every holder), in µs.
pub fn effective(root: &Path) -> Option<u32> {
    let mut f = File::open(root.join(DEVICE)).ok()?;
    let mut b = [0u8; 4];
    f.read_exact(&mut b).ok()?;
    u32::try_from(i32::from_ne_bytes(b)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // A plain file stands in for the device here (the kernel's behaviour — the request
    // lives while the descriptor is open — is checked on the real device by
    // tests/tests/node_suite/datapath.rs).
    fn root() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("dev")).unwrap();
        std::fs::write(d.path().join(DEVICE), b"").unwrap();
        d
    }

    #[test]
    fn request_is_written_once_and_released() {
        let r = root();
        let mut q = PmQos::default();
        q.set(r.path(), Some(7)).unwrap();
        q.set(r.path(), Some(7)).unwrap();
        assert_eq!(q.held(), Some(7));
        assert_eq!(
            std::fs::read(r.path().join(DEVICE)).unwrap(),
            7i32.to_ne_bytes(),
            "written once"
        );
        q.set(r.path(), None).unwrap();
        assert_eq!(q.held(), None);
    }

    #[test]
    fn errors_name_the_problem_and_release() {
        let r = root();
        let mut q = PmQos::default();
        q.set(r.path(), Some(3)).unwrap();
        let e = q.set(r.path(), Some(MAX_US + 1)).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
        assert_eq!(q.held(), None);
        let missing = tempfile::tempdir().unwrap();
        let e = q.set(missing.path(), Some(0)).unwrap_err().to_string();
        assert!(e.contains("cpu_dma_latency"), "{e}");
    }
}
