//! Copies between images and linear buffers: reading a frame back to the CPU (the end of
//! every pixel-exact test, and the CLI's `import`), and the device-native conversion that
//! copies any image the device holds to the linear layout a consumer asks for, and back.

use std::time::Duration;

use ash::vk;
use dmabridge_interop::tiling::{tiled_size, TilingError};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{format_info, Fourcc, TileLayout};

use crate::resources::buffer::{BufferError, GpuBuffer};
use crate::resources::image::{plane_aspect, DeviceImage, ImageAccess};
use crate::device::submit::{Completion, SubmitError, SubmitOptions, Submission};
use crate::device::vk_format::{self, VkFormatEntry};
use crate::Engine;

/// How long the blocking conveniences (`ImportedImage::read_back`, `convert_layout`) wait for
/// the GPU.
pub const READBACK_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a copy between an image and a buffer failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The fourcc has no plane table or Vulkan format.
    #[error("{0} has no plane layout or Vulkan format in dmabridge's tables")]
    UnknownFourcc(Fourcc),
    /// A buffer could not be made or read.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// The frame does not fit this process.
    #[error("a {0}-byte readback does not fit in this process's address space")]
    TooLarge(u64),
    /// The plane layouts do not match the format.
    #[error("{fourcc} has {expected} planes, but {got} plane layouts were given")]
    PlaneCount { fourcc: Fourcc, expected: usize, got: usize },
    /// A plane's offset or stride cannot be copied.
    #[error("plane {plane}: offset {offset} and stride {stride} must be multiples of its {texel}-byte texel, and the stride at least its row of {row} bytes")]
    PlaneLayout { plane: usize, offset: u64, stride: u64, texel: u64, row: u64 },
    /// A plane runs past the buffer.
    #[error("plane {plane} ends at byte {end}, past the {len}-byte buffer")]
    PastEndOfBuffer { plane: usize, end: u64, len: u64 },
    /// The image's format or extent is not the frame's.
    #[error("the image is {image:?} {iw}x{ih}, the frame {fourcc} {fw}x{fh}")]
    ImageMismatch { image: vk::Format, iw: u32, ih: u32, fourcc: Fourcc, fw: u32, fh: u32 },
    /// Submitting or waiting failed.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The image was not made for this use.
    #[error("the image lacks {0:?} usage, which this copy needs")]
    Usage(vk::ImageUsageFlags),
}

/// One copy region per plane of `fourcc`, between an image and a buffer whose planes lie at
/// `planes` (offset and stride in bytes, checked against the texel size and `buffer_len`):
/// what a host records for its own `vkCmdCopyBufferToImage`/`ImageToBuffer` of a frame.
pub fn plane_regions(
    fourcc: Fourcc,
    (width, height): (u32, u32),
    planes: &[PlaneLayout],
    buffer_len: u64,
) -> Result<Vec<vk::BufferImageCopy>, TransferError> {
    let info = format_info(fourcc).ok_or(TransferError::UnknownFourcc(fourcc))?;
    let entry = vk_format::to_vk(fourcc).ok_or(TransferError::UnknownFourcc(fourcc))?;
    if planes.len() != info.plane_count() {
        return Err(TransferError::PlaneCount { fourcc, expected: info.plane_count(), got: planes.len() });
    }
    let mut regions = Vec::with_capacity(planes.len());
    for (i, p) in planes.iter().enumerate() {
        let texel = info.planes[i].cpp as u64;
        // Packed 4:2:2 formats copy in 2x1 blocks of 4 bytes.
        let block = if entry.vk_planes == 1 && info.is_yuv { 4 } else { texel };
        let row = info.min_stride(i, width);
        if p.offset % block != 0 || p.stride % block != 0 || p.stride < row {
            return Err(TransferError::PlaneLayout { plane: i, offset: p.offset, stride: p.stride, texel: block, row });
        }
        let rows = info.plane_height(i, height) as u64;
        let end = rows
            .saturating_sub(1)
            .checked_mul(p.stride)
            .and_then(|v| v.checked_add(row))
            .and_then(|v| v.checked_add(p.offset))
            .unwrap_or(u64::MAX);
        if end > buffer_len {
            return Err(TransferError::PastEndOfBuffer { plane: i, end, len: buffer_len });
        }
        let vk_plane = if entry.mapping == vk_format::Mapping::ChromaSwapped && entry.vk_planes == 3 && i > 0 { 3 - i } else { i };
        let row_length = u32::try_from(p.stride / texel).map_err(|_| TransferError::TooLarge(p.stride))?;
        let extent = (info.plane_width(i, width), info.plane_height(i, height));
        regions.push(plane_copy(entry, vk_plane, p.offset, row_length, extent));
    }
    Ok(regions)
}

/// The copy of one whole plane (`vk_plane` of the Vulkan format, `extent` texels) between an
/// image and a buffer whose rows start at `buffer_offset`, `row_length` texels apart.
pub(crate) fn plane_copy(entry: &VkFormatEntry, vk_plane: usize, buffer_offset: u64, row_length: u32, (width, height): (u32, u32)) -> vk::BufferImageCopy {
    vk::BufferImageCopy {
        buffer_offset,
        buffer_row_length: row_length,
        buffer_image_height: 0,
        image_subresource: vk::ImageSubresourceLayers {
            aspect_mask: plane_aspect(entry.vk_planes, vk_plane),
            mip_level: 0,
            base_array_layer: 0,
            layer_count: 1,
        },
        image_offset: vk::Offset3D::default(),
        image_extent: vk::Extent3D { width, height, depth: 1 },
    }
}

/// Tightly packed planes of `fourcc`, one after the other, and their total size: the linear
/// layout of interop's geometry, which the CPU references and `convert` use too.
pub(crate) fn packed(fourcc: Fourcc, (width, height): (u32, u32)) -> Result<(Vec<PlaneLayout>, u64), TransferError> {
    let g = tiled_size(TileLayout::Linear, fourcc, width, height).map_err(|e| match e {
        TilingError::UnknownFormat(f) => TransferError::UnknownFourcc(f),
        _ => TransferError::TooLarge(u64::MAX),
    })?;
    Ok((g.planes.iter().map(|p| PlaneLayout::linear(p.offset, p.width_bytes as u64, p.rows)).collect(), g.size))
}

fn check_image(image: &DeviceImage, fourcc: Fourcc, extent: (u32, u32)) -> Result<(), TransferError> {
    let entry = vk_format::to_vk(fourcc).ok_or(TransferError::UnknownFourcc(fourcc))?;
    if entry.vk_format != image.format() || image.extent() != extent {
        let (iw, ih) = image.extent();
        return Err(TransferError::ImageMismatch { image: image.format(), iw, ih, fourcc, fw: extent.0, fh: extent.1 });
    }
    Ok(())
}

impl Engine {
    /// Records the device-native conversion to a linear consumer: every plane of `image`
    /// (any tiling the device holds), read as `fourcc`, into `dst` at the offsets and strides
    /// the consumer asks for. Leaves the image in TRANSFER_SRC_OPTIMAL. Bytes of `dst`
    /// outside the planes' rows are left alone.
    ///
    /// # Safety
    /// `cmd` is a command buffer of this engine's device, recording, to be submitted on the
    /// engine's queue family in recording order, with a submission that signals `until`.
    pub unsafe fn record_copy_image_to_linear(
        &self,
        cmd: vk::CommandBuffer,
        image: &DeviceImage,
        fourcc: Fourcc,
        dst: &GpuBuffer,
        planes: &[PlaneLayout],
        until: Completion,
    ) -> Result<(), TransferError> {
        check_image(image, fourcc, image.extent())?;
        let regions = plane_regions(fourcc, image.extent(), planes, dst.len())?;
        // SAFETY: the caller's contract.
        unsafe { image.record_transition(cmd, ImageAccess::TRANSFER_SRC, false, until) };
        // SAFETY: recording state; the regions were checked against the image's planes and the
        // buffer's length (VUID-vkCmdCopyImageToBuffer-pRegions-00183).
        unsafe { self.device().cmd_copy_image_to_buffer(cmd, image.image(), vk::ImageLayout::TRANSFER_SRC_OPTIMAL, dst.buffer(), &regions) };
        dst.track(until);
        Ok(())
    }

    /// The reverse: fills every plane of `image` from `src`, whose planes lie at `planes`.
    /// Leaves the image in TRANSFER_DST_OPTIMAL.
    ///
    /// # Safety
    /// As [`Engine::record_copy_image_to_linear`].
    pub unsafe fn record_copy_linear_to_image(
        &self,
        cmd: vk::CommandBuffer,
        src: &GpuBuffer,
        planes: &[PlaneLayout],
        image: &DeviceImage,
        fourcc: Fourcc,
        until: Completion,
    ) -> Result<(), TransferError> {
        check_image(image, fourcc, image.extent())?;
        let regions = plane_regions(fourcc, image.extent(), planes, src.len())?;
        // SAFETY: the caller's contract; every plane is overwritten, so the old contents go.
        unsafe { image.record_transition(cmd, ImageAccess::TRANSFER_DST, true, until) };
        // SAFETY: as above (VUID-vkCmdCopyBufferToImage-pRegions-06218).
        unsafe { self.device().cmd_copy_buffer_to_image(cmd, src.buffer(), image.image(), vk::ImageLayout::TRANSFER_DST_OPTIMAL, &regions) };
        src.track(until);
        Ok(())
    }

    /// [`Engine::record_copy_image_to_linear`], submitted after `options.waits`.
    pub fn copy_image_to_linear(
        &self,
        image: &DeviceImage,
        fourcc: Fourcc,
        dst: &GpuBuffer,
        planes: &[PlaneLayout],
        options: SubmitOptions,
    ) -> Result<Submission, TransferError> {
        check_image(image, fourcc, image.extent())?;
        plane_regions(fourcc, image.extent(), planes, dst.len())?;
        let (_, s) = self.submit(options, |cmd, until| {
            // SAFETY: the engine's own command buffer, recording, submitted with `until`.
            unsafe { self.record_copy_image_to_linear(cmd, image, fourcc, dst, planes, until) }
        })?;
        Ok(s)
    }

    /// [`Engine::record_copy_linear_to_image`], submitted after `options.waits`.
    pub fn copy_linear_to_image(
        &self,
        src: &GpuBuffer,
        planes: &[PlaneLayout],
        image: &DeviceImage,
        fourcc: Fourcc,
        options: SubmitOptions,
    ) -> Result<Submission, TransferError> {
        check_image(image, fourcc, image.extent())?;
        plane_regions(fourcc, image.extent(), planes, src.len())?;
        let (_, s) = self.submit(options, |cmd, until| {
            // SAFETY: as above.
            unsafe { self.record_copy_linear_to_image(cmd, src, planes, image, fourcc, until) }
        })?;
        Ok(s)
    }
}
