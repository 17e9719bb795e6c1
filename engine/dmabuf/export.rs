//! Allocate an image and export it as a dma-buf.
//!
//! With `VK_EXT_image_drm_format_modifier` the image is created from the acceptable
//! modifier list (seed 001, "Allocation"), and afterwards the driver is asked which one it
//! chose and where each memory plane lies: "Allocators are not permitted ... to select a
//! modifier not provided within the acceptable list", so a choice outside the list is an
//! error, not a warning. Without the extension the image uses LINEAR tiling, which is the
//! DRM LINEAR layout (rows at the `rowPitch` the driver reports), and is exported only
//! where the driver can export DMA_BUF at all.

use std::os::fd::OwnedFd;

use ash::vk;
use dmabridge_interop::dmabuf::{check_explicit_layout, take_returned_fd, DescriptorError, DmaBuf, LayoutRuleError};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{Fourcc, Layout, Modifier};

use crate::resources::buffer::GpuBuffer;
use crate::device::format_support::{FormatSupportError, SupportQuery};
use crate::error::{VkError, VkResultExt};
use crate::resources::image::{barrier_aspect, chain_view_formats, image_2d, image_barrier, memory_plane_aspect, record_barrier, ImageAccess, ImageState, Tracked};
use crate::device::requirements::Capability;
use crate::device::submit::{Completion, Garbage, SubmitError, SubmitOptions, Submission};
use crate::resources::transfer::{plane_regions, TransferError};
use crate::device::usage::{ImageUse, WiderUse};
use crate::device::vk_format;
use crate::Engine;

/// What to allocate.
#[derive(Debug, Clone)]
pub struct ExportRequest {
    pub fourcc: Fourcc,
    pub width: u32,
    pub height: u32,
    /// Exactly how the exporting side will use the image: usage (rendering, storage,
    /// transfer...), create flags and view formats. The capability query and the image are
    /// both made for this use. `DISJOINT` is refused: an export is one allocation.
    pub image_use: ImageUse,
    /// The acceptable layouts from negotiation. `Layout::Implicit` in the list means an
    /// implicit allocation is acceptable too. An empty list means "whatever the device
    /// exports for this use" (explicit where it can).
    pub acceptable: Vec<Layout>,
    /// The use `acceptable` was negotiated for (the producer's
    /// [`crate::ParticipantRequest::image_use`]): an image for a wider use is refused with
    /// [`ExportError::WiderThanNegotiated`], since the driver never agreed to those layouts
    /// for it. `None`: no negotiation to answer to.
    pub negotiated: Option<ImageUse>,
}

impl ExportRequest {
    /// A `width` x `height` image of `fourcc` for `image_use`, in whatever layout the device
    /// exports for it.
    pub fn new(fourcc: Fourcc, width: u32, height: u32, image_use: impl Into<ImageUse>) -> Self {
        ExportRequest { fourcc, width, height, image_use: image_use.into(), acceptable: Vec::new(), negotiated: None }
    }

    /// Only these layouts (from negotiation).
    pub fn with_acceptable(mut self, acceptable: impl IntoIterator<Item = Layout>) -> Self {
        self.acceptable = acceptable.into_iter().collect();
        self
    }
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0} has no Vulkan format in dmabridge's table")]
    UnknownFourcc(Fourcc),
    #[error("a {width}x{height} image has no pixels")]
    ZeroExtent { width: u32, height: u32 },
    #[error(transparent)]
    Caps(#[from] FormatSupportError),
    #[error("none of the acceptable layouts [{}] of {fourcc} can be exported for this usage; the device exports [{}]",
        .acceptable.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", "),
        .exportable.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "))]
    NoAcceptableModifier { fourcc: Fourcc, acceptable: Vec<Layout>, exportable: Vec<Modifier> },
    #[error("the device cannot export {fourcc} as a DMA_BUF (no VK_EXT_image_drm_format_modifier, and LINEAR tiling is not exportable: on lavapipe this needs udmabuf)")]
    DmaBufExportUnsupported { fourcc: Fourcc },
    #[error("{width}x{height} exceeds the device's maximum {max_width}x{max_height} for {fourcc}")]
    ExtentTooLarge { fourcc: Fourcc, width: u32, height: u32, max_width: u32, max_height: u32 },
    #[error("the driver chose modifier {chosen}, which is not in the acceptable list")]
    ModifierNotRequested { chosen: Modifier },
    /// The driver placed a plane elsewhere than the explicit layout asked.
    /// A plane that spans more bytes than its place is not honoured either: it would run
    /// into the next plane or past the end of the allocation the layout was sized for.
    #[error("the driver put plane {plane} at offset {} with row pitch {} spanning {} bytes, not the asked offset {} and pitch {} within {} bytes", .got.offset, .got.stride, .got.size, .asked.offset, .asked.stride, .asked.size)]
    LayoutNotHonoured { plane: usize, asked: PlaneLayout, got: PlaneLayout },
    /// An explicit layout with the wrong number of memory planes for its modifier.
    #[error("{modifier} has {expected} memory planes, the explicit layout gives {got}")]
    LayoutPlaneCount { modifier: Modifier, expected: usize, got: usize },
    /// The explicit layout breaks a rule dmabridge knows, before any driver call: the plane
    /// and the rule are named ([`LayoutRuleError`]).
    #[error("explicit layout for {modifier}: {rule}")]
    LayoutRule { modifier: Modifier, rule: LayoutRuleError },
    /// The driver refused an explicit layout that passed dmabridge's rules
    /// (`vkCreateImage`: `VK_ERROR_INVALID_DRM_FORMAT_MODIFIER_PLANE_LAYOUT_EXT`): its own
    /// rules (radv, for one, wants its own pitch and metadata offsets for a tiled or
    /// compressed modifier) are not all written down anywhere dmabridge can read them.
    #[error("the driver refused the explicit layout for {modifier} (planes {}): {result}",
        .planes.iter().map(|p| format!("offset {} pitch {}", p.offset, p.stride)).collect::<Vec<_>>().join("; "))]
    LayoutRefused { modifier: Modifier, planes: Vec<PlaneLayout>, result: vk::Result },
    /// The image was created, laid out and bound, but the driver gave no fd for its memory
    /// (`vkGetMemoryFdKHR` failed). A driver with no way to share memory (Mesa's drm-shim
    /// has no PRIME, so radv on it answers `VK_ERROR_OUT_OF_DEVICE_MEMORY`) lands here; the
    /// layout is still known through [`Engine::allocate_exportable`].
    #[error("the driver laid out and bound the image but gave no {handle} fd for its memory: {source}")]
    MemoryFd { handle: &'static str, source: VkError },
    /// `vkGetMemoryFdKHR` succeeded but the fd it gave is not open in this process (anv on
    /// Mesa's drm-shim, which has no PRIME, does this): dmabridge takes no ownership of it.
    #[error("the driver reported a {handle} fd for the image's memory, but fd {fd} is not open")]
    MemoryFdNotOpen { handle: &'static str, fd: i32 },
    #[error("no memory type can hold the image")]
    NoMemoryType,
    #[error("the device cannot export {fourcc} memory as OPAQUE_FD")]
    OpaqueExportUnsupported { fourcc: Fourcc },
    #[error("this device lacks the {0} capability")]
    Unsupported(Capability),
    #[error(transparent)]
    WiderThanNegotiated(#[from] WiderUse),
    #[error("an export is one allocation, so it cannot be DISJOINT (the use {0} asks for it)")]
    DisjointExport(ImageUse),
    #[error(transparent)]
    Vk(#[from] VkError),
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
    #[error(transparent)]
    Transfer(#[from] TransferError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

/// An `OPAQUE_FD` export: memory only another instance of the same driver on the same
/// device can import, so it travels with the UUIDs that prove where it came from and the
/// exact image parameters the importer must recreate.
#[derive(Debug)]
pub struct OpaqueFd {
    /// Owned; `vkGetMemoryFdKHR` returned it. Dup it for each import.
    pub fd: OwnedFd,
    pub allocation_size: u64,
    pub memory_type_index: u32,
    pub device_uuid: [u8; 16],
    pub driver_uuid: [u8; 16],
    pub fourcc: Fourcc,
    pub width: u32,
    pub height: u32,
    /// The use the exporter created the image for; the importer's image must be the same.
    pub image_use: ImageUse,
}

/// How an exported image is shared.
#[derive(Debug)]
pub enum Shared {
    DmaBuf(DmaBuf),
    OpaqueFd(OpaqueFd),
}

/// An image this engine allocated and exported. It owns the image and its memory; the
/// share it carries owns a separate fd to the same memory, which stays valid (and keeps
/// the memory alive in the kernel) even after this is dropped.
///
/// `Send` and `Sync`: its layout and ownership state is behind a lock. Dropped while the GPU
/// still uses it, its destruction waits for that work.
pub struct ExportedImage {
    engine: Engine,
    image: vk::Image,
    memory: vk::DeviceMemory,
    vk_format: vk::Format,
    image_use: ImageUse,
    shared: Shared,
    tracked: Tracked,
}

impl std::fmt::Debug for ExportedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportedImage").field("image", &self.image).field("frame", &self.frame()).field("layout", &self.layout()).finish()
    }
}

impl ExportedImage {
    pub fn image(&self) -> vk::Image {
        self.image
    }

    pub fn vk_format(&self) -> vk::Format {
        self.vk_format
    }

    /// The use the image was created for (usage, create flags, view formats).
    pub fn image_use(&self) -> ImageUse {
        self.image_use
    }

    /// The dma-buf descriptor (fourcc, layout, extent, planes with fds) to hand to
    /// consumers; `None` for an `OPAQUE_FD` export.
    pub fn dmabuf(&self) -> Option<&DmaBuf> {
        match &self.shared {
            Shared::DmaBuf(d) => Some(d),
            Shared::OpaqueFd(_) => None,
        }
    }

    /// The image's fourcc, width and height.
    pub fn frame(&self) -> (Fourcc, u32, u32) {
        match &self.shared {
            Shared::DmaBuf(d) => (d.fourcc(), d.width(), d.height()),
            Shared::OpaqueFd(o) => (o.fourcc, o.width, o.height),
        }
    }

    /// The `OPAQUE_FD` share; `None` for a dma-buf export.
    pub fn opaque_fd(&self) -> Option<&OpaqueFd> {
        match &self.shared {
            Shared::OpaqueFd(o) => Some(o),
            Shared::DmaBuf(_) => None,
        }
    }

    /// The layout consumers must use: the chosen modifier, or implicit. An `OPAQUE_FD`
    /// image has a driver-private layout, which is implicit by definition.
    pub fn layout(&self) -> Layout {
        self.dmabuf().map_or(Layout::Implicit, DmaBuf::layout)
    }

    /// The queue family a consumer acquires this memory from.
    fn release_family(&self) -> u32 {
        match self.shared {
            Shared::DmaBuf(_) => self.engine.foreign_queue_family(),
            Shared::OpaqueFd(_) => vk::QUEUE_FAMILY_EXTERNAL,
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Records that GPU work completing at `until` uses the image (see [`crate::GpuBuffer::track`]).
    pub fn track(&self, until: Completion) {
        self.tracked.uses.add(until);
    }

    fn aspect(&self) -> vk::ImageAspectFlags {
        barrier_aspect(vk_format::from_vk(self.vk_format).map_or(1, |e| e.vk_planes), false)
    }

    /// Records taking the image for the producer's use `to`: the first time a transition from
    /// UNDEFINED (contents discarded when `discard`), after a release a queue family
    /// ownership transfer back from the consumers' side.
    ///
    /// # Safety
    /// - `cmd` is a command buffer of this image's engine's device, in the recording state,
    ///   to be submitted on a queue of [`Engine::queue_family`];
    /// - that submission signals `until`, and commands recorded on this image are submitted
    ///   in the order they were recorded;
    /// - after a release, the consumers are done with the image before the submission runs.
    pub unsafe fn record_acquire(&self, cmd: vk::CommandBuffer, to: ImageAccess, discard: bool, until: Completion) {
        let state = self.tracked.get();
        let (ours, foreign) = (self.engine.queue_family(), self.release_family());
        let old = if discard { vk::ImageLayout::UNDEFINED } else { state.layout };
        let (barrier, src_stage) = if state.owned || state.layout == vk::ImageLayout::UNDEFINED {
            (
                image_barrier(self.image, self.aspect(), old, to.layout, vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE, to.access),
                vk::PipelineStageFlags::ALL_COMMANDS,
            )
        } else {
            (
                image_barrier(self.image, self.aspect(), old, to.layout, vk::AccessFlags::empty(), to.access)
                    .src_queue_family_index(foreign)
                    .dst_queue_family_index(ours),
                vk::PipelineStageFlags::TOP_OF_PIPE,
            )
        };
        // SAFETY: the caller's contract for `cmd`; the image is external memory, so it may be
        // acquired from the foreign family (VUID-VkImageMemoryBarrier-srcQueueFamilyIndex-04065).
        unsafe { record_barrier(self.engine.device(), cmd, (src_stage, to.stages), &[], &[], &[barrier]) };
        self.tracked.set(ImageState { layout: to.layout, owned: true });
        self.track(until);
    }

    /// Records the release of the image, after the producer's use `from`, to the consumers'
    /// side (another device, API or process), in the `GENERAL` layout they acquire it from.
    ///
    /// # Safety
    /// As [`ExportedImage::record_acquire`].
    pub unsafe fn record_release(&self, cmd: vk::CommandBuffer, from: ImageAccess, until: Completion) {
        let state = self.tracked.get();
        let barrier = image_barrier(self.image, self.aspect(), state.layout, vk::ImageLayout::GENERAL, from.access, vk::AccessFlags::empty())
            .src_queue_family_index(self.engine.queue_family())
            .dst_queue_family_index(self.release_family());
        // SAFETY: the caller's contract for `cmd`; the release names this queue family and
        // the one the consumer acquires from (VUID-VkImageMemoryBarrier-image-04071).
        unsafe { record_barrier(self.engine.device(), cmd, (from.stages, vk::PipelineStageFlags::BOTTOM_OF_PIPE), &[], &[], &[barrier]) };
        self.tracked.set(ImageState { layout: vk::ImageLayout::GENERAL, owned: false });
        self.track(until);
    }

    /// Submits `write` (which fills the image in TRANSFER_DST_OPTIMAL; old contents are
    /// discarded) between an acquisition and a release to the consumers' side.
    fn write_and_release(
        &self,
        options: SubmitOptions,
        write: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<Submission, ExportError> {
        let (_, s) = self.engine.submit(options, |cmd, until| {
            // SAFETY: the engine's own command buffer, recording, submitted on its queue with `until`.
            unsafe { self.record_acquire(cmd, ImageAccess::TRANSFER_DST, true, until) };
            write(self.engine.device(), cmd);
            // SAFETY: as above.
            unsafe { self.record_release(cmd, ImageAccess::TRANSFER_DST, until) };
            Ok::<(), ExportError>(())
        })?;
        Ok(s)
    }

    /// Clears the whole (single-plane colour) image to `rgba` and releases it to the
    /// consumers' side. Returns at once; the submission says when it is done.
    pub fn clear_and_release(&self, rgba: [f32; 4], options: SubmitOptions) -> Result<Submission, ExportError> {
        let image = self.image;
        let range = crate::resources::image::whole_image(vk::ImageAspectFlags::COLOR);
        self.write_and_release(options, |device, cmd| {
            // SAFETY: recording state; the image was created with TRANSFER_DST usage by the
            // caller's request (VUID-vkCmdClearColorImage-image-00002) and is single-plane colour.
            unsafe {
                device.cmd_clear_color_image(cmd, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &vk::ClearColorValue { float32: rgba }, &[range]);
            }
        })
    }

    /// Fills every plane of the image from `src` (planes at `planes`) and releases it to the
    /// consumers' side: a producer's frame, handed to its consumer.
    pub fn upload_and_release(&self, src: &GpuBuffer, planes: &[PlaneLayout], options: SubmitOptions) -> Result<Submission, ExportError> {
        let (fourcc, width, height) = self.frame();
        let regions = plane_regions(fourcc, (width, height), planes, src.len())?;
        let (image, buffer) = (self.image, src.buffer());
        let s = self.write_and_release(options, |device, cmd| {
            // SAFETY: recording state; the regions were checked against the image's planes and
            // the buffer's length (VUID-vkCmdCopyBufferToImage-pRegions-06218).
            unsafe { device.cmd_copy_buffer_to_image(cmd, buffer, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &regions) };
        })?;
        src.track(s.completion());
        Ok(s)
    }
}

impl Drop for ExportedImage {
    fn drop(&mut self) {
        self.engine.shared().retire(self.tracked.uses.snapshot(), vec![Garbage::Image(self.image), Garbage::Memory(self.memory)]);
    }
}

/// An image allocated for export, laid out and bound, before any fd leaves the driver: the
/// driver's answer to an [`ExportRequest`] (the modifier it chose, where each memory plane
/// lies, the memory it asked for), readable whether or not the memory can then be exported.
/// [`ExportableImage::export`] turns it into an [`ExportedImage`]; dropped instead, the image
/// and its memory are freed (nothing has used them).
///
/// This is the one export path: [`Engine::export_image`] and
/// [`Engine::export_image_with_layout`] are [`Engine::allocate_exportable`] and
/// [`Engine::allocate_exportable_with_layout`] followed by `export`. A driver that lays
/// images out but cannot share memory (radv on Mesa's drm-shim: no PRIME) answers everything
/// here and fails only `export`, with [`ExportError::MemoryFd`].
pub struct ExportableImage {
    engine: Engine,
    image: vk::Image,
    memory: vk::DeviceMemory,
    vk_format: vk::Format,
    fourcc: Fourcc,
    width: u32,
    height: u32,
    image_use: ImageUse,
    layout: Layout,
    planes: Vec<PlaneLayout>,
    requirements: vk::MemoryRequirements,
}

impl std::fmt::Debug for ExportableImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportableImage")
            .field("fourcc", &self.fourcc)
            .field("extent", &(self.width, self.height))
            .field("layout", &self.layout)
            .field("planes", &self.planes)
            .field("memory_size", &self.requirements.size)
            .finish()
    }
}

impl ExportableImage {
    /// The layout consumers will use: the modifier the driver chose (from the acceptable
    /// list, or the one an explicit layout named), or implicit for a LINEAR-tiling image
    /// exported where only implicit was acceptable.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The chosen modifier; `None` for an implicit layout.
    pub fn modifier(&self) -> Option<Modifier> {
        self.layout.modifier()
    }

    /// Each memory plane as the driver reported it (`vkGetImageSubresourceLayout` with
    /// `MEMORY_PLANE_i`, or the format plane for LINEAR tiling): offset, row pitch and size,
    /// all in object 0 (an export is one allocation). A modifier with compression metadata
    /// has more of these than the format has planes.
    pub fn planes(&self) -> &[PlaneLayout] {
        &self.planes
    }

    /// What the driver asked for (`vkGetImageMemoryRequirements`): the bound memory is a
    /// dedicated allocation of exactly `size` bytes.
    pub fn memory_requirements(&self) -> vk::MemoryRequirements {
        self.requirements
    }

    /// The image's fourcc, width and height.
    pub fn frame(&self) -> (Fourcc, u32, u32) {
        (self.fourcc, self.width, self.height)
    }

    pub fn vk_format(&self) -> vk::Format {
        self.vk_format
    }

    /// The use the image was created for.
    pub fn image_use(&self) -> ImageUse {
        self.image_use
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Exports the memory as a dma-buf (`vkGetMemoryFdKHR`, `DMA_BUF`) and hands the image
    /// over to an [`ExportedImage`]. Where the driver gives no fd, the image and memory are
    /// freed and the error is [`ExportError::MemoryFd`].
    pub fn export(mut self) -> Result<ExportedImage, ExportError> {
        let fd = self.engine.memory_fd(self.memory, vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT)?;
        let dmabuf = DmaBuf::in_one_file(self.fourcc, self.layout, self.width, self.height, fd, &self.planes)?;
        let (image, memory) = (std::mem::take(&mut self.image), std::mem::take(&mut self.memory));
        Ok(ExportedImage {
            engine: self.engine.clone(),
            image,
            memory,
            vk_format: self.vk_format,
            image_use: self.image_use,
            shared: Shared::DmaBuf(dmabuf),
            tracked: Tracked::new(true),
        })
    }
}

impl Drop for ExportableImage {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: objects of this device that no command ever used (the handle is not
        // handed out before `export`, which takes both and leaves null here).
        unsafe {
            if self.image != vk::Image::null() {
                device.destroy_image(self.image, None);
            }
            if self.memory != vk::DeviceMemory::null() {
                device.free_memory(self.memory, None);
            }
        }
    }
}

/// The image and its memory before they are wrapped, destroyed on early return.
struct Partial<'a> {
    device: &'a ash::Device,
    image: vk::Image,
    memory: vk::DeviceMemory,
}

impl Partial<'_> {
    fn release(mut self) -> (vk::Image, vk::DeviceMemory) {
        let out = (self.image, self.memory);
        self.image = vk::Image::null();
        self.memory = vk::DeviceMemory::null();
        out
    }
}

impl Drop for Partial<'_> {
    fn drop(&mut self) {
        // SAFETY: objects of this device that no submitted work uses (nothing was recorded yet).
        unsafe {
            if self.image != vk::Image::null() {
                self.device.destroy_image(self.image, None);
            }
            if self.memory != vk::DeviceMemory::null() {
                self.device.free_memory(self.memory, None);
            }
        }
    }
}

impl Engine {
    /// Allocates an image for `req` and exports it as a dma-buf:
    /// [`Engine::allocate_exportable`], then [`ExportableImage::export`].
    pub fn export_image(&self, req: &ExportRequest) -> Result<ExportedImage, ExportError> {
        self.allocate_exportable(req)?.export()
    }

    /// Allocates an image for `req`, exportable as a dma-buf, and reads back how the driver
    /// laid it out, without exporting it yet: with the modifier extension, the image is
    /// created from the acceptable modifiers (those the device exports for this use) and
    /// the driver's choice must be one of them; without it, LINEAR tiling.
    pub fn allocate_exportable(&self, req: &ExportRequest) -> Result<ExportableImage, ExportError> {
        let entry = vk_format::to_vk(req.fourcc).ok_or(ExportError::UnknownFourcc(req.fourcc))?;
        if req.width == 0 || req.height == 0 {
            return Err(ExportError::ZeroExtent { width: req.width, height: req.height });
        }
        if let Some(negotiated) = req.negotiated {
            negotiated.check_within(&req.image_use)?;
        }
        if req.image_use.create.contains(vk::ImageCreateFlags::DISJOINT) {
            return Err(ExportError::DisjointExport(req.image_use));
        }
        let caps = self.format_support(&SupportQuery::new(req.fourcc, req.image_use))?;
        let exportable: Vec<Modifier> = caps.exportable().collect();
        let implicit_ok = req.acceptable.is_empty() || req.acceptable.contains(&Layout::Implicit);
        let wanted: Vec<Modifier> = if req.acceptable.is_empty() {
            exportable.clone()
        } else {
            req.acceptable.iter().filter_map(|l| l.modifier()).filter(|m| exportable.contains(m)).collect()
        };

        if self.has_modifiers() {
            // An implicit-acceptable request may be upgraded to an explicit one (seed 001):
            // the driver reports the modifier it chose, and that is a valid modifier.
            let wanted = if wanted.is_empty() && implicit_ok { exportable.clone() } else { wanted };
            if wanted.is_empty() {
                return Err(ExportError::NoAcceptableModifier {
                    fourcc: req.fourcc,
                    acceptable: req.acceptable.clone(),
                    exportable,
                });
            }
            let max = wanted
                .iter()
                .filter_map(|m| caps.get(*m).and_then(|c| c.limits))
                .map(|l| (l.max_extent.width, l.max_extent.height))
                .max()
                .unwrap_or((0, 0));
            check_extent(req, max)?;
            self.exportable_with_modifiers(req, entry.vk_format, &wanted)
        } else {
            let linear_ok = req.acceptable.is_empty() || req.acceptable.contains(&Layout::Explicit(Modifier::LINEAR));
            let linear = caps.get(Modifier::LINEAR).filter(|c| c.can_export());
            let Some(linear) = linear.filter(|_| linear_ok || implicit_ok) else {
                return Err(if caps.get(Modifier::LINEAR).is_some_and(|c| c.supported() && !c.exportable) {
                    ExportError::DmaBufExportUnsupported { fourcc: req.fourcc }
                } else {
                    ExportError::NoAcceptableModifier {
                        fourcc: req.fourcc,
                        acceptable: req.acceptable.clone(),
                        exportable,
                    }
                });
            };
            let max = linear.limits.map_or((0, 0), |l| (l.max_extent.width, l.max_extent.height));
            check_extent(req, max)?;
            // Vulkan LINEAR tiling is the DRM LINEAR layout; report it as such when the
            // consumer asked for LINEAR, and as implicit when only implicit was acceptable.
            let layout = if linear_ok { Layout::Explicit(Modifier::LINEAR) } else { Layout::Implicit };
            self.exportable_linear_tiling(req, entry.vk_format, layout)
        }
    }

    fn exportable_with_modifiers(
        &self,
        req: &ExportRequest,
        format: vk::Format,
        modifiers: &[Modifier],
    ) -> Result<ExportableImage, ExportError> {
        let raw: Vec<u64> = modifiers.iter().map(|m| m.raw()).collect();
        let mut list = vk::ImageDrmFormatModifierListCreateInfoEXT::default().drm_format_modifiers(&raw);
        let (partial, _, requirements) = self.create_exportable(req, format, Tiling::Modifiers(&mut list))?;
        let modifier_fn = self.drm_format_modifier().ok_or(ExportError::DmaBufExportUnsupported { fourcc: req.fourcc })?;
        let mut props = vk::ImageDrmFormatModifierPropertiesEXT::default();
        // SAFETY: the image was created with DRM_FORMAT_MODIFIER_EXT tiling
        // (VUID-vkGetImageDrmFormatModifierPropertiesEXT-image-02272).
        unsafe { modifier_fn.get_image_drm_format_modifier_properties(partial.image, &mut props) }
            .vk("vkGetImageDrmFormatModifierPropertiesEXT")?;
        let chosen = Modifier::from_raw(props.drm_format_modifier);
        if !modifiers.contains(&chosen) {
            tracing::error!(%chosen, "driver chose a modifier outside the acceptable list");
            return Err(ExportError::ModifierNotRequested { chosen });
        }
        let caps = self.format_support(&SupportQuery::new(req.fourcc, req.image_use))?;
        let memory_planes = caps.get(chosen).map_or(1, |c| c.plane_count as usize);
        let planes: Vec<PlaneLayout> = (0..memory_planes)
            .map(|i| {
                let sub = vk::ImageSubresource { aspect_mask: memory_plane_aspect(i), mip_level: 0, array_layer: 0 };
                // SAFETY: DRM-modifier images are queried per MEMORY_PLANE_i aspect, i below
                // the modifier's plane count (VUID-vkGetImageSubresourceLayout-tiling-02271).
                plane_layout(unsafe { self.device().get_image_subresource_layout(partial.image, sub) })
            })
            .collect();
        tracing::debug!(fourcc = %req.fourcc, modifier = %chosen, ?planes, "allocated for export with an explicit modifier");
        Ok(self.exportable(req, format, partial, Layout::Explicit(chosen), planes, requirements))
    }

    /// Allocates and exports an image with `modifier` whose memory planes are where
    /// `planes` says (offset, row pitch and the most bytes it may span, per memory plane, all
    /// in object 0 of one allocation), through
    /// `VkImageDrmFormatModifierExplicitCreateInfoEXT`. The layout the driver then reports
    /// must be the one asked for, else [`ExportError::LayoutNotHonoured`]: a driver may
    /// accept an explicit layout for an image it allocates and still place it its own way.
    /// [`Engine::allocate_exportable_with_layout`], then [`ExportableImage::export`].
    pub fn export_image_with_layout(&self, req: &ExportRequest, modifier: Modifier, planes: &[PlaneLayout]) -> Result<ExportedImage, ExportError> {
        self.allocate_exportable_with_layout(req, modifier, planes)?.export()
    }

    /// Allocates an image with `modifier` whose memory planes are where `planes` says (see
    /// [`Engine::export_image_with_layout`]), without exporting it yet. Before any driver
    /// call the layout must keep the rules dmabridge knows ([`check_explicit_layout`]:
    /// [`ExportError::LayoutRule`], naming the plane and the rule; a plane's `size` is the
    /// most it may span, 0 for no bound); a layout the driver refuses anyway is
    /// [`ExportError::LayoutRefused`].
    pub fn allocate_exportable_with_layout(&self, req: &ExportRequest, modifier: Modifier, planes: &[PlaneLayout]) -> Result<ExportableImage, ExportError> {
        let entry = vk_format::to_vk(req.fourcc).ok_or(ExportError::UnknownFourcc(req.fourcc))?;
        if req.width == 0 || req.height == 0 {
            return Err(ExportError::ZeroExtent { width: req.width, height: req.height });
        }
        if req.image_use.create.contains(vk::ImageCreateFlags::DISJOINT) {
            return Err(ExportError::DisjointExport(req.image_use));
        }
        let caps = self.format_support(&SupportQuery::new(req.fourcc, req.image_use))?;
        let c = caps
            .get(modifier)
            .filter(|c| c.can_export() && self.has_modifiers())
            .ok_or_else(|| ExportError::NoAcceptableModifier { fourcc: req.fourcc, acceptable: vec![Layout::Explicit(modifier)], exportable: caps.exportable().collect() })?;
        check_extent(req, c.limits.map_or((0, 0), |l| (l.max_extent.width, l.max_extent.height)))?;
        if planes.len() != c.plane_count as usize {
            return Err(ExportError::LayoutPlaneCount { modifier, expected: c.plane_count as usize, got: planes.len() });
        }
        check_explicit_layout(req.fourcc, modifier, req.width, c.plane_count as usize, planes).map_err(|rule| ExportError::LayoutRule { modifier, rule })?;
        let layouts: Vec<vk::SubresourceLayout> = planes
            .iter()
            .map(|p| vk::SubresourceLayout { offset: p.offset, size: 0, row_pitch: p.stride, array_pitch: 0, depth_pitch: 0 })
            .collect();
        // VUID-VkImageDrmFormatModifierExplicitCreateInfoEXT-size-02267 (size 0), -arrayPitch-02268
        // and -depthPitch-02269 (0 for one 2-D layer), -drmFormatModifierPlaneCount-02265 (checked above).
        let mut explicit = vk::ImageDrmFormatModifierExplicitCreateInfoEXT::default()
            .drm_format_modifier(modifier.raw())
            .plane_layouts(&layouts);
        let (partial, _, requirements) = match self.create_exportable(req, entry.vk_format, Tiling::Explicit(&mut explicit)) {
            Err(ExportError::Vk(VkError { call: "vkCreateImage", result: result @ vk::Result::ERROR_INVALID_DRM_FORMAT_MODIFIER_PLANE_LAYOUT_EXT })) => {
                tracing::debug!(fourcc = %req.fourcc, %modifier, ?planes, "the driver refused the explicit layout");
                return Err(ExportError::LayoutRefused { modifier, planes: planes.to_vec(), result });
            }
            other => other?,
        };
        let mut got_planes = Vec::with_capacity(planes.len());
        for (i, &asked) in planes.iter().enumerate() {
            let sub = vk::ImageSubresource { aspect_mask: memory_plane_aspect(i), mip_level: 0, array_layer: 0 };
            // SAFETY: DRM-modifier images are queried per MEMORY_PLANE_i aspect, i below
            // the modifier's plane count (VUID-vkGetImageSubresourceLayout-tiling-02271).
            let got = plane_layout(unsafe { self.device().get_image_subresource_layout(partial.image, sub) });
            // A size of 0 asks for no bound (the size of a plane is the driver's to report).
            if (got.offset, got.stride) != (asked.offset, asked.stride) || (asked.size != 0 && got.size > asked.size) {
                return Err(ExportError::LayoutNotHonoured { plane: i, asked, got });
            }
            got_planes.push(got);
        }
        tracing::debug!(fourcc = %req.fourcc, %modifier, ?planes, "allocated for export with an imposed explicit layout");
        Ok(self.exportable(req, entry.vk_format, partial, Layout::Explicit(modifier), got_planes, requirements))
    }

    fn exportable_linear_tiling(&self, req: &ExportRequest, format: vk::Format, layout: Layout) -> Result<ExportableImage, ExportError> {
        let (partial, vk_planes, requirements) = self.create_exportable(req, format, Tiling::Linear)?;
        let planes: Vec<PlaneLayout> = (0..vk_planes as usize)
            .map(|i| {
                let sub = vk::ImageSubresource {
                    aspect_mask: crate::resources::image::plane_aspect(vk_planes, i),
                    mip_level: 0,
                    array_layer: 0,
                };
                // SAFETY: LINEAR images may be queried per plane aspect
                // (VUID-vkGetImageSubresourceLayout-image-02270).
                plane_layout(unsafe { self.device().get_image_subresource_layout(partial.image, sub) })
            })
            .collect();
        Ok(self.exportable(req, format, partial, layout, planes, requirements))
    }

    /// Allocates an image in the driver's own (OPTIMAL) layout and exports its memory as an
    /// `OPAQUE_FD`, for another instance of the same driver on the same device (see
    /// [`Engine::import_opaque`]). No dma-buf is involved.
    pub fn export_opaque(
        &self,
        fourcc: Fourcc,
        width: u32,
        height: u32,
        image_use: impl Into<ImageUse>,
    ) -> Result<ExportedImage, ExportError> {
        let image_use = image_use.into();
        let entry = vk_format::to_vk(fourcc).ok_or(ExportError::UnknownFourcc(fourcc))?;
        if width == 0 || height == 0 {
            return Err(ExportError::ZeroExtent { width, height });
        }
        if image_use.create.contains(vk::ImageCreateFlags::DISJOINT) {
            return Err(ExportError::DisjointExport(image_use));
        }
        let handle = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
        let caps = self.format_support(&SupportQuery::new(fourcc, image_use).with_handle_type(handle))?;
        if !caps.get(Modifier::LINEAR).is_some_and(|c| c.can_export()) {
            return Err(ExportError::OpaqueExportUnsupported { fourcc });
        }
        let req = ExportRequest::new(fourcc, width, height, image_use);
        let (partial, _, reqs) = self.create_exportable(&req, entry.vk_format, Tiling::Optimal)?;
        let fd = self.memory_fd(partial.memory, handle)?;
        let type_index = self.memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty()).ok_or(ExportError::NoMemoryType)?;
        let info = self.info();
        let shared = Shared::OpaqueFd(OpaqueFd {
            fd,
            allocation_size: reqs.size,
            memory_type_index: type_index,
            device_uuid: info.device_uuid,
            driver_uuid: info.driver_uuid,
            fourcc,
            width,
            height,
            image_use,
        });
        let (image, memory) = partial.release();
        Ok(ExportedImage { engine: self.clone(), image, memory, vk_format: entry.vk_format, image_use, shared, tracked: Tracked::new(true) })
    }

    /// Creates the image with the external-memory info and the given tiling, and binds
    /// dedicated exportable memory to it.
    fn create_exportable<'a>(
        &'a self,
        req: &ExportRequest,
        format: vk::Format,
        tiling: Tiling<'_, '_>,
    ) -> Result<(Partial<'a>, u8, vk::MemoryRequirements), ExportError> {
        let device = self.device();
        let handle = match tiling {
            Tiling::Optimal => vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
            _ => vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT,
        };
        let mut external = vk::ExternalMemoryImageCreateInfo::default().handle_types(handle);
        let (vk_tiling, modifiers, explicit) = match tiling {
            Tiling::Modifiers(list) => (vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT, Some(list), None),
            Tiling::Explicit(e) => (vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT, None, Some(e)),
            Tiling::Linear => (vk::ImageTiling::LINEAR, None, None),
            Tiling::Optimal => (vk::ImageTiling::OPTIMAL, None, None),
        };
        let views = req.image_use.view_formats(format);
        let mut view_list = vk::ImageFormatListCreateInfo::default().view_formats(&views);
        let mut info = chain_view_formats(image_2d(format, (req.width, req.height), vk_tiling, &req.image_use), &mut view_list)
            .push_next(&mut external);
        if let Some(list) = modifiers {
            // VUID-VkImageCreateInfo-tiling-02261: DRM tiling needs a modifier list or explicit layout.
            info = info.push_next(list);
        }
        if let Some(e) = explicit {
            // VUID-VkImageCreateInfo-tiling-02261, the explicit form.
            info = info.push_next(e);
        }
        // SAFETY: the capability query accepted this format, tiling, use (usage, create flags,
        // view formats) and handle type (VUID-VkImageCreateInfo-pNext-00990), and the extent was checked against its
        // limits (VUID-VkImageCreateInfo-extent-02252).
        let image = unsafe { device.create_image(&info, None) }.vk("vkCreateImage")?;
        let mut partial = Partial { device, image, memory: vk::DeviceMemory::null() };
        // SAFETY: image of this device, not yet bound.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let type_index = self
            .memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty())
            .ok_or(ExportError::NoMemoryType)?;
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(handle);
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().image(image);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(reqs.size)
            .memory_type_index(type_index)
            .push_next(&mut export)
            .push_next(&mut dedicated);
        // SAFETY: a dedicated allocation of exactly the image's size
        // (VUID-VkMemoryDedicatedAllocateInfo-image-01433) in a type it allows.
        partial.memory = unsafe { device.allocate_memory(&alloc, None) }.vk("vkAllocateMemory")?;
        // SAFETY: unbound image, memory dedicated to it, offset 0 (VUID-vkBindImageMemory-memory-02628).
        unsafe { device.bind_image_memory(image, partial.memory, 0) }.vk("vkBindImageMemory")?;
        let vk_planes = vk_format::from_vk(format).map_or(1, |e| e.vk_planes);
        Ok((partial, vk_planes, reqs))
    }

    /// Wraps a created, bound and laid-out image for export.
    fn exportable(
        &self,
        req: &ExportRequest,
        format: vk::Format,
        partial: Partial<'_>,
        layout: Layout,
        planes: Vec<PlaneLayout>,
        requirements: vk::MemoryRequirements,
    ) -> ExportableImage {
        let (image, memory) = partial.release();
        ExportableImage {
            engine: self.clone(),
            image,
            memory,
            vk_format: format,
            fourcc: req.fourcc,
            width: req.width,
            height: req.height,
            image_use: req.image_use,
            layout,
            planes,
            requirements,
        }
    }

    /// `vkGetMemoryFdKHR`: a new fd, owned by the caller.
    fn memory_fd(&self, memory: vk::DeviceMemory, handle: vk::ExternalMemoryHandleTypeFlags) -> Result<OwnedFd, ExportError> {
        let fd_fn = self.external_memory_fd().ok_or(ExportError::Unsupported(Capability::DmaBufExport))?;
        let get = vk::MemoryGetFdInfoKHR::default().memory(memory).handle_type(handle);
        let handle_name = if handle == vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD { "OPAQUE_FD" } else { "DMA_BUF" };
        // SAFETY: the memory was allocated exportable with this handle type
        // (VUID-VkMemoryGetFdInfoKHR-handleType-00671).
        let raw = unsafe { fd_fn.get_memory_fd(&get) }
            .vk("vkGetMemoryFdKHR")
            .map_err(|source| ExportError::MemoryFd { handle: handle_name, source })?;
        // SAFETY: vkGetMemoryFdKHR returns a new fd that the caller owns; it is taken only
        // once confirmed open (a driver may report success with a number that is not).
        unsafe { take_returned_fd(raw) }.map_err(|_| {
            tracing::warn!(fd = raw, handle = handle_name, "vkGetMemoryFdKHR succeeded with an fd that is not open");
            ExportError::MemoryFdNotOpen { handle: handle_name, fd: raw }
        })
    }
}

/// The tiling of an exported image.
enum Tiling<'a, 'b> {
    /// `DRM_FORMAT_MODIFIER_EXT` from this acceptable list (a dma-buf).
    Modifiers(&'a mut vk::ImageDrmFormatModifierListCreateInfoEXT<'b>),
    /// `DRM_FORMAT_MODIFIER_EXT` with the planes where the caller says (a dma-buf).
    Explicit(&'a mut vk::ImageDrmFormatModifierExplicitCreateInfoEXT<'b>),
    /// LINEAR: the DRM LINEAR layout, without the modifier extension (a dma-buf).
    Linear,
    /// OPTIMAL: the driver's own layout, shared only as OPAQUE_FD.
    Optimal,
}

fn check_extent(req: &ExportRequest, (max_width, max_height): (u32, u32)) -> Result<(), ExportError> {
    if req.width > max_width || req.height > max_height {
        return Err(ExportError::ExtentTooLarge {
            fourcc: req.fourcc,
            width: req.width,
            height: req.height,
            max_width,
            max_height,
        });
    }
    Ok(())
}

/// A plane as the driver reports it: every exported plane lives in the one allocation.
fn plane_layout(l: vk::SubresourceLayout) -> PlaneLayout {
    PlaneLayout { object: 0, offset: l.offset, stride: l.row_pitch, size: l.size }
}
