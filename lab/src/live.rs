//! `dmabridge demo --producer v4l2 --device /dev/videoN [--kms-device /dev/dri/cardN[:PLANE]]`:
//! a live camera produces, in one process. The negotiation runs between three lists read at
//! run time: the camera's (its driver, through `VIDIOC_ENUM_FMT`), the Vulkan device's and,
//! when given, a KMS plane's (`IN_FORMATS`). Frames then flow:
//!
//! - camera -> Vulkan device: each V4L2 buffer leaves through `VIDIOC_EXPBUF` and is imported
//!   with the explicit layout `VIDIOC_S_FMT` reported, once per buffer (the import cache);
//!   every frame the device reads back is compared with the camera's own mapping of it;
//! - camera -> display: where the plane lists the camera's format and the driver takes the
//!   camera's dma-buf as a framebuffer, the frame is scanned out from the camera's memory;
//!   otherwise the copy plan takes over: the engine converts the frame into a buffer the
//!   display allocated (a dumb buffer), which is shown, and compared with the conversion.
//!
//! `--format` picks the camera's format (what the camera lists first by default, among those
//! the device can import). Exit status as for the other producers: 4 when a frame failed its
//! check, 5 when fds leaked.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{fd_count, pack_planes, write_planes, DmaBuf, FdTrust, PlaneLayout, PlaneMap};
use dmabridge::interop::sync::{SyncAccess, CPU_ACCESS_TIMEOUT};
use dmabridge::interop::negotiate::{negotiate, Candidates, Member, Outcome, Participant};
use dmabridge::interop::report::{Report, ReportParticipant};
use dmabridge::interop::peers::kms_device::{Framebuffer, KmsDevice, Shown, WritebackTarget};
use dmabridge::interop::peers::v4l2::{self, plane_layouts};
use dmabridge::interop::peers::v4l2_device::{Direction as V4l2Direction, MappedBuffer, Memory, V4l2Device};
use dmabridge::interop::negotiate::ConversionPlan;
use dmabridge::interop::tiling::{ColourMatrix, ColourRange, FrameConversion};
use dmabridge::interop::{Format, Fourcc, Layout, Modifier, TileLayout};
use dmabridge::{Converter, Engine, EngineOptions, ImageUse, ImportCache, ParticipantRequest};
use serde_json::{json, Value};

/// How long one frame may take to come back from the camera (TCG is slow; the first frame
/// waits for the driver's thread to start).
const FRAME_TIMEOUT: Duration = Duration::from_secs(20);
/// What the device does with a camera frame: samples it, and copies it out to check it.
const SAMPLE_AND_READ: vk::ImageUsageFlags =
    vk::ImageUsageFlags::from_raw(vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw());

/// What `--producer v4l2` runs.
pub struct LiveConfig {
    pub device: PathBuf,
    /// The KMS card and plane (`None`: its first primary plane).
    pub display: Option<(PathBuf, Option<u32>)>,
    /// The camera's format, if the user chose one.
    pub fourcc: Option<Fourcc>,
    pub frames: u32,
    pub width: u32,
    pub height: u32,
    pub validation: bool,
    /// Where `display.png` (the last frame as the display's buffer holds it) goes.
    pub out_dir: PathBuf,
    /// Read every frame shown back through the display's writeback connector (vkms) and
    /// compare it with the frame ([`crate::writeback::compare`]); XR24 and AR24 frames only.
    pub writeback: bool,
}

/// The run's result: `summary.json`, and whether every frame checked out.
pub struct LiveOutcome {
    pub summary: Value,
    pub problems: Vec<String>,
    pub leaked_fds: i64,
}

/// Why the demo could not run at all (a frame that fails its check is not an error: it is
/// counted and reported).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("camera: {0}")]
    Camera(#[from] dmabridge::interop::peers::v4l2_device::V4l2DeviceError),
    #[error("display: {0}")]
    Display(#[from] dmabridge::interop::peers::kms_device::KmsDeviceError),
    #[error("Vulkan device: {0}")]
    Engine(String),
    #[error("negotiation: {0}")]
    Negotiation(String),
    #[error("{0}")]
    Other(String),
}

fn other(e: impl std::fmt::Display) -> LiveError {
    LiveError::Other(e.to_string())
}

/// The camera's format: the first it lists (its preference) that the device takes and that
/// `wanted` names; among those, one the display lists too (zero-copy there, or a plain copy
/// into the display's own memory) beats one that needs a colour conversion (NV12 -> RGB),
/// which beats one no conversion turns into what the display shows.
fn stream_format(camera: &Participant, gpu: &Participant, display: Option<&Participant>, wanted: Option<Fourcc>) -> Result<Format, LiveError> {
    let list = |p: &Participant| match &p.formats {
        Candidates::Only(set) => Some(set.iter().copied().collect::<Vec<_>>()),
        Candidates::Any => None,
    };
    let cam = list(camera).unwrap_or_default();
    let gpu_list = list(gpu);
    let takes = |f: &Format| gpu_list.as_ref().map_or(true, |l| l.contains(f));
    let candidates: Vec<Format> = cam.into_iter().filter(|f| takes(f) && wanted.map_or(true, |w| w == f.fourcc)).collect();
    let shown = display.and_then(list).unwrap_or_default();
    let rank = |f: &Format| {
        if display.is_none() || shown.iter().any(|d| d.fourcc == f.fourcc) {
            0
        } else if matches!(f.fourcc, Fourcc::NV12 | Fourcc::P010) {
            1
        } else {
            2
        }
    };
    candidates
        .iter()
        .min_by_key(|f| rank(f))
        .copied()
        .ok_or_else(|| LiveError::Negotiation(match wanted {
            Some(w) => format!("the camera does not list {} in a layout the device imports", w.trimmed()),
            None => "the camera lists no format the device imports".to_owned(),
        }))
}

/// vivid's default picture, 75% colour bars (white, yellow, cyan, green, magenta, red, blue,
/// black: each component 0 or 75% of 255), checked in the middle of each bar on the bottom
/// row, under the text vivid prints at the top; `bgrx` is a packed XR24/AR24 frame. A
/// conversion from limited-range YUV may be a few code values off.
fn colour_bars(bgrx: &[u8], width: u32, height: u32) -> Result<(), String> {
    const BARS: [[u8; 3]; 8] = [[1, 1, 1], [1, 1, 0], [0, 1, 1], [0, 1, 0], [1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 0, 0]];
    const LEVEL: i32 = 191;
    const TOLERANCE: i32 = 3;
    let (w, row) = (width as usize, (height as usize).saturating_sub(1));
    for (i, bar) in BARS.iter().enumerate() {
        let x = (2 * i + 1) * w / 16;
        let at = (row * w + x) * 4;
        let px = bgrx.get(at..at + 3).ok_or("the frame is shorter than its size")?;
        let rgb = [px[2], px[1], px[0]];
        let want = bar.map(|on| if on == 1 { LEVEL } else { 0 });
        if rgb.iter().zip(want).any(|(&got, want)| (i32::from(got) - want).abs() > TOLERANCE) {
            return Err(format!("bar {i} at x={x} is RGB {rgb:?}, vivid's 75% bars have {want:?} there"));
        }
    }
    Ok(())
}

/// Runs the live demo; `summary.json` is the caller's to write.
pub fn run(cfg: &LiveConfig) -> Result<LiveOutcome, LiveError> {
    let fds_before = fd_count().map_err(other)?;
    let (summary, problems) = run_inner(cfg)?;
    let fds_after = fd_count().map_err(other)?;
    let leaked_fds = fds_after as i64 - fds_before as i64;
    let mut summary = summary;
    summary["leaked_fds"] = json!(leaked_fds);
    Ok(LiveOutcome { summary, problems, leaked_fds })
}

fn run_inner(cfg: &LiveConfig) -> Result<(Value, Vec<String>), LiveError> {
    let camera = V4l2Device::open(&cfg.device, Some(V4l2Direction::Capture))?;
    let engine = Engine::new(&EngineOptions { validation: cfg.validation, ..EngineOptions::from_env() }).map_err(|e| LiveError::Engine(e.to_string()))?;
    let display = match &cfg.display {
        Some((path, plane)) => Some((KmsDevice::open(path)?, *plane)),
        None => None,
    };

    // The three lists, as their drivers report them.
    let camera_part = camera.participant("camera")?;
    let mut gpu_part = engine
        .participant(&ParticipantRequest::new("gpu", ImageUse::new(SAMPLE_AND_READ), dmabridge::Direction::Import))
        .map_err(|e| LiveError::Engine(e.to_string()))?;
    // The device's list names the formats it imports as images; it imports NV12 too, as a
    // buffer it copies from (lavapipe has no multi-planar dma-buf image), like the render
    // demo's consumer says.
    if let Candidates::Only(set) = &mut gpu_part.formats {
        set.insert(Format::linear(Fourcc::NV12));
    }
    let display_part = match (&display, &cfg.display) {
        (Some((d, plane)), Some((path, _))) => Some((d.participant("display", *plane)?, format!("--kms-device {}", path.display()))),
        _ => None,
    };
    let stream = stream_format(&camera_part, &gpu_part, display_part.as_ref().map(|(p, _)| p), cfg.fourcc)?;
    let mut parts: Vec<(Participant, String)> = vec![
        (camera_part, format!("--v4l2-device {}", cfg.device.display())),
        (gpu_part, "--vulkan sampled+transfer-src".to_owned()),
    ];
    parts.extend(display_part);
    let read: Vec<ReportParticipant> = parts.iter().map(|(p, from)| ReportParticipant::of(p, Some(from.clone()))).collect();
    // The camera streams the one format chosen, which the device must share with it.
    parts[0].0.formats = Candidates::Only([stream].into_iter().collect());
    let members: Vec<Member> = parts.iter().map(|(p, _)| Member::from(p.clone())).collect();
    let pair = negotiate(&members[..2]).map_err(|e| LiveError::Negotiation(e.to_string()))?;
    let Outcome::Shared(shared) = &pair.outcome else {
        return Err(LiveError::Negotiation(format!("the device does not take the camera's {stream}: {}", Report::new(&pair).to_json())));
    };
    let buffers = shared.constraints.buffers;
    // With the display: one buffer for all three, a copy plan to the display's group, or
    // (a display that takes only implicit modifiers, which no copy group can be) the
    // display's own buffer fed by a conversion; the report says which and why.
    let negotiation = negotiate(&members).map_err(|e| LiveError::Negotiation(e.to_string()))?;
    let report = Report::new(&negotiation).with_participants(read);
    let why = report.conflicts.first().map_or_else(String::new, |c| c.to_string());
    let display_feed = match (&negotiation.outcome, parts.get(2)) {
        (_, None) | (Outcome::Shared(_), _) => None,
        (Outcome::Copy { plan, .. }, Some(_)) => plan
            .conversions
            .iter()
            .find(|c| plan.groups.get(c.to_group).is_some_and(|g| g.allocation.participants.iter().any(|p| p == "display")))
            .map(|c| Feed { plan: Some(c.plan.clone()), fourcc: plan.groups[c.to_group].format.fourcc, why }),
        (_, Some((display, _))) => Some(Feed { plan: None, fourcc: first_fourcc(display).unwrap_or(Fourcc::XRGB8888), why }),
    };
    tracing::info!(%stream, copy_to_display = display_feed.is_some(), "negotiated");

    // The stream, in the format the camera and the device share.
    let code = v4l2::lookup_format(stream).ok_or_else(|| other(format!("no V4L2 format is {stream}")))?.pixfmt.code();
    let fmt = camera.set_format(code, cfg.width, cfg.height)?;
    let layouts = plane_layouts(&fmt).map_err(other)?;
    let fourcc = stream.fourcc;
    let count = camera.request_buffers(buffers.max(3), Memory::Mmap)?;
    // Per V4L2 buffer: its export and the camera's own mapping of it (the reference).
    let mut exported: Vec<Option<(DmaBuf, MappedBuffer)>> = (0..count).map(|_| None).collect();
    for i in 0..count {
        camera.queue_mmap(i)?;
    }
    let mut cache = ImportCache::new(&engine, count as usize);
    let converter = Converter::new(&engine).map_err(|e| LiveError::Engine(e.to_string()))?;
    // The conversion for the display reads the frames as the camera encoded them.
    let colorimetry = camera.colorimetry()?;
    let colour = colorimetry.matrix().map(|m| (m, colorimetry.range()));
    let mut screen = display.as_ref().map(|(d, plane)| Screen {
        writeback: cfg.writeback.then(Writeback::default),
        ..Screen::new(d, *plane, display_feed, (fourcc, colour), fmt.width, fmt.height)
    });
    camera.stream_on()?;
    let mut problems = Vec::new();
    let (mut verified, mut shown, mut pattern_frames, mut import_path) = (0u32, 0u32, 0u32, None);
    let started = Instant::now();
    for frame_no in 0..cfg.frames {
        let frame = camera.dequeue(FRAME_TIMEOUT)?;
        let index = frame.index as usize;
        let Some(slot) = exported.get_mut(index) else {
            return Err(other(format!("the camera returned buffer {index} of {count}")));
        };
        // Each V4L2 buffer is exported and mapped once, on its first frame.
        if slot.is_none() {
            let fds = camera.export_buffer(frame.index)?;
            let buf = DmaBuf::of_objects(fourcc, Layout::Explicit(Modifier::LINEAR), fmt.width, fmt.height, &fds, &layouts).map_err(other)?;
            *slot = Some((buf, camera.map_buffer(frame.index)?));
        }
        let (buf, map) = slot.as_ref().ok_or_else(|| other("no descriptor"))?;
        let planes: Vec<&[u8]> = (0..map.len()).filter_map(|i| map.plane(i)).collect();
        let expected = pack_planes(fourcc, fmt.width, fmt.height, &layouts, &planes).ok_or_else(|| other("the buffer is smaller than its layout"))?;
        let image = cache.import(buf.try_clone().map_err(other)?, ImageUse::new(SAMPLE_AND_READ)).map_err(|e| LiveError::Engine(e.to_string()))?;
        import_path.get_or_insert(image.path());
        match image.read_back() {
            Ok(bytes) if bytes == expected && !frame.error => verified += 1,
            Ok(_) => problems.push(format!("frame {frame_no}: the device read other bytes than the camera's mapping")),
            Err(e) => problems.push(format!("frame {frame_no}: read back: {e}")),
        }
        if let Some(s) = screen.as_mut() {
            match s.show(buf, index, &expected, &converter) {
                Ok(()) => shown += 1,
                Err(e) => problems.push(format!("frame {frame_no}: display: {e}")),
            }
        }
        // The picture itself: vivid's colour bars, in what the device read (RGB streams) or
        // in what the display was given (the conversion of a YUV stream).
        let rgb = if matches!(fourcc, Fourcc::XRGB8888 | Fourcc::ARGB8888) { Some(&expected) } else { screen.as_ref().and_then(|s| s.last.as_ref()) };
        if let Some(bgrx) = rgb {
            match colour_bars(bgrx, fmt.width, fmt.height) {
                Ok(()) => pattern_frames += 1,
                Err(e) => problems.push(format!("frame {frame_no}: {e}")),
            }
        }
        camera.queue_mmap(frame.index)?;
    }
    let elapsed = started.elapsed();
    camera.stream_off()?;
    // The kernel's word on what the plane scans out after the last frame.
    if let Some(Err(e)) = screen.as_ref().map(Screen::check_scanout) {
        problems.push(format!("display: {e}"));
    }
    let mut display_summary = screen.as_ref().map(|s| s.summary(shown));
    if let (Some(s), Some(d)) = (screen.as_ref(), display_summary.as_mut()) {
        d["png"] = json!(s.write_png(&cfg.out_dir)?.map(|p| p.display().to_string()));
    }
    drop(screen);
    drop(cache);
    drop(exported);
    camera.request_buffers(0, Memory::Mmap)?;
    let summary = json!({
        "producer": "v4l2",
        "camera": {
            "device": cfg.device.display().to_string(),
            "driver": camera.driver(),
            "card": camera.card(),
            "multiplanar": camera.is_multiplanar(),
        },
        "vulkan_device": engine.info().name.clone(),
        "negotiation": serde_json::from_str::<Value>(&report.to_json()).unwrap_or(Value::Null),
        "stream": {
            "format": stream.to_string(),
            "width": fmt.width,
            "height": fmt.height,
            "bytesperline": fmt.planes.iter().map(|p| p.bytesperline).collect::<Vec<_>>(),
            "buffers": count,
            "colorimetry": colorimetry,
            "matrix": colour.map(|(m, r)| format!("{m:?} {r:?}")),
        },
        "frames": cfg.frames,
        "verified_frames": verified,
        "pattern": "vivid's 75% colour bars, checked on the bottom row of every RGB frame (the device's, or the display's for a YUV stream)",
        "pattern_frames": pattern_frames,
        "import_path": import_path.map(|p| format!("{p:?}")),
        "display": display_summary,
        "seconds": elapsed.as_secs_f64(),
    });
    Ok((summary, problems))
}

/// The display side: the camera's buffers as framebuffers where the plane takes them, a
/// display-owned buffer fed by the copy plan where not.
struct Screen<'a> {
    kms: &'a KmsDevice,
    plane: Option<u32>,
    /// The copy plan's conversion for the display, its output format, and why the display
    /// does not take the camera's buffers; `None` when it shares them.
    feed: Option<Feed>,
    /// The camera's format.
    from: Fourcc,
    /// The camera's matrix and range; `None` for an encoding dmabridge has no matrix for.
    colour: Option<(ColourMatrix, ColourRange)>,
    width: u32,
    height: u32,
    /// Framebuffers on the camera's buffers, by V4L2 index (zero-copy), once each.
    direct: Vec<Option<Framebuffer>>,
    /// Why the camera's buffers are not scanned out directly, once that is known.
    refused: Option<String>,
    /// The copy plan's target: a dumb buffer of the display's, its framebuffer, its fd.
    copy: Option<CopyTarget>,
    copies_verified: u32,
    /// The last frame as it was verified in the display's buffer (its format's bytes).
    last: Option<Vec<u8>>,
    /// What is on screen, and how it got there.
    scanout: Scanout,
    /// Each frame shown, read back through the writeback connector (`--writeback`).
    writeback: Option<Writeback>,
}

/// The live demo's writeback check: the target, and what the frames gave.
#[derive(Default)]
struct Writeback {
    target: Option<WritebackTarget>,
    matched: u32,
    identical: u32,
    round_trips: Vec<Duration>,
}

/// The plane the first frame's modeset lit up, and how many frames were flipped onto it.
#[derive(Default)]
struct Scanout {
    shown: Option<Shown>,
    /// Frames put on screen by a flip (`FB_ID` alone), not a modeset.
    flips: u32,
    /// Flips that were non-blocking and completed with their page-flip event.
    flip_events: u32,
    /// Why a flip fell back to a blocking commit (a driver that refuses the event).
    blocking_reason: Option<String>,
}

impl Scanout {
    /// Puts `fb` on the display: a modeset for the first frame ([`KmsDevice::show`]), a
    /// flip of the plane's framebuffer for every later one (the same framebuffer again is
    /// still a commit, which makes a driver such as virtio-gpu push the rows just written to
    /// its host). A flip is non-blocking with a page-flip event ([`KmsDevice::queue_flip`],
    /// then [`KmsDevice::wait_flip`]: the frame loop could work meanwhile); a driver that
    /// refuses that commit gets the blocking one ([`KmsDevice::flip`]) from then on, and the
    /// summary says why.
    fn put(&mut self, kms: &KmsDevice, plane: Option<u32>, fb: &Framebuffer) -> Result<(), LiveError> {
        match &mut self.shown {
            Some(s) => {
                if self.blocking_reason.is_some() {
                    kms.flip(s, fb)?;
                } else if let Err(e) = kms.queue_flip(s, fb) {
                    tracing::warn!(error = %e, "non-blocking flip refused: blocking commits from now on");
                    self.blocking_reason = Some(e.to_string());
                    kms.flip(s, fb)?;
                } else {
                    kms.wait_flip(s, crate::writeback::DISPLAY_TIMEOUT)?;
                    self.flip_events += 1;
                }
                self.flips += 1;
            }
            None => self.shown = Some(kms.show(fb, plane)?),
        }
        Ok(())
    }
}

/// How frames reach a display that does not share the camera's buffers.
struct Feed {
    /// The negotiated copy plan's conversion, or `None` for the display's own buffer fed
    /// by the engine's conversion of the frame (a plain copy when the formats agree).
    plan: Option<ConversionPlan>,
    /// What the display shows.
    fourcc: Fourcc,
    /// Why it does not share the camera's buffers, in the negotiation's words.
    why: String,
}

/// A participant's first format's fourcc.
fn first_fourcc(p: &Participant) -> Option<Fourcc> {
    match &p.formats {
        Candidates::Only(set) => set.iter().next().map(|f| f.fourcc),
        Candidates::Any => None,
    }
}

struct CopyTarget {
    /// The frame's place in it: the top-left `width` x `height` at the buffer's pitch.
    frame: DmaBuf,
    fb: Framebuffer,
}

impl<'a> Screen<'a> {
    /// `width` x `height` is the size the camera's driver chose, which the copy plan's
    /// conversion is fitted to (the negotiation costed it at another).
    fn new(kms: &'a KmsDevice, plane: Option<u32>, feed: Option<Feed>, (from, colour): (Fourcc, Option<(ColourMatrix, ColourRange)>), width: u32, height: u32) -> Self {
        let refused = feed.as_ref().map(|f| f.why.clone());
        let feed = feed.map(|f| Feed { plan: f.plan.map(|p| p.at_extent(width, height)), ..f });
        Screen { kms, plane, feed, from, colour, width, height, direct: Vec::new(), refused, copy: None, copies_verified: 0, last: None, scanout: Scanout::default(), writeback: None }
    }

    fn show(&mut self, buf: &DmaBuf, index: usize, packed_frame: &[u8], converter: &Converter) -> Result<(), LiveError> {
        if self.refused.is_none() {
            if self.direct.len() <= index {
                self.direct.resize_with(index + 1, || None);
            }
            if self.direct[index].is_none() {
                match self.kms.add_framebuffer(buf) {
                    Ok(fb) => self.direct[index] = Some(fb),
                    Err(e) => self.refused = Some(e.to_string()),
                }
            }
            if let Some(fb) = &self.direct[index] {
                self.scanout.put(self.kms, self.plane, fb)?;
                return self.write_back(self.from, packed_frame);
            }
        }
        // The copy plan: convert into the display's own buffer (the frame at its top left),
        // show that, and check what landed there.
        let feed = self.feed.as_ref().ok_or_else(|| other(format!("the display refused the camera's buffer: {}", self.refused.as_deref().unwrap_or("?"))))?;
        let fourcc = feed.fourcc;
        // A copy plan names the formats, but carries no colorimetry (the negotiation costs a
        // conversion, it does not know the stream's): its YUV -> RGB step runs in the
        // camera's matrix and range, as the display's own feed does, not in the plan's default.
        let rgb = if fourcc == self.from {
            packed_frame.to_vec()
        } else {
            let (matrix, range) = self.colour.ok_or_else(|| other("the camera's Y'CbCr encoding has no matrix in dmabridge (SMPTE 240M or constant-luminance BT.2020)"))?;
            let c = FrameConversion { matrix, range, ..FrameConversion::new((TileLayout::Linear, self.from), (TileLayout::Linear, fourcc), self.width, self.height) };
            converter.convert_frame(&c, None, packed_frame).map_err(other)?.0
        };
        if self.copy.is_none() {
            self.copy = Some(self.copy_target(fourcc)?);
        }
        let target = self.copy.as_ref().ok_or_else(|| other("no copy target"))?;
        // One write bracket for the frame's rows, then one read bracket to check them.
        write_planes(&target.frame, &rgb).map_err(other)?;
        let layouts = target.frame.plane_layouts();
        let p = target.frame.plane(0).ok_or_else(|| other("no plane"))?;
        let span = layouts.iter().filter_map(PlaneLayout::end).max().unwrap_or(0);
        let view = PlaneMap::of_file(p.fd, 0, span, SyncAccess::Read, FdTrust::Untrusted, CPU_ACCESS_TIMEOUT).map_err(other)?;
        if pack_planes(fourcc, self.width, self.height, &layouts, &[view.bytes()]).as_deref() != Some(&rgb[..]) {
            return Err(other("the display's buffer holds other bytes than the conversion wrote"));
        }
        drop(view);
        self.copies_verified += 1;
        self.scanout.put(self.kms, self.plane, &target.fb)?;
        self.write_back(fourcc, &rgb)?;
        self.last = Some(rgb);
        Ok(())
    }

    /// With `--writeback`: the frame the display composed, written back into a dumb buffer
    /// of its own the mode's size, compared with `frame` (the packed `fourcc` frame shown at
    /// the top left).
    fn write_back(&mut self, fourcc: Fourcc, frame: &[u8]) -> Result<(), LiveError> {
        let (Some(wb), Some(shown)) = (self.writeback.as_mut(), self.scanout.shown.as_ref()) else { return Ok(()) };
        if !matches!(fourcc, Fourcc::XRGB8888 | Fourcc::ARGB8888) {
            return Err(other(format!("--writeback compares XR24 or AR24 frames, and the display shows {fourcc}")));
        }
        if wb.target.is_none() {
            wb.target = Some(crate::writeback::dumb_writeback_target(self.kms, (shown.mode.width, shown.mode.height)).map_err(other)?);
        }
        let target = wb.target.as_ref().ok_or_else(|| other("no writeback target"))?;
        let got = self.kms.write_back(shown, target, crate::writeback::DISPLAY_TIMEOUT)?;
        wb.round_trips.push(got.commit + got.fence_wait + got.read);
        let c = crate::writeback::compare(frame, self.width, self.height, &got).map_err(|e| other(format!("written back: {e}")))?;
        wb.matched += 1;
        wb.identical += u32::from(c.identical);
        Ok(())
    }

    /// A buffer of the display's own (a dumb buffer: a driver may scan out only its own
    /// memory) the size of the output's mode, since a primary plane must cover the screen,
    /// in the driver's implicit layout when it takes no modifiers.
    fn copy_target(&self, fourcc: Fourcc) -> Result<CopyTarget, LiveError> {
        let mode = self.kms.output_fitting(self.plane, (self.width, self.height))?.mode;
        if mode.width < self.width || mode.height < self.height {
            return Err(other(format!("the {}x{} frame does not fit the display's {}x{} mode", self.width, self.height, mode.width, mode.height)));
        }
        let dumb = self.kms.dumb_buffer(mode.width, mode.height, 32)?;
        let layout = [PlaneLayout::linear(0, u64::from(dumb.pitch), mode.height)];
        let how = self.kms.dumb_layout();
        let frame_fd = dumb.fd.try_clone().map_err(other)?;
        let buf = DmaBuf::in_one_file(fourcc, how, mode.width, mode.height, dumb.fd, &layout).map_err(other)?;
        let fb = self.kms.add_framebuffer(&buf)?;
        let frame = DmaBuf::in_one_file(fourcc, how, self.width, self.height, frame_fd, &[PlaneLayout::linear(0, u64::from(dumb.pitch), self.height)]).map_err(other)?;
        Ok(CopyTarget { frame, fb })
    }

    /// `display.png`: the last frame the display showed from its own buffer, if it is XR24
    /// or AR24 (bytes B, G, R, X).
    fn write_png(&self, dir: &std::path::Path) -> Result<Option<PathBuf>, LiveError> {
        let (Some(bytes), Some(feed)) = (&self.last, &self.feed) else { return Ok(None) };
        if !matches!(feed.fourcc, Fourcc::XRGB8888 | Fourcc::ARGB8888) {
            return Ok(None);
        }
        let rgb: Vec<u8> = bytes.chunks_exact(4).flat_map(|p| [p[2], p[1], p[0]]).collect();
        let path = dir.join("display.png");
        crate::picture::write_png(&path, self.width, self.height, &rgb).map_err(other)?;
        Ok(Some(path))
    }

    /// That the plane scans out the framebuffer of the last commit, by its `FB_ID`.
    fn check_scanout(&self) -> Result<(), LiveError> {
        let Some(shown) = &self.scanout.shown else { return Ok(()) };
        match self.kms.scanout(shown.plane)? {
            Some(id) if id == shown.framebuffer => Ok(()),
            other_fb => Err(other(format!("plane {} scans out framebuffer {other_fb:?}, not {} (the last one committed)", shown.plane, shown.framebuffer))),
        }
    }

    fn summary(&self, shown: u32) -> Value {
        json!({
            "device": self.kms.path(),
            "driver": self.kms.driver_name(),
            "frames_shown": shown,
            "modesets": u32::from(self.scanout.shown.is_some()),
            "flips": self.scanout.flips,
            "flip_events": self.scanout.flip_events,
            "blocking_flips_because": self.scanout.blocking_reason,
            "zero_copy": self.refused.is_none(),
            "refused": self.refused,
            "copy_frames_verified": self.copies_verified,
            "copy_format": self.feed.as_ref().map(|f| f.fourcc.trimmed()),
            "copy_plan": self.feed.as_ref().and_then(|f| f.plan.as_ref()).map(|p| p.to_string()),
            "writeback": self.writeback.as_ref().map(|w| json!({
                "frames_matched": w.matched,
                "frames_identical": w.identical,
                "round_trip_ms_mean": crate::stats::mean_ms(&w.round_trips),
            })),
        })
    }
}
