//! Allocate an image and export it as a dma-buf.
//!
//! With `VK_EXT_image_drm_format_modifier` the image is created from the acceptable
//! modifier list (seed 001, "Allocation"), and afterwards the driver is asked which one it
//! chose and where each memory plane lies: "Allocators are not permitted ... to select a
//! modifier not provided within the acceptable list", so a choice outside the list is an
//! error, not a warning. Without the extension the image uses LINEAR tiling, which is the
//! DRM LINEAR layout (rows at the `rowPitch` the driver reports), and is exported only
//! where the driver can export DMA_BUF at all.

use std::os::fd::{FromRawFd, OwnedFd};

use ash::vk;
use dmabridge_interop::dmabuf::{DescriptorError, DmaBuf};
use dmabridge_interop::{Fourcc, Layout, Modifier};

use crate::caps::{CapsError, CapsQuery};
use crate::commands::{image_2d, memory_plane_aspect};
use crate::vk_format;
use crate::Engine;

/// What to allocate.
#[derive(Debug, Clone)]
pub struct ExportRequest {
    pub fourcc: Fourcc,
    pub width: u32,
    pub height: u32,
    /// How the exporting side will use the image (rendering, storage, transfer...).
    pub usage: vk::ImageUsageFlags,
    /// The acceptable layouts from negotiation. `Layout::Implicit` in the list means an
    /// implicit allocation is acceptable too. An empty list means "whatever the device
    /// exports for this usage" (explicit where it can).
    pub acceptable: Vec<Layout>,
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0} has no Vulkan format in dmabridge's table")]
    UnknownFourcc(Fourcc),
    #[error("a {width}x{height} image has no pixels")]
    ZeroExtent { width: u32, height: u32 },
    #[error(transparent)]
    Caps(#[from] CapsError),
    #[error("none of the acceptable layouts [{}] of {fourcc} can be exported for this usage; the device exports [{}]",
        .acceptable.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", "),
        .exportable.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "))]
    NoAcceptableModifier { fourcc: Fourcc, acceptable: Vec<Layout>, exportable: Vec<Modifier> },
    #[error("the device cannot export {fourcc} as a DMA_BUF (no VK_EXT_image_drm_format_modifier, and LINEAR tiling is not exportable: on lavapipe this needs udmabuf)")]
    DmaBufExportUnsupported { fourcc: Fourcc },
    #[error("{width}x{height} exceeds the device's maximum {max_width}x{max_height} for {fourcc}")]
    ExtentTooLarge { fourcc: Fourcc, width: u32, height: u32, max_width: u32, max_height: u32 },
    #[error("the driver chose modifier {chosen}, which is not in the acceptable list")]
    ModifierNotRequested { chosen: Modifier },
    #[error("no memory type can hold the image")]
    NoMemoryType,
    #[error("the device cannot export {fourcc} memory as OPAQUE_FD")]
    OpaqueExportUnsupported { fourcc: Fourcc },
    #[error("VK_KHR_external_memory_fd is not enabled on this device")]
    NoExternalMemoryFd,
    #[error("{call} failed: {result}")]
    Vk { call: &'static str, result: vk::Result },
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
}

fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> ExportError {
    move |result| ExportError::Vk { call, result }
}

/// An `OPAQUE_FD` export: memory only another instance of the same driver on the same
/// device can import, so it travels with the UUIDs that prove where it came from and the
/// exact image parameters the importer must recreate.
#[derive(Debug)]
pub struct OpaqueFd {
    /// Owned; `vkGetMemoryFdKHR` returned it. Dup it for each import.
    pub fd: OwnedFd,
    pub allocation_size: u64,
    pub memory_type_index: u32,
    pub device_uuid: [u8; 16],
    pub driver_uuid: [u8; 16],
    pub fourcc: Fourcc,
    pub width: u32,
    pub height: u32,
    pub usage: vk::ImageUsageFlags,
}

/// How an exported image is shared.
#[derive(Debug)]
pub enum Shared {
    DmaBuf(DmaBuf),
    OpaqueFd(OpaqueFd),
}

/// An image this engine allocated and exported. It owns the image and its memory; the
/// share it carries owns a separate fd to the same memory, which stays valid (and keeps
/// the memory alive in the kernel) even after this is dropped.
pub struct ExportedImage<'e> {
    engine: &'e Engine,
    image: vk::Image,
    memory: vk::DeviceMemory,
    vk_format: vk::Format,
    shared: Shared,
}

impl<'e> ExportedImage<'e> {
    pub fn image(&self) -> vk::Image {
        self.image
    }

    pub fn vk_format(&self) -> vk::Format {
        self.vk_format
    }

    /// The dma-buf descriptor (fourcc, layout, extent, planes with fds) to hand to
    /// consumers; `None` for an `OPAQUE_FD` export.
    pub fn dmabuf(&self) -> Option<&DmaBuf> {
        match &self.shared {
            Shared::DmaBuf(d) => Some(d),
            Shared::OpaqueFd(_) => None,
        }
    }

    /// The image's fourcc, width and height.
    pub fn frame(&self) -> (Fourcc, u32, u32) {
        match &self.shared {
            Shared::DmaBuf(d) => (d.fourcc(), d.width(), d.height()),
            Shared::OpaqueFd(o) => (o.fourcc, o.width, o.height),
        }
    }

    /// The `OPAQUE_FD` share; `None` for a dma-buf export.
    pub fn opaque_fd(&self) -> Option<&OpaqueFd> {
        match &self.shared {
            Shared::OpaqueFd(o) => Some(o),
            Shared::DmaBuf(_) => None,
        }
    }

    /// The layout consumers must use: the chosen modifier, or implicit. An `OPAQUE_FD`
    /// image has a driver-private layout, which is implicit by definition.
    pub fn layout(&self) -> Layout {
        self.dmabuf().map_or(Layout::Implicit, DmaBuf::layout)
    }

    /// The queue family a consumer acquires this memory from.
    pub(crate) fn release_family(&self) -> u32 {
        match self.shared {
            Shared::DmaBuf(_) => self.engine.foreign_queue_family(),
            Shared::OpaqueFd(_) => vk::QUEUE_FAMILY_EXTERNAL,
        }
    }

    pub fn engine(&self) -> &'e Engine {
        self.engine
    }
}

impl Drop for ExportedImage<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: created by this engine; the caller's work on it was submitted through
        // submit_and_wait, which waits, so nothing pending uses it
        // (VUID-vkDestroyImage-image-01000, VUID-vkFreeMemory-memory-00677).
        unsafe {
            device.destroy_image(self.image, None);
            device.free_memory(self.memory, None);
        }
    }
}

/// The image and its memory before they are wrapped, destroyed on early return.
struct Partial<'a> {
    device: &'a ash::Device,
    image: vk::Image,
    memory: vk::DeviceMemory,
}

impl Partial<'_> {
    fn release(mut self) -> (vk::Image, vk::DeviceMemory) {
        let out = (self.image, self.memory);
        self.image = vk::Image::null();
        self.memory = vk::DeviceMemory::null();
        out
    }
}

impl Drop for Partial<'_> {
    fn drop(&mut self) {
        // SAFETY: objects of this device that no submitted work uses (nothing was recorded yet).
        unsafe {
            if self.image != vk::Image::null() {
                self.device.destroy_image(self.image, None);
            }
            if self.memory != vk::DeviceMemory::null() {
                self.device.free_memory(self.memory, None);
            }
        }
    }
}

impl Engine {
    /// Allocates an image for `req` and exports it as a dma-buf.
    pub fn export_image(&self, req: &ExportRequest) -> Result<ExportedImage<'_>, ExportError> {
        let entry = vk_format::to_vk(req.fourcc).ok_or(ExportError::UnknownFourcc(req.fourcc))?;
        if req.width == 0 || req.height == 0 {
            return Err(ExportError::ZeroExtent { width: req.width, height: req.height });
        }
        let caps = self.query_caps(&CapsQuery::new(req.fourcc, req.usage))?;
        let exportable: Vec<Modifier> = caps.exportable().collect();
        let implicit_ok = req.acceptable.is_empty() || req.acceptable.contains(&Layout::Implicit);
        let wanted: Vec<Modifier> = if req.acceptable.is_empty() {
            exportable.clone()
        } else {
            req.acceptable.iter().filter_map(|l| l.modifier()).filter(|m| exportable.contains(m)).collect()
        };

        if self.has_modifiers() {
            // An implicit-acceptable request may be upgraded to an explicit one (seed 001):
            // the driver reports the modifier it chose, and that is a valid modifier.
            let wanted = if wanted.is_empty() && implicit_ok { exportable.clone() } else { wanted };
            if wanted.is_empty() {
                return Err(ExportError::NoAcceptableModifier {
                    fourcc: req.fourcc,
                    acceptable: req.acceptable.clone(),
                    exportable,
                });
            }
            let max = wanted
                .iter()
                .filter_map(|m| caps.get(*m).and_then(|c| c.limits))
                .map(|l| (l.max_extent.width, l.max_extent.height))
                .max()
                .unwrap_or((0, 0));
            check_extent(req, max)?;
            self.export_with_modifiers(req, entry.vk_format, &wanted)
        } else {
            let linear_ok = req.acceptable.is_empty() || req.acceptable.contains(&Layout::Explicit(Modifier::LINEAR));
            let linear = caps.get(Modifier::LINEAR).filter(|c| c.can_export());
            let Some(linear) = linear.filter(|_| linear_ok || implicit_ok) else {
                return Err(if caps.get(Modifier::LINEAR).is_some_and(|c| c.supported() && !c.exportable) {
                    ExportError::DmaBufExportUnsupported { fourcc: req.fourcc }
                } else {
                    ExportError::NoAcceptableModifier {
                        fourcc: req.fourcc,
                        acceptable: req.acceptable.clone(),
                        exportable,
                    }
                });
            };
            let max = linear.limits.map_or((0, 0), |l| (l.max_extent.width, l.max_extent.height));
            check_extent(req, max)?;
            // Vulkan LINEAR tiling is the DRM LINEAR layout; report it as such when the
            // consumer asked for LINEAR, and as implicit when only implicit was acceptable.
            let layout = if linear_ok { Layout::Explicit(Modifier::LINEAR) } else { Layout::Implicit };
            self.export_linear_tiling(req, entry.vk_format, layout)
        }
    }

    fn export_with_modifiers(
        &self,
        req: &ExportRequest,
        format: vk::Format,
        modifiers: &[Modifier],
    ) -> Result<ExportedImage<'_>, ExportError> {
        let raw: Vec<u64> = modifiers.iter().map(|m| m.raw()).collect();
        let mut list = vk::ImageDrmFormatModifierListCreateInfoEXT::default().drm_format_modifiers(&raw);
        let (partial, _) = self.create_exportable(req, format, Tiling::Modifiers(&mut list))?;
        let modifier_fn = self.drm_format_modifier().ok_or(ExportError::DmaBufExportUnsupported { fourcc: req.fourcc })?;
        let mut props = vk::ImageDrmFormatModifierPropertiesEXT::default();
        // SAFETY: the image was created with DRM_FORMAT_MODIFIER_EXT tiling
        // (VUID-vkGetImageDrmFormatModifierPropertiesEXT-image-02272).
        unsafe { modifier_fn.get_image_drm_format_modifier_properties(partial.image, &mut props) }
            .map_err(vk_err("vkGetImageDrmFormatModifierPropertiesEXT"))?;
        let chosen = Modifier::from_raw(props.drm_format_modifier);
        if !modifiers.contains(&chosen) {
            tracing::error!(%chosen, "driver chose a modifier outside the acceptable list");
            return Err(ExportError::ModifierNotRequested { chosen });
        }
        let caps = self.query_caps(&CapsQuery::new(req.fourcc, req.usage))?;
        let memory_planes = caps.get(chosen).map_or(1, |c| c.plane_count as usize);
        let planes: Vec<(u64, u64)> = (0..memory_planes)
            .map(|i| {
                let sub = vk::ImageSubresource { aspect_mask: memory_plane_aspect(i), mip_level: 0, array_layer: 0 };
                // SAFETY: DRM-modifier images are queried per MEMORY_PLANE_i aspect, i below
                // the modifier's plane count (VUID-vkGetImageSubresourceLayout-tiling-02271).
                let l = unsafe { self.device().get_image_subresource_layout(partial.image, sub) };
                (l.offset, l.row_pitch)
            })
            .collect();
        tracing::debug!(fourcc = %req.fourcc, modifier = %chosen, ?planes, "exported with an explicit modifier");
        self.finish_export(req, format, partial, Layout::Explicit(chosen), &planes)
    }

    fn export_linear_tiling(&self, req: &ExportRequest, format: vk::Format, layout: Layout) -> Result<ExportedImage<'_>, ExportError> {
        let (partial, vk_planes) = self.create_exportable(req, format, Tiling::Linear)?;
        let planes: Vec<(u64, u64)> = (0..vk_planes as usize)
            .map(|i| {
                let sub = vk::ImageSubresource {
                    aspect_mask: crate::commands::plane_aspect(vk_planes, i),
                    mip_level: 0,
                    array_layer: 0,
                };
                // SAFETY: LINEAR images may be queried per plane aspect
                // (VUID-vkGetImageSubresourceLayout-image-02270).
                let l = unsafe { self.device().get_image_subresource_layout(partial.image, sub) };
                (l.offset, l.row_pitch)
            })
            .collect();
        self.finish_export(req, format, partial, layout, &planes)
    }

    /// Allocates an image in the driver's own (OPTIMAL) layout and exports its memory as an
    /// `OPAQUE_FD`, for another instance of the same driver on the same device (see
    /// [`Engine::import_opaque`]). No dma-buf is involved.
    pub fn export_opaque(
        &self,
        fourcc: Fourcc,
        width: u32,
        height: u32,
        usage: vk::ImageUsageFlags,
    ) -> Result<ExportedImage<'_>, ExportError> {
        let entry = vk_format::to_vk(fourcc).ok_or(ExportError::UnknownFourcc(fourcc))?;
        if width == 0 || height == 0 {
            return Err(ExportError::ZeroExtent { width, height });
        }
        let handle = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
        let caps = self.query_caps(&CapsQuery::new(fourcc, usage).with_handle_type(handle))?;
        if !caps.get(Modifier::LINEAR).is_some_and(|c| c.can_export()) {
            return Err(ExportError::OpaqueExportUnsupported { fourcc });
        }
        let req = ExportRequest { fourcc, width, height, usage, acceptable: Vec::new() };
        let (partial, _) = self.create_exportable(&req, entry.vk_format, Tiling::Optimal)?;
        // SAFETY: image of this device, bound above.
        let reqs = unsafe { self.device().get_image_memory_requirements(partial.image) };
        let fd = self.memory_fd(partial.memory, handle)?;
        let type_index = self.memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty()).ok_or(ExportError::NoMemoryType)?;
        let info = self.info();
        let shared = Shared::OpaqueFd(OpaqueFd {
            fd,
            allocation_size: reqs.size,
            memory_type_index: type_index,
            device_uuid: info.device_uuid,
            driver_uuid: info.driver_uuid,
            fourcc,
            width,
            height,
            usage,
        });
        let (image, memory) = partial.release();
        Ok(ExportedImage { engine: self, image, memory, vk_format: entry.vk_format, shared })
    }

    /// Creates the image with the external-memory info and the given tiling, and binds
    /// dedicated exportable memory to it.
    fn create_exportable<'a>(
        &'a self,
        req: &ExportRequest,
        format: vk::Format,
        tiling: Tiling<'_, '_>,
    ) -> Result<(Partial<'a>, u8), ExportError> {
        let device = self.device();
        let handle = match tiling {
            Tiling::Optimal => vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
            _ => vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT,
        };
        let mut external = vk::ExternalMemoryImageCreateInfo::default().handle_types(handle);
        let (vk_tiling, modifiers) = match tiling {
            Tiling::Modifiers(list) => (vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT, Some(list)),
            Tiling::Linear => (vk::ImageTiling::LINEAR, None),
            Tiling::Optimal => (vk::ImageTiling::OPTIMAL, None),
        };
        let mut info = image_2d(format, (req.width, req.height), vk_tiling, req.usage)
            .push_next(&mut external);
        if let Some(list) = modifiers {
            // VUID-VkImageCreateInfo-tiling-02261: DRM tiling needs a modifier list or explicit layout.
            info = info.push_next(list);
        }
        // SAFETY: the capability query accepted this format, tiling, usage and handle type
        // (VUID-VkImageCreateInfo-pNext-00990), and the extent was checked against its
        // limits (VUID-VkImageCreateInfo-extent-02252).
        let image = unsafe { device.create_image(&info, None) }.map_err(vk_err("vkCreateImage"))?;
        let mut partial = Partial { device, image, memory: vk::DeviceMemory::null() };
        // SAFETY: image of this device, not yet bound.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let type_index = self
            .memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty())
            .ok_or(ExportError::NoMemoryType)?;
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(handle);
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().image(image);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(reqs.size)
            .memory_type_index(type_index)
            .push_next(&mut export)
            .push_next(&mut dedicated);
        // SAFETY: a dedicated allocation of exactly the image's size
        // (VUID-VkMemoryDedicatedAllocateInfo-image-01433) in a type it allows.
        partial.memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // SAFETY: unbound image, memory dedicated to it, offset 0 (VUID-vkBindImageMemory-memory-02628).
        unsafe { device.bind_image_memory(image, partial.memory, 0) }.map_err(vk_err("vkBindImageMemory"))?;
        let vk_planes = vk_format::from_vk(format).map_or(1, |e| e.vk_planes);
        Ok((partial, vk_planes))
    }

    fn finish_export(
        &self,
        req: &ExportRequest,
        format: vk::Format,
        partial: Partial<'_>,
        layout: Layout,
        planes: &[(u64, u64)],
    ) -> Result<ExportedImage<'_>, ExportError> {
        let fd = self.memory_fd(partial.memory, vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT)?;
        let dmabuf = DmaBuf::in_one_file(req.fourcc, layout, req.width, req.height, fd, planes)?;
        let (image, memory) = partial.release();
        Ok(ExportedImage { engine: self, image, memory, vk_format: format, shared: Shared::DmaBuf(dmabuf) })
    }

    /// `vkGetMemoryFdKHR`: a new fd, owned by the caller.
    fn memory_fd(&self, memory: vk::DeviceMemory, handle: vk::ExternalMemoryHandleTypeFlags) -> Result<OwnedFd, ExportError> {
        let fd_fn = self.external_memory_fd().ok_or(ExportError::NoExternalMemoryFd)?;
        let get = vk::MemoryGetFdInfoKHR::default().memory(memory).handle_type(handle);
        // SAFETY: the memory was allocated exportable with this handle type
        // (VUID-VkMemoryGetFdInfoKHR-handleType-00671).
        let raw = unsafe { fd_fn.get_memory_fd(&get) }.map_err(vk_err("vkGetMemoryFdKHR"))?;
        // SAFETY: vkGetMemoryFdKHR returns a new fd that the caller owns.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }
}

/// The tiling of an exported image.
enum Tiling<'a, 'b> {
    /// `DRM_FORMAT_MODIFIER_EXT` from this acceptable list (a dma-buf).
    Modifiers(&'a mut vk::ImageDrmFormatModifierListCreateInfoEXT<'b>),
    /// LINEAR: the DRM LINEAR layout, without the modifier extension (a dma-buf).
    Linear,
    /// OPTIMAL: the driver's own layout, shared only as OPAQUE_FD.
    Optimal,
}

fn check_extent(req: &ExportRequest, (max_width, max_height): (u32, u32)) -> Result<(), ExportError> {
    if req.width > max_width || req.height > max_height {
        return Err(ExportError::ExtentTooLarge {
            fourcc: req.fourcc,
            width: req.width,
            height: req.height,
            max_width,
            max_height,
        });
    }
    Ok(())
}
