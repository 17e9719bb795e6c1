//! Conversions on the GPU: tiled <-> linear for every [`TileLayout`], and NV12/P010 (linear
//! or tiled, fused) -> every RGB format, 8-bit RGB -> NV12, with the compute shaders of `shaders/` (interface documented in
//! [`dmabridge_interop::tiling::gpu`]). The push constants and dispatch sizes come from the
//! same geometry as the CPU reference in [`dmabridge_interop::tiling`], which the tests
//! compare against byte for byte.
//!
//! Every conversion has a recorded form (`record_*`, into a command buffer the host owns
//! and submits) and a submitted form that returns a [`Submission`] at once; the bytes-in,
//! bytes-out conveniences ([`Converter::convert_layout`] and friends) wait, and are for
//! tools and tests. Descriptor sets and the copy path's scratch images come from recording
//! contexts that are reused once the GPU is done with them, so nothing is created per frame
//! once the pipeline runs.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ash::vk;
use dmabridge_interop::dmabuf::{check_import_with, CheckedImport, DmaBuf, ImportCheckError, ImportFacts, ImportOptions, ReadError};
use dmabridge_interop::negotiate::ConversionKind;
use dmabridge_interop::tiling::gpu::{
    plane_dispatches, rgb_to_nv12_dispatch, tiled_yuv_to_rgb_dispatch, ColourPushConstants, Dispatch, GpuParamError,
    TilePushConstants,
};
use dmabridge_interop::tiling::{packed_planes, tiled_size, ColourMatrix, ColourRange, FrameConversion, FrameConversionError, PlaneGeometry, TiledFrame, TilingError};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{format_info, Format, Fourcc, Layout, TileLayout};
use gpu_allocator::vulkan::Allocation;
use gpu_allocator::MemoryLocation;

use crate::resources::buffer::{BufferError, BufferLocation, GpuBuffer};
use crate::convert::compute::{Binding, ComputeError, ComputePipeline};
use crate::error::{VkError, VkResultExt};
use crate::resources::image::{image_2d, image_barrier, record_barrier};
use crate::device::usage::ImageUse;
use crate::device::memory::MemoryError;
use crate::convert::shaders::{COLOUR_SPV, TILE_SPV};
use crate::device::submit::{Completion, Garbage, SubmitError, SubmitOptions, Submission};
use crate::resources::transfer::READBACK_TIMEOUT;
use crate::import::source::{PlaneSource, SourceRequest};
use crate::import::{ImportError, ImportedBuffer};
use crate::{ConvertPath, Engine};

/// Why a GPU conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The shaders cannot address the conversion (sizes, alignment).
    #[error(transparent)]
    Params(#[from] GpuParamError),
    /// The layout or extent has no geometry.
    #[error(transparent)]
    Tiling(#[from] TilingError),
    /// The input is smaller than the frame.
    #[error("input is {got} bytes, but a {what} needs {expected}")]
    InputSize { what: String, expected: u64, got: u64 },
    /// A pipeline could not be made or used.
    #[error(transparent)]
    Compute(#[from] ComputeError),
    /// A buffer could not be made or read.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// Scratch memory could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// Submitting or waiting failed.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The dma-buf's modifier names no layout dmabridge converts.
    #[error("layout {0} is not a tiled layout dmabridge converts")]
    NotTiled(Layout),
    /// A layout check failed (before any driver call).
    #[error(transparent)]
    Check(#[from] ImportCheckError),
    /// A tiled plane's stride must be its padded row.
    #[error("plane {plane}: a {layout} plane's stride is its padded row of {expected} bytes, not {stride}")]
    TiledStride { plane: usize, layout: TileLayout, stride: u64, expected: u64 },
    /// The padded tiles run past the fd.
    #[error("plane {plane}: the padded tiles reach byte {end}, past the {fd_size}-byte fd")]
    TilesPastEndOfFd { plane: usize, end: u64, fd_size: u64 },
    /// A plane's file could not be read (it can shrink, so it is read, not mapped).
    #[error("plane {plane}: {source}")]
    Read { plane: usize, source: ReadError },
    /// The conversion has no steps (no colour conversion between those formats), or the
    /// CPU path refused it.
    #[error(transparent)]
    Frame(#[from] FrameConversionError),
    /// A plane could not be mapped for the CPU path.
    #[error("plane {plane}: {source}")]
    Map { plane: usize, source: dmabridge_interop::dmabuf::MapError },
    /// The path asked for cannot do this conversion (copy commands need a layout with wide
    /// row-major tiles).
    #[error("the {path} path cannot convert {conversion}")]
    PathUnavailable { path: crate::ConvertPath, conversion: String },
    /// A copy plan does not hold together, or asks for a step the converter does not have
    /// (the error names it).
    #[error(transparent)]
    Plan(#[from] dmabridge_interop::negotiate::PlanError),
    /// A step of a copy plan that this device cannot do.
    #[error("plan step {index} ('{step}'): {source}")]
    PlanStep { index: usize, step: String, source: Box<ConvertError> },
    /// The caller required zero-copy ([`ImportOptions::require_zero_copy`]) and the
    /// dma-buf's planes must be read into dmabridge's memory before the detile (the reason
    /// is the import path's: a file that can shrink, or a read-only fd the driver would map
    /// writable).
    #[error("zero-copy detile is not possible: {0}")]
    NotZeroCopy(String),
    /// The dma-buf's files could not be imported for the GPU to read them in place, or read
    /// into dmabridge's memory (the import room's error).
    #[error(transparent)]
    Import(ImportError),
    /// A storage buffer the shaders would address past the device's
    /// `maxStorageBufferRange` (a frame too large for the compute path on this device; the
    /// CPU path has no such limit).
    #[error("the {what} spans {bytes} bytes, more than the {max} bytes a storage buffer binding may span on this device (maxStorageBufferRange)")]
    BindingTooLarge { what: String, bytes: u64, max: u64 },
}

impl From<ImportError> for ConvertError {
    /// The import room's errors, in the converter's words where it has them.
    fn from(e: ImportError) -> Self {
        match e {
            ImportError::TooLarge { what, bytes, max } => ConvertError::BindingTooLarge { what, bytes, max },
            ImportError::NotZeroCopy(why) => ConvertError::NotZeroCopy(why),
            ImportError::Read { plane, source } => ConvertError::Read { plane, source },
            ImportError::Check(e) => ConvertError::Check(e),
            ImportError::Buffer(e) => ConvertError::Buffer(e),
            other => ConvertError::Import(other),
        }
    }
}

impl ConvertError {
    /// Whether the error is the path's own (the device cannot run the conversion that way:
    /// its limits, its memory, its driver), not the input's or the caller's: what the cost
    /// model sets a path aside for ([`Converter::convert_frame`]).
    pub(crate) fn is_path_failure(&self) -> bool {
        match self {
            ConvertError::Params(_)
            | ConvertError::Compute(_)
            | ConvertError::Buffer(_)
            | ConvertError::Memory(_)
            | ConvertError::Vk(_)
            | ConvertError::Submit(_)
            | ConvertError::PathUnavailable { .. }
            | ConvertError::BindingTooLarge { .. } => true,
            ConvertError::PlanStep { source, .. } => source.is_path_failure(),
            ConvertError::Tiling(_)
            | ConvertError::InputSize { .. }
            | ConvertError::NotTiled(_)
            | ConvertError::Check(_)
            | ConvertError::TiledStride { .. }
            | ConvertError::TilesPastEndOfFd { .. }
            | ConvertError::Read { .. }
            | ConvertError::Frame(_)
            | ConvertError::Map { .. }
            | ConvertError::Plan(_)
            | ConvertError::NotZeroCopy(_)
            | ConvertError::Import { .. } => false,
        }
    }
}

/// Where a dma-buf detile ran and how it reached the tiled bytes: what
/// [`Converter::detile_dmabuf`] and [`Converter::detile_dmabuf_into`] report, so
/// that a tool says what happened, not what was meant to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetileRun {
    /// The buffer's tiled layout.
    pub layout: TileLayout,
    /// Where the detile ran: [`ConvertPath::Cpu`] or [`ConvertPath::Gpu`] (the compute
    /// shader: a dma-buf's tiles have no copy-command path).
    pub path: ConvertPath,
    /// How the tiled bytes were reached.
    pub source: DetileSource,
}

/// How a detile reached a dma-buf's tiled bytes, decided by the import path's rules
/// (`ImportOptions`, the fd classes, and whether the driver imports by mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetileSource {
    /// In place: on the GPU, every file imported as a storage buffer the shader reads
    /// (zero-copy); on the CPU, every plane mapped read-only.
    InPlace,
    /// Read into dmabridge's memory first (`pread`; a dma-buf through a guarded read-only
    /// mapping): a file that can shrink, or, on the GPU, a read-only fd that the driver would
    /// map writable. The import path's [`crate::ImportPath::ReadCopy`].
    Read,
}

impl std::fmt::Display for DetileRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match (self.path, self.source) {
            (ConvertPath::Cpu, DetileSource::InPlace) => "its planes mapped read-only",
            (ConvertPath::Cpu, DetileSource::Read) => "its planes read with pread (a file that can shrink)",
            (_, DetileSource::InPlace) => "its planes imported in place (zero-copy)",
            (_, DetileSource::Read) => "its planes read into dmabridge's memory first (a file that can shrink, or a read-only fd)",
        };
        let on = if self.path == ConvertPath::Cpu { "CPU" } else { "GPU" };
        write!(f, "detile {} on the {on}, {how}", self.layout)
    }
}

/// A dma-buf detiled into a new buffer ([`Converter::detile_dmabuf`]).
#[derive(Debug)]
pub struct Detiled {
    /// The frame, planes tightly packed and concatenated.
    pub buffer: GpuBuffer,
    /// What ran.
    pub run: DetileRun,
}

/// A buffer a conversion reads or writes: dmabridge's own or one over a dma-buf's memory.
pub trait ConversionBuffer {
    fn vk_buffer(&self) -> vk::Buffer;
    fn byte_len(&self) -> u64;
    /// Records a use that completes at `until`.
    fn track_use(&self, until: Completion);
}

impl ConversionBuffer for GpuBuffer {
    fn vk_buffer(&self) -> vk::Buffer {
        self.buffer()
    }
    fn byte_len(&self) -> u64 {
        self.len()
    }
    fn track_use(&self, until: Completion) {
        self.track(until)
    }
}

impl ConversionBuffer for ImportedBuffer {
    fn vk_buffer(&self) -> vk::Buffer {
        self.buffer()
    }
    fn byte_len(&self) -> u64 {
        self.len()
    }
    fn track_use(&self, until: Completion) {
        self.track(until)
    }
}

/// Which way [`Converter::record_planes_with`] moves a frame's planes (linear -> tiled
/// where `to_tiled`), and whether copy commands may carry the planes whose tiles they can
/// (else the compute shader carries every plane: the cost model's "gpu" path).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlaneRoute {
    pub to_tiled: bool,
    pub allow_copy: bool,
}

/// An intermediate R8 image of the copy-command path.
struct Scratch {
    image: vk::Image,
    allocation: Option<Allocation>,
    width: u32,
    height: u32,
}

/// What one recorded conversion uses besides the pipelines: a descriptor pool and the copy
/// path's scratch images. Reused once its last use is complete.
struct Context {
    pool: vk::DescriptorPool,
    scratch: Vec<Scratch>,
    scratch_taken: usize,
    last_use: Option<Completion>,
}

impl Context {
    fn into_garbage(self) -> (Option<Completion>, Vec<Garbage>) {
        let mut g = vec![Garbage::DescriptorPool(self.pool)];
        for s in self.scratch {
            g.push(Garbage::Image(s.image));
            if let Some(a) = s.allocation {
                g.push(Garbage::Allocation(a));
            }
        }
        (self.last_use, g)
    }
}

/// A tile stored row after row at `offset` in its plane, that belongs at (`x`, `y`) of the
/// linear plane: what one copy region moves.
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

/// Descriptor sets one recording may use (a detile of a 4-plane dma-buf; tiled -> tiled: two).
const MAX_SETS: u32 = 4;

/// Bytes a binding may span past what its shaders address: bindings cover the whole
/// `VkBuffer` (`VK_WHOLE_SIZE`), and a [`GpuBuffer`] is rounded up past its usable length
/// (by at most 79 bytes: the shaders read whole 16-byte groups at a plane's end).
const BINDING_SLACK: u64 = 80;

/// The tiles of `p` as copy blocks, when copy commands beat the compute shader on them:
/// layouts whose bytes are row-major inside each tile, with tiles at least 32 bytes wide
/// (narrower ones cost more per region than they save), on a plane no wider or taller than
/// an image may be. On lavapipe a copy region is a memcpy per row, while the compute shader
/// pays per 4-byte access; on 64-byte tiles that is about ten times faster.
fn copy_blocks(p: &PlaneGeometry, max_dim: u32) -> Option<Vec<Block>> {
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
fn copy_eligible(p: &PlaneGeometry, max_dim: u32) -> bool {
    use dmabridge_interop::tiling::AddressKind;
    matches!(p.kind, AddressKind::RowMajorTiles | AddressKind::SamsungZFlipZ)
        && p.tile_width >= 32
        && p.padded_width_bytes <= max_dim
        && p.padded_rows <= max_dim
        && (p.tiles_x as usize) * (p.tiles_y as usize) <= MAX_COPY_REGIONS
}

/// The conversion pipelines of one engine.
///
/// `Send` and `Sync`: the recording contexts are behind a lock; the pipelines are immutable.
/// Dropped while the GPU still runs its work, its objects wait for that work.
pub struct Converter {
    engine: Engine,
    tile: ComputePipeline,
    colour: ComputePipeline,
    contexts: Mutex<Vec<Context>>,
    /// `maxStorageBufferRange`: the most bytes one binding may span.
    max_storage_range: u64,
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter").finish_non_exhaustive()
    }
}

impl Converter {
    pub fn new(engine: &Engine) -> Result<Converter, ConvertError> {
        let tile = ComputePipeline::new(
            engine,
            TILE_SPV,
            &[Binding::StorageBuffer, Binding::StorageBuffer],
            std::mem::size_of::<TilePushConstants>() as u32,
            1,
        )?;
        let colour = ComputePipeline::new(
            engine,
            COLOUR_SPV,
            &[Binding::StorageBuffer, Binding::StorageBuffer, Binding::StorageBuffer],
            std::mem::size_of::<ColourPushConstants>() as u32,
            1,
        )?;
        // SAFETY: a plain query of this engine's physical device.
        let limits = unsafe { engine.instance().get_physical_device_properties(engine.physical_device()) }.limits;
        Ok(Converter { engine: engine.clone(), tile, colour, contexts: Mutex::new(Vec::new()), max_storage_range: u64::from(limits.max_storage_buffer_range) })
    }

    /// Refuses a storage-buffer binding whose shaders address `bytes` from its start where
    /// the device cannot bind that many (`maxStorageBufferRange`,
    /// VUID-VkWriteDescriptorSet-descriptorType-00333): before anything is recorded, so the
    /// driver never sees it.
    fn check_binding(&self, what: &str, bytes: u64) -> Result<(), ConvertError> {
        if bytes.saturating_add(BINDING_SLACK) > self.max_storage_range {
            return Err(ConvertError::BindingTooLarge { what: what.to_owned(), bytes, max: self.max_storage_range });
        }
        Ok(())
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether some plane of `fourcc` in `layout` goes through copy commands.
    pub(crate) fn has_copy_blocks(&self, layout: TileLayout, fourcc: Fourcc, (width, height): (u32, u32)) -> bool {
        let max = self.engine.info().max_image_dimension_2d;
        tiled_size(layout, fourcc, width, height).is_ok_and(|g| g.planes.iter().any(|p| copy_eligible(p, max)))
    }

    /// A recording context the GPU no longer uses (its pool reset), or a new one.
    fn take_context(&self) -> Result<Context, ConvertError> {
        let reusable = {
            let mut contexts = self.contexts.lock().unwrap_or_else(PoisonError::into_inner);
            let at = contexts.iter().position(|c| c.last_use.as_ref().map_or(true, |u| self.engine.is_reached(u)));
            at.map(|i| contexts.swap_remove(i))
        };
        let device = self.engine.device();
        if let Some(mut ctx) = reusable {
            // SAFETY: no pending submission uses the pool's sets (its last use is reached;
            // VUID-vkResetDescriptorPool-descriptorPool-00313).
            unsafe { device.reset_descriptor_pool(ctx.pool, vk::DescriptorPoolResetFlags::empty()) }.vk("vkResetDescriptorPool")?;
            ctx.scratch_taken = 0;
            ctx.last_use = None;
            return Ok(ctx);
        }
        let sizes = [vk::DescriptorPoolSize { ty: vk::DescriptorType::STORAGE_BUFFER, descriptor_count: MAX_SETS * 3 }];
        let info = vk::DescriptorPoolCreateInfo::default().max_sets(MAX_SETS).pool_sizes(&sizes);
        // SAFETY: a valid create info with non-zero counts.
        let pool = unsafe { device.create_descriptor_pool(&info, None) }.vk("vkCreateDescriptorPool")?;
        Ok(Context { pool, scratch: Vec::new(), scratch_taken: 0, last_use: None })
    }

    /// Hands a context back, in use until `until`.
    fn return_context(&self, mut ctx: Context, until: Completion) {
        ctx.last_use = Some(until);
        self.contexts.lock().unwrap_or_else(PoisonError::into_inner).push(ctx);
    }

    /// A descriptor set of `pipeline` from `ctx`'s pool with `buffers` at bindings 0.. in order.
    fn set(&self, ctx: &Context, pipeline: &ComputePipeline, buffers: &[vk::Buffer]) -> Result<vk::DescriptorSet, ConvertError> {
        let device = self.engine.device();
        let layouts = [pipeline.set_layout()];
        let alloc = vk::DescriptorSetAllocateInfo::default().descriptor_pool(ctx.pool).set_layouts(&layouts);
        // SAFETY: the pool holds MAX_SETS sets and was reset when the context was taken; one
        // recording allocates at most MAX_SETS.
        let set = unsafe { device.allocate_descriptor_sets(&alloc) }.vk("vkAllocateDescriptorSets")?[0];
        for (i, b) in buffers.iter().enumerate() {
            // SAFETY: a fresh set of this pipeline, unused by the GPU; the buffers have
            // STORAGE_BUFFER usage (the callers' contract).
            unsafe { pipeline.write_buffer(set, i as u32, *b) };
        }
        Ok(set)
    }

    /// Records `dispatches` of `pipeline` with `set`, each followed by a barrier so that the
    /// next dispatch (or a later transfer/host read) sees its writes.
    ///
    /// # Safety
    /// As [`Converter::record_planes`].
    unsafe fn record<P: bytemuck::Pod>(
        &self,
        cmd: vk::CommandBuffer,
        pipeline: &ComputePipeline,
        set: vk::DescriptorSet,
        dispatches: &[Dispatch<P>],
        until: Completion,
    ) -> Result<(), ConvertError> {
        let device = self.engine.device();
        let barrier = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::SHADER_WRITE).dst_access_mask(
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::HOST_READ | vk::AccessFlags::TRANSFER_READ,
        );
        for d in dispatches {
            // SAFETY: the caller's contract; the group counts are within
            // maxComputeWorkGroupCount (65535, checked by the dispatch builders).
            unsafe {
                pipeline.record_dispatch(cmd, set, bytemuck::bytes_of(&d.push), d.group_counts, until)?;
                record_barrier(
                    device,
                    cmd,
                    (
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::HOST | vk::PipelineStageFlags::TRANSFER,
                    ),
                    &[barrier],
                    &[],
                    &[],
                );
            }
        }
        Ok(())
    }

    /// Records one dispatch of the colour shader over `bindings` (its three storage
    /// buffers, in binding order, each with the bytes `d` addresses in it from its start),
    /// followed by a barrier for what reads its output.
    ///
    /// # Safety
    /// As [`Converter::record_planes`], for the bound buffers, which hold what `d` addresses.
    pub(crate) unsafe fn record_colour(&self, cmd: vk::CommandBuffer, bindings: [(vk::Buffer, u64); 3], d: Dispatch<ColourPushConstants>, until: Completion) -> Result<(), ConvertError> {
        for (i, (_, span)) in bindings.iter().enumerate() {
            self.check_binding(&format!("colour shader's binding {i}"), *span)?;
        }
        let bindings = bindings.map(|(b, _)| b);
        let ctx = self.take_context()?;
        let result = self.set(&ctx, &self.colour, &bindings).and_then(|set| {
            // SAFETY: the caller's contract.
            unsafe { self.record(cmd, &self.colour, set, &[d], until) }
        });
        self.return_context(ctx, until);
        result
    }

    /// Records NV12/P010 `frame` (`src` holds its tiled buffer from `tiled_base`, planes as
    /// the tiled-buffer conventions place them; linear: packed planes) -> RGB format `to`,
    /// in `matrix` and `range`, into `dst` at `rgb` (offset and stride multiples of 4):
    /// detile and colour conversion in one dispatch, in a command buffer the host owns and
    /// submits. The buffers' own uses are the caller's to track.
    ///
    /// # Safety
    /// - `cmd` is a command buffer of this converter's engine's device, recording, to be
    ///   submitted on the engine's queue family with a submission that signals `until`;
    /// - both buffers have STORAGE_BUFFER usage and outlive that submission (their sizes are
    ///   checked here).
    pub unsafe fn record_yuv_to_rgb(
        &self,
        cmd: vk::CommandBuffer,
        (frame, to): (TiledFrame, Fourcc),
        (matrix, range): (ColourMatrix, ColourRange),
        (src, tiled_base): (&dyn ConversionBuffer, u64),
        (dst, rgb): (&dyn ConversionBuffer, PlaneLayout),
        until: Completion,
    ) -> Result<(), ConvertError> {
        let TiledFrame { layout, fourcc: from, extent: (width, height) } = frame;
        let g = frame.geometry()?;
        need(&format!("{layout} {from} {width}x{height} source"), tiled_base.saturating_add(g.size), src.byte_len())?;
        let row = u64::from(width) * 4;
        let end = rgb.stride.saturating_mul(u64::from(height).saturating_sub(1)).saturating_add(rgb.offset).saturating_add(row);
        need(&format!("{to} {width}x{height} destination"), end, dst.byte_len())?;
        let d = tiled_yuv_to_rgb_dispatch(frame, to, (matrix, range), tiled_base, rgb)?;
        let src_span = tiled_base.saturating_add(g.size);
        // SAFETY: the caller's contract; the buffers hold the frame (checked above).
        unsafe { self.record_colour(cmd, [(src.vk_buffer(), src_span), (src.vk_buffer(), src_span), (dst.vk_buffer(), end)], d, until) }
    }

    /// Records the conversion of every plane between a tiled buffer (`tiled`, starting at
    /// `tiled_base`) and a linear one (`linear`, planes at `planes`): copy commands where the
    /// layout's tiles are wide row-major blocks (see `copy_blocks`), the compute shader
    /// otherwise. The buffers' own uses are the caller's to track.
    ///
    /// # Safety
    /// - `cmd` is a command buffer of this converter's engine's device, recording, to be
    ///   submitted on the engine's queue family with a submission that signals `until`;
    /// - both buffers have STORAGE_BUFFER and TRANSFER usage, hold the geometry's tiled size
    ///   from `tiled_base` and the planes' extent, and outlive that submission.
    pub unsafe fn record_planes(
        &self,
        cmd: vk::CommandBuffer,
        frame: TiledFrame,
        (tiled, tiled_base): (vk::Buffer, u64),
        (linear, planes): (vk::Buffer, &[PlaneLayout]),
        to_tiled: bool,
        until: Completion,
    ) -> Result<(), ConvertError> {
        let route = PlaneRoute { to_tiled, allow_copy: true };
        // SAFETY: the caller's contract.
        unsafe { self.record_planes_with(cmd, frame, (tiled, tiled_base), (linear, planes), route, until) }
    }

    /// [`Converter::record_planes`], by `route`.
    ///
    /// # Safety
    /// As [`Converter::record_planes`].
    pub(crate) unsafe fn record_planes_with(
        &self,
        cmd: vk::CommandBuffer,
        frame: TiledFrame,
        (tiled, tiled_base): (vk::Buffer, u64),
        (linear, planes): (vk::Buffer, &[PlaneLayout]),
        PlaneRoute { to_tiled, allow_copy }: PlaneRoute,
        until: Completion,
    ) -> Result<(), ConvertError> {
        let TiledFrame { layout, fourcc, .. } = frame;
        let dispatches = plane_dispatches(frame, tiled_base, planes, to_tiled)?;
        let geometry = frame.geometry()?;
        let max_dim = self.engine.info().max_image_dimension_2d;
        let mut ctx = self.take_context()?;
        let result = (|| {
            let mut compute = Vec::with_capacity(dispatches.len());
            for ((d, p), linear_plane) in dispatches.into_iter().zip(&geometry.planes).zip(planes) {
                match copy_blocks(p, max_dim).filter(|_| allow_copy) {
                    // SAFETY: the caller's contract.
                    Some(blocks) => unsafe { self.record_copy_plane(cmd, &mut ctx, (p, &blocks), (tiled, tiled_base + p.offset), (linear, *linear_plane), to_tiled)? },
                    None => compute.push(d),
                }
            }
            if !compute.is_empty() {
                self.check_binding(&format!("{layout} {fourcc} tiled buffer"), tiled_base.saturating_add(geometry.size))?;
                let linear_span = geometry.planes.iter().zip(planes).map(|(p, l)| linear_span(p, l)).max().unwrap_or(0);
                self.check_binding(&format!("{fourcc} linear buffer"), linear_span)?;
                let set = if to_tiled { self.set(&ctx, &self.tile, &[linear, tiled])? } else { self.set(&ctx, &self.tile, &[tiled, linear])? };
                // SAFETY: the caller's contract.
                unsafe { self.record(cmd, &self.tile, set, &compute, until)? };
            }
            Ok(())
        })();
        self.return_context(ctx, until);
        result
    }

    /// One plane `p` through copy commands, its tiles in `blocks`: the tiled bytes (in
    /// `tiled` from `tiled_at`) go into an R8 image tile by tile (one region per tile), and
    /// the image to the linear rows (in `linear` at `l`) in one region; or the reverse, with
    /// the image cleared first so that tile padding comes out zero.
    unsafe fn record_copy_plane(
        &self,
        cmd: vk::CommandBuffer,
        ctx: &mut Context,
        (p, blocks): (&PlaneGeometry, &[Block]),
        (tiled, tiled_at): (vk::Buffer, u64),
        (linear, l): (vk::Buffer, PlaneLayout),
        to_tiled: bool,
    ) -> Result<(), ConvertError> {
        let device = self.engine.device();
        let image = self.scratch_image(ctx, p.padded_width_bytes, p.padded_rows)?;
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
            vk::ImageSubresourceRange { aspect_mask: vk::ImageAspectFlags::COLOR, base_mip_level: 0, level_count: 1, base_array_layer: 0, layer_count: 1 };
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

    /// An R8_UINT image of at least `width` x `height` for the copy path: the context's next
    /// scratch image, grown (re-created) when too small.
    fn scratch_image(&self, ctx: &mut Context, width: u32, height: u32) -> Result<vk::Image, ConvertError> {
        let index = ctx.scratch_taken;
        if let Some(s) = ctx.scratch.get(index).filter(|s| s.width >= width && s.height >= height) {
            ctx.scratch_taken += 1;
            return Ok(s.image);
        }
        let (width, height) = ctx.scratch.get(index).map_or((width, height), |s| (s.width.max(width), s.height.max(height)));
        let device = self.engine.device();
        let info = image_2d(vk::Format::R8_UINT, (width, height), vk::ImageTiling::OPTIMAL, &ImageUse::new(vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST));
        // SAFETY: R8_UINT with transfer usage is a required format; 1 level, 1 layer, and an
        // extent within maxImageDimension2D (checked by copy_blocks).
        let image = unsafe { device.create_image(&info, None) }.vk("vkCreateImage")?;
        // SAFETY: an image of this device.
        let reqs = unsafe { device.get_image_memory_requirements(image) };
        let allocation = match self.engine.shared().memory.allocate("dmabridge scratch image", reqs, MemoryLocation::GpuOnly, false) {
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
        if index < ctx.scratch.len() {
            // The old, smaller one is unused: this context's earlier uses are complete (it was
            // taken only then), and this recording took images before `index` only.
            let old = std::mem::replace(&mut ctx.scratch[index], fresh);
            let mut g = vec![Garbage::Image(old.image)];
            g.extend(old.allocation.map(Garbage::Allocation));
            self.engine.shared().retire(Vec::new(), g);
        } else {
            ctx.scratch.push(fresh);
        }
        bound?;
        ctx.scratch_taken = index + 1;
        Ok(image)
    }

    /// Tiled `src` (the concatenated tiled buffer from byte 0) -> linear `dst` at `planes`
    /// (any offset and stride), submitted after `options.waits`. Bytes of `dst` outside the
    /// visible rows are left alone.
    pub fn detile(
        &self,
        frame: TiledFrame,
        src: &dyn ConversionBuffer,
        dst: &dyn ConversionBuffer,
        planes: &[PlaneLayout],
        options: SubmitOptions,
    ) -> Result<Submission, ConvertError> {
        need("tiled source", frame.geometry()?.size, src.byte_len())?;
        self.submit_planes(options, frame, src, (dst, planes), PlaneRoute { to_tiled: false, allow_copy: true })
    }

    /// Linear `src` at `planes` -> tiled `dst` (from byte 0, padding zeroed), submitted after
    /// `options.waits`.
    pub fn tile(
        &self,
        frame: TiledFrame,
        src: &dyn ConversionBuffer,
        planes: &[PlaneLayout],
        dst: &dyn ConversionBuffer,
        options: SubmitOptions,
    ) -> Result<Submission, ConvertError> {
        need("tiled destination", frame.geometry()?.size, dst.byte_len())?;
        self.submit_planes(options, frame, dst, (src, planes), PlaneRoute { to_tiled: true, allow_copy: true })
    }

    fn submit_planes(
        &self,
        options: SubmitOptions,
        frame: TiledFrame,
        tiled: &dyn ConversionBuffer,
        (linear, planes): (&dyn ConversionBuffer, &[PlaneLayout]),
        route: PlaneRoute,
    ) -> Result<Submission, ConvertError> {
        let (_, s) = self.engine.submit(options, |cmd, until| {
            // SAFETY: the engine's own command buffer, recording, submitted with `until`; the
            // buffers are tracked until then.
            unsafe { self.record_planes_with(cmd, frame, (tiled.vk_buffer(), 0), (linear.vk_buffer(), planes), route, until)? };
            tiled.track_use(until);
            linear.track_use(until);
            Ok::<(), ConvertError>(())
        })?;
        Ok(s)
    }

    /// Submits `record` and waits for it (at most [`READBACK_TIMEOUT`]).
    fn run_and_wait(&self, record: impl FnOnce(vk::CommandBuffer, Completion) -> Result<(), ConvertError>) -> Result<(), ConvertError> {
        let (_, s) = self.engine.submit(SubmitOptions::default(), record)?;
        s.wait(READBACK_TIMEOUT)?;
        Ok(())
    }

    /// One dispatch of the colour shader over `bindings` (its three storage buffers, in
    /// binding order), on the engine's queue, waited for; `buffers` are the owners of those
    /// bindings, kept alive until the GPU is done with them.
    fn colour_and_wait(&self, bindings: [&GpuBuffer; 3], d: Dispatch<ColourPushConstants>) -> Result<(), ConvertError> {
        self.run_and_wait(|cmd, until| {
            // SAFETY: the engine's own command buffer, recording; every bound buffer is
            // tracked below (VUID-vkDestroyBuffer-buffer-00922), and holds what `d` addresses
            // (its caller sized it so).
            let result = unsafe { self.record_colour(cmd, bindings.map(|b| (b.buffer(), b.len())), d, until) };
            for b in bindings {
                b.track(until);
            }
            result
        })
    }

    /// Converts a whole buffer between two layouts, bytes in, bytes out: the CLI's and the
    /// tests' entry point. Linear means tightly packed planes; a tiled layout follows the
    /// tiled-buffer conventions. Tiled -> tiled goes through linear on the GPU. Blocks until
    /// the GPU is done.
    pub fn convert_layout(&self, from: TileLayout, to: TileLayout, fourcc: Fourcc, extent: (u32, u32), input: &[u8]) -> Result<Vec<u8>, ConvertError> {
        self.layout_bytes(from, to, fourcc, extent, input, true)
    }

    /// [`Converter::convert_layout`], with copy commands only where `allow_copy`.
    pub(crate) fn layout_bytes(
        &self,
        from: TileLayout,
        to: TileLayout,
        fourcc: Fourcc,
        (width, height): (u32, u32),
        input: &[u8],
        allow_copy: bool,
    ) -> Result<Vec<u8>, ConvertError> {
        let src_g = tiled_size(from, fourcc, width, height)?;
        need(&format!("{from} {fourcc} {width}x{height} image"), src_g.size, input.len() as u64)?;
        let input = &input[..src_g.size as usize];
        if from == TileLayout::Linear && to == TileLayout::Linear {
            return Ok(input.to_vec());
        }
        let dst_g = tiled_size(to, fourcc, width, height)?;
        let packed = packed_planes(fourcc, width, height)?;
        let linear_len = tiled_size(TileLayout::Linear, fourcc, width, height)?.size;
        let src = GpuBuffer::from_bytes(&self.engine, input)?;
        let dst = GpuBuffer::new(&self.engine, dst_g.size, BufferLocation::Readback)?;
        let frame = |layout| TiledFrame { layout, fourcc, extent: (width, height) };
        let (detiling, tiling) = (PlaneRoute { to_tiled: false, allow_copy }, PlaneRoute { to_tiled: true, allow_copy });
        let s = if to == TileLayout::Linear {
            self.submit_planes(SubmitOptions::default(), frame(from), &src, (&dst, &packed), detiling)?
        } else if from == TileLayout::Linear {
            self.submit_planes(SubmitOptions::default(), frame(to), &dst, (&src, &packed), tiling)?
        } else {
            let mid = GpuBuffer::new(&self.engine, linear_len, BufferLocation::DeviceLocal)?;
            let (_, s) = self.engine.submit(SubmitOptions::default(), |cmd, until| {
                // SAFETY: the engine's own command buffer; the three buffers are tracked below.
                unsafe {
                    self.record_planes_with(cmd, frame(from), (src.buffer(), 0), (mid.buffer(), &packed), detiling, until)?;
                    self.record_planes_with(cmd, frame(to), (dst.buffer(), 0), (mid.buffer(), &packed), tiling, until)?;
                }
                for b in [&src, &mid, &dst] {
                    b.track(until);
                }
                Ok::<(), ConvertError>(())
            })?;
            s
        };
        s.wait(READBACK_TIMEOUT)?;
        Ok(dst.bytes()?.to_vec())
    }

    /// NV12/P010 `frame` (tightly packed planes for linear, else the tiled-buffer
    /// conventions) -> RGB format `to` (tightly packed), in `matrix` and `range`, detile and
    /// colour fused in one shader. Blocks until the GPU is done.
    pub fn yuv_to_rgb(&self, frame: TiledFrame, to: Fourcc, (matrix, range): (ColourMatrix, ColourRange), input: &[u8]) -> Result<Vec<u8>, ConvertError> {
        let TiledFrame { layout, fourcc: from, extent: (width, height) } = frame;
        let g = frame.geometry()?;
        need(&format!("{layout} {from} {width}x{height} image"), g.size, input.len() as u64)?;
        let rgb_len = tiled_size(TileLayout::Linear, to, width, height)?.size;
        let rgb = PlaneLayout::linear(0, width as u64 * 4, height);
        let d = tiled_yuv_to_rgb_dispatch(frame, to, (matrix, range), 0, rgb)?;
        let src = GpuBuffer::from_bytes(&self.engine, &input[..g.size as usize])?;
        let dst = GpuBuffer::new(&self.engine, rgb_len, BufferLocation::Readback)?;
        self.colour_and_wait([&src, &src, &dst], d)?;
        Ok(dst.bytes()?.to_vec())
    }

    /// 8-bit RGB format `from` (tightly packed) -> NV12 (tightly packed), in `matrix` and
    /// `range`. Blocks until the GPU is done.
    pub fn rgb_to_nv12(&self, from: Fourcc, (matrix, range): (ColourMatrix, ColourRange), (width, height): (u32, u32), input: &[u8]) -> Result<Vec<u8>, ConvertError> {
        let rgba_len = width as u64 * height as u64 * 4;
        need(&format!("{from} {width}x{height} image"), rgba_len, input.len() as u64)?;
        let packed = packed_planes(Fourcc::NV12, width, height)?;
        let nv12_len = tiled_size(TileLayout::Linear, Fourcc::NV12, width, height)?.size;
        // The shader writes whole 32-bit words of each NV12 row, so it needs strides and
        // offsets that are multiples of 4; it writes into such rows and the host repacks.
        let stride = (width as u64).div_ceil(4) * 4;
        let rows = height as u64;
        let aligned = [PlaneLayout::linear(0, stride, height), PlaneLayout::linear(stride * rows, stride, height.div_ceil(2))];
        let aligned_len = stride * rows + stride * rows.div_ceil(2);
        let rgba = PlaneLayout::linear(0, width as u64 * 4, height);
        let d = rgb_to_nv12_dispatch(from, (matrix, range), (width, height), rgba, &aligned)?;
        let src = GpuBuffer::from_bytes(&self.engine, &input[..rgba_len as usize])?;
        let dst = GpuBuffer::new(&self.engine, aligned_len, BufferLocation::Readback)?;
        self.colour_and_wait([&dst, &dst, &src], d)?;
        let mut out = vec![0u8; nv12_len as usize];
        let bytes = dst.bytes()?;
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
    /// out (tiled buffers by the tiled-buffer conventions, linear ones tightly packed), on
    /// the path the cost model picks ([`Converter::convert_frame`]). `fourcc` is the source
    /// group's format. Colour conversions use BT.709, limited range: what a video pipeline
    /// assumes when nothing says otherwise. Blocks until the work is done.
    pub fn run_step(&self, kind: &ConversionKind, fourcc: Fourcc, (width, height): (u32, u32), input: &[u8]) -> Result<Vec<u8>, ConvertError> {
        // A device copy is the driver's, between dma-bufs: bytes in, bytes out has no layout.
        let ((from_layout, from), (to_layout, to)) =
            kind.endpoints(fourcc).ok_or_else(|| dmabridge_interop::negotiate::PlanError::OnDevice(kind.to_string()))?;
        let c = FrameConversion::new((from_layout, from), (to_layout, to), width, height);
        Ok(self.convert_frame(&c, None, input)?.0)
    }

    /// Detiles a dma-buf whose modifier names a layout dmabridge converts (samsung-64x32,
    /// NVIDIA block linear, ...) into `dst`, planes at `planes`, on the GPU: the copy
    /// fallback for a producer whose tiling no consumer samples. Returns at once; `dst` is
    /// the caller's to read once the submission is done.
    ///
    /// The buffer is reached as [`Engine::import_dmabuf_with`] would reach it, under the
    /// same `import` options, through the import room's one source
    /// (`import::source`): files that cannot shrink (a dma-buf, a sealed memfd, a
    /// regular file `import.trust` vouches for) are imported in place, unless their fds are
    /// read-only and the driver imports by mapping (a read-only share); the rest are read
    /// into dmabridge's memory first, or refused with [`ConvertError::NotZeroCopy`] (or the
    /// check's `NotFixedSize`) when `import.require_zero_copy`. The returned [`DetileRun`]
    /// says which way it went.
    ///
    /// The descriptor's fds are borrowed (dups go to Vulkan). Nothing reaches the driver
    /// before the layout checks, plus two that tiling adds: each stride must be the plane's
    /// padded row of whole tiles, and the padded tiles must lie inside the fd.
    pub fn detile_dmabuf_into(
        &self,
        buf: &DmaBuf,
        dst: &GpuBuffer,
        planes: &[PlaneLayout],
        import: ImportOptions,
        submit: SubmitOptions,
    ) -> Result<(DetileRun, Submission), ConvertError> {
        let checked = self.check_tiled_dmabuf(buf, planes, import)?;
        self.detile_checked_on_gpu(&checked, dst, planes, import, submit)
    }

    /// The layout checks of a tiled dma-buf (see [`Converter::detile_dmabuf_into`]),
    /// under `import`'s trust and zero-copy requirement, and that `planes` fit a linear
    /// destination.
    fn check_tiled_dmabuf<'a>(&self, buf: &'a DmaBuf, planes: &[PlaneLayout], import: ImportOptions) -> Result<CheckedTiled<'a>, ConvertError> {
        let layout = buf.layout();
        let tile = layout.modifier().and_then(TileLayout::from_modifier).filter(|t| *t != TileLayout::Linear).ok_or(ConvertError::NotTiled(layout))?;
        let (fourcc, w, h) = (buf.fourcc(), buf.width(), buf.height());
        let g = tiled_size(tile, fourcc, w, h)?;
        let plane_count = format_info(fourcc).map_or(0, |i| i.plane_count());
        let max = self.engine.info().max_image_dimension_2d;
        let checked = check_import_with(
            buf,
            &|f: Format| (f == buf.format()).then_some(ImportFacts { memory_plane_count: plane_count, max_width: max, max_height: max, disjoint: true }),
            import,
        )?;
        for (i, (c, p)) in checked.planes().iter().zip(&g.planes).enumerate() {
            if c.stride != p.padded_width_bytes as u64 {
                return Err(ConvertError::TiledStride { plane: i, layout: tile, stride: c.stride, expected: p.padded_width_bytes as u64 });
            }
            let end = c.offset.saturating_add(p.size);
            if end > c.file.size {
                return Err(ConvertError::TilesPastEndOfFd { plane: i, end, fd_size: c.file.size });
            }
        }
        // Planes must fit where the caller wants them.
        dmabridge_interop::tiling::gpu::plane_dispatches(TiledFrame { layout: TileLayout::Linear, fourcc, extent: (w, h) }, 0, planes, false)?;
        Ok(CheckedTiled { tile, geometry: g, checked })
    }

    /// The GPU detile of a checked buffer: its files imported in place, or read first, as
    /// the import room's [`PlaneSource`] decides.
    fn detile_checked_on_gpu(
        &self,
        t: &CheckedTiled<'_>,
        dst: &GpuBuffer,
        planes: &[PlaneLayout],
        import: ImportOptions,
        submit: SubmitOptions,
    ) -> Result<(DetileRun, Submission), ConvertError> {
        let CheckedTiled { tile, geometry: g, checked } = t;
        let fourcc = checked.dmabuf().fourcc();
        let linear_end = g.planes.iter().zip(planes).map(|(p, l)| linear_span(p, l)).max().unwrap_or(0);
        self.check_binding(&format!("{fourcc} linear buffer"), linear_end)?;
        // The padded tiles, which run past the visible rows the checks measured.
        let spans: Vec<u64> = g.planes.iter().map(|p| p.size).collect();
        let max_len = self.max_storage_range.saturating_sub(BINDING_SLACK);
        let request = SourceRequest { spans: &spans, usage: vk::BufferUsageFlags::STORAGE_BUFFER, options: import, max_len };
        let source = PlaneSource::new(&self.engine, checked, request).map_err(ConvertError::from)?;
        let fetched = source.fetch(&self.engine).map_err(ConvertError::from)?;
        let from = if source.is_mapped() { DetileSource::InPlace } else { DetileSource::Read };
        let (_, s) = self.engine.submit(submit, |cmd, until| {
            let ctx = self.take_context()?;
            let result = (|| {
                for (i, p) in g.planes.iter().enumerate() {
                    // The plane's tiles start where the source puts them, wherever the
                    // concatenated convention would have put them.
                    let at_zero = PlaneGeometry { offset: 0, ..*p };
                    let d = dmabridge_interop::tiling::gpu::detile_plane(&at_zero, source.offset(i), planes[i])?;
                    let set = self.set(&ctx, &self.tile, &[fetched.buffer_of(i), dst.buffer()])?;
                    // SAFETY: the engine's own command buffer; the buffers are tracked below.
                    unsafe { self.record(cmd, &self.tile, set, &[d], until)? };
                }
                Ok::<(), ConvertError>(())
            })();
            self.return_context(ctx, until);
            // Nothing is submitted when recording failed: the buffers have no use to wait for
            // (and `dst` stays the caller's to write, for the CPU to detile into instead).
            if result.is_ok() {
                dst.track(until);
                fetched.track(until);
            }
            result
        })?;
        Ok((DetileRun { layout: *tile, path: ConvertPath::Gpu, source: from }, s))
    }

    /// The CPU detile of a checked buffer into `dst` (planes at `linear`): files that cannot
    /// shrink mapped read-only (a dma-buf inside its `DMA_BUF_IOCTL_SYNC` bracket; a
    /// read-only fd maps read-only as well as any), the rest read with `pread`.
    fn detile_checked_on_cpu(&self, t: &CheckedTiled<'_>, dst: &mut [u8], linear: &[PlaneLayout]) -> Result<DetileRun, ConvertError> {
        let CheckedTiled { tile, geometry: g, checked } = t;
        let mut source = DetileSource::InPlace;
        for (i, ((c, p), l)) in checked.planes().iter().zip(&g.planes).zip(linear).enumerate() {
            let at_zero = PlaneGeometry { offset: 0, ..*p };
            if c.file.class.is_fixed_size() {
                let map = checked.map_plane(i, p.size).map_err(|e| ConvertError::Map { plane: i, source: e })?;
                dmabridge_interop::tiling::detile_plane_fast(&at_zero, map.bytes(), dst, *l, 0)?;
            } else {
                // The padded tiles, which run past the visible rows the checks measured.
                let fd = checked.dmabuf().plane(i).ok_or(ConvertError::NotTiled(checked.dmabuf().layout()))?.fd;
                let bytes = dmabridge_interop::dmabuf::read_at(fd, c.offset, p.size, p.size).map_err(|e| ConvertError::Read { plane: i, source: e })?;
                dmabridge_interop::tiling::detile_plane_fast(&at_zero, &bytes, dst, *l, 0)?;
                source = DetileSource::Read;
            }
        }
        Ok(DetileRun { layout: *tile, path: ConvertPath::Cpu, source })
    }

    /// Detiles a tiled dma-buf into a new buffer, planes tightly packed and concatenated,
    /// where the cost model says ([`Converter::choose`]): on the GPU as
    /// [`Converter::detile_dmabuf_into`] does, waiting for it (at most `timeout`), or on
    /// the CPU, each plane mapped read-only where its file cannot shrink and read with
    /// `pread` where it can. Either way the buffer goes through the import path's checks and
    /// rules under `import` first. Where the GPU path the model chose fails for want of
    /// what the device can do, the model drops it and the CPU detiles the frame (see
    /// [`Converter::convert_frame`]). The result says what ran.
    pub fn detile_dmabuf(&self, buf: &DmaBuf, import: ImportOptions, timeout: Duration) -> Result<Detiled, ConvertError> {
        let (fourcc, w, h) = (buf.fourcc(), buf.width(), buf.height());
        let linear = packed_planes(fourcc, w, h)?;
        let mut out = GpuBuffer::new(&self.engine, tiled_size(TileLayout::Linear, fourcc, w, h)?.size, BufferLocation::Readback)?;
        let checked = self.check_tiled_dmabuf(buf, &linear, import)?;
        let c = FrameConversion::new((checked.tile, fourcc), (TileLayout::Linear, fourcc), w, h);
        let choice = self.choose(&c, None)?;
        if choice.path == ConvertPath::Cpu {
            let run = self.detile_checked_on_cpu(&checked, out.bytes_mut()?, &linear)?;
            return Ok(Detiled { buffer: out, run });
        }
        let run = match self.detile_checked_on_gpu(&checked, &out, &linear, import, SubmitOptions::default()) {
            Ok((run, s)) => {
                s.wait(timeout)?;
                run
            }
            Err(error) => self.fall_back(&c, &choice, error, |_| self.detile_checked_on_cpu(&checked, out.bytes_mut()?, &linear))?.0,
        };
        Ok(Detiled { buffer: out, run })
    }
}

/// A tiled dma-buf that passed [`Converter::check_tiled_dmabuf`]: its layout, its tiled
/// geometry, and the checks' proof.
struct CheckedTiled<'a> {
    tile: TileLayout,
    geometry: dmabridge_interop::tiling::TiledGeometry,
    checked: CheckedImport<'a>,
}

impl Drop for Converter {
    fn drop(&mut self) {
        for ctx in self.contexts.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            let (last, garbage) = ctx.into_garbage();
            self.engine.shared().retire(last.into_iter().collect(), garbage);
        }
    }
}

/// The bytes a linear plane `l` of geometry `p` spans from its buffer's start: to the end
/// of its last visible row.
fn linear_span(p: &PlaneGeometry, l: &PlaneLayout) -> u64 {
    l.offset.saturating_add(l.stride.saturating_mul(u64::from(p.rows.saturating_sub(1)))).saturating_add(u64::from(p.width_bytes))
}

fn need(what: &str, expected: u64, got: u64) -> Result<(), ConvertError> {
    if got < expected {
        return Err(ConvertError::InputSize { what: what.to_owned(), expected, got });
    }
    Ok(())
}
