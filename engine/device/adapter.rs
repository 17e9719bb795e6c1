//! A Vulkan physical device that answers dmabridge's questions, with no logical device.
//!
//! What `dmabridge probe` and `negotiate --vulkan` need is queries: each format's modifier
//! lists (`vkGetPhysicalDeviceFormatProperties2`) and the driver's answer for an exact use
//! (`vkGetPhysicalDeviceImageFormatProperties2`). An [`Adapter`] is an instance and one of
//! its physical devices, and nothing more: no device, memory, queue or pipeline. So it works
//! on every device that answers queries, including one that cannot do more. radv's null
//! device (`RADV_FORCE_FAMILY` with no GPU) answers with the chip's real lists, but its null
//! winsys crashes in `vkCreateImage` and in `vkDestroyDevice`: [`Adapter::open`] refuses it
//! by name ([`EngineError::QueriesOnly`]) rather than calling them.
//!
//! [`Adapter::open`] makes the [`Engine`](crate::Engine) that does the work, on the extensions the adapter
//! lists as those it enables; [`Engine::adapter`](crate::Engine::adapter) is the adapter an engine stands on (for a
//! host's engine, the extensions the host enabled).
//!
//! # How to use
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use dmabridge::{Adapter, EngineOptions, ImageUse, SupportQuery};
//! let adapter = Adapter::new(&EngineOptions::from_env())?;
//! let support = adapter.format_support(&SupportQuery::new(dmabridge::interop::Fourcc::XRGB8888, ImageUse::from(dmabridge::ash::vk::ImageUsageFlags::SAMPLED)))?;
//! let engine = adapter.open(&EngineOptions::from_env())?; // only where work follows
//! # Ok(()) }
//! ```

use std::ffi::{CStr, CString};
use std::sync::Arc;

use ash::vk;

use crate::device::options::{DeviceInfo, DeviceSelector, EngineError, EngineOptions};
use crate::device::format_support::SupportCache;
use crate::device::requirements::{evaluate, Capability, DeviceExtension, EnabledExtensions, EnabledFeatures, Offered, Requirements, MIN_API_VERSION};
use crate::device::validation::{Messenger, ValidationLog, LAYER_NAME};
use crate::error::{VkError, VkResultExt};

/// A physical device and the instance it belongs to, for queries. Cheap to clone.
#[derive(Clone)]
pub struct Adapter(pub(crate) Arc<AdapterShared>);

/// Whose instance it is.
enum InstanceOwner {
    /// The adapter created it (with its validation messenger) and destroys it.
    Owned { messenger: Option<Messenger> },
    /// A host engine's ([`crate::Engine::from_host`]): the host destroys it.
    Host,
}

pub(crate) struct AdapterShared {
    entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    info: DeviceInfo,
    /// The queue family an engine on this adapter uses (compute; with graphics if offered).
    queue_family: u32,
    /// The extensions an engine on this adapter enables (or, for a host's, has): dmabridge's
    /// own, as a set, and every name to enable (the caller's extra ones too).
    extensions: EnabledExtensions,
    extension_names: Vec<CString>,
    features: EnabledFeatures,
    requirements: Requirements,
    validation: Option<ValidationLog>,
    pub(crate) support_cache: SupportCache,
    /// Why this device answers queries but cannot be opened; `None` for an ordinary one.
    queries_only: Option<&'static str>,
    owner: InstanceOwner,
}

impl Drop for AdapterShared {
    fn drop(&mut self) {
        if let InstanceOwner::Owned { messenger } = &mut self.owner {
            drop(messenger.take());
            // SAFETY: the adapter created the instance; every engine on it held a clone of
            // this adapter and has destroyed its device, and the messenger, the instance's
            // last child, was destroyed just above (VUID-vkDestroyInstance-instance-00629).
            unsafe { self.instance.destroy_instance(None) };
        }
    }
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter").field("device", &self.0.info.name).field("queries_only", &self.0.queries_only).finish()
    }
}

/// The capabilities an engine enables when nobody asks otherwise, and `Present` where asked.
fn wanted(options: &EngineOptions) -> Vec<Capability> {
    Capability::ALL.into_iter().filter(|c| c.enabled_by_default() || (options.present && *c == Capability::Present)).collect()
}

impl Adapter {
    /// A new instance (with the validation layer where `options.validation`) and the device
    /// `options.device` selects, or the best one that meets dmabridge's core requirements
    /// (discrete > integrated > virtual > CPU). Queries only: no device is created.
    pub fn new(options: &EngineOptions) -> Result<Adapter, EngineError> {
        // SAFETY: loading the system Vulkan loader runs its initialisers; nothing else in
        // the process depends on it not being loaded.
        let entry = unsafe { ash::Entry::load()? };
        let validation = options.validation.then(ValidationLog::default);
        let instance = create_instance(&entry, validation.is_some(), &options.instance_extensions)?;
        // From here on the instance must be destroyed on every error path: the owner does it.
        let messenger = match &validation {
            Some(log) => match Messenger::new(&entry, &instance, log.clone()) {
                Ok(m) => Some(m),
                Err(result) => {
                    // SAFETY: no child object of the instance exists yet (VUID-vkDestroyInstance-instance-00629).
                    unsafe { instance.destroy_instance(None) };
                    return Err(VkError { call: "vkCreateDebugUtilsMessengerEXT", result }.into());
                }
            },
            None => None,
        };
        let chosen = match choose(&instance, options) {
            Ok(c) => c,
            Err(e) => {
                drop(messenger);
                // SAFETY: the messenger, the only child, was destroyed just above.
                unsafe { instance.destroy_instance(None) };
                return Err(e);
            }
        };
        let wanted = wanted(options);
        let mut names: Vec<CString> = chosen.requirements.device_extensions(&wanted).iter().map(|e| e.name().to_owned()).collect();
        for e in &options.device_extensions {
            if !names.contains(e) {
                names.push(e.clone());
            }
        }
        let features = chosen.requirements.features(&wanted);
        Ok(Adapter::assemble(
            entry,
            instance,
            (chosen.physical, chosen.queue_family),
            (names, features, &chosen.offered),
            validation,
            InstanceOwner::Owned { messenger },
        ))
    }

    /// A host's instance and physical device, with the extensions and features its device has
    /// (for [`crate::Engine::from_host`]). The host keeps the instance.
    pub(crate) fn of_host(
        entry: ash::Entry,
        instance: ash::Instance,
        (physical, queue_family): (vk::PhysicalDevice, u32),
        (extension_names, features): (Vec<CString>, EnabledFeatures),
        instance_api_version: u32,
    ) -> Adapter {
        let offered = Offered::query(&instance, physical);
        let api = offered.api_version.min(instance_api_version);
        let offered = Offered { api_version: api, ..offered };
        Adapter::assemble(entry, instance, (physical, queue_family), (extension_names, features, &offered), None, InstanceOwner::Host)
    }

    fn assemble(
        entry: ash::Entry,
        instance: ash::Instance,
        (physical, queue_family): (vk::PhysicalDevice, u32),
        (extension_names, features, offered): (Vec<CString>, EnabledFeatures, &Offered),
        validation: Option<ValidationLog>,
        owner: InstanceOwner,
    ) -> Adapter {
        let extensions = EnabledExtensions::from_names(extension_names.iter().map(|c| c.as_c_str()));
        let info = device_info(&instance, physical);
        let requirements = evaluate(offered, |e| extensions.has(e), features);
        // The extension, not the 1.3 core version: a 1.3 device under an instance made for
        // 1.2 (a host's) may not take the 1.3 structs in physical-device queries.
        let features2 = offered.extensions.iter().any(|e| e.as_c_str() == ash::khr::format_feature_flags2::NAME);
        let queries_only = queries_only(&info);
        if let Some(why) = queries_only {
            // Not a warning: a probe or a negotiation is all such a device is for, and opening
            // it is the error (EngineError::QueriesOnly) that says why.
            tracing::info!(device = %info.name, "this device answers queries only: {why}");
        }
        let adapter = Adapter(Arc::new(AdapterShared {
            entry,
            instance,
            physical,
            info,
            queue_family,
            extensions,
            extension_names,
            features,
            requirements,
            validation,
            support_cache: SupportCache::new(features2),
            queries_only,
            owner,
        }));
        if let Some(log) = &adapter.0.validation {
            if adapter.drm_modifier_list2_is_empty() {
                tracing::info!(
                    "the driver fills VkDrmFormatModifierPropertiesListEXT but leaves the List2 variant empty; \
                     the validation layer reads the latter, so its 'format features (0x0)' reports for \
                     DRM-tiled images are set aside as known false positives"
                );
                log.set_drm_features_unreliable();
            }
        }
        adapter
    }

    pub fn entry(&self) -> &ash::Entry {
        &self.0.entry
    }

    pub fn instance(&self) -> &ash::Instance {
        &self.0.instance
    }

    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.0.physical
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.0.info
    }

    /// The queue family an engine on this adapter submits to.
    pub fn queue_family(&self) -> u32 {
        self.0.queue_family
    }

    /// The device extensions an engine on this adapter enables (a host's: those it enabled).
    pub fn extensions(&self) -> &EnabledExtensions {
        &self.0.extensions
    }

    pub fn features(&self) -> EnabledFeatures {
        self.0.features
    }

    /// Each capability, with what it needs and what of that an engine here lacks.
    pub fn requirements(&self) -> &Requirements {
        &self.0.requirements
    }

    /// The capabilities an engine on this adapter has.
    pub fn capabilities(&self) -> Vec<Capability> {
        self.0.requirements.available_capabilities()
    }

    pub fn has_capability(&self, c: Capability) -> bool {
        self.0.requirements.available(c)
    }

    /// The validation layer's messages, when validation is on.
    pub fn validation(&self) -> Option<&ValidationLog> {
        self.0.validation.as_ref()
    }

    /// True when `VK_EXT_image_drm_format_modifier` is (to be) enabled: explicit modifiers exist.
    pub fn has_modifiers(&self) -> bool {
        self.0.extensions.has(DeviceExtension::ImageDrmFormatModifier)
    }

    /// Why this device answers queries but cannot be opened ([`Adapter::open`] refuses it);
    /// `None` for an ordinary device.
    pub fn queries_only(&self) -> Option<&'static str> {
        self.0.queries_only
    }

    /// Whether a validation-layer message (its text) is a known false positive on this
    /// device: the "format features (0x0)" report for DRM-tiled images on a driver that
    /// leaves `VkDrmFormatModifierPropertiesList2EXT` empty, and older layers' report of a
    /// multi-planar image's plane formats in its view-format list. For a host that runs its own
    /// debug messenger; an engine with validation on sets these aside itself.
    pub fn is_known_false_positive(&self, message: &str) -> bool {
        crate::device::validation::is_known_report(message, self.drm_modifier_list2_is_empty())
    }

    /// True when the driver lists DRM modifiers through `VkDrmFormatModifierPropertiesListEXT`
    /// but leaves `VkDrmFormatModifierPropertiesList2EXT` empty (lavapipe 25.0 does). The
    /// validation layer reads the List2 variant whenever the device offers
    /// `VK_KHR_format_feature_flags2`, so it then computes "no features" for every
    /// DRM-tiled image. dmabridge itself reads the v1 list.
    pub fn drm_modifier_list2_is_empty(&self) -> bool {
        if !self.has_modifiers() {
            return false;
        }
        let format = vk::Format::R8G8B8A8_UNORM;
        let mut v1 = vk::DrmFormatModifierPropertiesListEXT::default();
        let mut p1 = vk::FormatProperties2::default().push_next(&mut v1);
        // SAFETY: the device offers the modifier extension, so both list structs are valid
        // pNext members of VkFormatProperties2 (VUID-VkFormatProperties2-pNext-pNext); null
        // arrays make the calls write counts only.
        unsafe { self.instance().get_physical_device_format_properties2(self.physical_device(), format, &mut p1) };
        let mut v2 = vk::DrmFormatModifierPropertiesList2EXT::default();
        let mut p2 = vk::FormatProperties2::default().push_next(&mut v2);
        // SAFETY: as above.
        unsafe { self.instance().get_physical_device_format_properties2(self.physical_device(), format, &mut p2) };
        v1.drm_format_modifier_count > 0 && v2.drm_format_modifier_count == 0
    }

    /// Creates the device on this adapter, with the extensions and features it lists
    /// ([`Adapter::open`] makes the engine on it). A device that answers queries only is
    /// refused ([`EngineError::QueriesOnly`]) before anything is created on it.
    pub(crate) fn create_device(&self) -> Result<ash::Device, EngineError> {
        if let Some(reason) = self.0.queries_only {
            return Err(EngineError::QueriesOnly { device: self.0.info.name.clone(), reason });
        }
        let name_ptrs: Vec<_> = self.0.extension_names.iter().map(|n| n.as_ptr()).collect();
        let (mut timeline, mut ycbcr) = self.0.features.create_info_structs();
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(self.0.queue_family).queue_priorities(&priorities)];
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&name_ptrs)
            .push_next(&mut timeline)
            .push_next(&mut ycbcr);
        // SAFETY: every extension name was offered by the device and its dependencies are
        // enabled too (VUID-vkCreateDevice-ppEnabledExtensionNames-01387); only supported
        // features are enabled; the queue family exists (VUID-VkDeviceQueueCreateInfo-queueFamilyIndex-00381).
        let device = unsafe { self.instance().create_device(self.0.physical, &info, None) }.vk("vkCreateDevice")?;
        Ok(device)
    }
}

/// Why a device answers queries but must not be opened. radv's null device (no GPU; chosen
/// with `RADV_FORCE_FAMILY`) names itself "Null hardware"; its null winsys crashes in
/// `vkCreateImage` and `vkDestroyDevice` (found on Mesa 25.0.7).
fn queries_only(info: &DeviceInfo) -> Option<&'static str> {
    (info.driver_id == vk::DriverId::MESA_RADV && info.name.starts_with("Null hardware")).then_some(
        "radv's null device (RADV_FORCE_FAMILY, no GPU): its null winsys crashes in vkCreateImage and vkDestroyDevice, so dmabridge only queries it",
    )
}

/// The physical device `options` selects, with what it offers.
struct Chosen {
    physical: vk::PhysicalDevice,
    queue_family: u32,
    offered: Offered,
    requirements: Requirements,
}

fn choose(instance: &ash::Instance, options: &EngineOptions) -> Result<Chosen, EngineError> {
    // SAFETY: plain query of a valid instance.
    let devices = unsafe { instance.enumerate_physical_devices() }.vk("vkEnumeratePhysicalDevices")?;
    let extra = &options.device_extensions;
    let mut candidates: Vec<(usize, Chosen)> = devices
        .iter()
        .enumerate()
        .filter_map(|(i, &pd)| {
            let offered = Offered::query(instance, pd);
            let has_extra = extra.iter().all(|e| offered.extensions.contains(e));
            let requirements = evaluate(&offered, |e| offered.extensions.iter().any(|n| n.as_c_str() == e.name()), offered.features);
            let queue_family = pick_queue_family(instance, pd)?;
            (has_extra && requirements.available(Capability::Core)).then_some((i, Chosen { physical: pd, queue_family, offered, requirements }))
        })
        .collect();
    let position = match &options.device {
        Some(sel) => candidates.iter().position(|(i, c)| match sel {
            DeviceSelector::Index(n) => i == n,
            DeviceSelector::Name(s) => device_name(instance, c.physical).to_lowercase().contains(&s.to_lowercase()),
        }),
        None => candidates
            .iter()
            .enumerate()
            .min_by_key(|(_, (i, c))| {
                // SAFETY: the physical device comes from this instance.
                let t = unsafe { instance.get_physical_device_properties(c.physical) }.device_type;
                (type_rank(t), *i)
            })
            .map(|(at, _)| at),
    };
    match (position, &options.device) {
        (Some(at), _) => Ok(candidates.swap_remove(at).1),
        (None, Some(sel)) => {
            let available = devices.iter().enumerate().map(|(i, pd)| format!("{i}: {}", device_name(instance, *pd))).collect::<Vec<_>>().join(", ");
            Err(EngineError::NoSuchDevice { selector: sel.clone(), available })
        }
        (None, None) => Err(EngineError::NoDevice),
    }
}

fn create_instance(entry: &ash::Entry, validation: bool, extra: &[CString]) -> Result<ash::Instance, EngineError> {
    // SAFETY: plain queries of the loader.
    let loader_version = unsafe { entry.try_enumerate_instance_version() }
        .vk("vkEnumerateInstanceVersion")?
        .unwrap_or(vk::API_VERSION_1_0);
    if loader_version < MIN_API_VERSION {
        return Err(EngineError::NoDevice);
    }
    let api_version = loader_version.min(vk::API_VERSION_1_3);
    let mut layers: Vec<*const std::ffi::c_char> = Vec::new();
    let mut extensions: Vec<*const std::ffi::c_char> = Vec::new();
    if validation {
        // SAFETY: as above.
        let available = unsafe { entry.enumerate_instance_layer_properties() }.vk("vkEnumerateInstanceLayerProperties")?;
        if !available.iter().any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == LAYER_NAME)) {
            return Err(EngineError::NoValidationLayer);
        }
        layers.push(LAYER_NAME.as_ptr());
        extensions.push(ash::ext::debug_utils::NAME.as_ptr());
    }
    if !extra.is_empty() {
        // SAFETY: plain query of the loader.
        let available = unsafe { entry.enumerate_instance_extension_properties(None) }.vk("vkEnumerateInstanceExtensionProperties")?;
        for name in extra {
            if !available.iter().any(|p| p.extension_name_as_c_str().is_ok_and(|n| n == name.as_c_str())) {
                return Err(EngineError::MissingInstanceExtension(name.to_string_lossy().into_owned()));
            }
            extensions.push(name.as_ptr());
        }
    }
    let app = vk::ApplicationInfo::default().application_name(c"dmabridge").engine_name(c"dmabridge").api_version(api_version);
    let info = vk::InstanceCreateInfo::default().application_info(&app).enabled_layer_names(&layers).enabled_extension_names(&extensions);
    // SAFETY: the layer and extension names are C strings that were checked (or, for
    // debug_utils, are provided by the validation layer) (VUID-vkCreateInstance-ppEnabledExtensionNames-01388).
    unsafe { entry.create_instance(&info, None) }.vk("vkCreateInstance").map_err(Into::into)
}

fn device_name(instance: &ash::Instance, pd: vk::PhysicalDevice) -> String {
    // SAFETY: pd comes from this instance.
    let props = unsafe { instance.get_physical_device_properties(pd) };
    props.device_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

pub(crate) fn device_info(instance: &ash::Instance, pd: vk::PhysicalDevice) -> DeviceInfo {
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver).push_next(&mut id);
    // SAFETY: pd comes from this instance, which is Vulkan >= 1.2 (checked at selection),
    // and both chained structs are allowed in VkPhysicalDeviceProperties2
    // (VUID-VkPhysicalDeviceProperties2-pNext-pNext).
    unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
    let p = props2.properties;
    let text = |r: Result<&CStr, _>| r.map(|c: &CStr| c.to_string_lossy().into_owned()).unwrap_or_default();
    DeviceInfo {
        name: text(p.device_name_as_c_str()),
        driver_name: text(driver.driver_name_as_c_str()),
        driver_info: text(driver.driver_info_as_c_str()),
        driver_id: driver.driver_id,
        api_version: format!(
            "{}.{}.{}",
            vk::api_version_major(p.api_version),
            vk::api_version_minor(p.api_version),
            vk::api_version_patch(p.api_version)
        ),
        api_version_raw: p.api_version,
        device_type: p.device_type,
        device_uuid: id.device_uuid,
        driver_uuid: id.driver_uuid,
        max_image_dimension_2d: p.limits.max_image_dimension2_d,
    }
}

fn type_rank(t: vk::PhysicalDeviceType) -> u8 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

/// The queue family dmabridge uses: compute is required (conversion shaders); graphics
/// and compute together is preferred (the presenter and demo render).
fn pick_queue_family(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Option<u32> {
    // SAFETY: pd comes from this instance.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    let with = |flags: vk::QueueFlags| families.iter().position(|f| f.queue_count > 0 && f.queue_flags.contains(flags));
    with(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE).or_else(|| with(vk::QueueFlags::COMPUTE)).and_then(|i| u32::try_from(i).ok())
}
