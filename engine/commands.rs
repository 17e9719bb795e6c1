//! One-shot command submission and memory-type choice: the plumbing every transfer uses.

use ash::vk;

use crate::Engine;

/// Why a one-shot submission failed.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {result}")]
pub struct SubmitError {
    pub call: &'static str,
    pub result: vk::Result,
}

fn err(call: &'static str) -> impl FnOnce(vk::Result) -> SubmitError {
    move |result| SubmitError { call, result }
}

/// Destroys the pool (and with it the command buffer) and the fence however we leave.
struct OneShot<'a> {
    device: &'a ash::Device,
    pool: vk::CommandPool,
    fence: vk::Fence,
}

impl Drop for OneShot<'_> {
    fn drop(&mut self) {
        // SAFETY: both were created from this device; the fence was waited on (or never
        // submitted) so no command buffer of the pool is pending
        // (VUID-vkDestroyCommandPool-commandPool-00041, VUID-vkDestroyFence-fence-01120).
        unsafe {
            if self.fence != vk::Fence::null() {
                self.device.destroy_fence(self.fence, None);
            }
            self.device.destroy_command_pool(self.pool, None);
        }
    }
}

impl Engine {
    /// Records commands with `record`, submits them and waits for them to finish.
    pub fn submit_and_wait(&self, record: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> Result<(), SubmitError> {
        let device = self.device();
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(self.queue_family())
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: valid device and create info.
        let pool = unsafe { device.create_command_pool(&pool_info, None) }.map_err(err("vkCreateCommandPool"))?;
        let mut guard = OneShot { device, pool, fence: vk::Fence::null() };
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device.
        let cmd = unsafe { device.allocate_command_buffers(&alloc) }.map_err(err("vkAllocateCommandBuffers"))?[0];
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a fresh command buffer in the initial state (VUID-vkBeginCommandBuffer-commandBuffer-00049).
        unsafe { device.begin_command_buffer(cmd, &begin) }.map_err(err("vkBeginCommandBuffer"))?;
        record(device, cmd);
        // SAFETY: recording (VUID-vkEndCommandBuffer-commandBuffer-00059).
        unsafe { device.end_command_buffer(cmd) }.map_err(err("vkEndCommandBuffer"))?;
        // SAFETY: valid device.
        guard.fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.map_err(err("vkCreateFence"))?;
        let cmds = [cmd];
        let submit = vk::SubmitInfo::default().command_buffers(&cmds);
        {
            let queue = self.queue();
            // SAFETY: the queue is externally synchronised by the engine's lock
            // (VUID-vkQueueSubmit-queue-parameter); the fence is unsignalled and unused.
            unsafe { device.queue_submit(*queue, &[submit], guard.fence) }.map_err(err("vkQueueSubmit"))?;
        }
        // SAFETY: the fence belongs to this device.
        unsafe { device.wait_for_fences(&[guard.fence], true, u64::MAX) }.map_err(err("vkWaitForFences"))?;
        Ok(())
    }

    /// The first memory type allowed by `type_bits` that has all of `required`.
    pub fn memory_type(&self, type_bits: u32, required: vk::MemoryPropertyFlags) -> Option<u32> {
        // SAFETY: query of this engine's physical device.
        let props = unsafe { self.instance().get_physical_device_memory_properties(self.physical_device()) };
        (0..props.memory_type_count).find(|&i| {
            type_bits & (1 << i) != 0 && props.memory_types[i as usize].property_flags.contains(required)
        })
    }
}

/// A single-level, single-layer, single-sample 2-D image of `format` for one queue family,
/// starting UNDEFINED: every image dmabridge makes. Callers chain what differs (pNext, flags).
pub(crate) fn image_2d(
    format: vk::Format,
    (width, height): (u32, u32),
    tiling: vk::ImageTiling,
    usage: vk::ImageUsageFlags,
) -> vk::ImageCreateInfo<'static> {
    vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(format)
        .extent(vk::Extent3D { width, height, depth: 1 })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(tiling)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

/// A barrier over all planes and the whole image.
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
        .subresource_range(vk::ImageSubresourceRange {
            aspect_mask: aspect,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        })
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
