//! A bench JSON read back and checked ([`read_report`], [`Figures`]), the goals it meets,
//! and the change between two runs ([`compare`]): what `dmabridge bench --report DIR`
//! ([`super::html`]) and `--compare OLD.json [NEW.json]` show.
//!
//! A report is built from the bench JSON alone, read back through the types it was written
//! with ([`read_report`], [`BenchReport`]; fields added since an old run default), so an old
//! run's JSON renders as well as a new one. What is read is bounded: a file over
//! [`MAX_REPORT_BYTES`], a dimension over [`MAX_DIMENSION`], more than [`MAX_ENTRIES`]
//! figures, or a figure that is not a finite number in range is a typed [`ReportError`].
//!
//! Comparing: machines here are noisy (memcpy alone moves by a third between runs), so each
//! figure is compared as a ratio to its own run's memcpy, and a change counts only outside
//! the noise band: the two runs' spreads (interquartile range / median of the repetitions)
//! of the figure and of memcpy, added, at least [`MIN_BAND`].

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::results::{BenchReport, BesideLinear};

/// The narrowest band a change must leave to be flagged.
pub const MIN_BAND: f64 = 0.05;

/// The largest bench JSON read back (a report is a few kB).
pub const MAX_REPORT_BYTES: u64 = 16 << 20;
/// The largest frame width or height a report may name.
pub const MAX_DIMENSION: u32 = 1 << 16;
/// The most path and conversion entries a report may hold.
pub const MAX_ENTRIES: usize = 1024;
/// The largest figure (GB/s or µs) a report may hold: beyond any machine.
pub const MAX_FIGURE: f64 = 1e12;

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
