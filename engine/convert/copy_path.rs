//! The copy-command path: tiles whose bytes are row-major inside each tile moved with
//! `vkCmdCopyBufferToImage` / `vkCmdCopyImageToBuffer` regions through an intermediate R8
//! image, where that beats the compute shader (see [`copy_blocks`]).

use ash::vk;
use dmabridge_interop::tiling::gpu::GpuParamError;
use dmabridge_interop::tiling::PlaneGeometry;
use dmabridge_interop::dmabuf::PlaneLayout;
use gpu_allocator::vulkan::Allocation;
use gpu_allocator::MemoryLocation;

use crate::error::VkResultExt;
use crate::resources::image::{image_2d, image_barrier, record_barrier};
use crate::device::usage::ImageUse;
use crate::device::submit::Garbage;
use crate::Engine;
use super::error::ConvertError;

/// An intermediate R8 image of the copy-command path.
struct Scratch {
    image: vk::Image,
    allocation: Option<Allocation>,
    width: u32,
    height: u32,
}

/// A recording context's scratch images: taken in order by one recording, reused by the
/// next once the context's last use is complete.
#[derive(Default)]
pub(super) struct ScratchImages {
    images: Vec<Scratch>,
    taken: usize,
}

impl ScratchImages {
    /// For the next recording: every image is free again.
    pub(super) fn reset(&mut self) {
        self.taken = 0;
    }

    /// The images and their memory, to be destroyed once the context's last use is done.
    pub(super) fn into_garbage(self) -> Vec<Garbage> {
        let mut g = Vec::new();
        for s in self.images {
            g.push(Garbage::Image(s.image));
            g.extend(s.allocation.map(Garbage::Allocation));
        }
        g
    }
}

/// A tile stored row after row at `offset` in its plane, that belongs at (`x`, `y`) of the
/// linear plane: what one copy region moves.
#[derive(Debug, Clone, Copy)]
pub(super) struct Block {
    offset: u64,
    x: u32,
    y: u32,
    width: u32,
    height: u32,
}

/// Most regions one plane may be split into before the compute shader is the better tool.
const MAX_COPY_REGIONS: usize = 1 << 17;

/// The tiles of `p` as copy blocks, when copy commands beat the compute shader on them:
/// layouts whose bytes are row-major inside each tile, with tiles at least 32 bytes wide
/// (narrower ones cost more per region than they save), on a plane no wider or taller than
/// an image may be. On lavapipe a copy region is a memcpy per row, while the compute shader
/// pays per 4-byte access; on 64-byte tiles that is about ten times faster.
pub(super) fn copy_blocks(p: &PlaneGeometry, max_dim: u32) -> Option<Vec<Block>> {
    use dmabridge_interop::tiling::PlaneAddress;
    if !copy_eligible(p, max_dim) {
        return None;
    }
    let address = PlaneAddress::of(p);
    let mut blocks = Vec::with_capacity((p.tiles_x * p.tiles_y) as usize);
    for ty in 0..p.tiles_y {
        for tx in 0..p.tiles_x {
            let (x, y) = (tx * p.tile_width, ty * p.tile_height);
            blocks.push(Block { offset: address.offset(x, y), x, y, width: p.tile_width, height: p.tile_height });
        }
    }
    Some(blocks)
}

/// Whether copy commands can move `p`'s tiles (see [`copy_blocks`]).
pub(super) fn copy_eligible(p: &PlaneGeometry, max_dim: u32) -> bool {
    use dmabridge_interop::tiling::AddressKind;
    matches!(p.kind, AddressKind::RowMajorTiles | AddressKind::SamsungZFlipZ)
        && p.tile_width >= 32
        && p.padded_width_bytes <= max_dim
        && p.padded_rows <= max_dim
        && (p.tiles_x as usize) * (p.tiles_y as usize) <= MAX_COPY_REGIONS
}

/// One plane's copy through the scratch images (see [`record_copy_plane`]).
pub(super) struct PlaneCopy<'a> {
    pub(super) plane: (&'a PlaneGeometry, &'a [Block]),
    pub(super) tiled: (vk::Buffer, u64),
    pub(super) linear: (vk::Buffer, PlaneLayout),
    pub(super) to_tiled: bool,
}

/// One plane `p` through copy commands, its tiles in `blocks`: the tiled bytes (in
/// `tiled` from `tiled_at`) go into an R8 image tile by tile (one region per tile), and
/// the image to the linear rows (in `linear` at `l`) in one region; or the reverse, with
/// the image cleared first so that tile padding comes out zero.
///
/// # Safety
/// `cmd` is a command buffer of `engine`'s device, recording; the buffers hold the
/// plane where `copy` says.
pub(super) unsafe fn record_copy_plane(engine: &Engine, cmd: vk::CommandBuffer, scratch: &mut ScratchImages, copy: PlaneCopy<'_>) -> Result<(), ConvertError> {
    let PlaneCopy { plane: (p, blocks), tiled: (tiled, tiled_at), linear: (linear, l), to_tiled } = copy;
    let device = engine.device();
    let image = scratch.take(engine, p.padded_width_bytes, p.padded_rows)?;
    let layers = vk::ImageSubresourceLayers { aspect_mask: vk::ImageAspectFlags::COLOR, mip_level: 0, base_array_layer: 0, layer_count: 1 };
    let tile_regions: Vec<vk::BufferImageCopy> = blocks
        .iter()
        .map(|b| vk::BufferImageCopy {
            buffer_offset: tiled_at + b.offset,
            buffer_row_length: b.width,
            buffer_image_height: b.height,
            image_subresource: layers,
            image_offset: vk::Offset3D { x: b.x as i32, y: b.y as i32, z: 0 },
            image_extent: vk::Extent3D { width: b.width, height: b.height, depth: 1 },
        })
        .collect();
    let stride = u32::try_from(l.stride).map_err(|_| GpuParamError::TooLarge { what: "linear stride", end: l.stride })?;
    let rows_region = vk::BufferImageCopy {
        buffer_offset: l.offset,
        buffer_row_length: stride,
        buffer_image_height: 0,
        image_subresource: layers,
        image_offset: vk::Offset3D::default(),
        image_extent: vk::Extent3D { width: p.width_bytes, height: p.rows, depth: 1 },
    };
    let range =
        crate::resources::image::whole_image(vk::ImageAspectFlags::COLOR);
    let to_dst = image_barrier(
        image,
        vk::ImageAspectFlags::COLOR,
        vk::ImageLayout::UNDEFINED,
        vk::ImageLayout::TRANSFER_DST_OPTIMAL,
        vk::AccessFlags::empty(),
        vk::AccessFlags::TRANSFER_WRITE,
    );
    let dst_to_src = image_barrier(
        image,
        vk::ImageAspectFlags::COLOR,
        vk::ImageLayout::TRANSFER_DST_OPTIMAL,
        vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
        vk::AccessFlags::TRANSFER_WRITE,
        vk::AccessFlags::TRANSFER_READ,
    );
    // Earlier work in the same command buffer (another plane's dispatch or copy, or an
    // earlier use of the scratch image) may touch what this plane reads or writes.
    let before = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_READ)
        .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE);
    let clear_done = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(vk::AccessFlags::TRANSFER_WRITE);
    let after = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(
        vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::HOST_READ | vk::AccessFlags::TRANSFER_READ,
    );
    let transfer = vk::PipelineStageFlags::TRANSFER;
    // SAFETY: the caller's contract for `cmd` and the buffers; the scratch image has
    // TRANSFER_SRC|DST usage and R8_UINT texels, so every region's offsets and row lengths
    // are in bytes; the tile regions lie inside the tiled plane (the geometry's padded
    // size) and inside the image (padded size); the rows region lies inside the linear
    // plane (VUID-vkCmdCopyBufferToImage-pRegions-06218, VUID-vkCmdCopyImageToBuffer-pRegions-00183);
    // each barrier's access masks belong to its stages (VUID-vkCmdPipelineBarrier-srcAccessMask-02815).
    unsafe {
        record_barrier(device, cmd, (transfer | vk::PipelineStageFlags::COMPUTE_SHADER, transfer), &[before], &[], &[to_dst]);
        if to_tiled {
            device.cmd_clear_color_image(cmd, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &vk::ClearColorValue { uint32: [0; 4] }, &[range]);
            record_barrier(device, cmd, (transfer, transfer), &[clear_done], &[], &[]);
            device.cmd_copy_buffer_to_image(cmd, linear, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &[rows_region]);
            record_barrier(device, cmd, (transfer, transfer), &[], &[], &[dst_to_src]);
            device.cmd_copy_image_to_buffer(cmd, image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, tiled, &tile_regions);
        } else {
            device.cmd_copy_buffer_to_image(cmd, tiled, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &tile_regions);
            record_barrier(device, cmd, (transfer, transfer), &[], &[], &[dst_to_src]);
            device.cmd_copy_image_to_buffer(cmd, image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, linear, &[rows_region]);
        }
        record_barrier(
            device,
            cmd,
            (transfer, transfer | vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::HOST),
            &[after],
            &[],
            &[],
        );
    }
    Ok(())
}

impl ScratchImages {
    /// An R8_UINT image of at least `width` x `height` for the copy path: the next scratch
    /// image, grown (re-created) when too small.
    fn take(&mut self, engine: &Engine, width: u32, height: u32) -> Result<vk::Image, ConvertError> {
        let index = self.taken;
        if let Some(s) = self.images.get(index).filter(|s| s.width >= width && s.height >= height) {
            self.taken += 1;
            return Ok(s.image);
        }
        let (width, height) = self.images.get(index).map_or((width, height), |s| (s.width.max(width), s.height.max(height)));
        let device = engine.device();
        let info = image_2d(vk::Format::R8_UINT, (width, height), vk::ImageTiling::OPTIMAL, &ImageUse::new(vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST));
        // SAFETY: R8_UINT with transfer usage is a required format; 1 level, 1 layer, and an
        // extent within maxImageDimension2D (checked by copy_blocks).
        let image = unsafe { device.create_image(&info, None) }.vk("vkCreateImage")?;
        // SAFETY: an image of this device.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let allocation = match engine.shared().memory.allocate("dmabridge scratch image", reqs, MemoryLocation::GpuOnly, false) {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: an unbound image of this device, never used.
                unsafe { device.destroy_image(image, None) };
                return Err(e.into());
            }
        };
        // SAFETY: an unbound image; the allocation is at least reqs.size at an offset aligned
        // as reqs asked (VUID-vkBindImageMemory-memoryOffset-01048).
        let bound = unsafe { device.bind_image_memory(image, allocation.memory(), allocation.offset()) }.vk("vkBindImageMemory");
        let fresh = Scratch { image, allocation: Some(allocation), width, height };
        if index < self.images.len() {
            // The old, smaller one is unused: this context's earlier uses are complete (it was
            // taken only then), and this recording took images before `index` only.
            let old = std::mem::replace(&mut self.images[index], fresh);
            let mut g = vec![Garbage::Image(old.image)];
            g.extend(old.allocation.map(Garbage::Allocation));
            engine.shared().retire(Vec::new(), g);
        } else {
            self.images.push(fresh);
        }
        bound?;
        self.taken = index + 1;
        Ok(image)
    }
}
