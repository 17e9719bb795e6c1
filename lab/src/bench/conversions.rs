//! The frame conversions `dmabridge bench` measures at 4K, on the path the engine's cost model
//! picks, and dmabridge's CPU path on the threads it chose and on one, taking turns.

use dmabridge_interop::tiling::{FrameConversion, FrameConversionError, Step};
use dmabridge_interop::{Fourcc, TileLayout};

use crate::stats::{gbps_samples, median, spread};

use super::gst_baseline::{gst_format, GstCase};
use super::results::BesideLinear;

/// The decoder layouts GStreamer also knows (seed 000's "well known tiled formats").
pub const CONVERT_LAYOUTS: [TileLayout; 5] =
    [TileLayout::Samsung64x32, TileLayout::Allwinner32x32, TileLayout::Nv12_4L4, TileLayout::Nv12_16L32S, TileLayout::Nv12_8L128];

/// Every frame conversion the bench measures at 4K: the decoder layouts' detiles, NV12 ->
/// XR24 (GStreamer's BGRx), each decoder layout's fused tiled NV12 -> XR24 (what a display
/// fed by a decoder needs), and XR24 -> NV12 (what an encoder fed by a renderer needs).
pub fn conversions(w: u32, h: u32) -> Vec<FrameConversion> {
    let mut out: Vec<FrameConversion> = CONVERT_LAYOUTS
        .iter()
        .map(|&l| FrameConversion::new((l, Fourcc::NV12), (TileLayout::Linear, Fourcc::NV12), w, h))
        .collect();
    out.push(FrameConversion::new((TileLayout::Linear, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), w, h));
    out.extend(CONVERT_LAYOUTS.iter().map(|&l| FrameConversion::new((l, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), w, h)));
    out.push(FrameConversion::new((TileLayout::Linear, Fourcc::XRGB8888), (TileLayout::Linear, Fourcc::NV12), w, h));
    out.push(FrameConversion::new((TileLayout::Linear, Fourcc::P010), (TileLayout::Linear, Fourcc::ARGB2101010), w, h));
    out
}

/// The GStreamer case of a conversion, if GStreamer's `videoconvert` does the same.
pub fn gst_case(c: &FrameConversion) -> Option<GstCase> {
    match (c.from_layout, c.to) {
        (l, t) if t == Fourcc::NV12 && gst_format(l).is_some() => Some(GstCase::Detile(l)),
        (l, t) if t == Fourcc::XRGB8888 && c.from == Fourcc::NV12 && (l == TileLayout::Linear || gst_format(l).is_some()) => Some(GstCase::Nv12ToBgrx(l)),
        (TileLayout::Linear, t) if t == Fourcc::NV12 && c.from == Fourcc::XRGB8888 => Some(GstCase::BgrxToNv12),
        (TileLayout::Linear, t) if t == Fourcc::ARGB2101010 && c.from == Fourcc::P010 => Some(GstCase::P010ToBgr10a2),
        _ => None,
    }
}

/// A frame's bytes from a page boundary on, as a dma-buf's mapping (what decoders, GPUs and
/// cameras hand over) starts: every conversion and every peer reads and writes these. A
/// `Vec`'s bytes start wherever the allocator put them (16 bytes past a page for large
/// ones), which splits rows over cache lines: dmabridge's streamed RGB rows then measured
/// 0.92-0.96x libyuv per thread, against 1.05-1.11x page-aligned.
pub struct PageFrame {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl PageFrame {
    const PAGE: usize = 4096;

    /// `len` zero bytes.
    pub fn new(len: usize) -> PageFrame {
        let buf = vec![0u8; len + Self::PAGE];
        let at = buf.as_ptr().align_offset(Self::PAGE).min(Self::PAGE);
        PageFrame { buf, at, len }
    }

    /// `len` bytes of content: a constant frame could flatter a branchy path.
    pub fn with_content(len: usize) -> PageFrame {
        let mut f = PageFrame::new(len);
        f.bytes_mut().iter_mut().enumerate().for_each(|(i, b)| *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8);
        f
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.at..self.at + self.len]
    }
}

/// Output GB/s of `c` on the path the engine's cost model picks (measuring the candidates
/// the first time), into a reused output frame, from a frame in memory (both
/// [`PageFrame`]s): the median of `reps` runs after one warm-up; and the input frame.
pub fn convert_gbps(conv: &dmabridge::Converter, c: &FrameConversion, reps: usize) -> Result<(f64, f64, dmabridge::Choice, PageFrame), dmabridge::ConvertError> {
    let choice = conv.choose(c, None)?;
    let (in_size, out_size) = c.sizes()?;
    let input = PageFrame::with_content(in_size as usize);
    let mut out = PageFrame::new(out_size as usize);
    let mut samples = gbps_samples(out_size, (1, reps), || conv.convert_frame_into(c, choice.path, input.bytes(), out.bytes_mut()))?;
    Ok((median(&mut samples), spread(&mut samples), choice, input))
}

/// Output GB/s of `c` on the CPU path on `threads` threads, from `input` into `out` (reused,
/// so that no sample pays for fresh pages): the median of `reps` runs after `warmups`.
///
/// A frame loop writes a pool of frames in turn. One reused 4K RGB frame (33 MB) partly
/// stays in this machine's 32 MB L3, which helps ordinary stores (libyuv's) and not
/// non-temporal ones (dmabridge's). Into one frame, 32-byte stores wrote 30-33 GB/s and
/// non-temporal ones 28; into four in turn, 20-23 and 26 (one thread, 2026-11-26, two runs
/// taking turns). Left so: against libyuv per thread, this is the harder case for dmabridge.
pub fn cpu_gbps(c: &FrameConversion, input: &[u8], out: &mut [u8], threads: usize, runs: (usize, usize)) -> Result<f64, FrameConversionError> {
    let out_size = c.sizes()?.1;
    Ok(median(&mut gbps_samples(out_size, runs, || c.run_cpu_into(input, out, threads))?))
}

/// Untimed calls before each timed one when dmabridge on one thread and the one-thread
/// peers take turns. A side timed right after another side ran measures slow for a few
/// calls, whichever side it follows: with one untimed call, dmabridge measured 14.6-15.8 GB/s
/// (after swscale) against 22.7-23.3 with five, and libyuv `NV12ToARGBMatrix` 16.2-16.5
/// against 20.1 (4K NV12 -> XR24 in the bench's rotation, three runs each, 2026-11-26). Why
/// it lasts several calls (each writes the whole 33 MB frame) is not known; every side gets
/// the same number.
pub const TURN_WARMUPS: usize = 5;

/// Whether `c` is one fused step, detile and colour in one pass (tiled NV12/P010 -> linear
/// RGB), as the conversion's own plan says.
pub fn fused(c: &FrameConversion) -> bool {
    matches!(c.steps().as_deref(), Ok([Step::YuvToRgb { layout, .. }]) if *layout != TileLayout::Linear)
}

/// [`BesideLinear`] for the fused conversion `c` (tiled NV12 -> RGB) from `input`, on
/// `threads` threads and on one, in `rounds` rounds; `None` where `c` is not a fused conversion.
pub fn fused_beside_linear(c: &FrameConversion, input: &[u8], threads: usize, rounds: usize) -> Result<Option<BesideLinear>, FrameConversionError> {
    if !fused(c) {
        return Ok(None);
    }
    let linear = FrameConversion::new((TileLayout::Linear, c.from), (TileLayout::Linear, c.to), c.width, c.height);
    // The linear side reads the fused side's own frame (a tiled frame is at least as large
    // as the linear one, and any bytes are NV12 or P010) into the same output, so that the
    // ratio compares the loops alone: where the frames lie in memory lands on both sides.
    let linear_size = linear.sizes()?.0 as usize;
    let own;
    let linear_input = match input.get(..linear_size) {
        Some(bytes) => bytes,
        None => {
            own = PageFrame::with_content(linear_size);
            own.bytes()
        }
    };
    let mut out = PageFrame::new(c.sizes()?.1 as usize);
    let mut samples = [(); 4].map(|()| Vec::with_capacity(rounds));
    for _ in 0..rounds.max(1) {
        for (i, (t, conversion, from)) in [(threads, c, input), (threads, &linear, linear_input), (1, c, input), (1, &linear, linear_input)].into_iter().enumerate() {
            samples[i].push(cpu_gbps(conversion, from, out.bytes_mut(), t, (TURN_WARMUPS, 1))?);
        }
    }
    let [fused, lin, fused_one, lin_one] = samples.map(|mut v| median(&mut v));
    Ok(Some(BesideLinear { threads: threads as u32, fused_gbps: fused, linear_gbps: lin, fused_gbps_one_thread: fused_one, linear_gbps_one_thread: lin_one }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a tiled YUV -> RGB conversion is paired with the linear one, and both sides are
    /// measured (a small frame: the figures' size is not the point here).
    #[test]
    fn fused_conversions_are_measured_beside_the_linear_one() {
        let conv = |from: TileLayout, to: Fourcc| FrameConversion::new((from, Fourcc::NV12), (TileLayout::Linear, to), 256, 128);
        for (c, paired) in [(conv(TileLayout::Nv12_8L128, Fourcc::XRGB8888), true), (conv(TileLayout::Linear, Fourcc::XRGB8888), false), (conv(TileLayout::Samsung64x32, Fourcc::NV12), false)] {
            let input = PageFrame::with_content(c.sizes().unwrap().0 as usize);
            let got = fused_beside_linear(&c, input.bytes(), 2, 2).unwrap();
            assert_eq!(got.is_some(), paired, "{c}");
            if let Some(b) = got {
                assert_eq!(b.threads, 2);
                assert!([b.fused_gbps, b.linear_gbps, b.fused_gbps_one_thread, b.linear_gbps_one_thread].iter().all(|g| g.is_finite() && *g > 0.0), "{b:?}");
            }
        }
    }
}
