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
//!
//! This file has the converter, its recording contexts and the recorded and submitted
//! forms; beside it: why a conversion failed (`error.rs`), the copy-command path
//! (`copy_path.rs`), the waiting conveniences (`blocking.rs`) and the detile of a caller's
//! dma-buf (`dmabuf_detile.rs`).

use std::sync::{Mutex, PoisonError};

use ash::vk;
use dmabridge_interop::tiling::gpu::{
    plane_dispatches, tiled_yuv_to_rgb_dispatch, ColourPushConstants, Dispatch,
    TilePushConstants,
};
use dmabridge_interop::tiling::{tiled_size, ColourMatrix, ColourRange, PlaneGeometry, TiledFrame};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{Fourcc, TileLayout};

use crate::resources::buffer::GpuBuffer;
use super::compute::{Binding, ComputePipeline};
use crate::error::VkResultExt;
use crate::resources::image::record_barrier;
use super::shaders::{COLOUR_SPV, TILE_SPV};
use crate::device::submit::{Completion, Garbage, SubmitOptions, Submission};
use crate::import::ImportedBuffer;
use crate::Engine;
use super::copy_path::{copy_blocks, copy_eligible, record_copy_plane, PlaneCopy, ScratchImages};
use super::error::ConvertError;

/// A buffer a conversion reads or writes: dmabridge's own or one over a dma-buf's memory.
pub trait ConversionBuffer {
    fn vk_buffer(&self) -> vk::Buffer;
    fn byte_len(&self) -> u64;
    /// Records a use that completes at `until`.
    fn track_use(&self, until: Completion);
}

/// Both buffer kinds are conversion buffers the same way: their own accessors.
macro_rules! conversion_buffer {
    ($($t:ty),*) => {$(
        impl ConversionBuffer for $t {
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
    )*};
}
conversion_buffer!(GpuBuffer, ImportedBuffer);

/// Which way [`Converter::record_planes_with`] moves a frame's planes (linear -> tiled
/// where `to_tiled`), and whether copy commands may carry the planes whose tiles they can
/// (else the compute shader carries every plane: the cost model's "gpu" path).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlaneRoute {
    pub to_tiled: bool,
    pub allow_copy: bool,
}


/// What one recorded conversion uses besides the pipelines: a descriptor pool and the copy
/// path's scratch images. Reused once its last use is complete.
pub(super) struct Context {
    pub(super) pool: vk::DescriptorPool,
    pub(super) scratch: ScratchImages,
    pub(super) last_use: Option<Completion>,
}

impl Context {
    fn into_garbage(self) -> (Option<Completion>, Vec<Garbage>) {
        let mut g = vec![Garbage::DescriptorPool(self.pool)];
        g.extend(self.scratch.into_garbage());
        (self.last_use, g)
    }
}



/// Descriptor sets one recording may use (a detile of a 4-plane dma-buf; tiled -> tiled: two).
const MAX_SETS: u32 = 4;

/// Bytes a binding may span past what its shaders address: bindings cover the whole
/// `VkBuffer` (`VK_WHOLE_SIZE`), and a [`GpuBuffer`] is rounded up past its usable length
/// (by at most 79 bytes: the shaders read whole 16-byte groups at a plane's end).
pub(super) const BINDING_SLACK: u64 = 80;


/// The conversion pipelines of one engine.
///
/// `Send` and `Sync`: the recording contexts are behind a lock; the pipelines are immutable.
/// Dropped while the GPU still runs its work, its objects wait for that work.
pub struct Converter {
    pub(super) engine: Engine,
    pub(super) tile: ComputePipeline,
    pub(super) colour: ComputePipeline,
    contexts: Mutex<Vec<Context>>,
    /// `maxStorageBufferRange`: the most bytes one binding may span.
    pub(super) max_storage_range: u64,
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
    pub(super) fn check_binding(&self, what: &str, bytes: u64) -> Result<(), ConvertError> {
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
    pub(super) fn take_context(&self) -> Result<Context, ConvertError> {
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
            ctx.scratch.reset();
            ctx.last_use = None;
            return Ok(ctx);
        }
        let sizes = [vk::DescriptorPoolSize { ty: vk::DescriptorType::STORAGE_BUFFER, descriptor_count: MAX_SETS * 3 }];
        let info = vk::DescriptorPoolCreateInfo::default().max_sets(MAX_SETS).pool_sizes(&sizes);
        // SAFETY: a valid create info with non-zero counts.
        let pool = unsafe { device.create_descriptor_pool(&info, None) }.vk("vkCreateDescriptorPool")?;
        Ok(Context { pool, scratch: ScratchImages::default(), last_use: None })
    }

    /// Hands a context back, in use until `until`.
    pub(super) fn return_context(&self, mut ctx: Context, until: Completion) {
        ctx.last_use = Some(until);
        self.contexts.lock().unwrap_or_else(PoisonError::into_inner).push(ctx);
    }

    /// A descriptor set of `pipeline` from `ctx`'s pool with `buffers` at bindings 0.. in order.
    pub(super) fn set(&self, ctx: &Context, pipeline: &ComputePipeline, buffers: &[vk::Buffer]) -> Result<vk::DescriptorSet, ConvertError> {
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
    pub(super) unsafe fn record<P: bytemuck::Pod>(
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
                    Some(blocks) => {
                        let copy = PlaneCopy { plane: (p, &blocks), tiled: (tiled, tiled_base + p.offset), linear: (linear, *linear_plane), to_tiled };
                        // SAFETY: the caller's contract for `cmd`; the buffers were checked to hold the planes above.
                        unsafe { record_copy_plane(&self.engine, cmd, &mut ctx.scratch, copy)? }
                    }
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

    pub(super) fn submit_planes(
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
pub(super) fn linear_span(p: &PlaneGeometry, l: &PlaneLayout) -> u64 {
    l.offset.saturating_add(l.stride.saturating_mul(u64::from(p.rows.saturating_sub(1)))).saturating_add(u64::from(p.width_bytes))
}

pub(super) fn need(what: &str, expected: u64, got: u64) -> Result<(), ConvertError> {
    if got < expected {
        return Err(ConvertError::InputSize { what: what.to_owned(), expected, got });
    }
    Ok(())
}
