//! Pictures as PNG files: the demo's contact sheet, the benchmark's plot and the camera
//! demo's last frame, with their text (labels, axes, legends) drawn from the system's DejaVu
//! Sans (`fonts-dejavu-core`, read at run time; `DMABRIDGE_FONT` names another TTF). Without
//! a font they are drawn without text, and [`font`] says why.

use std::path::Path;
use std::sync::OnceLock;

use crate::error::DemoError;

/// The font the pictures' text is drawn with, registered with plotters as "sans-serif"
/// once per process: `Err` says why there is none (the pictures are then drawn without
/// text).
pub fn font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let path = std::env::var_os("DMABRIDGE_FONT")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf".into());
        let bytes = std::fs::read(&path).map_err(|e| format!("no font at {}: {e} (install fonts-dejavu-core)", path.display()))?;
        // plotters keeps registered fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
            .map_err(|_| format!("{} is not a font plotters can read", path.display()))
    })
    .clone()
}

/// Writes `rgb` (tightly packed RGB8, `width` x `height`) as a PNG file at `path`.
pub fn write_png(path: &Path, width: u32, height: u32, rgb: &[u8]) -> Result<(), DemoError> {
    let err = |detail: String| DemoError::Output { path: path.display().to_string(), detail };
    let file = dmabridge::interop::user_file::create_regular(path).map_err(|e| err(e.to_string()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| err(e.to_string()))?;
    writer.write_image_data(rgb).map_err(|e| err(e.to_string()))?;
    writer.finish().map_err(|e| err(e.to_string()))
}
