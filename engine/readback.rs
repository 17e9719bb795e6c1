//! Read an image's planes back to the CPU, tightly packed and concatenated (Y then UV...),
//! and clear an exported image on the GPU: the two ends of every pixel-exact test.
//!
//! Memory shared with another device or API is handed over with queue family ownership
//! transfers: an image imported explicitly is acquired from `VK_QUEUE_FAMILY_FOREIGN_EXT`
//! (or `EXTERNAL` without that extension) before use, and an exported image is released to
//! it after the producer wrote it.

use ash::vk;
use dmabridge_interop::tiling::LinearPlane;
use dmabridge_interop::{format_info, Fourcc};

use crate::commands::{image_barrier, plane_aspect, SubmitError};
use crate::buffer::{BufferError, GpuBuffer};
use crate::export::ExportedImage;
use crate::import::{full_aspect, ImportPath, ImportedImage};
use crate::vk_format;
use crate::Engine;

/// Why a readback or clear failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadbackError {
    #[error("{0} has no plane layout or Vulkan format in dmabridge's tables")]
    UnknownFourcc(Fourcc),
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error("a {0}-byte readback does not fit in this process's address space")]
    TooLarge(u64),
    #[error("{fourcc} has {expected} planes, but {got} plane layouts were given")]
    PlaneCount { fourcc: Fourcc, expected: usize, got: usize },
    #[error("plane {plane}: offset {offset} and stride {stride} must be multiples of its {texel}-byte texel, and the stride at least its row of {row} bytes")]
    PlaneLayout { plane: usize, offset: u64, stride: u64, texel: u64, row: u64 },
    #[error("plane {plane} ends at byte {end}, past the {len}-byte buffer")]
    PastEndOfBuffer { plane: usize, end: u64, len: u64 },
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

impl Engine {
    /// The queue family that other devices and APIs hand memory over from.
    pub fn foreign_queue_family(&self) -> u32 {
        if self.extensions().has(crate::DeviceExtension::QueueFamilyForeign) {
            vk::QUEUE_FAMILY_FOREIGN_EXT
        } else {
            vk::QUEUE_FAMILY_EXTERNAL
        }
    }
}

/// One copy region per plane of `fourcc`, between an image and a buffer whose planes lie at
/// `planes` (offset and stride in bytes, checked against the texel size and `buffer_len`).
fn plane_regions(
    fourcc: Fourcc,
    (width, height): (u32, u32),
    planes: &[LinearPlane],
    buffer_len: u64,
) -> Result<Vec<vk::BufferImageCopy>, ReadbackError> {
    let info = format_info(fourcc).ok_or(ReadbackError::UnknownFourcc(fourcc))?;
    let entry = vk_format::to_vk(fourcc).ok_or(ReadbackError::UnknownFourcc(fourcc))?;
    if planes.len() != info.plane_count() {
        return Err(ReadbackError::PlaneCount { fourcc, expected: info.plane_count(), got: planes.len() });
    }
    let mut regions = Vec::with_capacity(planes.len());
    for (i, p) in planes.iter().enumerate() {
        let texel = info.planes[i].cpp as u64;
        // Packed 4:2:2 formats copy in 2x1 blocks of 4 bytes.
        let block = if entry.vk_planes == 1 && info.is_yuv { 4 } else { texel };
        let row = info.min_stride(i, width);
        if p.offset % block != 0 || p.stride % block != 0 || p.stride < row {
            return Err(ReadbackError::PlaneLayout { plane: i, offset: p.offset, stride: p.stride, texel: block, row });
        }
        let rows = info.plane_height(i, height) as u64;
        let end = (rows - 1)
            .checked_mul(p.stride)
            .and_then(|v| v.checked_add(row))
            .and_then(|v| v.checked_add(p.offset))
            .unwrap_or(u64::MAX);
        if end > buffer_len {
            return Err(ReadbackError::PastEndOfBuffer { plane: i, end, len: buffer_len });
        }
        let vk_plane =
            if entry.mapping == vk_format::Mapping::ChromaSwapped && entry.vk_planes == 3 && i > 0 { 3 - i } else { i };
        regions.push(vk::BufferImageCopy {
            buffer_offset: p.offset,
            buffer_row_length: u32::try_from(p.stride / texel).map_err(|_| ReadbackError::TooLarge(p.stride))?,
            buffer_image_height: 0,
            image_subresource: vk::ImageSubresourceLayers {
                aspect_mask: plane_aspect(entry.vk_planes, vk_plane),
                mip_level: 0,
                base_array_layer: 0,
                layer_count: 1,
            },
            image_offset: vk::Offset3D::default(),
            image_extent: vk::Extent3D { width: info.plane_width(i, width), height: info.plane_height(i, height), depth: 1 },
        });
    }
    Ok(regions)
}

/// Copies every plane of `image` (in `old` layout, optionally acquired from the foreign
/// queue family) into host memory; returns the bytes and leaves the image in
/// TRANSFER_SRC_OPTIMAL.
fn read_planes(
    engine: &Engine,
    image: vk::Image,
    fourcc: Fourcc,
    (width, height): (u32, u32),
    old: vk::ImageLayout,
    acquire_from: Option<u32>,
) -> Result<Vec<u8>, ReadbackError> {
    let info = format_info(fourcc).ok_or(ReadbackError::UnknownFourcc(fourcc))?;
    let total = info.packed_size(width, height);
    let len = usize::try_from(total).map_err(|_| ReadbackError::TooLarge(total))?;
    let hb = GpuBuffer::new(engine, len)?;
    let mut packed = Vec::with_capacity(info.plane_count());
    let mut offset = 0u64;
    for i in 0..info.plane_count() {
        packed.push(LinearPlane { offset, stride: info.min_stride(i, width) });
        offset += info.packed_plane_size(i, width, height);
    }
    let regions = plane_regions(fourcc, (width, height), &packed, total)?;
    let vk_planes = vk_format::to_vk(fourcc).map_or(1, |e| e.vk_planes);
    let mut barrier = image_barrier(
        image,
        full_aspect(vk_planes),
        old,
        vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
        vk::AccessFlags::MEMORY_WRITE,
        vk::AccessFlags::TRANSFER_READ,
    );
    if let Some(family) = acquire_from {
        // Acquire from the other device/API; the old layout is the one it left the memory
        // in, GENERAL by convention for shared images.
        barrier = barrier
            .old_layout(vk::ImageLayout::GENERAL)
            .src_access_mask(vk::AccessFlags::empty())
            .src_queue_family_index(family)
            .dst_queue_family_index(engine.queue_family());
    }
    engine.submit_and_wait(|device, cmd| {
        // SAFETY: recording state; the regions cover exactly the image's planes and fit the
        // buffer sized from the same plane table (VUID-vkCmdCopyImageToBuffer-pRegions-00183).
        unsafe {
            device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &[],
                &[],
                &[barrier],
            );
            device.cmd_copy_image_to_buffer(cmd, image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, hb.buffer(), &regions);
            let host = vk::BufferMemoryBarrier::default()
                .buffer(hb.buffer())
                .offset(0)
                .size(vk::WHOLE_SIZE)
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ)
                .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED);
            device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[],
                &[host],
                &[],
            );
        }
    })?;
    // The GPU finished writing the buffer: the submission was waited for.
    let out = hb.bytes()[..len].to_vec();
    Ok(out)
}

impl Engine {
    /// Device-native conversion to a linear consumer: copies every plane of `image` (any
    /// tiling the device holds, OPTIMAL or a DRM modifier; in `layout`) into `dst`, each
    /// plane at the offset and stride the consumer asks for. Leaves the image in
    /// TRANSFER_SRC_OPTIMAL. Bytes of `dst` outside the planes' rows are left alone.
    pub fn copy_image_to_linear(
        &self,
        image: vk::Image,
        fourcc: Fourcc,
        extent: (u32, u32),
        layout: vk::ImageLayout,
        dst: &GpuBuffer<'_>,
        planes: &[LinearPlane],
    ) -> Result<(), ReadbackError> {
        let regions = plane_regions(fourcc, extent, planes, dst.len() as u64)?;
        let vk_planes = vk_format::to_vk(fourcc).map_or(1, |e| e.vk_planes);
        let barrier = image_barrier(
            image,
            full_aspect(vk_planes),
            layout,
            vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
            vk::AccessFlags::MEMORY_WRITE,
            vk::AccessFlags::TRANSFER_READ,
        );
        self.submit_and_wait(|device, cmd| {
            // SAFETY: recording state; the regions were checked against the image's planes
            // and the buffer's length (VUID-vkCmdCopyImageToBuffer-pRegions-00183).
            unsafe {
                device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::ALL_COMMANDS, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &[], &[], &[barrier]);
                device.cmd_copy_image_to_buffer(cmd, image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, dst.buffer(), &regions);
            }
        })?;
        Ok(())
    }

    /// The reverse: fills every plane of `image` (in `layout`) from `src`, whose planes lie at
    /// `planes`. Leaves the image in TRANSFER_DST_OPTIMAL.
    pub fn copy_linear_to_image(
        &self,
        src: &GpuBuffer<'_>,
        planes: &[LinearPlane],
        image: vk::Image,
        fourcc: Fourcc,
        extent: (u32, u32),
        layout: vk::ImageLayout,
    ) -> Result<(), ReadbackError> {
        let regions = plane_regions(fourcc, extent, planes, src.len() as u64)?;
        let vk_planes = vk_format::to_vk(fourcc).map_or(1, |e| e.vk_planes);
        let barrier = image_barrier(
            image,
            full_aspect(vk_planes),
            layout,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE,
            vk::AccessFlags::TRANSFER_WRITE,
        );
        self.submit_and_wait(|device, cmd| {
            // SAFETY: as above (VUID-vkCmdCopyBufferToImage-pRegions-06218).
            unsafe {
                device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::ALL_COMMANDS, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &[], &[], &[barrier]);
                device.cmd_copy_buffer_to_image(cmd, src.buffer(), image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &regions);
            }
        })?;
        Ok(())
    }
}

impl ImportedImage<'_> {
    /// The image's pixels, each plane's visible rows tightly packed, planes concatenated.
    pub fn read_back(&self) -> Result<Vec<u8>, ReadbackError> {
        let first_use = self.current_layout() == vk::ImageLayout::UNDEFINED;
        let acquire = (self.path() != ImportPath::BufferCopy && first_use).then(|| self.acquire_family());
        let old = self.current_layout();
        let bytes = read_planes(self.engine(), self.image(), self.fourcc(), self.extent(), old, acquire)?;
        self.set_current_layout(vk::ImageLayout::TRANSFER_SRC_OPTIMAL);
        Ok(bytes)
    }
}

impl ExportedImage<'_> {
    /// Records `write` (which fills the image in TRANSFER_DST_OPTIMAL; old contents are
    /// discarded) and releases the image to the foreign queue family in GENERAL layout,
    /// ready for another device or API to acquire.
    fn write_and_release(&self, write: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> Result<(), ReadbackError> {
        let engine = self.engine();
        let image = self.image();
        let aspect = full_aspect(vk_format::from_vk(self.vk_format()).map_or(1, |e| e.vk_planes));
        let to_dst = image_barrier(
            image,
            aspect,
            vk::ImageLayout::UNDEFINED,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            vk::AccessFlags::empty(),
            vk::AccessFlags::TRANSFER_WRITE,
        );
        let release = image_barrier(
            image,
            aspect,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            vk::ImageLayout::GENERAL,
            vk::AccessFlags::TRANSFER_WRITE,
            vk::AccessFlags::empty(),
        )
        .src_queue_family_index(engine.queue_family())
        .dst_queue_family_index(self.release_family());
        engine.submit_and_wait(|device, cmd| {
            // SAFETY: recording state; the barriers cover the image's planes, and the release
            // names this queue family and the one the consumer acquires from
            // (VUID-VkImageMemoryBarrier-image-04071).
            unsafe {
                device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &[], &[], &[to_dst]);
            }
            write(device, cmd);
            // SAFETY: as above.
            unsafe {
                device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::BOTTOM_OF_PIPE, vk::DependencyFlags::empty(), &[], &[], &[release]);
            }
        })?;
        Ok(())
    }

    /// Clears the whole (single-plane colour) image to `rgba` and releases it to the
    /// foreign queue family.
    pub fn clear_and_release(&self, rgba: [f32; 4]) -> Result<(), ReadbackError> {
        let image = self.image();
        let range = vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        };
        self.write_and_release(|device, cmd| {
            // SAFETY: recording state; the image was created with TRANSFER_DST usage by the
            // caller's request (VUID-vkCmdClearColorImage-image-00002) and is single-plane colour.
            unsafe {
                device.cmd_clear_color_image(cmd, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &vk::ClearColorValue { float32: rgba }, &[range]);
            }
        })
    }

    /// Fills every plane of the image from `src` (planes at `planes`) and releases it to the
    /// foreign queue family: a producer's frame, handed to its consumer.
    pub fn upload_and_release(&self, src: &GpuBuffer<'_>, planes: &[LinearPlane]) -> Result<(), ReadbackError> {
        let (fourcc, width, height) = self.frame();
        let regions = plane_regions(fourcc, (width, height), planes, src.len() as u64)?;
        let (image, buffer) = (self.image(), src.buffer());
        self.write_and_release(|device, cmd| {
            // SAFETY: recording state; the regions were checked against the image's planes and
            // the buffer's length (VUID-vkCmdCopyBufferToImage-pRegions-06218).
            unsafe {
                device.cmd_copy_buffer_to_image(cmd, buffer, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &regions);
            }
        })
    }
}
