//! One log file's records, gathered in memory and written whole or not counted.
//!
//! A record counts as written only once every byte of it is in the file. When a write fails
//! part-way (a full disk: ENOSPC, a file-size limit: EFBIG), the records wholly written stay,
//! the file is cut back to the end of the last of them so that no torn record is left for a
//! reader to trip on, and every record of the flush after it is counted lost.

use std::fs::File;
use std::io::{self, Write};

/// Where an appender's bytes go: a file opened for appending, or in tests one that fails.
pub trait LogFile: Send {
    /// Writes some of `bytes`, as [`Write::write`] does.
    fn write_some(&mut self, bytes: &[u8]) -> io::Result<usize>;
    /// Cuts the file to `len` bytes; later writes append from there.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

impl LogFile for File {
    fn write_some(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.write(bytes)
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        // The file is opened with O_APPEND: each write goes to its end, wherever that now is.
        self.set_len(len)
    }
}

/// What one flush did.
#[derive(Debug, Default)]
pub struct Flushed {
    /// Records now wholly in the file.
    pub written: u64,
    /// Records of this flush that are not.
    pub lost: u64,
    /// Why not, when some were lost.
    pub error: Option<io::Error>,
    /// The cut failed too: the file may end in a torn record and takes no more.
    pub torn: bool,
}

/// The records waiting to go into one file.
pub struct Appender<F> {
    file: F,
    buffer: Vec<u8>,
    /// Where each buffered record ends in `buffer`.
    ends: Vec<usize>,
    /// The file's length: the end of its last whole record.
    on_disk: u64,
}

/// Capacity kept for the buffer after a flush; a larger one (left by a huge record) is freed.
const KEPT_CAPACITY: usize = 1 << 20;

impl<F: LogFile> Appender<F> {
    pub fn new(file: F) -> Self {
        Self {
            file,
            buffer: Vec::new(),
            ends: Vec::new(),
            on_disk: 0,
        }
    }

    /// Adds the record `encode` appends to the buffer it is given.
    pub fn push(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        encode(&mut self.buffer);
        self.ends.push(self.buffer.len());
    }

    /// Bytes waiting in memory.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// The file's length once what waits is written.
    pub fn len(&self) -> u64 {
        self.on_disk + self.buffer.len() as u64
    }

    /// Writes what waits, keeping only whole records in the file.
    pub fn flush(&mut self) -> Flushed {
        let mut done = 0;
        let error = loop {
            let Some(rest) = self.buffer.get(done..).filter(|rest| !rest.is_empty()) else {
                break None;
            };
            match self.file.write_some(rest) {
                Ok(0) => break Some(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => break Some(err),
            }
        };
        let whole = self.ends.partition_point(|&end| end <= done);
        let kept = whole
            .checked_sub(1)
            .and_then(|last| self.ends.get(last))
            .map_or(0, |&end| end);
        let mut flushed = Flushed {
            written: whole as u64,
            lost: (self.ends.len() - whole) as u64,
            error,
            torn: false,
        };
        if done > kept {
            flushed.torn = self.file.truncate(self.on_disk + kept as u64).is_err();
        }
        self.on_disk += kept as u64;
        self.buffer.clear();
        self.buffer.shrink_to(KEPT_CAPACITY);
        self.ends.clear();
        flushed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that takes `room` bytes, then fails as a full disk does.
    struct SmallDisk {
        bytes: Vec<u8>,
        room: usize,
        /// Bytes one write takes at most, so that a flush needs several.
        chunk: usize,
        truncate_fails: bool,
    }

    impl SmallDisk {
        fn new(room: usize) -> Self {
            Self {
                bytes: Vec::new(),
                room,
                chunk: 5,
                truncate_fails: false,
            }
        }
    }

    impl LogFile for SmallDisk {
        fn write_some(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let free = self.room.saturating_sub(self.bytes.len());
            if free == 0 {
                return Err(io::Error::from_raw_os_error(28));
            }
            let n = bytes.len().min(free).min(self.chunk);
            self.bytes.extend_from_slice(&bytes[..n]);
            Ok(n)
        }

        fn truncate(&mut self, len: u64) -> io::Result<()> {
            if self.truncate_fails {
                return Err(io::Error::from(io::ErrorKind::PermissionDenied));
            }
            self.bytes.truncate(len as usize);
            Ok(())
        }
    }

    fn line(appender: &mut Appender<SmallDisk>, text: &str) {
        appender.push(|out| {
            out.extend_from_slice(text.as_bytes());
            out.push(b'\n');
        });
    }

    #[test]
    fn records_count_as_written_once_whole_in_the_file() {
        let mut appender = Appender::new(SmallDisk::new(1 << 10));
        line(&mut appender, "first record");
        line(&mut appender, "second");
        assert_eq!(
            appender.file.bytes, b"",
            "nothing is written before the flush"
        );
        assert_eq!(appender.len(), 20);
        let flushed = appender.flush();
        assert_eq!((flushed.written, flushed.lost), (2, 0));
        assert!(flushed.error.is_none() && !flushed.torn);
        assert_eq!(appender.file.bytes, b"first record\nsecond\n");
        assert_eq!((appender.buffered(), appender.len()), (0, 20));
    }

    #[test]
    fn a_full_disk_keeps_the_whole_records_cuts_the_torn_one_and_counts_the_rest_lost() {
        // Room for the first two lines (14 bytes) and half of the third.
        let mut appender = Appender::new(SmallDisk::new(20));
        for text in ["line one", "two", "line three", "four"] {
            line(&mut appender, text);
        }
        let flushed = appender.flush();
        assert_eq!((flushed.written, flushed.lost), (2, 2));
        assert_eq!(flushed.error.map(|e| e.raw_os_error()), Some(Some(28)));
        assert!(!flushed.torn);
        assert_eq!(appender.file.bytes, b"line one\ntwo\n");
        assert_eq!(appender.len(), 13);

        // The disk stays full: the next flush loses its record and leaves the file whole.
        line(&mut appender, "five is long enough");
        let flushed = appender.flush();
        assert_eq!((flushed.written, flushed.lost), (0, 1));
        assert_eq!(appender.file.bytes, b"line one\ntwo\n");

        // Room again: records are appended after the last whole one.
        appender.file.room = 1 << 10;
        line(&mut appender, "six");
        let flushed = appender.flush();
        assert_eq!((flushed.written, flushed.lost), (1, 0));
        assert_eq!(appender.file.bytes, b"line one\ntwo\nsix\n");
    }

    #[test]
    fn a_failed_cut_says_the_file_is_torn() {
        let mut disk = SmallDisk::new(6);
        disk.truncate_fails = true;
        let mut appender = Appender::new(disk);
        line(&mut appender, "abc");
        line(&mut appender, "defgh");
        let flushed = appender.flush();
        assert_eq!((flushed.written, flushed.lost), (1, 1));
        assert!(flushed.torn);
    }

    #[test]
    fn a_failure_at_a_record_boundary_needs_no_cut() {
        let mut appender = Appender::new(SmallDisk::new(4));
        line(&mut appender, "abc");
        line(&mut appender, "def");
        let flushed = appender.flush();
        assert_eq!((flushed.written, flushed.lost), (1, 1));
        assert!(!flushed.torn);
        assert_eq!(appender.file.bytes, b"abc\n");
    }
}
