//! `dmabridge bench`: the cost per frame of each way a frame reaches a consumer's shader,
//! with the machine's memcpy bandwidth measured in the same run as the baseline.
//!
//! Every path runs as an embedding host's frame loop would: the host owns its command
//! buffers and submits them itself, with at most [`FRAMES_IN_FLIGHT`] frames in flight
//! (it waits for a command buffer's previous frame only when it comes round again), and a
//! frame's time is the loop's total time over its frames. A frame's time is what it costs to
//! make a producer's frame ready for the host's shaders; the host's own use of it (its draw)
//! is the same for every path and not part of it. Per path (the frame source is a linear
//! dma-buf: an exported image where the device exports, else a memfd):
//! - **zero-copy**: handoff (descriptor + fds over a Unix socket and back into a
//!   [`DmaBuf`]), the cached import ([`ImportCache`], a hit after the first frame), the
//!   acquire and release recorded into the host's command buffer, and the host's submit.
//!   Only where the import is explicit: without the modifier extension, or for NV12 on
//!   lavapipe (single-plane modifiers only), there is no zero-copy import and no entry.
//! - **copy-gpu**: the same handoff, a cached buffer import of the fd, then a GPU copy
//!   (`vkCmdCopyBufferToImage`, one region per plane) into a device-local image and the
//!   barrier to the host's sampling, in the host's command buffer, and its submit.
//! - **copy-cpu**: the same handoff, then the CPU reads the frame from the fd into a
//!   host-visible staging buffer (the classic upload, `pread`), which the GPU copies into the
//!   image before the barrier.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::time::Instant;

use dmabridge::ash::vk;
use dmabridge::resources::image::buffer_barrier;
use dmabridge::{
    BufferLocation, Completion, DeviceImage, Engine, ExportRequest, ExportedImage, GpuBuffer, HostTimeline, ImageAccess, ImportCache,
    ImportPath, ImportedBuffer, SubmitOptions, VkError,
};
use dmabridge_interop::dmabuf::{recv, send_buffer, socketpair, BufferIdentity, DmaBuf, PlaneDesc, Received};
use dmabridge_interop::negotiate::{negotiate_with, Member, NegotiateOptions};
use dmabridge_interop::tiling::{FrameConversion, Step};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{format_info, Fourcc, Layout, Modifier, TileLayout};
use serde::{Deserialize, Serialize};

use super::cpu_peers;
use super::gst_baseline::{self, gst_format, GstCase};
use super::{DemoError, Mode, FRAME_TIMEOUT};

/// Frames a benchmark loop keeps in flight, as a host engine's frame loop would.
pub const FRAMES_IN_FLIGHT: usize = 3;

/// The sizes measured; `--quick` drops the last.
pub const SIZES: [(u32, u32); 4] = [(1280, 720), (1920, 1080), (3840, 2160), (7680, 4320)];
pub const PATHS: [&str; 3] = ["zero-copy", "copy-gpu", "copy-cpu"];
pub const FORMATS: [Fourcc; 2] = [Fourcc::ARGB8888, Fourcc::NV12];

/// One measured path (a contract: field names and values as the issue gives them). Read
/// back by the report and `bench --compare` through the same type.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathResult {
    /// One of [`PATHS`].
    pub path: String,
    pub format: String,
    pub width: u32,
    pub height: u32,
    pub us_per_frame: f64,
    pub gbps: f64,
    /// The batches' interquartile range relative to their median (absent from early runs).
    #[serde(default)]
    pub spread: f64,
}

/// One measured frame conversion, on the path the cost model chose.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConvertResult {
    /// The input layout (`linear` for a plain colour conversion).
    pub layout: String,
    /// The input format.
    pub format: String,
    /// The output format (the input's for a detile).
    pub to_format: String,
    #[serde(default)]
    pub width: u32,
    #[serde(default)]
    pub height: u32,
    /// Output bytes per second / 1e9, bytes in and out of host memory (what a caller of
    /// `Converter::convert_frame` gets).
    pub gbps: f64,
    /// Where it ran: `cpu`, `gpu` or `copy-commands` (the cost model's choice).
    pub path: dmabridge::ConvertPath,
    /// Every candidate path's GB/s, as the cost model measured them.
    #[serde(default)]
    pub candidates: Vec<dmabridge::Measured>,
    /// GStreamer `videoconvert` on the same frames in this run (output GB/s), when it is
    /// installed and knows the layout.
    pub gstreamer_gbps: Option<f64>,
    /// `gbps / gstreamer_gbps`.
    pub vs_gstreamer: Option<f64>,
    /// The repetitions' interquartile range relative to their median.
    #[serde(default)]
    pub spread: f64,
    /// Threads the conversion ran on: the CPU path's workers (0 on a GPU path).
    #[serde(default)]
    pub threads: u32,
    /// The same CPU path on one thread, on the same frames in this run (output GB/s):
    /// what one core of dmabridge does beside one core of a peer. `None` on a GPU path.
    #[serde(default)]
    pub gbps_one_thread: Option<f64>,
    /// The CPU libraries that do the same conversion, on the same frames in this run
    /// ([`super::cpu_peers`]).
    #[serde(default)]
    pub peers: Vec<PeerResult>,
    /// For a fused tiled -> RGB conversion on the CPU path: it and dmabridge's linear
    /// conversion of the same formats, taking turns ([`fused_beside_linear`]).
    #[serde(default)]
    pub beside_linear: Option<BesideLinear>,
}

/// A fused tiled -> RGB conversion and the linear conversion of the same formats (NV12 ->
/// XR24), both on dmabridge's CPU path, measured in one loop that takes turns: each round
/// times the fused and the linear conversion on the CPU path's threads, then each on one
/// thread, every side after `TURN_WARMUPS` untimed calls. Measured apart, the two saw
/// different machines: the linear conversion on two threads read 24.4 GB/s in one run and
/// 43.3 in the next, and the ratio with it (0.68-1.16 over eight runs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BesideLinear {
    /// The CPU path's threads, which the first pair ran on.
    pub threads: u32,
    /// Output GB/s (medians) on `threads` threads.
    pub fused_gbps: f64,
    pub linear_gbps: f64,
    /// Output GB/s (medians) on one thread each.
    pub fused_gbps_one_thread: f64,
    pub linear_gbps_one_thread: f64,
}

/// One CPU library's figure beside a conversion.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerResult {
    /// What ran: `libyuv NV12ToARGBMatrix (BT.709)`.
    pub name: String,
    /// Threads it ran on (1: the libraries are called single-threaded).
    pub threads: u32,
    /// Output GB/s; `None` when it was not measured (`missing` says why).
    pub gbps: Option<f64>,
    pub missing: Option<String>,
    /// dmabridge's GB/s over the peer's.
    pub ratio_total: Option<f64>,
    /// dmabridge on one thread ([`ConvertResult::gbps_one_thread`]) over the peer, which
    /// runs on one thread too (dmabridge's CPU path only).
    pub ratio_per_thread: Option<f64>,
}

/// The whole report; serialises to exactly the contract's JSON, and reads it back
/// ([`super::html_report::read_report`]; what early runs lacked defaults).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub device: String,
    /// The machine: device, driver, CPU, kernel.
    #[serde(default)]
    pub system: super::html_report::SystemInfo,
    pub memcpy_gbps: f64,
    /// The memcpy samples' interquartile range relative to their median.
    #[serde(default)]
    pub memcpy_spread: f64,
    #[serde(default)]
    pub results: Vec<PathResult>,
    #[serde(default)]
    pub convert: Vec<ConvertResult>,
    #[serde(default)]
    pub negotiate_us: f64,
    #[serde(default)]
    pub handoff_us: f64,
    /// Why entries are missing (not part of the JSON contract; printed by the CLI).
    #[serde(skip)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    pub quick: bool,
}

impl BenchOptions {
    pub fn sizes(&self) -> &'static [(u32, u32)] {
        if self.quick {
            &SIZES[..3]
        } else {
            &SIZES
        }
    }

    fn reps(&self, bytes: u64) -> usize {
        let base = if self.quick { 5 } else { 20 };
        // Fewer repetitions of the 8K frames, which take long on a CPU device.
        if bytes > 64 << 20 {
            base / 2
        } else {
            base
        }
    }

    /// Rounds of the loops where sides take turns (dmabridge on one thread and the peers;
    /// the fused and the linear conversion): their medians are the ratios' two sides. With
    /// eight, per thread ÷ libyuv `NV12ToARGBMatrix` read 0.87-1.17 over twelve runs of one
    /// binary (2026-11-26). Sixteen halve the variance of each side's median; the whole run
    /// took as long (82-85 s against 82-86 s, two runs each, 2026-11-27).
    fn turns(&self) -> usize {
        if self.quick {
            3
        } else {
            16
        }
    }

    /// The number of progress steps [`run`] reports.
    pub fn steps(&self) -> u64 {
        (self.sizes().len() * PATHS.len() * FORMATS.len() + conversions(16, 16).len()) as u64 + 3
    }
}

/// Output GB/s of `run`, `bytes` bytes a call: `warmups` untimed calls (at least one), then
/// `reps` timed ones (at least one), a sample each. The first error ends it.
pub(super) fn gbps_samples<E>(bytes: u64, (warmups, reps): (usize, usize), mut run: impl FnMut() -> Result<(), E>) -> Result<Vec<f64>, E> {
    for _ in 0..warmups.max(1) {
        run()?;
    }
    (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            run()?;
            Ok(bytes as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9)
        })
        .collect()
}

/// Median of a sample.
pub(super) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The noise of a sample: its interquartile range relative to its median (0 for fewer than
/// two samples). What `--compare` widens its band by.
fn spread(v: &mut [f64]) -> f64 {
    let m = median(v);
    if v.len() < 2 || m <= 0.0 {
        return 0.0;
    }
    let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
    (q(0.75) - q(0.25)) / m
}

/// memcpy bandwidth: a 4K AR24 frame's worth of bytes, copied several times, GB/s of bytes copied.
pub fn memcpy_gbps(quick: bool) -> (f64, f64) {
    let len = 3840 * 2160 * 4;
    let src = vec![0x5au8; len];
    let mut dst = vec![0u8; len];
    let copy = || -> Result<(), std::convert::Infallible> {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&dst);
        Ok(())
    };
    let mut samples = gbps_samples(len as u64, (1, if quick { 5 } else { 15 }), copy).unwrap_or_else(|e| match e {});
    (median(&mut samples), spread(&mut samples))
}

/// A frame source: a linear dma-buf of `fourcc` (exported where the device can, else a memfd).
pub struct Source {
    _exported: Option<ExportedImage>,
    pub buf: DmaBuf,
    pub bytes: u64,
}

impl Source {
    pub fn new(engine: &Engine, fourcc: Fourcc, w: u32, h: u32, export: bool) -> Result<Source, DemoError> {
        let info = format_info(fourcc).ok_or_else(|| DemoError::Unavailable(format!("{fourcc} has no plane table")))?;
        if export && info.plane_count() == 1 {
            let req = ExportRequest::new(fourcc, w, h, vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)
                .with_acceptable([Layout::Explicit(Modifier::LINEAR)]);
            if let Ok(img) = engine.export_image(&req) {
                img.clear_and_release([0.2, 0.4, 0.6, 1.0], SubmitOptions::default())?.wait(FRAME_TIMEOUT)?;
                if let Some(d) = img.dmabuf() {
                    let buf = d.try_clone()?;
                    let bytes = buf.planes().map(|p| p.stride * h as u64).sum();
                    return Ok(Source { _exported: Some(img), buf, bytes });
                }
            }
        }
        // Planes packed one after the other in one memfd, tightly.
        let total = info.packed_size(w, h);
        let fd = dmabridge_interop::dmabuf::sealed_memfd_of_size("dmabridge-bench", total)?;
        let mut planes = Vec::new();
        let mut offset = 0;
        for i in 0..info.plane_count() {
            let stride = info.min_stride(i, w);
            planes.push(PlaneDesc { fd: fd.try_clone()?, offset, stride });
            offset += info.packed_plane_size(i, w, h);
        }
        drop(fd);
        let buf = DmaBuf::new(fourcc, Layout::Explicit(Modifier::LINEAR), w, h, planes)?;
        Ok(Source { _exported: None, buf, bytes: total })
    }
}

/// The host side of a benchmark loop: its own command pool and buffers, a
/// [`HostTimeline`], and its own submits on the engine's queue (under its lock).
struct HostLoop {
    engine: Engine,
    pool: vk::CommandPool,
    cmds: Vec<(vk::CommandBuffer, Option<Completion>)>,
    timeline: HostTimeline,
    frame: usize,
}

impl HostLoop {
    fn new(engine: &Engine) -> Result<HostLoop, DemoError> {
        let device = engine.device();
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(engine.queue_family())
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: the engine's queue family exists on its device.
        let pool = unsafe { device.create_command_pool(&info, None) }.map_err(|result| VkError { call: "vkCreateCommandPool", result })?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(FRAMES_IN_FLIGHT as u32);
        // SAFETY: the pool was just made on this device.
        let cmds = match unsafe { device.allocate_command_buffers(&alloc) } {
            Ok(c) => c,
            Err(result) => {
                // SAFETY: an unused pool of this device.
                unsafe { device.destroy_command_pool(pool, None) };
                return Err(VkError { call: "vkAllocateCommandBuffers", result }.into());
            }
        };
        let timeline = engine.host_timeline()?;
        Ok(HostLoop { engine: engine.clone(), pool, cmds: cmds.into_iter().map(|c| (c, None)).collect(), timeline, frame: 0 })
    }

    /// Waits, as a host's frame loop does, for the previous frame of the command buffer the
    /// next frame uses (and of whatever per-slot resources go with it).
    fn wait_next(&self) -> Result<(), DemoError> {
        if let (_, Some(p)) = self.cmds[self.frame % self.cmds.len()] {
            self.engine.wait(&[p], FRAME_TIMEOUT)?;
        }
        Ok(())
    }

    /// Records a frame with `record` into the next command buffer (after [`HostLoop::wait_next`])
    /// and submits it.
    fn frame(&mut self, record: impl FnOnce(vk::CommandBuffer, Completion) -> Result<(), DemoError>) -> Result<(), DemoError> {
        let device = self.engine.device();
        self.wait_next()?;
        let slot = self.frame % self.cmds.len();
        self.frame += 1;
        let cmd = self.cmds[slot].0;
        let point = self.timeline.next();
        // SAFETY: the command buffer's previous submission is complete (waited above); its
        // pool allows resetting single buffers (VUID-vkBeginCommandBuffer-commandBuffer-00050).
        unsafe { device.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT)) }
            .map_err(|result| VkError { call: "vkBeginCommandBuffer", result })?;
        let recorded = record(cmd, point);
        // SAFETY: recording state (VUID-vkEndCommandBuffer-commandBuffer-00059).
        let ended = unsafe { device.end_command_buffer(cmd) }.map_err(|result| VkError { call: "vkEndCommandBuffer", result });
        recorded?;
        ended?;
        let cmds = [cmd];
        let signals = [point.semaphore()];
        let values = [point.value()];
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
        let submit = vk::SubmitInfo::default().command_buffers(&cmds).signal_semaphores(&signals).push_next(&mut timeline);
        {
            let queue = self.engine.lock_queue();
            // SAFETY: the queue is held under the engine's lock (VUID-vkQueueSubmit-queue-parameter);
            // the host timeline's points are signalled in the order they were taken
            // (VUID-VkSubmitInfo-pSignalSemaphores-03242).
            unsafe { device.queue_submit(queue.queue(), &[submit], vk::Fence::null()) }.map_err(|result| VkError { call: "vkQueueSubmit", result })?;
        }
        self.cmds[slot].1 = Some(point);
        Ok(())
    }

    /// Waits for every frame submitted.
    fn finish(&self) -> Result<(), DemoError> {
        let points: Vec<Completion> = self.cmds.iter().filter_map(|(_, p)| *p).collect();
        self.engine.wait(&points, FRAME_TIMEOUT)?;
        Ok(())
    }
}

impl Drop for HostLoop {
    fn drop(&mut self) {
        let points: Vec<Completion> = self.cmds.iter().filter_map(|(_, p)| *p).collect();
        if let Err(e) = self.engine.wait(&points, FRAME_TIMEOUT) {
            tracing::error!(%e, "benchmark frames did not complete; leaking their command pool");
            return;
        }
        // SAFETY: every submission of the pool's command buffers is complete (waited above;
        // VUID-vkDestroyCommandPool-commandPool-00041).
        unsafe { self.engine.device().destroy_command_pool(self.pool, None) };
    }
}

/// Sends `buf` over `a` and receives it on `b`: one handoff.
fn handoff(a: &std::os::fd::OwnedFd, b: &std::os::fd::OwnedFd, buf: &DmaBuf) -> Result<DmaBuf, DemoError> {
    send_buffer(a, 0, buf)?;
    match recv(b)? {
        Received::Buffer { buf, .. } => Ok(buf),
        Received::Release { .. } => Err(DemoError::Protocol("a release where a buffer was expected".into())),
    }
}

/// Measures one path for one format and size; `Ok(None)` when the path does not exist here.
pub fn measure(engine: &Engine, path: &str, fourcc: Fourcc, w: u32, h: u32, opts: &BenchOptions) -> Result<Option<PathResult>, String> {
    measure_inner(engine, path, fourcc, w, h, opts).map_err(|e| e.to_string())
}

fn measure_inner(engine: &Engine, path: &str, fourcc: Fourcc, w: u32, h: u32, opts: &BenchOptions) -> Result<Option<PathResult>, DemoError> {
    let entry = dmabridge::device::vk_format::to_vk(fourcc).ok_or_else(|| DemoError::Unavailable(format!("{fourcc} has no Vulkan format")))?;
    let source = Source::new(engine, fourcc, w, h, path == "zero-copy")?;
    let (a, b) = socketpair()?;
    // A zero-copy frame costs the same at every size and little at any: fifty times the
    // frames, so that its batches are long enough to measure (10 ms or more each).
    let reps = if path == "zero-copy" { opts.reps(0) * 50 } else { opts.reps(source.bytes) };
    let device = engine.device();
    let (ours, foreign) = (engine.queue_family(), engine.foreign_queue_family());
    let mut host = HostLoop::new(engine)?;
    let mut batches = Vec::with_capacity(BATCHES);
    match path {
        "zero-copy" => {
            let mut cache = ImportCache::new(engine, 2);
            // One warm-up frame (the cache miss, the view), then the batches.
            for batch in 0..=BATCHES {
                let n = if batch == 0 { 1 } else { reps };
                let t = Instant::now();
                for _ in 0..n {
                    let got = handoff(&a, &b, &source.buf)?;
                    let image = cache.import(got, vk::ImageUsageFlags::SAMPLED)?;
                    if image.path() != ImportPath::Explicit {
                        return Ok(None);
                    }
                    host.frame(|cmd, until| {
                        // SAFETY: the host's command buffer, recording, submitted signalling `until`.
                        unsafe {
                            image.record_acquire(cmd, ImageAccess::SAMPLED_COMPUTE, until)?;
                            image.record_release(cmd, ImageAccess::SAMPLED_COMPUTE, until);
                        }
                        Ok(())
                    })?;
                }
                host.finish()?;
                if batch > 0 {
                    batches.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
                }
            }
        }
        "copy-gpu" | "copy-cpu" => {
            let target = DeviceImage::new(engine, entry.vk_format, (w, h), vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)?;
            let mut imports: HashMap<BufferIdentity, ImportedBuffer> = HashMap::new();
            // One staging buffer per frame in flight: the CPU writes one while the GPU reads another.
            let mut staging: Vec<GpuBuffer> = if path == "copy-cpu" {
                (0..FRAMES_IN_FLIGHT).map(|_| GpuBuffer::new(engine, source.bytes, BufferLocation::Upload)).collect::<Result<_, _>>()?
            } else {
                Vec::new()
            };
            let mut frame = 0usize;
            for batch in 0..=BATCHES {
                let n = if batch == 0 { 1 } else { reps };
                let t = Instant::now();
                for _ in 0..n {
                    let got = handoff(&a, &b, &source.buf)?;
                    let planes: Vec<PlaneLayout> = got.plane_layouts();
                    let regions = dmabridge::resources::transfer::plane_regions(fourcc, (w, h), &planes, source.bytes)?;
                    let slot = frame % FRAMES_IN_FLIGHT;
                    frame += 1;
                    let external = staging.is_empty();
                    let src_buffer = match staging.get_mut(slot) {
                        Some(st) => {
                            // The frame loop's own throttle: this slot's previous frame, which
                            // read this staging buffer.
                            host.wait_next()?;
                            cpu_upload(&got, st.bytes_mut()?)?;
                            st.buffer()
                        }
                        None => {
                            let id = got.identity();
                            if !imports.contains_key(&id) {
                                let info = format_info(fourcc).ok_or_else(|| DemoError::Unavailable(format!("{fourcc} has no plane table")))?;
                                let size = got.planes().enumerate().map(|(i, p)| p.offset + p.stride * info.plane_height(i, h) as u64).max().unwrap_or(0);
                                let fd = got.plane(0).map(|p| p.fd).ok_or_else(|| DemoError::Protocol("a frame without planes".into()))?;
                                imports.insert(id.clone(), ImportedBuffer::import(engine, fd, size, vk::BufferUsageFlags::TRANSFER_SRC)?);
                            }
                            imports.get(&id).map(|g| g.buffer()).ok_or_else(|| DemoError::Protocol("lost an import".into()))?
                        }
                    };
                    let acquire = buffer_barrier(src_buffer, vk::AccessFlags::empty(), vk::AccessFlags::TRANSFER_READ, foreign, ours);
                    let release = buffer_barrier(src_buffer, vk::AccessFlags::TRANSFER_READ, vk::AccessFlags::empty(), ours, foreign);
                    host.frame(|cmd, until| {
                        // SAFETY: the host's command buffer, recording, signalling `until`.
                        unsafe { target.record_transition(cmd, ImageAccess::TRANSFER_DST, true, until) };
                        // SAFETY: recording state; the regions lie inside the source (sized from
                        // the same planes) and the image (VUID-vkCmdCopyBufferToImage-pRegions-06218);
                        // the source is external memory when acquired (VUID-VkBufferMemoryBarrier-srcQueueFamilyIndex-04088).
                        unsafe {
                            if external {
                                device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &[], &[acquire], &[]);
                            }
                            device.cmd_copy_buffer_to_image(cmd, src_buffer, target.image(), vk::ImageLayout::TRANSFER_DST_OPTIMAL, &regions);
                            if external {
                                device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::BOTTOM_OF_PIPE, vk::DependencyFlags::empty(), &[], &[release], &[]);
                            }
                            target.record_transition(cmd, ImageAccess::SAMPLED_COMPUTE, false, until);
                        }
                        match staging.get(slot) {
                            Some(st) => st.track(until),
                            None => {
                                if let Some(i) = imports.get(&got.identity()) {
                                    i.track(until);
                                }
                            }
                        }
                        Ok(())
                    })?;
                }
                host.finish()?;
                if batch > 0 {
                    batches.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
                }
            }
        }
        other => return Err(DemoError::Unavailable(format!("unknown path {other}"))),
    }
    let us = median(&mut batches);
    let noise = spread(&mut batches);
    Ok(Some(PathResult {
        path: path.to_owned(),
        format: fourcc.trimmed(),
        width: w,
        height: h,
        us_per_frame: us,
        gbps: if us > 0.0 { source.bytes as f64 / us / 1e3 } else { 0.0 },
        spread: noise,
    }))
}

/// Batches of `reps` frames each path runs; a path's figure is the median batch's mean.
const BATCHES: usize = 5;

/// The CPU upload: each plane's rows read from its file with `pread` into the same place in `dst`.
fn cpu_upload(buf: &DmaBuf, dst: &mut [u8]) -> Result<(), DemoError> {
    let info = format_info(buf.fourcc()).ok_or_else(|| DemoError::Unavailable(format!("{} has no plane table", buf.fourcc())))?;
    for (i, p) in buf.planes().enumerate() {
        // Read, never mapped: a file can shrink.
        let end = p.offset.checked_add(p.stride * u64::from(info.plane_height(i, buf.height()))).ok_or(DemoError::Unavailable("plane too large".into()))?;
        let range = usize::try_from(p.offset).ok().zip(usize::try_from(end).ok()).ok_or(DemoError::Unavailable("plane too large".into()))?;
        let dst = dst.get_mut(range.0..range.1).ok_or(DemoError::Unavailable("the staging buffer is smaller than the frame".into()))?;
        dmabridge_interop::dmabuf::read_exact_at(p.fd, p.offset, dst).map_err(|e| DemoError::Protocol(format!("plane {i}: {e}")))?;
    }
    Ok(())
}

/// Mean µs of a negotiation between this device's demo producer and consumer.
pub fn negotiate_us(engine: &Engine, reps: usize) -> Result<f64, DemoError> {
    let producer = super::producer::producer_participant(engine, Mode::ZeroCopy, Fourcc::ARGB8888)?;
    let consumer = dmabridge_interop::negotiate::Participant::new("consumer", super::consumer::consumer_formats(engine)?);
    let members = [Member::from(producer), Member::from(consumer)];
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(negotiate_with(std::hint::black_box(&members), NegotiateOptions::default()))
            .map_err(|e| DemoError::Protocol(e.to_string()))?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / reps.max(1) as f64)
}

/// Mean µs of one descriptor handoff (send + receive + validation, fds closed after).
pub fn handoff_us(reps: usize) -> Result<f64, DemoError> {
    let fd = dmabridge_interop::dmabuf::sealed_memfd_of_size("dmabridge-bench", 1280 * 720 * 4)?;
    let buf = DmaBuf::new(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), 1280, 720, vec![PlaneDesc { fd, offset: 0, stride: 1280 * 4 }])?;
    let (a, b) = socketpair()?;
    let t = Instant::now();
    for _ in 0..reps {
        drop(handoff(&a, &b, &buf)?);
    }
    let _ = b.as_fd();
    Ok(t.elapsed().as_secs_f64() * 1e6 / reps.max(1) as f64)
}

/// The decoder layouts GStreamer also knows (seed 000's "well known tiled formats").
pub const CONVERT_LAYOUTS: [TileLayout; 5] =
    [TileLayout::Samsung64x32, TileLayout::Allwinner32x32, TileLayout::Nv12_4L4, TileLayout::Nv12_16L32S, TileLayout::Nv12_8L128];

/// Every frame conversion the bench measures at 4K: the decoder layouts' detiles, NV12 ->
/// XR24 (GStreamer's BGRx), each decoder layout's fused tiled NV12 -> XR24 (what a display
/// fed by a decoder needs), and XR24 -> NV12 (what an encoder fed by a renderer needs).
pub fn conversions(w: u32, h: u32) -> Vec<FrameConversion> {
    let mut out: Vec<FrameConversion> = CONVERT_LAYOUTS
        .iter()
        .map(|&l| FrameConversion::new((l, Fourcc::NV12), (TileLayout::Linear, Fourcc::NV12), w, h))
        .collect();
    out.push(FrameConversion::new((TileLayout::Linear, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), w, h));
    out.extend(CONVERT_LAYOUTS.iter().map(|&l| FrameConversion::new((l, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), w, h)));
    out.push(FrameConversion::new((TileLayout::Linear, Fourcc::XRGB8888), (TileLayout::Linear, Fourcc::NV12), w, h));
    out.push(FrameConversion::new((TileLayout::Linear, Fourcc::P010), (TileLayout::Linear, Fourcc::ARGB2101010), w, h));
    out
}

/// The GStreamer case of a conversion, if GStreamer's `videoconvert` does the same.
fn gst_case(c: &FrameConversion) -> Option<GstCase> {
    match (c.from_layout, c.to) {
        (l, t) if t == Fourcc::NV12 && gst_format(l).is_some() => Some(GstCase::Detile(l)),
        (l, t) if t == Fourcc::XRGB8888 && c.from == Fourcc::NV12 && (l == TileLayout::Linear || gst_format(l).is_some()) => Some(GstCase::Nv12ToBgrx(l)),
        (TileLayout::Linear, t) if t == Fourcc::NV12 && c.from == Fourcc::XRGB8888 => Some(GstCase::BgrxToNv12),
        (TileLayout::Linear, t) if t == Fourcc::ARGB2101010 && c.from == Fourcc::P010 => Some(GstCase::P010ToBgr10a2),
        _ => None,
    }
}

/// A frame's bytes from a page boundary on, as a dma-buf's mapping (what decoders, GPUs and
/// cameras hand over) starts: every conversion and every peer reads and writes these. A
/// `Vec`'s bytes start wherever the allocator put them (16 bytes past a page for large
/// ones), which splits rows over cache lines: dmabridge's streamed RGB rows then measured
/// 0.92-0.96x libyuv per thread, against 1.05-1.11x page-aligned.
pub struct PageFrame {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl PageFrame {
    const PAGE: usize = 4096;

    /// `len` zero bytes.
    pub fn new(len: usize) -> PageFrame {
        let buf = vec![0u8; len + Self::PAGE];
        let at = buf.as_ptr().align_offset(Self::PAGE).min(Self::PAGE);
        PageFrame { buf, at, len }
    }

    /// `len` bytes of content: a constant frame could flatter a branchy path.
    pub fn with_content(len: usize) -> PageFrame {
        let mut f = PageFrame::new(len);
        f.bytes_mut().iter_mut().enumerate().for_each(|(i, b)| *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8);
        f
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.at..self.at + self.len]
    }
}

/// Output GB/s of `c` on the path the engine's cost model picks (measuring the candidates
/// the first time), into a reused output frame, from a frame in memory (both
/// [`PageFrame`]s): the median of `reps` runs after one warm-up; and the input frame.
pub fn convert_gbps(conv: &dmabridge::Converter, c: &FrameConversion, reps: usize) -> Result<(f64, f64, dmabridge::Choice, PageFrame), dmabridge::ConvertError> {
    let choice = conv.choose(c, None)?;
    let (in_size, out_size) = c.sizes()?;
    let input = PageFrame::with_content(in_size as usize);
    let mut out = PageFrame::new(out_size as usize);
    let mut samples = gbps_samples(out_size, (1, reps), || conv.convert_frame_into(c, choice.path, input.bytes(), out.bytes_mut()))?;
    Ok((median(&mut samples), spread(&mut samples), choice, input))
}

/// Output GB/s of `c` on the CPU path on `threads` threads, from `input` into `out` (reused,
/// so that no sample pays for fresh pages): the median of `reps` runs after `warmups`.
///
/// A frame loop writes a pool of frames in turn. One reused 4K RGB frame (33 MB) partly
/// stays in this machine's 32 MB L3, which helps ordinary stores (libyuv's) and not
/// non-temporal ones (dmabridge's). Into one frame, 32-byte stores wrote 30-33 GB/s and
/// non-temporal ones 28; into four in turn, 20-23 and 26 (one thread, 2026-11-26, two runs
/// taking turns). Left so: against libyuv per thread, this is the harder case for dmabridge.
fn cpu_gbps(c: &FrameConversion, input: &[u8], out: &mut [u8], threads: usize, runs: (usize, usize)) -> Result<f64, dmabridge_interop::tiling::FrameConversionError> {
    let out_size = c.sizes()?.1;
    Ok(median(&mut gbps_samples(out_size, runs, || c.run_cpu_into(input, out, threads))?))
}

/// Untimed calls before each timed one when dmabridge on one thread and the one-thread
/// peers take turns. A side timed right after another side ran measures slow for a few
/// calls, whichever side it follows: with one untimed call, dmabridge measured 14.6-15.8 GB/s
/// (after swscale) against 22.7-23.3 with five, and libyuv `NV12ToARGBMatrix` 16.2-16.5
/// against 20.1 (4K NV12 -> XR24 in the bench's rotation, three runs each, 2026-11-26). Why
/// it lasts several calls (each writes the whole 33 MB frame) is not known; every side gets
/// the same number.
const TURN_WARMUPS: usize = 5;

/// Whether `c` is one fused step, detile and colour in one pass (tiled NV12/P010 -> linear
/// RGB), as the conversion's own plan says.
fn fused(c: &FrameConversion) -> bool {
    matches!(c.steps().as_deref(), Ok([Step::YuvToRgb { layout, .. }]) if *layout != TileLayout::Linear)
}

/// [`BesideLinear`] for the fused conversion `c` (tiled NV12 -> RGB) from `input`, on
/// `threads` threads and on one, in `rounds` rounds; `None` where `c` is not a fused conversion.
pub fn fused_beside_linear(c: &FrameConversion, input: &[u8], threads: usize, rounds: usize) -> Result<Option<BesideLinear>, dmabridge_interop::tiling::FrameConversionError> {
    if !fused(c) {
        return Ok(None);
    }
    let linear = FrameConversion::new((TileLayout::Linear, c.from), (TileLayout::Linear, c.to), c.width, c.height);
    // The linear side reads the fused side's own frame (a tiled frame is at least as large
    // as the linear one, and any bytes are NV12 or P010) into the same output, so that the
    // ratio compares the loops alone: where the frames lie in memory lands on both sides.
    let linear_size = linear.sizes()?.0 as usize;
    let own;
    let linear_input = match input.get(..linear_size) {
        Some(bytes) => bytes,
        None => {
            own = PageFrame::with_content(linear_size);
            own.bytes()
        }
    };
    let mut out = PageFrame::new(c.sizes()?.1 as usize);
    let mut samples = [(); 4].map(|()| Vec::with_capacity(rounds));
    for _ in 0..rounds.max(1) {
        for (i, (t, conversion, from)) in [(threads, c, input), (threads, &linear, linear_input), (1, c, input), (1, &linear, linear_input)].into_iter().enumerate() {
            samples[i].push(cpu_gbps(conversion, from, out.bytes_mut(), t, (TURN_WARMUPS, 1))?);
        }
    }
    let [fused, lin, fused_one, lin_one] = samples.map(|mut v| median(&mut v));
    Ok(Some(BesideLinear { threads: threads as u32, fused_gbps: fused, linear_gbps: lin, fused_gbps_one_thread: fused_one, linear_gbps_one_thread: lin_one }))
}

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
        system: super::html_report::SystemInfo::collect(engine),
        memcpy_gbps: memcpy,
        memcpy_spread,
        results,
        convert,
        negotiate_us: negotiate,
        handoff_us: handoff,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a tiled YUV -> RGB conversion is paired with the linear one, and both sides are
    /// measured (a small frame: the figures' size is not the point here).
    #[test]
    fn fused_conversions_are_measured_beside_the_linear_one() {
        let conv = |from: TileLayout, to: Fourcc| FrameConversion::new((from, Fourcc::NV12), (TileLayout::Linear, to), 256, 128);
        for (c, paired) in [(conv(TileLayout::Nv12_8L128, Fourcc::XRGB8888), true), (conv(TileLayout::Linear, Fourcc::XRGB8888), false), (conv(TileLayout::Samsung64x32, Fourcc::NV12), false)] {
            let input = PageFrame::with_content(c.sizes().unwrap().0 as usize);
            let got = fused_beside_linear(&c, input.bytes(), 2, 2).unwrap();
            assert_eq!(got.is_some(), paired, "{c}");
            if let Some(b) = got {
                assert_eq!(b.threads, 2);
                assert!([b.fused_gbps, b.linear_gbps, b.fused_gbps_one_thread, b.linear_gbps_one_thread].iter().all(|g| g.is_finite() && *g > 0.0), "{b:?}");
            }
        }
    }
}
