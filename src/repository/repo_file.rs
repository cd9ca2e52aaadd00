//! Reading the files a model repository offers: settings (`config.pbtxt`, `config.toml`,
//! `model-settings.json`), labels, warmup requests, and the peers' lists an operator names.
//!
//! Whoever can write into a model folder must not be able to stop the server, fill its memory,
//! or read the server's other files through it. So every such file is read here, and only:
//! - a regular file: a FIFO is never waited on (it is looked at before it is opened, opened
//!   with `O_NONBLOCK`, and the opened descriptor is checked again), and a device is never read
//!   (`/dev/zero` reports a size of 0 and never ends);
//! - up to a cap, counted on the bytes read rather than on the size the file reports (which a
//!   device or a file still being written gets wrong);
//! - for a file a model folder names ([`read_inside`]), where it really lies, `..` and every
//!   symlink followed, is inside that folder: checked before opening, and on Linux again on
//!   the opened descriptor, so a link swapped in between is caught too.
//!
//! Reading blocks: callers run it off the async runtime (the poller reads a whole pass of the
//! repository on a blocking thread).

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// How much of a file may be read, and what it is called in a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub cap: u64,
    pub what: &'static str,
}

/// A model's settings file: a few kilobytes in practice, ensembles of many steps included.
pub const SETTINGS: Limit = Limit {
    cap: 4 << 20,
    what: "a model's settings file",
};

/// A labels file: far more classes than any classifier has, small enough that a wrong file (a
/// dataset, say) fails the load instead of filling memory.
pub const LABELS: Limit = Limit {
    cap: 16 << 20,
    what: "a labels file",
};

/// TF Serving's warmup file: up to 1000 logged requests, read whole before they replay.
pub const WARMUP: Limit = Limit {
    cap: 256 << 20,
    what: "a warmup file",
};

/// A list the operator names (`models.config`, batching parameters, MLServer's
/// `settings.json`, the TF Serving platform, SSL and monitoring files).
pub const OPERATOR_FILE: Limit = Limit {
    cap: 16 << 20,
    what: "a configuration file",
};

/// Why a file of the repository was not read.
#[derive(Debug, thiserror::Error)]
pub enum RepoFileError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is {kind}, not a regular file: only regular files are read")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{path} holds more than {cap} bytes, the most {what} may hold")]
    TooLarge {
        path: PathBuf,
        cap: u64,
        what: &'static str,
    },
    /// Where it leads is not said, nor whether that exists: the server's other files are
    /// none of the folder writer's business.
    #[error(
        "{path} does not lead to a file inside {root} ('..' and symlinks followed): a file a \
         model folder names must lie inside it"
    )]
    Outside { path: PathBuf, root: PathBuf },
    #[error("cannot read {path}: it is not UTF-8 text")]
    NotText { path: PathBuf },
}

impl RepoFileError {
    /// Whether the file is simply not there (a missing optional file is no error).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The bytes of `relative` in the folder `root`, which it must not leave.
pub fn read_inside(root: &Path, relative: &Path, limit: Limit) -> Result<Vec<u8>, RepoFileError> {
    let path = root.join(relative);
    let io = |source| RepoFileError::Io {
        path: path.clone(),
        source,
    };
    let outside = || RepoFileError::Outside {
        path: path.clone(),
        root: root.to_path_buf(),
    };
    let canonical_root = std::fs::canonicalize(root).map_err(io)?;
    let target = match std::fs::canonicalize(&path) {
        Ok(target) => target,
        Err(err) if plainly_absent(&path, &canonical_root) => return Err(io(err)),
        Err(_) => return Err(outside()),
    };
    if !target.starts_with(&canonical_root) {
        return Err(outside());
    }
    // The target has no link left in it; a link put there since is refused, not followed.
    let file = open_regular(&target, true).map_err(|err| err.shown_as(&path))?;
    if opened_outside(&file, &canonical_root) {
        return Err(outside());
    }
    read_capped(file, &path, limit)
}

/// Whether `path` is missing from a folder inside `root`, rather than a link (or a path
/// through one) that leads nowhere: only then is it reported as missing, so that whether a
/// file outside exists cannot be learnt by pointing a link at it.
fn plainly_absent(path: &Path, root: &Path) -> bool {
    let no_entry = matches!(
        std::fs::symlink_metadata(path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound
    );
    no_entry
        && path
            .parent()
            .and_then(|parent| std::fs::canonicalize(parent).ok())
            .is_some_and(|parent| parent.starts_with(root))
}

/// [`read_inside`] as UTF-8 text.
pub fn read_text_inside(
    root: &Path,
    relative: &Path,
    limit: Limit,
) -> Result<String, RepoFileError> {
    let path = root.join(relative);
    text(read_inside(root, relative, limit)?, &path)
}

/// The text of a file the operator named, wherever its links lead, as a regular file within
/// `limit`.
pub fn read_text_trusted(path: &Path, limit: Limit) -> Result<String, RepoFileError> {
    let file = open_regular(path, false)?;
    text(read_capped(file, path, limit)?, path)
}

fn text(bytes: Vec<u8>, path: &Path) -> Result<String, RepoFileError> {
    String::from_utf8(bytes).map_err(|_| RepoFileError::NotText {
        path: path.to_path_buf(),
    })
}

/// Opens `path` for reading if it is a regular file. It is looked at first, so that a device
/// is never opened (some act on being opened); then opened without waiting (a FIFO swapped in
/// meanwhile opens at once, with no writer) and looked at again through the descriptor.
fn open_regular(path: &Path, no_follow: bool) -> Result<File, RepoFileError> {
    let io = |source| RepoFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    check_regular(path, &std::fs::metadata(path).map_err(io)?)?;
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if no_follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(io)?;
    check_regular(path, &file.metadata().map_err(io)?)?;
    Ok(file)
}

fn check_regular(path: &Path, meta: &Metadata) -> Result<(), RepoFileError> {
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let kind = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_dir() {
        "a folder"
    } else {
        "something else"
    };
    Err(RepoFileError::NotRegular {
        path: path.to_path_buf(),
        kind,
    })
}

/// Reads at most one byte past the cap, so that a file longer than the cap (whatever size it
/// reports, however it grows while read) is refused without being held.
fn read_capped(file: File, path: &Path, limit: Limit) -> Result<Vec<u8>, RepoFileError> {
    let reported = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    let expected = usize::try_from(reported.min(limit.cap)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(expected.saturating_add(1));
    file.take(limit.cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| RepoFileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit.cap {
        return Err(RepoFileError::TooLarge {
            path: path.to_path_buf(),
            cap: limit.cap,
            what: limit.what,
        });
    }
    Ok(bytes)
}

/// Whether the file opened is, by the kernel's account of the descriptor, outside `root`:
/// a folder on the way swapped for a link after the check would show here. Where the
/// descriptor's path cannot be read (no `/proc`), the check before opening stands alone.
fn opened_outside(file: &File, root: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let link = format!("/proc/self/fd/{}", file.as_raw_fd());
        if let Ok(opened) = std::fs::read_link(link) {
            return !opened.starts_with(root);
        }
    }
    let _ = (file, root);
    false
}

impl RepoFileError {
    /// The same refusal naming `path` (the name the folder gave) rather than where it led.
    fn shown_as(self, path: &Path) -> Self {
        let path = path.to_path_buf();
        match self {
            Self::Io { source, .. } => Self::Io { path, source },
            Self::NotRegular { kind, .. } => Self::NotRegular { path, kind },
            Self::TooLarge { cap, what, .. } => Self::TooLarge { path, cap, what },
            Self::Outside { root, .. } => Self::Outside { path, root },
            Self::NotText { .. } => Self::NotText { path },
        }
    }
}

/// Where a file a model folder names for the server to write (ONNX Runtime's optimized graph)
/// may be written: `relative` inside `root`, its folder resolved through every link and still
/// inside, and nothing but a regular file there already (a link would be written through, a
/// FIFO would block the writer). Returns the resolved path, so the writer follows no link.
pub fn output_inside(root: &Path, relative: &Path) -> Result<PathBuf, RepoFileError> {
    let path = root.join(relative);
    let io = |source| RepoFileError::Io {
        path: path.clone(),
        source,
    };
    let outside = || RepoFileError::Outside {
        path: path.clone(),
        root: root.to_path_buf(),
    };
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(outside());
    };
    let canonical_root = std::fs::canonicalize(root).map_err(io)?;
    let folder = std::fs::canonicalize(parent).map_err(io)?;
    if !folder.starts_with(&canonical_root) {
        return Err(outside());
    }
    let resolved = folder.join(name);
    match std::fs::symlink_metadata(&resolved) {
        Ok(meta) if meta.file_type().is_symlink() => Err(outside()),
        Ok(meta) => check_regular(&path, &meta).map(|()| resolved),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(resolved),
        Err(source) => Err(RepoFileError::Io { path, source }),
    }
}

#[cfg(test)]
mod tests;
