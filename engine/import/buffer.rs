//! A file's memory as a Vulkan buffer: what the copy paths and the conversions read (and
//! write) a dma-buf through, in place.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};

use ash::vk;
use dmabridge_interop::dmabuf::{CheckedFile, FileId, ImportCheckError, ImportOptions};

use super::ImportError;
use crate::device::requirements::Capability;
use crate::device::submit::{Completion, Garbage, Uses};
use crate::error::VkResultExt;
use crate::Engine;

/// A buffer over the memory of one file of a dma-buf (or a memfd standing in for one),
/// imported as `DMA_BUF` memory: GPU copies and shaders read and write the fd in place.
///
/// It owns the buffer and the imported memory (which owns a dup of the fd); the caller's fd
/// stays the caller's. `Send` and `Sync` as [`crate::GpuBuffer`].
pub struct ImportedBuffer {
    engine: Engine,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    len: u64,
    file: CheckedFile,
    uses: Uses,
}

impl std::fmt::Debug for ImportedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedBuffer").field("buffer", &self.buffer).field("len", &self.len).finish()
    }
}

impl ImportedBuffer {
    /// [`ImportedBuffer::import_with`] with the default options (nothing trusted).
    pub fn import(engine: &Engine, fd: BorrowedFd<'_>, len: u64, usage: vk::BufferUsageFlags) -> Result<ImportedBuffer, ImportError> {
        Self::import_with(engine, fd, len, usage, ImportOptions::default())
    }

    /// Imports the first `len` bytes of the file behind `fd` for `usage`. The fd is
    /// borrowed: a dup goes to Vulkan. The file is checked first
    /// ([`CheckedFile::check_mappable`]): one that cannot shrink under the mapping (a
    /// dma-buf, a memfd sealed with `F_SEAL_SHRINK`, a regular file `options.trust` vouches
    /// for), holding `len` bytes.
    pub fn import_with(
        engine: &Engine,
        fd: BorrowedFd<'_>,
        len: u64,
        usage: vk::BufferUsageFlags,
        options: ImportOptions,
    ) -> Result<ImportedBuffer, ImportError> {
        if !engine.has_capability(Capability::DmaBufImport) {
            return Err(ImportError::Unsupported(Capability::DmaBufImport));
        }
        let file = CheckedFile::check_mappable(fd, len, options)?;
        Self::of_checked(engine, fd, file, len, usage)
    }

    /// [`ImportedBuffer::import_with`] of a file that passed its checks: fixed-size, and
    /// holding `len` bytes.
    pub(crate) fn of_checked(engine: &Engine, fd: BorrowedFd<'_>, file: CheckedFile, len: u64, usage: vk::BufferUsageFlags) -> Result<ImportedBuffer, ImportError> {
        if len > file.size {
            return Err(ImportCheckError::PastEndOfFd { plane: 0, offset: 0, end: len, fd_size: file.size }.into());
        }
        let device = engine.device();
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT);
        let info = vk::BufferCreateInfo::default().size(len.max(4)).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE).push_next(&mut external);
        // SAFETY: a valid create info with the DMA_BUF handle type, whose extension is enabled
        // (VUID-VkExternalMemoryBufferCreateInfo-handleTypes-parameter).
        let buffer = unsafe { device.create_buffer(&info, None) }.vk("vkCreateBuffer")?;
        let mut out = ImportedBuffer { engine: engine.clone(), buffer, memory: vk::DeviceMemory::null(), len, file, uses: Uses::default() };
        // SAFETY: a buffer of this device.
        let reqs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let dup = fd.try_clone_to_owned().map_err(|source| ImportError::Dup { plane: 0, source })?;
        out.memory = import_memory(engine, MemoryImport { fd: dup, plane: 0, reqs, fd_size: file.size, dedicated: None })?;
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

    /// The file as it was checked at import: what a cache rechecks a new fd against.
    pub fn file(&self) -> CheckedFile {
        self.file
    }

    /// As [`crate::GpuBuffer::track`].
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

/// One fd's memory for [`import_memory`].
pub(crate) struct MemoryImport {
    /// Owned: Vulkan keeps it on success; it is closed on failure.
    pub fd: OwnedFd,
    /// The plane it is named by in errors.
    pub plane: usize,
    pub reqs: vk::MemoryRequirements,
    /// The file's size as checked, which the requirement must not exceed.
    pub fd_size: u64,
    /// The image the memory is dedicated to, if any.
    pub dedicated: Option<vk::Image>,
}

/// Imports an fd as DMA_BUF memory for an object with `m.reqs`: the one place an fd of a
/// caller's file becomes device memory.
pub(crate) fn import_memory(engine: &Engine, m: MemoryImport) -> Result<vk::DeviceMemory, ImportError> {
    let MemoryImport { fd, plane, reqs, fd_size, dedicated: image } = m;
    if reqs.size > fd_size {
        return Err(ImportError::ImageLargerThanFd { plane, needed: reqs.size, fd_size });
    }
    let fd_fn = engine.external_memory_fd().ok_or(ImportError::Unsupported(Capability::DmaBufImport))?;
    let handle = vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT;
    let mut fd_props = vk::MemoryFdPropertiesKHR::default();
    // SAFETY: a valid fd of a DMA_BUF-importable file (VUID-vkGetMemoryFdPropertiesKHR-fd-00673).
    unsafe { fd_fn.get_memory_fd_properties(handle, fd.as_raw_fd(), &mut fd_props) }.vk("vkGetMemoryFdPropertiesKHR")?;
    let type_index =
        engine.memory_type(reqs.memory_type_bits & fd_props.memory_type_bits, vk::MemoryPropertyFlags::empty()).ok_or(ImportError::NoMemoryType)?;
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
