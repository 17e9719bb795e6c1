//! What a device must enable for each thing dmabridge does, asked before the device exists.
//!
//! A host engine that creates its own `VkDevice` calls [`requirements`] on the physical
//! device it chose, enables what it lists (or what it wants of it), creates the device, and
//! hands it over with [`Engine::from_host`](crate::Engine::from_host), which checks the same
//! list and names whatever is missing. [`Engine::new`](crate::Engine::new) enables
//! everything [`requirements`] says the device offers, so both paths share one list.
//!
//! | capability | device extensions | features |
//! |---|---|---|
//! | [`Capability::Core`] | (Vulkan 1.2) | `timelineSemaphore` |
//! | [`Capability::DmaBufImport`] / [`Capability::DmaBufExport`] | `VK_KHR_external_memory_fd`, `VK_EXT_external_memory_dma_buf` | |
//! | [`Capability::ExplicitModifiers`] | `VK_EXT_image_drm_format_modifier`, `VK_KHR_image_format_list` | |
//! | [`Capability::ForeignQueue`] | `VK_EXT_queue_family_foreign` | |
//! | [`Capability::YcbcrSampling`] | (Vulkan 1.1) | `samplerYcbcrConversion` |
//! | [`Capability::SyncFile`] | `VK_KHR_external_semaphore_fd` | |
//! | [`Capability::Present`] | `VK_KHR_swapchain` (instance: `VK_KHR_surface` + the platform's) | |
//!
//! Only [`Capability::Core`] is mandatory; an engine without another capability reports it
//! in [`Engine::capabilities`](crate::Engine::capabilities) and the operations that need it
//! fail with an error that names it.

use std::ffi::{CStr, CString};
use std::fmt;

use ash::vk;

/// A device extension dmabridge uses when the device offers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceExtension {
    ExternalMemoryFd,
    ExternalMemoryDmaBuf,
    ImageDrmFormatModifier,
    ImageFormatList,
    QueueFamilyForeign,
    ExternalSemaphoreFd,
    Swapchain,
}

impl DeviceExtension {
    pub const ALL: [DeviceExtension; 7] = [
        DeviceExtension::ExternalMemoryFd,
        DeviceExtension::ExternalMemoryDmaBuf,
        DeviceExtension::ImageDrmFormatModifier,
        DeviceExtension::ImageFormatList,
        DeviceExtension::QueueFamilyForeign,
        DeviceExtension::ExternalSemaphoreFd,
        DeviceExtension::Swapchain,
    ];

    pub fn name(self) -> &'static CStr {
        match self {
            DeviceExtension::ExternalMemoryFd => ash::khr::external_memory_fd::NAME,
            DeviceExtension::ExternalMemoryDmaBuf => ash::ext::external_memory_dma_buf::NAME,
            DeviceExtension::ImageDrmFormatModifier => ash::ext::image_drm_format_modifier::NAME,
            DeviceExtension::ImageFormatList => ash::khr::image_format_list::NAME,
            DeviceExtension::QueueFamilyForeign => ash::ext::queue_family_foreign::NAME,
            DeviceExtension::ExternalSemaphoreFd => ash::khr::external_semaphore_fd::NAME,
            DeviceExtension::Swapchain => ash::khr::swapchain::NAME,
        }
    }
}

/// The set of [`DeviceExtension`]s enabled on a device.
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
}

/// A device feature dmabridge enables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// `VkPhysicalDeviceVulkan12Features::timelineSemaphore`: every [`Submission`](crate::Submission)
    /// is a value on a timeline semaphore.
    TimelineSemaphore,
    /// `VkPhysicalDeviceVulkan11Features::samplerYcbcrConversion`: sampling multi-planar
    /// YCbCr images (the presenter, the demo's consumer).
    SamplerYcbcrConversion,
}

impl Feature {
    pub fn name(self) -> &'static str {
        match self {
            Feature::TimelineSemaphore => "timelineSemaphore",
            Feature::SamplerYcbcrConversion => "samplerYcbcrConversion",
        }
    }
}

/// The features a device was created with, as far as dmabridge cares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnabledFeatures {
    pub timeline_semaphore: bool,
    pub sampler_ycbcr_conversion: bool,
}

impl EnabledFeatures {
    pub fn has(&self, f: Feature) -> bool {
        match f {
            Feature::TimelineSemaphore => self.timeline_semaphore,
            Feature::SamplerYcbcrConversion => self.sampler_ycbcr_conversion,
        }
    }

    /// The two feature structs to chain into `VkDeviceCreateInfo::pNext`
    /// (`VkPhysicalDeviceTimelineSemaphoreFeatures`, `VkPhysicalDeviceSamplerYcbcrConversionFeatures`),
    /// valid on any Vulkan 1.2 device.
    pub fn create_info_structs(
        &self,
    ) -> (vk::PhysicalDeviceTimelineSemaphoreFeatures<'static>, vk::PhysicalDeviceSamplerYcbcrConversionFeatures<'static>) {
        (
            vk::PhysicalDeviceTimelineSemaphoreFeatures::default().timeline_semaphore(self.timeline_semaphore),
            vk::PhysicalDeviceSamplerYcbcrConversionFeatures::default().sampler_ycbcr_conversion(self.sampler_ycbcr_conversion),
        )
    }
}

/// Something dmabridge does that needs particular extensions or features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// Submissions, conversions, readback: Vulkan 1.2 with timeline semaphores and a
    /// compute queue. Mandatory.
    Core,
    /// Importing dma-bufs (images and buffers over their memory).
    DmaBufImport,
    /// Exporting images as dma-bufs (the driver must also report the handle type exportable
    /// for the format; see the capability query).
    DmaBufExport,
    /// Explicit DRM format modifiers: per-plane layouts named by modifier, both ways.
    ExplicitModifiers,
    /// Queue family ownership transfers from and to `VK_QUEUE_FAMILY_FOREIGN_EXT` (without
    /// it, `VK_QUEUE_FAMILY_EXTERNAL` is used, which is correct between Vulkan instances of
    /// the same driver only).
    ForeignQueue,
    /// Sampling multi-planar YCbCr images through a sampler conversion.
    YcbcrSampling,
    /// Exporting explicit fences as sync_files (`SYNC_FD` semaphores). Waiting for one needs
    /// no capability: the engine polls it (`device::fence_gate`).
    SyncFile,
    /// Presenting to a window (the `present` feature).
    Present,
}

impl Capability {
    pub const ALL: [Capability; 8] = [
        Capability::Core,
        Capability::DmaBufImport,
        Capability::DmaBufExport,
        Capability::ExplicitModifiers,
        Capability::ForeignQueue,
        Capability::YcbcrSampling,
        Capability::SyncFile,
        Capability::Present,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Capability::Core => "core",
            Capability::DmaBufImport => "dma-buf-import",
            Capability::DmaBufExport => "dma-buf-export",
            Capability::ExplicitModifiers => "explicit-modifiers",
            Capability::ForeignQueue => "foreign-queue",
            Capability::YcbcrSampling => "ycbcr-sampling",
            Capability::SyncFile => "sync-file",
            Capability::Present => "present",
        }
    }

    /// Device extensions, in an order that satisfies their dependencies.
    pub fn device_extensions(self) -> &'static [DeviceExtension] {
        use DeviceExtension as E;
        match self {
            Capability::Core | Capability::YcbcrSampling => &[],
            Capability::DmaBufImport | Capability::DmaBufExport => &[E::ExternalMemoryFd, E::ExternalMemoryDmaBuf],
            // VK_EXT_image_drm_format_modifier needs VK_KHR_image_format_list (core in 1.2,
            // listed so that the name is enabled explicitly, as drivers expect).
            Capability::ExplicitModifiers => &[E::ImageFormatList, E::ImageDrmFormatModifier],
            Capability::ForeignQueue => &[E::QueueFamilyForeign],
            Capability::SyncFile => &[E::ExternalSemaphoreFd],
            Capability::Present => &[E::Swapchain],
        }
    }

    pub fn features(self) -> &'static [Feature] {
        match self {
            Capability::Core => &[Feature::TimelineSemaphore],
            Capability::YcbcrSampling => &[Feature::SamplerYcbcrConversion],
            _ => &[],
        }
    }

    /// Instance extensions beyond Vulkan 1.2 core. Presenting also needs the platform's
    /// surface extension, which depends on the window: see `present::required_instance_extensions`.
    pub fn instance_extensions(self) -> &'static [&'static CStr] {
        match self {
            Capability::Present => &[ash::khr::surface::NAME],
            _ => &[],
        }
    }

    /// Whether this capability comes with a device created by [`Engine::new`](crate::Engine::new)
    /// when the device offers it. Presenting needs a window system, so only a caller that
    /// asks for it (`EngineOptions::present`) gets it.
    pub(crate) fn enabled_by_default(self) -> bool {
        self != Capability::Present
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a capability is not available.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "missing", rename_all = "kebab-case")]
pub enum Missing {
    /// The device's (or the instance's) Vulkan version is too old.
    ApiVersion { have: String, need: String },
    /// The device does not offer (or the host did not enable) this extension.
    DeviceExtension { name: String },
    /// The device does not support (or the host did not enable) this feature.
    Feature { name: String },
    /// The driver reports the handle type as not importable or not exportable.
    Driver { detail: String },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::ApiVersion { have, need } => write!(f, "Vulkan {need} (the device has {have})"),
            Missing::DeviceExtension { name } => write!(f, "device extension {name}"),
            Missing::Feature { name } => write!(f, "feature {name}"),
            Missing::Driver { detail } => f.write_str(detail),
        }
    }
}

/// One capability's needs and whether the device meets them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Requirement {
    pub capability: Capability,
    #[serde(serialize_with = "serialize_cstrs")]
    pub instance_extensions: Vec<&'static CStr>,
    pub device_extensions: Vec<DeviceExtension>,
    pub features: Vec<Feature>,
    /// Empty when the device offers everything listed.
    pub missing: Vec<Missing>,
}

fn serialize_cstrs<S: serde::Serializer>(v: &[&'static CStr], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|c| c.to_string_lossy()))
}

impl Requirement {
    pub fn available(&self) -> bool {
        self.missing.is_empty()
    }
}

/// Every capability's needs on one physical device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Requirements {
    pub requirements: Vec<Requirement>,
}

/// The lowest device (and instance) API version dmabridge works with.
pub const MIN_API_VERSION: u32 = vk::API_VERSION_1_2;

fn version_text(v: u32) -> String {
    format!("{}.{}", vk::api_version_major(v), vk::api_version_minor(v))
}

/// What the physical device offers, as far as [`requirements`] looks.
pub(crate) struct Offered {
    pub api_version: u32,
    pub extensions: Vec<CString>,
    pub features: EnabledFeatures,
    /// `VK_EXTERNAL_SEMAPHORE_FEATURE_{EXPORTABLE,IMPORTABLE}` for `SYNC_FD`.
    pub sync_fd: bool,
}

impl Offered {
    pub(crate) fn query(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Offered {
        // SAFETY: pd comes from this instance (the caller's contract); a plain query.
        let props = unsafe { instance.get_physical_device_properties(pd) };
        // SAFETY: as above.
        let extensions = unsafe { instance.enumerate_device_extension_properties(pd) }
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.extension_name_as_c_str().ok().map(CStr::to_owned))
            .collect();
        let mut timeline = vk::PhysicalDeviceTimelineSemaphoreFeatures::default();
        let mut ycbcr = vk::PhysicalDeviceSamplerYcbcrConversionFeatures::default();
        let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut timeline).push_next(&mut ycbcr);
        let features = if props.api_version >= MIN_API_VERSION {
            // SAFETY: a Vulkan 1.2 device accepts both structs in the chain
            // (VUID-VkPhysicalDeviceFeatures2-pNext-pNext).
            unsafe { instance.get_physical_device_features2(pd, &mut features2) };
            EnabledFeatures {
                timeline_semaphore: timeline.timeline_semaphore == vk::TRUE,
                sampler_ycbcr_conversion: ycbcr.sampler_ycbcr_conversion == vk::TRUE,
            }
        } else {
            EnabledFeatures::default()
        };
        let info = vk::PhysicalDeviceExternalSemaphoreInfo::default().handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        let mut sem = vk::ExternalSemaphoreProperties::default();
        let sync_fd = props.api_version >= MIN_API_VERSION && {
            // SAFETY: core 1.1 query on this instance's device, valid info struct.
            unsafe { instance.get_physical_device_external_semaphore_properties(pd, &info, &mut sem) };
            sem.external_semaphore_features
                .contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE | vk::ExternalSemaphoreFeatureFlags::IMPORTABLE)
        };
        Offered { api_version: props.api_version, extensions, features, sync_fd }
    }

    fn has_extension(&self, e: DeviceExtension) -> bool {
        self.extensions.iter().any(|n| n.as_c_str() == e.name())
    }
}

/// Every capability on `physical_device`: what it needs and what of that is missing.
///
/// # Safety
/// `physical_device` must have been enumerated from `instance` (VUID-vkGetPhysicalDeviceProperties-physicalDevice-parameter).
pub unsafe fn requirements(instance: &ash::Instance, physical_device: vk::PhysicalDevice) -> Requirements {
    let offered = Offered::query(instance, physical_device);
    evaluate(&offered, |e| offered.has_extension(e), offered.features)
}

/// Checks each capability against what is there: `extension(e)` says whether `e` is offered
/// (or enabled), `features` what is supported (or enabled).
pub(crate) fn evaluate(offered: &Offered, extension: impl Fn(DeviceExtension) -> bool, features: EnabledFeatures) -> Requirements {
    let requirements = Capability::ALL
        .into_iter()
        .map(|capability| {
            let mut missing = Vec::new();
            if offered.api_version < MIN_API_VERSION {
                missing.push(Missing::ApiVersion { have: version_text(offered.api_version), need: version_text(MIN_API_VERSION) });
            }
            for e in capability.device_extensions() {
                if !extension(*e) {
                    missing.push(Missing::DeviceExtension { name: e.name().to_string_lossy().into_owned() });
                }
            }
            for f in capability.features() {
                if !features.has(*f) {
                    missing.push(Missing::Feature { name: f.name().into() });
                }
            }
            if capability == Capability::SyncFile && missing.is_empty() && !offered.sync_fd {
                missing.push(Missing::Driver { detail: "the driver cannot export and import SYNC_FD semaphores".into() });
            }
            Requirement {
                capability,
                instance_extensions: capability.instance_extensions().to_vec(),
                device_extensions: capability.device_extensions().to_vec(),
                features: capability.features().to_vec(),
                missing,
            }
        })
        .collect();
    Requirements { requirements }
}

impl Requirements {
    pub fn get(&self, c: Capability) -> Option<&Requirement> {
        self.requirements.iter().find(|r| r.capability == c)
    }

    pub fn available(&self, c: Capability) -> bool {
        self.get(c).is_some_and(Requirement::available)
    }

    /// The first of `needed` whose needs are not met, with what it lacks: what a caller
    /// that refuses such a device names.
    pub fn first_missing(&self, needed: impl IntoIterator<Item = Capability>) -> Option<(Capability, Vec<Missing>)> {
        needed.into_iter().find_map(|c| self.get(c).filter(|r| !r.available()).map(|r| (c, r.missing.clone())))
    }

    /// The device extensions of every available capability in `wanted`, without repeats,
    /// dependencies first: what to put in `VkDeviceCreateInfo::ppEnabledExtensionNames`.
    pub fn device_extensions(&self, wanted: &[Capability]) -> Vec<DeviceExtension> {
        let mut out = Vec::new();
        for r in self.requirements.iter().filter(|r| wanted.contains(&r.capability) && r.available()) {
            for e in &r.device_extensions {
                if !out.contains(e) {
                    out.push(*e);
                }
            }
        }
        out
    }

    /// The features of every available capability in `wanted`.
    pub fn features(&self, wanted: &[Capability]) -> EnabledFeatures {
        let mut f = EnabledFeatures::default();
        for r in self.requirements.iter().filter(|r| wanted.contains(&r.capability) && r.available()) {
            for feature in &r.features {
                match feature {
                    Feature::TimelineSemaphore => f.timeline_semaphore = true,
                    Feature::SamplerYcbcrConversion => f.sampler_ycbcr_conversion = true,
                }
            }
        }
        f
    }

    /// The capabilities whose needs are met.
    pub fn available_capabilities(&self) -> Vec<Capability> {
        self.requirements.iter().filter(|r| r.available()).map(|r| r.capability).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(api: u32, exts: &[DeviceExtension], features: EnabledFeatures, sync_fd: bool) -> Offered {
        Offered { api_version: api, extensions: exts.iter().map(|e| e.name().to_owned()).collect(), features, sync_fd }
    }

    #[test]
    fn every_capability_is_listed_once_with_its_needs() {
        let o = offered(vk::API_VERSION_1_3, &DeviceExtension::ALL, EnabledFeatures { timeline_semaphore: true, sampler_ycbcr_conversion: true }, true);
        let r = evaluate(&o, |e| o.has_extension(e), o.features);
        assert_eq!(r.requirements.len(), Capability::ALL.len());
        assert!(r.requirements.iter().all(Requirement::available));
        // Every extension belongs to some capability, so none is enabled for nothing.
        let all = r.device_extensions(&Capability::ALL);
        for e in DeviceExtension::ALL {
            assert!(all.contains(&e), "{e:?} belongs to no capability");
        }
        // Dependencies come first.
        let pos = |e| all.iter().position(|x| *x == e).unwrap();
        assert!(pos(DeviceExtension::ExternalMemoryFd) < pos(DeviceExtension::ExternalMemoryDmaBuf));
        assert!(pos(DeviceExtension::ImageFormatList) < pos(DeviceExtension::ImageDrmFormatModifier));
    }

    #[test]
    fn missing_pieces_are_named() {
        let o = offered(vk::API_VERSION_1_2, &[DeviceExtension::ExternalMemoryFd], EnabledFeatures::default(), false);
        let r = evaluate(&o, |e| o.has_extension(e), o.features);
        let core = r.get(Capability::Core).unwrap();
        assert_eq!(core.missing, vec![Missing::Feature { name: "timelineSemaphore".into() }]);
        let import = r.get(Capability::DmaBufImport).unwrap();
        assert_eq!(import.missing, vec![Missing::DeviceExtension { name: "VK_EXT_external_memory_dma_buf".into() }]);
        assert!(r.get(Capability::SyncFile).unwrap().missing.iter().any(|m| matches!(m, Missing::DeviceExtension { .. })));
        let old = offered(vk::API_VERSION_1_1, &[], EnabledFeatures::default(), false);
        let r = evaluate(&old, |e| old.has_extension(e), old.features);
        assert!(matches!(r.get(Capability::Core).unwrap().missing[0], Missing::ApiVersion { .. }));
        assert!(r.device_extensions(&Capability::ALL).is_empty());
    }

    #[test]
    fn sync_file_needs_the_driver_too() {
        let f = EnabledFeatures { timeline_semaphore: true, sampler_ycbcr_conversion: true };
        let o = offered(vk::API_VERSION_1_3, &[DeviceExtension::ExternalSemaphoreFd], f, false);
        let r = evaluate(&o, |e| o.has_extension(e), o.features);
        assert!(matches!(r.get(Capability::SyncFile).unwrap().missing[..], [Missing::Driver { .. }]));
    }
}
