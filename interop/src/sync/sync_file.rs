//! [`SyncFile`]: an fd the kernel confirmed is a sync_file fence.
//!
//! A fence is a promise from whoever made it. An fd that merely looks like one (an anonymous
//! inode: an eventfd, a timerfd, an epoll or inotify fd) never signals, or polls readable at
//! once, and a consumer that waits on it, on its GPU queue or its CPU, waits for nothing or
//! for ever. So every fence that enters dmabridge from outside (a peer's handoff message, a
//! caller's fd) becomes a [`SyncFile`] through [`SyncFile::new`] before anything keeps it,
//! and every API that takes a fence takes a [`SyncFile`]. The check is the kernel's own:
//! `SYNC_IOC_FILE_INFO`, which only sync_files answer.
//!
//! A fence can also signal with an error: the work it stands for failed or was abandoned (a
//! GPU hang or reset, a producer that died, a sw_sync timeline closed with fences pending:
//! `-ENOENT`). Such a fence polls readable like any signalled one, so a wait that only polls
//! would take it for success and the consumer would use a frame nobody finished. Every wait
//! here ([`SyncFile::wait`], [`SyncFile::is_signalled`], [`wait_sync_file`]) therefore asks the
//! kernel for the fence's status once it has signalled ([`SyncFile::status`], the `status` of
//! `SYNC_IOC_FILE_INFO`) and reports an error status as [`WaitError::Failed`]: the frame it
//! guards is lost, and the stream goes on with the next one.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::io::Errno;
use rustix::ioctl::{ioctl, opcode, Opcode, Updater};

use super::wait::{poll_readable, WaitError};

/// `struct sync_file_info` (`include/uapi/linux/sync_file.h`), asked for no fence list.
#[repr(C)]
#[derive(Debug, Default)]
struct SyncFileInfo {
    name: [u8; 32],
    status: i32,
    flags: u32,
    num_fences: u32,
    pad: u32,
    sync_fence_info: u64,
}

/// `SYNC_IOC_FILE_INFO` = `_IOWR('>', 4, struct sync_file_info)` = 0xc0383e04: answered by
/// sync_files only, so it tells a fence from any other fd.
pub const SYNC_IOC_FILE_INFO: Opcode = opcode::read_write::<SyncFileInfo>(b'>', 4);

/// Why an fd is not accepted as a fence.
#[derive(Debug, thiserror::Error)]
pub enum SyncFileError {
    /// The kernel says the fd is no sync_file (`SYNC_IOC_FILE_INFO` answered `ENOTTY` or
    /// `EINVAL`): an eventfd, a pipe, a memfd... It would never signal, or would seem
    /// signalled at once.
    #[error("the fd is not a sync_file fence (the kernel refused SYNC_IOC_FILE_INFO on it): an eventfd, a pipe or a file would never signal, or seem signalled at once")]
    NotASyncFile,
    /// The query itself failed for another reason (a closed fd, say).
    #[error("SYNC_IOC_FILE_INFO on the fence failed: {0}")]
    Query(io::Error),
}

/// What the kernel says of a fence: the `status` of `SYNC_IOC_FILE_INFO` (the kernel's
/// `dma_fence_get_status`: 0 pending, 1 signalled, a negative errno signalled with an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceStatus {
    /// Not signalled yet.
    Pending,
    /// Signalled, and the work it stands for completed.
    Signalled,
    /// Signalled with an error: the work it stands for failed or was abandoned. `errno` is
    /// the kernel's error, positive (`ENOENT` for a sw_sync timeline closed under it; `EIO`,
    /// `ETIMEDOUT` or `ECANCELED` from drivers after a hang or reset).
    Failed { errno: i32 },
}

impl FenceStatus {
    /// The kernel's `status` (anything above 0 is signalled: the kernel only ever says 1).
    fn from_kernel(status: i32) -> FenceStatus {
        match status {
            0 => FenceStatus::Pending,
            s if s > 0 => FenceStatus::Signalled,
            s => FenceStatus::Failed { errno: s.saturating_neg() },
        }
    }

    /// `Ok` for a fence that signalled without error, [`WaitError::Failed`] for one that
    /// signalled with one; `None` while it is pending.
    fn settled(self) -> Option<Result<(), WaitError>> {
        match self {
            FenceStatus::Pending => None,
            FenceStatus::Signalled => Some(Ok(())),
            FenceStatus::Failed { errno } => Some(Err(WaitError::Failed { errno })),
        }
    }
}

/// A sync_file fence (owned). Made only by [`SyncFile::new`], which asks the kernel.
#[derive(Debug)]
pub struct SyncFile(OwnedFd);

impl SyncFile {
    /// Takes `fd` as a fence once the kernel confirms it is a sync_file. On error `fd` is
    /// closed.
    pub fn new(fd: OwnedFd) -> Result<SyncFile, SyncFileError> {
        check(fd.as_fd())?;
        Ok(SyncFile(fd))
    }

    /// What the kernel says of the fence now ([`FenceStatus`]), without waiting.
    pub fn status(&self) -> Result<FenceStatus, WaitError> {
        status(self.0.as_fd()).map_err(query_error)
    }

    /// Whether the fence has signalled, without waiting: `Ok(false)` while it is pending,
    /// `Ok(true)` once it signalled without error, [`WaitError::Failed`] once it signalled
    /// with one.
    pub fn is_signalled(&self) -> Result<bool, WaitError> {
        match self.status()?.settled() {
            None => Ok(false),
            Some(settled) => settled.map(|()| true),
        }
    }

    /// Waits up to `timeout` for the fence to signal: [`WaitError::Timeout`] if it has not,
    /// [`WaitError::Failed`] if it signalled with an error (the work it guards failed: the
    /// frame is lost).
    pub fn wait(&self, timeout: Duration) -> Result<(), WaitError> {
        wait_sync_file(self.0.as_fd(), timeout)
    }

    /// Another fd for the same fence.
    pub fn try_clone(&self) -> io::Result<SyncFile> {
        Ok(SyncFile(self.0.try_clone()?))
    }
}

impl AsFd for SyncFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl From<SyncFile> for OwnedFd {
    fn from(f: SyncFile) -> OwnedFd {
        f.0
    }
}

/// Whether `fd` (borrowed) is a sync_file, as the kernel answers.
pub(crate) fn check(fd: BorrowedFd<'_>) -> Result<(), SyncFileError> {
    status(fd).map(drop)
}

/// The status of the sync_file `fd` (borrowed), or why it has none.
fn status(fd: BorrowedFd<'_>) -> Result<FenceStatus, SyncFileError> {
    let mut info = SyncFileInfo::default();
    // SAFETY: the opcode is the kernel's _IOWR('>', 4, struct sync_file_info) and `info` is
    // that struct (#[repr(C)], 56 bytes), borrowed mutably for the call; num_fences = 0 asks
    // for no fence array, so the kernel writes nothing through sync_fence_info (it fills
    // `status` alone then). Other files match no handler and answer ENOTTY.
    match unsafe { ioctl(fd, Updater::<SYNC_IOC_FILE_INFO, _>::new(&mut info)) } {
        Ok(()) => Ok(FenceStatus::from_kernel(info.status)),
        Err(Errno::NOTTY) | Err(Errno::INVAL) => Err(SyncFileError::NotASyncFile),
        Err(e) => Err(SyncFileError::Query(e.into())),
    }
}

fn query_error(e: SyncFileError) -> WaitError {
    match e {
        SyncFileError::NotASyncFile => WaitError::NotASyncFile,
        SyncFileError::Query(source) => WaitError::Io { op: "SYNC_IOC_FILE_INFO", source },
    }
}

/// The verdict on the sync_file `fd` once it polled readable: `Ok` or
/// [`WaitError::Failed`]. A signalled fence never becomes pending again, so the kernel
/// cannot say "pending" here; if it did, that is reported, never taken for success.
fn signalled_status(fd: BorrowedFd<'_>) -> Result<(), WaitError> {
    status(fd).map_err(query_error)?.settled().unwrap_or_else(|| {
        Err(WaitError::Io {
            op: "SYNC_IOC_FILE_INFO",
            source: io::Error::other("the fence polled readable, but the kernel reports it pending"),
        })
    })
}

/// Waits up to `timeout` for the sync_file `fence` (borrowed) to signal, as
/// [`SyncFile::wait`] does: [`WaitError::Timeout`] if it has not, [`WaitError::Failed`] if it
/// signalled with an error. An fd that is not a sync_file is refused before any wait
/// ([`WaitError::NotASyncFile`]): a regular file, say, polls readable at once and would pass
/// for a signalled fence.
pub fn wait_sync_file(fence: BorrowedFd<'_>, timeout: Duration) -> Result<(), WaitError> {
    if let Some(settled) = status(fence).map_err(query_error)?.settled() {
        return settled;
    }
    poll_readable(fence, timeout)?;
    signalled_status(fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_status_becomes_a_fence_status() {
        assert_eq!(FenceStatus::from_kernel(0), FenceStatus::Pending);
        assert_eq!(FenceStatus::from_kernel(1), FenceStatus::Signalled);
        assert_eq!(FenceStatus::from_kernel(-2), FenceStatus::Failed { errno: 2 });
        assert_eq!(FenceStatus::from_kernel(i32::MIN), FenceStatus::Failed { errno: i32::MAX });
        assert!(matches!(FenceStatus::Failed { errno: 5 }.settled(), Some(Err(WaitError::Failed { errno: 5 }))));
        assert!(matches!(FenceStatus::Signalled.settled(), Some(Ok(()))));
        assert!(FenceStatus::Pending.settled().is_none());
    }

    #[test]
    fn request_number_matches_the_kernel_header() {
        assert_eq!(std::mem::size_of::<SyncFileInfo>(), 56);
        assert_eq!(SYNC_IOC_FILE_INFO as u64, 0xc038_3e04);
    }
}
