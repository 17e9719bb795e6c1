//! What file an fd refers to, and whether its size can change while a driver maps it.
//!
//! A driver that imports a dma-buf by mapping it (lavapipe does, and so does any CPU reader)
//! faults with SIGBUS when it touches a page past the end of the file. The size check of
//! [`check_import`](super::check_import) only helps if the size cannot shrink afterwards, so
//! every plane's fd is put in one of these classes first:
//!
//! - [`FdClass::DmaBuf`]: a real dma-buf (the `dmabuf` pseudo file system, `DMA_BUF_MAGIC`
//!   from `fstatfs`). Its size is fixed when it is exported.
//! - [`FdClass::SealedMemfd`]: a regular file sealed with `F_SEAL_SHRINK` (`F_GET_SEALS`): a
//!   memfd or shmem file that no one can truncate any more, whoever else holds it.
//! - [`FdClass::TrustedFile`]: any other regular file, which the caller declared trusted
//!   ([`FdTrust::TrustRegularFiles`]): it vouches that no one shrinks it.
//! - [`FdClass::Shrinkable`]: any other regular file. Its sender (or anyone else holding it)
//!   can truncate it at any time; mapping it is a SIGBUS waiting to happen, so it may only be
//!   read with `pread` ([`super::read_at`]), which sees a shrunk file as a short read.
//!
//! Everything else (directories, sockets, pipes, character and block devices) is not a
//! buffer at all and is refused with [`FdClassError::NotAFile`]. Such fds used to slip
//! through: `lseek(SEEK_END)` on a directory answers 2^63 - 1, which passes any size check.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

use rustix::fs::{fcntl_get_seals, fstat, fstatfs, seek, FileType, SealFlags, SeekFrom};
use rustix::io::Errno;

/// `DMA_BUF_MAGIC` (`include/uapi/linux/magic.h`): the `f_type` of a dma-buf's file system.
pub const DMA_BUF_MAGIC: u64 = 0x444d_4142;
/// `ANON_INODE_FS_MAGIC`: eventfds, sync_files and other anonymous inodes, which hold no
/// buffer. Checked by magic because some kernels give anonymous inodes a regular-file mode.
const ANON_INODE_FS_MAGIC: u64 = 0x0904_1934;

/// Whether the caller vouches for regular files that are neither dma-bufs nor sealed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FdTrust {
    /// Nothing is trusted: an unsealed regular file is [`FdClass::Shrinkable`]. The right
    /// choice for every fd that came from another process.
    #[default]
    Untrusted,
    /// The caller declares that no one will shrink the regular files behind these fds while
    /// they are in use (files this process created and never handed out, say): they count
    /// as [`FdClass::TrustedFile`].
    TrustRegularFiles,
}

/// Why a regular file's size is not fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotFixedReason {
    /// The file supports seals (a memfd or shmem file) but `F_SEAL_SHRINK` is not among them.
    MissingSealShrink,
    /// The file system has no seals at all (`F_GET_SEALS` fails with `EINVAL`), and the
    /// caller did not declare the file trusted.
    NoSealSupport,
}

impl fmt::Display for NotFixedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotFixedReason::MissingSealShrink => {
                "it is a memfd without F_SEAL_SHRINK, so whoever else holds it can truncate it"
            }
            NotFixedReason::NoSealSupport => {
                "it is a regular file on a file system without seals (no F_SEAL_SHRINK possible) and was not declared trusted"
            }
        })
    }
}

/// What an fd's file is, as far as mapping it safely goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FdClass {
    /// A dma-buf: size fixed at export.
    DmaBuf,
    /// A regular file sealed with `F_SEAL_SHRINK`: it cannot get shorter.
    SealedMemfd,
    /// A regular file the caller declared trusted ([`FdTrust::TrustRegularFiles`]).
    TrustedFile,
    /// A regular file that can shrink under a mapping; read it with `pread` only.
    Shrinkable(NotFixedReason),
}

impl FdClass {
    /// Whether the file cannot shrink below the size checked now, so that mapping it (a
    /// zero-copy import) cannot fault.
    pub const fn is_fixed_size(self) -> bool {
        !matches!(self, FdClass::Shrinkable(_))
    }

    /// A short name for logs and messages.
    pub const fn name(self) -> &'static str {
        match self {
            FdClass::DmaBuf => "dma-buf",
            FdClass::SealedMemfd => "sealed memfd",
            FdClass::TrustedFile => "trusted file",
            FdClass::Shrinkable(_) => "shrinkable file",
        }
    }
}

impl fmt::Display for FdClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kinds of file that are never a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    Directory,
    Socket,
    Fifo,
    CharacterDevice,
    BlockDevice,
    Symlink,
    /// An inode with no file type bits (an anonymous inode that is not a dma-buf: an
    /// eventfd, an epoll fd, a sync_file...).
    Other,
}

impl FileKind {
    /// The kind of a file that is not a regular file; `None` for a regular file.
    pub(crate) fn of(t: FileType) -> Option<FileKind> {
        Some(match t {
            FileType::RegularFile => return None,
            FileType::Directory => FileKind::Directory,
            FileType::Socket => FileKind::Socket,
            FileType::Fifo => FileKind::Fifo,
            FileType::CharacterDevice => FileKind::CharacterDevice,
            FileType::BlockDevice => FileKind::BlockDevice,
            FileType::Symlink => FileKind::Symlink,
            _ => FileKind::Other,
        })
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Directory => "directory",
            FileKind::Socket => "socket",
            FileKind::Fifo => "pipe (FIFO)",
            FileKind::CharacterDevice => "character device",
            FileKind::BlockDevice => "block device",
            FileKind::Symlink => "symbolic link",
            FileKind::Other => "special file (no file type)",
        })
    }
}

/// Why an fd could not be classified.
#[derive(Debug, thiserror::Error)]
pub enum FdClassError {
    /// `fstatfs` failed (a bad fd, typically).
    #[error("fstatfs of the fd failed: {0}")]
    StatFs(io::Error),
    /// `fstat` failed.
    #[error("fstat of the fd failed: {0}")]
    Stat(io::Error),
    /// The fd is not a dma-buf and not a regular file, so it holds no buffer.
    #[error("the fd is a {kind}, not a dma-buf or a regular file")]
    NotAFile { kind: FileKind },
    /// `F_GET_SEALS` failed with something other than "this file has no seals".
    #[error("F_GET_SEALS on the fd failed: {0}")]
    Seals(io::Error),
}

/// Classifies the file behind `fd` (borrowed; only `fstatfs`, `fstat` and `fcntl` are used).
pub fn classify(fd: BorrowedFd<'_>, trust: FdTrust) -> Result<FdClass, FdClassError> {
    let fs = fstatfs(fd).map_err(|e| FdClassError::StatFs(e.into()))?;
    // f_type is a signed word on some ABIs; the magic numbers are all positive.
    #[allow(clippy::unnecessary_cast)]
    match fs.f_type as u64 {
        DMA_BUF_MAGIC => return Ok(FdClass::DmaBuf),
        ANON_INODE_FS_MAGIC => return Err(FdClassError::NotAFile { kind: FileKind::Other }),
        _ => {}
    }
    let st = fstat(fd).map_err(|e| FdClassError::Stat(e.into()))?;
    if let Some(kind) = FileKind::of(FileType::from_raw_mode(st.st_mode)) {
        return Err(FdClassError::NotAFile { kind });
    }
    match fcntl_get_seals(fd) {
        Ok(seals) if seals.contains(SealFlags::SHRINK) => Ok(FdClass::SealedMemfd),
        _ if trust == FdTrust::TrustRegularFiles => Ok(FdClass::TrustedFile),
        Ok(_) => Ok(FdClass::Shrinkable(NotFixedReason::MissingSealShrink)),
        Err(Errno::INVAL) => Ok(FdClass::Shrinkable(NotFixedReason::NoSealSupport)),
        Err(e) => Err(FdClassError::Seals(e.into())),
    }
}

/// The size of the file behind `fd` (borrowed), which [`classify`] put in `class`. Regular
/// files report their size in `fstat`. A dma-buf's size, fixed at export, is what
/// `lseek(SEEK_END)` reports: its `llseek` takes only offset 0 from `SEEK_SET` or `SEEK_END`
/// (no `SEEK_CUR`), and some kernels leave its `fstat` size at 0. Its file position means
/// nothing (it has no `read`), so it is put back at 0.
pub fn file_size(fd: BorrowedFd<'_>, class: FdClass) -> io::Result<u64> {
    if class != FdClass::DmaBuf {
        let st = fstat(fd)?;
        return u64::try_from(st.st_size)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "negative file size"));
    }
    let end = seek(fd, SeekFrom::End(0));
    seek(fd, SeekFrom::Start(0))?;
    Ok(end?)
}
