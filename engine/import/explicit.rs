//! The zero-copy way in: an image created over the dma-buf's own memory, with
//! `VkImageDrmFormatModifierExplicitCreateInfoEXT` (one `VkSubresourceLayout` per memory
//! plane: offset and rowPitch, size 0), where the device imports the format+modifier as an
//! image for the use and the files may be given to the driver.


use ash::vk;
use dmabridge_interop::Layout;

use super::buffer::{import_memory, MemoryImport};
use super::image::{Backing, ImportedImage};
use super::{ImageImport, ImportError, ImportPath};
use crate::error::VkResultExt;
use crate::resources::image::{chain_view_formats, image_2d, memory_plane_aspect};
use crate::Engine;

/// The explicit import of a checked buffer whose files may be given to the driver.
pub(super) fn import_explicit(engine: &Engine, import: ImageImport<'_, '_>) -> Result<ImportedImage, ImportError> {
    let ImageImport { checked, entry, usage, .. } = import;
    let buf = checked.dmabuf();
    let Layout::Explicit(modifier) = buf.layout() else {
        return Err(ImportError::NeedsConversion(buf.layout()));
    };
    let device = engine.device();
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
    let mut explicit =
        vk::ImageDrmFormatModifierExplicitCreateInfoEXT::default().drm_format_modifier(modifier.raw()).plane_layouts(&plane_layouts);
    let mut external = vk::ExternalMemoryImageCreateInfo::default().handle_types(vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT);
    let mut flags = usage.create_flags(entry.vk_format);
    if checked.disjoint() {
        flags |= vk::ImageCreateFlags::DISJOINT;
    }
    let views = usage.view_formats(entry.vk_format);
    let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&views);
    let info = image_2d(entry.vk_format, (buf.width(), buf.height()), vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT, &usage)
        .flags(flags)
        .push_next(&mut explicit)
        .push_next(&mut external);
    let info = chain_view_formats(info, &mut list);
    // SAFETY: the capability query accepted this format, modifier, use (usage, create
    // flags, view formats) and handle type (VUID-VkImageCreateInfo-pNext-00990); check_import verified the plane count equals drmFormatModifierPlaneCount
    // (VUID-VkImageDrmFormatModifierExplicitCreateInfoEXT-drmFormatModifierPlaneCount-02265)
    // and that every plane lies inside its fd.
    let image = unsafe { device.create_image(&info, None) }.vk("vkCreateImage")?;
    let mut building = Building { device, image, memories: Vec::new() };
    let import_plane = |plane: usize, reqs: vk::MemoryRequirements, fd_size: u64, dedicated: Option<vk::Image>| {
        let fd = buf.dup_fd(plane).map_err(|e| ImportError::Dup { plane, source: std::io::Error::other(e) })?;
        import_memory(engine, MemoryImport { fd, plane, reqs, fd_size, dedicated })
    };
    if checked.disjoint() {
        let mut aspects = Vec::new();
        for (i, p) in checked.planes().iter().enumerate() {
            let aspect = memory_plane_aspect(i);
            let mut plane_info = vk::ImagePlaneMemoryRequirementsInfo::default().plane_aspect(aspect);
            let req_info = vk::ImageMemoryRequirementsInfo2::default().image(image).push_next(&mut plane_info);
            let mut reqs2 = vk::MemoryRequirements2::default();
            // SAFETY: a DISJOINT image queried per memory plane (VUID-VkImageMemoryRequirementsInfo2-image-02279).
            unsafe { device.get_image_memory_requirements2(&req_info, &mut reqs2) };
            building.memories.push(import_plane(i, reqs2.memory_requirements, p.file.size, None)?);
            aspects.push(aspect);
        }
        let mut plane_infos: Vec<vk::BindImagePlaneMemoryInfo> =
            aspects.iter().map(|a| vk::BindImagePlaneMemoryInfo::default().plane_aspect(*a)).collect();
        let binds: Vec<vk::BindImageMemoryInfo> = plane_infos
            .iter_mut()
            .zip(&building.memories)
            .map(|(pi, m)| vk::BindImageMemoryInfo::default().image(image).memory(*m).push_next(pi))
            .collect();
        // SAFETY: one bind per memory plane of a DISJOINT image, each with its plane aspect
        // (VUID-VkBindImageMemoryInfo-image-07736).
        unsafe { device.bind_image_memory2(&binds) }.vk("vkBindImageMemory2")?;
    } else {
        // SAFETY: image of this device, not yet bound.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let file_size = checked.planes().first().map_or(0, |p| p.file.size);
        building.memories.push(import_plane(0, reqs, file_size, Some(image))?);
        // SAFETY: dedicated memory of exactly the image's size, offset 0.
        unsafe { device.bind_image_memory(image, building.memories[0], 0) }.vk("vkBindImageMemory")?;
    }
    tracing::debug!(fourcc = %buf.fourcc(), %modifier, "imported explicitly");
    let disjoint = checked.disjoint();
    let (image, memories) = building.finish();
    Ok(ImportedImage::of_import(engine, &import, (ImportPath::Explicit, image), Backing::Aliased { memories, disjoint }, usage))
}
/// Everything created so far, destroyed if the import fails half way.
pub(super) struct Building<'a> {
    pub(super) device: &'a ash::Device,
    pub(super) image: vk::Image,
    pub(super) memories: Vec<vk::DeviceMemory>,
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        // SAFETY: objects of this device that no submission uses yet.
        unsafe {
            if self.image != vk::Image::null() {
                self.device.destroy_image(self.image, None);
            }
            for m in self.memories.drain(..) {
                self.device.free_memory(m, None);
            }
        }
    }
}

impl Building<'_> {
    pub(super) fn finish(mut self) -> (vk::Image, Vec<vk::DeviceMemory>) {
        let out = (self.image, std::mem::take(&mut self.memories));
        self.image = vk::Image::null();
        out
    }
}

