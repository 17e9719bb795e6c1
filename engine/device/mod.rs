//! The device: opening or adopting it ([`engine::Engine`]), what it must enable, what it can
//! do with each format and modifier for an exact use, and the tables behind those answers.

pub mod adapter;
pub mod engine;
pub mod format_support;
pub mod probe;
pub mod requirements;
pub mod usage;
pub mod validation;
pub mod vk_format;
