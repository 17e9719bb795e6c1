//! The formats the element reads and writes, and what each is to dmabridge. Both the caps
//! the element offers ([`super::imp`]) and its DMA_DRM lists ([`super::dma_drm`]) are made
//! from these, so the two never disagree on a format.

use std::sync::LazyLock;

use dmabridge::interop::tile_layout::TILE_LAYOUTS;
use dmabridge::interop::{Fourcc, TileLayout};
use gst_video::VideoFormat;

/// What the sink takes: the decoders' tiled NV12 layouts (every layout with a GStreamer
/// name in dmabridge's layout table), linear NV12/P010, 8-bit RGB.
pub(super) static SINK_FORMATS: LazyLock<Vec<VideoFormat>> = LazyLock::new(|| {
    // GStreamer lists its raw formats once initialised: always so inside the plugin, not
    // necessarily in a unit test (init is a no-op the second time).
    let tiled: Vec<VideoFormat> = match gst::init() {
        Ok(()) => TILE_LAYOUTS.iter().filter_map(|r| VideoFormat::iter_raw().find(|f| Some(f.to_str().as_str()) == r.gst)).collect(),
        Err(_) => Vec::new(),
    };
    let linear = [VideoFormat::Nv12, VideoFormat::P01010le, VideoFormat::Bgrx, VideoFormat::Bgra, VideoFormat::Rgbx, VideoFormat::Rgba];
    tiled.into_iter().chain(linear).collect()
});

/// What the source writes.
pub(super) const SRC_FORMATS: [VideoFormat; 5] = [VideoFormat::Nv12, VideoFormat::Bgrx, VideoFormat::Bgra, VideoFormat::Rgbx, VideoFormat::Rgba];

/// dmabridge's (layout, fourcc) for a GStreamer format. GStreamer's tiled NV12 buffers are
/// laid out as dmabridge's tiled buffers (planes padded to whole tiles, back to back).
pub(super) fn layout_of(f: VideoFormat) -> Option<(TileLayout, Fourcc)> {
    if let Some(tiled) = TileLayout::from_gst_name(f.to_str().as_str()) {
        return Some(tiled);
    }
    Some(match f {
        VideoFormat::Nv12 => (TileLayout::Linear, Fourcc::NV12),
        VideoFormat::P01010le => (TileLayout::Linear, Fourcc::P010),
        VideoFormat::Bgrx => (TileLayout::Linear, Fourcc::XRGB8888),
        VideoFormat::Bgra => (TileLayout::Linear, Fourcc::ARGB8888),
        VideoFormat::Rgbx => (TileLayout::Linear, Fourcc::XBGR8888),
        VideoFormat::Rgba => (TileLayout::Linear, Fourcc::ABGR8888),
        _ => return None,
    })
}
