//! What the device holds and runs: memory, buffers, images, samplers, submissions and the
//! copies between images and buffers. Nothing here knows what a dma-buf is.

pub mod buffer;
mod fence_gate;
pub mod image;
pub(crate) mod memory;
pub mod sampler;
pub mod submit;
pub mod transfer;
