//! The writer thread's side: the open file, what rotates it, and where files are opened.
//!
//! Records are gathered in memory and written about once a second, or as soon as a few
//! hundred KiB wait; only then are they counted, written or lost (see `appender`). A file whose
//! last record could not be cut back after a failed write is closed, so that nothing is
//! appended after a torn record.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::appender::Appender;
use super::config::{Destination, LogFormat, PayloadLogConfig};
use super::queue::RecordQueue;
use super::record::PayloadRecord;
use super::shared::Shared;

const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Bytes gathered before a write to the file: a few hundred records at a time.
const WRITE_BUFFER: usize = 256 << 10;

pub(super) struct Files {
    destination: Destination,
    format: LogFormat,
    max_file_bytes: u64,
    shared: Arc<Shared>,
    open: Option<OpenFile>,
    opened: u64,
    last_flush: Instant,
}

struct OpenFile {
    path: PathBuf,
    out: Appender<File>,
}

impl Files {
    pub(super) fn new(config: &PayloadLogConfig, shared: Arc<Shared>) -> Self {
        Self {
            destination: config.destination.clone(),
            format: config.format,
            max_file_bytes: config.max_file_bytes,
            shared,
            open: None,
            opened: 0,
            last_flush: Instant::now(),
        }
    }

    pub(super) fn queue(&self) -> &RecordQueue {
        &self.shared.queue
    }

    /// Adds `record` to the open file (opening one first), writing what waits once enough
    /// does or the file is full.
    pub(super) fn write(&mut self, record: &PayloadRecord) {
        if self.open.is_none() {
            match self.open_next() {
                Ok(file) => self.open = Some(file),
                Err(err) => return self.shared.lost(1, &err, true),
            }
        }
        let Some(file) = self.open.as_mut() else {
            return;
        };
        let format = self.format;
        file.out.push(|buffer| record.write_into(format, buffer));
        let full = file.out.len() >= self.max_file_bytes;
        if full {
            self.close();
        } else if file.out.buffered() >= WRITE_BUFFER {
            self.flush();
        }
    }

    /// Writes what waits once a second; a file whose path is gone (its directory moved or
    /// replaced) is closed, so that the next record opens a new one or counts the failure.
    pub(super) fn flush_if_due(&mut self) {
        if self.last_flush.elapsed() < FLUSH_EVERY {
            return;
        }
        self.last_flush = Instant::now();
        self.flush();
        let gone = self
            .open
            .as_ref()
            .is_some_and(|file| !fs::metadata(&file.path).is_ok_and(|meta| meta.is_file()));
        if gone {
            self.open = None;
        }
    }

    /// Writes what waits and closes the file.
    pub(super) fn close(&mut self) {
        self.flush();
        self.open = None;
    }

    /// Writes what waits in the open file and counts the outcome.
    fn flush(&mut self) {
        let Some(file) = self.open.as_mut() else {
            return;
        };
        let flushed = file.out.flush();
        self.shared.wrote(flushed.written);
        if let Some(error) = &flushed.error {
            self.shared.lost(flushed.lost, error, false);
        }
        if flushed.torn {
            tracing::error!(
                model = %self.shared.model,
                path = %file.path.display(),
                "payload log file ends in a torn record that could not be cut off; closed"
            );
            self.open = None;
        }
    }

    /// The next file, with its directory made where the operator named it.
    fn open_next(&mut self) -> io::Result<OpenFile> {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        self.opened += 1;
        let extension = self.format.extension();
        let suffix = format!(".{millis}-{}.{extension}", self.opened);
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
                with_suffix(prefix, &suffix)
            }
            Destination::ConfinedPrefix { prefix, root } => {
                with_suffix(&confined(prefix, root)?, &suffix)
            }
        };
        // `create_new` opens with O_EXCL, which also refuses a symlink planted at the name.
        let file = File::options().create_new(true).append(true).open(&path)?;
        Ok(OpenFile {
            path,
            out: Appender::new(file),
        })
    }
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// `prefix` with its folder resolved again through every symlink, if that still lies under
/// `root`; never makes a folder. The error names no path: it reaches the readiness detail.
fn confined(prefix: &Path, root: &Path) -> io::Result<PathBuf> {
    let outside = || {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the filename_prefix folder no longer lies under its allowed log folder",
        )
    };
    let (Some(folder), Some(name)) = (prefix.parent(), prefix.file_name()) else {
        return Err(outside());
    };
    let real = fs::canonicalize(folder).map_err(|_| outside())?;
    if real.starts_with(root) && real.is_dir() {
        Ok(real.join(name))
    } else {
        Err(outside())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confined_prefix_is_checked_again_when_a_file_opens() -> io::Result<()> {
        let base = std::env::temp_dir().join(format!("paylog-confined-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let root = base.join("logs");
        let outside = base.join("outside");
        fs::create_dir_all(root.join("sub"))?;
        fs::create_dir_all(&outside)?;
        let root = fs::canonicalize(&root)?;
        let inside = confined(&root.join("sub").join("ranker"), &root);
        // The folder swapped for a symlink that leads out, after the reload took it.
        fs::remove_dir(root.join("sub"))?;
        std::os::unix::fs::symlink(&outside, root.join("sub"))?;
        let swapped = confined(&root.join("sub").join("ranker"), &root);
        let missing = confined(&root.join("gone").join("ranker"), &root);
        fs::remove_dir_all(&base)?;
        assert_eq!(inside?, root.join("sub").join("ranker"));
        for refused in [swapped, missing] {
            let err = refused.map(|p| p.display().to_string()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
            assert!(!err.to_string().contains('/'), "{err}");
        }
        assert!(!root.join("gone").exists());
        Ok(())
    }
}
