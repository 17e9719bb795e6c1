//! Samplers for reading frames in shaders, with the YCbCr conversion multi-planar formats
//! need, and views of images that carry the same conversion.

use ash::vk;

use crate::error::{VkError, VkResultExt};
use crate::device::requirements::Capability;
use crate::device::submit::{Completion, Garbage, Uses};
use crate::Engine;

/// Why a sampler or a view could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// Multi-planar sampling needs the YCbCr conversion feature.
    #[error("this device lacks the {0} capability")]
    Unsupported(Capability),
}

/// What a YCbCr conversion produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YcbcrOutput {
    /// The planes reconstructed, unconverted (RGB_IDENTITY, full range): sampling returns
    /// Cr, Y, Cb as r, g, b, exactly (a shader does the colour maths, or checks values).
    Raw,
    /// BT.709, limited range, to R'G'B'.
    Bt709Limited,
}

/// A nearest-filtering, clamp-to-edge sampler (with a YCbCr conversion for multi-planar
/// formats). `Send` and `Sync`: immutable after creation. Dropped while in use, its
/// destruction waits for the GPU.
pub struct Sampler {
    engine: Engine,
    sampler: vk::Sampler,
    conversion: Option<vk::SamplerYcbcrConversion>,
    uses: Uses,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("sampler", &self.sampler).field("ycbcr", &self.conversion.is_some()).finish()
    }
}

impl Sampler {
    /// A sampler for images of `format`; `multi_planar` formats get a YCbCr conversion
    /// producing `output`.
    pub fn new(engine: &Engine, format: vk::Format, multi_planar: bool, output: YcbcrOutput) -> Result<Sampler, SamplerError> {
        let device = engine.device();
        let conversion = if multi_planar {
            if !engine.has_capability(Capability::YcbcrSampling) {
                return Err(SamplerError::Unsupported(Capability::YcbcrSampling));
            }
            let (model, range) = match output {
                YcbcrOutput::Raw => (vk::SamplerYcbcrModelConversion::RGB_IDENTITY, vk::SamplerYcbcrRange::ITU_FULL),
                YcbcrOutput::Bt709Limited => (vk::SamplerYcbcrModelConversion::YCBCR_709, vk::SamplerYcbcrRange::ITU_NARROW),
            };
            let info = vk::SamplerYcbcrConversionCreateInfo::default()
                .format(format)
                .ycbcr_model(model)
                .ycbcr_range(range)
                .chroma_filter(vk::Filter::NEAREST)
                // Cosited-even: every device supports it (MIDPOINT is optional; lavapipe lacks it).
                .x_chroma_offset(vk::ChromaLocation::COSITED_EVEN)
                .y_chroma_offset(vk::ChromaLocation::COSITED_EVEN);
            // SAFETY: samplerYcbcrConversion is enabled (checked above) and the format is a
            // YCbCr format (VUID-vkCreateSamplerYcbcrConversion-None-01648).
            Some(unsafe { device.create_sampler_ycbcr_conversion(&info, None) }.vk("vkCreateSamplerYcbcrConversion")?)
        } else {
            None
        };
        let mut conv_info = conversion.map(|c| vk::SamplerYcbcrConversionInfo::default().conversion(c));
        let mut info = vk::SamplerCreateInfo::default()
            .mag_filter(vk::Filter::NEAREST)
            .min_filter(vk::Filter::NEAREST)
            .mipmap_mode(vk::SamplerMipmapMode::NEAREST)
            .address_mode_u(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .address_mode_v(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .address_mode_w(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .unnormalized_coordinates(false);
        if let Some(c) = conv_info.as_mut() {
            info = info.push_next(c);
        }
        // SAFETY: a valid sampler description; with a conversion, filters match the
        // conversion's chroma filter and addressing is clamp-to-edge (VUID-VkSamplerCreateInfo-addressModeU-01646).
        match unsafe { device.create_sampler(&info, None) }.vk("vkCreateSampler") {
            Ok(sampler) => Ok(Sampler { engine: engine.clone(), sampler, conversion, uses: Uses::default() }),
            Err(e) => {
                if let Some(c) = conversion {
                    // SAFETY: an unused conversion of this device.
                    unsafe { device.destroy_sampler_ycbcr_conversion(c, None) };
                }
                Err(e.into())
            }
        }
    }

    pub fn sampler(&self) -> vk::Sampler {
        self.sampler
    }

    /// A 2-D view of `image` (all planes), with the YCbCr conversion when there is one.
    ///
    /// # Safety
    /// `image` is an image of this engine's device with SAMPLED usage and `format`, and
    /// outlives the view's uses.
    pub unsafe fn view(&self, image: vk::Image, format: vk::Format) -> Result<SampledView, SamplerError> {
        let mut conv_info = self.conversion.map(|c| vk::SamplerYcbcrConversionInfo::default().conversion(c));
        let mut info = super::image::colour_view_info(image, format);
        if let Some(c) = conv_info.as_mut() {
            info = info.push_next(c);
        }
        // SAFETY: the caller's contract; a YCbCr format's view chains the conversion
        // (VUID-VkImageViewCreateInfo-format-06415).
        let view = unsafe { self.engine.device().create_image_view(&info, None) }.vk("vkCreateImageView")?;
        Ok(SampledView { engine: self.engine.clone(), view, uses: Uses::default() })
    }

    /// Records that GPU work completing at `until` samples with this sampler.
    pub fn track(&self, until: Completion) {
        self.uses.add(until);
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        let mut garbage = vec![Garbage::Sampler(self.sampler)];
        if let Some(c) = self.conversion {
            garbage.push(Garbage::YcbcrConversion(c));
        }
        self.engine.shared().retire(self.uses.snapshot(), garbage);
    }
}

/// An image view made by [`Sampler::view`]. Dropped while in use, its destruction waits for the GPU.
pub struct SampledView {
    engine: Engine,
    view: vk::ImageView,
    uses: Uses,
}

impl std::fmt::Debug for SampledView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampledView").field("view", &self.view).finish()
    }
}

impl SampledView {
    pub fn view(&self) -> vk::ImageView {
        self.view
    }

    /// Records that GPU work completing at `until` reads through this view.
    pub fn track(&self, until: Completion) {
        self.uses.add(until);
    }
}

impl Drop for SampledView {
    fn drop(&mut self) {
        self.engine.shared().retire(self.uses.snapshot(), vec![Garbage::ImageView(self.view)]);
    }
}
