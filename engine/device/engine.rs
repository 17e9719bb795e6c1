//! The Vulkan device dmabridge works on: one it creates itself, or one a host engine hands it.
//!
//! An [`Engine`] is a cheap handle (an `Arc` inside): clone it into every thread and struct
//! that needs it. Images, buffers, converters and presenters hold a clone, so the device
//! lives until the last of them is dropped. Only an engine that created its instance and
//! device destroys them; an embedded one calls the host's drop callback instead.

use std::ffi::{CStr, CString};
use std::sync::Arc;

use ash::vk;

use crate::device::format_support::SupportCache;
use crate::error::{VkError, VkResultExt};
use crate::resources::memory::{Memory, MemoryError};
use crate::device::requirements::{
    evaluate, Capability, DeviceExtension, EnabledExtensions, EnabledFeatures, Missing, Offered, Requirements, MIN_API_VERSION,
};
use crate::resources::submit::{Garbage, Submitter};
use crate::device::validation::{Messenger, ValidationLog, LAYER_NAME};

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
    /// Also enable [`Capability::Present`] (`VK_KHR_swapchain`); the caller passes the
    /// window system's surface extensions in `instance_extensions`.
    pub present: bool,
    /// Instance extensions the caller needs besides dmabridge's own (e.g. the surface
    /// extensions `ash_window::enumerate_required_extensions` names). Creation fails if
    /// the loader lacks one.
    pub instance_extensions: Vec<CString>,
    /// Device extensions the caller needs besides dmabridge's own. A device that lacks one
    /// is not chosen.
    pub device_extensions: Vec<CString>,
    /// The path every conversion takes (`None`: the cost model's choice, see [`crate::convert::cost`]).
    pub convert_path: Option<crate::ConvertPath>,
    /// Where the cost model's measurements are kept between processes: the default file,
    /// another file, or none ([`crate::CostCache::Off`]: nothing is read or written).
    pub cost_cache: crate::CostCache,
}

impl EngineOptions {
    /// `DMABRIDGE_VALIDATION=1` turns validation on; `DMABRIDGE_DEVICE` selects the device;
    /// `DMABRIDGE_CONVERT_PATH=cpu|gpu|copy-commands` forces the conversion path (anything
    /// else, `auto` included, leaves it to the cost model); `DMABRIDGE_COST_CACHE=off|FILE`
    /// sets the cost model's cache ([`crate::CostCache::from_env`]).
    pub fn from_env() -> Self {
        EngineOptions {
            validation: std::env::var("DMABRIDGE_VALIDATION").is_ok_and(|v| v == "1" || v == "true"),
            device: std::env::var("DMABRIDGE_DEVICE").ok().filter(|s| !s.is_empty()).map(|s| DeviceSelector::parse(&s)),
            convert_path: std::env::var("DMABRIDGE_CONVERT_PATH").ok().and_then(|p| p.parse().ok()),
            cost_cache: crate::CostCache::from_env(),
            ..EngineOptions::default()
        }
    }
}

/// Why an engine could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The Vulkan loader (`libvulkan.so.1`) could not be loaded.
    #[error("cannot load the Vulkan loader: {0}")]
    Loader(#[from] ash::LoadingError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// Validation was asked for but the layer is not installed.
    #[error("validation was requested but VK_LAYER_KHRONOS_validation is not installed (run scripts/setup.sh)")]
    NoValidationLayer,
    /// No device meets dmabridge's core requirements.
    #[error("no Vulkan device supports Vulkan 1.2 with timeline semaphores and a compute queue")]
    NoDevice,
    /// The selector matched nothing.
    #[error("no device matches {selector:?}; there are: {available}")]
    NoSuchDevice { selector: DeviceSelector, available: String },
    /// The host named a queue family the device does not have, or one without compute.
    #[error("queue family {0} does not exist on the host's device or has no compute support")]
    BadQueueFamily(u32),
    /// The loader lacks an instance extension the caller asked for.
    #[error("the Vulkan loader lacks instance extension {0}")]
    MissingInstanceExtension(String),
    /// A host's device lacks what a mandatory capability needs.
    #[error("the host's device lacks what dmabridge's {capability} capability needs: {}",
        .missing.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "))]
    MissingRequirement { capability: Capability, missing: Vec<Missing> },
    /// The internal memory allocator could not be created.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// What the device is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceInfo {
    pub name: String,
    /// `VkPhysicalDeviceDriverProperties::driverName` (e.g. "llvmpipe").
    pub driver_name: String,
    /// `driverInfo` (e.g. "Mesa 25.0.7 (LLVM 15.0.6)").
    pub driver_info: String,
    /// `driverID`.
    #[serde(skip)]
    pub driver_id: vk::DriverId,
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
    /// `maxImageDimension2D`.
    #[serde(skip)]
    pub max_image_dimension_2d: u32,
}

/// Everything a host engine that already runs Vulkan hands over for embedding.
pub struct HostVulkan {
    pub entry: ash::Entry,
    pub instance: ash::Instance,
    /// The `apiVersion` the host created its instance with (at least Vulkan 1.2).
    pub instance_api_version: u32,
    pub physical_device: vk::PhysicalDevice,
    pub device: ash::Device,
    pub queue_family_index: u32,
    pub queue_index: u32,
    /// The device extensions the host enabled (dmabridge uses only those).
    pub enabled_device_extensions: Vec<CString>,
    /// The features the host enabled (see [`crate::device::requirements`]).
    pub enabled_features: EnabledFeatures,
    /// Called once, after dmabridge has destroyed everything it made on the device and the
    /// last [`Engine`] clone is gone: the host may destroy the device from here on.
    pub on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

enum Ownership {
    /// dmabridge created the instance and device and destroys them.
    Owned { messenger: Option<Messenger> },
    /// The host's; dmabridge calls the host's callback when it is done with them.
    Host { on_drop: Option<Box<dyn FnOnce() + Send + Sync>> },
}

/// What every clone of an [`Engine`] shares.
pub(crate) struct DeviceShared {
    entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    device: ash::Device,
    queue_family: u32,
    extensions: EnabledExtensions,
    features: EnabledFeatures,
    requirements: Requirements,
    info: DeviceInfo,
    validation: Option<ValidationLog>,
    pub(crate) support_cache: SupportCache,
    pub(crate) cost: crate::convert::cost::CostModel,
    external_memory_fd: Option<ash::khr::external_memory_fd::Device>,
    drm_format_modifier: Option<ash::ext::image_drm_format_modifier::Device>,
    external_semaphore_fd: Option<ash::khr::external_semaphore_fd::Device>,
    pub(crate) memory: Memory,
    pub(crate) submitter: Submitter,
    ownership: Ownership,
}

impl DeviceShared {
    pub(crate) fn device(&self) -> &ash::Device {
        &self.device
    }

    pub(crate) fn sync_file_fn(&self) -> Option<&ash::khr::external_semaphore_fd::Device> {
        self.external_semaphore_fd.as_ref()
    }

    /// Destroys `garbage` once every point in `uses` is reached (now, if they are).
    pub(crate) fn retire(&self, uses: Vec<crate::resources::submit::Completion>, garbage: Vec<Garbage>) {
        self.submitter.retire(&self.device, &self.memory, uses, garbage);
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        // Every handle holds an Engine clone, so nothing dmabridge made is alive except what
        // waits in the graveyard and the submitter's own objects.
        self.submitter.shutdown(&self.device, &self.memory);
        self.memory.shutdown();
        match &mut self.ownership {
            Ownership::Owned { messenger } => {
                // SAFETY: this engine created the device and instance; every object made from
                // them was destroyed above (VUID-vkDestroyDevice-device-05137), and the
                // messenger is the instance's last child (VUID-vkDestroyInstance-instance-00629).
                unsafe {
                    let _ = self.device.device_wait_idle();
                    self.device.destroy_device(None);
                }
                drop(messenger.take());
                // SAFETY: as above.
                unsafe { self.instance.destroy_instance(None) };
            }
            Ownership::Host { on_drop } => {
                if let Some(f) = on_drop.take() {
                    f();
                }
            }
        }
    }
}

/// A Vulkan device as dmabridge uses it. Cheap to clone; `Send` and `Sync`: the device and
/// instance are thread-safe in Vulkan's sense except where external synchronisation is
/// required (the queue and command pool, behind [`Engine::lock_queue`]'s lock; the
/// allocator, behind its own).
#[derive(Clone)]
pub struct Engine(Arc<DeviceShared>);

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("device", &self.0.info.name).field("embedded", &self.is_embedded()).finish()
    }
}

impl Engine {
    /// Creates an instance and a device of its own, on the best device or the selected one,
    /// with every capability the device offers (see [`crate::device::requirements`]).
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
                    return Err(VkError { call: "vkCreateDebugUtilsMessengerEXT", result }.into());
                }
            },
            None => None,
        };
        let created = create_device(&instance, options);
        let created = match created {
            Ok(v) => v,
            Err(e) => {
                drop(messenger);
                // SAFETY: the messenger, the only child, was destroyed just above.
                unsafe { instance.destroy_instance(None) };
                return Err(e);
            }
        };
        let assembled = assemble(
            entry,
            instance.clone(),
            created.physical,
            created.device.clone(),
            created.queue_family,
            0,
            created.extensions,
            created.features,
            validation,
            &options.cost_cache,
            Ownership::Owned { messenger },
        );
        let engine = match assembled {
            Ok(e) => e,
            Err((e, Ownership::Owned { messenger })) => {
                // SAFETY: nothing was created on the device (assemble cleans up after itself).
                unsafe { created.device.destroy_device(None) };
                drop(messenger);
                // SAFETY: its last child is gone.
                unsafe { instance.destroy_instance(None) };
                return Err(e);
            }
            Err((e, _)) => return Err(e),
        };
        if let Some(log) = &engine.0.validation {
            if engine.drm_modifier_list2_is_empty() {
                tracing::info!(
                    "the driver fills VkDrmFormatModifierPropertiesListEXT but leaves the List2 variant empty; \
                     the validation layer reads the latter, so its 'format features (0x0)' reports for \
                     DRM-tiled images are set aside as known false positives"
                );
                log.set_drm_features_unreliable();
            }
        }
        engine.set_convert_path(options.convert_path);
        Ok(engine)
    }

    /// Wraps a host engine's instance and device. dmabridge uses the extensions and features
    /// the host enabled and nothing more; it checks them against [`crate::device::requirements`]
    /// and refuses a device that lacks what [`Capability::Core`] needs, naming it. Other
    /// capabilities the host did not enable are reported by [`Engine::capabilities`]. Its
    /// cost model's cache follows `DMABRIDGE_COST_CACHE` ([`crate::CostCache::from_env`]).
    ///
    /// # Safety
    /// - Every handle is valid: the device was created from `physical_device` of `instance`
    ///   with exactly `enabled_device_extensions` and `enabled_features`, and a queue at
    ///   (`queue_family_index`, `queue_index`).
    /// - They outlive every clone of the returned `Engine` and every handle made from it;
    ///   the host destroys the device only after `on_drop` has run (or, without a callback,
    ///   after it has dropped all of them).
    /// - The host submits to that queue only while holding [`Engine::lock_queue`].
    /// - Work the host recorded with dmabridge's `record_*` functions has completed before
    ///   the last `Engine` clone is dropped.
    pub unsafe fn from_host(host: HostVulkan) -> Result<Engine, EngineError> {
        // SAFETY: the caller guarantees the physical device belongs to the instance.
        let families = unsafe { host.instance.get_physical_device_queue_family_properties(host.physical_device) };
        let family_ok = families
            .get(host.queue_family_index as usize)
            .is_some_and(|f| f.queue_count > host.queue_index && f.queue_flags.contains(vk::QueueFlags::COMPUTE));
        if !family_ok {
            return Err(EngineError::BadQueueFamily(host.queue_family_index));
        }
        let extensions = EnabledExtensions::from_names(host.enabled_device_extensions.iter().map(|c| c.as_c_str()));
        let offered = Offered::query(&host.instance, host.physical_device);
        let api = offered.api_version.min(host.instance_api_version);
        let checked = evaluate(&Offered { api_version: api, ..offered }, |e| extensions.has(e), host.enabled_features);
        if let Some(core) = checked.get(Capability::Core).filter(|r| !r.available()) {
            return Err(EngineError::MissingRequirement { capability: Capability::Core, missing: core.missing.clone() });
        }
        assemble(
            host.entry,
            host.instance,
            host.physical_device,
            host.device,
            host.queue_family_index,
            host.queue_index,
            extensions,
            host.enabled_features,
            None,
            // A host hands over no options: the environment decides (default file, or
            // DMABRIDGE_COST_CACHE).
            &crate::CostCache::from_env(),
            Ownership::Host { on_drop: host.on_drop },
        )
        .map_err(|(e, _)| e)
    }

    pub(crate) fn shared(&self) -> &DeviceShared {
        &self.0
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

    pub fn device(&self) -> &ash::Device {
        &self.0.device
    }

    pub fn queue_family(&self) -> u32 {
        self.0.queue_family
    }

    pub fn extensions(&self) -> &EnabledExtensions {
        &self.0.extensions
    }

    pub fn features(&self) -> EnabledFeatures {
        self.0.features
    }

    /// Each capability, with what it needs and what of that this engine lacks.
    pub fn requirements(&self) -> &Requirements {
        &self.0.requirements
    }

    /// The capabilities this engine has.
    pub fn capabilities(&self) -> Vec<Capability> {
        self.0.requirements.available_capabilities()
    }

    pub fn has_capability(&self, c: Capability) -> bool {
        self.0.requirements.available(c)
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.0.info
    }

    /// Whether the engine wraps a host's device (and will not destroy it).
    pub fn is_embedded(&self) -> bool {
        matches!(self.0.ownership, Ownership::Host { .. })
    }

    /// The validation layer's messages, when this engine turned validation on.
    pub fn validation(&self) -> Option<&ValidationLog> {
        self.0.validation.as_ref()
    }

    pub(crate) fn external_memory_fd(&self) -> Option<&ash::khr::external_memory_fd::Device> {
        self.0.external_memory_fd.as_ref()
    }

    pub(crate) fn drm_format_modifier(&self) -> Option<&ash::ext::image_drm_format_modifier::Device> {
        self.0.drm_format_modifier.as_ref()
    }

    /// Whether a validation-layer message (its text) is a known false positive on this
    /// device: the "format features (0x0)" report for DRM-tiled images on a driver that
    /// leaves `VkDrmFormatModifierPropertiesList2EXT` empty. For a host that runs its own
    /// debug messenger; an engine with validation on sets these aside itself.
    pub fn is_known_false_positive(&self, message: &str) -> bool {
        self.drm_modifier_list2_is_empty() && crate::device::validation::is_empty_list2_report(message)
    }

    /// Measures the cost model's candidates for each of `conversions` (at its size class's
    /// representative extent) now, unless this device's figures are already known (this
    /// process or the disk cache), so that later conversions choose without measuring: call
    /// it where a pause is affordable, before a latency-bound caller (a GStreamer
    /// `set_caps`) asks. Returns each conversion's choice. A shorthand for
    /// [`crate::Converter::calibrate`] on a converter of its own.
    pub fn calibrate(&self, conversions: &[dmabridge_interop::tiling::FrameConversion]) -> Result<Vec<crate::Choice>, crate::ConvertError> {
        crate::Converter::new(self)?.calibrate(conversions)
    }

    /// Forces every conversion onto `path` (`None`: the cost model decides again).
    pub fn set_convert_path(&self, path: Option<crate::ConvertPath>) {
        self.0.cost.set_forced(path);
    }

    /// True when `VK_EXT_image_drm_format_modifier` is enabled: explicit modifiers exist.
    pub fn has_modifiers(&self) -> bool {
        self.0.drm_format_modifier.is_some()
    }

    /// The queue family that other devices and APIs hand memory over from.
    pub fn foreign_queue_family(&self) -> u32 {
        if self.extensions().has(DeviceExtension::QueueFamilyForeign) {
            vk::QUEUE_FAMILY_FOREIGN_EXT
        } else {
            vk::QUEUE_FAMILY_EXTERNAL
        }
    }

    /// The first memory type allowed by `type_bits` that has all of `required`.
    pub(crate) fn memory_type(&self, type_bits: u32, required: vk::MemoryPropertyFlags) -> Option<u32> {
        self.0.memory.memory_type(type_bits, required)
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
        unsafe { self.instance().get_physical_device_format_properties2(self.physical_device(), format, &mut p1) };
        let mut v2 = vk::DrmFormatModifierPropertiesList2EXT::default();
        let mut p2 = vk::FormatProperties2::default().push_next(&mut v2);
        // SAFETY: as above.
        unsafe { self.instance().get_physical_device_format_properties2(self.physical_device(), format, &mut p2) };
        v1.drm_format_modifier_count > 0 && v2.drm_format_modifier_count == 0
    }
}

/// The cost model's device key: measurements hold for one device, driver build and
/// dmabridge version.
fn cost_key(info: &DeviceInfo) -> String {
    let uuid: String = info.device_uuid.iter().map(|b| format!("{b:02x}")).collect();
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    format!("{} | {} | {} | {uuid} | dmabridge {} {build}", info.name, info.driver_name, info.driver_info, env!("CARGO_PKG_VERSION"))
}

/// Builds the shared state around a created (or the host's) device. On error, everything
/// made here is destroyed and the ownership is handed back so the caller can clean up.
#[allow(clippy::too_many_arguments)]
fn assemble(
    entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    device: ash::Device,
    queue_family: u32,
    queue_index: u32,
    extensions: EnabledExtensions,
    features: EnabledFeatures,
    validation: Option<ValidationLog>,
    cost_cache: &crate::CostCache,
    ownership: Ownership,
) -> Result<Engine, (EngineError, Ownership)> {
    // SAFETY: the device was created with a queue at this family and index (our own
    // create_device, or the host's promise in from_host).
    let queue = unsafe { device.get_device_queue(queue_family, queue_index) };
    let info = device_info(&instance, physical);
    let cost = crate::convert::cost::CostModel::new(cost_key(&info), cost_cache, None);
    let offered = Offered::query(&instance, physical);
    // The extension, not the 1.3 core version: a 1.3 device under an instance made for 1.2
    // (a host's) may not take the 1.3 structs in physical-device queries.
    let format_features2 = offered.extensions.iter().any(|e| e.as_c_str() == ash::khr::format_feature_flags2::NAME);
    let requirements = evaluate(&offered, |e| extensions.has(e), features);
    let memory = match Memory::new(&instance, &device, physical) {
        Ok(m) => m,
        Err(e) => return Err((e.into(), ownership)),
    };
    let submitter = match Submitter::new(&device, queue, queue_family) {
        Ok(s) => s,
        Err(e) => {
            memory.shutdown();
            return Err((e.into(), ownership));
        }
    };
    let external_memory_fd =
        extensions.has(DeviceExtension::ExternalMemoryFd).then(|| ash::khr::external_memory_fd::Device::new(&instance, &device));
    let drm_format_modifier = extensions
        .has(DeviceExtension::ImageDrmFormatModifier)
        .then(|| ash::ext::image_drm_format_modifier::Device::new(&instance, &device));
    let external_semaphore_fd = requirements
        .available(Capability::SyncFile)
        .then(|| ash::khr::external_semaphore_fd::Device::new(&instance, &device));
    tracing::info!(
        device = %info.name,
        driver = %info.driver_info,
        capabilities = ?requirements.available_capabilities(),
        embedded = matches!(ownership, Ownership::Host { .. }),
        "dmabridge engine ready"
    );
    Ok(Engine(Arc::new(DeviceShared {
        entry,
        instance,
        physical,
        device,
        queue_family,
        extensions,
        features,
        requirements,
        info,
        validation,
        support_cache: SupportCache::new(format_features2),
        cost,
        external_memory_fd,
        drm_format_modifier,
        external_semaphore_fd,
        memory,
        submitter,
        ownership,
    })))
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

fn device_info(instance: &ash::Instance, pd: vk::PhysicalDevice) -> DeviceInfo {
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

impl DeviceInfo {
    /// Whether the driver imports external memory by mapping the fd into the CPU's address
    /// space, read-write (lavapipe: its "GPU" is the CPU). Such a driver refuses a read-only
    /// fd (`VK_ERROR_INVALID_EXTERNAL_HANDLE`, seen on Linux 6.12 with an `O_RDONLY` dma-heap
    /// dma-buf) and closes it; a GPU driver imports one.
    pub fn imports_by_mapping(&self) -> bool {
        self.driver_id == vk::DriverId::MESA_LLVMPIPE
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

struct CreatedDevice {
    physical: vk::PhysicalDevice,
    device: ash::Device,
    queue_family: u32,
    extensions: EnabledExtensions,
    features: EnabledFeatures,
}

fn create_device(instance: &ash::Instance, options: &EngineOptions) -> Result<CreatedDevice, EngineError> {
    // SAFETY: plain query of a valid instance.
    let devices = unsafe { instance.enumerate_physical_devices() }.vk("vkEnumeratePhysicalDevices")?;
    let extra = &options.device_extensions;
    let candidates: Vec<(usize, vk::PhysicalDevice, u32, Requirements, Vec<CString>)> = devices
        .iter()
        .enumerate()
        .filter_map(|(i, &pd)| {
            let offered = Offered::query(instance, pd);
            let has_extra = extra.iter().all(|e| offered.extensions.contains(e));
            let requirements = evaluate(&offered, |e| offered.extensions.iter().any(|n| n.as_c_str() == e.name()), offered.features);
            let queue = pick_queue_family(instance, pd)?;
            (has_extra && requirements.available(Capability::Core)).then_some((i, pd, queue, requirements, offered.extensions))
        })
        .collect();
    let chosen = match &options.device {
        Some(sel) => candidates.iter().find(|(i, pd, ..)| match sel {
            DeviceSelector::Index(n) => i == n,
            DeviceSelector::Name(s) => device_name(instance, *pd).to_lowercase().contains(&s.to_lowercase()),
        }),
        None => candidates.iter().min_by_key(|(i, pd, ..)| {
            // SAFETY: pd comes from this instance.
            let t = unsafe { instance.get_physical_device_properties(*pd) }.device_type;
            (type_rank(t), *i)
        }),
    };
    let (_, physical, queue_family, requirements, _) = match (chosen, &options.device) {
        (Some(c), _) => c,
        (None, Some(sel)) => {
            let available =
                devices.iter().enumerate().map(|(i, pd)| format!("{i}: {}", device_name(instance, *pd))).collect::<Vec<_>>().join(", ");
            return Err(EngineError::NoSuchDevice { selector: sel.clone(), available });
        }
        (None, None) => return Err(EngineError::NoDevice),
    };
    let wanted: Vec<Capability> =
        Capability::ALL.into_iter().filter(|c| c.enabled_by_default() || (options.present && *c == Capability::Present)).collect();
    let chosen_extensions = requirements.device_extensions(&wanted);
    let features = requirements.features(&wanted);
    let mut names: Vec<CString> = chosen_extensions.iter().map(|e| e.name().to_owned()).collect();
    for e in extra {
        if !names.contains(e) {
            names.push(e.clone());
        }
    }
    let extensions = EnabledExtensions::from_names(names.iter().map(|c| c.as_c_str()));
    let name_ptrs: Vec<_> = names.iter().map(|n| n.as_ptr()).collect();
    let (mut timeline, mut ycbcr) = features.create_info_structs();
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(*queue_family).queue_priorities(&priorities)];
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&name_ptrs)
        .push_next(&mut timeline)
        .push_next(&mut ycbcr);
    // SAFETY: every extension name was offered by the device and its dependencies are
    // enabled too (VUID-vkCreateDevice-ppEnabledExtensionNames-01387); only supported
    // features are enabled; the queue family exists (VUID-VkDeviceQueueCreateInfo-queueFamilyIndex-00381).
    let device = unsafe { instance.create_device(*physical, &info, None) }.vk("vkCreateDevice")?;
    Ok(CreatedDevice { physical: *physical, device, queue_family: *queue_family, extensions, features })
}
