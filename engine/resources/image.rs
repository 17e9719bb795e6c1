//! Images: how a use of an image is described ([`ImageAccess`]), the layout and ownership
//! state dmabridge tracks for the images it hands out, images of its own ([`DeviceImage`]),
//! and the barrier and create-info helpers every image operation shares.

use std::sync::{Mutex, PoisonError};

use ash::vk;
use gpu_allocator::vulkan::Allocation;
use gpu_allocator::MemoryLocation;

use crate::error::{VkError, VkResultExt};
use crate::device::memory::MemoryError;
use crate::device::submit::{Completion, Garbage, Uses};
use crate::device::usage::ImageUse;
use crate::Engine;

/// One use of an image by the host or by dmabridge: the layout it must be in, and the
/// pipeline stages and accesses of that use (what a barrier before it waits for, and what
/// a barrier after it makes available).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageAccess {
    pub layout: vk::ImageLayout,
    pub stages: vk::PipelineStageFlags,
    pub access: vk::AccessFlags,
}

impl ImageAccess {
    /// Sampled in a compute shader.
    pub const SAMPLED_COMPUTE: ImageAccess = ImageAccess {
        layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
        stages: vk::PipelineStageFlags::COMPUTE_SHADER,
        access: vk::AccessFlags::SHADER_READ,
    };
    /// Sampled in a fragment shader.
    pub const SAMPLED_FRAGMENT: ImageAccess = ImageAccess {
        layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
        stages: vk::PipelineStageFlags::FRAGMENT_SHADER,
        access: vk::AccessFlags::SHADER_READ,
    };
    /// The source of a copy.
    pub const TRANSFER_SRC: ImageAccess = ImageAccess {
        layout: vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
        stages: vk::PipelineStageFlags::TRANSFER,
        access: vk::AccessFlags::TRANSFER_READ,
    };
    /// The destination of a copy or clear.
    pub const TRANSFER_DST: ImageAccess = ImageAccess {
        layout: vk::ImageLayout::TRANSFER_DST_OPTIMAL,
        stages: vk::PipelineStageFlags::TRANSFER,
        access: vk::AccessFlags::TRANSFER_WRITE,
    };
    /// Rendered to.
    pub const COLOR_ATTACHMENT: ImageAccess = ImageAccess {
        layout: vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
        stages: vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT,
        access: vk::AccessFlags::from_raw(
            vk::AccessFlags::COLOR_ATTACHMENT_READ.as_raw() | vk::AccessFlags::COLOR_ATTACHMENT_WRITE.as_raw(),
        ),
    };
    /// Read and written as a storage image in a compute shader.
    pub const STORAGE_COMPUTE: ImageAccess = ImageAccess {
        layout: vk::ImageLayout::GENERAL,
        stages: vk::PipelineStageFlags::COMPUTE_SHADER,
        access: vk::AccessFlags::from_raw(vk::AccessFlags::SHADER_READ.as_raw() | vk::AccessFlags::SHADER_WRITE.as_raw()),
    };
}

/// Where an image shared with another process or API stands, as dmabridge recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageState {
    /// The layout after the last recorded command.
    pub layout: vk::ImageLayout,
    /// Whether this queue family owns the memory (acquired and not yet released).
    pub owned: bool,
}

/// An image's tracked state and uses.
#[derive(Debug)]
pub(crate) struct Tracked {
    state: Mutex<ImageState>,
    pub(crate) uses: Uses,
}

impl Tracked {
    pub(crate) fn new(owned: bool) -> Tracked {
        Tracked { state: Mutex::new(ImageState { layout: vk::ImageLayout::UNDEFINED, owned }), uses: Uses::default() }
    }

    pub(crate) fn get(&self) -> ImageState {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set(&self, s: ImageState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = s;
    }
}

/// A single-level, single-layer, single-sample 2-D image of `format` for one queue family,
/// starting UNDEFINED, with the usage and create flags of `image_use`: every image dmabridge
/// makes. Callers chain what differs (pNext, more flags), the view-format list with
/// [`chain_view_formats`].
pub(crate) fn image_2d(
    format: vk::Format,
    (width, height): (u32, u32),
    tiling: vk::ImageTiling,
    image_use: &ImageUse,
) -> vk::ImageCreateInfo<'static> {
    vk::ImageCreateInfo::default()
        .flags(image_use.create_flags(format))
        .image_type(vk::ImageType::TYPE_2D)
        .format(format)
        .extent(vk::Extent3D { width, height, depth: 1 })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(tiling)
        .usage(image_use.usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

/// Chains `list` (made from [`ImageUse::view_formats`]) when it names any format: a
/// `MUTABLE_FORMAT` image lists the formats its views will have, which DRM tiling requires
/// (VUID-VkImageCreateInfo-tiling-02353) and which lets other tilings keep compression.
pub(crate) fn chain_view_formats<'a>(info: vk::ImageCreateInfo<'a>, list: &'a mut vk::ImageFormatListCreateInfo<'a>) -> vk::ImageCreateInfo<'a> {
    if list.view_format_count == 0 {
        info
    } else {
        info.push_next(list)
    }
}

/// A barrier over all planes and the whole image.
/// The one level and layer of `aspect` that every image dmabridge makes has.
pub(crate) const fn whole_image(aspect: vk::ImageAspectFlags) -> vk::ImageSubresourceRange {
    vk::ImageSubresourceRange { aspect_mask: aspect, base_mip_level: 0, level_count: 1, base_array_layer: 0, layer_count: 1 }
}

/// A 2D colour view of `image` as `format`: what sampling and presenting read through.
pub(crate) fn colour_view_info(image: vk::Image, format: vk::Format) -> vk::ImageViewCreateInfo<'static> {
    vk::ImageViewCreateInfo::default().image(image).view_type(vk::ImageViewType::TYPE_2D).format(format).subresource_range(whole_image(vk::ImageAspectFlags::COLOR))
}

pub(crate) fn image_barrier(
    image: vk::Image,
    aspect: vk::ImageAspectFlags,
    old: vk::ImageLayout,
    new: vk::ImageLayout,
    src_access: vk::AccessFlags,
    dst_access: vk::AccessFlags,
) -> vk::ImageMemoryBarrier<'static> {
    vk::ImageMemoryBarrier::default()
        .image(image)
        .old_layout(old)
        .new_layout(new)
        .src_access_mask(src_access)
        .dst_access_mask(dst_access)
        .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
        .subresource_range(whole_image(aspect))
}

/// A buffer memory barrier over the whole buffer (queue families `QUEUE_FAMILY_IGNORED`
/// for a barrier without an ownership transfer).
pub fn buffer_barrier(
    buffer: vk::Buffer,
    src: vk::AccessFlags,
    dst: vk::AccessFlags,
    src_family: u32,
    dst_family: u32,
) -> vk::BufferMemoryBarrier<'static> {
    vk::BufferMemoryBarrier::default()
        .buffer(buffer)
        .offset(0)
        .size(vk::WHOLE_SIZE)
        .src_access_mask(src)
        .dst_access_mask(dst)
        .src_queue_family_index(src_family)
        .dst_queue_family_index(dst_family)
}

/// Records one pipeline barrier.
///
/// # Safety
/// `cmd` is in the recording state and every handle in the barriers belongs to `device`.
pub(crate) unsafe fn record_barrier(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    (src, dst): (vk::PipelineStageFlags, vk::PipelineStageFlags),
    memory: &[vk::MemoryBarrier<'_>],
    buffers: &[vk::BufferMemoryBarrier<'_>],
    images: &[vk::ImageMemoryBarrier<'_>],
) {
    // SAFETY: the caller's contract; stage masks are never empty here (callers pass at least
    // TOP_OF_PIPE/BOTTOM_OF_PIPE; VUID-vkCmdPipelineBarrier-srcStageMask-03937).
    unsafe { device.cmd_pipeline_barrier(cmd, src, dst, vk::DependencyFlags::empty(), memory, buffers, images) };
}

/// The aspect of format plane `plane` for copies: `PLANE_i` for multi-planar formats,
/// `COLOR` otherwise.
pub(crate) fn plane_aspect(vk_planes: u8, plane: usize) -> vk::ImageAspectFlags {
    if vk_planes <= 1 {
        return vk::ImageAspectFlags::COLOR;
    }
    match plane {
        0 => vk::ImageAspectFlags::PLANE_0,
        1 => vk::ImageAspectFlags::PLANE_1,
        _ => vk::ImageAspectFlags::PLANE_2,
    }
}

/// The `MEMORY_PLANE_i_BIT_EXT` aspect of memory plane `i` of a DRM-modifier image.
pub(crate) fn memory_plane_aspect(i: usize) -> vk::ImageAspectFlags {
    match i {
        0 => vk::ImageAspectFlags::MEMORY_PLANE_0_EXT,
        1 => vk::ImageAspectFlags::MEMORY_PLANE_1_EXT,
        2 => vk::ImageAspectFlags::MEMORY_PLANE_2_EXT,
        _ => vk::ImageAspectFlags::MEMORY_PLANE_3_EXT,
    }
}

/// The aspect a barrier on the whole image names. A multi-planar image that is not
/// disjoint takes COLOR (VUID-VkImageMemoryBarrier-image-01671); dmabridge names COLOR for
/// every image it does not bind disjointly, and the planes for disjoint ones.
pub(crate) fn barrier_aspect(vk_planes: u8, disjoint: bool) -> vk::ImageAspectFlags {
    match (vk_planes, disjoint) {
        (0 | 1, _) | (_, false) => vk::ImageAspectFlags::COLOR,
        (2, true) => vk::ImageAspectFlags::PLANE_0 | vk::ImageAspectFlags::PLANE_1,
        (_, true) => vk::ImageAspectFlags::PLANE_0 | vk::ImageAspectFlags::PLANE_1 | vk::ImageAspectFlags::PLANE_2,
    }
}

/// Why an image of dmabridge's own could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Vk(#[from] VkError),
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error("{width}x{height} exceeds the device's largest 2-D image ({max})")]
    TooLarge { width: u32, height: u32, max: u32 },
}

/// A device-local, optimally tiled image of dmabridge's own (the copy path's target, a
/// consumer's render target, a benchmark's copy destination).
///
/// `Send` and `Sync`: its layout state is behind a lock. Dropped while in use, its
/// destruction waits for the GPU.
pub struct DeviceImage {
    engine: Engine,
    image: vk::Image,
    allocation: Option<Allocation>,
    format: vk::Format,
    extent: (u32, u32),
    image_use: ImageUse,
    pub(crate) tracked: Tracked,
}

impl std::fmt::Debug for DeviceImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceImage").field("image", &self.image).field("format", &self.format).field("extent", &self.extent).finish()
    }
}

impl DeviceImage {
    /// A `width` x `height` image of `format` for `image_use` (bare usage flags, or an
    /// [`ImageUse`] with create flags and view formats). The caller checks that the device
    /// supports the format for that use with optimal tiling.
    pub fn new(
        engine: &Engine,
        format: vk::Format,
        (width, height): (u32, u32),
        image_use: impl Into<ImageUse>,
    ) -> Result<DeviceImage, ImageError> {
        let image_use = image_use.into();
        let max = engine.info().max_image_dimension_2d;
        if width == 0 || height == 0 || width > max || height > max {
            return Err(ImageError::TooLarge { width, height, max });
        }
        let device = engine.device();
        let views = image_use.view_formats(format);
        let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&views);
        let info = chain_view_formats(image_2d(format, (width, height), vk::ImageTiling::OPTIMAL, &image_use), &mut list);
        // SAFETY: a 2-D optimal image with an extent within maxImageDimension2D
        // (VUID-VkImageCreateInfo-extent-02252); format support is the caller's contract.
        let image = unsafe { device.create_image(&info, None) }.vk("vkCreateImage")?;
        let mut out = DeviceImage {
            engine: engine.clone(),
            image,
            allocation: None,
            format,
            extent: (width, height),
            image_use,
            tracked: Tracked::new(true),
        };
        // SAFETY: an image of this device.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let allocation = engine.shared().memory.allocate("dmabridge image", reqs, MemoryLocation::GpuOnly, false)?;
        // SAFETY: an unbound image; the allocation is at least reqs.size at an offset aligned
        // as reqs asked (VUID-vkBindImageMemory-memoryOffset-01048).
        let bound = unsafe { device.bind_image_memory(image, allocation.memory(), allocation.offset()) }.vk("vkBindImageMemory");
        out.allocation = Some(allocation);
        bound?;
        Ok(out)
    }

    pub fn image(&self) -> vk::Image {
        self.image
    }

    pub fn format(&self) -> vk::Format {
        self.format
    }

    pub fn extent(&self) -> (u32, u32) {
        self.extent
    }

    pub fn usage(&self) -> vk::ImageUsageFlags {
        self.image_use.usage
    }

    pub fn image_use(&self) -> ImageUse {
        self.image_use
    }

    /// The layout after the last command dmabridge recorded on it.
    pub fn layout(&self) -> vk::ImageLayout {
        self.tracked.get().layout
    }

    /// As [`crate::GpuBuffer::track`].
    pub fn track(&self, until: Completion) {
        self.tracked.uses.add(until);
    }

    /// Records a transition of the whole image from its tracked layout to `to` (discarding
    /// its contents when `discard`), after any earlier use.
    ///
    /// # Safety
    /// `cmd` is a command buffer of this engine's device in the recording state, submitted
    /// on a queue of the engine's queue family, and its submission signals `until`.
    pub unsafe fn record_transition(&self, cmd: vk::CommandBuffer, to: ImageAccess, discard: bool, until: Completion) {
        let old = if discard { vk::ImageLayout::UNDEFINED } else { self.layout() };
        let barrier = image_barrier(
            self.image,
            vk::ImageAspectFlags::COLOR,
            old,
            to.layout,
            vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
            to.access,
        );
        // SAFETY: the caller's contract; the barrier names this image, created on this device.
        unsafe { record_barrier(self.engine.device(), cmd, (vk::PipelineStageFlags::ALL_COMMANDS, to.stages), &[], &[], &[barrier]) };
        self.tracked.set(ImageState { layout: to.layout, owned: true });
        self.track(until);
    }
}

impl Drop for DeviceImage {
    fn drop(&mut self) {
        let mut garbage = vec![Garbage::Image(self.image)];
        if let Some(a) = self.allocation.take() {
            garbage.push(Garbage::Allocation(a));
        }
        self.engine.shared().retire(self.tracked.uses.snapshot(), garbage);
    }
}
