//! What a model version costs in memory, and the budget that bounds the sum.
//!
//! A version's load is measured once, with its warmup: the process's resident memory before
//! and after (loads are measured one at a time, so two loads never share a figure), but never
//! less than the size of its model files, which the runtime reads in whole. With glibc,
//! malloc's free memory is returned to the system before each reading (see `trim`), so the
//! difference is what the version keeps; elsewhere memory the allocator keeps after an
//! earlier unload can make it small, and the file size is the floor for that case. What the
//! version's runtime comes to hold beyond that as it serves is added to its charge (see
//! `charge`). Tests that need exact figures measure loads by file size alone
//! ([`MemoryMeter::FileSize`]): process memory moves with everything else the process does.

use std::path::Path;
use std::sync::Mutex;

use super::scan::files_under;

/// How a load's memory is measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MemoryMeter {
    /// Resident memory before and after the load, at least the model files' size.
    #[default]
    ProcessResident,
    /// The model files' size: exact and repeatable.
    FileSize,
}

/// Serialises measured loads: a load measured while another runs would count both.
#[derive(Default)]
pub struct LoadMeasure {
    meter: MemoryMeter,
    one_at_a_time: Mutex<()>,
}

impl LoadMeasure {
    pub fn new(meter: MemoryMeter) -> Self {
        Self {
            meter,
            one_at_a_time: Mutex::new(()),
        }
    }

    /// Runs `load` (which blocks) alone, and returns its result with the bytes it took.
    pub fn measure<T, E>(
        &self,
        files: &Path,
        load: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, u64), E> {
        let _alone = self
            .one_at_a_time
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let by_resident = self.meter == MemoryMeter::ProcessResident;
        // Freed memory the allocator keeps would count on one side or the other: give it
        // back first, so that the difference is what the loaded version holds, not the
        // load's transient buffers (the file's bytes, the graph being optimised).
        if by_resident {
            super::trim::release_freed_memory();
        }
        let before = resident_bytes();
        let loaded = load()?;
        if by_resident {
            super::trim::release_freed_memory();
        }
        let floor = files_size(files);
        let bytes = match (self.meter, before, resident_bytes()) {
            (MemoryMeter::ProcessResident, Some(before), Some(after)) => {
                after.saturating_sub(before).max(floor)
            }
            _ => floor,
        };
        Ok((loaded, bytes))
    }
}

/// The process's resident memory (`VmRSS`), where the system reports it.
pub fn resident_bytes() -> Option<u64> {
    status_field("VmRSS:")
}

/// The most resident memory the process has had (`VmHWM`).
pub fn peak_resident_bytes() -> Option<u64> {
    status_field("VmHWM:")
}

fn status_field(name: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kib(&status, name)
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn parse_status_kib(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(name))?;
    let kib: u64 = line
        .strip_prefix(name)?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The bytes of every file under `path` (or of `path`, a file), links followed within the
/// bounds of [`files_under`]. Blocks.
pub fn files_size(path: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    files_under(path)
        .iter()
        .filter_map(|file| std::fs::metadata(file).ok())
        .map(|meta| meta.len())
        .fold(0u64, u64::saturating_add)
}

/// Parses a size: bytes, or a number with `KiB`, `MiB`, `GiB` (also `K`, `M`, `G`, `KB`,
/// `MB`, `GB`, all powers of 1024), for `--model-memory-budget`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| {
        format!("'{text}' is not a size: give bytes, or a number with KiB, MiB or GiB")
    })?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "'{text}': unknown unit '{other}' (use KiB, MiB, GiB or TiB)"
            ))
        }
    };
    let bytes = number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))?;
    if bytes == 0 {
        return Err("a memory budget of 0 bytes would serve nothing".into());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_bytes_and_binary_units() {
        assert_eq!(parse_size("1500"), Ok(1500));
        assert_eq!(parse_size("200MiB"), Ok(200 << 20));
        assert_eq!(parse_size("200 MiB"), Ok(200 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("64kb"), Ok(64 << 10));
        assert!(parse_size("0").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("18446744073709551615GiB").is_err());
    }

    #[test]
    fn reads_resident_memory_in_bytes() {
        let status = "Name:\ttensorport\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(1024 * 1024));
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(2048 * 1024));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
        assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
    }

    #[test]
    fn a_load_costs_at_least_its_files() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("tensorport-budget-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub"))?;
        std::fs::write(dir.join("a"), vec![0u8; 1000])?;
        std::fs::write(dir.join("sub").join("b"), vec![0u8; 24])?;
        let exact = LoadMeasure::new(MemoryMeter::FileSize);
        let measured = LoadMeasure::new(MemoryMeter::ProcessResident);
        let by_files = exact.measure(&dir, || Ok::<_, ()>(()));
        let by_memory = measured.measure(&dir, || Ok::<_, ()>(()));
        std::fs::remove_dir_all(&dir)?;
        assert_eq!(by_files, Ok(((), 1024)));
        assert!(by_memory.is_ok_and(|(_, bytes)| bytes >= 1024));
        Ok(())
    }
}
