//! dmabridge inside wgpu: described dma-bufs as `wgpu::Texture`s, on one Vulkan device that
//! wgpu and dmabridge share.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod device;
mod texture;

pub use device::{OpenError, SharedDevice, REQUIRED, WANTED};
pub use texture::{wgpu_format, FrameError, FrameSubmission, ImportTextureError, ImportedTexture, SAMPLED_BY_WGPU, WGPU_FORMATS};
pub use {dmabridge, wgpu, wgpu_hal};
