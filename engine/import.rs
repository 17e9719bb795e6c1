//! Import a dma-buf into Vulkan, after the layout checks.
//!
//! Two paths, and the result says which was taken:
//! - **Explicit**: where the device imports this format+modifier as an image for the usage,
//!   the image is created with `VkImageDrmFormatModifierExplicitCreateInfoEXT` (one
//!   `VkSubresourceLayout` per memory plane: offset and rowPitch, size 0) over the imported
//!   memory itself: zero copies.
//! - **BufferCopy**: otherwise (no modifier extension, or a format/modifier the device will
//!   not import as an image) each file is imported as a `VkBuffer` and copied into a
//!   device-local image with `vkCmdCopyBufferToImage`, one region per plane, with
//!   `bufferRowLength` from the stride. Only LINEAR (or, in the implicit world, implicit)
//!   layouts can be copied this way; tiled ones need the conversion pipelines.
//!
//! Nothing reaches the driver before [`check_import`] has passed: lavapipe mmaps the fd, so
//! a layout that overruns the file would crash inside Mesa.

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::sync::Mutex;

use ash::vk;
use dmabridge_interop::dmabuf::{check_import, CheckedImport, DmaBuf, FileId, ImportCheckError, ImportFacts};
use dmabridge_interop::{format_info, Format, Fourcc, Layout, Modifier};

use crate::caps::{CapsError, CapsQuery};
use crate::commands::{image_2d, image_barrier, plane_aspect, SubmitError};
use crate::vk_format::{self, Mapping, VkFormatEntry};
use crate::Engine;

/// Which way a buffer came into Vulkan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImportPath {
    /// The image aliases the dma-buf's memory: zero copies.
    Explicit,
    /// The dma-buf was imported as buffers and copied into a device image.
    BufferCopy,
    /// `OPAQUE_FD` memory of another instance of the same driver: zero copies.
    OpaqueFd,
}

impl std::fmt::Display for ImportPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ImportPath::Explicit => "explicit (zero-copy)",
            ImportPath::BufferCopy => "buffer-copy (fallback)",
            ImportPath::OpaqueFd => "opaque-fd (zero-copy, same driver)",
        })
    }
}

/// Why an import failed. Layout problems come first, as [`ImportCheckError`], in the
/// fixed order of the checks.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{0} has no Vulkan format in dmabridge's table")]
    UnknownFourcc(Fourcc),
    #[error(transparent)]
    Check(#[from] ImportCheckError),
    #[error(transparent)]
    Caps(#[from] CapsError),
    #[error("the driver needs {needed} bytes for plane {plane}'s memory but the fd has {fd_size}")]
    ImageLargerThanFd { plane: usize, needed: u64, fd_size: u64 },
    #[error("plane {plane}: stride {stride} is not a whole number of {texel}-byte texels, which a buffer copy needs")]
    StrideNotTexelAligned { plane: usize, stride: u64, texel: u64 },
    #[error("plane {plane}: offset {offset} is not a multiple of the {texel}-byte texel, which a buffer copy needs")]
    OffsetNotTexelAligned { plane: usize, offset: u64, texel: u64 },
    #[error("layout {0} cannot be copied as linear rows; it needs a detiling conversion")]
    NeedsConversion(Layout),
    #[error("the device cannot import DMA_BUF memory (VK_EXT_external_memory_dma_buf is not enabled)")]
    NoDmaBufImport,
    #[error("OPAQUE_FD memory from another device or driver (device UUID {theirs_device}, driver UUID {theirs_driver}; ours {ours_device}, {ours_driver}) cannot be imported")]
    ForeignOpaqueFd { theirs_device: String, theirs_driver: String, ours_device: String, ours_driver: String },
    #[error("the exporter's image needs {theirs} bytes in memory type {type_index}; the same image here needs {ours} bytes in types {ours_types:#x}")]
    OpaqueMismatch { theirs: u64, ours: u64, type_index: u32, ours_types: u32 },
    #[error("no memory type can import this fd for the image")]
    NoMemoryType,
    #[error("cannot duplicate the fd of plane {plane}: {source}")]
    Dup { plane: usize, source: std::io::Error },
    #[error("{call} failed: {result}")]
    Vk { call: &'static str, result: vk::Result },
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> ImportError {
    move |result| ImportError::Vk { call, result }
}

/// A buffer over one imported file, for the copy path and the detiling conversions.
/// Whoever holds one destroys `buffer` and frees `memory` (both of the importing engine).
pub(crate) struct FileBuffer {
    pub(crate) file: FileId,
    pub(crate) buffer: vk::Buffer,
    pub(crate) memory: vk::DeviceMemory,
}

/// A dma-buf as a Vulkan image. It owns the image and memory it made; the descriptor's fds
/// stay the caller's (Vulkan owns the dups it was given).
pub struct ImportedImage<'e> {
    engine: &'e Engine,
    path: ImportPath,
    fourcc: Fourcc,
    layout: Layout,
    entry: &'static VkFormatEntry,
    width: u32,
    height: u32,
    image: vk::Image,
    memories: Vec<vk::DeviceMemory>,
    /// Copy path: the imported files and the copy regions that refresh the image from them.
    sources: Vec<FileBuffer>,
    regions: Vec<(usize, vk::BufferImageCopy)>,
    /// The image's current layout, for the next barrier.
    current: Mutex<vk::ImageLayout>,
    /// The usage the image was created with (the presenter checks for SAMPLED).
    usage: vk::ImageUsageFlags,
}

fn uuid_hex(u: &[u8; 16]) -> String {
    u.iter().map(|b| format!("{b:02x}")).collect()
}

impl<'e> ImportedImage<'e> {
    pub fn path(&self) -> ImportPath {
        self.path
    }

    pub fn image(&self) -> vk::Image {
        self.image
    }

    pub fn vk_format(&self) -> vk::Format {
        self.entry.vk_format
    }

    pub fn fourcc(&self) -> Fourcc {
        self.fourcc
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn extent(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    /// The image layout the image is in now (after the last dmabridge operation on it).
    pub fn current_layout(&self) -> vk::ImageLayout {
        *self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The queue family the memory is acquired from on first use.
    pub(crate) fn acquire_family(&self) -> u32 {
        match self.path {
            ImportPath::OpaqueFd => vk::QUEUE_FAMILY_EXTERNAL,
            _ => self.engine.foreign_queue_family(),
        }
    }

    /// The usage flags the image was created with.
    pub(crate) fn usage(&self) -> vk::ImageUsageFlags {
        self.usage
    }

    pub(crate) fn set_current_layout(&self, l: vk::ImageLayout) {
        *self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = l;
    }

    /// Copy path: copies the dma-buf's current contents into the image again (a producer
    /// that reuses the buffer has written a new frame). The explicit path aliases the
    /// memory and needs nothing.
    pub fn refresh(&self) -> Result<(), ImportError> {
        if self.path != ImportPath::BufferCopy {
            return Ok(());
        }
        let old = self.current_layout();
        let aspect = full_aspect(self.entry.vk_planes);
        self.engine.submit_and_wait(|device, cmd| {
            let to_dst = image_barrier(
                self.image,
                aspect,
                old,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
                vk::AccessFlags::TRANSFER_WRITE,
            );
            // SAFETY: recording state; every handle belongs to this device; the regions lie
            // inside the buffers (checked against the fd sizes) and the image's planes
            // (VUID-vkCmdCopyBufferToImage-pRegions-06218, -06223).
            unsafe {
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &[to_dst],
                );
                for (src, region) in &self.regions {
                    device.cmd_copy_buffer_to_image(
                        cmd,
                        self.sources[*src].buffer,
                        self.image,
                        vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                        std::slice::from_ref(region),
                    );
                }
            }
        })?;
        self.set_current_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL);
        Ok(())
    }
}

impl Drop for ImportedImage<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: all objects were created by this engine's device, and every submission
        // that used them was waited for (VUID-vkDestroyImage-image-01000,
        // VUID-vkDestroyBuffer-buffer-00922, VUID-vkFreeMemory-memory-00677).
        unsafe {
            device.destroy_image(self.image, None);
            for m in &self.memories {
                device.free_memory(*m, None);
            }
            for s in &self.sources {
                device.destroy_buffer(s.buffer, None);
                device.free_memory(s.memory, None);
            }
        }
    }
}

pub(crate) fn full_aspect(vk_planes: u8) -> vk::ImageAspectFlags {
    match vk_planes {
        0 | 1 => vk::ImageAspectFlags::COLOR,
        2 => vk::ImageAspectFlags::PLANE_0 | vk::ImageAspectFlags::PLANE_1,
        _ => vk::ImageAspectFlags::PLANE_0 | vk::ImageAspectFlags::PLANE_1 | vk::ImageAspectFlags::PLANE_2,
    }
}

/// Everything created so far, destroyed if the import fails half way.
struct Building<'a> {
    device: &'a ash::Device,
    image: vk::Image,
    memories: Vec<vk::DeviceMemory>,
    sources: Vec<FileBuffer>,
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        // SAFETY: objects of this device that no pending submission uses.
        unsafe {
            if self.image != vk::Image::null() {
                self.device.destroy_image(self.image, None);
            }
            for m in self.memories.drain(..) {
                self.device.free_memory(m, None);
            }
            for s in self.sources.drain(..) {
                self.device.destroy_buffer(s.buffer, None);
                self.device.free_memory(s.memory, None);
            }
        }
    }
}

impl Engine {
    /// Checks `buf`'s layout, then imports it for `usage`: explicitly where the device can,
    /// else through the buffer-copy path. The descriptor's fds are only borrowed (dups go
    /// to Vulkan, which owns them from then on).
    pub fn import_dmabuf(&self, buf: &DmaBuf, usage: vk::ImageUsageFlags) -> Result<ImportedImage<'_>, ImportError> {
        let entry = vk_format::to_vk(buf.fourcc()).ok_or(ImportError::UnknownFourcc(buf.fourcc()))?;
        if !self.extensions().has(crate::DeviceExtension::ExternalMemoryDmaBuf) || self.external_memory_fd().is_none() {
            return Err(ImportError::NoDmaBufImport);
        }
        let caps = self.query_caps(&CapsQuery::new(buf.fourcc(), usage))?;
        let explicit_facts = |m: Modifier| -> Option<ImportFacts> {
            let c = caps.get(m).filter(|c| c.can_import() && self.has_modifiers())?;
            let limits = c.limits?;
            Some(ImportFacts {
                memory_plane_count: c.plane_count as usize,
                max_width: limits.max_extent.width,
                max_height: limits.max_extent.height,
                disjoint: c.tiling_features.contains(vk::FormatFeatureFlags::DISJOINT),
            })
        };
        let explicit = match buf.layout() {
            Layout::Explicit(m) => explicit_facts(m).is_some(),
            Layout::Implicit => false,
        };
        if explicit {
            let checked = check_import(buf, &|f: Format| match f.layout {
                Layout::Explicit(m) if f.fourcc == buf.fourcc() => explicit_facts(m),
                _ => None,
            })?;
            self.import_explicit(&checked, entry, usage)
        } else {
            let copy_facts = self.copy_path_facts(buf, entry, usage);
            let checked = check_import(buf, &|f: Format| {
                if f.fourcc != buf.fourcc() {
                    return None;
                }
                match f.layout {
                    Layout::Explicit(Modifier::LINEAR) => copy_facts,
                    // The implicit world: a device without modifiers shares LINEAR memory.
                    Layout::Implicit if !self.has_modifiers() => copy_facts,
                    _ => None,
                }
            });
            match checked {
                Err(ImportCheckError::LayoutNotAllowed { .. }) if copy_facts.is_some() => {
                    Err(ImportError::NeedsConversion(buf.layout()))
                }
                Err(e) => Err(e.into()),
                Ok(checked) => self.import_by_copy(&checked, entry, usage),
            }
        }
    }

    /// Imports another engine's `OPAQUE_FD` export. The UUIDs are checked first: opaque
    /// memory means nothing to a different device or driver build
    /// (VUID-VkImportMemoryFdInfoKHR-fd-00668), so it is refused before Vulkan sees it.
    /// Takes ownership of a dup of `share.fd`; the share keeps its own fd.
    pub fn import_opaque(&self, share: &crate::export::OpaqueFd) -> Result<ImportedImage<'_>, ImportError> {
        let info = self.info();
        if share.device_uuid != info.device_uuid || share.driver_uuid != info.driver_uuid {
            return Err(ImportError::ForeignOpaqueFd {
                theirs_device: uuid_hex(&share.device_uuid),
                theirs_driver: uuid_hex(&share.driver_uuid),
                ours_device: uuid_hex(&info.device_uuid),
                ours_driver: uuid_hex(&info.driver_uuid),
            });
        }
        let entry = vk_format::to_vk(share.fourcc).ok_or(ImportError::UnknownFourcc(share.fourcc))?;
        let device = self.device();
        let handle = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
        let mut external = vk::ExternalMemoryImageCreateInfo::default().handle_types(handle);
        let image_info = image_2d(entry.vk_format, (share.width, share.height), vk::ImageTiling::OPTIMAL, share.usage)
            .push_next(&mut external);
        // SAFETY: the same parameters the exporter, a device with our UUIDs, created its
        // image with (VUID-VkImageCreateInfo-pNext-00990 holds there, so here too).
        let image = unsafe { device.create_image(&image_info, None) }.map_err(vk_err("vkCreateImage"))?;
        let mut building = Building { device, image, memories: Vec::new(), sources: Vec::new() };
        // SAFETY: image of this device, not yet bound.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        if reqs.size != share.allocation_size || reqs.memory_type_bits & (1 << share.memory_type_index) == 0 {
            return Err(ImportError::OpaqueMismatch {
                theirs: share.allocation_size,
                ours: reqs.size,
                type_index: share.memory_type_index,
                ours_types: reqs.memory_type_bits,
            });
        }
        let fd = share.fd.try_clone().map_err(|source| ImportError::Dup { plane: 0, source })?;
        let mut import = vk::ImportMemoryFdInfoKHR::default().handle_type(handle).fd(fd.as_raw_fd());
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().image(image);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(share.allocation_size)
            .memory_type_index(share.memory_type_index)
            .push_next(&mut import)
            .push_next(&mut dedicated);
        // SAFETY: same device and driver (UUIDs checked), the exporter's size and memory type
        // (VUID-VkMemoryAllocateInfo-allocationSize-01742), dedicated to an identical image.
        let memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // Vulkan owns the fd now (a successful import transfers ownership).
        let _ = fd.into_raw_fd();
        building.memories.push(memory);
        // SAFETY: dedicated memory of exactly the image's size, offset 0.
        unsafe { device.bind_image_memory(image, memory, 0) }.map_err(vk_err("vkBindImageMemory"))?;
        let memories = std::mem::take(&mut building.memories);
        building.image = vk::Image::null();
        Ok(ImportedImage {
            engine: self,
            path: ImportPath::OpaqueFd,
            fourcc: share.fourcc,
            layout: Layout::Implicit,
            entry,
            width: share.width,
            height: share.height,
            image,
            memories,
            sources: Vec::new(),
            regions: Vec::new(),
            current: Mutex::new(vk::ImageLayout::UNDEFINED),
            usage: share.usage,
        })
    }

    /// Limits of the copy path: a device-local optimal image of the format with `usage`
    /// plus TRANSFER_DST; planes may live in any files.
    fn copy_path_facts(&self, buf: &DmaBuf, entry: &VkFormatEntry, usage: vk::ImageUsageFlags) -> Option<ImportFacts> {
        let planes = format_info(buf.fourcc())?.plane_count();
        // SAFETY: plain query of this engine's physical device.
        let props = unsafe {
            self.instance().get_physical_device_image_format_properties(
                self.physical_device(),
                entry.vk_format,
                vk::ImageType::TYPE_2D,
                vk::ImageTiling::OPTIMAL,
                usage | vk::ImageUsageFlags::TRANSFER_DST,
                vk::ImageCreateFlags::empty(),
            )
        }
        .ok()?;
        Some(ImportFacts {
            memory_plane_count: planes,
            max_width: props.max_extent.width,
            max_height: props.max_extent.height,
            disjoint: true,
        })
    }

    fn import_explicit(
        &self,
        checked: &CheckedImport<'_>,
        entry: &'static VkFormatEntry,
        usage: vk::ImageUsageFlags,
    ) -> Result<ImportedImage<'_>, ImportError> {
        let buf = checked.dmabuf();
        let Layout::Explicit(modifier) = buf.layout() else {
            return Err(ImportError::NeedsConversion(buf.layout()));
        };
        let device = self.device();
        let plane_layouts: Vec<vk::SubresourceLayout> = checked
            .planes()
            .iter()
            .map(|p| vk::SubresourceLayout {
                offset: p.offset,
                // VUID-VkImageDrmFormatModifierExplicitCreateInfoEXT-size-02267: size must be 0.
                size: 0,
                row_pitch: p.stride,
                array_pitch: 0,
                depth_pitch: 0,
            })
            .collect();
        let mut explicit = vk::ImageDrmFormatModifierExplicitCreateInfoEXT::default()
            .drm_format_modifier(modifier.raw())
            .plane_layouts(&plane_layouts);
        let mut external =
            vk::ExternalMemoryImageCreateInfo::default().handle_types(vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT);
        let flags = if checked.disjoint() { vk::ImageCreateFlags::DISJOINT } else { vk::ImageCreateFlags::empty() };
        let info = image_2d(entry.vk_format, (buf.width(), buf.height()), vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT, usage)
            .flags(flags)
            .push_next(&mut explicit)
            .push_next(&mut external);
        // SAFETY: the capability query accepted this format, modifier, usage and handle type;
        // check_import verified the plane count equals drmFormatModifierPlaneCount
        // (VUID-VkImageDrmFormatModifierExplicitCreateInfoEXT-drmFormatModifierPlaneCount-02265)
        // and that every plane lies inside its fd.
        let image = unsafe { device.create_image(&info, None) }.map_err(vk_err("vkCreateImage"))?;
        let mut building = Building { device, image, memories: Vec::new(), sources: Vec::new() };

        if checked.disjoint() {
            let mut binds_planes = Vec::new();
            for (i, p) in checked.planes().iter().enumerate() {
                let aspect = crate::commands::memory_plane_aspect(i);
                let mut plane_info = vk::ImagePlaneMemoryRequirementsInfo::default().plane_aspect(aspect);
                let req_info = vk::ImageMemoryRequirementsInfo2::default().image(image).push_next(&mut plane_info);
                let mut reqs2 = vk::MemoryRequirements2::default();
                // SAFETY: a DISJOINT image queried per memory plane (VUID-VkImageMemoryRequirementsInfo2-image-02279).
                unsafe { device.get_image_memory_requirements2(&req_info, &mut reqs2) };
                let reqs = reqs2.memory_requirements;
                let fd = buf.dup_fd(i).map_err(|e| ImportError::Dup { plane: i, source: std::io::Error::other(e) })?;
                let memory = self.import_memory(fd, reqs, p.file_size, i, None)?;
                building.memories.push(memory);
                binds_planes.push(aspect);
            }
            let mut plane_infos: Vec<vk::BindImagePlaneMemoryInfo> =
                binds_planes.iter().map(|a| vk::BindImagePlaneMemoryInfo::default().plane_aspect(*a)).collect();
            let binds: Vec<vk::BindImageMemoryInfo> = plane_infos
                .iter_mut()
                .zip(&building.memories)
                .map(|(pi, m)| vk::BindImageMemoryInfo::default().image(image).memory(*m).push_next(pi))
                .collect();
            // SAFETY: one bind per memory plane of a DISJOINT image, each with its plane aspect
            // (VUID-VkBindImageMemoryInfo-image-07736).
            unsafe { device.bind_image_memory2(&binds) }.map_err(vk_err("vkBindImageMemory2"))?;
        } else {
            // SAFETY: image of this device, not yet bound.
            let reqs = unsafe { device.get_image_memory_requirements(image) };
            let fd = buf.dup_fd(0).map_err(|e| ImportError::Dup { plane: 0, source: std::io::Error::other(e) })?;
            let file_size = checked.planes().first().map_or(0, |p| p.file_size);
            let memory = self.import_memory(fd, reqs, file_size, 0, Some(image))?;
            building.memories.push(memory);
            // SAFETY: dedicated memory of exactly the image's size, offset 0.
            unsafe { device.bind_image_memory(image, memory, 0) }.map_err(vk_err("vkBindImageMemory"))?;
        }
        tracing::debug!(fourcc = %buf.fourcc(), %modifier, "imported explicitly");
        let memories = std::mem::take(&mut building.memories);
        building.image = vk::Image::null();
        Ok(ImportedImage {
            engine: self,
            path: ImportPath::Explicit,
            fourcc: buf.fourcc(),
            layout: buf.layout(),
            entry,
            width: buf.width(),
            height: buf.height(),
            image,
            memories,
            sources: Vec::new(),
            regions: Vec::new(),
            current: Mutex::new(vk::ImageLayout::UNDEFINED),
            usage,
        })
    }

    /// Imports `fd` as DMA_BUF memory for an object with `reqs`, dedicated to `image` when
    /// given. Takes ownership of `fd`: Vulkan keeps it on success, it is closed on failure.
    fn import_memory(
        &self,
        fd: OwnedFd,
        reqs: vk::MemoryRequirements,
        file_size: u64,
        plane: usize,
        image: Option<vk::Image>,
    ) -> Result<vk::DeviceMemory, ImportError> {
        if reqs.size > file_size {
            return Err(ImportError::ImageLargerThanFd { plane, needed: reqs.size, fd_size: file_size });
        }
        let fd_fn = self.external_memory_fd().ok_or(ImportError::NoDmaBufImport)?;
        let handle = vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT;
        let mut fd_props = vk::MemoryFdPropertiesKHR::default();
        // SAFETY: a valid fd of a DMA_BUF-importable file (VUID-vkGetMemoryFdPropertiesKHR-fd-00673).
        unsafe { fd_fn.get_memory_fd_properties(handle, fd.as_raw_fd(), &mut fd_props) }
            .map_err(vk_err("vkGetMemoryFdPropertiesKHR"))?;
        let type_index = self
            .memory_type(reqs.memory_type_bits & fd_props.memory_type_bits, vk::MemoryPropertyFlags::empty())
            .ok_or(ImportError::NoMemoryType)?;
        let mut import = vk::ImportMemoryFdInfoKHR::default().handle_type(handle).fd(fd.as_raw_fd());
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default();
        if let Some(image) = image {
            dedicated = dedicated.image(image);
        }
        let mut alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(reqs.size)
            .memory_type_index(type_index)
            .push_next(&mut import);
        if image.is_some() {
            alloc = alloc.push_next(&mut dedicated);
        }
        // SAFETY: the fd was checked to hold at least reqs.size bytes (above and in
        // check_import), the memory type is one the fd allows
        // (VUID-VkImportMemoryFdInfoKHR-handleType-00667), and a dedicated allocation has
        // exactly the image's size (VUID-VkMemoryDedicatedAllocateInfo-image-01433).
        let memory = unsafe { self.device().allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // Vulkan owns the fd now (VkImportMemoryFdInfoKHR: a successful import transfers ownership).
        let _ = fd.into_raw_fd();
        Ok(memory)
    }

    fn import_by_copy(
        &self,
        checked: &CheckedImport<'_>,
        entry: &'static VkFormatEntry,
        usage: vk::ImageUsageFlags,
    ) -> Result<ImportedImage<'_>, ImportError> {
        let buf = checked.dmabuf();
        let info = format_info(buf.fourcc()).ok_or(ImportError::UnknownFourcc(buf.fourcc()))?;
        let device = self.device();
        let image_info = image_2d(entry.vk_format, (buf.width(), buf.height()), vk::ImageTiling::OPTIMAL, usage | vk::ImageUsageFlags::TRANSFER_DST);
        // SAFETY: format, usage and extent were accepted by the image-format query in copy_path_facts.
        let image = unsafe { device.create_image(&image_info, None) }.map_err(vk_err("vkCreateImage"))?;
        let mut building = Building { device, image, memories: Vec::new(), sources: Vec::new() };
        // SAFETY: image of this device, not yet bound.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let type_index = self
            .memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::DEVICE_LOCAL)
            .or_else(|| self.memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty()))
            .ok_or(ImportError::NoMemoryType)?;
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(type_index);
        // SAFETY: a plain allocation in an allowed type.
        let memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        building.memories.push(memory);
        // SAFETY: unbound image, big enough memory, offset 0.
        unsafe { device.bind_image_memory(image, memory, 0) }.map_err(vk_err("vkBindImageMemory"))?;

        let mut regions = Vec::new();
        for (i, p) in checked.planes().iter().enumerate() {
            // YV12 keeps V before U: its plane 1 is Vulkan's plane 2 (Cr) and vice versa.
            let vk_plane = if entry.mapping == Mapping::ChromaSwapped && entry.vk_planes == 3 && i > 0 { 3 - i } else { i };
            let texel = info.planes.get(i).map_or(1, |pl| pl.cpp as u64);
            // Packed 4:2:2 formats copy in 2x1 blocks of 4 bytes.
            let block = if entry.vk_planes == 1 && info.is_yuv { 4 } else { texel };
            if p.stride % block != 0 {
                return Err(ImportError::StrideNotTexelAligned { plane: i, stride: p.stride, texel: block });
            }
            if p.offset % block != 0 {
                return Err(ImportError::OffsetNotTexelAligned { plane: i, offset: p.offset, texel: block });
            }
            let src = match building.sources.iter().position(|s| s.file == p.file) {
                Some(s) => s,
                None => {
                    let size = checked
                        .planes()
                        .iter()
                        .filter(|q| q.file == p.file)
                        .map(|q| q.end)
                        .max()
                        .unwrap_or(p.end);
                    let fb =
                        self.import_file_buffer(buf, i, p.file, size, p.file_size, vk::BufferUsageFlags::TRANSFER_SRC)?;
                    building.sources.push(fb);
                    building.sources.len() - 1
                }
            };
            let row_length = u32::try_from(p.stride / texel).map_err(|_| ImportError::StrideNotTexelAligned {
                plane: i,
                stride: p.stride,
                texel,
            })?;
            regions.push((
                src,
                vk::BufferImageCopy {
                    buffer_offset: p.offset,
                    buffer_row_length: row_length,
                    buffer_image_height: 0,
                    image_subresource: vk::ImageSubresourceLayers {
                        aspect_mask: plane_aspect(entry.vk_planes, vk_plane),
                        mip_level: 0,
                        base_array_layer: 0,
                        layer_count: 1,
                    },
                    image_offset: vk::Offset3D::default(),
                    image_extent: vk::Extent3D {
                        width: info.plane_width(i, buf.width()),
                        height: info.plane_height(i, buf.height()),
                        depth: 1,
                    },
                },
            ));
        }
        let memories = std::mem::take(&mut building.memories);
        let sources = std::mem::take(&mut building.sources);
        building.image = vk::Image::null();
        let imported = ImportedImage {
            engine: self,
            path: ImportPath::BufferCopy,
            fourcc: buf.fourcc(),
            layout: buf.layout(),
            entry,
            width: buf.width(),
            height: buf.height(),
            image,
            memories,
            sources,
            regions,
            current: Mutex::new(vk::ImageLayout::UNDEFINED),
            usage: usage | vk::ImageUsageFlags::TRANSFER_DST,
        };
        imported.refresh()?;
        tracing::debug!(fourcc = %buf.fourcc(), "imported through the buffer-copy path");
        Ok(imported)
    }

    /// Imports the file behind plane `plane` as a buffer of `size` bytes with `usage`.
    /// The caller has checked that `size <= file_size`, the size of the fd.
    pub(crate) fn import_file_buffer(
        &self,
        buf: &DmaBuf,
        plane: usize,
        file: FileId,
        size: u64,
        file_size: u64,
        usage: vk::BufferUsageFlags,
    ) -> Result<FileBuffer, ImportError> {
        let device = self.device();
        let mut external =
            vk::ExternalMemoryBufferCreateInfo::default().handle_types(vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT);
        let info = vk::BufferCreateInfo::default()
            .size(size.max(1))
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        // SAFETY: a valid create info with a DMA_BUF external handle type the device enabled.
        let buffer = unsafe { device.create_buffer(&info, None) }.map_err(vk_err("vkCreateBuffer"))?;
        // SAFETY: buffer of this device.
        let reqs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let fd = match buf.dup_fd(plane) {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: unbound buffer of this device.
                unsafe { device.destroy_buffer(buffer, None) };
                return Err(ImportError::Dup { plane, source: std::io::Error::other(e) });
            }
        };
        let memory = match self.import_memory(fd, reqs, file_size, plane, None) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: as above.
                unsafe { device.destroy_buffer(buffer, None) };
                return Err(e);
            }
        };
        // SAFETY: unbound buffer, memory of at least reqs.size, offset 0.
        if let Err(result) = unsafe { device.bind_buffer_memory(buffer, memory, 0) } {
            // SAFETY: as above.
            unsafe {
                device.destroy_buffer(buffer, None);
                device.free_memory(memory, None);
            }
            return Err(ImportError::Vk { call: "vkBindBufferMemory", result });
        }
        Ok(FileBuffer { file, buffer, memory })
    }
}
