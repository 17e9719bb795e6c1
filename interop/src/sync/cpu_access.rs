//! The one guard around every CPU access to a dma-buf's mapping.
//!
//! The kernel asks a CPU user of a mapped dma-buf to bracket each access with
//! `DMA_BUF_IOCTL_SYNC` (`include/uapi/linux/dma-buf.h`): `SYNC_START` with the access
//! (read, write or both) before touching the bytes, `SYNC_END` after. On a non-coherent SoC
//! (the ARM boards whose decoders emit the tiled layouts dmabridge converts) that is where the
//! exporter flushes or invalidates the CPU caches; without it a reader sees stale lines and a
//! writer's bytes may never reach the device. `SYNC_START` also waits for the buffer's
//! implicit fences (the writes a reader must see; every access, for a writer), which is how a
//! CPU reader waits for a decoder or a GPU that is still filling the frame.
//!
//! `SYNC_START` waits without a limit, so [`CpuAccessGuard::begin`] first polls the dma-buf (the
//! kernel's `dma_buf_poll`: `POLLIN` once the write fences signalled, `POLLOUT` once all did)
//! for at most the caller's timeout, and a fence that never signals is
//! [`CpuAccessError::Timeout`], not a hang. A fence attached between the poll and the ioctl
//! is still waited for, by the ioctl.
//!
//! A memfd or any other file has no such protocol: the guard is then empty, and costs one
//! `fstatfs`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::PollFlags;
use rustix::io::Errno;
use rustix::ioctl::{ioctl, opcode, Opcode, Setter};

use super::wait::{poll_for, WaitError};
use super::SyncAccess;

/// How long a CPU access waits by default for the buffer's fences before it gives up.
pub const CPU_ACCESS_TIMEOUT: Duration = Duration::from_secs(10);

/// `DMA_BUF_SYNC_START`: the access begins.
const SYNC_START: u64 = 0;
/// `DMA_BUF_SYNC_END`: the access ended.
const SYNC_END: u64 = 4;
/// `DMA_BUF_MAGIC`, the `f_type` of the dma-buf file system.
const DMA_BUF_MAGIC: u64 = 0x444d_4142;

/// `struct dma_buf_sync`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DmaBufSync {
    flags: u64,
}

/// `_IOW(DMA_BUF_BASE, 0, struct dma_buf_sync)` = 0x40086200.
pub const DMA_BUF_IOCTL_SYNC: Opcode = opcode::write::<DmaBufSync>(b'b', 0);

/// Why a CPU access could not begin.
#[derive(Debug, thiserror::Error)]
pub enum CpuAccessError {
    /// The buffer's fences did not signal in time (a producer that never finishes).
    #[error("the dma-buf's fences did not signal within {timeout:?}, so its {access} access did not begin")]
    Timeout { access: &'static str, timeout: Duration },
    /// Waiting for the fences failed.
    #[error("waiting for the dma-buf's fences before a {access} access failed: {source}")]
    Wait { access: &'static str, source: WaitError },
    /// `DMA_BUF_IOCTL_SYNC` refused the start of the access.
    #[error("DMA_BUF_IOCTL_SYNC (start of a {access} access) failed: {source}")]
    Sync { access: &'static str, source: io::Error },
    /// The fd could not be examined or kept for the end of the access.
    #[error("the fd cannot be examined or duplicated: {0}")]
    Fd(io::Error),
}

/// An access the CPU is making to a buffer: for a dma-buf, between `SYNC_START` and the
/// `SYNC_END` that dropping it issues. Holds a dup of the fd (the ioctl's end needs one), so
/// it borrows nothing. For any other file it is empty.
#[derive(Debug)]
pub struct CpuAccessGuard {
    dmabuf: Option<OwnedFd>,
    access: SyncAccess,
}

fn access_name(access: SyncAccess) -> &'static str {
    match access {
        SyncAccess::Read => "read",
        SyncAccess::Write => "write",
        SyncAccess::ReadWrite => "read-write",
    }
}

/// Whether `fd` (borrowed) is a dma-buf (`fstatfs` says `DMA_BUF_MAGIC`).
pub fn is_dma_buf(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let fs = rustix::fs::fstatfs(fd)?;
    // f_type is a signed word on some ABIs; the magic is positive.
    #[allow(clippy::unnecessary_cast)]
    Ok(fs.f_type as u64 == DMA_BUF_MAGIC)
}

fn sync(fd: BorrowedFd<'_>, flags: u64) -> Result<(), Errno> {
    loop {
        // SAFETY: the opcode is the kernel's _IOW('b', 0, struct dma_buf_sync) and the
        // argument is that struct (#[repr(C)] u64 flags), copied in by the kernel during the
        // call; the flags are a START or END with a non-empty access, the only ones it takes.
        match unsafe { ioctl(fd, Setter::<DMA_BUF_IOCTL_SYNC, _>::new(DmaBufSync { flags })) } {
            Err(Errno::INTR) | Err(Errno::AGAIN) => continue,
            r => return r,
        }
    }
}

impl CpuAccessGuard {
    /// Begins a CPU `access` to the buffer behind `fd` (borrowed), waiting at most `timeout`
    /// for its fences when it is a dma-buf.
    pub fn begin(fd: BorrowedFd<'_>, access: SyncAccess, timeout: Duration) -> Result<CpuAccessGuard, CpuAccessError> {
        if !is_dma_buf(fd).map_err(CpuAccessError::Fd)? {
            return Ok(CpuAccessGuard { dmabuf: None, access });
        }
        let name = access_name(access);
        // A reader waits for the writes; a writer for every access (dma_buf_poll).
        let ready = if access == SyncAccess::Read { PollFlags::IN } else { PollFlags::OUT };
        match poll_for(fd, ready, timeout) {
            Ok(()) => {}
            Err(WaitError::Timeout { timeout }) => return Err(CpuAccessError::Timeout { access: name, timeout }),
            Err(source) => return Err(CpuAccessError::Wait { access: name, source }),
        }
        let own = fd.try_clone_to_owned().map_err(CpuAccessError::Fd)?;
        sync(fd, SYNC_START | u64::from(access.flags())).map_err(|e| CpuAccessError::Sync { access: name, source: e.into() })?;
        Ok(CpuAccessGuard { dmabuf: Some(own), access })
    }

    /// Whether this access is bracketed (the file is a dma-buf).
    pub fn is_dma_buf(&self) -> bool {
        self.dmabuf.is_some()
    }

    /// The access being made.
    pub fn access(&self) -> SyncAccess {
        self.access
    }
}

impl Drop for CpuAccessGuard {
    fn drop(&mut self) {
        if let Some(fd) = &self.dmabuf {
            if let Err(e) = sync(fd.as_fd(), SYNC_END | u64::from(self.access.flags())) {
                tracing::warn!(error = %e, "DMA_BUF_IOCTL_SYNC (end of a CPU access) failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_number_matches_the_kernel_header() {
        assert_eq!(DMA_BUF_IOCTL_SYNC as u64, 0x4008_6200);
        assert_eq!(std::mem::size_of::<DmaBufSync>(), 8);
    }

    #[test]
    fn a_memfd_needs_no_bracket() {
        let fd = crate::dmabuf::sealed_memfd("cpu-access", &[1, 2, 3]).unwrap();
        let a = CpuAccessGuard::begin(fd.as_fd(), SyncAccess::Write, Duration::ZERO).unwrap();
        assert!(!a.is_dma_buf());
    }
}
