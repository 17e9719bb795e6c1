//! Fd numbers that come from outside Rust's ownership: argv (`dmabridge import --plane
//! 3:0:256`) and the C ABI's `dmb_object.fd`.

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

/// Why a foreign fd number could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ForeignFdError {
    /// No fd is negative.
    #[error("fd {0} is negative")]
    Negative(RawFd),
    /// `fcntl(F_GETFD)` says no fd of that number is open in this process.
    #[error("fd {0} is not open in this process")]
    NotOpen(RawFd),
    /// The fd is open, but duplicating it failed (the process is out of fds).
    #[error("cannot dup fd {fd}: {source}")]
    Dup { fd: RawFd, source: std::io::Error },
}

/// A dup (`F_DUPFD_CLOEXEC`) of fd number `raw`, owned by the caller; `raw` itself stays
/// its owner's. The number is first confirmed open with `fcntl(F_GETFD)`, so a stale or
/// made-up number is [`ForeignFdError::NotOpen`], not an fd this process never had.
pub fn dup_foreign_fd(raw: RawFd) -> Result<OwnedFd, ForeignFdError> {
    if raw < 0 {
        return Err(ForeignFdError::Negative(raw));
    }
    // SAFETY: the number's owner (the parent that let it be inherited, the C caller for the
    // duration of its call) keeps it open while it is borrowed here; fcntl(F_GETFD) only
    // reads the descriptor flags, and on a number that is not open it fails with EBADF.
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    rustix::io::fcntl_getfd(fd).map_err(|_| ForeignFdError::NotOpen(raw))?;
    fd.try_clone_to_owned().map_err(|source| ForeignFdError::Dup { fd: raw, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn open_closed_and_negative_numbers() {
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let dup = dup_foreign_fd(file.as_raw_fd()).expect("an open fd");
        assert_ne!(dup.as_raw_fd(), file.as_raw_fd());
        // A number no process can have open (above the kernel's nr_open ceiling, 2^20 by
        // default): a number closed here could be reused at once by another test's thread.
        let closed = 1 << 30;
        assert!(matches!(dup_foreign_fd(closed), Err(ForeignFdError::NotOpen(n)) if n == closed));
        assert!(matches!(dup_foreign_fd(-1), Err(ForeignFdError::Negative(-1))));
    }
}
