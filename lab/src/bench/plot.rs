//! The benchmark's plot as PNG (`bench.png`): µs per frame by path, and GB/s per
//! conversion beside memcpy and GStreamer.

use std::path::Path;

use crate::error::DemoError;
use crate::picture::{font, write_png};

use super::figures::Figures;

/// µs per frame against megapixels for each path (log scale), and GB/s per conversion beside
/// memcpy and GStreamer: the bench's PNG, with its title, axes, units and legend when a font
/// is available ([`font`]).
pub fn write_plot(path: &Path, fig: &Figures) -> Result<(), DemoError> {
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
