//! Whether the server has CPU to spare for work no client waits for (shadow copies): the
//! share of its CPUs the process used over the last window, read from its CPU-time clock.
//!
//! Requests in flight do not tell: a request that runs inline on its connection's task is in
//! flight only while it runs, so a saturated single-core server shows one at a time. CPU time
//! does tell, and counts the copies' own use, so that copies throttle themselves before they
//! take the time clients need.

use std::time::{Duration, Instant};

use rustix::time::{clock_gettime, ClockId};

/// Copies stop while the process uses more than this share of its CPUs.
pub const BUSY_SHARE: f64 = 0.75;
/// How often the share is measured, at most; between two measurements the last one holds.
pub const WINDOW: Duration = Duration::from_millis(50);

/// The process's CPU use, sampled by whoever asks (one shadow worker: no sharing needed).
pub struct Headroom {
    cpus: f64,
    last: Option<(Instant, Duration)>,
    busy: bool,
}

impl Headroom {
    /// For a process that may use `cpus` CPUs.
    pub fn new(cpus: usize) -> Self {
        Self {
            cpus: cpus.max(1) as f64,
            last: None,
            busy: false,
        }
    }

    /// Whether the process used more than [`BUSY_SHARE`] of its CPUs over the window that
    /// ended last; the first call only starts the clock.
    pub fn busy(&mut self) -> bool {
        self.busy_at(Instant::now(), process_cpu_time())
    }

    fn busy_at(&mut self, now: Instant, cpu: Duration) -> bool {
        let Some((since, cpu_then)) = self.last else {
            self.last = Some((now, cpu));
            return false;
        };
        let wall = now.saturating_duration_since(since);
        if wall >= WINDOW {
            let used = cpu.saturating_sub(cpu_then).as_secs_f64() / wall.as_secs_f64();
            self.busy = used > BUSY_SHARE * self.cpus;
            self.last = Some((now, cpu));
        }
        self.busy
    }
}

fn process_cpu_time() -> Duration {
    let time = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_when_the_window_used_more_than_the_share_of_the_cpus() {
        let start = Instant::now();
        let mut two_cpus = Headroom::new(2);
        assert!(!two_cpus.busy_at(start, Duration::ZERO));
        // 100 ms of wall time, 160 ms of CPU on two CPUs: 80%, above three quarters.
        let later = start + Duration::from_millis(100);
        assert!(two_cpus.busy_at(later, Duration::from_millis(160)));
        // Within the next window the last measurement holds.
        assert!(two_cpus.busy_at(
            later + Duration::from_millis(10),
            Duration::from_millis(160)
        ));
        // Then 100 ms with 20 ms of CPU: idle enough again.
        let idle = later + Duration::from_millis(100);
        assert!(!two_cpus.busy_at(idle, Duration::from_millis(180)));
    }

    #[test]
    fn the_clock_reads_this_process_cpu_time() {
        let before = process_cpu_time();
        let mut spin = 0u64;
        while process_cpu_time() <= before {
            spin = spin.wrapping_add(1);
        }
        assert!(process_cpu_time() > before, "{spin}");
    }
}
