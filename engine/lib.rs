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

pub mod allocate;
pub mod buffer;
pub mod caps;
pub mod compute;
pub mod convert;
pub mod cost;
pub mod device;
pub mod error;
pub mod export;
mod frame_convert;
pub mod image;
pub mod import;
pub mod import_cache;
mod memory;
pub mod negotiation;
#[cfg(feature = "present")]
pub mod present;
pub mod probe;
pub mod requirements;
pub mod sampler;
pub mod shaders;
pub mod submit;
pub mod sync;
pub mod transfer;
pub mod usage;
pub mod validation;
pub mod vk_format;
#[cfg(feature = "wayland")]
pub mod wayland;

pub use ash;
pub use dmabridge_interop as interop;

pub use allocate::{AllocateError, Allocated, AllocatedBuffer, AllocationSpec, DeviceAllocator, LayoutSource};
pub use buffer::{BufferError, BufferLocation, GpuBuffer, ImportedBuffer};
pub use caps::{CapsError, CapsQuery, CapsSource, FormatCaps, ListedModifier, ModifierCaps};
pub use compute::{Binding, ComputeError, ComputePipeline};
pub use convert::{ConversionBuffer, ConvertError, Converter, TiledFrame};
pub use cost::{Choice, ChoiceReason, ConvertPath, CostCache, Measured, SizeClass};
pub use device::{DeviceInfo, DeviceSelector, Engine, EngineError, EngineOptions, HostVulkan};
pub use error::VkError;
pub use export::{ExportError, ExportRequest, ExportedImage, OpaqueFd, Shared};
pub use image::{DeviceImage, ImageAccess, ImageError};
pub use import::{ImportError, ImportOptions, ImportPath, ImportedImage};
pub use import_cache::{BufferImportCache, CacheStats, ImportCache};
pub use memory::MemoryError;
pub use negotiation::{Direction, ParticipantRequest};
pub use requirements::{requirements, Capability, DeviceExtension, EnabledExtensions, EnabledFeatures, Feature, Requirements};
pub use sampler::{SampledView, Sampler, SamplerError, YcbcrOutput};
pub use submit::{Completion, HostTimeline, QueueGuard, SubmitError, SubmitOptions, Submission};
pub use transfer::{TransferError, READBACK_TIMEOUT};
pub use usage::{ImageUse, UsageError, WiderUse};
pub use validation::{ValidationLog, ValidationMessage};
