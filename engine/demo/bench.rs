//! `dmabridge bench`: the cost per frame of each way a frame reaches a consumer's shader,
//! with the machine's memcpy bandwidth measured in the same run as the baseline.
//!
//! What one frame's time covers, per path (the frame source is a linear dma-buf: an
//! exported image where the device exports, else a memfd):
//! - **zero-copy**: handoff (descriptor + fds over a Unix socket and back into a
//!   [`DmaBuf`]), the cached import ([`ImportCache`], a hit after the first frame), the
//!   acquire barrier and the first sample (a 16x16 compute dispatch that samples the frame).
//!   Only where the import is explicit: without the modifier extension, or for NV12 on
//!   lavapipe (single-plane modifiers only), there is no zero-copy import and no entry.
//! - **copy-gpu**: the same handoff, a cached buffer import of the fd, then a GPU copy
//!   (`vkCmdCopyBufferToImage`, one region per plane) into a device-local image, the barrier
//!   and the first sample (through a YCbCr conversion for NV12).
//! - **copy-cpu**: the same handoff, then the CPU maps the fd and memcpys the frame into a
//!   host-visible staging buffer (the classic upload), which the GPU copies into the image
//!   before the barrier and the first sample.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::time::Instant;

use ash::vk;
use dmabridge_interop::dmabuf::{recv, send_buffer, socketpair, BufferIdentity, DmaBuf, PlaneDesc, Received};
use dmabridge_interop::negotiate::{negotiate_with, Member, NegotiateOptions};
use dmabridge_interop::{format_info, Fourcc, Layout, Modifier, TileLayout};
use serde::Serialize;

use super::gpu::{buffer_barrier, vk_err, Binding, BufferKind, Compute, GpuBuffer, Sampler, Submitter, COMPOSITE_SPV};
use super::{DemoError, Mode};
use crate::commands::{image_2d, image_barrier, plane_aspect};
use crate::import::ImportPath;
use crate::vk_format;
use crate::{Engine, ExportRequest, ExportedImage, ImportCache};

/// The sizes measured; `--quick` drops the last.
pub const SIZES: [(u32, u32); 4] = [(1280, 720), (1920, 1080), (3840, 2160), (7680, 4320)];
pub const PATHS: [&str; 3] = ["zero-copy", "copy-gpu", "copy-cpu"];
pub const FORMATS: [Fourcc; 2] = [Fourcc::ARGB8888, Fourcc::NV12];

/// One measured path (a contract: field names and values as the issue gives them).
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    pub path: &'static str,
    pub format: String,
    pub width: u32,
    pub height: u32,
    pub us_per_frame: f64,
    pub gbps: f64,
}

/// One measured GPU layout conversion.
#[derive(Debug, Clone, Serialize)]
pub struct ConvertResult {
    pub layout: String,
    pub format: String,
    pub width: u32,
    pub height: u32,
    pub gbps: f64,
}

/// The whole report; serialises to exactly the contract's JSON.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub device: String,
    pub memcpy_gbps: f64,
    pub results: Vec<PathResult>,
    pub convert: Vec<ConvertResult>,
    pub negotiate_us: f64,
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

    /// The number of progress steps [`run`] reports.
    pub fn steps(&self) -> u64 {
        (self.sizes().len() * PATHS.len() * FORMATS.len() + CONVERT_LAYOUTS.len()) as u64 + 3
    }
}

/// Median of a sample.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// memcpy bandwidth: a 4K AR24 frame's worth of bytes, copied several times, GB/s of bytes copied.
pub fn memcpy_gbps(quick: bool) -> f64 {
    let len = 3840 * 2160 * 4;
    let src = vec![0x5au8; len];
    let mut dst = vec![0u8; len];
    dst.copy_from_slice(&src);
    let mut samples: Vec<f64> = (0..if quick { 5 } else { 15 })
        .map(|_| {
            let t = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            len as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    median(&mut samples)
}

/// A frame source: a linear dma-buf of `fourcc` (exported where the device can, else a memfd).
pub struct Source<'e> {
    _exported: Option<ExportedImage<'e>>,
    pub buf: DmaBuf,
    pub bytes: u64,
}

/// A sealed memfd of `size` bytes.
pub fn memfd(size: u64) -> Result<std::os::fd::OwnedFd, DemoError> {
    use rustix::fs::{fcntl_add_seals, ftruncate, memfd_create, MemfdFlags, SealFlags};
    let fd = memfd_create("dmabridge-bench", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).map_err(|e| DemoError::Io(e.into()))?;
    ftruncate(&fd, size).map_err(|e| DemoError::Io(e.into()))?;
    fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW).map_err(|e| DemoError::Io(e.into()))?;
    Ok(fd)
}

impl<'e> Source<'e> {
    pub fn new(engine: &'e Engine, fourcc: Fourcc, w: u32, h: u32, export: bool) -> Result<Source<'e>, DemoError> {
        let info = format_info(fourcc).ok_or_else(|| DemoError::Unavailable(format!("{fourcc} has no plane table")))?;
        if export && info.plane_count() == 1 {
            let req = ExportRequest {
                fourcc,
                width: w,
                height: h,
                usage: vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST,
                acceptable: vec![Layout::Explicit(Modifier::LINEAR)],
            };
            if let Ok(img) = engine.export_image(&req) {
                img.clear_and_release([0.2, 0.4, 0.6, 1.0])?;
                if let Some(d) = img.dmabuf() {
                    let buf = d.try_clone()?;
                    let bytes = buf.planes().map(|p| p.stride * h as u64).sum();
                    return Ok(Source { _exported: Some(img), buf, bytes });
                }
            }
        }
        // Planes packed one after the other in one memfd, tightly.
        let total = info.packed_size(w, h);
        let fd = memfd(total)?;
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

/// A device-local optimal image the copy paths fill, and its sampling view.
struct DeviceImage<'e> {
    engine: &'e Engine,
    image: vk::Image,
    memory: vk::DeviceMemory,
}

impl<'e> DeviceImage<'e> {
    fn new(engine: &'e Engine, format: vk::Format, w: u32, h: u32) -> Result<Self, DemoError> {
        let device = engine.device();
        let info = image_2d(format, (w, h), vk::ImageTiling::OPTIMAL, vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST);
        // SAFETY: a 2D optimal image of a format the device samples (AR24 and NV12 are
        // required or checked formats on every conformant device with YCbCr support), extent
        // within maxImageDimension2D (8K <= 16384 on lavapipe) (VUID-VkImageCreateInfo-extent-02252).
        let image = unsafe { device.create_image(&info, None) }.map_err(vk_err("vkCreateImage"))?;
        let mut out = DeviceImage { engine, image, memory: vk::DeviceMemory::null() };
        // SAFETY: image of this device.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let type_index = engine
            .memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::DEVICE_LOCAL)
            .or_else(|| engine.memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty()))
            .ok_or(DemoError::NoMemoryType)?;
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(type_index);
        // SAFETY: plain allocation in an allowed type.
        out.memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // SAFETY: unbound image, memory of reqs.size, offset 0 (VUID-vkBindImageMemory-size-01049).
        unsafe { device.bind_image_memory(image, out.memory, 0) }.map_err(vk_err("vkBindImageMemory"))?;
        Ok(out)
    }
}

impl Drop for DeviceImage<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: objects of this device; every submission that used them was waited for.
        unsafe {
            device.destroy_image(self.image, None);
            device.free_memory(self.memory, None);
        }
    }
}

/// The "first sample": the demo's composite shader over a 16x16 corner, no output.
struct Sampling<'e> {
    // Declared first so it is dropped before the sampler it holds immutably.
    pipe: Compute<'e>,
    sampler: Sampler<'e>,
    sum: GpuBuffer<'e>,
}

impl<'e> Sampling<'e> {
    fn new(engine: &'e Engine, format: vk::Format, multi_planar: bool) -> Result<Self, DemoError> {
        let sampler = Sampler::new(engine, format, multi_planar, false)?;
        let pipe = Compute::new(engine, COMPOSITE_SPV, &[Binding::Sampler(sampler.sampler), Binding::StorageBuffer, Binding::StorageBuffer], 28, 4)?;
        let sum = GpuBuffer::new(engine, 64, vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST, BufferKind::HostMapped)?;
        Ok(Sampling { pipe, sampler, sum })
    }

    /// A set for `view` (destroyed with the pipeline's pool).
    fn set_for(&self, view: vk::ImageView) -> Result<vk::DescriptorSet, DemoError> {
        let set = self.pipe.allocate_set()?;
        self.pipe.write_image(set, 0, view);
        self.pipe.write_buffer(set, 1, self.sum.buffer);
        self.pipe.write_buffer(set, 2, self.sum.buffer);
        Ok(set)
    }

    fn record(&self, device: &ash::Device, cmd: vk::CommandBuffer, set: vk::DescriptorSet, (w, h): (u32, u32)) {
        self.pipe.record(cmd, set, &[16, 16, 0, 0, w, h, 0], 16, 16);
        let host = buffer_barrier(self.sum.buffer, vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::HOST_READ, vk::QUEUE_FAMILY_IGNORED, vk::QUEUE_FAMILY_IGNORED);
        // SAFETY: recording state; the sum buffer belongs to this device.
        unsafe {
            device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[], &[host], &[]);
        }
    }
}

/// One copy region per plane of a tightly packed or strided linear frame.
fn copy_regions(buf: &DmaBuf, entry: &vk_format::VkFormatEntry) -> Result<Vec<vk::BufferImageCopy>, DemoError> {
    let info = format_info(buf.fourcc()).ok_or_else(|| DemoError::Unavailable(format!("{} has no plane table", buf.fourcc())))?;
    buf.planes()
        .enumerate()
        .map(|(i, p)| {
            let cpp = info.planes.get(i).map_or(1, |pl| pl.cpp as u64).max(1);
            Ok(vk::BufferImageCopy {
                buffer_offset: p.offset,
                buffer_row_length: u32::try_from(p.stride / cpp).map_err(|_| DemoError::Unavailable("stride too large".into()))?,
                buffer_image_height: 0,
                image_subresource: vk::ImageSubresourceLayers { aspect_mask: plane_aspect(entry.vk_planes, i), mip_level: 0, base_array_layer: 0, layer_count: 1 },
                image_offset: vk::Offset3D::default(),
                image_extent: vk::Extent3D { width: info.plane_width(i, buf.width()), height: info.plane_height(i, buf.height()), depth: 1 },
            })
        })
        .collect()
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
    let entry = vk_format::to_vk(fourcc).ok_or_else(|| DemoError::Unavailable(format!("{fourcc} has no Vulkan format")))?;
    let multi_planar = entry.vk_planes > 1;
    let source = Source::new(engine, fourcc, w, h, path == "zero-copy")?;
    let (a, b) = socketpair()?;
    let reps = opts.reps(source.bytes);
    let mut samples = Vec::with_capacity(reps);
    let sampling = Sampling::new(engine, entry.vk_format, multi_planar)?;
    let (ours, foreign) = (engine.queue_family(), engine.foreign_queue_family());
    match path {
        "zero-copy" => {
            let mut cache = ImportCache::new(engine, 2);
            let mut state: Option<(vk::ImageView, vk::DescriptorSet)> = None;
            // The commands are the same every frame while the cache returns the same image:
            // recorded once, resubmitted (as a compositor's frame loop would).
            let submitter = Submitter::new(engine)?;
            let mut recorded_for = vk::Image::null();
            for i in 0..reps + 1 {
                let t = Instant::now();
                let got = handoff(&a, &b, &source.buf)?;
                let image = cache.import(got, vk::ImageUsageFlags::SAMPLED)?;
                if image.path() != ImportPath::Explicit {
                    return Ok(None);
                }
                let set = match state {
                    Some((_, s)) => s,
                    None => {
                        let view = sampling.sampler.view(image.image(), image.vk_format())?;
                        let set = sampling.set_for(view)?;
                        state = Some((view, set));
                        set
                    }
                };
                let acquire = image_barrier(image.image(), vk::ImageAspectFlags::COLOR, vk::ImageLayout::GENERAL, vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL, vk::AccessFlags::empty(), vk::AccessFlags::SHADER_READ)
                    .src_queue_family_index(foreign)
                    .dst_queue_family_index(ours);
                let release = image_barrier(image.image(), vk::ImageAspectFlags::COLOR, vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL, vk::ImageLayout::GENERAL, vk::AccessFlags::SHADER_READ, vk::AccessFlags::empty())
                    .src_queue_family_index(ours)
                    .dst_queue_family_index(foreign);
                if recorded_for != image.image() {
                    recorded_for = image.image();
                    submitter.record(|device, cmd| {
                    // SAFETY: recording state; the image is imported external memory, so the
                    // foreign family may own it (VUID-VkImageMemoryBarrier-srcQueueFamilyIndex-04065).
                    unsafe {
                        device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, vk::PipelineStageFlags::COMPUTE_SHADER, vk::DependencyFlags::empty(), &[], &[], &[acquire]);
                    }
                    sampling.record(device, cmd, set, (w, h));
                    // SAFETY: as above; the release hands the memory back.
                    unsafe {
                        device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::BOTTOM_OF_PIPE, vk::DependencyFlags::empty(), &[], &[], &[release]);
                    }
                    })?;
                }
                submitter.submit()?;
                image.set_current_layout(vk::ImageLayout::GENERAL);
                if i > 0 {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            if let Some((view, _)) = state {
                sampling.sampler.destroy_view(view);
            }
        }
        "copy-gpu" | "copy-cpu" => {
            let target = DeviceImage::new(engine, entry.vk_format, w, h)?;
            let view = sampling.sampler.view(target.image, entry.vk_format)?;
            let set = sampling.set_for(view)?;
            // A multi-planar image that is not disjoint takes COLOR in barriers (VUID-VkImageMemoryBarrier-image-01671).
            let aspect = vk::ImageAspectFlags::COLOR;
            let mut imports: HashMap<BufferIdentity, GpuBuffer<'_>> = HashMap::new();
            let mut staging = if path == "copy-cpu" {
                Some(GpuBuffer::new(engine, source.bytes.max(4) + 64, vk::BufferUsageFlags::TRANSFER_SRC, BufferKind::HostMapped)?)
            } else {
                None
            };
            let mut result: Result<(), DemoError> = Ok(());
            let submitter = Submitter::new(engine)?;
            let mut recorded_for = vk::Buffer::null();
            for i in 0..reps + 1 {
                let t = Instant::now();
                let got = handoff(&a, &b, &source.buf)?;
                let regions = copy_regions(&got, entry)?;
                let src_buffer = match staging.as_mut() {
                    Some(st) => {
                        cpu_upload(&got, st.bytes_mut())?;
                        st.buffer
                    }
                    None => {
                        let id = got.identity();
                        if !imports.contains_key(&id) {
                            let info = format_info(fourcc).ok_or_else(|| DemoError::Unavailable(format!("{fourcc} has no plane table")))?;
                            let size = got
                                .planes()
                                .enumerate()
                                .map(|(i, p)| p.offset + p.stride * info.plane_height(i, h) as u64)
                                .max()
                                .unwrap_or(0);
                            let imported = GpuBuffer::import_fd(engine, got.dup_fd(0)?, size, vk::BufferUsageFlags::TRANSFER_SRC)?;
                            imports.insert(id.clone(), imported);
                        }
                        imports.get(&id).map(|g| g.buffer).ok_or_else(|| DemoError::Protocol("lost an import".into()))?
                    }
                };
                let to_dst = image_barrier(target.image, aspect, vk::ImageLayout::UNDEFINED, vk::ImageLayout::TRANSFER_DST_OPTIMAL, vk::AccessFlags::SHADER_READ, vk::AccessFlags::TRANSFER_WRITE);
                let to_read = image_barrier(target.image, aspect, vk::ImageLayout::TRANSFER_DST_OPTIMAL, vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL, vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::SHADER_READ);
                let acquire = buffer_barrier(src_buffer, vk::AccessFlags::empty(), vk::AccessFlags::TRANSFER_READ, foreign, ours);
                let release = buffer_barrier(src_buffer, vk::AccessFlags::TRANSFER_READ, vk::AccessFlags::empty(), ours, foreign);
                let external = staging.is_none();
                let rerecord = recorded_for != src_buffer;
                recorded_for = src_buffer;
                let r = if rerecord { submitter.record(|device, cmd| {
                    // SAFETY: recording state; the regions lie inside the source (sized from the
                    // same planes) and the image (VUID-vkCmdCopyBufferToImage-pRegions-06218); the
                    // source is external memory when acquired (VUID-VkBufferMemoryBarrier-srcQueueFamilyIndex-04088).
                    unsafe {
                        let buffers: &[vk::BufferMemoryBarrier] = if external { std::slice::from_ref(&acquire) } else { &[] };
                        device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TOP_OF_PIPE, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &[], buffers, &[to_dst]);
                        device.cmd_copy_buffer_to_image(cmd, src_buffer, target.image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &regions);
                        device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::COMPUTE_SHADER, vk::DependencyFlags::empty(), &[], &[], &[to_read]);
                        if external {
                            device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::BOTTOM_OF_PIPE, vk::DependencyFlags::empty(), &[], &[release], &[]);
                        }
                    }
                    sampling.record(device, cmd, set, (w, h));
                }) } else { Ok(()) }
                .and_then(|()| submitter.submit());
                if let Err(e) = r {
                    result = Err(e);
                    break;
                }
                if i > 0 {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            sampling.sampler.destroy_view(view);
            drop(imports);
            drop(staging);
            result?;
        }
        other => return Err(DemoError::Unavailable(format!("unknown path {other}"))),
    }
    let us = median(&mut samples);
    Ok(Some(PathResult {
        path: PATHS.iter().copied().find(|p| *p == path).unwrap_or("zero-copy"),
        format: fourcc.trimmed(),
        width: w,
        height: h,
        us_per_frame: us,
        gbps: if us > 0.0 { source.bytes as f64 / us / 1e3 } else { 0.0 },
    }))
}

/// The CPU upload: map each plane's file read-only and memcpy its rows into `dst`, packed.
fn cpu_upload(buf: &DmaBuf, dst: &mut [u8]) -> Result<(), DemoError> {
    use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};
    let h = buf.height() as u64;
    for p in buf.planes() {
        let len = usize::try_from(p.offset + p.stride * h).map_err(|_| DemoError::Unavailable("plane too large".into()))?;
        let file_size = rustix::fs::fstat(p.fd).map_err(|e| DemoError::Io(e.into()))?.st_size as usize;
        let len = len.min(file_size);
        if len == 0 {
            continue;
        }
        // SAFETY: a fresh read-only shared mapping of `len` bytes of the file, which holds at
        // least that many (checked above); it is unmapped before this block ends and nothing
        // else refers to it.
        unsafe {
            let ptr = mmap(std::ptr::null_mut(), len, ProtFlags::READ, MapFlags::SHARED, p.fd, 0).map_err(|e| DemoError::Io(e.into()))?;
            let src = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
            let start = p.offset as usize;
            let n = (len - start.min(len)).min(dst.len().saturating_sub(start));
            dst[start..start + n].copy_from_slice(&src[start..start + n]);
            munmap(ptr, len).map_err(|e| DemoError::Io(e.into()))?;
        }
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
        std::hint::black_box(negotiate_with(std::hint::black_box(&members), NegotiateOptions::default()));
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / reps.max(1) as f64)
}

/// Mean µs of one descriptor handoff (send + receive + validation, fds closed after).
pub fn handoff_us(reps: usize) -> Result<f64, DemoError> {
    let fd = memfd(1280 * 720 * 4)?;
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

/// GB/s (linear bytes written per second) of the engine's GPU detile of an NV12 frame,
/// buffers already on the device: the median of `reps` runs after one warm-up.
pub fn detile_gbps(engine: &Engine, layout: TileLayout, w: u32, h: u32, reps: usize) -> Result<f64, crate::ConvertError> {
    use dmabridge_interop::tiling::{packed_planes, tiled_size};
    let conv = crate::Converter::new(engine)?;
    let tiled = tiled_size(layout, Fourcc::NV12, w, h)?;
    let linear = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h)?;
    let planes = packed_planes(Fourcc::NV12, w, h)?;
    let src = crate::GpuBuffer::new(engine, tiled.size as usize)?;
    let dst = crate::GpuBuffer::new(engine, linear.size as usize)?;
    conv.detile(layout, Fourcc::NV12, (w, h), &src, &dst, &planes)?;
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        conv.detile(layout, Fourcc::NV12, (w, h), &src, &dst, &planes)?;
        samples.push(linear.size as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    Ok(median(&mut samples))
}

/// Runs everything, calling `progress` with a label before each step.
pub fn run(engine: &Engine, opts: &BenchOptions, progress: &mut dyn FnMut(&str)) -> Result<BenchReport, DemoError> {
    let mut notes = Vec::new();
    progress("memcpy baseline");
    let memcpy = memcpy_gbps(opts.quick);
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
    for layout in CONVERT_LAYOUTS {
        progress(&format!("detile {} NV12 3840x2160", layout.name()));
        match detile_gbps(engine, layout, 3840, 2160, if opts.quick { 3 } else { 8 }) {
            Ok(gbps) => convert.push(ConvertResult { layout: layout.name(), format: "NV12".into(), width: 3840, height: 2160, gbps }),
            Err(e) => notes.push(format!("detile {}: {e}", layout.name())),
        }
    }
    Ok(BenchReport {
        device: engine.info().name.clone(),
        memcpy_gbps: memcpy,
        results,
        convert,
        negotiate_us: negotiate,
        handoff_us: handoff,
        notes,
    })
}
