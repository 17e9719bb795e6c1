//! Shared by the Vulkan tests: which configuration the suite runs in, and an engine with
//! the validation layer on whose messages fail the test.
#![allow(dead_code)]

use dmabridge::{Engine, EngineOptions};

/// The configuration `scripts/test.sh` runs the suite in (`DMABRIDGE_TEST_CONFIG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// No udmabuf: lavapipe has no modifier extension and cannot export DMA_BUF.
    Plain,
    /// tests/support/udmabuf_emulation.c is preloaded.
    UdmabufEmulation,
    /// The kernel has a real /dev/udmabuf.
    RealUdmabuf,
}

pub fn config() -> Config {
    match std::env::var("DMABRIDGE_TEST_CONFIG").as_deref() {
        Ok("udmabuf-emulation") => Config::UdmabufEmulation,
        Ok("real-udmabuf") => Config::RealUdmabuf,
        Ok("plain") => Config::Plain,
        // Plain `cargo test`: tell from the environment.
        _ if std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("udmabuf_emulation")) => Config::UdmabufEmulation,
        _ if std::path::Path::new("/dev/udmabuf").exists() => Config::RealUdmabuf,
        _ => Config::Plain,
    }
}

/// lavapipe with a udmabuf (emulated or real) exposes the modifier extension.
pub fn expect_modifiers() -> bool {
    config() != Config::Plain
}

/// An engine of its own with the validation layer on.
pub fn engine() -> Engine {
    Engine::new(&EngineOptions { validation: true, device: None })
        .unwrap_or_else(|e| panic!("cannot create a validated engine (run scripts/setup.sh): {e}"))
}

/// Fails the test if the validation layer said anything at warning level or above.
pub fn assert_clean(engine: &Engine) {
    let log = engine.validation().expect("the test engine has validation on");
    let problems = log.problems();
    assert!(
        problems.is_empty(),
        "validation layer reported {} problem(s):\n{}",
        problems.len(),
        problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n")
    );
}
