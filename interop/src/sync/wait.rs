//! Waiting on the CPU for a fence: `poll` for `POLLIN` on a sync_file, which becomes
//! readable when the fence signals.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

/// Why a wait ended without the fence signalling.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The fd is not a sync_file (`SYNC_IOC_FILE_INFO` answered `ENOTTY`).
    #[error("the fd is not a sync_file fence")]
    NotASyncFile,
    /// The fence did not signal in time.
    #[error("the fence did not signal within {timeout:?}")]
    Timeout { timeout: Duration },
    /// The fence signalled with an error (`SYNC_IOC_FILE_INFO`'s status, `-errno`): the work
    /// it stands for failed or was abandoned, so what it guards must not be used (the frame
    /// is lost). `errno` is positive: `ENOENT` (2) when a sw_sync timeline is closed with the
    /// fence pending; drivers use `EIO`, `ETIMEDOUT` or `ECANCELED` after a hang or reset.
    #[error("the fence signalled with an error ({}): the work it stands for failed, and what it guards must not be used", io::Error::from_raw_os_error(*errno))]
    Failed { errno: i32 },
    /// `POLLHUP`: the other end is gone and nothing will ever become readable.
    #[error("the fd hung up (its other end is closed) before it became readable")]
    HungUp,
    /// `POLLERR`.
    #[error("the fd reported an error condition")]
    ErrorCondition,
    /// `POLLNVAL`: the fd is not open.
    #[error("the fd is not open")]
    NotOpen,
    /// `poll` or the sync_file query failed.
    #[error("{op} failed: {source}")]
    Io { op: &'static str, source: io::Error },
}

/// Waits up to `timeout` for `fd` (borrowed) to poll readable: the wait of
/// [`wait_sync_file`](super::wait_sync_file) without its checks that the fd is a fence and
/// that it signalled without error (a fence that signalled with one polls readable too).
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> Result<(), WaitError> {
    poll_for(fd, PollFlags::IN, timeout)
}

/// Waits up to `timeout` for `fd` (borrowed) to report `ready` (`POLLIN` or `POLLOUT`): a
/// sync_file is readable once its fence signalled; a dma-buf is readable once its write
/// fences did, and writable once all its fences did.
pub fn poll_for(fd: BorrowedFd<'_>, ready: PollFlags, timeout: Duration) -> Result<(), WaitError> {
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let left = deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
        let ts = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: left.subsec_nanos().into(),
        };
        let mut fds = [PollFd::new(&fd, ready)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => return Err(WaitError::Timeout { timeout }),
            Ok(_) => {
                let r = fds[0].revents();
                return if r.contains(PollFlags::NVAL) {
                    Err(WaitError::NotOpen)
                } else if r.intersects(ready) {
                    Ok(())
                } else if r.contains(PollFlags::ERR) {
                    Err(WaitError::ErrorCondition)
                } else {
                    Err(WaitError::HungUp)
                };
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(WaitError::Io { op: "poll", source: e.into() }),
        }
    }
}
