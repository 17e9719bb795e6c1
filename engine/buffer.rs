//! A persistently mapped, host-visible buffer: the staging, readback and storage buffer of
//! every transfer and conversion in the engine.
//!
//! On lavapipe all memory is host memory. A discrete GPU would stage through device-local
//! memory for speed; the operations that take a `GpuBuffer` take its `vk::Buffer`, so that is
//! a caller's choice.

use ash::vk;

use crate::Engine;

/// Why a buffer could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    #[error("no host-visible, coherent memory type for a buffer")]
    NoMemoryType,
    #[error("{call} failed: {result}")]
    Vk { call: &'static str, result: vk::Result },
}

fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> BufferError {
    move |result| BufferError::Vk { call, result }
}

/// A persistently mapped, host-visible storage buffer.
pub struct GpuBuffer<'e> {
    engine: &'e Engine,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    len: usize,
    ptr: *mut u8,
}

impl<'e> GpuBuffer<'e> {
    /// A zeroed buffer of `len` bytes (the allocation is rounded up: the shaders read whole
    /// 16-byte groups at the end of a plane).
    pub fn new(engine: &'e Engine, len: usize) -> Result<Self, BufferError> {
        let device = engine.device();
        let size = (len as u64).div_ceil(16) * 16 + 64;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info.
        let buffer = unsafe { device.create_buffer(&info, None) }.map_err(vk_err("vkCreateBuffer"))?;
        let mut b = GpuBuffer { engine, buffer, memory: vk::DeviceMemory::null(), len, ptr: std::ptr::null_mut() };
        // SAFETY: buffer of this device.
        let reqs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let type_index = engine
            .memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT)
            .ok_or(BufferError::NoMemoryType)?;
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(type_index);
        // SAFETY: plain allocation in an allowed type.
        b.memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // SAFETY: unbound buffer, memory of reqs.size, offset 0.
        unsafe { device.bind_buffer_memory(buffer, b.memory, 0) }.map_err(vk_err("vkBindBufferMemory"))?;
        // SAFETY: host-visible memory, mapped once for the buffer's life (VUID-vkMapMemory-memory-00678).
        let ptr = unsafe { device.map_memory(b.memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
            .map_err(vk_err("vkMapMemory"))?;
        b.ptr = ptr.cast();
        // SAFETY: the mapping covers reqs.size >= size bytes, exclusively ours.
        unsafe { std::ptr::write_bytes(b.ptr, 0, size as usize) };
        Ok(b)
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_bytes(engine: &'e Engine, bytes: &[u8]) -> Result<Self, BufferError> {
        let mut b = Self::new(engine, bytes.len())?;
        b.bytes_mut().copy_from_slice(bytes);
        Ok(b)
    }

    pub fn buffer(&self) -> vk::Buffer {
        self.buffer
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The contents. Only meaningful when no GPU work writing the buffer is pending
    /// (every dmabridge submission waits for completion).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is at least `len` bytes, lives as long as `self`, and the
        // memory is coherent; no GPU write is pending (see above).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for GpuBuffer<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: objects of this device; every submission using them was waited for.
        unsafe {
            if !self.ptr.is_null() {
                device.unmap_memory(self.memory);
            }
            device.destroy_buffer(self.buffer, None);
            if self.memory != vk::DeviceMemory::null() {
                device.free_memory(self.memory, None);
            }
        }
    }
}

