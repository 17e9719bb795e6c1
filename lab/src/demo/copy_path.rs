//! Copy mode's render path: the producer renders into its own device-local target in the
//! layout its GPU renders, and the negotiated copy plan's steps write the shared frame.

use std::time::Duration;

use dmabridge::ash::vk;
use dmabridge::resources::image::buffer_barrier;
use dmabridge::{BufferLocation, Completion, ComputePipeline, Engine, GpuBuffer, ImportedBuffer};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::negotiate::ConversionPlan;
use dmabridge_interop::tiling::{packed_planes, tiled_size};
use dmabridge_interop::{Fourcc, TileLayout};

use crate::error::DemoError;

use super::gpu_timer::GpuTimer;
use super::negotiation::RENDER_LAYOUT;
use super::shaders::{dispatch, pattern_push};

/// The checksum the consumer computes over a packed NV12 frame it samples through its
/// RGB_IDENTITY YCbCr conversion (`lab/shaders/demo_pattern_nv12.comp` documents the
/// formula): per pixel `(Cr | Y << 8 | Cb << 16 | 255 << 24) * weight(x, y)`, mod 2^32,
/// with the pixel's own 2x2 block's chroma.
pub fn nv12_checksum(frame: &[u8], (w, h): (u32, u32)) -> u32 {
    let (wu, hu) = (w as usize, h as usize);
    let (luma, chroma) = frame.split_at((wu * hu).min(frame.len()));
    let mut sum = 0u32;
    for y in 0..h {
        for x in 0..w {
            let (xu, yu) = (x as usize, y as usize);
            let l = u32::from(luma.get(yu * wu + xu).copied().unwrap_or(0));
            let c = (yu / 2) * wu + (xu / 2) * 2;
            let cb = u32::from(chroma.get(c).copied().unwrap_or(0));
            let cr = u32::from(chroma.get(c + 1).copied().unwrap_or(0));
            let weight = (x + 1).wrapping_mul(2_654_435_761) ^ (y + 1).wrapping_mul(40503);
            sum = sum.wrapping_add((cr | l << 8 | cb << 16 | 255 << 24).wrapping_mul(weight));
        }
    }
    sum
}

/// What copy mode renders and converts with, made once for all modes.
pub struct CopyTools<'a> {
    /// The AR24 pattern shader.
    pub pipeline: &'a ComputePipeline,
    pub converter: &'a dmabridge::Converter,
}

/// Copy mode's render path: the pattern into a linear AR24 target, tiled into the GPU's
/// layout ([`RENDER_LAYOUT`]), then the negotiated plan's steps into the frame.
pub struct CopyPath<'a> {
    tools: &'a CopyTools<'a>,
    set: vk::DescriptorSet,
    linear: GpuBuffer,
    tiled: GpuBuffer,
    steps: ConversionPlan,
    /// A colour plan's output as the CPU reads it back (its checksum is the consumer's).
    readback: Option<GpuBuffer>,
    /// Times the plan's steps alone: the copy, without the rendering before it.
    timer: Option<GpuTimer>,
    w: u32,
    h: u32,
}

impl<'a> CopyPath<'a> {
    pub fn new(engine: &Engine, tools: &'a CopyTools<'a>, sum: &GpuBuffer, steps: ConversionPlan, fourcc: Fourcc, (w, h): (u32, u32)) -> Result<Self, DemoError> {
        steps.check().map_err(dmabridge::ConvertError::from)?;
        let linear = GpuBuffer::new(engine, tiled_size(TileLayout::Linear, Fourcc::ARGB8888, w, h).map_err(dmabridge::ConvertError::from)?.size, BufferLocation::DeviceLocal)?;
        let tiled = GpuBuffer::new(engine, tiled_size(RENDER_LAYOUT, Fourcc::ARGB8888, w, h).map_err(dmabridge::ConvertError::from)?.size, BufferLocation::DeviceLocal)?;
        let readback = match fourcc {
            Fourcc::ARGB8888 => None,
            _ => Some(GpuBuffer::new(engine, tiled_size(TileLayout::Linear, fourcc, w, h).map_err(dmabridge::ConvertError::from)?.size, BufferLocation::Readback)?),
        };
        let set = tools.pipeline.allocate_set()?;
        // SAFETY: a fresh set; both buffers have STORAGE_BUFFER usage and outlive the mode.
        unsafe {
            tools.pipeline.write_buffer(set, 0, linear.buffer());
            tools.pipeline.write_buffer(set, 1, sum.buffer());
        }
        let timer = GpuTimer::new(engine)?;
        Ok(CopyPath { tools, set, linear, tiled, steps, readback, timer, w, h })
    }

    /// A colour plan's output as the CPU reads it back, once the frame's submission is done.
    pub fn readback(&self) -> Option<&GpuBuffer> {
        self.readback.as_ref()
    }

    /// The last frame's copy (the plan's steps) on the GPU, once its submission is done;
    /// `None` where the GPU writes no timestamps.
    pub fn copy_time(&self) -> Result<Option<Duration>, DemoError> {
        self.timer.as_ref().map(GpuTimer::elapsed).transpose()
    }

    pub fn track(&self, until: Completion) {
        self.linear.track(until);
        self.tiled.track(until);
        if let Some(r) = &self.readback {
            r.track(until);
        }
    }

    /// Records frame `index`: render, tile, the plan's steps into `frame`, and the readback.
    ///
    /// # Safety
    /// `cmd` is the engine's command buffer, recording, submitted with `until`; `frame`
    /// and this path's buffers are tracked until then.
    pub unsafe fn record(&self, engine: &Engine, cmd: vk::CommandBuffer, frame: &ImportedBuffer, index: u32, until: Completion) -> Result<(), DemoError> {
        let device = engine.device();
        let (w, h) = (self.w, self.h);
        let ignored = vk::QUEUE_FAMILY_IGNORED;
        let (push, dims) = pattern_push(Fourcc::ARGB8888, (w, h), &[PlaneLayout::linear(0, u64::from(w) * 4, h)], index)?;
        dispatch(self.tools.pipeline, cmd, self.set, &push, dims, until)?;
        let rendered = buffer_barrier(self.linear.buffer(), vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::SHADER_READ | vk::AccessFlags::TRANSFER_READ, ignored, ignored);
        let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
        let transfer = vk::PipelineStageFlags::TRANSFER;
        let planes = packed_planes(Fourcc::ARGB8888, w, h).map_err(dmabridge::ConvertError::from)?;
        // SAFETY: the caller's contract; the engine's buffers have every usage the tile and
        // the plan need, and hold the geometry's sizes (made from it); the barrier makes the
        // pattern visible to both. The timer's queries are free: the producer reads the last
        // frame's copy time after its submission completed, before it records the next.
        unsafe {
            device.cmd_pipeline_barrier(cmd, compute, compute | transfer, vk::DependencyFlags::empty(), &[], &[rendered], &[]);
            self.tools.converter.record_planes(cmd, dmabridge::TiledFrame { layout: RENDER_LAYOUT, fourcc: Fourcc::ARGB8888, extent: (w, h) }, (self.tiled.buffer(), 0), (self.linear.buffer(), &planes), true, until)?;
            if let Some(t) = &self.timer {
                t.record_start(cmd, until);
            }
            self.tools.converter.record_plan(cmd, &self.steps, &self.tiled, frame, until)?;
            if let Some(t) = &self.timer {
                t.record_stop(cmd);
            }
        }
        if let Some(readback) = &self.readback {
            let size = readback.len().min(frame.len());
            let before = buffer_barrier(frame.buffer(), vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::TRANSFER_READ, ignored, ignored);
            let host = buffer_barrier(readback.buffer(), vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::HOST_READ, ignored, ignored);
            // SAFETY: the caller's contract; the frame has TRANSFER_SRC usage (Pool::new) and
            // the readback TRANSFER_DST; `size` fits both (VUID-vkCmdCopyBuffer-size-00115).
            unsafe {
                device.cmd_pipeline_barrier(cmd, compute | transfer, transfer, vk::DependencyFlags::empty(), &[], &[before], &[]);
                device.cmd_copy_buffer(cmd, frame.buffer(), readback.buffer(), &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size }]);
                device.cmd_pipeline_barrier(cmd, transfer, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[], &[host], &[]);
            }
        }
        Ok(())
    }
}
