//! The AVX2 inner loops of colour conversion, YUV -> RGB ([`Kernel`]) and RGB -> NV12
//! ([`RgbKernel`]), sixteen pixels at a time, in exactly the reference's arithmetic
//! ([`super::colour`]: Q16 coefficients, 32-bit products, round half up, clamp), so their
//! bytes equal the scalar path's and the GPU's and the ±1 contract is the reference's.
//!
//! Why 32-bit lanes and not libyuv's 16-bit ones: a 16-bit product needs coefficients of
//! 6 to 8 bits, which puts libyuv up to 6 code values off the formula (`cpu_peers`' tests).
//! The price is measured: about 44 vector operations per sixteen pixels, compute-bound, at
//! roughly half libyuv's speed per core (the README's numbers).
//!
//! Used through [`Kernel::detect`] and [`RgbKernel::detect`]: `None` where the CPU has no
//! AVX2 (or is not x86_64), and the caller's scalar loop does the row.

use super::colour::{RgbPacking, RgbToYuv, YuvToRgb};

/// What one conversion's rows share: the coefficients, the packing's bit positions and the
/// sample depth. Made only by [`Kernel::detect`], which checked for AVX2.
#[derive(Debug, Clone, Copy)]
pub(super) struct Kernel {
    k: YuvToRgb,
    shifts: [u32; 4],
    alpha: u32,
    ten_bit: bool,
}

impl Kernel {
    /// A kernel for `k` and the packing `pack`, for 8-bit (NV12) or 10-bit (P010,
    /// `ten_bit`) samples; `None` without AVX2.
    pub(super) fn detect(k: YuvToRgb, pack: RgbPacking, ten_bit: bool) -> Option<Kernel> {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            return Some(Kernel { k, shifts: pack.shifts(), alpha: pack.alpha_bits(), ten_bit });
        }
        let _ = (k, pack, ten_bit);
        None
    }

    /// Converts the leading pixels of one row, sixteen at a time: luma row `y`, its chroma
    /// row `c` (interleaved U, V), 4-byte pixels into `out`. Returns how many pixels it
    /// wrote (a multiple of 16, at most `width`), the rest being the caller's.
    pub(super) fn row(&self, y: &[u8], c: &[u8], out: &mut [u8], width: usize) -> usize {
        let bytes = if self.ten_bit { 2 } else { 1 };
        // Sixteen pixels read 16 luma and 16 chroma samples (8 pairs) and write 64 bytes.
        let blocks = width.min(y.len() / bytes).min(c.len() / bytes).min(out.len() / 4) / 16;
        if blocks == 0 {
            return 0;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (y, c) = (y.as_ptr(), c.as_ptr());
            // SAFETY: a `Kernel` exists only where `detect` found AVX2; chunk k of either row
            // is bytes 16k..16k + 16, and the blocks' chunks (2 * blocks of 16 bytes for
            // 10-bit samples, else blocks) lie inside `y` and `c`, as `out`'s 64 bytes per
            // block, by the minimum above. `wrapping_add` keeps the closures safe to call.
            unsafe { self.blocks_avx2(|k| y.wrapping_add(16 * k), |k| c.wrapping_add(16 * k), out.as_mut_ptr(), blocks) };
            16 * blocks
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (y, c, out);
            0
        }
    }

    /// The byte shuffle from R0..3 G0..3 B0..3 A0..3 to four pixels in the packing's byte
    /// order (bit position / 8 of each component, from [`Kernel::shifts`]).
    #[cfg(target_arch = "x86_64")]
    fn byte_order(&self) -> std::arch::x86_64::__m128i {
        let mut m = [0u8; 16];
        for (channel, shift) in self.shifts.iter().enumerate() {
            let at = (shift / 8) as usize % 4;
            for px in 0..4 {
                m[px * 4 + at] = (channel * 4 + px) as u8;
            }
        }
        // SAFETY: an unaligned 16-byte load from a 16-byte array (SSE2, the x86_64 baseline).
        unsafe { std::arch::x86_64::_mm_loadu_si128(m.as_ptr().cast()) }
    }

    /// # Safety
    /// The CPU has AVX2. For every block `i < blocks`, the 16-byte chunks `yat(j)` and
    /// `cat(j)` are readable for j = i (8-bit samples) or j = 2i, 2i + 1 (10-bit), and `out`
    /// is writable for `64 * blocks` bytes.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn blocks_avx2(&self, yat: impl Fn(usize) -> *const u8, cat: impl Fn(usize) -> *const u8, out: *mut u8, blocks: usize) {
        use std::arch::x86_64::*;
        let k = &self.k;
        // One channel of eight pixels: luma term `l` plus the chroma term `t` (duplicated
        // by `dup`), rounded and shifted, not yet clamped; a macro so it is inlined with
        // AVX2.
        macro_rules! channel {
            ($l:expr, $t:expr, $dup:expr) => {
                _mm256_srai_epi32::<16>(_mm256_add_epi32($l, _mm256_permutevar8x32_epi32($t, $dup)))
            };
        }
        // SAFETY: the caller guarantees AVX2 (every intrinsic's requirement), that the
        // chunks each block reads are readable and that its 64 output bytes are writable;
        // loadu/storeu take any alignment.
        unsafe {
            let ym = _mm256_set1_epi32(k.y_mul);
            // ym * (Y - yo) + half = ym * Y + (half - ym * yo): one multiply and one add.
            let bias = _mm256_set1_epi32((1 << 15) - k.y_mul * k.y_off);
            let co = _mm256_set1_epi32(k.c_off);
            let (rv, gu, gv, bu) = (_mm256_set1_epi32(k.r_v), _mm256_set1_epi32(k.g_u), _mm256_set1_epi32(k.g_v), _mm256_set1_epi32(k.b_u));
            let (zero, max) = (_mm256_setzero_si256(), _mm256_set1_epi32(k.max));
            let alpha = _mm256_set1_epi32(self.alpha as i32);
            let [sr, sg, sb, _] = self.shifts.map(|s| _mm_cvtsi32_si128(s as i32));
            // 8-bit packings: saturating packs clamp (below 0 at the 32 -> 16 bit step, above
            // 255 at the 16 -> 8 bit one; the unclamped values are under 2^15) and leave
            // each 128-bit lane as R0..3 G0..3 B0..3 A0..3, which one byte shuffle puts in
            // the format's order.
            let bytes_out = k.max == 255;
            let order = self.byte_order();
            let (order, opaque) = (_mm256_setr_m128i(order, order), _mm256_set1_epi32(255));
            // Chroma sample i serves pixels 2i and 2i + 1.
            let dups = [_mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)];
            let (low8, low16) = (_mm256_set1_epi32(0xff), _mm256_set1_epi32(0xffff));
            for i in 0..blocks {
                let (ys, u, v) = if self.ten_bit {
                    // P010: the top 10 bits of each little-endian word; 8 pixels a chunk.
                    let y0 = _mm256_srli_epi32::<6>(_mm256_cvtepu16_epi32(_mm_loadu_si128(yat(2 * i).cast())));
                    let y1 = _mm256_srli_epi32::<6>(_mm256_cvtepu16_epi32(_mm_loadu_si128(yat(2 * i + 1).cast())));
                    let uv = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(_mm_loadu_si128(cat(2 * i).cast())), _mm_loadu_si128(cat(2 * i + 1).cast()));
                    ([y0, y1], _mm256_srli_epi32::<6>(_mm256_and_si256(uv, low16)), _mm256_srli_epi32::<22>(uv))
                } else {
                    let (yp, cp) = (yat(i), cat(i));
                    let y0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(yp.cast()));
                    let y1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(yp.add(8).cast()));
                    let uv = _mm256_cvtepu16_epi32(_mm_loadu_si128(cp.cast()));
                    ([y0, y1], _mm256_and_si256(uv, low8), _mm256_srli_epi32::<8>(uv))
                };
                let (u, v) = (_mm256_sub_epi32(u, co), _mm256_sub_epi32(v, co));
                let cr = _mm256_mullo_epi32(v, rv);
                let cg = _mm256_add_epi32(_mm256_mullo_epi32(u, gu), _mm256_mullo_epi32(v, gv));
                let cb = _mm256_mullo_epi32(u, bu);
                for half in 0..2 {
                    let l = _mm256_add_epi32(_mm256_mullo_epi32(ys[half], ym), bias);
                    let r = channel!(l, cr, dups[half]);
                    let g = channel!(l, cg, dups[half]);
                    let b = channel!(l, cb, dups[half]);
                    let word = if bytes_out {
                        let rgba = _mm256_packus_epi16(_mm256_packus_epi32(r, g), _mm256_packus_epi32(b, opaque));
                        _mm256_shuffle_epi8(rgba, order)
                    } else {
                        macro_rules! clamp {
                            ($x:expr) => {
                                _mm256_min_epi32(_mm256_max_epi32($x, zero), max)
                            };
                        }
                        let rg = _mm256_or_si256(_mm256_sll_epi32(clamp!(r), sr), _mm256_sll_epi32(clamp!(g), sg));
                        _mm256_or_si256(rg, _mm256_or_si256(_mm256_sll_epi32(clamp!(b), sb), alpha))
                    };
                    _mm256_storeu_si256(out.add(64 * i + 32 * half).cast(), word);
                }
            }
        }
    }
}

/// The AVX2 loop of RGB -> NV12, in the reference's arithmetic ([`RgbToYuv::luma`],
/// [`RgbToYuv::chroma`]): sixteen pixels of two rows at a time, their sixteen luma samples
/// each and their eight chroma pairs. Made only by [`RgbKernel::detect`].
#[derive(Debug, Clone, Copy)]
pub(super) struct RgbKernel {
    k: RgbToYuv,
    /// Bit positions of R, G, B in the little-endian pixel word.
    shifts: [u32; 3],
}

impl RgbKernel {
    /// A kernel for `k` and the 8-bit packing `pack`; `None` without AVX2.
    pub(super) fn detect(k: RgbToYuv, pack: RgbPacking) -> Option<RgbKernel> {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            let [r, g, b, _] = pack.shifts();
            return Some(RgbKernel { k, shifts: [r, g, b] });
        }
        let _ = (k, pack);
        None
    }

    /// The leading pixels of a row pair: RGB rows `r0`, `r1` (the same row twice for the
    /// last row of an odd height) to luma rows `y0`, `y1` and the chroma row `uv`. Returns
    /// the pixels done (a multiple of 16, at most `width`); the rest are the caller's.
    pub(super) fn rows(&self, [r0, r1]: [&[u8]; 2], [y0, y1]: [&mut [u8]; 2], uv: &mut [u8], width: usize) -> usize {
        let blocks = width.min(r0.len() / 4).min(r1.len() / 4).min(y0.len()).min(y1.len()).min(uv.len()) / 16;
        if blocks == 0 {
            return 0;
        }
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: a kernel exists only where `detect` found AVX2; each block reads 64
            // bytes of each RGB row and writes 16 bytes of each luma row and of `uv`, all
            // inside the slices by the minimum above.
            unsafe { self.blocks_avx2([r0.as_ptr(), r1.as_ptr()], [y0.as_mut_ptr(), y1.as_mut_ptr()], uv.as_mut_ptr(), blocks) };
            16 * blocks
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (r0, r1, y0, y1, uv);
            0
        }
    }

    /// # Safety
    /// The CPU has AVX2; `r` are readable for `64 * blocks` bytes, `y` and `uv` writable
    /// for `16 * blocks`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn blocks_avx2(&self, r: [*const u8; 2], y: [*mut u8; 2], uv: *mut u8, blocks: usize) {
        use std::arch::x86_64::*;
        let k = &self.k;
        // SAFETY: the caller guarantees AVX2 and the bounds of every load and store below;
        // loadu/storeu take any alignment.
        unsafe {
            let [sr, sg, sb] = self.shifts.map(|s| _mm_cvtsi32_si128(s as i32));
            let byte = _mm256_set1_epi32(0xff);
            let (yr, yg, yb) = (_mm256_set1_epi32(k.y_r), _mm256_set1_epi32(k.y_g), _mm256_set1_epi32(k.y_b));
            let (ur, ug, ub) = (_mm256_set1_epi32(k.u_r), _mm256_set1_epi32(k.u_g), _mm256_set1_epi32(k.u_b));
            let (vr, vg, vb) = (_mm256_set1_epi32(k.v_r), _mm256_set1_epi32(k.v_g), _mm256_set1_epi32(k.v_b));
            let ybias = _mm256_set1_epi32((k.y_off << 16) + (1 << 15));
            let cbias = _mm256_set1_epi32((k.c_off << 18) + (1 << 17));
            let (zero, max) = (_mm256_setzero_si256(), _mm256_set1_epi32(255));
            // hadd leaves the chroma samples as 0 1 4 5 | 2 3 6 7; this puts them in order.
            let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
            for i in 0..blocks {
                // [row][half]: R, G, B of eight pixels.
                let mut rgb = [[[zero; 3]; 2]; 2];
                for row in 0..2 {
                    for (half, channels) in rgb[row].iter_mut().enumerate() {
                        let px = _mm256_loadu_si256(r[row].add(64 * i + 32 * half).cast());
                        *channels = [sr, sg, sb].map(|s| _mm256_and_si256(_mm256_srl_epi32(px, s), byte));
                    }
                    let luma = rgb[row].map(|[cr, cg, cb]| {
                        let sum = _mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(cr, yr), _mm256_mullo_epi32(cg, yg)), _mm256_mullo_epi32(cb, yb));
                        _mm256_srai_epi32::<16>(_mm256_add_epi32(sum, ybias))
                    });
                    // Saturating packs clamp to 0..=255; the permutes undo their lane order.
                    let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(luma[0], luma[1]));
                    let bytes = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packus_epi16(words, words));
                    _mm_storeu_si128(y[row].add(16 * i).cast(), _mm256_castsi256_si128(bytes));
                }
                // Sums of each 2x2 block, per component: the two rows, then pixel pairs.
                let sums: [__m256i; 3] = std::array::from_fn(|c| {
                    let h0 = _mm256_add_epi32(rgb[0][0][c], rgb[1][0][c]);
                    let h1 = _mm256_add_epi32(rgb[0][1][c], rgb[1][1][c]);
                    _mm256_hadd_epi32(h0, h1)
                });
                let chroma = |kr: __m256i, kg: __m256i, kb: __m256i| {
                    let t = _mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(sums[0], kr), _mm256_mullo_epi32(sums[1], kg)), _mm256_mullo_epi32(sums[2], kb));
                    _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32::<18>(_mm256_add_epi32(t, cbias)), zero), max)
                };
                let (u, v) = (chroma(ur, ug, ub), chroma(vr, vg, vb));
                let pairs = _mm256_permutevar8x32_epi32(_mm256_or_si256(u, _mm256_slli_epi32::<8>(v)), order);
                let bytes = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packus_epi32(pairs, pairs));
                _mm_storeu_si128(uv.add(16 * i).cast(), _mm256_castsi256_si128(bytes));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::colour::{ColourMatrix, ColourRange, RgbPacking, RGB10_FORMATS, RGB8_FORMATS};
    use crate::tiling::test_pattern as pattern;

    /// Every matrix, range, depth and packing: the vector rows equal the scalar formula
    /// pixel by pixel, and the pixels past the last whole sixteen are left to the caller.
    #[test]
    fn the_vector_row_is_the_scalar_formula() {
        let width = 16 * 9 + 5;
        for ten_bit in [false, true] {
            let bytes = if ten_bit { 2 } else { 1 };
            let y = pattern(width * bytes, 3);
            let c = pattern(width.div_ceil(2) * 2 * bytes, 11);
            let sample = |s: &[u8], i: usize| if ten_bit { (u16::from_le_bytes([s[2 * i], s[2 * i + 1]]) >> 6) as i32 } else { s[i] as i32 };
            for to in RGB8_FORMATS.into_iter().chain(RGB10_FORMATS) {
                let pack = RgbPacking::of(to).expect("packing");
                for m in ColourMatrix::ALL {
                    for r in [ColourRange::Limited, ColourRange::Full] {
                        let k = YuvToRgb::new(m, r, if ten_bit { 10 } else { 8 }, pack.bits());
                        let Some(kernel) = Kernel::detect(k, pack, ten_bit) else {
                            eprintln!("no AVX2 on this CPU: the scalar path is the only one");
                            return;
                        };
                        let mut out = vec![0x5au8; width * 4];
                        let done = kernel.row(&y, &c, &mut out, width);
                        assert_eq!(done, width / 16 * 16);
                        for x in 0..width {
                            let px = &out[x * 4..x * 4 + 4];
                            if x >= done {
                                assert_eq!(px, [0x5a; 4], "pixel {x} is the caller's");
                                continue;
                            }
                            let rgb = k.convert(sample(&y, x), sample(&c, x / 2 * 2), sample(&c, x / 2 * 2 + 1));
                            assert_eq!(px, pack.pack(rgb), "{to} {m:?} {r:?} ten_bit {ten_bit} pixel {x}");
                        }
                    }
                }
            }
        }
    }

    /// Rows shorter than sixteen pixels, or slices shorter than the width says, are left
    /// to the caller rather than read past.
    #[test]
    fn short_rows_and_slices_are_the_callers() {
        let k = YuvToRgb::new(ColourMatrix::Bt709, ColourRange::Limited, 8, 8);
        let Some(kernel) = Kernel::detect(k, RgbPacking::of(crate::Fourcc::XRGB8888).expect("XR24"), false) else { return };
        let mut out = vec![0u8; 64 * 4];
        assert_eq!(kernel.row(&[0; 15], &[128; 16], &mut out, 64), 0);
        assert_eq!(kernel.row(&[0; 64], &[128; 40], &mut out, 64), 32);
        assert_eq!(kernel.row(&[0; 64], &[128; 64], &mut out[..100], 64), 16);
    }
}
