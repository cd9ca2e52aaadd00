//! POSIX shared-memory regions the client creates and owns (`/dev/shm/NAME`, registered with
//! the server under key `/NAME`), created with the `shared_memory` crate. The server maps the
//! same object and reads inputs from it and writes outputs into it in place.
//!
//! The only `unsafe` of the crate is here: borrowing the mapping as slices.
//!
//! Who writes when: this process writes through `&mut ShmRegion`; the server writes outputs
//! only while a request naming the region runs, and such requests are sent by
//! [`crate::KserveClient::infer_in_region`], which holds `&mut ShmRegion` for the whole call.
//! So a slice returned by [`ShmRegion::read`] cannot be alive while the server writes. Another
//! process that opens the object by name and writes it concurrently breaks that; don't.

#![allow(unsafe_code)]

use shared_memory::{Shmem, ShmemConf};

use crate::error::{ClientError, Result};
use crate::tensor::Tensor;

/// A shared-memory object this process created. Dropping it unmaps and unlinks it (unregister
/// it from the server first: the server keeps its own mapping until then).
pub struct ShmRegion {
    name: String,
    shmem: Shmem,
}

// SAFETY: `Shmem` holds a file descriptor and a pointer to a process-wide mapping; neither is
// tied to the thread that created it, so the owner may move to another thread.
unsafe impl Send for ShmRegion {}
// SAFETY: `&ShmRegion` only hands out shared, read-only slices; writing needs `&mut`.
unsafe impl Sync for ShmRegion {}

impl std::fmt::Debug for ShmRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmRegion")
            .field("name", &self.name)
            .field("byte_size", &self.byte_size())
            .finish()
    }
}

impl ShmRegion {
    /// Creates `/dev/shm/NAME` of `byte_size` bytes, zero-filled. Fails if it exists.
    pub fn create(name: &str, byte_size: usize) -> Result<Self> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(ClientError::SharedMemory(format!(
                "'{name}' is not a shared-memory object name (no '/', not empty)"
            )));
        }
        let shmem = ShmemConf::new()
            .os_id(format!("/{name}"))
            .size(byte_size)
            .create()
            .map_err(|err| ClientError::SharedMemory(format!("cannot create '{name}': {err}")))?;
        Ok(Self {
            name: name.to_owned(),
            shmem,
        })
    }

    /// The name the region is registered under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key the server opens: `/NAME`.
    pub fn key(&self) -> String {
        format!("/{}", self.name)
    }

    pub fn byte_size(&self) -> usize {
        self.shmem.len()
    }

    fn memory(&self) -> &[u8] {
        // SAFETY: the mapping is `len()` bytes, valid while `self.shmem` lives, which the
        // borrow of `self` guarantees; see the module notes for why no one writes meanwhile.
        unsafe { self.shmem.as_slice() }
    }

    fn memory_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `memory`, and `&mut self` makes this the only borrow in this process.
        unsafe { self.shmem.as_slice_mut() }
    }

    fn window(&self, offset: usize, len: usize) -> Result<std::ops::Range<usize>> {
        offset
            .checked_add(len)
            .filter(|&end| end <= self.byte_size())
            .map(|end| offset..end)
            .ok_or_else(|| {
                ClientError::SharedMemory(format!(
                    "{len} bytes at offset {offset} do not fit region '{}' of {} bytes",
                    self.name,
                    self.byte_size()
                ))
            })
    }

    /// Copies `bytes` to `offset`.
    pub fn write_bytes(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
        let range = self.window(offset, bytes.len())?;
        self.memory_mut()
            .get_mut(range)
            .ok_or_else(|| ClientError::SharedMemory("window out of range".into()))?
            .copy_from_slice(bytes);
        Ok(())
    }

    /// Copies `values` to `offset`; returns the bytes written.
    pub fn write<T: bytemuck::Pod>(&mut self, offset: usize, values: &[T]) -> Result<usize> {
        let bytes: &[u8] = bytemuck::cast_slice(values);
        self.write_bytes(offset, bytes)?;
        Ok(bytes.len())
    }

    /// Copies a tensor's raw bytes to `offset`; returns the bytes written.
    pub fn write_tensor(&mut self, offset: usize, tensor: &Tensor) -> Result<usize> {
        self.write_bytes(offset, tensor.raw())?;
        Ok(tensor.raw().len())
    }

    /// `len` bytes at `offset`, in place.
    pub fn read_bytes(&self, offset: usize, len: usize) -> Result<&[u8]> {
        let range = self.window(offset, len)?;
        self.memory()
            .get(range)
            .ok_or_else(|| ClientError::SharedMemory("window out of range".into()))
    }

    /// `count` values of `T` at `offset`, read in place (no copy). `offset` must be aligned
    /// for `T` (the mapping itself is page-aligned).
    pub fn read<T: bytemuck::Pod>(&self, offset: usize, count: usize) -> Result<&[T]> {
        let len = count
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| ClientError::SharedMemory("size overflows".into()))?;
        bytemuck::try_cast_slice(self.read_bytes(offset, len)?).map_err(|err| {
            ClientError::SharedMemory(format!(
                "offset {offset} cannot be read as {}: {err}",
                std::any::type_name::<T>()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unique(tag: &str) -> String {
        format!("tensorport_client_{tag}_{}", std::process::id())
    }

    #[test]
    fn writes_and_reads_in_place_and_unlinks_on_drop() {
        let name = unique("unit");
        let path = std::path::Path::new("/dev/shm").join(&name);
        {
            let mut region = ShmRegion::create(&name, 64).unwrap();
            assert!(path.exists());
            assert_eq!(region.key(), format!("/{name}"));
            assert_eq!(region.write(8, &[1.5f32, 2.5]).unwrap(), 8);
            assert_eq!(region.read::<f32>(8, 2).unwrap(), &[1.5, 2.5]);
            assert!(region.read::<f32>(9, 1).is_err(), "misaligned");
            assert!(region.write(60, &[0u64]).is_err(), "past the end");
            assert!(ShmRegion::create(&name, 64).is_err(), "already exists");
        }
        assert!(!path.exists());
    }

    #[test]
    fn names_with_slashes_are_refused() {
        assert!(ShmRegion::create("a/b", 8).is_err());
        assert!(ShmRegion::create("", 8).is_err());
    }
}
