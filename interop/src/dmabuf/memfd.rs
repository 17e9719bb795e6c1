//! The one way dmabridge makes a memfd: sealed so that its size is final.
//!
//! Every memfd dmabridge creates (a stand-in for a dma-buf on kernels without udmabuf, a
//! staging buffer, a test frame) comes from here, so that every one of them is
//! [`FdClass::SealedMemfd`](super::FdClass::SealedMemfd) on the receiving side and can be
//! imported zero-copy there without the receiver trusting its sender.
//!
//! The seals, and why:
//! - `F_SEAL_SHRINK`: nobody, the creator included, can truncate it, so a mapping of it never
//!   faults. This is the seal the import checks look for.
//! - `F_SEAL_GROW`: the size checked once stays the size; no peer can make a buffer that
//!   suddenly holds more than its descriptor says.
//! - `F_SEAL_SEAL`: no further seals. Without it any process holding the fd could add
//!   `F_SEAL_WRITE` (or `F_SEAL_FUTURE_WRITE`) and make every later write of the producer
//!   fail, a denial of service a hostile consumer could mount on a buffer pool. The price is
//!   that a producer cannot add `F_SEAL_FUTURE_WRITE` later to hand out a read-only buffer;
//!   it sends read-only fds instead ([`DmaBuf::reopen_read_only`](super::DmaBuf::reopen_read_only)).
//!
//! Writing stays possible: the seals fix the size, not the contents.
//!
//! And the file's mode, 0600 (a memfd is made 0777): a read-only holder's fd refuses writes,
//! writable mappings and `mprotect` by its access mode, but `open("/proc/self/fd/N",
//! O_RDWR)` opens the file anew, checked against the file's mode only. 0600 makes that
//! reopen fail (`EACCES`) for every other user, so a holder of another uid that was given a
//! read-only fd keeps to it. A process of the creator's own uid can still reopen: the same
//! user is one trust domain on Linux (it may ptrace the writer as well), which the README's
//! "Access rights" states; a kernel that could do better would need a seal that a writer's
//! fd escapes, and Linux has none (`F_SEAL_FUTURE_WRITE` binds every later writer too).

use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{fchmod, fcntl_add_seals, ftruncate, memfd_create, MemfdFlags, Mode, SealFlags};
use rustix::io::{pwrite, Errno};

/// The seals every dmabridge memfd carries (see the module docs).
pub const MEMFD_SEALS: SealFlags =
    SealFlags::SHRINK.union(SealFlags::GROW).union(SealFlags::SEAL);

/// The mode of every dmabridge memfd: the owner's only (see the module docs).
pub const MEMFD_MODE: Mode = Mode::RUSR.union(Mode::WUSR);

/// Longest memfd name the kernel takes (`MFD_NAME_MAX_LEN`: 249 bytes, without the NUL).
pub const MAX_MEMFD_NAME: usize = 249;

/// Why a sealed memfd could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MemfdError {
    /// The name has a NUL byte or is longer than [`MAX_MEMFD_NAME`] bytes.
    #[error("memfd name {name:?} is not usable: it must be at most {MAX_MEMFD_NAME} bytes without NUL")]
    Name { name: String },
    /// `memfd_create` failed (out of fds, or memfds not supported).
    #[error("memfd_create failed: {0}")]
    Create(io::Error),
    /// `ftruncate` to the size failed (the size is larger than the file system allows).
    #[error("sizing the memfd to {size} bytes failed: {source}")]
    Size { size: u64, source: io::Error },
    /// Writing the contents failed (out of memory in tmpfs, typically).
    #[error("writing {len} bytes into the memfd failed at byte {at}: {source}")]
    Write { len: usize, at: usize, source: io::Error },
    /// Setting the file's mode ([`MEMFD_MODE`]) failed.
    #[error("setting the memfd's mode to 0600 failed: {0}")]
    Mode(io::Error),
    /// Adding the seals failed.
    #[error("sealing the memfd failed: {0}")]
    Seal(io::Error),
}

fn create(name: &str) -> Result<OwnedFd, MemfdError> {
    if name.len() > MAX_MEMFD_NAME || name.contains('\0') {
        return Err(MemfdError::Name { name: crate::text::quoted(name) });
    }
    let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(|e| MemfdError::Create(e.into()))?;
    fchmod(&fd, MEMFD_MODE).map_err(|e| MemfdError::Mode(e.into()))?;
    Ok(fd)
}

fn seal(fd: OwnedFd) -> Result<OwnedFd, MemfdError> {
    fcntl_add_seals(&fd, MEMFD_SEALS).map_err(|e| MemfdError::Seal(e.into()))?;
    Ok(fd)
}

/// A memfd of `size` zero bytes, sealed ([`MEMFD_SEALS`]). The caller owns the fd
/// (`O_CLOEXEC`). `name` shows in `/proc/PID/fd` and is for people only.
pub fn sealed_memfd_of_size(name: &str, size: u64) -> Result<OwnedFd, MemfdError> {
    let fd = create(name)?;
    ftruncate(&fd, size).map_err(|e| MemfdError::Size { size, source: e.into() })?;
    seal(fd)
}

/// A memfd holding exactly `bytes`, sealed ([`MEMFD_SEALS`]). The caller owns the fd
/// (`O_CLOEXEC`).
pub fn sealed_memfd(name: &str, bytes: &[u8]) -> Result<OwnedFd, MemfdError> {
    let fd = create(name)?;
    let size = bytes.len() as u64;
    ftruncate(&fd, size).map_err(|e| MemfdError::Size { size, source: e.into() })?;
    let mut at = 0usize;
    while let Some(rest) = bytes.get(at..).filter(|r| !r.is_empty()) {
        match pwrite(&fd, rest, at as u64) {
            Ok(0) => {
                let source = io::ErrorKind::WriteZero.into();
                return Err(MemfdError::Write { len: bytes.len(), at, source });
            }
            Ok(n) => at += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(MemfdError::Write { len: bytes.len(), at, source: e.into() }),
        }
    }
    seal(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{fcntl_get_seals, fstat};

    #[test]
    fn sized_and_sealed() {
        let fd = sealed_memfd_of_size("t", 4096).unwrap();
        assert_eq!(fstat(&fd).unwrap().st_size, 4096);
        assert_eq!(fcntl_get_seals(&fd).unwrap(), MEMFD_SEALS);
        assert_eq!(ftruncate(&fd, 10), Err(Errno::PERM), "F_SEAL_SHRINK");
        assert_eq!(ftruncate(&fd, 8192), Err(Errno::PERM), "F_SEAL_GROW");
        assert_eq!(fcntl_add_seals(&fd, SealFlags::WRITE), Err(Errno::PERM), "F_SEAL_SEAL");
        assert_eq!(pwrite(&fd, b"still writable", 0), Ok(14));
    }

    #[test]
    fn holds_the_bytes() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let fd = sealed_memfd("t", &data).unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(rustix::io::pread(&fd, &mut back, 0), Ok(data.len()));
        assert_eq!(back, data);
        assert!(sealed_memfd("empty", &[]).is_ok());
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(matches!(sealed_memfd("a\0b", b"x"), Err(MemfdError::Name { .. })));
        let long = "n".repeat(MAX_MEMFD_NAME + 1);
        assert!(matches!(sealed_memfd_of_size(&long, 1), Err(MemfdError::Name { .. })));
        assert!(sealed_memfd_of_size(&"n".repeat(MAX_MEMFD_NAME), 1).is_ok());
    }
}
