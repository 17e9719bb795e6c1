//! What `dmabridge bench` measured: the contract's JSON, written by the run and read back by
//! the report and `--compare` through the same types.

use serde::{Deserialize, Serialize};

/// One measured path (a contract: field names and values as the issue gives them). Read
/// back by the report and `bench --compare` through the same type.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathResult {
    /// One of [`super::options::PATHS`].
    pub path: String,
    pub format: String,
    pub width: u32,
    pub height: u32,
    pub us_per_frame: f64,
    pub gbps: f64,
    /// The batches' interquartile range relative to their median (absent from early runs).
    #[serde(default)]
    pub spread: f64,
}

/// One measured frame conversion, on the path the cost model chose.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConvertResult {
    /// The input layout (`linear` for a plain colour conversion).
    pub layout: String,
    /// The input format.
    pub format: String,
    /// The output format (the input's for a detile).
    pub to_format: String,
    #[serde(default)]
    pub width: u32,
    #[serde(default)]
    pub height: u32,
    /// Output bytes per second / 1e9, bytes in and out of host memory (what a caller of
    /// `Converter::convert_frame` gets).
    pub gbps: f64,
    /// Where it ran: `cpu`, `gpu` or `copy-commands` (the cost model's choice).
    pub path: dmabridge::ConvertPath,
    /// Every candidate path's GB/s, as the cost model measured them.
    #[serde(default)]
    pub candidates: Vec<dmabridge::Measured>,
    /// GStreamer `videoconvert` on the same frames in this run (output GB/s), when it is
    /// installed and knows the layout.
    pub gstreamer_gbps: Option<f64>,
    /// `gbps / gstreamer_gbps`.
    pub vs_gstreamer: Option<f64>,
    /// The repetitions' interquartile range relative to their median.
    #[serde(default)]
    pub spread: f64,
    /// Threads the conversion ran on: the CPU path's workers (0 on a GPU path).
    #[serde(default)]
    pub threads: u32,
    /// The same CPU path on one thread, on the same frames in this run (output GB/s):
    /// what one core of dmabridge does beside one core of a peer. `None` on a GPU path.
    #[serde(default)]
    pub gbps_one_thread: Option<f64>,
    /// The CPU libraries that do the same conversion, on the same frames in this run
    /// ([`super::cpu_peers`]).
    #[serde(default)]
    pub peers: Vec<PeerResult>,
    /// For a fused tiled -> RGB conversion on the CPU path: it and dmabridge's linear
    /// conversion of the same formats, taking turns ([`super::conversions::fused_beside_linear`]).
    #[serde(default)]
    pub beside_linear: Option<BesideLinear>,
}

/// A fused tiled -> RGB conversion and the linear conversion of the same formats (NV12 ->
/// XR24), both on dmabridge's CPU path, measured in one loop that takes turns: each round
/// times the fused and the linear conversion on the CPU path's threads, then each on one
/// thread, every side after `TURN_WARMUPS` untimed calls. Measured apart, the two saw
/// different machines: the linear conversion on two threads read 24.4 GB/s in one run and
/// 43.3 in the next, and the ratio with it (0.68-1.16 over eight runs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BesideLinear {
    /// The CPU path's threads, which the first pair ran on.
    pub threads: u32,
    /// Output GB/s (medians) on `threads` threads.
    pub fused_gbps: f64,
    pub linear_gbps: f64,
    /// Output GB/s (medians) on one thread each.
    pub fused_gbps_one_thread: f64,
    pub linear_gbps_one_thread: f64,
}

/// One CPU library's figure beside a conversion.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerResult {
    /// What ran: `libyuv NV12ToARGBMatrix (BT.709)`.
    pub name: String,
    /// Threads it ran on (1: the libraries are called single-threaded).
    pub threads: u32,
    /// Output GB/s; `None` when it was not measured (`missing` says why).
    pub gbps: Option<f64>,
    pub missing: Option<String>,
    /// dmabridge's GB/s over the peer's.
    pub ratio_total: Option<f64>,
    /// dmabridge on one thread ([`ConvertResult::gbps_one_thread`]) over the peer, which
    /// runs on one thread too (dmabridge's CPU path only).
    pub ratio_per_thread: Option<f64>,
}

/// The whole report; serialises to exactly the contract's JSON, and reads it back
/// ([`super::figures::read_report`]; what early runs lacked defaults).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub device: String,
    /// The machine: device, driver, CPU, kernel.
    #[serde(default)]
    pub system: SystemInfo,
    pub memcpy_gbps: f64,
    /// The memcpy samples' interquartile range relative to their median.
    #[serde(default)]
    pub memcpy_spread: f64,
    #[serde(default)]
    pub results: Vec<PathResult>,
    #[serde(default)]
    pub convert: Vec<ConvertResult>,
    #[serde(default)]
    pub negotiate_us: f64,
    #[serde(default)]
    pub handoff_us: f64,
    /// Why entries are missing (not part of the JSON contract; printed by the CLI).
    #[serde(skip)]
    pub notes: Vec<String>,
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
