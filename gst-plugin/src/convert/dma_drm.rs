//! GStreamer 1.24's `DMA_DRM` negotiation (seed 000): `video/x-raw(memory:DMABuf)` with
//! `format=DMA_DRM` and a `drm-format` field of `FOURCC[:0xMODIFIER]` values (no modifier for
//! LINEAR). The element lists what it reads on its sink: every layout of dmabridge's table
//! that has a DRM modifier (with each fourcc its row allows, so i915, NVIDIA block linear and
//! the rest, which GStreamer has no format name for) and the linear formats; and what it
//! writes (linear) on its source. A `drm-format` is mapped to dmabridge's layout through the
//! table ([`TileLayout::from_modifier`]), never through a GStreamer format, so a layout added
//! to the table is read here with no edit. Offsets and strides of a linear frame come from
//! the buffer's `GstVideoMeta`, and the element puts one on every buffer it writes.
//!
//! It is on when the runtime is 1.24 or newer. `DMABRIDGE_GST_DMA_DRM=1` turns it on with an
//! older runtime too: the caps are plain structures to GStreamer's core, so the tests run the
//! same code on this machine's 1.22, between `appsrc` and `appsink`.

use std::sync::LazyLock;

use dmabridge::interop::peers::gst::{parse_drm_format, print_drm_format};
use dmabridge::interop::tile_layout::TILE_LAYOUTS;
use dmabridge::interop::tiling::tiled_size;
use dmabridge::interop::{Fourcc, Format, Layout, Modifier, TileLayout};
use gst_video::VideoFormat;

use super::formats::{layout_of, SINK_FORMATS, SRC_FORMATS};

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

/// What fixed caps describe: dmabridge's layout and fourcc of the frame, and GStreamer's
/// video info of it. GStreamer names no tiled layout but its decoders', so the info of a
/// DMA_DRM frame in any other layout is that of the linear frame of the same fourcc and size:
/// it carries the caps' size, rate and colorimetry, and nothing reads its planes (a tiled
/// frame's planes are where the layout's geometry puts them).
#[derive(Debug, Clone)]
pub struct CapsFrame {
    pub layout: TileLayout,
    pub fourcc: Fourcc,
    pub info: gst_video::VideoInfo,
}

/// The tiled DRM formats the sink reads beyond GStreamer's named ones: each layout row with
/// a modifier, with every linear sink fourcc the row allows and dmabridge can lay out so.
fn table_drm_formats() -> Vec<Format> {
    let linear: Vec<Fourcc> = SINK_FORMATS.iter().filter_map(|f| layout_of(*f)).filter(|(l, _)| *l == TileLayout::Linear).map(|(_, f)| f).collect();
    TILE_LAYOUTS
        .iter()
        .filter(|r| r.layout != TileLayout::Linear)
        .filter_map(|r| Some((r, r.layout.modifier()?)))
        .flat_map(|(r, m)| linear.iter().filter(move |f| r.only.map_or(true, |o| o == **f) && tiled_size(r.layout, **f, 64, 64).is_ok()).map(move |f| Format::new(*f, m)))
        .collect()
}

fn list(formats: &[VideoFormat]) -> Vec<String> {
    formats.iter().filter_map(|f| drm_format_of(*f)).map(print_drm_format).collect()
}

/// `drm-format` values the sink reads, and the source writes.
pub fn sink_drm_formats() -> Vec<String> {
    let mut out = list(&SINK_FORMATS);
    for f in table_drm_formats().into_iter().map(print_drm_format) {
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
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

/// What fixed caps describe ([`CapsFrame`]); `Err` names what is wrong. A DMA_DRM
/// `drm-format` names its layout by modifier, read through dmabridge's layout table.
pub fn frame_of(caps: &gst::CapsRef) -> Result<CapsFrame, String> {
    let s = caps.structure(0).ok_or("empty caps")?;
    if !is_dma_drm(s) {
        let info = gst_video::VideoInfo::from_caps(caps).map_err(|_| format!("caps {caps} are not a video format"))?;
        let (layout, fourcc) = layout_of(info.format()).ok_or_else(|| format!("{} is not a format dmabridgeconvert reads or writes", info.format()))?;
        return Ok(CapsFrame { layout, fourcc, info });
    }
    let text = s.get::<&str>("drm-format").map_err(|_| format!("DMA_DRM caps without one drm-format: {caps}"))?;
    let format = parse_drm_format(text).map_err(|e| e.to_string())?;
    let layout = match format.layout {
        Layout::Explicit(Modifier::LINEAR) => TileLayout::Linear,
        Layout::Explicit(m) => TileLayout::from_modifier(m).ok_or_else(|| format!("drm-format {text}: dmabridge knows no layout of modifier {}", m.to_hex()))?,
        Layout::Implicit => return Err(format!("drm-format {text}: an implicit modifier names no layout")),
    };
    let known = layout == TileLayout::Linear || table_drm_formats().contains(&format) || video_format_of(format).is_some();
    // The linear frame of the same fourcc stands for a tiled one (see `CapsFrame`).
    let vf = video_format_of(Format::linear(format.fourcc)).filter(|_| known).ok_or_else(|| format!("drm-format {text} is not one dmabridgeconvert reads or writes"))?;
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
    let info = b.build().map_err(|e| format!("{caps}: {e}"))?;
    Ok(CapsFrame { layout, fourcc: format.fourcc, info })
}

#[cfg(test)]
mod tests {
    use super::*;

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
