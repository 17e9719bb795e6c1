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
use crate::device::options::{DeviceInfo, EngineError, EngineOptions};
use crate::device::requirements::{Capability, DeviceExtension, EnabledExtensions, EnabledFeatures, Requirements};
use crate::device::validation::ValidationLog;
use crate::device::memory::Memory;
use crate::device::submit::{Garbage, Submitter};

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
        if let Some((capability, missing)) = adapter.requirements().first_missing([Capability::Core]) {
            return Err(EngineError::MissingRequirement { capability, missing });
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

impl Adapter {
    /// Creates the device on this adapter, with the extensions and features it lists, and
    /// the engine on it. `options.convert_path` and `options.cost_cache` apply to the engine;
    /// the instance's options were this adapter's. A device that answers queries only is
    /// refused ([`EngineError::QueriesOnly`]) before anything is created on it.
    pub fn open(&self, options: &EngineOptions) -> Result<Engine, EngineError> {
        let engine = Engine::on_device(self.clone(), self.create_device()?, 0, &options.cost_cache, None)?;
        engine.set_convert_path(options.convert_path);
        Ok(engine)
    }
}
