//! Pictures: the demo's contact sheet of sampled frames and the benchmark's plot, both PNG.
//!
//! Neither draws text, so nothing needs a font on the machine: the contact sheet marks each
//! mode's row with a coloured stripe and the plot's colours are explained where it is
//! announced (see [`PLOT_LEGEND`]).

use std::path::Path;

use super::{DemoError, Mode};

/// One sampled frame, scaled down, RGB8.
#[derive(Debug, Clone)]
pub struct Thumb {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

pub const THUMB_WIDTH: u32 = 256;

impl Thumb {
    /// Nearest-neighbour scaling of tightly packed RGBA8 `w` x `h` pixels to [`THUMB_WIDTH`].
    pub fn from_rgba(rgba: &[u8], w: u32, h: u32) -> Thumb {
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
        Thumb { width: tw, height: th, rgb }
    }
}

fn mode_colour(mode: Mode) -> [u8; 3] {
    match mode {
        Mode::ZeroCopy => [40, 200, 90],
        Mode::Copy => [240, 150, 30],
    }
}

fn write_png(path: &Path, width: u32, height: u32, rgb: &[u8]) -> Result<(), DemoError> {
    let err = |detail: String| DemoError::Output { path: path.display().to_string(), detail };
    let file = std::fs::File::create(path).map_err(|e| err(e.to_string()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| err(e.to_string()))?;
    writer.write_image_data(rgb).map_err(|e| err(e.to_string()))?;
    writer.finish().map_err(|e| err(e.to_string()))
}

/// One row per mode (a stripe of the mode's colour on the left: green zero-copy, orange
/// copy), its sampled frames left to right.
pub fn write_contact_sheet(path: &Path, rows: &[(Mode, Vec<Thumb>)]) -> Result<(), DemoError> {
    const PAD: u32 = 8;
    const STRIPE: u32 = 12;
    let cols = rows.iter().map(|(_, t)| t.len()).max().unwrap_or(0).max(1) as u32;
    let cell_w = rows.iter().flat_map(|(_, t)| t.iter().map(|t| t.width)).max().unwrap_or(THUMB_WIDTH);
    let cell_h = rows.iter().flat_map(|(_, t)| t.iter().map(|t| t.height)).max().unwrap_or(THUMB_WIDTH);
    let width = STRIPE + PAD + cols * (cell_w + PAD);
    let height = PAD + rows.len().max(1) as u32 * (cell_h + PAD);
    let mut img = vec![24u8; (width * height * 3) as usize];
    let mut put = |x: u32, y: u32, c: &[u8]| {
        let i = ((y * width + x) * 3) as usize;
        if let Some(px) = img.get_mut(i..i + 3) {
            px.copy_from_slice(&c[..3]);
        }
    };
    for (r, (mode, thumbs)) in rows.iter().enumerate() {
        let y0 = PAD + r as u32 * (cell_h + PAD);
        for y in y0..y0 + cell_h {
            for x in 0..STRIPE {
                put(x, y, &mode_colour(*mode));
            }
        }
        for (c, t) in thumbs.iter().enumerate() {
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
    write_png(path, width, height, &img)
}

/// What the plot's colours mean (it has no text of its own).
pub const PLOT_LEGEND: &str = "left: µs per frame (log scale, 1 µs .. 1 s) against megapixels (0 .. 35) — \
green zero-copy, orange copy-gpu, red copy-cpu; filled dots AR24, rings NV12. \
right: GB/s — grey memcpy, blue detile (one bar per convert entry)";

/// One point of the plot.
#[derive(Debug, Clone, Copy)]
pub struct PlotPoint {
    /// 0 zero-copy, 1 copy-gpu, 2 copy-cpu.
    pub path: usize,
    pub nv12: bool,
    pub megapixels: f64,
    pub us: f64,
}

/// µs per frame against megapixels for each path, and detile GB/s beside memcpy GB/s.
pub fn write_plot(path: &Path, points: &[PlotPoint], memcpy_gbps: f64, detile_gbps: &[f64]) -> Result<(), DemoError> {
    use plotters::prelude::*;
    const W: u32 = 960;
    const H: u32 = 540;
    let err = |detail: String| DemoError::Output { path: path.display().to_string(), detail };
    let mut buf = vec![0u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let (left, right) = root.split_horizontally(700);
        let colours = [RGBColor(40, 170, 80), RGBColor(230, 140, 20), RGBColor(210, 40, 40)];
        let mut chart = ChartBuilder::on(&left)
            .margin(20)
            .build_cartesian_2d(0f64..35f64, (1f64..1e6f64).log_scale())
            .map_err(|e| err(e.to_string()))?;
        // Axes and decade grid lines, drawn by hand (no labels: no fonts).
        let grey = RGBColor(200, 200, 200);
        for decade in [1e1, 1e2, 1e3, 1e4, 1e5] {
            chart.draw_series(std::iter::once(PathElement::new(vec![(0.0, decade), (35.0, decade)], grey))).map_err(|e| err(e.to_string()))?;
        }
        for mp in [1.0, 2.0, 8.0, 33.0] {
            chart.draw_series(std::iter::once(PathElement::new(vec![(mp, 1.0), (mp, 1e6)], grey))).map_err(|e| err(e.to_string()))?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(vec![(0.0, 1e6), (0.0, 1.0), (35.0, 1.0)], BLACK.stroke_width(2))))
            .map_err(|e| err(e.to_string()))?;
        for (p, colour) in colours.iter().enumerate() {
            for nv12 in [false, true] {
                let mut pts: Vec<(f64, f64)> = points
                    .iter()
                    .filter(|q| q.path == p && q.nv12 == nv12 && q.us > 0.0)
                    .map(|q| (q.megapixels, q.us.clamp(1.0, 1e6)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let style = colour.stroke_width(2);
                chart.draw_series(std::iter::once(PathElement::new(pts.clone(), style))).map_err(|e| err(e.to_string()))?;
                chart
                    .draw_series(pts.iter().map(|&(x, y)| {
                        if nv12 {
                            Circle::new((x, y), 6, colour.stroke_width(2))
                        } else {
                            Circle::new((x, y), 5, colour.filled())
                        }
                    }))
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        // Bars: memcpy, then each detile measurement, on a shared linear GB/s scale.
        let max = detile_gbps.iter().copied().fold(memcpy_gbps, f64::max).max(0.1) * 1.1;
        let mut bars = ChartBuilder::on(&right)
            .margin(20)
            .build_cartesian_2d(0f64..(1 + detile_gbps.len()).max(2) as f64, 0f64..max)
            .map_err(|e| err(e.to_string()))?;
        let values = std::iter::once((memcpy_gbps, RGBColor(120, 120, 120))).chain(detile_gbps.iter().map(|g| (*g, RGBColor(40, 90, 220))));
        bars.draw_series(values.enumerate().map(|(i, (v, c))| Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, v)], c.filled())))
            .map_err(|e| err(e.to_string()))?;
        bars.draw_series(std::iter::once(PathElement::new(vec![(0.0, max), (0.0, 0.0), ((1 + detile_gbps.len()).max(2) as f64, 0.0)], BLACK.stroke_width(2))))
            .map_err(|e| err(e.to_string()))?;
        root.present().map_err(|e| err(e.to_string()))?;
    }
    write_png(path, W, H, &buf)
}
