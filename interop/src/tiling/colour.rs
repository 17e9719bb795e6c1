//! YUV <-> RGB reference conversions: NV12/P010 -> RGBA8 and RGBA8 -> NV12.
//!
//! RGBA8 here means bytes R, G, B, A in memory: DRM `ABGR8888` (`AB24`), Vulkan
//! `R8G8B8A8_UNORM`. Alpha is written as 255 and ignored on input.
//!
//! ## The arithmetic (the GPU shader `colour.comp` does exactly this, in `int`)
//! - Coefficients come from Kr/Kb (BT.601: 0.299/0.114, BT.709: 0.2126/0.0722) and the
//!   range (ITU-T H.273: limited Y = 16..235, C = 16..240, scaled by 2^(bits-8); full
//!   Y = 0..2^bits-1, C centred on 2^(bits-1), both scaled by 2^bits-1). They are
//!   turned into signed fixed point with a 16-bit fraction (Q16) by rounding to nearest,
//!   once, on the host ([`YuvToRgb::new`], [`RgbToYuv::new`]); the shader receives those
//!   same integers as push constants, so CPU and GPU cannot disagree on a coefficient.
//! - Every result is `(sum + half) >> shift` with an arithmetic shift: round half up
//!   (towards +infinity), then clamped to 0..=255.
//! - YUV -> RGB: `R = (ym*(Y-yo) + rv*(V-co) + 2^15) >> 16`, `G` uses `gu, gv`, `B` uses
//!   `bu`. P010 samples are the top 10 bits of each little-endian 16-bit word (`w >> 6`).
//! - Chroma siting on upsampling: sample replication, pixel (x, y) uses chroma sample
//!   (x/2, y/2). That is exact for co-sited top-left chroma (H.273 chroma_sample_loc_type
//!   2) and the nearest sample for the MPEG-2/H.264 default (type 0: co-sited horizontally,
//!   between rows vertically); no interpolation, so every pixel is independent.
//! - RGB -> NV12: `Y = (yr*R + yg*G + yb*B + (yo<<16) + 2^15) >> 16` per pixel. Chroma of
//!   the 2x2 block at (2i, 2j) comes from the sums SR, SG, SB of its four pixels, with
//!   coordinates past the right or bottom edge clamped to the last column/row (edge
//!   replication): `U = (ur*SR + ug*SG + ub*SB + (co<<18) + 2^17) >> 18`. That is the mean
//!   of the four pixels' unrounded chroma, rounded once. `ug = -(ur + ub)` and
//!   `vg = -(vr + vb)` so that grey maps exactly to the chroma offset.
//!
//! The float reference ([`yuv_to_rgb_float`], [`rgb_to_yuv_float`]) evaluates the same
//! formulas in f64 without quantised coefficients; the fixed-point results stay within
//! ±1 of it (tested over a grid for all four matrix/range combinations).

use super::geometry::{check_linear, packed_planes, tiled_size};
use super::{alloc_output, LinearPlane, TilingError};
use crate::{Fourcc, TileLayout};

/// YCbCr matrix coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColourMatrix {
    Bt601,
    Bt709,
}

/// Quantisation range of the YUV side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColourRange {
    Limited,
    Full,
}

impl ColourMatrix {
    /// (Kr, Kb).
    pub fn kr_kb(self) -> (f64, f64) {
        match self {
            ColourMatrix::Bt601 => (0.299, 0.114),
            ColourMatrix::Bt709 => (0.2126, 0.0722),
        }
    }
}

/// Why a colour conversion was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColourError {
    #[error("colour conversion from {from} to {to} is not supported (NV12/P010 -> AB24 (RGBA8), AB24 -> NV12)")]
    Unsupported { from: Fourcc, to: Fourcc },
    #[error(transparent)]
    Layout(#[from] TilingError),
}

const Q: f64 = 65536.0;

fn q16(v: f64) -> i32 {
    // Coefficients are below 3 in magnitude, so this never saturates.
    (v * Q).round() as i32
}

/// Scale and offset of Y and of C for `bits`-bit samples: (y_off, y_range, c_off, c_range).
fn ranges(range: ColourRange, bits: u32) -> (f64, f64, f64, f64) {
    let s = (1u32 << (bits - 8)) as f64;
    match range {
        ColourRange::Limited => (16.0 * s, 219.0 * s, 128.0 * s, 224.0 * s),
        ColourRange::Full => {
            let m = ((1u32 << bits) - 1) as f64;
            (0.0, m, (1u32 << (bits - 1)) as f64, m)
        }
    }
}

/// Q16 coefficients for `bits`-bit YUV samples to 8-bit RGB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct YuvToRgb {
    pub y_mul: i32,
    pub r_v: i32,
    pub g_u: i32,
    pub g_v: i32,
    pub b_u: i32,
    pub y_off: i32,
    pub c_off: i32,
}

impl YuvToRgb {
    /// Coefficients for 8-bit (NV12, `bits = 8`) or 10-bit (P010, `bits = 10`) samples.
    pub fn new(matrix: ColourMatrix, range: ColourRange, bits: u32) -> Self {
        let (kr, kb) = matrix.kr_kb();
        let kg = 1.0 - kr - kb;
        let (yo, yr, co, cr) = ranges(range, bits);
        YuvToRgb {
            y_mul: q16(255.0 / yr),
            r_v: q16(255.0 * 2.0 * (1.0 - kr) / cr),
            g_u: q16(-255.0 * 2.0 * kb * (1.0 - kb) / kg / cr),
            g_v: q16(-255.0 * 2.0 * kr * (1.0 - kr) / kg / cr),
            b_u: q16(255.0 * 2.0 * (1.0 - kb) / cr),
            y_off: yo as i32,
            c_off: co as i32,
        }
    }

    /// One pixel. `y`, `u`, `v` are samples of the depth the coefficients were made for.
    pub fn convert(&self, y: i32, u: i32, v: i32) -> [u8; 3] {
        let yy = self.y_mul * (y - self.y_off) + (1 << 15);
        let (u, v) = (u - self.c_off, v - self.c_off);
        let ch = |s: i32| (s >> 16).clamp(0, 255) as u8;
        [ch(yy + self.r_v * v), ch(yy + self.g_u * u + self.g_v * v), ch(yy + self.b_u * u)]
    }

    /// The push-constant order of `colour.comp`: ym, rv, gu, gv, bu, yo, co.
    pub fn words(&self) -> [i32; 7] {
        [self.y_mul, self.r_v, self.g_u, self.g_v, self.b_u, self.y_off, self.c_off]
    }
}

/// Q16 coefficients for 8-bit RGB to 8-bit YUV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RgbToYuv {
    pub y_r: i32,
    pub y_g: i32,
    pub y_b: i32,
    pub u_r: i32,
    pub u_g: i32,
    pub u_b: i32,
    pub v_r: i32,
    pub v_g: i32,
    pub v_b: i32,
    pub y_off: i32,
    pub c_off: i32,
}

impl RgbToYuv {
    pub fn new(matrix: ColourMatrix, range: ColourRange) -> Self {
        let (kr, kb) = matrix.kr_kb();
        let kg = 1.0 - kr - kb;
        let (yo, yr, co, cr) = ranges(range, 8);
        let (ys, cs) = (yr / 255.0, cr / 255.0);
        let u_r = q16(-kr / (2.0 * (1.0 - kb)) * cs);
        let u_b = q16(0.5 * cs);
        let v_r = q16(0.5 * cs);
        let v_b = q16(-kb / (2.0 * (1.0 - kr)) * cs);
        RgbToYuv {
            y_r: q16(kr * ys),
            y_g: q16(kg * ys),
            y_b: q16(kb * ys),
            u_r,
            u_g: -(u_r + u_b),
            u_b,
            v_r,
            v_g: -(v_r + v_b),
            v_b,
            y_off: yo as i32,
            c_off: co as i32,
        }
    }

    pub fn luma(&self, r: i32, g: i32, b: i32) -> u8 {
        ((self.y_r * r + self.y_g * g + self.y_b * b + (self.y_off << 16) + (1 << 15)) >> 16).clamp(0, 255) as u8
    }

    /// Cb, Cr of a 2x2 block from the sums of its four (edge-replicated) pixels.
    pub fn chroma(&self, sr: i32, sg: i32, sb: i32) -> [u8; 2] {
        let c = |kr: i32, kg: i32, kb: i32| {
            ((kr * sr + kg * sg + kb * sb + (self.c_off << 18) + (1 << 17)) >> 18).clamp(0, 255) as u8
        };
        [c(self.u_r, self.u_g, self.u_b), c(self.v_r, self.v_g, self.v_b)]
    }

    /// The push-constant order of `colour.comp`: yr, yg, yb, ur, ug, ub, vr, vg, vb, yo, co.
    pub fn words(&self) -> [i32; 11] {
        [
            self.y_r, self.y_g, self.y_b, self.u_r, self.u_g, self.u_b, self.v_r, self.v_g, self.v_b, self.y_off,
            self.c_off,
        ]
    }
}

fn round_clamp(v: f64) -> u8 {
    (v + 0.5).floor().clamp(0.0, 255.0) as u8
}

/// Float reference of one YUV -> RGB pixel (no coefficient quantisation).
pub fn yuv_to_rgb_float(matrix: ColourMatrix, range: ColourRange, bits: u32, y: i32, u: i32, v: i32) -> [u8; 3] {
    let (kr, kb) = matrix.kr_kb();
    let kg = 1.0 - kr - kb;
    let (yo, yr, co, cr) = ranges(range, bits);
    let yn = (y as f64 - yo) / yr;
    let pb = (u as f64 - co) / cr;
    let pr = (v as f64 - co) / cr;
    let r = yn + 2.0 * (1.0 - kr) * pr;
    let g = yn - 2.0 * kb * (1.0 - kb) / kg * pb - 2.0 * kr * (1.0 - kr) / kg * pr;
    let b = yn + 2.0 * (1.0 - kb) * pb;
    [round_clamp(255.0 * r), round_clamp(255.0 * g), round_clamp(255.0 * b)]
}

/// Float reference of RGB -> YUV: Y of the first pixel, and Cb/Cr as the mean over `block`.
pub fn rgb_to_yuv_float(matrix: ColourMatrix, range: ColourRange, block: &[[u8; 3]]) -> (u8, [u8; 2]) {
    let (kr, kb) = matrix.kr_kb();
    let kg = 1.0 - kr - kb;
    let (yo, yr, co, cr) = ranges(range, 8);
    let comps = |p: &[u8; 3]| {
        let (r, g, b) = (p[0] as f64 / 255.0, p[1] as f64 / 255.0, p[2] as f64 / 255.0);
        let yn = kr * r + kg * g + kb * b;
        (yo + yr * yn, co + cr * (b - yn) / (2.0 * (1.0 - kb)), co + cr * (r - yn) / (2.0 * (1.0 - kr)))
    };
    let n = block.len().max(1) as f64;
    let (su, sv) = block.iter().map(comps).fold((0.0, 0.0), |(a, b), (_, u, v)| (a + u, b + v));
    let y = block.first().map(|p| comps(p).0).unwrap_or(0.0);
    (round_clamp(y), [round_clamp(su / n), round_clamp(sv / n)])
}

fn rd(buf: &[u8], at: u64) -> u8 {
    buf[at as usize]
}

fn rd16(buf: &[u8], at: u64) -> i32 {
    u16::from_le_bytes([buf[at as usize], buf[at as usize + 1]]) as i32
}

/// NV12 or P010 (planes at `src_planes`) -> RGBA8 (at `dst_plane`); see the module docs.
#[allow(clippy::too_many_arguments)]
pub fn yuv_to_rgba(
    fourcc: Fourcc,
    matrix: ColourMatrix,
    range: ColourRange,
    width: u32,
    height: u32,
    src: &[u8],
    src_planes: &[LinearPlane],
    dst: &mut [u8],
    dst_plane: LinearPlane,
) -> Result<(), ColourError> {
    let bits = match fourcc {
        f if f == Fourcc::NV12 => 8,
        f if f == Fourcc::P010 => 10,
        from => return Err(ColourError::Unsupported { from, to: Fourcc::ABGR8888 }),
    };
    let sg = tiled_size(TileLayout::Linear, fourcc, width, height)?;
    check_linear(&sg, src_planes, src.len(), "YUV source")?;
    let dg = tiled_size(TileLayout::Linear, Fourcc::ABGR8888, width, height)?;
    check_linear(&dg, &[dst_plane], dst.len(), "RGBA destination")?;
    let k = YuvToRgb::new(matrix, range, bits);
    let (yp, cp) = (src_planes[0], src_planes[1]);
    for y in 0..height as u64 {
        for x in 0..width as u64 {
            let (cy, cx) = (y / 2, x / 2);
            let (luma, u, v) = if bits == 8 {
                let c = cp.offset + cy * cp.stride + cx * 2;
                (rd(src, yp.offset + y * yp.stride + x) as i32, rd(src, c) as i32, rd(src, c + 1) as i32)
            } else {
                let c = cp.offset + cy * cp.stride + cx * 4;
                (rd16(src, yp.offset + y * yp.stride + x * 2) >> 6, rd16(src, c) >> 6, rd16(src, c + 2) >> 6)
            };
            let [r, g, b] = k.convert(luma, u, v);
            let o = (dst_plane.offset + y * dst_plane.stride + x * 4) as usize;
            dst[o..o + 4].copy_from_slice(&[r, g, b, 255]);
        }
    }
    Ok(())
}

/// RGBA8 (at `src_plane`) -> NV12 (planes at `dst_planes`); see the module docs.
#[allow(clippy::too_many_arguments)]
pub fn rgba_to_nv12(
    matrix: ColourMatrix,
    range: ColourRange,
    width: u32,
    height: u32,
    src: &[u8],
    src_plane: LinearPlane,
    dst: &mut [u8],
    dst_planes: &[LinearPlane],
) -> Result<(), ColourError> {
    let sg = tiled_size(TileLayout::Linear, Fourcc::ABGR8888, width, height)?;
    check_linear(&sg, &[src_plane], src.len(), "RGBA source")?;
    let dg = tiled_size(TileLayout::Linear, Fourcc::NV12, width, height)?;
    check_linear(&dg, dst_planes, dst.len(), "NV12 destination")?;
    let k = RgbToYuv::new(matrix, range);
    let px = |x: u64, y: u64| {
        let o = (src_plane.offset + y * src_plane.stride + x * 4) as usize;
        [src[o] as i32, src[o + 1] as i32, src[o + 2] as i32]
    };
    let (w, h) = (width as u64, height as u64);
    let (yp, cp) = (dst_planes[0], dst_planes[1]);
    for y in 0..h {
        for x in 0..w {
            let [r, g, b] = px(x, y);
            dst[(yp.offset + y * yp.stride + x) as usize] = k.luma(r, g, b);
        }
    }
    for cy in 0..h.div_ceil(2) {
        for cx in 0..w.div_ceil(2) {
            let mut s = [0i32; 3];
            for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                let p = px((2 * cx + dx).min(w - 1), (2 * cy + dy).min(h - 1));
                (0..3).for_each(|i| s[i] += p[i]);
            }
            let o = (cp.offset + cy * cp.stride + cx * 2) as usize;
            dst[o..o + 2].copy_from_slice(&k.chroma(s[0], s[1], s[2]));
        }
    }
    Ok(())
}

/// [`yuv_to_rgba`] from a tightly packed NV12/P010 image ([`packed_planes`]) into a new,
/// tightly packed RGBA8 image: the input is checked, then the output against
/// [`MAX_CPU_FRAME_BYTES`](super::MAX_CPU_FRAME_BYTES), before the output is allocated.
pub fn yuv_to_rgba_vec(
    fourcc: Fourcc,
    matrix: ColourMatrix,
    range: ColourRange,
    width: u32,
    height: u32,
    src: &[u8],
) -> Result<Vec<u8>, ColourError> {
    if fourcc != Fourcc::NV12 && fourcc != Fourcc::P010 {
        return Err(ColourError::Unsupported { from: fourcc, to: Fourcc::ABGR8888 });
    }
    let sg = tiled_size(TileLayout::Linear, fourcc, width, height)?;
    let src_planes = packed_planes(fourcc, width, height)?;
    check_linear(&sg, &src_planes, src.len(), "YUV source")?;
    let dst_plane = packed_planes(Fourcc::ABGR8888, width, height)?[0];
    let dg = tiled_size(TileLayout::Linear, Fourcc::ABGR8888, width, height)?;
    let mut out = alloc_output("RGBA image", dg.size)?;
    yuv_to_rgba(fourcc, matrix, range, width, height, src, &src_planes, &mut out, dst_plane)?;
    Ok(out)
}

/// [`rgba_to_nv12`] from a tightly packed RGBA8 image into a new, tightly packed NV12 image,
/// checking the input and the output size before allocating, as [`yuv_to_rgba_vec`] does.
pub fn rgba_to_nv12_vec(
    matrix: ColourMatrix,
    range: ColourRange,
    width: u32,
    height: u32,
    src: &[u8],
) -> Result<Vec<u8>, ColourError> {
    let sg = tiled_size(TileLayout::Linear, Fourcc::ABGR8888, width, height)?;
    let src_plane = packed_planes(Fourcc::ABGR8888, width, height)?[0];
    check_linear(&sg, &[src_plane], src.len(), "RGBA source")?;
    let dg = tiled_size(TileLayout::Linear, Fourcc::NV12, width, height)?;
    let dst_planes = packed_planes(Fourcc::NV12, width, height)?;
    let mut out = alloc_output("NV12 image", dg.size)?;
    rgba_to_nv12(matrix, range, width, height, src, src_plane, &mut out, &dst_planes)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_forms_check_before_allocating() {
        let (m, r) = (ColourMatrix::Bt709, ColourRange::Limited);
        assert!(matches!(
            yuv_to_rgba_vec(Fourcc::NV12, m, r, 200_000, 200_000, &[]),
            Err(ColourError::Layout(TilingError::BufferTooSmall { .. }))
        ));
        assert!(matches!(
            rgba_to_nv12_vec(m, r, 200_000, 200_000, &[]),
            Err(ColourError::Layout(TilingError::BufferTooSmall { .. }))
        ));
        assert!(matches!(yuv_to_rgba_vec(Fourcc::R8, m, r, 2, 2, &[0; 4]), Err(ColourError::Unsupported { .. })));
        let nv12 = vec![128u8; 6 * 4 + 6 * 2];
        let rgba = yuv_to_rgba_vec(Fourcc::NV12, m, r, 6, 4, &nv12).unwrap();
        assert_eq!(rgba.len(), 6 * 4 * 4);
        assert_eq!(rgba_to_nv12_vec(m, r, 6, 4, &rgba).unwrap().len(), nv12.len());
    }

    #[test]
    fn grey_and_extremes() {
        for m in [ColourMatrix::Bt601, ColourMatrix::Bt709] {
            let k = YuvToRgb::new(m, ColourRange::Limited, 8);
            assert_eq!(k.convert(16, 128, 128), [0, 0, 0]);
            assert_eq!(k.convert(235, 128, 128), [255, 255, 255]);
            let k = RgbToYuv::new(m, ColourRange::Limited);
            assert_eq!(k.luma(255, 255, 255), 235);
            assert_eq!(k.chroma(4 * 77, 4 * 77, 4 * 77), [128, 128]);
            let k = YuvToRgb::new(m, ColourRange::Full, 10);
            assert_eq!(k.convert(1023, 512, 512), [255, 255, 255]);
        }
    }
}
