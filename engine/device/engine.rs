//! The Vulkan device dmabridge works on: one it creates itself, or one a host engine hands it.
//!
//! An [`Engine`] is a cheap handle (an `Arc` inside): clone it into every thread and struct
//! that needs it. Images, buffers, converters and presenters hold a clone, so the device
//! lives until the last of them is dropped. Only an engine that created its instance and
//! device destroys them; an embedded one calls the host's drop callback instead.

use std::ffi::CString;
use std::sync::Arc;

use ash::vk;

use crate::device::adapter::Adapter;
use crate::device::requirements::{Capability, DeviceExtension, EnabledExtensions, EnabledFeatures, Missing, Requirements};
use crate::device::validation::ValidationLog;
use crate::error::VkError;
use crate::device::memory::{Memory, MemoryError};
use crate::device::submit::{Garbage, Submitter};

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
    /// The path every conversion takes (`None`: the cost model's choice, see [`crate::cost`]).
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
    /// The device answers queries but cannot be opened (an [`Adapter`] is all it can be).
    #[error("{device} answers queries only, so no engine is opened on it: {reason}")]
    QueriesOnly { device: String, reason: &'static str },
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

/// Whose device it is.
enum Ownership {
    /// dmabridge created the device and destroys it (the instance is its adapter's).
    Owned,
    /// The host's; dmabridge calls the host's callback when it is done with it.
    Host { on_drop: Option<Box<dyn FnOnce() + Send + Sync>> },
}

/// The device every clone of an [`Engine`] shares: its handles, memory and submissions.
pub(crate) struct DeviceShared {
    /// The physical device and instance, which outlive the device: dropped after it.
    adapter: Adapter,
    device: ash::Device,
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
    pub(crate) fn retire(&self, uses: Vec<crate::device::submit::Completion>, garbage: Vec<Garbage>) {
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
            Ownership::Owned => {
                // SAFETY: this engine created the device; every object made from it was
                // destroyed above (VUID-vkDestroyDevice-device-05137). The instance goes with
                // the adapter, after this.
                unsafe {
                    let _ = self.device.device_wait_idle();
                    self.device.destroy_device(None);
                }
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
///
/// Its clones share the device and the conversion cost model measured on it: the device
/// knows nothing of conversions ([`crate::cost`] is the policy, kept beside it).
#[derive(Clone)]
pub struct Engine {
    shared: Arc<DeviceShared>,
    cost: Arc<crate::cost::CostModel>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("device", &self.info().name).field("embedded", &self.is_embedded()).finish()
    }
}

impl Engine {
    /// Creates an instance and a device of its own, on the best device or the selected one,
    /// with every capability the device offers (see [`crate::device::requirements`]):
    /// [`Adapter::new`], then [`Adapter::open`].
    pub fn new(options: &EngineOptions) -> Result<Engine, EngineError> {
        Adapter::new(options)?.open(options)
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
    /// - They outlive every clone of the returned `Engine` and every handle made from it
    ///   (its [`Engine::adapter`] too); the host destroys the device only after `on_drop`
    ///   has run (or, without a callback, after it has dropped all of them).
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
        let adapter = Adapter::of_host(
            host.entry,
            host.instance,
            (host.physical_device, host.queue_family_index),
            (host.enabled_device_extensions, host.enabled_features),
            host.instance_api_version,
        );
        if let Some(core) = adapter.requirements().get(Capability::Core).filter(|r| !r.available()) {
            return Err(EngineError::MissingRequirement { capability: Capability::Core, missing: core.missing.clone() });
        }
        // A host hands over no options: the environment decides (default file, or
        // DMABRIDGE_COST_CACHE).
        Engine::on_device(adapter, host.device, host.queue_index, &crate::CostCache::from_env(), Some(host.on_drop))
    }

    /// The engine on `device`, made from `adapter` with its extensions and features, with
    /// its queue at (`adapter.queue_family()`, `queue_index`). `on_drop`: `None` when
    /// dmabridge created the device (and destroys it, also when this fails), `Some` for a
    /// host's. Everything made here is destroyed again when it fails.
    pub(crate) fn on_device(
        adapter: Adapter,
        device: ash::Device,
        queue_index: u32,
        cost_cache: &crate::CostCache,
        on_drop: Option<Option<Box<dyn FnOnce() + Send + Sync>>>,
    ) -> Result<Engine, EngineError> {
        let ownership = match on_drop {
            None => Ownership::Owned,
            Some(on_drop) => Ownership::Host { on_drop },
        };
        let destroy_own = |e: EngineError, ownership: &Ownership| {
            if matches!(ownership, Ownership::Owned) {
                // SAFETY: nothing was created on the device (what was is destroyed again
                // before this runs).
                unsafe { device.destroy_device(None) };
            }
            e
        };
        // SAFETY: the device was created with a queue at this family and index (Adapter::open,
        // or the host's promise in from_host).
        let queue = unsafe { device.get_device_queue(adapter.queue_family(), queue_index) };
        let instance = adapter.instance();
        let physical = adapter.physical_device();
        let cost = crate::cost::CostModel::new(cost_key(adapter.info()), cost_cache, None);
        let memory = match Memory::new(instance, &device, physical) {
            Ok(m) => m,
            Err(e) => return Err(destroy_own(e.into(), &ownership)),
        };
        let submitter = match Submitter::new(&device, queue, adapter.queue_family()) {
            Ok(s) => s,
            Err(e) => {
                memory.shutdown();
                return Err(destroy_own(e.into(), &ownership));
            }
        };
        let external_memory_fd =
            adapter.extensions().has(DeviceExtension::ExternalMemoryFd).then(|| ash::khr::external_memory_fd::Device::new(instance, &device));
        let drm_format_modifier = adapter
            .extensions()
            .has(DeviceExtension::ImageDrmFormatModifier)
            .then(|| ash::ext::image_drm_format_modifier::Device::new(instance, &device));
        let external_semaphore_fd =
            adapter.has_capability(Capability::SyncFile).then(|| ash::khr::external_semaphore_fd::Device::new(instance, &device));
        tracing::info!(
            device = %adapter.info().name,
            driver = %adapter.info().driver_info,
            capabilities = ?adapter.capabilities(),
            embedded = matches!(ownership, Ownership::Host { .. }),
            "dmabridge engine ready"
        );
        Ok(Engine {
            cost: Arc::new(cost),
            shared: Arc::new(DeviceShared {
                adapter,
                device,
                external_memory_fd,
                drm_format_modifier,
                external_semaphore_fd,
                memory,
                submitter,
                ownership,
            }),
        })
    }

    pub(crate) fn shared(&self) -> &DeviceShared {
        &self.shared
    }

    /// The conversion cost model measured on this device ([`crate::cost`]).
    pub(crate) fn cost(&self) -> &crate::cost::CostModel {
        &self.cost
    }

    /// The physical device and instance this engine stands on: everything a query needs.
    pub fn adapter(&self) -> &Adapter {
        &self.shared.adapter
    }

    pub fn entry(&self) -> &ash::Entry {
        self.shared.adapter.entry()
    }

    pub fn instance(&self) -> &ash::Instance {
        self.shared.adapter.instance()
    }

    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.shared.adapter.physical_device()
    }

    pub fn device(&self) -> &ash::Device {
        &self.shared.device
    }

    pub fn queue_family(&self) -> u32 {
        self.shared.adapter.queue_family()
    }

    pub fn extensions(&self) -> &EnabledExtensions {
        self.shared.adapter.extensions()
    }

    pub fn features(&self) -> EnabledFeatures {
        self.shared.adapter.features()
    }

    /// Each capability, with what it needs and what of that this engine lacks.
    pub fn requirements(&self) -> &Requirements {
        self.shared.adapter.requirements()
    }

    /// The capabilities this engine has.
    pub fn capabilities(&self) -> Vec<Capability> {
        self.shared.adapter.capabilities()
    }

    pub fn has_capability(&self, c: Capability) -> bool {
        self.shared.adapter.has_capability(c)
    }

    pub fn info(&self) -> &DeviceInfo {
        self.shared.adapter.info()
    }

    /// Whether the engine wraps a host's device (and will not destroy it).
    pub fn is_embedded(&self) -> bool {
        matches!(self.shared.ownership, Ownership::Host { .. })
    }

    /// The validation layer's messages, when this engine turned validation on.
    pub fn validation(&self) -> Option<&ValidationLog> {
        self.shared.adapter.validation()
    }

    pub(crate) fn external_memory_fd(&self) -> Option<&ash::khr::external_memory_fd::Device> {
        self.shared.external_memory_fd.as_ref()
    }

    pub(crate) fn drm_format_modifier(&self) -> Option<&ash::ext::image_drm_format_modifier::Device> {
        self.shared.drm_format_modifier.as_ref()
    }

    /// [`Adapter::is_known_false_positive`].
    pub fn is_known_false_positive(&self, message: &str) -> bool {
        self.shared.adapter.is_known_false_positive(message)
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
        self.cost.set_forced(path);
    }

    /// True when `VK_EXT_image_drm_format_modifier` is enabled: explicit modifiers exist.
    pub fn has_modifiers(&self) -> bool {
        self.shared.adapter.has_modifiers()
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
        self.shared.memory.memory_type(type_bits, required)
    }

    /// [`Adapter::drm_modifier_list2_is_empty`].
    pub fn drm_modifier_list2_is_empty(&self) -> bool {
        self.shared.adapter.drm_modifier_list2_is_empty()
    }
}

/// The cost model's device key: measurements hold for one device, driver build and
/// dmabridge version.
fn cost_key(info: &DeviceInfo) -> String {
    let uuid: String = info.device_uuid.iter().map(|b| format!("{b:02x}")).collect();
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    format!("{} | {} | {} | {uuid} | dmabridge {} {build}", info.name, info.driver_name, info.driver_info, env!("CARGO_PKG_VERSION"))
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
