//! The per-frame paths `dmabridge bench` times (zero-copy, copy-gpu, copy-cpu: see
//! [`super`]), and the baselines beside them: memcpy, the demo's negotiation and one
//! descriptor handoff.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::time::Instant;

use dmabridge::ash::vk;
use dmabridge::resources::image::buffer_barrier;
use dmabridge::{BufferLocation, DeviceImage, Engine, ExportRequest, ExportedImage, GpuBuffer, ImageAccess, ImportCache, ImportPath, ImportedBuffer, SubmitOptions};
use dmabridge_interop::dmabuf::{recv, send_buffer, socketpair, BufferIdentity, DmaBuf, PlaneDesc, PlaneLayout, Received};
use dmabridge_interop::negotiate::{negotiate_with, Member, NegotiateOptions};
use dmabridge_interop::{format_info, Fourcc, Layout, Modifier};

use crate::demo::config::{Mode, FRAME_TIMEOUT};
use crate::demo::negotiation::{consumer_formats, producer_participant};
use crate::error::DemoError;
use crate::stats::{gbps_samples, median, spread};

use super::host_loop::{HostLoop, FRAMES_IN_FLIGHT};
use super::options::BenchOptions;
use super::results::PathResult;

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
    let producer = producer_participant(engine, Mode::ZeroCopy, Fourcc::ARGB8888)?;
    let consumer = dmabridge_interop::negotiate::Participant::new("consumer", consumer_formats(engine)?);
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
