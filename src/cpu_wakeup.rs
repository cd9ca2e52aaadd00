//! Holding the kernel's CPU wake-up latency limit while the server runs
//! (`--cpu-wakeup-latency-us`).
//!
//! An idle CPU sleeps in the deepest state the kernel allows, and waking it for the next
//! request takes time: on the project's virtual machines about 20 us per wake-up, paid twice
//! per round trip at concurrency 1 (the server's CPU when the request arrives, the client's
//! when the answer does), more than the server's own work on a small request. Linux's PM QoS
//! interface lets a process cap that wake-up latency for as long as it keeps
//! `/dev/cpu_dma_latency` open with the cap written to it; at 0 idle CPUs poll instead of
//! sleeping. The cap is machine-wide and costs power and, on a virtual machine, host CPU time
//! while idle, which is why it is an operator's choice and off by default (the same setting
//! `tuned`'s latency-performance profile makes).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// The kernel's PM QoS interface for the CPU wake-up latency.
pub const PM_QOS_DEVICE: &str = "/dev/cpu_dma_latency";

/// Why the cap could not be set.
#[derive(Debug, thiserror::Error)]
pub enum WakeupLatencyError {
    #[error("cannot open {path} to hold the CPU wake-up latency at {micros} us (it needs root or write access to the device; leave --cpu-wakeup-latency-us unset otherwise): {source}")]
    Open {
        path: String,
        micros: u32,
        source: std::io::Error,
    },
    #[error("cannot write the CPU wake-up latency cap of {micros} us to {path}: {source}")]
    Write {
        path: String,
        micros: u32,
        source: std::io::Error,
    },
    #[error("a CPU wake-up latency cap of {0} us is more than the kernel takes")]
    TooLarge(u32),
}

/// The cap, in force until this is dropped (closing the file releases it).
#[derive(Debug)]
pub struct WakeupLatencyHold {
    _device: File,
    micros: u32,
}

impl WakeupLatencyHold {
    /// Caps the CPU wake-up latency at `micros` through [`PM_QOS_DEVICE`].
    pub fn hold(micros: u32) -> Result<Self, WakeupLatencyError> {
        Self::hold_at(Path::new(PM_QOS_DEVICE), micros)
    }

    /// As [`hold`](Self::hold), through the device at `path`.
    pub fn hold_at(path: &Path, micros: u32) -> Result<Self, WakeupLatencyError> {
        let shown = || path.display().to_string();
        // The kernel reads one native-endian 32-bit signed value.
        let value = i32::try_from(micros).map_err(|_| WakeupLatencyError::TooLarge(micros))?;
        let mut device = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|source| WakeupLatencyError::Open {
                path: shown(),
                micros,
                source,
            })?;
        device
            .write_all(&value.to_ne_bytes())
            .map_err(|source| WakeupLatencyError::Write {
                path: shown(),
                micros,
                source,
            })?;
        Ok(Self {
            _device: device,
            micros,
        })
    }

    /// The cap held.
    pub fn micros(&self) -> u32 {
        self.micros
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_written_as_the_kernel_reads_it() {
        let path = std::env::temp_dir().join(format!("cpu_dma_latency-{}", std::process::id()));
        std::fs::write(&path, b"").expect("device stand-in");
        let hold = WakeupLatencyHold::hold_at(&path, 7).expect("held");
        assert_eq!(hold.micros(), 7);
        let written = std::fs::read(&path).ok();
        let _ = std::fs::remove_file(&path);
        assert_eq!(written, Some(7i32.to_ne_bytes().to_vec()));
    }

    #[test]
    fn a_device_that_cannot_be_opened_is_an_error_that_names_it() {
        let err = WakeupLatencyHold::hold_at(Path::new("/nonexistent/cpu_dma_latency"), 0)
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        assert!(err.contains("/nonexistent/cpu_dma_latency"), "{err}");
        assert!(err.contains("--cpu-wakeup-latency-us"), "{err}");
    }

    #[test]
    fn a_cap_beyond_the_kernels_range_is_refused() {
        let err = WakeupLatencyHold::hold_at(Path::new("/dev/null"), u32::MAX).err();
        assert!(matches!(err, Some(WakeupLatencyError::TooLarge(_))));
    }
}
