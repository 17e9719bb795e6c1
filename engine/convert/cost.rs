//! The copy path's cost model: for each conversion (layouts and formats) and size class,
//! which of the CPU fast path, the GPU compute shaders, or GPU copy commands is fastest on
//! this device.
//!
//! It is measured, not guessed: the first time a combination is asked about, each candidate
//! converts one frame of the class's representative size (after a warm-up), and the GB/s
//! (output bytes per second, bytes in and bytes out of host memory, as the caller sees them)
//! are kept per device: in memory, and on disk under `$XDG_CACHE_HOME/dmabridge/` (else
//! `~/.cache/dmabridge/`) when that is writable, so a later process does not measure again.
//! The disk file is keyed by device, driver and dmabridge version; an unreadable or foreign
//! file is ignored (and replaced), never trusted blindly: its size is capped and every
//! figure must be a finite positive number.
//!
//! A caller can force a path: per call ([`crate::Converter::convert_frame`]), or for the
//! whole engine ([`crate::EngineOptions::convert_path`], `DMABRIDGE_CONVERT_PATH`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use dmabridge_interop::tiling::FrameConversion;
use serde::{Deserialize, Serialize};

/// Where a conversion runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConvertPath {
    /// The CPU fast path (`dmabridge_interop::tiling::fast`, `colour_fast`): threads over
    /// tile bands, detile and colour fused.
    Cpu,
    /// The GPU compute shaders; detile and colour fused in one shader.
    Gpu,
    /// GPU copy commands for the layout steps (one region per tile, for wide row-major
    /// tiles), then the colour shader as a second pass.
    CopyCommands,
}

impl ConvertPath {
    pub const ALL: [ConvertPath; 3] = [ConvertPath::Cpu, ConvertPath::Gpu, ConvertPath::CopyCommands];

    pub fn name(self) -> &'static str {
        match self {
            ConvertPath::Cpu => "cpu",
            ConvertPath::Gpu => "gpu",
            ConvertPath::CopyCommands => "copy-commands",
        }
    }
}

impl std::fmt::Display for ConvertPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ConvertPath {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ConvertPath::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| format!("{s:?}: expected cpu, gpu, copy-commands or auto"))
    }
}

/// Frames priced together: costs scale with bytes, but fixed costs (a submission, thread
/// start-up) weigh differently on small and large frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeClass {
    /// Up to 640x480.
    Small,
    /// Up to 2560x1440.
    Medium,
    /// Larger.
    Large,
}

impl SizeClass {
    pub fn of(width: u32, height: u32) -> SizeClass {
        match u64::from(width) * u64::from(height) {
            p if p <= 640 * 480 => SizeClass::Small,
            p if p <= 2560 * 1440 => SizeClass::Medium,
            _ => SizeClass::Large,
        }
    }

    /// The frame each candidate converts when the class is measured.
    pub fn representative(self) -> (u32, u32) {
        match self {
            SizeClass::Small => (640, 352),
            SizeClass::Medium => (1920, 1088),
            SizeClass::Large => (3840, 2160),
        }
    }

    fn name(self) -> &'static str {
        match self {
            SizeClass::Small => "small",
            SizeClass::Medium => "medium",
            SizeClass::Large => "large",
        }
    }
}

/// One candidate's measured speed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub path: ConvertPath,
    /// Output bytes per second / 1e9, bytes in and out of host memory.
    pub gbps: f64,
}

/// Why the path was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChoiceReason {
    /// The caller (or the engine's options) named the path.
    Forced,
    /// Measured now, the fastest.
    Measured,
    /// Measured earlier (this process or the disk cache), the fastest.
    Cached,
}

/// What the model chose for a conversion, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub path: ConvertPath,
    pub reason: ChoiceReason,
    pub size_class: SizeClass,
    /// Every candidate's measured GB/s (empty when forced before anything was measured).
    pub candidates: Vec<Measured>,
}

impl Choice {
    /// One line for `--explain`: the path, why, and each candidate's GB/s.
    pub fn explain(&self) -> String {
        let why = match self.reason {
            ChoiceReason::Forced => "forced",
            ChoiceReason::Measured => "the fastest, measured now",
            ChoiceReason::Cached => "the fastest, as measured before",
        };
        let c: Vec<String> = self.candidates.iter().map(|m| format!("{} {:.2} GB/s", m.path, m.gbps)).collect();
        format!(
            "path {} ({why}; {} frames: {})",
            self.path,
            self.size_class.name(),
            if c.is_empty() { "not measured".to_owned() } else { c.join(", ") }
        )
    }
}

/// The key of a priced combination: the layouts and formats (not the extent, not the
/// colour matrix: neither changes the cost per byte much) and the size class.
pub(crate) fn key(c: &FrameConversion, class: SizeClass) -> String {
    format!("{} {} -> {} {} {}", c.from.trimmed(), c.from_layout, c.to.trimmed(), c.to_layout, class.name())
}

/// The disk cache's bound: a file larger than this is not ours to read.
const MAX_CACHE_FILE: u64 = 1 << 20;

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    /// device key -> combination key -> measurements.
    devices: BTreeMap<String, BTreeMap<String, Vec<Measured>>>,
}

/// Measurements per combination, for one device; and the engine-wide forced path.
pub(crate) struct CostModel {
    device: String,
    file: Option<PathBuf>,
    known: Mutex<BTreeMap<String, Vec<Measured>>>,
    forced: Mutex<Option<ConvertPath>>,
}

impl CostModel {
    /// The model of one device (`device`: driver, device UUID and dmabridge version), with
    /// what the disk cache already holds for it.
    pub(crate) fn new(device: String, forced: Option<ConvertPath>) -> CostModel {
        let file = cache_file();
        let known = file.as_ref().map(|f| read_cache(f).devices.remove(&device).unwrap_or_default()).unwrap_or_default();
        CostModel { device, file, known: Mutex::new(known), forced: Mutex::new(forced) }
    }

    pub(crate) fn forced(&self) -> Option<ConvertPath> {
        *self.forced.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn set_forced(&self, path: Option<ConvertPath>) {
        *self.forced.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = path;
    }

    pub(crate) fn get(&self, key: &str) -> Option<Vec<Measured>> {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).cloned()
    }

    /// Keeps `measured` for `key`, in memory and (best effort) on disk.
    pub(crate) fn put(&self, key: String, measured: Vec<Measured>) {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key.clone(), measured.clone());
        let Some(file) = &self.file else { return };
        let mut cache = read_cache(file);
        cache.devices.entry(self.device.clone()).or_default().insert(key, measured);
        if let Err(e) = write_cache(file, &cache) {
            tracing::debug!(path = %file.display(), "cost cache not written: {e}");
        }
    }
}

/// `$XDG_CACHE_HOME/dmabridge/cost-model.json`, else `$HOME/.cache/...`; `None` when
/// neither is set (nothing is written then).
fn cache_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("dmabridge").join("cost-model.json"))
}

/// The cache file's contents, or an empty cache when it is missing, too large, or not
/// ours (bad JSON, or figures that are not finite positive numbers).
fn read_cache(path: &std::path::Path) -> CacheFile {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(path) else { return CacheFile::default() };
    let mut text = String::new();
    if f.take(MAX_CACHE_FILE + 1).read_to_string(&mut text).is_err() || text.len() as u64 > MAX_CACHE_FILE {
        return CacheFile::default();
    }
    match serde_json::from_str::<CacheFile>(&text) {
        Ok(c) if c.devices.values().flat_map(|d| d.values().flatten()).all(|m| m.gbps.is_finite() && m.gbps > 0.0) => c,
        _ => {
            tracing::debug!(path = %path.display(), "ignoring an unreadable cost cache");
            CacheFile::default()
        }
    }
}

/// Writes the cache through a temporary file and a rename, so a reader never sees half of it.
fn write_cache(path: &std::path::Path, cache: &CacheFile) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other("no directory"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".cost-model.{}.tmp", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(cache).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, path)
}

/// The fastest of `measured` (the first when tied).
pub(crate) fn fastest(measured: &[Measured]) -> Option<ConvertPath> {
    measured.iter().copied().reduce(|a, b| if b.gbps > a.gbps { b } else { a }).map(|m| m.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_classes() {
        for p in ConvertPath::ALL {
            assert_eq!(p.name().parse::<ConvertPath>(), Ok(p));
        }
        assert!("auto".parse::<ConvertPath>().is_err());
        assert_eq!(SizeClass::of(640, 480), SizeClass::Small);
        assert_eq!(SizeClass::of(1920, 1080), SizeClass::Medium);
        assert_eq!(SizeClass::of(3840, 2160), SizeClass::Large);
        let m = [Measured { path: ConvertPath::Gpu, gbps: 1.0 }, Measured { path: ConvertPath::Cpu, gbps: 3.0 }];
        assert_eq!(fastest(&m), Some(ConvertPath::Cpu));
        assert_eq!(fastest(&[]), None);
    }

    #[test]
    fn a_foreign_or_hostile_cache_file_is_ignored() {
        let dir = std::env::temp_dir().join(format!("dmabridge-cost-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cost-model.json");
        for bad in ["not json", r#"{"devices":{"d":{"k":[{"path":"cpu","gbps":-1.0}]}}}"#, r#"{"devices":{"d":{"k":[{"path":"warp","gbps":1.0}]}}}"#] {
            std::fs::write(&path, bad).unwrap();
            assert!(read_cache(&path).devices.is_empty(), "{bad}");
        }
        std::fs::write(&path, vec![b' '; (MAX_CACHE_FILE + 10) as usize]).unwrap();
        assert!(read_cache(&path).devices.is_empty());
        let mut good = CacheFile::default();
        good.devices.entry("d".into()).or_default().insert("k".into(), vec![Measured { path: ConvertPath::Cpu, gbps: 2.5 }]);
        write_cache(&path, &good).unwrap();
        assert_eq!(read_cache(&path).devices["d"]["k"][0].gbps, 2.5);
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }
}
