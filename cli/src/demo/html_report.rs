//! `dmabridge bench --report DIR` and `--compare OLD.json [NEW.json]`: the benchmark as a
//! page a person can read, and the change between two runs.
//!
//! The report is one self-contained XHTML file (`index.html`): the machine, every figure with
//! its ratio to the same run's baseline, the goals marked met or unmet, and two charts as
//! SVG embedded in the page (so the browser renders their text), drawn by plotters' SVG
//! backend. It is built from the bench JSON alone, read back through the types it was
//! written with ([`read_report`], [`BenchReport`]; fields added since an old run default),
//! so an old run's JSON renders as well as a new one. What is read is bounded: a file over
//! [`MAX_REPORT_BYTES`], a dimension over [`MAX_DIMENSION`], more than [`MAX_ENTRIES`]
//! figures, or a figure that is not a finite number in range is a typed [`ReportError`].
//!
//! Comparing: machines here are noisy (memcpy alone moves by a third between runs), so each
//! figure is compared as a ratio to its own run's memcpy, and a change counts only outside
//! the noise band: the two runs' spreads (interquartile range / median of the repetitions)
//! of the figure and of memcpy, added, at least [`MIN_BAND`].

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::bench::{BenchReport, BesideLinear};

/// The narrowest band a change must leave to be flagged.
pub const MIN_BAND: f64 = 0.05;

/// The largest bench JSON read back (a report is a few kB).
pub const MAX_REPORT_BYTES: u64 = 16 << 20;
/// The largest frame width or height a report may name.
pub const MAX_DIMENSION: u32 = 1 << 16;
/// The most path and conversion entries a report may hold.
pub const MAX_ENTRIES: usize = 1024;
/// The largest figure (GB/s or µs) a report may hold: beyond any machine.
const MAX_FIGURE: f64 = 1e12;

/// Why a bench JSON cannot be read back or drawn.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file could not be read: missing, not a regular file (a FIFO, a device), or over
    /// [`MAX_REPORT_BYTES`] (`ReadFileError::TooLarge`, which names the limit).
    #[error("a bench JSON: {0}")]
    Read(#[from] dmabridge::interop::user_file::ReadFileError),
    #[error("{path} is not a dmabridge bench JSON: {source}")]
    NotBenchJson { path: String, source: serde_json::Error },
    #[error("not a dmabridge bench JSON: {what} is {value}, outside {range}")]
    OutOfRange { what: String, value: String, range: String },
    #[error("not a dmabridge bench JSON: {count} entries, over {MAX_ENTRIES}")]
    TooManyEntries { count: usize },
    #[error("cannot draw the {chart} chart: {detail}")]
    Chart { chart: &'static str, detail: String },
}

/// A bench JSON file (`dmabridge bench --json`, or a report's `bench.json`), read through
/// the types it was written with; at most [`MAX_REPORT_BYTES`].
pub fn read_report(path: &Path) -> Result<BenchReport, ReportError> {
    // A regular file only: a FIFO given as --compare is refused, not waited on.
    let text = dmabridge::interop::user_file::read_regular(path, MAX_REPORT_BYTES)?;
    serde_json::from_slice(&text).map_err(|source| ReportError::NotBenchJson { path: path.display().to_string(), source })
}

/// `v`, when it is a finite figure in `0..=MAX_FIGURE`.
fn figure(what: impl FnOnce() -> String, v: f64) -> Result<f64, ReportError> {
    if v.is_finite() && (0.0..=MAX_FIGURE).contains(&v) {
        Ok(v)
    } else {
        Err(ReportError::OutOfRange { what: what(), value: v.to_string(), range: format!("0..={MAX_FIGURE:e}") })
    }
}

/// `v`, when it is a [`figure`] that others are divided by: above 0 as well.
fn divisor(what: impl Fn() -> String, v: f64) -> Result<f64, ReportError> {
    let v = figure(&what, v)?;
    if v <= 0.0 {
        return Err(ReportError::OutOfRange { what: what(), value: v.to_string(), range: "above 0".into() });
    }
    Ok(v)
}

/// `v`, when it is a frame dimension up to [`MAX_DIMENSION`].
fn dimension(what: impl FnOnce() -> String, v: u32) -> Result<f64, ReportError> {
    if v <= MAX_DIMENSION {
        Ok(f64::from(v))
    } else {
        Err(ReportError::OutOfRange { what: what(), value: v.to_string(), range: format!("0..={MAX_DIMENSION}") })
    }
}

/// The machine a run was measured on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
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
    /// The CPU libraries beside the conversions, measured.
    pub peers: Vec<PeerFigure>,
    /// Each fused conversion (by its name in [`Figures::conversions`]) beside the linear
    /// one, taking turns.
    pub beside_linear: Vec<(String, BesideLinear)>,
}

/// One CPU library's figure beside one of dmabridge's conversions.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerFigure {
    /// The conversion's name in [`Figures::conversions`].
    pub conversion: String,
    pub peer: String,
    pub gbps: f64,
    /// dmabridge's GB/s over the peer's, in total and (CPU path) per thread: dmabridge
    /// on one thread (`one_thread_gbps`) over the peer, also on one.
    pub ratio_total: f64,
    pub ratio_per_thread: Option<f64>,
    pub one_thread_gbps: Option<f64>,
}

impl Figures {
    /// The figures of a bench run, checked: every figure finite and in range, every
    /// dimension at most [`MAX_DIMENSION`], at most [`MAX_ENTRIES`] entries.
    pub fn from_report(r: &BenchReport) -> Result<Figures, ReportError> {
        let count = r.results.len() + r.convert.len() + r.convert.iter().map(|c| c.peers.len()).sum::<usize>();
        if count > MAX_ENTRIES {
            return Err(ReportError::TooManyEntries { count });
        }
        let memcpy = divisor(|| "memcpy_gbps".into(), r.memcpy_gbps)?;
        let system = [("driver", &r.system.driver), ("cpu", &r.system.cpu), ("kernel", &r.system.kernel)];
        let mut out = Figures {
            device: r.device.clone(),
            system: system.into_iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.to_owned(), v.clone())).collect(),
            memcpy_gbps: memcpy,
            memcpy_spread: figure(|| "memcpy_spread".into(), r.memcpy_spread)?,
            ..Figures::default()
        };
        for (i, p) in r.results.iter().enumerate() {
            let what = |field: &str| format!("results[{i}].{field}");
            let (w, h) = (dimension(|| what("width"), p.width)?, dimension(|| what("height"), p.height)?);
            let (us, gbps) = (figure(|| what("us_per_frame"), p.us_per_frame)?, figure(|| what("gbps"), p.gbps)?);
            out.paths.push((p.path.clone(), p.format.clone(), w * h / 1e6, us));
            out.figures.push(Figure {
                name: format!("{} {} {w}x{h}", p.path, p.format),
                value: gbps,
                unit: "GB/s",
                normalised: gbps / memcpy,
                spread: figure(|| what("spread"), p.spread)?,
            });
        }
        for (i, c) in r.convert.iter().enumerate() {
            let what = |field: &str| format!("convert[{i}].{field}");
            dimension(|| what("width"), c.width)?;
            dimension(|| what("height"), c.height)?;
            let name = format!("convert {} {} -> {}", c.format, c.layout, c.to_format);
            let gbps = figure(|| what("gbps"), c.gbps)?;
            let gst = c.gstreamer_gbps.map(|g| figure(|| what("gstreamer_gbps"), g)).transpose()?;
            out.conversions.push((name.clone(), gbps, gst, c.path.name().to_owned()));
            for (j, p) in c.peers.iter().enumerate() {
                let Some(g) = p.gbps else { continue };
                let what = |field: &str| format!("convert[{i}].peers[{j}].{field}");
                let g = divisor(|| what("gbps"), g)?;
                let per_thread = p.ratio_per_thread.map(|r| figure(|| what("ratio_per_thread"), r)).transpose()?;
                let one_thread = c.gbps_one_thread.map(|g| figure(|| what("gbps_one_thread"), g)).transpose()?;
                out.peers.push(PeerFigure { conversion: name.clone(), peer: p.name.clone(), gbps: g, ratio_total: gbps / g, ratio_per_thread: per_thread, one_thread_gbps: one_thread });
                out.figures.push(Figure { name: format!("{} beside {name}", p.name), value: g, unit: "GB/s", normalised: g / memcpy, spread: 0.0 });
            }
            if let Some(b) = &c.beside_linear {
                let what = |field: &str| format!("convert[{i}].beside_linear.{field}");
                let checked = BesideLinear {
                    threads: b.threads,
                    fused_gbps: divisor(|| what("fused_gbps"), b.fused_gbps)?,
                    linear_gbps: divisor(|| what("linear_gbps"), b.linear_gbps)?,
                    fused_gbps_one_thread: divisor(|| what("fused_gbps_one_thread"), b.fused_gbps_one_thread)?,
                    linear_gbps_one_thread: divisor(|| what("linear_gbps_one_thread"), b.linear_gbps_one_thread)?,
                };
                out.beside_linear.push((name.clone(), checked));
            }
            out.figures.push(Figure { name, value: gbps, unit: "GB/s", normalised: gbps / memcpy, spread: figure(|| what("spread"), c.spread)? });
        }
        for (us, name) in [(r.negotiate_us, "negotiation"), (r.handoff_us, "descriptor handoff")] {
            let us = figure(|| name.into(), us)?;
            if us > 0.0 {
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
        // Issue 23: every colour conversion GStreamer also does (NV12 -> BGRx, tiled NV12 ->
        // BGRx, BGRx -> NV12, P010 -> AR30) at 3x videoconvert or more.
        let colour = self.conversions.iter().filter(|c| !detiles.iter().any(|d| d.0 == c.0)).filter_map(|c| c.2.map(|g| c.1 / g)).reduce(f64::min);
        out.push(("slowest colour conversion ÷ GStreamer videoconvert".into(), colour, "≥ 3".into(), colour.is_some_and(|r| r >= 3.0)));
        // Issue 23: a tiled frame converted to RGB in one pass costs at most a fifth more
        // than a linear one, both as the bench runs them (the CPU path's threads), taking
        // turns. (The one-thread pair is in the report beside it.)
        let threads = self.beside_linear.iter().map(|(_, b)| b.threads).max().unwrap_or(0);
        let fused = self.beside_linear.iter().map(|(_, b)| b.fused_gbps / b.linear_gbps).reduce(f64::min);
        out.push((format!("slowest fused tiled -> RGB ÷ linear NV12 -> RGB, taking turns ({threads} threads)"), fused, "≥ 0.8".into(), fused.is_some_and(|r| r >= 0.8)));
        // Issue 23's per-thread goals against libyuv, one thread each.
        let per_thread = |conversion: &str, peer: &str| self.peers.iter().find(|p| p.conversion == conversion && p.peer.starts_with(peer)).and_then(|p| p.ratio_per_thread);
        let yuv = per_thread("convert NV12 linear -> XR24", "libyuv NV12ToARGBMatrix");
        out.push(("NV12 -> XR24 BT.709 per thread ÷ libyuv NV12ToARGBMatrix (1 thread)".into(), yuv, "≥ 1".into(), yuv.is_some_and(|r| r >= 1.0)));
        let mm21 = per_thread("convert NV12 nv12-16l32s -> NV12", "libyuv MM21ToNV12");
        out.push(("nv12-16l32s detile per thread ÷ libyuv MM21ToNV12 (1 thread)".into(), mm21, "≥ 1".into(), mm21.is_some_and(|r| r >= 1.0)));
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
/// SVG backend). Without a font ([`super::report::font`]) it is drawn without text.
pub fn paths_svg(fig: &Figures) -> Result<String, ReportError> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let err = chart_err("paths");
    let text = super::report::font().is_ok();
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
    let text = super::report::font().is_ok();
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
    use super::*;

    fn run(detile: f64) -> serde_json::Value {
        serde_json::json!({
            "device": "d", "system": {"cpu": "c", "kernel": "k"}, "memcpy_gbps": 10.0, "memcpy_spread": 0.02,
            "results": [{"path": "zero-copy", "format": "AR24", "width": 3840, "height": 2160, "us_per_frame": 10.0, "gbps": 3000.0, "spread": 0.05}],
            "convert": [{"layout": "samsung-64x32", "format": "NV12", "to_format": "NV12", "gbps": detile, "path": "cpu", "gstreamer_gbps": 1.0, "spread": 0.04}],
            "negotiate_us": 1.0, "handoff_us": 5.0
        })
    }

    fn figures(v: serde_json::Value) -> Result<Figures, ReportError> {
        Figures::from_report(&serde_json::from_value::<BenchReport>(v).map_err(|source| ReportError::NotBenchJson { path: "test".into(), source })?)
    }

    /// The fused goal is the turn-taking pair's ratio, the slowest layout's; a report
    /// without one has it unmeasured, and a pair with a figure out of range is refused.
    #[test]
    fn the_fused_goal_is_the_slowest_turn_taking_ratio() {
        let fused = |v: &serde_json::Value| figures(v.clone()).unwrap().goals().into_iter().find(|g| g.0.starts_with("slowest fused")).unwrap();
        let mut v = run(8.0);
        assert_eq!(fused(&v).1, None);
        let pair = |fused: f64, linear: f64| serde_json::json!({"threads": 2, "fused_gbps": fused, "linear_gbps": linear, "fused_gbps_one_thread": 15.0, "linear_gbps_one_thread": 24.0});
        let entry = |layout: &str, b: serde_json::Value| serde_json::json!({"layout": layout, "format": "NV12", "to_format": "XR24", "gbps": 20.0, "path": "cpu", "gstreamer_gbps": null, "beside_linear": b});
        v["convert"] = serde_json::json!([entry("samsung-64x32", pair(24.0, 25.0)), entry("nv12-8l128", pair(19.0, 25.0))]);
        let goal = fused(&v);
        assert!(goal.1.is_some_and(|r| (r - 0.76).abs() < 1e-9) && !goal.3, "{goal:?}");
        assert!(goal.0.contains("2 threads"), "{}", goal.0);
        v["convert"][1]["beside_linear"] = pair(21.0, 25.0);
        assert!(fused(&v).3);
        v["convert"][1]["beside_linear"]["linear_gbps"] = serde_json::json!(0.0);
        assert!(matches!(figures(v), Err(ReportError::OutOfRange { .. })));
    }

    #[test]
    fn a_halved_detile_is_flagged_and_a_run_against_itself_is_not() {
        let (a, b) = (figures(run(8.0)).unwrap(), figures(run(4.0)).unwrap());
        assert!(compare(&a, &a).iter().all(|c| !c.flagged && c.change_pct == 0.0));
        let c = compare(&a, &b);
        let detile = c.iter().find(|c| c.figure.contains("samsung")).unwrap();
        assert!(detile.flagged && (detile.change_pct + 50.0).abs() < 1e-9, "{detile:?}");
        assert!(changes_text(&c).contains("SLOWER"));
        assert!(matches!(figures(serde_json::json!({"x": 1})), Err(ReportError::NotBenchJson { .. })));
    }

    #[test]
    fn absurd_figures_and_dimensions_are_typed_errors() {
        let mut v = run(8.0);
        v["results"][0]["width"] = serde_json::json!(u32::MAX);
        assert!(matches!(figures(v), Err(ReportError::OutOfRange { what, .. }) if what == "results[0].width"));
        let mut v = run(1e300);
        v["convert"][0]["layout"] = serde_json::json!("linear");
        assert!(matches!(figures(v), Err(ReportError::OutOfRange { what, .. }) if what == "convert[0].gbps"));
        let mut v = run(8.0);
        v["memcpy_gbps"] = serde_json::json!(0.0);
        assert!(matches!(figures(v), Err(ReportError::OutOfRange { .. })));
        let mut v = run(8.0);
        let entry = v["results"][0].clone();
        v["results"] = serde_json::Value::Array(vec![entry; MAX_ENTRIES + 1]);
        assert!(matches!(figures(v), Err(ReportError::TooManyEntries { .. })));
        // The largest figures allowed still draw, in bounded time.
        let mut v = run(MAX_FIGURE);
        v["results"][0]["us_per_frame"] = serde_json::json!(MAX_FIGURE);
        v["results"][0]["width"] = serde_json::json!(MAX_DIMENSION);
        let fig = figures(v).unwrap();
        assert!(render(&fig, "x.json", None).unwrap().contains("<svg"));
    }

    #[test]
    fn an_over_long_file_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_REPORT_BYTES + 1).unwrap();
        use dmabridge::interop::user_file::ReadFileError;
        assert!(matches!(read_report(&path), Err(ReportError::Read(ReadFileError::TooLarge { limit: MAX_REPORT_BYTES, .. }))));
        assert!(matches!(read_report(&dir.path().join("missing.json")), Err(ReportError::Read(ReadFileError::Open { .. }))));
    }
}
