//! `dmabridge bench --report DIR` and `--compare OLD.json [NEW.json]`: the benchmark as a
//! page a person can read, and the change between two runs.
//!
//! The report is one self-contained XHTML file (`index.html`): the machine, every figure with
//! its ratio to the same run's baseline, the goals marked met or unmet, and two charts as
//! SVG embedded in the page (so the browser renders their text). It is built from the bench
//! JSON alone ([`Figures::from_json`]), so an old run's JSON renders as well as a new one.
//!
//! Comparing: machines here are noisy (memcpy alone moves by a third between runs), so each
//! figure is compared as a ratio to its own run's memcpy, and a change counts only outside
//! the noise band: the two runs' spreads (interquartile range / median of the repetitions)
//! of the figure and of memcpy, added, at least [`MIN_BAND`].

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

/// The narrowest band a change must leave to be flagged.
pub const MIN_BAND: f64 = 0.05;

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct SystemInfo {
    pub device: String,
    pub driver: String,
    pub cpu: String,
    pub kernel: String,
}

impl SystemInfo {
    pub fn collect(engine: &dmabridge::Engine) -> SystemInfo {
        let info = engine.info();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| t.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_owned()))
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let u = rustix::system::uname();
        SystemInfo {
            device: info.name.clone(),
            driver: format!("{} ({})", info.driver_name, info.driver_info),
            cpu: format!("{cpu}, {cores} threads"),
            kernel: format!("{} {}", u.sysname().to_string_lossy(), u.release().to_string_lossy()),
        }
    }
}

/// One figure of a run, normalised: higher is better.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub name: String,
    /// As measured (GB/s or µs).
    pub value: f64,
    pub unit: &'static str,
    /// The figure as a ratio to the run's memcpy: GB/s / memcpy GB/s, or for times,
    /// memcpy GB/s / µs (so that higher is better either way).
    pub normalised: f64,
    pub spread: f64,
}

/// Everything the report and the comparison read from a bench JSON.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub device: String,
    pub system: Vec<(String, String)>,
    pub memcpy_gbps: f64,
    pub memcpy_spread: f64,
    pub figures: Vec<Figure>,
    /// (path, format, megapixels, µs per frame).
    pub paths: Vec<(String, String, f64, f64)>,
    /// (name, GB/s, GStreamer GB/s, path chosen).
    pub conversions: Vec<(String, f64, Option<f64>, String)>,
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn s(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

impl Figures {
    /// The figures of a bench JSON (`dmabridge bench --json`), or why it is not one.
    pub fn from_json(v: &Value) -> Result<Figures, String> {
        let memcpy = v["memcpy_gbps"].as_f64().filter(|m| *m > 0.0).ok_or("not a dmabridge bench JSON (no memcpy_gbps)")?;
        let mut out = Figures {
            device: s(&v["device"]),
            memcpy_gbps: memcpy,
            memcpy_spread: f(&v["memcpy_spread"]),
            ..Figures::default()
        };
        if let Some(sys) = v["system"].as_object() {
            out.system = sys.iter().map(|(k, v)| (k.clone(), s(v))).collect();
        }
        for r in v["results"].as_array().into_iter().flatten() {
            let (path, format) = (s(&r["path"]), s(&r["format"]));
            let (w, h, us, gbps) = (f(&r["width"]), f(&r["height"]), f(&r["us_per_frame"]), f(&r["gbps"]));
            out.paths.push((path.clone(), format.clone(), w * h / 1e6, us));
            out.figures.push(Figure {
                name: format!("{path} {format} {w}x{h}"),
                value: gbps,
                unit: "GB/s",
                normalised: gbps / memcpy,
                spread: f(&r["spread"]),
            });
        }
        for c in v["convert"].as_array().into_iter().flatten() {
            let name = format!("convert {} {} -> {}", s(&c["format"]), s(&c["layout"]), s(&c["to_format"]));
            let gbps = f(&c["gbps"]);
            out.conversions.push((name.clone(), gbps, c["gstreamer_gbps"].as_f64(), s(&c["path"])));
            out.figures.push(Figure { name, value: gbps, unit: "GB/s", normalised: gbps / memcpy, spread: f(&c["spread"]) });
        }
        for (key, name) in [("negotiate_us", "negotiation"), ("handoff_us", "descriptor handoff")] {
            if let Some(us) = v[key].as_f64().filter(|u| *u > 0.0) {
                out.figures.push(Figure { name: name.into(), value: us, unit: "µs", normalised: memcpy / us, spread: 0.0 });
            }
        }
        Ok(out)
    }

    /// The goals of the issues, each with its measured ratio and whether it is met.
    pub fn goals(&self) -> Vec<(String, Option<f64>, String, bool)> {
        // 3840 x 2160 = 8.2944 megapixels.
        let path = |p: &str, fmt: &str, mp: f64| self.paths.iter().find(|(q, f, m, _)| q == p && f == fmt && (m - mp).abs() < 0.01).map(|x| x.3);
        let mut out = Vec::new();
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        let zc = ratio(path("zero-copy", "AR24", 8.2944), path("copy-gpu", "AR24", 8.2944));
        out.push(("zero-copy ÷ copy-gpu µs per frame, 4K AR24".into(), zc, "≤ 0.01".into(), zc.is_some_and(|r| r <= 0.01)));
        let big = self.paths.iter().filter(|(p, f, _, _)| p == "zero-copy" && f == "AR24").max_by(|a, b| a.2.total_cmp(&b.2)).map(|x| x.3);
        let small = self.paths.iter().filter(|(p, f, _, _)| p == "zero-copy" && f == "AR24").min_by(|a, b| a.2.total_cmp(&b.2)).map(|x| x.3);
        let flat = ratio(big, small);
        out.push(("zero-copy largest ÷ smallest frame µs (flat)".into(), flat, "≤ 1.2".into(), flat.is_some_and(|r| r <= 1.2)));
        let detiles: Vec<&(String, f64, Option<f64>, String)> = self.conversions.iter().filter(|c| c.0.ends_with("-> NV12") && !c.0.contains(" linear ")).collect();
        let worst = detiles.iter().map(|c| c.1).reduce(f64::min).map(|g| g / self.memcpy_gbps);
        out.push(("slowest 4K detile ÷ memcpy GB/s".into(), worst, "≥ 0.5".into(), worst.is_some_and(|r| r >= 0.5)));
        let vs = detiles.iter().filter_map(|c| c.2.map(|g| c.1 / g)).reduce(f64::min);
        out.push(("slowest detile ÷ GStreamer videoconvert".into(), vs, "≥ 3".into(), vs.is_some_and(|r| r >= 3.0)));
        let bgrx = self.conversions.iter().find(|c| c.0 == "convert NV12 linear -> XR24").and_then(|c| c.2.map(|g| c.1 / g));
        out.push(("NV12 -> XR24 (BGRx) ÷ GStreamer videoconvert".into(), bgrx, "≥ 1".into(), bgrx.is_some_and(|r| r >= 1.0)));
        out
    }
}

/// The change of one figure between two runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub figure: String,
    pub old: f64,
    pub new: f64,
    pub unit: &'static str,
    /// Change of the normalised figure, in % (positive: better).
    pub change_pct: f64,
    /// The noise band, in %.
    pub band_pct: f64,
    /// Outside the band.
    pub flagged: bool,
}

/// Every figure both runs have, old to new.
pub fn compare(old: &Figures, new: &Figures) -> Vec<Change> {
    new.figures
        .iter()
        .filter_map(|n| {
            let o = old.figures.iter().find(|o| o.name == n.name)?;
            if o.normalised <= 0.0 {
                return None;
            }
            let change = n.normalised / o.normalised - 1.0;
            let band = (o.spread + n.spread + old.memcpy_spread + new.memcpy_spread).max(MIN_BAND);
            Some(Change {
                figure: n.name.clone(),
                old: o.value,
                new: n.value,
                unit: n.unit,
                change_pct: change * 100.0,
                band_pct: band * 100.0,
                flagged: change.abs() > band,
            })
        })
        .collect()
}

/// The comparison as text, one line per figure.
pub fn changes_text(changes: &[Change]) -> String {
    let mut out = String::new();
    for c in changes {
        let _ = writeln!(
            out,
            "{:<44} {:>10.2} -> {:>10.2} {:<5} {:>+7.1}% (noise ±{:.1}%){}",
            c.figure,
            c.old,
            c.new,
            c.unit,
            c.change_pct,
            c.band_pct,
            if c.flagged { if c.change_pct < 0.0 { "  SLOWER" } else { "  FASTER" } } else { "" }
        );
    }
    out
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const PATH_COLOURS: [(&str, &str); 3] = [("zero-copy", "#28aa50"), ("copy-gpu", "#e68c14"), ("copy-cpu", "#d22828")];

/// µs per frame against megapixels, per path and format, log scale, as SVG.
pub fn paths_svg(fig: &Figures) -> String {
    let (w, h, l, r, t, b) = (760.0, 440.0, 90.0, 190.0, 40.0, 60.0);
    let (pw, ph) = (w - l - r, h - t - b);
    let max_mp = fig.paths.iter().map(|p| p.2).fold(1.0, f64::max) * 1.05;
    let us: Vec<f64> = fig.paths.iter().map(|p| p.3).filter(|u| *u > 0.0).collect();
    let lo = us.iter().copied().fold(f64::MAX, f64::min).max(0.1).log10().floor();
    let hi = us.iter().copied().fold(1.0, f64::max).log10().ceil().max(lo + 1.0);
    let x = |mp: f64| l + mp / max_mp * pw;
    let y = |u: f64| t + ph - (u.max(0.1).log10() - lo) / (hi - lo) * ph;
    let mut svg = format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#);
    let _ = write!(svg, r#"<text x="{}" y="22" font-size="15" font-weight="bold">Time per frame by path</text>"#, l);
    for d in lo as i32..=hi as i32 {
        let u = 10f64.powi(d);
        let label = if u >= 1e6 { format!("{} s", u / 1e6) } else if u >= 1e3 { format!("{} ms", u / 1e3) } else { format!("{u} µs") };
        let _ = write!(svg, r##"<line x1="{l}" x2="{}" y1="{y0}" y2="{y0}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##, l + pw, l - 6.0, y(u) + 4.0, esc(&label), y0 = y(u));
    }
    let step = if max_mp > 20.0 { 5.0 } else { 1.0 };
    let mut mp = 0.0;
    while mp <= max_mp {
        let _ = write!(svg, r##"<line x1="{x0}" x2="{x0}" y1="{t}" y2="{}" stroke="#eee"/><text x="{x0}" y="{}" text-anchor="middle">{mp}</text>"##, t + ph, t + ph + 16.0, x0 = x(mp));
        mp += step;
    }
    let _ = write!(svg, r##"<line x1="{l}" x2="{l}" y1="{t}" y2="{}" stroke="#000"/><line x1="{l}" x2="{}" y1="{}" y2="{}" stroke="#000"/>"##, t + ph, l + pw, t + ph, t + ph);
    let _ = write!(svg, r#"<text x="{}" y="{}" text-anchor="middle">megapixels per frame</text>"#, l + pw / 2.0, h - 14.0);
    let _ = write!(svg, r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">µs per frame (log scale)</text>"#, t + ph / 2.0, t + ph / 2.0);
    let mut legend_y = t + 10.0;
    for (path, colour) in PATH_COLOURS {
        for format in ["AR24", "NV12"] {
            let mut pts: Vec<(f64, f64)> = fig.paths.iter().filter(|p| p.0 == path && p.1 == format && p.3 > 0.0).map(|p| (p.2, p.3)).collect();
            if pts.is_empty() {
                continue;
            }
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let dash = if format == "NV12" { r#" stroke-dasharray="6 4""# } else { "" };
            let poly: Vec<String> = pts.iter().map(|(m, u)| format!("{:.1},{:.1}", x(*m), y(*u))).collect();
            let _ = write!(svg, r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#, poly.join(" "));
            for (m, u) in &pts {
                let fill = if format == "NV12" { "white" } else { colour };
                let _ = write!(svg, r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{fill}" stroke="{colour}" stroke-width="2"><title>{path} {format}: {u:.1} µs at {m:.1} MP</title></circle>"#, x(*m), y(*u));
            }
            let lx = l + pw + 16.0;
            let _ = write!(svg, r#"<line x1="{lx}" x2="{}" y1="{legend_y}" y2="{legend_y}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{}">{path} {format}</text>"#, lx + 26.0, lx + 32.0, legend_y + 4.0);
            legend_y += 20.0;
        }
    }
    svg.push_str("</svg>");
    svg
}

/// GB/s per conversion (dmabridge on the path the cost model chose, GStreamer where
/// measured) beside the run's memcpy, as SVG bars.
pub fn conversions_svg(fig: &Figures) -> String {
    let rows: Vec<(String, f64, &str)> = std::iter::once(("memcpy (baseline)".to_owned(), fig.memcpy_gbps, "#888"))
        .chain(fig.conversions.iter().flat_map(|(name, g, gst, path)| {
            let label = name.trim_start_matches("convert ").to_owned();
            std::iter::once((format!("{label} — dmabridge {path}"), *g, "#2a5ad8")).chain(gst.map(|g| (format!("{label} — GStreamer"), g, "#e68c14")))
        }))
        .collect();
    let (l, r, t, bar) = (330.0, 70.0, 40.0, 20.0);
    let w = 860.0;
    let h = t + rows.len() as f64 * (bar + 6.0) + 50.0;
    let pw = w - l - r;
    let max = rows.iter().map(|r| r.1).fold(0.1, f64::max) * 1.05;
    let x = |g: f64| l + g / max * pw;
    let mut svg = format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#);
    let _ = write!(svg, r#"<text x="{l}" y="22" font-size="15" font-weight="bold">Conversions at 4K: GB/s of output (higher is faster)</text>"#);
    let ticks = if max > 10.0 { 2.0 } else if max > 4.0 { 1.0 } else { 0.5 };
    let mut g = 0.0;
    let base = t + rows.len() as f64 * (bar + 6.0);
    while g <= max {
        let _ = write!(svg, r##"<line x1="{x0}" x2="{x0}" y1="{t}" y2="{base}" stroke="#eee"/><text x="{x0}" y="{}" text-anchor="middle">{g}</text>"##, base + 16.0, x0 = x(g));
        g += ticks;
    }
    for (i, (label, v, colour)) in rows.iter().enumerate() {
        let y0 = t + i as f64 * (bar + 6.0);
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text><rect x="{l}" y="{y0}" width="{:.1}" height="{bar}" fill="{colour}"/><text x="{:.1}" y="{}">{v:.2}</text>"#,
            l - 6.0,
            y0 + bar - 5.0,
            esc(label),
            x(*v) - l,
            x(*v) + 4.0,
            y0 + bar - 5.0
        );
    }
    let _ = write!(svg, r##"<line x1="{l}" x2="{l}" y1="{t}" y2="{base}" stroke="#000"/><line x1="{l}" x2="{}" y1="{base}" y2="{base}" stroke="#000"/>"##, l + pw);
    let _ = write!(svg, r#"<text x="{}" y="{}" text-anchor="middle">GB/s (output bytes per second)</text>"#, l + pw / 2.0, base + 36.0);
    svg.push_str("</svg>");
    svg
}

/// The whole page.
pub fn render(fig: &Figures, json_name: &str, changes: Option<&[Change]>) -> String {
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
    h.push_str(&paths_svg(fig));
    h.push_str(&conversions_svg(fig));
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
    h.push_str("</table></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(detile: f64) -> Value {
        serde_json::json!({
            "device": "d", "system": {"cpu": "c", "kernel": "k"}, "memcpy_gbps": 10.0, "memcpy_spread": 0.02,
            "results": [{"path": "zero-copy", "format": "AR24", "width": 3840, "height": 2160, "us_per_frame": 10.0, "gbps": 3000.0, "spread": 0.05}],
            "convert": [{"layout": "samsung-64x32", "format": "NV12", "to_format": "NV12", "gbps": detile, "path": "cpu", "gstreamer_gbps": 1.0, "spread": 0.04}],
            "negotiate_us": 1.0, "handoff_us": 5.0
        })
    }

    #[test]
    fn a_halved_detile_is_flagged_and_a_run_against_itself_is_not() {
        let (a, b) = (Figures::from_json(&run(8.0)).unwrap(), Figures::from_json(&run(4.0)).unwrap());
        assert!(compare(&a, &a).iter().all(|c| !c.flagged && c.change_pct == 0.0));
        let c = compare(&a, &b);
        let detile = c.iter().find(|c| c.figure.contains("samsung")).unwrap();
        assert!(detile.flagged && (detile.change_pct + 50.0).abs() < 1e-9, "{detile:?}");
        assert!(changes_text(&c).contains("SLOWER"));
        assert!(Figures::from_json(&serde_json::json!({"x": 1})).is_err());
    }
}
