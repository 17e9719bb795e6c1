//! Pictures: the demo's contact sheet of sampled frames and the benchmark's plot, both PNG,
//! with their text (labels, axes, legends) drawn from the system's DejaVu Sans
//! (`fonts-dejavu-core`, read at run time; `DMABRIDGE_FONT` names another TTF). Without a
//! font they are drawn without text, and [`font`] says why.

use std::path::Path;
use std::sync::OnceLock;

use super::{DemoError, Mode};

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

/// One sampled frame, scaled down, RGB8, with what the consumer knows of it.
#[derive(Debug, Clone)]
pub struct Thumb {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
    /// The frame's index in its mode's run.
    pub frame: u32,
    /// Whether its checksum matched the producer's.
    pub verified: bool,
}

/// One row of the contact sheet: a mode's sampled frames and its label (mode, format, size,
/// µs per frame).
#[derive(Debug, Clone)]
pub struct SheetRow {
    pub mode: Mode,
    pub label: String,
    pub thumbs: Vec<Thumb>,
}

pub const THUMB_WIDTH: u32 = 256;

impl Thumb {
    /// Nearest-neighbour scaling of tightly packed RGBA8 `w` x `h` pixels to [`THUMB_WIDTH`],
    /// of frame `frame` (`verified`: its checksum matched).
    pub fn from_rgba(rgba: &[u8], w: u32, h: u32, frame: u32, verified: bool) -> Thumb {
        let tw = THUMB_WIDTH.min(w.max(1));
        let th = ((h as u64 * tw as u64) / w.max(1) as u64).max(1) as u32;
        let mut rgb = Vec::with_capacity((tw * th * 3) as usize);
        for y in 0..th {
            let sy = (y as u64 * h as u64 / th as u64) as usize;
            for x in 0..tw {
                let sx = (x as u64 * w as u64 / tw as u64) as usize;
                let i = (sy * w as usize + sx) * 4;
                rgb.extend_from_slice(rgba.get(i..i + 3).unwrap_or(&[0, 0, 0]));
            }
        }
        Thumb { width: tw, height: th, rgb, frame, verified }
    }
}

fn mode_colour(mode: Mode) -> [u8; 3] {
    match mode {
        Mode::ZeroCopy => [40, 200, 90],
        Mode::Copy => [240, 150, 30],
    }
}

pub(super) fn write_png(path: &Path, width: u32, height: u32, rgb: &[u8]) -> Result<(), DemoError> {
    let err = |detail: String| DemoError::Output { path: path.display().to_string(), detail };
    let file = dmabridge::interop::user_file::create_regular(path).map_err(|e| err(e.to_string()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| err(e.to_string()))?;
    writer.write_image_data(rgb).map_err(|e| err(e.to_string()))?;
    writer.finish().map_err(|e| err(e.to_string()))
}

/// One row per mode (a stripe of the mode's colour on the left: green zero-copy, orange
/// copy) under its label, its sampled frames left to right, each captioned with its index
/// and whether it was verified.
pub fn write_contact_sheet(path: &Path, rows: &[SheetRow]) -> Result<(), DemoError> {
    use plotters::prelude::*;
    const PAD: u32 = 8;
    const STRIPE: u32 = 12;
    const LABEL: u32 = 26;
    const CAPTION: u32 = 20;
    let err = |detail: String| DemoError::Output { path: path.display().to_string(), detail };
    let cols = rows.iter().map(|r| r.thumbs.len()).max().unwrap_or(0).max(1) as u32;
    let cell_w = rows.iter().flat_map(|r| r.thumbs.iter().map(|t| t.width)).max().unwrap_or(THUMB_WIDTH);
    let cell_h = rows.iter().flat_map(|r| r.thumbs.iter().map(|t| t.height)).max().unwrap_or(THUMB_WIDTH);
    let row_h = LABEL + cell_h + CAPTION + PAD;
    let width = STRIPE + PAD + cols * (cell_w + PAD);
    let height = PAD + rows.len().max(1) as u32 * row_h;
    let mut img = vec![24u8; (width * height * 3) as usize];
    let mut put = |x: u32, y: u32, c: &[u8]| {
        let i = ((y * width + x) * 3) as usize;
        if let Some(px) = img.get_mut(i..i + 3) {
            px.copy_from_slice(&c[..3]);
        }
    };
    for (r, row) in rows.iter().enumerate() {
        let y0 = PAD + r as u32 * row_h + LABEL;
        for y in y0 - LABEL..y0 + cell_h + CAPTION {
            for x in 0..STRIPE {
                put(x, y, &mode_colour(row.mode));
            }
        }
        for (c, t) in row.thumbs.iter().enumerate() {
            let x0 = STRIPE + PAD + c as u32 * (cell_w + PAD);
            for y in 0..t.height {
                for x in 0..t.width {
                    let i = ((y * t.width + x) * 3) as usize;
                    if let Some(px) = t.rgb.get(i..i + 3) {
                        put(x0 + x, y0 + y, px);
                    }
                }
            }
        }
    }
    if font().is_ok() {
        let root = BitMapBackend::with_buffer(&mut img, (width, height)).into_drawing_area();
        let white = ("sans-serif", 18).into_font().color(&WHITE);
        let small = ("sans-serif", 14).into_font().color(&RGBColor(220, 220, 220));
        for (r, row) in rows.iter().enumerate() {
            let y = (PAD + r as u32 * row_h) as i32;
            root.draw(&Text::new(row.label.clone(), ((STRIPE + PAD) as i32, y + 3), white.clone())).map_err(|e| err(e.to_string()))?;
            for (c, t) in row.thumbs.iter().enumerate() {
                let x = (STRIPE + PAD + c as u32 * (cell_w + PAD)) as i32;
                let caption = format!("frame {} {}", t.frame, if t.verified { "verified" } else { "MISMATCH" });
                root.draw(&Text::new(caption, (x, y + (LABEL + cell_h) as i32 + 3), small.clone())).map_err(|e| err(e.to_string()))?;
            }
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    write_png(path, width, height, &img)
}

/// µs per frame against megapixels for each path (log scale), and GB/s per conversion beside
/// memcpy and GStreamer: the bench's PNG, with its title, axes, units and legend when a font
/// is available ([`font`]).
pub fn write_plot(path: &Path, fig: &super::html_report::Figures) -> Result<(), DemoError> {
    use plotters::prelude::*;
    const W: u32 = 1280;
    const H: u32 = 600;
    let err = |detail: String| DemoError::Output { path: path.display().to_string(), detail };
    let text = font().is_ok();
    let mut buf = vec![0u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let (left, right) = root.split_horizontally(660);
        let colours = [("zero-copy", RGBColor(40, 170, 80)), ("copy-gpu", RGBColor(230, 140, 20)), ("copy-cpu", RGBColor(210, 40, 40))];
        let max_mp = fig.paths.iter().map(|p| p.2).fold(1.0, f64::max) * 1.05;
        let max_us = fig.paths.iter().map(|p| p.3).fold(10.0, f64::max) * 2.0;
        let mut b = ChartBuilder::on(&left);
        b.margin(16);
        if text {
            b.caption("Time per frame by path", ("sans-serif", 22)).x_label_area_size(44).y_label_area_size(70);
        }
        let mut chart = b.build_cartesian_2d(0f64..max_mp, (1f64..max_us).log_scale()).map_err(|e| err(e.to_string()))?;
        if text {
            chart
                .configure_mesh()
                .x_desc("megapixels per frame")
                .y_desc("µs per frame (log scale)")
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 16))
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }
        for (name, colour) in colours {
            for nv12 in [false, true] {
                let format = if nv12 { "NV12" } else { "AR24" };
                let mut pts: Vec<(f64, f64)> = fig.paths.iter().filter(|q| q.0 == name && q.1 == format && q.3 > 0.0).map(|q| (q.2, q.3.max(1.0))).collect();
                if pts.is_empty() {
                    continue;
                }
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart
                    .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2)))
                    .map_err(|e| err(e.to_string()))?
                    .label(format!("{name} {format}{}", if nv12 { " (rings)" } else { "" }))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
                chart
                    .draw_series(pts.iter().map(|&(x, y)| if nv12 { Circle::new((x, y), 6, colour.stroke_width(2)) } else { Circle::new((x, y), 5, colour.filled()) }))
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .label_font(("sans-serif", 13))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }
        // Bars: memcpy, then each conversion (dmabridge, then GStreamer where measured).
        let mut bars: Vec<(String, f64, RGBColor)> = vec![("memcpy".into(), fig.memcpy_gbps, RGBColor(120, 120, 120))];
        for (name, g, gst, p) in &fig.conversions {
            let short = name.trim_start_matches("convert ").to_owned();
            bars.push((format!("{short} ({p})"), *g, RGBColor(40, 90, 220)));
            if let Some(gst) = gst {
                bars.push((format!("{short} GStreamer"), *gst, RGBColor(230, 140, 20)));
            }
        }
        let max = bars.iter().map(|b| b.1).fold(0.1, f64::max) * 1.15;
        let n = bars.len() as f64;
        let mut b = ChartBuilder::on(&right);
        b.margin(16);
        if text {
            b.caption("Conversions at 4K: GB/s of output", ("sans-serif", 22)).x_label_area_size(44).y_label_area_size(10);
        }
        let mut chart = b.build_cartesian_2d(0f64..max, 0f64..n).map_err(|e| err(e.to_string()))?;
        if text {
            chart
                .configure_mesh()
                .disable_y_mesh()
                .disable_y_axis()
                .x_desc("GB/s (grey memcpy, blue dmabridge, orange GStreamer)")
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 15))
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }
        for (i, (label, v, colour)) in bars.iter().enumerate() {
            let y = n - i as f64;
            // A label on top of each row, its bar below it.
            chart.draw_series(std::iter::once(Rectangle::new([(0.0, y - 0.95), (*v, y - 0.55)], colour.filled()))).map_err(|e| err(e.to_string()))?;
            if text {
                let style = ("sans-serif", 12).into_font().color(&BLACK);
                chart
                    .draw_series(std::iter::once(Text::new(format!("{label}: {v:.2}"), (max * 0.005, y - 0.05), style)))
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    write_png(path, W, H, &buf)
}
