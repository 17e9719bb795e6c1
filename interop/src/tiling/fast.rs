//! The CPU fast path for tiling and detiling: the same bytes as [`super::cpu`] (the
//! reference, which stays the simple one the tests compare against), at memory speed.
//!
//! Why it is fast where the reference is not:
//! - It works a band (one row of tiles) at a time. The tiled bytes of a band are one
//!   contiguous region (two bands for Samsung's Z-flip-Z order, whose tile pairs straddle
//!   two rows), so a band's reads stream, and its rows are written sequentially.
//! - The address function is evaluated once per tile per band and once per run per row of
//!   a tile, not once per run: what is left in the inner loop is a copy of a constant
//!   number of bytes (4, 8, 16, 32 or 64, chosen at compile time) from a precomputed place.
//! - Bands are split between threads (`parallel::run_shares`): each thread owns a disjoint
//!   run of linear rows and the tiled region of its bands, so no synchronisation is needed.
//!
//! The geometry and buffer checks are the reference's ([`super::cpu`]), run before any
//! byte is written; after them every index below is in bounds.

use super::address::{AddressKind, PlaneAddress};
use super::cpu::{checked_geometry, Direction};
use super::geometry::{PlaneGeometry, TiledFrame, TiledGeometry};
use super::parallel::{default_threads, fence_streamed, run_shares, STREAM_BYTES};
use super::{PlaneLayout, TilingError};



/// Tiled -> linear, as [`super::detile`], on `threads` threads (0 means
/// [`default_threads`]).
pub fn detile_fast(frame: TiledFrame, src: &[u8], (dst, dst_planes): (&mut [u8], &[PlaneLayout]), threads: usize) -> Result<TiledGeometry, TilingError> {
    let g = checked_geometry(Direction::TiledToLinear, frame, dst_planes, dst.len(), src.len())?;
    for (p, l) in g.planes.iter().zip(dst_planes) {
        plane_detile(p, &src[p.offset as usize..(p.offset + p.size) as usize], dst, *l, threads);
    }
    Ok(g)
}

/// Linear -> tiled, as [`super::tile`] (padding zeroed), on `threads` threads (0 means
/// [`default_threads`]).
pub fn tile_fast(frame: TiledFrame, (src, src_planes): (&[u8], &[PlaneLayout]), dst: &mut [u8], threads: usize) -> Result<TiledGeometry, TilingError> {
    let g = checked_geometry(Direction::LinearToTiled, frame, src_planes, src.len(), dst.len())?;
    for (p, l) in g.planes.iter().zip(src_planes) {
        plane_tile(p, src, *l, &mut dst[p.offset as usize..(p.offset + p.size) as usize], threads);
    }
    Ok(g)
}

/// Detiles one plane `p` whose tiled bytes are `tiled` (from the plane's first byte, as a
/// dma-buf plane is at its offset) into `dst` at `l`, on `threads` threads: the CPU copy
/// path of a plane that lives in its own file or at its own offset.
pub fn detile_plane_fast(p: &PlaneGeometry, tiled: &[u8], dst: &mut [u8], l: PlaneLayout, threads: usize) -> Result<(), TilingError> {
    if (tiled.len() as u64) < p.size {
        return Err(TilingError::BufferTooSmall { what: "tiled plane", plane: 0, needed: p.size, got: tiled.len() as u64 });
    }
    let wb = u64::from(p.width_bytes);
    if l.stride < wb {
        return Err(TilingError::StrideTooSmall { plane: 0, stride: l.stride, row_bytes: wb });
    }
    let needed = u64::from(p.rows.saturating_sub(1)).saturating_mul(l.stride).saturating_add(l.offset).saturating_add(wb);
    if needed > dst.len() as u64 {
        return Err(TilingError::BufferTooSmall { what: "linear destination", plane: 0, needed, got: dst.len() as u64 });
    }
    plane_detile(p, &tiled[..p.size as usize], dst, l, threads);
    Ok(())
}

/// Bands a thread's share must be a multiple of, so that its tiled region is contiguous.
pub(super) fn band_quantum(p: &PlaneGeometry) -> u32 {
    if p.kind == AddressKind::SamsungZFlipZ {
        2
    } else {
        1
    }
}

/// Splits the plane's bands into at most `threads` contiguous shares: (first band, end band).
fn shares(p: &PlaneGeometry, threads: usize) -> Vec<(u32, u32)> {
    let bands = p.tiles_y;
    let q = band_quantum(p);
    // By default, a thread per MiB at most: below that one costs more to start than it saves.
    let threads = if threads == 0 { default_threads().min((p.size >> 20).max(1) as usize) } else { threads };
    let n = threads.clamp(1, bands.div_ceil(q).max(1) as usize) as u32;
    let per = bands.div_ceil(q).div_ceil(n) * q;
    (0..n).map(|i| (i * per, ((i + 1) * per).min(bands))).filter(|(a, b)| a < b).collect()
}

/// Where a band's tiles and a row's runs are, precomputed from the address function.
struct BandAddress {
    addr: PlaneAddress,
    tile_width: usize,
    tile_height: u32,
    run: usize,
    runs_per_tile: usize,
    tile_bytes: usize,
    /// Bytes of one band on the tiled side.
    band_bytes: usize,
    /// Row-major tiles, which lie back to back: a band's tiles need only its first looked up.
    row_major: bool,
}

impl BandAddress {
    fn of(p: &PlaneGeometry) -> Self {
        let addr = PlaneAddress::of(p);
        let run = addr.run_bytes().min(p.tile_width) as usize;
        let tile_width = p.tile_width as usize;
        let tile_bytes = tile_width * p.tile_height as usize;
        BandAddress {
            addr,
            tile_width,
            tile_height: p.tile_height,
            run,
            runs_per_tile: tile_width / run.max(1),
            tile_bytes,
            band_bytes: tile_bytes * p.tiles_x as usize,
            row_major: p.kind == AddressKind::RowMajorTiles,
        }
    }

    /// Offsets, relative to the first byte of `first_band`'s tiled region, of the tiles of
    /// band `band` (in tx order).
    fn tile_bases(&self, band: u32, first_band: u32, tiles_x: u32, out: &mut Vec<usize>) {
        out.clear();
        let origin = first_band as usize * self.band_bytes;
        let y = band * self.tile_height;
        if self.row_major {
            let first = self.addr.offset(0, y) as usize - origin;
            out.extend((0..tiles_x as usize).map(|tx| first + tx * self.tile_bytes));
        } else {
            out.extend((0..tiles_x).map(|tx| self.addr.offset(tx * self.tile_width as u32, y) as usize - origin));
        }
    }

    /// Offsets inside a tile of the runs of row `iy` of the tile (in x order).
    fn row_runs(&self, iy: u32, out: &mut Vec<usize>) {
        out.clear();
        // Tile (0, 0) has the same inner layout as every tile, and starts at 0.
        out.extend((0..self.runs_per_tile).map(|k| self.addr.offset((k * self.run) as u32, iy) as usize));
    }
}

/// Moves bytes between a share's tiled region and its linear rows, one way or the other.
trait Mover {
    /// `n` bytes at tiled offset `t` and linear offset `l`.
    fn copy(&mut self, t: usize, l: usize, n: usize);
    /// `N` bytes at tiled offset `t` and linear offset `l`: moves of a constant size, where
    /// `copy` of a constant still compiled to a memcpy call per run (a third of a 64-byte
    /// run detile's time).
    fn copy_n<const N: usize>(&mut self, t: usize, l: usize);
    /// `count` runs of `N` bytes: tiled at `t0`, `t0 + step`, ...; linear back to back from `l0`.
    fn strided<const N: usize>(&mut self, t0: usize, step: usize, l0: usize, count: usize);
    /// The first `rows` rows of a band of `count` row-major tiles `N` bytes wide, `tile`
    /// bytes each, tiled from `t0`, linear rows from `l0` `stride` apart. `false`: not done,
    /// take the row path.
    fn band<const N: usize>(&mut self, _t0: usize, _rows: usize, _tile: usize, _l0: usize, _stride: usize, _count: usize) -> bool {
        false
    }
}


/// Tiled -> linear.
struct Gather<'a> {
    tiled: &'a [u8],
    linear: &'a mut [u8],
    /// Whole 16-byte runs go to 16-byte aligned places with non-temporal stores
    /// ([`STREAM_BYTES`]); [`Gather::fence`] orders them when the share is done.
    stream: bool,
}

impl Gather<'_> {
    /// `N` bytes (a multiple of 16) from tiled offset `t` to linear offset `l` with
    /// non-temporal stores, if streaming and the place is 16-byte aligned; `false` (nothing
    /// moved) otherwise.
    #[inline(always)]
    fn stream_n<const N: usize>(&mut self, t: usize, l: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.stream && N % 16 == 0 {
            let (src, dst) = (&self.tiled[t..t + N], &mut self.linear[l..l + N]);
            if (dst.as_ptr() as usize) % 16 == 0 {
                use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
                for k in (0..N).step_by(16) {
                    // SAFETY: SSE2 is in the x86_64 baseline; bytes k..k + 16 lie inside
                    // both N-byte slices, and the store's place is 16-byte aligned
                    // (checked above; k is a multiple of 16).
                    unsafe { _mm_stream_si128(dst.as_mut_ptr().add(k).cast::<__m128i>(), _mm_loadu_si128(src.as_ptr().add(k).cast::<__m128i>())) };
                }
                return true;
            }
        }
        let _ = (t, l);
        false
    }

    /// Orders this thread's non-temporal stores before whatever follows.
    fn fence(&self) {
        fence_streamed(self.stream);
    }
}


impl Mover for Gather<'_> {
    #[inline(always)]
    fn copy(&mut self, t: usize, l: usize, n: usize) {
        self.linear[l..l + n].copy_from_slice(&self.tiled[t..t + n]);
    }

    #[inline(always)]
    fn copy_n<const N: usize>(&mut self, t: usize, l: usize) {
        if self.stream_n::<N>(t, l) {
            return;
        }
        let run: [u8; N] = self.tiled[t..t + N].try_into().expect("N bytes");
        self.linear[l..l + N].copy_from_slice(&run);
    }

    #[inline(always)]
    fn strided<const N: usize>(&mut self, t0: usize, step: usize, l0: usize, count: usize) {
        let dst = &mut self.linear[l0..l0 + count * N];
        if count == 0 {
            return;
        }
        // The last run's end, checked once so that the loop below has no checks: with
        // one per 16-byte run it ran at 0.8-0.9x libyuv's DetileRow on one thread.
        let last = (count - 1).checked_mul(step).and_then(|v| v.checked_add(t0 + N));
        assert!(step >= N && last.is_some_and(|end| end <= self.tiled.len()), "a strided run past the tiled region");
        if self.stream && N % 16 == 0 && (dst.as_ptr() as usize) % 16 == 0 {
            for i in 0..count {
                self.stream_n::<N>(t0 + i * step, l0 + i * N);
            }
            return;
        }
        let (src, out) = (self.tiled[t0..].as_ptr(), dst.as_mut_ptr());
        for i in 0..count {
            // SAFETY: run i reads `t0 + i * step .. + N` of `tiled` (all inside it, by the
            // assert above) and writes `i * N .. + N` of `dst` (`count * N` bytes long);
            // `tiled` and `linear` are distinct borrows, so the ranges do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.add(i * step), out.add(i * N), N) };
        }
    }

    fn band<const N: usize>(&mut self, t0: usize, rows: usize, tile: usize, l0: usize, stride: usize, count: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        if N == 8 && rows % 4 == 0 && rows > 0 && tile >= rows * 8 && count >= 4 && stride >= count * 8 && std::is_x86_feature_detected!("avx2") {
            // Tiles 8 bytes wide (nv12-8l128): four rows at a time, four tiles at a time
            // transposed into 32 bytes of each row, so that each row is written front to
            // back in 32-byte stores (streamed, where the frame is and the rows are aligned
            // to 32 bytes). Row by row, each 8-byte run came from another tile 1 KiB on,
            // whose lines fall into four of the 64 L1 sets: 0.5-0.9x memcpy.
            let groups = count / 4;
            let src = &self.tiled[t0..t0 + (count - 1) * tile + rows * 8];
            let lin = &mut self.linear[l0..l0 + (rows - 1) * stride + count * 8];
            let stream = self.stream && (lin.as_ptr() as usize) % 32 == 0 && stride % 32 == 0;
            // SAFETY: AVX2 was detected; group g of rows iy..iy + 4 reads bytes `(4g + k) *
            // tile + iy * 8 .. + 32` of `src` (k < 4, 4g + 3 < count, iy + 4 <= rows, and a
            // tile holds its rows: inside, as `src` is `(count - 1) * tile + rows * 8` long)
            // and writes `(iy + r) * stride + 32g .. + 32` of `lin` (inside: `(rows - 1) *
            // stride + count * 8` long); with `stream`, every store is 32-byte aligned (the
            // row starts and the stride are).
            unsafe { narrow_band((src, tile), (lin, stride), rows, groups, stream) };
            for tx in groups * 4..count {
                for iy in 0..rows {
                    lin[iy * stride + tx * 8..iy * stride + tx * 8 + 8].copy_from_slice(&src[tx * tile + iy * 8..tx * tile + iy * 8 + 8]);
                }
            }
            return true;
        }
        if N != 4 || rows * 4 != tile {
            return false;
        }
        let src = &self.tiled[t0..t0 + count * tile];
        if N == 4 && rows == 4 && stride >= count * 4 {
            // 4x4 tiles (NV12_4L4): four tiles at a time are a 4x4 transpose of 4-byte
            // words, written as one 16-byte run per row.
            let lin = &mut self.linear[l0..l0 + 3 * stride + count * 4];
            let (r0, rest) = lin.split_at_mut(stride);
            let (r1, rest) = rest.split_at_mut(stride);
            let (r2, r3) = rest.split_at_mut(stride);
            let rows4 = r0.chunks_exact_mut(16).zip(r1.chunks_exact_mut(16)).zip(r2.chunks_exact_mut(16)).zip(r3.chunks_exact_mut(16));
            for (g, (((a, b), c), d)) in src.chunks_exact(64).zip(rows4) {
                transpose_4x4_words(g, [a, b, c, d]);
            }
            let done = count / 4 * 4;
            for tx in done..count {
                for iy in 0..4 {
                    let at = iy * stride + tx * 4;
                    lin[at..at + 4].copy_from_slice(&src[tx * 16 + iy * 4..tx * 16 + iy * 4 + 4]);
                }
            }
            return true;
        }
        let mut out: Vec<&mut [u8]> = self.linear[l0..].chunks_mut(stride).take(rows).map(|r| &mut r[..count * N]).collect();
        for (tx, t) in src.chunks_exact(tile).enumerate() {
            for (row, s) in out.iter_mut().zip(t.chunks_exact(N)) {
                row[tx * N..tx * N + N].copy_from_slice(s);
            }
        }
        true
    }
}

/// Rows `0..rows` of `groups` groups of four row-major tiles 8 bytes wide (`tile` bytes
/// apart, from `src`; nv12-8l128) into rows `stride` apart from `dst`, 32 bytes a group: a
/// transpose of 4x4 8-byte words per four rows of a group, so that each row takes one
/// 32-byte store rather than four 8-byte ones. For the detile and the fused path's windows
/// ([`detile_rows`]), both through [`Gather::band`], whose cost was those stores: at 4K nv12-8l128 ->
/// XR24 on one thread, with 8-byte stores the window's detile took as long as the colour
/// conversion.
///
/// # Safety
/// The CPU has AVX2; `rows` is a multiple of 4, each tile holds its `rows * 8` bytes
/// (`tile >= rows * 8`), `src` is at least `(4 * groups - 1) * tile + rows * 8` bytes long
/// and `dst` at least `(rows - 1) * stride + 32 * groups`; with `stream`, `dst`'s start
/// and `stride` are multiples of 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn narrow_band((src, tile): (&[u8], usize), (dst, stride): (&mut [u8], usize), rows: usize, groups: usize, stream: bool) {
    use std::arch::x86_64::*;
    let reach = |rows: usize, stride: usize, last: usize| rows.checked_sub(1).and_then(|r| r.checked_mul(stride)).and_then(|v| v.checked_add(last));
    debug_assert!(
        groups > 0
            && rows % 4 == 0
            && tile >= rows * 8
            && reach(4 * groups, tile, rows * 8).is_some_and(|end| end <= src.len())
            && reach(rows, stride, 32 * groups).is_some_and(|end| end <= dst.len())
            && (!stream || (dst.as_ptr() as usize % 32 == 0 && stride % 32 == 0)),
        "a narrow band past its bytes"
    );
    let (src, dst) = (src.as_ptr(), dst.as_mut_ptr());
    // SAFETY: the caller guarantees AVX2 and the bounds (debug-asserted above): group g of
    // rows iy.. reads 32 bytes at `(4g + k) * tile + iy * 8` and writes 32 at `(iy + r) *
    // stride + 32g`; loadu/storeu take any alignment, and the streamed stores are 32-byte
    // aligned where `stream`.
    unsafe {
        for iy in (0..rows).step_by(4) {
            for g in 0..groups {
                let t = |k: usize| _mm256_loadu_si256(src.add((4 * g + k) * tile + iy * 8).cast());
                let (a0, a1, a2, a3) = (t(0), t(1), t(2), t(3));
                let (e01, o01) = (_mm256_unpacklo_epi64(a0, a1), _mm256_unpackhi_epi64(a0, a1));
                let (e23, o23) = (_mm256_unpacklo_epi64(a2, a3), _mm256_unpackhi_epi64(a2, a3));
                let out = [
                    _mm256_permute2x128_si256::<0x20>(e01, e23),
                    _mm256_permute2x128_si256::<0x20>(o01, o23),
                    _mm256_permute2x128_si256::<0x31>(e01, e23),
                    _mm256_permute2x128_si256::<0x31>(o01, o23),
                ];
                for (r, v) in out.into_iter().enumerate() {
                    let d = dst.add((iy + r) * stride + 32 * g).cast();
                    if stream {
                        _mm256_stream_si256(d, v);
                    } else {
                        _mm256_storeu_si256(d, v);
                    }
                }
            }
        }
    }
}

/// Four 4x4-byte tiles (`g`, 64 bytes) to their four rows of 16 bytes: a transpose of 4x4
/// 4-byte words. SSE2 (part of every x86_64) does it in eight shuffles; elsewhere, words.
#[inline(always)]
fn transpose_4x4_words(g: &[u8], rows: [&mut [u8]; 4]) {
    #[cfg(target_arch = "x86_64")]
    if g.len() >= 64 && rows.iter().all(|r| r.len() >= 16) {
        use std::arch::x86_64::{
            __m128i, _mm_loadu_si128, _mm_storeu_si128, _mm_unpackhi_epi32, _mm_unpackhi_epi64, _mm_unpacklo_epi32, _mm_unpacklo_epi64,
        };
        // SAFETY: SSE2 is in the x86_64 baseline; every load reads 16 bytes inside `g` (64
        // bytes long, checked above) and every store writes 16 bytes inside a row (16 bytes
        // at least, checked above); loadu/storeu take any alignment.
        unsafe {
            let t = |i: usize| _mm_loadu_si128(g.as_ptr().add(i * 16).cast::<__m128i>());
            let (t0, t1, t2, t3) = (t(0), t(1), t(2), t(3));
            let (u0, u1) = (_mm_unpacklo_epi32(t0, t1), _mm_unpackhi_epi32(t0, t1));
            let (u2, u3) = (_mm_unpacklo_epi32(t2, t3), _mm_unpackhi_epi32(t2, t3));
            let out = [_mm_unpacklo_epi64(u0, u2), _mm_unpackhi_epi64(u0, u2), _mm_unpacklo_epi64(u1, u3), _mm_unpackhi_epi64(u1, u3)];
            for (r, v) in rows.into_iter().zip(out) {
                _mm_storeu_si128(r.as_mut_ptr().cast::<__m128i>(), v);
            }
        }
        return;
    }
    for (iy, r) in rows.into_iter().enumerate() {
        for k in 0..4 {
            r[k * 4..k * 4 + 4].copy_from_slice(&g[k * 16 + iy * 4..k * 16 + iy * 4 + 4]);
        }
    }
}

/// Linear -> tiled.
struct Scatter<'a> {
    linear: &'a [u8],
    tiled: &'a mut [u8],
}

impl Mover for Scatter<'_> {
    #[inline(always)]
    fn copy(&mut self, t: usize, l: usize, n: usize) {
        self.tiled[t..t + n].copy_from_slice(&self.linear[l..l + n]);
    }

    #[inline(always)]
    fn copy_n<const N: usize>(&mut self, t: usize, l: usize) {
        let run: [u8; N] = self.linear[l..l + N].try_into().expect("N bytes");
        self.tiled[t..t + N].copy_from_slice(&run);
    }

    #[inline(always)]
    fn strided<const N: usize>(&mut self, t0: usize, step: usize, l0: usize, count: usize) {
        let src = &self.linear[l0..l0 + count * N];
        for (s, d) in src.chunks_exact(N).zip(self.tiled[t0..].chunks_mut(step)) {
            d[..N].copy_from_slice(s);
        }
    }
}

/// Walks one share of bands, moving every run of visible bytes between the share's tiled
/// region and its linear rows.
fn walk_share(p: &PlaneGeometry, (b0, b1): (u32, u32), stride: usize, m: &mut impl Mover) {
    let ba = BandAddress::of(p);
    let wb = p.width_bytes as usize;
    let mut bases = Vec::with_capacity(p.tiles_x as usize);
    let mut inner = Vec::with_capacity(ba.runs_per_tile);
    let first_row = b0 * p.tile_height;
    for band in b0..b1 {
        ba.tile_bases(band, b0, p.tiles_x, &mut bases);
        let y0 = band * p.tile_height;
        let rows = p.tile_height.min(p.rows.saturating_sub(y0));
        // Narrow row-major tiles (4 bytes: 4L4, Vivante, whole bands; 8 bytes: 8L128): tile
        // by tile, or a few tiles at a time.
        if p.kind == AddressKind::RowMajorTiles && ((ba.run == 4 && rows == p.tile_height) || ba.run == 8) {
            let n = ba.run;
            let whole = wb / n;
            let row0 = (y0 - first_row) as usize * stride;
            let first = bases.first().copied().unwrap_or(0);
            let done = if n == 4 { m.band::<4>(first, rows as usize, ba.tile_bytes, row0, stride, whole) } else { m.band::<8>(first, rows as usize, ba.tile_bytes, row0, stride, whole) };
            if done {
                if whole * n < wb {
                    for iy in 0..rows as usize {
                        m.copy(first + whole * ba.tile_bytes + iy * n, row0 + iy * stride + whole * n, wb - whole * n);
                    }
                }
                continue;
            }
        }
        for iy in 0..rows {
            ba.row_runs(iy, &mut inner);
            let row = (y0 + iy - first_row) as usize * stride;
            // Whole runs first (the constant-size copies), then the row's ragged end.
            let whole = wb / ba.run;
            let per_tile = ba.runs_per_tile;
            let run = ba.run;
            if p.kind == AddressKind::RowMajorTiles {
                // Tiles back to back, one run per tile row: a strided copy, no lookups.
                let first = bases.first().copied().unwrap_or(0) + inner[0];
                let step = ba.tile_bytes;
                match run {
                    4 => m.strided::<4>(first, step, row, whole),
                    8 => m.strided::<8>(first, step, row, whole),
                    16 => m.strided::<16>(first, step, row, whole),
                    32 => m.strided::<32>(first, step, row, whole),
                    64 => m.strided::<64>(first, step, row, whole),
                    n => (0..whole).for_each(|i| m.copy(first + i * step, row + i * n, n)),
                }
                if whole * run < wb {
                    m.copy(first + whole * step, row + whole * run, wb - whole * run);
                }
            } else if per_tile == 1 {
                let inner0 = inner[0];
                for (i, &base) in bases.iter().enumerate().take(whole) {
                    match run {
                        64 => m.copy_n::<64>(base + inner0, row + i * 64),
                        n => m.copy(base + inner0, row + i * n, n),
                    }
                }
                if whole * run < wb {
                    m.copy(bases[whole] + inner0, row + whole * run, wb - whole * run);
                }
            } else {
                let mut x = 0;
                'row: for &base in &bases {
                    for &off in &inner {
                        if x + run > wb {
                            if x < wb {
                                m.copy(base + off, row + x, wb - x);
                            }
                            break 'row;
                        }
                        match run {
                            16 => m.copy_n::<16>(base + off, row + x),
                            n => m.copy(base + off, row + x, n),
                        }
                        x += run;
                    }
                }
            }
        }
    }
}

/// Offsets from the plane's first byte of the tiles of band `band` of `p`, in tx order.
pub(super) fn band_tile_offsets(p: &PlaneGeometry, band: u32, out: &mut Vec<usize>) {
    BandAddress::of(p).tile_bases(band, 0, p.tiles_x, out);
}

/// Whether each tile of `p` holds its rows back to back, `tile_width` bytes apart (row-major
/// tiles, Z-flip-Z): a tile's rows can then be read where they lie.
pub(super) fn rows_in_tiles(p: &PlaneGeometry) -> bool {
    matches!(p.kind, AddressKind::RowMajorTiles | AddressKind::SamsungZFlipZ) && BandAddress::of(p).run == p.tile_width as usize
}

/// Rows `y0..y1` of tile columns `tx0..tx0 + count` of plane `p` (`tiled`: the whole
/// plane's tiled bytes), whose tiles hold their rows back to back ([`rows_in_tiles`]), into
/// `out`, rows `stride` apart: a strip of narrow tiles for the fused path to convert while it
/// stays in L1. Four tiles at a time where [`Gather::band`] can (nv12-8l128 four rows at a
/// time, nv12-4l4 a whole band); else a row of a tile at a time.
pub(super) fn detile_strip(p: &PlaneGeometry, tiled: &[u8], (y0, y1): (u32, u32), (tx0, count): (usize, usize), out: &mut [u8], stride: usize) {
    let tw = p.tile_width as usize;
    let mut m = Gather { tiled, linear: out, stream: false };
    for StripPiece { first: t0, row, rows, tile_bytes } in strip_pieces(p, (y0, y1), tx0) {
        let l0 = row * stride;
        let done = match tw {
            4 => m.band::<4>(t0, rows, tile_bytes, l0, stride, count),
            8 => m.band::<8>(t0, rows, tile_bytes, l0, stride, count),
            _ => false,
        };
        if !done {
            for k in 0..count {
                for r in 0..rows {
                    m.copy(t0 + k * tile_bytes + r * tw, l0 + r * stride + k * tw, tw);
                }
            }
        }
    }
}

/// One band's part of a strip ([`strip_pieces`]).
pub(super) struct StripPiece {
    /// The plane's byte where the strip's first tile in this band holds its first row.
    pub first: usize,
    /// That row's number in the strip.
    pub row: usize,
    /// Its rows in this band, each `tile_width` bytes of every tile.
    pub rows: usize,
    /// From one tile to the next.
    pub tile_bytes: usize,
}

/// Rows `y0..y1` of tile columns `tx0..` of plane `p`, whose tiles hold their rows back to
/// back ([`rows_in_tiles`]), band by band: what [`detile_strip`] reads, and the fused path
/// fetches ahead.
pub(super) fn strip_pieces(p: &PlaneGeometry, (y0, y1): (u32, u32), tx0: usize) -> impl Iterator<Item = StripPiece> {
    let ba = BandAddress::of(p);
    let (th, tw) = (p.tile_height.max(1), ba.tile_width);
    let bands = if y0 < y1 { y0 / th..y1.div_ceil(th) } else { 0..0 };
    bands.map(move |band| {
        let top = y0.max(band * th);
        let rows = (y1.min((band + 1) * th) - top) as usize;
        let first = ba.addr.offset(0, band * th) as usize + tx0 * ba.tile_bytes + (top % th) as usize * tw;
        StripPiece { first, row: (top - y0) as usize, rows, tile_bytes: ba.tile_bytes }
    })
}

/// Whether [`detile_rows`] reads `p` tile by tile, which lets it start at any band (and,
/// for row-major tiles, at any row of one): tiles whose rows are whole runs of 8, 16, 32 or
/// 64 bytes (8: row-major only).
pub(super) fn tile_by_tile(p: &PlaneGeometry) -> bool {
    let widths: &[u32] = if p.kind == AddressKind::RowMajorTiles { &[8, 16, 32, 64] } else { &[16, 32, 64] };
    rows_in_tiles(p) && widths.contains(&p.tile_width)
}

/// Rows of a band that [`detile_rows`] may start and end a window on: any row of
/// row-major tiles read [`tile_by_tile`] (a tile's rows are back to back), else only the
/// band's edges.
pub(super) fn partial_bands(p: &PlaneGeometry) -> bool {
    p.kind == AddressKind::RowMajorTiles && tile_by_tile(p)
}

/// Detiles rows `y0..y1` of plane `p` (`tiled`: the whole plane's tiled bytes) into `out`,
/// rows `stride` bytes apart from row `y0`: what the fused detile+colour path works on, a
/// window of rows at a time. `y0` and `y1` must lie on bands' edges (`y1` may be the
/// plane's last row), or anywhere where [`partial_bands`]; and unless [`tile_by_tile`], `y0`
/// must start a band group of [`band_quantum`] (Z-flip-Z pairs bands). `out` must hold the
/// rows.
pub(super) fn detile_rows(p: &PlaneGeometry, tiled: &[u8], (y0, y1): (u32, u32), out: &mut [u8], stride: usize) {
    let ba = BandAddress::of(p);
    let th = p.tile_height;
    let (b0, b1) = (y0 / th, y1.div_ceil(th));
    if !tile_by_tile(p) {
        let region = &tiled[b0 as usize * ba.band_bytes..(b1 as usize * ba.band_bytes).min(tiled.len())];
        return walk_share(p, (b0, b1), stride, &mut Gather { tiled: region, linear: out, stream: false });
    }
    // Tile by tile: each tile's bytes in one sequential sweep, its rows scattered into
    // `out`, which the caller keeps in cache. Row by row, every row would touch every tile
    // of the band, and the reads stall on memory. The region starts at the band pair a
    // Z-flip-Z band belongs to, whose tiles it holds.
    let q = band_quantum(p);
    let first = b0 / q * q;
    let region = &tiled[first as usize * ba.band_bytes..((b1.div_ceil(q) * q) as usize * ba.band_bytes).min(tiled.len())];
    let mut m = Gather { tiled: region, linear: out, stream: false };
    let mut bases = Vec::with_capacity(p.tiles_x as usize);
    for band in b0..b1 {
        ba.tile_bases(band, first, p.tiles_x, &mut bases);
        let top = band * th;
        let (i0, i1) = (y0.max(top) - top, y1.min(top + th).min(p.rows).saturating_sub(top));
        let row0 = (top + i0 - y0) as usize * stride;
        band_tiles(p, &ba, &bases, (i0 as usize, i1 as usize), &mut m, row0, stride);
    }
}

/// Rows `i0..i1` of the tiles of one band, whose offsets in the region are `bases`, into
/// rows from `row0`.
fn band_tiles(p: &PlaneGeometry, ba: &BandAddress, bases: &[usize], (i0, i1): (usize, usize), m: &mut Gather<'_>, row0: usize, stride: usize) {
    let (tw, wb) = (ba.tile_width, p.width_bytes as usize);
    if i1 <= i0 {
        return;
    }
    let rows = i1 - i0;
    // Row-major tiles 8 bytes wide (back to back): the detile's own band path, four tiles at
    // a time where the CPU has AVX2 (`Gather::band`); the row's ragged end below.
    let whole = wb / tw;
    let done = match bases.first() {
        Some(&first) if ba.row_major && tw == 8 && m.band::<8>(first + i0 * 8, rows, ba.tile_bytes, row0, stride, whole) => whole,
        _ => 0,
    };
    for (tx, &base) in bases.iter().enumerate().skip(done) {
        let x = tx * tw;
        if x >= wb {
            break;
        }
        let base = base + i0 * tw;
        if x + tw <= wb {
            let (src, dst) = (&m.tiled[base..base + rows * tw], &mut m.linear[row0 + x..row0 + (rows - 1) * stride + x + tw]);
            match tw {
                8 => tile_rows::<8>(src, dst, stride),
                16 => tile_rows::<16>(src, dst, stride),
                32 => tile_rows::<32>(src, dst, stride),
                64 => tile_rows::<64>(src, dst, stride),
                _ => (0..rows).for_each(|iy| dst[iy * stride..iy * stride + tw].copy_from_slice(&src[iy * tw..iy * tw + tw])),
            }
            continue;
        }
        for iy in 0..rows {
            m.copy(base + iy * tw, row0 + iy * stride + x, wb - x);
        }
    }
}

/// The tiled bytes of rows `y0..y1` of plane `p` (where [`detile_rows`] may start and end
/// there), as `(start, len, step, count)`: `count` runs of `len` bytes, `step` apart, from
/// `start` (relative to the plane's first byte). One run for whole bands (their band group,
/// for Z-flip-Z); one run per tile for part of a band of row-major tiles.
pub(super) fn tiled_rows_region(p: &PlaneGeometry, (y0, y1): (u32, u32)) -> (usize, usize, usize, usize) {
    let ba = BandAddress::of(p);
    let th = p.tile_height;
    let (b0, b1) = (y0 / th, y1.div_ceil(th).min(p.tiles_y));
    if b0 >= b1 {
        return (0, 0, 0, 0);
    }
    if partial_bands(p) && (y0 % th != 0 || (y1 % th != 0 && y1 < p.rows)) {
        // Within one band (a window never spans two where it starts inside one).
        let (i0, i1) = ((y0 % th) as usize, (y1 - b0 * th).min(th) as usize);
        return (b0 as usize * ba.band_bytes + i0 * ba.tile_width, (i1 - i0) * ba.tile_width, ba.tile_bytes, p.tiles_x as usize);
    }
    let q = band_quantum(p);
    let (n0, n1) = (b0 / q * q, (b1.div_ceil(q) * q).min(p.tiles_y));
    (n0 as usize * ba.band_bytes, (n1 - n0) as usize * ba.band_bytes, 0, 1)
}

/// One tile whose rows are `N` bytes (`src`, its rows back to back) into rows `stride`
/// apart (`dst`, from the tile's first row to the end of its last): the fused path's
/// in-cache detile. With a bounds check per row (two slices a row), 4K nv12-16l32s (16-byte
/// rows) -> XR24 on one thread ran at 14.0 GB/s, 17.2 with one per tile.
#[inline(always)]
fn tile_rows<const N: usize>(src: &[u8], dst: &mut [u8], stride: usize) {
    let rows = src.len() / N;
    if rows == 0 {
        return;
    }
    assert!(stride >= N && dst.len() >= (rows - 1) * stride + N, "a tile's rows past the window");
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    for iy in 0..rows {
        // SAFETY: row iy reads `iy * N .. + N` of `src` (`rows * N` long at least) and
        // writes `iy * stride .. + N` of `dst` (long enough, by the assert); the two are
        // distinct borrows, so they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(s.add(iy * N), d.add(iy * stride), N) };
    }
}

fn plane_detile(p: &PlaneGeometry, tiled: &[u8], dst: &mut [u8], l: PlaneLayout, threads: usize) {
    let (wb, stride) = (p.width_bytes as usize, l.stride as usize);
    if p.kind == AddressKind::Linear {
        let pitch = p.padded_width_bytes as usize;
        for y in 0..p.rows as usize {
            let at = l.offset as usize + y * stride;
            dst[at..at + wb].copy_from_slice(&tiled[y * pitch..y * pitch + wb]);
        }
        return;
    }
    let ba_bytes = BandAddress::of(p).band_bytes;
    // The plane's linear rows, from its first row to the end of its last visible byte.
    let end = l.offset as usize + (p.rows as usize - 1) * stride + wb;
    let stream = end - l.offset as usize >= STREAM_BYTES;
    let mut rest = &mut dst[l.offset as usize..end];
    let mut work = Vec::new();
    for (b0, b1) in shares(p, threads) {
        let rows_here = ((b1 * p.tile_height).min(p.rows) - b0 * p.tile_height) as usize;
        let take = if b1 * p.tile_height >= p.rows { rest.len() } else { rows_here * stride };
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut(take);
        rest = tail;
        let region = &tiled[b0 as usize * ba_bytes..(b1 as usize * ba_bytes).min(tiled.len())];
        work.push(((b0, b1), Gather { tiled: region, linear: mine, stream }));
    }
    run_shares(work, |(bands, mut gather)| {
        walk_share(p, bands, stride, &mut gather);
        gather.fence();
    });
}

fn plane_tile(p: &PlaneGeometry, src: &[u8], l: PlaneLayout, tiled: &mut [u8], threads: usize) {
    let (wb, stride) = (p.width_bytes as usize, l.stride as usize);
    if p.kind == AddressKind::Linear {
        let pitch = p.padded_width_bytes as usize;
        for y in 0..p.rows as usize {
            let at = l.offset as usize + y * stride;
            tiled[y * pitch..y * pitch + wb].copy_from_slice(&src[at..at + wb]);
            tiled[y * pitch + wb..(y + 1) * pitch].fill(0);
        }
        return;
    }
    let ba_bytes = BandAddress::of(p).band_bytes;
    let ragged_columns = p.width_bytes != p.padded_width_bytes;
    let mut rest = tiled;
    let mut work = Vec::new();
    for (b0, b1) in shares(p, threads) {
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut((b1 - b0) as usize * ba_bytes);
        rest = tail;
        let first = l.offset as usize + (b0 * p.tile_height) as usize * stride;
        work.push(((b0, b1), &src[first.min(src.len())..], mine));
    }
    run_shares(work, |((b0, b1), rows, mine)| {
        // Only tiles that hold padding need zeroing: every tile when rows are padded on
        // the right, else just the bands past the last row.
        if ragged_columns || b1 * p.tile_height > p.rows {
            // Z-flip-Z interleaves the tiles of a pair of bands: zero from the pair.
            let q = band_quantum(p);
            let first_padded = (p.rows / p.tile_height) / q * q;
            let from = if ragged_columns { 0 } else { (first_padded - b0) as usize * ba_bytes };
            let from = from.min(mine.len());
            mine[from..].fill(0);
        }
        walk_share(p, (b0, b1), stride, &mut Scatter { linear: rows, tiled: mine });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::{detile, packed_planes, tile, tiled_size};
    use crate::{Fourcc, TileLayout};

    use crate::tiling::test_pattern as pattern;

    /// Where the fused path fetches a window's tiles from: each tile's part for rows inside
    /// a band of row-major tiles, the band (pair, for Z-flip-Z) otherwise; and that region
    /// is what `detile_rows` reads (the rows it detiles equal the whole detile's).
    #[test]
    fn a_windows_tiles_are_where_detile_rows_reads_them() {
        let (w, h) = (320u32, 300u32);
        let plane = |layout| crate::tiling::tiled_size(layout, Fourcc::NV12, w, h).unwrap().planes[0];
        let p = plane(TileLayout::Nv12_8L128);
        assert!(partial_bands(&p) && p.tile_height == 128);
        assert_eq!(tiled_rows_region(&p, (32, 64)), (32 * 8, 32 * 8, 1024, p.tiles_x as usize));
        assert_eq!(tiled_rows_region(&p, (160, 192)), (p.tiles_x as usize * 1024 + 32 * 8, 32 * 8, 1024, p.tiles_x as usize));
        assert_eq!(tiled_rows_region(&p, (256, 300)), (2 * p.tiles_x as usize * 1024, p.tiles_x as usize * 1024, 0, 1));
        let s = plane(TileLayout::Samsung64x32);
        let band = s.tiles_x as usize * 2048;
        assert_eq!(tiled_rows_region(&s, (64, 96)), (2 * band, 2 * band, 0, 1), "a Z-flip-Z band's pair");
        for layout in [TileLayout::Nv12_8L128, TileLayout::Nv12_16L32S, TileLayout::Samsung64x32, TileLayout::I915Y] {
            let p = plane(layout);
            let tiled = crate::tiling::test_pattern(p.size as usize, 9);
            let full = detile_to_vec_plane(&p, &tiled);
            let wb = p.width_bytes as usize;
            let step = if partial_bands(&p) { 32 } else { band_quantum(&p) * p.tile_height };
            for y0 in (0..p.rows).step_by(step as usize) {
                let y1 = (y0 + step).min(p.rows);
                let mut out = vec![0u8; (y1 - y0) as usize * wb];
                detile_rows(&p, &tiled, (y0, y1), &mut out, wb);
                assert!(out[..] == full[y0 as usize * wb..y1 as usize * wb], "{layout} rows {y0}..{y1}");
            }
        }
    }

    /// Strips of narrow row-major tiles (both planes of nv12-4l4 and nv12-8l128; whole
    /// bands, parts of bands, several bands, odd rows, fewer than four tiles, the ragged last
    /// tile column) are their part of the whole plane's detile.
    #[test]
    fn a_strip_is_its_part_of_the_detile() {
        let (w, h) = (328u32, 300u32);
        for layout in [TileLayout::Nv12_4L4, TileLayout::Nv12_8L128] {
            for p in crate::tiling::tiled_size(layout, Fourcc::NV12, w, h).unwrap().planes {
                assert!(rows_in_tiles(&p), "{layout}");
                let tiled = crate::tiling::test_pattern(p.size as usize, 13);
                let full = detile_to_vec_plane(&p, &tiled);
                let (wb, tw) = (p.width_bytes as usize, p.tile_width as usize);
                for (y0, y1) in [(0, 8), (8, 16), (0, 128), (32, 96), (124, 136), (96, 101), (p.rows - 7, p.rows)] {
                    let (y0, y1) = (y0.min(p.rows), y1.min(p.rows));
                    for (tx0, count) in [(0, 16), (4, 3), (8, 32), (p.tiles_x as usize - 5, 5)] {
                        let stride = count * tw + 24;
                        let mut out = vec![0x5au8; (y1 - y0) as usize * stride];
                        detile_strip(&p, &tiled, (y0, y1), (tx0, count), &mut out, stride);
                        for y in y0..y1 {
                            let (x0, x1) = (tx0 * tw, ((tx0 + count) * tw).min(wb));
                            let row = &out[(y - y0) as usize * stride..][..stride];
                            let want = &full[y as usize * wb..][x0..x1];
                            assert!(row[..x1 - x0] == *want, "{layout} plane at {} rows {y0}..{y1} tiles {tx0}+{count}: row {y}", p.offset);
                            assert!(row[count * tw..].iter().all(|&b| b == 0x5a), "{layout}: past the strip");
                        }
                    }
                }
            }
        }
    }

    /// One plane detiled whole, tightly packed.
    fn detile_to_vec_plane(p: &PlaneGeometry, tiled: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; p.width_bytes as usize * p.rows as usize];
        detile_plane_fast(p, tiled, &mut out, PlaneLayout::linear(0, u64::from(p.width_bytes), p.rows), 1).unwrap();
        out
    }

    /// Every layout, odd and even sizes, padded strides and offsets, 1 to 3 threads: the
    /// fast path writes exactly what the reference writes, in both directions, and leaves
    /// the same bytes alone.
    #[test]
    fn the_fast_path_equals_the_reference() {
        for layout in TileLayout::ALL {
            for fourcc in [Fourcc::NV12, Fourcc::ARGB8888, Fourcc::P010, Fourcc::R8] {
                for (w, h) in [(1u32, 1u32), (70, 38), (130, 66), (257, 129), (640, 200)] {
                    let Ok(g) = tiled_size(layout, fourcc, w, h) else { continue };
                    let frame = TiledFrame { layout, fourcc, extent: (w, h) };
                    let packed = packed_planes(fourcc, w, h).expect("packed");
                    // Padded strides and a gap, so row ends and plane offsets are exercised.
                    let planes: Vec<PlaneLayout> = packed
                        .iter()
                        .enumerate()
                        .zip(&g.planes)
                        .map(|((i, p), gp)| PlaneLayout::linear(64 + i as u64 * (p.offset + 4096 * 3), p.stride + 12, gp.rows))
                        .collect();
                    let len = planes.iter().zip(&g.planes).map(|(l, p)| l.offset + l.stride * p.rows as u64).max().unwrap_or(0) as usize;
                    let tiled = pattern(g.size as usize, w ^ h);
                    let mut want = pattern(len, 7);
                    let mut got = want.clone();
                    detile(frame, &tiled, (&mut want, &planes)).expect("reference");
                    for threads in [1, 2, 3] {
                        detile_fast(frame, &tiled, (&mut got, &planes), threads).expect("fast");
                        assert!(got == want, "detile {layout} {fourcc} {w}x{h} on {threads} threads");
                    }
                    let linear = pattern(len, w + h);
                    let mut want_t = pattern(g.size as usize + 16, 3);
                    let mut got_t = pattern(g.size as usize + 16, 4);
                    tile(frame, (&linear, &planes), &mut want_t).expect("reference");
                    for threads in [1, 2, 3] {
                        tile_fast(frame, (&linear, &planes), &mut got_t, threads).expect("fast");
                        assert!(got_t[..g.size as usize] == want_t[..g.size as usize], "tile {layout} {fourcc} {w}x{h} on {threads} threads");
                    }
                }
            }
        }
    }

    /// Planes of [`STREAM_BYTES`] and more are detiled with non-temporal stores where the
    /// rows are 16-byte aligned, and as usual where not: the reference's bytes either way.
    #[test]
    fn large_planes_stream_the_same_bytes() {
        let (w, h) = (2048u32, 2080u32);
        assert!(w as usize * h as usize >= STREAM_BYTES);
        for layout in TileLayout::ALL {
            let Ok(g) = tiled_size(layout, Fourcc::NV12, w, h) else { continue };
            let tiled = pattern(g.size as usize, 9);
            let frame = TiledFrame { layout, fourcc: Fourcc::NV12, extent: (w, h) };
            // Packed planes from a 16-byte aligned start, and from 8 bytes on.
            for shift in [0u64, 8] {
                let planes: Vec<PlaneLayout> = packed_planes(Fourcc::NV12, w, h).expect("packed").iter().map(|p| PlaneLayout { offset: p.offset + shift, ..*p }).collect();
                let len = (g.planes.iter().zip(&planes).map(|(p, l)| l.offset + l.stride * p.rows as u64).max().unwrap_or(0) + 16) as usize;
                let mut buf = vec![0u8; len + 16];
                let start = buf.as_ptr().align_offset(16);
                let mut want = vec![0u8; len];
                detile(frame, &tiled, (&mut want, &planes)).expect("reference");
                for threads in [1, 2] {
                    let got = &mut buf[start..start + len];
                    got.fill(0);
                    detile_fast(frame, &tiled, (got, &planes), threads).expect("fast");
                    assert!(*got == want[..], "detile {layout} from {shift} bytes on {threads} threads");
                }
            }
        }
    }

    #[test]
    fn bad_buffers_are_refused_as_by_the_reference() {
        let planes = packed_planes(Fourcc::NV12, 64, 64).expect("packed");
        let mut small = vec![0u8; 10];
        assert!(matches!(
            detile_fast(TiledFrame { layout: TileLayout::Nv12_4L4, fourcc: Fourcc::NV12, extent: (64, 64) }, &[0u8; 100], (&mut small, &planes), 2),
            Err(TilingError::BufferTooSmall { .. })
        ));
        assert!(matches!(
            tile_fast(TiledFrame { layout: TileLayout::Samsung64x32, fourcc: Fourcc::P010, extent: (64, 64) }, (&[], &planes), &mut small, 2),
            Err(TilingError::UnsupportedFormat { .. })
        ));
    }
}
