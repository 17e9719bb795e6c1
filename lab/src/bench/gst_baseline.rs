//! GStreamer's `videoconvert` as the benchmark's baseline: what the CPU path that most
//! Linux media stacks would use instead of dmabridge costs on this machine, measured in the
//! same run so that `vs_gstreamer` compares like with like.
//!
//! ## What is measured
//! - **detile**: a tiled NV12 frame, in every dmabridge layout that GStreamer 1.22 has a
//!   raw format for (the layouts with a GStreamer name in
//!   [`dmabridge_interop::tile_layout::TILE_LAYOUTS`]), to linear NV12;
//! - **colour**: linear NV12 to BGRx (DRM XR24), BGRx to NV12, and P010 to BGR10A2_LE
//!   (DRM AR30);
//! - **detile and colour**: tiled NV12 to BGRx in one `videoconvert`, which is what a
//!   GStreamer pipeline from a tiling decoder to an RGB sink does (it unpacks the tiles
//!   line by line as it converts), beside dmabridge's fused conversion.
//!
//! The rate is the *output* bytes (the tightly packed linear output image) per second, the
//! same quantity dmabridge's own conversions report.
//!
//! ## How
//! The frame, repeated `frames` times, is written to a file in a tmpfs and run through
//! `gst-launch-1.0`:
//!
//! ```text
//! filesrc location=F blocksize=FRAME ! rawvideoparse format=.. width=W height=H framerate=30/1
//!     frame-size=FRAME plane-offsets=<0[,UV]> [plane-strides=<linear strides>]
//!     ! videoconvert n-threads=1 ! video/x-raw,format=NV12|BGRx|BGR10A2_LE ! fakesink sync=false
//! ```
//!
//! The same pipeline without `videoconvert` (and without the caps filter, which a tiled
//! stream would not pass) is timed too, and its time subtracted: what is left is
//! `videoconvert`'s own work, without gst-launch's start-up, registry loading, pipeline
//! negotiation or the file reads, none of which dmabridge's numbers contain. Each pipeline
//! runs [`RUNS`] times, interleaved so that drift in the machine's load hits both alike, and
//! the medians are compared.
//!
//! Why a child process and not the GStreamer libraries: the workspace links no GStreamer
//! (nothing to build or install for users who never ask for the baseline), and
//! `gst-launch-1.0` is what a user would run to reproduce the number. Why every frame in a
//! tmpfs file: the frames must come from memory so that disk speed is no part of either
//! pipeline, and `filesrc` with `blocksize` = one frame hands `rawvideoparse` whole frames,
//! with no re-framing copies.
//!
//! ## Checks
//! Before timing, one untimed run (which also warms the registry and the page cache) counts
//! the buffers reaching the sink: a different count means GStreamer frames the stream with
//! another frame size than dmabridge's [`tiled_size`], and the number would be meaningless,
//! so it is an error. The plane offsets and the frame size are passed explicitly so that
//! GStreamer reads dmabridge's layout rather than its own defaults (they agree in 1.22; the
//! tests check GStreamer's detiled output against [`detile_to_vec`](dmabridge_interop::tiling::detile_to_vec)
//! byte for byte).
//!
//! `videoconvert` runs with `n-threads=1`, its 1.22 default, pinned so that another
//! version's default cannot change the baseline silently. The colour case uses
//! `videoconvert`'s defaults otherwise, i.e. what a user gets: `rawvideoparse` states no
//! colorimetry, and 1.22 then converts with BT.709 limited range at 3840x2160 (its debug log
//! shows the 298/459/-55/-136/541 matrix), through its general line-by-line converter.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dmabridge_interop::tiling::tiled_size;
use dmabridge_interop::{Fourcc, TileLayout};

const GST_LAUNCH: &str = "gst-launch-1.0";
const GST_INSPECT: &str = "gst-inspect-1.0";
/// Every element the pipelines use.
const ELEMENTS: [&str; 4] = ["filesrc", "rawvideoparse", "videoconvert", "fakesink"];
/// Runs of each pipeline; the medians are compared.
pub const RUNS: usize = 3;
/// A pipeline that has not finished by then is stuck (a 4K frame takes milliseconds).
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);
/// `--version` and `--exists` answer at once unless the registry is being rebuilt.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a running child is polled: small against the differences measured (tens of
/// milliseconds and more), and the same for both pipelines, so it cancels out.
const POLL: Duration = Duration::from_millis(1);
/// How long to wait for a child's output once it has exited; only a grandchild still
/// holding the pipe (a plugin scanner) could make this wait, and then the output is dropped.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Characters of a failed pipeline's stderr that go into the error.
const STDERR_TAIL: usize = 1500;
/// Environment variables that make GStreamer log or dump while it runs: a user's
/// `GST_DEBUG=5` would otherwise end up in the timings.
const NOISY_ENV: [&str; 3] = ["GST_DEBUG", "GST_TRACERS", "GST_DEBUG_DUMP_DOT_DIR"];

/// One GStreamer case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GstCase {
    /// Tiled NV12 in this layout to linear NV12.
    Detile(TileLayout),
    /// NV12 in this layout (linear, or tiled: detile and colour in one `videoconvert`) to
    /// BGRx (DRM XR24).
    Nv12ToBgrx(TileLayout),
    /// Linear BGRx (DRM XR24) to NV12.
    BgrxToNv12,
    /// Linear P010 to BGR10A2_LE (DRM AR30).
    P010ToBgr10a2,
}

/// The GStreamer format name for a layout, as `rawvideoparse`'s `format` property spells it
/// (the enum nick of the layout's GStreamer name in the table: `NV12_64Z32` ->
/// `"nv12-64z32"`), for the NV12 layouts that GStreamer 1.22 has a raw format for. `None` for
/// the others (Intel, Vivante and NVIDIA tilings exist there only as DRM modifiers on
/// `drm-format` caps, which `videoconvert` does not read), and for `Linear`, which is no
/// detile case (`videoconvert` would pass it through untouched).
pub fn gst_format(layout: TileLayout) -> Option<String> {
    layout.gst_name().map(|name| name.to_ascii_lowercase().replace('_', "-"))
}

/// Whether gst-launch-1.0 and the needed elements exist (`Err`: the reason they don't).
pub fn available() -> Result<(), String> {
    let version = run_child(GST_INSPECT, &["--version".to_string()], PROBE_TIMEOUT, true)
        .and_then(|_| run_child(GST_LAUNCH, &["--version".to_string()], PROBE_TIMEOUT, true))
        .map_err(|e| format!("GStreamer's command-line tools are not usable: {e}"))?;
    let version = version.stdout.lines().find(|l| l.starts_with("GStreamer ")).unwrap_or("").trim().to_string();
    if version.is_empty() {
        return Err(format!("{GST_LAUNCH} --version names no GStreamer version"));
    }
    let missing: Vec<&str> = ELEMENTS
        .into_iter()
        .filter(|e| run_child(GST_INSPECT, &["--exists".to_string(), (*e).to_string()], PROBE_TIMEOUT, false).is_err())
        .collect();
    if !missing.is_empty() {
        return Err(format!("{version} lacks the element(s) {} (GStreamer's core elements and gst-plugins-base)", missing.join(", ")));
    }
    tracing::debug!(%version, "GStreamer baseline available");
    Ok(())
}

/// GB/s of `videoconvert` for `case` at `width` x `height`: output bytes (the tightly
/// packed linear output image) per second over `frames` frames, with the
/// pipeline's fixed cost (start-up, reading the input, parsing) subtracted by timing the same
/// pipeline without `videoconvert` in the same call (see the module docs).
///
/// `input_frame` is one frame in dmabridge's layout: for [`GstCase::Detile`] the tiled
/// buffer of [`tiled_size`] bytes (planes concatenated, each padded to whole tiles), for
/// the others the tightly packed linear image; bytes past that size are ignored.
///
/// `Err` when GStreamer is missing or refuses the pipeline (with the tail of its stderr),
/// frames the stream differently from dmabridge's layout, or takes no measurably longer with
/// `videoconvert` than without (too few frames for this machine's noise: 30 4K frames gave
/// about ±5 % here). Takes about `(1 + 2 * RUNS) * frames` frame times plus 7 gst-launch
/// start-ups, and `frames` input frames of tmpfs space while it runs.
pub fn videoconvert_gbps(case: GstCase, width: u32, height: u32, input_frame: &[u8], frames: u32) -> Result<f64, String> {
    if frames == 0 {
        return Err("the GStreamer baseline needs at least one frame".into());
    }
    let spec = Spec::new(case, width, height)?;
    let frame = input_frame.get(..spec.frame_bytes).ok_or_else(|| {
        format!(
            "{case:?} at {width}x{height} takes {} input bytes a frame, got {}",
            spec.frame_bytes,
            input_frame.len()
        )
    })?;
    let input = InputFile::write(frame, frames)?;
    let with = pipeline(&spec, input.path(), Stage::Convert);
    let without = pipeline(&spec, input.path(), Stage::ParseOnly);

    // Untimed: fails early on a pipeline GStreamer refuses, checks the framing, and leaves
    // the registry and the input warm for the timed runs.
    check_framing(&spec, input.path(), frames)?;

    let mut t_with = Vec::with_capacity(RUNS);
    let mut t_without = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        t_without.push(run_child(GST_LAUNCH, &without, CHILD_TIMEOUT, false)?.elapsed);
        t_with.push(run_child(GST_LAUNCH, &with, CHILD_TIMEOUT, false)?.elapsed);
    }
    let (m_with, m_without) = (median(&mut t_with), median(&mut t_without));
    tracing::debug!(?case, frames, ?t_with, ?t_without, "GStreamer baseline timings");
    let work = m_with.as_secs_f64() - m_without.as_secs_f64();
    // A difference no larger than one pipeline's run-to-run spread is noise, not
    // videoconvert's time; a rate from it could be off by any factor.
    let noise = spread(&t_with).max(spread(&t_without)).as_secs_f64();
    if work <= noise {
        return Err(format!(
            "{case:?}: the pipeline with videoconvert ({:.3} s, median) was not measurably slower than without it \
             ({:.3} s; runs vary by {noise:.3} s) over {frames} frames: too few frames, or the machine is too busy",
            m_with.as_secs_f64(),
            m_without.as_secs_f64()
        ));
    }
    Ok(frames as f64 * spec.output_bytes as f64 / work / 1e9)
}

/// The pipeline's parameters for one case and size.
#[derive(Debug, Clone)]
struct Spec {
    format: String,
    width: u32,
    height: u32,
    /// Input bytes a frame: `rawvideoparse`'s `frame-size` and `filesrc`'s `blocksize`.
    frame_bytes: usize,
    /// Where each plane starts in an input frame.
    offsets: Vec<u64>,
    /// Row strides of a linear input's planes; `None` for tiled input, whose strides
    /// GStreamer derives from the tile geometry (a byte stride there would mean something else).
    linear_strides: Option<Vec<u32>>,
    out_caps: &'static str,
    /// Output bytes a frame, as dmabridge counts them (tightly packed).
    output_bytes: u64,
}

impl Spec {
    fn new(case: GstCase, width: u32, height: u32) -> Result<Spec, String> {
        let geometry = |layout, fourcc| tiled_size(layout, fourcc, width, height).map_err(|e| format!("{case:?} at {width}x{height}: {e}"));
        let tiled = |layout| gst_format(layout).ok_or_else(|| format!("GStreamer has no raw video format for the {layout} layout"));
        // GStreamer's input format, dmabridge's input and output, and the output caps.
        let (format, (layout, from), to, out_caps) = match case {
            GstCase::Detile(layout) => (tiled(layout)?, (layout, Fourcc::NV12), Fourcc::NV12, "video/x-raw,format=NV12"),
            GstCase::Nv12ToBgrx(TileLayout::Linear) => ("nv12".to_owned(), (TileLayout::Linear, Fourcc::NV12), Fourcc::XRGB8888, "video/x-raw,format=BGRx"),
            GstCase::Nv12ToBgrx(layout) => (tiled(layout)?, (layout, Fourcc::NV12), Fourcc::XRGB8888, "video/x-raw,format=BGRx"),
            GstCase::BgrxToNv12 => ("bgrx".to_owned(), (TileLayout::Linear, Fourcc::XRGB8888), Fourcc::NV12, "video/x-raw,format=NV12"),
            GstCase::P010ToBgr10a2 => ("p010-10le".to_owned(), (TileLayout::Linear, Fourcc::P010), Fourcc::ARGB2101010, "video/x-raw,format=BGR10A2_LE"),
        };
        let input = geometry(layout, from)?;
        let output_bytes = geometry(TileLayout::Linear, to)?.size;
        // GStreamer's own rows are padded to 4 bytes; dmabridge's linear ones are tightly
        // packed, so a linear input's strides are given.
        let linear_strides = (layout == TileLayout::Linear).then(|| input.planes.iter().map(|p| p.width_bytes).collect());
        let offsets: Vec<u64> = input.planes.iter().map(|p| p.offset).collect();
        // filesrc's blocksize and rawvideoparse's frame-size are 32-bit properties.
        let frame_bytes = u32::try_from(input.size)
            .map(|b| b as usize)
            .map_err(|_| format!("{case:?} at {width}x{height}: a {} byte frame is too large for GStreamer's raw parser", input.size))?;
        if let Some(o) = offsets.iter().find(|o| i32::try_from(**o).is_err()) {
            return Err(format!("{case:?} at {width}x{height}: plane offset {o} is too large for GStreamer"));
        }
        Ok(Spec { format, width, height, frame_bytes, offsets, linear_strides, out_caps, output_bytes })
    }
}

/// Which of the two pipelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Up to `rawvideoparse`: the fixed cost.
    ParseOnly,
    /// With `videoconvert` and the output caps.
    Convert,
}

/// Where a pipeline's frames go.
#[derive(Debug, Clone)]
enum Sink {
    /// Dropped; with `verbose`, each buffer is reported on stdout (for counting).
    Fake { verbose: bool },
    /// Written to a file (for the tests' comparisons).
    #[cfg(test)]
    File(PathBuf),
}

fn pipeline(spec: &Spec, input: &Path, stage: Stage) -> Vec<String> {
    pipeline_to(spec, input, stage, &Sink::Fake { verbose: false })
}

/// gst-launch-1.0's arguments, one element property per argument: no shell and no quoting,
/// since gst-launch escapes each argument itself.
fn pipeline_to(spec: &Spec, input: &Path, stage: Stage, sink: &Sink) -> Vec<String> {
    let verbose = matches!(sink, Sink::Fake { verbose: true });
    let mut a: Vec<String> = vec![if verbose { "-v" } else { "-q" }.into()];
    a.extend([
        "filesrc".into(),
        format!("location={}", input.display()),
        format!("blocksize={}", spec.frame_bytes),
        "!".into(),
        "rawvideoparse".into(),
        // format, width and height first: rawvideoparse recomputes its plane layout when
        // they are set, and the explicit offsets must land on the final one.
        format!("format={}", spec.format),
        format!("width={}", spec.width),
        format!("height={}", spec.height),
        // Any positive rate: fakesink does not sync, so it only stamps the buffers.
        "framerate=30/1".into(),
        format!("frame-size={}", spec.frame_bytes),
        format!("plane-offsets=<{}>", spec.offsets.iter().map(u64::to_string).collect::<Vec<_>>().join(",")),
    ]);
    if let Some(strides) = &spec.linear_strides {
        a.push(format!("plane-strides=<{}>", strides.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
    }
    if stage == Stage::Convert {
        a.extend(["!".into(), "videoconvert".into(), "n-threads=1".into(), "!".into(), spec.out_caps.into()]);
    }
    a.push("!".into());
    match sink {
        Sink::Fake { verbose } => {
            a.extend(["fakesink".into(), "sync=false".into()]);
            if *verbose {
                a.push("silent=false".into());
            }
        }
        #[cfg(test)]
        Sink::File(path) => a.extend(["filesink".into(), format!("location={}", path.display())]),
    }
    a
}

/// Runs the converting pipeline once with every buffer reported, and checks that `frames`
/// buffers of at least a frame's output each reach the sink: GStreamer framing the input
/// differently from dmabridge's layout would show here as another count.
fn check_framing(spec: &Spec, input: &Path, frames: u32) -> Result<(), String> {
    let args = pipeline_to(spec, input, Stage::Convert, &Sink::Fake { verbose: true });
    let done = run_child(GST_LAUNCH, &args, CHILD_TIMEOUT, true)?;
    let sizes: Vec<u64> = done
        .stdout
        .lines()
        .filter(|l| l.contains("last-message = chain"))
        .filter_map(|l| l.split_once(") (").and_then(|(_, rest)| rest.split_once(" bytes")).and_then(|(n, _)| n.parse().ok()))
        .collect();
    let short = sizes.iter().filter(|&&s| s < spec.output_bytes).count();
    if sizes.len() != frames as usize || short != 0 {
        return Err(format!(
            "GStreamer made {} output frames ({short} smaller than {} bytes) of the {frames} it was given as {} at {}x{}: \
             its frame layout differs from dmabridge's ({} bytes a frame), so its time would not be comparable",
            sizes.len(),
            spec.output_bytes,
            spec.format,
            spec.width,
            spec.height,
            spec.frame_bytes
        ));
    }
    Ok(())
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Largest minus smallest.
fn spread(v: &[Duration]) -> Duration {
    match (v.iter().min(), v.iter().max()) {
        (Some(lo), Some(hi)) => hi.saturating_sub(*lo),
        _ => Duration::ZERO,
    }
}

/// The input stream in a file in memory, removed when dropped (on every error path too).
struct InputFile {
    path: PathBuf,
}

impl InputFile {
    /// `frame` `frames` times, in the first memory-backed directory that takes it whole.
    fn write(frame: &[u8], frames: u32) -> Result<InputFile, String> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let total = (frame.len() as u64).checked_mul(u64::from(frames)).ok_or("the input stream's size overflows")?;
        let mut tried = Vec::new();
        for dir in memory_dirs() {
            let name = format!("dmabridge-gst-baseline-{}-{}.raw", std::process::id(), SERIAL.fetch_add(1, Ordering::Relaxed));
            let path = dir.join(name);
            // gst-launch re-parses its arguments; a path with spaces, quotes or `!` would
            // need escaping that differs between versions, so such a directory is skipped.
            if !path.to_str().is_some_and(|p| p.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))) {
                tried.push(format!("{}: path needs quoting", dir.display()));
                continue;
            }
            let file = match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => f,
                Err(e) => {
                    tried.push(format!("{}: {e}", dir.display()));
                    continue;
                }
            };
            // From here on, the guard removes the file whatever happens.
            let guard = InputFile { path };
            let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
            let written = (0..frames).try_for_each(|_| w.write_all(frame)).and_then(|()| w.flush());
            match written {
                Ok(()) => {
                    tracing::debug!(path = %guard.path.display(), bytes = total, "GStreamer baseline input written");
                    return Ok(guard);
                }
                // Typically a small tmpfs (a container's 64 MiB /dev/shm): try the next one.
                Err(e) => tried.push(format!("{} ({total} bytes): {e}", dir.display())),
            }
        }
        Err(format!("nowhere to put the {total} byte input stream: {}", tried.join("; ")))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for InputFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::debug!(path = %self.path.display(), %e, "could not remove the GStreamer baseline input");
        }
    }
}

/// Candidate directories, most likely memory-backed first.
fn memory_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        dirs.push(shm.to_path_buf());
    }
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        dirs.push(PathBuf::from(run));
    }
    // Maybe a disk, but the file was just written, so it is read from the page cache.
    dirs.push(std::env::temp_dir());
    dirs
}

/// A child that exited successfully.
struct Finished {
    /// From just before spawning to when its exit was seen.
    elapsed: Duration,
    stdout: String,
}

/// Runs `program` with `args`, killing it after `timeout`. `Err` (with its stderr's tail) when
/// it cannot start, times out or exits unsuccessfully.
fn run_child(program: &str, args: &[String], timeout: Duration, capture_stdout: bool) -> Result<Finished, String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(if capture_stdout { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::piped());
    for var in NOISY_ENV {
        cmd.env_remove(var);
    }
    let what = || format!("{program} {}", args.join(" "));
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("could not run {program}: {e}"))?;
    // Drained while it runs: a child blocked on a full pipe would never exit.
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if start.elapsed() < timeout => thread::sleep(POLL),
            Ok(None) => break Err(format!("timed out after {} s", timeout.as_secs())),
            Err(e) => break Err(format!("could not wait for it: {e}")),
        }
    };
    let elapsed = start.elapsed();
    if status.is_err() {
        // Best effort: it may have exited in the meantime.
        let _ = child.kill();
        let _ = child.wait();
    }
    let collect = |rx: Option<mpsc::Receiver<Vec<u8>>>| {
        rx.and_then(|rx| rx.recv_timeout(DRAIN_TIMEOUT).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let (stdout, stderr) = (collect(stdout), collect(stderr));
    let failure = match status {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("exited with {s}")),
        Err(e) => Some(e),
    };
    match failure {
        None => Ok(Finished { elapsed, stdout }),
        Some(why) => {
            let tail = tail(&stderr, STDERR_TAIL);
            Err(format!("`{}` {why}{}{tail}", what(), if tail.is_empty() { "" } else { "; stderr: " }))
        }
    }
}

/// Reads a pipe to its end on a thread of its own; the bytes arrive on the channel.
fn drain<R: Read + Send + 'static>(mut pipe: R) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error leaves what was read: the output is only for error messages and counts.
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx
}

/// The last `max` characters of `s`, trimmed.
fn tail(s: &str, max: usize) -> &str {
    let s = s.trim();
    let start = s.char_indices().rev().nth(max.saturating_sub(1)).map_or(0, |(i, _)| i);
    s.get(start..).unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmabridge_interop::tiling::{detile_to_vec, tile_to_vec};

    /// GStreamer's output for one frame through the converting pipeline.
    fn convert_one(case: GstCase, width: u32, height: u32, frame: &[u8]) -> Result<Vec<u8>, String> {
        let spec = Spec::new(case, width, height)?;
        let input = InputFile::write(frame, 1)?;
        // An InputFile is also what removes the output afterwards.
        let output = InputFile { path: input.path().with_extension("out") };
        let args = pipeline_to(&spec, input.path(), Stage::Convert, &Sink::File(output.path().to_path_buf()));
        run_child(GST_LAUNCH, &args, CHILD_TIMEOUT, false)?;
        std::fs::read(output.path()).map_err(|e| e.to_string())
    }

    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64).map(|i| ((i.wrapping_add(seed).wrapping_mul(2_654_435_761)) >> 13) as u8).collect()
    }

    #[test]
    fn gst_detile_is_byte_exact_with_dmabridge() {
        if let Err(why) = available() {
            eprintln!("skipped: {why}");
            return;
        }
        // 256x256 is whole tiles everywhere; 200x136 pads every layout differently.
        for (w, h) in [(256, 256), (200, 136)] {
            let linear = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).unwrap();
            let image = pattern(linear.size as usize, u64::from(w));
            for layout in TileLayout::ALL.into_iter().filter(|l| gst_format(*l).is_some()) {
                let tiled = tile_to_vec(layout, Fourcc::NV12, w, h, &image).unwrap();
                let gst = convert_one(GstCase::Detile(layout), w, h, &tiled).unwrap();
                let ours = detile_to_vec(layout, Fourcc::NV12, w, h, &tiled).unwrap();
                assert_eq!(ours, image, "{layout} {w}x{h}: dmabridge round trip");
                assert!(gst == ours, "{layout} {w}x{h}: GStreamer's detile differs from dmabridge's");
            }
        }
    }

    #[test]
    fn gst_formats_exist_in_rawvideoparse() {
        if let Err(why) = available() {
            eprintln!("skipped: {why}");
            return;
        }
        let out = run_child(GST_INSPECT, &["rawvideoparse".to_string()], PROBE_TIMEOUT, true).unwrap().stdout;
        for layout in TileLayout::ALL {
            if let Some(f) = gst_format(layout) {
                assert!(out.split_whitespace().any(|w| w == f), "{f} ({layout})");
            }
        }
    }

    #[test]
    fn framing_check_and_bgrx_run() {
        if let Err(why) = available() {
            eprintln!("skipped: {why}");
            return;
        }
        let (w, h) = (64, 32);
        let frame = pattern((w * h * 3 / 2) as usize, 7);
        let bgrx = convert_one(GstCase::Nv12ToBgrx(TileLayout::Linear), w, h, &frame).unwrap();
        assert_eq!(bgrx.len(), (w * h * 4) as usize);
        let spec = Spec::new(GstCase::Nv12ToBgrx(TileLayout::Linear), w, h).unwrap();
        let input = InputFile::write(&frame, 3).unwrap();
        check_framing(&spec, input.path(), 3).unwrap();
        // Told there are more frames than the stream holds: caught.
        assert!(check_framing(&spec, input.path(), 4).is_err());
    }

    /// A tiled frame's BGRx is the BGRx of the same frame detiled: GStreamer's detile is
    /// exact and its colour math the same whatever the layout, so the tiled case converts
    /// the picture dmabridge's fused conversion does (a wrong layout or plane offset would
    /// scramble it).
    #[test]
    fn tiled_bgrx_is_the_bgrx_of_the_detiled_frame() {
        if let Err(why) = available() {
            eprintln!("skipped: {why}");
            return;
        }
        let (w, h) = (256u32, 128u32);
        let linear = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).unwrap();
        let image = pattern(linear.size as usize, 3);
        let want = convert_one(GstCase::Nv12ToBgrx(TileLayout::Linear), w, h, &image).unwrap();
        assert_eq!(want.len(), (w * h * 4) as usize);
        for layout in [TileLayout::Samsung64x32, TileLayout::Nv12_16L32S] {
            let tiled = tile_to_vec(layout, Fourcc::NV12, w, h, &image).unwrap();
            let got = convert_one(GstCase::Nv12ToBgrx(layout), w, h, &tiled).unwrap();
            assert!(got == want, "{layout}: GStreamer's tiled -> BGRx differs from its linear -> BGRx of the same picture");
        }
        assert!(Spec::new(GstCase::Nv12ToBgrx(TileLayout::I915Y), w, h).is_err(), "a layout GStreamer has no format for");
    }

    /// The RGB -> NV12 and P010 -> AR30 pipelines are given the frames as dmabridge lays
    /// them out (plane offsets, tight strides), so GStreamer converts the same picture: its
    /// output lands near dmabridge's reference (its own colour math differs by a few code
    /// values; a wrong stride or format would be far off).
    #[test]
    fn colour_cases_convert_the_same_picture() {
        use dmabridge_interop::tiling::{rgb_to_nv12_vec, yuv_to_rgb_vec, ColourMatrix, ColourRange};
        if let Err(why) = available() {
            eprintln!("skipped: {why}");
            return;
        }
        let (w, h) = (128u32, 64u32);
        let rgb: Vec<u8> = (0..w * h).flat_map(|i| {
            let (x, y) = (i % w, i / w);
            [(x * 255 / w) as u8, (y * 255 / h) as u8, ((x + y) * 255 / (w + h)) as u8, 255]
        }).collect();
        // Uncolorimetried SD caps: GStreamer takes BT.601.
        let gst = convert_one(GstCase::BgrxToNv12, w, h, &rgb).unwrap();
        let want = rgb_to_nv12_vec(Fourcc::XRGB8888, (ColourMatrix::Bt601, ColourRange::Limited), (w, h), &rgb).unwrap();
        assert_eq!(gst.len(), want.len());
        let worst = gst.iter().zip(&want).map(|(a, b)| (i32::from(*a) - i32::from(*b)).abs()).max();
        eprintln!("videoconvert BGRx -> NV12: at most {worst:?} code values from dmabridge's BT.601 reference");
        // 1 measured; the guide's 5-7 code values is its BT.601/709 error elsewhere.
        assert!(worst.is_some_and(|d| d <= 8), "{worst:?}");

        let word = |v: u32| ((v << 6) as u16).to_le_bytes();
        let luma = (0..w * h).flat_map(|i| word(64 + (i % w + i / w) * 876 / (w + h)));
        let chroma = (0..w * h / 2).flat_map(|i| word(320 + (i % w) * 384 / w));
        let p010: Vec<u8> = luma.chain(chroma).collect();
        let gst = convert_one(GstCase::P010ToBgr10a2, w, h, &p010).unwrap();
        // Uncolorimetried SD caps: GStreamer takes BT.601.
        let want = yuv_to_rgb_vec((Fourcc::P010, Fourcc::ARGB2101010), (ColourMatrix::Bt601, ColourRange::Limited), (w, h), &p010).unwrap();
        assert_eq!(gst.len(), want.len());
        let channels = |px: &[u8]| {
            let v = u32::from_le_bytes([px[0], px[1], px[2], px[3]]);
            [(v >> 20) & 1023, (v >> 10) & 1023, v & 1023].map(|c| c as i32)
        };
        let worst = gst.chunks(4).zip(want.chunks(4)).flat_map(|(a, b)| {
            let (a, b) = (channels(a), channels(b));
            (0..3).map(move |i| (a[i] - b[i]).abs())
        }).max();
        eprintln!("videoconvert P010 -> BGR10A2_LE: at most {worst:?} 10-bit code values from dmabridge's BT.601 reference");
        // 5 measured (10-bit code values); the BT.709 reference is 88 off, a wrong stride
        // or format hundreds.
        assert!(worst.is_some_and(|d| d <= 32), "{worst:?}");
    }

    #[test]
    fn refuses_bad_input_without_running_anything() {
        assert!(videoconvert_gbps(GstCase::Nv12ToBgrx(TileLayout::Linear), 64, 32, &[0; 100], 2).is_err());
        assert!(videoconvert_gbps(GstCase::Detile(TileLayout::I915Y), 64, 32, &[0; 1 << 16], 2).is_err());
        assert!(videoconvert_gbps(GstCase::Nv12ToBgrx(TileLayout::Linear), 64, 32, &[0; 3072], 0).is_err());
        assert!(Spec::new(GstCase::Detile(TileLayout::Linear), 64, 32).is_err());
    }

    #[test]
    fn input_file_is_removed() {
        let f = InputFile::write(&[1, 2, 3], 4).unwrap();
        let path = f.path().to_path_buf();
        assert_eq!(std::fs::read(&path).unwrap().len(), 12);
        drop(f);
        assert!(!path.exists());
    }

    #[test]
    fn tail_keeps_the_end_on_char_boundaries() {
        assert_eq!(tail("  abc\n", 2), "bc");
        assert_eq!(tail("ééé", 2), "éé");
        assert_eq!(tail("ab", 10), "ab");
    }
}
