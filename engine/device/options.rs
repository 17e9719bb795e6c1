//! What an engine is asked for and told about its device: how to pick the device and open
//! it ([`EngineOptions`], [`DeviceSelector`]), why it could not be ([`EngineError`]), and
//! what the device is ([`DeviceInfo`]). Both the adapter (queries) and the engine read
//! these; neither imports the other for them.

use std::ffi::CString;

use ash::vk;

use crate::device::requirements::{Capability, Missing};
use crate::device::memory::MemoryError;
use crate::error::VkError;

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

/// How [`Engine::new`](crate::Engine::new) sets things up.
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
    /// The device answers queries but cannot be opened (an [`Adapter`](crate::Adapter) is all it can be).
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

impl DeviceInfo {
    /// Whether the driver imports external memory by mapping the fd into the CPU's address
    /// space, read-write (lavapipe: its "GPU" is the CPU). Such a driver refuses a read-only
    /// fd (`VK_ERROR_INVALID_EXTERNAL_HANDLE`, seen on Linux 6.12 with an `O_RDONLY` dma-heap
    /// dma-buf) and closes it; a GPU driver imports one.
    pub fn imports_by_mapping(&self) -> bool {
        self.driver_id == vk::DriverId::MESA_LLVMPIPE
    }
}
