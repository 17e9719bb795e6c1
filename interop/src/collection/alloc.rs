//! Allocation is pluggable: the collection decides what to allocate ([`Reconciled`]), an
//! [`Allocator`] makes it. [`SystemAllocator`] makes system memory here (dma-heap buffers
//! where the kernel has a heap, sealed memfds elsewhere: [`SystemMemory`]); the engine
//! brings a device allocator.

use crate::dmabuf::{place, DmaBuf, PlacementError, PlacementRequest, SystemMemory, BASE_ALIGN};

use super::attrs::Reconciled;
use super::limits::MAX_BUFFERS;

/// Why an allocator made no buffers.
#[derive(Debug, thiserror::Error)]
pub enum AllocatorError {
    /// The list cannot be laid out (an opaque modifier, a tiled pitch that cannot be
    /// widened, an overflow) or the memory could not be had.
    #[error("system allocation failed: {0}")]
    Placement(#[from] PlacementError),
    /// The list asks for more buffers than a collection holds.
    #[error("{0} buffers are more than the {MAX_BUFFERS} a collection holds")]
    TooManyBuffers(u32),
    /// A base alignment beyond what a memfd's mapping guarantees (its page).
    #[error("base alignment {0} is more than the {BASE_ALIGN} bytes a buffer's start guarantees")]
    Align(u64),
    /// The list asks for memory this allocator does not have.
    #[error("this allocator has no {0} memory")]
    Domain(&'static str),
    /// Anything else an allocator outside this crate reports.
    #[error("{0}")]
    Other(String),
}

/// What the collection knows of its holders that is not in the reconciled list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Holders {
    /// Some holder will get read-only fds, so the memory must be one that can be reopened
    /// read-only (a memfd can; a dma-buf cannot).
    pub read_only: bool,
}

/// Makes a collection's buffers from its reconciled list: exactly `r.buffers` of them, each
/// `r.format` at `r.width` x `r.height`, all laid out alike, honouring the list's
/// alignments, min size and disjointness. The caller owns the returned buffers.
///
/// Object-safe and `Send`, so a server thread can own a `Box<dyn Allocator>`.
pub trait Allocator: Send {
    fn allocate(&mut self, r: &Reconciled, holders: Holders) -> Result<Vec<DmaBuf>, AllocatorError>;
}


/// System memory ([`SystemMemory::detect`]: the system dma-heap, else sealed memfds), laid
/// out by [`place`]: linear and the tiled layouts interop knows. Refuses device-local lists.
/// A collection with a read-only holder gets memfds ([`SystemMemory::for_holders`]).
#[derive(Debug, Clone)]
pub struct SystemAllocator {
    /// Shown in `/proc/PID/fd` as each memfd's name.
    pub name: String,
    /// Where the memory comes from.
    pub memory: SystemMemory,
}

impl Default for SystemAllocator {
    fn default() -> Self {
        SystemAllocator::new("")
    }
}

impl SystemAllocator {
    /// An allocator of the system memory this kernel has.
    pub fn new(name: impl Into<String>) -> Self {
        SystemAllocator { name: name.into(), memory: SystemMemory::detect() }
    }
}

impl Allocator for SystemAllocator {
    fn allocate(&mut self, r: &Reconciled, holders: Holders) -> Result<Vec<DmaBuf>, AllocatorError> {
        if r.constraints.buffers > MAX_BUFFERS {
            return Err(AllocatorError::TooManyBuffers(r.constraints.buffers));
        }
        if r.constraints.align > BASE_ALIGN {
            return Err(AllocatorError::Align(r.constraints.align));
        }
        if r.constraints.domain == crate::negotiate::Domain::DeviceLocal {
            return Err(AllocatorError::Domain("device-local"));
        }
        let placement = place(&PlacementRequest {
            fourcc: r.format.fourcc,
            layout: r.format.layout,
            width: r.width,
            height: r.height,
            stride_align: r.constraints.stride_align,
            offset_align: r.constraints.offset_align,
            min_size: r.constraints.min_size,
            disjoint: r.disjoint,
        })?;
        let name = if self.name.is_empty() { "dmabridge-collection" } else { self.name.as_str() };
        let (memory, why) = self.memory.clone().for_holders(holders.read_only);
        let mut out = Vec::with_capacity(r.constraints.buffers as usize);
        for _ in 0..r.constraints.buffers {
            out.push(placement.allocate(&memory, name, r.format.fourcc, r.format.layout, r.width, r.height)?);
        }
        tracing::debug!(buffers = out.len(), format = %r.format, width = r.width, height = r.height, %memory, reason = why, "system allocation");
        Ok(out)
    }
}
