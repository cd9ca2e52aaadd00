//! One mapped POSIX shared-memory region. This and [`super::guard`] are the crate's only unsafe
//! code besides the ONNX Runtime string calls: it hands out views of memory another process
//! owns.
#![allow(unsafe_code)]

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use super::error::ShmError;
use super::guard::Guarded;
use super::peer::PeerClass;
use crate::backend::OutputMemory;

/// The longest object name Linux accepts after the leading `/`.
const MAX_KEY_LEN: usize = 255;

/// Where POSIX shared-memory objects live on Linux (`shm_open` opens files here).
const SHM_DIR: &str = "/dev/shm";

/// A client-created shared-memory object, mapped from `offset` for `byte_size` bytes.
///
/// The mapping lives as long as the last `Arc<Region>`: the registry holds one, and every
/// tensor viewing the region holds another, so unregistering while requests use the region
/// unmaps it only when they finish.
pub struct Region {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: usize,
    /// Who registered it (confinement under `--shm local`).
    pub class: PeerClass,
    /// Kept open to read the object's current size before each use.
    file: File,
    /// Declared before `map`, so dropped first: the fault handler forgets the mapping before
    /// it is unmapped.
    guard: Guarded,
    map: MmapRaw,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("offset", &self.offset)
            .field("byte_size", &self.byte_size)
            .field("class", &self.class)
            .finish()
    }
}

/// Refuses keys that could name anything but an object directly under `/dev/shm`.
pub fn check_key(key: &str) -> Result<(), ShmError> {
    let name = key.strip_prefix('/').unwrap_or(key);
    let valid = !name.is_empty()
        && name.len() <= MAX_KEY_LEN
        && !name.contains('/')
        && !name.contains('\0')
        && name != "."
        && !name.contains("..");
    if valid {
        Ok(())
    } else {
        Err(ShmError::InvalidKey(key.to_owned()))
    }
}

impl Region {
    /// Opens and maps `key` (e.g. `/input0`, i.e. `/dev/shm/input0`) for a client of `class`.
    pub fn open(
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
        class: PeerClass,
    ) -> Result<Self, ShmError> {
        check_key(key)?;
        let byte_size = usize::try_from(byte_size)
            .ok()
            .filter(|&size| size > 0)
            .ok_or(ShmError::BadSize(byte_size))?;
        let file = open_object(key)?;
        let object_size = object_size(&file, key)?;
        let end = offset
            .checked_add(byte_size as u64)
            .ok_or(ShmError::Overflow)?;
        if end > object_size {
            return Err(ShmError::RegionPastEnd {
                key: key.to_owned(),
                offset,
                byte_size: byte_size as u64,
                object_size,
            });
        }
        let map = MmapOptions::new()
            .offset(offset)
            .len(byte_size)
            .map_raw(&file)
            .map_err(|source| ShmError::Open {
                key: key.to_owned(),
                source,
            })?;
        let guard = Guarded::new(map.as_ptr(), byte_size)?;
        Ok(Self {
            name: name.to_owned(),
            key: key.to_owned(),
            offset,
            byte_size,
            class,
            file,
            guard,
            map,
        })
    }

    /// Whether a fault replaced this region's memory (its object was truncated, or a page of
    /// it could not be allocated): it must be registered again.
    pub fn poisoned(&self) -> bool {
        self.guard.poisoned()
    }

    /// Fails when the region was poisoned; requests check it after using the region.
    pub fn check_intact(&self) -> Result<(), ShmError> {
        if self.poisoned() {
            return Err(ShmError::Poisoned(self.name.clone()));
        }
        Ok(())
    }

    /// Checks that `[offset, offset + len)` lies inside the region and inside the object as it
    /// is now: a client that shrank its object after registering gets an error, not a fault.
    fn check_window(&self, offset: u64, len: u64) -> Result<(usize, usize), ShmError> {
        self.check_intact()?;
        let end = offset.checked_add(len).ok_or(ShmError::Overflow)?;
        if end > self.byte_size as u64 {
            return Err(ShmError::WindowPastEnd {
                region: self.name.clone(),
                offset,
                byte_size: len,
                region_size: self.byte_size as u64,
            });
        }
        let object_size = object_size(&self.file, &self.key)?;
        let object_end = self.offset.checked_add(end).ok_or(ShmError::Overflow)?;
        if object_end > object_size {
            return Err(ShmError::Truncated {
                region: self.name.clone(),
                object_size,
            });
        }
        // Both fit in the mapping's usize length, checked above.
        Ok((offset as usize, len as usize))
    }

    /// A view of `len` bytes at `offset` that keeps the region mapped while it lives.
    pub fn view(self: &Arc<Self>, offset: u64, len: u64) -> Result<Bytes, ShmError> {
        let (start, len) = self.check_window(offset, len)?;
        Ok(Bytes::from_owner(Window {
            region: self.clone(),
            start,
            len,
        }))
    }

    /// A writable window of `len` bytes at `offset`, for the runtime to write an output into.
    /// It keeps the region mapped while it lives.
    pub fn window(self: &Arc<Self>, offset: u64, len: u64) -> Result<RegionWindow, ShmError> {
        let (start, len) = self.check_window(offset, len)?;
        Ok(RegionWindow {
            region: self.clone(),
            start,
            len,
        })
    }

    /// Whether `bytes` are exactly the `len` bytes at `offset` of this region (an output the
    /// runtime already wrote in place).
    pub fn holds(&self, offset: u64, bytes: &[u8]) -> bool {
        usize::try_from(offset).is_ok_and(|offset| {
            offset <= self.byte_size
                && self.map.as_ptr().wrapping_add(offset) == bytes.as_ptr()
                && bytes.len() <= self.byte_size - offset
        })
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), ShmError> {
        let (start, len) = self.check_window(offset, data.len() as u64)?;
        // SAFETY: `check_window` proved `start + len <= byte_size`, the mapping's length, and
        // that the object still covers it; `data` is our own buffer, so it cannot overlap the
        // mapping of a client's object.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(start), len);
        }
        Ok(())
    }
}

/// Opens `/dev/shm/<name>` as `shm_open` would, but refuses to follow a symbolic link (which
/// would let a client reach any file the server can open) and anything but a regular file
/// (a FIFO, a device or a directory is no shared memory).
fn open_object(key: &str) -> Result<File, ShmError> {
    let name = key.strip_prefix('/').unwrap_or(key);
    let io_error = |errno: Errno| ShmError::Open {
        key: key.to_owned(),
        source: std::io::Error::from(errno),
    };
    let dir = rustix::fs::open(
        SHM_DIR,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_error)?;
    // NONBLOCK: opening a FIFO or a device must not hang the registration.
    let flags =
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = rustix::fs::openat(&dir, name, flags, Mode::empty()).map_err(|errno| {
        let what = match errno {
            Errno::LOOP => "a symbolic link",
            Errno::ISDIR => "a directory",
            _ => return io_error(errno),
        };
        ShmError::NotRegularFile {
            key: key.to_owned(),
            what,
        }
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(io_error)?;
    let file_type = FileType::from_raw_mode(stat.st_mode);
    if file_type != FileType::RegularFile {
        return Err(ShmError::NotRegularFile {
            key: key.to_owned(),
            what: match file_type {
                FileType::Directory => "a directory",
                FileType::Fifo => "a FIFO",
                FileType::CharacterDevice | FileType::BlockDevice => "a device",
                FileType::Socket => "a socket",
                _ => "not a regular file",
            },
        });
    }
    Ok(File::from(fd))
}

fn object_size(file: &File, key: &str) -> Result<u64, ShmError> {
    file.metadata()
        .map(|meta| meta.len())
        .map_err(|source| ShmError::Open {
            key: key.to_owned(),
            source,
        })
}

/// A writable window of a mapped region, bounds-checked when made.
#[derive(Debug)]
pub struct RegionWindow {
    region: Arc<Region>,
    start: usize,
    len: usize,
}

// SAFETY: the window was bounds-checked against the mapping when it was made, and it holds
// the region, whose mapping therefore stays in place (unmapping is deferred until the last
// holder is gone) for as long as the window lives.
unsafe impl OutputMemory for RegionWindow {
    fn as_mut_ptr(&self) -> *mut u8 {
        // In bounds: `start + len <= byte_size` was checked when the window was made.
        self.region.map.as_mut_ptr().wrapping_add(self.start)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn view(&self, len: usize) -> Bytes {
        Bytes::from_owner(Window {
            region: self.region.clone(),
            start: self.start,
            len: len.min(self.len),
        })
    }
}

/// Bytes inside a mapped region; owning it keeps the mapping alive.
struct Window {
    region: Arc<Region>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for Window {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `start + len` was checked against the mapping's length when the window was
        // made, and `region` keeps the mapping alive for as long as this slice can be borrowed.
        // The memory is shared with the client, which by the shared-memory protocol does not
        // write an input region while its request is in flight.
        unsafe { std::slice::from_raw_parts(self.region.map.as_ptr().add(self.start), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_under_dev_shm() {
        assert!(check_key("/ok_name").is_ok());
        assert!(check_key("ok").is_ok());
        for bad in ["/", "", "/a/b", "/../etc/passwd", "/..", "/a..b", "/x\0y"] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }
}
