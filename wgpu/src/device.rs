//! One Vulkan device shared by wgpu and dmabridge: opened through wgpu-hal with what
//! [`dmabridge::requirements`] lists, and handed to [`Engine::from_host`].

use std::ffi::{CStr, CString};

use dmabridge::ash::vk;
use dmabridge::device::requirements::{Missing, Requirements};
use dmabridge::{Capability, EnabledFeatures, Engine, EngineError, HostTimeline, HostVulkan, VkError};
use wgpu_hal::api::Vulkan;

/// The capabilities dmabridge asks for on a device it shares with wgpu, when the device
/// offers them: everything but presenting (wgpu presents itself).
pub const WANTED: [Capability; Capability::ALL.len() - 1] = {
    let mut wanted = [Capability::Core; Capability::ALL.len() - 1];
    let (mut i, mut n) = (0, 0);
    while i < Capability::ALL.len() {
        if !matches!(Capability::ALL[i], Capability::Present) {
            wanted[n] = Capability::ALL[i];
            n += 1;
        }
        i += 1;
    }
    assert!(n == wanted.len(), "Capability::ALL lists Present once");
    wanted
};

/// What a shared device must have: submissions on timelines, and dma-buf import.
pub const REQUIRED: [Capability; 2] = [Capability::Core, Capability::DmaBufImport];

/// Why a shared device could not be opened (or a wgpu device could not be shared).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The wgpu adapter or device is not on the Vulkan backend.
    #[error("the wgpu {0} is not on the Vulkan backend: dmabridge shares Vulkan devices only")]
    NotVulkan(&'static str),
    /// The device lacks (or was created without) what one of [`REQUIRED`] needs.
    #[error("the device lacks what dmabridge's {capability} needs: {}", list(.missing))]
    Missing { capability: Capability, missing: Vec<Missing> },
    /// wgpu-hal could not create the device.
    #[error("wgpu-hal could not create the Vulkan device: {0}")]
    CreateDevice(wgpu_hal::DeviceError),
    /// wgpu refused the device wgpu-hal created (limits or features it cannot give).
    #[error("wgpu refused the device: {0}")]
    Wgpu(#[from] wgpu::RequestDeviceError),
    /// dmabridge refused the device (its `Core` capability, or its queue).
    #[error("dmabridge cannot use the device: {0}")]
    Engine(#[from] EngineError),
    /// The timeline dmabridge waits on for wgpu's work could not be made.
    #[error("creating the timeline for wgpu's submissions: {0}")]
    Timeline(#[from] VkError),
}

/// The capabilities of [`WANTED`] that a device meets.
fn wanted_of(offered: &Requirements) -> Vec<Capability> {
    WANTED.into_iter().filter(|c| offered.available(*c)).collect()
}

fn list(missing: &[Missing]) -> String {
    missing.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// A wgpu device and queue and the dmabridge [`Engine`] on the same `VkDevice` and
/// `VkQueue`.
///
/// wgpu's work on this queue goes through [`SharedDevice::submit`] (or
/// [`SharedDevice::submit_frame`](crate::SharedDevice::submit_frame)), which holds
/// dmabridge's queue lock ([`Engine::lock_queue`]): Vulkan requires a queue's submissions to
/// be externally synchronised, and dmabridge submits on the same queue.
pub struct SharedDevice {
    // Field order is drop order: the engine (whose `on_drop` holds its own clones of the
    // wgpu device and queue) goes before them.
    pub(crate) engine: Engine,
    /// Points wgpu's submissions signal, for dmabridge's releases to wait on.
    pub(crate) timeline: HostTimeline,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
}

impl std::fmt::Debug for SharedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDevice").field("engine", &self.engine).finish_non_exhaustive()
    }
}

impl SharedDevice {
    /// Opens a device on `adapter` with what `desc` asks of wgpu and what dmabridge needs
    /// ([`WANTED`], where the device offers it: its extensions, and
    /// `samplerYcbcrConversion`), and shares it with a dmabridge [`Engine`]. A device that
    /// lacks what [`REQUIRED`] needs is refused, naming it.
    pub fn open(adapter: &wgpu::Adapter, desc: &wgpu::DeviceDescriptor<'_>) -> Result<SharedDevice, OpenError> {
        // SAFETY: the guard borrows the adapter, which outlives this function's use of it.
        let hal_adapter = unsafe { adapter.as_hal::<Vulkan>() }.ok_or(OpenError::NotVulkan("adapter"))?;
        let instance = hal_adapter.shared_instance().raw_instance();
        let physical = hal_adapter.raw_physical_device();
        // SAFETY: wgpu-hal enumerated `physical` from `instance`.
        let offered = unsafe { dmabridge::requirements(instance, physical) };
        if let Some((capability, missing)) = offered.first_missing(REQUIRED) {
            return Err(OpenError::Missing { capability, missing });
        }
        let extensions: Vec<&'static CStr> = offered.device_extensions(&WANTED).into_iter().map(|e| e.name()).collect();
        let features = offered.features(&WANTED);
        // wgpu-hal chains no VkPhysicalDeviceSamplerYcbcrConversionFeatures of its own (it
        // builds one and leaves it out of the chain), so dmabridge adds its own. Timeline
        // semaphores wgpu-hal enables itself wherever the device has them.
        let mut ycbcr = vk::PhysicalDeviceSamplerYcbcrConversionFeatures::default().sampler_ycbcr_conversion(true);
        let add_ycbcr = features.sampler_ycbcr_conversion;
        let ycbcr_ref = &mut ycbcr;
        let callback: Box<wgpu_hal::vulkan::CreateDeviceCallback<'_>> = Box::new(move |args| {
            for e in &extensions {
                if !args.extensions.contains(e) {
                    args.extensions.push(e);
                }
            }
            if add_ycbcr {
                let info = std::mem::take(args.create_info);
                *args.create_info = info.push_next(ycbcr_ref);
            }
        });
        let limits = desc.required_limits.clone();
        // SAFETY: the callback only adds extensions the device offers (dmabridge's query
        // above) and a feature struct it supports, turning nothing off, as
        // CreateDeviceCallback's contract asks (VUID-vkCreateDevice-ppEnabledExtensionNames-01387,
        // VUID-VkDeviceCreateInfo-pNext-pNext).
        let open = unsafe { hal_adapter.open_with_callback(desc.required_features, &limits, &desc.memory_hints, Some(callback)) }
            .map_err(OpenError::CreateDevice)?;
        drop(hal_adapter);
        // SAFETY: `open` was made by this adapter's hal adapter, with `desc`'s features and limits.
        let (device, queue) = unsafe { adapter.create_device_from_hal::<Vulkan>(open, desc) }?;
        let enabled = EnabledFeatures { timeline_semaphore: features.timeline_semaphore, sampler_ycbcr_conversion: add_ycbcr };
        let needs = wanted_of(&offered);
        // SAFETY: the device and queue are new: nothing has been submitted to the queue.
        unsafe { SharedDevice::from_wgpu(device, queue, enabled, &needs) }
    }

    /// The capabilities of [`WANTED`] that `adapter`'s device offers: what
    /// [`SharedDevice::open`] enables.
    pub fn offered(adapter: &wgpu::Adapter) -> Result<Vec<Capability>, OpenError> {
        // SAFETY: the guard borrows the adapter, which outlives it.
        let hal_adapter = unsafe { adapter.as_hal::<Vulkan>() }.ok_or(OpenError::NotVulkan("adapter"))?;
        // SAFETY: wgpu-hal enumerated the physical device from its instance.
        let offered = unsafe { dmabridge::requirements(hal_adapter.shared_instance().raw_instance(), hal_adapter.raw_physical_device()) };
        Ok(wanted_of(&offered))
    }

    /// Shares a wgpu device someone else opened. dmabridge uses the extensions it was
    /// created with and `features` (which the caller enabled: wgpu enables
    /// `timelineSemaphore` wherever the device has it, and never `samplerYcbcrConversion`),
    /// and refuses a device that lacks what [`REQUIRED`] or `needs` need, naming it.
    ///
    /// wgpu 30 enables `VK_KHR_external_memory_fd`, `VK_EXT_external_memory_dma_buf` and
    /// `VK_EXT_image_drm_format_modifier` on its own where the device has them, but not
    /// `VK_EXT_queue_family_foreign`, `VK_KHR_external_semaphore_fd` or
    /// `samplerYcbcrConversion`: a device wgpu opened alone lacks dmabridge's
    /// `foreign-queue`, `sync-file` and `ycbcr-sampling`.
    ///
    /// # Safety
    /// - `features` are enabled on the device (an enabled feature not listed is harmless);
    /// - from now on, wgpu's work on `queue` is submitted only through
    ///   [`SharedDevice::submit`], [`SharedDevice::submit_frame`](crate::SharedDevice::submit_frame)
    ///   or [`SharedDevice::submit_render`](crate::SharedDevice::submit_render),
    ///   and nothing else submits to the `VkQueue` without [`Engine::lock_queue`].
    pub unsafe fn from_wgpu(
        device: wgpu::Device,
        queue: wgpu::Queue,
        features: EnabledFeatures,
        needs: &[Capability],
    ) -> Result<SharedDevice, OpenError> {
        let host = {
            // SAFETY: the guard borrows `device`, which outlives it.
            let hal = unsafe { device.as_hal::<Vulkan>() }.ok_or(OpenError::NotVulkan("device"))?;
            let instance = hal.shared_instance();
            let (keep_device, keep_queue) = (device.clone(), queue.clone());
            HostVulkan {
                entry: instance.entry().clone(),
                instance: instance.raw_instance().clone(),
                instance_api_version: instance.instance_api_version(),
                physical_device: hal.raw_physical_device(),
                device: hal.raw_device().clone(),
                queue_family_index: hal.queue_family_index(),
                queue_index: hal.queue_index(),
                enabled_device_extensions: hal.enabled_device_extensions().iter().map(|e| CString::from(*e)).collect(),
                enabled_features: features,
                // The wgpu device (which holds the instance) lives until dmabridge is done.
                on_drop: Some(Box::new(move || drop((keep_device, keep_queue)))),
            }
        };
        // SAFETY: the handles are wgpu-hal's, valid while the wgpu device lives, which
        // `on_drop` keeps until dmabridge is done; the extensions are exactly the device's,
        // the features the caller's promise; the queue is the device's one queue, and the
        // caller submits to it only under dmabridge's lock (from_host's contract).
        let engine = unsafe { Engine::from_host(host) }?;
        if let Some((capability, missing)) = engine.requirements().first_missing(REQUIRED.into_iter().chain(needs.iter().copied())) {
            return Err(OpenError::Missing { capability, missing });
        }
        let timeline = engine.host_timeline()?;
        Ok(SharedDevice { engine, timeline, device, queue })
    }

    /// The dmabridge engine on this device.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// wgpu's queue, for everything but submitting (`write_buffer`, `write_texture`...):
    /// submit through [`SharedDevice::submit`].
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Whether a validation-layer message (its text) is a known false positive for wgpu's
    /// work on this device: [`Engine::is_known_false_positive`], or [`wgsl_debug_source_report`].
    pub fn is_known_false_positive(&self, message: &str) -> bool {
        self.engine.is_known_false_positive(message) || wgsl_debug_source_report(message)
    }

    /// Submits wgpu's command buffers on the shared queue, under dmabridge's queue lock.
    pub fn submit<I: IntoIterator<Item = wgpu::CommandBuffer>>(&self, commands: I) -> wgpu::SubmissionIndex {
        let _queue = self.engine.lock_queue();
        self.queue.submit(commands)
    }
}

/// Whether a validation-layer message is the report of SPIR-V that carries WGSL source as
/// debug info: with `wgpu::InstanceFlags::DEBUG` (which a debug messenger needs: wgpu-hal
/// enables `VK_EXT_debug_utils` only with it), naga writes the shader's source into an
/// `OpSource` of language 10, WGSL, which the SPIRV-Tools inside older validation layers
/// (Debian 12's 1.3.239) do not know yet: "Invalid source language operand: 10". The module
/// is valid otherwise; a host that runs wgpu with DEBUG sets this one aside.
pub fn wgsl_debug_source_report(message: &str) -> bool {
    message.contains("Invalid source language operand: 10")
}
