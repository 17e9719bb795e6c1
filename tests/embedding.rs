//! Embedding: a host engine creates its own instance and device, hands them to
//! dmabridge, and both keep working afterwards.

mod common;

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use dmabridge::ash::{self, vk};
use dmabridge::interop::{Fourcc, Modifier};
use dmabridge::{CapsQuery, DeviceExtension, Engine, HostVulkan};

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

#[test]
fn host_instance_and_device_survive_the_engine() {
    // SAFETY: loads the system loader.
    let entry = unsafe { ash::Entry::load() }.expect("loader");
    let layers = [c"VK_LAYER_KHRONOS_validation".as_ptr()];
    let instance_exts = [ash::ext::debug_utils::NAME.as_ptr()];
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
    let info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layers)
        .enabled_extension_names(&instance_exts);
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
    // The host enables only two of dmabridge's extensions; the engine must use just those.
    let dev_exts = [ash::khr::external_memory_fd::NAME, ash::ext::external_memory_dma_buf::NAME];
    let dev_ext_ptrs: Vec<_> = dev_exts.iter().map(|n| n.as_ptr()).collect();
    let priorities = [1.0];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(0).queue_priorities(&priorities)];
    let dinfo = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&dev_ext_ptrs);
    // SAFETY: lavapipe offers both extensions and queue family 0.
    let device = unsafe { instance.create_device(physical, &dinfo, None) }.expect("host device");

    {
        let host = HostVulkan {
            entry: entry.clone(),
            instance: instance.clone(),
            physical_device: physical,
            device: device.clone(),
            queue_family_index: 0,
            queue_index: 0,
            enabled_device_extensions: dev_exts.iter().map(|n| CString::from(*n)).collect(),
        };
        // SAFETY: the handles are valid and outlive the engine (dropped at the end of this block).
        let engine = unsafe { Engine::from_host(host) }.expect("embed");
        assert!(engine.is_embedded());
        assert!(engine.extensions().has(DeviceExtension::ExternalMemoryDmaBuf));
        assert!(!engine.extensions().has(DeviceExtension::ImageDrmFormatModifier), "host did not enable it");
        assert!(!engine.has_modifiers());
        let caps = engine
            .query_caps(&CapsQuery::new(Fourcc::ARGB8888, vk::ImageUsageFlags::SAMPLED))
            .expect("caps through the host's device");
        assert!(caps.get(Modifier::LINEAR).is_some_and(|c| c.can_import()));
        let _queue = engine.queue();
    }

    // The host's objects still work after the engine is gone.
    let binfo = vk::BufferCreateInfo::default().size(256).usage(vk::BufferUsageFlags::TRANSFER_DST);
    // SAFETY: valid device and create info; destroyed right away.
    unsafe {
        let buffer = device.create_buffer(&binfo, None).expect("host buffer after the engine");
        device.destroy_buffer(buffer, None);
        device.device_wait_idle().expect("idle");
        let _ = instance.enumerate_physical_devices().expect("instance alive");
        device.destroy_device(None);
        debug.destroy_debug_utils_messenger(messenger, None);
        instance.destroy_instance(None);
    }
    assert_eq!(HOST_VALIDATION_PROBLEMS.load(Ordering::SeqCst), 0);
}

#[test]
fn bad_queue_family_is_refused() {
    let engine = common::engine();
    let host = HostVulkan {
        entry: engine.entry().clone(),
        instance: engine.instance().clone(),
        physical_device: engine.physical_device(),
        device: engine.device().clone(),
        queue_family_index: 99,
        queue_index: 0,
        enabled_device_extensions: Vec::new(),
    };
    // SAFETY: the handles are valid for the life of `engine`, which outlives this call.
    let r = unsafe { Engine::from_host(host) };
    assert!(matches!(r, Err(dmabridge::EngineError::BadQueueFamily(99))));
    common::assert_clean(&engine);
}
