//! What the device can do with each DRM format, per intended use.
//!
//! The kernel's rule (seed 001, "Negotiation"): query with the usage and create flags
//! "corresponding to the intended rendering use". A modifier that works for sampling may
//! not work for storage, for an sRGB view, or for export, so every [`SupportQuery`] (a format,
//! an exact [`ImageUse`], a handle type) is answered on its own and cached per engine.
//!
//! The driver's modifier list is read twice: `VkDrmFormatModifierPropertiesListEXT` (32-bit
//! features) and, where the device offers `VK_KHR_format_feature_flags2`, the List2 variant
//! (64-bit features, which List1 cannot express). See [`merge_modifier_lists`] for how
//! the two are reconciled; every feature check uses the 64-bit flags.
//!
//! With `VK_EXT_image_drm_format_modifier`, each modifier the driver lists is checked with
//! `vkGetPhysicalDeviceImageFormatProperties2` chained with the exact modifier and the
//! external handle type. Without it there are no explicit modifiers: the answer is the
//! implicit world, what LINEAR tiling can import or export ([`SupportSource::LinearTiling`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use dmabridge_interop::{format_info, Fourcc, Modifier};

use crate::error::VkError;
use crate::device::requirements::DeviceExtension;
use crate::device::usage::ImageUse;
use crate::device::vk_format;
use crate::{Adapter, Engine};

/// The format features a usage needs from the tiling (a usage the features lack is not
/// supported even where the image-format query is lenient).
fn required_features(usage: vk::ImageUsageFlags) -> vk::FormatFeatureFlags2 {
    let pairs = [
        (vk::ImageUsageFlags::SAMPLED, vk::FormatFeatureFlags2::SAMPLED_IMAGE),
        (vk::ImageUsageFlags::STORAGE, vk::FormatFeatureFlags2::STORAGE_IMAGE),
        (vk::ImageUsageFlags::COLOR_ATTACHMENT, vk::FormatFeatureFlags2::COLOR_ATTACHMENT),
        (vk::ImageUsageFlags::TRANSFER_SRC, vk::FormatFeatureFlags2::TRANSFER_SRC),
        (vk::ImageUsageFlags::TRANSFER_DST, vk::FormatFeatureFlags2::TRANSFER_DST),
        (vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT, vk::FormatFeatureFlags2::DEPTH_STENCIL_ATTACHMENT),
    ];
    pairs.iter().filter(|(u, _)| usage.contains(*u)).fold(vk::FormatFeatureFlags2::empty(), |acc, (_, f)| acc | *f)
}

/// 32-bit format features as the 64-bit flags (their bits are the low 32 of those).
pub fn widen(f: vk::FormatFeatureFlags) -> vk::FormatFeatureFlags2 {
    vk::FormatFeatureFlags2::from_raw(u64::from(f.as_raw()))
}

/// One modifier as the driver lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedModifier {
    pub modifier: Modifier,
    pub plane_count: u32,
    pub features: vk::FormatFeatureFlags2,
}

/// Reconciles the driver's two modifier lists for one format: List1 (32-bit features) and
/// List2 (64-bit). Returns the list to use and, where they disagree, what differs.
///
/// - List2 empty (lavapipe 25.0 fills only List1) or not offered: List1, widened.
/// - Otherwise the intersection: modifiers in both lists, in List1's order, whose plane
///   counts agree, with List2's features where List1 says the same of the bits it can
///   express (bits 0-30; the others come from List2 alone) and the common bits where not.
pub fn merge_modifier_lists(list1: &[ListedModifier], list2: &[ListedModifier]) -> (Vec<ListedModifier>, Option<String>) {
    if list2.is_empty() {
        return (list1.to_vec(), None);
    }
    // The bits List1 can express: VkFormatFeatureFlagBits stops at bit 30 (bit 31 would
    // make the 32-bit enum negative), and STORAGE_READ_WITHOUT_FORMAT (bit 31) and up are
    // List2's alone.
    const LOW: u64 = 0x7FFF_FFFF;
    let mut merged = Vec::with_capacity(list1.len());
    let mut differences = Vec::new();
    for one in list1 {
        let Some(two) = list2.iter().find(|t| t.modifier == one.modifier) else {
            differences.push(format!("{} only in List1", one.modifier));
            continue;
        };
        if one.plane_count != two.plane_count {
            differences.push(format!("{}: {} planes in List1, {} in List2", one.modifier, one.plane_count, two.plane_count));
            continue;
        }
        let (low1, raw2) = (one.features.as_raw() & LOW, two.features.as_raw());
        if low1 != raw2 & LOW {
            differences.push(format!("{}: features {low1:#x} in List1, {:#x} in List2", one.modifier, raw2 & LOW));
        }
        merged.push(ListedModifier { features: vk::FormatFeatureFlags2::from_raw((raw2 & !LOW) | (raw2 & low1)), ..*one });
    }
    differences.extend(list2.iter().filter(|t| !list1.iter().any(|o| o.modifier == t.modifier)).map(|t| format!("{} only in List2", t.modifier)));
    let note = (!differences.is_empty()).then(|| differences.join("; "));
    (merged, note)
}

/// One question: can `fourcc` be made for exactly this use, shared through `handle_type`?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SupportQuery {
    pub fourcc: Fourcc,
    pub image_use: ImageUse,
    pub handle_type: vk::ExternalMemoryHandleTypeFlags,
}

impl SupportQuery {
    /// The use (a [`ImageUse`], or bare usage flags), shared as a dma-buf.
    pub fn new(fourcc: Fourcc, image_use: impl Into<ImageUse>) -> Self {
        SupportQuery { fourcc, image_use: image_use.into(), handle_type: vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT }
    }

    /// These create flags as well.
    pub fn with_create(mut self, create: vk::ImageCreateFlags) -> Self {
        self.image_use = self.image_use.with_create(create);
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
pub enum SupportSource {
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
pub struct ModifierSupport {
    pub modifier: Modifier,
    /// Memory planes of an image with this modifier (`drmFormatModifierPlaneCount`), or
    /// the format's plane count under LINEAR tiling.
    pub plane_count: u32,
    /// What the tiling offers, whatever the usage (64-bit: see [`merge_modifier_lists`]).
    pub tiling_features: vk::FormatFeatureFlags2,
    /// `None` when the image-format query refused the exact combination.
    pub limits: Option<ImageLimits>,
    /// The tiling features cover the usage. With `EXTENDED_USAGE` a view format may supply
    /// what the image's own format lacks, so then only the image-format query decides.
    pub features_cover_usage: bool,
    pub importable: bool,
    pub exportable: bool,
    /// Only a dedicated allocation may import or export it.
    pub dedicated_only: bool,
}

impl ModifierSupport {
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

/// The answer to a [`SupportQuery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatSupport {
    pub query: SupportQuery,
    pub vk_format: vk::Format,
    pub source: SupportSource,
    /// Every modifier the driver lists for the format, supported or not, in its order.
    pub modifiers: Vec<ModifierSupport>,
}

impl FormatSupport {
    pub fn get(&self, m: Modifier) -> Option<&ModifierSupport> {
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
pub enum FormatSupportError {
    #[error("{0} has no Vulkan format in dmabridge's table")]
    UnknownFourcc(Fourcc),
    #[error(transparent)]
    Vk(#[from] VkError),
}

/// Answers already computed, per engine (so per device), and what the device's lists are like.
pub(crate) struct SupportCache {
    answers: Mutex<HashMap<SupportQuery, Arc<FormatSupport>>>,
    /// The device offers `VK_KHR_format_feature_flags2` (or Vulkan 1.3): List2 and
    /// `VkFormatProperties3` may be read.
    features2: bool,
    /// A List1/List2 disagreement was logged (once per engine is enough to notice).
    disagreement_logged: AtomicBool,
}

impl SupportCache {
    pub(crate) fn new(features2: bool) -> Self {
        SupportCache { answers: Mutex::default(), features2, disagreement_logged: AtomicBool::new(false) }
    }
}

/// The driver's list of one kind (List1 or List2) for a format: the count, then the entries,
/// as `ListedModifier`s. A macro because the two lists are distinct Vulkan types with the
/// same shape.
macro_rules! read_modifier_list {
    ($engine:expr, $format:expr, $list:ident, $entry:ident, $features:expr) => {{
        let instance = $engine.instance();
        let mut list = vk::$list::default();
        let mut props = vk::FormatProperties2::default().push_next(&mut list);
        // SAFETY: the device offers the modifier extension (and, for List2,
        // VK_KHR_format_feature_flags2; the caller checked), so the list struct is a valid
        // pNext of VkFormatProperties2 (VUID-VkFormatProperties2-pNext-pNext); with a null
        // array the call only writes the count.
        unsafe { instance.get_physical_device_format_properties2($engine.physical_device(), $format, &mut props) };
        let count = list.drm_format_modifier_count as usize;
        let mut entries = vec![vk::$entry::default(); count];
        if count > 0 {
            let mut list = vk::$list::default().drm_format_modifier_properties(&mut entries);
            let mut props = vk::FormatProperties2::default().push_next(&mut list);
            // SAFETY: as above; the array holds drmFormatModifierCount elements.
            unsafe { instance.get_physical_device_format_properties2($engine.physical_device(), $format, &mut props) };
            let written = (list.drm_format_modifier_count as usize).min(count);
            entries.truncate(written);
        }
        let features = $features;
        entries
            .iter()
            .map(|e| ListedModifier {
                modifier: Modifier::from_raw(e.drm_format_modifier),
                plane_count: e.drm_format_modifier_plane_count,
                features: features(e),
            })
            .collect()
    }};
}

impl Adapter {
    /// Answers `q`, from the cache when it was asked before. Queries only: works on any
    /// device that answers them.
    pub fn format_support(&self, q: &SupportQuery) -> Result<Arc<FormatSupport>, FormatSupportError> {
        if let Some(hit) = self.0.support_cache.answers.lock().ok().and_then(|c| c.get(q).cloned()) {
            return Ok(hit);
        }
        let answer = Arc::new(self.compute_caps(q)?);
        if let Ok(mut cache) = self.0.support_cache.answers.lock() {
            cache.insert(*q, answer.clone());
        }
        Ok(answer)
    }

    fn compute_caps(&self, q: &SupportQuery) -> Result<FormatSupport, FormatSupportError> {
        let entry = vk_format::to_vk(q.fourcc).ok_or(FormatSupportError::UnknownFourcc(q.fourcc))?;
        let vk_format = entry.vk_format;
        let (source, listed) = if self.has_modifiers() {
            (SupportSource::DrmModifier, self.listed_modifiers(vk_format))
        } else {
            let planes = format_info(q.fourcc).map_or(1, |i| i.plane_count() as u32);
            let linear = ListedModifier { modifier: Modifier::LINEAR, plane_count: planes, features: self.linear_features(vk_format) };
            (SupportSource::LinearTiling, vec![linear])
        };
        let mut modifiers = Vec::with_capacity(listed.len());
        let required = required_features(q.image_use.usage);
        let extended = q.image_use.create_flags(vk_format).contains(vk::ImageCreateFlags::EXTENDED_USAGE);
        for ListedModifier { modifier, plane_count, features: tiling_features } in listed {
            let tiling = match source {
                SupportSource::DrmModifier => Some(modifier),
                SupportSource::LinearTiling => None,
            };
            let answer = self.image_format_properties(vk_format, q, tiling)?;
            let (limits, external) = match answer {
                Some((l, e)) => (Some(l), e),
                None => (None, vk::ExternalMemoryFeatureFlags::empty()),
            };
            modifiers.push(ModifierSupport {
                modifier,
                plane_count,
                tiling_features,
                limits,
                features_cover_usage: extended || tiling_features.contains(required),
                importable: external.contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE),
                exportable: external.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE),
                dedicated_only: external.contains(vk::ExternalMemoryFeatureFlags::DEDICATED_ONLY),
            });
        }
        tracing::debug!(fourcc = %q.fourcc, image_use = %q.image_use, ?source, count = modifiers.len(), "capabilities");
        Ok(FormatSupport { query: *q, vk_format, source, modifiers })
    }

    /// The driver's modifier list for a format: both lists, reconciled by
    /// [`merge_modifier_lists`] (a disagreement is logged once per engine).
    fn listed_modifiers(&self, format: vk::Format) -> Vec<ListedModifier> {
        let list1 = self.modifier_list1(format);
        let list2 = if self.0.support_cache.features2 { self.modifier_list2(format) } else { Vec::new() };
        let (merged, note) = merge_modifier_lists(&list1, &list2);
        if let Some(note) = note {
            if !self.0.support_cache.disagreement_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(?format, "the driver's two modifier lists disagree ({note}); using what both say");
            }
        }
        merged
    }

    fn modifier_list1(&self, format: vk::Format) -> Vec<ListedModifier> {
        read_modifier_list!(self, format, DrmFormatModifierPropertiesListEXT, DrmFormatModifierPropertiesEXT, |e: &vk::DrmFormatModifierPropertiesEXT| widen(e.drm_format_modifier_tiling_features))
    }

    fn modifier_list2(&self, format: vk::Format) -> Vec<ListedModifier> {
        read_modifier_list!(self, format, DrmFormatModifierPropertiesList2EXT, DrmFormatModifierProperties2EXT, |e: &vk::DrmFormatModifierProperties2EXT| e.drm_format_modifier_tiling_features)
    }

    /// LINEAR tiling's features, 64-bit where the device offers them.
    fn linear_features(&self, format: vk::Format) -> vk::FormatFeatureFlags2 {
        if self.0.support_cache.features2 {
            let mut three = vk::FormatProperties3::default();
            let mut props = vk::FormatProperties2::default().push_next(&mut three);
            // SAFETY: the device offers VK_KHR_format_feature_flags2, so VkFormatProperties3
            // is a valid pNext of VkFormatProperties2 (VUID-VkFormatProperties2-pNext-pNext).
            unsafe { self.instance().get_physical_device_format_properties2(self.physical_device(), format, &mut props) };
            return three.linear_tiling_features;
        }
        // SAFETY: core query on this engine's physical device.
        widen(unsafe { self.instance().get_physical_device_format_properties(self.physical_device(), format) }.linear_tiling_features)
    }

    /// Whether the driver accepts the exact combination, with `Some(modifier)` for DRM
    /// modifier tiling or `None` for LINEAR tiling. `Ok(None)` means "not supported".
    fn image_format_properties(
        &self,
        format: vk::Format,
        q: &SupportQuery,
        modifier: Option<Modifier>,
    ) -> Result<Option<(ImageLimits, vk::ExternalMemoryFeatureFlags)>, FormatSupportError> {
        // Asking about a handle type from an extension the device did not enable is not
        // meaningful; such memory can be neither imported nor exported here.
        let handle_usable = q.handle_type != vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT
            || self.extensions().has(DeviceExtension::ExternalMemoryDmaBuf);
        let create = q.image_use.create_flags(format);
        let view_formats = q.image_use.view_formats(format);
        let mut format_list = vk::ImageFormatListCreateInfo::default().view_formats(&view_formats);
        let mut drm = vk::PhysicalDeviceImageDrmFormatModifierInfoEXT::default()
            .drm_format_modifier(modifier.map_or(0, Modifier::raw))
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let mut external = vk::PhysicalDeviceExternalImageFormatInfo::default().handle_type(q.handle_type);
        let mut info = vk::PhysicalDeviceImageFormatInfo2::default()
            .format(format)
            .ty(vk::ImageType::TYPE_2D)
            .usage(q.image_use.usage)
            .flags(create)
            .tiling(if modifier.is_some() { vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT } else { vk::ImageTiling::LINEAR });
        if modifier.is_some() {
            // VUID-VkPhysicalDeviceImageFormatInfo2-tiling-02249: DRM tiling needs the modifier info.
            info = info.push_next(&mut drm);
        }
        if !view_formats.is_empty() {
            // VUID-VkPhysicalDeviceImageFormatInfo2-tiling-02313: mutable DRM images list their
            // view formats; for LINEAR the list narrows the answer to the views the use asks for.
            info = info.push_next(&mut format_list);
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

impl Adapter {
    /// The device-local optimal image the copy path writes (`usage` plus TRANSFER_DST), if
    /// the device can create one of `format`: `None` means the copy path cannot take it.
    pub(crate) fn copy_target_properties(&self, format: vk::Format, usage: &ImageUse) -> Option<vk::ImageFormatProperties> {
        // SAFETY: plain query of this adapter's physical device (no VUID beyond valid handles).
        unsafe {
            self.instance().get_physical_device_image_format_properties(
                self.physical_device(),
                format,
                vk::ImageType::TYPE_2D,
                vk::ImageTiling::OPTIMAL,
                usage.usage | vk::ImageUsageFlags::TRANSFER_DST,
                usage.create_flags(format),
            )
        }
        .ok()
    }
}

impl Engine {
    /// [`Adapter::format_support`], for this engine's extensions.
    pub fn format_support(&self, q: &SupportQuery) -> Result<Arc<FormatSupport>, FormatSupportError> {
        self.adapter().format_support(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(raw: u64, planes: u32, features: u64) -> ListedModifier {
        ListedModifier { modifier: Modifier::from_raw(raw), plane_count: planes, features: vk::FormatFeatureFlags2::from_raw(features) }
    }

    #[test]
    fn an_empty_list2_means_list1() {
        let one = [listed(0, 1, 0x1), listed(0x0100_0000_0000_0001, 1, 0x3)];
        assert_eq!(merge_modifier_lists(&one, &[]), (one.to_vec(), None));
    }

    #[test]
    fn list2_adds_the_bits_list1_cannot_express() {
        let high = vk::FormatFeatureFlags2::STORAGE_READ_WITHOUT_FORMAT.as_raw();
        assert!(high > 0x7FFF_FFFF, "a feature only the 64-bit flags have");
        let one = [listed(0, 1, 0x1)];
        let two = [listed(0, 1, 0x1 | high)];
        let (merged, note) = merge_modifier_lists(&one, &two);
        assert_eq!(note, None);
        assert_eq!(merged, vec![listed(0, 1, 0x1 | high)]);
    }

    #[test]
    fn disagreeing_lists_give_the_intersection_and_say_what_differs() {
        let x = 0x0100_0000_0000_0001;
        let y = 0x0100_0000_0000_0002;
        let z = 0x0100_0000_0000_0004;
        let one = [listed(0, 1, 0b111), listed(x, 1, 0b1), listed(y, 2, 0b1)];
        let two = [listed(z, 1, 0b1), listed(y, 1, 0b1), listed(0, 1, 0b101)];
        let (merged, note) = merge_modifier_lists(&one, &two);
        // LINEAR: in both, features differ (List1 0b111, List2 0b101): the common bits.
        // x: List1 only; y: the plane counts differ; z: List2 only.
        assert_eq!(merged, vec![listed(0, 1, 0b101)]);
        let note = note.expect("a disagreement");
        for part in ["LINEAR", "only in List1", "2 planes in List1, 1 in List2", "only in List2"] {
            assert!(note.contains(part), "{note:?} lacks {part:?}");
        }
    }
}
