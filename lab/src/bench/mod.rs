//! `dmabridge bench`: the cost per frame of each way a frame reaches a consumer's shader,
//! with the machine's memcpy bandwidth measured in the same run as the baseline.
//!
//! Every path runs as an embedding host's frame loop would: the host owns its command
//! buffers and submits them itself, with at most [`FRAMES_IN_FLIGHT`](host_loop::FRAMES_IN_FLIGHT) frames in flight
//! (it waits for a command buffer's previous frame only when it comes round again), and a
//! frame's time is the loop's total time over its frames. A frame's time is what it costs to
//! make a producer's frame ready for the host's shaders; the host's own use of it (its draw)
//! is the same for every path and not part of it. Per path (the frame source is a linear
//! dma-buf: an exported image where the device exports, else a memfd):
//! - **zero-copy**: handoff (descriptor + fds over a Unix socket and back into a
//!   [`DmaBuf`](dmabridge_interop::dmabuf::DmaBuf)), the cached import ([`ImportCache`](dmabridge::ImportCache), a hit after the first frame), the
//!   acquire and release recorded into the host's command buffer, and the host's submit.
//!   Only where the import is explicit: without the modifier extension, or for NV12 on
//!   lavapipe (single-plane modifiers only), there is no zero-copy import and no entry.
//! - **copy-gpu**: the same handoff, a cached buffer import of the fd, then a GPU copy
//!   (`vkCmdCopyBufferToImage`, one region per plane) into a device-local image and the
//!   barrier to the host's sampling, in the host's command buffer, and its submit.
//! - **copy-cpu**: the same handoff, then the CPU reads the frame from the fd into a
//!   host-visible staging buffer (the classic upload, `pread`), which the GPU copies into the
//!   image before the barrier.

pub mod conversions;
pub mod cpu_peers;
pub mod figures;
pub mod frame_paths;
pub mod gst_baseline;
pub mod host_loop;
pub mod html;
pub mod options;
pub mod plot;
pub mod results;

use dmabridge::Engine;

use crate::error::DemoError;
use crate::stats::median;

use self::conversions::{conversions, convert_gbps, cpu_gbps, fused, fused_beside_linear, gst_case, PageFrame, TURN_WARMUPS};
use self::frame_paths::{handoff_us, measure, memcpy_gbps, negotiate_us};
use self::options::{BenchOptions, FORMATS, PATHS};
use self::results::{BenchReport, ConvertResult, PeerResult, SystemInfo};

/// Runs everything, calling `progress` with a label before each step.
pub fn run(engine: &Engine, opts: &BenchOptions, progress: &mut dyn FnMut(&str)) -> Result<BenchReport, DemoError> {
    let mut notes = Vec::new();
    progress("memcpy baseline");
    let (memcpy, memcpy_spread) = memcpy_gbps(opts.quick);
    let mut results = Vec::new();
    for &(w, h) in opts.sizes() {
        for fourcc in FORMATS {
            for path in PATHS {
                progress(&format!("{path} {} {w}x{h}", fourcc.trimmed()));
                match measure(engine, path, fourcc, w, h, opts) {
                    Ok(Some(r)) => results.push(r),
                    Ok(None) => {
                        let note = format!("{path} {}: no zero-copy import on this device (the import takes the buffer-copy path)", fourcc.trimmed());
                        if !notes.contains(&note) {
                            notes.push(note);
                        }
                    }
                    Err(e) => notes.push(format!("{path} {} {w}x{h}: {e}", fourcc.trimmed())),
                }
            }
        }
    }
    progress("negotiation");
    let negotiate = negotiate_us(engine, if opts.quick { 200 } else { 2000 })?;
    progress("handoff");
    let handoff = handoff_us(if opts.quick { 200 } else { 2000 })?;
    let mut convert = Vec::new();
    let conv = dmabridge::Converter::new(engine).map_err(|e| DemoError::Unavailable(e.to_string()))?;
    let gst = gst_baseline::available();
    if let Err(why) = &gst {
        notes.push(format!("no GStreamer comparison: {why}"));
    }
    for c in conversions(3840, 2160) {
        progress(&format!("convert {c}"));
        let (gbps, noise, choice, input) = match convert_gbps(&conv, &c, if opts.quick { 3 } else { 8 }) {
            Ok(r) => r,
            Err(e) => {
                notes.push(format!("convert {c}: {e}"));
                continue;
            }
        };
        let gstreamer_gbps = match gst_case(&c).filter(|_| gst.is_ok()) {
            Some(case) => match gst_baseline::videoconvert_gbps(case, c.width, c.height, input.bytes(), if opts.quick { 10 } else { 30 }) {
                Ok(g) => Some(g),
                Err(e) => {
                    notes.push(format!("GStreamer {c}: {e}"));
                    None
                }
            },
            None => None,
        };
        let cpu = choice.path == dmabridge::ConvertPath::Cpu;
        let threads = if cpu { dmabridge_interop::tiling::default_threads() as u32 } else { 0 };
        // dmabridge on one thread and each peer (one thread too) take turns, a sample each
        // per round after `TURN_WARMUPS` untimed calls, so that the machine's drift over the
        // seconds this takes (large on a shared VM) lands on both sides of the per-thread
        // ratio alike.
        let cases = cpu_peers::PeerCase::of(&c);
        progress(&format!("convert {c} on one thread, taking turns with {} peer(s)", cases.len()));
        let mut out = PageFrame::new(c.sizes().map_or(0, |s| s.1) as usize);
        let (mut ours, mut one_error) = (Vec::new(), None);
        let mut theirs: Vec<Result<Vec<f64>, cpu_peers::PeerError>> = cases.iter().map(|_| Ok(Vec::new())).collect();
        for _ in 0..opts.turns() {
            if cpu && one_error.is_none() {
                match cpu_gbps(&c, input.bytes(), out.bytes_mut(), 1, (TURN_WARMUPS, 1)) {
                    Ok(g) => ours.push(g),
                    Err(e) => one_error = Some(e),
                }
            }
            for (peer, samples) in cases.iter().zip(theirs.iter_mut()) {
                if let Ok(v) = samples {
                    match cpu_peers::measure(*peer, &c, input.bytes(), out.bytes_mut(), (TURN_WARMUPS, 1)) {
                        Ok(g) => v.push(g),
                        Err(e) => *samples = Err(e),
                    }
                }
            }
        }
        if let Some(e) = one_error {
            notes.push(format!("convert {c} on one thread: {e}"));
        }
        let one_thread = (!ours.is_empty()).then(|| median(&mut ours));
        let beside_linear = if cpu && fused(&c) {
            progress(&format!("convert {c} and the linear conversion, taking turns"));
            fused_beside_linear(&c, input.bytes(), threads as usize, opts.turns()).unwrap_or_else(|e| {
                notes.push(format!("convert {c} beside the linear conversion: {e}"));
                None
            })
        } else {
            None
        };
        let peers = cases
            .iter()
            .zip(theirs)
            .map(|(peer, measured)| {
                let measured = measured.map(|mut v| median(&mut v));
                let theirs = measured.as_ref().ok().copied();
                PeerResult {
                    name: peer.name().to_owned(),
                    threads: 1,
                    gbps: theirs,
                    missing: measured.err().map(|e| e.to_string()),
                    ratio_total: theirs.map(|g| gbps / g),
                    ratio_per_thread: theirs.zip(one_thread).map(|(g, one)| one / g),
                }
            })
            .collect();
        convert.push(ConvertResult {
            layout: c.from_layout.name(),
            format: c.from.trimmed().to_owned(),
            to_format: c.to.trimmed().to_owned(),
            width: c.width,
            height: c.height,
            gbps,
            path: choice.path,
            candidates: choice.candidates,
            gstreamer_gbps,
            vs_gstreamer: gstreamer_gbps.map(|g| gbps / g),
            spread: noise,
            threads,
            gbps_one_thread: one_thread,
            peers,
            beside_linear,
        });
    }
    Ok(BenchReport {
        device: engine.info().name.clone(),
        system: SystemInfo::collect(engine),
        memcpy_gbps: memcpy,
        memcpy_spread,
        results,
        convert,
        negotiate_us: negotiate,
        handoff_us: handoff,
        notes,
    })
}
