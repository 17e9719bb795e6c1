//! The frame arguments several commands share: `--format FOURCC --width W --height H`, or
//! `--drm-format FOURCC[:0xMODIFIER]` (GStreamer's drm-format spelling: a bare fourcc is
//! LINEAR) in place of `--format` and the layout flag.

use dmabridge::interop::peers::gst::parse_drm_format;
use dmabridge::interop::{Fourcc, Layout, Modifier};

#[derive(clap::Args)]
pub struct FrameArgs {
    /// DRM fourcc, trailing spaces optional (`R8` = `R8  `).
    #[arg(long, required_unless_present = "drm_format")]
    pub format: Option<String>,
    /// `FOURCC[:0xMODIFIER]`, as GStreamer's drm-format writes it (`NV12:0x0100000000000002`;
    /// a bare fourcc is LINEAR): the format and the layout in one.
    #[arg(long, conflicts_with = "format")]
    pub drm_format: Option<String>,
    #[arg(long)]
    pub width: u32,
    #[arg(long)]
    pub height: u32,
}

impl FrameArgs {
    /// The fourcc, or a one-line message naming the flag.
    pub fn fourcc(&self) -> Result<Fourcc, String> {
        match (&self.format, &self.drm_format) {
            (_, Some(d)) => Ok(parse_drm_format(d).map_err(|e| format!("--drm-format: {e}"))?.fourcc),
            (Some(f), None) => f.parse().map_err(|e| format!("--format: {e}")),
            (None, None) => Err("give --format or --drm-format".into()),
        }
    }

    /// The layout `--drm-format` names, if it was given.
    pub fn drm_format_layout(&self) -> Result<Option<Layout>, String> {
        self.drm_format.as_deref().map(|d| parse_drm_format(d).map(|f| f.layout).map_err(|e| format!("--drm-format: {e}"))).transpose()
    }

    /// The layout of a command that also takes `--modifier 0x...`: from `--drm-format`, else
    /// `--modifier`, else LINEAR; both at once is an error.
    pub fn layout_with(&self, modifier: Option<&str>) -> Result<Layout, String> {
        match (self.drm_format_layout()?, modifier) {
            (Some(_), Some(_)) => Err("give --drm-format or --modifier, not both".into()),
            (Some(l), None) => Ok(l),
            (None, Some(m)) => Ok(Layout::from_wire(Modifier::parse_hex(m).map_err(|e| format!("--modifier: {e}"))?)),
            (None, None) => Ok(Layout::Explicit(Modifier::LINEAR)),
        }
    }
}
