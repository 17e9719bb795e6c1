//! The demo's producer: it starts the consumer, negotiates each mode, renders every frame
//! into a pool buffer the consumer does not hold, and hands it over.

use std::os::fd::{AsFd, BorrowedFd};
use std::process::Child;
use std::time::Instant;

use dmabridge::ash::vk;
use dmabridge::resources::image::buffer_barrier;
use dmabridge::{Binding, BufferLocation, Completion, ComputePipeline, Engine, EngineOptions, GpuBuffer, SubmitOptions};
use dmabridge_interop::dmabuf::{fd_count, send_buffer_with_fence, socketpair, SystemMemory};
use dmabridge_interop::sync::SyncMethod;
use dmabridge_interop::{format_info, Fourcc};
use serde_json::{json, Value};

use crate::error::{DemoError, Ending};
use crate::stats::Percentiles;

use super::config::{DemoConfig, Mode, DEMO_FORMATS, FRAME_TIMEOUT};
use super::control::{recv_msg, send_msg, ConsumerReport, Peer, ToConsumer, ToProducer};
use super::copy_path::{nv12_checksum, CopyPath, CopyTools};
use super::negotiation::{participant_from_wire, plan_mode, producer_participant, Plan};
use super::pool::{Pool, Slot};
use super::shaders::{dispatch, pattern_push, read_u32, PATTERN_NV12_SPV, PATTERN_SPV};
use super::transfer::{CpuSpan, ProducerShare, TransferTiming};

/// The result of one mode, for summary.json and the table.
#[derive(Debug, Clone)]
pub struct ModeResult {
    pub mode: Mode,
    pub json: Value,
    /// End to end: the producer's frame (render, conversion, send) and the consumer's
    /// (receive, import, composite, verify, release), µs.
    pub frame: Percentiles,
    /// The transfer alone: handoff, import and copy, without the rendering and the
    /// verification ([`super::transfer`]).
    pub transfer: TransferTiming,
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
    let session = Session { engine, config, pipeline: &pipeline, tools: &tools, sum: &sum, buffers, control, peer, frame_bytes };
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
        let r = session.run_mode(&plan)?;
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

/// What every mode of one run shares: the device, the shaders, and the sockets to the
/// consumer.
struct Session<'a> {
    engine: &'a Engine,
    config: &'a DemoConfig,
    /// The pattern shader of the run's format.
    pipeline: &'a ComputePipeline,
    tools: &'a CopyTools<'a>,
    /// Where the pattern shader sums its checksum.
    sum: &'a GpuBuffer,
    buffers: BorrowedFd<'a>,
    control: BorrowedFd<'a>,
    peer: &'a Peer,
    frame_bytes: u64,
}

impl Session<'_> {
    fn run_mode(&self, plan: &Plan) -> Result<ModeResult, DemoError> {
        let Session { engine, config, pipeline, tools, sum, buffers, control, peer, frame_bytes } = *self;
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
        let recorder = FrameRecorder {
            engine,
            pipeline,
            sum,
            render: render.as_ref(),
            plan,
            size: (w, h),
            families: (engine.queue_family(), engine.foreign_queue_family()),
        };
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
                    recorder.record(cmd, until, slot, index, corrupt)?;
                    sum.track(until);
                    slot.alias.track(until);
                    if let Some(r) = &render {
                        r.track(until);
                    }
                    Ok::<(), DemoError>(())
                })?;
                let send;
                if sync_file {
                    // The descriptor leaves at once with its acquire fence (none when the work
                    // was already done at export: vkGetSemaphoreFdKHR's -1).
                    let acquire = submitted.take_sync_file();
                    let sending = CpuSpan::start();
                    send_buffer_with_fence(buffers, slot_index as u64, &slot.dmabuf, acquire.as_ref()).map_err(|e| peer.handoff_error(e))?;
                    send = sending.elapsed();
                    acquire_fences += u64::from(acquire.is_some());
                    // Only the checksum that the consumer verifies needs the CPU to wait; the
                    // release fence may hold the frame back for up to the peer timeout.
                    submitted.wait(FRAME_TIMEOUT.saturating_add(peer.timeout)).map_err(|e| peer.submit_error(e))?;
                } else {
                    // cpu-wait: the frame is written before its descriptor leaves.
                    submitted.wait(FRAME_TIMEOUT)?;
                    let sending = CpuSpan::start();
                    send_buffer_with_fence(buffers, slot_index as u64, &slot.dmabuf, None).map_err(|e| peer.handoff_error(e))?;
                    send = sending.elapsed();
                }
                slot.used = true;
                let checksum = match render.as_ref().and_then(|r| r.readback()) {
                    Some(readback) => nv12_checksum(readback.bytes()?, (w, h)),
                    None => read_u32(sum, 0)?,
                };
                pool.held.insert(slot_index);
                pool.max_held = pool.max_held.max(pool.held.len());
                // The frame's submission is complete: its copy's timestamps are there.
                let copy = render.as_ref().map(CopyPath::copy_time).transpose()?.flatten();
                let transfer = ProducerShare::new(send, copy);
                send_msg(control, peer, &ToConsumer::Frame { index, id: slot_index as u64, checksum, transfer })?;
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
        let (report, consumer_timing, transfer): (ConsumerReport, Percentiles, TransferTiming) = match recv_msg::<ToProducer>(control, peer)? {
            ToProducer::ModeDone { report, timing, transfer } => (report, timing, transfer),
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
            "transfer_us": transfer,
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
        Ok(ModeResult { mode: plan.mode, json, frame, transfer, gbps, mismatches: report.mismatches.len() })
    }
}

/// What records a mode's frames: the shaders and buffers every frame uses.
struct FrameRecorder<'a> {
    engine: &'a Engine,
    pipeline: &'a ComputePipeline,
    sum: &'a GpuBuffer,
    /// Copy mode's render path; zero-copy renders into the frame itself.
    render: Option<&'a CopyPath<'a>>,
    plan: &'a Plan,
    size: (u32, u32),
    /// This device's queue family and the foreign one the frame passes to.
    families: (u32, u32),
}

impl FrameRecorder<'_> {
    /// Records frame `index` into `slot` (damaged after its checksum when `corrupt`).
    fn record(&self, cmd: vk::CommandBuffer, until: Completion, slot: &Slot, index: u32, corrupt: bool) -> Result<(), DemoError> {
        let FrameRecorder { engine, pipeline, sum, render, plan, size: (w, h), families: (ours, foreign) } = *self;
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
}
