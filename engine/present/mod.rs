//! Put imported frames on screen: a window's surface, a swapchain, and a pipeline that
//! samples the frame (RGB directly, YCbCr through `VkSamplerYcbcrConversion`) into an
//! aspect-correct, letterboxed rectangle.
//!
//! # Ownership
//! The [`Presenter`] owns only what it creates: the `VkSurfaceKHR`, the swapchain, its
//! render pass, pipelines, command pool and sync objects. The window belongs to the host
//! (it is given as `raw-window-handle` handles and must outlive the presenter), and so may
//! the device: the presenter works on any [`Engine`], owned or embedded
//! ([`Engine::from_host`]), submits through the engine (pooled command buffers, its
//! timeline), uses the queue only through its lock, and never waits for the whole device
//! (it waits for the queue it shares only when it replaces a swapchain).
//!
//! # Frames faster or slower than the display
//! - [`PresentModePolicy::LowLatency`] (the default) takes `MAILBOX` where the surface offers
//!   it: a producer faster than the display never waits for vertical blank, the newest
//!   frame replaces the one queued, and frames in between are dropped by the presentation
//!   engine. Without MAILBOX it falls back to `FIFO` (always available).
//! - [`PresentModePolicy::Vsync`] takes `FIFO`: every frame is shown, one per refresh, and a
//!   faster producer is paced by the display.
//! - Either way no call blocks forever on the display: acquiring an image waits at most
//!   [`PresenterOptions::acquire_timeout`], after which the frame is skipped
//!   ([`PresentOutcome::Skipped`] with [`SkipReason::AcquireTimeout`]) and the caller goes on.
//!   [`Presenter::present`] does not wait for the draw either: it records the frame's
//!   acquisition and release with the draw, and returns the draw's [`Completion`]; the
//!   frame (and its view) stay alive until that point. When every in-flight slot is still
//!   drawing, the frame is skipped ([`SkipReason::GpuBusy`]) rather than waited for.
//! - A producer slower than the display needs nothing: the last presented image stays on
//!   screen. Call [`Presenter::present`] again after [`Presenter::resize`] or an expose.
//!
//! # Resizing and out-of-date swapchains
//! The host calls [`Presenter::resize`] with the window's new size. The swapchain is replaced
//! (with `oldSwapchain`) on the next present, and also whenever acquire or present says
//! `VK_ERROR_OUT_OF_DATE_KHR` or `VK_SUBOPTIMAL_KHR`. A zero-sized (minimised) window skips
//! frames until it has a size again.
//!
//! # Colour and precision
//! - RGB frames are sampled as their Vulkan format and written to a UNORM swapchain format
//!   (`B8G8R8A8_UNORM` or `R8G8B8A8_UNORM` where offered). At 1:1 scale every texel is
//!   sampled at its centre, so 8-bit RGB reaches the screen **exactly**; scaled frames are
//!   filtered LINEAR where the format allows it. If the surface only offers an `_SRGB`
//!   format, the shader decodes before the hardware encodes, which costs at most ±1.
//! - YCbCr frames (NV12, NV21, P010, P016, YUV420, ...) go through the conversion's model
//!   ([`YcbcrMatrix`]: BT.709 by default, BT.601 or BT.2020) and range ([`YcbcrRange`]:
//!   limited by default). The conversion is the spec's, in 32-bit float; the only rounding
//!   is the final float-to-UNORM8 write. **Promise: each channel is within ±2 of the exact
//!   (real-number) conversion of the frame's Y'CbCr values, rounded to 8 bits, in areas of
//!   flat chroma**. On lavapipe the test's BT.709 limited-range NV12 bars measure exact
//!   (error 0 in every channel of the X server's screenshot; `tests/present.rs`). At edges
//!   where chroma changes, 4:2:0 chroma reconstruction (LINEAR, cosited-even horizontally and
//!   midpoint vertically, where the format allows; else NEAREST) blends the two sides.
//!   Out-of-gamut results are clamped to 0..255. 10-bit formats lose their low bits in the
//!   8-bit swapchain (same ±2 promise against the exact result rounded to 8 bits).

mod pipeline;
mod shaders;
mod swapchain;

use std::ffi::{c_char, CStr, CString};
use std::time::Duration;

use ash::vk;
use dmabridge_interop::{format_info, Fourcc, Layout, Modifier};
use raw_window_handle::{RawDisplayHandle, RawWindowHandle};

use crate::device::format_support::{widen, SupportQuery};
use crate::error::{VkError, VkResultExt};
use crate::resources::image::ImageAccess;
use crate::import::{ImportPath, ImportedImage};
use crate::device::requirements::Capability;
use crate::device::submit::{BinarySemaphores, Completion, Garbage, SubmitError, SubmitOptions};
use crate::device::vk_format::{self, Mapping};
use crate::{Engine, ImageUse};

use pipeline::{Key, Pipelines, YcbcrKey};
use swapchain::{Chain, ChainParams};

/// The Y'CbCr -> R'G'B' matrix of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum YcbcrMatrix {
    /// ITU-R BT.709 (HD video): Kr = 0.2126, Kb = 0.0722.
    #[default]
    Bt709,
    /// ITU-R BT.601 (SD video, JPEG): Kr = 0.299, Kb = 0.114.
    Bt601,
    /// ITU-R BT.2020 (UHD), non-constant luminance: Kr = 0.2627, Kb = 0.0593.
    Bt2020,
}

/// The quantisation range of a YCbCr frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum YcbcrRange {
    /// "Limited"/"TV"/"studio" range: Y' in 16..235, Cb/Cr in 16..240 (8-bit).
    #[default]
    Limited,
    /// Full range: 0..255.
    Full,
}

/// How to interpret one frame. RGB frames ignore both fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameOptions {
    pub matrix: YcbcrMatrix,
    pub range: YcbcrRange,
}

/// How to choose the swapchain's present mode; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PresentModePolicy {
    /// MAILBOX where offered, else FIFO.
    #[default]
    LowLatency,
    /// FIFO: every frame shown, paced by the display.
    Vsync,
}

/// What a presenter is set up with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PresenterOptions {
    pub present_mode: PresentModePolicy,
    /// The longest [`Presenter::present`] waits for the display to free an image.
    pub acquire_timeout: Duration,
    /// The letterbox colour (R, G, B in 0..1) around the fitted frame.
    pub letterbox: [f32; 3],
}

impl Default for PresenterOptions {
    fn default() -> Self {
        PresenterOptions {
            present_mode: PresentModePolicy::default(),
            acquire_timeout: Duration::from_millis(100),
            letterbox: [0.0, 0.0, 0.0],
        }
    }
}

/// Why a frame was not shown (not an error: call again later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The window has no area (minimised, or resized to zero).
    ZeroSizedWindow,
    /// The display held every image for longer than the acquire timeout.
    AcquireTimeout,
    /// The swapchain went out of date twice in a row (a resize in progress); it will be
    /// replaced on the next call.
    OutOfDate,
    /// Every in-flight draw slot is still drawing earlier frames: the GPU is behind.
    GpuBusy,
}

/// What [`Presenter::present`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresentOutcome {
    /// The frame's draw was submitted and queued for presentation; the GPU is done reading
    /// the frame at `drawn`. `suboptimal`: the swapchain no longer matches the surface
    /// exactly and is replaced on the next call.
    Presented { suboptimal: bool, drawn: Completion },
    Skipped(SkipReason),
}

/// Counters since the presenter was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PresenterStats {
    pub presented: u64,
    pub skipped: u64,
    /// Swapchains created (the first one included).
    pub swapchains: u64,
}

/// A rectangle in swapchain pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// The largest rectangle with `frame`'s aspect ratio that fits in `target`, centred (the
/// rest is letterbox). Sizes round to the nearest pixel and are at least 1; a frame of the
/// target's size maps 1:1.
pub fn fit_rect(frame: (u32, u32), target: (u32, u32)) -> Rect {
    let (fw, fh) = (u64::from(frame.0.max(1)), u64::from(frame.1.max(1)));
    let (tw, th) = (u64::from(target.0), u64::from(target.1));
    // Compare tw/fw with th/fh without floats: width-bound when tw*fh <= th*fw.
    let (w, h) = if tw * fh <= th * fw {
        (tw, ((tw * fh * 2 + fw) / (fw * 2)).min(th))
    } else {
        (((th * fw * 2 + fh) / (fh * 2)).min(tw), th)
    };
    let (w, h) = (w.max(1).min(tw.max(1)), h.max(1).min(th.max(1)));
    Rect {
        x: (tw.saturating_sub(w) / 2) as u32,
        y: (th.saturating_sub(h) / 2) as u32,
        width: w as u32,
        height: h as u32,
    }
}

/// Why presenting failed.
#[derive(Debug, thiserror::Error)]
pub enum PresentError {
    #[error("this window system is not supported by ash-window/Vulkan: {0}")]
    UnsupportedWindowSystem(vk::Result),
    #[error("the device was created without VK_KHR_swapchain (EngineOptions::present, or enable it on the host's device)")]
    NoSwapchainExtension,
    #[error("queue family {0} of the engine cannot present to this window's surface")]
    NoPresentSupport(u32),
    #[error("the surface offers no formats")]
    NoSurfaceFormat,
    #[error("the surface was lost (the window was destroyed?)")]
    SurfaceLost,
    #[error("{0} has no Vulkan format in dmabridge's table")]
    UnknownFourcc(Fourcc),
    #[error("{fourcc} ({format:?}) cannot be sampled on this device with its tiling")]
    NotSampleable { fourcc: Fourcc, format: vk::Format },
    #[error("the frame was imported without VK_IMAGE_USAGE_SAMPLED_BIT; import it with SAMPLED to present it")]
    FrameNotSampled,
    #[error("{0} needs VkSamplerYcbcrConversion, which the device does not have enabled ({1} capability)")]
    NoYcbcrConversion(Fourcc, Capability),
    #[error("the frame belongs to a different engine than the presenter")]
    ForeignFrame,
    #[error("cannot load the presenter's SPIR-V: {0}")]
    Shader(std::io::Error),
    #[error(transparent)]
    Caps(#[from] crate::device::format_support::FormatSupportError),
    #[error(transparent)]
    Vk(#[from] VkError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error("acquiring the frame failed: {0}")]
    Import(#[from] crate::import::ImportError),
    #[error("internal error: {0}")]
    Internal(&'static str),
}

/// The instance extensions a presenter for a window on `display` needs (the surface
/// extensions); pass them in [`crate::EngineOptions::instance_extensions`].
pub fn required_instance_extensions(display: RawDisplayHandle) -> Result<Vec<CString>, PresentError> {
    let names: &[*const c_char] =
        ash_window::enumerate_required_extensions(display).map_err(PresentError::UnsupportedWindowSystem)?;
    Ok(names
        .iter()
        .map(|&p| {
            // SAFETY: ash-window returns pointers to its static, NUL-terminated extension-name
            // constants (ash's `NAME` statics), valid for the program's life.
            unsafe { CStr::from_ptr(p) }.to_owned()
        })
        .collect())
}

/// An acquire semaphore and the point its last waiting submission completes at: it may be
/// handed to `vkAcquireNextImageKHR` again only after that (VUID-vkAcquireNextImageKHR-semaphore-01779).
struct AcquireSlot {
    semaphore: vk::Semaphore,
    last_wait: Option<Completion>,
}

/// Acquire semaphores the presenter keeps at most (frames in flight + the one acquiring).
const MAX_ACQUIRE_SLOTS: usize = 4;

/// Draws imported frames into a host-owned window. See the module docs. `Send`; not
/// `Sync` (presenting takes `&mut self`).
pub struct Presenter {
    engine: Engine,
    surface_fn: ash::khr::surface::Instance,
    swapchain_fn: ash::khr::swapchain::Device,
    surface: vk::SurfaceKHR,
    format: vk::SurfaceFormatKHR,
    present_mode: vk::PresentModeKHR,
    options: PresenterOptions,
    render_pass: vk::RenderPass,
    pipelines: Option<Pipelines>,
    acquire_slots: Vec<AcquireSlot>,
    /// The last draw submitted: swapchain replacement and teardown wait for it.
    last_draw: Option<Completion>,
    chain: Option<Chain>,
    window_size: (u32, u32),
    needs_recreate: bool,
    stats: PresenterStats,
}

impl Presenter {
    /// Creates a surface for the host's window and everything needed to draw into it. The
    /// swapchain is made on the first [`Presenter::present`].
    ///
    /// `size` is the window's inner size in pixels, as the host knows it.
    ///
    /// # Safety
    /// - `display` and `window` are valid handles of a live window, which outlives the
    ///   presenter (VUID-VkXlibSurfaceCreateInfoKHR-window-01405 and the like for other
    ///   window systems);
    /// - the engine's instance was created with [`required_instance_extensions`] for
    ///   this display.
    pub unsafe fn new(
        engine: &Engine,
        display: RawDisplayHandle,
        window: RawWindowHandle,
        size: (u32, u32),
        options: PresenterOptions,
    ) -> Result<Self, PresentError> {
        // A host device without VK_KHR_swapchain: vkGetDeviceProcAddr returns NULL for the
        // commands of an extension that is not enabled, so this check is reliable.
        // SAFETY: valid device and NUL-terminated name.
        let create_swapchain = unsafe {
            engine.instance().get_device_proc_addr(engine.device().handle(), c"vkCreateSwapchainKHR".as_ptr())
        };
        if create_swapchain.is_none() {
            return Err(PresentError::NoSwapchainExtension);
        }
        let surface_fn = ash::khr::surface::Instance::new(engine.entry(), engine.instance());
        let swapchain_fn = ash::khr::swapchain::Device::new(engine.instance(), engine.device());
        // SAFETY: the caller guarantees live handles of a window that outlives the
        // presenter, and an instance with the surface extensions for this display.
        let surface = unsafe { ash_window::create_surface(engine.entry(), engine.instance(), display, window, None) }
            .map_err(|result| match result {
                vk::Result::ERROR_EXTENSION_NOT_PRESENT => PresentError::UnsupportedWindowSystem(result),
                result => VkError { call: "vkCreate*SurfaceKHR", result }.into(),
            })?;
        let mut p = Presenter {
            engine: engine.clone(),
            surface_fn,
            swapchain_fn,
            surface,
            format: vk::SurfaceFormatKHR::default(),
            present_mode: vk::PresentModeKHR::FIFO,
            options,
            render_pass: vk::RenderPass::null(),
            pipelines: None,
            acquire_slots: Vec::new(),
            last_draw: None,
            chain: None,
            window_size: size,
            needs_recreate: true,
            stats: PresenterStats::default(),
        };
        // On error, dropping `p` destroys whatever was made so far.
        p.init()?;
        tracing::info!(
            format = ?p.format.format,
            present_mode = ?p.present_mode,
            embedded = engine.is_embedded(),
            "presenter ready"
        );
        Ok(p)
    }

    fn init(&mut self) -> Result<(), PresentError> {
        let engine = self.engine.clone();
        let device = engine.device();
        let pd = engine.physical_device();
        // SAFETY: the surface and physical device belong to this instance
        // (VUID-vkGetPhysicalDeviceSurfaceSupportKHR-queueFamilyIndex-01269: the family exists).
        let supported = unsafe { self.surface_fn.get_physical_device_surface_support(pd, engine.queue_family(), self.surface) }
            .vk("vkGetPhysicalDeviceSurfaceSupportKHR")?;
        if !supported {
            return Err(PresentError::NoPresentSupport(engine.queue_family()));
        }
        // SAFETY: as above.
        let formats = unsafe { self.surface_fn.get_physical_device_surface_formats(pd, self.surface) }
            .vk("vkGetPhysicalDeviceSurfaceFormatsKHR")?;
        self.format = choose_surface_format(&formats).ok_or(PresentError::NoSurfaceFormat)?;
        // SAFETY: as above.
        let modes = unsafe { self.surface_fn.get_physical_device_surface_present_modes(pd, self.surface) }
            .vk("vkGetPhysicalDeviceSurfacePresentModesKHR")?;
        self.present_mode = choose_present_mode(self.options.present_mode, &modes);
        self.render_pass = pipeline::create_render_pass(device, self.format.format)?;
        self.pipelines = Some(Pipelines::new(device)?);
        Ok(())
    }

    /// The host's window changed size: the swapchain is replaced on the next present.
    pub fn resize(&mut self, width: u32, height: u32) {
        if (width, height) != self.window_size {
            self.window_size = (width, height);
            self.needs_recreate = true;
        }
    }

    pub fn present_mode(&self) -> vk::PresentModeKHR {
        self.present_mode
    }

    pub fn surface_format(&self) -> vk::SurfaceFormatKHR {
        self.format
    }

    /// The current swapchain's size, if there is one.
    pub fn extent(&self) -> Option<(u32, u32)> {
        self.chain.as_ref().map(|c| (c.extent.width, c.extent.height))
    }

    pub fn stats(&self) -> PresenterStats {
        self.stats
    }

    /// Draws `frame` fitted into the window and queues it for presentation. Returns once
    /// the draw is submitted (never waiting on the display for longer than the acquire
    /// timeout, nor on the GPU): [`PresentOutcome::Presented`] says when the GPU is done
    /// reading the frame. The frame is acquired from its producer and released back within
    /// the draw's commands. It must come from this presenter's engine and have been
    /// imported with `VK_IMAGE_USAGE_SAMPLED_BIT`.
    pub fn present(&mut self, frame: &ImportedImage, opts: &FrameOptions) -> Result<PresentOutcome, PresentError> {
        if frame.engine().device().handle() != self.engine.device().handle() {
            return Err(PresentError::ForeignFrame);
        }
        if !frame.usage().contains(vk::ImageUsageFlags::SAMPLED) {
            return Err(PresentError::FrameNotSampled);
        }
        if self.window_size.0 == 0 || self.window_size.1 == 0 {
            return Ok(self.skip(SkipReason::ZeroSizedWindow));
        }
        let engine = self.engine.clone();
        let device = engine.device();
        let key = self.frame_key(frame, opts)?;
        let pipelines = self.pipelines.as_mut().ok_or(PresentError::Internal("presenter without pipelines"))?;
        let p = pipelines.get(device, self.render_pass, key)?;
        let (pipeline, layout, conversion) = (p.pipeline, p.layout, p.conversion);
        let Some((set_index, set)) = p.free_set(&engine) else {
            return Ok(self.skip(SkipReason::GpuBusy));
        };
        let Some(slot) = self.free_acquire_slot()? else {
            return Ok(self.skip(SkipReason::GpuBusy));
        };
        let acquired = self.acquire_slots[slot].semaphore;

        // Everything that can fail is done before an image is acquired, so that an acquired
        // image (and its signalled semaphore) is always consumed by a submission.
        let view = self.frame_view(frame, conversion)?;
        let image_info =
            [vk::DescriptorImageInfo { sampler: vk::Sampler::null(), image_view: view, image_layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL }];
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
            .image_info(&image_info);
        // SAFETY: the set is not in use (its last draw's point is reached: free_set); the view
        // carries the same YCbCr conversion as the immutable sampler
        // (VUID-VkWriteDescriptorSet-descriptorType-01948) and the binding's sampler is
        // immutable, so `sampler` is ignored (VUID-VkWriteDescriptorSet-descriptorType-02752).
        unsafe { device.update_descriptor_sets(&[write], &[]) };

        let mut retried = false;
        let acquire = loop {
            let made = match self.ensure_chain() {
                Ok(made) => made,
                Err(e) => {
                    engine.shared().retire(Vec::new(), vec![Garbage::ImageView(view)]);
                    return Err(e);
                }
            };
            if !made {
                engine.shared().retire(Vec::new(), vec![Garbage::ImageView(view)]);
                return Ok(self.skip(SkipReason::ZeroSizedWindow));
            }
            let chain = self.chain.as_ref().ok_or(PresentError::Internal("no swapchain after ensure_chain"))?;
            let timeout = u64::try_from(self.options.acquire_timeout.as_nanos()).unwrap_or(u64::MAX - 1);
            // SAFETY: the swapchain is current (not retired); the semaphore is unsignalled with
            // no pending operation (its last waiting submission is complete: free_acquire_slot)
            // (VUID-vkAcquireNextImageKHR-semaphore-01286, -01779, -swapchain-01675); the
            // timeout is finite, so this never blocks forever.
            let r = unsafe { self.swapchain_fn.acquire_next_image(chain.swapchain, timeout, acquired, vk::Fence::null()) };
            match r {
                Ok(r) => break Ok(r),
                Err(vk::Result::ERROR_OUT_OF_DATE_KHR) if !retried => {
                    self.needs_recreate = true;
                    retried = true;
                }
                Err(e) => break Err(e),
            }
        };
        let (index, acquire_suboptimal) = match acquire {
            Ok(r) => r,
            Err(result) => {
                engine.shared().retire(Vec::new(), vec![Garbage::ImageView(view)]);
                return match result {
                    vk::Result::ERROR_OUT_OF_DATE_KHR => {
                        self.needs_recreate = true;
                        Ok(self.skip(SkipReason::OutOfDate))
                    }
                    vk::Result::TIMEOUT | vk::Result::NOT_READY => Ok(self.skip(SkipReason::AcquireTimeout)),
                    vk::Result::ERROR_SURFACE_LOST_KHR => Err(PresentError::SurfaceLost),
                    result => Err(VkError { call: "vkAcquireNextImageKHR", result }.into()),
                };
            }
        };
        let chain = self.chain.as_ref().ok_or(PresentError::Internal("no swapchain after acquire"))?;
        let i = index as usize;
        let (Some(&framebuffer), Some(&render_finished)) = (chain.framebuffers.get(i), chain.render_finished.get(i)) else {
            return Err(PresentError::Internal("acquired image index out of range"));
        };
        let extent = chain.extent;
        let swapchain = chain.swapchain;
        let (fw, fh) = frame.extent();
        let rect = fit_rect((fw, fh), (extent.width, extent.height));
        let srgb_flag: u32 = u32::from(is_srgb(self.format.format));
        let [r, g, b] = self.options.letterbox;
        let clear = [vk::ClearValue { color: vk::ClearColorValue { float32: [r, g, b, 1.0] } }];
        let pass = vk::RenderPassBeginInfo::default()
            .render_pass(self.render_pass)
            .framebuffer(framebuffer)
            .render_area(vk::Rect2D { offset: vk::Offset2D { x: 0, y: 0 }, extent })
            .clear_values(&clear);
        let viewport =
            vk::Viewport { x: rect.x as f32, y: rect.y as f32, width: rect.width as f32, height: rect.height as f32, min_depth: 0.0, max_depth: 1.0 };
        let scissor =
            vk::Rect2D { offset: vk::Offset2D { x: rect.x as i32, y: rect.y as i32 }, extent: vk::Extent2D { width: rect.width, height: rect.height } };
        let binary = BinarySemaphores { waits: vec![(acquired, vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT)], signals: vec![render_finished] };
        let submitted = engine.submit_with_binaries(SubmitOptions::default(), binary, |cmd, until| {
            // SAFETY: the engine's command buffer, recording, submitted on its queue with
            // `until`; the frame is acquired for sampling in the fragment shader, the layout
            // the descriptor names (VUID-vkCmdDraw-None-09600).
            unsafe { frame.record_acquire(cmd, ImageAccess::SAMPLED_FRAGMENT, until) }?;
            // SAFETY: recording state; the framebuffer belongs to the acquired image and the
            // render pass; viewport and scissor lie inside the framebuffer (fit_rect stays
            // within the extent); the pipeline's layout matches the bound set and the 4-byte
            // push range (VUID-vkCmdPushConstants-offset-01795).
            unsafe {
                device.cmd_begin_render_pass(cmd, &pass, vk::SubpassContents::INLINE);
                device.cmd_set_viewport(cmd, 0, &[viewport]);
                device.cmd_set_scissor(cmd, 0, &[scissor]);
                device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::GRAPHICS, pipeline);
                device.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::GRAPHICS, layout, 0, &[set], &[]);
                device.cmd_push_constants(cmd, layout, vk::ShaderStageFlags::FRAGMENT, 0, bytemuck::bytes_of(&srgb_flag));
                device.cmd_draw(cmd, 3, 1, 0, 0);
                device.cmd_end_render_pass(cmd);
            }
            // SAFETY: as above; the frame goes back to its producer once drawn.
            unsafe { frame.record_release(cmd, ImageAccess::SAMPLED_FRAGMENT, until) };
            Ok::<(), PresentError>(())
        });
        let drawn = match submitted {
            Ok((_, s)) => s.completion(),
            Err(e) => {
                // The acquire semaphore's signal is pending with no wait: it can be neither
                // reused nor destroyed (VUID-vkDestroySemaphore-semaphore-05149), so it is leaked.
                tracing::warn!("a swapchain acquire semaphore is leaked after a failed submission");
                self.acquire_slots.remove(slot);
                engine.shared().retire(Vec::new(), vec![Garbage::ImageView(view)]);
                self.needs_recreate = true;
                return Err(e);
            }
        };
        engine.shared().retire(vec![drawn], vec![Garbage::ImageView(view)]);
        self.acquire_slots[slot].last_wait = Some(drawn);
        self.last_draw = Some(drawn);
        if let Some(p) = self.pipelines.as_mut().and_then(|ps| ps.get_existing_mut(&key)) {
            p.mark_used(set_index, drawn);
        }
        let swapchains = [swapchain];
        let indices = [index];
        let signals = [render_finished];
        let present_info = vk::PresentInfoKHR::default().wait_semaphores(&signals).swapchains(&swapchains).image_indices(&indices);
        let present_result = {
            let queue = engine.lock_queue();
            // SAFETY: the queue is externally synchronised by the engine's lock
            // (VUID-vkQueuePresentKHR-queue-parameter); the image was acquired from this
            // swapchain and not yet presented (VUID-VkPresentInfoKHR-pImageIndices-01430), its
            // layout is PRESENT_SRC_KHR at the end of the render pass, the render-finished
            // semaphore has a pending signal, and the queue supports presentation to the
            // surface (checked at creation) (VUID-vkQueuePresentKHR-pSwapchains-01292).
            unsafe { self.swapchain_fn.queue_present(queue.queue(), &present_info) }
        };
        let outcome = match present_result {
            Ok(present_suboptimal) => {
                let suboptimal = present_suboptimal || acquire_suboptimal;
                if suboptimal {
                    self.needs_recreate = true;
                }
                self.stats.presented += 1;
                PresentOutcome::Presented { suboptimal, drawn }
            }
            Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => {
                self.needs_recreate = true;
                self.skip(SkipReason::OutOfDate)
            }
            Err(vk::Result::ERROR_SURFACE_LOST_KHR) => return Err(PresentError::SurfaceLost),
            Err(result) => return Err(VkError { call: "vkQueuePresentKHR", result }.into()),
        };
        tracing::trace!(?outcome, image = index, ?rect, "present");
        Ok(outcome)
    }

    /// An acquire semaphore no pending submission waits on: its index in `acquire_slots`.
    /// `None` when all are busy and no more may be made.
    fn free_acquire_slot(&mut self) -> Result<Option<usize>, PresentError> {
        let engine = &self.engine;
        if let Some(i) = self.acquire_slots.iter().position(|s| s.last_wait.map_or(true, |c| engine.is_reached(&c))) {
            return Ok(Some(i));
        }
        if self.acquire_slots.len() >= MAX_ACQUIRE_SLOTS {
            return Ok(None);
        }
        // SAFETY: plain object creation on a valid device.
        let semaphore = unsafe { engine.device().create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }.vk("vkCreateSemaphore")?;
        self.acquire_slots.push(AcquireSlot { semaphore, last_wait: None });
        Ok(Some(self.acquire_slots.len() - 1))
    }

    fn skip(&mut self, reason: SkipReason) -> PresentOutcome {
        self.stats.skipped += 1;
        tracing::debug!(?reason, "frame skipped");
        PresentOutcome::Skipped(reason)
    }

    /// The pipeline identity for `frame`: its format, YCbCr conversion and filter, from the
    /// format features of the frame's tiling.
    fn frame_key(&self, frame: &ImportedImage, opts: &FrameOptions) -> Result<Key, PresentError> {
        let explicit = match (frame.path(), frame.layout()) {
            (ImportPath::Explicit, Layout::Explicit(m)) => Some(m),
            _ => None,
        };
        frame_key(&self.engine, frame.fourcc(), explicit, frame.image_use(), opts)
    }

    /// A view of the frame with the pipeline's conversion; the caller retires it.
    fn frame_view(&self, frame: &ImportedImage, conversion: vk::SamplerYcbcrConversion) -> Result<vk::ImageView, PresentError> {
        let device = self.engine.device();
        let mut conversion_info = vk::SamplerYcbcrConversionInfo::default().conversion(conversion);
        let mut info = crate::resources::image::colour_view_info(frame.image(), frame.vk_format());
        if conversion != vk::SamplerYcbcrConversion::null() {
            info = info.push_next(&mut conversion_info);
        }
        // SAFETY: the image was created with SAMPLED usage (checked in present) and this
        // format; a multi-planar format is viewed whole through its conversion with identity
        // swizzles (VUID-VkImageViewCreateInfo-format-06415, -pNext-01970).
        Ok(unsafe { device.create_image_view(&info, None) }.vk("vkCreateImageView")?)
    }

    /// Makes sure a swapchain matching the window exists. False: the window has no area.
    fn ensure_chain(&mut self) -> Result<bool, PresentError> {
        if self.chain.is_some() && !self.needs_recreate {
            return Ok(true);
        }
        let engine = self.engine.clone();
        let device = engine.device();
        // Nothing of ours may be in flight when the old swapchain, its semaphores and
        // framebuffers go: wait for the queue we share (not the whole device). Only on a
        // resize or an out-of-date swapchain, never per frame.
        self.wait_queue_idle()?;
        // SAFETY: surface and physical device of this instance.
        let caps = match unsafe { self.surface_fn.get_physical_device_surface_capabilities(engine.physical_device(), self.surface) } {
            Ok(c) => c,
            Err(vk::Result::ERROR_SURFACE_LOST_KHR) => return Err(PresentError::SurfaceLost),
            Err(result) => return Err(VkError { call: "vkGetPhysicalDeviceSurfaceCapabilitiesKHR", result }.into()),
        };
        let extent = swapchain::choose_extent(&caps, self.window_size);
        let mut old = self.chain.take();
        let params = ChainParams {
            device,
            swapchain_fn: &self.swapchain_fn,
            surface: self.surface,
            format: self.format,
            present_mode: self.present_mode,
            render_pass: self.render_pass,
        };
        let result = if extent.width == 0 || extent.height == 0 {
            Ok(None)
        } else {
            let old_handle = old.as_ref().map_or(vk::SwapchainKHR::null(), |c| c.swapchain);
            Chain::create(&params, &caps, extent, old_handle).map(Some)
        };
        if let Some(old) = old.as_mut() {
            // SAFETY: the queue is idle, so no submission or presentation uses the old chain;
            // it is retired by the creation above even if that failed.
            unsafe { old.destroy(device, &self.swapchain_fn) };
        }
        let chain = result?;
        let made = chain.is_some();
        if made {
            self.stats.swapchains += 1;
            tracing::debug!(width = extent.width, height = extent.height, "swapchain created");
        }
        self.chain = chain;
        self.needs_recreate = false;
        Ok(made)
    }

    fn wait_queue_idle(&self) -> Result<(), PresentError> {
        let queue = self.engine.lock_queue();
        // SAFETY: the queue is externally synchronised by the engine's lock
        // (VUID-vkQueueWaitIdle-queue-parameter).
        Ok(unsafe { self.engine.device().queue_wait_idle(queue.queue()) }.vk("vkQueueWaitIdle")?)
    }
}

impl Drop for Presenter {
    fn drop(&mut self) {
        let engine = self.engine.clone();
        let device = engine.device();
        if let Err(e) = self.wait_queue_idle() {
            tracing::warn!("presenter teardown: {e}");
        }
        // SAFETY: the queue is idle, so nothing the presenter made is in use
        // (VUID-vkDestroySemaphore-semaphore-05149, VUID-vkDestroyRenderPass-renderPass-00873);
        // the swapchain is destroyed before its surface (VUID-vkDestroySurfaceKHR-surface-01266).
        // Null handles (a half-made presenter) are ignored by the destroy calls.
        unsafe {
            if let Some(mut chain) = self.chain.take() {
                chain.destroy(device, &self.swapchain_fn);
            }
            if let Some(mut p) = self.pipelines.take() {
                p.destroy(device);
            }
            for slot in self.acquire_slots.drain(..) {
                device.destroy_semaphore(slot.semaphore, None);
            }
            device.destroy_render_pass(self.render_pass, None);
            self.surface_fn.destroy_surface(self.surface, None);
        }
    }
}

fn is_srgb(f: vk::Format) -> bool {
    matches!(f, vk::Format::B8G8R8A8_SRGB | vk::Format::R8G8B8A8_SRGB | vk::Format::A8B8G8R8_SRGB_PACK32)
}

/// UNORM 8-bit BGRA/RGBA in the sRGB colour space first (values reach the screen as
/// written), then any other non-sRGB-encoding format, then whatever is first.
fn choose_surface_format(formats: &[vk::SurfaceFormatKHR]) -> Option<vk::SurfaceFormatKHR> {
    let preferred = [vk::Format::B8G8R8A8_UNORM, vk::Format::R8G8B8A8_UNORM, vk::Format::A2B10G10R10_UNORM_PACK32];
    preferred
        .iter()
        .find_map(|p| {
            formats.iter().find(|f| f.format == *p && f.color_space == vk::ColorSpaceKHR::SRGB_NONLINEAR).copied()
        })
        .or_else(|| formats.iter().find(|f| !is_srgb(f.format) && f.format != vk::Format::UNDEFINED).copied())
        .or_else(|| formats.first().copied())
}

fn choose_present_mode(policy: PresentModePolicy, modes: &[vk::PresentModeKHR]) -> vk::PresentModeKHR {
    match policy {
        PresentModePolicy::LowLatency if modes.contains(&vk::PresentModeKHR::MAILBOX) => vk::PresentModeKHR::MAILBOX,
        // FIFO is always supported (VUID-VkSwapchainCreateInfoKHR-presentMode-01281 cannot fail for it).
        _ => vk::PresentModeKHR::FIFO,
    }
}

/// The pipeline identity for a `fourcc` frame imported for `image_use`, in the explicit
/// layout `explicit` (the import's explicit path) or else an image of the driver's own
/// tiling: its format, YCbCr conversion and filter, from that tiling's format features.
fn frame_key(engine: &Engine, fourcc: Fourcc, explicit: Option<Modifier>, image_use: ImageUse, opts: &FrameOptions) -> Result<Key, PresentError> {
    let entry = vk_format::to_vk(fourcc).ok_or(PresentError::UnknownFourcc(fourcc))?;
    let is_yuv = format_info(fourcc).ok_or(PresentError::UnknownFourcc(fourcc))?.is_yuv;
    let features = match explicit {
        Some(m) => engine.format_support(&SupportQuery::new(fourcc, image_use))?.get(m).map(|c| c.tiling_features).unwrap_or_default(),
        None => {
            // SAFETY: plain query of the engine's physical device.
            let props = unsafe {
                engine.instance().get_physical_device_format_properties(engine.physical_device(), entry.vk_format)
            };
            widen(props.optimal_tiling_features)
        }
    };
    if !features.contains(vk::FormatFeatureFlags2::SAMPLED_IMAGE) {
        return Err(PresentError::NotSampleable { fourcc, format: entry.vk_format });
    }
    let mut filter_linear = features.contains(vk::FormatFeatureFlags2::SAMPLED_IMAGE_FILTER_LINEAR);
    if explicit.is_some() && engine.drm_modifier_list2_is_empty() {
        // The driver's List2 of modifier features is empty (lavapipe 25.0), so anything
        // that reads it (the validation layer, VUID-vkCmdDraw-magFilter-04553) sees no
        // LINEAR filtering for DRM-tiled images. Sample those NEAREST: exact at 1:1,
        // blockier when scaled.
        filter_linear = false;
    }
    if !is_yuv {
        return Ok(Key { format: entry.vk_format, ycbcr: None, linear: filter_linear });
    }
    if !engine.has_capability(Capability::YcbcrSampling) {
        return Err(PresentError::NoYcbcrConversion(fourcc, Capability::YcbcrSampling));
    }
    let cosited = features.contains(vk::FormatFeatureFlags2::COSITED_CHROMA_SAMPLES);
    let midpoint = features.contains(vk::FormatFeatureFlags2::MIDPOINT_CHROMA_SAMPLES);
    if !cosited && !midpoint {
        return Err(PresentError::NotSampleable { fourcc, format: entry.vk_format });
    }
    // MPEG-2/H.264/HEVC 4:2:0: left-cosited horizontally, midway vertically.
    let x_offset = if cosited { vk::ChromaLocation::COSITED_EVEN } else { vk::ChromaLocation::MIDPOINT };
    let y_offset = if midpoint { vk::ChromaLocation::MIDPOINT } else { vk::ChromaLocation::COSITED_EVEN };
    let linear =
        filter_linear && features.contains(vk::FormatFeatureFlags2::SAMPLED_IMAGE_YCBCR_CONVERSION_LINEAR_FILTER);
    Ok(Key {
        format: entry.vk_format,
        ycbcr: Some(YcbcrKey {
            matrix: opts.matrix,
            range: opts.range,
            swap_chroma: entry.mapping == Mapping::ChromaSwapped && entry.vk_planes < 3,
            x_offset,
            y_offset,
        }),
        linear,
    })
}

/// One kind of frame a presenter draws: what its pipeline depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameKind {
    pub fourcc: Fourcc,
    /// An explicit layout (imported as it is, sampled with that layout's features), or
    /// [`Layout::Implicit`] for a frame in the driver's own tiling (the buffer-copy import).
    pub layout: Layout,
    /// The use the frame is imported for ([`ImportedImage::image_use`]).
    pub image_use: ImageUse,
    pub options: FrameOptions,
}

/// Compiles the presenter's render pass and one drawing pipeline per kind of frame in
/// `frames`, into `target` (a swapchain format), with no window: a frame the device cannot
/// sample, or a shader its compiler refuses, fails here instead of at the first
/// [`Presenter::present`]. Everything made is destroyed before it returns; nothing is
/// submitted.
pub fn compile_pipelines(engine: &Engine, target: vk::Format, frames: &[FrameKind]) -> Result<(), PresentError> {
    let device = engine.device();
    let render_pass = pipeline::create_render_pass(device, target)?;
    let made = Pipelines::new(device).and_then(|mut pipelines| {
        let built = frames.iter().try_for_each(|f| {
            let explicit = f.layout.modifier();
            let key = frame_key(engine, f.fourcc, explicit, f.image_use, &f.options)?;
            pipelines.get(device, render_pass, key).map(drop)
        });
        // SAFETY: nothing made here was submitted.
        unsafe { pipelines.destroy(device) };
        built
    });
    // SAFETY: the pipelines made for it are gone, and nothing was submitted.
    unsafe { device.destroy_render_pass(render_pass, None) };
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_is_one_to_one_for_the_same_size() {
        assert_eq!(fit_rect((320, 180), (320, 180)), Rect { x: 0, y: 0, width: 320, height: 180 });
    }

    #[test]
    fn fit_pillarboxes_a_wide_window() {
        // 16:9 frame in a 600x180 window: height-bound, centred horizontally.
        assert_eq!(fit_rect((320, 180), (600, 180)), Rect { x: 140, y: 0, width: 320, height: 180 });
    }

    #[test]
    fn fit_letterboxes_a_tall_window() {
        assert_eq!(fit_rect((320, 180), (320, 400)), Rect { x: 0, y: 110, width: 320, height: 180 });
        assert_eq!(fit_rect((320, 180), (160, 400)), Rect { x: 0, y: 155, width: 160, height: 90 });
    }

    #[test]
    fn fit_keeps_aspect_within_a_pixel_and_stays_inside() {
        for (fw, fh) in [(1, 1), (320, 180), (1920, 1080), (7, 3), (3, 7), (4096, 1)] {
            for (tw, th) in [(1, 1), (100, 100), (641, 479), (3, 1000), (1000, 3), (1280, 800)] {
                let r = fit_rect((fw, fh), (tw, th));
                assert!(r.x + r.width <= tw && r.y + r.height <= th, "{fw}x{fh} in {tw}x{th}: {r:?}");
                assert!(r.width >= 1 && r.height >= 1);
                // One side fills the target.
                assert!(r.width == tw || r.height == th, "{fw}x{fh} in {tw}x{th}: {r:?}");
                // Aspect within rounding: |w*fh - h*fw| <= max(fw, fh) (half a pixel each way).
                let err = (i64::from(r.width) * i64::from(fh) - i64::from(r.height) * i64::from(fw)).abs();
                assert!(err <= i64::from(fw.max(fh)), "{fw}x{fh} in {tw}x{th}: {r:?}");
            }
        }
    }

    #[test]
    fn fit_of_a_zero_target_is_a_pixel() {
        let r = fit_rect((320, 180), (0, 0));
        assert_eq!((r.width, r.height), (1, 1));
    }

    #[test]
    fn present_mode_policy() {
        use vk::PresentModeKHR as M;
        assert_eq!(choose_present_mode(PresentModePolicy::LowLatency, &[M::FIFO, M::MAILBOX]), M::MAILBOX);
        assert_eq!(choose_present_mode(PresentModePolicy::LowLatency, &[M::FIFO]), M::FIFO);
        assert_eq!(choose_present_mode(PresentModePolicy::Vsync, &[M::FIFO, M::MAILBOX]), M::FIFO);
    }

    #[test]
    fn surface_format_prefers_unorm() {
        let f = |format| vk::SurfaceFormatKHR { format, color_space: vk::ColorSpaceKHR::SRGB_NONLINEAR };
        let got = choose_surface_format(&[f(vk::Format::B8G8R8A8_SRGB), f(vk::Format::B8G8R8A8_UNORM)]);
        assert_eq!(got.map(|g| g.format), Some(vk::Format::B8G8R8A8_UNORM));
        let only_srgb = choose_surface_format(&[f(vk::Format::B8G8R8A8_SRGB)]);
        assert_eq!(only_srgb.map(|g| g.format), Some(vk::Format::B8G8R8A8_SRGB));
        assert_eq!(choose_surface_format(&[]), None);
    }
}
