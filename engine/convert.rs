//! Conversions on the GPU: tiled <-> linear for every [`TileLayout`], and NV12/P010 <->
//! RGBA8, with the compute shaders of `shaders/` (interface documented in
//! [`dmabridge_interop::tiling::gpu`]). The push constants and dispatch sizes come from the
//! same geometry as the CPU reference in [`dmabridge_interop::tiling`], which the tests
//! compare against byte for byte.
//!
//! Buffers are host-visible storage buffers ([`GpuBuffer`]): on lavapipe all memory is
//! host memory. A discrete GPU would stage through device-local memory; the recording
//! functions ([`Converter::record_planes`]) take any buffers, so that is the caller's choice.

use ash::vk;
use dmabridge_interop::tiling::gpu::{
    plane_dispatches, rgba_to_nv12_dispatch, yuv_to_rgba_dispatch, ColourPushConstants, Dispatch, GpuParamError,
    TilePushConstants,
};
use dmabridge_interop::tiling::{packed_planes, tiled_size, ColourMatrix, ColourRange, LinearPlane, TilingError};
use dmabridge_interop::dmabuf::{check_import, DmaBuf, ImportCheckError, ImportFacts};
use dmabridge_interop::negotiate::ConversionKind;
use dmabridge_interop::{format_info, Format, Fourcc, Layout, TileLayout};

use crate::buffer::{BufferError, GpuBuffer};
use crate::commands::{image_2d, image_barrier, SubmitError};
use crate::import::{FileBuffer, ImportError};
use crate::shaders::{spirv_words, COLOUR_SPV, TILE_SPV};
use crate::Engine;

/// Why a GPU conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error(transparent)]
    Params(#[from] GpuParamError),
    #[error(transparent)]
    Tiling(#[from] TilingError),
    #[error("input is {got} bytes, but a {what} needs {expected}")]
    InputSize { what: String, expected: u64, got: u64 },
    #[error("embedded SPIR-V is malformed: {0}")]
    SpirV(std::io::Error),
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error("no memory type for the copy path's scratch image")]
    NoMemoryType,
    #[error("{call} failed: {result}")]
    Vk { call: &'static str, result: vk::Result },
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error("layout {0} is not a tiled layout dmabridge converts")]
    NotTiled(Layout),
    #[error(transparent)]
    Check(#[from] ImportCheckError),
    #[error("plane {plane}: a {layout} plane's stride is its padded row of {expected} bytes, not {stride}")]
    TiledStride { plane: usize, layout: TileLayout, stride: u64, expected: u64 },
    #[error("plane {plane}: the padded tiles reach byte {end}, past the {fd_size}-byte fd")]
    TilesPastEndOfFd { plane: usize, end: u64, fd_size: u64 },
    #[error(transparent)]
    Import(#[from] Box<ImportError>),
}

fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> ConvertError {
    move |result| ConvertError::Vk { call, result }
}

/// A compute pipeline whose bindings are all storage buffers.
struct Pipeline {
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    bindings: u32,
}

impl Pipeline {
    fn new(device: &ash::Device, spv: &[u8], bindings: u32, push_size: u32) -> Result<Pipeline, ConvertError> {
        let words = spirv_words(spv).map_err(ConvertError::SpirV)?;
        let binding_info: Vec<_> = (0..bindings)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let mut p = Pipeline {
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            bindings,
        };
        // On error `p` is dropped by the caller's `destroy`; collect what exists so far.
        let result = (|| {
            // SAFETY: valid create infos; the SPIR-V was validated by spirv-val at build time
            // (VUID-VkShaderModuleCreateInfo-pCode-08737).
            unsafe {
                p.set_layout = device
                    .create_descriptor_set_layout(&vk::DescriptorSetLayoutCreateInfo::default().bindings(&binding_info), None)
                    .map_err(vk_err("vkCreateDescriptorSetLayout"))?;
                let ranges =
                    [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).offset(0).size(push_size)];
                let layouts = [p.set_layout];
                p.layout = device
                    .create_pipeline_layout(
                        &vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts).push_constant_ranges(&ranges),
                        None,
                    )
                    .map_err(vk_err("vkCreatePipelineLayout"))?;
                let module = device
                    .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                    .map_err(vk_err("vkCreateShaderModule"))?;
                let stage = vk::PipelineShaderStageCreateInfo::default()
                    .stage(vk::ShaderStageFlags::COMPUTE)
                    .module(module)
                    .name(c"main");
                let info = vk::ComputePipelineCreateInfo::default().stage(stage).layout(p.layout);
                let created = device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None);
                device.destroy_shader_module(module, None);
                p.pipeline = created.map_err(|(_, r)| ConvertError::Vk { call: "vkCreateComputePipelines", result: r })?[0];
            }
            Ok::<(), ConvertError>(())
        })();
        match result {
            Ok(()) => Ok(p),
            Err(e) => {
                p.destroy(device);
                Err(e)
            }
        }
    }

    fn destroy(&self, device: &ash::Device) {
        // SAFETY: objects of this device, no longer used by pending work; null handles are
        // ignored by the destroy functions.
        unsafe {
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

/// The conversion pipelines of one engine.
pub struct Converter<'e> {
    engine: &'e Engine,
    tile: Pipeline,
    colour: Pipeline,
    pool: vk::DescriptorPool,
    /// Intermediate images of the copy-command path, kept between submissions (allocating
    /// one per call costs more than the copy): one per plane of a submission.
    scratch: std::cell::RefCell<Vec<Scratch>>,
    /// How many of `scratch` the submission being recorded has taken.
    scratch_used: std::cell::Cell<usize>,
    /// `maxImageDimension2D`: the largest scratch image the copy path may make.
    max_image_dimension: u32,
}

struct Scratch {
    image: vk::Image,
    memory: vk::DeviceMemory,
    width: u32,
    height: u32,
}

/// A tile stored row after row (`pitch` bytes apart) at `offset` in its plane, that belongs
/// at (`x`, `y`) of the linear plane: what one copy region moves.
#[derive(Debug, Clone, Copy)]
struct Block {
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
fn copy_blocks(p: &dmabridge_interop::tiling::PlaneGeometry, max_dim: u32) -> Option<Vec<Block>> {
    use dmabridge_interop::tiling::{AddressKind, PlaneAddress};
    let eligible = matches!(p.kind, AddressKind::RowMajorTiles | AddressKind::SamsungZFlipZ)
        && p.tile_width >= 32
        && p.padded_width_bytes <= max_dim
        && p.padded_rows <= max_dim
        && (p.tiles_x as usize) * (p.tiles_y as usize) <= MAX_COPY_REGIONS;
    if !eligible {
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

/// The largest number of descriptor sets one submission uses (tiled -> tiled: two).
const MAX_SETS: u32 = 4;

impl<'e> Converter<'e> {
    pub fn new(engine: &'e Engine) -> Result<Self, ConvertError> {
        let device = engine.device();
        let tile = Pipeline::new(device, TILE_SPV, 2, std::mem::size_of::<TilePushConstants>() as u32)?;
        let colour = match Pipeline::new(device, COLOUR_SPV, 3, std::mem::size_of::<ColourPushConstants>() as u32) {
            Ok(c) => c,
            Err(e) => {
                tile.destroy(device);
                return Err(e);
            }
        };
        let sizes = [vk::DescriptorPoolSize { ty: vk::DescriptorType::STORAGE_BUFFER, descriptor_count: MAX_SETS * 3 }];
        let info = vk::DescriptorPoolCreateInfo::default().max_sets(MAX_SETS).pool_sizes(&sizes);
        // SAFETY: valid create info.
        let pool = match unsafe { device.create_descriptor_pool(&info, None) } {
            Ok(p) => p,
            Err(result) => {
                tile.destroy(device);
                colour.destroy(device);
                return Err(ConvertError::Vk { call: "vkCreateDescriptorPool", result });
            }
        };
        Ok(Converter {
            engine,
            tile,
            colour,
            pool,
            scratch: std::cell::RefCell::new(Vec::new()),
            scratch_used: std::cell::Cell::new(0),
            // SAFETY: plain query of this engine's physical device.
            max_image_dimension: unsafe {
                engine.instance().get_physical_device_properties(engine.physical_device())
            }
            .limits
            .max_image_dimension2_d,
        })
    }

    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    /// A descriptor set of `pipeline` with `buffers` at bindings 0.. in order.
    fn set(&self, pipeline: &Pipeline, buffers: &[vk::Buffer]) -> Result<vk::DescriptorSet, ConvertError> {
        let device = self.engine.device();
        let layouts = [pipeline.set_layout];
        let alloc = vk::DescriptorSetAllocateInfo::default().descriptor_pool(self.pool).set_layouts(&layouts);
        // SAFETY: the pool was sized for MAX_SETS sets, and it is reset after every submission.
        let set = unsafe { device.allocate_descriptor_sets(&alloc) }.map_err(vk_err("vkAllocateDescriptorSets"))?[0];
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
            .iter()
            .map(|b| [vk::DescriptorBufferInfo { buffer: *b, offset: 0, range: vk::WHOLE_SIZE }])
            .collect();
        let writes: Vec<_> = infos
            .iter()
            .enumerate()
            .take(pipeline.bindings as usize)
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the set is not in use; the buffers have STORAGE_BUFFER usage
        // (VUID-VkWriteDescriptorSet-descriptorType-00331).
        unsafe { device.update_descriptor_sets(&writes, &[]) };
        Ok(set)
    }

    fn reset_pool(&self) {
        // SAFETY: called only after the submission using the sets was waited for
        // (VUID-vkResetDescriptorPool-descriptorPool-00313).
        let _ = unsafe { self.engine.device().reset_descriptor_pool(self.pool, vk::DescriptorPoolResetFlags::empty()) };
    }

    /// Records `dispatches` of `pipeline` with `set`, each followed by a barrier so that the
    /// next dispatch (or a later transfer/host read) sees its writes.
    fn record<P: PushBytes>(&self, cmd: vk::CommandBuffer, pipeline: &Pipeline, set: vk::DescriptorSet, dispatches: &[Dispatch<P>]) {
        let device = self.engine.device();
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::HOST_READ | vk::AccessFlags::TRANSFER_READ);
        // SAFETY: recording state; pipeline, layout and set belong to this device; the push
        // constants are exactly the range declared (VUID-vkCmdPushConstants-offset-01795) and
        // the group counts are within maxComputeWorkGroupCount (65535, checked by the
        // dispatch builders).
        unsafe {
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.pipeline);
            device.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.layout, 0, &[set], &[]);
            for d in dispatches {
                device.cmd_push_constants(cmd, pipeline.layout, vk::ShaderStageFlags::COMPUTE, 0, d.push.push_bytes());
                let [x, y, z] = d.group_counts;
                device.cmd_dispatch(cmd, x, y, z);
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::HOST | vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &[barrier],
                    &[],
                    &[],
                );
            }
        }
    }

    /// Records the conversion of every plane between a tiled buffer (`tiled`, starting at
    /// `tiled_base`) and a linear one (`linear`, planes at `planes`), into `cmd`: copy
    /// commands where the layout's tiles are wide row-major blocks (see `copy_blocks`), the
    /// compute shader otherwise. See [`Converter::free_scratch`] for what the caller owes.
    #[allow(clippy::too_many_arguments)]
    pub fn record_planes(
        &self,
        cmd: vk::CommandBuffer,
        layout: TileLayout,
        fourcc: Fourcc,
        (width, height): (u32, u32),
        tiled: vk::Buffer,
        tiled_base: u64,
        linear: vk::Buffer,
        planes: &[LinearPlane],
        to_tiled: bool,
    ) -> Result<(), ConvertError> {
        let dispatches = plane_dispatches(layout, fourcc, width, height, tiled_base, planes, to_tiled)?;
        let geometry = tiled_size(layout, fourcc, width, height)?;
        let max_dim = self.max_image_dimension;
        let mut compute = Vec::with_capacity(dispatches.len());
        for ((d, p), linear_plane) in dispatches.into_iter().zip(&geometry.planes).zip(planes) {
            match copy_blocks(p, max_dim) {
                Some(blocks) => {
                    let at = tiled_base + p.offset;
                    self.record_copy_plane(cmd, p, &blocks, tiled, at, linear, *linear_plane, to_tiled)?
                }
                None => compute.push(d),
            }
        }
        if !compute.is_empty() {
            let set =
                if to_tiled { self.set(&self.tile, &[linear, tiled])? } else { self.set(&self.tile, &[tiled, linear])? };
            self.record(cmd, &self.tile, set, &compute);
        }
        Ok(())
    }

    /// One plane through copy commands: the tiled bytes go into an R8 image tile by tile
    /// (one region per tile), and the image to the linear rows in one region; or the reverse,
    /// with the image cleared first so that tile padding comes out zero.
    #[allow(clippy::too_many_arguments)]
    fn record_copy_plane(
        &self,
        cmd: vk::CommandBuffer,
        p: &dmabridge_interop::tiling::PlaneGeometry,
        blocks: &[Block],
        tiled: vk::Buffer,
        tiled_at: u64,
        linear: vk::Buffer,
        l: LinearPlane,
        to_tiled: bool,
    ) -> Result<(), ConvertError> {
        let device = self.engine.device();
        let image = self.scratch_image(p.padded_width_bytes, p.padded_rows)?;
        let layers = vk::ImageSubresourceLayers {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            mip_level: 0,
            base_array_layer: 0,
            layer_count: 1,
        };
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
        let range = vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        };
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
        // Earlier work in the same command buffer (another plane's dispatch or copy) may
        // have written the buffers this plane reads or writes.
        let before = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE);
        let clear_done = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::TRANSFER_WRITE);
        let after = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(
                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::HOST_READ | vk::AccessFlags::TRANSFER_READ,
            );
        let transfer = vk::PipelineStageFlags::TRANSFER;
        let none = vk::DependencyFlags::empty();
        // SAFETY: recording state; the scratch image has TRANSFER_SRC|DST usage and R8_UINT
        // texels, so every region's offsets and row lengths are in bytes; the tile regions lie
        // inside the tiled plane (the geometry's padded size, checked by the callers against
        // the buffer) and inside the image (padded size); the rows region lies inside the
        // linear plane (VUID-vkCmdCopyBufferToImage-pRegions-06218,
        // VUID-vkCmdCopyImageToBuffer-pRegions-00183); each barrier's access masks belong to
        // its stages (VUID-vkCmdPipelineBarrier-srcAccessMask-02815).
        unsafe {
            device.cmd_pipeline_barrier(
                cmd,
                transfer | vk::PipelineStageFlags::COMPUTE_SHADER,
                transfer,
                none,
                &[before],
                &[],
                &[to_dst],
            );
            if to_tiled {
                device.cmd_clear_color_image(cmd, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &vk::ClearColorValue { uint32: [0; 4] }, &[range]);
                device.cmd_pipeline_barrier(cmd, transfer, transfer, none, &[clear_done], &[], &[]);
                device.cmd_copy_buffer_to_image(cmd, linear, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &[rows_region]);
                device.cmd_pipeline_barrier(cmd, transfer, transfer, none, &[], &[], &[dst_to_src]);
                device.cmd_copy_image_to_buffer(cmd, image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, tiled, &tile_regions);
            } else {
                device.cmd_copy_buffer_to_image(cmd, tiled, image, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &tile_regions);
                device.cmd_pipeline_barrier(cmd, transfer, transfer, none, &[], &[], &[dst_to_src]);
                device.cmd_copy_image_to_buffer(cmd, image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, linear, &[rows_region]);
            }
            device.cmd_pipeline_barrier(
                cmd,
                transfer,
                transfer | vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::HOST,
                none,
                &[after],
                &[],
                &[],
            );
        }
        Ok(())
    }

    /// An R8_UINT image of at least `width` x `height` for the copy path: the next scratch
    /// image of this submission, grown (re-created) when too small.
    fn scratch_image(&self, width: u32, height: u32) -> Result<vk::Image, ConvertError> {
        let index = self.scratch_used.get();
        {
            let cache = self.scratch.borrow();
            if let Some(s) = cache.get(index).filter(|s| s.width >= width && s.height >= height) {
                self.scratch_used.set(index + 1);
                return Ok(s.image);
            }
        }
        let (width, height) = {
            let cache = self.scratch.borrow();
            cache.get(index).map_or((width, height), |s| (s.width.max(width), s.height.max(height)))
        };
        let device = self.engine.device();
        let info = image_2d(
            vk::Format::R8_UINT,
            (width, height),
            vk::ImageTiling::OPTIMAL,
            vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST,
        );
        // SAFETY: R8_UINT with transfer usage is a required format; 1 level, 1 layer, and an
        // extent within maxImageDimension2D (checked by copy_blocks).
        let image = unsafe { device.create_image(&info, None) }.map_err(vk_err("vkCreateImage"))?;
        // SAFETY: image of this device.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let Some(type_index) = self.engine.memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty()) else {
            // SAFETY: unbound image of this device.
            unsafe { device.destroy_image(image, None) };
            return Err(ConvertError::NoMemoryType);
        };
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(type_index);
        // SAFETY: plain allocation in an allowed type.
        let memory = match unsafe { device.allocate_memory(&alloc, None) } {
            Ok(m) => m,
            Err(result) => {
                // SAFETY: as above.
                unsafe { device.destroy_image(image, None) };
                return Err(ConvertError::Vk { call: "vkAllocateMemory", result });
            }
        };
        let fresh = Scratch { image, memory, width, height };
        {
            let mut cache = self.scratch.borrow_mut();
            if index < cache.len() {
                // The old, smaller one is not used by this submission (index is past every
                // image it took) nor by any earlier one (they were waited for).
                let old = std::mem::replace(&mut cache[index], fresh);
                destroy_scratch(device, &old);
            } else {
                cache.push(fresh);
            }
        }
        self.scratch_used.set(index + 1);
        // SAFETY: unbound image, memory of its size, offset 0.
        unsafe { device.bind_image_memory(image, memory, 0) }.map_err(vk_err("vkBindImageMemory"))?;
        Ok(image)
    }

    /// Marks the copy path's intermediate images free for the next submission. The
    /// converter's own operations call it after their submission; a caller that records
    /// [`Converter::record_planes`] into its own command buffer calls it once that
    /// submission has completed. The images themselves are destroyed with the converter.
    pub fn free_scratch(&self) {
        self.scratch_used.set(0);
    }

    /// Tiled `src` (the concatenated tiled buffer from byte 0) -> linear `dst` at `planes`
    /// (any offset and stride). Bytes of `dst` outside the visible rows are left alone.
    pub fn detile(
        &self,
        layout: TileLayout,
        fourcc: Fourcc,
        extent: (u32, u32),
        src: &GpuBuffer<'_>,
        dst: &GpuBuffer<'_>,
        planes: &[LinearPlane],
    ) -> Result<(), ConvertError> {
        let g = tiled_size(layout, fourcc, extent.0, extent.1)?;
        need("tiled source", g.size, src.len())?;
        self.run(|cmd| self.record_planes(cmd, layout, fourcc, extent, src.buffer(), 0, dst.buffer(), planes, false))
    }

    /// Linear `src` at `planes` -> tiled `dst` (from byte 0, padding zeroed).
    pub fn tile(
        &self,
        layout: TileLayout,
        fourcc: Fourcc,
        extent: (u32, u32),
        src: &GpuBuffer<'_>,
        planes: &[LinearPlane],
        dst: &GpuBuffer<'_>,
    ) -> Result<(), ConvertError> {
        let g = tiled_size(layout, fourcc, extent.0, extent.1)?;
        need("tiled destination", g.size, dst.len())?;
        self.run(|cmd| self.record_planes(cmd, layout, fourcc, extent, dst.buffer(), 0, src.buffer(), planes, true))
    }

    /// Converts a whole buffer between two layouts, bytes in, bytes out: the CLI's and the
    /// tests' entry point. Linear means tightly packed planes; a tiled layout follows the
    /// tiled-buffer conventions. Tiled -> tiled goes through linear on the GPU.
    pub fn convert_layout(
        &self,
        from: TileLayout,
        to: TileLayout,
        fourcc: Fourcc,
        (width, height): (u32, u32),
        input: &[u8],
    ) -> Result<Vec<u8>, ConvertError> {
        let src_g = tiled_size(from, fourcc, width, height)?;
        need(&format!("{from} {fourcc} {width}x{height} image"), src_g.size, input.len())?;
        if from == TileLayout::Linear && to == TileLayout::Linear {
            return Ok(input[..src_g.size as usize].to_vec());
        }
        let dst_g = tiled_size(to, fourcc, width, height)?;
        let packed = packed_planes(fourcc, width, height)?;
        let linear_len = tiled_size(TileLayout::Linear, fourcc, width, height)?.size;
        let src = GpuBuffer::from_bytes(self.engine, &input[..src_g.size as usize])?;
        let dst = GpuBuffer::new(self.engine, dst_g.size as usize)?;
        let extent = (width, height);
        if to == TileLayout::Linear {
            self.detile(from, fourcc, extent, &src, &dst, &packed)?;
        } else if from == TileLayout::Linear {
            self.tile(to, fourcc, extent, &src, &packed, &dst)?;
        } else {
            let mid = GpuBuffer::new(self.engine, linear_len as usize)?;
            self.run(|cmd| {
                self.record_planes(cmd, from, fourcc, extent, src.buffer(), 0, mid.buffer(), &packed, false)?;
                self.record_planes(cmd, to, fourcc, extent, dst.buffer(), 0, mid.buffer(), &packed, true)
            })?;
        }
        Ok(dst.bytes().to_vec())
    }

    /// NV12/P010 (tightly packed) -> RGBA8 (tightly packed).
    pub fn yuv_to_rgba(
        &self,
        fourcc: Fourcc,
        matrix: ColourMatrix,
        range: ColourRange,
        (width, height): (u32, u32),
        input: &[u8],
    ) -> Result<Vec<u8>, ConvertError> {
        let g = tiled_size(TileLayout::Linear, fourcc, width, height)?;
        need(&format!("{fourcc} {width}x{height} image"), g.size, input.len())?;
        let planes = packed_planes(fourcc, width, height)?;
        let rgba_len = width as u64 * height as u64 * 4;
        let rgba = LinearPlane { offset: 0, stride: width as u64 * 4 };
        let d = yuv_to_rgba_dispatch(fourcc, matrix, range, width, height, &planes, rgba)?;
        let src = GpuBuffer::from_bytes(self.engine, &input[..g.size as usize])?;
        let dst = GpuBuffer::new(self.engine, rgba_len as usize)?;
        self.run(|cmd| {
            let set = self.set(&self.colour, &[src.buffer(), src.buffer(), dst.buffer()])?;
            self.record(cmd, &self.colour, set, &[d]);
            Ok(())
        })?;
        Ok(dst.bytes().to_vec())
    }

    /// RGBA8 (tightly packed) -> NV12 (tightly packed).
    pub fn rgba_to_nv12(
        &self,
        matrix: ColourMatrix,
        range: ColourRange,
        (width, height): (u32, u32),
        input: &[u8],
    ) -> Result<Vec<u8>, ConvertError> {
        let rgba_len = width as u64 * height as u64 * 4;
        need(&format!("RGBA {width}x{height} image"), rgba_len, input.len())?;
        let packed = packed_planes(Fourcc::NV12, width, height)?;
        let nv12_len = tiled_size(TileLayout::Linear, Fourcc::NV12, width, height)?.size;
        // The shader writes whole 32-bit words of each NV12 row, so it needs strides and
        // offsets that are multiples of 4; it writes into such rows and the host repacks.
        let stride = (width as u64).div_ceil(4) * 4;
        let rows = height as u64;
        let aligned = [LinearPlane { offset: 0, stride }, LinearPlane { offset: stride * rows, stride }];
        let aligned_len = stride * rows + stride * rows.div_ceil(2);
        let rgba = LinearPlane { offset: 0, stride: width as u64 * 4 };
        let d = rgba_to_nv12_dispatch(matrix, range, width, height, rgba, &aligned)?;
        let src = GpuBuffer::from_bytes(self.engine, &input[..rgba_len as usize])?;
        let dst = GpuBuffer::new(self.engine, aligned_len as usize)?;
        self.run(|cmd| {
            let set = self.set(&self.colour, &[dst.buffer(), dst.buffer(), src.buffer()])?;
            self.record(cmd, &self.colour, set, &[d]);
            Ok(())
        })?;
        let mut out = vec![0u8; nv12_len as usize];
        let bytes = dst.bytes();
        for (plane, (from, to)) in aligned.iter().zip(&packed).enumerate() {
            let plane_rows = if plane == 0 { rows } else { rows.div_ceil(2) };
            let row = to.stride as usize;
            for r in 0..plane_rows {
                let s = (from.offset + r * from.stride) as usize;
                let d = (to.offset + r * to.stride) as usize;
                out[d..d + row].copy_from_slice(&bytes[s..s + row]);
            }
        }
        Ok(out)
    }

    /// Runs one conversion of a negotiation's copy plan on a whole frame, bytes in, bytes
    /// out (tiled buffers by the tiled-buffer conventions, linear ones tightly packed).
    /// Colour conversions use BT.709, limited range: what a video pipeline assumes when
    /// nothing says otherwise.
    pub fn run_step(&self, kind: &ConversionKind, fourcc: Fourcc, extent: (u32, u32), input: &[u8]) -> Result<Vec<u8>, ConvertError> {
        let (matrix, range) = (ColourMatrix::Bt709, ColourRange::Limited);
        match *kind {
            ConversionKind::Detile(l) => self.convert_layout(l, TileLayout::Linear, fourcc, extent, input),
            ConversionKind::Tile(l) => self.convert_layout(TileLayout::Linear, l, fourcc, extent, input),
            ConversionKind::CopyLinear => self.convert_layout(TileLayout::Linear, TileLayout::Linear, fourcc, extent, input),
            ConversionKind::YuvToRgb { from, .. } => self.yuv_to_rgba(from, matrix, range, extent, input),
            ConversionKind::RgbToYuv { .. } => self.rgba_to_nv12(matrix, range, extent, input),
        }
    }

    /// Detiles a dma-buf whose modifier names a layout dmabridge converts (samsung-64x32,
    /// NVIDIA block linear, ...) into a linear buffer, planes tightly packed and concatenated.
    /// This is the copy fallback for a producer whose tiling no consumer samples.
    ///
    /// The descriptor's fds are borrowed (dups go to Vulkan). Nothing reaches the driver
    /// before the layout checks, plus two that tiling adds: each stride must be the plane's
    /// padded row of whole tiles, and the padded tiles must lie inside the fd.
    pub fn detile_dmabuf(&self, buf: &DmaBuf) -> Result<(GpuBuffer<'e>, TileLayout), ConvertError> {
        let layout = buf.layout();
        let tile = layout
            .modifier()
            .and_then(TileLayout::from_modifier)
            .filter(|t| *t != TileLayout::Linear)
            .ok_or(ConvertError::NotTiled(layout))?;
        let (fourcc, w, h) = (buf.fourcc(), buf.width(), buf.height());
        let g = tiled_size(tile, fourcc, w, h)?;
        let planes = format_info(fourcc).map_or(0, |i| i.plane_count());
        let checked = check_import(buf, &|f: Format| {
            (f == buf.format()).then_some(ImportFacts {
                memory_plane_count: planes,
                max_width: 16384,
                max_height: 16384,
                disjoint: true,
            })
        })?;
        for (i, (c, p)) in checked.planes().iter().zip(&g.planes).enumerate() {
            if c.stride != p.padded_width_bytes as u64 {
                return Err(ConvertError::TiledStride { plane: i, layout: tile, stride: c.stride, expected: p.padded_width_bytes as u64 });
            }
            let end = c.offset.checked_add(p.size).unwrap_or(u64::MAX);
            if end > c.file_size {
                return Err(ConvertError::TilesPastEndOfFd { plane: i, end, fd_size: c.file_size });
            }
        }
        // One storage buffer per distinct file, covering every plane in it.
        let mut files: Vec<FileBuffer> = Vec::new();
        let mut plane_file = Vec::with_capacity(planes);
        let result = (|| {
            for (i, (c, p)) in checked.planes().iter().zip(&g.planes).enumerate() {
                let index = match files.iter().position(|f| f.file == c.file) {
                    Some(index) => index,
                    None => {
                        let size = checked
                            .planes()
                            .iter()
                            .zip(&g.planes)
                            .filter(|(o, _)| o.file == c.file)
                            .map(|(o, q)| o.offset + q.size)
                            .max()
                            .unwrap_or(c.offset + p.size);
                        let fb = self
                            .engine
                            .import_file_buffer(buf, i, c.file, size, c.file_size, vk::BufferUsageFlags::STORAGE_BUFFER)
                            .map_err(Box::new)?;
                        files.push(fb);
                        files.len() - 1
                    }
                };
                plane_file.push(index);
            }
            let linear = packed_planes(fourcc, w, h)?;
            let out = GpuBuffer::new(self.engine, tiled_size(TileLayout::Linear, fourcc, w, h)?.size as usize)?;
            self.run(|cmd| {
                for (i, (c, p)) in checked.planes().iter().zip(&g.planes).enumerate() {
                    // The plane's tiles start at the descriptor's offset, wherever the
                    // concatenated convention would have put them.
                    let at_zero = dmabridge_interop::tiling::PlaneGeometry { offset: 0, ..*p };
                    let d = dmabridge_interop::tiling::gpu::detile_plane(&at_zero, c.offset, linear[i])?;
                    let set = self.set(&self.tile, &[files[plane_file[i]].buffer, out.buffer()])?;
                    self.record(cmd, &self.tile, set, &[d]);
                }
                Ok(())
            })?;
            Ok((out, tile))
        })();
        let device = self.engine.device();
        for f in files {
            // SAFETY: imported by this engine; the submission that read them was waited for.
            unsafe {
                device.destroy_buffer(f.buffer, None);
                device.free_memory(f.memory, None);
            }
        }
        result
    }

    /// Records with `record`, submits, waits, and frees the descriptor sets.
    fn run(&self, record: impl FnOnce(vk::CommandBuffer) -> Result<(), ConvertError>) -> Result<(), ConvertError> {
        let mut inner = Ok(());
        let submitted = self.engine.submit_and_wait(|_, cmd| inner = record(cmd));
        self.reset_pool();
        self.free_scratch();
        inner?;
        submitted?;
        Ok(())
    }
}

impl Drop for Converter<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        for s in self.scratch.borrow_mut().drain(..) {
            destroy_scratch(device, &s);
        }
        self.tile.destroy(device);
        self.colour.destroy(device);
        // SAFETY: no set of the pool is in use (every submission was waited for).
        unsafe { device.destroy_descriptor_pool(self.pool, None) };
    }
}

fn destroy_scratch(device: &ash::Device, s: &Scratch) {
    // SAFETY: the image and memory belong to this device, and every submission that used
    // them was waited for.
    unsafe {
        device.destroy_image(s.image, None);
        device.free_memory(s.memory, None);
    }
}

fn need(what: &str, expected: u64, got: usize) -> Result<(), ConvertError> {
    if (got as u64) < expected {
        return Err(ConvertError::InputSize { what: what.to_owned(), expected, got: got as u64 });
    }
    Ok(())
}

/// The push-constant bytes of a dispatch.
trait PushBytes {
    fn push_bytes(&self) -> &[u8];
}

impl PushBytes for TilePushConstants {
    fn push_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PushBytes for ColourPushConstants {
    fn push_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}
