//! `dmabridge display-check --kms-device /dev/dri/cardN`: did the display show what dmabridge
//! meant? Buffers of a collection the display's plane negotiated (system memory: the
//! dma-heap in the lab), filled with a known pattern (gradients, the row's
//! index and the frame's number: no two rows or frames alike), are added as framebuffers
//! (ADDFB2, LINEAR), shown on the primary plane at the mode's size (an atomic modeset for the
//! first, non-blocking flips with page-flip events for the others), and the frame the CRTC
//! composed comes back through the device's writeback connector (vkms's `Writeback-1`) into a
//! dumb buffer of the display's own; each is compared byte for byte with its source.
//!
//! What the comparison expects ([`compare`]): vkms composes onto an opaque black background
//! in 16 bits a channel with premultiplied alpha and writes its result, which is always
//! opaque, so with one plane the colour bytes come back exactly as the source had them
//! (whatever its alpha) and the fourth byte is 0xff, for an XR24 target as for an AR24 one. A
//! source whose fourth byte is 0xff therefore comes back byte for byte; the check's first
//! frame is one, the others carry a varying fourth byte to prove the rule.
//!
//! The same comparison checks the live demo's frames (`demo --producer v4l2 --writeback`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dmabridge_interop::collection::SystemAllocator;
use dmabridge_interop::dmabuf::{write_planes, DmaBuf, PlaneLayout};
use dmabridge_interop::negotiate::{Constraints, CpuAccess, Domain, ExtentRange, Participant};
use dmabridge_interop::{Format, FormatSet};
use dmabridge_interop::peers::kms_device::{KmsDevice, KmsDeviceError, WritebackTarget, WrittenBack};
use dmabridge_interop::Fourcc;
use serde_json::{json, Value};

use crate::local_collection::LocalCollection;
use crate::stats::mean_ms;

/// How long a writeback's out-fence or a flip's event may take (TCG is slow; vkms composes
/// on its simulated vblank).
pub const DISPLAY_TIMEOUT: Duration = Duration::from_secs(10);

/// What `display-check` runs.
pub struct DisplayCheckConfig {
    pub device: PathBuf,
    /// The source buffers' format: XR24 or AR24.
    pub fourcc: Fourcc,
    /// Frames shown and written back (the first by a modeset, the others by flips).
    pub frames: u32,
}

/// Why the check could not run (a frame that differs is not an error: it is reported).
#[derive(Debug, thiserror::Error)]
pub enum DisplayCheckError {
    #[error("{0}")]
    Display(#[from] KmsDeviceError),
    #[error("the source collection: {0}")]
    Collection(#[from] crate::local_collection::LocalCollectionError),
    #[error("filling a source buffer: {0}")]
    Write(#[from] dmabridge_interop::dmabuf::WriteError),
    #[error("the source buffer: {0}")]
    Source(String),
    #[error("display-check compares XR24 or AR24 frames, not {0}")]
    Format(Fourcc),
}

/// The check's result: its summary, and every frame that differed.
pub struct DisplayCheckOutcome {
    pub summary: Value,
    pub problems: Vec<String>,
}

/// What one comparison found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compared {
    pub pixels: u64,
    /// Whether the written-back bytes equal the source's exactly (the source's fourth byte
    /// was 0xff everywhere).
    pub identical: bool,
}

/// Compares a written-back XR24/AR24 frame with `source` (packed rows of `width` x `height`
/// B, G, R, X/A pixels, at the frame's top left): the colour bytes must be the source's, the
/// fourth byte 0xff (see the module doc). The error names how many pixels differ and the
/// first.
pub fn compare(source: &[u8], width: u32, height: u32, wb: &WrittenBack) -> Result<Compared, String> {
    if !matches!(wb.fourcc, Fourcc::XRGB8888 | Fourcc::ARGB8888) {
        return Err(format!("the writeback is {}, not XR24 or AR24", wb.fourcc));
    }
    if wb.width < width || wb.height < height {
        return Err(format!("the writeback is {}x{}, smaller than the {width}x{height} frame", wb.width, wb.height));
    }
    let (w, h) = (width as usize, height as usize);
    if source.len() != w * h * 4 || wb.bytes.len() != wb.width as usize * wb.height as usize * 4 {
        return Err(format!("{} source bytes for {width}x{height}, {} written back for {}x{}", source.len(), wb.bytes.len(), wb.width, wb.height));
    }
    let mut differ = 0u64;
    let mut first = None;
    let mut identical = true;
    for y in 0..h {
        let src = &source[y * w * 4..][..w * 4];
        let got = &wb.bytes[y * wb.width as usize * 4..][..w * 4];
        for (x, (s, g)) in src.chunks_exact(4).zip(got.chunks_exact(4)).enumerate() {
            let want = [s[0], s[1], s[2], 0xff];
            identical &= s[3] == 0xff;
            if g != want {
                differ += 1;
                first.get_or_insert((x, y, want, [g[0], g[1], g[2], g[3]]));
            }
        }
    }
    match first {
        None => Ok(Compared { pixels: (w * h) as u64, identical }),
        Some((x, y, want, got)) => Err(format!(
            "{differ} of {} pixels differ from the source; the first at ({x}, {y}): expected B,G,R,X {want:02x?}, written back {got:02x?}",
            w * h
        )),
    }
}

/// Frame `k`'s pattern, B, G, R, X/A a pixel: blue the column, green the row, red the row's
/// and column's high bits with the frame number, the fourth byte 0xff on frame 0 and varying
/// on the others.
pub fn pattern(width: u32, height: u32, k: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(width as usize * height as usize * 4);
    for y in 0..height {
        for x in 0..width {
            let b = (x ^ (k * 37)) as u8;
            let g = (y + k * 11) as u8;
            let r = ((x >> 8) | ((y >> 8) << 3) | (k << 5)) as u8 ^ (y as u8).rotate_left(3);
            let a = if k == 0 { 0xff } else { (x.wrapping_mul(7) + y + k) as u8 };
            out.extend_from_slice(&[b, g, r, a]);
        }
    }
    out
}

/// The source buffers: a collection of `frames` buffers negotiated between the display's
/// plane (its `IN_FORMATS`, the mode's extent, one buffer per frame it shows) and the
/// pattern writer (the CPU writes them, LINEAR, system memory), allocated by the
/// [`SystemAllocator`] (the system dma-heap where the kernel has one), each filled with
/// its frame's pattern (`write_planes`: mapped inside `DMA_BUF_IOCTL_SYNC`). Returns the
/// buffers and the memory they are in.
fn collection_frames(kms: &KmsDevice, fourcc: Fourcc, (w, h): (u32, u32), sources: &[Vec<u8>]) -> Result<(Vec<DmaBuf>, String), DisplayCheckError> {
    let frames = sources.len() as u32;
    let display = kms.participant("display", None)?.constrain(|c| {
        c.width = ExtentRange::exactly(w);
        c.height = ExtentRange::exactly(h);
        c.min_buffers = frames;
    });
    let writer = Participant::new("pattern writer", [Format::linear(fourcc)].into_iter().collect::<FormatSet>()).with_constraints(Constraints {
        width: ExtentRange::exactly(w),
        height: ExtentRange::exactly(h),
        cpu_access: CpuAccess::Write,
        domain: Domain::System,
        stride_align: 64,
        ..Constraints::default()
    });
    let allocator = SystemAllocator::new("display-check");
    let memory = allocator.memory.name();
    let collection = LocalCollection::negotiate("display-check", Box::new(allocator), &writer, display, DISPLAY_TIMEOUT)?;
    let got = &collection.buffers;
    for (buf, frame) in got.buffers.iter().zip(sources) {
        write_planes(buf, frame)?;
    }
    let buffers = got.buffers.iter().map(DmaBuf::try_clone).collect::<Result<Vec<_>, _>>().map_err(|e| DisplayCheckError::Source(e.to_string()))?;
    // The buffers stay valid for whoever holds their fds; the collection is done.
    collection.finish()?;
    Ok((buffers, memory))
}

/// A writeback target in the display's own memory: an XR24 dumb buffer `w` x `h` (the
/// mode's size, which vkms requires of it).
pub fn dumb_writeback_target(kms: &KmsDevice, (w, h): (u32, u32)) -> Result<WritebackTarget, DisplayCheckError> {
    let dumb = kms.dumb_buffer(w, h, 32)?;
    let buf = DmaBuf::in_one_file(Fourcc::XRGB8888, kms.dumb_layout(), w, h, dumb.fd, &[PlaneLayout::linear(0, u64::from(dumb.pitch), h)])
        .map_err(|e| DisplayCheckError::Source(e.to_string()))?;
    Ok(kms.writeback_target(buf)?)
}

/// Runs the check (see the module doc).
pub fn run_display_check(cfg: &DisplayCheckConfig) -> Result<DisplayCheckOutcome, DisplayCheckError> {
    if !matches!(cfg.fourcc, Fourcc::XRGB8888 | Fourcc::ARGB8888) {
        return Err(DisplayCheckError::Format(cfg.fourcc));
    }
    let kms = KmsDevice::open(&cfg.device)?;
    let wb = kms.writeback()?;
    // The buffer matches the mode the display prefers (vkms: 1024x768).
    let out = kms.output(None)?;
    let (w, h) = (out.mode.width, out.mode.height);
    let frames = cfg.frames.max(2);
    let sources: Vec<Vec<u8>> = (0..frames).map(|k| pattern(w, h, k)).collect();
    let (buffers, memory) = collection_frames(&kms, cfg.fourcc, (w, h), &sources)?;
    let fbs = buffers.iter().map(|b| kms.add_framebuffer(b)).collect::<Result<Vec<_>, _>>()?;
    let target = dumb_writeback_target(&kms, (w, h))?;

    let mut problems = Vec::new();
    let mut identical = 0u32;
    let mut matched = 0u32;
    let mut round_trips = Vec::new();
    let mut fence_waits = Vec::new();
    let mut check = |k: usize, wb: &WrittenBack, problems: &mut Vec<String>| match compare(&sources[k], w, h, wb) {
        Ok(c) => {
            matched += 1;
            identical += u32::from(c.identical);
        }
        Err(e) => problems.push(format!("frame {k}: {e}")),
    };

    let started = Instant::now();
    let mut shown = kms.show(&fbs[0], None)?;
    let modeset = started.elapsed();
    let first = kms.write_back(&shown, &target, DISPLAY_TIMEOUT)?;
    let first_round_trip = first.commit + first.fence_wait + first.read;
    check(0, &first, &mut problems);
    let mut flip_events = Vec::new();
    let mut flip_times = Vec::new();
    for (k, fb) in fbs.iter().enumerate().skip(1) {
        let started = Instant::now();
        kms.queue_flip(&mut shown, fb)?;
        let queued = started.elapsed();
        let event = kms.wait_flip(&shown, DISPLAY_TIMEOUT)?;
        flip_times.push((queued, started.elapsed()));
        flip_events.push(event);
        let got = kms.write_back(&shown, &target, DISPLAY_TIMEOUT)?;
        round_trips.push(got.commit + got.fence_wait + got.read);
        fence_waits.push(got.fence_wait);
        check(k, &got, &mut problems);
    }
    // The baseline, in the same run: flips alone (no writeback), each to its event.
    let mut plain_flips = Vec::new();
    for fb in &fbs {
        let started = Instant::now();
        kms.queue_flip(&mut shown, fb)?;
        kms.wait_flip(&shown, DISPLAY_TIMEOUT)?;
        plain_flips.push(started.elapsed());
    }
    if sequences_not_increasing(&flip_events) {
        problems.push(format!("the page-flip events' sequences do not increase: {:?}", flip_events.iter().map(|e| e.sequence).collect::<Vec<_>>()));
    }
    let scanout = kms.scanout(shown.plane)?;
    if scanout != Some(shown.framebuffer) {
        problems.push(format!("plane {} scans out {scanout:?}, not the last flip's framebuffer {}", shown.plane, shown.framebuffer));
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let sequences: Vec<u32> = flip_events.iter().map(|e| e.sequence).collect();
    let summary = json!({
        "device": kms.path(),
        "driver": kms.driver_name(),
        "writeback": { "connector": wb.connector, "name": wb.name, "formats": wb.formats.iter().map(|f| f.trimmed()).collect::<Vec<_>>(), "target": "XR24 dumb buffer" },
        "output": { "connector": shown.connector_name, "crtc": shown.crtc, "plane": shown.plane, "mode": out.mode },
        "source": { "format": cfg.fourcc.trimmed(), "layout": "LINEAR", "memory": memory, "collection": "display (IN_FORMATS) + pattern writer", "width": w, "height": h },
        "frames": frames,
        "frames_matched": matched,
        "frames_identical": identical,
        "display_unbound": first.display_unbound,
        "fourth_byte": "written back as 0xff whatever the source held; colour bytes exactly the source's",
        "flip_events": sequences,
        "ms": {
            "modeset": ms(modeset),
            "first_writeback": ms(first_round_trip),
            "writeback_round_trip_mean": mean_ms(&round_trips),
            "writeback_fence_wait_mean": mean_ms(&fence_waits),
            "flip_queue_mean": mean_ms(&flip_times.iter().map(|t| t.0).collect::<Vec<_>>()),
            "flip_to_event_mean": mean_ms(&flip_times.iter().map(|t| t.1).collect::<Vec<_>>()),
            "baseline_flip_to_event_mean": mean_ms(&plain_flips),
        },
    });
    Ok(DisplayCheckOutcome { summary, problems })
}

fn sequences_not_increasing(events: &[dmabridge_interop::peers::kms_device::FlipEvent]) -> bool {
    events.windows(2).any(|w| w[1].sequence <= w[0].sequence || w[1].time <= w[0].time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(bytes: Vec<u8>, width: u32, height: u32) -> WrittenBack {
        WrittenBack {
            fourcc: Fourcc::XRGB8888,
            width,
            height,
            bytes,
            commit: Duration::ZERO,
            fence_wait: Duration::ZERO,
            read: Duration::ZERO,
            display_unbound: false,
        }
    }

    #[test]
    fn a_writeback_matches_its_source_with_the_fourth_byte_opaque_and_any_other_byte_fails() {
        let (w, h) = (40, 3);
        let opaque = pattern(w, h, 0);
        let c = compare(&opaque, w, h, &written(opaque.clone(), w, h)).unwrap();
        assert_eq!(c, Compared { pixels: 120, identical: true });
        // A varying fourth byte comes back 0xff, the colours unchanged.
        let varying = pattern(w, h, 3);
        let back: Vec<u8> = varying.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2], 0xff]).collect();
        assert!(!compare(&varying, w, h, &written(back.clone(), w, h)).unwrap().identical);
        // One colour byte off, or the fourth byte as the source had it: a failure naming it.
        let mut off = back.clone();
        off[4 * (w as usize + 5) + 1] ^= 1;
        let e = compare(&varying, w, h, &written(off, w, h)).unwrap_err();
        assert!(e.starts_with("1 of 120 pixels differ") && e.contains("(5, 1)"), "{e}");
        assert!(compare(&varying, w, h, &written(varying.clone(), w, h)).is_err());
        // A frame at the top left of a larger writeback.
        let mut big = vec![0u8; (w as usize + 2) * h as usize * 4];
        for y in 0..h as usize {
            big[y * (w as usize + 2) * 4..][..w as usize * 4].copy_from_slice(&opaque[y * w as usize * 4..][..w as usize * 4]);
        }
        assert!(compare(&opaque, w, h, &written(big, w + 2, h)).is_ok());
        assert!(compare(&opaque, w, h, &written(opaque.clone(), w - 1, h)).is_err());
    }

    #[test]
    fn the_pattern_differs_row_to_row_and_frame_to_frame() {
        let (w, h) = (300, 300);
        let a = pattern(w, h, 1);
        let rows: std::collections::HashSet<&[u8]> = a.chunks_exact(w as usize * 4).collect();
        assert_eq!(rows.len(), h as usize);
        assert_ne!(a, pattern(w, h, 2));
    }
}
