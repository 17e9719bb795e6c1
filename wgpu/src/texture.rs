//! A described dma-buf as a `wgpu::Texture`, through dmabridge's one import path, and each
//! frame's hand-over around wgpu's work: acquire, wgpu's passes, release.

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::DmaBuf;
use dmabridge::interop::Fourcc;
use dmabridge::{ImageAccess, ImageUse, ImportError, ImportOptions, ImportPath, ImportedImage, SubmitOptions};

use crate::device::SharedDevice;
use crate::handover::{FrameSubmission, HandOverError};
use crate::wrap::Wrap;

/// The formats a dma-buf may come into wgpu in: each fourcc whose memory wgpu reads as it
/// is (no swizzle: wgpu has none, so `XR24` and the other alpha-ignored or chroma-swapped
/// fourccs are refused), with the wgpu feature the format needs.
pub const WGPU_FORMATS: &[(Fourcc, wgpu::TextureFormat, wgpu::Features)] = &[
    (Fourcc::ARGB8888, wgpu::TextureFormat::Bgra8Unorm, wgpu::Features::empty()),
    (Fourcc::ABGR8888, wgpu::TextureFormat::Rgba8Unorm, wgpu::Features::empty()),
    (Fourcc::ABGR2101010, wgpu::TextureFormat::Rgb10a2Unorm, wgpu::Features::empty()),
    (Fourcc::ABGR16161616F, wgpu::TextureFormat::Rgba16Float, wgpu::Features::empty()),
    (Fourcc::R8, wgpu::TextureFormat::R8Unorm, wgpu::Features::empty()),
    (Fourcc::GR88, wgpu::TextureFormat::Rg8Unorm, wgpu::Features::empty()),
    (Fourcc::R16, wgpu::TextureFormat::R16Unorm, wgpu::Features::TEXTURE_FORMAT_16BIT_NORM),
    (Fourcc::NV12, wgpu::TextureFormat::NV12, wgpu::Features::TEXTURE_FORMAT_NV12),
    (Fourcc::P010, wgpu::TextureFormat::P010, wgpu::Features::TEXTURE_FORMAT_P010),
];

/// The wgpu format of `fourcc` and the feature it needs.
pub fn wgpu_format(fourcc: Fourcc) -> Option<(wgpu::TextureFormat, wgpu::Features)> {
    WGPU_FORMATS.iter().find(|(f, _, _)| *f == fourcc).map(|(_, t, feat)| (*t, *feat))
}

/// How an imported frame is used by wgpu's shaders: sampled (or loaded) in a vertex,
/// fragment or compute shader. wgpu's tracker is told the texture stays in that state
/// (`TextureUses::RESOURCE`), so wgpu records no transition of its own.
pub const SAMPLED_BY_WGPU: ImageAccess = ImageAccess {
    layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
    stages: vk::PipelineStageFlags::from_raw(
        vk::PipelineStageFlags::VERTEX_SHADER.as_raw() | vk::PipelineStageFlags::FRAGMENT_SHADER.as_raw() | vk::PipelineStageFlags::COMPUTE_SHADER.as_raw(),
    ),
    access: vk::AccessFlags::SHADER_READ,
};

/// Why a dma-buf did not become a wgpu texture.
#[derive(Debug, thiserror::Error)]
pub enum ImportTextureError {
    /// wgpu has no format that reads this fourcc's memory as it is.
    #[error("wgpu has no format for {0} (only {list})", list = WGPU_FORMATS.iter().map(|f| f.0.to_string()).collect::<Vec<_>>().join(", "))]
    NoWgpuFormat(Fourcc),
    /// The wgpu device was opened without the feature the format needs.
    #[error("{fourcc} is wgpu's {format:?}, which needs the device feature {feature:?}")]
    MissingFeature { fourcc: Fourcc, format: wgpu::TextureFormat, feature: wgpu::Features },
    /// dmabridge's import refused it (the layout, the fds, the device).
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The device behind the wgpu device is not Vulkan.
    #[error("the wgpu device is not on the Vulkan backend")]
    NotVulkan,
}

/// A dma-buf imported by dmabridge and wrapped as a `wgpu::Texture` (sampled use). The
/// texture keeps the import alive: its image and memory are destroyed once wgpu has
/// dropped the texture and the GPU is done with both.
#[derive(Debug, Clone)]
pub struct ImportedTexture {
    texture: wgpu::Texture,
    image: ImportedImage,
}

impl ImportedTexture {
    pub fn texture(&self) -> &wgpu::Texture {
        &self.texture
    }

    /// dmabridge's side: the path it took, the image, its hand-over.
    pub fn image(&self) -> &ImportedImage {
        &self.image
    }

    /// [`ImportedImage::path`]: zero-copy or a copy into an image of dmabridge's own.
    pub fn path(&self) -> ImportPath {
        self.image.path()
    }
}

/// Why a frame's hand-over around wgpu's work failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The acquisition (the copy paths read or map the files now) failed; nothing was submitted.
    #[error("acquiring the frame: {0}")]
    Acquire(ImportError),
    /// The release failed; wgpu's work was submitted.
    #[error("releasing the frame after wgpu's work: {0}")]
    Release(ImportError),
}

impl SharedDevice {
    /// [`SharedDevice::import_with`] with dmabridge's default options.
    pub fn import(&self, buf: &DmaBuf) -> Result<ImportedTexture, ImportTextureError> {
        self.import_with(buf, ImportOptions::default())
    }

    /// Imports `buf` through dmabridge's one import path ([`dmabridge::Engine::import_dmabuf_with`]:
    /// its layout and fds checked, zero-copy where the device imports the format and
    /// modifier, else a copy into an image of dmabridge's own on every acquisition) for
    /// sampling, and wraps the image as a `wgpu::Texture` (`TEXTURE_BINDING`). The
    /// descriptor's fds are only borrowed.
    ///
    /// Use the texture only inside [`SharedDevice::submit_frame`], which acquires it before
    /// wgpu's work and releases it after, and only for sampling or loading in shaders.
    pub fn import_with(&self, buf: &DmaBuf, options: ImportOptions) -> Result<ImportedTexture, ImportTextureError> {
        let fourcc = buf.fourcc();
        let (format, feature) = wgpu_format(fourcc).ok_or(ImportTextureError::NoWgpuFormat(fourcc))?;
        if !self.device.features().contains(feature) {
            return Err(ImportTextureError::MissingFeature { fourcc, format, feature });
        }
        // wgpu views a multi-planar texture's planes in their own formats (R8, RG8), which
        // Vulkan allows only on a MUTABLE_FORMAT image (VUID-VkImageViewCreateInfo-image-01762).
        let mut image_use = ImageUse::new(vk::ImageUsageFlags::SAMPLED);
        if format.is_multi_planar_format() {
            image_use = image_use.with_create(vk::ImageCreateFlags::MUTABLE_FORMAT);
        }
        let image = self.engine.import_dmabuf_with(buf, image_use, options)?;
        let keep = image.clone();
        let wrap = Wrap {
            label: "dmabridge import",
            format,
            extent: image.extent(),
            state: wgpu::TextureUses::RESOURCE,
            usage: wgpu::TextureUsages::TEXTURE_BINDING,
            view_formats: &[],
        };
        // SAFETY: the image was made on this device (the engine shares it) for SAMPLED in
        // `format`'s Vulkan format, one level, one layer (a multi-planar one MUTABLE_FORMAT,
        // listing its planes' formats, which wgpu's plane views use); `keep` is the import
        // itself; submit_frame's acquisitions leave it in SHADER_READ_ONLY_OPTIMAL (RESOURCE).
        let texture = unsafe { self.wrap_image(image.image(), &wrap, Box::new(move || drop(keep))) }.ok_or(ImportTextureError::NotVulkan)?;
        Ok(ImportedTexture { texture, image })
    }

    /// Submits wgpu's `commands`, which use `frames`, between dmabridge's acquisition of
    /// the frames (after `options`: the producer's sync_files, the engine's points) and
    /// their release back to the producer, all on the shared queue:
    /// 1. dmabridge acquires every frame ([`ImportedImage::record_acquire`] for
    ///    [`SAMPLED_BY_WGPU`]: the ownership transfer from the producer, or the copy);
    /// 2. wgpu's submission waits for that on the GPU and signals a point of its own;
    /// 3. dmabridge releases the frames after that point ([`ImportedImage::record_release`]).
    ///
    /// Nothing waits on the CPU. With [`SubmitOptions::export_sync_file`], the release
    /// exports a sync_file ([`FrameSubmission::take_sync_file`]).
    pub fn submit_frame<I: IntoIterator<Item = wgpu::CommandBuffer>>(
        &self,
        frames: &[&ImportedTexture],
        commands: I,
        options: SubmitOptions,
    ) -> Result<FrameSubmission, FrameError> {
        self.around_wgpu(
            options,
            SAMPLED_BY_WGPU.stages,
            |cmd, until| {
                for f in frames {
                    // SAFETY: the engine's own command buffer, recording, submitted on its
                    // queue signalling `until`; the producer's fences are the submission's waits.
                    unsafe { f.image.record_acquire(cmd, SAMPLED_BY_WGPU, until) }?;
                }
                Ok::<(), ImportError>(())
            },
            commands,
            |cmd, until| {
                for f in frames {
                    // SAFETY: as above; the submission waits for wgpu's, the frames' last use.
                    unsafe { f.image.record_release(cmd, SAMPLED_BY_WGPU, until) };
                }
                Ok(())
            },
        )
        .map_err(|e| match e {
            HandOverError::Acquire(e) => FrameError::Acquire(e),
            HandOverError::Release(e) => FrameError::Release(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmabridge::device::vk_format::{to_vk, Mapping};

    #[test]
    fn every_wgpu_format_reads_its_fourccs_memory_as_it_is() {
        for (i, (fourcc, format, _)) in WGPU_FORMATS.iter().enumerate() {
            assert!(WGPU_FORMATS[..i].iter().all(|(f, _, _)| f != fourcc), "{fourcc} listed twice");
            let entry = to_vk(*fourcc).unwrap_or_else(|| panic!("{fourcc} has no Vulkan format in dmabridge"));
            assert_eq!(entry.mapping, Mapping::Direct, "{fourcc}: wgpu has no swizzle");
            let planes = format.planes().unwrap_or(1);
            assert_eq!(planes, u32::from(entry.vk_planes), "{fourcc} as {format:?}");
        }
        for refused in [Fourcc::XRGB8888, Fourcc::NV21, Fourcc::YUV420] {
            assert!(wgpu_format(refused).is_none(), "{refused} needs a swizzle or a format wgpu lacks");
        }
    }
}
