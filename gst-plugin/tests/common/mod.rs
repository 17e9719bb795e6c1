//! What the plugin's tests share: where the built plugin is, GStreamer initialised to find
//! it, and dma-buf buffers made from sealed memfds (the crate's one memfd helper).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The directory holding libgstdmabridge.so (target/debug or target/release, beside this
/// test's deps/).
pub fn plugin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf();
    assert!(dir.join("libgstdmabridge.so").exists(), "build the plugin first: cargo build -p gst-plugin-dmabridge");
    dir
}

/// Initialises GStreamer once per test process, finding the plugin. `dma_drm` forces GStreamer
/// 1.24's DMA_DRM caps on (this machine's runtime is 1.22), with a registry of the process's
/// own so that the shared cache never learns templates only forcing gives.
pub fn init(dma_drm: bool) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Set before init, which scans the registry; no other thread reads the environment yet.
        std::env::set_var("GST_PLUGIN_PATH", plugin_dir());
        if dma_drm {
            std::env::set_var("DMABRIDGE_GST_DMA_DRM", "1");
            std::env::set_var("GST_REGISTRY", std::env::temp_dir().join(format!("dmabridge-dma-drm-registry-{}.bin", std::process::id())));
        }
        gst::init().expect("GStreamer");
    });
}

/// A buffer of one dma-buf memory holding `bytes`, owned by the memory: a real dma-buf from
/// the system dma-heap where the kernel has one (the kernel lab), else a sealed memfd (fixed
/// size, as a dma-buf is).
pub fn dmabuf_buffer(bytes: &[u8]) -> gst::Buffer {
    use dmabridge_interop::dmabuf::SystemMemory;
    let fd = match SystemMemory::detect() {
        SystemMemory::Memfd => {
            assert_ne!(std::env::var("DMABRIDGE_TEST_CONFIG").as_deref(), Ok("kernel"), "the kernel lab has a system dma-heap");
            dmabridge_interop::dmabuf::sealed_memfd("gst-plugin-test", bytes).expect("sealed memfd")
        }
        heap => {
            let fd = heap.alloc("gst-plugin-test", bytes.len().max(1) as u64).expect("dma-heap allocation");
            dmabridge_interop::dmabuf::write_all_at(std::os::fd::AsFd::as_fd(&fd), 0, bytes).expect("writing the dma-buf");
            fd
        }
    };
    // SAFETY: the memory takes ownership of the fd, which holds `bytes.len()` bytes.
    let mem = unsafe { gst_allocators::DmaBufAllocator::new().alloc(fd, bytes.len()) }.expect("dma-buf memory");
    let mut buffer = gst::Buffer::new();
    buffer.get_mut().expect("a new buffer is writable").append_memory(mem);
    buffer
}

/// A pipeline from `gst-launch` syntax with an `appsrc` named `src` and an `appsink` named
/// `sink`, set playing.
pub struct Run {
    pub pipeline: gst::Pipeline,
    pub src: gst_app::AppSrc,
    pub sink: gst_app::AppSink,
}

pub fn pipeline(description: &str) -> Run {
    use gst::prelude::*;
    let pipeline = gst::parse::launch(description).expect("pipeline").downcast::<gst::Pipeline>().expect("a pipeline");
    let src = pipeline.by_name("src").expect("src").downcast::<gst_app::AppSrc>().expect("appsrc");
    let sink = pipeline.by_name("sink").expect("sink").downcast::<gst_app::AppSink>().expect("appsink");
    pipeline.set_state(gst::State::Playing).expect("playing");
    Run { pipeline, src, sink }
}
