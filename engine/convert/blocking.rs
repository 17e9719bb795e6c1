//! Bytes in, bytes out: conveniences that upload, submit, wait (at most
//! [`READBACK_TIMEOUT`]) and read back, for tools and tests. Frame loops use the recorded and
//! submitted forms instead.

use ash::vk;
use dmabridge_interop::negotiate::ConversionKind;
use dmabridge_interop::tiling::gpu::{
    rgb_to_nv12_dispatch, tiled_yuv_to_rgb_dispatch, ColourPushConstants, Dispatch,
};
use dmabridge_interop::tiling::{packed_planes, tiled_size, ColourMatrix, ColourRange, FrameConversion, TiledFrame};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{Fourcc, TileLayout};

use crate::resources::buffer::{BufferLocation, GpuBuffer};
use crate::device::submit::{Completion, SubmitOptions};
use crate::resources::transfer::READBACK_TIMEOUT;
use super::converter::{need, Converter, PlaneRoute};
use super::error::ConvertError;

impl Converter {
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
}
