//! dma-buf descriptors, the layout checks that run before any driver sees an fd, and
//! cross-process handoff of descriptors over Unix sockets.
//!
//! - [`DmaBuf`]: the crate's equivalent of GStreamer's `GstVideoMeta` plus the fds (seed 000):
//!   fourcc, [`Layout`](crate::Layout), extent, and 1 to 4 planes of {fd, offset, stride}. It
//!   owns its fds. [`BufferIdentity`] keys import caches on file identity plus layout.
//! - [`check_import`]: the nine checks, in a fixed order, that make a layout safe to give to a
//!   driver that will mmap the fd (lavapipe does). Its [`CheckedImport`] proves they ran and
//!   says, per plane, what kind of file it is ([`FdClass`]): only fixed-size files (dma-bufs,
//!   memfds sealed with `F_SEAL_SHRINK`, files the caller trusts) may be mapped; the others
//!   are copied with `pread` ([`read_at`], [`CheckedImport::read_plane`]).
//! - [`sealed_memfd`]: the one way to make a memfd, sealed so its size is final.
//! - [`SystemMemory`]: where system-memory buffers come from: a dma-heap's real dma-bufs
//!   ([`DmaHeap`], `/dev/dma_heap/system`) where the kernel has one, sealed memfds elsewhere.
//! - [`wire`] and [`handoff`]: a versioned, length-checked message format and the
//!   `SCM_RIGHTS` transport that carries descriptors (and "release buffer N") between
//!   processes, each optionally with a fence.
//! - [`fd_count`]: the number of open fds, for leak accounting in tests and demos.
//!
//! - [`place`]: the per-plane offsets, strides and sizes that honour a collection's
//!   alignments and minimum size, and sealed memfds that hold them.
//! - [`read_exact_at`], [`write_planes`], [`write_all_at`]: a buffer's bytes in and out,
//!   with `pread`/`pwrite` for files and through a guarded mapping for dma-bufs (which have
//!   neither); [`check_read_only`]: that a read-only holder's fds refuse writes.
//! - [`map`]: mappings of fixed-size files, the CPU paths' one way into a dma-buf. Each holds
//!   a [`CpuAccessGuard`](crate::sync::CpuAccessGuard): `DMA_BUF_IOCTL_SYNC` around the access, after a
//!   bounded wait for the buffer's fences.
//!
//! Nothing else here maps a memfd or a dma-buf; everything else is `fstat`, `fcntl`,
//! `pread` and socket calls.

mod checks;
mod descriptor;
mod explicit;
pub mod fd_kind;
mod foreign_fd;
pub mod handoff;
pub mod heap;
pub mod map;
pub mod memfd;
pub mod placement;
pub mod pread;
pub mod pwrite;
pub mod wire;

pub use checks::{
    check_import, check_import_with, CheckedFile, CheckedImport, CheckedPlane, DeviceFacts, ImportCheckError,
    ImportFacts, ImportLimits, ImportOptions,
};
pub use explicit::{check_explicit_layout, LayoutRuleError};
pub use foreign_fd::{dup_foreign_fd, take_returned_fd, ForeignFdError};
pub use fd_kind::{classify, file_size, FdClass, FdClassError, FdTrust, FileKind, NotFixedReason};
pub use heap::{DmaHeap, HeapError, SystemMemory, SYSTEM_HEAP};
pub use map::{CachedView, MapCache, MapError, PlaneMap};
pub use placement::{place, Placement, PlacementError, PlacementRequest, BASE_ALIGN};
pub use crate::plane_layout::{pack_planes, plane_rows, PlaneLayout};
pub use memfd::{sealed_memfd, sealed_memfd_of_size, MemfdError, MEMFD_SEALS};
pub use pread::{read_at, read_exact_at, ReadError};
pub use pwrite::{check_read_only, write_all_at, write_planes, NotReadOnly, WriteError};
pub use descriptor::{
    BufferIdentity, DescriptorError, DmaBuf, FileId, PlaneDesc, PlaneIdentity, PlaneRef, MAX_PLANES,
};
pub use handoff::{
    recv, recv_fenced, send_buffer, send_buffer_read_only, send_buffer_with_fence, send_raw,
    send_release, send_release_with_fence, socketpair, FencedReceived, HandoffError, Received,
};

use std::io;

/// The number of fds this process has open, from the entries of `/proc/self/fd`.
///
/// Listing the directory needs an fd of its own; it is not counted, so two calls with nothing
/// opened or closed in between (by any thread) give the same number.
pub fn fd_count() -> io::Result<usize> {
    let mut n = 0usize;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        entry?;
        n += 1;
    }
    // The directory stream's own fd is listed while we read it.
    Ok(n.saturating_sub(1))
}
