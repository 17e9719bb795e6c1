//! The dma-buf ioctls that bridge implicit and explicit sync (Linux 6.0,
//! `include/uapi/linux/dma-buf.h`): export the fences of a dma-buf's reservation object as a
//! sync_file, and import a sync_file into it.

use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};

use rustix::io::Errno;
use rustix::ioctl::{ioctl, opcode, Opcode, Setter, Updater};

use super::SyncFile;

/// `DMA_BUF_SYNC_READ`.
pub const DMA_BUF_SYNC_READ: u32 = 1;
/// `DMA_BUF_SYNC_WRITE`.
pub const DMA_BUF_SYNC_WRITE: u32 = 2;

/// `struct dma_buf_export_sync_file`.
#[repr(C)]
#[derive(Debug, Default)]
struct DmaBufExportSyncFile {
    flags: u32,
    fd: i32,
}

/// `struct dma_buf_import_sync_file`.
#[repr(C)]
#[derive(Debug)]
struct DmaBufImportSyncFile {
    flags: u32,
    fd: i32,
}

/// `_IOWR(DMA_BUF_BASE, 2, struct dma_buf_export_sync_file)` = 0xc0086202.
pub const DMA_BUF_IOCTL_EXPORT_SYNC_FILE: Opcode = opcode::read_write::<DmaBufExportSyncFile>(b'b', 2);
/// `_IOW(DMA_BUF_BASE, 3, struct dma_buf_import_sync_file)` = 0x40086203.
pub const DMA_BUF_IOCTL_IMPORT_SYNC_FILE: Opcode = opcode::write::<DmaBufImportSyncFile>(b'b', 3);

/// Which accesses a fence is about.
///
/// Export: `Read` gives a fence for the writes a reader must wait for; `Write` (and
/// `ReadWrite`) one for every access, reads included, that a writer must wait for. Import:
/// `Read` adds the fence as a read (later writers wait for it), `Write` as a write (everyone
/// waits for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncAccess {
    Read,
    Write,
    ReadWrite,
}

impl SyncAccess {
    /// The `DMA_BUF_SYNC_*` flags; never zero, never an unknown bit.
    pub const fn flags(self) -> u32 {
        match self {
            SyncAccess::Read => DMA_BUF_SYNC_READ,
            SyncAccess::Write => DMA_BUF_SYNC_WRITE,
            SyncAccess::ReadWrite => DMA_BUF_SYNC_READ | DMA_BUF_SYNC_WRITE,
        }
    }
}

/// Why a sync-file ioctl failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// `ENOTTY`: the fd is not a dma-buf, or the kernel predates the ioctls (6.0) or was built
    /// without `CONFIG_SYNC_FILE`.
    #[error("{op}: the fd is not a dma-buf, or this kernel lacks the dma-buf sync-file ioctls (Linux 6.0 with CONFIG_SYNC_FILE)")]
    NotSupported { op: &'static str },
    /// Any other failure (a bad sync_file to import, out of fds, ...).
    #[error("{op} failed: {source}")]
    Ioctl { op: &'static str, source: io::Error },
    /// The kernel reported success but no fd; never seen, but not trusted blindly.
    #[error("{op} returned fd {fd}, which is not an fd")]
    BadFd { op: &'static str, fd: i32 },
}

const EXPORT: &str = "DMA_BUF_IOCTL_EXPORT_SYNC_FILE";
const IMPORT: &str = "DMA_BUF_IOCTL_IMPORT_SYNC_FILE";

fn ioctl_error(op: &'static str, e: Errno) -> SyncError {
    if e == Errno::NOTTY {
        SyncError::NotSupported { op }
    } else {
        SyncError::Ioctl { op, source: e.into() }
    }
}

/// The dma-buf's implicit fences for `access`, as a new sync_file the caller owns
/// (`O_CLOEXEC`). `dmabuf` is borrowed.
pub fn export_sync_file(dmabuf: BorrowedFd<'_>, access: SyncAccess) -> Result<SyncFile, SyncError> {
    let mut arg = DmaBufExportSyncFile { flags: access.flags(), fd: -1 };
    // SAFETY: the opcode is the kernel's _IOWR('b', 2, struct dma_buf_export_sync_file) and
    // `arg` is that struct (#[repr(C)] u32 flags, s32 fd), borrowed mutably for the call only.
    // On a file that is not a dma-buf the kernel matches no handler and answers ENOTTY.
    unsafe { ioctl(dmabuf, Updater::<DMA_BUF_IOCTL_EXPORT_SYNC_FILE, _>::new(&mut arg)) }
        .map_err(|e| ioctl_error(EXPORT, e))?;
    if arg.fd < 0 {
        return Err(SyncError::BadFd { op: EXPORT, fd: arg.fd });
    }
    // SAFETY: on success the kernel installed a new fd (O_CLOEXEC) in `arg.fd` for the
    // caller and nothing else refers to it, so this OwnedFd is its only owner.
    let fd = unsafe { OwnedFd::from_raw_fd(arg.fd) };
    // The kernel's own answer, checked all the same: nothing enters as a fence unchecked.
    SyncFile::new(fd).map_err(|e| SyncError::Ioctl { op: EXPORT, source: io::Error::other(e) })
}

/// Adds the fence `sync_file` (borrowed; the kernel takes its own reference) to the
/// dma-buf's implicit fences as `access`.
pub fn import_sync_file(dmabuf: BorrowedFd<'_>, sync_file: &SyncFile, access: SyncAccess) -> Result<(), SyncError> {
    use std::os::fd::{AsFd, AsRawFd};
    let arg = DmaBufImportSyncFile { flags: access.flags(), fd: sync_file.as_fd().as_raw_fd() };
    // SAFETY: the opcode is the kernel's _IOW('b', 3, struct dma_buf_import_sync_file) and
    // `arg` is that struct, read by the kernel during the call only; `sync_file` is borrowed
    // for the call, so the fd number in it stays open.
    unsafe { ioctl(dmabuf, Setter::<DMA_BUF_IOCTL_IMPORT_SYNC_FILE, _>::new(arg)) }
        .map_err(|e| ioctl_error(IMPORT, e))
}

/// Whether `fd` (borrowed) is a dma-buf on a kernel that bridges implicit and explicit sync:
/// a read export succeeds (its sync_file is closed at once).
pub fn implicit_bridge_supported(fd: BorrowedFd<'_>) -> bool {
    match export_sync_file(fd, SyncAccess::Read) {
        Ok(_fence) => true,
        Err(e) => {
            tracing::debug!(error = %e, "no implicit-sync bridge");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_the_kernel_header() {
        assert_eq!(DMA_BUF_IOCTL_EXPORT_SYNC_FILE as u64, 0xc008_6202);
        assert_eq!(DMA_BUF_IOCTL_IMPORT_SYNC_FILE as u64, 0x4008_6203);
        assert_eq!(std::mem::size_of::<DmaBufExportSyncFile>(), 8);
        assert_eq!(std::mem::size_of::<DmaBufImportSyncFile>(), 8);
    }

    #[test]
    fn access_flags() {
        assert_eq!(SyncAccess::Read.flags(), 1);
        assert_eq!(SyncAccess::Write.flags(), 2);
        assert_eq!(SyncAccess::ReadWrite.flags(), 3);
    }
}
