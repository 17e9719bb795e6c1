//! Buffers: dmabridge's own (staging, readback, storage for the converters), and buffers over
//! a dma-buf's memory (the copy paths and conversions read and write the fd in place).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};

use ash::vk;
use gpu_allocator::vulkan::Allocation;
use gpu_allocator::MemoryLocation;

use dmabridge_interop::dmabuf::{read_exact_at, DmaBuf, FileId, ReadError};

use crate::error::{VkError, VkResultExt};
use crate::device::memory::MemoryError;
use crate::device::requirements::Capability;
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
    /// Importing needs the dma-buf import capability.
    #[error("this device lacks the {0} capability")]
    Unsupported(Capability),
    /// The file behind the fd is smaller than the buffer over it would be.
    #[error("the fd holds {fd_size} bytes, but the buffer over it needs {needed}")]
    FdTooSmall { needed: u64, fd_size: u64 },
    /// The fd could not be duplicated or inspected.
    #[error("cannot use the fd: {0}")]
    Fd(std::io::Error),
    /// No memory type can import the fd for a buffer.
    #[error("no memory type can import this fd as a buffer")]
    NoMemoryType,
    /// The fd holds no buffer (a directory, a socket...), or can shrink under a mapping.
    #[error("the fd cannot be mapped as a buffer: {0}")]
    NotMappable(String),
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

/// One plane's bytes for [`GpuBuffer::read_planes`]: `len` bytes at `file_offset` in the file
/// of the descriptor's plane `plane`, to go at byte `at` of the staging buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlaneRead {
    pub plane: usize,
    pub file_offset: u64,
    pub at: u64,
    pub len: u64,
}

/// Why [`GpuBuffer::read_planes`] failed; each caller reports it in its own error type.
#[derive(Debug)]
pub(crate) enum PlaneReadError {
    Buffer(BufferError),
    /// The descriptor has no such plane.
    NoPlane(usize),
    /// The plane's range does not fit the staging buffer, or its file could not be read.
    Read { plane: usize, source: ReadError },
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
    /// The read-copy paths' one reader, for files that can shrink: a new upload buffer of
    /// `len` bytes holding each of `reads`, read from the plane's fd (borrowed) with `pread`
    /// and never mapped, so a file that shrinks meanwhile is a `ShortRead`, not a SIGBUS.
    pub(crate) fn read_planes(engine: &Engine, buf: &DmaBuf, len: u64, reads: &[PlaneRead]) -> Result<GpuBuffer, PlaneReadError> {
        let mut staging = GpuBuffer::new(engine, len, BufferLocation::Upload).map_err(PlaneReadError::Buffer)?;
        let bytes = staging.bytes_mut().map_err(PlaneReadError::Buffer)?;
        for r in reads {
            let fd = buf.plane(r.plane).map(|p| p.fd).ok_or(PlaneReadError::NoPlane(r.plane))?;
            let range = r.at.checked_add(r.len).and_then(|end| Some(usize::try_from(r.at).ok()?..usize::try_from(end).ok()?));
            let dst = range
                .and_then(|range| bytes.get_mut(range))
                .ok_or(PlaneReadError::Read { plane: r.plane, source: ReadError::Overflow { offset: r.at, len: r.len } })?;
            read_exact_at(fd, r.file_offset, dst).map_err(|source| PlaneReadError::Read { plane: r.plane, source })?;
        }
        Ok(staging)
    }

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

/// A buffer over the memory of one file of a dma-buf (or a memfd standing in for one),
/// imported as `DMA_BUF` memory: GPU copies and shaders read and write the fd in place.
///
/// It owns the buffer and the imported memory (which owns a dup of the fd); the caller's fd
/// stays the caller's. `Send` and `Sync` as [`GpuBuffer`].
pub struct ImportedBuffer {
    engine: Engine,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    len: u64,
    uses: Uses,
}

impl std::fmt::Debug for ImportedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedBuffer").field("buffer", &self.buffer).field("len", &self.len).finish()
    }
}

impl ImportedBuffer {
    /// Imports the first `len` bytes of the file behind `fd` for `usage`. The fd is
    /// borrowed: a dup goes to Vulkan. The file must be one that cannot shrink under the
    /// mapping (a dma-buf, or a memfd sealed with `F_SEAL_SHRINK`), and hold `len` bytes:
    /// both are checked first.
    pub fn import(engine: &Engine, fd: BorrowedFd<'_>, len: u64, usage: vk::BufferUsageFlags) -> Result<ImportedBuffer, BufferError> {
        Self::import_trusting(engine, fd, len, usage, dmabridge_interop::dmabuf::FdTrust::Untrusted)
    }

    /// [`ImportedBuffer::import`], with regular files counted as fixed-size when `trust` says so.
    pub fn import_trusting(
        engine: &Engine,
        fd: BorrowedFd<'_>,
        len: u64,
        usage: vk::BufferUsageFlags,
        trust: dmabridge_interop::dmabuf::FdTrust,
    ) -> Result<ImportedBuffer, BufferError> {
        if !engine.has_capability(Capability::DmaBufImport) {
            return Err(BufferError::Unsupported(Capability::DmaBufImport));
        }
        let class = match dmabridge_interop::dmabuf::classify(fd, trust) {
            Ok(class) if class.is_fixed_size() => class,
            Ok(dmabridge_interop::dmabuf::FdClass::Shrinkable(reason)) => return Err(BufferError::NotMappable(reason.to_string())),
            Ok(other) => return Err(BufferError::NotMappable(format!("a {other}"))),
            Err(e) => return Err(BufferError::NotMappable(e.to_string())),
        };
        let fd_size = dmabridge_interop::dmabuf::file_size(fd, class).map_err(BufferError::Fd)?;
        if len > fd_size {
            return Err(BufferError::FdTooSmall { needed: len, fd_size });
        }
        let device = engine.device();
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT);
        let info = vk::BufferCreateInfo::default().size(len.max(4)).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE).push_next(&mut external);
        // SAFETY: a valid create info with the DMA_BUF handle type, whose extension is enabled
        // (VUID-VkExternalMemoryBufferCreateInfo-handleTypes-parameter).
        let buffer = unsafe { device.create_buffer(&info, None) }.vk("vkCreateBuffer")?;
        let mut out = ImportedBuffer { engine: engine.clone(), buffer, memory: vk::DeviceMemory::null(), len, uses: Uses::default() };
        // SAFETY: a buffer of this device.
        let reqs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let dup = fd.try_clone_to_owned().map_err(BufferError::Fd)?;
        out.memory = import_memory(engine, dup, reqs, fd_size, None)?;
        // SAFETY: an unbound buffer, memory of at least reqs.size (checked against the fd in
        // import_memory), offset 0 (VUID-vkBindBufferMemory-size-01037).
        unsafe { device.bind_buffer_memory(buffer, out.memory, 0) }.vk("vkBindBufferMemory")?;
        Ok(out)
    }

    pub fn buffer(&self) -> vk::Buffer {
        self.buffer
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// As [`GpuBuffer::track`].
    pub fn track(&self, until: Completion) {
        self.uses.add(until);
    }
}

impl Drop for ImportedBuffer {
    fn drop(&mut self) {
        let mut garbage = vec![Garbage::Buffer(self.buffer)];
        if self.memory != vk::DeviceMemory::null() {
            garbage.push(Garbage::Memory(self.memory));
        }
        self.engine.shared().retire(self.uses.snapshot(), garbage);
    }
}

/// Imports `fd` as DMA_BUF memory for an object with `reqs`, dedicated to `image` when
/// given. Takes ownership of `fd`: Vulkan keeps it on success, it is closed on failure.
/// `fd_size` is the file's size, checked against the requirement first.
pub(crate) fn import_memory(
    engine: &Engine,
    fd: OwnedFd,
    reqs: vk::MemoryRequirements,
    fd_size: u64,
    image: Option<vk::Image>,
) -> Result<vk::DeviceMemory, BufferError> {
    if reqs.size > fd_size {
        return Err(BufferError::FdTooSmall { needed: reqs.size, fd_size });
    }
    let fd_fn = engine.external_memory_fd().ok_or(BufferError::Unsupported(Capability::DmaBufImport))?;
    let handle = vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT;
    let mut fd_props = vk::MemoryFdPropertiesKHR::default();
    // SAFETY: a valid fd of a DMA_BUF-importable file (VUID-vkGetMemoryFdPropertiesKHR-fd-00673).
    unsafe { fd_fn.get_memory_fd_properties(handle, fd.as_raw_fd(), &mut fd_props) }.vk("vkGetMemoryFdPropertiesKHR")?;
    let type_index = engine
        .memory_type(reqs.memory_type_bits & fd_props.memory_type_bits, vk::MemoryPropertyFlags::empty())
        .ok_or(BufferError::NoMemoryType)?;
    let mut import = vk::ImportMemoryFdInfoKHR::default().handle_type(handle).fd(fd.as_raw_fd());
    let mut dedicated = vk::MemoryDedicatedAllocateInfo::default();
    if let Some(image) = image {
        dedicated = dedicated.image(image);
    }
    let mut alloc = vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(type_index).push_next(&mut import);
    if image.is_some() {
        alloc = alloc.push_next(&mut dedicated);
    }
    let before = FileId::of(fd.as_fd()).ok();
    // SAFETY: the fd holds at least reqs.size bytes (checked above), the memory type is one
    // the fd allows (VUID-VkImportMemoryFdInfoKHR-handleType-00667), and a dedicated
    // allocation has exactly the image's size (VUID-VkMemoryDedicatedAllocateInfo-image-01433).
    let memory = match unsafe { engine.device().allocate_memory(&alloc, None) }.vk("vkAllocateMemory") {
        Ok(m) => m,
        Err(e) => {
            crate::device::memory::close_after_failed_import(fd, before);
            return Err(e.into());
        }
    };
    // Vulkan owns the fd now (VkImportMemoryFdInfoKHR: a successful import transfers ownership).
    let _ = fd.into_raw_fd();
    Ok(memory)
}
