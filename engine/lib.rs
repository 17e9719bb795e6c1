//! dmabridge: share images between GPUs, video codecs, displays and compositors without
//! copying them, and copy them on the GPU when they cannot.
//!
//! This crate is the Vulkan side. The Vulkan-free half (formats, modifiers, negotiation,
//! descriptors, fd passing) is the `dmabridge-interop` crate, re-exported as [`interop`].
//!
//! # Embedding it in a frame loop
//! A host engine that has its own Vulkan device asks [`requirements`] what to enable,
//! creates its device, and hands it over with [`Engine::from_host`]. Every GPU operation
//! then comes in two forms:
//! - **recorded** (`record_*`): the barriers (including the queue family ownership
//!   transfers from and to `VK_QUEUE_FAMILY_FOREIGN_EXT`), copies and conversions go into a
//!   command buffer the host owns and submits itself, with a [`HostTimeline`] point that
//!   tells dmabridge when that work is done;
//! - **submitted**: dmabridge submits on its queue and returns a [`Submission`] at once,
//!   which the caller waits on with a timeout or passes as a wait to the next operation.
//!
//! Nothing on a frame path blocks the CPU: command buffers are pooled, and handles dropped
//! while the GPU still uses them are destroyed once it is done. Handles hold an [`Engine`]
//! clone, so they can live in the host's own structs and move between threads.
//!
//! ```no_run
//! # use dmabridge::{Engine, EngineOptions, ImageAccess, ImportCache};
//! # use dmabridge::ash::vk;
//! # fn frame(engine: &Engine, cache: &mut ImportCache, buf: dmabridge::interop::dmabuf::DmaBuf,
//! #          cmd: vk::CommandBuffer, timeline: &dmabridge::HostTimeline) -> Result<(), Box<dyn std::error::Error>> {
//! let point = timeline.next();
//! let image = cache.import(buf, vk::ImageUsageFlags::SAMPLED)?; // a hit after the first frame
//! // SAFETY: `cmd` is the host's, recording, and its submission signals `point`.
//! unsafe { image.record_acquire(cmd, ImageAccess::SAMPLED_FRAGMENT, point) }?;
//! // ... the host's own draw that samples image.image() ...
//! // SAFETY: as above.
//! unsafe { image.record_release(cmd, ImageAccess::SAMPLED_FRAGMENT, point) };
//! // The host submits `cmd`, signalling (point.semaphore(), point.value()).
//! # Ok(()) }
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod convert;
pub mod cost;
pub mod device;
pub mod dmabuf;
pub mod error;
pub mod import;
#[cfg(feature = "present")]
pub mod present;
pub mod resources;
#[cfg(feature = "wayland")]
pub mod wayland;

pub use ash;
pub use dmabridge_interop as interop;

pub use dmabuf::allocate::{AllocateError, Allocated, AllocatedBuffer, AllocationSpec, DeviceAllocator, LayoutSource};
pub use resources::buffer::{BufferError, BufferLocation, GpuBuffer};
pub use device::format_support::{FormatSupportError, SupportQuery, SupportSource, FormatSupport, ListedModifier, ModifierSupport};
pub use convert::compute::{Binding, ComputeError, ComputePipeline};
pub use convert::converter::{ConversionBuffer, Converter};
pub use convert::{ConvertError, DetileRun, DetileSource, Detiled};
// The converter's frames are the CPU path's: one description of a frame for both.
pub use dmabridge_interop::tiling::TiledFrame;
pub use cost::{Choice, ChoiceReason, ConvertPath, CostCache, Measured, SizeClass};
pub use device::adapter::Adapter;
pub use device::engine::{Engine, HostVulkan};
pub use device::options::{DeviceInfo, DeviceSelector, EngineError, EngineOptions};
pub use error::VkError;
pub use dmabuf::device_copy::DeviceCopyError;
pub use dmabuf::export::{ExportError, ExportRequest, ExportableImage, ExportedImage, OpaqueFd, Shared};
pub use resources::image::{DeviceImage, ImageAccess, ImageError};
pub use import::{BufferImportCache, CacheStats, ImportCache, ImportError, ImportOptions, ImportPath, ImportedBuffer, ImportedImage};
pub use dmabuf::read_back::ReadBackError;
pub use device::memory::MemoryError;
pub use dmabuf::participant::{Direction, ParticipantRequest};
pub use device::requirements::{requirements, Capability, DeviceExtension, EnabledExtensions, EnabledFeatures, Feature, Requirements};
pub use resources::sampler::{SampledView, Sampler, SamplerError, YcbcrOutput};
pub use device::submit::{Completion, HostTimeline, QueueGuard, SubmitError, SubmitOptions, Submission, FENCE_LIMIT};
pub use resources::transfer::{TransferError, READBACK_TIMEOUT};
pub use device::usage::{ImageUse, UsageError, WiderUse};
pub use device::validation::{ValidationLog, ValidationMessage};
