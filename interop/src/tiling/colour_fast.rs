//! The CPU fast path of colour conversion, with detiling fused in: tiled (or linear)
//! NV12/P010 -> any RGB format of [`super::colour`] in one pass over memory, and 8-bit RGB
//! -> NV12 ([`rgb_to_nv12_fast`]), on several threads. The same bytes as the reference
//! ([`super::colour::yuv_to_rgb`] after [`super::detile`], [`super::colour::rgb_to_nv12`]);
//! the tests compare the two.
//!
//! Why it is fast where the reference is not:
//! - Where the tiles hold their rows back to back and are a whole number of sixteen-pixel
//!   blocks wide (samsung-64x32, allwinner-32x32, nv12-16l32s, i915-x), the vector loop
//!   reads each tile where it lies (`Job::run_tiles`): for 8-bit samples eight rows at a
//!   time, across each band fetching the tiles' lines a few blocks ahead, or (allwinner-32x32)
//!   in strips of two tiles fetching the next strip's; else tile by tile, writing the tile's
//!   piece of each RGB row. The tiled frame is read once and nothing is copied.
//! - Tiles four or eight pixels wide (nv12-4l4, nv12-8l128) of 8-bit samples are read where
//!   they lie too, eight rows at a time across the frame, sixteen pixels at a time
//!   transposed in registers (`Job::run_narrow`); nothing is copied.
//! - What those leave (10-bit samples; the last rows and pixels where the frame is not a
//!   whole number of eight-row groups and sixteen-pixel blocks) is detiled a strip at a
//!   time, a few hundred pixels by up to 128 rows, into buffers that stay in L1, and each
//!   strip converted as one tile (`Job::run_strips`).
//! - Elsewhere (and where the CPU has no vector loop), rows are produced a group at a time
//!   (a few tile rows of luma and their chroma), detiled into small per-thread buffers that
//!   stay in cache, and converted from there: the tiled frame is read once and the RGB frame
//!   written once, with no full linear intermediate.
//! - A chroma sample's three products are computed once for the four pixels that share it,
//!   and pixels are packed with precomputed shifts rather than per-byte indexing.
//! - Where the CPU has AVX2, sixteen pixels at a time (`colour_simd`, the same
//!   16-bit arithmetic, one register per channel), both rows of a chroma row at once where
//!   the RGB rows start cache lines; the scalar loop does the rest of a row, and all of it
//!   elsewhere.
//! - Frames of `parallel::STREAM_BYTES` (4 MiB) and more are written with non-temporal stores.

use super::colour_simd::{Ahead, Kernel, Narrow, RgbKernel, Steps};
use super::colour::{check_rgb_to_nv12, packing, yuv_bits, ColourError, ColourMatrix, ColourRange, RgbToYuv, YuvToRgb};
use super::fast::{band_quantum, band_tile_offsets, detile_rows, detile_strip, partial_bands, strip_pieces, rows_in_tiles, tile_by_tile, tiled_rows_region};
use super::parallel::{default_threads, run_shares, STREAM_BYTES};
use super::geometry::{check_linear, tiled_size, PlaneGeometry, TiledFrame};
use super::{PlaneLayout, TilingError};
use crate::tiling::AddressKind;
use crate::{Fourcc, TileLayout};

/// The rows a thread's share is counted in, for tiles read through a [`Window`]: 16 for
/// linear input, else enough rows that both planes' windows (a band, or a Z-flip-Z pair) end
/// on the group's edge, so each thread starts on a window of its own. Tiles read in place or
/// in strips start anywhere on an even row, and are counted in 16 rows too: with a
/// nv12-8l128 window's 256, two threads' shares of 2160 rows were 1280 and 880.
fn group_rows(y: &PlaneGeometry, uv: &PlaneGeometry) -> u32 {
    if y.kind == AddressKind::Linear {
        return 16;
    }
    let q = band_quantum(y);
    (y.tile_height * q).max(2 * uv.tile_height * q)
}

/// How the vector loop reads a tiled frame other than through a [`Window`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Each tile where it lies ([`Job::run_tiles`]).
    InPlace,
    /// A strip of tiles at a time, detiled into buffers that stay in L1 ([`Job::run_strips`]).
    Strips,
}

/// How the vector loop reads the tiles of `py` (luma) and `pc` (chroma) of `bits`-bit
/// samples, or `None` for through a [`Window`]. Both take tiles that hold their rows back to
/// back and are as wide in bytes as each other's:
/// - [`Reading::InPlace`]: tiles a whole number of sixteen-pixel blocks wide, with each luma
///   band's chroma rows in one chroma band (samsung-64x32, allwinner-32x32, nv12-16l32s,
///   i915-x);
/// - [`Reading::Strips`]: row-major tiles narrower than a block, a whole number to a block,
///   so that a strip, a number of blocks wide, starts on a tile (nv12-4l4, nv12-8l128);
///   their whole eight-row groups of 8-bit samples are read in place ([`Job::run_narrow`])
///   before the strips take the rest.
///
/// i915-y and NVIDIA block linear (16-byte columns) go through a [`Window`].
fn reading(py: &PlaneGeometry, pc: &PlaneGeometry, bits: u32) -> Option<Reading> {
    let block = 16 * sample_bytes(bits) as u32;
    let (tw, th) = (py.tile_width, py.tile_height);
    if !(rows_in_tiles(py) && rows_in_tiles(pc) && pc.tile_width == tw) {
        return None;
    }
    if tw % block == 0 && th % 2 == 0 && pc.tile_height % (th / 2) == 0 {
        Some(Reading::InPlace)
    } else if py.kind == AddressKind::RowMajorTiles && pc.kind == AddressKind::RowMajorTiles && tw < block && block % tw == 0 {
        Some(Reading::Strips)
    } else {
        None
    }
}

/// How [`Job::band_across`] goes over a band's eight-row groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Across {
    /// Each group across the whole band, every block fetching the lines of the block
    /// [`GROUP_AHEAD`] on.
    Band,
    /// Strips of `blocks` blocks, one strip's groups after another, each group fetching the
    /// lines of the same group of the next strip.
    Strips { blocks: usize },
}

impl Across {
    /// How many of a band's `count` blocks a strip has (at least one).
    fn strip(self, count: usize) -> usize {
        match self {
            Across::Band => count.max(1),
            Across::Strips { blocks } => blocks.clamp(1, count.max(1)),
        }
    }

    /// What the groups of blocks `b0..b1` fetch, from `lines` (every block's share of its
    /// tiles' lines, in order): for each block, the lines of the block [`GROUP_AHEAD`] on,
    /// or of its place in the next strip.
    fn ahead(self, lines: &[[usize; 2]], (b0, b1): (usize, usize)) -> &[[usize; 2]] {
        let n = lines.len();
        match self {
            Across::Band => &lines[b0.saturating_add(GROUP_AHEAD).min(n)..],
            Across::Strips { .. } => &lines[b1.min(n)..b1.saturating_add(b1 - b0.min(b1)).min(n)],
        }
    }
}

/// How tiles read in place ([`Reading::InPlace`]) convert eight rows at a time
/// ([`Job::band_across`]) rather than tile by tile; `None` (tile by tile) for 10-bit
/// samples. Measured at 4K -> XR24, fused ÷ linear taking turns (harness, alternating runs),
/// one thread / two, against tile by tile in the same minutes:
/// - across the band (2026-11-26): samsung-64x32 0.86-0.94 / 0.89-0.95 against 0.75-0.79
///   / 0.80-0.91; nv12-16l32s 0.95-1.03 / 0.94-0.96 against 0.75-0.83 / 0.86-0.91; i915-x
///   0.89-0.95 / 0.85-0.96 against 0.76-0.77 / 0.90-0.91. In strips of one to four tiles,
///   samsung-64x32 and nv12-16l32s measured alike or slower (2026-11-27).
/// - allwinner-32x32 (tiles 32 bytes wide) across the band measured 0.69-0.73 / 0.78-0.83
///   against 0.75-0.81 / 0.81-0.88, and 0.33-0.37 on one thread without the fetches. In
///   strips of two tiles (2026-11-27, eleven pairs of runs), median 0.93 / 0.985, lowest
///   0.76 / 0.90, against 0.87 / 0.975, lowest 0.78 / 0.80. In strips of one, three, four
///   and six tiles 0.72-0.89 / 0.76-1.02 (two to four runs each); of eight and sixteen
///   0.47-0.81 / 0.76-0.97; without the fetches 0.35-0.57 / 0.63-0.79.
fn across(py: &PlaneGeometry, bits: u32) -> Option<Across> {
    match (bits, py.tile_width) {
        (8, 32) => Some(Across::Strips { blocks: 4 }),
        (8, _) => Some(Across::Band),
        _ => None,
    }
}

/// Bytes of one sample: 1 for 8-bit, 2 for 10-bit (in 16-bit words).
fn sample_bytes(bits: u32) -> usize {
    if bits == 8 {
        1
    } else {
        2
    }
}

/// NV12/P010 `frame` (the tiled buffer at the start of `src`, as [`tiled_size`] lays it
/// out; linear is the packed image) -> RGB format `to` at `dst_plane`, in `matrix` and
/// `range`, on `threads` threads (0: [`default_threads`]).
pub fn tiled_yuv_to_rgb_fast(
    frame: TiledFrame,
    to: Fourcc,
    (matrix, range): (ColourMatrix, ColourRange),
    src: &[u8],
    (dst, dst_plane): (&mut [u8], PlaneLayout),
    threads: usize,
) -> Result<(), ColourError> {
    fused(frame, to, (matrix, range), src, (dst, dst_plane), threads, Route::Fastest)
}

/// Which way [`fused`] reads the tiles.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    /// In place or in strips where the layout and the CPU allow, else through windows.
    Fastest,
    /// Through windows always: the path of CPUs without the vector loop, which the tests
    /// check on CPUs that have it.
    #[cfg_attr(not(test), allow(dead_code))]
    Windows,
}

/// [`tiled_yuv_to_rgb_fast`], by `route`.
fn fused(
    frame: TiledFrame,
    to: Fourcc,
    (matrix, range): (ColourMatrix, ColourRange),
    src: &[u8],
    (dst, dst_plane): (&mut [u8], PlaneLayout),
    threads: usize,
    route: Route,
) -> Result<(), ColourError> {
    let TiledFrame { fourcc: from, extent: (width, height), .. } = frame;
    let bits = yuv_bits(from, to)?;
    let pack = packing(to, from, false, false)?;
    let g = frame.geometry()?;
    if (src.len() as u64) < g.size {
        return Err(TilingError::BufferTooSmall { what: "tiled source", plane: 1, needed: g.size, got: src.len() as u64 }.into());
    }
    let dg = tiled_size(TileLayout::Linear, to, width, height)?;
    check_linear(&dg, &[dst_plane], dst.len(), "RGB destination")?;
    let k = YuvToRgb::new(matrix, range, bits, pack.bits());
    let (py, pc) = (g.planes[0], g.planes[1]);
    let simd = Kernel::detect(k, pack, bits == 10);
    let reading = if simd.is_some() && route == Route::Fastest { reading(&py, &pc, bits) } else { None };
    let group = if reading.is_some() { 16 } else { group_rows(&py, &pc) };
    let groups = height.div_ceil(group);
    let threads = if threads == 0 { default_threads() } else { threads };
    let per = groups.div_ceil(threads.clamp(1, groups.max(1) as usize) as u32).max(1);
    let stride = dst_plane.stride as usize;
    let end = dst_plane.offset as usize + (height as usize - 1) * stride + width as usize * 4;
    let mut rest = &mut dst[dst_plane.offset as usize..end];
    // Tiles converted in place or in strips write each RGB row in pieces a tile (or strip)
    // wide: streamed only where every piece is whole cache lines, else a line would leave in
    // two parts at two times.
    let lines = (rest.as_ptr() as usize) % 64 == 0 && stride % 64 == 0;
    let stream = end - (dst_plane.offset as usize) >= STREAM_BYTES && (lines || reading.is_none());
    let simd = simd.map(|k| k.streaming(stream));
    let across = across(&py, bits).filter(|_| reading == Some(Reading::InPlace));
    let job = Job { k, simd, reading, across, shifts: pack.shifts(), alpha: pack.alpha_bits(), bits, width, height, py, pc, group, stride, src };
    let job = &job;
    let mut work = Vec::new();
    let mut g0 = 0;
    while g0 < groups {
        let g1 = (g0 + per).min(groups);
        let take = if g1 == groups { rest.len() } else { ((g1 - g0) * group) as usize * stride };
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut(take);
        rest = tail;
        work.push((g0..g1, mine));
        g0 = g1;
    }
    run_shares(work, |(groups, mine)| job.run(groups, mine));
    Ok(())
}

/// 8-bit RGB `from` (at `src_plane`) -> NV12 (at `dst_planes`), on `threads` threads (0:
/// [`default_threads`]): the same bytes as [`super::rgb_to_nv12`], which the tests compare,
/// a row pair at a time (sixteen pixels at a time where the CPU has AVX2).
pub fn rgb_to_nv12_fast(
    from: Fourcc,
    (matrix, range): (ColourMatrix, ColourRange),
    (width, height): (u32, u32),
    (src, src_plane): (&[u8], PlaneLayout),
    (dst, dst_planes): (&mut [u8], &[PlaneLayout]),
    threads: usize,
) -> Result<(), ColourError> {
    let pack = check_rgb_to_nv12(from, (width, height), (src.len(), src_plane), (dst.len(), dst_planes))?;
    let (yp, cp) = (dst_planes[0], dst_planes[1]);
    let (w, h) = (width as usize, height as usize);
    let (y_end, c_end) = (yp.offset as usize + (h - 1) * yp.stride as usize + w, cp.offset as usize + (h.div_ceil(2) - 1) * cp.stride as usize + w.div_ceil(2) * 2);
    if y_end > cp.offset as usize && c_end > yp.offset as usize {
        // Planes that interleave cannot be split between threads: the reference does it.
        return super::rgb_to_nv12(from, (matrix, range), (width, height), (src, src_plane), (dst, dst_planes));
    }
    let (luma, chroma) = if yp.offset < cp.offset {
        let (a, b) = dst.split_at_mut(cp.offset as usize);
        (&mut a[yp.offset as usize..y_end], &mut b[..c_end - cp.offset as usize])
    } else {
        let (a, b) = dst.split_at_mut(yp.offset as usize);
        (&mut b[..y_end - yp.offset as usize], &mut a[cp.offset as usize..c_end])
    };
    let k = RgbToYuv::new(matrix, range);
    let job = RgbJob { k, simd: RgbKernel::detect(k, pack), pack, width: w, height: h, src, src_plane, ystride: yp.stride as usize, cstride: cp.stride as usize };
    let pairs = h.div_ceil(2);
    let threads = if threads == 0 { default_threads() } else { threads }.clamp(1, pairs);
    let per = pairs.div_ceil(threads);
    let (mut luma, mut chroma) = (luma, chroma);
    let job = &job;
    let mut work = Vec::new();
    let mut p0 = 0;
    while p0 < pairs {
        let p1 = (p0 + per).min(pairs);
        let (ytake, ctake) = if p1 == pairs { (luma.len(), chroma.len()) } else { ((p1 - p0) * 2 * job.ystride, (p1 - p0) * job.cstride) };
        let (ymine, yrest) = std::mem::take(&mut luma).split_at_mut(ytake);
        let (cmine, crest) = std::mem::take(&mut chroma).split_at_mut(ctake);
        (luma, chroma) = (yrest, crest);
        work.push((p0..p1, ymine, cmine));
        p0 = p1;
    }
    run_shares(work, |(pairs, ymine, cmine)| job.run(pairs, ymine, cmine));
    Ok(())
}

/// What every thread of one RGB -> NV12 conversion shares.
struct RgbJob<'a> {
    k: RgbToYuv,
    simd: Option<RgbKernel>,
    pack: super::RgbPacking,
    width: usize,
    height: usize,
    src: &'a [u8],
    src_plane: PlaneLayout,
    ystride: usize,
    cstride: usize,
}

impl RgbJob<'_> {
    /// Row pairs `pairs` into `luma` and `chroma` (their rows from the first pair's).
    fn run(&self, pairs: std::ops::Range<usize>, luma: &mut [u8], chroma: &mut [u8]) {
        let w = self.width;
        let row = |y: usize| {
            let o = self.src_plane.offset as usize + y * self.src_plane.stride as usize;
            &self.src[o..o + 4 * w]
        };
        let mut spare = vec![0u8; w];
        for p in pairs.clone() {
            let (a, b) = (2 * p, (2 * p + 1).min(self.height - 1));
            let at = (p - pairs.start) * 2 * self.ystride;
            let split = self.ystride.min(luma.len() - at);
            let (y0, rest) = luma[at..].split_at_mut(split);
            let y0 = &mut y0[..w];
            let y1 = if b != a { &mut rest[..w] } else { &mut spare[..] };
            let co = (p - pairs.start) * self.cstride;
            let uv = &mut chroma[co..co + w.div_ceil(2) * 2];
            let done = self.simd.map_or(0, |k| k.rows([row(a), row(b)], [&mut *y0, &mut *y1], &mut *uv, w));
            self.tail([row(a), row(b)], [y0, y1], uv, done);
        }
    }

    /// Pixels `from..` of a row pair, one 2x2 block at a time (the last column, for an odd
    /// width, replicated), as the reference.
    fn tail(&self, [r0, r1]: [&[u8]; 2], [y0, y1]: [&mut [u8]; 2], uv: &mut [u8], from: usize) {
        let w = self.width;
        let px = |r: &[u8], x: usize| self.pack.unpack8(&r[4 * x..4 * x + 4]).unwrap_or_default();
        for x in from..w {
            let [r, g, b] = px(r0, x);
            y0[x] = self.k.luma(r, g, b);
            let [r, g, b] = px(r1, x);
            y1[x] = self.k.luma(r, g, b);
        }
        for cx in from / 2..w.div_ceil(2) {
            let mut s = [0i32; 3];
            for r in [r0, r1] {
                for x in [2 * cx, (2 * cx + 1).min(w - 1)] {
                    let p = px(r, x);
                    (0..3).for_each(|i| s[i] += p[i]);
                }
            }
            uv[2 * cx..2 * cx + 2].copy_from_slice(&self.k.chroma(s[0], s[1], s[2]));
        }
    }
}

/// What every thread of one conversion shares.
struct Job<'a> {
    k: YuvToRgb,
    /// The vector loop, where the CPU has one.
    simd: Option<Kernel>,
    /// How the vector loop reads the tiles, other than through a [`Window`] ([`reading`]);
    /// only where there is a vector loop.
    reading: Option<Reading>,
    /// How [`Job::run_tiles`] converts bands eight rows at a time ([`Job::band_across`]),
    /// where it does rather than tile by tile ([`across`]).
    across: Option<Across>,
    shifts: [u32; 4],
    /// The pixel word's alpha (or padding) bits: all ones.
    alpha: u32,
    bits: u32,
    width: u32,
    height: u32,
    py: PlaneGeometry,
    pc: PlaneGeometry,
    group: u32,
    stride: usize,
    src: &'a [u8],
}

impl Job<'_> {
    /// Converts groups `groups` into `out` (its rows, from the first group's first row).
    fn run(&self, groups: std::ops::Range<u32>, out: &mut [u8]) {
        match (self.reading, &self.simd) {
            (Some(Reading::InPlace), Some(k)) => return self.run_tiles(k, groups, out),
            (Some(Reading::Strips), Some(k)) => return self.run_strips(k, groups, out),
            _ => {}
        }
        let rows = self.rows(groups);
        let (mut luma, mut chroma) = (Window::new(&self.py, self.src), Window::new(&self.pc, self.src));
        // Each plane's next window of tiles is fetched while this one converts, so its
        // detile finds them in cache instead of stalling on memory.
        let (mut luma_ahead, mut chroma_ahead) = (Prefetch::default(), Prefetch::default());
        let width = self.width as usize;
        // Steps: one per row pair, so a window's worth of rows fetches the next window.
        let (luma_steps, chroma_steps) = (luma.rows_per_window() / 2, chroma.rows_per_window());
        for y in rows.clone().step_by(2) {
            if let Some(ahead) = chroma.fetch(y / 2, chroma_steps) {
                chroma_ahead = ahead;
            }
            // Both rows of a pair lie in one window (windows hold an even number of rows),
            // and share their chroma row.
            if let Some(ahead) = luma.fetch(y, luma_steps) {
                luma_ahead = ahead;
            }
            let pair = y + 1 < rows.end;
            let (c, y0, y1) = (chroma.get(y / 2), luma.get(y), if pair { luma.get(y + 1) } else { &[][..] });
            let o = (y - rows.start) as usize * self.stride;
            let first = self.stride.min(out.len() - o);
            let (out0, out1) = out[o..].split_at_mut(first);
            let (out0, mut out1) = (&mut out0[..width * 4], if pair { Some(&mut out1[..width * 4]) } else { None });
            // A pair at once shares its chroma terms, where each row starts a cache line:
            // else the line two rows share would be streamed out in two pieces, at two times.
            let lines = (out0.as_ptr() as usize % 64 == 0 && self.stride % 64 == 0) || out1.is_none();
            let done = match (&self.simd, lines) {
                (None, _) => 0,
                (Some(k), true) => k.rows([y0, y1], c, (&mut *out0, out1.as_deref_mut()), width),
                (Some(k), false) => {
                    let done = k.rows([y0, y0], c, (&mut *out0, None), width);
                    out1.as_deref_mut().map_or(done, |o| done.min(k.rows([y1, y1], c, (o, None), width)))
                }
            };
            let b = sample_bytes(self.bits) * done;
            for (yrow, orow) in [(y0, Some(out0)), (y1, out1)] {
                let Some(orow) = orow else { continue };
                if self.bits == 8 {
                    self.row8(&yrow[b..], &c[b..], &mut orow[4 * done..], width - done);
                } else {
                    self.row10(&yrow[b..], &c[b..], &mut orow[4 * done..], width - done);
                }
            }
            luma_ahead.step(self.src);
            chroma_ahead.step(self.src);
        }
        if let Some(k) = &self.simd {
            k.fence();
        }
    }

    /// The rows of groups `groups`.
    fn rows(&self, groups: std::ops::Range<u32>) -> std::ops::Range<u32> {
        groups.start * self.group..(groups.end * self.group).min(self.height)
    }

    /// The luma and the chroma plane's tiled bytes.
    fn planes(&self) -> (&[u8], &[u8]) {
        let plane = |p: &PlaneGeometry| &self.src[p.offset as usize..(p.offset + p.size) as usize];
        (plane(&self.py), plane(&self.pc))
    }

    /// As [`Job::run`], reading the tiles where they lie ([`Reading::InPlace`]): band by
    /// band, each tile's rows (and its chroma tile's) in one call of the vector loop, which
    /// writes the tile's piece of each RGB row. The tiled frame is read in its own order, a
    /// few KiB a tile, and nothing is copied: the windows' detile was most of what the fused
    /// conversion cost beyond the linear one. Measured at 4K -> XR24, fused ÷ linear on one
    /// thread, taking turns: samsung-64x32 0.89 (windows 0.71), allwinner-32x32 0.90 (0.75),
    /// nv12-16l32s 0.70-0.85 (0.72), 0.80-0.91 in runs of [`RUN_TILES`]. Where [`across`],
    /// whole eight-row groups of a band go first, across the band or in strips
    /// ([`Job::band_across`]), and tile by tile ([`Job::band_by_tile`]) takes what they
    /// leave.
    fn run_tiles(&self, k: &Kernel, groups: std::ops::Range<u32>, out: &mut [u8]) {
        let (rows, (py, pc)) = (self.rows(groups), (&self.py, &self.pc));
        let th = py.tile_height;
        let tile_px = py.tile_width as usize / sample_bytes(self.bits);
        let (mut ybases, mut cbases) = (Vec::with_capacity(py.tiles_x as usize), Vec::with_capacity(pc.tiles_x as usize));
        let mut blocks = (Vec::new(), Vec::new());
        // A share starts on an even row, inside a band or on its edge.
        for band in rows.start / th..rows.end.div_ceil(th) {
            let (top, bottom) = ((band * th).max(rows.start), rows.end.min(band * th + th));
            band_tile_offsets(py, band, &mut ybases);
            // The band's chroma rows, in one chroma band (`reading`).
            band_tile_offsets(pc, top / 2 / pc.tile_height, &mut cbases);
            let band = Band { index: band, ybases: &ybases, cbases: &cbases };
            let (end, px) = match self.across {
                Some(how) => self.band_across(k, how, band, (top, bottom), &mut blocks, (&mut *out, rows.start)),
                None => (top, 0),
            };
            // What the groups leave: the pixels past their blocks, and the rows below them.
            self.band_by_tile(k, band, (top, end), px / tile_px, (&mut *out, rows.start));
            self.band_by_tile(k, band, (end, bottom), 0, (&mut *out, rows.start));
        }
        k.fence();
    }

    /// Rows `top..bottom` of `band`, from tile `tx` on, tile by tile ([`Job::run_tiles`]),
    /// into `out` (whose rows start at the frame's row `first`).
    fn band_by_tile(&self, k: &Kernel, band: Band, (top, bottom): (u32, u32), mut tx: usize, (out, first): (&mut [u8], u32)) {
        let Band { index: band, ybases, cbases } = band;
        let ((py, pc), (luma, chroma)) = ((&self.py, &self.pc), self.planes());
        let (th, tw) = (py.tile_height, py.tile_width as usize);
        let tile_px = tw / sample_bytes(self.bits);
        let width = self.width as usize;
        let tiles = ((py.tile_height * py.tile_width) as usize, (pc.tile_height * pc.tile_width) as usize);
        if top >= bottom {
            return;
        }
        let skip = (top - band * th) as usize * tw;
        let n = (bottom - top) as usize;
        let into = (top / 2 % pc.tile_height) as usize * tw;
        while tx < ybases.len() && tx * tile_px < width {
            let x0 = tx * tile_px;
            let o = (top - first) as usize * self.stride + 4 * x0;
            // Tiles a block wide (nv12-16l32s), back to back: a run of them in one call.
            let run = if tile_px == 16 && n % 2 == 0 { block_run(&ybases[tx..], &cbases[tx..], tiles, ((width - x0) / 16).min(RUN_TILES)) } else { 0 };
            if run > 1 {
                let (yt, ct) = (ybases[tx] + skip, cbases[tx] + into);
                let (ytile, ctile) = tiles;
                let y = &luma[yt..yt + (run - 1) * ytile + n * tw];
                let c = &chroma[ct..ct + (run - 1) * ctile + n / 2 * tw];
                let piece = &mut out[o..o + (n - 1) * self.stride + 64 * run];
                let steps = Steps { luma_row: tw, chroma_row: tw, out_row: self.stride, luma_block: ytile, chroma_block: ctile };
                if k.tile(y, c, piece, steps, (16 * run, n / 2), &Ahead::NONE) == 16 * run {
                    tx += run;
                    continue;
                }
            }
            let (yt, ct) = (ybases[tx], cbases[tx]);
            let w = tile_px.min(width - x0);
            let piece = &mut out[o..o + (n - 1) * self.stride + 4 * w];
            self.tile(k, &luma[yt + skip..yt + skip + n * tw], &chroma[ct + into..ct + into + n.div_ceil(2) * tw], piece, w, &Ahead::NONE);
            tx += 1;
        }
    }

    /// Rows `top..bottom` of `band` eight at a time ([`Kernel::groups`]), across the band or
    /// in strips as `how` says, fetching lines ahead as it says (`blocks`: buffers for the
    /// blocks' offsets and their lines), into `out` (whose rows start at the frame's row
    /// `first`): returns the row it stopped at and how many pixels of each row before it it
    /// wrote, the rest being [`Job::band_by_tile`]'s.
    fn band_across(&self, k: &Kernel, how: Across, band: Band, (top, bottom): (u32, u32), blocks: &mut (Vec<[usize; 2]>, Vec<[usize; 2]>), (out, first): (&mut [u8], u32)) -> (u32, usize) {
        let Band { index: band, ybases, cbases } = band;
        let ((py, pc), (luma, chroma)) = ((&self.py, &self.pc), self.planes());
        let (th, tw) = (py.tile_height, py.tile_width as usize);
        let per_tile = tw / 16;
        let count = (self.width as usize / 16).min(ybases.len().min(cbases.len()) * per_tile);
        if top % 2 != 0 || count == 0 {
            return (top, 0);
        }
        // Where block b's rows start, and its share of its tile's lines (a group of a tile
        // is eight rows and four chroma rows: two lines and one a block), from the band's
        // first row and its chroma band's; each group's slices start `skip` and `into` on
        // from those.
        let (offsets, lines) = blocks;
        offsets.clear();
        offsets.extend((0..count).map(|b| (b / per_tile, 16 * (b % per_tile))).map(|(t, x)| [ybases[t] + x, cbases[t] + x]));
        lines.clear();
        lines.extend((0..count).map(|b| (b / per_tile, b % per_tile)).map(|(t, j)| [ybases[t] + 128 * j, cbases[t] + 64 * j]));
        let strip = how.strip(count);
        // Every strip converts the same groups; should one stop early, the rows below the
        // earliest stop are all left to the tiles (which write the same bytes again).
        let mut end = bottom;
        for b0 in (0..count).step_by(strip) {
            let b1 = (b0 + strip).min(count);
            let ahead = how.ahead(lines, (b0, b1));
            let mut y0 = top;
            while y0 + 8 <= end {
                let (skip, into) = ((y0 - band * th) as usize * tw, (y0 / 2 % pc.tile_height) as usize * tw);
                let o = (y0 - first) as usize * self.stride + 64 * b0;
                let (y, c) = (&luma[skip.min(luma.len())..], &chroma[into.min(chroma.len())..]);
                if out.get_mut(o..).map_or(0, |rows| k.groups(y, c, rows, (self.stride, tw), &offsets[b0..b1], ahead)) == 0 {
                    break;
                }
                y0 += 8;
            }
            end = y0;
        }
        (end, 16 * count)
    }

    /// As [`Job::run`], for tiles too narrow for [`Job::run_tiles`]: strips ([`strip`])
    /// detiled into buffers that stay in L1 ([`detile_strip`]), each then converted as one
    /// tile, the next strip's tiles fetched meanwhile where [`Job::fetches_ahead`]. Windows
    /// of whole rows did not stay in L1. Whole eight-row groups of 8-bit samples go first,
    /// read in place ([`Job::run_narrow`]), and the strips are then only what those leave.
    fn run_strips(&self, k: &Kernel, groups: std::ops::Range<u32>, out: &mut [u8]) {
        let (rows, (py, pc), (luma, chroma)) = (self.rows(groups), (&self.py, &self.pc), self.planes());
        let (end, px) = self.run_narrow(k, rows.clone(), out);
        let (strip_rows, strip_px) = strip(py, pc);
        let sb = strip_px * sample_bytes(self.bits);
        let fetch = self.fetches_ahead();
        let mut strips = self.strips(rows.start..end, px).chain(self.strips(end..rows.end, 0)).peekable();
        // Frames of whole groups and blocks leave no strips, nor need their buffers.
        let (mut ybuf, mut cbuf) = match strips.peek() {
            Some(_) => (vec![0u8; sb * strip_rows as usize], vec![0u8; sb * strip_rows.div_ceil(2) as usize]),
            None => (Vec::new(), Vec::new()),
        };
        while let Some(s) = strips.next() {
            let (y0, n) = (s.rows.0, (s.rows.1 - s.rows.0) as usize);
            detile_strip(py, luma, s.rows, (s.tx0, s.tiles), &mut ybuf, sb);
            detile_strip(pc, chroma, s.chroma_rows(), (s.tx0, s.tiles), &mut cbuf, sb);
            let ahead = strips.peek().filter(|_| fetch).map_or(Ahead::NONE, |next| self.strip_ahead(next));
            let o = (y0 - rows.start) as usize * self.stride + 4 * s.x0;
            let piece = &mut out[o..o + (n - 1) * self.stride + 4 * s.width];
            self.tile(k, &ybuf[..n * sb], &cbuf[..n.div_ceil(2) * sb], piece, s.width, &ahead);
        }
        k.fence();
    }

    /// The whole eight-row groups of `rows`, from the first, of tiles four or eight pixels
    /// wide (nv12-4l4, nv12-8l128), read where they lie ([`Kernel::narrow`]) rather than in
    /// strips: returns the row it stopped at and how many pixels of each row before it it
    /// wrote, the rest being [`Job::run_strips`]'s. Each call converts a group across the
    /// share's whole width, its RGB rows written front to back, eight at a time.
    fn run_narrow(&self, k: &Kernel, rows: std::ops::Range<u32>, out: &mut [u8]) -> (u32, usize) {
        let (py, pc) = (&self.py, &self.pc);
        let tall = match (py.tile_width, py.tile_height, pc.tile_width, pc.tile_height) {
            (4, 4, 4, 4) => false,
            (8, 128, 8, 128) => true,
            _ => return (rows.start, 0),
        };
        if self.bits != 8 || rows.start % 8 != 0 {
            return (rows.start, 0);
        }
        let (luma, chroma) = self.planes();
        // Where rows `y0..y1` of plane `p` start: a band's, or (nv12-8l128) a tile's rows.
        let at = |p: &PlaneGeometry, y0: u32, y1: u32| strip_pieces(p, (y0, y1), 0).map(|s| (s.first, s.tile_bytes));
        let (mut y0, mut px) = (rows.start, 0);
        while y0 + 8 <= rows.end {
            let mut ys = at(py, y0, y0 + 8);
            let (Some((l, tile)), Some((c, _))) = (ys.next(), at(pc, y0 / 2, y0 / 2 + 4).next()) else { break };
            let layout = if tall {
                Narrow::Tall { tile }
            } else {
                let Some(band) = ys.next().and_then(|(b, _)| b.checked_sub(l)) else { break };
                Narrow::Four { band }
            };
            let o = (y0 - rows.start) as usize * self.stride;
            let done = k.narrow(&luma[l.min(luma.len())..], &chroma[c.min(chroma.len())..], &mut out[o..], self.stride, self.width as usize, layout);
            // Every group is as wide; a group refused (too short a slice) is the strips'.
            if done == 0 || (px != 0 && done != px) {
                break;
            }
            (y0, px) = (y0 + 8, done);
        }
        (y0, px)
    }

    /// The strips of [`Job::run_strips`] over `rows`, from pixel `x` of each, in the order
    /// it converts them: row by row of strips, each row of them from the left. They start on
    /// multiples of their rows (so on bands) where the share does not.
    fn strips(&self, rows: std::ops::Range<u32>, x: usize) -> impl Iterator<Item = Strip> {
        let (strip_rows, px) = strip(&self.py, &self.pc);
        let (bytes, tw, width) = (sample_bytes(self.bits), self.py.tile_width as usize, self.width as usize);
        let end = rows.end;
        // Where the strip that starts at row y ends: the next multiple of its rows.
        let bottom = move |y: u32| ((y / strip_rows + 1) * strip_rows).min(end);
        let tops = std::iter::successors(Some(rows.start), move |&y| Some(bottom(y))).take_while(move |&y| y < end);
        tops.flat_map(move |y0| {
            let y1 = bottom(y0);
            (x..width).step_by(px).map(move |x0| {
                let w = px.min(width - x0);
                Strip { rows: (y0, y1), x0, width: w, tx0: x0 * bytes / tw, tiles: (w * bytes).div_ceil(tw) }
            })
        })
    }

    /// Whether [`Job::run_strips`] has the vector loop fetch each next strip's tiles
    /// ([`Job::strip_ahead`]): where strips are not whole tiles of both planes. Whole tiles
    /// (nv12-4l4's strips are whole bands) lie front to back, which the CPU's own prefetcher
    /// follows, and fetching them as well cost nv12-4l4 10%; nv12-8l128's strips hold half
    /// of each chroma tile, 512 bytes a KiB apart.
    fn fetches_ahead(&self) -> bool {
        let rows = strip(&self.py, &self.pc).0;
        rows % self.py.tile_height != 0 || rows.div_ceil(2) % self.pc.tile_height != 0
    }

    /// The tiled bytes of strip `s` of both planes, for the vector loop to fetch while it
    /// converts the strip before: fetched only when its detile came to them, they stalled
    /// it on memory while no RGB row was being written.
    fn strip_ahead(&self, s: &Strip) -> Ahead<'_> {
        let (luma, chroma) = self.planes();
        let mut ahead = Ahead::NONE;
        for (p, plane, rows) in [(&self.py, luma, s.rows), (&self.pc, chroma, s.chroma_rows())] {
            for piece in strip_pieces(p, rows, s.tx0) {
                ahead.add(plane, piece.first, (piece.rows * p.tile_width as usize, piece.tile_bytes, s.tiles));
            }
        }
        ahead
    }

    /// The first `w` pixels of the rows of one tile (`y`, its rows back to back, as many as
    /// the piece has; `c`, its chroma rows) into `piece` (rows `self.stride` apart): row
    /// pairs in one call of the vector loop, a last odd row alone, and what is left of each
    /// row (fewer than sixteen pixels) one pixel at a time.
    fn tile(&self, k: &Kernel, y: &[u8], c: &[u8], piece: &mut [u8], w: usize, ahead: &Ahead) {
        let stride = self.stride;
        let n = (piece.len() - 4 * w) / stride + 1;
        let tw = y.len() / n;
        let pairs = n / 2;
        let done = if pairs > 0 { k.tile(y, c, piece, Steps::rows(self.bits == 10, (tw, tw, stride)), (w, pairs), ahead) } else { 0 };
        if done == w && n % 2 == 0 {
            return;
        }
        let b = sample_bytes(self.bits);
        for r in 0..n {
            let (yr, cr) = (&y[r * tw..r * tw + tw], &c[r / 2 * tw..r / 2 * tw + tw]);
            let row = &mut piece[r * stride..r * stride + 4 * w];
            let from = if r < 2 * pairs { done } else { k.rows([yr, yr], cr, (&mut *row, None), w) };
            if from == w {
                continue;
            }
            if self.bits == 8 {
                self.row8(&yr[b * from..], &cr[b * from..], &mut row[4 * from..], w - from);
            } else {
                self.row10(&yr[b * from..], &cr[b * from..], &mut row[4 * from..], w - from);
            }
        }
    }

    /// The first `width` pixels of a row (from an even pixel), one at a time.
    fn row8(&self, y: &[u8], c: &[u8], out: &mut [u8], width: usize) {
        let [sr, sg, sb, _] = self.shifts;
        let (alpha, k) = (self.alpha, &self.k);
        let word = |l: u8, t: [i32; 3]| {
            let [r, g, b] = k.pixel(l as i32, t);
            ((u32::from(r) << sr) | (u32::from(g) << sg) | (u32::from(b) << sb) | alpha).to_le_bytes()
        };
        let pairs = width / 2;
        for ((px, ys), uv) in out.chunks_exact_mut(8).zip(y.chunks_exact(2)).zip(c.chunks_exact(2)).take(pairs) {
            let t = k.chroma_terms(uv[0] as i32, uv[1] as i32);
            px[..4].copy_from_slice(&word(ys[0], t));
            px[4..].copy_from_slice(&word(ys[1], t));
        }
        if width % 2 == 1 {
            let x = width - 1;
            let t = k.chroma_terms(c[x / 2 * 2] as i32, c[x / 2 * 2 + 1] as i32);
            out[x * 4..x * 4 + 4].copy_from_slice(&word(y[x], t));
        }
    }

    /// As [`Job::row8`], for 10-bit samples.
    fn row10(&self, y: &[u8], c: &[u8], out: &mut [u8], width: usize) {
        let [sr, sg, sb, _] = self.shifts;
        let (alpha, k) = (self.alpha, &self.k);
        let s = |b: &[u8]| (u16::from_le_bytes([b[0], b[1]]) >> 6) as i32;
        let word = |l: i32, t: [i32; 3]| {
            let [r, g, b] = k.pixel(l, t);
            ((u32::from(r) << sr) | (u32::from(g) << sg) | (u32::from(b) << sb) | alpha).to_le_bytes()
        };
        let (y, out) = (&y[..(2 * width).min(y.len())], &mut out[..4 * width]);
        for ((px, ys), uv) in out.chunks_mut(8).zip(y.chunks(4)).zip(c.chunks_exact(4)) {
            let t = k.chroma_terms(s(&uv[..2]), s(&uv[2..]));
            px[..4].copy_from_slice(&word(s(&ys[..2]), t));
            if px.len() == 8 && ys.len() == 4 {
                px[4..].copy_from_slice(&word(s(&ys[2..]), t));
            }
        }
    }
}

/// The rows of one plane that the conversion is reading: a linear plane's own rows, or a
/// window of a tiled plane's bands detiled into a buffer small enough to stay in cache
/// while its rows convert (one band where the detile can start at any band, else the
/// bands a Z-flip-Z pair ties together), the next window's tiles fetched meanwhile.
/// (Measured slower for 4K samsung-64x32 on one thread: detiling the next band a few tiles
/// at a time between rows, double-buffered, 6.9 against 9.4 GB/s; reading the tiles in
/// place with each next tile row fetched a row ahead, 0.35-0.55x the linear conversion
/// against 0.6x; converting the band in narrow vertical strips, 0.4x, its RGB rows written
/// in short pieces, with a call of the loop per row; one call per tile, which keeps the
/// loop's constants in registers, is now [`Job::run_tiles`] and is faster than windows.
/// Windows of 4 to 32 rows of a band all measured alike.) Tried again on
/// 2026-11-26, fused ÷ linear on one thread, taking turns: the vector loop reading each
/// block straight from its tile, the next band group fetched ahead, 0.60 against the
/// window's 0.68 for 3840x256 samsung-64x32 (its input in L2) and 0.59 against 0.68 for
/// nv12-16l32s; windows of 2, 4 and 8 rows inside the band group, the next group fetched,
/// 0.45, 0.54 and 0.67 against 0.73; the window copied row by row from the fetched band,
/// alike for samsung-64x32 and 0.58 against 0.69 for nv12-16l32s; each row pair gathered
/// from its tiles into rows that stay in L1 (the band's tile offsets found once), 0.65
/// against 0.77 for samsung-64x32 and 0.32 against 0.71 for nv12-16l32s; prefetch hints T1
/// and T2 alike, NTA or none 0.58-0.59.
struct Window<'a> {
    p: PlaneGeometry,
    /// The plane's bytes.
    plane: &'a [u8],
    /// Where the plane starts in the source.
    base: usize,
    /// Rows per window (0 for a linear plane, which needs none).
    rows: u32,
    buf: Vec<u8>,
    /// The first row of the window in `buf`.
    first: Option<u32>,
}

/// One band of tiles that [`Job::run_tiles`] reads in place: its index, and where each of
/// its tiles starts in the luma plane and in the chroma band that holds its chroma rows.
#[derive(Clone, Copy)]
struct Band<'a> {
    index: u32,
    ybases: &'a [usize],
    cbases: &'a [usize],
}

/// One strip of [`Job::run_strips`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Strip {
    /// Its luma rows, `y0..y1`.
    rows: (u32, u32),
    /// Its first pixel, and its pixels.
    x0: usize,
    width: usize,
    /// Its first tile column, and its tile columns (both planes alike).
    tx0: usize,
    tiles: usize,
}

impl Strip {
    fn chroma_rows(&self) -> (u32, u32) {
        (self.rows.0 / 2, self.rows.1.div_ceil(2))
    }
}

/// How many blocks ahead [`Job::band_across`] fetches: at 4K -> XR24 on one thread, 8-16
/// measured alike, 32 and 2-4 slower.
const GROUP_AHEAD: usize = 12;

/// Tiles a block wide converted in one call of the vector loop ([`Job::run_tiles`]): 8 KiB
/// of nv12-16l32s luma and 4 KiB of chroma, read front to back, and 1 KiB of each RGB row.
/// Measured at 4K nv12-16l32s -> XR24, fused ÷ linear on one thread, taking turns: a call
/// per tile 0.70-0.85, runs of 8 0.76-0.86, of 16 0.80-0.91, of 32 0.66-0.80, of a whole
/// band (240) 0.70-0.79.
const RUN_TILES: usize = 16;

/// How many of the tiles at `ybases` and `cbases` (at most `most`) lie back to back in both
/// planes (tiles of `ytile` and `ctile` bytes), from the first.
fn block_run(ybases: &[usize], cbases: &[usize], (ytile, ctile): (usize, usize), most: usize) -> usize {
    let (Some(&y0), Some(&c0)) = (ybases.first(), cbases.first()) else { return 0 };
    ybases.iter().zip(cbases).take(most).enumerate().take_while(|&(i, (&y, &c))| y == y0 + i * ytile && c == c0 + i * ctile).count()
}

/// The rows and pixels of a strip of [`Job::run_strips`]: whole bands of both planes (the
/// four-tile detile of nv12-4l4 takes a whole band: 8 rows) up to 128 rows (nv12-8l128: a
/// luma band, half a chroma band), and as many pixels as make 16 KiB of luma (at most 512),
/// which stay in L1 with their chroma. Measured at 4K -> XR24, fused ÷ linear on one thread,
/// taking turns, when strips converted whole frames (they now take only what
/// [`Job::run_narrow`] leaves, which measured faster for both layouts):
/// - nv12-4l4: 8 rows 0.76-0.80 with 256-1024 pixels, 0.60-0.71 with 64-128; 4 rows (half a
///   chroma band, detiled a row at a time) 0.28-0.30. Windows of whole rows: 0.55-0.71.
/// - nv12-8l128: 128 rows of 128 pixels (whole tiles, read front to back) 0.72-0.77; 64
///   rows 0.66-0.79; 32 rows 0.57-0.75; 8 or 16 rows or 64 pixels 0.28-0.72. Windows of
///   whole rows: 0.64-0.69. Fetching the next strip's tiles between calls of the loop
///   changed nothing; the loop fetching them, a few lines a row pair
///   ([`super::colour_simd::Ahead`]), 0.64-0.68 -> 0.71-0.84 (2026-11-26, the strips' own
///   detile then finding its tiles in cache: 0.27 ms a frame, against 0.6-1.1 unfetched).
///   With it, 256 rows or 256-512 pixels measured alike.
fn strip(py: &PlaneGeometry, pc: &PlaneGeometry) -> (u32, usize) {
    let (th, both) = (py.tile_height, 2 * pc.tile_height);
    let rows = if both % th == 0 { both } else { th * both }.min(128);
    (rows, (16384 / rows as usize).min(512))
}

/// Rows of a window that starts inside a band ([`partial_bands`]): a band of nv12-8l128
/// (128 rows, 480 KiB a plane at 4K) would not stay in cache beside the other plane's
/// window and the next windows' tiles. Measured at 4K nv12-8l128 -> XR24, fused ÷ linear
/// on one thread / two: whole bands read row by row 0.48 / 0.64; 32-row windows, four tiles
/// at a time (`fast::narrow_band`), each tile's part of the next window fetched, 0.71 /
/// 0.83.
const PARTIAL_WINDOW_ROWS: u32 = 32;

impl<'a> Window<'a> {
    fn new(p: &PlaneGeometry, src: &'a [u8]) -> Self {
        let plane = &src[p.offset as usize..(p.offset + p.size) as usize];
        let rows = if p.kind == AddressKind::Linear {
            0
        } else if partial_bands(p) && p.tile_height > PARTIAL_WINDOW_ROWS && p.tile_height % PARTIAL_WINDOW_ROWS == 0 {
            PARTIAL_WINDOW_ROWS
        } else if tile_by_tile(p) {
            p.tile_height
        } else {
            band_quantum(p) * p.tile_height
        };
        let buf = spare_window(rows as usize * p.width_bytes as usize);
        Window { p: *p, plane, base: p.offset as usize, rows, buf, first: None }
    }

    /// Rows in one window (1 for a linear plane).
    fn rows_per_window(&self) -> u32 {
        self.rows.max(1)
    }

    /// Makes row `r` available to [`Window::get`], detiling its window first if it is not
    /// the one held; returns then the source region of the next window's tiles, to fetch
    /// ahead over `steps` steps.
    fn fetch(&mut self, r: u32, steps: u32) -> Option<Prefetch> {
        if self.rows == 0 {
            return None;
        }
        let (p, wb) = (&self.p, self.p.width_bytes as usize);
        let w0 = r / self.rows * self.rows;
        if self.first == Some(w0) {
            return None;
        }
        let w1 = (w0 + self.rows).min(p.rows);
        detile_rows(p, self.plane, (w0, w1), &mut self.buf[..(w1 - w0) as usize * wb], wb);
        self.first = Some(w0);
        let next = (w1, (w1 + self.rows).min(p.rows));
        (next.0 < next.1).then(|| {
            let (start, len, step, count) = tiled_rows_region(p, next);
            Prefetch::new(self.base + start, (len, step, count), steps)
        })
    }

    /// Row `r`'s visible bytes: a linear plane's own, or from the window [`Window::fetch`]
    /// made (which must hold `r`).
    fn get(&self, r: u32) -> &[u8] {
        let (p, wb) = (&self.p, self.p.width_bytes as usize);
        let at = if self.rows == 0 {
            r as usize * p.padded_width_bytes as usize
        } else {
            let w0 = self.first.unwrap_or(0);
            debug_assert!(r >= w0 && r < w0 + self.rows, "row {r} is outside the window held");
            (r - w0) as usize * wb
        };
        let rows = if self.rows == 0 { self.plane } else { &self.buf[..] };
        &rows[at..at + wb]
    }
}

impl Drop for Window<'_> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let mut spare = SPARE_WINDOWS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if spare.len() < MAX_SPARE_WINDOWS {
            spare.push(std::mem::take(&mut self.buf));
        }
    }
}

/// Window buffers of earlier conversions, kept for the next: a window is a few hundred KiB
/// (a 4K samsung-64x32 band pair is 240 KiB a plane), which the allocator hands out as
/// fresh pages, every frame, to be faulted in one by one (glibc maps them, or trims a
/// thread's arena and faults them back). Measured at 4K samsung-64x32 -> XR24 on two
/// threads: 56 page faults a frame before, none after (`tests/fused_scratch.rs`); fused ÷
/// linear NV12 -> XR24 0.75-0.77 before, 0.85-0.87 after.
static SPARE_WINDOWS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Spare windows kept at most: two planes for each of [`default_threads`]'s at most 8
/// threads, twice over (about 8 MiB at 4K).
const MAX_SPARE_WINDOWS: usize = 32;

/// A window buffer of at least `len` bytes, a spare one where there is one. Its bytes are
/// whatever the last window left: a window's rows are always detiled before they are read.
fn spare_window(len: usize) -> Vec<u8> {
    if len == 0 {
        return Vec::new();
    }
    let spare = SPARE_WINDOWS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
    let mut buf = spare.unwrap_or_default();
    if buf.len() < len {
        buf.resize(len, 0);
    }
    buf
}

/// Bytes of the source to bring into cache, a few cache lines per step: `count` runs of
/// `len` bytes, `step` apart.
#[derive(Default)]
struct Prefetch {
    /// The next line to fetch.
    at: usize,
    /// Where the run being fetched ends.
    run_end: usize,
    len: usize,
    step: usize,
    /// Runs left after this one.
    runs_left: usize,
    per_step: usize,
}

impl Prefetch {
    /// The runs `(len, step, count)` from `start`, spread over `steps` steps.
    fn new(start: usize, (len, step, count): (usize, usize, usize), steps: u32) -> Self {
        let lines = len.div_ceil(64) * count;
        let per_step = lines.div_ceil(steps.max(1) as usize);
        let runs_left = count.saturating_sub(1);
        let run_end = if count == 0 { start } else { start + len };
        Prefetch { at: start, run_end, len, step, runs_left, per_step }
    }

    /// Asks for the next `per_step` cache lines of `src`.
    fn step(&mut self, src: &[u8]) {
        for _ in 0..self.per_step {
            if self.at >= self.run_end {
                if self.runs_left == 0 {
                    return;
                }
                self.runs_left -= 1;
                self.at = self.run_end - self.len + self.step;
                self.run_end = self.at + self.len;
            }
            if self.at >= src.len() {
                self.runs_left = 0;
                self.run_end = self.at;
                return;
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint that never faults and reads nothing the program
            // sees; the address is inside `src` all the same (checked above).
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(src.as_ptr().add(self.at).cast());
            }
            self.at += 64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::colour::{yuv_to_rgb, RGB10_FORMATS, RGB8_FORMATS};
    use crate::tiling::{detile_to_vec, packed_planes};

    use crate::tiling::test_pattern as pattern;

    /// Every layout NV12 has, every RGB format, odd sizes, padded RGB rows, 1 and 3
    /// threads, by the fastest route and through windows: the fused path writes what
    /// detile-then-reference writes.
    #[test]
    fn fused_equals_detile_then_reference() {
        for layout in TileLayout::ALL {
            for (w, h) in [(2u32, 2u32), (33, 17), (130, 66), (320, 250)] {
                let Ok(g) = tiled_size(layout, Fourcc::NV12, w, h) else { continue };
                let tiled = pattern(g.size as usize, w * 7 + h);
                let linear = detile_to_vec(layout, Fourcc::NV12, w, h, &tiled).expect("detile");
                let planes = packed_planes(Fourcc::NV12, w, h).expect("planes");
                for to in RGB8_FORMATS.into_iter().chain(RGB10_FORMATS) {
                    for (m, r) in [(ColourMatrix::Bt601, ColourRange::Limited), (ColourMatrix::Bt2020, ColourRange::Full)] {
                        let plane = PlaneLayout::linear(8, w as u64 * 4 + 12, h);
                        let len = 8 + plane.stride as usize * h as usize;
                        let mut want = vec![0x5au8; len];
                        yuv_to_rgb((Fourcc::NV12, to), (m, r), (w, h), (&linear, &planes), (&mut want, plane)).expect("reference");
                        for (threads, route) in [(1, Route::Fastest), (3, Route::Fastest), (1, Route::Windows), (3, Route::Windows)] {
                            let mut got = vec![0x5au8; len];
                            fused(TiledFrame { layout, fourcc: Fourcc::NV12, extent: (w, h) }, to, (m, r), &tiled, (&mut got, plane), threads, route).expect("fast");
                            assert!(got == want, "{layout} -> {to} {w}x{h} {m:?} {r:?} on {threads} threads, windows {}", route == Route::Windows);
                        }
                    }
                }
            }
        }
    }

    /// Frames of [`STREAM_BYTES`] and more are written with non-temporal stores: the same
    /// bytes, on one thread and on two (and through windows), from rows that start cache
    /// lines (converted a pair at a time, or in tiles' pieces), 32 bytes into one and 16
    /// bytes into one (a row at a time, or in pieces not streamed).
    #[test]
    fn large_frames_stream_the_same_bytes() {
        let (w, h) = (1024u32, 1040u32);
        assert!(w as usize * 4 * h as usize >= STREAM_BYTES);
        let planes = packed_planes(Fourcc::NV12, w, h).expect("planes");
        for layout in [TileLayout::Linear, TileLayout::Samsung64x32, TileLayout::Nv12_16L32S, TileLayout::Allwinner32x32, TileLayout::Nv12_4L4, TileLayout::Nv12_8L128] {
            let g = tiled_size(layout, Fourcc::NV12, w, h).expect("geometry");
            let tiled = pattern(g.size as usize, 5);
            let linear = detile_to_vec(layout, Fourcc::NV12, w, h, &tiled).expect("detile");
            let len = w as usize * 4 * h as usize;
            let mut want = vec![0u8; len];
            yuv_to_rgb((Fourcc::NV12, Fourcc::XRGB8888), (ColourMatrix::Bt709, ColourRange::Limited), (w, h), (&linear, &planes), (&mut want, PlaneLayout::linear(0, w as u64 * 4, h))).expect("reference");
            let mut buf = vec![0u8; len + 128];
            let line = buf.as_ptr().align_offset(64);
            for into_line in [0usize, 32, 16] {
                let at = line + into_line;
                for (threads, route) in [(1, Route::Fastest), (2, Route::Fastest), (2, Route::Windows)] {
                    buf.fill(0);
                    let plane = PlaneLayout::linear(0, w as u64 * 4, h);
                    let colour = (ColourMatrix::Bt709, ColourRange::Limited);
                    fused(TiledFrame { layout, fourcc: Fourcc::NV12, extent: (w, h) }, Fourcc::XRGB8888, colour, &tiled, (&mut buf[at..at + len], plane), threads, route).expect("fast");
                    assert!(buf[at..at + len] == want[..], "{layout}, rows {into_line} bytes into a line, on {threads} threads, windows {}", route == Route::Windows);
                }
            }
        }
    }

    /// The layouts whose tiles the vector loop reads where they lie, those it reads in strips,
    /// and those it reads through windows.
    #[test]
    fn which_tiles_convert_in_place() {
        let planes = |layout, fourcc| tiled_size(layout, fourcc, 256, 64).expect("geometry").planes;
        for (layout, fourcc, yes) in [
            (TileLayout::Samsung64x32, Fourcc::NV12, true),
            (TileLayout::Allwinner32x32, Fourcc::NV12, true),
            (TileLayout::Nv12_16L32S, Fourcc::NV12, true),
            (TileLayout::I915X, Fourcc::NV12, true),
            (TileLayout::I915X, Fourcc::P010, true),
            (TileLayout::Nv12_4L4, Fourcc::NV12, false),
            (TileLayout::Nv12_8L128, Fourcc::NV12, false),
            (TileLayout::I915Y, Fourcc::NV12, false),
            (TileLayout::NvidiaBlockLinear(2), Fourcc::P010, false),
            (TileLayout::Linear, Fourcc::NV12, false),
        ] {
            let p = planes(layout, fourcc);
            let bits = if fourcc == Fourcc::P010 { 10 } else { 8 };
            let how = reading(&p[0], &p[1], bits);
            assert_eq!(how == Some(Reading::InPlace), yes, "{layout} {fourcc}");
            assert_eq!(how == Some(Reading::Strips), matches!(layout, TileLayout::Nv12_4L4 | TileLayout::Nv12_8L128), "{layout} {fourcc}: strips");
        }
    }

    /// While a strip converts, the vector loop fetches the next strip's tiles: exactly the
    /// lines that hold them, in both planes, for shares that start on a band and inside one.
    /// A band crossed whole fetches the lines of the block `GROUP_AHEAD` on; in strips,
    /// each strip's groups fetch the next strip's lines, the last strip none.
    #[test]
    fn groups_fetch_ahead_or_the_next_strip() {
        let lines: Vec<[usize; 2]> = (0..30).map(|b| [100 * b, 10 * b]).collect();
        assert_eq!(Across::Band.strip(30), 30);
        assert_eq!(Across::Band.ahead(&lines, (0, 30)), &lines[GROUP_AHEAD..]);
        assert_eq!(Across::Band.ahead(&lines[..5], (0, 5)), &[] as &[[usize; 2]]);
        let how = Across::Strips { blocks: 4 };
        assert_eq!((how.strip(30), how.strip(3), Across::Strips { blocks: 0 }.strip(30)), (4, 3, 1));
        assert_eq!(how.ahead(&lines, (0, 4)), &lines[4..8]);
        assert_eq!(how.ahead(&lines, (24, 28)), &lines[28..30]);
        assert_eq!(how.ahead(&lines, (28, 30)), &[] as &[[usize; 2]]);
    }

    /// The strips cover the share's rows and pixels once.
    #[test]
    fn each_strip_fetches_the_next_ones_tiles() {
        use crate::tiling::address::PlaneAddress;
        use std::collections::BTreeSet;
        let (w, h) = (300u32, 270u32);
        for layout in [TileLayout::Nv12_8L128, TileLayout::Nv12_4L4] {
            let g = tiled_size(layout, Fourcc::NV12, w, h).expect("geometry");
            let src = vec![0u8; g.size as usize];
            let pack = crate::tiling::colour::RgbPacking::of(Fourcc::XRGB8888).expect("XR24");
            let k = YuvToRgb::new(ColourMatrix::Bt709, ColourRange::Limited, 8, pack.bits());
            let (py, pc) = (g.planes[0], g.planes[1]);
            let job = Job { k, simd: None, reading: reading(&py, &pc, 8), across: None, shifts: pack.shifts(), alpha: pack.alpha_bits(), bits: 8, width: w, height: h, py, pc, group: 16, stride: 4 * w as usize, src: &src };
            assert_eq!(job.reading, Some(Reading::Strips), "{layout}");
            assert_eq!(job.fetches_ahead(), layout == TileLayout::Nv12_8L128, "{layout}");
            for rows in [0..h, 18..h - 4] {
                let strips: Vec<Strip> = job.strips(rows.clone(), 0).collect();
                let area: u64 = strips.iter().map(|s| u64::from(s.rows.1 - s.rows.0) * s.width as u64).sum();
                assert_eq!(area, u64::from(rows.end - rows.start) * u64::from(w), "{layout} {rows:?}");
                for (s, next) in strips.iter().zip(&strips[1..]) {
                    let got: BTreeSet<usize> = job.strip_ahead(next).lines().into_iter().map(|l| l as usize / 64).collect();
                    let mut want = BTreeSet::new();
                    for (p, (y0, y1)) in [(&py, next.rows), (&pc, next.chroma_rows())] {
                        let (a, tw) = (PlaneAddress::of(p), p.tile_width as usize);
                        for y in y0..y1 {
                            for x in next.tx0 * tw..(next.tx0 + next.tiles) * tw {
                                want.insert((src.as_ptr() as usize + p.offset as usize + a.offset(x as u32, y) as usize) / 64);
                            }
                        }
                    }
                    assert!(got == want, "{layout} {rows:?}: after {s:?}, {next:?}: {} lines, want {}", got.len(), want.len());
                }
            }
        }
    }

    #[test]
    fn p010_linear_and_tiled() {
        // i915-x's tiles are converted where they lie, 10-bit samples included.
        for layout in [TileLayout::Linear, TileLayout::I915Y, TileLayout::NvidiaBlockLinear(2), TileLayout::I915X] {
            let (w, h) = (70u32, 36u32);
            let g = tiled_size(layout, Fourcc::P010, w, h).expect("size");
            let tiled = pattern(g.size as usize, 5);
            let linear = detile_to_vec(layout, Fourcc::P010, w, h, &tiled).expect("detile");
            let planes = packed_planes(Fourcc::P010, w, h).expect("planes");
            for to in [Fourcc::XRGB2101010, Fourcc::ABGR8888] {
                let plane = PlaneLayout::linear(0, w as u64 * 4, h);
                let mut want = vec![0u8; (w * h * 4) as usize];
                yuv_to_rgb((Fourcc::P010, to), (ColourMatrix::Bt2020, ColourRange::Limited), (w, h), (&linear, &planes), (&mut want, plane)).expect("reference");
                let mut got = vec![0u8; want.len()];
                tiled_yuv_to_rgb_fast(TiledFrame { layout, fourcc: Fourcc::P010, extent: (w, h) }, to, (ColourMatrix::Bt2020, ColourRange::Limited), &tiled, (&mut got, plane), 2).expect("fast");
                assert!(got == want, "{layout} P010 -> {to}");
            }
        }
    }

    /// Every 8-bit packing, matrix and range, odd sizes, padded rows, NV12 planes in either
    /// order, 1 and 3 threads: the fast RGB -> NV12 writes what the reference writes.
    #[test]
    fn rgb_to_nv12_fast_equals_the_reference() {
        for (w, h) in [(1u32, 1u32), (2, 2), (17, 3), (33, 17), (130, 66), (320, 250)] {
            let src_plane = PlaneLayout::linear(4, w as u64 * 4 + 8, h);
            let src = pattern(4 + src_plane.stride as usize * h as usize, w + 3 * h);
            let (ystride, cstride) = (w as u64 + 5, w.div_ceil(2) as u64 * 2 + 3);
            let (ysize, csize) = (ystride * h as u64, cstride * h.div_ceil(2) as u64);
            let layouts = [
                [PlaneLayout::linear(0, ystride, h), PlaneLayout::linear(ysize + 16, cstride, h.div_ceil(2))],
                [PlaneLayout::linear(csize + 32, ystride, h), PlaneLayout::linear(8, cstride, h.div_ceil(2))],
            ];
            for planes in layouts {
                let len = (ysize + csize + 64) as usize;
                for from in RGB8_FORMATS {
                    for m in ColourMatrix::ALL {
                        for r in [ColourRange::Limited, ColourRange::Full] {
                            let mut want = vec![0x5au8; len];
                            crate::tiling::rgb_to_nv12(from, (m, r), (w, h), (&src, src_plane), (&mut want, &planes)).expect("reference");
                            for threads in [1, 3] {
                                let mut got = vec![0x5au8; len];
                                rgb_to_nv12_fast(from, (m, r), (w, h), (&src, src_plane), (&mut got, &planes), threads).expect("fast");
                                assert!(got == want, "{from} {w}x{h} {m:?} {r:?} on {threads} threads, planes {planes:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn short_buffers_are_refused() {
        let plane = PlaneLayout::linear(0, 64, 16);
        let mut out = vec![0u8; 64 * 16];
        let (colour, frame) = ((ColourMatrix::Bt709, ColourRange::Limited), |layout| TiledFrame { layout, fourcc: Fourcc::NV12, extent: (16, 16) });
        assert!(tiled_yuv_to_rgb_fast(frame(TileLayout::Nv12_4L4), Fourcc::XRGB8888, colour, &[0; 10], (&mut out, plane), 2).is_err());
        assert!(tiled_yuv_to_rgb_fast(frame(TileLayout::Linear), Fourcc::XRGB8888, colour, &[0; 384], (&mut out[..100], plane), 2).is_err());
    }
}
