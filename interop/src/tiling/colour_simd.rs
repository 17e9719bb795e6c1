//! The AVX2 inner loops of colour conversion, YUV -> RGB ([`Kernel`]) and RGB -> NV12
//! ([`RgbKernel`]), sixteen pixels at a time, in exactly the reference's arithmetic
//! ([`super::colour`]), so their bytes equal the scalar path's and the GPU's and the ±1
//! contract is the reference's.
//!
//! YUV -> RGB is the reference's 16-bit arithmetic: one register holds sixteen pixels'
//! values, the luma term is one `pmulhuw`, each chroma term one `pmulhrsw`, and the sums
//! saturate (`paddsw`) where the reference's `sat16` does. Lane 0 of every register holds
//! pixels 0-3 and 8-11 of the block and lane 1 pixels 4-7 and 12-15, the order the loads'
//! byte shuffles produce for free, so that packing the channels into pixels never crosses
//! lanes. RGB -> NV12 is the reference's Q15 arithmetic: each pixel's bytes widened to
//! words, its sums two `pmaddwd`s and a `phaddd`, a 2x2 block's sums added in words.
//!
//! Used through [`Kernel::detect`] and [`RgbKernel::detect`]: `None` where the CPU has no
//! AVX2 (or is not x86_64), and the caller's scalar loop does the row.
//!
//! The bounds are this file's alone: each safe entry point ([`Kernel::rows`],
//! [`Kernel::tile`], [`Kernel::narrow`], [`Kernel::groups`], [`RgbKernel::rows`]) checks
//! that every byte its loop touches lies in its slices, with [`reach`], right before its
//! `unsafe` block, and does less (returning how much) where they do not; each loop (an
//! `unsafe fn`, for AVX2) is given the bytes after each pointer and debug-asserts the same
//! reach at its top. A caller passes slices and nothing else; it need establish nothing.

use super::colour::{RgbPacking, RgbToYuv, YuvToRgb};

/// Bytes from a pointer: where they start, and how many may be read from there. What the
/// vector loops take rather than slices where two of their rows lie in one slice (two
/// `&mut` to the same output would alias), so that each loop can check its reach itself.
type Bytes = (*const u8, usize);
/// As [`Bytes`], to write.
type BytesMut = (*mut u8, usize);

/// Where the bytes of the last of `rows` rows, `stride` apart, end, each row read as
/// `blocks` blocks of `len` bytes, `block` apart, from its start: the end of every other
/// block of every row is at or before it. `None` for no rows or no blocks, or past `usize`.
fn reach(rows: usize, stride: usize, (blocks, block): (usize, usize), len: usize) -> Option<usize> {
    let last = rows.checked_sub(1)?.checked_mul(stride)?;
    last.checked_add(blocks.checked_sub(1)?.checked_mul(block)?)?.checked_add(len)
}

/// Whether `need` bytes (a [`reach`], perhaps from an offset) fit in `have`.
fn fits(have: usize, need: Option<usize>) -> bool {
    need.is_some_and(|n| n <= have)
}

/// What one conversion's rows share: the coefficients, the packing and the sample depth.
/// Made only by [`Kernel::detect`], which checked for AVX2.
#[derive(Debug, Clone, Copy)]
pub(super) struct Kernel {
    k: YuvToRgb,
    /// [`RgbPacking::shader_word`]: the byte of each channel, or `u32::MAX` for 2:10:10:10.
    order: u32,
    ten_bit: bool,
    /// Write the RGB rows with non-temporal stores ([`Kernel::streaming`]).
    stream: bool,
}

/// Where [`Kernel::tile`]'s rows and blocks lie, in bytes from the start of each slice.
#[derive(Debug, Clone, Copy)]
pub(super) struct Steps {
    /// From one luma row to the next.
    pub luma_row: usize,
    /// From one chroma row (a row pair's) to the next.
    pub chroma_row: usize,
    /// From one output row to the next.
    pub out_row: usize,
    /// From one sixteen-pixel block of a luma row to the next: its samples' bytes (16, or 32
    /// for 10-bit) in a row, a tile's bytes where each block is a tile of its own.
    pub luma_block: usize,
    /// As `luma_block`, in a chroma row.
    pub chroma_block: usize,
}

impl Steps {
    /// Rows `luma_row`, `chroma_row` and `out_row` bytes apart, their blocks back to back.
    pub(super) fn rows(ten_bit: bool, (luma_row, chroma_row, out_row): (usize, usize, usize)) -> Steps {
        let block = if ten_bit { 32 } else { 16 };
        Steps { luma_row, chroma_row, out_row, luma_block: block, chroma_block: block }
    }
}

/// Where [`Kernel::narrow`]'s tiles lie. A block, sixteen pixels of a group of eight rows,
/// is two pieces of 64 luma bytes and two of 32 chroma bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Narrow {
    /// nv12-4l4: four tiles of each of the group's two luma bands, `band` bytes apart, and
    /// two tiles each of its chroma band, back to back; each block 64 bytes on.
    Four { band: usize },
    /// nv12-8l128: a line (eight rows) of each of two tiles, `tile` bytes apart, and half a
    /// line (four chroma rows) of each of their chroma tiles; each block two tiles on.
    Tall { tile: usize },
}

impl Narrow {
    /// From a block's first piece to its second (luma, chroma), and from one block to the
    /// next.
    fn steps(self) -> ([usize; 2], usize) {
        match self {
            Narrow::Four { band } => ([band, 32], 64),
            Narrow::Tall { tile } => ([tile, tile], tile.saturating_mul(2)),
        }
    }
}

/// How many blocks ahead nv12-8l128's [`Kernel::narrow`] fetches: 16 blocks (32 KiB of
/// luma) measured alike to 8 and 32, and above 2 and 4.
const NARROW_AHEAD: usize = 16;

/// Bytes for [`Kernel::tile`] to bring into cache while it converts: the fused path's next
/// strip of tiles, which the strip's detile would otherwise read from memory while no RGB
/// row is being written. The loop fetches them a few cache lines per row pair, spread over
/// the call: fetched all at once between calls, they queued behind one another and the loop
/// with them.
///
/// Used now only by the strips that [`Kernel::narrow`] leaves (the last rows and pixels of
/// frames that are not whole groups and blocks, and 10-bit samples). When the strips took
/// whole frames, the fetched bytes themselves were what the fused nv12-8l128 conversion paid
/// for (4K -> XR24 on one thread, 2026-11-26, harness): the loop on strips already in L1 ran at
/// 22.7-26.5 GB/s alone and 14.6-17.6 with these fetches, their detile then adding little;
/// fetching only the luma or only the chroma, 20-21. The hint (T0, T1, T2, NTA) changed
/// nothing; ordinary loads instead, or fetching every second, fourth or eighth line for the
/// CPU's own prefetchers to fill in, measured no better than no fetch; the lines listed
/// before the loop rather than walked inside it measured alike.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ahead<'a> {
    runs: [Runs<'a>; 4],
}

/// `count` runs of `len` bytes, `step` apart, at the start of `bytes`.
#[derive(Debug, Clone, Copy)]
struct Runs<'a> {
    bytes: &'a [u8],
    len: usize,
    step: usize,
    count: usize,
}

impl Ahead<'static> {
    /// Nothing to fetch.
    pub(super) const NONE: Self = Ahead { runs: [Runs { bytes: &[], len: 0, step: 0, count: 0 }; 4] };
}

impl<'a> Ahead<'a> {
    /// Adds `count` runs of `len` bytes, `step` apart, from byte `first` of `plane`; where
    /// four are held already, or the runs leave `plane`, they are not fetched (a hint
    /// left out costs speed, never bytes).
    pub(super) fn add(&mut self, plane: &'a [u8], first: usize, (len, step, count): (usize, usize, usize)) {
        let end = count.checked_sub(1).and_then(|c| c.checked_mul(step)).and_then(|v| v.checked_add(first)).and_then(|v| v.checked_add(len));
        let (Some(end), Some(slot)) = (end, self.runs.iter_mut().find(|r| r.count == 0)) else { return };
        if len > 0 && end <= plane.len() {
            // Runs back to back are one run, so that a line is fetched once.
            let (len, count) = if len == step { (end - first, 1) } else { (len, count) };
            *slot = Runs { bytes: &plane[first..end], len, step, count };
        }
    }

    /// Whether there is nothing to fetch.
    fn is_empty(&self) -> bool {
        self.runs.iter().all(|r| r.count == 0)
    }

    /// Each line [`Kernel::tile`] would fetch, in order.
    #[cfg(test)]
    pub(super) fn lines(&self) -> Vec<*const u8> {
        let mut f = Fetching { ahead: self, r: 0, j: 0, o: 0 };
        std::iter::from_fn(|| f.next()).collect()
    }

    /// The cache lines that hold the runs' bytes (a line that two runs share, twice).
    fn line_count(&self) -> usize {
        let lines = |r: &Runs| (0..r.count).map(|j| (r.bytes.as_ptr() as usize + j * r.step) % 64 + r.len).map(|b| b.div_ceil(64)).sum::<usize>();
        self.runs.iter().map(lines).sum()
    }
}

/// Where [`Ahead`]'s fetches have got to: run `r`, its `j`th repeat, byte `o` from the
/// line that holds the repeat's first byte.
struct Fetching<'a> {
    ahead: &'a Ahead<'a>,
    r: usize,
    j: usize,
    o: usize,
}

impl Fetching<'_> {
    /// The next cache line to fetch (its first byte, which may lie before the run's).
    #[inline(always)]
    fn next(&mut self) -> Option<*const u8> {
        loop {
            let run = self.ahead.runs.get(self.r)?;
            if self.j >= run.count {
                (self.r, self.j, self.o) = (self.r + 1, 0, 0);
                continue;
            }
            // Wrapping: the line's start may be before the slice; only its address is
            // wanted, for a prefetch, which reads nothing that a program sees.
            let at = run.bytes.as_ptr().wrapping_add(self.j * run.step);
            let line = at.wrapping_sub(at as usize % 64).wrapping_add(self.o);
            if line >= at.wrapping_add(run.len) {
                (self.j, self.o) = (self.j + 1, 0);
                continue;
            }
            self.o += 64;
            return Some(line);
        }
    }
}

/// Pixel slot j of a register (16-bit slots; lane 0 holds 0..8) holds this pixel of the
/// block.
const PIXELS: [usize; 16] = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15];

/// The byte shuffle that puts, for 8-bit samples loaded into both lanes, luma byte i
/// (`chroma` false) or the U (`plus` 0) or V (`plus` 1) byte of pixel i in the high byte
/// of pixel i's slot, and zeroes the low byte.
const fn high(chroma: bool, plus: usize) -> [u8; 32] {
    let mut m = [0x80u8; 32];
    let mut slot = 0;
    while slot < 16 {
        let px = PIXELS[slot];
        m[2 * slot + 1] = ((if chroma { px / 2 * 2 } else { px }) + plus) as u8;
        slot += 1;
    }
    m
}

/// For 10-bit samples after the loop's permute, which leaves chroma pairs 0, 1, 4, 5 in
/// lane 0 and 2, 3, 6, 7 in lane 1 (4 bytes each): slot j's U word (`plus` 0) or V word
/// (`plus` 2) is that of the lane's pair (j % 8) / 2.
const fn ten(plus: usize) -> [u8; 32] {
    let mut m = [0u8; 32];
    let mut j = 0;
    while j < 16 {
        let pair = (j % 8) / 2;
        m[2 * j] = (4 * pair + plus) as u8;
        m[2 * j + 1] = (4 * pair + plus + 1) as u8;
        j += 1;
    }
    m
}

const LUMA_HIGH: [u8; 32] = high(false, 0);
const U_HIGH: [u8; 32] = high(true, 0);
const V_HIGH: [u8; 32] = high(true, 1);
const TEN_U: [u8; 32] = ten(0);
const TEN_V: [u8; 32] = ten(2);

/// For [`Kernel::narrow_avx2`], whose loads and unpacks leave two rows of a block in a
/// register: row `h` (0 or 1) in dwords `2h` and `2h + 1` of each lane, pixels 0-3 and 8-11
/// in lane 0 and 4-7 and 12-15 in lane 1 (of chroma, those pixels' pairs). The byte shuffle
/// that puts the luma byte (`chroma` false) or the U (`plus` 0) or V (`plus` 1) byte of each
/// slot's pixel ([`PIXELS`]) of row `h` in the high byte of its slot, and zeroes the low
/// byte.
const fn two_rows(chroma: bool, h: usize, plus: usize) -> [u8; 32] {
    let mut m = [0x80u8; 32];
    let mut slot = 0;
    while slot < 16 {
        // The slot's pixel in its lane's two tiles: 0-3 in the first, 4-7 in the second.
        let at = slot % 8;
        m[2 * slot + 1] = (8 * h + if chroma { at / 2 * 2 + plus } else { at }) as u8;
        slot += 1;
    }
    m
}

const NARROW_LUMA: [[u8; 32]; 2] = [two_rows(false, 0, 0), two_rows(false, 1, 0)];
const NARROW_U: [[u8; 32]; 2] = [two_rows(true, 0, 0), two_rows(true, 1, 0)];
const NARROW_V: [[u8; 32]; 2] = [two_rows(true, 0, 1), two_rows(true, 1, 1)];

/// How [`Kernel`]'s loop stores a row: non-temporal stores of whole registers to a row
/// aligned to 32 bytes; to one aligned to 16 only, the same stores shifted by 16 bytes
/// (each made of the halves of two registers, the row's first and last 16 bytes stored
/// alone); or ordinary stores.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stream {
    Wide,
    Shifted,
    No,
}

/// The channel (0 R, 1 G, 2 B, 3 alpha) that a [`RgbPacking::shader_word`] puts at byte
/// `byte` of the pixel.
const fn channel_at(order: u32, byte: u32) -> usize {
    let mut c = 0;
    while c < 3 && (order >> (2 * c)) & 3 != byte {
        c += 1;
    }
    c
}

/// [`RgbPacking::shader_word`] of byte indices R, G, B, A.
const fn order(r: u32, g: u32, b: u32, a: u32) -> u32 {
    r | g << 2 | b << 4 | a << 6
}

/// `$call` with the const `$O` bound to `$order`, where it is one of the byte orders the
/// vector loops are built for (those of `RGB8_FORMATS`, and `u32::MAX`: 2:10:10:10), else
/// `$none`: every loop's dispatch reads this one list.
#[cfg(target_arch = "x86_64")]
macro_rules! by_order {
    ($order:expr, $O:ident => $call:expr, else $none:expr) => {
        by_order!(@ $order, $O, $call, $none; order(2, 1, 0, 3), order(0, 1, 2, 3), order(3, 2, 1, 0), order(1, 2, 3, 0), u32::MAX)
    };
    (@ $order:expr, $O:ident, $call:expr, $none:expr; $($o:expr),*) => {
        match $order {
            $(o if o == $o => {
                const $O: u32 = $o;
                $call
            })*
            _ => $none,
        }
    };
}

/// The arithmetic that every YUV -> RGB loop of [`Kernel`] shares: the coefficients in
/// registers, a block's chroma terms, and its sixteen pixels.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Arith {
    ym: std::arch::x86_64::__m256i,
    bias: std::arch::x86_64::__m256i,
    /// The chroma coefficients: R from V, G from U and V, B from U.
    rv: std::arch::x86_64::__m256i,
    gu: std::arch::x86_64::__m256i,
    gv: std::arch::x86_64::__m256i,
    bu: std::arch::x86_64::__m256i,
    max: std::arch::x86_64::__m256i,
}

#[cfg(target_arch = "x86_64")]
impl Arith {
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    // The intrinsics are unsafe to call before Rust 1.86 (`rust-version` is older).
    #[allow(unused_unsafe)]
    unsafe fn new(k: &YuvToRgb) -> Arith {
        use std::arch::x86_64::_mm256_set1_epi16;
        // SAFETY: the caller guarantees AVX2, the intrinsics' one requirement.
        let set = |v: i32| unsafe { _mm256_set1_epi16(v as i16) };
        Arith { ym: set(k.y_mul), bias: set(k.bias), rv: set(k.r_v), gu: set(k.g_u), gv: set(k.g_v), bu: set(k.b_u), max: set(k.max) }
    }

    /// The R, G and B terms of each pixel's chroma (`u`, `v`: less the offset, in the top
    /// bits of signed words), which a row pair shares.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    #[allow(unused_unsafe)]
    unsafe fn terms(&self, u: std::arch::x86_64::__m256i, v: std::arch::x86_64::__m256i) -> [std::arch::x86_64::__m256i; 3] {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees AVX2, the intrinsics' one requirement.
        unsafe {
            let (cr, cb) = (_mm256_mulhrs_epi16(v, self.rv), _mm256_mulhrs_epi16(u, self.bu));
            [cr, _mm256_add_epi16(_mm256_mulhrs_epi16(u, self.gu), _mm256_mulhrs_epi16(v, self.gv)), cb]
        }
    }

    /// Sixteen pixels in byte order `ORDER` ([`Kernel::blocks_avx2`]'s), from each pixel's
    /// luma in the top bits of its word (`yl`, slots in [`PIXELS`] order) and its chroma's
    /// terms: pixels 0-7 and 8-15, a register each.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    #[allow(unused_unsafe)]
    unsafe fn pixels<const ORDER: u32>(&self, yl: std::arch::x86_64::__m256i, [cr, cg, cb]: [std::arch::x86_64::__m256i; 3]) -> [std::arch::x86_64::__m256i; 2] {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees AVX2, the intrinsics' one requirement; the one
        // `asm!` reads and writes registers only.
        unsafe {
            let bytes = ORDER != u32::MAX;
            // `vpmulhuw` written out: given the intrinsic, LLVM (Rust 1.95) rewrites this one
            // multiply into seven instructions on 32-bit lanes, which costs the loop a fifth of
            // its speed.
            let luma: __m256i;
            std::arch::asm!("vpmulhuw {l}, {y}, {m}", l = lateout(ymm_reg) luma, y = in(ymm_reg) yl, m = in(ymm_reg) self.ym, options(pure, nomem, nostack, preserves_flags));
            let l = _mm256_add_epi16(luma, self.bias);
            // The fraction bits: 6 for 8-bit output, 4 for 10-bit (`YuvToRgb::shift`).
            let channel = |t: __m256i| {
                let sum = _mm256_adds_epi16(l, t);
                if bytes { _mm256_srai_epi16::<6>(sum) } else { _mm256_srai_epi16::<4>(sum) }
            };
            let (r, g, b) = (channel(cr), channel(cg), channel(cb));
            let (first, second) = if bytes {
                // Saturating packs clamp to 0..=255. With bytes 0 and 2 of each pixel in one
                // pack and 1 and 3 in the other, the unpacks interleave them into pixels: lane
                // 0 into pixels 0-3 and 8-11, lane 1 into 4-7 and 12-15.
                let channels = [r, g, b, _mm256_set1_epi16(255)];
                let at = |byte| channels[channel_at(ORDER, byte)];
                let (even, odd) = (_mm256_packus_epi16(at(0), at(2)), _mm256_packus_epi16(at(1), at(3)));
                let (lo, hi) = (_mm256_unpacklo_epi8(even, odd), _mm256_unpackhi_epi8(even, odd));
                (_mm256_unpacklo_epi16(lo, hi), _mm256_unpackhi_epi16(lo, hi))
            } else {
                // 2:10:10:10 (the one 10-bit packing): the low and high 16 bits of each pixel
                // word, interleaved.
                let clamp = |x: __m256i| _mm256_min_epi16(_mm256_max_epi16(x, _mm256_setzero_si256()), self.max);
                let (r, g, b) = (clamp(r), clamp(g), clamp(b));
                let low = _mm256_or_si256(b, _mm256_slli_epi16::<10>(g));
                let high = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16::<6>(g), _mm256_slli_epi16::<4>(r)), _mm256_set1_epi16((3u16 << 14) as i16));
                (_mm256_unpacklo_epi16(low, high), _mm256_unpackhi_epi16(low, high))
            };
            [first, second]
        }
    }

    /// Eight rows of a block into `out` (its first byte in row 0; rows `stride` apart),
    /// non-temporal where `wide`: chroma row `p`'s U and V ([`Arith::terms`]'s `u`, `v`)
    /// from `chroma(p)`, luma row `l` from `luma(l)` (as [`Arith::pixels`] takes it).
    ///
    /// # Safety
    /// The CPU has AVX2; the 64 bytes at `out` of each of the eight rows are writable, and
    /// 32-byte aligned where `wide`.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn eight_rows<const ORDER: u32>(&self, out: *mut u8, (stride, wide): (usize, bool), chroma: impl Fn(usize) -> [std::arch::x86_64::__m256i; 2], luma: impl Fn(usize) -> std::arch::x86_64::__m256i) {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees AVX2 and that the stores land inside `out`'s rows,
        // aligned where they are non-temporal.
        unsafe {
            for p in 0..4 {
                let [u, v] = chroma(p);
                let terms = self.terms(u, v);
                for l in [2 * p, 2 * p + 1] {
                    let [first, second] = self.pixels::<ORDER>(luma(l), terms);
                    let o = out.add(l * stride);
                    if wide {
                        _mm256_stream_si256(o.cast(), first);
                        _mm256_stream_si256(o.add(32).cast(), second);
                    } else {
                        _mm256_storeu_si256(o.cast(), first);
                        _mm256_storeu_si256(o.add(32).cast(), second);
                    }
                }
            }
        }
    }
}

impl Kernel {
    /// A kernel for `k` and the packing `pack`, for 8-bit (NV12) or 10-bit (P010,
    /// `ten_bit`) samples; `None` without AVX2.
    pub(super) fn detect(k: YuvToRgb, pack: RgbPacking, ten_bit: bool) -> Option<Kernel> {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            return Some(Kernel { k, order: pack.shader_word(), ten_bit, stream: false });
        }
        let _ = (k, pack, ten_bit);
        None
    }

    /// This kernel, writing its rows around the caches (non-temporal stores, where the
    /// row is 16-byte aligned) when `stream`: for frames far larger than the caches, whose
    /// RGB a GPU, display or encoder reads later. Ordinary stores first read every line
    /// they fill; these do not, and they leave the caches to the frame's input (a tiled
    /// frame's detiled bands, above all). The caller's thread ends its rows with a fence.
    pub(super) fn streaming(self, stream: bool) -> Kernel {
        Kernel { stream, ..self }
    }

    /// Whether rows from `out`, `stride` bytes apart, take [`Kernel::streaming`]'s
    /// non-temporal 32-byte stores: where streaming is on and every row starts 32-byte
    /// aligned.
    #[cfg(target_arch = "x86_64")]
    fn wide(&self, out: *mut u8, stride: usize) -> bool {
        self.stream && out as usize % 32 == 0 && stride % 32 == 0
    }

    /// Orders this thread's non-temporal stores before whatever it does next, where
    /// [`Kernel::streaming`] is on.
    pub(super) fn fence(&self) {
        super::parallel::fence_streamed(self.stream);
    }

    /// Converts the leading pixels of a row pair, sixteen at a time: luma rows `y`
    /// sharing the chroma row `c` (interleaved U, V), 4-byte pixels into `out`; or of one
    /// row, the second `None` (its luma row is then not read).
    /// Returns how many pixels of each row it wrote (a multiple of 16, at most `width`),
    /// the rest being the caller's.
    pub(super) fn rows(&self, y: [&[u8]; 2], c: &[u8], out: (&mut [u8], Option<&mut [u8]>), width: usize) -> usize {
        let bytes = if self.ten_bit { 2 } else { 1 };
        let (out0, out1) = out;
        // Without a second row, the loop touches only the first; the bounds below are the
        // first's twice.
        let (y1, second) = match &out1 {
            Some(o) => (y[1], o.len()),
            None => (y[0], out0.len()),
        };
        // Sixteen pixels read 16 luma and 16 chroma samples (8 pairs) and write 64 bytes.
        let blocks = width.min(y[0].len().min(y1.len()) / bytes).min(c.len() / bytes).min(out0.len().min(second) / 4) / 16;
        if blocks == 0 {
            return 0;
        }
        let lens = [out0.len(), second];
        let (one, o0) = (out1.is_none(), out0.as_mut_ptr());
        let o1 = out1.map_or(o0, |o| o.as_mut_ptr());
        let (ys, outs) = ([(y[0].as_ptr(), y[0].len()), (y1.as_ptr(), y1.len())], [(o0, lens[0]), (o1, lens[1])]);
        // SAFETY: the blocks read `16 * bytes * blocks` bytes of each luma row and of `c`
        // and write `64 * blocks` of each output row, all inside the slices by the minimum
        // above (with one row, the loop reads and writes only the first); one pair, so the
        // steps are never taken.
        unsafe { self.dispatch((ys, (c.as_ptr(), c.len()), outs), (blocks, [16 * bytes; 2]), (1, [0; 3]), one, &Ahead::NONE) }
    }

    /// Converts the leading pixels of `pairs` row pairs of a rectangle, sixteen at a time:
    /// luma rows from the start of `y`, chroma rows (one per pair) from the start of `c`,
    /// 4-byte pixels into rows of `out`, where `steps` says. One call for a whole tile (or a
    /// run of tiles sixteen pixels wide, a block each), so that the loop keeps its constants
    /// in registers from one row to the next: the fused path's tiles, converted where they
    /// lie.
    /// Meanwhile it brings `ahead` into cache.
    /// Returns how many pixels of each row it wrote (a multiple of 16, at most `width`;
    /// 0 where a slice is too short for all the rows or the blocks would overlap), the rest
    /// being the caller's.
    pub(super) fn tile(&self, y: &[u8], c: &[u8], out: &mut [u8], steps: Steps, (width, pairs): (usize, usize), ahead: &Ahead) -> usize {
        let bytes = if self.ten_bit { 2 } else { 1 };
        let blocks = width / 16;
        let Steps { luma_row: ys, chroma_row: cs, out_row: os, luma_block, chroma_block } = steps;
        let sample = 16 * bytes;
        if blocks == 0 || luma_block < sample || chroma_block < sample {
            return 0;
        }
        if !fits(y.len(), reach(2 * pairs, ys, (blocks, luma_block), sample))
            || !fits(c.len(), reach(pairs, cs, (blocks, chroma_block), sample))
            || !fits(out.len(), reach(2 * pairs, os, (blocks, 64), 64))
        {
            return 0;
        }
        let (y0, o0) = (y.as_ptr(), out.as_mut_ptr());
        // SAFETY: block i of pair p reads `sample` bytes at `2p * ys + i * luma_block` and
        // `(2p + 1) * ys + i * luma_block` of `y` and at `p * cs + i * chroma_block` of `c`,
        // and writes 64 bytes at `2p * os + 64i` and `(2p + 1) * os + 64i` of `out`: the
        // last pair's last block's end inside each slice by the checks above, so the second
        // rows' starts (`ys`, `os` on) are inside too, with `ys` and `os` fewer bytes after
        // them.
        unsafe {
            let lumas = [(y0, y.len()), (y0.add(ys), y.len() - ys)];
            let outs = [(o0, out.len()), (o0.add(os), out.len() - os)];
            self.dispatch((lumas, (c.as_ptr(), c.len()), outs), (blocks, [luma_block, chroma_block]), (pairs, [2 * ys, cs, 2 * os]), false, ahead)
        }
    }

    /// Converts the leading pixels of a group of eight rows of tiles four or eight pixels
    /// wide (nv12-4l4, nv12-8l128) where the tiles lie, sixteen pixels at a time, with no
    /// detile: luma from the start of `y` and chroma from the start of `c`, as `at` says,
    /// and 4-byte pixels into `out`'s eight rows, `stride` bytes apart.
    /// Returns how many pixels of each row it wrote (a multiple of 16, at most `width`; 0
    /// for 10-bit samples, or where a slice is too short), the rest being the caller's.
    pub(super) fn narrow(&self, y: &[u8], c: &[u8], out: &mut [u8], stride: usize, width: usize, at: Narrow) -> usize {
        let blocks = width / 16;
        let (second, block) = at.steps();
        // Blocks no bytes apart would all be the first (and leave the fetches no step).
        if self.ten_bit || block == 0 || !Kernel::narrow_fits((y.len(), c.len(), out.len()), stride, blocks, (second, block)) {
            return 0;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (ys, cs, rows) = ((y.as_ptr(), y.len()), (c.as_ptr(), c.len()), (out.as_mut_ptr(), out.len()));
            // SAFETY: a `Kernel` exists only where `detect` found AVX2; block i reads 64
            // bytes at `i * block` and at `second[0]` on from there of `y`, 32 at `i * block`
            // and `second[1]` on of `c`, and writes bytes `64i..64i + 64` of rows 0-7 of
            // `out`: the last block's inside every slice by the checks above. `ORDER` is
            // `self.order`, by the match, and the samples are 8-bit.
            unsafe {
                by_order!(self.order, O => match at {
                    Narrow::Four { .. } => self.narrow_avx2::<O, false>(ys, cs, rows, stride, blocks, (second, block)),
                    Narrow::Tall { .. } => self.narrow_avx2::<O, true>(ys, cs, rows, stride, blocks, (second, block)),
                }, else return 0)
            };
            16 * blocks
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (y, c, out, stride);
            0
        }
    }

    /// Whether `blocks` blocks of a group of eight rows ([`Kernel::narrow`]), `block` bytes
    /// apart and each of two pieces `second` apart (64 bytes of luma, 32 of chroma), lie in
    /// `y` and `c` bytes, and their 64 bytes of each of eight rows `stride` apart in `out`
    /// (lengths `(y, c, out)`).
    fn narrow_fits((y, c, out): (usize, usize, usize), stride: usize, blocks: usize, (second, block): ([usize; 2], usize)) -> bool {
        fits(y, reach(2, second[0], (blocks, block), 64)) && fits(c, reach(2, second[1], (blocks, block), 32)) && fits(out, reach(8, stride, (blocks, 64), 64))
    }

    /// The loop of [`Kernel::narrow`] for the byte order `ORDER`, nv12-8l128 where `TALL`,
    /// else nv12-4l4. Loads and unpacks (and, for nv12-8l128, a `vpermq`) put two rows of a
    /// block in each register, in the order that [`Kernel::blocks_avx2`]'s byte shuffles
    /// produce ([`two_rows`]), so that each block converts as the linear loop's do. Measured
    /// at 4K -> XR24, fused ÷ linear taking turns (2026-11-26, harness, alternating runs),
    /// one thread / two:
    /// - nv12-4l4, its three bands read front to back: 1.07-1.11 / 0.99-1.02, against its
    ///   strips' 0.72-0.76 / 0.95-0.98. Its rows need half the linear loop's loads.
    /// - nv12-8l128, each block a line of each of two tiles (a tile apart) and half a line of
    ///   each of their chroma tiles: 0.83-0.98 / 0.96-1.07 with each block fetching the block
    ///   [`NARROW_AHEAD`] on, against its strips' 0.78-0.86 / 0.83-0.91 in the same
    ///   minutes, and 0.64-0.68 without the fetch: the CPU's own prefetcher does not follow
    ///   lines a KiB apart. Blocks of the band's 128 rows at a time, or strips of 4-8
    ///   blocks, measured 0.60-0.72.
    ///
    /// # Safety
    /// The CPU has AVX2; `ys`, `cs` and `out` are readable (`out` writable) for their
    /// lengths, which hold every block's bytes and rows 0-7 of `out` (`stride` apart) its
    /// `64 * blocks` as [`Kernel::narrow_fits`] says; `block` is not 0; `ORDER` is
    /// `self.order`, and the samples are 8-bit.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn narrow_avx2<const ORDER: u32, const TALL: bool>(&self, ys: Bytes, cs: Bytes, out: BytesMut, stride: usize, blocks: usize, (second, block): ([usize; 2], usize)) {
        use std::arch::x86_64::*;
        debug_assert!(!self.ten_bit && block != 0 && Kernel::narrow_fits((ys.1, cs.1, out.1), stride, blocks, (second, block)), "narrow blocks past their bytes");
        let out = out.0;
        // SAFETY: the caller guarantees AVX2 (every intrinsic's requirement) and the bounds
        // of every load and store (debug-asserted above); loadu takes any alignment, and the
        // non-temporal stores are used only where every row starts 32-byte aligned. A
        // prefetch only hints: it never faults, reads nothing the program sees, and is given
        // addresses inside the slices.
        unsafe {
            let a = Arith::new(&self.k);
            let load = |m: &[u8; 32]| _mm256_loadu_si256(m.as_ptr().cast());
            let luma = NARROW_LUMA.each_ref().map(load);
            let (u_at, v_at) = (NARROW_U.each_ref().map(load), NARROW_V.each_ref().map(load));
            let flip = _mm256_set1_epi8(0x80u8 as i8);
            let wide = self.wide(out, stride);
            let ld = |p: *const u8| _mm256_loadu_si256(p.cast());
            // Quarters 0 2 | 1 3.
            let q = |x: __m256i| _mm256_permute4x64_epi64::<0b11_01_10_00>(x);
            let ((y, y_len), (c, c_len)) = (ys, cs);
            // The blocks whose lines can be fetched: those whose pieces all lie in the slices.
            let ahead = if TALL { blocks + NARROW_AHEAD } else { 0 };
            let fetchable = |len: usize, reach: usize| (len - reach) / block + 1;
            let fetch_to = ahead.min(fetchable(y_len, second[0] + 64)).min(fetchable(c_len, second[1] + 32));
            for i in 0..blocks {
                let later = i + NARROW_AHEAD;
                if TALL && later < fetch_to {
                    for (p, second) in [(y, second[0]), (c, second[1])] {
                        _mm_prefetch::<_MM_HINT_T0>(p.add(later * block).cast());
                        _mm_prefetch::<_MM_HINT_T0>(p.add(later * block + second).cast());
                    }
                }
                let (yp, cp) = (y.add(i * block), c.add(i * block));
                let (a0, a1, b0, b1) = (ld(yp), ld(yp.add(32)), ld(yp.add(second[0])), ld(yp.add(second[0] + 32)));
                let (c0, c1) = (ld(cp), ld(cp.add(second[1])));
                // Two rows a register, and where luma row `l` and chroma row `r` are: the
                // register, and its half ([`two_rows`]'s `h`).
                let (lo, hi) = (_mm256_unpacklo_epi32, _mm256_unpackhi_epi32);
                let (ys, cs) = if TALL {
                    // A line of each tile, its rows 0-3 then 4-7 (chroma: its four rows).
                    ([q(lo(a0, b0)), q(hi(a0, b0)), q(lo(a1, b1)), q(hi(a1, b1))], [q(lo(c0, c1)), q(hi(c0, c1))])
                } else {
                    // Four tiles of each band, tiles 0-1 then 2-3 (chroma: of its band).
                    ([lo(a0, a1), hi(a0, a1), lo(b0, b1), hi(b0, b1)], [lo(c0, c1), hi(c0, c1)])
                };
                let cs = cs.map(|r| _mm256_xor_si256(r, flip));
                let chroma = |p: usize| {
                    let (ci, h) = if TALL { (p % 2, p / 2) } else { (p / 2, p % 2) };
                    [_mm256_shuffle_epi8(cs[ci], u_at[h]), _mm256_shuffle_epi8(cs[ci], v_at[h])]
                };
                let row = |l: usize| {
                    let (li, h) = if TALL { (l / 4 * 2 + l % 2, l % 4 / 2) } else { (l / 2, l % 2) };
                    _mm256_shuffle_epi8(ys[li], luma[h])
                };
                a.eight_rows::<ORDER>(out.add(64 * i), (stride, wide), chroma, row);
            }
        }
    }

    /// Converts eight rows of sixteen-pixel blocks that lie anywhere in `y` and `c` (the
    /// blocks of the tiles of a band, read where they lie), a block at a time: block `i`'s
    /// luma rows start at `blocks[i][0]` of `y`, `row` bytes apart, its four chroma rows at
    /// `blocks[i][1]` of `c`, as far apart, and its 4-byte pixels go to bytes `64i..64i + 64`
    /// of `out`'s eight rows, `stride` bytes apart. Meanwhile block `i` fetches two lines at
    /// `ahead[i][0]` of `y` and one at `ahead[i][1]` of `c`, as far as `ahead` lies inside
    /// the slices.
    /// Returns how many pixels of each row it wrote: `16 * blocks.len()`, or 0 for 10-bit
    /// samples or where a block does not lie inside its slices.
    pub(super) fn groups(&self, y: &[u8], c: &[u8], out: &mut [u8], (stride, row): (usize, usize), blocks: &[[usize; 2]], ahead: &[[usize; 2]]) -> usize {
        if self.ten_bit || !Kernel::groups_fit((y.len(), c.len(), out.len()), (stride, row), blocks) {
            return 0;
        }
        // A fetch outside the slices is left out, with those after it.
        let fetches = ahead.iter().take_while(|&&at| Kernel::fetch_fits((y.len(), c.len()), at)).count();
        #[cfg(target_arch = "x86_64")]
        {
            let (ys, cs, rows, ahead) = ((y.as_ptr(), y.len()), (c.as_ptr(), c.len()), (out.as_mut_ptr(), out.len()), &ahead[..fetches]);
            // SAFETY: a `Kernel` exists only where `detect` found AVX2; block i reads 16 bytes
            // at each of `blocks[i][0] + r * row` (r < 8) of `y` and `blocks[i][1] + r * row`
            // (r < 4) of `c`, inside the slices by the checks above, and writes bytes
            // `64i..64i + 64` of rows 0-7 of `out`, the last block's inside `out` by the check
            // above; the fetched lines lie inside the slices. `ORDER` is `self.order`, by the
            // match, and the samples are 8-bit.
            unsafe { by_order!(self.order, O => self.groups_avx2::<O>(ys, cs, rows, (stride, row), blocks, ahead), else return 0) };
            16 * blocks.len()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (y, c, out, stride, fetches);
            0
        }
    }

    /// Whether every block of [`Kernel::groups`] (eight luma rows and four chroma rows of 16
    /// bytes, `row` bytes apart, from its offsets) lies in `y` and `c` bytes, and their 64
    /// bytes of each of eight rows `stride` apart in `out` (lengths `(y, c, out)`); not for
    /// no blocks.
    fn groups_fit((y, c, out): (usize, usize, usize), (stride, row): (usize, usize), blocks: &[[usize; 2]]) -> bool {
        let from = |at: usize, rows: usize| reach(rows, row, (1, 0), 16).and_then(|e| e.checked_add(at));
        fits(out, reach(8, stride, (blocks.len(), 64), 64)) && blocks.iter().all(|&[yo, co]| fits(y, from(yo, 8)) && fits(c, from(co, 4)))
    }

    /// Whether a fetch of [`Kernel::groups`] (two lines from luma offset `fy`, one from
    /// chroma offset `fc`) lies in `y` and `c` bytes.
    fn fetch_fits((y, c): (usize, usize), [fy, fc]: [usize; 2]) -> bool {
        fits(y, fy.checked_add(128)) && fits(c, fc.checked_add(64))
    }

    /// The loop of [`Kernel::groups`] for the byte order `ORDER`: each block's rows as the
    /// linear loop reads them, a row of a tile being sixteen pixels back to back.
    ///
    /// # Safety
    /// The CPU has AVX2; `y`, `c` and `out` are readable (`out` writable) for their lengths,
    /// which hold every block's rows and its 64 bytes of rows 0-7 of `out` (`stride` apart)
    /// as [`Kernel::groups_fit`] says, and every fetched line as [`Kernel::fetch_fits`]
    /// says; `ORDER` is `self.order`, and the samples are 8-bit.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn groups_avx2<const ORDER: u32>(&self, y: Bytes, c: Bytes, out: BytesMut, (stride, row): (usize, usize), blocks: &[[usize; 2]], ahead: &[[usize; 2]]) {
        use std::arch::x86_64::*;
        debug_assert!(!self.ten_bit && Kernel::groups_fit((y.1, c.1, out.1), (stride, row), blocks), "eight-row blocks past their bytes");
        debug_assert!(ahead.iter().all(|&at| Kernel::fetch_fits((y.1, c.1), at)), "a fetch past the planes");
        let (y, c, out) = (y.0, c.0, out.0);
        // SAFETY: the caller guarantees AVX2 (every intrinsic's requirement) and the bounds
        // of every load, store and fetch (debug-asserted above); the broadcast loads take any
        // alignment, and the non-temporal stores are used only where every row starts
        // 32-byte aligned. A prefetch only hints: it never faults, and reads nothing the
        // program sees.
        unsafe {
            let a = Arith::new(&self.k);
            let load = |m: &[u8; 32]| _mm256_loadu_si256(m.as_ptr().cast());
            let (luma_order, u_order, v_order) = (load(&LUMA_HIGH), load(&U_HIGH), load(&V_HIGH));
            let flip = _mm256_set1_epi8(0x80u8 as i8);
            let wide = self.wide(out, stride);
            let broadcast = |p: *const u8| _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()));
            for (i, &[yo, co]) in blocks.iter().enumerate() {
                if let Some(&[fy, fc]) = ahead.get(i) {
                    _mm_prefetch::<_MM_HINT_T0>(y.add(fy).cast());
                    _mm_prefetch::<_MM_HINT_T0>(y.add(fy + 64).cast());
                    _mm_prefetch::<_MM_HINT_T0>(c.add(fc).cast());
                }
                let chroma = |p: usize| {
                    let cs = _mm256_xor_si256(broadcast(c.add(co + p * row)), flip);
                    [_mm256_shuffle_epi8(cs, u_order), _mm256_shuffle_epi8(cs, v_order)]
                };
                let luma = |l: usize| _mm256_shuffle_epi8(broadcast(y.add(yo + l * row)), luma_order);
                a.eight_rows::<ORDER>(out.add(64 * i), (stride, wide), chroma, luma);
            }
        }
    }

    /// The loop for this kernel's depth and byte order ([`Kernel::blocks_avx2`]); returns
    /// the pixels done per row (`16 * blocks`, or 0 where there is no such loop).
    ///
    /// # Safety
    /// As [`Kernel::blocks_avx2`]'s bounds, for pairs `0..pairs` at `steps` apart and
    /// blocks `block` apart.
    unsafe fn dispatch(&self, (y, c, out): ([Bytes; 2], Bytes, [BytesMut; 2]), (blocks, block): (usize, [usize; 2]), (pairs, steps): (usize, [usize; 3]), one: bool, ahead: &Ahead) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: a `Kernel` exists only where `detect` found AVX2; the caller
            // guarantees the bounds.
            unsafe {
                // One loop per depth and byte order (the orders of `RGB8_FORMATS`, and
                // 2:10:10:10), and for pairs with lines to fetch: the fetches' bookkeeping
                // in every loop slowed the linear conversion by 7%.
                let fetch = !ahead.is_empty();
                by_order!(self.order, O => match (self.ten_bit, one, fetch) {
                    (false, false, false) => self.blocks_avx2::<false, O, 2, false>(y, c, out, (blocks, block), (pairs, steps), ahead),
                    (true, false, false) => self.blocks_avx2::<true, O, 2, false>(y, c, out, (blocks, block), (pairs, steps), ahead),
                    (false, false, true) => self.blocks_avx2::<false, O, 2, true>(y, c, out, (blocks, block), (pairs, steps), ahead),
                    (true, false, true) => self.blocks_avx2::<true, O, 2, true>(y, c, out, (blocks, block), (pairs, steps), ahead),
                    (false, true, _) => self.blocks_avx2::<false, O, 1, false>(y, c, out, (blocks, block), (pairs, steps), ahead),
                    (true, true, _) => self.blocks_avx2::<true, O, 1, false>(y, c, out, (blocks, block), (pairs, steps), ahead),
                }, else return 0)
            };
            16 * blocks
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (y, c, out, blocks, block, pairs, steps, one, ahead);
            0
        }
    }

    /// The loop for 8-bit (`TEN` false) or 10-bit samples to RGB in byte order `ORDER`
    /// (a [`RgbPacking::shader_word`]; `u32::MAX` is 2:10:10:10): one copy per case, so
    /// that the loop holds no branch and only its own constants (which then stay in
    /// registers), and the channels go to their bytes without a shuffle.
    ///
    /// Row pair `p` of `pairs` starts `p * steps[0]` bytes on from `y`, `p * steps[1]` from
    /// `c` and `p * steps[2]` from `out`; block `i` of a pair `i * block[0]` bytes on in its
    /// luma rows, `i * block[1]` in its chroma row and `64 * i` in its output rows.
    ///
    /// # Safety
    /// The CPU has AVX2; `y`, `c` and `out` are readable (`out` writable) for their lengths,
    /// which hold, for every block of every pair, its bytes of the first `ROWS` of `y` and
    /// of `c` (16 for 8-bit samples, 32 for 10-bit) and its 64 bytes of the first `ROWS` of
    /// `out`: the last pair's last block's, by [`reach`]; `TEN` is `self.ten_bit` and
    /// `ORDER` is `self.order`. `ROWS` (1 or 2) is how many of the rows the loop converts.
    /// With `FETCH`, each pair first fetches its share of `ahead`'s lines (without, `ahead`
    /// is not looked at).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn blocks_avx2<const TEN: bool, const ORDER: u32, const ROWS: usize, const FETCH: bool>(&self, y: [Bytes; 2], c: Bytes, out: [BytesMut; 2], (blocks, [yb, cb]): (usize, [usize; 2]), (pairs, steps): (usize, [usize; 3]), ahead: &Ahead) {
        use std::arch::x86_64::*;
        debug_assert_eq!(self.k.shift, if ORDER != u32::MAX { 6 } else { 4 });
        let sample = if TEN { 32 } else { 16 };
        debug_assert!(
            fits(c.1, reach(pairs, steps[1], (blocks, cb), sample))
                && (0..ROWS).all(|r| fits(y[r].1, reach(pairs, steps[0], (blocks, yb), sample)) && fits(out[r].1, reach(pairs, steps[2], (blocks, 64), 64))),
            "row pairs' blocks past their bytes"
        );
        let (y, c, out) = (y.map(|(p, _)| p), c.0, out.map(|(p, _)| p));
        // SAFETY: the caller guarantees AVX2 (every intrinsic's requirement), that the
        // bytes each block of each pair reads are readable and that its 64 output bytes are
        // writable (debug-asserted above);
        // loadu/storeu and the broadcast loads take any alignment, and the non-temporal
        // stores are used only where they land aligned: `out` aligned to 32 bytes, or to 16
        // with the 32-byte stores shifted by 16 (each block is 64 bytes on from the last;
        // the shifted stores write bytes -16..48 of block i > 0, inside the row because
        // block i - 1 wrote there, and the first and last 16 bytes alone). A prefetch only
        // hints: it never faults, and reads nothing the program sees.
        unsafe {
            let a = Arith::new(&self.k);
            let load = |m: &[u8; 32]| _mm256_loadu_si256(m.as_ptr().cast());
            let (luma_order, u_order, v_order) = (load(&LUMA_HIGH), load(&U_HIGH), load(&V_HIGH));
            let (ten_u, ten_v) = (load(&TEN_U), load(&TEN_V));
            let (top10, sign) = (_mm256_set1_epi16(0xffc0u16 as i16), _mm256_set1_epi16(i16::MIN));
            let flip = _mm256_set1_epi8(0x80u8 as i8);
            // Each row's last block's second register, for `Stream::Shifted`.
            let mut carry = [_mm256_setzero_si256(); 2];
            let per_pair = if FETCH { ahead.line_count().div_ceil(pairs.max(1)) } else { 0 };
            let mut fetch = Fetching { ahead, r: 0, j: 0, o: 0 };
            for pair in 0..pairs {
                for _ in 0..per_pair {
                    let Some(line) = fetch.next() else { break };
                    _mm_prefetch::<_MM_HINT_T0>(line.cast());
                }
                let [dy, dc, dout] = steps.map(|s| s * pair);
                let (y, c, out) = ([y[0].add(dy), y[1].add(dy)], c.add(dc), [out[0].add(dout), out[1].add(dout)]);
                // Non-temporal stores need their alignment: 32 bytes for a whole register, else
                // 16 for its halves; rows that have neither are stored as usual.
                let stream = out.map(|o| match (self.stream, o as usize % 32) {
                    (true, 0) => Stream::Wide,
                    (true, 16) => Stream::Shifted,
                    _ => Stream::No,
                });
                for i in 0..blocks {
                    // Each pixel's chroma, less the offset, in the top bits of its word (as
                    // signed words), and its terms, which the two rows share.
                    let (u, v) = if TEN {
                        // Quarters 0 2 | 1 3: chroma pairs 0 1 4 5 | 2 3 6 7.
                        let cs = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_loadu_si256(c.add(cb * i).cast()));
                        let cs = _mm256_xor_si256(_mm256_and_si256(cs, top10), sign);
                        (_mm256_shuffle_epi8(cs, ten_u), _mm256_shuffle_epi8(cs, ten_v))
                    } else {
                        let cs = _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128(c.add(cb * i).cast())), flip);
                        (_mm256_shuffle_epi8(cs, u_order), _mm256_shuffle_epi8(cs, v_order))
                    };
                    let terms = a.terms(u, v);
                    for row in 0..ROWS {
                        // Each pixel's luma sample in the top bits of its word.
                        let yl = if TEN {
                            // Pixels 0-3 8-11 | 4-7 12-15.
                            _mm256_and_si256(_mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_loadu_si256(y[row].add(yb * i).cast())), top10)
                        } else {
                            _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(y[row].add(yb * i).cast())), luma_order)
                        };
                        let [first, second] = a.pixels::<ORDER>(yl, terms);
                        let o = out[row].add(64 * i);
                        match stream[row] {
                            Stream::Wide => {
                                _mm256_stream_si256(o.cast(), first);
                                _mm256_stream_si256(o.add(32).cast(), second);
                            }
                            Stream::Shifted => {
                                // Bytes -16..16 of the block: the last block's top half and this
                                // one's first (the row's first 16 bytes alone), then 16..48.
                                if i == 0 {
                                    _mm_stream_si128(o.cast(), _mm256_castsi256_si128(first));
                                } else {
                                    _mm256_stream_si256(o.sub(16).cast(), _mm256_permute2x128_si256::<0x21>(carry[row], first));
                                }
                                _mm256_stream_si256(o.add(16).cast(), _mm256_permute2x128_si256::<0x21>(first, second));
                                carry[row] = second;
                                if i + 1 == blocks {
                                    _mm_stream_si128(o.add(48).cast(), _mm256_extracti128_si256::<1>(second));
                                }
                            }
                            Stream::No => {
                                _mm256_storeu_si256(o.cast(), first);
                                _mm256_storeu_si256(o.add(32).cast(), second);
                            }
                        }
                    }
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
            unsafe { self.blocks_avx2([r0, r1], [y0, y1], uv, blocks) };
            16 * blocks
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (r0, r1, y0, y1, uv);
            0
        }
    }

    /// The coefficients of one output (`[r, g, b]`) by pixel byte, as sixteen 16-bit words
    /// (four pixels): the alpha or padding byte's is 0.
    #[cfg(target_arch = "x86_64")]
    fn by_byte(&self, [r, g, b]: [i32; 3]) -> std::arch::x86_64::__m256i {
        let mut w = [0i16; 16];
        for (shift, k) in self.shifts.iter().zip([r, g, b]) {
            for px in 0..4 {
                w[px * 4 + (shift / 8) as usize % 4] = k as i16;
            }
        }
        // SAFETY: an unaligned 32-byte load from a 32-byte array; only called from code
        // that AVX2 was detected for.
        unsafe { std::arch::x86_64::_mm256_loadu_si256(w.as_ptr().cast()) }
    }

    /// # Safety
    /// The CPU has AVX2; `r` hold at least `64 * blocks` bytes, `y` and `uv` at least
    /// `16 * blocks`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn blocks_avx2(&self, r: [&[u8]; 2], y: [&mut [u8]; 2], uv: &mut [u8], blocks: usize) {
        use std::arch::x86_64::*;
        debug_assert!(r.iter().all(|r| r.len() / 64 >= blocks) && y.iter().all(|y| y.len() / 16 >= blocks) && uv.len() / 16 >= blocks, "RGB blocks past their rows");
        let (r, y, uv) = (r.map(<[u8]>::as_ptr), y.map(<[u8]>::as_mut_ptr), uv.as_mut_ptr());
        let k = &self.k;
        // SAFETY: the caller guarantees AVX2 and the bounds of every load and store below
        // (debug-asserted above); loadu/storeu take any alignment.
        unsafe {
            // Each pixel's four bytes widen to four words; `pmaddwd` with the coefficients
            // by byte gives two partial sums a pixel, and `phaddd` the pixel's sum.
            let (ky, ku, kv) = (self.by_byte([k.y_r, k.y_g, k.y_b]), self.by_byte([k.u_r, k.u_g, k.u_b]), self.by_byte([k.v_r, k.v_g, k.v_b]));
            let ybias = _mm256_set1_epi32((k.y_off << 15) + (1 << 14));
            let cbias = _mm256_set1_epi32((k.c_off << 17) + (1 << 16));
            let zero = _mm256_setzero_si256();
            // Sixteen 32-bit values in order (two registers) to sixteen bytes, clamped to
            // 0..=255 by the saturating packs; the permutes undo their lane order.
            let bytes = |a: __m256i, b: __m256i| {
                let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(a, b));
                _mm256_castsi256_si128(_mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packus_epi16(words, words)))
            };
            for i in 0..blocks {
                // [row][group of eight pixels]: the pixels widened to words, low and high
                // unpack (lane 0: pixels 0-1 and 2-3, lane 1: 4-5 and 6-7).
                let mut wide = [[[zero; 2]; 2]; 2];
                for row in 0..2 {
                    for (g, w) in wide[row].iter_mut().enumerate() {
                        let px = _mm256_loadu_si256(r[row].add(64 * i + 32 * g).cast());
                        *w = [_mm256_unpacklo_epi8(px, zero), _mm256_unpackhi_epi8(px, zero)];
                    }
                    // Luma of each pixel, in order: phaddd of the low and high halves'
                    // partial sums gives pixels 0-3 | 4-7.
                    let luma = wide[row].map(|[lo, hi]| {
                        let sum = _mm256_hadd_epi32(_mm256_madd_epi16(lo, ky), _mm256_madd_epi16(hi, ky));
                        _mm256_srai_epi32::<15>(_mm256_add_epi32(sum, ybias))
                    });
                    _mm_storeu_si128(y[row].add(16 * i).cast(), bytes(luma[0], luma[1]));
                }
                // Each 2x2 block's sums by byte, in words (at most 1020): the rows added,
                // then each pixel pair (the high 64 bits of each 128 onto the low), then the
                // low and high unpacks' blocks gathered: blocks 0 1 | 2 3 of the group.
                // Loops, not `map` closures: LLVM (Rust 1.95) left a nested closure here out of
                // line, its registers passed through memory, which cost a fourth of the speed.
                let mut chroma = [zero; 2];
                for (g, out) in chroma.iter_mut().enumerate() {
                    let mut pairs = [zero; 2];
                    for (h, pair) in pairs.iter_mut().enumerate() {
                        let s = _mm256_add_epi16(wide[0][g][h], wide[1][g][h]);
                        *pair = _mm256_add_epi16(s, _mm256_srli_si256::<8>(s));
                    }
                    let blocks4 = _mm256_unpacklo_epi64(pairs[0], pairs[1]);
                    // U0 U1 V0 V1 | U2 U3 V2 V3, then U0 V0 U1 V1 | U2 V2 U3 V3.
                    let uv = _mm256_hadd_epi32(_mm256_madd_epi16(blocks4, ku), _mm256_madd_epi16(blocks4, kv));
                    *out = _mm256_shuffle_epi32::<0b11_01_10_00>(_mm256_srai_epi32::<17>(_mm256_add_epi32(uv, cbias)));
                }
                _mm_storeu_si128(uv.add(16 * i).cast(), bytes(chroma[0], chroma[1]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::colour::{ColourMatrix, ColourRange, RgbPacking, RGB10_FORMATS, RGB8_FORMATS};
    use crate::tiling::test_pattern as pattern;

    /// Every matrix, range, depth and packing, a row pair and a single row, ordinary and
    /// non-temporal stores (on rows aligned to 32 bytes, to 16, and to neither, which
    /// store as usual): the vector rows equal the scalar formula pixel by pixel, and the
    /// pixels past the last whole sixteen are left to the caller.
    #[test]
    fn the_vector_rows_are_the_scalar_formula() {
        let width = 16 * 9 + 5;
        for ten_bit in [false, true] {
            let bytes = if ten_bit { 2 } else { 1 };
            let ys = [pattern(width * bytes, 3), pattern(width * bytes, 5)];
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
                        for (stream, align) in [(false, 0), (true, 0), (true, 16), (true, 4)] {
                            let kernel = kernel.streaming(stream);
                            for pair in [true, false] {
                                let mut bufs = [vec![0x5au8; width * 4 + 64], vec![0x5au8; width * 4 + 64]];
                                let starts = bufs.each_ref().map(|b| b.as_ptr().align_offset(32) + align);
                                let [b0, b1] = &mut bufs;
                                let (o0, o1) = (&mut b0[starts[0]..starts[0] + width * 4], &mut b1[starts[1]..starts[1] + width * 4]);
                                let done = kernel.rows([&ys[0], &ys[1]], &c, (o0, pair.then_some(o1)), width);
                                kernel.fence();
                                assert_eq!(done, width / 16 * 16);
                                for (row, y) in ys.iter().enumerate() {
                                    let out = &bufs[row][starts[row]..starts[row] + width * 4];
                                    for x in 0..width {
                                        let px = &out[x * 4..x * 4 + 4];
                                        if x >= done || (row == 1 && !pair) {
                                            assert_eq!(px, [0x5a; 4], "pixel {x} of row {row} is the caller's");
                                            continue;
                                        }
                                        let rgb = k.convert(sample(y, x), sample(&c, x / 2 * 2), sample(&c, x / 2 * 2 + 1));
                                        assert_eq!(px, pack.pack(rgb), "{to} {m:?} {r:?} ten_bit {ten_bit} stream {stream} at {align} row {row} pixel {x}");
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// A rectangle's row pairs in one call ([`Kernel::tile`], 8- and 10-bit, rows of a tile
    /// read with their strides, output rows padded): each pair as [`Kernel::rows`] writes
    /// it, the pixels past the last whole sixteen and the bytes between the rows left alone;
    /// slices too short for the last pair are refused whole.
    #[test]
    fn a_tile_is_its_row_pairs() {
        let (w, pairs) = (53usize, 3usize);
        for ten_bit in [false, true] {
            let bytes = if ten_bit { 2 } else { 1 };
            let (ys, cs, os) = (64 * bytes, 64 * bytes + 8, w * 4 + 44);
            let (y, c) = (pattern(2 * pairs * ys, 7), pattern(pairs * cs, 9));
            let pack = RgbPacking::of(if ten_bit { crate::Fourcc::XRGB2101010 } else { crate::Fourcc::ABGR8888 }).expect("packing");
            let k = YuvToRgb::new(ColourMatrix::Bt709, ColourRange::Limited, if ten_bit { 10 } else { 8 }, pack.bits());
            let Some(kernel) = Kernel::detect(k, pack, ten_bit) else { return };
            let len = (2 * pairs - 1) * os + 4 * w;
            let mut got = vec![0x5au8; len];
            let steps = Steps::rows(ten_bit, (ys, cs, os));
            // Fetching other bytes meanwhile (more lines than pairs) changes none of these.
            let other = pattern(4096, 1);
            let mut ahead = Ahead::NONE;
            ahead.add(&other, 8, (1000, 1024, 4));
            assert_eq!(kernel.tile(&y, &c, &mut got, steps, (w, pairs), &ahead), 48);
            let mut want = vec![0x5au8; len];
            for p in 0..pairs {
                let (a, rest) = want[2 * p * os..].split_at_mut(os);
                let row = |r: usize| &y[r * ys..r * ys + w * bytes];
                kernel.rows([row(2 * p), row(2 * p + 1)], &c[p * cs..p * cs + w * bytes], (&mut a[..4 * w], Some(&mut rest[..4 * w])), w);
            }
            assert!(got == want, "ten_bit {ten_bit}");
            assert!(got[48 * 4..4 * w].iter().all(|&b| b == 0x5a), "pixels 48.. are the caller's");
            assert_eq!(kernel.tile(&y[..(2 * pairs - 1) * ys + 48 * bytes - 1], &c, &mut got, steps, (w, pairs), &Ahead::NONE), 0);
            assert_eq!(kernel.tile(&y, &c[..(pairs - 1) * cs + 48 * bytes - 1], &mut got, steps, (w, pairs), &Ahead::NONE), 0);
            assert_eq!(kernel.tile(&y, &c, &mut got[..len - 4 * w + 191], steps, (w, pairs), &Ahead::NONE), 0);
            assert_eq!(kernel.tile(&y, &c, &mut got, steps, (15, pairs), &Ahead::NONE), 0);
        }
    }

    /// Blocks that lie apart (each a tile of its own, as in a run of nv12-16l32s tiles):
    /// each converts as the same block gathered into a row does.
    #[test]
    fn blocks_apart_are_the_blocks_gathered() {
        let (blocks, pairs, (yb, cb)) = (5usize, 2usize, (48usize, 40usize));
        let k = YuvToRgb::new(ColourMatrix::Bt601, ColourRange::Full, 8, 8);
        let Some(kernel) = Kernel::detect(k, RgbPacking::of(crate::Fourcc::XRGB8888).expect("XR24"), false) else { return };
        let (ys, cs, os) = (16usize, 16usize, 64 * blocks + 32);
        let (y, c) = (pattern(2 * pairs * ys + (blocks - 1) * yb, 3), pattern(pairs * cs + (blocks - 1) * cb, 4));
        let len = (2 * pairs - 1) * os + 64 * blocks;
        let mut got = vec![0u8; len];
        let steps = Steps { luma_row: ys, chroma_row: cs, out_row: os, luma_block: yb, chroma_block: cb };
        assert_eq!(kernel.tile(&y, &c, &mut got, steps, (16 * blocks, pairs), &Ahead::NONE), 16 * blocks);
        let gather = |s: &[u8], at: usize, step: usize| (0..blocks).flat_map(|i| s[at + i * step..at + i * step + 16].to_vec()).collect::<Vec<u8>>();
        for p in 0..pairs {
            let rows = [gather(&y, 2 * p * ys, yb), gather(&y, (2 * p + 1) * ys, yb)];
            let mut want = [vec![0u8; 64 * blocks], vec![0u8; 64 * blocks]];
            let [w0, w1] = &mut want;
            kernel.rows([&rows[0], &rows[1]], &gather(&c, p * cs, cb), (w0, Some(w1)), 16 * blocks);
            for (r, w) in want.iter().enumerate() {
                assert!(got[(2 * p + r) * os..][..64 * blocks] == w[..], "pair {p} row {r}");
            }
        }
        // Blocks closer than their own bytes would overlap: refused.
        assert_eq!(kernel.tile(&y, &c, &mut got, Steps { luma_block: 15, ..steps }, (16 * blocks, pairs), &Ahead::NONE), 0);
    }

    /// Calls `f` with the 8-bit kernel of `colour` for every RGB byte order, ordinary and
    /// non-temporal (where the CPU has AVX2).
    fn each_kernel((m, r): (ColourMatrix, ColourRange), mut f: impl FnMut(crate::Fourcc, Kernel, bool)) {
        for to in RGB8_FORMATS.into_iter().chain(RGB10_FORMATS) {
            let pack = RgbPacking::of(to).expect("packing");
            let Some(kernel) = Kernel::detect(YuvToRgb::new(m, r, 8, pack.bits()), pack, false) else { return };
            for stream in [false, true] {
                f(to, kernel.streaming(stream), stream);
            }
        }
    }

    /// Eight rows of nv12-4l4 and of nv12-8l128 read where they lie ([`Kernel::narrow`]),
    /// into every byte order, with ordinary and non-temporal stores: each row pair as
    /// [`Kernel::rows`] converts the same rows detiled, the pixels past the last whole
    /// sixteen left alone. A slice a byte too short for the last block is refused whole,
    /// as are 10-bit samples.
    #[test]
    fn narrow_tiles_are_their_rows_detiled() {
        let (w, stride) = (16 * 3 + 7usize, 256usize);
        for (tw, th) in [(4usize, 4usize), (8, 128)] {
            let tiles = w.div_ceil(tw);
            let band = tiles * tw * th;
            let (luma, chroma) = (pattern(band * 8usize.div_ceil(th), 3), pattern(band, 5));
            // Row `r` of a plane of row-major tiles: each tile's row, tile after tile.
            let row = |plane: &[u8], r: usize| (0..tiles).flat_map(|t| plane[r / th * band + t * tw * th + r % th * tw..][..tw].to_vec()).collect::<Vec<u8>>();
            let (at, ends) = if th == 4 { (Narrow::Four { band }, [band + 192, 192]) } else { (Narrow::Tall { tile: 1024 }, [5 * 1024 + 64, 5 * 1024 + 32]) };
            let len = 7 * stride + 4 * w;
            each_kernel((ColourMatrix::Bt709, ColourRange::Limited), |to, kernel, stream| {
                let mut buf = vec![0x5au8; len + 32];
                let start = buf.as_ptr().align_offset(32);
                let got = &mut buf[start..start + len];
                assert_eq!(kernel.narrow(&luma, &chroma, got, stride, w, at), 48);
                kernel.fence();
                let mut want = vec![0x5au8; len];
                for p in 0..4 {
                    let (a, rest) = want[2 * p * stride..].split_at_mut(stride);
                    kernel.rows([&row(&luma, 2 * p), &row(&luma, 2 * p + 1)], &row(&chroma, p), (&mut a[..4 * w], Some(&mut rest[..4 * w])), w);
                }
                for r in 0..8 {
                    want[r * stride + 48 * 4..r * stride + 4 * w].fill(0x5a);
                }
                assert!(buf[start..start + len] == want[..], "{tw}x{th} -> {to} stream {stream}");
                // The last block's bytes end at `ends` of the planes, and at byte 192 of
                // the last row.
                let got = &mut buf[start..start + len];
                let (y, c) = (&luma[..ends[0]], &chroma[..ends[1]]);
                assert_eq!(kernel.narrow(y, c, &mut got[..7 * stride + 192], stride, 48, at), 48);
                assert_eq!(kernel.narrow(&y[..ends[0] - 1], c, got, stride, 48, at), 0);
                assert_eq!(kernel.narrow(y, &c[..ends[1] - 1], got, stride, 48, at), 0);
                assert_eq!(kernel.narrow(y, c, &mut got[..7 * stride + 191], stride, 48, at), 0);
                assert_eq!(kernel.narrow(y, c, got, stride, 15, at), 0);
                assert_eq!(kernel.narrow(&luma, &chroma, got, stride, 48, Narrow::Tall { tile: 0 }), 0);
            });
            let ten = Kernel::detect(YuvToRgb::new(ColourMatrix::Bt709, ColourRange::Limited, 10, 10), RgbPacking::of(crate::Fourcc::XRGB2101010).expect("XR30"), true);
            if let Some(ten) = ten {
                assert_eq!(ten.narrow(&luma, &chroma, &mut vec![0u8; len], stride, w, at), 0);
            }
        }
    }

    /// Eight rows of blocks that lie anywhere, out of order ([`Kernel::groups`]), into every
    /// byte order, with ordinary and non-temporal stores: each row pair as [`Kernel::rows`]
    /// converts the same blocks gathered into rows. A block a byte past its slice's end is
    /// refused whole, as are 10-bit samples; fetches past the slices' ends are left out.
    #[test]
    fn blocks_anywhere_are_their_rows_gathered() {
        let row = 48usize;
        let (y, c) = (pattern(8 * row + 200, 3), pattern(4 * row + 200, 5));
        let blocks = [[0usize, 0usize], [100, 32], [16, 16], [232, 7], [33, 232]];
        let (n, stride) = (blocks.len(), 64 * blocks.len() + 32);
        let ahead = [[0, 0], [y.len() - 128, c.len() - 64], [y.len() - 127, 0], [0, 0]];
        let gather = |s: &[u8], r: usize, which: usize| blocks.iter().flat_map(|b| s[b[which] + r * row..][..16].to_vec()).collect::<Vec<u8>>();
        let len = 7 * stride + 64 * n;
        each_kernel((ColourMatrix::Bt2020, ColourRange::Full), |to, kernel, stream| {
            let mut buf = vec![0x5au8; len + 32];
            let start = buf.as_ptr().align_offset(32);
            assert_eq!(kernel.groups(&y, &c, &mut buf[start..start + len], (stride, row), &blocks, &ahead), 16 * n);
            kernel.fence();
            let mut want = vec![0x5au8; len];
            for p in 0..4 {
                let (a, rest) = want[2 * p * stride..].split_at_mut(stride);
                kernel.rows([&gather(&y, 2 * p, 0), &gather(&y, 2 * p + 1, 0)], &gather(&c, p, 1), (&mut a[..64 * n], Some(&mut rest[..64 * n])), 16 * n);
            }
            assert!(buf[start..start + len] == want[..], "{to} stream {stream}");
            let out = &mut buf[start..start + len];
            assert_eq!(kernel.groups(&y[..y.len() - 1], &c, out, (stride, row), &blocks, &[]), 0);
            assert_eq!(kernel.groups(&y, &c[..c.len() - 1], out, (stride, row), &blocks, &[]), 0);
            assert_eq!(kernel.groups(&y, &c, &mut out[..len - 1], (stride, row), &blocks, &[]), 0);
            assert_eq!(kernel.groups(&y, &c, out, (stride, row), &[], &[]), 0);
        });
        let ten = Kernel::detect(YuvToRgb::new(ColourMatrix::Bt709, ColourRange::Limited, 10, 10), RgbPacking::of(crate::Fourcc::XRGB2101010).expect("XR30"), true);
        if let Some(ten) = ten {
            assert_eq!(ten.groups(&y, &c, &mut vec![0u8; len], (stride, row), &blocks, &[]), 0);
        }
    }

    /// What the loop fetches ([`Ahead`]): the lines holding each run's bytes, in order, runs
    /// back to back as one (each line once), nothing of runs that leave their slice or past
    /// the fourth.
    #[test]
    fn ahead_names_each_line_once() {
        let buf = vec![0u8; 8192 + 64];
        // A plane that starts on a line, so that offsets from it name lines.
        let plane = &buf[buf.as_ptr().align_offset(64)..][..8192];
        let lines = |a: &Ahead| {
            let got = a.lines().into_iter().map(|p| (p as usize).wrapping_sub(plane.as_ptr() as usize) as isize).collect::<Vec<_>>();
            assert_eq!(got.len(), a.line_count());
            got
        };
        assert_eq!(lines(&Ahead::NONE), [0isize; 0]);
        let mut a = Ahead::NONE;
        // Two rows of 100 bytes, 1 KiB apart; four tiles of 16 bytes back to back.
        a.add(plane, 64, (100, 1024, 2));
        a.add(plane, 4096, (16, 16, 4));
        // To the plane's end (8000 + 3 * 64 = 8192) is in it; a byte past, left out.
        let mut whole = Ahead::NONE;
        whole.add(plane, 8000, (64, 64, 3));
        assert_eq!(lines(&whole), [8000, 8064, 8128]);
        a.add(plane, 8001, (64, 64, 3));
        assert_eq!(lines(&a), [64, 128, 1088, 1152, 4096]);
        // A run that starts inside a line begins with that line; empty runs have none.
        a.add(plane, 10, (60, 60, 1));
        a.add(plane, 6000, (0, 1, 1));
        a.add(plane, 6000, (130, 130, 1));
        a.add(plane, 7000, (1, 1, 1));
        assert_eq!(lines(&a), [64, 128, 1088, 1152, 4096, 0, 64, 5952, 6016, 6080]);
        // Overflowing sizes are no runs either.
        let mut b = Ahead::NONE;
        b.add(plane, usize::MAX, (2, 1, 1));
        b.add(plane, 0, (1, usize::MAX, 3));
        assert_eq!(lines(&b), [0isize; 0]);
    }

    /// Rows shorter than sixteen pixels, or slices shorter than the width says, are left
    /// to the caller rather than read past.
    #[test]
    fn short_rows_and_slices_are_the_callers() {
        let k = YuvToRgb::new(ColourMatrix::Bt709, ColourRange::Limited, 8, 8);
        let Some(kernel) = Kernel::detect(k, RgbPacking::of(crate::Fourcc::XRGB8888).expect("XR24"), false) else { return };
        let mut out = vec![0u8; 64 * 4];
        let mut other = vec![0u8; 64 * 4];
        assert_eq!(kernel.rows([&[0; 15], &[0; 15]], &[128; 16], (&mut out, None), 64), 0);
        assert_eq!(kernel.rows([&[0; 64], &[0; 64]], &[128; 40], (&mut out, None), 64), 32);
        assert_eq!(kernel.rows([&[0; 64], &[0; 64]], &[128; 64], (&mut out[..100], None), 64), 16);
        // The second row's shortness counts only where there is a second row.
        assert_eq!(kernel.rows([&[0; 64], &[0; 20]], &[128; 64], (&mut out, Some(&mut other)), 64), 16);
        assert_eq!(kernel.rows([&[0; 64], &[0; 20]], &[128; 64], (&mut out, None), 64), 64);
        assert_eq!(kernel.rows([&[0; 64], &[0; 64]], &[128; 64], (&mut out, Some(&mut other[..70])), 64), 16);
    }
}
