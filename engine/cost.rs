//! The copy path's cost model: for each conversion (layouts and formats) and size class,
//! which of the CPU fast path, the GPU compute shaders, or GPU copy commands is fastest on
//! this device.
//!
//! It is measured, not guessed: each candidate converts one frame of the class's
//! representative size (after a warm-up), and the GB/s (output bytes per second, bytes in
//! and bytes out of host memory, as the caller sees them) are kept per device. That happens
//! the first time a combination is asked about, or ahead of time in
//! [`crate::Converter::calibrate`] / [`crate::Engine::calibrate`], so that a caller with a
//! latency budget (a GStreamer element's `set_caps`) never measures.
//!
//! The figures are kept in memory, and on disk where [`CostCache`] says
//! ([`crate::EngineOptions::cost_cache`]; by default `$XDG_CACHE_HOME/dmabridge/`, else
//! `~/.cache/dmabridge/`), so a later process does not measure again. The disk file is
//! keyed by device, driver and dmabridge version; an unreadable or foreign file is ignored
//! (and replaced), never trusted blindly: its size is capped, every figure must be a finite
//! positive number, and a figure for a path this device cannot run for the conversion is
//! set aside. Only a regular file is read (opened without following a symbolic link, and
//! without blocking on a FIFO); anything else at the path is left alone with a warning.
//! Writes hold an advisory lock (`flock` on a lock file beside it, so concurrent processes
//! merge their figures rather than lose them) and replace the file atomically through a
//! uniquely named temporary file in the same directory.
//!
//! A caller can force a path: per call ([`crate::Converter::convert_frame`]), or for the
//! whole engine ([`crate::EngineOptions::convert_path`], `DMABRIDGE_CONVERT_PATH`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    /// The path the model chose (`failed`) could not convert this frame on this device
    /// (a limit the measured frames stayed inside, its memory, its driver): the model set
    /// it aside for the combination, and the CPU converted the frame instead.
    FellBack { failed: ConvertPath },
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
            ChoiceReason::Forced => "forced".to_owned(),
            ChoiceReason::Measured => "the fastest, measured now".to_owned(),
            ChoiceReason::Cached => "the fastest, as measured before".to_owned(),
            ChoiceReason::FellBack { failed } => format!("the {failed} path the model chose failed here and was dropped"),
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

/// How long a write waits for another process's lock before it gives up (the figures stay
/// in memory then).
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Where the cost model keeps its measurements between processes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CostCache {
    /// `$XDG_CACHE_HOME/dmabridge/cost-model.json`, else `$HOME/.cache/dmabridge/...`;
    /// in memory only when neither variable is set.
    #[default]
    Default,
    /// This file (its directory is created when it is written).
    File(PathBuf),
    /// In memory only: no file is read or written.
    Off,
}

impl CostCache {
    /// `DMABRIDGE_COST_CACHE`: `off` (or `none`) keeps the figures in memory, any other
    /// non-empty value names the file; unset or empty is [`CostCache::Default`].
    pub fn from_env() -> CostCache {
        match std::env::var_os("DMABRIDGE_COST_CACHE") {
            Some(v) if v == "off" || v == "none" => CostCache::Off,
            Some(v) if !v.is_empty() => CostCache::File(PathBuf::from(v)),
            _ => CostCache::Default,
        }
    }

    /// The file this names, if any.
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            CostCache::Default => default_cache_file(),
            CostCache::File(p) => Some(p.clone()),
            CostCache::Off => None,
        }
    }
}

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
    /// Combinations and the paths that failed them at run time in this process: never
    /// chosen for them again, even when the combination is measured anew.
    failed: Mutex<BTreeSet<(String, ConvertPath)>>,
}

impl CostModel {
    /// The model of one device (`device`: driver, device UUID and dmabridge version), with
    /// what the disk cache already holds for it.
    pub(crate) fn new(device: String, cache: &CostCache, forced: Option<ConvertPath>) -> CostModel {
        let file = cache.path();
        let known = file.as_ref().map(|f| read_cache(f).devices.remove(&device).unwrap_or_default()).unwrap_or_default();
        CostModel { device, file, known: Mutex::new(known), forced: Mutex::new(forced), failed: Mutex::new(BTreeSet::new()) }
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
        let device = self.device.clone();
        if let Err(e) = update_cache(file, |cache| {
            cache.devices.entry(device).or_default().insert(key, measured);
        }) {
            tracing::warn!(path = %file.display(), "cost cache not written: {e}");
        }
    }

    /// Whether `path` failed `key`'s combination at run time in this process.
    pub(crate) fn has_failed(&self, key: &str, path: ConvertPath) -> bool {
        self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&(key.to_owned(), path))
    }

    /// After `failed`, chosen for `key`, failed at run time and `fallback` (timed on that
    /// frame) converted it: drops `failed`'s figure for `key` in memory and in the cache file
    /// (written as [`CostModel::put`] writes it: atomically, under the lock, merged with
    /// what other processes wrote), keeps `fallback`'s where the combination has no figure
    /// of that path, and remembers for this process not to choose `failed` for `key` again.
    /// Returns the figures `key` has left.
    pub(crate) fn drop_failed(&self, key: &str, failed: ConvertPath, fallback: Measured) -> Vec<Measured> {
        self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert((key.to_owned(), failed));
        let change = |figures: &mut Vec<Measured>| {
            figures.retain(|m| m.path != failed);
            if !figures.iter().any(|m| m.path == fallback.path) {
                figures.push(fallback);
            }
        };
        let left = {
            let mut known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let figures = known.entry(key.to_owned()).or_default();
            change(figures);
            figures.clone()
        };
        if let Some(file) = &self.file {
            let device = self.device.clone();
            if let Err(e) = update_cache(file, |cache| change(cache.devices.entry(device).or_default().entry(key.to_owned()).or_default())) {
                tracing::warn!(path = %file.display(), "cost cache not written: {e}");
            }
        }
        left
    }
}

/// `$XDG_CACHE_HOME/dmabridge/cost-model.json`, else `$HOME/.cache/...`; `None` when
/// neither is set (nothing is written then).
fn default_cache_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("dmabridge").join("cost-model.json"))
}

/// The cache file's contents, or an empty cache when it is missing, not a regular file,
/// too large, or not ours (bad JSON, or figures that are not finite positive numbers).
fn read_cache(path: &Path) -> CacheFile {
    use dmabridge_interop::user_file::{read_regular_with, Links, ReadFileError};
    // Links::Refuse: a symbolic link is not followed (ELOOP), as the writer replaces the
    // file; a FIFO does not wait for a writer, and is refused with anything else that is not
    // a regular file.
    let bytes = match read_regular_with(path, MAX_CACHE_FILE, Links::Refuse) {
        Ok(bytes) => bytes,
        Err(ReadFileError::Open { errno: rustix::io::Errno::NOENT, .. }) => return CacheFile::default(),
        Err(e) => {
            tracing::warn!(path = %path.display(), "ignoring the cost cache: {e}");
            return CacheFile::default();
        }
    };
    match serde_json::from_slice::<CacheFile>(&bytes) {
        Ok(c) if c.devices.values().flat_map(|d| d.values().flatten()).all(|m| m.gbps.is_finite() && m.gbps > 0.0) => c,
        _ => {
            tracing::debug!(path = %path.display(), "ignoring an unreadable cost cache");
            CacheFile::default()
        }
    }
}

/// Why the cache file was not written.
#[derive(Debug, thiserror::Error)]
enum CacheWriteError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{what} is not a regular file; left alone")]
    NotRegular { what: String },
    #[error("another process held the lock on {lock} for over {LOCK_WAIT:?}")]
    LockTimeout { lock: String },
}

/// Read-modify-writes the cache under an exclusive advisory lock (a lock file beside it,
/// since the cache file itself is replaced on every write), through a uniquely named
/// temporary file renamed over it, so a reader never sees half of it and two writers do
/// not lose each other's figures. Something other than a regular file at the path is left
/// alone.
fn update_cache(path: &Path, change: impl FnOnce(&mut CacheFile)) -> Result<(), CacheWriteError> {
    use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| CacheWriteError::NotRegular { what: path.display().to_string() })?;
    std::fs::create_dir_all(dir)?;
    let mut lock_name = std::ffi::OsString::from(".");
    lock_name.push(name);
    lock_name.push(".lock");
    let lock_path = dir.join(lock_name);
    let lock = rustix::fs::open(
        &lock_path,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(std::io::Error::from)?;
    if FileType::from_raw_mode(rustix::fs::fstat(&lock).map_err(std::io::Error::from)?.st_mode) != FileType::RegularFile {
        return Err(CacheWriteError::NotRegular { what: lock_path.display().to_string() });
    }
    // A bounded wait: a process that holds the lock forever must not hang this one.
    let start = Instant::now();
    loop {
        match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) if start.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(CacheWriteError::LockTimeout { lock: lock_path.display().to_string() }),
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
    }
    // The lock is held from here until `lock` is dropped (closing it releases it).
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => return Err(CacheWriteError::NotRegular { what: path.display().to_string() }),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let mut cache = read_cache(path);
    change(&mut cache);
    let bytes = serde_json::to_vec_pretty(&cache).map_err(std::io::Error::other)?;
    // The temporary file is removed when it is dropped on any error path.
    let mut tmp = tempfile::Builder::new().prefix(".cost-model.").suffix(".tmp").tempfile_in(dir)?;
    tmp.write_all(&bytes)?;
    tmp.as_file().sync_data()?;
    tmp.persist(path).map_err(|e| e.error)?;
    drop(lock);
    Ok(())
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

    /// A directory of this test's own under the temporary directory, removed when dropped.
    fn scratch(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(&format!("dmabridge-cost-{name}-")).tempdir().unwrap()
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    fn one(gbps: f64) -> Vec<Measured> {
        vec![Measured { path: ConvertPath::Cpu, gbps }]
    }

    #[test]
    fn a_foreign_or_hostile_cache_file_is_ignored() {
        let dir = scratch("hostile");
        let path = dir.path().join("cost-model.json");
        for bad in ["not json", r#"{"devices":{"d":{"k":[{"path":"cpu","gbps":-1.0}]}}}"#, r#"{"devices":{"d":{"k":[{"path":"warp","gbps":1.0}]}}}"#] {
            std::fs::write(&path, bad).unwrap();
            assert!(read_cache(&path).devices.is_empty(), "{bad}");
        }
        std::fs::write(&path, vec![b' '; (MAX_CACHE_FILE + 10) as usize]).unwrap();
        assert!(read_cache(&path).devices.is_empty());
        update_cache(&path, |c| {
            c.devices.entry("d".into()).or_default().insert("k".into(), one(2.5));
        })
        .unwrap();
        assert_eq!(read_cache(&path).devices["d"]["k"][0].gbps, 2.5);
        // A link to a good cache is not followed.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(read_cache(&link).devices.is_empty());
        assert_eq!(leftovers(dir.path()), [".cost-model.json.lock", "cost-model.json", "link.json"]);
    }

    #[test]
    fn no_cache_path_writes_nothing() {
        let model = CostModel::new("d".into(), &CostCache::Off, None);
        model.put("k".into(), one(1.0));
        assert_eq!(model.get("k"), Some(one(1.0)));
        assert_eq!(CostCache::Off.path(), None);
        // The same with a file: written, and read back by the next model of the device.
        let dir = scratch("file");
        let cache = CostCache::File(dir.path().join("sub").join("c.json"));
        CostModel::new("d".into(), &cache, None).put("k".into(), one(1.0));
        assert_eq!(CostModel::new("d".into(), &cache, None).get("k"), Some(one(1.0)));
        assert_eq!(CostModel::new("other".into(), &cache, None).get("k"), None);
    }

    #[test]
    fn a_fifo_or_directory_at_the_cache_path_is_left_alone() {
        let dir = scratch("special");
        let fifo = dir.path().join("fifo.json");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).unwrap();
        let subdir = dir.path().join("dir.json");
        std::fs::create_dir(&subdir).unwrap();
        for path in [&fifo, &subdir] {
            // Neither read (a FIFO with no writer would block a plain open) nor replaced.
            let model = CostModel::new("d".into(), &CostCache::File(path.clone()), None);
            model.put("k".into(), one(1.0));
            assert_eq!(model.get("k"), Some(one(1.0)));
            assert!(matches!(update_cache(path, |_| {}), Err(CacheWriteError::NotRegular { .. })));
        }
        assert_eq!(rustix::fs::FileType::from_raw_mode(rustix::fs::lstat(&fifo).unwrap().st_mode), rustix::fs::FileType::Fifo);
        assert!(subdir.is_dir() && leftovers(&subdir).is_empty());
        assert_eq!(leftovers(dir.path()), [".dir.json.lock", ".fifo.json.lock", "dir.json", "fifo.json"]);
    }

    /// The child half of [`concurrent_processes_merge_their_figures`]: writes `ROUNDS`
    /// figures under its own device name.
    const CHILD: &str = "DMABRIDGE_COST_TEST_CHILD";
    const ROUNDS: usize = 40;

    #[test]
    fn concurrent_processes_merge_their_figures() {
        if let Some(spec) = std::env::var_os(CHILD) {
            let spec = spec.to_string_lossy().into_owned();
            let (device, path) = spec.split_once(':').unwrap();
            let model = CostModel::new(device.into(), &CostCache::File(path.into()), None);
            for i in 0..ROUNDS {
                model.put(format!("k{i}"), one(1.0 + i as f64));
            }
            return;
        }
        let dir = scratch("procs");
        let path = dir.path().join("cost-model.json");
        let exe = std::env::current_exe().unwrap();
        // libtest's name for this test: its module path without the crate's name.
        let name = format!("{}::concurrent_processes_merge_their_figures", module_path!().split_once("::").unwrap().1);
        let children: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|d| {
                std::process::Command::new(&exe)
                    .args(["--exact", name.as_str(), "--test-threads=1"])
                    .env(CHILD, format!("{d}:{}", path.display()))
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
        let cache = read_cache(&path);
        for d in ["a", "b", "c"] {
            assert_eq!(cache.devices[d].len(), ROUNDS, "device {d}: a write was lost");
            assert_eq!(cache.devices[d]["k7"], one(8.0));
        }
        assert_eq!(leftovers(dir.path()), [".cost-model.json.lock", "cost-model.json"]);
    }
}
