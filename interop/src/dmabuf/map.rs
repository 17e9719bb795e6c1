//! Mappings of fixed-size files: the one place dmabridge maps a dma-buf (or a sealed memfd)
//! itself, for the CPU paths (detile, read-back, writing a frame into a dma-buf that has no
//! `write`).
//!
//! Only a range of a file that cannot shrink ([`FdClass::is_fixed_size`]) is mapped: a file
//! that shrank under a mapping would kill the reader with `SIGBUS`. Shrinkable files are
//! read with `pread` instead ([`super::CheckedImport::read_plane`]).
//!
//! Every mapping of a dma-buf holds a [`CpuAccess`] for as long as it lives: the kernel's
//! `DMA_BUF_IOCTL_SYNC` bracket (cache maintenance, and a wait, with a timeout, for the
//! buffer's fences). A read mapping is read-only and shared, so nothing done through it
//! reaches the producer's memory; a write mapping is made only where the caller writes.

use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::time::Duration;

use super::checks::CheckedImport;
use super::fd_kind::{classify, file_size, FdTrust};
use crate::sync::{CpuAccess, CpuAccessError, SyncAccess, CPU_ACCESS_TIMEOUT};

/// Why a range of a file was not mapped.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The descriptor has no such plane.
    #[error("there is no plane {0}")]
    NoPlane(usize),
    /// The plane's file can shrink: read it, do not map it.
    #[error("plane {0}: the file can shrink, so it is read, never mapped")]
    Shrinkable(usize),
    /// The file is not a buffer, or its size could not be read.
    #[error("plane {plane}: the file cannot be mapped: {reason}")]
    NotMappable { plane: usize, reason: String },
    /// The range runs past what the checks saw of the file.
    #[error("plane {plane}: bytes {offset}..{end} are not all inside the {file_size}-byte file")]
    OutOfFile { plane: usize, offset: u64, end: u64, file_size: u64 },
    /// The CPU access could not begin (the buffer's fences did not signal in time, say).
    #[error("plane {plane}: {source}")]
    Access { plane: usize, source: CpuAccessError },
    /// `mmap` failed (for a write mapping of a read-only fd: `EACCES`).
    #[error("plane {plane}: mmap failed: {source}")]
    Mmap { plane: usize, source: std::io::Error },
}

impl MapError {
    /// The same error, said of plane `plane`.
    fn of_plane(self, plane: usize) -> MapError {
        match self {
            MapError::NoPlane(_) => MapError::NoPlane(plane),
            MapError::Shrinkable(_) => MapError::Shrinkable(plane),
            MapError::NotMappable { reason, .. } => MapError::NotMappable { plane, reason },
            MapError::OutOfFile { offset, end, file_size, .. } => MapError::OutOfFile { plane, offset, end, file_size },
            MapError::Access { source, .. } => MapError::Access { plane, source },
            MapError::Mmap { source, .. } => MapError::Mmap { plane, source },
        }
    }
}

/// A view of `len` bytes of a file from an offset, read-only or read-write, inside a CPU
/// access of the same kind. Unmapped (and the access ended) on drop; borrows nothing (the
/// kernel keeps the file alive while it is mapped, and the access holds its own fd).
pub struct PlaneMap {
    base: NonNull<u8>,
    mapped: usize,
    offset: usize,
    len: usize,
    writable: bool,
    // Dropped after the mapping is gone: the access ends once the bytes are written back.
    _access: CpuAccess,
}

// SAFETY: the mapping is plain memory owned by this value (no thread affinity), and the
// access guard holds only an fd.
unsafe impl Send for PlaneMap {}
// SAFETY: shared references give only `&[u8]`; writing needs `&mut self`.
unsafe impl Sync for PlaneMap {}

impl std::fmt::Debug for PlaneMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaneMap").field("offset", &self.offset).field("len", &self.len).field("writable", &self.writable).finish()
    }
}

impl PlaneMap {
    /// Maps bytes `offset..offset + len` of the file behind `fd` (borrowed) for `access`,
    /// after checking that it is a fixed-size file (a dma-buf or a sealed memfd; any regular
    /// file with [`FdTrust::TrustRegularFiles`]) that holds the range. For a dma-buf the
    /// access waits at most `timeout` for the buffer's fences.
    pub fn of_file(fd: BorrowedFd<'_>, offset: u64, len: u64, access: SyncAccess, trust: FdTrust, timeout: Duration) -> Result<PlaneMap, MapError> {
        let class = classify(fd, trust).map_err(|e| MapError::NotMappable { plane: 0, reason: e.to_string() })?;
        if !class.is_fixed_size() {
            return Err(MapError::Shrinkable(0));
        }
        let size = file_size(fd, class).map_err(|e| MapError::NotMappable { plane: 0, reason: format!("its size cannot be read: {e}") })?;
        Self::checked(fd, offset, len, size, access, timeout)
    }

    /// Maps a range already checked to lie inside a `file_size`-byte fixed-size file.
    fn checked(fd: BorrowedFd<'_>, offset: u64, len: u64, file_size: u64, access: SyncAccess, timeout: Duration) -> Result<PlaneMap, MapError> {
        let out_of_file = || MapError::OutOfFile { plane: 0, offset, end: offset.saturating_add(len), file_size };
        let end = offset.checked_add(len).filter(|e| *e <= file_size).ok_or_else(out_of_file)?;
        // From the page that holds the first byte: mmap offsets are page-aligned.
        let page = rustix::param::page_size() as u64;
        let start = offset / page * page;
        let mapped = usize::try_from((end - start).max(1)).map_err(|_| out_of_file())?;
        let (in_map, len) = (usize::try_from(offset - start).map_err(|_| out_of_file())?, usize::try_from(len).map_err(|_| out_of_file())?);
        let guard = CpuAccess::begin(fd, access, timeout).map_err(|source| MapError::Access { plane: 0, source })?;
        let writable = access != SyncAccess::Read;
        let prot = if writable { rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE } else { rustix::mm::ProtFlags::READ };
        // SAFETY: a fresh shared mapping chosen by the kernel (no fixed address, so nothing
        // existing is replaced) of a page-aligned offset; the file is fixed-size and at least
        // `end` bytes long (checked by the caller against its size), so every mapped page is
        // backed and no access faults.
        let base = unsafe { rustix::mm::mmap(std::ptr::null_mut(), mapped, prot, rustix::mm::MapFlags::SHARED, fd, start) }
            .map_err(|e| MapError::Mmap { plane: 0, source: e.into() })?;
        let base = NonNull::new(base.cast::<u8>()).ok_or(MapError::Mmap { plane: 0, source: std::io::Error::other("null mapping") })?;
        Ok(PlaneMap { base, mapped, offset: in_map, len, writable, _access: guard })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `base` maps `mapped` readable bytes (MAP_SHARED) of a file that cannot
        // shrink (checked when mapping), `offset + len <= mapped`, and the mapping lives
        // until `self` is dropped, after this borrow ends.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(self.offset), self.len) }
    }

    /// The mapped bytes, writable; `None` for a read mapping.
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        if !self.writable {
            return None;
        }
        // SAFETY: as in `bytes`, and the mapping is PROT_WRITE; `&mut self` makes this the
        // only slice of it.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(self.offset), self.len) })
    }

    /// Whether the file is a dma-buf, whose access is bracketed by `DMA_BUF_IOCTL_SYNC`.
    pub fn is_dma_buf(&self) -> bool {
        self._access.is_dma_buf()
    }
}

impl Drop for PlaneMap {
    fn drop(&mut self) {
        // SAFETY: `base`/`mapped` are exactly what mmap returned, and no slice of it outlives
        // `self` (bytes() and bytes_mut() borrow self).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.mapped) };
    }
}

impl CheckedImport<'_> {
    /// Maps `len` bytes of plane `plane` from its offset, read-only: only for a plane whose
    /// file cannot shrink, and only inside what the checks measured of the file. A dma-buf's
    /// fences are waited for ([`CPU_ACCESS_TIMEOUT`]).
    pub fn map_plane(&self, plane: usize, len: u64) -> Result<PlaneMap, MapError> {
        self.map_plane_within(plane, len, CPU_ACCESS_TIMEOUT)
    }

    /// [`CheckedImport::map_plane`], waiting at most `timeout` for a dma-buf's fences.
    pub fn map_plane_within(&self, plane: usize, len: u64, timeout: Duration) -> Result<PlaneMap, MapError> {
        let p = self.planes().get(plane).ok_or(MapError::NoPlane(plane))?;
        if !p.class.is_fixed_size() {
            return Err(MapError::Shrinkable(plane));
        }
        let fd: BorrowedFd<'_> = self.dmabuf().plane(plane).ok_or(MapError::NoPlane(plane))?.fd;
        PlaneMap::checked(fd, p.offset, len, p.file_size, SyncAccess::Read, timeout).map_err(|e| e.of_plane(plane))
    }
}
