//! A dmabridge image (imported or exported) as a `wgpu::Texture`: wgpu-hal's
//! `texture_from_raw`, then `create_texture_from_hal`, with the image kept alive until wgpu
//! is done with the texture.

use dmabridge::ash::vk;
use wgpu_hal::api::Vulkan;

use crate::device::SharedDevice;

/// What wgpu is told about a dmabridge image.
pub(crate) struct Wrap<'a> {
    pub label: &'static str,
    pub format: wgpu::TextureFormat,
    pub extent: (u32, u32),
    /// The one state wgpu keeps the texture in: every hand-over leaves the image in its
    /// layout before wgpu's work runs, and takes it from there after.
    pub state: wgpu::TextureUses,
    pub usage: wgpu::TextureUsages,
    /// The formats wgpu may view it in besides its own (they must be in the image's
    /// view-format list: VUID-VkImageViewCreateInfo-pNext-01585).
    pub view_formats: &'a [wgpu::TextureFormat],
}

impl SharedDevice {
    /// `image` as a wgpu texture; `None` where the wgpu device is not Vulkan.
    ///
    /// # Safety
    /// - `image` was made on this device (the engine shares it): 2D, one level, one layer,
    ///   one sample, in `wrap.format`'s Vulkan format (wgpu_format's table matches
    ///   dmabridge's), with the usage `wrap.usage` and `wrap.state` need and a view-format
    ///   list holding `wrap.view_formats`;
    /// - `keep`, until it is called (when wgpu-hal drops the texture), keeps the image and
    ///   its memory alive;
    /// - every use of the texture in wgpu runs between hand-overs that leave the image in
    ///   `wrap.state`'s layout.
    pub(crate) unsafe fn wrap_image(&self, image: vk::Image, wrap: &Wrap<'_>, keep: wgpu_hal::DropCallback) -> Option<wgpu::Texture> {
        let size = wgpu::Extent3d { width: wrap.extent.0, height: wrap.extent.1, depth_or_array_layers: 1 };
        let hal_desc = wgpu_hal::TextureDescriptor {
            label: Some(wrap.label),
            size,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wrap.format,
            usage: wrap.state,
            memory_flags: wgpu_hal::MemoryFlags::empty(),
            view_formats: wrap.view_formats.to_vec(),
        };
        let hal_texture = {
            // SAFETY: the guard borrows the device, which outlives it.
            let hal_device = unsafe { self.device.as_hal::<Vulkan>() }?;
            // SAFETY: the caller's first two promises are texture_from_raw's contract: the
            // image matches `hal_desc`, and `keep` keeps it and its memory until wgpu-hal is done.
            unsafe { hal_device.texture_from_raw(image, &hal_desc, Some(keep), wgpu_hal::vulkan::TextureMemory::External) }
        };
        let desc = wgpu::TextureDescriptor {
            label: Some(wrap.label),
            size,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wrap.format,
            usage: wrap.usage,
            view_formats: wrap.view_formats,
        };
        // SAFETY: the hal texture was made on this device, respecting `desc`; wgpu is told it
        // is in `wrap.state`, where the caller's hand-overs leave it before wgpu's work runs.
        Some(unsafe { self.device.create_texture_from_hal::<Vulkan>(hal_texture, &desc, wrap.state) })
    }
}
