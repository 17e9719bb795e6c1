//! Mappings of fixed-size files: the one place dmabridge maps a dma-buf (or a sealed memfd)
//! itself, for the CPU paths (detile, read-back, writing a frame into a dma-buf that has no
//! `write`).
//!
//! Only a range of a file that cannot shrink ([`super::FdClass::is_fixed_size`]) is mapped: a file
//! that shrank under a mapping would kill the reader with `SIGBUS`. Shrinkable files are
//! read with `pread` instead ([`super::CheckedImport::read_plane`]).
//!
//! Every mapping of a dma-buf holds a [`CpuAccessGuard`] for as long as it lives: the kernel's
//! `DMA_BUF_IOCTL_SYNC` bracket (cache maintenance, and a wait, with a timeout, for the
//! buffer's fences). A read mapping is read-only and shared, so nothing done through it
//! reaches the producer's memory; a write mapping is made only where the caller writes.

use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::time::Duration;

use super::checks::{CheckedImport, CheckedPlane};
use super::fd_kind::{classify, file_size, FdClass, FdTrust};
use crate::sync::{CpuAccessError, CpuAccessGuard, SyncAccess, CPU_ACCESS_TIMEOUT};

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

/// One shared mapping of a page-aligned range of a file, unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    mapped: usize,
}

// SAFETY: the mapping is plain memory owned by this value, with no thread affinity.
unsafe impl Send for Mapping {}
// SAFETY: nothing here hands out a reference; the owners below decide who writes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `mapped` bytes of `fd` from the page-aligned `start`, with `prot`.
    ///
    /// # Safety
    /// The file cannot shrink and holds `start + mapped` bytes (or the pages past its end
    /// are never touched), so no access through the mapping faults.
    unsafe fn new(fd: BorrowedFd<'_>, start: u64, mapped: usize, prot: rustix::mm::ProtFlags) -> Result<Mapping, MapError> {
        // SAFETY: a fresh shared mapping chosen by the kernel (no fixed address, so nothing
        // existing is replaced) of a page-aligned offset; the caller vouches for the file.
        let base = unsafe { rustix::mm::mmap(std::ptr::null_mut(), mapped, prot, rustix::mm::MapFlags::SHARED, fd, start) }
            .map_err(|e| MapError::Mmap { plane: 0, source: e.into() })?;
        let base = NonNull::new(base.cast::<u8>()).ok_or(MapError::Mmap { plane: 0, source: std::io::Error::other("null mapping") })?;
        Ok(Mapping { base, mapped })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`mapped` are exactly what mmap returned, and no slice of it outlives
        // its owner (every slice borrows a PlaneMap or a CachedView, which hold this value).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.mapped) };
    }
}

/// The page-aligned start, the mapped length and the place of `offset` in it, for bytes
/// `offset..offset + len` checked to lie in a `file_size`-byte file of class `class`.
///
/// A dma-buf is mapped from its first byte: exporters built on the DRM shmem helpers
/// (virtio-gpu and vgem in Linux 6.12) fault pages in by their place in the mapping and
/// ignore the mmap offset, so a mapping that starts at page N shows page 0 there (found in
/// the kernel lab: rows written at 5120 landed at 1024). Other files are mapped from the
/// page that holds the first byte (mmap offsets are page-aligned).
fn page_range(offset: u64, len: u64, file_size: u64, class: FdClass) -> Result<(u64, usize, usize, usize), MapError> {
    let out_of_file = || MapError::OutOfFile { plane: 0, offset, end: offset.saturating_add(len), file_size };
    let end = offset.checked_add(len).filter(|e| *e <= file_size).ok_or_else(out_of_file)?;
    let page = rustix::param::page_size() as u64;
    let start = if class == FdClass::DmaBuf { 0 } else { offset / page * page };
    let mapped = usize::try_from((end - start).max(1)).map_err(|_| out_of_file())?;
    let (in_map, len) = (usize::try_from(offset - start).map_err(|_| out_of_file())?, usize::try_from(len).map_err(|_| out_of_file())?);
    Ok((start, mapped, in_map, len))
}

/// A view of `len` bytes of a file from an offset, read-only or read-write, inside a CPU
/// access of the same kind. Unmapped (and the access ended) on drop; borrows nothing (the
/// kernel keeps the file alive while it is mapped, and the access holds its own fd).
pub struct PlaneMap {
    // Declared first, so dropped first: the access ends once the bytes are written back.
    map: Mapping,
    offset: usize,
    len: usize,
    writable: bool,
    _access: CpuAccessGuard,
}

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
        Self::checked(fd, offset, len, size, class, access, timeout)
    }

    /// Maps a range already checked to lie inside a `file_size`-byte fixed-size file of
    /// class `class`.
    fn checked(fd: BorrowedFd<'_>, offset: u64, len: u64, file_size: u64, class: FdClass, access: SyncAccess, timeout: Duration) -> Result<PlaneMap, MapError> {
        let (start, mapped, in_map, len) = page_range(offset, len, file_size, class)?;
        let guard = CpuAccessGuard::begin(fd, access, timeout).map_err(|source| MapError::Access { plane: 0, source })?;
        let writable = access != SyncAccess::Read;
        let prot = if writable { rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE } else { rustix::mm::ProtFlags::READ };
        // SAFETY: the file is fixed-size and at least `start + mapped` bytes long (checked by
        // the caller against its size, and by page_range), so every mapped page is backed.
        let map = unsafe { Mapping::new(fd, start, mapped, prot) }?;
        Ok(PlaneMap { map, offset: in_map, len, writable, _access: guard })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `base` maps `mapped` readable bytes (MAP_SHARED) of a file that cannot
        // shrink (checked when mapping), `offset + len <= mapped`, and the mapping lives
        // until `self` is dropped, after this borrow ends.
        unsafe { std::slice::from_raw_parts(self.map.base.as_ptr().add(self.offset), self.len) }
    }

    /// The mapped bytes, writable; `None` for a read mapping.
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        if !self.writable {
            return None;
        }
        // SAFETY: as in `bytes`, and the mapping is PROT_WRITE; `&mut self` makes this the
        // only slice of it.
        Some(unsafe { std::slice::from_raw_parts_mut(self.map.base.as_ptr().add(self.offset), self.len) })
    }

    /// Whether the file is a dma-buf, whose access is bracketed by `DMA_BUF_IOCTL_SYNC`.
    pub fn is_dma_buf(&self) -> bool {
        self._access.is_dma_buf()
    }
}


/// Read mappings kept from one frame to the next, for a consumer that sees the same few
/// buffers again and again (a decoder's or a source's pool): a file's range is mapped once
/// and each use begins its own [`CpuAccessGuard`], instead of an `mmap`, a page fault per 64 KiB
/// and a `munmap` (with its TLB shootdown) every frame.
///
/// A file is known by its device and inode, which cannot be reused while a mapping holds the
/// file. At most `capacity` mappings are kept, the oldest unmapped first; a kept mapping keeps
/// its file's memory alive until it is evicted or the cache is dropped, so `capacity` frames
/// of memory is the price.
pub struct MapCache {
    capacity: usize,
    entries: std::collections::VecDeque<std::sync::Arc<Cached>>,
    hits: u64,
}

struct Cached {
    /// `st_dev`, `st_ino`.
    file: (u64, u64),
    start: u64,
    map: Mapping,
}

/// A read-only view of a plane through a [`MapCache`] mapping, inside its own CPU access
/// (ended on drop; the mapping stays in the cache).
pub struct CachedView {
    // Declared first, so the access ends before this view's hold on the mapping does.
    _access: CpuAccessGuard,
    map: std::sync::Arc<Cached>,
    offset: usize,
    len: usize,
}

impl CachedView {
    /// The plane's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping (held by the Arc for as long as this view lives) covers
        // `offset..offset + len` of a fixed-size file at least that long (checked when the
        // view was made), mapped readable.
        unsafe { std::slice::from_raw_parts(self.map.map.base.as_ptr().add(self.offset), self.len) }
    }
}

impl MapCache {
    /// A cache of at most `capacity` mappings (at least one).
    pub fn new(capacity: usize) -> MapCache {
        MapCache { capacity: capacity.max(1), entries: std::collections::VecDeque::new(), hits: 0 }
    }

    /// Mappings held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Views made from a mapping already held.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// `len` bytes of plane `plane` from its offset, read-only, as
    /// [`CheckedImport::map_plane`] (the same checks: a fixed-size file, inside what the
    /// checks measured, a dma-buf's fences waited for), through a mapping kept for the
    /// next frames.
    pub fn map_plane(&mut self, checked: &CheckedImport<'_>, plane: usize, len: u64) -> Result<CachedView, MapError> {
        let (p, fd) = checked.mappable_plane(plane)?;
        let (start, mapped, in_map, len) = page_range(p.offset, len, p.file.size, p.file.class).map_err(|e| e.of_plane(plane))?;
        let st = rustix::fs::fstat(fd).map_err(|e| MapError::NotMappable { plane, reason: format!("fstat: {e}") })?;
        let file = (st.st_dev as u64, st.st_ino as u64);
        let end = start + mapped as u64;
        let found = self.entries.iter().position(|c| c.file == file && c.start <= start && end <= c.start + c.map.mapped as u64);
        let entry = match found {
            Some(i) => {
                self.hits += 1;
                self.entries[i].clone()
            }
            None => {
                // SAFETY: the checks found the file fixed-size and `p.file_size` bytes long,
                // and page_range put `start + mapped` inside it.
                let map = unsafe { Mapping::new(fd, start, mapped, rustix::mm::ProtFlags::READ) }.map_err(|e| e.of_plane(plane))?;
                let entry = std::sync::Arc::new(Cached { file, start, map });
                if self.entries.len() == self.capacity {
                    self.entries.pop_front();
                }
                self.entries.push_back(entry.clone());
                entry
            }
        };
        let access = CpuAccessGuard::begin(fd, SyncAccess::Read, CPU_ACCESS_TIMEOUT).map_err(|source| MapError::Access { plane, source })?;
        let offset = (start - entry.start) as usize + in_map;
        Ok(CachedView { _access: access, map: entry, offset, len })
    }
}

impl CheckedImport<'_> {
    /// Plane `plane`'s checks and fd, if its file may be mapped (it cannot shrink).
    fn mappable_plane(&self, plane: usize) -> Result<(&CheckedPlane, BorrowedFd<'_>), MapError> {
        let p = self.planes().get(plane).ok_or(MapError::NoPlane(plane))?;
        if !p.file.class.is_fixed_size() {
            return Err(MapError::Shrinkable(plane));
        }
        Ok((p, self.dmabuf().plane(plane).ok_or(MapError::NoPlane(plane))?.fd))
    }

    /// Maps `len` bytes of plane `plane` from its offset, read-only: only for a plane whose
    /// file cannot shrink, and only inside what the checks measured of the file. A dma-buf's
    /// fences are waited for ([`CPU_ACCESS_TIMEOUT`]).
    pub fn map_plane(&self, plane: usize, len: u64) -> Result<PlaneMap, MapError> {
        self.map_plane_within(plane, len, CPU_ACCESS_TIMEOUT)
    }

    /// [`CheckedImport::map_plane`], waiting at most `timeout` for a dma-buf's fences.
    pub fn map_plane_within(&self, plane: usize, len: u64, timeout: Duration) -> Result<PlaneMap, MapError> {
        let (p, fd) = self.mappable_plane(plane)?;
        PlaneMap::checked(fd, p.offset, len, p.file.size, p.file.class, SyncAccess::Read, timeout).map_err(|e| e.of_plane(plane))
    }
}
