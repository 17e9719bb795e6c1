//! Buffers of dmabridge's own: staging, readback, storage for the converters. (A buffer
//! over a caller's dma-buf is the import room's: [`crate::ImportedBuffer`].)

use ash::vk;
use gpu_allocator::vulkan::Allocation;
use gpu_allocator::MemoryLocation;

use crate::error::{VkError, VkResultExt};
use crate::device::memory::MemoryError;
use crate::device::submit::{Completion, Garbage, Uses};
use crate::Engine;

/// Why a buffer could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// No memory for it.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The CPU asked for the bytes of a buffer the GPU may still be using.
    #[error("the buffer is still in use by submitted GPU work; wait for its Submission first")]
    Busy,
    /// The buffer lives in memory the CPU cannot map.
    #[error("the buffer is not host-visible")]
    NotMapped,
    /// The size does not fit this process or the device.
    #[error("a buffer of {0} bytes is too large")]
    TooLarge(u64),
}

/// Where a [`GpuBuffer`] lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferLocation {
    /// Host-visible and mapped, written by the CPU and read by the GPU (staging uploads).
    Upload,
    /// Host-visible and mapped, written by the GPU and read by the CPU (readback).
    Readback,
    /// Device-local; not mapped (on a CPU device every memory is both).
    DeviceLocal,
}

impl BufferLocation {
    fn memory(self) -> MemoryLocation {
        match self {
            BufferLocation::Upload => MemoryLocation::CpuToGpu,
            BufferLocation::Readback => MemoryLocation::GpuToCpu,
            BufferLocation::DeviceLocal => MemoryLocation::GpuOnly,
        }
    }
}

/// A buffer of dmabridge's own, usable as a storage buffer and for transfers both ways.
///
/// `Send` and `Sync`: the mapping is only exposed through `&self`/`&mut self` borrows
/// checked against pending GPU work, and the use list is behind a lock. Dropped while the
/// GPU still uses it, its destruction waits for that work ([`crate::device::submit`]).
pub struct GpuBuffer {
    engine: Engine,
    buffer: vk::Buffer,
    allocation: Option<Allocation>,
    len: u64,
    uses: Uses,
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBuffer").field("buffer", &self.buffer).field("len", &self.len).finish()
    }
}

impl GpuBuffer {
    /// A buffer of `len` bytes. Mapped memory starts zeroed. The allocation is rounded up:
    /// the shaders read whole 16-byte groups at the end of a plane.
    pub fn new(engine: &Engine, len: u64, location: BufferLocation) -> Result<GpuBuffer, BufferError> {
        let size = len.checked_add(15 + 64).map(|v| v / 16 * 16).ok_or(BufferError::TooLarge(len))?;
        if usize::try_from(size).is_err() {
            return Err(BufferError::TooLarge(len));
        }
        let device = engine.device();
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create info with a non-zero size (VUID-VkBufferCreateInfo-size-00912).
        let buffer = unsafe { device.create_buffer(&info, None) }.vk("vkCreateBuffer")?;
        let mut out = GpuBuffer { engine: engine.clone(), buffer, allocation: None, len, uses: Uses::default() };
        // SAFETY: a buffer of this device.
        let reqs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let mut allocation = engine.shared().memory.allocate("dmabridge buffer", reqs, location.memory(), true)?;
        // SAFETY: an unbound buffer, memory of at least reqs.size at an offset aligned as
        // reqs asked (gpu-allocator honours the alignment) (VUID-vkBindBufferMemory-memoryOffset-01036).
        let bound = unsafe { device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) }.vk("vkBindBufferMemory");
        if let Some(bytes) = allocation.mapped_slice_mut() {
            bytes.fill(0);
        }
        out.allocation = Some(allocation);
        bound?;
        Ok(out)
    }

    /// An upload buffer holding a copy of `bytes`.
    pub fn from_bytes(engine: &Engine, bytes: &[u8]) -> Result<GpuBuffer, BufferError> {
        let mut b = GpuBuffer::new(engine, bytes.len() as u64, BufferLocation::Upload)?;
        b.bytes_mut()?.copy_from_slice(bytes);
        Ok(b)
    }

    pub fn buffer(&self) -> vk::Buffer {
        self.buffer
    }

    /// The usable length (the allocation may be larger).
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Records that GPU work completing at `until` uses the buffer: its destruction (and
    /// CPU access through [`GpuBuffer::bytes`]) waits for that point. Every command that
    /// uses [`GpuBuffer::buffer`] must be tracked so; dmabridge's own operations do it.
    pub fn track(&self, until: Completion) {
        self.uses.add(until);
    }

    /// Whether no submitted GPU work uses the buffer any more.
    pub fn is_idle(&self) -> bool {
        self.uses.snapshot().iter().all(|c| self.engine.is_reached(c))
    }

    /// The contents, once the GPU work that uses the buffer is done.
    pub fn bytes(&self) -> Result<&[u8], BufferError> {
        if !self.is_idle() {
            return Err(BufferError::Busy);
        }
        let len = self.len as usize;
        self.allocation.as_ref().and_then(|a| a.mapped_slice()).map(|s| &s[..len]).ok_or(BufferError::NotMapped)
    }

    /// The contents for writing, once the GPU work that uses the buffer is done.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], BufferError> {
        if !self.is_idle() {
            return Err(BufferError::Busy);
        }
        let len = self.len as usize;
        self.allocation.as_mut().and_then(|a| a.mapped_slice_mut()).map(|s| &mut s[..len]).ok_or(BufferError::NotMapped)
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        let mut garbage = vec![Garbage::Buffer(self.buffer)];
        if let Some(a) = self.allocation.take() {
            garbage.push(Garbage::Allocation(a));
        }
        self.engine.shared().retire(self.uses.snapshot(), garbage);
    }
}
