//! dmabridge inside wgpu: described dma-bufs as `wgpu::Texture`s, on one Vulkan device that
//! wgpu and dmabridge share.
//!
//! [`SharedDevice::open`] opens a wgpu device through wgpu-hal's
//! `Adapter::open_with_callback`, adding what [`dmabridge::requirements`] lists (the
//! extensions, and `samplerYcbcrConversion`), and hands the same `VkDevice` and queue to
//! [`dmabridge::Engine::from_host`]: one device, one queue, no copy between them. A wgpu
//! device opened without them ([`SharedDevice::from_wgpu`]) is refused, naming what it
//! lacks. wgpu-hal 30 uses the same `ash` (0.38) as dmabridge, so the handles pass as
//! they are, through one Vulkan loader.
//!
//! # How to use
//! ```no_run
//! # fn f(adapter: &wgpu::Adapter, frame: dmabridge::interop::dmabuf::DmaBuf,
//! #      fence: dmabridge::interop::sync::SyncFile, draw: wgpu::CommandBuffer) -> Result<(), Box<dyn std::error::Error>> {
//! use dmabridge_wgpu::SharedDevice;
//! let shared = SharedDevice::open(adapter, &wgpu::DeviceDescriptor::default())?;
//! // The producer's frame (fds, modifier, per-plane offsets and strides), checked and
//! // imported by dmabridge: zero-copy where the device can, else copied on every acquire.
//! let texture = shared.import(&frame)?;
//! // ... bind texture.texture() in wgpu, record `draw` ...
//! // Acquire (after the producer's fence), wgpu's work, release: three submissions on the
//! // shared queue, ordered on the GPU; nothing waits on the CPU.
//! let options = dmabridge::SubmitOptions { wait_sync_files: vec![fence], ..Default::default() };
//! let done = shared.submit_frame(&[&texture], [draw], options)?;
//! // The frame is the producer's again once `done.released` completes.
//! # let _ = done; Ok(()) }
//! ```
//!
//! # What this adds over wgpu's own `texture_from_dmabuf_fd`
//! wgpu-hal 30's `Device::texture_from_dmabuf_fd` takes one fd, one plane, one offset and
//! stride, and a modifier the caller must already know the device takes; it has no fences
//! and no ownership transfer. Through dmabridge:
//! - the layout is checked against the fds before the driver sees it (a plane past the end
//!   of its file is a typed error, not a crash in the driver), for any number of planes and
//!   fds;
//! - the modifier can come from dmabridge's negotiation with the other parties (KMS,
//!   Wayland, V4L2, GStreamer), and the import is zero-copy where the device imports the
//!   format and modifier for the use, or a GPU copy into an image of dmabridge's own where it
//!   does not (lavapipe without udmabuf: `ImportPath::BufferCopy`);
//! - each frame is acquired from the producer (`VK_QUEUE_FAMILY_FOREIGN_EXT`) after its
//!   `sync_file`, and released after wgpu's work.
//!
//! # Rules
//! - Submit wgpu's work on the shared queue only through [`SharedDevice::submit`],
//!   [`SharedDevice::submit_frame`] or [`SharedDevice::submit_render`]: they hold
//!   dmabridge's queue lock, as Vulkan's external synchronisation of a queue requires.
//! - Use an imported texture only inside [`SharedDevice::submit_frame`], and only to sample
//!   or load it in shaders (`TEXTURE_BINDING`): wgpu is told it stays in that state.
//! - Use an exported texture ([`SharedDevice::export_texture`]) only inside
//!   [`SharedDevice::submit_render`], and only as a render pass's colour attachment
//!   (`RENDER_ATTACHMENT`, its only usage).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod device;
mod export;
mod handover;
mod texture;
mod validation;
mod wrap;

pub use device::{wgsl_debug_source_report, OpenError, SharedDevice, REQUIRED, WANTED};
pub use export::{Contents, ExportTextureError, ExportedTexture, RenderError, RENDERED_BY_WGPU};
pub use handover::FrameSubmission;
pub use validation::ValidationLog;
pub use texture::{wgpu_format, FrameError, ImportTextureError, ImportedTexture, SAMPLED_BY_WGPU, WGPU_FORMATS};
pub use {dmabridge, wgpu, wgpu_hal};
