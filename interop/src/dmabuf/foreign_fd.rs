//! Fd numbers that come from outside Rust's ownership: argv (`dmabridge import --plane
//! 3:0:256`), the C ABI's `dmb_object.fd`, and the fds a driver returns as new
//! (`vkGetMemoryFdKHR`, `vkGetSemaphoreFdKHR`). Each is confirmed open with `fcntl(F_GETFD)`
//! before Rust owns anything: owning a number that is not open, Rust would close it later
//! and abort on the `EBADF` (or close someone else's fd that took the number meanwhile).

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
    let fd = open_number(raw)?;
    fd.try_clone_to_owned().map_err(|source| ForeignFdError::Dup { fd: raw, source })
}

/// Takes ownership of fd number `raw`, which a library returned as a new fd of the caller's
/// (`vkGetMemoryFdKHR`, `vkGetSemaphoreFdKHR`), once it is confirmed open. A library that
/// reports success with a number that is not open (anv on Mesa's drm-shim, which has no
/// PRIME) gives [`ForeignFdError::NotOpen`], and nothing is owned.
///
/// # Safety
/// If `raw` is open, nothing else owns it: the caller may close it (the library's contract).
pub unsafe fn take_returned_fd(raw: RawFd) -> Result<OwnedFd, ForeignFdError> {
    open_number(raw)?;
    // SAFETY: open (checked above) and the caller's to own (this function's contract).
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) })
}

/// `raw`, borrowed, once `fcntl(F_GETFD)` says it is open.
fn open_number(raw: RawFd) -> Result<BorrowedFd<'static>, ForeignFdError> {
    if raw < 0 {
        return Err(ForeignFdError::Negative(raw));
    }
    // SAFETY: `raw` is not -1. The number's owner (the parent that let it be inherited, the C
    // caller for the duration of its call, the library that returned it) keeps it open
    // while it is borrowed here; fcntl(F_GETFD) only reads the descriptor flags, and on a
    // number that is not open it fails with EBADF.
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    rustix::io::fcntl_getfd(fd).map_err(|_| ForeignFdError::NotOpen(raw))?;
    Ok(fd)
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

    #[test]
    fn a_returned_number_is_owned_only_when_open() {
        use std::os::fd::IntoRawFd;
        let raw = std::fs::File::open("/proc/self/status").unwrap().into_raw_fd();
        // SAFETY: `raw` is ours, from into_raw_fd, and handed over here.
        let owned = unsafe { take_returned_fd(raw) }.expect("an open fd");
        assert_eq!(owned.as_raw_fd(), raw);
        // What anv on the drm-shim returns: a number no process holds. Nothing is owned, so
        // nothing is closed (an OwnedFd of it would abort the process on drop).
        // SAFETY: not open, so nobody's.
        assert!(matches!(unsafe { take_returned_fd(1 << 30) }, Err(ForeignFdError::NotOpen(n)) if n == 1 << 30));
        // SAFETY: negative, so nobody's.
        assert!(matches!(unsafe { take_returned_fd(-1) }, Err(ForeignFdError::Negative(-1))));
    }
}
