//! The Vulkan device dmabridge works on: one it creates itself, or one a host engine hands it.
//!
//! Either way the [`Engine`] records which of dmabridge's extensions are enabled and what
//! the device is, and never reconfigures what it was given. Only an engine that created
//! its instance and device destroys them.

use std::ffi::{CStr, CString};
use std::sync::Mutex;

use ash::vk;

use crate::caps::CapsCache;
use crate::extensions::{DeviceExtension, EnabledExtensions};
use crate::validation::{Messenger, ValidationLog, LAYER_NAME};

/// How to pick a physical device when there are several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The n-th device as the loader enumerates them.
    Index(usize),
    /// The first device whose name contains this text (case-insensitive).
    Name(String),
}

impl DeviceSelector {
    /// `DMABRIDGE_DEVICE=2` picks by index, any other text by name.
    pub fn parse(s: &str) -> Self {
        s.parse().map(DeviceSelector::Index).unwrap_or_else(|_| DeviceSelector::Name(s.to_owned()))
    }
}

/// How [`Engine::new`] sets things up.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Enable `VK_LAYER_KHRONOS_validation` and collect what it says.
    pub validation: bool,
    /// Which device; `None` takes the best one (discrete > integrated > virtual > CPU).
    pub device: Option<DeviceSelector>,
    /// Instance extensions the caller needs besides dmabridge's own (e.g. the surface
    /// extensions `ash_window::enumerate_required_extensions` names). Creation fails if
    /// the loader lacks one.
    pub instance_extensions: Vec<CString>,
    /// Device extensions the caller needs besides dmabridge's wish list (e.g.
    /// `VK_KHR_swapchain`). A device that lacks one is not chosen.
    pub device_extensions: Vec<CString>,
}

impl EngineOptions {
    /// `DMABRIDGE_VALIDATION=1` turns validation on; `DMABRIDGE_DEVICE` selects the device.
    pub fn from_env() -> Self {
        EngineOptions {
            validation: std::env::var("DMABRIDGE_VALIDATION").is_ok_and(|v| v == "1" || v == "true"),
            device: std::env::var("DMABRIDGE_DEVICE").ok().filter(|s| !s.is_empty()).map(|s| DeviceSelector::parse(&s)),
            ..EngineOptions::default()
        }
    }
}

/// Why an engine could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot load the Vulkan loader: {0}")]
    Loader(#[from] ash::LoadingError),
    #[error("{call} failed: {result}")]
    Vk { call: &'static str, result: vk::Result },
    #[error("validation was requested but VK_LAYER_KHRONOS_validation is not installed (run scripts/setup.sh)")]
    NoValidationLayer,
    #[error("no Vulkan device supports Vulkan 1.1 and compute")]
    NoDevice,
    #[error("no device matches {selector:?}; there are: {available}")]
    NoSuchDevice { selector: DeviceSelector, available: String },
    #[error("queue family {0} does not exist on the host's device")]
    BadQueueFamily(u32),
    #[error("the Vulkan loader lacks instance extension {0}")]
    MissingInstanceExtension(String),
}

pub(crate) fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> EngineError {
    move |result| EngineError::Vk { call, result }
}

/// What the device is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceInfo {
    pub name: String,
    /// `VkPhysicalDeviceDriverProperties::driverName` (e.g. "llvmpipe").
    pub driver_name: String,
    /// `driverInfo` (e.g. "Mesa 25.0.7 (LLVM 15.0.6)").
    pub driver_info: String,
    /// "major.minor.patch" of the device's API version.
    pub api_version: String,
    #[serde(skip)]
    pub api_version_raw: u32,
    #[serde(skip)]
    pub device_type: vk::PhysicalDeviceType,
    /// `deviceUUID`: two engines with the same one can share OPAQUE_FD memory.
    #[serde(skip)]
    pub device_uuid: [u8; 16],
    #[serde(skip)]
    pub driver_uuid: [u8; 16],
}

/// Everything a host engine that already runs Vulkan hands over for embedding.
pub struct HostVulkan {
    pub entry: ash::Entry,
    pub instance: ash::Instance,
    pub physical_device: vk::PhysicalDevice,
    pub device: ash::Device,
    pub queue_family_index: u32,
    pub queue_index: u32,
    /// The device extensions the host enabled (dmabridge uses only those).
    pub enabled_device_extensions: Vec<CString>,
}

struct Owned {
    messenger: Option<Messenger>,
}

/// A Vulkan device as dmabridge uses it.
pub struct Engine {
    entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    device: ash::Device,
    queue_family: u32,
    queue: Mutex<vk::Queue>,
    extensions: EnabledExtensions,
    info: DeviceInfo,
    validation: Option<ValidationLog>,
    owned: Option<Owned>,
    pub(crate) caps_cache: CapsCache,
    external_memory_fd: Option<ash::khr::external_memory_fd::Device>,
    drm_format_modifier: Option<ash::ext::image_drm_format_modifier::Device>,
}

impl Engine {
    /// Creates an instance and a device of its own, on the best device or the selected one.
    pub fn new(options: &EngineOptions) -> Result<Engine, EngineError> {
        // SAFETY: loading the system Vulkan loader runs its initialisers; nothing else in
        // the process depends on it not being loaded.
        let entry = unsafe { ash::Entry::load()? };
        let validation = options.validation.then(ValidationLog::default);
        let instance = create_instance(&entry, validation.is_some(), &options.instance_extensions)?;
        // From here on the instance must be destroyed on every error path.
        let messenger = match &validation {
            Some(log) => match Messenger::new(&entry, &instance, log.clone()) {
                Ok(m) => Some(m),
                Err(result) => {
                    // SAFETY: no child object of the instance exists yet (VUID-vkDestroyInstance-instance-00629).
                    unsafe { instance.destroy_instance(None) };
                    return Err(EngineError::Vk { call: "vkCreateDebugUtilsMessengerEXT", result });
                }
            },
            None => None,
        };
        let result = create_device(&instance, options.device.as_ref(), &options.device_extensions);
        let (physical, device, queue_family, extensions) = match result {
            Ok(v) => v,
            Err(e) => {
                drop(messenger);
                // SAFETY: the messenger, the only child, was destroyed just above.
                unsafe { instance.destroy_instance(None) };
                return Err(e);
            }
        };
        let engine = Self::assemble(entry, instance, physical, device, queue_family, 0, extensions, validation, Some(Owned {
            messenger,
        }));
        if let Some(log) = &engine.validation {
            if engine.drm_modifier_list2_is_empty() {
                tracing::info!(
                    "the driver fills VkDrmFormatModifierPropertiesListEXT but leaves the List2 variant empty; \
                     the validation layer reads the latter, so its 'format features (0x0)' reports for \
                     DRM-tiled images are set aside as known false positives"
                );
                log.set_drm_features_unreliable();
            }
        }
        Ok(engine)
    }

    /// Wraps a host engine's instance and device. dmabridge uses the extensions the host
    /// enabled and nothing more, and destroys nothing when it is dropped.
    ///
    /// # Safety
    /// The handles must be valid, the device must have been created from `physical_device`
    /// of `instance` with `enabled_device_extensions` and a queue at
    /// (`queue_family_index`, `queue_index`), and all of them must outlive the `Engine`.
    /// The host must not use that queue concurrently with dmabridge without its own lock.
    pub unsafe fn from_host(host: HostVulkan) -> Result<Engine, EngineError> {
        // SAFETY: the caller guarantees the physical device belongs to the instance.
        let families = unsafe { host.instance.get_physical_device_queue_family_properties(host.physical_device) };
        if host.queue_family_index as usize >= families.len() {
            return Err(EngineError::BadQueueFamily(host.queue_family_index));
        }
        let extensions = EnabledExtensions::from_names(host.enabled_device_extensions.iter().map(|c| c.as_c_str()));
        Ok(Self::assemble(
            host.entry,
            host.instance,
            host.physical_device,
            host.device,
            host.queue_family_index,
            host.queue_index,
            extensions,
            None,
            None,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        entry: ash::Entry,
        instance: ash::Instance,
        physical: vk::PhysicalDevice,
        device: ash::Device,
        queue_family: u32,
        queue_index: u32,
        extensions: EnabledExtensions,
        validation: Option<ValidationLog>,
        owned: Option<Owned>,
    ) -> Engine {
        // SAFETY: the device was created with a queue at this family and index (our own
        // create_device, or the host's promise in from_host).
        let queue = unsafe { device.get_device_queue(queue_family, queue_index) };
        let info = device_info(&instance, physical);
        let external_memory_fd = extensions
            .has(DeviceExtension::ExternalMemoryFd)
            .then(|| ash::khr::external_memory_fd::Device::new(&instance, &device));
        let drm_format_modifier = extensions
            .has(DeviceExtension::ImageDrmFormatModifier)
            .then(|| ash::ext::image_drm_format_modifier::Device::new(&instance, &device));
        tracing::info!(
            device = %info.name,
            driver = %info.driver_info,
            extensions = ?extensions.iter().collect::<Vec<_>>(),
            embedded = owned.is_none(),
            "dmabridge engine ready"
        );
        Engine {
            entry,
            instance,
            physical,
            device,
            queue_family,
            queue: Mutex::new(queue),
            extensions,
            info,
            validation,
            owned,
            caps_cache: CapsCache::default(),
            external_memory_fd,
            drm_format_modifier,
        }
    }

    pub fn entry(&self) -> &ash::Entry {
        &self.entry
    }

    pub fn instance(&self) -> &ash::Instance {
        &self.instance
    }

    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.physical
    }

    pub fn device(&self) -> &ash::Device {
        &self.device
    }

    pub fn queue_family(&self) -> u32 {
        self.queue_family
    }

    /// The queue, behind the lock that Vulkan's external-synchronisation rule for
    /// `vkQueueSubmit` asks for (VUID-vkQueueSubmit-queue-parameter: host access to queue
    /// must be externally synchronized).
    pub fn queue(&self) -> std::sync::MutexGuard<'_, vk::Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn extensions(&self) -> &EnabledExtensions {
        &self.extensions
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Whether the engine created (and will destroy) its own instance and device.
    pub fn is_embedded(&self) -> bool {
        self.owned.is_none()
    }

    /// The validation layer's messages, when this engine turned validation on.
    pub fn validation(&self) -> Option<&ValidationLog> {
        self.validation.as_ref()
    }

    pub fn external_memory_fd(&self) -> Option<&ash::khr::external_memory_fd::Device> {
        self.external_memory_fd.as_ref()
    }

    pub fn drm_format_modifier(&self) -> Option<&ash::ext::image_drm_format_modifier::Device> {
        self.drm_format_modifier.as_ref()
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
        // SAFETY: the modifier extension is enabled, so both list structs are valid pNext
        // members of VkFormatProperties2 (VUID-VkFormatProperties2-pNext-pNext); null arrays
        // make the calls write counts only.
        unsafe { self.instance.get_physical_device_format_properties2(self.physical, format, &mut p1) };
        let mut v2 = vk::DrmFormatModifierPropertiesList2EXT::default();
        let mut p2 = vk::FormatProperties2::default().push_next(&mut v2);
        // SAFETY: as above.
        unsafe { self.instance.get_physical_device_format_properties2(self.physical, format, &mut p2) };
        v1.drm_format_modifier_count > 0 && v2.drm_format_modifier_count == 0
    }

    /// True when `VK_EXT_image_drm_format_modifier` is enabled: explicit modifiers exist.
    pub fn has_modifiers(&self) -> bool {
        self.drm_format_modifier.is_some()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let Some(owned) = self.owned.take() else { return };
        // SAFETY: this engine created the device and instance; every object dmabridge made
        // from them borrows the engine, so none is alive now
        // (VUID-vkDestroyDevice-device-05137, VUID-vkDestroyInstance-instance-00629).
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
        }
        drop(owned.messenger);
        // SAFETY: as above; the messenger was the last child of the instance.
        unsafe { self.instance.destroy_instance(None) };
    }
}

fn create_instance(entry: &ash::Entry, validation: bool, extra: &[CString]) -> Result<ash::Instance, EngineError> {
    // SAFETY: plain queries of the loader.
    let loader_version = unsafe { entry.try_enumerate_instance_version() }
        .map_err(vk_err("vkEnumerateInstanceVersion"))?
        .unwrap_or(vk::API_VERSION_1_0);
    let api_version = loader_version.min(vk::API_VERSION_1_3);
    let mut layers: Vec<*const std::ffi::c_char> = Vec::new();
    let mut extensions: Vec<*const std::ffi::c_char> = Vec::new();
    if validation {
        // SAFETY: as above.
        let available = unsafe { entry.enumerate_instance_layer_properties() }
            .map_err(vk_err("vkEnumerateInstanceLayerProperties"))?;
        if !available.iter().any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == LAYER_NAME)) {
            return Err(EngineError::NoValidationLayer);
        }
        layers.push(LAYER_NAME.as_ptr());
        extensions.push(ash::ext::debug_utils::NAME.as_ptr());
    }
    if !extra.is_empty() {
        // SAFETY: plain query of the loader.
        let available = unsafe { entry.enumerate_instance_extension_properties(None) }
            .map_err(vk_err("vkEnumerateInstanceExtensionProperties"))?;
        for name in extra {
            if !available.iter().any(|p| p.extension_name_as_c_str().is_ok_and(|n| n == name.as_c_str())) {
                return Err(EngineError::MissingInstanceExtension(name.to_string_lossy().into_owned()));
            }
            extensions.push(name.as_ptr());
        }
    }
    let app = vk::ApplicationInfo::default()
        .application_name(c"dmabridge")
        .engine_name(c"dmabridge")
        .api_version(api_version);
    let info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layers)
        .enabled_extension_names(&extensions);
    // SAFETY: the layer and extension names are static C strings that were checked (or, for
    // debug_utils, are provided by the validation layer) (VUID-vkCreateInstance-ppEnabledExtensionNames-01388).
    unsafe { entry.create_instance(&info, None) }.map_err(vk_err("vkCreateInstance"))
}

fn device_name(instance: &ash::Instance, pd: vk::PhysicalDevice) -> String {
    // SAFETY: pd comes from this instance.
    let props = unsafe { instance.get_physical_device_properties(pd) };
    props.device_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

fn device_info(instance: &ash::Instance, pd: vk::PhysicalDevice) -> DeviceInfo {
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver).push_next(&mut id);
    // SAFETY: pd comes from this instance, which is Vulkan >= 1.1 (checked at selection),
    // and both chained structs are allowed in VkPhysicalDeviceProperties2
    // (VUID-VkPhysicalDeviceProperties2-pNext-pNext).
    unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
    let p = props2.properties;
    let text = |r: Result<&CStr, _>| r.map(|c: &CStr| c.to_string_lossy().into_owned()).unwrap_or_default();
    DeviceInfo {
        name: text(p.device_name_as_c_str()),
        driver_name: text(driver.driver_name_as_c_str()),
        driver_info: text(driver.driver_info_as_c_str()),
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
    with(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE)
        .or_else(|| with(vk::QueueFlags::COMPUTE))
        .and_then(|i| u32::try_from(i).ok())
}

type CreatedDevice = (vk::PhysicalDevice, ash::Device, u32, EnabledExtensions);

fn create_device(
    instance: &ash::Instance,
    selector: Option<&DeviceSelector>,
    extra: &[CString],
) -> Result<CreatedDevice, EngineError> {
    // SAFETY: plain query of a valid instance.
    let devices = unsafe { instance.enumerate_physical_devices() }.map_err(vk_err("vkEnumeratePhysicalDevices"))?;
    let candidates: Vec<(usize, vk::PhysicalDevice, u32)> = devices
        .iter()
        .enumerate()
        .filter_map(|(i, &pd)| {
            // SAFETY: pd comes from this instance.
            let props = unsafe { instance.get_physical_device_properties(pd) };
            // SAFETY: pd comes from this instance.
            let offered = unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default();
            let has_extra = extra
                .iter()
                .all(|e| offered.iter().any(|p| p.extension_name_as_c_str().is_ok_and(|n| n == e.as_c_str())));
            (props.api_version >= vk::API_VERSION_1_1 && has_extra)
                .then(|| pick_queue_family(instance, pd).map(|q| (i, pd, q)))
                .flatten()
        })
        .collect();
    let chosen = match selector {
        Some(sel) => candidates.iter().find(|(i, pd, _)| match sel {
            DeviceSelector::Index(n) => i == n,
            DeviceSelector::Name(s) => device_name(instance, *pd).to_lowercase().contains(&s.to_lowercase()),
        }),
        None => candidates.iter().min_by_key(|(i, pd, _)| {
            // SAFETY: pd comes from this instance.
            let t = unsafe { instance.get_physical_device_properties(*pd) }.device_type;
            (type_rank(t), *i)
        }),
    };
    let &(_, physical, queue_family) = match (chosen, selector) {
        (Some(c), _) => c,
        (None, Some(sel)) => {
            let available = devices
                .iter()
                .enumerate()
                .map(|(i, pd)| format!("{i}: {}", device_name(instance, *pd)))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(EngineError::NoSuchDevice { selector: sel.clone(), available });
        }
        (None, None) => return Err(EngineError::NoDevice),
    };

    // SAFETY: physical comes from this instance.
    let available = unsafe { instance.enumerate_device_extension_properties(physical) }
        .map_err(vk_err("vkEnumerateDeviceExtensionProperties"))?;
    let extensions = EnabledExtensions::choose(&available);
    let mut names = extensions.names();
    names.extend(extra.iter().filter(|e| !names.contains(e)).cloned().collect::<Vec<_>>());
    let name_ptrs: Vec<_> = names.iter().map(|n| n.as_ptr()).collect();

    let mut ycbcr = vk::PhysicalDeviceSamplerYcbcrConversionFeatures::default();
    let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut ycbcr);
    // SAFETY: Vulkan 1.1 core query with a chain the spec allows
    // (VUID-VkPhysicalDeviceFeatures2-pNext-pNext).
    unsafe { instance.get_physical_device_features2(physical, &mut features2) };
    // Enable only what the device offers (VUID-VkDeviceCreateInfo-pNext-pNext, and a
    // feature must be supported to be enabled).
    let mut enable_ycbcr =
        vk::PhysicalDeviceSamplerYcbcrConversionFeatures::default().sampler_ycbcr_conversion(ycbcr.sampler_ycbcr_conversion == vk::TRUE);

    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(queue_family).queue_priorities(&priorities)];
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&name_ptrs)
        .push_next(&mut enable_ycbcr);
    // SAFETY: every extension name was offered by the device and its dependencies are
    // enabled too (VUID-vkCreateDevice-ppEnabledExtensionNames-01387); the queue family
    // index exists (VUID-VkDeviceQueueCreateInfo-queueFamilyIndex-00381).
    let device = unsafe { instance.create_device(physical, &info, None) }.map_err(vk_err("vkCreateDevice"))?;
    Ok((physical, device, queue_family, extensions))
}
