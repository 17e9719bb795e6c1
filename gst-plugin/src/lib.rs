//! `libgstdmabridge.so`: GStreamer's door to dmabridge. It registers **`dmabridgeconvert`**,
//! which turns the tiled NV12 layouts V4L2 decoders write (NV12_4L4, NV12_32L32, NV12_64Z32,
//! NV12_16L32S, NV12_8L128) and linear NV12/P010 into NV12 or an RGB format a display takes
//! (BGRx, BGRA, RGBx, RGBA), and RGB back into NV12, with the engine's conversions: the path
//! its cost model measured fastest (the CPU fast path, the GPU shaders), or the one the
//! `path` property names; without a Vulkan device, the CPU path. Detile and colour run fused
//! in one pass. Colour follows the caps' colorimetry (BT.601/709/2020, limited or full
//! range) unless the `matrix` property overrides the matrix. Same caps on both sides: the
//! element passes buffers through.
//!
//! ```text
//! GST_PLUGIN_PATH=target/debug gst-launch-1.0 filesrc location=frame.4l4 ! \
//!     rawvideoparse format=nv12-4l4 width=1920 height=1088 ! dmabridgeconvert ! \
//!     video/x-raw,format=BGRx ! filesink location=frame.bgrx
//! ```
//!
//! Upstream's word is checked before anything is read: every plane of an input frame (at its
//! `GstVideoMeta`'s offsets and strides, or the caps') must end inside the memory upstream
//! gave, a system buffer's size or a dma-buf memory's window of its fd (never the fd's
//! size), or the frame is an element error naming the plane; and only its visible rows are
//! read, so a frame costs its own bytes whatever its strides.
//!
//! `memory:DMABuf` (GStreamer 1.22's form) on both pads: an upstream dma-buf is put through
//! dmabridge's layout checks and read from its fd (mapped read-only where it cannot shrink),
//! and where downstream takes dma-bufs each output frame is a sealed memfd handed on as
//! dma-buf memory. GStreamer 1.24's `DMA_DRM` negotiation ([`dma_drm`]) lists the DRM formats
//! the element reads and writes, and is on with a 1.24 runtime (or `DMABRIDGE_GST_DMA_DRM=1`).

use gst::glib;

mod convert;

pub use convert::{dma_drm, DmabridgeConvert};

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    convert::register(plugin)
}

// GStreamer compares a plugin's license verbatim with a fixed list (gst_plugin_check_license;
// GstPluginDesc's docs: "LGPL, GPL, QPL, GPL/QPL, MPL, BSD, MIT/X11, Proprietary, unknown"):
// no SPDX expression, no "MIT OR Apache-2.0". A license outside the list is refused by older
// runtimes and warned about by newer ones, and "unknown" would say nothing. So the plugin is
// MIT alone, which the MIT OR Apache-2.0 crates it links allow, and "MIT/X11" is GStreamer's
// name for it. The assertion keeps Cargo.toml's license and this one from drifting apart.
const _: () = assert!(matches!(env!("CARGO_PKG_LICENSE").as_bytes(), b"MIT"), "plugin_define! says MIT/X11: the crate's license must be MIT");

gst::plugin_define!(
    dmabridge,
    env!("CARGO_PKG_DESCRIPTION"),
    plugin_init,
    env!("CARGO_PKG_VERSION"),
    "MIT/X11",
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_REPOSITORY")
);
