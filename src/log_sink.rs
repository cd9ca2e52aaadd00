//! Where the server's log lines go: stderr, one write per line, and never a reason to stop.
//!
//! Two things a plain `std::io::stderr` writer gets wrong for a server:
//!
//! - **A log that cannot be written must not take the server down.** When stderr is a pipe
//!   whose reader went away (a log shipper restarting, `| tee` killed), every write fails with
//!   EPIPE. tracing-subscriber reports a failed write with `eprintln!` to the same stderr, and
//!   `eprintln!` panics when it cannot write, killing whichever thread logged: the repository
//!   watch, a reload RPC, the shutdown path. Here a line that cannot be written is dropped and
//!   counted (`tensorport_log_lines_dropped_total`), and the write reports success so that
//!   nothing above retries or complains.
//! - **One event is one line.** Model names, labels and other strings from clients end up in
//!   log fields; a newline in one would let a client forge a whole log line of its own, with
//!   its own timestamp and level. tracing-subscriber already escapes ESC and the other
//!   terminal controls in fields; line breaks and the remaining C0 controls inside a line are
//!   escaped here, so a line break only ever ends an event.

use std::borrow::Cow;
use std::io::{self, Write};

use prometheus_client::metrics::counter::Counter;
use tracing_subscriber::fmt::MakeWriter;

/// Makes a [`LineWriter`] per event; cheap to call.
#[derive(Clone)]
pub struct LogSink {
    dropped: Counter,
}

impl LogSink {
    /// A sink that counts the lines it could not write in `dropped`.
    pub fn new(dropped: Counter) -> Self {
        Self { dropped }
    }
}

impl<'a> MakeWriter<'a> for LogSink {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            dropped: &self.dropped,
        }
    }
}

/// Writes one formatted event (tracing-subscriber hands over a whole line in one `write_all`)
/// to stderr, escaped, or drops and counts it.
pub struct LineWriter<'a> {
    dropped: &'a Counter,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if io::stderr().lock().write_all(&one_line(buf)).is_err() {
            self.dropped.inc();
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        // stderr is unbuffered; a failed flush has nothing left to lose.
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// `line` with every C0 control but tab and ESC escaped, except a newline that ends it.
/// ESC is left alone: with colours on it starts the formatter's own colour codes, and in
/// field values tracing-subscriber has already escaped it. Control bytes are single bytes in
/// UTF-8, so the text stays valid.
fn one_line(line: &[u8]) -> Cow<'_, [u8]> {
    let (body, end) = match line.strip_suffix(b"\n") {
        Some(body) => (body, &b"\n"[..]),
        None => (line, &b""[..]),
    };
    let needs_escape = |byte: u8| byte < 0x20 && byte != b'\t' && byte != 0x1b;
    if !body.iter().copied().any(needs_escape) {
        return Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len() + 16);
    for &byte in body {
        match byte {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            byte if needs_escape(byte) => {
                out.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
            }
            byte => out.push(byte),
        }
    }
    out.extend_from_slice(end);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_line_is_written_as_it_is() {
        let line = b"2026-12-01T00:00:00Z  INFO loaded model=ranker\n";
        assert!(matches!(one_line(line), Cow::Borrowed(_)));
        assert!(matches!(
            one_line(b"\x1b[32mINFO\x1b[0m ok\n"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_line_break_inside_an_event_cannot_start_a_forged_line() {
        let forged = b"WARN model=a\n2026-12-01T00:00:00Z ERROR forged\r\x07 tail\n";
        assert_eq!(
            one_line(forged).as_ref(),
            b"WARN model=a\\n2026-12-01T00:00:00Z ERROR forged\\r\\x07 tail\n"
        );
        assert_eq!(one_line(b"no end\nhere").as_ref(), b"no end\\nhere");
    }
}
