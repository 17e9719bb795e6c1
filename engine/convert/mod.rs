//! Conversions on the device or the CPU: the converter, its compute pipelines and shaders,
//! the cost model that picks a path, and whole-frame conversion.

pub mod compute;
pub mod converter;
pub(crate) mod frame;
mod plan_runner;
pub mod shaders;
