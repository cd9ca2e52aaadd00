//! The access log (`--access-log text|json`): one line per answered request on stdout, apart
//! from the diagnostic log on stderr, with the fields an operator greps for: time, client
//! address, method, path (for gRPC, the RPC), protocol, model, version, status, outcome,
//! duration, request id, trace id (of a traced request), bytes in and out.
//!
//! Lines go through a bounded channel to a writer thread of their own, so that a slow reader
//! of stdout never holds up a request; when the channel is full, lines are dropped and
//! counted rather than waited for. A line stdout refuses (a closed pipe, a full disk) is
//! dropped and counted the same way, and the thread goes on with the next one, so that the
//! log resumes if stdout does.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Lines waiting for the writer thread before new ones are dropped.
const BUFFERED_LINES: usize = 4096;

/// How the access log is written, if at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AccessLogFormat {
    #[default]
    Off,
    /// `key=value` pairs; a value is quoted (JSON string syntax) only when it holds a space,
    /// a quote, `=` or a control character, and an absent one is `-`.
    Text,
    /// One JSON object per line; an absent value is `null`.
    Json,
}

/// One answered (or abandoned) request.
#[derive(Debug, Clone)]
pub struct AccessEntry<'a> {
    pub time: SystemTime,
    pub client: Option<SocketAddr>,
    pub method: &'a str,
    /// The HTTP path, or for gRPC the RPC (`/package.Service/Method`).
    pub path: &'a str,
    pub protocol: &'static str,
    /// The model the request named, and the version that answered where it resolved to one.
    pub model: Option<(&'a str, Option<u64>)>,
    /// The HTTP status, or for gRPC the status code (0 is OK); absent when the client left
    /// before the answer.
    pub status: Option<u16>,
    pub outcome: &'static str,
    pub duration: Duration,
    pub request_id: &'a str,
    /// The trace id of a traced request, as exported (hex).
    pub trace_id: Option<String>,
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
}

/// A field's value, before it is written in either format.
enum Value<'a> {
    Text(&'a str),
    Number(u64),
    Millis(f64),
    Absent,
}

impl AccessEntry<'_> {
    fn fields(&self) -> [(&'static str, Value<'_>); 14] {
        let text = |s: &'static str| Value::Text(s);
        let optional = |n: Option<u64>| n.map_or(Value::Absent, Value::Number);
        [
            ("time", Value::Absent),
            ("client", Value::Absent),
            ("method", Value::Text(self.method)),
            ("path", Value::Text(self.path)),
            ("protocol", text(self.protocol)),
            (
                "model",
                self.model.map_or(Value::Absent, |(m, _)| Value::Text(m)),
            ),
            ("version", optional(self.model.and_then(|(_, v)| v))),
            ("status", optional(self.status.map(u64::from))),
            ("outcome", text(self.outcome)),
            (
                "duration_ms",
                Value::Millis(self.duration.as_secs_f64() * 1e3),
            ),
            ("request_id", Value::Text(self.request_id)),
            (
                "trace_id",
                self.trace_id.as_deref().map_or(Value::Absent, Value::Text),
            ),
            ("bytes_in", optional(self.bytes_in)),
            ("bytes_out", optional(self.bytes_out)),
        ]
    }

    /// The entry as one line (without the newline), or `None` when the log is off.
    pub fn line(&self, format: AccessLogFormat) -> Option<String> {
        let time = rfc3339(self.time);
        let client = self.client.map(|addr| addr.to_string());
        let mut fields = self.fields();
        fields[0].1 = Value::Text(&time);
        fields[1].1 = client.as_deref().map_or(Value::Absent, Value::Text);
        match format {
            AccessLogFormat::Off => None,
            AccessLogFormat::Text => Some(
                fields
                    .iter()
                    .map(|(key, value)| format!("{key}={}", text_value(value)))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            // Written field by field, to keep the order of the text format (serde_json's map
            // would sort the keys).
            AccessLogFormat::Json => Some(format!(
                "{{{}}}",
                fields
                    .iter()
                    .map(|(key, value)| format!("\"{key}\":{}", json_value(value)))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        }
    }
}

fn text_value(value: &Value<'_>) -> String {
    match value {
        Value::Text("") => "-".to_owned(),
        Value::Text(s) => {
            let plain = s
                .chars()
                .all(|c| !c.is_whitespace() && !c.is_control() && c != '"' && c != '=');
            if plain {
                (*s).to_owned()
            } else {
                serde_json::Value::from(*s).to_string()
            }
        }
        Value::Number(n) => n.to_string(),
        Value::Millis(ms) => format!("{ms:.3}"),
        Value::Absent => "-".to_owned(),
    }
}

fn json_value(value: &Value<'_>) -> serde_json::Value {
    match value {
        Value::Text("") => serde_json::Value::Null,
        Value::Text(s) => serde_json::Value::from(*s),
        Value::Number(n) => serde_json::Value::from(*n),
        // Rounded to the microsecond, as the text format writes it.
        Value::Millis(ms) => serde_json::Value::from((ms * 1e3).round() / 1e3),
        Value::Absent => serde_json::Value::Null,
    }
}

/// `2026-11-30T14:03:07.123Z`: UTC, milliseconds.
fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rest = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The writing end: formats entries and hands the lines to the writer thread.
pub struct AccessLog {
    format: AccessLogFormat,
    lines: SyncSender<String>,
    /// Lines dropped, for a full channel or a failed write; shared with the thread.
    dropped: Arc<AtomicU64>,
}

/// Counts one dropped line; says so once, then every thousand, so that a stuck or closed
/// stdout does not flood stderr.
fn count_dropped(dropped: &AtomicU64, why: &dyn std::fmt::Display) {
    let dropped = dropped.fetch_add(1, Ordering::Relaxed) + 1;
    if dropped == 1 || dropped.is_multiple_of(1000) {
        tracing::warn!(dropped, "access log lines dropped: {why}");
    }
}

/// The writer thread's loop: each line to `out`, or dropped and counted when `out` refuses
/// it. Ends when every sender is gone, that is with the server.
fn write_lines(received: Receiver<String>, mut out: impl Write, dropped: &AtomicU64) {
    for mut line in received {
        line.push('\n');
        if let Err(err) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
            count_dropped(dropped, &format_args!("stdout cannot be written: {err}"));
        }
    }
}

impl AccessLog {
    /// Starts the writer thread; `None` when the log is off (or the thread cannot start,
    /// which is logged).
    pub fn start(format: AccessLogFormat) -> Option<Self> {
        if format == AccessLogFormat::Off {
            return None;
        }
        let (lines, received) = sync_channel::<String>(BUFFERED_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        let writer = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_lines(received, std::io::stdout(), &counted));
        match writer {
            Ok(_) => Some(Self {
                format,
                lines,
                dropped,
            }),
            Err(error) => {
                tracing::error!(%error, "cannot start the access log writer; access log off");
                None
            }
        }
    }

    pub fn write(&self, entry: &AccessEntry<'_>) {
        let Some(line) = entry.line(self.format) else {
            return;
        };
        match self.lines.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                count_dropped(&self.dropped, &"stdout is not keeping up");
            }
            // The thread is gone (it panicked): its lines are lost, and counted.
            Err(TrySendError::Disconnected(_)) => {
                count_dropped(&self.dropped, &"the access log writer stopped");
            }
        }
    }
}

/// The request body's declared size, for its access-log line.
pub(super) fn content_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> AccessEntry<'static> {
        AccessEntry {
            time: UNIX_EPOCH + Duration::from_millis(1_796_047_538_954),
            client: Some(SocketAddr::from(([127, 0, 0, 1], 5555))),
            method: "POST",
            path: "/v2/models/ranker/infer",
            protocol: "kserve-http",
            model: Some(("ranker", Some(2))),
            status: Some(200),
            outcome: "ok",
            duration: Duration::from_micros(1234),
            request_id: "trace 7",
            trace_id: None,
            bytes_in: Some(120),
            bytes_out: None,
        }
    }

    #[test]
    fn text_lines_quote_only_what_needs_it_and_mark_absent_values() {
        assert_eq!(
            entry().line(AccessLogFormat::Text).as_deref(),
            Some(
                "time=2026-11-30T14:05:38.954Z client=127.0.0.1:5555 method=POST \
                 path=/v2/models/ranker/infer protocol=kserve-http model=ranker version=2 \
                 status=200 outcome=ok duration_ms=1.234 request_id=\"trace 7\" trace_id=- \
                 bytes_in=120 bytes_out=-"
            )
        );
    }

    #[test]
    fn json_lines_carry_the_same_fields() -> Result<(), serde_json::Error> {
        let mut cancelled = entry();
        cancelled.status = None;
        cancelled.model = None;
        cancelled.outcome = "cancelled";
        let line = cancelled.line(AccessLogFormat::Json).unwrap_or_default();
        let value: serde_json::Value = serde_json::from_str(&line)?;
        assert_eq!(value["time"], "2026-11-30T14:05:38.954Z");
        assert_eq!(value["client"], "127.0.0.1:5555");
        assert_eq!(value["method"], "POST");
        assert_eq!(value["status"], serde_json::Value::Null);
        assert_eq!(value["model"], serde_json::Value::Null);
        assert_eq!(value["duration_ms"], 1.234);
        assert_eq!(value["request_id"], "trace 7");
        assert_eq!(value.as_object().map(|o| o.len()), Some(14));
        assert!(line.starts_with("{\"time\":"), "{line}");
        Ok(())
    }

    #[test]
    fn off_writes_nothing() {
        assert_eq!(entry().line(AccessLogFormat::Off), None);
        assert!(AccessLog::start(AccessLogFormat::Off).is_none());
    }

    /// A stdout that refuses some lines, as a pipe whose reader went away refuses every
    /// one (EPIPE) until a new reader comes.
    struct Stdout {
        written: Vec<u8>,
        refused: &'static [&'static [u8]],
    }

    impl Write for Stdout {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.refused.contains(&buf) {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            }
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_stdout_refuses_are_counted_and_the_next_ones_still_written() {
        let (lines, received) = sync_channel::<String>(8);
        for line in ["a", "b", "c", "d"] {
            lines.send(line.to_owned()).unwrap();
        }
        drop(lines);
        let mut stdout = Stdout {
            written: Vec::new(),
            refused: &[b"b\n", b"c\n"],
        };
        let dropped = AtomicU64::new(0);
        write_lines(received, &mut stdout, &dropped);
        assert_eq!(stdout.written, b"a\nd\n");
        assert_eq!(dropped.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-02-29, a leap day of a century leap year.
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }
}
