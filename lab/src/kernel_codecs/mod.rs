//! `dmabridge demo --producer vicodec`: a real stateless decoder (the kernel's `vicodec`,
//! in the kernel lab) decoding into buffers of a dmabridge buffer collection, every frame
//! verified through the Vulkan device against the kernel's own stateful decoder.
//!
//! 1. A stream is made: moving NV12 frames ([`raw::synthetic_nv12`]) encoded by vicodec's
//!    **stateful encoder**, an I frame every [`VicodecConfig::gop`] frames and P frames
//!    referencing the frame before ([`stateful::encode`]). With a resolution change, each
//!    resolution is a segment of its own, starting with an I frame.
//! 2. vicodec's **stateful decoder** decodes it: what each frame must be
//!    ([`stateful::reference_decode`]).
//! 3. The **stateless decoder** decodes it through the request API into collection buffers
//!    ([`stateless`]): references honoured, [`stateless::IN_FLIGHT`] requests at once, each
//!    frame imported into the device and compared byte for byte with step 2. At a
//!    resolution change the queues stop, a new collection is negotiated and allocated at
//!    the new size, and the old one is released. The stream ends with a drain: every
//!    request completes and every frame is accounted for.
//!
//! The summary (the demo writes it as `summary.json`) has each segment's report, the
//! frames verified, the media device, and the fds the run leaked.

pub mod fwht;
pub mod raw;
pub mod stateful;
pub mod stateless;
pub mod visl;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dmabridge::interop::peers::v4l2_device::{MediaError, V4l2DeviceError};
use serde_json::json;

use self::stateless::{on_decoder, Accounted, Segment, SegmentReport};

/// The stream's sizes: before, and from the resolution change on.
pub const SIZES: [(u32, u32); 2] = [(640, 480), (1280, 720)];

/// What the vicodec demo runs.
#[derive(Debug, Clone)]
pub struct VicodecConfig {
    pub frames: u32,
    /// From this frame on the stream is [`SIZES`]`[1]`.
    pub resolution_change_at: Option<u32>,
    /// An I frame every this many frames (vicodec takes 1 to 16).
    pub gop: u32,
    pub validation: bool,
    /// How long the collection waits for its participants.
    pub timeout: Duration,
    /// Decode each P frame into its own reference's buffer (breaking the decoder rule on
    /// purpose: the comparison must catch it).
    pub break_references: bool,
}

/// The result: the summary and whether every frame held.
#[derive(Debug)]
pub struct VicodecOutcome {
    pub summary: serde_json::Value,
    pub ok: bool,
}

/// Why the vicodec demo failed.
#[derive(Debug, thiserror::Error)]
pub enum VicodecError {
    /// A vicodec node is not there (the driver is not loaded: `scripts/lab.sh --modules
    /// vicodec`).
    #[error("no V4L2 node named {0:?} (load vicodec: scripts/lab.sh --modules vicodec)")]
    NoNode(&'static str),
    #[error(transparent)]
    V4l2(#[from] V4l2DeviceError),
    #[error(transparent)]
    Media(#[from] MediaError),
    /// The driver answered something the stream cannot use (a frame it failed, a format
    /// that cannot hold the frame).
    #[error("vicodec: {0}")]
    Driver(String),
    /// The collection placed a layout the driver does not use.
    #[error("layout: {0}")]
    Layout(String),
    /// The stream's own bookkeeping found something wrong (a frame in the wrong buffer).
    #[error("stream: {0}")]
    Stream(String),
    #[error(transparent)]
    Engine(#[from] dmabridge::EngineError),
    #[error(transparent)]
    Caps(#[from] dmabridge::FormatSupportError),
    #[error(transparent)]
    Import(#[from] dmabridge::ImportError),
    #[error(transparent)]
    ReadBack(#[from] dmabridge::ReadBackError),
    #[error(transparent)]
    Descriptor(#[from] dmabridge::interop::dmabuf::DescriptorError),
    #[error(transparent)]
    Write(#[from] dmabridge::interop::dmabuf::WriteError),
    #[error(transparent)]
    Collection(#[from] crate::local_collection::LocalCollectionError),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// The video node named `name` (`/sys/class/video4linux/*/name`).
pub fn find_node(name: &'static str) -> Result<PathBuf, VicodecError> {
    let dir = std::fs::read_dir("/sys/class/video4linux").map_err(|_| VicodecError::NoNode(name))?;
    for entry in dir.flatten() {
        let named = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
        if named.trim_end() == name {
            return Ok(Path::new("/dev").join(entry.file_name()));
        }
    }
    Err(VicodecError::NoNode(name))
}

/// Runs the demo (module docs).
pub fn run(config: &VicodecConfig) -> Result<VicodecOutcome, VicodecError> {
    let encoder = find_node("stateful-encoder")?;
    let reference = find_node("stateful-decoder")?;
    let decoder = find_node("stateless-decoder")?;
    let change = config.resolution_change_at.filter(|&n| n > 0 && n < config.frames);
    let bounds: Vec<(u32, u32)> = match change {
        Some(n) => vec![(0, n), (n, config.frames)],
        None => vec![(0, config.frames)],
    };
    let started = Instant::now();
    let mut encode_time = Duration::ZERO;
    let mut decode_time = Duration::ZERO;
    let run = on_decoder(&decoder, config.validation, |engine, stateless| {
        stateless.break_references = config.break_references;
        let mut reports: Vec<SegmentReport> = Vec::new();
        for (i, &(first, end)) in bounds.iter().enumerate() {
            let (w, h) = SIZES[i];
            let raw: Vec<Vec<u8>> = (first..end).map(|n| raw::synthetic_nv12(n, w, h)).collect();
            let t = Instant::now();
            let frames = stateful::encode(&encoder, w, h, config.gop, &raw)?;
            let expected = stateful::reference_decode(&reference, w, h, &frames)?;
            encode_time += t.elapsed();
            let t = Instant::now();
            let stream = fwht::FwhtStream { frames, expected };
            let seg = Segment { width: w, height: h, first, stream: &stream };
            reports.push(stateless.decode(engine, &seg, config.timeout)?);
            decode_time += t.elapsed();
        }
        Ok(reports)
    })?;
    let Accounted { value: reports, media, validation, leaked } = run;
    let verified: u32 = reports.iter().map(|r| r.verified).sum();
    let honoured: u32 = reports.iter().map(|r| r.references_honoured).sum();
    let p_frames: u32 = reports.iter().map(|r| r.frames - r.intra_frames).sum();
    let released = reports.iter().all(|r| r.collection == "released");
    let ok = verified == config.frames && validation.is_empty() && leaked == 0 && released;
    let summary = json!({
        "device": format!("vicodec (stateless decoder {}, media {media})", decoder.display()),
        "frames": config.frames,
        "gop": config.gop,
        "resolution_change_at": change,
        "break_references": config.break_references,
        "segments": reports,
        "verified_frames": verified,
        "p_frames": p_frames,
        "references_honoured": honoured,
        "drained": reports.iter().map(|r| r.frames).sum::<u32>() == config.frames,
        "leaked_fds": leaked,
        "validation": validation,
        "ms_per_frame_stateless": decode_time.as_secs_f64() * 1e3 / f64::from(config.frames.max(1)),
        "ms_per_frame_stateful_encode_and_decode": encode_time.as_secs_f64() * 1e3 / f64::from(config.frames.max(1)),
        "seconds": started.elapsed().as_secs_f64(),
        "ok": ok,
    });
    Ok(VicodecOutcome { summary, ok })
}
