//! The device extensions dmabridge asks for, and what it got.

use std::ffi::{CStr, CString};

use ash::vk;

/// A device extension dmabridge uses when the device offers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceExtension {
    ExternalMemoryFd,
    ExternalMemoryDmaBuf,
    ImageDrmFormatModifier,
    ImageFormatList,
    SamplerYcbcrConversion,
    QueueFamilyForeign,
    ExternalSemaphoreFd,
    ExternalFenceFd,
}

impl DeviceExtension {
    pub const ALL: [DeviceExtension; 8] = [
        DeviceExtension::ExternalMemoryFd,
        DeviceExtension::ExternalMemoryDmaBuf,
        DeviceExtension::ImageDrmFormatModifier,
        DeviceExtension::ImageFormatList,
        DeviceExtension::SamplerYcbcrConversion,
        DeviceExtension::QueueFamilyForeign,
        DeviceExtension::ExternalSemaphoreFd,
        DeviceExtension::ExternalFenceFd,
    ];

    pub fn name(self) -> &'static CStr {
        match self {
            DeviceExtension::ExternalMemoryFd => ash::khr::external_memory_fd::NAME,
            DeviceExtension::ExternalMemoryDmaBuf => ash::ext::external_memory_dma_buf::NAME,
            DeviceExtension::ImageDrmFormatModifier => ash::ext::image_drm_format_modifier::NAME,
            DeviceExtension::ImageFormatList => ash::khr::image_format_list::NAME,
            DeviceExtension::SamplerYcbcrConversion => ash::khr::sampler_ycbcr_conversion::NAME,
            DeviceExtension::QueueFamilyForeign => ash::ext::queue_family_foreign::NAME,
            DeviceExtension::ExternalSemaphoreFd => ash::khr::external_semaphore_fd::NAME,
            DeviceExtension::ExternalFenceFd => ash::khr::external_fence_fd::NAME,
        }
    }

    /// Extensions that must be enabled alongside this one (VUID-vkCreateDevice-ppEnabledExtensionNames-01387).
    /// All of dmabridge's instance-level dependencies are core in Vulkan 1.1, which it requires.
    fn requires(self) -> &'static [DeviceExtension] {
        match self {
            DeviceExtension::ExternalMemoryDmaBuf => &[DeviceExtension::ExternalMemoryFd],
            // VK_EXT_image_drm_format_modifier needs VK_KHR_image_format_list (core in 1.2,
            // but listed explicitly so a 1.1 device is handled) plus 1.1 core features.
            DeviceExtension::ImageDrmFormatModifier => &[DeviceExtension::ImageFormatList],
            _ => &[],
        }
    }
}

/// The set of [`DeviceExtension`]s that are enabled on a device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnabledExtensions(Vec<DeviceExtension>);

impl EnabledExtensions {
    pub fn has(&self, e: DeviceExtension) -> bool {
        self.0.contains(&e)
    }

    pub fn iter(&self) -> impl Iterator<Item = DeviceExtension> + '_ {
        self.0.iter().copied()
    }

    /// From the names a host engine says it enabled (embedding).
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a CStr>) -> Self {
        let names: Vec<&CStr> = names.into_iter().collect();
        EnabledExtensions(DeviceExtension::ALL.into_iter().filter(|e| names.contains(&e.name())).collect())
    }

    /// Of dmabridge's wish list, what `available` offers, minus anything whose
    /// dependencies are missing.
    pub(crate) fn choose(available: &[vk::ExtensionProperties]) -> Self {
        let offered = |e: DeviceExtension| {
            available.iter().any(|p| p.extension_name_as_c_str().is_ok_and(|n| n == e.name()))
        };
        let mut chosen: Vec<DeviceExtension> = DeviceExtension::ALL.into_iter().filter(|e| offered(*e)).collect();
        // Dependencies only point at extensions earlier in no particular order, so iterate
        // to a fixed point.
        loop {
            let before = chosen.len();
            let snapshot = chosen.clone();
            chosen.retain(|e| e.requires().iter().all(|r| snapshot.contains(r)));
            if chosen.len() == before {
                break;
            }
        }
        EnabledExtensions(chosen)
    }

    pub(crate) fn names(&self) -> Vec<CString> {
        self.0.iter().map(|e| e.name().to_owned()).collect()
    }
}
