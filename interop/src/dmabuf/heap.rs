//! System memory for buffers: real dma-bufs from a dma-heap where the kernel has one, sealed
//! memfds elsewhere.
//!
//! A dma-heap (`/dev/dma_heap/NAME`, Linux 5.6) hands out dma-bufs of system memory with
//! `DMA_HEAP_IOCTL_ALLOC`. Every importer sees a dma-buf, not a stand-in, and a CPU user
//! brackets its access with `DMA_BUF_IOCTL_SYNC` ([`crate::sync::CpuAccessGuard`]), which is
//! what a non-coherent SoC needs. Where there is no heap (or no permission to it), memory
//! comes from [`sealed_memfd_of_size`], which every importer dmabridge knows takes too.
//!
//! One difference matters to collections: a dma-buf has one open file, made when it is
//! exported, and the kernel offers no read-only reopen of it (`open("/proc/self/fd/N")` is
//! `ENXIO`), so a heap buffer cannot be handed to one holder writable and to another
//! read-only. [`SystemMemory::for_holders`] keeps such collections on memfds, and says so.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::ioctl::{ioctl, opcode, Opcode, Updater};

use super::memfd::{sealed_memfd_of_size, MemfdError};

/// Where the system heap lives.
pub const SYSTEM_HEAP: &str = "/dev/dma_heap/system";

/// `struct dma_heap_allocation_data` (`include/uapi/linux/dma-heap.h`).
#[repr(C)]
#[derive(Debug, Default)]
struct DmaHeapAllocationData {
    len: u64,
    fd: u32,
    fd_flags: u32,
    heap_flags: u64,
}

/// `_IOWR('H', 0x0, struct dma_heap_allocation_data)` = 0xc0184800.
pub const DMA_HEAP_IOCTL_ALLOC: Opcode = opcode::read_write::<DmaHeapAllocationData>(b'H', 0);

/// Why memory could not be had.
#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    /// The heap's device could not be opened.
    #[error("opening {path} failed: {source}")]
    Open { path: String, source: io::Error },
    /// `DMA_HEAP_IOCTL_ALLOC` refused (out of memory: `ENOMEM`).
    #[error("DMA_HEAP_IOCTL_ALLOC of {len} bytes from {heap} failed: {source}")]
    Alloc { heap: String, len: u64, source: io::Error },
    /// The kernel answered success with no fd; never seen, never trusted.
    #[error("DMA_HEAP_IOCTL_ALLOC returned fd {0}, which is not an fd")]
    BadFd(u32),
    /// A memfd could not be made.
    #[error(transparent)]
    Memfd(#[from] MemfdError),
}

/// An open dma-heap. Owns its device fd.
#[derive(Debug)]
pub struct DmaHeap {
    fd: OwnedFd,
    name: String,
}

impl DmaHeap {
    /// Opens `/dev/dma_heap/NAME`.
    pub fn open(name: &str) -> Result<DmaHeap, HeapError> {
        let path = format!("/dev/dma_heap/{name}");
        let fd = rustix::fs::open(path.as_str(), OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| HeapError::Open { path: path.clone(), source: e.into() })?;
        Ok(DmaHeap { fd, name: name.to_owned() })
    }

    /// The heap's name (`system`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A new zeroed dma-buf of at least `len` bytes (the heap rounds up to whole pages),
    /// read-write, that the caller owns (`O_CLOEXEC`).
    pub fn alloc(&self, len: u64) -> Result<OwnedFd, HeapError> {
        self.alloc_with(len, OFlags::RDWR)
    }

    /// [`DmaHeap::alloc`], but exported `O_RDONLY`: the kernel refuses a writable mapping of
    /// it (`EACCES`), whoever holds the fd. The only way to a read-only dma-buf: its access
    /// mode is fixed at export, and it cannot be reopened.
    pub fn alloc_read_only(&self, len: u64) -> Result<OwnedFd, HeapError> {
        self.alloc_with(len, OFlags::RDONLY)
    }

    fn alloc_with(&self, len: u64, access: OFlags) -> Result<OwnedFd, HeapError> {
        let flags = (access | OFlags::CLOEXEC).bits();
        let mut arg = DmaHeapAllocationData { len, fd: 0, fd_flags: flags, heap_flags: 0 };
        loop {
            // SAFETY: the opcode is the kernel's _IOWR('H', 0, struct dma_heap_allocation_data)
            // and `arg` is that struct (#[repr(C)], 24 bytes), borrowed mutably for the call;
            // `fd` is 0 on input as the kernel requires, the fd flags are an access mode and
            // O_CLOEXEC (within DMA_HEAP_VALID_FD_FLAGS) and no heap flags are set.
            match unsafe { ioctl(self.fd.as_fd(), Updater::<DMA_HEAP_IOCTL_ALLOC, _>::new(&mut arg)) } {
                Ok(()) => break,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(HeapError::Alloc { heap: self.name.clone(), len, source: e.into() }),
            }
        }
        let raw = i32::try_from(arg.fd).map_err(|_| HeapError::BadFd(arg.fd))?;
        if raw < 0 {
            return Err(HeapError::BadFd(arg.fd));
        }
        // SAFETY: on success the kernel installed a new fd for the caller in `arg.fd`, and
        // nothing else refers to it, so this OwnedFd is its only owner.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }
}

/// Which system memory buffers come from.
#[derive(Debug, Clone)]
pub enum SystemMemory {
    /// dma-bufs from a dma-heap.
    DmaHeap(Arc<DmaHeap>),
    /// Sealed memfds ([`sealed_memfd_of_size`]).
    Memfd,
}

impl SystemMemory {
    /// The system dma-heap where it can be opened, else memfds. `DMABRIDGE_SYSTEM_MEMORY`
    /// overrides it: `memfd`, or `dma-heap:NAME` (an error to open is then logged, and memfds
    /// are used).
    pub fn detect() -> SystemMemory {
        let wanted = std::env::var("DMABRIDGE_SYSTEM_MEMORY").ok();
        let heap = match wanted.as_deref() {
            Some("memfd") => return SystemMemory::Memfd,
            Some(s) => s.strip_prefix("dma-heap:").unwrap_or("system").to_owned(),
            None => "system".to_owned(),
        };
        match DmaHeap::open(&heap) {
            Ok(h) => SystemMemory::DmaHeap(Arc::new(h)),
            Err(e) => {
                if wanted.is_some() || std::path::Path::new(SYSTEM_HEAP).exists() {
                    tracing::warn!(error = %e, "no dma-heap: buffers are sealed memfds");
                }
                SystemMemory::Memfd
            }
        }
    }

    /// `self`, unless a holder will receive read-only fds: a dma-buf cannot be reopened
    /// read-only, so such a collection stays on memfds. The reason is returned with it.
    pub fn for_holders(self, read_only_holders: bool) -> (SystemMemory, Option<&'static str>) {
        match self {
            SystemMemory::DmaHeap(_) if read_only_holders => (
                SystemMemory::Memfd,
                Some("a holder is read-only, and a dma-buf has no read-only reopen (its access mode is fixed at export), so the buffers are sealed memfds"),
            ),
            m => (m, None),
        }
    }

    /// The name `allocate --json` reports: `dma-heap:system` or `memfd`.
    pub fn name(&self) -> String {
        match self {
            SystemMemory::DmaHeap(h) => format!("dma-heap:{}", h.name()),
            SystemMemory::Memfd => "memfd".to_owned(),
        }
    }

    /// A new zeroed buffer of `size` bytes that the caller owns: a heap dma-buf (rounded up
    /// to whole pages), or a sealed memfd named `name`.
    pub fn alloc(&self, name: &str, size: u64) -> Result<OwnedFd, HeapError> {
        match self {
            SystemMemory::DmaHeap(h) => h.alloc(size),
            SystemMemory::Memfd => Ok(sealed_memfd_of_size(name, size)?),
        }
    }
}

impl fmt::Display for SystemMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_number_matches_the_kernel_header() {
        assert_eq!(DMA_HEAP_IOCTL_ALLOC as u64, 0xc018_4800);
        assert_eq!(std::mem::size_of::<DmaHeapAllocationData>(), 24);
    }

    #[test]
    fn read_only_holders_keep_a_collection_on_memfds() {
        let (m, why) = SystemMemory::Memfd.for_holders(true);
        assert!(matches!(m, SystemMemory::Memfd) && why.is_none());
        if let Ok(h) = DmaHeap::open("system") {
            let (m, why) = SystemMemory::DmaHeap(Arc::new(h)).for_holders(true);
            assert!(matches!(m, SystemMemory::Memfd) && why.is_some());
        }
    }
}
