//! YUV <-> RGB reference conversions: NV12/P010 -> every RGB format the peers list, and
//! back from any 8-bit one to NV12.
//!
//! The RGB side is any of [`RGB8_FORMATS`] (AR24, XR24, AB24, XB24, RA24, RX24, BA24, BX24:
//! 8 bits per component in the byte order [`RgbPacking`] gives) or [`RGB10_FORMATS`]
//! (AR30/XR30, 2:10:10:10). Alpha, and the padding of the X formats, is written as all
//! ones and ignored on input.
//!
//! ## The arithmetic (the GPU shader `colour.comp` does exactly this, in `int`)
//! - Coefficients come from Kr/Kb (BT.601: 0.299/0.114, BT.709: 0.2126/0.0722, BT.2020:
//!   0.2627/0.0593) and the
//!   range (ITU-T H.273: limited Y = 16..235, C = 16..240, scaled by 2^(bits-8); full
//!   Y = 0..2^bits-1, C centred on 2^(bits-1), both scaled by 2^bits-1). They are
//!   turned into fixed point by rounding to nearest, once, on the host
//!   ([`YuvToRgb::new`], [`RgbToYuv::new`]); the shader receives those same integers as
//!   push constants, so CPU and GPU cannot disagree on a coefficient.
//! - YUV -> RGB is 16-bit arithmetic, so that a SIMD register holds sixteen pixels (libyuv's
//!   speed) while the coefficients keep 14 to 16 significant bits (libyuv's 6 to 8 put it
//!   up to 6 code values off the formula). Each sample is first lifted to fill a 16-bit
//!   word (`<< 8` for NV12; P010's top 10 bits already do). With `s` fraction bits in the
//!   sums (6 for 8-bit output, 4 for AR30's 10-bit):
//!   `L = ((Y << lift) * ym >> 16) + bias` (unsigned product; `bias` holds `-ym * yo` and
//!   the half that rounds), each chroma term `t = ((C - co) << lift) * k` rounded by 15
//!   bits (`(p + 2^14) >> 15`), and `R = sat16(L + t_rv) >> s`, `G` from `t_gu + t_gv`,
//!   `B` from `t_bu`, arithmetic shifts, then clamped to 0..=max. `sat16` saturates to
//!   the i16 range; it only ever fires on a pixel that clamps to `max` anyway.
//! - Every other result is `(sum + half) >> shift` with an arithmetic shift: round half up
//!   (towards +infinity), then clamped to 0..=255.
//! - P010 samples are the top 10 bits of each little-endian 16-bit word (`w >> 6`).
//! - Chroma siting on upsampling: sample replication, pixel (x, y) uses chroma sample
//!   (x/2, y/2). That is exact for co-sited top-left chroma (H.273 chroma_sample_loc_type
//!   2) and the nearest sample for the MPEG-2/H.264 default (type 0: co-sited horizontally,
//!   between rows vertically); no interpolation, so every pixel is independent.
//! - RGB -> NV12, coefficients with a 15-bit fraction (Q15: they fit a signed 16-bit word,
//!   so one `pmaddwd` multiplies two of them by two samples and adds):
//!   `Y = (yr*R + yg*G + yb*B + (yo<<15) + 2^14) >> 15` per pixel. Chroma of
//!   the 2x2 block at (2i, 2j) comes from the sums SR, SG, SB of its four pixels, with
//!   coordinates past the right or bottom edge clamped to the last column/row (edge
//!   replication): `U = (ur*SR + ug*SG + ub*SB + (co<<17) + 2^16) >> 17`. That is the mean
//!   of the four pixels' unrounded chroma, rounded once. `ug = -(ur + ub)` and
//!   `vg = -(vr + vb)` so that grey maps exactly to the chroma offset.
//!
//! The float reference ([`yuv_to_rgb_float`], [`rgb_to_yuv_float`]) evaluates the same
//! formulas in f64 without quantised coefficients; the fixed-point results stay within
//! ±1 of it (tested over a grid for all four matrix/range combinations).

use super::geometry::{check_linear, packed_planes, tiled_size};
use super::{alloc_output, PlaneLayout, TilingError};
use crate::{Fourcc, TileLayout};

/// YCbCr matrix coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ColourMatrix {
    Bt601,
    Bt709,
    Bt2020,
}

/// Quantisation range of the YUV side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
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
            ColourMatrix::Bt2020 => (0.2627, 0.0593),
        }
    }

    /// Every matrix, for tests and tools.
    pub const ALL: [ColourMatrix; 3] = [ColourMatrix::Bt601, ColourMatrix::Bt709, ColourMatrix::Bt2020];

    /// The name `dmabridge convert --matrix` takes.
    pub fn name(self) -> &'static str {
        match self {
            ColourMatrix::Bt601 => "bt601",
            ColourMatrix::Bt709 => "bt709",
            ColourMatrix::Bt2020 => "bt2020",
        }
    }
}

impl std::str::FromStr for ColourMatrix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ColourMatrix::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| format!("{s:?}: expected bt601, bt709 or bt2020"))
    }
}

impl ColourRange {
    /// The name `dmabridge convert --range` takes.
    pub fn name(self) -> &'static str {
        match self {
            ColourRange::Limited => "limited",
            ColourRange::Full => "full",
        }
    }
}

impl std::str::FromStr for ColourRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [ColourRange::Limited, ColourRange::Full].into_iter().find(|r| r.name() == s).ok_or_else(|| format!("{s:?}: expected limited or full"))
    }
}

/// The 8-bit RGB formats: colour conversion writes all of them from NV12/P010 and reads
/// all of them back to NV12.
pub const RGB8_FORMATS: [Fourcc; 8] = [
    Fourcc::ARGB8888,
    Fourcc::XRGB8888,
    Fourcc::ABGR8888,
    Fourcc::XBGR8888,
    Fourcc::RGBA8888,
    Fourcc::RGBX8888,
    Fourcc::BGRA8888,
    Fourcc::BGRX8888,
];

/// The 10-bit RGB formats colour conversion writes (from P010, or NV12).
pub const RGB10_FORMATS: [Fourcc; 2] = [Fourcc::ARGB2101010, Fourcc::XRGB2101010];

/// Where an RGB format keeps its components. DRM names packed pixels from the most
/// significant bit of a little-endian word, so `AR24` (`[31:0] A:R:G:B`) holds B, G, R, A
/// in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RgbPacking {
    /// 8 bits each; the byte index of R, G, B and of the alpha or padding byte.
    Bytes { r: u8, g: u8, b: u8, a: u8 },
    /// A little-endian word `[31:0] A:R:G:B` 2:10:10:10.
    Argb2101010,
}

impl RgbPacking {
    /// The packing of `fourcc`, if it is one of [`RGB8_FORMATS`] or [`RGB10_FORMATS`].
    pub fn of(fourcc: Fourcc) -> Option<RgbPacking> {
        let bytes = |r, g, b, a| Some(RgbPacking::Bytes { r, g, b, a });
        match fourcc {
            f if f == Fourcc::ARGB8888 || f == Fourcc::XRGB8888 => bytes(2, 1, 0, 3),
            f if f == Fourcc::ABGR8888 || f == Fourcc::XBGR8888 => bytes(0, 1, 2, 3),
            f if f == Fourcc::RGBA8888 || f == Fourcc::RGBX8888 => bytes(3, 2, 1, 0),
            f if f == Fourcc::BGRA8888 || f == Fourcc::BGRX8888 => bytes(1, 2, 3, 0),
            f if f == Fourcc::ARGB2101010 || f == Fourcc::XRGB2101010 => Some(RgbPacking::Argb2101010),
            _ => None,
        }
    }

    /// Bits per component.
    pub fn bits(self) -> u32 {
        match self {
            RgbPacking::Bytes { .. } => 8,
            RgbPacking::Argb2101010 => 10,
        }
    }

    /// The 4 bytes of one pixel from components of [`RgbPacking::bits`] bits.
    #[inline(always)]
    pub fn pack(self, [r, g, b]: [u16; 3]) -> [u8; 4] {
        match self {
            RgbPacking::Bytes { r: ri, g: gi, b: bi, a: ai } => {
                let mut px = [0u8; 4];
                px[ri as usize] = r as u8;
                px[gi as usize] = g as u8;
                px[bi as usize] = b as u8;
                px[ai as usize] = 255;
                px
            }
            RgbPacking::Argb2101010 => ((3u32 << 30) | (u32::from(r) << 20) | (u32::from(g) << 10) | u32::from(b)).to_le_bytes(),
        }
    }

    /// R, G, B of one 8-bit pixel (`None` for the 10-bit packing, which is written only).
    #[inline(always)]
    pub fn unpack8(self, px: &[u8]) -> Option<[i32; 3]> {
        match self {
            RgbPacking::Bytes { r, g, b, .. } => Some([px[r as usize] as i32, px[g as usize] as i32, px[b as usize] as i32]),
            RgbPacking::Argb2101010 => None,
        }
    }

    /// The pixel word's alpha (or padding) bits, all ones: what [`RgbPacking::pack`]
    /// writes there.
    pub fn alpha_bits(self) -> u32 {
        match self {
            RgbPacking::Bytes { a, .. } => 255 << (u32::from(a) * 8),
            RgbPacking::Argb2101010 => 3 << 30,
        }
    }

    /// The bit position of R, G, B and alpha in the little-endian pixel word.
    pub fn shifts(self) -> [u32; 4] {
        match self {
            RgbPacking::Bytes { r, g, b, a } => [r as u32 * 8, g as u32 * 8, b as u32 * 8, a as u32 * 8],
            RgbPacking::Argb2101010 => [20, 10, 0, 30],
        }
    }

    /// The shader's encoding: 2 bits per byte index (R, G, B, A from bit 0), or 0xffff_ffff
    /// for 2:10:10:10.
    pub fn shader_word(self) -> u32 {
        match self {
            RgbPacking::Bytes { r, g, b, a } => u32::from(r) | u32::from(g) << 2 | u32::from(b) << 4 | u32::from(a) << 6,
            RgbPacking::Argb2101010 => u32::MAX,
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

/// A coefficient below 1 in magnitude in Q15: at most 32767 (RGB -> YUV's are at most
/// 0.7), so it fits a signed 16-bit word.
fn q15(v: f64) -> i32 {
    (v * 32768.0).round() as i32
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

/// Fixed-point coefficients for `bits`-bit YUV samples to 8- or 10-bit RGB, in the
/// 16-bit arithmetic the module docs define (what a 16-bit SIMD lane holds: sixteen
/// pixels to an AVX2 register).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct YuvToRgb {
    /// The largest output value: 255 or 1023.
    pub max: i32,
    /// Fraction bits of the 16-bit sums: 6 for 8-bit output, 4 for 10-bit (so that a sum
    /// above `max` still fits, or saturates, in 16 bits).
    pub shift: u32,
    /// How far a sample is shifted to fill a 16-bit word: 8 (NV12) or 6 (P010, whose
    /// samples sit in the top 10 bits of their words already).
    pub lift: u32,
    /// Unsigned: the luma term is `(Y << lift) * y_mul >> 16`.
    pub y_mul: i32,
    /// Signed, at most 32767 in magnitude: a chroma term is
    /// `((C - c_off) << lift) * coefficient`, rounded by 15 bits.
    pub r_v: i32,
    pub g_u: i32,
    pub g_v: i32,
    pub b_u: i32,
    /// Added to the luma term: `-y_mul * y_off` and the half that rounds the final shift.
    pub bias: i32,
    pub c_off: i32,
}

/// The rounded high half of a signed 16-bit product (x86's `pmulhrsw`): what a chroma
/// term is.
#[inline(always)]
fn mulhrs(a: i32, b: i32) -> i32 {
    (a * b + (1 << 14)) >> 15
}

/// A 16-bit saturating sum (x86's `paddsw`): where a sum would not fit, its pixel is past
/// `max` anyway and clamps the same.
#[inline(always)]
fn adds(a: i32, b: i32) -> i32 {
    (a + b).clamp(i16::MIN as i32, i16::MAX as i32)
}

impl YuvToRgb {
    /// Coefficients for 8-bit (NV12, `bits = 8`) or 10-bit (P010, `bits = 10`) samples to
    /// `out_bits`-bit (8 or 10) RGB.
    pub fn new(matrix: ColourMatrix, range: ColourRange, bits: u32, out_bits: u32) -> Self {
        let (kr, kb) = matrix.kr_kb();
        let kg = 1.0 - kr - kb;
        let (yo, yr, co, cr) = ranges(range, bits);
        let m = ((1u32 << out_bits) - 1) as f64;
        let shift = if out_bits == 8 { 6 } else { 4 };
        // Luma: (Y << (16 - bits)) * y_mul >> 16 = Y * ym * 2^shift.
        let y_mul = m / yr * f64::from(1u32 << (shift + bits));
        // Chroma: ((C - co) << (16 - bits)) * c >> 15 = (C - co) * coefficient * 2^shift.
        let c = |v: f64| (v * f64::from(1u32 << (shift + bits - 1))).round() as i32;
        YuvToRgb {
            max: m as i32,
            shift,
            lift: 16 - bits,
            y_mul: y_mul.round() as i32,
            r_v: c(m * 2.0 * (1.0 - kr) / cr),
            g_u: c(-m * 2.0 * kb * (1.0 - kb) / kg / cr),
            g_v: c(-m * 2.0 * kr * (1.0 - kr) / kg / cr),
            b_u: c(m * 2.0 * (1.0 - kb) / cr),
            bias: (1 << (shift - 1)) - (m / yr * yo * f64::from(1u32 << shift)).round() as i32,
            c_off: co as i32,
        }
    }

    /// The chroma terms of one sample, shared by the pixels that use it: (R, G, B) addends.
    #[inline(always)]
    pub fn chroma_terms(&self, u: i32, v: i32) -> [i32; 3] {
        let (u, v) = ((u - self.c_off) << self.lift, (v - self.c_off) << self.lift);
        [mulhrs(v, self.r_v), mulhrs(u, self.g_u) + mulhrs(v, self.g_v), mulhrs(u, self.b_u)]
    }

    /// One pixel from its luma and its chroma's [`YuvToRgb::chroma_terms`].
    #[inline(always)]
    pub fn pixel(&self, y: i32, [cr, cg, cb]: [i32; 3]) -> [u16; 3] {
        let l = (((y << self.lift) as u32 * self.y_mul as u32) >> 16) as i32 + self.bias;
        let ch = |t: i32| (adds(l, t) >> self.shift).clamp(0, self.max) as u16;
        [ch(cr), ch(cg), ch(cb)]
    }

    /// One pixel. `y`, `u`, `v` are samples of the depth the coefficients were made for.
    pub fn convert(&self, y: i32, u: i32, v: i32) -> [u16; 3] {
        self.pixel(y, self.chroma_terms(u, v))
    }

    /// The push-constant order of `colour.comp`: ym, rv, gu, gv, bu, bias, co, max, shift,
    /// lift.
    pub fn words(&self) -> [i32; 10] {
        [self.y_mul, self.r_v, self.g_u, self.g_v, self.b_u, self.bias, self.c_off, self.max, self.shift as i32, self.lift as i32]
    }
}

/// Q15 coefficients for 8-bit RGB to 8-bit YUV.
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
        let u_r = q15(-kr / (2.0 * (1.0 - kb)) * cs);
        let u_b = q15(0.5 * cs);
        let v_r = q15(0.5 * cs);
        let v_b = q15(-kb / (2.0 * (1.0 - kr)) * cs);
        RgbToYuv {
            y_r: q15(kr * ys),
            y_g: q15(kg * ys),
            y_b: q15(kb * ys),
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
        ((self.y_r * r + self.y_g * g + self.y_b * b + (self.y_off << 15) + (1 << 14)) >> 15).clamp(0, 255) as u8
    }

    /// Cb, Cr of a 2x2 block from the sums of its four (edge-replicated) pixels.
    pub fn chroma(&self, sr: i32, sg: i32, sb: i32) -> [u8; 2] {
        let c = |kr: i32, kg: i32, kb: i32| {
            ((kr * sr + kg * sg + kb * sb + (self.c_off << 17) + (1 << 16)) >> 17).clamp(0, 255) as u8
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

/// Float reference of one YUV -> `out_bits`-bit RGB pixel (no coefficient quantisation).
pub fn yuv_to_rgb_float(matrix: ColourMatrix, range: ColourRange, bits: u32, out_bits: u32, y: i32, u: i32, v: i32) -> [u16; 3] {
    let (kr, kb) = matrix.kr_kb();
    let kg = 1.0 - kr - kb;
    let (yo, yr, co, cr) = ranges(range, bits);
    let yn = (y as f64 - yo) / yr;
    let pb = (u as f64 - co) / cr;
    let pr = (v as f64 - co) / cr;
    let r = yn + 2.0 * (1.0 - kr) * pr;
    let g = yn - 2.0 * kb * (1.0 - kb) / kg * pb - 2.0 * kr * (1.0 - kr) / kg * pr;
    let b = yn + 2.0 * (1.0 - kb) * pb;
    let m = ((1u32 << out_bits) - 1) as f64;
    let q = |c: f64| (m * c + 0.5).floor().clamp(0.0, m) as u16;
    [q(r), q(g), q(b)]
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

fn rd16(buf: &[u8], at: usize) -> i32 {
    u16::from_le_bytes([buf[at], buf[at + 1]]) as i32
}

/// The bit depth of a YUV source colour conversion reads.
pub(super) fn yuv_bits(from: Fourcc, to: Fourcc) -> Result<u32, ColourError> {
    match from {
        f if f == Fourcc::NV12 => Ok(8),
        f if f == Fourcc::P010 => Ok(10),
        _ => Err(ColourError::Unsupported { from, to }),
    }
}

/// The packing of an RGB destination (or source, `eight_bit_only`).
pub(super) fn packing(fourcc: Fourcc, other: Fourcc, eight_bit_only: bool, from_rgb: bool) -> Result<RgbPacking, ColourError> {
    let unsupported = || if from_rgb { ColourError::Unsupported { from: fourcc, to: other } } else { ColourError::Unsupported { from: other, to: fourcc } };
    match RgbPacking::of(fourcc) {
        Some(p) if !(eight_bit_only && p.bits() != 8) => Ok(p),
        _ => Err(unsupported()),
    }
}

/// NV12 or P010 `from` (planes at `src_planes`) -> RGB format `to` (at `dst_plane`), in
/// `matrix` and `range`; see the module docs.
pub fn yuv_to_rgb(
    (from, to): (Fourcc, Fourcc),
    (matrix, range): (ColourMatrix, ColourRange),
    (width, height): (u32, u32),
    (src, src_planes): (&[u8], &[PlaneLayout]),
    (dst, dst_plane): (&mut [u8], PlaneLayout),
) -> Result<(), ColourError> {
    let bits = yuv_bits(from, to)?;
    let pack = packing(to, from, false, false)?;
    let sg = tiled_size(TileLayout::Linear, from, width, height)?;
    check_linear(&sg, src_planes, src.len(), "YUV source")?;
    let dg = tiled_size(TileLayout::Linear, to, width, height)?;
    check_linear(&dg, &[dst_plane], dst.len(), "RGB destination")?;
    let k = YuvToRgb::new(matrix, range, bits, pack.bits());
    let (yp, cp) = (src_planes[0], src_planes[1]);
    for y in 0..height as usize {
        for x in 0..width as usize {
            let (cy, cx) = (y / 2, x / 2);
            let (luma, u, v) = if bits == 8 {
                let c = cp.offset as usize + cy * cp.stride as usize + cx * 2;
                (src[yp.offset as usize + y * yp.stride as usize + x] as i32, src[c] as i32, src[c + 1] as i32)
            } else {
                let c = cp.offset as usize + cy * cp.stride as usize + cx * 4;
                (rd16(src, yp.offset as usize + y * yp.stride as usize + x * 2) >> 6, rd16(src, c) >> 6, rd16(src, c + 2) >> 6)
            };
            let o = dst_plane.offset as usize + y * dst_plane.stride as usize + x * 4;
            dst[o..o + 4].copy_from_slice(&pack.pack(k.convert(luma, u, v)));
        }
    }
    Ok(())
}

/// 8-bit RGB format `from` (at `src_plane`) -> NV12 (planes at `dst_planes`), in `matrix`
/// and `range`; see the module docs.
pub fn rgb_to_nv12(
    from: Fourcc,
    (matrix, range): (ColourMatrix, ColourRange),
    (width, height): (u32, u32),
    (src, src_plane): (&[u8], PlaneLayout),
    (dst, dst_planes): (&mut [u8], &[PlaneLayout]),
) -> Result<(), ColourError> {
    let pack = check_rgb_to_nv12(from, (width, height), (src.len(), src_plane), (dst.len(), dst_planes))?;
    let k = RgbToYuv::new(matrix, range);
    let px = |x: u64, y: u64| {
        let o = (src_plane.offset + y * src_plane.stride + x * 4) as usize;
        pack.unpack8(&src[o..o + 4]).unwrap_or_default()
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

/// The checks of an RGB -> NV12 conversion, before a byte is read: an 8-bit RGB `from`
/// (its packing, returned), the source's and the NV12 destination's planes inside their
/// buffers.
pub(super) fn check_rgb_to_nv12(
    from: Fourcc,
    (width, height): (u32, u32),
    (src_len, src_plane): (usize, PlaneLayout),
    (dst_len, dst_planes): (usize, &[PlaneLayout]),
) -> Result<RgbPacking, ColourError> {
    let pack = packing(from, Fourcc::NV12, true, true)?;
    check_linear(&tiled_size(TileLayout::Linear, from, width, height)?, &[src_plane], src_len, "RGB source")?;
    check_linear(&tiled_size(TileLayout::Linear, Fourcc::NV12, width, height)?, dst_planes, dst_len, "NV12 destination")?;
    Ok(pack)
}

/// [`yuv_to_rgb`] from a tightly packed NV12/P010 image ([`packed_planes`]) into a new,
/// tightly packed RGB image: the input is checked, then the output against
/// [`MAX_CPU_FRAME_BYTES`](super::MAX_CPU_FRAME_BYTES), before the output is allocated.
pub fn yuv_to_rgb_vec((from, to): (Fourcc, Fourcc), (matrix, range): (ColourMatrix, ColourRange), (width, height): (u32, u32), src: &[u8]) -> Result<Vec<u8>, ColourError> {
    yuv_bits(from, to)?;
    packing(to, from, false, false)?;
    let sg = tiled_size(TileLayout::Linear, from, width, height)?;
    let src_planes = packed_planes(from, width, height)?;
    check_linear(&sg, &src_planes, src.len(), "YUV source")?;
    let dst_plane = packed_planes(to, width, height)?[0];
    let dg = tiled_size(TileLayout::Linear, to, width, height)?;
    let mut out = alloc_output("RGB image", dg.size)?;
    yuv_to_rgb((from, to), (matrix, range), (width, height), (src, &src_planes), (&mut out, dst_plane))?;
    Ok(out)
}

/// [`rgb_to_nv12`] from a tightly packed RGB image into a new, tightly packed NV12 image,
/// checking the input and the output size before allocating, as [`yuv_to_rgb_vec`] does.
pub fn rgb_to_nv12_vec(from: Fourcc, (matrix, range): (ColourMatrix, ColourRange), (width, height): (u32, u32), src: &[u8]) -> Result<Vec<u8>, ColourError> {
    packing(from, Fourcc::NV12, true, true)?;
    let sg = tiled_size(TileLayout::Linear, from, width, height)?;
    let src_plane = packed_planes(from, width, height)?[0];
    check_linear(&sg, &[src_plane], src.len(), "RGB source")?;
    let dg = tiled_size(TileLayout::Linear, Fourcc::NV12, width, height)?;
    let dst_planes = packed_planes(Fourcc::NV12, width, height)?;
    let mut out = alloc_output("NV12 image", dg.size)?;
    rgb_to_nv12(from, (matrix, range), (width, height), (src, src_plane), (&mut out, &dst_planes))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_forms_check_before_allocating() {
        let (m, r) = (ColourMatrix::Bt709, ColourRange::Limited);
        assert!(matches!(
            yuv_to_rgb_vec((Fourcc::NV12, Fourcc::ABGR8888), (m, r), (200_000, 200_000), &[]),
            Err(ColourError::Layout(TilingError::BufferTooSmall { .. }))
        ));
        assert!(matches!(
            rgb_to_nv12_vec(Fourcc::ABGR8888, (m, r), (200_000, 200_000), &[]),
            Err(ColourError::Layout(TilingError::BufferTooSmall { .. }))
        ));
        assert!(matches!(yuv_to_rgb_vec((Fourcc::R8, Fourcc::ABGR8888), (m, r), (2, 2), &[0; 4]), Err(ColourError::Unsupported { .. })));
        assert!(matches!(yuv_to_rgb_vec((Fourcc::NV12, Fourcc::RGB565), (m, r), (2, 2), &[0; 6]), Err(ColourError::Unsupported { .. })));
        assert!(matches!(rgb_to_nv12_vec(Fourcc::ARGB2101010, (m, r), (2, 2), &[0; 16]), Err(ColourError::Unsupported { .. })));
        let nv12 = vec![128u8; 6 * 4 + 6 * 2];
        let rgba = yuv_to_rgb_vec((Fourcc::NV12, Fourcc::ABGR8888), (m, r), (6, 4), &nv12).unwrap();
        assert_eq!(rgba.len(), 6 * 4 * 4);
        assert_eq!(rgb_to_nv12_vec(Fourcc::ABGR8888, (m, r), (6, 4), &rgba).unwrap().len(), nv12.len());
    }

    #[test]
    fn grey_and_extremes() {
        for m in ColourMatrix::ALL {
            let k = YuvToRgb::new(m, ColourRange::Limited, 8, 8);
            assert_eq!(k.convert(16, 128, 128), [0, 0, 0]);
            assert_eq!(k.convert(235, 128, 128), [255, 255, 255]);
            let k = RgbToYuv::new(m, ColourRange::Limited);
            assert_eq!(k.luma(255, 255, 255), 235);
            assert_eq!(k.chroma(4 * 77, 4 * 77, 4 * 77), [128, 128]);
            let k = YuvToRgb::new(m, ColourRange::Full, 10, 8);
            assert_eq!(k.convert(1023, 512, 512), [255, 255, 255]);
            let k = YuvToRgb::new(m, ColourRange::Limited, 10, 10);
            assert_eq!(k.convert(940, 512, 512), [1023, 1023, 1023]);
            assert_eq!(k.convert(64, 512, 512), [0, 0, 0]);
        }
    }

    #[test]
    fn packings_put_components_where_drm_says() {
        // AR24 is [31:0] A:R:G:B little endian: B, G, R, A in memory.
        assert_eq!(RgbPacking::of(Fourcc::ARGB8888).unwrap().pack([1, 2, 3]), [3, 2, 1, 255]);
        assert_eq!(RgbPacking::of(Fourcc::ABGR8888).unwrap().pack([1, 2, 3]), [1, 2, 3, 255]);
        // RA24 is [31:0] R:G:B:A: A, B, G, R in memory; BX24 [31:0] B:G:R:X: X, R, G, B.
        assert_eq!(RgbPacking::of(Fourcc::RGBA8888).unwrap().pack([1, 2, 3]), [255, 3, 2, 1]);
        assert_eq!(RgbPacking::of(Fourcc::BGRX8888).unwrap().pack([1, 2, 3]), [255, 1, 2, 3]);
        let word = u32::from_le_bytes(RgbPacking::of(Fourcc::XRGB2101010).unwrap().pack([1023, 512, 1]));
        assert_eq!((word >> 30, (word >> 20) & 1023, (word >> 10) & 1023, word & 1023), (3, 1023, 512, 1));
        for f in RGB8_FORMATS {
            let p = RgbPacking::of(f).unwrap();
            assert_eq!(p.unpack8(&p.pack([10, 20, 30])), Some([10, 20, 30]), "{f}");
        }
    }
}
