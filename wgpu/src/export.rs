//! A dma-buf that dmabridge allocates (from a negotiated modifier list) and wgpu renders
//! into, and each frame's hand-over to its consumer: acquire, wgpu's render passes, release.

use std::sync::Arc;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::DmaBuf;
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{ExportError, ExportRequest, ExportedImage, ImageAccess, ImageUse, SubmitError, SubmitOptions};

use crate::device::SharedDevice;
use crate::handover::{FrameSubmission, HandOverError};
use crate::texture::wgpu_format;
use crate::wrap::Wrap;

/// How an exported texture is used by wgpu: as a render pass's colour attachment. wgpu's
/// tracker is told the texture stays in that state (`TextureUses::COLOR_TARGET`), and the
/// texture has no other wgpu usage, so wgpu records no transition of its own: every layout
/// change is dmabridge's, in [`SharedDevice::submit_render`].
pub const RENDERED_BY_WGPU: ImageAccess = ImageAccess::COLOR_ATTACHMENT;

/// Why an exported wgpu texture could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExportTextureError {
    /// wgpu has no format that writes this fourcc's memory as it is.
    #[error("wgpu has no format for {0}")]
    NoWgpuFormat(Fourcc),
    /// wgpu renders into a multi-planar format only through views of single planes, which
    /// this texture does not offer (it is used whole, as a colour attachment).
    #[error("{fourcc} is wgpu's multi-planar {format:?}: only single-plane formats are exported for rendering")]
    MultiPlanar { fourcc: Fourcc, format: wgpu::TextureFormat },
    /// The wgpu device was opened without the feature the format needs.
    #[error("{fourcc} is wgpu's {format:?}, which needs the device feature {feature:?}")]
    MissingFeature { fourcc: Fourcc, format: wgpu::TextureFormat, feature: wgpu::Features },
    /// The request's use has no `COLOR_ATTACHMENT`: wgpu could not render into the image.
    #[error("the export's use {0} has no color-attachment: wgpu renders into the texture")]
    NotRenderable(ImageUse),
    /// dmabridge's export refused it (no acceptable modifier, no DMA_BUF export, the extent,
    /// a use wider than the negotiated one...).
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The device behind the wgpu device is not Vulkan.
    #[error("the wgpu device is not on the Vulkan backend")]
    NotVulkan,
}

/// An image dmabridge allocated and exported as a dma-buf, wrapped as a `wgpu::Texture` to
/// render into (`RENDER_ATTACHMENT` only). The texture keeps the export alive: its image and
/// memory are destroyed once wgpu has dropped the texture and the GPU is done with both.
/// The dma-buf's fds are separate references to the memory, valid after that too.
#[derive(Debug, Clone)]
pub struct ExportedTexture {
    texture: wgpu::Texture,
    image: Arc<ExportedImage>,
}

impl ExportedTexture {
    pub fn texture(&self) -> &wgpu::Texture {
        &self.texture
    }

    /// dmabridge's side: the image, its layout, its hand-over.
    pub fn image(&self) -> &ExportedImage {
        &self.image
    }

    /// What to hand to the consumer: fourcc, extent, the modifier, each plane's fd, offset
    /// and stride. The fds stay this texture's; send them (SCM_RIGHTS dups them) or
    /// `try_clone` the descriptor.
    pub fn dmabuf(&self) -> &DmaBuf {
        // Engine::export_image shares a dma-buf, always: only Engine::export_opaque makes
        // the other kind of share, and export_texture never calls it.
        self.image.dmabuf().expect("Engine::export_image exports a dma-buf")
    }

    /// The layout the consumer must use: the modifier the driver chose from the request's
    /// acceptable list, or implicit where only implicit was acceptable.
    pub fn layout(&self) -> Layout {
        self.image.layout()
    }

    /// The chosen modifier; `None` for an implicit layout.
    pub fn modifier(&self) -> Option<Modifier> {
        self.layout().modifier()
    }
}

/// Why a rendered frame's hand-over failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The acquisition could not be submitted (a failed or foreign wait in the options);
    /// nothing was submitted.
    #[error("acquiring the texture for wgpu's rendering: {0}")]
    Acquire(SubmitError),
    /// The release to the consumer could not be submitted; wgpu's work was.
    #[error("releasing the texture to its consumer after wgpu's rendering: {0}")]
    Release(SubmitError),
}

/// What the previous frame left in an exported texture, before wgpu renders the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Contents {
    /// Kept: the consumer's side hands the image back as it was (a render pass that loads
    /// them, `LoadOp::Load`, sees them).
    #[default]
    Keep,
    /// Discarded (a transition from `UNDEFINED`): for passes that clear or cover every
    /// pixel, so that the driver need not preserve them.
    Discard,
}

impl SharedDevice {
    /// Allocates an image for `req` through dmabridge ([`dmabridge::Engine::export_image`]:
    /// the driver chooses a modifier from `req.acceptable`, the layouts negotiation gave, and
    /// an image for a use wider than `req.negotiated` is refused), exports it as a dma-buf,
    /// and wraps the image as a `wgpu::Texture` that wgpu renders into
    /// (`RENDER_ATTACHMENT`; with `srgb_view` in the use, the sRGB format as a view format).
    ///
    /// `req.image_use` must have `COLOR_ATTACHMENT`; more usage (`TRANSFER_SRC` for
    /// dmabridge's own copies, `SAMPLED` for the consumer) is the image's but not wgpu's.
    ///
    /// Use the texture only inside [`SharedDevice::submit_render`], and only as a render
    /// pass's colour attachment or resolve target: wgpu is told it stays in `COLOR_TARGET`,
    /// and since `RENDER_ATTACHMENT` is its only usage, wgpu's own validation refuses a copy
    /// from it or a binding of it, which would move it to another layout behind dmabridge's
    /// back.
    pub fn export_texture(&self, req: &ExportRequest) -> Result<ExportedTexture, ExportTextureError> {
        let fourcc = req.fourcc;
        let (format, feature) = wgpu_format(fourcc).ok_or(ExportTextureError::NoWgpuFormat(fourcc))?;
        if format.is_multi_planar_format() {
            return Err(ExportTextureError::MultiPlanar { fourcc, format });
        }
        if !self.device.features().contains(feature) {
            return Err(ExportTextureError::MissingFeature { fourcc, format, feature });
        }
        if !req.image_use.usage.contains(vk::ImageUsageFlags::COLOR_ATTACHMENT) {
            return Err(ExportTextureError::NotRenderable(req.image_use));
        }
        let image = Arc::new(self.engine.export_image(req)?);
        // The view formats wgpu may ask for must be in the image's list (dmabridge chains the
        // sRGB format for `srgb_view`, with MUTABLE_FORMAT): VUID-VkImageViewCreateInfo-pNext-01585.
        let srgb = format.add_srgb_suffix();
        let view_formats: Vec<wgpu::TextureFormat> = if req.image_use.srgb_view && srgb != format { vec![srgb] } else { Vec::new() };
        let keep = Arc::clone(&image);
        let wrap = Wrap {
            label: "dmabridge export",
            format,
            extent: (req.width, req.height),
            state: wgpu::TextureUses::COLOR_TARGET,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
            view_formats: &view_formats,
        };
        // SAFETY: the image was made on this device (the engine shares it) with
        // COLOR_ATTACHMENT (checked above) in `format`'s Vulkan format, one level, one layer,
        // and the view formats its use lists; `keep` is the export itself; submit_render's
        // acquisitions leave it in COLOR_ATTACHMENT_OPTIMAL (COLOR_TARGET), and with
        // RENDER_ATTACHMENT alone wgpu never moves it to another state.
        let texture = unsafe { self.wrap_image(image.image(), &wrap, Box::new(move || drop(keep))) }.ok_or(ExportTextureError::NotVulkan)?;
        Ok(ExportedTexture { texture, image })
    }

    /// Submits wgpu's `commands`, which render into `target`, between dmabridge's
    /// acquisition of the image (after `options`' waits: the consumer's sync_files, the
    /// engine's points) and its release to the consumer, all on the shared queue:
    /// 1. dmabridge takes the image for rendering ([`ExportedImage::record_acquire`] for
    ///    [`RENDERED_BY_WGPU`]: from `UNDEFINED` the first time or with
    ///    [`Contents::Discard`], else the ownership transfer back from the consumer's side);
    /// 2. wgpu's submission waits for that on the GPU (at the colour attachment stage) and
    ///    signals a point of its own;
    /// 3. dmabridge releases the image to the consumer after that point
    ///    ([`ExportedImage::record_release`]: `GENERAL`, the foreign queue family).
    ///
    /// Nothing waits on the CPU. The frame is the consumer's once
    /// [`FrameSubmission::released`] completes (export a sync_file from it with
    /// `export_sync_file`, or wait); hand it back before the next `submit_render`, whose
    /// `options` carry the consumer's fence if it gives one.
    pub fn submit_render<I: IntoIterator<Item = wgpu::CommandBuffer>>(
        &self,
        target: &ExportedTexture,
        contents: Contents,
        commands: I,
        options: SubmitOptions,
    ) -> Result<FrameSubmission, RenderError> {
        let image = &target.image;
        self.around_wgpu(
            options,
            RENDERED_BY_WGPU.stages,
            |cmd, until| {
                // SAFETY: the engine's own command buffer, recording, submitted on its queue
                // signalling `until`; the consumer's fences are the submission's waits.
                unsafe { image.record_acquire(cmd, RENDERED_BY_WGPU, contents == Contents::Discard, until) };
                Ok::<(), SubmitError>(())
            },
            commands,
            |cmd, until| {
                // SAFETY: as above; the submission waits for wgpu's, the image's last use,
                // which left it in COLOR_ATTACHMENT_OPTIMAL (its only state in wgpu).
                unsafe { image.record_release(cmd, RENDERED_BY_WGPU, until) };
                Ok(())
            },
        )
        .map_err(|e| match e {
            HandOverError::Acquire(e) => RenderError::Acquire(e),
            HandOverError::Release(e) => RenderError::Release(e),
        })
    }
}
