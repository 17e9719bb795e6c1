//! A device copy: the GPU copies a frame it imported into an image it exports, each in the
//! layout its driver chose or was given (`vkCmdCopyImage`; the driver addresses both
//! tilings). This is how a copy plan's `device-copy` conversion runs
//! ([`dmabridge_interop::negotiate::ConversionKind::DeviceCopy`]): the way PRIME copies a
//! discrete GPU's LINEAR frame into the integrated GPU's own scanout layout, or a frame
//! pitched one driver's way into another's. Only the GPU named by the plan's `runs_on` can
//! run it: the layouts are the ones its driver listed for `transfer-src` imports and
//! `transfer-dst` exports.
//!
//! # How to use
//! ```no_run
//! # fn f(engine: &dmabridge::Engine, frame: &dmabridge::interop::dmabuf::DmaBuf, out: &dmabridge::ExportedImage) -> Result<(), Box<dyn std::error::Error>> {
//! use dmabridge::ash::vk;
//! let src = engine.import_dmabuf(frame, vk::ImageUsageFlags::TRANSFER_SRC)?;
//! // `out` was exported with TRANSFER_DST usage in the layout the plan's other group takes.
//! out.copy_from_and_release(&src, Default::default())?.wait(dmabridge::READBACK_TIMEOUT)?;
//! # Ok(()) }
//! ```

use ash::vk;
use dmabridge_interop::format_info::format_info;
use dmabridge_interop::Fourcc;

use crate::device::vk_format;
use crate::dmabuf::export::ExportedImage;
use crate::import::{ImportError, ImportedImage};
use crate::resources::image::{plane_aspect, ImageAccess};
use crate::device::submit::{SubmitError, SubmitOptions, Submission};

/// Why a device copy could not run. Nothing is recorded when a check fails.
#[derive(Debug, thiserror::Error)]
pub enum DeviceCopyError {
    /// The two images are not one format at one size: a device copy changes only the
    /// layout.
    #[error("the source is {from} {from_w}x{from_h} and the destination {to} {to_w}x{to_h}: a device copy changes only the layout")]
    Mismatch { from: Fourcc, from_w: u32, from_h: u32, to: Fourcc, to_w: u32, to_h: u32 },
    /// An image was not made for its side of the copy.
    #[error("the {side} image lacks {usage:?} usage, which a device copy needs")]
    Usage { side: &'static str, usage: vk::ImageUsageFlags },
    /// The images belong to two Vulkan devices: a copy between devices goes through a
    /// dma-buf one exports and the other imports.
    #[error("the source and destination images belong to different Vulkan devices")]
    OtherDevice,
    /// The fourcc has no Vulkan format or plane table.
    #[error("{0} has no Vulkan format in dmabridge's tables")]
    UnknownFourcc(Fourcc),
    /// Acquiring the source failed (a file that shrank, on the read-copy import path).
    #[error(transparent)]
    Acquire(#[from] ImportError),
    /// Submitting failed.
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

impl ExportedImage {
    /// Copies every plane of `src` (imported with `TRANSFER_SRC` on this image's device)
    /// into this image (exported with `TRANSFER_DST`; its old contents are discarded) and
    /// releases both: `src` to its producer, this image to its consumers. Returns at once;
    /// the submission says when the copy is done.
    pub fn copy_from_and_release(&self, src: &ImportedImage, options: SubmitOptions) -> Result<Submission, DeviceCopyError> {
        let (fourcc, width, height) = self.frame();
        let (from_w, from_h) = src.extent();
        if (src.fourcc(), from_w, from_h) != (fourcc, width, height) || src.vk_format() != self.vk_format() {
            return Err(DeviceCopyError::Mismatch { from: src.fourcc(), from_w, from_h, to: fourcc, to_w: width, to_h: height });
        }
        if !src.usage().contains(vk::ImageUsageFlags::TRANSFER_SRC) {
            return Err(DeviceCopyError::Usage { side: "source", usage: vk::ImageUsageFlags::TRANSFER_SRC });
        }
        if !self.image_use().usage.contains(vk::ImageUsageFlags::TRANSFER_DST) {
            return Err(DeviceCopyError::Usage { side: "destination", usage: vk::ImageUsageFlags::TRANSFER_DST });
        }
        if src.engine().device().handle() != self.engine().device().handle() {
            return Err(DeviceCopyError::OtherDevice);
        }
        let regions = plane_copies(fourcc, (width, height))?;
        let engine = self.engine();
        let (_, s) = engine.submit(options, |cmd, until| {
            // SAFETY: the engine's own command buffer, recording, submitted on its queue with
            // `until`; both images are this device's (checked above).
            unsafe { src.record_acquire(cmd, ImageAccess::TRANSFER_SRC, until) }?;
            // SAFETY: as above.
            unsafe { self.record_acquire(cmd, ImageAccess::TRANSFER_DST, true, until) };
            // SAFETY: recording state; one format and extent on both sides (checked above), so
            // each region is a whole plane inside both images, in the layouts just acquired
            // (VUID-vkCmdCopyImage-srcImage-01995, VUID-vkCmdCopyImage-pRegions-00122).
            unsafe {
                engine.device().cmd_copy_image(
                    cmd,
                    src.image(),
                    vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                    self.image(),
                    vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                    &regions,
                );
            }
            // SAFETY: as above.
            unsafe {
                src.record_release(cmd, ImageAccess::TRANSFER_SRC, until);
                self.record_release(cmd, ImageAccess::TRANSFER_DST, until);
            }
            Ok::<(), DeviceCopyError>(())
        })?;
        Ok(s)
    }
}

/// One whole-plane copy per Vulkan plane of `fourcc` at `width` x `height` (a multi-planar
/// format's planes in their own texels: NV12's second plane is half the size).
fn plane_copies(fourcc: Fourcc, (width, height): (u32, u32)) -> Result<Vec<vk::ImageCopy>, DeviceCopyError> {
    let info = format_info(fourcc).ok_or(DeviceCopyError::UnknownFourcc(fourcc))?;
    let entry = vk_format::to_vk(fourcc).ok_or(DeviceCopyError::UnknownFourcc(fourcc))?;
    Ok((0..usize::from(entry.vk_planes))
        .map(|plane| {
            // The Vulkan planes of a chroma-swapped format are the same sizes in another
            // order, and the chroma planes are alike: the extent of the fourcc's plane of the
            // same index is the Vulkan plane's.
            let layers = vk::ImageSubresourceLayers { aspect_mask: plane_aspect(entry.vk_planes, plane), mip_level: 0, base_array_layer: 0, layer_count: 1 };
            let extent = vk::Extent3D { width: info.plane_width(plane, width), height: info.plane_height(plane, height), depth: 1 };
            vk::ImageCopy { src_subresource: layers, src_offset: vk::Offset3D::default(), dst_subresource: layers, dst_offset: vk::Offset3D::default(), extent }
        })
        .collect())
}
