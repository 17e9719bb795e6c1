//! The swapchain and what hangs off each of its images.

use ash::vk;

use super::PresentError;

use crate::error::VkResultExt;

/// One swapchain with a view, a framebuffer and a render-finished semaphore per image.
///
/// The semaphore is per image, not per frame: presentation waits on it, and an image's
/// semaphore is signalled again only after that image has been acquired again, which
/// implies its previous presentation (and so the wait) has completed.
pub(crate) struct Chain {
    pub swapchain: vk::SwapchainKHR,
    pub extent: vk::Extent2D,
    pub images: Vec<vk::Image>,
    pub views: Vec<vk::ImageView>,
    pub framebuffers: Vec<vk::Framebuffer>,
    pub render_finished: Vec<vk::Semaphore>,
}

/// What a swapchain is made from; fixed for the presenter's life except `extent`.
pub(crate) struct ChainParams<'a> {
    pub device: &'a ash::Device,
    pub swapchain_fn: &'a ash::khr::swapchain::Device,
    pub surface: vk::SurfaceKHR,
    pub format: vk::SurfaceFormatKHR,
    pub present_mode: vk::PresentModeKHR,
    pub render_pass: vk::RenderPass,
}

/// The image extent: the surface's own where it has one (X11: the window's size), else the
/// host's idea of the window size, clamped to what the surface allows.
pub(crate) fn choose_extent(caps: &vk::SurfaceCapabilitiesKHR, window: (u32, u32)) -> vk::Extent2D {
    if caps.current_extent.width != u32::MAX {
        return caps.current_extent;
    }
    vk::Extent2D {
        width: window.0.clamp(caps.min_image_extent.width, caps.max_image_extent.width.max(caps.min_image_extent.width)),
        height: window.1.clamp(caps.min_image_extent.height, caps.max_image_extent.height.max(caps.min_image_extent.height)),
    }
}

/// One image more than the minimum (so that MAILBOX has a spare), within the maximum.
pub(crate) fn choose_image_count(caps: &vk::SurfaceCapabilitiesKHR) -> u32 {
    let wanted = caps.min_image_count.saturating_add(1);
    if caps.max_image_count == 0 {
        wanted
    } else {
        wanted.min(caps.max_image_count)
    }
}

fn composite_alpha(caps: &vk::SurfaceCapabilitiesKHR) -> vk::CompositeAlphaFlagsKHR {
    [
        vk::CompositeAlphaFlagsKHR::OPAQUE,
        vk::CompositeAlphaFlagsKHR::INHERIT,
        vk::CompositeAlphaFlagsKHR::PRE_MULTIPLIED,
        vk::CompositeAlphaFlagsKHR::POST_MULTIPLIED,
    ]
    .into_iter()
    .find(|f| caps.supported_composite_alpha.contains(*f))
    .unwrap_or(vk::CompositeAlphaFlagsKHR::OPAQUE)
}

impl Chain {
    /// A swapchain of `extent` (non-zero) replacing `old` (which the caller destroys after).
    pub fn create(
        p: &ChainParams<'_>,
        caps: &vk::SurfaceCapabilitiesKHR,
        extent: vk::Extent2D,
        old: vk::SwapchainKHR,
    ) -> Result<Chain, PresentError> {
        let info = vk::SwapchainCreateInfoKHR::default()
            .surface(p.surface)
            .min_image_count(choose_image_count(caps))
            .image_format(p.format.format)
            .image_color_space(p.format.color_space)
            .image_extent(extent)
            .image_array_layers(1)
            .image_usage(vk::ImageUsageFlags::COLOR_ATTACHMENT)
            .image_sharing_mode(vk::SharingMode::EXCLUSIVE)
            .pre_transform(caps.current_transform)
            .composite_alpha(composite_alpha(caps))
            .present_mode(p.present_mode)
            .clipped(true)
            .old_swapchain(old);
        // SAFETY: format/colour space and present mode come from the surface's own lists
        // (VUID-VkSwapchainCreateInfoKHR-imageFormat-01273, -presentMode-01281); the extent
        // is non-zero and within the surface's limits (VUID-VkSwapchainCreateInfoKHR-imageExtent-01274);
        // the image count is within [min, max] (VUID-VkSwapchainCreateInfoKHR-minImageCount-01272);
        // COLOR_ATTACHMENT is always a supported usage; `old` is the surface's current
        // swapchain or null (VUID-VkSwapchainCreateInfoKHR-oldSwapchain-01933).
        let swapchain = unsafe { p.swapchain_fn.create_swapchain(&info, None) }.vk("vkCreateSwapchainKHR")?;
        let mut chain = Chain {
            swapchain,
            extent,
            images: Vec::new(),
            views: Vec::new(),
            framebuffers: Vec::new(),
            render_finished: Vec::new(),
        };
        if let Err(e) = chain.fill(p) {
            // SAFETY: nothing was submitted with the new swapchain yet.
            unsafe { chain.destroy(p.device, p.swapchain_fn) };
            return Err(e);
        }
        Ok(chain)
    }

    fn fill(&mut self, p: &ChainParams<'_>) -> Result<(), PresentError> {
        // SAFETY: a swapchain of this device.
        self.images = unsafe { p.swapchain_fn.get_swapchain_images(self.swapchain) }
            .vk("vkGetSwapchainImagesKHR")?;
        for &image in &self.images {
            let view_info = crate::resources::image::colour_view_info(image, p.format.format);
            // SAFETY: a swapchain image, viewed with the swapchain's own format and its one
            // layer (VUID-VkImageViewCreateInfo-image-01003).
            let view = unsafe { p.device.create_image_view(&view_info, None) }.vk("vkCreateImageView")?;
            self.views.push(view);
            let attachments = [view];
            let fb_info = vk::FramebufferCreateInfo::default()
                .render_pass(p.render_pass)
                .attachments(&attachments)
                .width(self.extent.width)
                .height(self.extent.height)
                .layers(1);
            // SAFETY: the view's format matches the render pass attachment and its extent is
            // the framebuffer's (VUID-VkFramebufferCreateInfo-pAttachments-00880, -flags-04533).
            let fb = unsafe { p.device.create_framebuffer(&fb_info, None) }.vk("vkCreateFramebuffer")?;
            self.framebuffers.push(fb);
            // SAFETY: plain semaphore creation.
            let sem = unsafe { p.device.create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }
                .vk("vkCreateSemaphore")?;
            self.render_finished.push(sem);
        }
        Ok(())
    }

    /// # Safety
    /// No submission or presentation that uses the chain may be pending (the presenter waits
    /// for its queue to go idle first).
    pub unsafe fn destroy(&mut self, device: &ash::Device, swapchain_fn: &ash::khr::swapchain::Device) {
        // SAFETY: forwarded from the caller (VUID-vkDestroyFramebuffer-framebuffer-00892,
        // VUID-vkDestroySemaphore-semaphore-05149, VUID-vkDestroySwapchainKHR-swapchain-01282:
        // no acquired image is outstanding because every acquired image was presented).
        unsafe {
            for fb in self.framebuffers.drain(..) {
                device.destroy_framebuffer(fb, None);
            }
            for v in self.views.drain(..) {
                device.destroy_image_view(v, None);
            }
            for s in self.render_finished.drain(..) {
                device.destroy_semaphore(s, None);
            }
            if self.swapchain != vk::SwapchainKHR::null() {
                swapchain_fn.destroy_swapchain(self.swapchain, None);
                self.swapchain = vk::SwapchainKHR::null();
            }
        }
        self.images.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extent_follows_the_surface_when_it_has_one() {
        let caps = vk::SurfaceCapabilitiesKHR {
            current_extent: vk::Extent2D { width: 640, height: 480 },
            ..Default::default()
        };
        assert_eq!(choose_extent(&caps, (1, 1)), vk::Extent2D { width: 640, height: 480 });
    }

    #[test]
    fn extent_is_clamped_window_size_otherwise() {
        let caps = vk::SurfaceCapabilitiesKHR {
            current_extent: vk::Extent2D { width: u32::MAX, height: u32::MAX },
            min_image_extent: vk::Extent2D { width: 1, height: 1 },
            max_image_extent: vk::Extent2D { width: 4096, height: 4096 },
            ..Default::default()
        };
        assert_eq!(choose_extent(&caps, (9000, 300)), vk::Extent2D { width: 4096, height: 300 });
    }

    #[test]
    fn image_count_is_min_plus_one_within_max() {
        let mut caps = vk::SurfaceCapabilitiesKHR { min_image_count: 2, max_image_count: 0, ..Default::default() };
        assert_eq!(choose_image_count(&caps), 3);
        caps.max_image_count = 2;
        assert_eq!(choose_image_count(&caps), 2);
    }
}
