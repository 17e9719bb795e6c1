//! `OPAQUE_FD` memory of another instance of the same driver: zero copies, where the
//! device and driver UUIDs match (opaque memory means nothing elsewhere).

use std::os::fd::{AsFd, AsRawFd, IntoRawFd};
use std::sync::Arc;

use ash::vk;
use dmabridge_interop::dmabuf::ImportOptions;
use dmabridge_interop::Layout;

use super::explicit::Building;
use super::image::{Backing, ImportedImage, Inner};
use super::{ImportError, ImportPath};
use crate::device::vk_format;
use crate::error::VkResultExt;
use crate::resources::image::{chain_view_formats, image_2d, Tracked};
use crate::Engine;

fn uuid_hex(u: &[u8; 16]) -> String {
    u.iter().map(|b| format!("{b:02x}")).collect()
}

/// See [`Engine::import_opaque`].
pub(super) fn import_opaque(engine: &Engine, share: &crate::dmabuf::export::OpaqueFd) -> Result<ImportedImage, ImportError> {
    let info = engine.info();
    if share.device_uuid != info.device_uuid || share.driver_uuid != info.driver_uuid {
        return Err(ImportError::ForeignOpaqueFd {
            theirs_device: uuid_hex(&share.device_uuid),
            theirs_driver: uuid_hex(&share.driver_uuid),
            ours_device: uuid_hex(&info.device_uuid),
            ours_driver: uuid_hex(&info.driver_uuid),
        });
    }
    let entry = vk_format::to_vk(share.fourcc).ok_or(ImportError::UnknownFourcc(share.fourcc))?;
    let device = engine.device();
    let handle = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
    let mut external = vk::ExternalMemoryImageCreateInfo::default().handle_types(handle);
    let views = share.image_use.view_formats(entry.vk_format);
    let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&views);
    let image_info = chain_view_formats(
        image_2d(entry.vk_format, (share.width, share.height), vk::ImageTiling::OPTIMAL, &share.image_use).push_next(&mut external),
        &mut list,
    );
    // SAFETY: the same parameters the exporter, a device with our UUIDs, created its
    // image with (VUID-VkImageCreateInfo-pNext-00990 holds there, so here too).
    let image = unsafe { device.create_image(&image_info, None) }.vk("vkCreateImage")?;
    let mut building = Building { device, image, memories: Vec::new() };
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
    let before = dmabridge_interop::dmabuf::FileId::of(fd.as_fd()).ok();
    // SAFETY: same device and driver (UUIDs checked), the exporter's size and memory type
    // (VUID-VkMemoryAllocateInfo-allocationSize-01742), dedicated to an identical image.
    let memory = match unsafe { device.allocate_memory(&alloc, None) }.vk("vkAllocateMemory") {
        Ok(m) => m,
        Err(e) => {
            crate::device::memory::close_after_failed_import(fd, before);
            return Err(e.into());
        }
    };
    // Vulkan owns the fd now (a successful import transfers ownership).
    let _ = fd.into_raw_fd();
    building.memories.push(memory);
    // SAFETY: dedicated memory of exactly the image's size, offset 0.
    unsafe { device.bind_image_memory(image, memory, 0) }.vk("vkBindImageMemory")?;
    let (image, memories) = building.finish();
    Ok(ImportedImage(Arc::new(Inner {
        engine: engine.clone(),
        path: ImportPath::OpaqueFd,
        fourcc: share.fourcc,
        layout: Layout::Implicit,
        entry,
        width: share.width,
        height: share.height,
        image,
        backing: Backing::Aliased { memories, disjoint: false },
        image_use: share.image_use,
        checked: Vec::new(),
        options: ImportOptions::default(),
        tracked: Tracked::new(false),
    })))
}