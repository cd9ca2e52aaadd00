//! A model's payload-log writer: requests offer records with [`PayloadWriter::offer`], which
//! never waits (a full queue drops and counts the record), and a thread of the writer's own
//! takes the queued records every few milliseconds, encodes them and appends them to rotating
//! files, flushing about once a second. Dropping the writer writes what is queued, then
//! flushes and closes its file.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::metrics::PayloadLogCounts;

use super::config::{Destination, LogFormat, PayloadLogConfig};
use super::queue::RecordQueue;
use super::record::PayloadRecord;

/// The writer thread's nice value (0 is the default, 19 the lowest priority).
const WRITER_NICE: i32 = 10;
/// How often the thread takes what is queued.
const DRAIN_EVERY: Duration = Duration::from_millis(10);
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Bytes gathered before a write to the file: a few hundred records at a time.
const WRITE_BUFFER: usize = 256 << 10;
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The state both the request path and the thread see.
struct Shared {
    model: Arc<str>,
    counts: PayloadLogCounts,
    queue: RecordQueue,
    /// When a drop was last warned about, in ms since the writer started (0: never).
    last_warning_ms: AtomicU64,
    started: Instant,
}

impl Shared {
    /// Logs a warning about a dropped record, at most once a minute.
    fn warn_dropped(&self, why: &dyn std::fmt::Display) {
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = self.last_warning_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= WARN_EVERY.as_millis() as u64;
        if due
            && self
                .last_warning_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(model = %self.model, "payload log dropped a record: {why}");
        }
    }
}

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
        let shared = Arc::new(Shared {
            model: model.into(),
            counts,
            queue: RecordQueue::default(),
            last_warning_ms: AtomicU64::new(0),
            started: Instant::now(),
        });
        let mut files = Files::new(&config, shared.clone());
        let thread = std::thread::Builder::new()
            .name(format!("payload-log-{model}"))
            .spawn(move || {
                // On Linux a nice value is per thread: this one yields the CPU to the threads
                // answering requests when both want it, in place of holding it for its turn.
                let _ = rustix::process::setpriority_process(None, WRITER_NICE);
                let mut batch = Vec::new();
                loop {
                    let closed = files.shared.queue.take(&mut batch);
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
        self.shared.counts.queue_full.inc();
        self.shared.warn_dropped(&refused);
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

/// The thread's side: the open file and what rotates it.
struct Files {
    destination: Destination,
    format: LogFormat,
    max_file_bytes: u64,
    shared: Arc<Shared>,
    open: Option<OpenFile>,
    opened: u64,
    last_flush: Instant,
    framed: Vec<u8>,
}

struct OpenFile {
    path: PathBuf,
    out: BufWriter<File>,
    written: u64,
}

impl Files {
    fn new(config: &PayloadLogConfig, shared: Arc<Shared>) -> Self {
        Self {
            destination: config.destination.clone(),
            format: config.format,
            max_file_bytes: config.max_file_bytes,
            shared,
            open: None,
            opened: 0,
            last_flush: Instant::now(),
            framed: Vec::new(),
        }
    }

    fn write(&mut self, record: &PayloadRecord) {
        if self.open.is_none() {
            match self.open_next() {
                Ok(file) => self.open = Some(file),
                Err(err) => return self.failed(&err),
            }
        }
        self.framed.clear();
        record.write_into(self.format, &mut self.framed);
        let bytes = &self.framed;
        let Some(file) = self.open.as_mut() else {
            return;
        };
        let written = file.out.write_all(bytes);
        let length = bytes.len() as u64;
        if let Err(err) = written {
            self.open = None;
            return self.failed(&err);
        }
        file.written += length;
        let full = file.written >= self.max_file_bytes;
        self.shared.counts.written.inc();
        if full {
            self.close();
        }
    }

    fn failed(&self, err: &std::io::Error) {
        self.shared.counts.write_error.inc();
        self.shared.warn_dropped(err);
    }

    /// The next file's path, with its directory made.
    fn open_next(&mut self) -> std::io::Result<OpenFile> {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        self.opened += 1;
        let extension = self.format.extension();
        let path = match &self.destination {
            Destination::Directory(dir) => {
                fs::create_dir_all(dir)?;
                dir.join(format!(
                    "{}-{millis}-{}.{extension}",
                    self.shared.model, self.opened
                ))
            }
            Destination::Prefix(prefix) => {
                if let Some(parent) = prefix.parent().filter(|p| !p.as_os_str().is_empty()) {
                    fs::create_dir_all(parent)?;
                }
                let mut name = prefix.clone().into_os_string();
                name.push(format!(".{millis}-{}.{extension}", self.opened));
                PathBuf::from(name)
            }
        };
        let file = File::options().create_new(true).append(true).open(&path)?;
        Ok(OpenFile {
            path,
            out: BufWriter::with_capacity(WRITE_BUFFER, file),
            written: 0,
        })
    }

    /// Flushes once a second; a file whose path is gone (its directory moved or replaced) is
    /// closed, so that the next record opens a new one or counts the failure.
    fn flush_if_due(&mut self) {
        if self.last_flush.elapsed() < FLUSH_EVERY {
            return;
        }
        self.last_flush = Instant::now();
        let Some(file) = self.open.as_mut() else {
            return;
        };
        let flushed = file.out.flush();
        let still_there = fs::metadata(&file.path).is_ok_and(|meta| meta.is_file());
        if let Err(err) = flushed {
            self.open = None;
            self.failed(&err);
        } else if !still_there {
            self.open = None;
        }
    }

    fn close(&mut self) {
        if let Some(mut file) = self.open.take() {
            if let Err(err) = file.out.flush() {
                self.failed(&err);
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
        drop(writer);
        assert_eq!(counts.write_error.get(), 2);
        assert_eq!(counts.written.get(), 0);
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
