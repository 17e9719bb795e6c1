//! What the tests of a device shared by wgpu and dmabridge share: wgpu's validation layer
//! on, its messages collected through `log`, and the device.
#![allow(dead_code)]

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use dmabridge_wgpu::{wgpu, SharedDevice};

pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Every message wgpu-hal's debug messenger (the validation layer) logs at warning level
/// or above.
struct Messages(Mutex<Vec<String>>);

impl log::Log for Messages {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }

    fn log(&self, r: &log::Record<'_>) {
        if r.level() <= log::Level::Warn && r.target().starts_with("wgpu_hal::vulkan") {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{}: {}", r.level(), r.args()));
        }
    }

    fn flush(&self) {}
}

static MESSAGES: OnceLock<&'static Messages> = OnceLock::new();

fn messages() -> &'static Messages {
    MESSAGES.get_or_init(|| {
        let m: &'static Messages = Box::leak(Box::new(Messages(Mutex::new(Vec::new()))));
        log::set_logger(m).expect("the test's logger is the only one");
        log::set_max_level(log::LevelFilter::Warn);
        m
    })
}

/// Fails the test if the validation layer said anything (dmabridge's known false positives
/// of this layer version aside).
pub fn assert_clean(shared: Option<&SharedDevice>) {
    let all = std::mem::take(&mut *messages().0.lock().unwrap_or_else(|e| e.into_inner()));
    let problems: Vec<String> = all.into_iter().filter(|m| !shared.is_some_and(|s| s.engine().is_known_false_positive(m))).collect();
    assert!(problems.is_empty(), "the validation layer reported {} message(s):\n{}", problems.len(), problems.join("\n"));
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

pub fn adapter() -> wgpu::Adapter {
    messages();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        flags: wgpu::InstanceFlags::VALIDATION,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default())).expect("a Vulkan adapter (lavapipe)")
}

pub fn shared(features: wgpu::Features) -> SharedDevice {
    let desc = wgpu::DeviceDescriptor { required_features: features, ..wgpu::DeviceDescriptor::default() };
    SharedDevice::open(&adapter(), &desc).expect("a device shared by wgpu and dmabridge")
}
