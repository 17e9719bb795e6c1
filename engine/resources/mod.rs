//! What the device holds: buffers, images, samplers, and the copies between images and
//! buffers, made in the device's memory and recorded for its submissions (both the
//! device's own, [`crate::device`]). Nothing here knows what a dma-buf is.

pub mod buffer;
pub mod image;
pub mod sampler;
pub mod transfer;
