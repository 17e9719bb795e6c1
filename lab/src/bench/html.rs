//! `dmabridge bench --report DIR`: the benchmark as a page a person can read, from the
//! [`Figures`] of a bench JSON. The report is one self-contained XHTML file (`index.html`):
//! the machine, every figure with its ratio to the same run's baseline, the goals marked met
//! or unmet, the change since an old run where one is compared, and two charts as SVG
//! embedded in the page (so the browser renders their text), drawn by plotters' SVG backend.

use std::fmt::Write as _;

use crate::picture::font;

use super::figures::{Change, Figures, ReportError};

fn esc(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const PATH_COLOURS: [(&str, (u8, u8, u8)); 3] = [("zero-copy", (0x28, 0xaa, 0x50)), ("copy-gpu", (0xe6, 0x8c, 0x14)), ("copy-cpu", (0xd2, 0x28, 0x28))];

/// A plotters error as the chart's [`ReportError`].
fn chart_err(chart: &'static str) -> impl Fn(String) -> ReportError {
    move |detail| ReportError::Chart { chart, detail }
}

/// A duration label: µs, ms or s.
fn time_label(u: f64) -> String {
    if u >= 1e6 {
        format!("{} s", u / 1e6)
    } else if u >= 1e3 {
        format!("{} ms", u / 1e3)
    } else {
        format!("{u} µs")
    }
}

/// µs per frame against megapixels, per path and format, log scale, as SVG (plotters'
/// SVG backend). Without a font ([`font`]) it is drawn without text.
pub fn paths_svg(fig: &Figures) -> Result<String, ReportError> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let err = chart_err("paths");
    let text = font().is_ok();
    let max_mp = fig.paths.iter().map(|p| p.2).fold(1.0, f64::max) * 1.05;
    let us: Vec<f64> = fig.paths.iter().map(|p| p.3).filter(|u| *u > 0.0).collect();
    // Whole decades: the figures are bounded (Figures::from_report), so these are too.
    let lo = us.iter().copied().fold(f64::MAX, f64::min).max(0.1).log10().floor();
    let hi = us.iter().copied().fold(1.0, f64::max).log10().ceil().max(lo + 1.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let (plot, legend) = root.split_horizontally(580);
        let mut b = ChartBuilder::on(&plot);
        b.margin(12);
        if text {
            b.caption("Time per frame by path", ("sans-serif", 18).into_font().style(FontStyle::Bold)).x_label_area_size(40).y_label_area_size(78);
        }
        let mut chart = b.build_cartesian_2d(0f64..max_mp, (10f64.powf(lo)..10f64.powf(hi)).log_scale()).map_err(|e| err(e.to_string()))?;
        let mut mesh = chart.configure_mesh();
        mesh.y_labels((hi - lo) as usize + 1).light_line_style(RGBColor(0xee, 0xee, 0xee)).bold_line_style(RGBColor(0xdd, 0xdd, 0xdd));
        if text {
            mesh.x_desc("megapixels per frame")
                .y_desc("µs per frame (log scale)")
                .y_label_formatter(&|u| time_label(*u))
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 15));
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(|e| err(e.to_string()))?;
        let mut entries = Vec::new();
        for (path, (r, g, bl)) in PATH_COLOURS {
            let colour = RGBColor(r, g, bl);
            for format in ["AR24", "NV12"] {
                let mut pts: Vec<(f64, f64)> = fig.paths.iter().filter(|p| p.0 == path && p.1 == format && p.3 > 0.0).map(|p| (p.2, p.3)).collect();
                if pts.is_empty() {
                    continue;
                }
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let nv12 = format == "NV12";
                chart.draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2))).map_err(|e| err(e.to_string()))?;
                // AR24 filled dots, NV12 rings.
                chart
                    .draw_series(pts.iter().map(|&p| if nv12 { Circle::new(p, 4, WHITE.filled()) } else { Circle::new(p, 4, colour.filled()) }))
                    .map_err(|e| err(e.to_string()))?;
                if nv12 {
                    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, colour.stroke_width(2)))).map_err(|e| err(e.to_string()))?;
                }
                entries.push((format!("{path} {format}"), colour, nv12));
            }
        }
        // The legend beside the chart, one line per path and format (NV12 with a ring).
        for (i, (label, colour, nv12)) in entries.iter().enumerate() {
            let y = 50 + 20 * i as i32;
            legend.draw(&PathElement::new(vec![(16, y), (42, y)], colour.stroke_width(2))).map_err(|e| err(e.to_string()))?;
            let dot = if *nv12 { Circle::new((29, y), 4, colour.stroke_width(2)) } else { Circle::new((29, y), 4, colour.filled()) };
            legend.draw(&dot).map_err(|e| err(e.to_string()))?;
            if text {
                let style = ("sans-serif", 14).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
                legend.draw(&Text::new(label.clone(), (48, y), style)).map_err(|e| err(e.to_string()))?;
            }
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    Ok(svg)
}

/// GB/s per conversion (dmabridge on the path the cost model chose, GStreamer where
/// measured) beside the run's memcpy, as SVG bars (plotters' SVG backend).
pub fn conversions_svg(fig: &Figures) -> Result<String, ReportError> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let err = chart_err("conversions");
    let text = font().is_ok();
    let (grey, blue, orange) = (RGBColor(0x88, 0x88, 0x88), RGBColor(0x2a, 0x5a, 0xd8), RGBColor(0xe6, 0x8c, 0x14));
    let rows: Vec<(String, f64, RGBColor)> = std::iter::once(("memcpy (baseline)".to_owned(), fig.memcpy_gbps, grey))
        .chain(fig.conversions.iter().flat_map(|(name, g, gst, path)| {
            let label = name.trim_start_matches("convert ").to_owned();
            std::iter::once((format!("{label} — dmabridge {path}"), *g, blue)).chain(gst.map(|g| (format!("{label} — GStreamer"), g, orange)))
        }))
        .collect();
    const LABELS: u32 = 330;
    const ROW: u32 = 26;
    // At most 2 * MAX_ENTRIES + 1 rows (Figures::from_report), so the height is bounded.
    let height = 40 + rows.len() as u32 * ROW + 60;
    let max = rows.iter().map(|r| r.1).fold(0.1, f64::max) * 1.05;
    let n = rows.len() as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        if text {
            let title = ("sans-serif", 18).into_font().style(FontStyle::Bold).color(&BLACK);
            root.draw(&Text::new("Conversions at 4K: GB/s of output (higher is faster)", (LABELS as i32, 12), title)).map_err(|e| err(e.to_string()))?;
        }
        let (labels, plot) = root.split_horizontally(LABELS);
        let plot = plot.margin(40, 0, 0, 40);
        let mut b = ChartBuilder::on(&plot);
        if text {
            b.x_label_area_size(50);
        }
        let mut chart = b.build_cartesian_2d(0f64..max, 0f64..n).map_err(|e| err(e.to_string()))?;
        let mut mesh = chart.configure_mesh();
        mesh.disable_y_mesh().disable_y_axis().light_line_style(RGBColor(0xee, 0xee, 0xee));
        if text {
            mesh.x_desc("GB/s (output bytes per second)").label_style(("sans-serif", 14)).axis_desc_style(("sans-serif", 15));
        } else {
            mesh.x_labels(0);
        }
        mesh.draw().map_err(|e| err(e.to_string()))?;
        for (i, (label, v, colour)) in rows.iter().enumerate() {
            // Row i from the top: its bar fills most of the row.
            let top = n - i as f64;
            chart.draw_series(std::iter::once(Rectangle::new([(0.0, top - 0.1), (*v, top - 0.85)], colour.filled()))).map_err(|e| err(e.to_string()))?;
            if text {
                let style = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
                chart.draw_series(std::iter::once(Text::new(format!("{v:.2}"), (*v + max * 0.01, top - 0.47), style))).map_err(|e| err(e.to_string()))?;
                // The label to the left of its bar, at the bar's height on the page.
                let (_, y) = chart.backend_coord(&(0.0, top - 0.47));
                let style = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Right, VPos::Center));
                labels.draw(&Text::new(label.clone(), (LABELS as i32 - 6, y), style)).map_err(|e| err(e.to_string()))?;
            }
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    Ok(svg)
}

/// The whole page.
pub fn render(fig: &Figures, json_name: &str, changes: Option<&[Change]>) -> Result<String, ReportError> {
    let mut h = String::from(
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/><title>dmabridge bench</title>\
         <style>body{font-family:sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse;margin:8px 0 20px}\
         td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.n{text-align:right}.met{color:#0a7a2a;font-weight:bold}\
         .unmet{color:#b00;font-weight:bold}.flag{background:#fde2e2}</style></head><body>",
    );
    let _ = write!(h, "<h1>dmabridge bench</h1><p>Every figure is a ratio to a baseline measured in the same run (memcpy: {:.2} GB/s, noise ±{:.0}%; GStreamer <code>videoconvert</code> where it is installed). Raw data: <a href=\"{}\">{}</a>.</p>", fig.memcpy_gbps, fig.memcpy_spread * 100.0, esc(json_name), esc(json_name));
    h.push_str("<h2>Machine</h2><table>");
    let _ = write!(h, "<tr><th>device</th><td>{}</td></tr>", esc(&fig.device));
    for (k, v) in &fig.system {
        if k != "device" {
            let _ = write!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
        }
    }
    h.push_str("</table><h2>Goals</h2><table><tr><th>figure</th><th>measured</th><th>goal</th><th></th></tr>");
    for (name, value, goal, met) in fig.goals() {
        let v = value.map_or("not measured".to_owned(), |v| format!("{v:.3}"));
        let _ = write!(h, "<tr><td>{}</td><td class=\"n\">{v}</td><td>{}</td><td class=\"{}\">{}</td></tr>", esc(&name), esc(&goal), if met { "met" } else { "unmet" }, if met { "met" } else { "unmet" });
    }
    h.push_str("</table><h2>Charts</h2>");
    h.push_str(&paths_svg(fig)?);
    h.push_str(&conversions_svg(fig)?);
    if let Some(changes) = changes {
        h.push_str("<h2>Change since the old run</h2><p>Each figure as a ratio to its own run's memcpy; flagged when outside the noise band (both runs' spreads of the figure and of memcpy).</p><table><tr><th>figure</th><th>old</th><th>new</th><th>change</th><th>noise band</th></tr>");
        for c in changes {
            let _ = write!(
                h,
                "<tr{}><td>{}</td><td class=\"n\">{:.2} {}</td><td class=\"n\">{:.2} {}</td><td class=\"n\">{:+.1}%</td><td class=\"n\">±{:.1}%</td></tr>",
                if c.flagged { " class=\"flag\"" } else { "" },
                esc(&c.figure),
                c.old,
                c.unit,
                c.new,
                c.unit,
                c.change_pct,
                c.band_pct
            );
        }
        h.push_str("</table>");
    }
    h.push_str("<h2>Paths</h2><table><tr><th>path, format, size</th><th>GB/s</th><th>× memcpy</th><th>noise</th></tr>");
    for f in fig.figures.iter().filter(|f| !f.name.starts_with("convert ") && f.unit == "GB/s") {
        let _ = write!(h, "<tr><td>{}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.3}</td><td class=\"n\">±{:.0}%</td></tr>", esc(&f.name), f.value, f.normalised, f.spread * 100.0);
    }
    h.push_str("</table><h2>Conversions</h2><table><tr><th>conversion</th><th>path</th><th>GB/s</th><th>× memcpy</th><th>GStreamer GB/s</th><th>× GStreamer</th></tr>");
    for (name, g, gst, path) in &fig.conversions {
        let gs = gst.map_or("-".to_owned(), |v| format!("{v:.2}"));
        let vs = gst.map_or("-".to_owned(), |v| format!("{:.1}", g / v));
        let _ = write!(h, "<tr><td>{}</td><td>{}</td><td class=\"n\">{g:.2}</td><td class=\"n\">{:.2}</td><td class=\"n\">{gs}</td><td class=\"n\">{vs}</td></tr>", esc(name), esc(path), g / fig.memcpy_gbps);
    }
    h.push_str("</table><h2>CPU libraries on the same frames</h2><table><tr><th>conversion</th><th>peer (1 thread)</th><th>GB/s</th><th>dmabridge ÷ peer</th><th>dmabridge on 1 thread, GB/s</th><th>per thread (1 thread ÷ peer)</th></tr>");
    for p in &fig.peers {
        let (one, per) = (p.one_thread_gbps.map_or("-".to_owned(), |v| format!("{v:.2}")), p.ratio_per_thread.map_or("-".to_owned(), |v| format!("{v:.2}")));
        let _ = write!(h, "<tr><td>{}</td><td>{}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td class=\"n\">{one}</td><td class=\"n\">{per}</td></tr>", esc(&p.conversion), esc(&p.peer), p.gbps, p.ratio_total);
    }
    h.push_str("</table><h2>Fused tiled -> RGB beside the linear conversion, taking turns</h2><table><tr><th>conversion</th><th>threads</th><th>fused GB/s</th><th>linear GB/s</th><th>fused ÷ linear</th><th>on 1 thread: fused</th><th>linear</th><th>fused ÷ linear</th></tr>");
    for (name, b) in &fig.beside_linear {
        let (f1, l1) = (b.fused_gbps_one_thread, b.linear_gbps_one_thread);
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td class=\"n\">{f1:.2}</td><td class=\"n\">{l1:.2}</td><td class=\"n\">{:.2}</td></tr>",
            esc(name),
            b.threads,
            b.fused_gbps,
            b.linear_gbps,
            b.fused_gbps / b.linear_gbps,
            f1 / l1
        );
    }
    h.push_str("</table></body></html>\n");
    Ok(h)
}


#[cfg(test)]
mod tests {
    use super::super::figures::{MAX_DIMENSION, MAX_FIGURE};
    use super::super::results::BenchReport;
    use super::*;

    /// The largest figures allowed still draw, in bounded time.
    #[test]
    fn the_largest_figures_allowed_still_draw() {
        let v = serde_json::json!({
            "device": "d", "system": {"cpu": "c", "kernel": "k"}, "memcpy_gbps": 10.0, "memcpy_spread": 0.02,
            "results": [{"path": "zero-copy", "format": "AR24", "width": MAX_DIMENSION, "height": 2160, "us_per_frame": MAX_FIGURE, "gbps": 3000.0, "spread": 0.05}],
            "convert": [{"layout": "linear", "format": "NV12", "to_format": "NV12", "gbps": MAX_FIGURE, "path": "cpu", "gstreamer_gbps": 1.0, "spread": 0.04}],
            "negotiate_us": 1.0, "handoff_us": 5.0
        });
        let fig = Figures::from_report(&serde_json::from_value::<BenchReport>(v).unwrap()).unwrap();
        assert!(render(&fig, "x.json", None).unwrap().contains("<svg"));
    }
}
