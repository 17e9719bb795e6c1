//! What the device can do with each DRM format, per intended use.
//!
//! The kernel's rule (seed 001, "Negotiation"): query with the usage and create flags
//! "corresponding to the intended rendering use". A modifier that works for sampling may
//! not work for storage or export, so every [`CapsQuery`] is answered on its own and
//! cached per engine.
//!
//! With `VK_EXT_image_drm_format_modifier`, each modifier the driver lists is checked with
//! `vkGetPhysicalDeviceImageFormatProperties2` chained with the exact modifier and the
//! external handle type. Without it there are no explicit modifiers: the answer is the
//! implicit world, what LINEAR tiling can import or export ([`CapsSource::LinearTiling`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ash::vk;
use dmabridge_interop::{format_info, Fourcc, Modifier};

use crate::error::VkError;
use crate::requirements::DeviceExtension;
use crate::vk_format;
use crate::Engine;

/// The format features a usage needs from the tiling (a usage the features lack is not
/// supported even where the image-format query is lenient).
fn required_features(usage: vk::ImageUsageFlags) -> vk::FormatFeatureFlags {
    let pairs = [
        (vk::ImageUsageFlags::SAMPLED, vk::FormatFeatureFlags::SAMPLED_IMAGE),
        (vk::ImageUsageFlags::STORAGE, vk::FormatFeatureFlags::STORAGE_IMAGE),
        (vk::ImageUsageFlags::COLOR_ATTACHMENT, vk::FormatFeatureFlags::COLOR_ATTACHMENT),
        (vk::ImageUsageFlags::TRANSFER_SRC, vk::FormatFeatureFlags::TRANSFER_SRC),
        (vk::ImageUsageFlags::TRANSFER_DST, vk::FormatFeatureFlags::TRANSFER_DST),
        (vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT, vk::FormatFeatureFlags::DEPTH_STENCIL_ATTACHMENT),
    ];
    pairs.iter().filter(|(u, _)| usage.contains(*u)).fold(vk::FormatFeatureFlags::empty(), |acc, (_, f)| acc | *f)
}

/// One question: can `fourcc` be used this way, shared through `handle_type`?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapsQuery {
    pub fourcc: Fourcc,
    pub usage: vk::ImageUsageFlags,
    pub create: vk::ImageCreateFlags,
    pub handle_type: vk::ExternalMemoryHandleTypeFlags,
}

impl CapsQuery {
    /// `usage`, no create flags, shared as a dma-buf.
    pub fn new(fourcc: Fourcc, usage: vk::ImageUsageFlags) -> Self {
        CapsQuery {
            fourcc,
            usage,
            create: vk::ImageCreateFlags::empty(),
            handle_type: vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT,
        }
    }

    pub fn with_create(mut self, create: vk::ImageCreateFlags) -> Self {
        self.create = create;
        self
    }

    pub fn with_handle_type(mut self, handle_type: vk::ExternalMemoryHandleTypeFlags) -> Self {
        self.handle_type = handle_type;
        self
    }
}

/// Where an answer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapsSource {
    /// `VK_EXT_image_drm_format_modifier`: explicit modifiers, each checked.
    DrmModifier,
    /// No modifier extension: only LINEAR tiling, which shares buffers in the implicit
    /// world (the importer must assume a linear layout by convention). The entry is
    /// reported under the LINEAR modifier because that is the layout LINEAR tiling has.
    LinearTiling,
}

/// The limits `vkGetPhysicalDeviceImageFormatProperties2` reported for an accepted combination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    pub max_extent: vk::Extent3D,
    pub max_array_layers: u32,
    pub sample_counts: vk::SampleCountFlags,
}

/// The answer for one modifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModifierCaps {
    pub modifier: Modifier,
    /// Memory planes of an image with this modifier (`drmFormatModifierPlaneCount`), or
    /// the format's plane count under LINEAR tiling.
    pub plane_count: u32,
    /// What the tiling offers, whatever the usage.
    pub tiling_features: vk::FormatFeatureFlags,
    /// `None` when the image-format query refused the exact combination.
    pub limits: Option<ImageLimits>,
    /// The tiling features cover the usage.
    pub features_cover_usage: bool,
    pub importable: bool,
    pub exportable: bool,
    /// Only a dedicated allocation may import or export it.
    pub dedicated_only: bool,
}

impl ModifierCaps {
    /// The driver accepts this exact combination.
    pub fn supported(&self) -> bool {
        self.limits.is_some() && self.features_cover_usage
    }

    pub fn can_import(&self) -> bool {
        self.supported() && self.importable
    }

    pub fn can_export(&self) -> bool {
        self.supported() && self.exportable
    }
}

/// The answer to a [`CapsQuery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatCaps {
    pub query: CapsQuery,
    pub vk_format: vk::Format,
    pub source: CapsSource,
    /// Every modifier the driver lists for the format, supported or not, in its order.
    pub modifiers: Vec<ModifierCaps>,
}

impl FormatCaps {
    pub fn get(&self, m: Modifier) -> Option<&ModifierCaps> {
        self.modifiers.iter().find(|c| c.modifier == m)
    }

    /// The modifiers usable for importing with this query's usage.
    pub fn importable(&self) -> impl Iterator<Item = Modifier> + '_ {
        self.modifiers.iter().filter(|c| c.can_import()).map(|c| c.modifier)
    }

    /// The modifiers usable for exporting with this query's usage.
    pub fn exportable(&self) -> impl Iterator<Item = Modifier> + '_ {
        self.modifiers.iter().filter(|c| c.can_export()).map(|c| c.modifier)
    }
}

/// Why a capability query could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum CapsError {
    #[error("{0} has no Vulkan format in dmabridge's table")]
    UnknownFourcc(Fourcc),
    #[error(transparent)]
    Vk(#[from] VkError),
}

/// Answers already computed, per engine (so per device).
#[derive(Default)]
pub(crate) struct CapsCache(Mutex<HashMap<CapsQuery, Arc<FormatCaps>>>);

impl Engine {
    /// Answers `q`, from the cache when it was asked before.
    pub fn query_caps(&self, q: &CapsQuery) -> Result<Arc<FormatCaps>, CapsError> {
        if let Some(hit) = self.shared().caps_cache.0.lock().ok().and_then(|c| c.get(q).cloned()) {
            return Ok(hit);
        }
        let answer = Arc::new(self.compute_caps(q)?);
        if let Ok(mut cache) = self.shared().caps_cache.0.lock() {
            cache.insert(*q, answer.clone());
        }
        Ok(answer)
    }

    fn compute_caps(&self, q: &CapsQuery) -> Result<FormatCaps, CapsError> {
        let entry = vk_format::to_vk(q.fourcc).ok_or(CapsError::UnknownFourcc(q.fourcc))?;
        let vk_format = entry.vk_format;
        let (source, listed) = if self.has_modifiers() {
            (CapsSource::DrmModifier, self.listed_modifiers(vk_format))
        } else {
            let planes = format_info(q.fourcc).map_or(1, |i| i.plane_count() as u32);
            (CapsSource::LinearTiling, vec![(Modifier::LINEAR, planes, self.linear_features(vk_format))])
        };
        let mut modifiers = Vec::with_capacity(listed.len());
        for (modifier, plane_count, tiling_features) in listed {
            let tiling = match source {
                CapsSource::DrmModifier => Some(modifier),
                CapsSource::LinearTiling => None,
            };
            let answer = self.image_format_properties(vk_format, q, tiling)?;
            let (limits, external) = match answer {
                Some((l, e)) => (Some(l), e),
                None => (None, vk::ExternalMemoryFeatureFlags::empty()),
            };
            let required = required_features(q.usage);
            modifiers.push(ModifierCaps {
                modifier,
                plane_count,
                tiling_features,
                limits,
                features_cover_usage: tiling_features.contains(required),
                importable: external.contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE),
                exportable: external.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE),
                dedicated_only: external.contains(vk::ExternalMemoryFeatureFlags::DEDICATED_ONLY),
            });
        }
        tracing::debug!(fourcc = %q.fourcc, usage = ?q.usage, create = ?q.create, ?source, count = modifiers.len(), "capabilities");
        Ok(FormatCaps { query: *q, vk_format, source, modifiers })
    }

    /// The driver's modifier list for a format: (modifier, memory planes, tiling features).
    fn listed_modifiers(&self, format: vk::Format) -> Vec<(Modifier, u32, vk::FormatFeatureFlags)> {
        let instance = self.instance();
        let mut list = vk::DrmFormatModifierPropertiesListEXT::default();
        let mut props = vk::FormatProperties2::default().push_next(&mut list);
        // SAFETY: the modifier extension is enabled (caller checked), so the list struct is
        // a valid pNext of VkFormatProperties2 (VUID-VkFormatProperties2-pNext-pNext); with a
        // null array the call only writes the count.
        unsafe { instance.get_physical_device_format_properties2(self.physical_device(), format, &mut props) };
        let count = list.drm_format_modifier_count as usize;
        if count == 0 {
            return Vec::new();
        }
        let mut entries = vec![vk::DrmFormatModifierPropertiesEXT::default(); count];
        let mut list = vk::DrmFormatModifierPropertiesListEXT::default().drm_format_modifier_properties(&mut entries);
        let mut props = vk::FormatProperties2::default().push_next(&mut list);
        // SAFETY: as above; the array holds drmFormatModifierCount elements.
        unsafe { instance.get_physical_device_format_properties2(self.physical_device(), format, &mut props) };
        let written = (list.drm_format_modifier_count as usize).min(count);
        entries[..written]
            .iter()
            .map(|e| (Modifier::from_raw(e.drm_format_modifier), e.drm_format_modifier_plane_count, e.drm_format_modifier_tiling_features))
            .collect()
    }

    fn linear_features(&self, format: vk::Format) -> vk::FormatFeatureFlags {
        // SAFETY: core query on this engine's physical device.
        unsafe { self.instance().get_physical_device_format_properties(self.physical_device(), format) }
            .linear_tiling_features
    }

    /// Whether the driver accepts the exact combination, with `Some(modifier)` for DRM
    /// modifier tiling or `None` for LINEAR tiling. `Ok(None)` means "not supported".
    fn image_format_properties(
        &self,
        format: vk::Format,
        q: &CapsQuery,
        modifier: Option<Modifier>,
    ) -> Result<Option<(ImageLimits, vk::ExternalMemoryFeatureFlags)>, CapsError> {
        // Asking about a handle type from an extension the device did not enable is not
        // meaningful; such memory can be neither imported nor exported here.
        let handle_usable = q.handle_type != vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT
            || self.extensions().has(DeviceExtension::ExternalMemoryDmaBuf);
        let view_formats = [format];
        let mut format_list = vk::ImageFormatListCreateInfo::default().view_formats(&view_formats);
        let mut drm = vk::PhysicalDeviceImageDrmFormatModifierInfoEXT::default()
            .drm_format_modifier(modifier.map_or(0, Modifier::raw))
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let mut external = vk::PhysicalDeviceExternalImageFormatInfo::default().handle_type(q.handle_type);
        let mut info = vk::PhysicalDeviceImageFormatInfo2::default()
            .format(format)
            .ty(vk::ImageType::TYPE_2D)
            .usage(q.usage)
            .flags(q.create)
            .tiling(if modifier.is_some() { vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT } else { vk::ImageTiling::LINEAR });
        if modifier.is_some() {
            // VUID-VkPhysicalDeviceImageFormatInfo2-tiling-02249: DRM tiling needs the modifier info.
            info = info.push_next(&mut drm);
            if q.create.contains(vk::ImageCreateFlags::MUTABLE_FORMAT) {
                // VUID-VkPhysicalDeviceImageFormatInfo2-tiling-02313: mutable DRM images list their view formats.
                info = info.push_next(&mut format_list);
            }
        }
        if handle_usable {
            info = info.push_next(&mut external);
        }
        let mut external_props = vk::ExternalImageFormatProperties::default();
        let mut props = vk::ImageFormatProperties2::default().push_next(&mut external_props);
        // SAFETY: every chained struct is allowed in VkPhysicalDeviceImageFormatInfo2 /
        // VkImageFormatProperties2 (VUID-VkPhysicalDeviceImageFormatInfo2-pNext-pNext,
        // VUID-VkImageFormatProperties2-pNext-pNext) and the structs outlive the call.
        let result = unsafe {
            self.instance().get_physical_device_image_format_properties2(self.physical_device(), &info, &mut props)
        };
        match result {
            Ok(()) => {
                let p = props.image_format_properties;
                let limits = ImageLimits {
                    max_extent: p.max_extent,
                    max_array_layers: p.max_array_layers,
                    sample_counts: p.sample_counts,
                };
                let features = if handle_usable {
                    external_props.external_memory_properties.external_memory_features
                } else {
                    vk::ExternalMemoryFeatureFlags::empty()
                };
                Ok(Some((limits, features)))
            }
            Err(vk::Result::ERROR_FORMAT_NOT_SUPPORTED) => Ok(None),
            Err(result) => Err(VkError { call: "vkGetPhysicalDeviceImageFormatProperties2", result }.into()),
        }
    }
}
