//! The demo's contact sheet: a PNG of each mode's sampled frames under its label, each
//! captioned with its index and whether it verified.

use std::path::Path;

use crate::error::DemoError;
use crate::picture::{font, write_png};

use super::config::Mode;

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
