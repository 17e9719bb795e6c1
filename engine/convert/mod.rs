//! Conversions on the device or the CPU: the converter, its compute pipelines and shaders,
//! the cost model that picks a path, and whole-frame conversion.

mod blocking;
pub mod compute;
pub mod converter;
mod copy_path;
mod dmabuf_detile;
mod error;
pub(crate) mod frame;
mod plan_runner;
pub mod shaders;

pub use dmabuf_detile::{DetileRun, DetileSource, Detiled};
pub use error::ConvertError;
