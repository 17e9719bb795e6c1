//! Import a dma-buf into Vulkan, after the layout checks.
//!
//! Two paths, and the result says which was taken:
//! - **Explicit**: where the device imports this format+modifier as an image for the usage,
//!   the image is created with `VkImageDrmFormatModifierExplicitCreateInfoEXT` (one
//!   `VkSubresourceLayout` per memory plane: offset and rowPitch, size 0) over the imported
//!   memory itself: zero copies.
//! - **BufferCopy**: otherwise (no modifier extension, or a format/modifier the device will
//!   not import as an image) each file is imported as a `VkBuffer`, and every acquisition
//!   copies it into a device-local image with `vkCmdCopyBufferToImage`, one region per plane,
//!   with `bufferRowLength` from the stride. Only LINEAR (or, in the implicit world,
//!   implicit) layouts can be copied this way; tiled ones need the conversion pipelines.
//!
//! - **ReadCopy**: a file that can shrink under a mapping (an unsealed memfd, a regular file
//!   nobody vouched for: [`FdClass::Shrinkable`]) is never handed to Vulkan. Every acquisition
//!   reads its planes into memory dmabridge owns (`pread`) and copies that into the image,
//!   so a sender that truncates the file gets a clean error, not a SIGBUS in the receiver.
//!   A caller that requires zero-copy ([`ImportOptions::require_zero_copy`]) gets an error
//!   naming the missing seal instead. A read-only fd (what a read-only collection holder
//!   gets) takes this path too where the driver imports by mapping the fd writable
//!   ([`DeviceInfo::imports_by_mapping`](crate::DeviceInfo::imports_by_mapping): lavapipe,
//!   which then refuses the fd and closes it although the spec leaves it with the caller):
//!   a memfd's bytes are read with `pread`, a dma-buf's through a read-only mapping inside
//!   its `DMA_BUF_IOCTL_SYNC` bracket.
//!
//! Nothing reaches the driver before [`check_import_with`] has passed: lavapipe mmaps the fd,
//! so a layout that overruns the file would crash inside Mesa.
//!
//! # Handing frames over
//! A dma-buf's memory belongs to its producer between frames. Before each use the consumer
//! *acquires* it ([`ImportedImage::record_acquire`]: a queue family ownership transfer from
//! `VK_QUEUE_FAMILY_FOREIGN_EXT`, from the `GENERAL` layout the producer released it in; on
//! the copy path, the copy itself), and after its last use *releases* it
//! ([`ImportedImage::record_release`]) so that the producer may write the next frame.

use std::os::fd::{AsFd, AsRawFd, IntoRawFd};
use std::sync::Arc;

use ash::vk;
use dmabridge_interop::dmabuf::{
    check_import_with, CheckedImport, DmaBuf, FdClass, FdTrust, FileId, ImportCheckError, ImportFacts, ReadError,
};
use dmabridge_interop::{format_info, Format, Fourcc, Layout, Modifier};

use crate::resources::buffer::{import_memory, BufferError, GpuBuffer, ImportedBuffer, PlaneRead, PlaneReadError};
use crate::device::format_support::{FormatSupportError, SupportQuery};
use crate::error::{VkError, VkResultExt};
use crate::resources::image::{
    barrier_aspect, buffer_barrier, chain_view_formats, image_2d, image_barrier, memory_plane_aspect, record_barrier, DeviceImage,
    ImageAccess, ImageError, ImageState, Tracked,
};
use crate::device::requirements::Capability;
use crate::device::submit::{Completion, Garbage, SubmitError, SubmitOptions, Submission};
use crate::resources::transfer::plane_copy;
use crate::device::usage::{ImageUse, WiderUse};
use crate::device::vk_format::{self, Mapping, VkFormatEntry};
use crate::Engine;

/// Which way a buffer came into Vulkan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImportPath {
    /// The image aliases the dma-buf's memory: zero copies.
    Explicit,
    /// The dma-buf was imported as buffers and is copied into a device image on acquire.
    BufferCopy,
    /// The file can shrink, or its fd is read-only and the driver would map it writable,
    /// so it is read into dmabridge's memory on every acquire (`pread`; a dma-buf through a
    /// guarded read-only mapping) and copied into a device image; Vulkan never sees it.
    ReadCopy,
    /// `OPAQUE_FD` memory of another instance of the same driver: zero copies.
    OpaqueFd,
}

impl std::fmt::Display for ImportPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ImportPath::Explicit => "explicit (zero-copy)",
            ImportPath::BufferCopy => "buffer-copy (fallback)",
            ImportPath::ReadCopy => "read-copy (read into dmabridge's memory, never given to the driver: the fd can shrink, or is read-only)",
            ImportPath::OpaqueFd => "opaque-fd (zero-copy, same driver)",
        })
    }
}

/// Why an import failed. Layout problems come first, as [`ImportCheckError`], in the
/// fixed order of the checks.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The fourcc has no entry in dmabridge's Vulkan format table.
    #[error("{0} has no Vulkan format in dmabridge's table")]
    UnknownFourcc(Fourcc),
    /// One of the layout checks failed (before any driver call).
    #[error(transparent)]
    Check(#[from] ImportCheckError),
    /// The capability query failed.
    #[error(transparent)]
    Caps(#[from] FormatSupportError),
    /// The driver needs more memory for the image than the fd holds.
    #[error("the driver needs {needed} bytes for plane {plane}'s memory but the fd has {fd_size}")]
    ImageLargerThanFd { plane: usize, needed: u64, fd_size: u64 },
    /// The copy path copies whole texels.
    #[error("plane {plane}: stride {stride} is not a whole number of {texel}-byte texels, which a buffer copy needs")]
    StrideNotTexelAligned { plane: usize, stride: u64, texel: u64 },
    /// The copy path copies from texel-aligned offsets.
    #[error("plane {plane}: offset {offset} is not a multiple of the {texel}-byte texel, which a buffer copy needs")]
    OffsetNotTexelAligned { plane: usize, offset: u64, texel: u64 },
    /// A tiled layout the device does not import needs a detiling conversion, not a copy.
    #[error("layout {0} cannot be copied as linear rows; it needs a detiling conversion")]
    NeedsConversion(Layout),
    /// The device lacks a capability the import needs.
    #[error("this device lacks the {0} capability")]
    Unsupported(Capability),
    /// OPAQUE_FD memory from elsewhere means nothing here.
    #[error("OPAQUE_FD memory from another device or driver (device UUID {theirs_device}, driver UUID {theirs_driver}; ours {ours_device}, {ours_driver}) cannot be imported")]
    ForeignOpaqueFd { theirs_device: String, theirs_driver: String, ours_device: String, ours_driver: String },
    /// The exporter's image and ours disagree on memory.
    #[error("the exporter's image needs {theirs} bytes in memory type {type_index}; the same image here needs {ours} bytes in types {ours_types:#x}")]
    OpaqueMismatch { theirs: u64, ours: u64, type_index: u32, ours_types: u32 },
    /// No memory type can import the fd for the image.
    #[error("no memory type can import this fd for the image")]
    NoMemoryType,
    /// An fd could not be duplicated.
    #[error("cannot duplicate the fd of plane {plane}: {source}")]
    Dup { plane: usize, source: std::io::Error },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// A buffer over a file could not be imported.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// The copy path's image could not be made.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// Submitting or waiting failed.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The caller required zero-copy and this buffer cannot be imported so.
    #[error("zero-copy import is not possible: {0}")]
    NotZeroCopy(String),
    /// A plane's file could not be read (the read-copy path): it shrank, or was never that long.
    #[error("plane {plane}: {source}")]
    Read { plane: usize, source: ReadError },
    /// A cached import's file is not what it was when it was checked.
    #[error("plane {plane}: the buffer changed since it was imported: {detail}")]
    Changed { plane: usize, detail: String },
    /// The import asked for more than the use its layout was negotiated for
    /// ([`ImportOptions::negotiated`]).
    #[error(transparent)]
    WiderThanNegotiated(#[from] WiderUse),
}

/// How [`Engine::import_dmabuf_with`] may import.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ImportOptions {
    /// Whether regular files that are not sealed count as fixed-size (the caller vouches
    /// that nobody truncates them): see [`FdTrust`].
    pub trust: FdTrust,
    /// Refuse every path but a zero-copy one, naming what stands in the way (a missing
    /// `F_SEAL_SHRINK`, a layout the device cannot import explicitly).
    pub require_zero_copy: bool,
    /// The use the buffer's layout was negotiated for (the consumer's
    /// [`crate::ParticipantRequest::image_use`]): an import for anything wider is refused
    /// with [`ImportError::WiderThanNegotiated`] before the driver sees it.
    pub negotiated: Option<ImageUse>,
}

/// Where the copy paths' bytes come from.
enum Source {
    /// Buffers over the dma-buf's files (mapped by the driver), one per distinct file.
    Mapped(Vec<(FileId, ImportedBuffer)>),
    /// The descriptor's own dups, read with `pread` on every acquisition into a staging
    /// buffer of `len` bytes laid out as `planes` say.
    Read { buf: DmaBuf, len: u64, planes: Vec<PlaneRead> },
}

/// The copy paths' source, and the regions that copy it into the device image.
struct CopySource {
    source: Source,
    /// Per plane: the index of its buffer (mapped) or its offset in the staging buffer (read),
    /// and the region (whose `buffer_offset` is relative to that).
    regions: Vec<(usize, vk::BufferImageCopy)>,
    /// The device-local image the frame is copied into.
    target: DeviceImage,
}

impl CopySource {
    fn track(&self, until: Completion) {
        self.target.track(until);
        if let Source::Mapped(files) = &self.source {
            for (_, b) in files {
                b.track(until);
            }
        }
    }
}

struct Inner {
    engine: Engine,
    path: ImportPath,
    fourcc: Fourcc,
    layout: Layout,
    entry: &'static VkFormatEntry,
    width: u32,
    height: u32,
    /// The image consumers use (the target image, on the copy path).
    image: vk::Image,
    /// The image and memories this import made (empty on the copy path, whose image is `copy.target`).
    owned_image: bool,
    memories: Vec<vk::DeviceMemory>,
    copy: Option<CopySource>,
    image_use: ImageUse,
    disjoint: bool,
    /// Per plane, as checked at import: where its bytes end in its file, and what the file is.
    checked: Vec<(u64, FdClass)>,
    trust: FdTrust,
    tracked: Tracked,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let mut garbage = Vec::new();
        if self.owned_image {
            garbage.push(Garbage::Image(self.image));
        }
        garbage.extend(self.memories.drain(..).map(Garbage::Memory));
        let uses = self.tracked.uses.snapshot();
        if let Some(copy) = &self.copy {
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
pub struct ImportedImage(Arc<Inner>);

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

fn uuid_hex(u: &[u8; 16]) -> String {
    u.iter().map(|b| format!("{b:02x}")).collect()
}

impl ImportedImage {
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

    /// Checks `buf` (a new descriptor of the same files) against what the import checked:
    /// each plane's file is still the same kind (a seal cannot be lost, but a file can be
    /// replaced) and still holds the plane's bytes. What the import cache runs on every hit.
    pub fn recheck(&self, buf: &DmaBuf) -> Result<(), ImportError> {
        for (i, (end, class)) in self.0.checked.iter().enumerate() {
            let fd = buf.plane(i).map(|p| p.fd).ok_or(ImportError::Changed { plane: i, detail: "the plane is gone".into() })?;
            let now = dmabridge_interop::dmabuf::classify(fd, self.0.trust)
                .map_err(|e| ImportError::Changed { plane: i, detail: e.to_string() })?;
            if now != *class {
                return Err(ImportError::Changed { plane: i, detail: format!("the file was a {class} and is a {now} now") });
            }
            let size = dmabridge_interop::dmabuf::file_size(fd, now).map_err(|e| ImportError::Changed { plane: i, detail: format!("cannot use the fd: {e}") })?;
            if size < *end {
                return Err(ImportError::Changed { plane: i, detail: format!("the file shrank to {size} bytes; the plane ends at {end}") });
            }
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
        barrier_aspect(self.0.entry.vk_planes, self.0.disjoint)
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
        if let Some(copy) = &self.0.copy {
            // The bytes to copy: the mapped files (acquired from the producer's side around the
            // copy), or a staging buffer filled by pread now.
            let (buffers, staging): (Vec<vk::Buffer>, Option<GpuBuffer>) = match &copy.source {
                Source::Mapped(files) => (files.iter().map(|(_, b)| b.buffer()).collect(), None),
                Source::Read { buf, len, planes } => {
                    let staging = GpuBuffer::read_planes(&self.0.engine, buf, *len, planes).map_err(|e| match e {
                        PlaneReadError::Buffer(e) => ImportError::Buffer(e),
                        PlaneReadError::NoPlane(plane) => ImportError::Dup { plane, source: std::io::Error::other("no such plane") },
                        PlaneReadError::Read { plane, source } => ImportError::Read { plane, source },
                    })?;
                    (vec![staging.buffer()], Some(staging))
                }
            };
            let external = staging.is_none();
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
                for (src, region) in &copy.regions {
                    device.cmd_copy_buffer_to_image(cmd, buffers[*src], self.0.image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, std::slice::from_ref(region));
                }
                if external {
                    record_barrier(device, cmd, (vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::BOTTOM_OF_PIPE), &[], &release, &[]);
                }
                record_barrier(device, cmd, (vk::PipelineStageFlags::TRANSFER, to.stages), &[], &[], &[to_use]);
            }
            copy.track(until);
            if let Some(staging) = staging {
                // Dropped now; its memory goes once the copy is done.
                staging.track(until);
            }
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
        if self.0.copy.is_some() || !state.owned {
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

/// Everything created so far, destroyed if the import fails half way.
struct Building<'a> {
    device: &'a ash::Device,
    image: vk::Image,
    memories: Vec<vk::DeviceMemory>,
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        // SAFETY: objects of this device that no submission uses yet.
        unsafe {
            if self.image != vk::Image::null() {
                self.device.destroy_image(self.image, None);
            }
            for m in self.memories.drain(..) {
                self.device.free_memory(m, None);
            }
        }
    }
}

impl Building<'_> {
    fn finish(mut self) -> (vk::Image, Vec<vk::DeviceMemory>) {
        let out = (self.image, std::mem::take(&mut self.memories));
        self.image = vk::Image::null();
        out
    }
}

/// Whether the planes may be given to the driver: fixed-size files, and no read-only fd
/// where the driver would map it writable. A memfd or regular file is only ever imported by
/// mapping; a dma-buf is, by a driver that [`imports_by_mapping`](crate::DeviceInfo::imports_by_mapping)
/// (lavapipe refuses an `O_RDONLY` dma-buf on Linux 6.12, found in the kernel lab).
fn mappable(engine: &Engine, checked: &CheckedImport<'_>) -> bool {
    not_mappable(engine, checked).is_none()
}

/// Why the planes may not be given to the driver ([`mappable`]), or `None` where they may:
/// the one rule of every import of a caller's fd, the image import's and the detile's
/// ([`crate::Converter::detile_dmabuf`]) alike. Where it says why, the bytes are read
/// into dmabridge's memory instead, or a caller that requires zero-copy is told why not.
pub(crate) fn not_mappable(engine: &Engine, checked: &CheckedImport<'_>) -> Option<String> {
    if !checked.zero_copy_safe() {
        return Some(not_fixed(checked));
    }
    let maps = engine.info().imports_by_mapping();
    (checked.dmabuf().read_only() && checked.planes().iter().any(|p| p.class != FdClass::DmaBuf || maps))
        .then(|| "its fds are read-only, and the driver maps an imported file writable".to_owned())
}

impl Engine {
    /// [`Engine::import_dmabuf_with`] with the default options: nothing trusted, copy
    /// paths allowed.
    pub fn import_dmabuf(&self, buf: &DmaBuf, image_use: impl Into<ImageUse>) -> Result<ImportedImage, ImportError> {
        self.import_dmabuf_with(buf, image_use, ImportOptions::default())
    }

    /// Checks `buf`'s layout and its fds, then imports it for `usage`: explicitly where the
    /// device can and the files cannot shrink, else through a copy path (see the module
    /// docs). The descriptor's fds are only borrowed (dups go to Vulkan, or to the
    /// read-copy path's own copy of the descriptor).
    ///
    /// The image is created for exactly `image_use` (create flags and view formats too),
    /// except `DISJOINT`, which the buffer decides: one fd per plane or not.
    pub fn import_dmabuf_with(
        &self,
        buf: &DmaBuf,
        image_use: impl Into<ImageUse>,
        options: ImportOptions,
    ) -> Result<ImportedImage, ImportError> {
        let mut usage = image_use.into();
        usage.create &= !vk::ImageCreateFlags::DISJOINT;
        if let Some(negotiated) = options.negotiated {
            negotiated.check_within(&usage)?;
        }
        let checks = dmabridge_interop::dmabuf::ImportOptions { trust: options.trust, require_fixed_size: options.require_zero_copy };
        let entry = vk_format::to_vk(buf.fourcc()).ok_or(ImportError::UnknownFourcc(buf.fourcc()))?;
        if !self.has_capability(Capability::DmaBufImport) || self.external_memory_fd().is_none() {
            return Err(ImportError::Unsupported(Capability::DmaBufImport));
        }
        let caps = self.format_support(&SupportQuery::new(buf.fourcc(), usage))?;
        let explicit_facts = |m: Modifier| -> Option<ImportFacts> {
            let c = caps.get(m).filter(|c| c.can_import() && self.has_modifiers())?;
            let limits = c.limits?;
            Some(ImportFacts {
                memory_plane_count: c.plane_count as usize,
                max_width: limits.max_extent.width,
                max_height: limits.max_extent.height,
                disjoint: c.tiling_features.contains(vk::FormatFeatureFlags2::DISJOINT),
            })
        };
        let explicit = match buf.layout() {
            Layout::Explicit(m) => explicit_facts(m).is_some(),
            Layout::Implicit => false,
        };
        if explicit {
            let checked = check_import_with(
                buf,
                &|f: Format| match f.layout {
                    Layout::Explicit(m) if f.fourcc == buf.fourcc() => explicit_facts(m),
                    _ => None,
                },
                checks,
            )?;
            let why_not = || not_mappable(self, &checked).unwrap_or_default();
            if mappable(self, &checked) {
                self.import_explicit(&checked, entry, usage, options.trust)
            } else if options.require_zero_copy {
                Err(ImportError::NotZeroCopy(why_not()))
            } else if buf.layout() == Layout::Explicit(Modifier::LINEAR) {
                self.import_by_copy(&checked, entry, usage, options.trust)
            } else {
                // Tiled bytes read into memory are still tiled: no copy makes them an image.
                Err(ImportError::NotZeroCopy(why_not()))
            }
        } else {
            if options.require_zero_copy {
                let why = if self.has_modifiers() {
                    format!("the device does not import {} explicitly for this usage", buf.format())
                } else {
                    "the device has no VK_EXT_image_drm_format_modifier: it imports dma-bufs only by copying".to_owned()
                };
                return Err(ImportError::NotZeroCopy(why));
            }
            let copy_facts = self.copy_path_facts(buf, entry, &usage);
            let checked = check_import_with(buf, &|f: Format| {
                if f.fourcc != buf.fourcc() {
                    return None;
                }
                match f.layout {
                    Layout::Explicit(Modifier::LINEAR) => copy_facts,
                    // The implicit world: a device without modifiers shares LINEAR memory.
                    Layout::Implicit if !self.has_modifiers() => copy_facts,
                    _ => None,
                }
            }, checks);
            match checked {
                Err(ImportCheckError::LayoutNotAllowed { .. }) if copy_facts.is_some() => Err(ImportError::NeedsConversion(buf.layout())),
                Err(e) => Err(e.into()),
                Ok(checked) => self.import_by_copy(&checked, entry, usage, options.trust),
            }
        }
    }

    /// Imports another engine's `OPAQUE_FD` export. The UUIDs are checked first: opaque
    /// memory means nothing to a different device or driver build
    /// (VUID-VkImportMemoryFdInfoKHR-fd-00668), so it is refused before Vulkan sees it.
    /// Takes ownership of a dup of `share.fd`; the share keeps its own fd.
    pub fn import_opaque(&self, share: &crate::dmabuf::export::OpaqueFd) -> Result<ImportedImage, ImportError> {
        let info = self.info();
        if share.device_uuid != info.device_uuid || share.driver_uuid != info.driver_uuid {
            return Err(ImportError::ForeignOpaqueFd {
                theirs_device: uuid_hex(&share.device_uuid),
                theirs_driver: uuid_hex(&share.driver_uuid),
                ours_device: uuid_hex(&info.device_uuid),
                ours_driver: uuid_hex(&info.driver_uuid),
            });
        }
        let entry = vk_format::to_vk(share.fourcc).ok_or(ImportError::UnknownFourcc(share.fourcc))?;
        let device = self.device();
        let handle = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
        let mut external = vk::ExternalMemoryImageCreateInfo::default().handle_types(handle);
        let views = share.image_use.view_formats(entry.vk_format);
        let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&views);
        let image_info = chain_view_formats(
            image_2d(entry.vk_format, (share.width, share.height), vk::ImageTiling::OPTIMAL, &share.image_use).push_next(&mut external),
            &mut list,
        );
        // SAFETY: the same parameters the exporter, a device with our UUIDs, created its
        // image with (VUID-VkImageCreateInfo-pNext-00990 holds there, so here too).
        let image = unsafe { device.create_image(&image_info, None) }.vk("vkCreateImage")?;
        let mut building = Building { device, image, memories: Vec::new() };
        // SAFETY: image of this device, not yet bound.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        if reqs.size != share.allocation_size || reqs.memory_type_bits & (1 << share.memory_type_index) == 0 {
            return Err(ImportError::OpaqueMismatch {
                theirs: share.allocation_size,
                ours: reqs.size,
                type_index: share.memory_type_index,
                ours_types: reqs.memory_type_bits,
            });
        }
        let fd = share.fd.try_clone().map_err(|source| ImportError::Dup { plane: 0, source })?;
        let mut import = vk::ImportMemoryFdInfoKHR::default().handle_type(handle).fd(fd.as_raw_fd());
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().image(image);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(share.allocation_size)
            .memory_type_index(share.memory_type_index)
            .push_next(&mut import)
            .push_next(&mut dedicated);
        let before = dmabridge_interop::dmabuf::FileId::of(fd.as_fd()).ok();
        // SAFETY: same device and driver (UUIDs checked), the exporter's size and memory type
        // (VUID-VkMemoryAllocateInfo-allocationSize-01742), dedicated to an identical image.
        let memory = match unsafe { device.allocate_memory(&alloc, None) }.vk("vkAllocateMemory") {
            Ok(m) => m,
            Err(e) => {
                crate::device::memory::close_after_failed_import(fd, before);
                return Err(e.into());
            }
        };
        // Vulkan owns the fd now (a successful import transfers ownership).
        let _ = fd.into_raw_fd();
        building.memories.push(memory);
        // SAFETY: dedicated memory of exactly the image's size, offset 0.
        unsafe { device.bind_image_memory(image, memory, 0) }.vk("vkBindImageMemory")?;
        let (image, memories) = building.finish();
        Ok(ImportedImage(Arc::new(Inner {
            engine: self.clone(),
            path: ImportPath::OpaqueFd,
            fourcc: share.fourcc,
            layout: Layout::Implicit,
            entry,
            width: share.width,
            height: share.height,
            image,
            owned_image: true,
            memories,
            copy: None,
            image_use: share.image_use,
            disjoint: false,
            checked: Vec::new(),
            trust: FdTrust::Untrusted,
            tracked: Tracked::new(false),
        })))
    }

    /// Limits of the copy path: a device-local optimal image of the format with `usage`
    /// plus TRANSFER_DST; planes may live in any files.
    fn copy_path_facts(&self, buf: &DmaBuf, entry: &VkFormatEntry, usage: &ImageUse) -> Option<ImportFacts> {
        let planes = format_info(buf.fourcc())?.plane_count();
        let props = self.adapter().copy_target_properties(entry.vk_format, usage)?;
        Some(ImportFacts { memory_plane_count: planes, max_width: props.max_extent.width, max_height: props.max_extent.height, disjoint: true })
    }

    fn import_explicit(
        &self,
        checked: &CheckedImport<'_>,
        entry: &'static VkFormatEntry,
        usage: ImageUse,
        trust: FdTrust,
    ) -> Result<ImportedImage, ImportError> {
        let buf = checked.dmabuf();
        let Layout::Explicit(modifier) = buf.layout() else {
            return Err(ImportError::NeedsConversion(buf.layout()));
        };
        let device = self.device();
        let plane_layouts: Vec<vk::SubresourceLayout> = checked
            .planes()
            .iter()
            .map(|p| vk::SubresourceLayout {
                offset: p.offset,
                // VUID-VkImageDrmFormatModifierExplicitCreateInfoEXT-size-02267: size must be 0.
                size: 0,
                row_pitch: p.stride,
                array_pitch: 0,
                depth_pitch: 0,
            })
            .collect();
        let mut explicit =
            vk::ImageDrmFormatModifierExplicitCreateInfoEXT::default().drm_format_modifier(modifier.raw()).plane_layouts(&plane_layouts);
        let mut external = vk::ExternalMemoryImageCreateInfo::default().handle_types(vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT);
        let mut flags = usage.create_flags(entry.vk_format);
        if checked.disjoint() {
            flags |= vk::ImageCreateFlags::DISJOINT;
        }
        let views = usage.view_formats(entry.vk_format);
        let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&views);
        let info = image_2d(entry.vk_format, (buf.width(), buf.height()), vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT, &usage)
            .flags(flags)
            .push_next(&mut explicit)
            .push_next(&mut external);
        let info = chain_view_formats(info, &mut list);
        // SAFETY: the capability query accepted this format, modifier, use (usage, create
        // flags, view formats) and handle type (VUID-VkImageCreateInfo-pNext-00990); check_import verified the plane count equals drmFormatModifierPlaneCount
        // (VUID-VkImageDrmFormatModifierExplicitCreateInfoEXT-drmFormatModifierPlaneCount-02265)
        // and that every plane lies inside its fd.
        let image = unsafe { device.create_image(&info, None) }.vk("vkCreateImage")?;
        let mut building = Building { device, image, memories: Vec::new() };
        let import = |fd_plane: usize, reqs: vk::MemoryRequirements, file_size: u64, dedicated: Option<vk::Image>| {
            let fd = buf.dup_fd(fd_plane).map_err(|e| ImportError::Dup { plane: fd_plane, source: std::io::Error::other(e) })?;
            import_memory(self, fd, reqs, file_size, dedicated).map_err(|e| match e {
                BufferError::FdTooSmall { needed, fd_size } => ImportError::ImageLargerThanFd { plane: fd_plane, needed, fd_size },
                BufferError::NoMemoryType => ImportError::NoMemoryType,
                other => other.into(),
            })
        };
        if checked.disjoint() {
            let mut aspects = Vec::new();
            for (i, p) in checked.planes().iter().enumerate() {
                let aspect = memory_plane_aspect(i);
                let mut plane_info = vk::ImagePlaneMemoryRequirementsInfo::default().plane_aspect(aspect);
                let req_info = vk::ImageMemoryRequirementsInfo2::default().image(image).push_next(&mut plane_info);
                let mut reqs2 = vk::MemoryRequirements2::default();
                // SAFETY: a DISJOINT image queried per memory plane (VUID-VkImageMemoryRequirementsInfo2-image-02279).
                unsafe { device.get_image_memory_requirements2(&req_info, &mut reqs2) };
                building.memories.push(import(i, reqs2.memory_requirements, p.file_size, None)?);
                aspects.push(aspect);
            }
            let mut plane_infos: Vec<vk::BindImagePlaneMemoryInfo> =
                aspects.iter().map(|a| vk::BindImagePlaneMemoryInfo::default().plane_aspect(*a)).collect();
            let binds: Vec<vk::BindImageMemoryInfo> = plane_infos
                .iter_mut()
                .zip(&building.memories)
                .map(|(pi, m)| vk::BindImageMemoryInfo::default().image(image).memory(*m).push_next(pi))
                .collect();
            // SAFETY: one bind per memory plane of a DISJOINT image, each with its plane aspect
            // (VUID-VkBindImageMemoryInfo-image-07736).
            unsafe { device.bind_image_memory2(&binds) }.vk("vkBindImageMemory2")?;
        } else {
            // SAFETY: image of this device, not yet bound.
            let reqs = unsafe { device.get_image_memory_requirements(image) };
            let file_size = checked.planes().first().map_or(0, |p| p.file_size);
            building.memories.push(import(0, reqs, file_size, Some(image))?);
            // SAFETY: dedicated memory of exactly the image's size, offset 0.
            unsafe { device.bind_image_memory(image, building.memories[0], 0) }.vk("vkBindImageMemory")?;
        }
        tracing::debug!(fourcc = %buf.fourcc(), %modifier, "imported explicitly");
        let disjoint = checked.disjoint();
        let (image, memories) = building.finish();
        Ok(ImportedImage(Arc::new(Inner {
            engine: self.clone(),
            path: ImportPath::Explicit,
            fourcc: buf.fourcc(),
            layout: buf.layout(),
            entry,
            width: buf.width(),
            height: buf.height(),
            image,
            owned_image: true,
            memories,
            copy: None,
            image_use: usage,
            disjoint,
            checked: checked.planes().iter().map(|p| (p.end, p.class)).collect(),
            trust,
            tracked: Tracked::new(false),
        })))
    }

    fn import_by_copy(
        &self,
        checked: &CheckedImport<'_>,
        entry: &'static VkFormatEntry,
        usage: ImageUse,
        trust: FdTrust,
    ) -> Result<ImportedImage, ImportError> {
        let buf = checked.dmabuf();
        let info = format_info(buf.fourcc()).ok_or(ImportError::UnknownFourcc(buf.fourcc()))?;
        let usage = ImageUse { usage: usage.usage | vk::ImageUsageFlags::TRANSFER_DST, ..usage };
        let target = DeviceImage::new(self, entry.vk_format, (buf.width(), buf.height()), usage)?;
        let mapped = mappable(self, checked);
        let mut files: Vec<(FileId, ImportedBuffer)> = Vec::new();
        let mut read_planes: Vec<PlaneRead> = Vec::new();
        let mut staging_len = 0u64;
        let mut regions = Vec::new();
        for (i, p) in checked.planes().iter().enumerate() {
            // YV12 keeps V before U: its plane 1 is Vulkan's plane 2 (Cr) and vice versa.
            let vk_plane = if entry.mapping == Mapping::ChromaSwapped && entry.vk_planes == 3 && i > 0 { 3 - i } else { i };
            let texel = info.planes.get(i).map_or(1, |pl| pl.cpp as u64);
            // Packed 4:2:2 formats copy in 2x1 blocks of 4 bytes.
            let block = if entry.vk_planes == 1 && info.is_yuv { 4 } else { texel };
            if p.stride % block != 0 {
                return Err(ImportError::StrideNotTexelAligned { plane: i, stride: p.stride, texel: block });
            }
            if p.offset % block != 0 {
                return Err(ImportError::OffsetNotTexelAligned { plane: i, offset: p.offset, texel: block });
            }
            // Where the plane's first byte is in the buffer the copy reads: its offset in its
            // file (mapped), or where the read-copy path puts it in its staging buffer.
            let (src, buffer_offset) = if !mapped {
                let at = staging_len;
                read_planes.push(PlaneRead { plane: i, file_offset: p.offset, at, len: p.size() });
                staging_len = at
                    .checked_add(p.size())
                    .map(|e| e.div_ceil(16) * 16)
                    .ok_or(ImportError::Read { plane: i, source: ReadError::Overflow { offset: at, len: p.size() } })?;
                (0, at)
            } else {
                let src = match files.iter().position(|(f, _)| *f == p.file) {
                    Some(s) => s,
                    None => {
                        let size = checked.planes().iter().filter(|q| q.file == p.file).map(|q| q.end).max().unwrap_or(p.end);
                        let fd = buf.plane(i).map(|pl| pl.fd).ok_or(ImportError::Dup {
                            plane: i,
                            source: std::io::Error::other("the descriptor has no such plane"),
                        })?;
                        files.push((p.file, ImportedBuffer::import_trusting(self, fd, size, vk::BufferUsageFlags::TRANSFER_SRC, trust)?));
                        files.len() - 1
                    }
                };
                (src, p.offset)
            };
            let row_length =
                u32::try_from(p.stride / texel).map_err(|_| ImportError::StrideNotTexelAligned { plane: i, stride: p.stride, texel })?;
            let extent = (info.plane_width(i, buf.width()), info.plane_height(i, buf.height()));
            regions.push((src, plane_copy(entry, vk_plane, buffer_offset, row_length, extent)));
        }
        let (path, source) = if mapped {
            tracing::debug!(fourcc = %buf.fourcc(), "imported through the buffer-copy path");
            (ImportPath::BufferCopy, Source::Mapped(files))
        } else {
            tracing::debug!(fourcc = %buf.fourcc(), "a file can shrink: imported through the read-copy path");
            let own = buf.try_clone().map_err(|e| ImportError::Dup { plane: 0, source: std::io::Error::other(e) })?;
            (ImportPath::ReadCopy, Source::Read { buf: own, len: staging_len, planes: read_planes })
        };
        let image = target.image();
        Ok(ImportedImage(Arc::new(Inner {
            engine: self.clone(),
            path,
            fourcc: buf.fourcc(),
            layout: buf.layout(),
            entry,
            width: buf.width(),
            height: buf.height(),
            image,
            owned_image: false,
            memories: Vec::new(),
            copy: Some(CopySource { source, regions, target }),
            image_use: usage,
            disjoint: false,
            checked: checked.planes().iter().map(|p| (p.end, p.class)).collect(),
            trust,
            tracked: Tracked::new(true),
        })))
    }
}

/// Why a checked buffer is not zero-copy: the first plane whose file can shrink.
fn not_fixed(checked: &CheckedImport<'_>) -> String {
    checked
        .planes()
        .iter()
        .enumerate()
        .find_map(|(i, p)| match p.class {
            FdClass::Shrinkable(reason) => Some(format!("plane {i}: {reason}")),
            _ => None,
        })
        .unwrap_or_else(|| "a plane's file can shrink".into())
}
