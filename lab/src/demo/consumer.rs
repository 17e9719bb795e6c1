//! The demo's consumer: imports each frame through the import cache, composites it with a
//! compute shader that samples it, verifies the checksum and hands the buffer back.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dmabridge::ash::vk;
use dmabridge::resources::image::buffer_barrier;
use dmabridge::{
    Binding, BufferLocation, ComputePipeline, Engine, EngineOptions, GpuBuffer, ImageAccess, ImportCache, ImportedImage, SampledView, Sampler,
    SubmitOptions, Submission, YcbcrOutput,
};
use dmabridge_interop::dmabuf::{fd_count, recv_fenced, send_release_with_fence, DmaBuf, FencedReceived};
use dmabridge_interop::sync::{SyncFile, SyncMethod};
use dmabridge_interop::Fourcc;

use crate::error::DemoError;
use crate::stats::Percentiles;

use super::config::{Mode, DEMO_FORMATS, FRAME_TIMEOUT};
use super::contact_sheet::{write_contact_sheet, SheetRow, Thumb};
use super::control::{recv_msg, send_msg, ConsumerReport, Mismatch, Peer, ToConsumer, ToProducer, WireParticipant, MAX_TEXT};
use super::gpu_timer::GpuTimer;
use super::negotiation::{consumer_formats, wire_formats, CONSUMER_MIN_BUFFERS};
use super::shaders::{dispatch, read_u32, COMPOSITE_SPV};
use super::transfer::{CpuSpan, FrameTransfer, ProducerShare, TransferTiming};

const THUMBS_PER_MODE: usize = 6;

/// Runs the consumer process over the inherited sockets. Failures are reported to the
/// producer on the control socket before they are returned.
pub fn run(buffers: OwnedFd, control: OwnedFd, validation: bool, peer_timeout: std::time::Duration) -> Result<(), DemoError> {
    let peer = Peer::parent("producer", peer_timeout);
    peer.apply(&buffers)?;
    peer.apply(&control)?;
    let result = serve(buffers.as_fd(), control.as_fd(), validation, &peer);
    if let Err(e) = &result {
        let mut error = e.to_string();
        error.truncate(MAX_TEXT);
        let _ = send_msg(control.as_fd(), &peer, &ToProducer::Failed { error });
    }
    result
}

fn serve(buffers: BorrowedFd<'_>, control: BorrowedFd<'_>, validation: bool, peer: &Peer) -> Result<(), DemoError> {
    // Counted across the device's whole life: the driver's own threads open and close files
    // while a device lives (Mesa writes its shader cache from a thread of its own), so a
    // count taken with the device open can catch one of them mid-write.
    let fds_before = fd_count()?;
    let sheet = composite_modes(buffers, control, validation, peer)?;
    let fds_after = fd_count()?;
    send_msg(
        control,
        peer,
        &ToProducer::Final { leaked_fds: fds_after as i64 - fds_before as i64, fds_before, fds_after, contact_sheet: sheet },
    )?;
    Ok(())
}

/// Opens the device, composites every mode the producer starts and writes the contact
/// sheet; the device is gone when it returns.
fn composite_modes(buffers: BorrowedFd<'_>, control: BorrowedFd<'_>, validation: bool, peer: &Peer) -> Result<Option<String>, DemoError> {
    let engine = Engine::new(&EngineOptions { validation, ..EngineOptions::from_env() })?;
    let formats = consumer_formats(&engine)?;
    send_msg(
        control,
        peer,
        &ToProducer::Caps {
            participant: WireParticipant {
                name: "consumer".into(),
                formats: wire_formats(&formats),
                min_buffers: CONSUMER_MIN_BUFFERS,
                read_only: true,
                device: engine.info().name.clone(),
                modifiers_extension: engine.has_modifiers(),
                sync: engine.sync_methods().iter().collect(),
            },
        },
    )?;
    let mut thumbs: Vec<SheetRow> = Vec::new();
    let out_dir = {
        let sum = GpuBuffer::new(&engine, 8, BufferLocation::Readback)?;
        let timer = GpuTimer::new(&engine)?;
        loop {
            match recv_msg::<ToConsumer>(control, peer)? {
                ToConsumer::Start { mode, fourcc, width, height, frames, pool, sample_every, sync } => {
                    if sync != SyncMethod::CpuWait && !engine.sync_methods().contains(sync) {
                        return Err(DemoError::Protocol(format!("the producer synchronises by {sync}, which this device cannot")));
                    }
                    let Some(fourcc) = DEMO_FORMATS.into_iter().find(|f| f.trimmed() == fourcc) else {
                        return Err(DemoError::Protocol(format!("the producer sends {fourcc}; this consumer composites AR24 or NV12")));
                    };
                    let nv12 = fourcc == Fourcc::NV12;
                    let format = dmabridge::device::vk_format::to_vk(fourcc).map(|e| e.vk_format).ok_or_else(|| DemoError::Unavailable(format!("{fourcc} has no Vulkan format")))?;
                    // NV12: the conversion reconstructs the planes only (exact values for the
                    // checksum); the shader applies the BT.709 matrix for the picture.
                    let sampler = Sampler::new(&engine, format, nv12, YcbcrOutput::Raw)?;
                    let composite = ComputePipeline::new(
                        &engine,
                        COMPOSITE_SPV,
                        &[Binding::Sampler(sampler.sampler()), Binding::StorageBuffer, Binding::StorageBuffer],
                        28,
                        64,
                    )?;
                    let ctx = ModeCtx { engine: &engine, sampler: &sampler, composite: &composite, timer: timer.as_ref(), buffers, control, peer, yuv: nv12, sync };
                    let (report, transfer, mode_thumbs) = ctx.run(&sum, mode, (width, height), frames, pool, sample_every)?;
                    drop(composite);
                    drop(sampler);
                    let timing = Percentiles::of(&report.frame_us);
                    let label = format!(
                        "{} {} {width}x{height}: transfer {:.0} µs/frame (handoff {:.0}, import {:.0}, copy {:.0}), consumer {:.0} µs/frame, {}/{frames} verified",
                        mode.name(),
                        fourcc.trimmed(),
                        transfer.total.median,
                        transfer.handoff.median,
                        transfer.import.median,
                        transfer.copy.median,
                        timing.median,
                        report.verified
                    );
                    thumbs.push(SheetRow { mode, label, thumbs: mode_thumbs });
                    send_msg(control, peer, &ToProducer::ModeDone { report, timing, transfer })?;
                }
                ToConsumer::Bye { out_dir } => break out_dir,
                other => return Err(DemoError::Protocol(format!("unexpected {other:?}"))),
            }
        }
    };
    let sheet = if thumbs.iter().any(|r| !r.thumbs.is_empty()) {
        let path = PathBuf::from(&out_dir).join("contact_sheet.png");
        write_contact_sheet(&path, &thumbs)?;
        Some(path.to_string_lossy().into_owned())
    } else {
        None
    };
    if let Some(log) = engine.validation() {
        let problems = log.problems();
        if !problems.is_empty() {
            return Err(DemoError::Protocol(format!(
                "consumer validation layer: {}",
                problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; ")
            )));
        }
    }
    Ok(sheet)
}

/// One frame as the producer hands it over: the buffer and its fence, then the frame's message.
pub struct IncomingFrame {
    /// The buffer's id in the producer's pool.
    pub id: u64,
    pub buf: DmaBuf,
    /// The producer's acquire fence (sync-file).
    pub acquire: Option<SyncFile>,
    pub index: u32,
    /// The checksum the consumer must find.
    pub checksum: u32,
    pub producer_share: ProducerShare,
    /// How long receiving the descriptor took, once it had arrived (the handoff's share).
    pub receive: Duration,
    /// When the frame's message was asked for: the consumer's time for the frame counts from here.
    pub started: Instant,
}

/// Receives frame `expected` of a mode synchronised by `sync` from a producer with a pool
/// of `pool` buffers, checking what the protocol promises: a buffer of the pool, a fence
/// only under sync-file, the frame's message for that buffer, frames in order. The demo's
/// consumers share it.
pub fn receive_frame(
    (buffers, control, peer): (BorrowedFd<'_>, BorrowedFd<'_>, &Peer),
    sync: SyncMethod,
    pool: u32,
    expected: u32,
) -> Result<IncomingFrame, DemoError> {
    // Waiting for the producer to render is not the handoff: only the receive of a
    // descriptor that has arrived is.
    peer.wait_readable(buffers)?;
    let receiving = CpuSpan::start();
    let received = recv_fenced(buffers).map_err(|e| peer.handoff_error(e))?;
    let receive = receiving.elapsed();
    let (id, buf, acquire) = match received {
        FencedReceived::Buffer { id, buf, acquire_fence } if id < u64::from(pool) => (id, buf, acquire_fence),
        FencedReceived::Buffer { id, .. } => return Err(DemoError::Protocol(format!("buffer {id} is not in the producer's pool of {pool}"))),
        FencedReceived::Release { id, .. } => return Err(DemoError::Protocol(format!("the producer released buffer {id}"))),
    };
    if acquire.is_some() && sync != SyncMethod::SyncFile {
        return Err(DemoError::Protocol(format!("buffer {id} came with a fence, but the mode synchronises by {sync}")));
    }
    let started = Instant::now();
    let (index, checksum, producer_share) = match recv_msg::<ToConsumer>(control, peer)? {
        ToConsumer::Frame { index, id: fid, checksum, transfer } if fid == id => (index, checksum, transfer),
        other => return Err(DemoError::Protocol(format!("expected frame info for buffer {id}, got {other:?}"))),
    };
    if index != expected {
        return Err(DemoError::Protocol(format!("frame {index} arrived where {expected} was due")));
    }
    Ok(IncomingFrame { id, buf, acquire, index, checksum, producer_share, receive, started })
}

/// Hands buffer `id` back to the producer once the work that reads it is submitted
/// (`wait` waits for that work): with sync-file at once, with the work's `release` fence
/// (none when it was already done), for the producer's GPU to wait for before it writes the
/// buffer again, then waits for the work, which the acquire fence may hold back for up to
/// the peer timeout; with cpu-wait once the work is done. The demo's consumers share it.
pub fn hand_back(
    (buffers, peer): (BorrowedFd<'_>, &Peer),
    sync: SyncMethod,
    id: u64,
    release: Option<SyncFile>,
    wait: impl FnOnce(Duration) -> Result<(), dmabridge::SubmitError>,
) -> Result<(), DemoError> {
    if sync == SyncMethod::SyncFile {
        send_release_with_fence(buffers, id, release.as_ref()).map_err(|e| peer.handoff_error(e))?;
        wait(FRAME_TIMEOUT.saturating_add(peer.timeout)).map_err(|e| peer.submit_error(e))
    } else {
        wait(FRAME_TIMEOUT)?;
        send_release_with_fence(buffers, id, None).map_err(|e| peer.handoff_error(e))
    }
}

/// One received frame, as the composite takes it.
struct Frame<'a> {
    image: &'a ImportedImage,
    /// Its view, through `set`.
    view: Option<&'a SampledView>,
    set: vk::DescriptorSet,
    index: u32,
    /// Whether the composite's picture is written out (a frame the contact sheet samples).
    write_output: bool,
    /// The producer's fence (sync-file): the frame is written once it signals.
    acquire: Option<SyncFile>,
}

struct ModeCtx<'a> {
    engine: &'a Engine,
    sampler: &'a Sampler,
    composite: &'a ComputePipeline,
    /// Times the acquire on the GPU, the import's share of the composite's submission.
    timer: Option<&'a GpuTimer>,
    buffers: BorrowedFd<'a>,
    control: BorrowedFd<'a>,
    peer: &'a Peer,
    yuv: bool,
    sync: SyncMethod,
}

impl ModeCtx<'_> {
    fn run(
        &self,
        sum: &GpuBuffer,
        mode: Mode,
        (w, h): (u32, u32),
        frames: u32,
        pool: u32,
        sample_every: u32,
    ) -> Result<(ConsumerReport, TransferTiming, Vec<Thumb>), DemoError> {
        let engine = self.engine;
        let out = GpuBuffer::new(engine, w as u64 * h as u64 * 4, BufferLocation::Readback)?;
        // Sized to the producer's pool, so a recycled buffer is always a hit.
        let mut cache = ImportCache::new(engine, pool as usize);
        let mut views: HashMap<vk::Image, (SampledView, vk::DescriptorSet)> = HashMap::new();
        let mut report = ConsumerReport::default();
        let mut thumbs = Vec::new();
        let mut transfers = Vec::with_capacity(frames as usize);
        // The GPU's parts of the transfer: the acquire here, and copy mode's copy there.
        let mut gpu_timed = self.timer.is_some();
        let result = (|| -> Result<(), DemoError> {
            for expected_index in 0..frames {
                let IncomingFrame { id, buf, acquire, index, checksum, producer_share, receive, started: t0 } =
                    receive_frame((self.buffers, self.control, self.peer), self.sync, pool, expected_index)?;
                report.max_held = report.max_held.max(1);
                let importing = CpuSpan::start();
                let image = cache.import(buf, vk::ImageUsageFlags::SAMPLED)?;
                let import = importing.elapsed();
                let set = match views.get(&image.image()) {
                    Some((_, set)) => *set,
                    None => {
                        // SAFETY: the cache keeps the image (created with SAMPLED usage and this
                        // format) alive while its view is in `views`: both go at the end of the mode.
                        let view = unsafe { self.sampler.view(image.image(), image.vk_format())? };
                        let set = self.composite.allocate_set()?;
                        // SAFETY: a fresh set; the view is of a SAMPLED image in
                        // SHADER_READ_ONLY_OPTIMAL when the set is used, and carries the
                        // sampler's conversion; the buffers have STORAGE_BUFFER usage and outlive the mode.
                        unsafe {
                            self.composite.write_image(set, 0, view.view());
                            self.composite.write_buffer(set, 1, out.buffer());
                            self.composite.write_buffer(set, 2, sum.buffer());
                        }
                        views.insert(image.image(), (view, set));
                        set
                    }
                };
                report.import_path = image.path().to_string();
                let sample = index % sample_every == 0 && thumbs.len() < THUMBS_PER_MODE;
                let view = views.get(&image.image()).map(|(v, _)| v);
                let frame = Frame { image: &image, view, set, index, write_output: sample, acquire };
                let (acquire_cpu, mut submitted) = self.composite_frame(frame, (sum, &out), (w, h))?;
                let release = if self.sync == SyncMethod::SyncFile { submitted.take_sync_file() } else { None };
                hand_back((self.buffers, self.peer), self.sync, id, release, |t| submitted.wait(t))?;
                // The composite is complete: the acquire's timestamps are there.
                let acquire_gpu = self.timer.map(GpuTimer::elapsed).transpose()?.unwrap_or_default();
                gpu_timed &= mode == Mode::ZeroCopy || producer_share.copy_ns.is_some();
                transfers.push(FrameTransfer::new(producer_share, receive, import + acquire_cpu + acquire_gpu));
                let got = read_u32(sum, 0)?;
                if got == checksum {
                    report.verified += 1;
                } else {
                    tracing::error!(frame = index, expected = checksum, got, "checksum mismatch");
                    report.mismatches.push(Mismatch { frame: index, expected: checksum, got });
                }
                if sample {
                    thumbs.push(Thumb::from_rgba(out.bytes()?, w, h, index, got == checksum));
                }
                if cache.stats().evictions != 0 {
                    // Views are keyed by image handle; an evicted import's handle may be reused.
                    return Err(DemoError::Protocol(format!("the producer uses more buffers than its pool of {pool}")));
                }
                report.frame_us.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            match recv_msg::<ToConsumer>(self.control, self.peer)? {
                ToConsumer::End => Ok(()),
                other => Err(DemoError::Protocol(format!("expected the end of {}, got {other:?}", mode.name()))),
            }
        })();
        drop(views);
        let stats = cache.stats();
        report.cache_hits = stats.hits;
        report.cache_misses = stats.misses;
        report.cache_evictions = stats.evictions;
        drop(cache);
        drop(out);
        result?;
        Ok((report, TransferTiming::of(&transfers, gpu_timed), thumbs))
    }

    /// Submits the composite of `frame` and the checksum's sum into `sum`, its picture into
    /// `out` where it is sampled for the contact sheet, after its acquire fence (sync-file).
    /// Under sync-file the submission also exports the release fence. Returns the acquire's
    /// recording time on the CPU (the buffer-copy import reads its files there) and the
    /// submission.
    fn composite_frame(&self, frame: Frame<'_>, (sum, out): (&GpuBuffer, &GpuBuffer), (w, h): (u32, u32)) -> Result<(Duration, Submission), DemoError> {
        let Frame { image, view, set, index, write_output, acquire } = frame;
        let engine = self.engine;
        let device = engine.device();
        let ignored = vk::QUEUE_FAMILY_IGNORED;
        let sum_ready =
            buffer_barrier(sum.buffer(), vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE, ignored, ignored);
        let stride = if write_output { w } else { 0 };
        let host = [
            buffer_barrier(sum.buffer(), vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::HOST_READ, ignored, ignored),
            buffer_barrier(out.buffer(), vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::HOST_READ, ignored, ignored),
        ];
        let options = SubmitOptions {
            wait_sync_files: acquire.into_iter().collect(),
            // A producer that never signals holds this frame back no longer than it may be
            // silent, and never the queue.
            fence_limit: self.peer.timeout,
            export_sync_file: self.sync == SyncMethod::SyncFile,
            ..SubmitOptions::default()
        };
        let (acquire_cpu, submitted) = engine.submit(options, |cmd, until| {
            let acquiring = CpuSpan::start();
            if let Some(t) = self.timer {
                // SAFETY: the engine's command buffer, recording, signalling `until`; the
                // last composite that used the timer is complete (each is waited for).
                unsafe { t.record_start(cmd, until) };
            }
            // SAFETY: the engine's command buffer, recording, signalling `until`; the frame is
            // written when the submission starts: it waits for the acquire fence (sync-file),
            // or the producer waited for its frame before sending it (cpu-wait).
            unsafe { image.record_acquire(cmd, ImageAccess::SAMPLED_COMPUTE, until) }?;
            if let Some(t) = self.timer {
                // SAFETY: as for its start, after it in the same command buffer.
                unsafe { t.record_stop(cmd) };
            }
            let acquire_cpu = acquiring.elapsed();
            // SAFETY: recording state; the sum buffer has TRANSFER_DST usage.
            unsafe {
                device.cmd_fill_buffer(cmd, sum.buffer(), 0, 8, 0);
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[sum_ready],
                    &[],
                );
            }
            dispatch(self.composite, cmd, set, &[w, h, stride, index, w, h, u32::from(self.yuv)], (w, h), until)?;
            // SAFETY: recording state; the barriers name buffers of this device.
            unsafe {
                device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[], &host, &[]);
            }
            // SAFETY: as for the acquire; the frame goes back to the producer.
            unsafe { image.record_release(cmd, ImageAccess::SAMPLED_COMPUTE, until) };
            sum.track(until);
            out.track(until);
            self.sampler.track(until);
            if let Some(v) = view {
                v.track(until);
            }
            Ok::<Duration, DemoError>(acquire_cpu)
        })?;
        Ok((acquire_cpu, submitted))
    }
}
