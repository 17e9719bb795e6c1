//! GStreamer 1.24's `DMA_DRM` negotiation (seed 000): `video/x-raw(memory:DMABuf)` with
//! `format=DMA_DRM` and a `drm-format` field of `FOURCC[:0xMODIFIER]` values (no modifier for
//! LINEAR). The element lists what it reads (every tiled NV12 layout dmabridge detiles, and
//! the linear formats) on its sink and what it writes (linear) on its source; offsets and
//! strides of a linear frame come from the buffer's `GstVideoMeta`, and the element puts one
//! on every buffer it writes.
//!
//! It is on when the runtime is 1.24 or newer. `DMABRIDGE_GST_DMA_DRM=1` turns it on with an
//! older runtime too: the caps are plain structures to GStreamer's core, so the tests run the
//! same code on this machine's 1.22, between `appsrc` and `appsink`.

use std::sync::LazyLock;

use dmabridge::interop::peers::gst::{parse_drm_format, print_drm_format};
use dmabridge::interop::{Format, Modifier, TileLayout};
use gst_video::VideoFormat;

use crate::convert::imp::{layout_of, SINK_FORMATS, SRC_FORMATS};

/// The `format` value of DMA_DRM caps.
pub const DMA_DRM: &str = "DMA_DRM";

/// Whether the element speaks DMA_DRM (decided once, when the element class is made).
pub fn enabled() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| {
        let (major, minor, _, _) = gst::version();
        (major, minor) >= (1, 24) || std::env::var("DMABRIDGE_GST_DMA_DRM").is_ok_and(|v| v == "1")
    });
    *ON
}

/// The DRM format of a GStreamer format this element handles.
fn drm_format_of(f: VideoFormat) -> Option<Format> {
    let (tile, fourcc) = layout_of(f)?;
    let modifier = if tile == TileLayout::Linear { Modifier::LINEAR } else { tile.modifier()? };
    Some(Format::new(fourcc, modifier))
}

/// The GStreamer format of a DRM format, where the element has one.
pub fn video_format_of(f: Format) -> Option<VideoFormat> {
    SINK_FORMATS.iter().chain(SRC_FORMATS.iter()).copied().find(|v| drm_format_of(*v) == Some(f))
}

fn list(formats: &[VideoFormat]) -> Vec<String> {
    formats.iter().filter_map(|f| drm_format_of(*f)).map(print_drm_format).collect()
}

/// `drm-format` values the sink reads, and the source writes.
pub fn sink_drm_formats() -> Vec<String> {
    list(&SINK_FORMATS)
}

pub fn src_drm_formats() -> Vec<String> {
    list(&SRC_FORMATS)
}

/// DMA_DRM caps with these `drm-format` values, any size and rate.
pub fn caps(drm_formats: &[String]) -> gst::Caps {
    gst::Caps::builder("video/x-raw")
        .features([gst_allocators::CAPS_FEATURE_MEMORY_DMABUF])
        .field("format", DMA_DRM)
        .field("drm-format", gst::List::new(drm_formats.iter().map(String::as_str)))
        .field("width", gst::IntRange::new(1, i32::MAX))
        .field("height", gst::IntRange::new(1, i32::MAX))
        .field("framerate", gst::FractionRange::new(gst::Fraction::new(0, 1), gst::Fraction::new(i32::MAX, 1)))
        .build()
}

/// Whether a structure is DMA_DRM caps.
pub fn is_dma_drm(s: &gst::StructureRef) -> bool {
    s.get::<&str>("format").is_ok_and(|f| f == DMA_DRM)
}

/// The video info of fixed caps: for DMA_DRM ones, that of the GStreamer format its
/// `drm-format` names (GStreamer 1.22 knows no DMA_DRM), with the caps' size, rate and
/// colorimetry; `Err` names what is wrong.
pub fn info_of(caps: &gst::CapsRef) -> Result<gst_video::VideoInfo, String> {
    let s = caps.structure(0).ok_or("empty caps")?;
    if !is_dma_drm(s) {
        return gst_video::VideoInfo::from_caps(caps).map_err(|_| format!("caps {caps} are not a video format"));
    }
    let text = s.get::<&str>("drm-format").map_err(|_| format!("DMA_DRM caps without one drm-format: {caps}"))?;
    let format = parse_drm_format(text).map_err(|e| e.to_string())?;
    let vf = video_format_of(format).ok_or_else(|| format!("drm-format {text} is not one dmabridgeconvert reads or writes"))?;
    let width = s.get::<i32>("width").map_err(|_| "DMA_DRM caps without a width")?;
    let height = s.get::<i32>("height").map_err(|_| "DMA_DRM caps without a height")?;
    let (width, height) = (u32::try_from(width).map_err(|_| "a negative width")?, u32::try_from(height).map_err(|_| "a negative height")?);
    let mut b = gst_video::VideoInfo::builder(vf, width, height);
    if let Ok(fps) = s.get::<gst::Fraction>("framerate") {
        b = b.fps(fps);
    }
    let colorimetry = s.get::<&str>("colorimetry").ok().and_then(|c| c.parse::<gst_video::VideoColorimetry>().ok());
    if let Some(c) = colorimetry.as_ref() {
        b = b.colorimetry(c);
    }
    b.build().map_err(|e| format!("{caps}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmabridge::interop::Fourcc;

    #[test]
    fn lists_name_the_tiled_layouts_and_linear_without_a_modifier() {
        let sink = sink_drm_formats();
        assert!(sink.contains(&"NV12:0x0400000000000001".to_owned()), "{sink:?}");
        assert!(sink.contains(&"NV12".to_owned()) && sink.contains(&"AR24".to_owned()), "{sink:?}");
        assert!(src_drm_formats().iter().all(|f| !f.contains(':')), "the source writes linear only");
        let linear = Format::new(Fourcc::XRGB8888, Modifier::LINEAR);
        assert_eq!(video_format_of(linear), Some(VideoFormat::Bgrx));
        assert_eq!(video_format_of(Format::new(Fourcc::NV12, Modifier::from_vendor(2, 1))), None);
    }
}
