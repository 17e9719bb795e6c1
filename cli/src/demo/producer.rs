//! The demo's producer: negotiation, a pool of frames it never reuses while the consumer
//! holds them, a compute shader that renders each frame, and the handoff.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd};
use std::process::Child;
use std::time::Instant;

use dmabridge::ash::vk;
use dmabridge::{
    Binding, BufferLocation, Completion, ComputePipeline, Direction, Engine, EngineOptions, ExportedImage, GpuBuffer, ImportedBuffer,
    ParticipantRequest, SubmitOptions,
};
use dmabridge_interop::dmabuf::{fd_count, recv_fenced, send_buffer_with_fence, socketpair, DmaBuf, FencedReceived, PlaneDesc, PlaneLayout, SystemMemory};
use dmabridge_interop::sync::{SyncFile, SyncMethod, SyncMethods};
use dmabridge_interop::negotiate::{negotiate_with, ConversionKind, ConversionPlan, Domain, Member, NegotiateOptions, Outcome, Participant, Report, Usage};
use dmabridge_interop::tiling::{packed_planes, tiled_size};
use dmabridge_interop::{format_info, Format, FormatSet, Fourcc, Layout, Modifier, TileLayout};
use serde_json::{json, Value};

use super::control::{recv_msg, send_msg, ConsumerReport, Ending, Peer, ToConsumer, ToProducer, WireFormat, WireParticipant};
use dmabridge::resources::image::buffer_barrier;

use super::{DemoConfig, DemoError, Mode, Percentiles, Push, DEMO_FORMATS, FRAME_TIMEOUT, PATTERN_NV12_SPV, PATTERN_SPV};

/// How the producer's exported images are used (it writes them through a buffer alias; a
/// consumer on the same device could also copy from or sample them).
const EXPORT_USAGE: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw() | vk::ImageUsageFlags::TRANSFER_DST.as_raw(),
);

/// Buffers the producer may hold at once (one being rendered, one queued).
const PRODUCER_MIN_BUFFERS: u32 = 2;

/// What the producer's GPU renders natively in copy mode: X-tiled AR24, as GPUs render into
/// tiled targets. The copy plan from it to the consumer's linear `--format` is one step for
/// AR24 (detile) and two for NV12 (detile, then RGB -> NV12), which the engine runs
/// ([`dmabridge::Converter::record_plan`]) in the frame's own submission.
pub const RENDER_LAYOUT: TileLayout = TileLayout::I915X;

/// The format of the producer's copy-mode render target ([`RENDER_LAYOUT`] AR24).
pub fn render_format() -> Result<Format, DemoError> {
    let m = RENDER_LAYOUT.modifier().ok_or_else(|| DemoError::Unavailable(format!("{RENDER_LAYOUT} has no modifier")))?;
    Ok(Format::explicit(Fourcc::ARGB8888, m))
}

/// The checksum the consumer computes over a packed NV12 frame it samples through its
/// RGB_IDENTITY YCbCr conversion (`cli/shaders/demo_pattern_nv12.comp` documents the
/// formula): per pixel `(Cr | Y << 8 | Cb << 16 | 255 << 24) * weight(x, y)`, mod 2^32,
/// with the pixel's own 2x2 block's chroma.
pub fn nv12_checksum(frame: &[u8], (w, h): (u32, u32)) -> u32 {
    let (wu, hu) = (w as usize, h as usize);
    let (luma, chroma) = frame.split_at((wu * hu).min(frame.len()));
    let mut sum = 0u32;
    for y in 0..h {
        for x in 0..w {
            let (xu, yu) = (x as usize, y as usize);
            let l = u32::from(luma.get(yu * wu + xu).copied().unwrap_or(0));
            let c = (yu / 2) * wu + (xu / 2) * 2;
            let cb = u32::from(chroma.get(c).copied().unwrap_or(0));
            let cr = u32::from(chroma.get(c + 1).copied().unwrap_or(0));
            let weight = (x + 1).wrapping_mul(2_654_435_761) ^ (y + 1).wrapping_mul(40503);
            sum = sum.wrapping_add((cr | l << 8 | cb << 16 | 255 << 24).wrapping_mul(weight));
        }
    }
    sum
}

/// What the consumer says, as a negotiation participant.
pub(crate) fn participant_from_wire(w: &WireParticipant) -> Result<Participant, DemoError> {
    let mut set = FormatSet::new();
    for f in &w.formats {
        let fourcc: Fourcc = f.fourcc.parse().map_err(|e| DemoError::Protocol(format!("consumer format {}: {e}", f.fourcc)))?;
        let layout = match &f.modifier {
            None => Layout::Implicit,
            Some(m) => Layout::Explicit(Modifier::parse_hex(m).map_err(|e| DemoError::Protocol(format!("consumer modifier {m}: {e}")))?),
        };
        set.insert(Format { fourcc, layout });
    }
    Ok(Participant::new(w.name.clone(), set).with_usage(Usage::SAMPLE).with_sync(SyncMethods::of(w.sync.iter().copied())).constrain(|c| {
        c.min_buffers = w.min_buffers;
        c.read_only = w.read_only;
    }))
}

pub(crate) fn wire_formats(set: &FormatSet) -> Vec<WireFormat> {
    set.iter()
        .map(|f| WireFormat {
            fourcc: f.fourcc.trimmed(),
            modifier: f.layout.modifier().map(|m| format!("0x{:016x}", m.raw())),
        })
        .collect()
}

/// What the producer states in zero-copy mode; its exports are bound to it.
fn producer_request(fourcc: Fourcc) -> ParticipantRequest {
    ParticipantRequest::new("producer", EXPORT_USAGE, Direction::Export).with_fourccs(&[fourcc])
}

/// The producer's own participant for `mode`.
pub fn producer_participant(engine: &Engine, mode: Mode, fourcc: Fourcc) -> Result<Participant, DemoError> {
    let participant = match mode {
        Mode::ZeroCopy => {
            engine.participant(&producer_request(fourcc))?
        }
        // The render target is the producer's own device-local buffer, in the tiled layout
        // its GPU renders (whatever the consumer's format).
        Mode::Copy => Participant::new("producer", [render_format()?].into_iter().collect::<FormatSet>()).with_sync(engine.sync_methods()),
    };
    Ok(participant.with_usage(Usage::RENDER).constrain(|c| {
        c.min_buffers = PRODUCER_MIN_BUFFERS;
        if mode == Mode::Copy {
            c.domain = Domain::DeviceLocal;
        }
    }))
}

/// What negotiation decided for one mode.
#[derive(Debug, Clone)]
pub struct Plan {
    pub mode: Mode,
    pub fourcc: Fourcc,
    pub pool: u32,
    pub acceptable: Vec<Layout>,
    pub conversion: Option<ConversionKind>,
    /// Copy mode: the conversion's steps, which the engine runs on every frame (at the
    /// negotiation's cost extent; the frame's own size is set when the mode runs).
    pub steps: Option<ConversionPlan>,
    pub report: Value,
    /// How producer and consumer synchronise each frame: the best method both support.
    pub sync: SyncMethod,
}

/// Negotiates `mode` between the producer and the consumer. Zero-copy needs a shared
/// outcome (copies are not allowed); copy mode forces a copy plan: the producer keeps its
/// render target device-local and the consumer takes frames in system memory.
pub fn plan_mode(producer: &Participant, consumer: &Participant, mode: Mode, fourcc: Fourcc) -> Result<Plan, String> {
    let mut consumer = consumer.clone();
    if mode == Mode::Copy {
        consumer.constraints.domain = Domain::System;
        // The consumer displays the demo's format: the plan must end there.
        if let Some(set) = consumer.formats.as_set() {
            let only: FormatSet = set.iter().filter(|f| f.fourcc == fourcc).copied().collect();
            consumer.formats = dmabridge_interop::negotiate::Candidates::Only(only);
        }
    }
    // The frames pass between these two whether they are shared or copied into.
    let sync = SyncMethods::best_common([&producer.sync, &consumer.sync]);
    let members = [Member::from(producer.clone()), Member::from(consumer)];
    let opts = NegotiateOptions { allow_copy: mode == Mode::Copy, ..NegotiateOptions::default() };
    let n = negotiate_with(&members, opts).map_err(|e| e.to_string())?;
    let report: Value = serde_json::from_str(&Report::new(&n).to_json()).unwrap_or(Value::Null);
    let conflicts = |c: &[dmabridge_interop::negotiate::Conflict]| c.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("; ");
    match (mode, n.outcome) {
        (Mode::ZeroCopy, Outcome::Shared(a)) => {
            let acceptable = a.layout.modifiers().iter().map(|m| Layout::Explicit(*m)).collect();
            if a.fourcc != fourcc {
                return Err(format!("negotiation chose {}, the producer renders {}", a.fourcc.trimmed(), fourcc.trimmed()));
            }
            Ok(Plan { mode, fourcc, pool: a.constraints.buffers.max(1), acceptable, conversion: None, steps: None, report, sync: a.sync })
        }
        (Mode::Copy, Outcome::Copy { plan, .. }) => {
            let conv = plan.conversions.first();
            let group = conv.and_then(|c| plan.groups.get(c.to_group));
            let (Some(conv), Some(group)) = (conv, group) else {
                return Err("the copy plan has no conversion".into());
            };
            if group.format.fourcc != fourcc || group.format.layout != Layout::Explicit(Modifier::LINEAR) {
                return Err(format!("the copy plan's consumer group wants {}, the demo writes linear {}", group.format, fourcc.trimmed()));
            }
            // The consumer's group, plus the frame the conversion is writing.
            Ok(Plan {
                mode,
                fourcc,
                pool: group.allocation.constraints.buffers.max(1) + 1,
                acceptable: vec![],
                conversion: Some(conv.kind),
                steps: Some(conv.plan.clone()),
                report,
                sync,
            })
        }
        (_, Outcome::Impossible(c)) => Err(format!("negotiation: {}", conflicts(&c))),
        (_, Outcome::Shared(_)) => Err("negotiation shared a buffer where a copy was forced".into()),
        (_, Outcome::Copy { conflicts: c, .. }) => Err(format!("no shared buffer: {}", conflicts(&c))),
    }
}

/// One frame of the pool: the shared memory (an exported image, or a memfd) and a buffer
/// over it that the producer writes.
struct Slot {
    // Field order: the buffer over the memory goes before the export that owns it.
    alias: ImportedBuffer,
    _exported: Option<ExportedImage>,
    dmabuf: DmaBuf,
    set: vk::DescriptorSet,
    /// Where each plane lies in the file.
    planes: Vec<PlaneLayout>,
    used: bool,
    /// sync-file: the consumer's release fence, which the next frame's submission waits for
    /// before it writes the buffer again.
    release_fence: Option<SyncFile>,
}

/// The per-mode producer state.
struct Pool {
    slots: Vec<Slot>,
    free: Vec<usize>,
    held: BTreeSet<usize>,
    max_held: usize,
    /// Release fences that came back with the consumer's releases.
    release_fences: u64,
}

impl Pool {
    fn new(
        engine: &Engine,
        pipeline: &ComputePipeline,
        sum: &GpuBuffer,
        plan: &Plan,
        memory: &SystemMemory,
        (w, h): (u32, u32),
    ) -> Result<Self, DemoError> {
        let mut slots = Vec::new();
        for _ in 0..plan.pool {
            let (exported, dmabuf) = match plan.mode {
                Mode::ZeroCopy => {
                    let req = producer_request(plan.fourcc).export_request(plan.fourcc, w, h, plan.acceptable.iter().copied());
                    let img = engine.export_image(&req)?;
                    let buf = img.dmabuf().ok_or_else(|| DemoError::Unavailable("the export is not a dma-buf".into()))?.try_clone()?;
                    (Some(img), buf)
                }
                Mode::Copy => {
                    let layout = packed_planes(plan.fourcc, w, h).map_err(dmabridge::ConvertError::from)?;
                    let total = layout.iter().filter_map(PlaneLayout::end).max().unwrap_or(0);
                    let fd = memory.alloc("dmabridge-demo-frame", total)?;
                    let mut planes = Vec::new();
                    for p in &layout {
                        planes.push(PlaneDesc { fd: fd.try_clone()?, offset: p.offset, stride: p.stride });
                    }
                    drop(fd);
                    (None, DmaBuf::new(plan.fourcc, Layout::Explicit(Modifier::LINEAR), w, h, planes)?)
                }
            };
            if dmabuf.disjoint() {
                return Err(DemoError::Unavailable("the demo writes frames whose planes share one file".into()));
            }
            let planes = dmabuf.plane_layouts();
            if planes.iter().any(|p| p.offset % 4 != 0 || p.stride % 4 != 0) {
                return Err(DemoError::Unavailable(format!("plane layouts {planes:?} are not word-aligned")));
            }
            let size = planes.iter().map(|p| p.end().ok_or_else(|| DemoError::Unavailable(format!("plane {p:?} ends past 2^64")))).try_fold(0, |a, e| e.map(|e| a.max(e)))?;
            let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST | vk::BufferUsageFlags::TRANSFER_SRC;
            let fd = dmabuf.plane(0).map(|p| p.fd).ok_or_else(|| DemoError::Protocol("a frame without planes".into()))?;
            let alias = ImportedBuffer::import(engine, fd, size, usage)?;
            let set = pipeline.allocate_set()?;
            // SAFETY: a fresh set of this pipeline; both buffers have STORAGE_BUFFER usage and
            // live as long as the pool, which outlives every frame's submission (each is waited for).
            unsafe {
                pipeline.write_buffer(set, 0, alias.buffer());
                pipeline.write_buffer(set, 1, sum.buffer());
            }
            slots.push(Slot { _exported: exported, dmabuf, alias, set, planes, used: false, release_fence: None });
        }
        let free = (0..slots.len()).rev().collect();
        Ok(Pool { slots, free, held: BTreeSet::new(), max_held: 0, release_fences: 0 })
    }

    /// A slot the consumer does not hold, waiting for releases when there is none.
    fn take(&mut self, buffers: BorrowedFd<'_>, peer: &Peer, sync: SyncMethod) -> Result<usize, DemoError> {
        while self.free.is_empty() {
            self.wait_release(buffers, peer, sync)?;
        }
        self.free.pop().ok_or_else(|| DemoError::Protocol("no free buffer".into()))
    }

    /// Takes the consumer's next release; under sync-file it may carry a release fence,
    /// which the buffer's next submission waits for.
    fn wait_release(&mut self, buffers: BorrowedFd<'_>, peer: &Peer, sync: SyncMethod) -> Result<(), DemoError> {
        match recv_fenced(buffers).map_err(|e| peer.handoff_error(e))? {
            FencedReceived::Release { id, release_fence } => {
                let i = usize::try_from(id).map_err(|_| DemoError::Protocol(format!("release of unknown buffer {id}")))?;
                if !self.held.remove(&i) {
                    return Err(DemoError::Protocol(format!("the consumer released buffer {id}, which it does not hold")));
                }
                if release_fence.is_some() && sync != SyncMethod::SyncFile {
                    return Err(DemoError::Protocol(format!("buffer {id} came back with a fence, but the mode synchronises by {sync}")));
                }
                self.release_fences += u64::from(release_fence.is_some());
                self.slots[i].release_fence = release_fence;
                self.free.push(i);
                Ok(())
            }
            FencedReceived::Buffer { id, .. } => Err(DemoError::Protocol(format!("the consumer sent buffer {id}"))),
        }
    }

}

/// The result of one mode, for summary.json and the table.
#[derive(Debug, Clone)]
pub struct ModeResult {
    pub mode: Mode,
    pub json: Value,
    pub frame: Percentiles,
    pub gbps: f64,
    pub mismatches: usize,
}

/// What the whole demo produced.
#[derive(Debug, Clone)]
pub struct DemoOutcome {
    pub summary: Value,
    pub results: Vec<ModeResult>,
    pub unavailable: Vec<(Mode, String)>,
    pub mismatches: usize,
    pub leaked_fds: i64,
    pub device: String,
}

/// Runs the producer side. `spawn` starts the consumer process with the two sockets
/// (buffers, control) inherited; it gets borrowed fds and must not close them.
pub fn run(
    config: &DemoConfig,
    spawn: &mut dyn FnMut(BorrowedFd<'_>, BorrowedFd<'_>) -> std::io::Result<Child>,
) -> Result<DemoOutcome, DemoError> {
    // Counted across the device's whole life, as the consumer counts (see there).
    let fds_before = fd_count()?;
    let engine = Engine::new(&EngineOptions { validation: config.validation, ..EngineOptions::from_env() })?;
    let peer = Peer { name: "consumer", pid: None, timeout: config.peer_timeout };
    let (outcome, status, pid) = {
        let (buf_ours, buf_theirs) = socketpair()?;
        let (ctl_ours, ctl_theirs) = socketpair()?;
        peer.apply(&buf_ours)?;
        peer.apply(&ctl_ours)?;
        let mut child = spawn(buf_theirs.as_fd(), ctl_theirs.as_fd())?;
        let peer = Peer { pid: Some(child.id()), ..peer };
        drop((buf_theirs, ctl_theirs));
        // The consumer's own account of a failure comes first; a consumer that hung up
        // without one is named by how it ended.
        let result = drive(&engine, config, &peer, buf_ours.as_fd(), ctl_ours.as_fd())
            .map_err(|e| consumer_reason(ctl_ours.as_fd(), &peer).unwrap_or(e))
            .map_err(|e| peer.reap(&mut child, e));
        drop((buf_ours, ctl_ours));
        if result.is_err() {
            // A consumer that stopped or misbehaves is not waited for.
            let _ = child.kill();
        }
        let status = child.wait()?;
        (result, status, child.id())
    };
    let (mut outcome, consumer_leaked) = outcome?;
    if !status.success() {
        return Err(DemoError::PeerDied { peer: "consumer", pid, how: Ending::of(status) });
    }
    if let Some(log) = engine.validation() {
        let problems = log.problems();
        if !problems.is_empty() {
            return Err(DemoError::Protocol(format!(
                "validation layer: {}",
                problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; ")
            )));
        }
    }
    drop(engine);
    let fds_after = fd_count()?;
    let producer_leaked = fds_after as i64 - fds_before as i64;
    outcome.leaked_fds = producer_leaked + consumer_leaked;
    if let Some(obj) = outcome.summary.as_object_mut() {
        obj.insert("leaked_fds".into(), json!(outcome.leaked_fds));
        obj.insert("producer_fds".into(), json!({"before": fds_before, "after": fds_after, "leaked": producer_leaked}));
    }
    Ok(outcome)
}

/// After a failure: the consumer's own account of it, if it sent one before it exited.
fn consumer_reason(control: BorrowedFd<'_>, peer: &Peer) -> Option<DemoError> {
    rustix::io::ioctl_fionbio(control, true).ok()?;
    loop {
        match recv_msg::<ToProducer>(control, peer) {
            Ok(ToProducer::Failed { error }) => return Some(DemoError::PeerFailed { peer: peer.name, pid: peer.pid, error }),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

fn drive(engine: &Engine, config: &DemoConfig, peer: &Peer, buffers: BorrowedFd<'_>, control: BorrowedFd<'_>) -> Result<(DemoOutcome, i64), DemoError> {
    let consumer_wire = match recv_msg::<ToProducer>(control, peer)? {
        ToProducer::Caps { participant } => participant,
        ToProducer::Failed { error } => return Err(DemoError::PeerFailed { peer: peer.name, pid: peer.pid, error }),
        other => return Err(DemoError::Protocol(format!("expected the consumer's capabilities, got {other:?}"))),
    };
    let consumer = participant_from_wire(&consumer_wire)?;
    let fourcc = config.fourcc;
    if !DEMO_FORMATS.contains(&fourcc) {
        return Err(DemoError::Unavailable(format!("the demo renders AR24 or NV12, not {}", fourcc.trimmed())));
    }
    let spv = if fourcc == Fourcc::NV12 { PATTERN_NV12_SPV } else { PATTERN_SPV };
    // Sets: one per pool slot and one for the copy mode's render target, per mode.
    let pipeline = ComputePipeline::new(engine, spv, &[Binding::StorageBuffer, Binding::StorageBuffer], 28, 64)?;
    // Copy mode renders AR24 whatever the consumer's format (the plan converts it), and
    // runs the plan's steps with the engine's converter.
    let ar24_pipeline = match fourcc {
        Fourcc::ARGB8888 => None,
        _ => Some(ComputePipeline::new(engine, PATTERN_SPV, &[Binding::StorageBuffer, Binding::StorageBuffer], 28, 4)?),
    };
    let converter = dmabridge::Converter::new(engine)?;
    let tools = CopyTools { pipeline: ar24_pipeline.as_ref().unwrap_or(&pipeline), converter: &converter };
    let sum = GpuBuffer::new(engine, 8, BufferLocation::Readback)?;
    let (w, h) = (config.width, config.height);
    let frame_bytes = format_info(fourcc).map_or(0, |i| i.packed_size(w, h));
    let mut results = Vec::new();
    let mut unavailable = Vec::new();
    let mut summary = serde_json::Map::new();
    summary.insert("frames".into(), json!(config.frames));
    summary.insert("format".into(), json!(fourcc.trimmed()));
    summary.insert("width".into(), json!(w));
    summary.insert("height".into(), json!(h));
    summary.insert("producer_device".into(), json!(engine.info().name));
    summary.insert("consumer_device".into(), json!(consumer_wire.device));
    summary.insert("modifier_extension".into(), json!(engine.has_modifiers()));
    for mode in [Mode::ZeroCopy, Mode::Copy] {
        if !config.modes.contains(&mode) {
            summary.insert(mode.key().into(), json!({"available": null, "skipped": "not requested (--mode)"}));
            continue;
        }
        let producer = producer_participant(engine, mode, fourcc)?;
        let plan = match plan_mode(&producer, &consumer, mode, fourcc) {
            Ok(p) => p,
            Err(reason) => {
                let exports_nothing = producer.formats.as_set().is_some_and(|s| s.is_empty());
                let reason = if exports_nothing {
                    format!(
                        "this device exports no {} dma-buf (lavapipe exports only with udmabuf, see scripts/emulation.sh, and with modifiers only single-plane formats); {reason}",
                        fourcc.trimmed()
                    )
                } else {
                    reason
                };
                tracing::info!(mode = mode.name(), %reason, "mode unavailable");
                summary.insert(mode.key().into(), json!({"available": false, "reason": reason}));
                unavailable.push((mode, reason));
                continue;
            }
        };
        let r = run_mode(engine, config, &plan, (&pipeline, &tools), &sum, (buffers, control, peer), frame_bytes)?;
        summary.insert(mode.key().into(), r.json.clone());
        results.push(r);
    }
    drop((converter, ar24_pipeline, pipeline, sum));
    send_msg(control, peer, &ToConsumer::Bye { out_dir: config.out_dir.to_string_lossy().into_owned() })?;
    let (consumer_leaked, sheet, c_before, c_after) = match recv_msg::<ToProducer>(control, peer)? {
        ToProducer::Final { leaked_fds, contact_sheet, fds_before, fds_after } => (leaked_fds, contact_sheet, fds_before, fds_after),
        ToProducer::Failed { error } => return Err(DemoError::PeerFailed { peer: peer.name, pid: peer.pid, error }),
        other => return Err(DemoError::Protocol(format!("expected the consumer's final report, got {other:?}"))),
    };
    summary.insert("consumer_fds".into(), json!({"before": c_before, "after": c_after, "leaked": consumer_leaked}));
    summary.insert("contact_sheet".into(), json!(sheet));
    let mismatches = results.iter().map(|r| r.mismatches).sum();
    summary.insert("verified".into(), json!(mismatches == 0));
    Ok((
        DemoOutcome {
            summary: Value::Object(summary),
            results,
            unavailable,
            mismatches,
            leaked_fds: 0,
            device: engine.info().name.clone(),
        },
        consumer_leaked,
    ))
}

#[allow(clippy::too_many_arguments)]
fn run_mode(
    engine: &Engine,
    config: &DemoConfig,
    plan: &Plan,
    (pipeline, tools): (&ComputePipeline, &CopyTools<'_>),
    sum: &GpuBuffer,
    (buffers, control, peer): (BorrowedFd<'_>, BorrowedFd<'_>, &Peer),
    frame_bytes: u64,
) -> Result<ModeResult, DemoError> {
    let (w, h) = (config.width, config.height);
    let memory = SystemMemory::detect();
    let mut pool = Pool::new(engine, pipeline, sum, plan, &memory, (w, h))?;
    let sync_file = plan.sync == SyncMethod::SyncFile;
    // Copy mode: the producer's own device-local render target (rendered linear, then tiled
    // as its GPU's layout), the plan's steps at the frame's size, and for a colour plan a
    // readback of what the plan wrote, for the checksum the consumer will compute.
    let render = match (plan.mode, &plan.steps) {
        (Mode::Copy, Some(steps)) => Some(CopyPath::new(engine, tools, sum, steps.at_extent(w, h), plan.fourcc, (w, h))?),
        (Mode::Copy, None) => return Err(DemoError::Protocol("copy mode without a plan".into())),
        (Mode::ZeroCopy, _) => None,
    };
    let sample_every = (config.frames / 6).max(1);
    send_msg(
        control,
        peer,
        &ToConsumer::Start {
            mode: plan.mode,
            fourcc: plan.fourcc.trimmed(),
            width: w,
            height: h,
            frames: config.frames,
            pool: plan.pool,
            sample_every,
            sync: plan.sync,
        },
    )?;
    let foreign = engine.foreign_queue_family();
    let ours = engine.queue_family();
    let mut producer_us = Vec::with_capacity(config.frames as usize);
    let mut acquire_fences = 0u64;
    let result = (|| -> Result<(), DemoError> {
        for index in 0..config.frames {
            let slot_index = pool.take(buffers, peer, plan.sync)?;
            let t0 = Instant::now();
            let slot = &mut pool.slots[slot_index];
            let corrupt = config.corrupt_frame == Some(index);
            // sync-file: the GPU waits for the consumer's release before it writes the buffer
            // again, and signals the acquire fence that goes out with it.
            let options = SubmitOptions {
                wait_sync_files: slot.release_fence.take().into_iter().collect(),
                // A consumer that never signals holds this frame back no longer than it may
                // be silent, and never the queue.
                fence_limit: peer.timeout,
                export_sync_file: sync_file,
                ..SubmitOptions::default()
            };
            let (_, mut submitted) = engine.submit(options, |cmd, until| {
                record_frame(engine, cmd, until, pipeline, sum, slot, render.as_ref(), plan, index, corrupt, (w, h), (ours, foreign))?;
                sum.track(until);
                slot.alias.track(until);
                if let Some(r) = &render {
                    r.track(until);
                }
                Ok::<(), DemoError>(())
            })?;
            if sync_file {
                // The descriptor leaves at once with its acquire fence (none when the work
                // was already done at export: vkGetSemaphoreFdKHR's -1).
                let acquire = submitted.take_sync_file();
                send_buffer_with_fence(buffers, slot_index as u64, &slot.dmabuf, acquire.as_ref()).map_err(|e| peer.handoff_error(e))?;
                acquire_fences += u64::from(acquire.is_some());
                // Only the checksum that the consumer verifies needs the CPU to wait; the
                // release fence may hold the frame back for up to the peer timeout.
                submitted.wait(FRAME_TIMEOUT.saturating_add(peer.timeout)).map_err(|e| peer.submit_error(e))?;
            } else {
                // cpu-wait: the frame is written before its descriptor leaves.
                submitted.wait(FRAME_TIMEOUT)?;
                send_buffer_with_fence(buffers, slot_index as u64, &slot.dmabuf, None).map_err(|e| peer.handoff_error(e))?;
            }
            slot.used = true;
            let checksum = match render.as_ref().and_then(|r| r.readback.as_ref()) {
                Some(readback) => nv12_checksum(readback.bytes()?, (w, h)),
                None => read_u32(sum, 0)?,
            };
            pool.held.insert(slot_index);
            pool.max_held = pool.max_held.max(pool.held.len());
            send_msg(control, peer, &ToConsumer::Frame { index, id: slot_index as u64, checksum })?;
            producer_us.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        // Every buffer comes back before the pool goes.
        while !pool.held.is_empty() {
            pool.wait_release(buffers, peer, plan.sync)?;
        }
        // The last releases' fences: the pool's memory goes only once the consumer is done.
        for slot in &mut pool.slots {
            if let Some(fence) = slot.release_fence.take() {
                fence.wait(FRAME_TIMEOUT)?;
            }
        }
        Ok(())
    })();
    let max_outstanding = pool.max_held;
    let release_fences = pool.release_fences;
    drop(pool);
    drop(render);
    result?;
    send_msg(control, peer, &ToConsumer::End)?;
    let (report, consumer_timing): (ConsumerReport, Percentiles) = match recv_msg::<ToProducer>(control, peer)? {
        ToProducer::ModeDone { report, timing } => (report, timing),
        ToProducer::Failed { error } => return Err(DemoError::PeerFailed { peer: peer.name, pid: peer.pid, error }),
        other => return Err(DemoError::Protocol(format!("expected a mode report, got {other:?}"))),
    };
    let frame_us: Vec<f64> = producer_us.iter().zip(report.frame_us.iter().chain(std::iter::repeat(&0.0))).map(|(p, c)| p + c).collect();
    let frame = Percentiles::of(&frame_us);
    let gbps = if frame.median > 0.0 { frame_bytes as f64 / frame.median / 1e3 } else { 0.0 };
    let json = json!({
        "available": true,
        "format": plan.fourcc.trimmed(),
        "width": w,
        "height": h,
        "frames": config.frames,
        "pool_buffers": plan.pool,
        "conversion": plan.conversion.map(|c| c.to_string()),
        "conversion_runs_on": plan.conversion.map(|_| "gpu (producer)"),
        "plan": plan.steps.as_ref().map(|p| json!({
            "steps": p.at_extent(w, h).steps.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "frames_run": config.frames,
            "frames_verified": report.verified,
        })),
        "negotiation": plan.report,
        "import_path": report.import_path,
        "frame_us": frame,
        "producer_us": Percentiles::of(&producer_us),
        "consumer_us": consumer_timing,
        "gbps": gbps,
        "bytes_per_frame": frame_bytes,
        "verified_frames": report.verified,
        "mismatches": report.mismatches,
        "import_cache": {"hits": report.cache_hits, "misses": report.cache_misses, "evictions": report.cache_evictions},
        "max_held_by_consumer": report.max_held,
        "max_outstanding": max_outstanding,
        "sync": plan.sync,
        "fences": {"acquire_sent": acquire_fences, "release_received": release_fences},
        "memory": match plan.mode {
            Mode::Copy => memory.name(),
            Mode::ZeroCopy => "device".to_owned(),
        },
    });
    Ok(ModeResult { mode: plan.mode, json, frame, gbps, mismatches: report.mismatches.len() })
}

/// The first checksum slot of a mapped buffer, once the GPU is done with it.
pub fn read_u32(buffer: &GpuBuffer, index: usize) -> Result<u32, DemoError> {
    let b = buffer.bytes()?;
    Ok(b.get(index * 4..index * 4 + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]])))
}

/// The pattern shader's push constants and dispatch extent for a frame whose planes lie at
/// `planes` (offset, stride) in the bound buffer.
fn pattern_push(fourcc: Fourcc, (w, h): (u32, u32), planes: &[PlaneLayout], index: u32) -> Result<(Push, (u32, u32)), DemoError> {
    let words = |v: u64| u32::try_from(v / 4).map_err(|_| DemoError::Unavailable(format!("a plane offset or stride of {v} bytes is too large")));
    let (o0, s0) = planes.first().map(|p| (p.offset, p.stride)).ok_or_else(|| DemoError::Protocol("a frame without planes".into()))?;
    if fourcc == Fourcc::NV12 {
        let (o1, s1) = planes.get(1).map(|p| (p.offset, p.stride)).ok_or_else(|| DemoError::Protocol("an NV12 frame without its chroma plane".into()))?;
        Ok(([w, h, words(o0)?, words(s0)?, index, words(o1)?, words(s1)?], (w / 4, h / 2)))
    } else {
        Ok(([w, h, words(o0)?, words(s0)?, index, 0, 0], (w, h)))
    }
}

#[allow(clippy::too_many_arguments)]
fn record_frame(
    engine: &Engine,
    cmd: vk::CommandBuffer,
    until: Completion,
    pipeline: &ComputePipeline,
    sum: &GpuBuffer,
    slot: &Slot,
    render: Option<&CopyPath<'_>>,
    plan: &Plan,
    index: u32,
    corrupt: bool,
    (w, h): (u32, u32),
    (ours, foreign): (u32, u32),
) -> Result<(), DemoError> {
    let device = engine.device();
    let ignored = vk::QUEUE_FAMILY_IGNORED;
    let mut pre = vec![buffer_barrier(sum.buffer(), vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE, ignored, ignored)];
    // Copy mode writes the frame with the plan's last step: a shader or copy commands.
    let first_write = if render.is_some() { vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE } else { vk::AccessFlags::SHADER_WRITE };
    if slot.used {
        // Acquire the frame back from the consumer's side (it released it to us by message).
        pre.push(buffer_barrier(slot.alias.buffer(), vk::AccessFlags::empty(), first_write, foreign, ours));
    }
    // SAFETY: recording state; every buffer belongs to this device and has the usage its
    // command needs (fill: TRANSFER_DST, VUID-vkCmdFillBuffer-dstBuffer-00029); the acquire
    // pairs with the consumer's release (VUID-VkBufferMemoryBarrier-srcQueueFamilyIndex-04088:
    // external memory may be transferred from the foreign family).
    unsafe {
        device.cmd_fill_buffer(cmd, sum.buffer(), 0, 8, 0);
        device.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::TOP_OF_PIPE,
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::DependencyFlags::empty(),
            &[],
            &pre,
            &[],
        );
    }
    let mut last_write = vk::AccessFlags::SHADER_WRITE;
    let mut last_stage = vk::PipelineStageFlags::COMPUTE_SHADER;
    match render {
        Some(r) => {
            // SAFETY: the engine's command buffer, recording, submitted with `until`; every
            // buffer is tracked until then by the caller (`CopyPath::track`, the slot).
            unsafe { r.record(engine, cmd, &slot.alias, index, until)? };
            last_write = vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE;
            last_stage = vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::COMPUTE_SHADER;
        }
        None => {
            let (push, dims) = pattern_push(plan.fourcc, (w, h), &slot.planes, index)?;
            dispatch(pipeline, cmd, slot.set, &push, dims, until)?;
        }
    }
    if corrupt {
        // A transport fault, after the checksum was taken: 16 pixels in the middle of the frame.
        let (offset, stride) = slot.planes.first().map_or((0, 0), |p| (p.offset, p.stride));
        let bpp = format_info(plan.fourcc).and_then(|i| i.planes.first()).map_or(1, |p| p.cpp as u64);
        let at = offset + (h as u64 / 2) * stride + (w as u64 / 2) * bpp;
        let at = at - at % 4;
        let size = 64u64.min(offset + stride * h as u64 - at) & !3;
        let barrier = buffer_barrier(slot.alias.buffer(), last_write, vk::AccessFlags::TRANSFER_WRITE, ignored, ignored);
        tracing::warn!(frame = index, "corrupting the frame on purpose (--corrupt-frame)");
        // SAFETY: recording state; the range lies inside the alias buffer (offset + stride x
        // height bytes) and is 4-byte aligned (VUID-vkCmdFillBuffer-dstOffset-00025, -size-00028).
        unsafe {
            device.cmd_pipeline_barrier(cmd, last_stage, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &[], &[barrier], &[]);
            device.cmd_fill_buffer(cmd, slot.alias.buffer(), at, size, 0x00ff_00ff);
        }
        last_write = vk::AccessFlags::TRANSFER_WRITE;
        last_stage = vk::PipelineStageFlags::TRANSFER;
    }
    let host = buffer_barrier(sum.buffer(), vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::HOST_READ, ignored, ignored);
    let release = buffer_barrier(slot.alias.buffer(), last_write, vk::AccessFlags::empty(), ours, foreign);
    // SAFETY: recording state; the release hands the frame's memory to the consumer's
    // device (VUID-VkBufferMemoryBarrier-srcQueueFamilyIndex-04088: external memory).
    unsafe {
        device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[], &[host], &[]);
        device.cmd_pipeline_barrier(cmd, last_stage, vk::PipelineStageFlags::BOTTOM_OF_PIPE, vk::DependencyFlags::empty(), &[], &[release], &[]);
    }
    Ok(())
}

/// Records the demo shader `pipeline` over a `width` x `height` grid of 16x16 groups.
pub fn dispatch(
    pipeline: &ComputePipeline,
    cmd: vk::CommandBuffer,
    set: vk::DescriptorSet,
    push: &Push,
    (width, height): (u32, u32),
    until: Completion,
) -> Result<(), DemoError> {
    let groups = [width.div_ceil(16), height.div_ceil(16), 1];
    // SAFETY: `cmd` is the command buffer a submission's closure was handed, signalling
    // `until`, which the caller tracks on every resource the set points at.
    unsafe { pipeline.record_dispatch(cmd, set, bytemuck::bytes_of(push), groups, until)? };
    Ok(())
}

/// What copy mode renders and converts with, made once for all modes.
pub struct CopyTools<'a> {
    /// The AR24 pattern shader.
    pub pipeline: &'a ComputePipeline,
    pub converter: &'a dmabridge::Converter,
}

/// Copy mode's render path: the pattern into a linear AR24 target, tiled into the GPU's
/// layout ([`RENDER_LAYOUT`]), then the negotiated plan's steps into the frame.
pub struct CopyPath<'a> {
    tools: &'a CopyTools<'a>,
    set: vk::DescriptorSet,
    linear: GpuBuffer,
    tiled: GpuBuffer,
    steps: ConversionPlan,
    /// A colour plan's output as the CPU reads it back (its checksum is the consumer's).
    readback: Option<GpuBuffer>,
    w: u32,
    h: u32,
}

impl<'a> CopyPath<'a> {
    fn new(engine: &Engine, tools: &'a CopyTools<'a>, sum: &GpuBuffer, steps: ConversionPlan, fourcc: Fourcc, (w, h): (u32, u32)) -> Result<Self, DemoError> {
        steps.check().map_err(dmabridge::ConvertError::from)?;
        let linear = GpuBuffer::new(engine, tiled_size(TileLayout::Linear, Fourcc::ARGB8888, w, h).map_err(dmabridge::ConvertError::from)?.size, BufferLocation::DeviceLocal)?;
        let tiled = GpuBuffer::new(engine, tiled_size(RENDER_LAYOUT, Fourcc::ARGB8888, w, h).map_err(dmabridge::ConvertError::from)?.size, BufferLocation::DeviceLocal)?;
        let readback = match fourcc {
            Fourcc::ARGB8888 => None,
            _ => Some(GpuBuffer::new(engine, tiled_size(TileLayout::Linear, fourcc, w, h).map_err(dmabridge::ConvertError::from)?.size, BufferLocation::Readback)?),
        };
        let set = tools.pipeline.allocate_set()?;
        // SAFETY: a fresh set; both buffers have STORAGE_BUFFER usage and outlive the mode.
        unsafe {
            tools.pipeline.write_buffer(set, 0, linear.buffer());
            tools.pipeline.write_buffer(set, 1, sum.buffer());
        }
        Ok(CopyPath { tools, set, linear, tiled, steps, readback, w, h })
    }

    fn track(&self, until: Completion) {
        self.linear.track(until);
        self.tiled.track(until);
        if let Some(r) = &self.readback {
            r.track(until);
        }
    }

    /// Records frame `index`: render, tile, the plan's steps into `frame`, and the readback.
    ///
    /// # Safety
    /// `cmd` is the engine's command buffer, recording, submitted with `until`; `frame`
    /// and this path's buffers are tracked until then.
    unsafe fn record(&self, engine: &Engine, cmd: vk::CommandBuffer, frame: &ImportedBuffer, index: u32, until: Completion) -> Result<(), DemoError> {
        let device = engine.device();
        let (w, h) = (self.w, self.h);
        let ignored = vk::QUEUE_FAMILY_IGNORED;
        let (push, dims) = pattern_push(Fourcc::ARGB8888, (w, h), &[PlaneLayout::linear(0, u64::from(w) * 4, h)], index)?;
        dispatch(self.tools.pipeline, cmd, self.set, &push, dims, until)?;
        let rendered = buffer_barrier(self.linear.buffer(), vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::SHADER_READ | vk::AccessFlags::TRANSFER_READ, ignored, ignored);
        let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
        let transfer = vk::PipelineStageFlags::TRANSFER;
        let planes = packed_planes(Fourcc::ARGB8888, w, h).map_err(dmabridge::ConvertError::from)?;
        // SAFETY: the caller's contract; the engine's buffers have every usage the tile and
        // the plan need, and hold the geometry's sizes (made from it); the barrier makes the
        // pattern visible to both.
        unsafe {
            device.cmd_pipeline_barrier(cmd, compute, compute | transfer, vk::DependencyFlags::empty(), &[], &[rendered], &[]);
            self.tools.converter.record_planes(cmd, dmabridge::TiledFrame { layout: RENDER_LAYOUT, fourcc: Fourcc::ARGB8888, extent: (w, h) }, (self.tiled.buffer(), 0), (self.linear.buffer(), &planes), true, until)?;
            self.tools.converter.record_plan(cmd, &self.steps, &self.tiled, frame, until)?;
        }
        if let Some(readback) = &self.readback {
            let size = readback.len().min(frame.len());
            let before = buffer_barrier(frame.buffer(), vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::TRANSFER_READ, ignored, ignored);
            let host = buffer_barrier(readback.buffer(), vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::HOST_READ, ignored, ignored);
            // SAFETY: the caller's contract; the frame has TRANSFER_SRC usage (Pool::new) and
            // the readback TRANSFER_DST; `size` fits both (VUID-vkCmdCopyBuffer-size-00115).
            unsafe {
                device.cmd_pipeline_barrier(cmd, compute | transfer, transfer, vk::DependencyFlags::empty(), &[], &[before], &[]);
                device.cmd_copy_buffer(cmd, frame.buffer(), readback.buffer(), &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size }]);
                device.cmd_pipeline_barrier(cmd, transfer, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[], &[host], &[]);
            }
        }
        Ok(())
    }
}
