//! Embedding: a host engine asks dmabridge what to enable, creates its own instance and
//! device, hands them over, and both keep working afterwards. Handles keep the engine alive,
//! and the host's drop callback runs only after the last one is gone.

mod common;

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use dmabridge::ash::{self, vk};
use dmabridge::interop::{Fourcc, Modifier};
use dmabridge::device::requirements::Missing;
use dmabridge::{
    BufferLocation, SupportQuery, Capability, DeviceExtension, EnabledFeatures, Engine, EngineError, GpuBuffer, HostVulkan,
};

static HOST_VALIDATION_PROBLEMS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "system" fn host_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _: *mut c_void,
) -> vk::Bool32 {
    if severity.intersects(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        HOST_VALIDATION_PROBLEMS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: valid for the call, per the debug-utils callback contract.
        if let Some(msg) = unsafe { data.as_ref() }.and_then(|d| unsafe { d.message_as_c_str() }) {
            eprintln!("host validation: {}", msg.to_string_lossy());
        }
    }
    vk::FALSE
}

/// The host's own Vulkan objects.
struct Host {
    entry: ash::Entry,
    instance: ash::Instance,
    debug: ash::ext::debug_utils::Instance,
    messenger: vk::DebugUtilsMessengerEXT,
    physical: vk::PhysicalDevice,
}

impl Host {
    fn new() -> Host {
        // SAFETY: loads the system loader.
        let entry = unsafe { ash::Entry::load() }.expect("loader");
        let layers = [c"VK_LAYER_KHRONOS_validation".as_ptr()];
        let instance_exts = [ash::ext::debug_utils::NAME.as_ptr()];
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        let info = vk::InstanceCreateInfo::default().application_info(&app).enabled_layer_names(&layers).enabled_extension_names(&instance_exts);
        // SAFETY: valid create info; layer installed by scripts/setup.sh.
        let instance = unsafe { entry.create_instance(&info, None) }.expect("host instance");
        let debug = ash::ext::debug_utils::Instance::new(&entry, &instance);
        let messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING)
            .message_type(vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL)
            .pfn_user_callback(Some(host_callback));
        // SAFETY: debug utils enabled above.
        let messenger = unsafe { debug.create_debug_utils_messenger(&messenger_info, None) }.expect("messenger");
        // SAFETY: valid instance.
        let physical = unsafe { instance.enumerate_physical_devices() }.expect("devices")[0];
        Host { entry, instance, debug, messenger, physical }
    }

    /// A device with exactly `extensions` and `features`, queue family 0.
    fn device(&self, extensions: &[&std::ffi::CStr], features: EnabledFeatures) -> ash::Device {
        let ptrs: Vec<_> = extensions.iter().map(|n| n.as_ptr()).collect();
        let priorities = [1.0];
        let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(0).queue_priorities(&priorities)];
        let (mut timeline, mut ycbcr) = features.create_info_structs();
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&ptrs)
            .push_next(&mut timeline)
            .push_next(&mut ycbcr);
        // SAFETY: lavapipe offers these extensions, features and queue family 0.
        unsafe { self.instance.create_device(self.physical, &info, None) }.expect("host device")
    }

    fn hand_over(&self, device: &ash::Device, extensions: &[&std::ffi::CStr], features: EnabledFeatures, on_drop: Option<Box<dyn FnOnce() + Send + Sync>>) -> Result<Engine, EngineError> {
        let host = HostVulkan {
            entry: self.entry.clone(),
            instance: self.instance.clone(),
            instance_api_version: vk::API_VERSION_1_2,
            physical_device: self.physical,
            device: device.clone(),
            queue_family_index: 0,
            queue_index: 0,
            enabled_device_extensions: extensions.iter().map(|n| CString::from(*n)).collect(),
            enabled_features: features,
            on_drop,
        };
        // SAFETY: the handles are valid; the host destroys the device only after the engine's
        // drop callback ran (checked by the test) and submits to the queue only under its lock.
        unsafe { Engine::from_host(host) }
    }

    fn destroy(self) {
        // SAFETY: every device made from the instance is gone; the messenger is its last child.
        unsafe {
            self.debug.destroy_debug_utils_messenger(self.messenger, None);
            self.instance.destroy_instance(None);
        }
    }
}

#[test]
fn host_device_from_requirements_survives_the_engine() {
    let host = Host::new();
    // SAFETY: the physical device comes from this instance.
    let reqs = unsafe { dmabridge::requirements(&host.instance, host.physical) };
    assert!(reqs.available(Capability::Core), "{reqs:?}");
    assert!(reqs.available(Capability::DmaBufImport));
    // The host wants only the core and dma-buf import: dmabridge must use just those.
    let wanted = [Capability::Core, Capability::DmaBufImport];
    let extensions: Vec<&std::ffi::CStr> = reqs.device_extensions(&wanted).iter().map(|e| e.name()).collect();
    assert_eq!(extensions, [ash::khr::external_memory_fd::NAME, ash::ext::external_memory_dma_buf::NAME]);
    let features = reqs.features(&wanted);
    assert!(features.timeline_semaphore && !features.sampler_ycbcr_conversion);
    let device = host.device(&extensions, features);

    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let engine = host.hand_over(&device, &extensions, features, Some(Box::new(move || flag.store(true, Ordering::SeqCst)))).expect("embed");
    assert!(engine.is_embedded());
    assert!(engine.extensions().has(DeviceExtension::ExternalMemoryDmaBuf));
    assert!(!engine.extensions().has(DeviceExtension::ImageDrmFormatModifier), "host did not enable it");
    assert!(!engine.has_modifiers());
    assert!(engine.has_capability(Capability::DmaBufImport));
    assert!(!engine.has_capability(Capability::YcbcrSampling), "the host did not enable samplerYcbcrConversion");
    let caps = engine.format_support(&SupportQuery::new(Fourcc::ARGB8888, vk::ImageUsageFlags::SAMPLED)).expect("caps through the host's device");
    assert!(caps.get(Modifier::LINEAR).is_some_and(|c| c.can_import()));
    // A handle keeps the engine (and so the host's device) in use after the last Engine goes.
    let buffer = GpuBuffer::new(&engine, 4096, BufferLocation::Upload).expect("a buffer of the engine's allocator");
    let clone = engine.clone();
    drop(engine);
    drop(clone);
    assert!(!dropped.load(Ordering::SeqCst), "the engine may not let go while a buffer lives");
    drop(buffer);
    assert!(dropped.load(Ordering::SeqCst), "the drop callback runs once the last handle is gone");

    // The host's objects still work after the engine is gone.
    let binfo = vk::BufferCreateInfo::default().size(256).usage(vk::BufferUsageFlags::TRANSFER_DST);
    // SAFETY: valid device and create info; destroyed right away.
    unsafe {
        let buffer = device.create_buffer(&binfo, None).expect("host buffer after the engine");
        device.destroy_buffer(buffer, None);
        device.device_wait_idle().expect("idle");
        device.destroy_device(None);
    }
    host.destroy();
    assert_eq!(HOST_VALIDATION_PROBLEMS.load(Ordering::SeqCst), 0);
}

#[test]
fn a_host_device_without_timeline_semaphores_is_refused_by_name() {
    let host = Host::new();
    let device = host.device(&[], EnabledFeatures::default());
    let r = host.hand_over(&device, &[], EnabledFeatures::default(), None);
    match r {
        Err(EngineError::MissingRequirement { capability: Capability::Core, missing }) => {
            assert_eq!(missing, vec![Missing::Feature { name: "timelineSemaphore".into() }]);
        }
        other => panic!("expected MissingRequirement, got {other:?}"),
    }
    let msg = host.hand_over(&device, &[], EnabledFeatures::default(), None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("timelineSemaphore"), "{msg}");
    // SAFETY: the refused engines made nothing on the device.
    unsafe { device.destroy_device(None) };
    host.destroy();
    assert_eq!(HOST_VALIDATION_PROBLEMS.load(Ordering::SeqCst), 0);
}

#[test]
fn bad_queue_family_is_refused() {
    let engine = common::engine();
    let host = HostVulkan {
        entry: engine.entry().clone(),
        instance: engine.instance().clone(),
        instance_api_version: vk::API_VERSION_1_2,
        physical_device: engine.physical_device(),
        device: engine.device().clone(),
        queue_family_index: 99,
        queue_index: 0,
        enabled_device_extensions: Vec::new(),
        enabled_features: engine.features(),
        on_drop: None,
    };
    // SAFETY: the handles are valid for the life of `engine`, which outlives this call.
    let r = unsafe { Engine::from_host(host) };
    assert!(matches!(r, Err(EngineError::BadQueueFamily(99))));
    common::assert_clean(&engine);
}
