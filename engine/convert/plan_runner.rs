//! Copy plans on the device: [`Converter::record_plan`] records a
//! [`ConversionPlan`]'s steps one after the other (the steps the negotiation derived, checked
//! again here), [`Converter::run_plan`] submits them, and [`Converter::convert_plan`] is the
//! bytes-in, bytes-out convenience that waits. [`Converter::run_conversion`] runs a whole
//! frame conversion's plan buffer to buffer in the conversion's own colour matrix and range
//! (the GStreamer element's zero-copy path from an imported dma-buf). Each step runs on the GPU pipeline
//! [`Converter::convert_frame`]'s GPU paths use for it (copy commands where a layout's tiles
//! are wide row-major blocks, the compute shaders otherwise); the frames between steps are
//! device-local buffers made here, tracked until the submission is done and then freed by
//! the engine.

use ash::vk;
use dmabridge_interop::negotiate::{ConversionPlan, PlanError, PlanStep};
use dmabridge_interop::tiling::gpu::{rgb_to_nv12_dispatch, tiled_yuv_to_rgb_dispatch};
use dmabridge_interop::tiling::{packed_planes, tiled_size, ColourMatrix, ColourRange, FrameConversion, Step, TiledFrame};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{Format, Fourcc, TileLayout};

use crate::resources::buffer::{BufferLocation, GpuBuffer};
use crate::convert::converter::{ConversionBuffer, Converter, PlaneRoute};
use crate::convert::ConvertError;
use crate::resources::image::record_barrier;
use crate::device::submit::{Completion, SubmitOptions, Submission};
use crate::resources::transfer::READBACK_TIMEOUT;

/// A plan's colour steps: BT.709, limited range (what a video pipeline assumes when nothing
/// says otherwise; see [`ConversionPlan`]).
const PLAN_COLOUR: (ColourMatrix, ColourRange) = (ColourMatrix::Bt709, ColourRange::Limited);

impl Converter {
    /// Records `plan`'s steps from `src` (the plan's input frame from byte 0, by the
    /// tiled-buffer conventions; linear: tightly packed planes) into `dst` (its output frame,
    /// the same way), in a command buffer the host owns and submits. Colour steps use BT.709,
    /// limited range. The frames between steps are allocated here and tracked until
    /// `until`; `src`'s and `dst`'s uses are tracked here too.
    ///
    /// The plan is checked first ([`ConversionPlan::check`]: each step is one the converter
    /// has, and they join up); a step this device cannot do (a frame too large for its
    /// dispatches, no memory for an intermediate frame) is [`ConvertError::PlanStep`],
    /// naming the step.
    ///
    /// # Safety
    /// - `cmd` is a command buffer of this converter's engine's device, recording, to be
    ///   submitted on the engine's queue family with a submission that signals `until`;
    /// - `src` has STORAGE_BUFFER and TRANSFER_SRC usage, `dst` STORAGE_BUFFER and
    ///   TRANSFER_DST (their sizes are checked here), and what `src` holds is visible to
    ///   compute and transfer reads when the recorded commands start (written by the host
    ///   before the submission, or behind a barrier the caller recorded).
    pub unsafe fn record_plan(
        &self,
        cmd: vk::CommandBuffer,
        plan: &ConversionPlan,
        src: &dyn ConversionBuffer,
        dst: &dyn ConversionBuffer,
        until: Completion,
    ) -> Result<(), ConvertError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.record_plan_in(cmd, plan, PLAN_COLOUR, src, dst, until) }
    }

    /// [`Converter::record_plan`], its colour steps in `colour`'s matrix and range.
    ///
    /// # Safety
    /// As [`Converter::record_plan`].
    unsafe fn record_plan_in(
        &self,
        cmd: vk::CommandBuffer,
        plan: &ConversionPlan,
        colour: (ColourMatrix, ColourRange),
        src: &dyn ConversionBuffer,
        dst: &dyn ConversionBuffer,
        until: Completion,
    ) -> Result<(), ConvertError> {
        let steps = plan.check()?;
        let (in_size, out_size) = plan.direct()?.sizes()?;
        if src.byte_len() < in_size {
            return Err(ConvertError::InputSize { what: format!("{} {}x{} plan input", plan.from, plan.width, plan.height), expected: in_size, got: src.byte_len() });
        }
        if dst.byte_len() < out_size {
            return Err(ConvertError::InputSize { what: format!("{} {}x{} plan output", plan.to, plan.width, plan.height), expected: out_size, got: dst.byte_len() });
        }
        src.track_use(until);
        dst.track_use(until);
        let last = steps.len() - 1;
        let mut input = src.vk_buffer();
        // Intermediate frames live until the end of this call; their Drop hands them to the
        // engine, which frees them once `until` is reached.
        let mut intermediates: Vec<GpuBuffer> = Vec::new();
        for (index, (step, spec)) in steps.iter().zip(&plan.steps).enumerate() {
            let named = |source: ConvertError| ConvertError::PlanStep { index, step: spec.to_string(), source: Box::new(source) };
            let output = if index == last {
                dst.vk_buffer()
            } else {
                let size = tiled_size(spec.to.layout()?, spec.to.fourcc, plan.width, plan.height)?.size;
                let mid = GpuBuffer::new(self.engine(), size, BufferLocation::DeviceLocal).map_err(|e| named(e.into()))?;
                mid.track(until);
                let buffer = mid.buffer();
                intermediates.push(mid);
                buffer
            };
            // SAFETY: the caller's contract for `cmd`, `src` and `dst`; intermediate frames
            // are this engine's buffers with every usage, tracked until `until`.
            let scratch = unsafe { self.record_step(cmd, *step, spec, colour, (input, output), until) }.map_err(named)?;
            intermediates.extend(scratch);
            input = output;
        }
        Ok(())
    }

    /// Records one step from `src` into `dst`. Returns the scratch buffer the step records
    /// into, if it needs one (tracked until `until`): the caller keeps it until the recording
    /// is done, and its Drop then hands it to the engine.
    ///
    /// # Safety
    /// As [`Converter::record_plan`], for `src` and `dst`.
    unsafe fn record_step(
        &self,
        cmd: vk::CommandBuffer,
        step: Step,
        spec: &PlanStep,
        (matrix, range): (ColourMatrix, ColourRange),
        (src, dst): (vk::Buffer, vk::Buffer),
        until: Completion,
    ) -> Result<Option<GpuBuffer>, ConvertError> {
        let (w, h) = (spec.width, spec.height);
        match step {
            Step::Detile(layout) => {
                let planes = packed_planes(spec.from.fourcc, w, h)?;
                let frame = TiledFrame { layout, fourcc: spec.from.fourcc, extent: (w, h) };
                // SAFETY: the caller's contract; record_planes_with checks the sizes against
                // the geometry the buffers were sized from.
                unsafe { self.record_planes_with(cmd, frame, (src, 0), (dst, &planes), PlaneRoute { to_tiled: false, allow_copy: true }, until)? };
                Ok(None)
            }
            Step::Tile(layout) => {
                let planes = packed_planes(spec.to.fourcc, w, h)?;
                let frame = TiledFrame { layout, fourcc: spec.to.fourcc, extent: (w, h) };
                // SAFETY: as for the detile.
                unsafe { self.record_planes_with(cmd, frame, (dst, 0), (src, &planes), PlaneRoute { to_tiled: true, allow_copy: true }, until)? };
                Ok(None)
            }
            Step::YuvToRgb { layout, from, to } => {
                let frame = TiledFrame { layout, fourcc: from, extent: (w, h) };
                let rgb = PlaneLayout::linear(0, u64::from(w) * 4, h);
                let d = tiled_yuv_to_rgb_dispatch(frame, to, (matrix, range), 0, rgb)?;
                let (src_span, dst_span) = (frame.geometry()?.size, rgb.size);
                // SAFETY: the caller's contract; `src` holds the frame the dispatch reads and
                // `dst` the packed RGB frame it writes (the plan's sizes, checked).
                unsafe { self.record_colour(cmd, [(src, src_span), (src, src_span), (dst, dst_span)], d, until)? };
                Ok(None)
            }
            // SAFETY: the caller's contract.
            Step::RgbToNv12 { from } => unsafe { self.record_rgb_to_nv12(cmd, from, (matrix, range), (w, h), (src, dst), until) },
            Step::Copy => {
                let size = tiled_size(TileLayout::Linear, spec.from.fourcc, w, h)?.size;
                // SAFETY: as above; both buffers hold `size` bytes (checked by the plan's sizes).
                unsafe { self.record_copy(cmd, src, dst, &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size }]) };
                Ok(None)
            }
        }
    }

    /// RGB -> NV12 into packed planes. The shader writes whole 32-bit words of each row, so
    /// a width that is not a multiple of 4 goes through an aligned frame and row copies;
    /// returns that frame's buffer, as [`Converter::record_step`] does.
    ///
    /// # Safety
    /// As [`Converter::record_plan`], for `src` and `dst`.
    unsafe fn record_rgb_to_nv12(
        &self,
        cmd: vk::CommandBuffer,
        from: Fourcc,
        (matrix, range): (ColourMatrix, ColourRange),
        (w, h): (u32, u32),
        (src, dst): (vk::Buffer, vk::Buffer),
        until: Completion,
    ) -> Result<Option<GpuBuffer>, ConvertError> {
        let packed = packed_planes(Fourcc::NV12, w, h)?;
        let rgba = PlaneLayout::linear(0, u64::from(w) * 4, h);
        let rows = [u64::from(h), u64::from(h).div_ceil(2)];
        if w % 4 == 0 {
            let d = rgb_to_nv12_dispatch(from, (matrix, range), (w, h), rgba, &packed)?;
            let nv12 = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h)?.size;
            // SAFETY: the caller's contract.
            unsafe { self.record_colour(cmd, [(dst, nv12), (dst, nv12), (src, rgba.size)], d, until)? };
            return Ok(None);
        }
        let stride = u64::from(w).div_ceil(4) * 4;
        let aligned = [PlaneLayout::linear(0, stride, h), PlaneLayout::linear(stride * rows[0], stride, h.div_ceil(2))];
        let d = rgb_to_nv12_dispatch(from, (matrix, range), (w, h), rgba, &aligned)?;
        let mid_len = stride * (rows[0] + rows[1]);
        let mid = GpuBuffer::new(self.engine(), mid_len, BufferLocation::DeviceLocal)?;
        mid.track(until);
        let regions: Vec<vk::BufferCopy> = aligned
            .iter()
            .zip(&packed)
            .zip(rows)
            .flat_map(|((a, p), n)| {
                (0..n).map(move |r| vk::BufferCopy { src_offset: a.offset + r * a.stride, dst_offset: p.offset + r * p.stride, size: p.stride })
            })
            .collect();
        // SAFETY: the caller's contract; `mid` is this engine's buffer, tracked until `until`,
        // and holds the aligned planes; the regions lie inside `mid` and the packed frame.
        unsafe {
            self.record_colour(cmd, [(mid.buffer(), mid_len), (mid.buffer(), mid_len), (src, rgba.size)], d, until)?;
            self.record_copy(cmd, mid.buffer(), dst, &regions);
        }
        Ok(Some(mid))
    }

    /// Records buffer copies between barriers: earlier shader or transfer writes are visible
    /// to them, and their writes to what follows (shaders, transfers, the host).
    ///
    /// # Safety
    /// `cmd` is recording; both buffers belong to this device, `src` with TRANSFER_SRC and
    /// `dst` with TRANSFER_DST usage, the regions lie inside them
    /// (VUID-vkCmdCopyBuffer-srcOffset-00113, VUID-vkCmdCopyBuffer-dstOffset-00114), and both
    /// outlive the submission.
    unsafe fn record_copy(&self, cmd: vk::CommandBuffer, src: vk::Buffer, dst: vk::Buffer, regions: &[vk::BufferCopy]) {
        let device = self.engine().device();
        let before = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE);
        let after = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::HOST_READ | vk::AccessFlags::TRANSFER_READ,
        );
        let (compute, transfer) = (vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::TRANSFER);
        // SAFETY: the caller's contract; each barrier's access masks belong to its stages
        // (VUID-vkCmdPipelineBarrier-srcAccessMask-02815).
        unsafe {
            record_barrier(device, cmd, (compute | transfer, transfer), &[before], &[], &[]);
            device.cmd_copy_buffer(cmd, src, dst, regions);
            record_barrier(device, cmd, (transfer, compute | transfer | vk::PipelineStageFlags::HOST), &[after], &[], &[]);
        }
    }

    /// Submits [`Converter::record_plan`] on the engine's queue after `options.waits`, and
    /// returns at once; `dst` is the caller's to read once the submission is done.
    pub fn run_plan(&self, plan: &ConversionPlan, src: &dyn ConversionBuffer, dst: &dyn ConversionBuffer, options: SubmitOptions) -> Result<Submission, ConvertError> {
        let (_, s) = self.engine().submit(options, |cmd, until| {
            // SAFETY: the engine's own command buffer, recording, submitted with `until`;
            // GpuBuffers and ImportedBuffers made for conversion have the usages
            // record_plan needs (the ConversionBuffer contract), and the host wrote `src`
            // before this submission.
            unsafe { self.record_plan(cmd, plan, src, dst, until) }
        })?;
        Ok(s)
    }

    /// Runs the whole conversion `c` on the GPU from `src` into `dst` (buffers by the
    /// tiled-buffer conventions, as [`Converter::record_plan`]'s), in `c`'s colour matrix and
    /// range, and returns at once: the same steps as its plan ([`ConversionPlan::derive`]),
    /// with the compute pipelines. This is how a frame imported from its dma-buf (an
    /// [`crate::ImportedBuffer`]) is converted with no copy on the way in. Both ends need a
    /// DRM modifier (a plan names its formats by it).
    pub fn run_conversion(&self, c: &FrameConversion, src: &dyn ConversionBuffer, dst: &dyn ConversionBuffer, options: SubmitOptions) -> Result<Submission, ConvertError> {
        let format = |layout: TileLayout, fourcc: Fourcc| -> Result<Format, ConvertError> {
            let modifier = layout.modifier().ok_or(PlanError::NoModifier(layout))?;
            Ok(Format::new(fourcc, modifier))
        };
        let plan = ConversionPlan::derive(format(c.from_layout, c.from)?, format(c.to_layout, c.to)?, (c.width, c.height))?;
        let (_, s) = self.engine().submit(options, |cmd, until| {
            // SAFETY: as in run_plan.
            unsafe { self.record_plan_in(cmd, &plan, (c.matrix, c.range), src, dst, until) }
        })?;
        Ok(s)
    }

    /// Runs `plan` on a frame, bytes in, bytes out (by the tiled-buffer conventions, linear
    /// frames tightly packed), on the GPU. Blocks until it is done (at most
    /// [`READBACK_TIMEOUT`]).
    pub fn convert_plan(&self, plan: &ConversionPlan, input: &[u8]) -> Result<Vec<u8>, ConvertError> {
        plan.check()?;
        let (in_size, out_size) = plan.direct()?.sizes()?;
        if (input.len() as u64) < in_size {
            return Err(ConvertError::InputSize { what: format!("{} {}x{} frame", plan.from, plan.width, plan.height), expected: in_size, got: input.len() as u64 });
        }
        let src = GpuBuffer::from_bytes(self.engine(), &input[..in_size as usize])?;
        let dst = GpuBuffer::new(self.engine(), out_size, BufferLocation::Readback)?;
        self.run_plan(plan, &src, &dst, SubmitOptions::default())?.wait(READBACK_TIMEOUT)?;
        Ok(dst.bytes()?[..out_size as usize].to_vec())
    }
}
