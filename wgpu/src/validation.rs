//! wgpu's validation-layer messages, gathered for a host that fails on any of them (a test,
//! CI, the example). wgpu-hal reports the layer's messages through the `log` crate (targets
//! under `wgpu_hal::vulkan`), and only with `wgpu::InstanceFlags::DEBUG` as well as
//! `VALIDATION`: without DEBUG it registers no debug messenger, and the layer prints to
//! stdout, where nobody reads it.

use std::sync::{Mutex, PoisonError};

use crate::device::{wgsl_debug_source_report, SharedDevice};

/// A `log::Log` that keeps every message wgpu-hal's debug messenger logs at warning level or
/// above, each with its objects, queues and command buffers (which wgpu-hal logs as records
/// of their own, starting with a tab). Make it a `static` and [`ValidationLog::install`] it.
#[derive(Debug)]
pub struct ValidationLog(Mutex<Vec<String>>);

impl ValidationLog {
    pub const fn new() -> ValidationLog {
        ValidationLog(Mutex::new(Vec::new()))
    }

    /// Makes this the process's logger, at warning level; fails where a logger is set already.
    pub fn install(&'static self) -> Result<(), log::SetLoggerError> {
        log::set_logger(self)?;
        log::set_max_level(log::LevelFilter::Warn);
        Ok(())
    }

    /// Takes the messages gathered so far and returns those that are not known false
    /// positives: of `shared`'s device ([`SharedDevice::is_known_false_positive`]), or, with
    /// no device, naga's WGSL debug-source report ([`wgsl_debug_source_report`]).
    pub fn take_problems(&self, shared: Option<&SharedDevice>) -> Vec<String> {
        let all = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        all.into_iter()
            .filter(|m| match shared {
                Some(s) => !s.is_known_false_positive(m),
                None => !wgsl_debug_source_report(m),
            })
            .collect()
    }
}

impl Default for ValidationLog {
    fn default() -> Self {
        ValidationLog::new()
    }
}

impl log::Log for ValidationLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn && m.target().starts_with("wgpu_hal::vulkan")
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let text = r.args().to_string();
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match all.last_mut() {
            Some(last) if text.starts_with('\t') => {
                last.push('\n');
                last.push_str(&text);
            }
            _ => all.push(format!("{}: {text}", r.level())),
        }
    }

    fn flush(&self) {}
}
