//! One whole-frame conversion, end to end: a format in a layout to a format in a layout,
//! through whatever steps that takes (detile, colour, tile), with the steps fused where a
//! fused path exists. What `dmabridge convert` runs, what a copy plan's conversion is, and
//! what the engine's cost model prices; [`FrameConversion::run_cpu`] is its CPU fast path.
//!
//! Buffers follow the module conventions: linear images are tightly packed planes,
//! concatenated; tiled ones are [`tiled_size`] buffers.

use std::fmt;

use super::colour::{ColourError, ColourMatrix, ColourRange, RgbPacking, RGB10_FORMATS, RGB8_FORMATS};
use super::colour_fast::{rgb_to_nv12_fast, tiled_yuv_to_rgb_fast};
use super::fast::{detile_fast, tile_fast};
use super::geometry::{packed_planes, tiled_size, TiledFrame};
use super::{alloc_output, TilingError};
use crate::{Fourcc, TileLayout};

/// What a conversion does, step by step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Tiled -> linear, same format.
    Detile(TileLayout),
    /// Linear -> tiled, same format.
    Tile(TileLayout),
    /// NV12/P010 in a layout -> linear RGB, detile and colour in one pass (the layout may be
    /// linear: then it is a plain colour conversion).
    YuvToRgb { layout: TileLayout, from: Fourcc, to: Fourcc },
    /// Linear 8-bit RGB -> linear NV12.
    RgbToNv12 { from: Fourcc },
    /// A linear copy (nothing to convert).
    Copy,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Detile(l) => write!(f, "detile {l} -> linear"),
            Step::Tile(l) => write!(f, "tile linear -> {l}"),
            Step::YuvToRgb { layout: TileLayout::Linear, from, to } => write!(f, "yuv->rgb {} -> {}", from.trimmed(), to.trimmed()),
            Step::YuvToRgb { layout, from, to } => write!(f, "detile+yuv->rgb {layout} {} -> {} (fused)", from.trimmed(), to.trimmed()),
            Step::RgbToNv12 { from } => write!(f, "rgb->yuv {} -> NV12", from.trimmed()),
            Step::Copy => f.write_str("copy linear"),
        }
    }
}

impl Step {
    /// The steps from `from` to `to` (layout, fourcc), in order: the one table of what a
    /// conversion does, which [`FrameConversion::steps`], the copy plans and the engine's plan
    /// runner all read. Each layout must be defined for its fourcc (the geometry's table,
    /// asked at 1x1, where nothing can overflow); no extent is involved otherwise.
    pub fn chain(from: (TileLayout, Fourcc), to: (TileLayout, Fourcc)) -> Result<Vec<Step>, FrameConversionError> {
        let ((from_layout, from), (to_layout, to)) = (from, to);
        tiled_size(from_layout, from, 1, 1)?;
        tiled_size(to_layout, to, 1, 1)?;
        let no_path = || FrameConversionError::NoPath { from, from_layout, to, to_layout };
        let mut steps = Vec::new();
        if from == to {
            if from_layout != TileLayout::Linear {
                steps.push(Step::Detile(from_layout));
            }
            if to_layout != TileLayout::Linear {
                steps.push(Step::Tile(to_layout));
            }
            if steps.is_empty() {
                steps.push(Step::Copy);
            }
            return Ok(steps);
        }
        let yuv_in = from == Fourcc::NV12 || from == Fourcc::P010;
        if yuv_in && RgbPacking::of(to).is_some() {
            steps.push(Step::YuvToRgb { layout: from_layout, from, to });
        } else if to == Fourcc::NV12 && RgbPacking::of(from).is_some_and(|p| p.bits() == 8) {
            if from_layout != TileLayout::Linear {
                steps.push(Step::Detile(from_layout));
            }
            steps.push(Step::RgbToNv12 { from });
        } else {
            return Err(no_path());
        }
        if to_layout != TileLayout::Linear {
            steps.push(Step::Tile(to_layout));
        }
        Ok(steps)
    }

    /// The fourccs [`Step::chain`] can reach from `from`, `from` first: itself, every RGB
    /// format from NV12 or P010, NV12 from an 8-bit RGB format. A search over many formats
    /// asks [`Step::chain`] only about these (the copy planner, with drivers' long lists).
    pub fn targets(from: Fourcc) -> Vec<Fourcc> {
        let mut out = vec![from];
        if from == Fourcc::NV12 || from == Fourcc::P010 {
            out.extend(RGB8_FORMATS.iter().chain(&RGB10_FORMATS).filter(|t| RgbPacking::of(**t).is_some()));
        } else if RgbPacking::of(from).is_some_and(|p| p.bits() == 8) {
            out.push(Fourcc::NV12);
        }
        out
    }

    /// What the step writes, given what it reads (layout, fourcc): a chain's middle frames
    /// are linear.
    pub fn output(&self, input: (TileLayout, Fourcc)) -> (TileLayout, Fourcc) {
        match *self {
            Step::Detile(_) | Step::Copy => (TileLayout::Linear, input.1),
            Step::Tile(l) => (l, input.1),
            Step::YuvToRgb { to, .. } => (TileLayout::Linear, to),
            Step::RgbToNv12 { .. } => (TileLayout::Linear, Fourcc::NV12),
        }
    }
}

/// A frame of `from` in `from_layout` to `to` in `to_layout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameConversion {
    pub from_layout: TileLayout,
    pub from: Fourcc,
    pub to_layout: TileLayout,
    pub to: Fourcc,
    pub width: u32,
    pub height: u32,
    /// Colour matrix and range of the YUV side (unused when the formats are the same).
    pub matrix: ColourMatrix,
    pub range: ColourRange,
}

/// Why a conversion cannot be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameConversionError {
    #[error("no conversion from {from} ({from_layout}) to {to} ({to_layout}): colour conversion goes from NV12/P010 to an RGB format (AR24, XR24, AB24, XB24, RA24, RX24, BA24, BX24, AR30, XR30), or from an 8-bit RGB format to NV12")]
    NoPath { from: Fourcc, from_layout: TileLayout, to: Fourcc, to_layout: TileLayout },
    #[error("the input is {got} bytes; a {what} is {expected}")]
    InputSize { what: String, expected: u64, got: u64 },
    #[error(transparent)]
    Layout(#[from] TilingError),
    #[error(transparent)]
    Colour(#[from] ColourError),
}

impl FrameConversion {
    /// BT.709 limited range: what a video pipeline assumes when nothing says otherwise.
    pub fn new(from: (TileLayout, Fourcc), to: (TileLayout, Fourcc), width: u32, height: u32) -> Self {
        FrameConversion {
            from_layout: from.0,
            from: from.1,
            to_layout: to.0,
            to: to.1,
            width,
            height,
            matrix: ColourMatrix::Bt709,
            range: ColourRange::Limited,
        }
    }

    /// The steps, in order, or why there are none. Both layouts must be defined for their
    /// formats at this extent (the geometry says so); the steps are [`Step::chain`]'s.
    pub fn steps(&self) -> Result<Vec<Step>, FrameConversionError> {
        tiled_size(self.from_layout, self.from, self.width, self.height)?;
        tiled_size(self.to_layout, self.to, self.width, self.height)?;
        Step::chain((self.from_layout, self.from), (self.to_layout, self.to))
    }

    /// Bytes of the input and of the output frame.
    pub fn sizes(&self) -> Result<(u64, u64), FrameConversionError> {
        Ok((
            tiled_size(self.from_layout, self.from, self.width, self.height)?.size,
            tiled_size(self.to_layout, self.to, self.width, self.height)?.size,
        ))
    }

    /// Runs the conversion on the CPU fast path ([`super::fast`], [`super::colour_fast`];
    /// RGB -> NV12 is the reference's arithmetic, one thread), on `threads` threads (0: the
    /// default), into a new buffer. The output is checked against
    /// [`super::MAX_CPU_FRAME_BYTES`] before it is allocated.
    pub fn run_cpu(&self, input: &[u8], threads: usize) -> Result<Vec<u8>, FrameConversionError> {
        let (_, out_size) = self.sizes()?;
        let mut out = alloc_output("output frame", out_size)?;
        self.run_cpu_into(input, &mut out, threads)?;
        Ok(out)
    }

    /// [`FrameConversion::run_cpu`] into `out`, which must hold the output frame (bytes
    /// after it are left alone). A one-step conversion writes `out` directly; a chain goes
    /// through intermediate frames.
    pub fn run_cpu_into(&self, input: &[u8], out: &mut [u8], threads: usize) -> Result<(), FrameConversionError> {
        let steps = self.steps()?;
        let (in_size, out_size) = self.sizes()?;
        if (input.len() as u64) < in_size {
            return Err(FrameConversionError::InputSize {
                what: format!("{} {} {}x{} frame", self.from_layout, self.from.trimmed(), self.width, self.height),
                expected: in_size,
                got: input.len() as u64,
            });
        }
        if (out.len() as u64) < out_size {
            return Err(FrameConversionError::InputSize { what: format!("output buffer of {self}"), expected: out_size, got: out.len() as u64 });
        }
        let (w, h) = (self.width, self.height);
        let last = steps.len().saturating_sub(1);
        let mut data: Option<Vec<u8>> = None;
        for (i, step) in steps.into_iter().enumerate() {
            let src: &[u8] = data.as_deref().unwrap_or(&input[..in_size as usize]);
            // The step's output format and layout: a chain's middle frames are linear.
            let (layout, fourcc) = match step {
                Step::Tile(l) => (l, self.to),
                Step::Detile(_) | Step::Copy => (TileLayout::Linear, self.from),
                Step::YuvToRgb { to, .. } => (TileLayout::Linear, to),
                Step::RgbToNv12 { .. } => (TileLayout::Linear, Fourcc::NV12),
            };
            let size = tiled_size(layout, fourcc, w, h)?.size;
            let mut mid = if i == last { None } else { Some(alloc_output("intermediate frame", size)?) };
            let dst: &mut [u8] = match &mut mid {
                Some(m) => m,
                None => &mut out[..size as usize],
            };
            match step {
                Step::Copy => dst.copy_from_slice(&src[..size as usize]),
                Step::Detile(l) => {
                    detile_fast(TiledFrame { layout: l, fourcc, extent: (w, h) }, src, (dst, &packed_planes(fourcc, w, h)?), threads)?;
                }
                Step::Tile(l) => {
                    tile_fast(TiledFrame { layout: l, fourcc, extent: (w, h) }, (src, &packed_planes(fourcc, w, h)?), dst, threads)?;
                }
                Step::YuvToRgb { layout, from, to } => {
                    let plane = packed_planes(to, w, h)?[0];
                    tiled_yuv_to_rgb_fast(TiledFrame { layout, fourcc: from, extent: (w, h) }, to, (self.matrix, self.range), src, (dst, plane), threads)?;
                }
                Step::RgbToNv12 { from } => {
                    let planes = packed_planes(Fourcc::NV12, w, h)?;
                    rgb_to_nv12_fast(from, (self.matrix, self.range), (w, h), (src, packed_planes(from, w, h)?[0]), (dst, &planes), threads)?;
                }
            }
            if mid.is_some() {
                data = mid;
            }
        }
        Ok(())
    }
}

impl fmt::Display for FrameConversion {
    /// `NV12 samsung-64x32 -> XR24 linear 3840x2160`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {} {} {}x{}", self.from.trimmed(), self.from_layout, self.to.trimmed(), self.to_layout, self.width, self.height)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::{detile_to_vec, tile_to_vec, yuv_to_rgb_vec};

    #[test]
    fn steps_chain_and_fuse() {
        let c = FrameConversion::new((TileLayout::Samsung64x32, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), 64, 64);
        assert_eq!(c.steps().unwrap(), vec![Step::YuvToRgb { layout: TileLayout::Samsung64x32, from: Fourcc::NV12, to: Fourcc::XRGB8888 }]);
        let c = FrameConversion::new((TileLayout::Linear, Fourcc::ABGR8888), (TileLayout::Nv12_4L4, Fourcc::NV12), 64, 64);
        assert_eq!(c.steps().unwrap(), vec![Step::RgbToNv12 { from: Fourcc::ABGR8888 }, Step::Tile(TileLayout::Nv12_4L4)]);
        let c = FrameConversion::new((TileLayout::Samsung64x32, Fourcc::NV12), (TileLayout::Nv12_4L4, Fourcc::NV12), 64, 64);
        assert_eq!(c.steps().unwrap(), vec![Step::Detile(TileLayout::Samsung64x32), Step::Tile(TileLayout::Nv12_4L4)]);
        let c = FrameConversion::new((TileLayout::Linear, Fourcc::R8), (TileLayout::Linear, Fourcc::NV12), 64, 64);
        assert!(matches!(c.steps(), Err(FrameConversionError::NoPath { .. })));
        let c = FrameConversion::new((TileLayout::Samsung64x32, Fourcc::P010), (TileLayout::Linear, Fourcc::XRGB8888), 64, 64);
        assert!(matches!(c.steps(), Err(FrameConversionError::Layout(_))));
    }

    #[test]
    fn targets_are_every_fourcc_chain_reaches() {
        for from in crate::format_info::FORMAT_INFO.iter().map(|i| i.fourcc) {
            for to in crate::format_info::FORMAT_INFO.iter().map(|i| i.fourcc) {
                let reached = TileLayout::ALL.iter().any(|&a| TileLayout::ALL.iter().any(|&b| Step::chain((a, from), (b, to)).is_ok()));
                assert_eq!(reached, Step::targets(from).contains(&to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn run_cpu_equals_the_references() {
        let (w, h) = (130u32, 66u32);
        let n = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).unwrap().size as usize;
        let linear: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
        let tiled = tile_to_vec(TileLayout::Nv12_8L128, Fourcc::NV12, w, h, &linear).unwrap();
        let c = FrameConversion::new((TileLayout::Nv12_8L128, Fourcc::NV12), (TileLayout::Linear, Fourcc::BGRX8888), w, h);
        let want = yuv_to_rgb_vec((Fourcc::NV12, Fourcc::BGRX8888), (c.matrix, c.range), (w, h), &linear).unwrap();
        assert_eq!(c.run_cpu(&tiled, 2).unwrap(), want);
        let c = FrameConversion::new((TileLayout::Nv12_8L128, Fourcc::NV12), (TileLayout::Samsung64x32, Fourcc::NV12), w, h);
        let retiled = c.run_cpu(&tiled, 2).unwrap();
        assert_eq!(detile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &retiled).unwrap(), linear);
        assert!(matches!(c.run_cpu(&tiled[..10], 2), Err(FrameConversionError::InputSize { .. })));
    }
}
