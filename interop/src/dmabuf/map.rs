//! Read-only mappings of checked planes, for the CPU copy path: the one place dmabridge
//! maps a dma-buf (or a sealed memfd) itself.
//!
//! Only a plane whose file cannot shrink ([`FdClass::is_fixed_size`]) is mapped: a file
//! that shrank under a mapping would kill the reader with `SIGBUS`. Shrinkable files are
//! read with `pread` instead ([`super::CheckedImport::read_plane`]). The mapping is shared
//! and read-only, so nothing dmabridge does through it reaches the producer's memory.

use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

use super::checks::CheckedImport;

/// Why a plane was not mapped.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The descriptor has no such plane.
    #[error("there is no plane {0}")]
    NoPlane(usize),
    /// The plane's file can shrink: read it, do not map it.
    #[error("plane {0}: the file can shrink, so it is read, never mapped")]
    Shrinkable(usize),
    /// The range runs past what the checks saw of the file.
    #[error("plane {plane}: bytes {offset}..{end} are not all inside the {file_size}-byte file")]
    OutOfFile { plane: usize, offset: u64, end: u64, file_size: u64 },
    /// `mmap` failed.
    #[error("plane {plane}: mmap failed: {source}")]
    Mmap { plane: usize, source: std::io::Error },
}

/// A read-only view of `len` bytes of a plane's file from the plane's offset. Unmapped on
/// drop; borrows nothing (the kernel keeps the file alive while it is mapped).
pub struct PlaneMap {
    base: NonNull<u8>,
    mapped: usize,
    offset: usize,
    len: usize,
}

impl std::fmt::Debug for PlaneMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaneMap").field("offset", &self.offset).field("len", &self.len).finish()
    }
}

impl PlaneMap {
    /// The plane's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `base` maps `mapped` readable bytes (PROT_READ, MAP_SHARED) of a file that
        // cannot shrink (checked when mapping), `offset + len <= mapped`, and the mapping
        // lives until `self` is dropped, after this borrow ends.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(self.offset), self.len) }
    }
}

impl Drop for PlaneMap {
    fn drop(&mut self) {
        // SAFETY: `base`/`mapped` are exactly what mmap returned, and no slice of it outlives
        // `self` (bytes() borrows self).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.mapped) };
    }
}

impl CheckedImport<'_> {
    /// Maps `len` bytes of plane `plane` from its offset, read-only: only for a plane whose
    /// file cannot shrink, and only inside what the checks measured of the file.
    pub fn map_plane(&self, plane: usize, len: u64) -> Result<PlaneMap, MapError> {
        let p = self.planes().get(plane).ok_or(MapError::NoPlane(plane))?;
        if !p.class.is_fixed_size() {
            return Err(MapError::Shrinkable(plane));
        }
        let end = p.offset.checked_add(len).filter(|e| *e <= p.file_size).ok_or(MapError::OutOfFile {
            plane,
            offset: p.offset,
            end: p.offset.saturating_add(len),
            file_size: p.file_size,
        })?;
        let fd: BorrowedFd<'_> = self.dmabuf().plane(plane).ok_or(MapError::NoPlane(plane))?.fd;
        let mapped = usize::try_from(end.max(1)).map_err(|_| MapError::OutOfFile { plane, offset: p.offset, end, file_size: p.file_size })?;
        // SAFETY: a fresh shared read-only mapping chosen by the kernel (no fixed address, so
        // nothing existing is replaced); the file is fixed-size and at least `end` bytes long
        // (checked above against the size the checks read), so every mapped page is backed.
        let base = unsafe {
            rustix::mm::mmap(std::ptr::null_mut(), mapped, rustix::mm::ProtFlags::READ, rustix::mm::MapFlags::SHARED, fd, 0)
        }
        .map_err(|e| MapError::Mmap { plane, source: e.into() })?;
        let base = NonNull::new(base.cast::<u8>()).ok_or(MapError::Mmap { plane, source: std::io::Error::other("null mapping") })?;
        Ok(PlaneMap { base, mapped, offset: p.offset as usize, len: len as usize })
    }
}
