//! Reading a buffer's bytes into memory the caller owns: with `pread` for regular files
//! (memfds, files), through a guarded mapping for dma-bufs.
//!
//! A mapping of a file that its sender truncates faults (SIGBUS) on the next touch of a page
//! past the new end; `pread` instead returns fewer bytes, which is reported here as
//! [`ReadError::ShortRead`]. This is the copy path for fds that are not fixed-size
//! ([`FdClass::Shrinkable`](super::FdClass::Shrinkable)): what it returns is a private copy
//! that no one else can change or shrink.
//!
//! A dma-buf has no `read` or `pread` (`ESPIPE`), but its size is fixed at export, so it is
//! mapped read-only for the copy, inside a [`CpuAccessGuard`](crate::sync::CpuAccessGuard) bracket
//! that waits (at most [`CPU_ACCESS_TIMEOUT`]) for its fences.

use std::io;
use std::os::fd::BorrowedFd;

use rustix::io::{pread, Errno};

use super::fd_kind::FdTrust;
use super::map::{MapError, PlaneMap};
use crate::sync::{is_dma_buf, SyncAccess, CPU_ACCESS_TIMEOUT};

/// Why a read failed. Nothing read so far is returned; the caller's buffer holds garbage.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The caller's cap is smaller than what it asked for.
    #[error("reading {len} bytes is more than the cap of {max} bytes")]
    TooLarge { len: u64, max: u64 },
    /// `offset + len` does not fit in 64 bits (or past the largest file offset, 2^63 - 1).
    #[error("bytes {offset}..{offset}+{len} run past the largest file offset")]
    Overflow { offset: u64, len: u64 },
    /// The memory for the copy could not be had.
    #[error("could not allocate {len} bytes for the copy")]
    Alloc { len: u64 },
    /// The file ended early: it was never that long, or it shrank while being read.
    #[error("the file ends at byte {end_of_file}, before byte {wanted_end} (it is shorter than the layout says, or it shrank during the read)")]
    ShortRead { wanted_end: u64, end_of_file: u64 },
    /// `pread` failed (the fd is not readable, not a file that supports it, ...).
    #[error("pread at byte {at} failed: {source}")]
    Io { at: u64, source: io::Error },
    /// A dma-buf could not be mapped for the copy, or its fences did not signal in time.
    #[error("reading the dma-buf: {0}")]
    Map(#[from] MapError),
}

/// Fills all of `dst` from `fd` (borrowed) starting at byte `offset`. The file's offset is
/// not moved, so other users of the same open file are undisturbed.
pub fn read_exact_at(fd: BorrowedFd<'_>, offset: u64, dst: &mut [u8]) -> Result<(), ReadError> {
    let len = dst.len() as u64;
    let wanted_end = offset
        .checked_add(len)
        .filter(|&end| end <= i64::MAX as u64)
        .ok_or(ReadError::Overflow { offset, len })?;
    if is_dma_buf(fd).map_err(|source| ReadError::Io { at: offset, source })? {
        if dst.is_empty() {
            return Ok(());
        }
        let map = PlaneMap::of_file(fd, offset, len, SyncAccess::Read, FdTrust::Untrusted, CPU_ACCESS_TIMEOUT).map_err(|e| match e {
            MapError::OutOfFile { file_size, .. } => ReadError::ShortRead { wanted_end, end_of_file: file_size.max(offset) },
            e => ReadError::Map(e),
        })?;
        dst.copy_from_slice(map.bytes());
        return Ok(());
    }
    let mut done = 0usize;
    while let Some(rest) = dst.get_mut(done..).filter(|r| !r.is_empty()) {
        // done <= dst.len(), so this is at most wanted_end.
        let at = offset + done as u64;
        match pread(fd, rest, at) {
            Ok(0) => return Err(ReadError::ShortRead { wanted_end, end_of_file: at }),
            Ok(n) => done += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(ReadError::Io { at, source: e.into() }),
        }
    }
    Ok(())
}

/// Reads `len` bytes at `offset` of `fd` (borrowed) into a new buffer the caller owns,
/// refusing more than `max` bytes before allocating anything.
pub fn read_at(fd: BorrowedFd<'_>, offset: u64, len: u64, max: u64) -> Result<Vec<u8>, ReadError> {
    if len > max {
        return Err(ReadError::TooLarge { len, max });
    }
    offset
        .checked_add(len)
        .filter(|&end| end <= i64::MAX as u64)
        .ok_or(ReadError::Overflow { offset, len })?;
    let n = usize::try_from(len).map_err(|_| ReadError::Alloc { len })?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(n).map_err(|_| ReadError::Alloc { len })?;
    buf.resize(n, 0);
    read_exact_at(fd, offset, &mut buf)?;
    Ok(buf)
}
