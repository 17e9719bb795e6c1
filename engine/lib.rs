//! dmabridge: share images between GPUs, video codecs, displays and compositors without
//! copying them, and copy them on the GPU when they cannot.
//!
//! This crate is the Vulkan side: the [`Engine`] (a device of its own or a host's), the
//! per-usage capability query ([`caps`]), the VkFormat <-> DRM table ([`vk_format`]) and the
//! probe report. The Vulkan-free half (formats, modifiers, negotiation, descriptors, fd
//! passing) is the `dmabridge-interop` crate, re-exported as [`interop`].

pub mod buffer;
pub mod caps;
pub mod commands;
pub mod convert;
pub mod demo;
pub mod device;
pub mod export;
pub mod extensions;
pub mod import;
pub mod import_cache;
pub mod negotiation;
pub mod present;
pub mod probe;
pub mod readback;
pub mod shaders;
pub mod validation;
pub mod vk_format;
#[cfg(feature = "wayland")]
pub mod wayland;

pub use ash;
pub use dmabridge_interop as interop;

pub use caps::{CapsError, CapsQuery, CapsSource, FormatCaps, ModifierCaps, Usage};
pub use device::{DeviceInfo, DeviceSelector, Engine, EngineError, EngineOptions, HostVulkan};
pub use buffer::{BufferError, GpuBuffer};
pub use convert::{ConvertError, Converter};
pub use export::{ExportError, ExportRequest, ExportedImage, OpaqueFd, Shared};
pub use extensions::{DeviceExtension, EnabledExtensions};
pub use import::{ImportError, ImportPath, ImportedImage};
pub use import_cache::{CacheStats, ImportCache};
pub use readback::ReadbackError;
pub use validation::{ValidationLog, ValidationMessage};
