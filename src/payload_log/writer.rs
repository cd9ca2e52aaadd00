//! A model's payload-log writer: requests offer records with [`PayloadWriter::offer`], which
//! never waits (a full queue drops and counts the record), and a thread of the writer's own
//! takes the queued records every few milliseconds, encodes them and appends them to rotating
//! files (see `files`), writing about once a second. A record is counted written only once it
//! is whole in its file; a failed write counts each record it lost, and the writer keeps what
//! it lost for the readiness detail ([`PayloadWriter::losses`]). Dropping the writer writes
//! what is queued, then closes its file.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::metrics::PayloadLogCounts;

use super::config::PayloadLogConfig;
use super::files::Files;
use super::record::PayloadRecord;
use super::shared::{Shared, WriteLosses};

/// The writer thread's nice value (0 is the default, 19 the lowest priority).
const WRITER_NICE: i32 = 10;
/// How often the thread takes what is queued.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// One model's writer.
pub struct PayloadWriter {
    config: PayloadLogConfig,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The sampling draws: a counter run through SplitMix64's finaliser.
    draws: AtomicU64,
    ids: AtomicU64,
}

impl PayloadWriter {
    /// Starts the thread; files are opened with the first record.
    pub fn start(model: &str, config: PayloadLogConfig, counts: PayloadLogCounts) -> Self {
        let shared = Arc::new(Shared::new(model, counts));
        let mut files = Files::new(&config, shared.clone());
        let thread = std::thread::Builder::new()
            .name(format!("payload-log-{model}"))
            .spawn(move || {
                // On Linux a nice value is per thread: this one yields the CPU to the threads
                // answering requests when both want it, in place of holding it for its turn.
                let _ = rustix::process::setpriority_process(None, WRITER_NICE);
                let mut batch = Vec::new();
                loop {
                    let closed = files.queue().take(&mut batch);
                    for (record, _) in batch.drain(..) {
                        files.write(&record);
                    }
                    if closed {
                        return files.close();
                    }
                    files.flush_if_due();
                    std::thread::park_timeout(DRAIN_EVERY);
                }
            });
        let thread = match thread {
            Ok(thread) => Some(thread),
            Err(err) => {
                tracing::warn!(model, "payload log could not start its writer: {err}");
                None
            }
        };
        Self {
            config,
            shared,
            thread,
            draws: AtomicU64::new(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| since.as_nanos() as u64),
            ),
            ids: AtomicU64::new(0),
        }
    }

    pub fn config(&self) -> &PayloadLogConfig {
        &self.config
    }

    /// What failed writes have lost, for the readiness detail; `None` while nothing was.
    pub fn losses(&self) -> Option<WriteLosses> {
        self.shared.losses()
    }

    /// Whether to log this request: a draw, before anything is copied.
    pub fn sampled(&self) -> bool {
        let sample = self.config.sample;
        if sample >= 1.0 {
            return true;
        }
        // 53 random bits as a share in [0, 1).
        let draw = (splitmix(
            self.draws
                .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed),
        ) >> 11) as f64
            / (1u64 << 53) as f64;
        sample > 0.0 && draw < sample
    }

    /// A number for the next record's `id`.
    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Queues `record` for the thread, or drops and counts it when the queue is full (by
    /// records or bytes): never waits.
    pub fn offer(&self, record: PayloadRecord) {
        let bytes = tensor_bytes(&record);
        let refused = match &self.thread {
            Some(_) => match self.shared.queue.push(record, bytes) {
                Ok(()) => return,
                Err(why) => why,
            },
            None => "the writer did not start",
        };
        self.shared.refused(&refused);
    }
}

impl Drop for PayloadWriter {
    fn drop(&mut self) {
        self.shared.queue.close();
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn tensor_bytes(record: &PayloadRecord) -> usize {
    let size = |(_, tensor): &crate::backend::NamedTensor| match tensor.bytes() {
        Some(bytes) => bytes.len(),
        None => tensor
            .string_elements()
            .map_or(0, |s| s.iter().map(|e| e.len() + 8).sum()),
    };
    record
        .inputs
        .iter()
        .chain(&record.outputs)
        .map(size)
        .sum::<usize>()
        + 256
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use super::super::config::{Destination, LogFormat};
    use super::*;
    use crate::tensor::Tensor;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("paylog-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_file(&dir);
        dir
    }

    fn config(destination: Destination, format: LogFormat, max: u64) -> PayloadLogConfig {
        PayloadLogConfig {
            destination,
            sample: 1.0,
            format,
            max_file_bytes: max,
            shadow: false,
        }
    }

    fn record(id: u64) -> PayloadRecord {
        PayloadRecord {
            model: "m".into(),
            version: 1,
            signature: String::new(),
            id,
            timestamp: SystemTime::now(),
            sample: 1.0,
            origin: "",
            inputs: vec![(
                "x".into(),
                Tensor::from_vec(vec![2], vec![1f32, 2.0]).unwrap(),
            )],
            outputs: vec![],
        }
    }

    fn files(dir: &PathBuf) -> Vec<PathBuf> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn records_land_in_files_that_rotate_and_dropping_flushes() {
        let dir = temp_dir("rotate");
        let counts = PayloadLogCounts::default();
        let writer = PayloadWriter::start(
            "m",
            config(Destination::Directory(dir.clone()), LogFormat::Jsonl, 1),
            counts.clone(),
        );
        for id in 1..=3 {
            writer.offer(record(id));
        }
        drop(writer);
        let names = files(&dir);
        assert_eq!(names.len(), 3, "{names:?}");
        let name = names[0].file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            name.starts_with("m-") && name.ends_with("-1.jsonl"),
            "{name}"
        );
        let lines: usize = names
            .iter()
            .map(|p| fs::read_to_string(p).unwrap().lines().count())
            .sum();
        assert_eq!(lines, 3);
        assert_eq!(counts.written.get(), 3);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn tfrecord_files_are_framed_and_named_from_a_prefix() {
        let dir = temp_dir("prefix");
        let writer = PayloadWriter::start(
            "m",
            config(
                Destination::Prefix(dir.join("logs").join("ranker")),
                LogFormat::PredictionLog,
                1 << 20,
            ),
            PayloadLogCounts::default(),
        );
        writer.offer(record(1));
        writer.offer(record(2));
        drop(writer);
        let names = files(&dir.join("logs"));
        assert_eq!(names.len(), 1);
        let name = names[0].file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            name.starts_with("ranker.") && name.ends_with(".tfrecord"),
            "{name}"
        );
        let bytes = fs::read(&names[0]).unwrap();
        let first = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(bytes.len(), 2 * (first + 16));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_directory_drops_and_counts_without_panicking() {
        let dir = temp_dir("blocked");
        fs::write(&dir, b"not a directory").unwrap();
        let counts = PayloadLogCounts::default();
        let writer = PayloadWriter::start(
            "m",
            config(
                Destination::Directory(dir.clone()),
                LogFormat::Jsonl,
                1 << 20,
            ),
            counts.clone(),
        );
        writer.offer(record(1));
        writer.offer(record(2));
        let shared = writer.shared.clone();
        drop(writer);
        assert_eq!(counts.write_error.get(), 2);
        assert_eq!(counts.written.get(), 0);
        let losses = shared.losses().unwrap();
        assert_eq!((losses.records_lost, losses.failing), (2, true));
        assert!(!losses.error.contains(dir.to_str().unwrap()), "{losses:?}");
        let _ = fs::remove_file(&dir);
    }

    #[test]
    fn sampling_follows_the_share() {
        let dir = temp_dir("sample");
        let mut settings = config(Destination::Directory(dir), LogFormat::Jsonl, 1);
        settings.sample = 0.0;
        let never = PayloadWriter::start("m", settings.clone(), PayloadLogCounts::default());
        assert!((0..100).all(|_| !never.sampled()));
        settings.sample = 0.5;
        let half = PayloadWriter::start("m", settings, PayloadLogCounts::default());
        let taken = (0..1000).filter(|_| half.sampled()).count();
        assert!((300..700).contains(&taken), "{taken}");
    }
}
