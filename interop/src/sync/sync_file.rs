//! [`SyncFile`]: an fd the kernel confirmed is a sync_file fence.
//!
//! A fence is a promise from whoever made it. An fd that merely looks like one (an anonymous
//! inode: an eventfd, a timerfd, an epoll or inotify fd) never signals, or polls readable at
//! once, and a consumer that waits on it, on its GPU queue or its CPU, waits for nothing or
//! for ever. So every fence that enters dmabridge from outside (a peer's handoff message, a
//! caller's fd) becomes a [`SyncFile`] through [`SyncFile::new`] before anything keeps it,
//! and every API that takes a fence takes a [`SyncFile`]. The check is the kernel's own:
//! `SYNC_IOC_FILE_INFO`, which only sync_files answer.

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

    /// Whether the fence has signalled, without waiting.
    pub fn is_signalled(&self) -> Result<bool, WaitError> {
        match poll_readable(self.0.as_fd(), Duration::ZERO) {
            Ok(()) => Ok(true),
            Err(WaitError::Timeout { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `timeout` for the fence to signal.
    pub fn wait(&self, timeout: Duration) -> Result<(), WaitError> {
        poll_readable(self.0.as_fd(), timeout)
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
    let mut info = SyncFileInfo::default();
    // SAFETY: the opcode is the kernel's _IOWR('>', 4, struct sync_file_info) and `info` is
    // that struct (#[repr(C)], 56 bytes), borrowed mutably for the call; num_fences = 0 asks
    // for no fence array, so the kernel writes nothing through sync_fence_info. Other files
    // match no handler and answer ENOTTY.
    match unsafe { ioctl(fd, Updater::<SYNC_IOC_FILE_INFO, _>::new(&mut info)) } {
        Ok(()) => Ok(()),
        Err(Errno::NOTTY) | Err(Errno::INVAL) => Err(SyncFileError::NotASyncFile),
        Err(e) => Err(SyncFileError::Query(e.into())),
    }
}

/// Waits up to `timeout` for the sync_file `fence` (borrowed) to signal. An fd that is not a
/// sync_file is refused before any wait ([`WaitError::NotASyncFile`]): a regular file, say,
/// polls readable at once and would pass for a signalled fence.
pub fn wait_sync_file(fence: BorrowedFd<'_>, timeout: Duration) -> Result<(), WaitError> {
    match check(fence) {
        Ok(()) => poll_readable(fence, timeout),
        Err(SyncFileError::NotASyncFile) => Err(WaitError::NotASyncFile),
        Err(SyncFileError::Query(source)) => Err(WaitError::Io { op: "SYNC_IOC_FILE_INFO", source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_number_matches_the_kernel_header() {
        assert_eq!(std::mem::size_of::<SyncFileInfo>(), 56);
        assert_eq!(SYNC_IOC_FILE_INFO as u64, 0xc038_3e04);
    }
}
