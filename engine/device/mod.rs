//! The device: opening or adopting it ([`engine::Engine`]), what it must enable, what it can
//! do with each format and modifier for an exact use, and the tables behind those answers;
//! and what every clone of it shares: its memory and its submissions (`memory`, [`submit`]).

pub mod adapter;
pub mod engine;
mod fence_gate;
pub mod format_support;
pub mod options;
pub(crate) mod memory;
pub mod probe;
pub mod requirements;
pub mod submit;
pub mod usage;
pub mod validation;
pub mod vk_format;
