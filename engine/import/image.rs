//! A dma-buf as a Vulkan image, and the hand-over of each frame: acquire before use,
//! release after (see [the module docs](super#handing-frames-over)). Two ways in: the image
//! aliases the dma-buf (`explicit.rs`, zero copies), or it is the device's own and every
//! acquisition copies the frame into it from a `PlaneSource` (the copy paths, made here).

use std::sync::Arc;

use ash::vk;
use dmabridge_interop::dmabuf::{CheckedPlane, DmaBuf, ImportOptions};
use dmabridge_interop::{format_info, Fourcc, Layout};

use super::source::{PlaneSource, SourceRequest};
use super::{ImageImport, ImportError, ImportPath};
use crate::device::submit::{Completion, Garbage, SubmitOptions, Submission};
use crate::device::usage::ImageUse;
use crate::device::vk_format::{Mapping, VkFormatEntry};
use crate::resources::image::{barrier_aspect, buffer_barrier, image_barrier, record_barrier, DeviceImage, ImageAccess, ImageState, Tracked};
use crate::resources::transfer::plane_copy;
use crate::Engine;

/// The copy paths' source, and the regions (one per plane, in plane order) that copy it
/// into the device image.
pub(super) struct CopySource {
    source: PlaneSource,
    regions: Vec<vk::BufferImageCopy>,
    /// The device-local image the frame is copied into.
    target: DeviceImage,
}

impl CopySource {
    fn track(&self, until: Completion) {
        self.target.track(until);
        self.source.track(until);
    }
}

/// What stands behind an import's image.
pub(super) enum Backing {
    /// The image aliases the imported memory (explicit, opaque): the image and the memories
    /// are the import's own, `disjoint` where each plane has its memory.
    Aliased { memories: Vec<vk::DeviceMemory>, disjoint: bool },
    /// The image is the device's own (`target`), and every acquisition copies the frame
    /// into it.
    Copied(Box<CopySource>),
}

pub(super) struct Inner {
    pub(super) engine: Engine,
    pub(super) path: ImportPath,
    pub(super) fourcc: Fourcc,
    pub(super) layout: Layout,
    pub(super) entry: &'static VkFormatEntry,
    pub(super) width: u32,
    pub(super) height: u32,
    /// The image consumers use (the target image, on the copy path).
    pub(super) image: vk::Image,
    pub(super) backing: Backing,
    pub(super) image_use: ImageUse,
    /// The planes as checked at import: what a cache hit rechecks.
    pub(super) checked: Vec<CheckedPlane>,
    pub(super) options: ImportOptions,
    pub(super) tracked: Tracked,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let mut garbage = Vec::new();
        if let Backing::Aliased { memories, .. } = &mut self.backing {
            garbage.push(Garbage::Image(self.image));
            garbage.extend(memories.drain(..).map(Garbage::Memory));
        }
        let uses = self.tracked.uses.snapshot();
        if let Backing::Copied(copy) = &self.backing {
            // The copy path's image and buffers retire themselves when the fields drop; every
            // use of the import (a consumer's sampling, too) is a use of them.
            for u in &uses {
                copy.track(*u);
            }
        }
        self.engine.shared().retire(uses, garbage);
    }
}

/// A dma-buf as a Vulkan image. It owns the image and memory it made; the descriptor's fds
/// stay the caller's (Vulkan owns the dups it was given).
///
/// A cheap clone (an `Arc` inside): the [`crate::ImportCache`] hands out clones, and the
/// image lives until the last one is dropped and the GPU work that uses it is done. `Send`
/// and `Sync`: its layout and ownership state is behind a lock.
#[derive(Clone)]
pub struct ImportedImage(pub(super) Arc<Inner>);

impl std::fmt::Debug for ImportedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedImage")
            .field("path", &self.0.path)
            .field("fourcc", &self.0.fourcc)
            .field("layout", &self.0.layout)
            .field("extent", &(self.0.width, self.0.height))
            .finish()
    }
}

impl ImportedImage {
    /// The image made of a checked buffer (`path`: which way), for `image_use`.
    pub(super) fn of_import(engine: &Engine, import: &ImageImport<'_, '_>, (path, image): (ImportPath, vk::Image), backing: Backing, image_use: ImageUse) -> ImportedImage {
        let buf = import.checked.dmabuf();
        let copied = matches!(backing, Backing::Copied(_));
        ImportedImage(Arc::new(Inner {
            engine: engine.clone(),
            path,
            fourcc: buf.fourcc(),
            layout: buf.layout(),
            entry: import.entry,
            width: buf.width(),
            height: buf.height(),
            image,
            backing,
            image_use,
            checked: import.checked.planes().to_vec(),
            options: import.options,
            // A copy's target is the device's own, so dmabridge owns it from the start.
            tracked: Tracked::new(copied),
        }))
    }

    pub fn path(&self) -> ImportPath {
        self.0.path
    }

    pub fn image(&self) -> vk::Image {
        self.0.image
    }

    pub fn vk_format(&self) -> vk::Format {
        self.0.entry.vk_format
    }

    pub fn fourcc(&self) -> Fourcc {
        self.0.fourcc
    }

    pub fn layout(&self) -> Layout {
        self.0.layout
    }

    pub fn extent(&self) -> (u32, u32) {
        (self.0.width, self.0.height)
    }

    pub fn engine(&self) -> &Engine {
        &self.0.engine
    }

    /// The usage flags the image was created with.
    pub fn usage(&self) -> vk::ImageUsageFlags {
        self.0.image_use.usage
    }

    /// The use the image was created for (its usage, create flags and view formats; on the
    /// copy paths the device image also has `TRANSFER_DST`).
    pub fn image_use(&self) -> ImageUse {
        self.0.image_use
    }

    /// Records that GPU work completing at `until` uses the image (see [`crate::GpuBuffer::track`]).
    pub fn track(&self, until: Completion) {
        self.0.tracked.uses.add(until);
    }

    /// Checks `buf` (a new descriptor of the same files) against what the import checked
    /// ([`CheckedPlane::recheck`]): each plane's file is still the same kind (a seal cannot be
    /// lost, but a file can be replaced) and still holds the plane's bytes. What the import
    /// cache runs on every hit.
    pub fn recheck(&self, buf: &DmaBuf) -> Result<(), ImportError> {
        for (i, checked) in self.0.checked.iter().enumerate() {
            let fd = buf.plane(i).map(|p| p.fd).ok_or(ImportError::Changed(dmabridge_interop::dmabuf::ImportCheckError::PlaneCount {
                format: buf.format(),
                got: buf.plane_count(),
                expected: self.0.checked.len(),
            }))?;
            checked.recheck(fd, i, self.0.options.trust).map_err(ImportError::Changed)?;
        }
        Ok(())
    }

    /// The queue family the memory is acquired from and released to.
    fn foreign_family(&self) -> u32 {
        match self.0.path {
            ImportPath::OpaqueFd => vk::QUEUE_FAMILY_EXTERNAL,
            _ => self.0.engine.foreign_queue_family(),
        }
    }

    fn aspect(&self) -> vk::ImageAspectFlags {
        let disjoint = matches!(self.0.backing, Backing::Aliased { disjoint: true, .. });
        barrier_aspect(self.0.entry.vk_planes, disjoint)
    }

    /// Records the acquisition of the frame's current contents for the use `to`: the queue
    /// family ownership transfer from the producer's side (explicit and opaque imports), or
    /// the copy of the dma-buf's bytes into the device image (copy paths; the read-copy path
    /// reads the file now, on the CPU). Recording it again without a release in between is a
    /// plain layout transition.
    ///
    /// An error (a file that shrank, on the read-copy path) leaves nothing recorded.
    ///
    /// # Safety
    /// - `cmd` is a command buffer of this image's engine's device, in the recording state,
    ///   to be submitted on a queue of [`Engine::queue_family`];
    /// - that submission signals `until` (a [`crate::HostTimeline`] point, or the completion
    ///   dmabridge passed to the closure of a submission), and commands recorded on this
    ///   image are submitted in the order they were recorded;
    /// - the producer finished writing the frame before the submission executes (it waited,
    ///   or the submission waits for its fence).
    pub unsafe fn record_acquire(&self, cmd: vk::CommandBuffer, to: ImageAccess, until: Completion) -> Result<(), ImportError> {
        let device = self.0.engine.device();
        let state = self.0.tracked.get();
        let (ours, foreign) = (self.0.engine.queue_family(), self.foreign_family());
        if let Backing::Copied(copy) = &self.0.backing {
            // The bytes to copy: the mapped files (acquired from the producer's side around the
            // copy), or a staging buffer read now.
            let fetched = copy.source.fetch(&self.0.engine)?;
            let buffers = fetched.buffers();
            let external = fetched.is_external();
            let acquire: Vec<vk::BufferMemoryBarrier> = buffers
                .iter()
                .filter(|_| external)
                .map(|b| buffer_barrier(*b, vk::AccessFlags::empty(), vk::AccessFlags::TRANSFER_READ, foreign, ours))
                .collect();
            let release: Vec<vk::BufferMemoryBarrier> = buffers
                .iter()
                .filter(|_| external)
                .map(|b| buffer_barrier(*b, vk::AccessFlags::TRANSFER_READ, vk::AccessFlags::empty(), ours, foreign))
                .collect();
            let host_writes = [vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::HOST_WRITE).dst_access_mask(vk::AccessFlags::TRANSFER_READ)];
            let aspect = vk::ImageAspectFlags::COLOR;
            // The whole image is overwritten: its old contents are discarded.
            let to_dst = image_barrier(
                self.0.image,
                aspect,
                vk::ImageLayout::UNDEFINED,
                vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                vk::AccessFlags::MEMORY_READ,
                vk::AccessFlags::TRANSFER_WRITE,
            );
            let to_use =
                image_barrier(self.0.image, aspect, vk::ImageLayout::TRANSFER_DST_OPTIMAL, to.layout, vk::AccessFlags::TRANSFER_WRITE, to.access);
            let memory: &[vk::MemoryBarrier] = if external { &[] } else { &host_writes };
            let src_stages = if external { vk::PipelineStageFlags::ALL_COMMANDS } else { vk::PipelineStageFlags::ALL_COMMANDS | vk::PipelineStageFlags::HOST };
            // SAFETY: the caller's contract for `cmd`; every handle belongs to this device; the
            // regions lie inside the buffers (checked against the fd sizes, or the staging
            // buffer sized from them) and the image's planes (VUID-vkCmdCopyBufferToImage-pRegions-06218,
            // -06223); the mapped buffers are external memory, so they may be acquired from
            // and released to the foreign family (VUID-VkBufferMemoryBarrier-srcQueueFamilyIndex-04088).
            unsafe {
                record_barrier(device, cmd, (src_stages, vk::PipelineStageFlags::TRANSFER), memory, &acquire, &[to_dst]);
                for (plane, region) in copy.regions.iter().enumerate() {
                    let src = fetched.buffer_of(plane);
                    device.cmd_copy_buffer_to_image(cmd, src, self.0.image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, std::slice::from_ref(region));
                }
                if external {
                    record_barrier(device, cmd, (vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::BOTTOM_OF_PIPE), &[], &release, &[]);
                }
                record_barrier(device, cmd, (vk::PipelineStageFlags::TRANSFER, to.stages), &[], &[], &[to_use]);
            }
            copy.track(until);
            fetched.track(until);
            self.0.tracked.set(ImageState { layout: to.layout, owned: true });
        } else {
            let barrier = if state.owned {
                image_barrier(
                    self.0.image,
                    self.aspect(),
                    state.layout,
                    to.layout,
                    vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
                    to.access,
                )
            } else {
                // The producer released the memory in GENERAL (the convention for shared images).
                image_barrier(self.0.image, self.aspect(), vk::ImageLayout::GENERAL, to.layout, vk::AccessFlags::empty(), to.access)
                    .src_queue_family_index(foreign)
                    .dst_queue_family_index(ours)
            };
            let src_stage = if state.owned { vk::PipelineStageFlags::ALL_COMMANDS } else { vk::PipelineStageFlags::TOP_OF_PIPE };
            // SAFETY: the caller's contract for `cmd`; the image is external memory, so it may
            // be acquired from the foreign family (VUID-VkImageMemoryBarrier-srcQueueFamilyIndex-04065).
            unsafe { record_barrier(device, cmd, (src_stage, to.stages), &[], &[], &[barrier]) };
            self.0.tracked.set(ImageState { layout: to.layout, owned: true });
        }
        self.track(until);
        Ok(())
    }

    /// Records the release of the frame back to its producer after the use `from` (the
    /// image must have been acquired). On the copy path the frame's bytes were copied and
    /// released at acquisition; this records nothing.
    ///
    /// # Safety
    /// As [`ImportedImage::record_acquire`].
    pub unsafe fn record_release(&self, cmd: vk::CommandBuffer, from: ImageAccess, until: Completion) {
        let state = self.0.tracked.get();
        if matches!(self.0.backing, Backing::Copied(_)) || !state.owned {
            return;
        }
        let barrier = image_barrier(self.0.image, self.aspect(), state.layout, vk::ImageLayout::GENERAL, from.access, vk::AccessFlags::empty())
            .src_queue_family_index(self.0.engine.queue_family())
            .dst_queue_family_index(self.foreign_family());
        // SAFETY: the caller's contract for `cmd`; external memory may be released to the
        // foreign family (VUID-VkImageMemoryBarrier-srcQueueFamilyIndex-04065).
        unsafe { record_barrier(self.0.engine.device(), cmd, (from.stages, vk::PipelineStageFlags::BOTTOM_OF_PIPE), &[], &[], &[barrier]) };
        self.0.tracked.set(ImageState { layout: vk::ImageLayout::GENERAL, owned: false });
        self.track(until);
    }

    /// [`ImportedImage::record_acquire`], submitted on the engine's queue after `options.waits`.
    pub fn acquire(&self, to: ImageAccess, options: SubmitOptions) -> Result<Submission, ImportError> {
        let (_, s) = self.0.engine.submit(options, |cmd, until| {
            // SAFETY: the engine's own command buffer, recording, submitted on its queue with `until`.
            unsafe { self.record_acquire(cmd, to, until) }
        })?;
        Ok(s)
    }

    /// [`ImportedImage::record_release`], submitted on the engine's queue after `options.waits`.
    pub fn release(&self, from: ImageAccess, options: SubmitOptions) -> Result<Submission, ImportError> {
        let (_, s) = self.0.engine.submit(options, |cmd, until| {
            // SAFETY: as in `acquire`.
            unsafe { self.record_release(cmd, from, until) };
            Ok::<(), ImportError>(())
        })?;
        Ok(s)
    }
}

/// The copy paths: an image of the device's own, filled from a [`PlaneSource`] on every
/// acquisition.
pub(super) fn import_by_copy(engine: &Engine, import: ImageImport<'_, '_>) -> Result<ImportedImage, ImportError> {
    let ImageImport { checked, entry, usage, options } = import;
    let buf = checked.dmabuf();
    let info = format_info(buf.fourcc()).ok_or(ImportError::UnknownFourcc(buf.fourcc()))?;
    let usage = ImageUse { usage: usage.usage | vk::ImageUsageFlags::TRANSFER_DST, ..usage };
    for (i, p) in checked.planes().iter().enumerate() {
        let texel = info.planes.get(i).map_or(1, |pl| pl.cpp as u64);
        // Packed 4:2:2 formats copy in 2x1 blocks of 4 bytes.
        let block = if entry.vk_planes == 1 && info.is_yuv { 4 } else { texel };
        if p.stride % block != 0 {
            return Err(ImportError::StrideNotTexelAligned { plane: i, stride: p.stride, texel: block });
        }
        if p.offset % block != 0 {
            return Err(ImportError::OffsetNotTexelAligned { plane: i, offset: p.offset, texel: block });
        }
    }
    let target = DeviceImage::new(engine, entry.vk_format, (buf.width(), buf.height()), usage)?;
    let spans: Vec<u64> = checked.planes().iter().map(|p| p.size()).collect();
    let request = SourceRequest { spans: &spans, usage: vk::BufferUsageFlags::TRANSFER_SRC, options, max_len: u64::MAX };
    let source = PlaneSource::new(engine, checked, request)?;
    let mut regions = Vec::with_capacity(spans.len());
    for (i, p) in checked.planes().iter().enumerate() {
        // YV12 keeps V before U: its plane 1 is Vulkan's plane 2 (Cr) and vice versa.
        let vk_plane = if entry.mapping == Mapping::ChromaSwapped && entry.vk_planes == 3 && i > 0 { 3 - i } else { i };
        let texel = info.planes.get(i).map_or(1, |pl| pl.cpp as u64);
        let row_length =
            u32::try_from(p.stride / texel).map_err(|_| ImportError::StrideNotTexelAligned { plane: i, stride: p.stride, texel })?;
        let extent = (info.plane_width(i, buf.width()), info.plane_height(i, buf.height()));
        regions.push(plane_copy(entry, vk_plane, source.offset(i), row_length, extent));
    }
    let path = if source.is_mapped() { ImportPath::BufferCopy } else { ImportPath::ReadCopy };
    tracing::debug!(fourcc = %buf.fourcc(), %path, "imported through a copy path");
    let image = target.image();
    Ok(ImportedImage::of_import(engine, &import, (path, image), Backing::Copied(Box::new(CopySource { source, regions, target })), usage))
}