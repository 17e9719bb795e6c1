//! Memory for dmabridge's own objects, and the memory-type choice for dma-buf memory.
//!
//! Staging and readback buffers, scratch images, the copy path's device-local images and the
//! converters' buffers are sub-allocated by gpu-allocator from a few large blocks. Memory
//! that is shared as a dma-buf (exported images, imported fds) is a dedicated
//! `vkAllocateMemory` of its own, as external memory must be.

use std::sync::{Mutex, PoisonError};

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme, Allocator, AllocatorCreateDesc};
use gpu_allocator::MemoryLocation;

/// Why memory could not be allocated.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// gpu-allocator could not place the allocation (out of memory, no suitable type).
    #[error("cannot allocate {size} bytes of {location:?} memory for {what}: {source}")]
    Allocate {
        what: &'static str,
        size: u64,
        location: MemoryLocation,
        source: gpu_allocator::AllocationError,
    },
    /// The allocator could not be set up on this device.
    #[error("cannot create the memory allocator: {0}")]
    Create(gpu_allocator::AllocationError),
    /// No memory type allows what the object needs.
    #[error("no memory type allows {what} (type bits {type_bits:#x}, needs {required:?})")]
    NoMemoryType { what: &'static str, type_bits: u32, required: vk::MemoryPropertyFlags },
}

/// The engine's allocator. Dropped (and its blocks freed) before the device is destroyed.
pub(crate) struct Memory {
    allocator: Mutex<Option<Allocator>>,
    properties: vk::PhysicalDeviceMemoryProperties,
}

impl Memory {
    pub(crate) fn new(instance: &ash::Instance, device: &ash::Device, physical: vk::PhysicalDevice) -> Result<Memory, MemoryError> {
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.clone(),
            device: device.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        })
        .map_err(MemoryError::Create)?;
        // SAFETY: plain query of the physical device the device was created from.
        let properties = unsafe { instance.get_physical_device_memory_properties(physical) };
        Ok(Memory { allocator: Mutex::new(Some(allocator)), properties })
    }

    pub(crate) fn allocate(
        &self,
        what: &'static str,
        requirements: vk::MemoryRequirements,
        location: MemoryLocation,
        linear: bool,
    ) -> Result<Allocation, MemoryError> {
        let mut guard = self.allocator.lock().unwrap_or_else(PoisonError::into_inner);
        let allocator = guard.as_mut().ok_or(MemoryError::Create(gpu_allocator::AllocationError::Internal(
            "the allocator was shut down".into(),
        )))?;
        allocator
            .allocate(&AllocationCreateDesc {
                name: what,
                requirements,
                location,
                linear,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            })
            .map_err(|source| MemoryError::Allocate { what, size: requirements.size, location, source })
    }

    pub(crate) fn free(&self, allocation: Allocation) {
        if let Some(a) = self.allocator.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            if let Err(e) = a.free(allocation) {
                tracing::error!(%e, "gpu-allocator could not free an allocation");
            }
        }
    }

    /// Frees the allocator's blocks; every allocation must have been freed.
    pub(crate) fn shutdown(&self) {
        // Dropping the allocator frees its blocks (and logs any allocation still alive).
        drop(self.allocator.lock().unwrap_or_else(PoisonError::into_inner).take());
    }

    /// The first memory type allowed by `type_bits` that has all of `required`.
    pub(crate) fn memory_type(&self, type_bits: u32, required: vk::MemoryPropertyFlags) -> Option<u32> {
        (0..self.properties.memory_type_count).find(|&i| {
            type_bits & (1 << i) != 0 && self.properties.memory_types[i as usize].property_flags.contains(required)
        })
    }
}

/// Disposes of an fd whose import failed. The spec says a failed import leaves the fd with
/// the caller, but a driver may have closed it anyway (lavapipe does when it cannot map the
/// file); closing it again could close a file another thread has opened under the same
/// number since. So it is closed only if it still refers to the file it referred to before
/// the call (`before`), and otherwise forgotten.
pub(crate) fn close_after_failed_import(fd: std::os::fd::OwnedFd, before: Option<dmabridge_interop::dmabuf::FileId>) {
    match (dmabridge_interop::dmabuf::FileId::of(std::os::fd::AsFd::as_fd(&fd)), before) {
        (Ok(now), Some(was)) if now == was => drop(fd),
        _ => {
            tracing::warn!(fd = std::os::fd::AsRawFd::as_raw_fd(&fd), "the driver closed an fd it did not take after a failed import; not closing it again");
            let _ = std::os::fd::IntoRawFd::into_raw_fd(fd);
        }
    }
}
