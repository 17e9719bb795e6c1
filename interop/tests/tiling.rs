//! The CPU reference of every layout and colour conversion, against the layout facts of
//! issue #5, and a word-for-word model of `shaders/tile.comp` driven by the push constants
//! the engine will use (so the shader's algorithm and its parameters are checked here,
//! without a GPU; the engine's tests compare the real shader with the CPU reference).

use dmabridge_interop::tiling::colour::{
    rgb_to_nv12, rgb_to_yuv_float, yuv_to_rgb, yuv_to_rgb_float, RgbToYuv, YuvToRgb,
};
use dmabridge_interop::tiling::gpu::{plane_dispatches, TilePushConstants};
use dmabridge_interop::tiling::{
    detile, packed_planes, tile, tiled_size, ColourMatrix, ColourRange, PlaneAddress, TiledFrame, TilingError,
};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{Fourcc, TileLayout};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic, no dependency.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 56) as u8).collect()
    }
}

const FORMATS: [Fourcc; 4] = [Fourcc::NV12, Fourcc::P010, Fourcc::ARGB8888, Fourcc::R8];
const SIZES: [(u32, u32); 5] = [(64, 32), (130, 66), (1, 1), (17, 9), (256, 300)];

fn nv12_only(l: TileLayout) -> bool {
    matches!(
        l,
        TileLayout::Samsung64x32
            | TileLayout::Allwinner32x32
            | TileLayout::Nv12_4L4
            | TileLayout::Nv12_16L32S
            | TileLayout::Nv12_8L128
    )
}

/// Every (layout, format) pair the library defines, and checks the others are refused.
fn cases() -> Vec<(TileLayout, Fourcc)> {
    let mut v = Vec::new();
    for l in TileLayout::ALL {
        for f in FORMATS {
            if nv12_only(l) && f != Fourcc::NV12 {
                assert!(
                    matches!(tiled_size(l, f, 64, 64), Err(TilingError::UnsupportedFormat { .. })),
                    "{l} must refuse {f}"
                );
            } else {
                v.push((l, f));
            }
        }
    }
    v
}

/// A linear layout with `offset` before the first plane and `extra` bytes after each row.
fn padded_planes(f: Fourcc, w: u32, h: u32, offset: u64, extra: u64) -> (Vec<PlaneLayout>, usize) {
    let g = tiled_size(TileLayout::Linear, f, w, h).unwrap();
    let mut at = offset;
    let planes = g
        .planes
        .iter()
        .map(|p| {
            let stride = p.width_bytes as u64 + extra;
            let plane = PlaneLayout::linear(at, stride, p.rows);
            at += stride * p.rows as u64 + 3;
            plane
        })
        .collect();
    (planes, at as usize + 5)
}

/// A linear layout whose offsets and strides are multiples of `align` (4 or 16), with a
/// gap of `align` bytes after each row: the shaders' row-grid detile path.
fn aligned_planes(f: Fourcc, w: u32, h: u32, align: u64) -> (Vec<PlaneLayout>, usize) {
    let g = tiled_size(TileLayout::Linear, f, w, h).unwrap();
    let mut at = align;
    let planes = g
        .planes
        .iter()
        .map(|p| {
            let stride = (p.width_bytes as u64).div_ceil(align) * align + align;
            let plane = PlaneLayout::linear(at, stride, p.rows);
            at = (at + stride * p.rows as u64).div_ceil(align) * align + align;
            plane
        })
        .collect();
    (planes, at as usize)
}

fn visible(f: Fourcc, w: u32, h: u32, planes: &[PlaneLayout], len: usize) -> Vec<bool> {
    let g = tiled_size(TileLayout::Linear, f, w, h).unwrap();
    let mut mask = vec![false; len];
    for (p, l) in g.planes.iter().zip(planes) {
        for y in 0..p.rows as u64 {
            let row = (l.offset + y * l.stride) as usize;
            mask[row..row + p.width_bytes as usize].iter_mut().for_each(|m| *m = true);
        }
    }
    mask
}

#[test]
fn tile_then_detile_gives_back_the_input_with_zero_padding() {
    let mut rng = Rng(0x5eed);
    let mut checked = 0;
    for (layout, f) in cases() {
        for (w, h) in SIZES {
            let packed = packed_planes(f, w, h).unwrap();
            let g = tiled_size(layout, f, w, h).unwrap();
            let src = rng.bytes(g.planes.iter().map(|p| p.width_bytes as usize * p.rows as usize).sum());
            let mut tiled = vec![0xaa; g.size as usize + 7];
            let frame = TiledFrame { layout, fourcc: f, extent: (w, h) };
            tile(frame, (&src, &packed), &mut tiled).unwrap();
            assert!(tiled[g.size as usize..].iter().all(|&b| b == 0xaa), "{layout} {f} {w}x{h}: wrote past the end");

            // Padding: every byte that no visible (x, y) maps to is zero, and each visible
            // byte lands on a distinct address.
            let mut hit = vec![false; g.size as usize];
            for p in &g.planes {
                let a = PlaneAddress::of(p);
                for y in 0..p.rows {
                    for x in 0..p.width_bytes {
                        let o = (p.offset + a.offset(x, y)) as usize;
                        assert!(!hit[o], "{layout} {f} {w}x{h}: ({x},{y}) collides");
                        hit[o] = true;
                    }
                }
            }
            for (o, h2) in hit.iter().enumerate() {
                if !h2 {
                    assert_eq!(tiled[o], 0, "{layout} {f} {w}x{h}: padding byte {o} not zero");
                }
            }

            let mut back = vec![0u8; src.len()];
            detile(frame, &tiled, (&mut back, &packed)).unwrap();
            assert_eq!(back, src, "{layout} {f} {w}x{h}: round trip");
            checked += 1;
        }
    }
    // 15 layouts: 5 NV12-only x 1 format + 10 x 4 formats, at 5 sizes.
    assert_eq!(checked, (5 + 10 * 4) * SIZES.len());
}

#[test]
fn detile_to_an_offset_and_stride_writes_only_visible_bytes() {
    let mut rng = Rng(7);
    for (layout, f) in cases() {
        for (w, h) in [(130u32, 66u32), (17, 9)] {
            let packed = packed_planes(f, w, h).unwrap();
            let g = tiled_size(layout, f, w, h).unwrap();
            let src = rng.bytes(g.planes.iter().map(|p| p.width_bytes as usize * p.rows as usize).sum());
            let mut tiled = vec![0; g.size as usize];
            let frame = TiledFrame { layout, fourcc: f, extent: (w, h) };
            tile(frame, (&src, &packed), &mut tiled).unwrap();

            // Unaligned offset and stride on purpose: the GPU path must handle them too.
            let (planes, len) = padded_planes(f, w, h, 13, 7);
            let mut out = vec![0x5a; len];
            detile(frame, &tiled, (&mut out, &planes)).unwrap();
            let mask = visible(f, w, h, &planes, len);
            let mut expect = vec![0x5a; len];
            let mut i = 0;
            for (o, m) in mask.iter().enumerate() {
                if *m {
                    expect[o] = src[i];
                    i += 1;
                }
            }
            assert_eq!(out, expect, "{layout} {f} {w}x{h}");

            // And tiling from that strided copy gives the same tiled buffer.
            let mut again = vec![0xee; g.size as usize];
            tile(frame, (&out, &planes), &mut again).unwrap();
            assert_eq!(again, tiled, "{layout} {f} {w}x{h}: tile from strided source");
        }
    }
}

fn address(layout: TileLayout, f: Fourcc, w: u32, h: u32, plane: usize, x: u32, y: u32) -> u64 {
    let g = tiled_size(layout, f, w, h).unwrap();
    let p = &g.planes[plane];
    p.offset + PlaneAddress::of(p).offset(x, y)
}

#[test]
fn address_formulas_match_the_issue() {
    // i915-y: byte (17, 3) of tile 0 -> (17/16)*512 + 3*16 + 17%16.
    assert_eq!(address(TileLayout::I915Y, Fourcc::R8, 256, 64, 0, 17, 3), 512 + 48 + 1);
    // Second tile of the row starts 4 KiB in; the second tile row after 2 tiles.
    assert_eq!(address(TileLayout::I915Y, Fourcc::R8, 256, 64, 0, 128, 0), 4096);
    assert_eq!(address(TileLayout::I915Y, Fourcc::R8, 256, 64, 0, 0, 32), 8192);
    // i915-x: 512 x 8 row-major.
    assert_eq!(address(TileLayout::I915X, Fourcc::R8, 1024, 16, 0, 513, 9), (2 + 1) * 4096 + 512 + 1); // tile (1, 1) of a 2-tile row
                                                                                                       // NVIDIA GOB: ((x%64)/32)*256 + ((y%8)/2)*64 + ((x%32)/16)*32 + (y%2)*16 + x%16.
    let nv = |n, x, y| address(TileLayout::NvidiaBlockLinear(n), Fourcc::R8, 128, 64, 0, x, y);
    assert_eq!(nv(0, 0, 0), 0);
    assert_eq!(nv(0, 0, 1), 16);
    assert_eq!(nv(0, 16, 0), 32);
    assert_eq!(nv(0, 0, 2), 64);
    assert_eq!(nv(0, 32, 0), 256);
    assert_eq!(nv(0, 63, 7), 256 + 192 + 32 + 16 + 15);
    assert_eq!(nv(0, 37, 5), 256 + 128 + 16 + 5);
    // v0: blocks are one GOB; the row holds ceil(128/64) = 2 blocks.
    assert_eq!(nv(0, 64, 0), 512);
    assert_eq!(nv(0, 0, 8), 1024);
    // v1: blocks are 2 GOBs tall, stacked top to bottom.
    assert_eq!(nv(1, 0, 8), 512);
    assert_eq!(nv(1, 64, 0), 1024);
    assert_eq!(nv(1, 0, 16), 2048);
    // v4: 16 GOBs = 128 rows; 64 rows pad to one block row.
    assert_eq!(nv(4, 64, 9), 128 * 64 + 512 + 16);
    // vivante: 4x4 pixels; AR24 tile is 16 bytes wide, 64 bytes big.
    assert_eq!(address(TileLayout::VivanteTiled, Fourcc::ARGB8888, 8, 8, 0, 16 + 5, 2), 64 + 2 * 16 + 5);
    assert_eq!(address(TileLayout::VivanteTiled, Fourcc::R8, 8, 8, 0, 5, 6), 3 * 16 + 2 * 4 + 1);
    // NV12 decoder layouts, chroma plane included.
    assert_eq!(address(TileLayout::Nv12_4L4, Fourcc::NV12, 16, 16, 0, 5, 6), 5 * 16 + 2 * 4 + 1);
    assert_eq!(address(TileLayout::Nv12_4L4, Fourcc::NV12, 16, 16, 1, 5, 6), 256 + 5 * 16 + 2 * 4 + 1);
    assert_eq!(address(TileLayout::Nv12_16L32S, Fourcc::NV12, 32, 32, 1, 17, 3), 32 * 32 + 256 + 3 * 16 + 1);
    assert_eq!(address(TileLayout::Nv12_8L128, Fourcc::NV12, 16, 128, 0, 9, 1), 1024 + 8 + 1);
    assert_eq!(address(TileLayout::Allwinner32x32, Fourcc::NV12, 64, 64, 0, 33, 33), 3 * 1024 + 32 + 1);
}

#[test]
fn tiles_are_powers_of_two() {
    // tile.comp receives tile sizes as log2.
    for (layout, f) in cases() {
        for p in tiled_size(layout, f, 33, 17).unwrap().planes {
            assert!(p.tile_width.is_power_of_two() && p.tile_height.is_power_of_two(), "{layout} {f}");
        }
    }
}

#[test]
fn samsung_z_flip_order_by_hand() {
    // A 4x4-tile luma plane (256 bytes x 128 rows). From gst_video_tile_get_index:
    //   row 0: 0 1 6 7     row 1: 2 3 4 5
    //   row 2: 8 9 14 15   row 3: 10 11 12 13
    let order = [[0, 1, 6, 7], [2, 3, 4, 5], [8, 9, 14, 15], [10, 11, 12, 13]];
    for (ty, row) in order.iter().enumerate() {
        for (tx, &index) in row.iter().enumerate() {
            let a =
                address(TileLayout::Samsung64x32, Fourcc::NV12, 256, 128, 0, tx as u32 * 64 + 3, ty as u32 * 32 + 2);
            assert_eq!(a, index * 2048 + 2 * 64 + 3, "tile ({tx},{ty})");
        }
    }
    // An odd number of tile rows: the last one is linear. 128x96 luma = 2x3 tiles.
    let last = |tx: u32| address(TileLayout::Samsung64x32, Fourcc::NV12, 128, 96, 0, tx * 64, 64) / 2048;
    assert_eq!((last(0), last(1)), (4, 5));
    // Width pads to 128 bytes: 65 pixels still make two tiles per row.
    assert_eq!(tiled_size(TileLayout::Samsung64x32, Fourcc::NV12, 65, 32).unwrap().planes[0].tiles_x, 2);
}

// ---- A model of shaders/tile.comp, run on the push constants of gpu::plane_dispatches ----

fn words(bytes: &[u8]) -> Vec<u32> {
    let mut b = bytes.to_vec();
    b.resize(bytes.len().div_ceil(4) * 4, 0);
    b.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn unwords(w: &[u32], len: usize) -> Vec<u8> {
    w.iter().flat_map(|w| w.to_le_bytes()).take(len).collect()
}

fn model_tiled_address(pc: &TilePushConstants, x: u32, y: u32) -> u32 {
    if pc.layout_kind == 0 {
        return y * pc.tiled_pitch + x;
    }
    let (twl, thl) = (pc.tile_width_log2, pc.tile_height_log2);
    let (tx, ty, ix, iy) = (x >> twl, y >> thl, x & ((1 << twl) - 1), y & ((1 << thl) - 1));
    let mut tile_index = ty * pc.tiles_x + tx;
    let mut inner = (iy << twl) + ix;
    match pc.layout_kind {
        2 => inner = (ix >> 4) * 512 + iy * 16 + (ix & 15),
        3 => tile_index = dmabridge_interop::tiling::address::zflipz_tile_index(tx, ty, pc.tiles_x, pc.tiles_y) as u32,
        4 => inner = (iy >> 3) * 512 + dmabridge_interop::tiling::address::nvidia_gob_offset(ix, iy),
        _ => {}
    }
    (tile_index << (twl + thl)) + inner
}

fn runs_of_16(pc: &TilePushConstants) -> bool {
    pc.layout_kind != 1 || pc.tile_width_log2 >= 4
}

fn src_byte(src: &[u32], a: u32) -> u32 {
    (src[(a >> 2) as usize] >> ((a & 3) * 8)) & 0xff
}

fn model_tiled_bytes(pc: &TilePushConstants, src: &[u32], x: u32, y: u32, n: u32) -> u32 {
    let a = pc.tiled_offset + model_tiled_address(pc, x, y);
    if a & 3 == 0 && n == 4 {
        return src[(a >> 2) as usize];
    }
    (0..n).map(|b| src_byte(src, a + b) << (b * 8)).sum()
}

fn model_linear_word(pc: &TilePushConstants, src: &[u32], x: u32, y: u32) -> u32 {
    if y >= pc.rows || x >= pc.width_bytes {
        return 0;
    }
    let a = pc.linear_offset + y * pc.linear_stride + x;
    if a & 3 == 0 && x + 4 <= pc.width_bytes {
        return src[(a >> 2) as usize];
    }
    (0..4).filter(|b| x + b < pc.width_bytes).map(|b| src_byte(src, a + b) << (b * 8)).sum()
}

fn model_detile_word(pc: &TilePushConstants, src: &[u32], dst: &[u32], w: u32) -> Option<u32> {
    let p = w * 4;
    if p >= pc.linear_offset {
        let rel = p - pc.linear_offset;
        let (y, x) = (rel / pc.linear_stride, rel % pc.linear_stride);
        if y < pc.rows && x + 4 <= pc.width_bytes && x & 3 == 0 {
            return Some(model_tiled_bytes(pc, src, x, y, 4));
        }
    }
    let old = dst[w as usize];
    let (mut word, mut any) = (0, false);
    for b in 0..4 {
        let mut value = (old >> (b * 8)) & 0xff;
        if p + b >= pc.linear_offset {
            let rel = p + b - pc.linear_offset;
            let (y, x) = (rel / pc.linear_stride, rel % pc.linear_stride);
            if y < pc.rows && x < pc.width_bytes {
                value = src_byte(src, pc.tiled_offset + model_tiled_address(pc, x, y));
                any = true;
            }
        }
        word |= value << (b * 8);
    }
    any.then_some(word)
}

/// `main()` of tile.comp for every invocation of the dispatch, in order. The shader's
/// invocations must write disjoint words (so order does not matter there); checked here.
fn model_dispatch(pc: &TilePushConstants, groups: [u32; 3], src: &[u32], dst: &mut [u32]) {
    let mut written = std::collections::HashSet::new();
    let mut store = |dst: &mut [u32], w: u32, v: u32| {
        assert!(written.insert(w), "word {w} written twice");
        dst[w as usize] = v;
    };
    if pc.mode == 0 {
        for inv in 0..groups[0] * groups[1] * 64 {
            if inv >= pc.invocations {
                continue;
            }
            let first = (pc.linear_offset >> 4) << 2;
            let (w0, end) = (first + inv * 4, first + pc.linear_words);
            for w in w0..(w0 + 4).min(end) {
                if let Some(v) = model_detile_word(pc, src, dst, w) {
                    store(dst, w, v);
                }
            }
        }
        return;
    }
    for gz in 0..groups[2] {
        for gy in 0..groups[1] {
            for gx in 0..groups[0] * 64 {
                let (x0, y) = (gx * 16, gy + gz * groups[1]);
                if pc.mode == 1 {
                    if x0 >= pc.padded_width || y >= pc.padded_rows {
                        continue;
                    }
                    let a0 = pc.tiled_offset + model_tiled_address(pc, x0, y);
                    if x0 + 16 <= pc.padded_width && runs_of_16(pc) && a0 & 15 == 0 {
                        for k in 0..4 {
                            let a = pc.tiled_offset + model_tiled_address(pc, x0 + 4 * k, y);
                            assert_eq!(a, a0 + 4 * k, "uvec4 store on a non-contiguous run");
                        }
                    }
                    for k in 0..4 {
                        let x = x0 + 4 * k;
                        if x < pc.padded_width {
                            let a = pc.tiled_offset + model_tiled_address(pc, x, y);
                            store(dst, a >> 2, model_linear_word(pc, src, x, y));
                        }
                    }
                } else {
                    if x0 >= pc.width_bytes || y >= pc.rows {
                        continue;
                    }
                    let la = pc.linear_offset + y * pc.linear_stride + x0;
                    assert_eq!(la & 3, 0);
                    for k in 0..4 {
                        let x = x0 + 4 * k;
                        if x >= pc.width_bytes {
                            break;
                        }
                        let n = (pc.width_bytes - x).min(4);
                        let w = (la >> 2) + k;
                        let mut word = model_tiled_bytes(pc, src, x, y, n);
                        if n < 4 {
                            word |= dst[w as usize] & (u32::MAX << (n * 8));
                        }
                        store(dst, w, word);
                    }
                }
            }
        }
    }
}

#[test]
fn shader_model_matches_the_cpu_reference() {
    let mut rng = Rng(99);
    for (layout, f) in cases() {
        for (w, h) in [(130u32, 66u32), (17, 9), (1, 1)] {
            for (offset, extra) in [(0u64, 0u64), (12, 20), (13, 7), (4, u64::MAX), (16, u64::MAX)] {
                let (planes, len) = if extra == u64::MAX {
                    aligned_planes(f, w, h, offset)
                } else {
                    padded_planes(f, w, h, offset, extra)
                };
                let linear = rng.bytes(len);
                let g = tiled_size(layout, f, w, h).unwrap();
                let tiled_base = 8u64;
                let frame = TiledFrame { layout, fourcc: f, extent: (w, h) };

                // Tile: CPU reference vs model.
                let mut cpu_tiled = vec![0u8; g.size as usize];
                tile(frame, (&linear, &planes), &mut cpu_tiled).unwrap();
                let mut gpu_tiled = vec![0xabcd_ef01u32; (tiled_base as usize + g.size as usize).div_ceil(4)];
                let src = words(&linear);
                for d in plane_dispatches(frame, tiled_base, &planes, true).unwrap() {
                    model_dispatch(&d.push, d.group_counts, &src, &mut gpu_tiled);
                }
                let bytes = unwords(&gpu_tiled, tiled_base as usize + g.size as usize);
                assert_eq!(
                    &bytes[tiled_base as usize..],
                    &cpu_tiled[..],
                    "{layout} {f} {w}x{h} +{offset}/{extra}: tile"
                );

                // Detile into a buffer full of other data: only visible bytes change.
                let fill = rng.bytes(len);
                let mut cpu_lin = fill.clone();
                detile(frame, &cpu_tiled, (&mut cpu_lin, &planes)).unwrap();
                let mut gpu_lin = words(&fill);
                let src = words(&bytes);
                for d in plane_dispatches(frame, tiled_base, &planes, false).unwrap() {
                    model_dispatch(&d.push, d.group_counts, &src, &mut gpu_lin);
                }
                assert_eq!(unwords(&gpu_lin, len), cpu_lin, "{layout} {f} {w}x{h} +{offset}/{extra}: detile");
            }
        }
    }
}

// ---- Colour ----

const COMBOS: [(ColourMatrix, ColourRange); 6] = [
    (ColourMatrix::Bt601, ColourRange::Limited),
    (ColourMatrix::Bt601, ColourRange::Full),
    (ColourMatrix::Bt709, ColourRange::Limited),
    (ColourMatrix::Bt709, ColourRange::Full),
    (ColourMatrix::Bt2020, ColourRange::Limited),
    (ColourMatrix::Bt2020, ColourRange::Full),
];

fn close<T: Into<i32> + Copy>(a: [T; 3], b: [T; 3]) -> bool {
    a.iter().zip(b).all(|(&x, y)| (x.into() - y.into()).abs() <= 1)
}

#[test]
fn yuv_to_rgb_fixed_point_is_within_one_of_float() {
    for (m, r) in COMBOS {
        for (bits, out_bits) in [(8u32, 8u32), (10, 8), (10, 10), (8, 10)] {
            let k = YuvToRgb::new(m, r, bits, out_bits);
            let max = (1i32 << bits) - 1;
            let step = 1 << (bits - 8);
            for y in (0..=max).step_by(3 * step as usize) {
                for u in (0..=max).step_by(5 * step as usize) {
                    for v in (0..=max).step_by(7 * step as usize) {
                        let (a, b) = (k.convert(y, u, v), yuv_to_rgb_float(m, r, bits, out_bits, y, u, v));
                        assert!(close(a, b), "{m:?} {r:?} {bits}-bit -> {out_bits}-bit ({y},{u},{v}): {a:?} vs {b:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn rgb_to_yuv_fixed_point_is_within_one_of_float() {
    let mut rng = Rng(3);
    for (m, r) in COMBOS {
        let k = RgbToYuv::new(m, r);
        for rr in (0..=255).step_by(15) {
            for gg in (0..=255).step_by(17) {
                for bb in (0..=255).step_by(51) {
                    // A 2x2 block: this colour and three random neighbours.
                    let mut block = [[rr as u8, gg as u8, bb as u8]; 4];
                    for p in block.iter_mut().skip(1) {
                        let b = rng.bytes(3);
                        *p = [b[0], b[1], b[2]];
                    }
                    let sum = |i: usize| block.iter().map(|p| p[i] as i32).sum::<i32>();
                    let (fy, fc) = rgb_to_yuv_float(m, r, &block);
                    let y = k.luma(rr, gg, bb);
                    let c = k.chroma(sum(0), sum(1), sum(2));
                    assert!((y as i32 - fy as i32).abs() <= 1, "{m:?} {r:?} Y of {:?}: {y} vs {fy}", block[0]);
                    for i in 0..2 {
                        assert!((c[i] as i32 - fc[i] as i32).abs() <= 1, "{m:?} {r:?} C of {block:?}: {c:?} vs {fc:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn whole_image_colour_conversions() {
    let mut rng = Rng(11);
    let (w, h) = (17u32, 9u32);
    for (m, r) in COMBOS {
        // NV12 at unaligned offsets -> RGBA, checked against the float reference per pixel.
        let (planes, len) = padded_planes(Fourcc::NV12, w, h, 5, 3);
        let yuv = rng.bytes(len);
        let rgba_plane = PlaneLayout::linear(16, w as u64 * 4 + 8, h);
        let mut rgba = vec![0u8; 16 + (rgba_plane.stride * h as u64) as usize];
        yuv_to_rgb((Fourcc::NV12, Fourcc::ABGR8888), (m, r), (w, h), (&yuv, &planes), (&mut rgba, rgba_plane)).unwrap();
        for y in 0..h as u64 {
            for x in 0..w as u64 {
                let l = yuv[(planes[0].offset + y * planes[0].stride + x) as usize] as i32;
                let c = (planes[1].offset + (y / 2) * planes[1].stride + (x / 2) * 2) as usize;
                let want = yuv_to_rgb_float(m, r, 8, 8, l, yuv[c] as i32, yuv[c + 1] as i32);
                let o = (rgba_plane.offset + y * rgba_plane.stride + x * 4) as usize;
                assert!(close([rgba[o] as u16, rgba[o + 1] as u16, rgba[o + 2] as u16], want), "({x},{y})");
                assert_eq!(rgba[o + 3], 255);
            }
        }

        // RGBA -> NV12 at an odd size: the edge chroma blocks replicate the last column/row.
        let src = rgba.clone();
        let nv = packed_planes(Fourcc::NV12, w, h).unwrap();
        let mut out = vec![0u8; (w * h + 18 * 5) as usize];
        rgb_to_nv12(Fourcc::ABGR8888, (m, r), (w, h), (&src, rgba_plane), (&mut out, &nv)).unwrap();
        let px = |x: u64, y: u64| {
            let o = (rgba_plane.offset + y.min(h as u64 - 1) * rgba_plane.stride + x.min(w as u64 - 1) * 4) as usize;
            [src[o], src[o + 1], src[o + 2]]
        };
        for cy in 0..5u64 {
            for cx in 0..9u64 {
                let block =
                    [px(2 * cx, 2 * cy), px(2 * cx + 1, 2 * cy), px(2 * cx, 2 * cy + 1), px(2 * cx + 1, 2 * cy + 1)];
                let (fy, fc) = rgb_to_yuv_float(m, r, &block);
                let c = (nv[1].offset + cy * nv[1].stride + cx * 2) as usize;
                assert!((out[c] as i32 - fc[0] as i32).abs() <= 1 && (out[c + 1] as i32 - fc[1] as i32).abs() <= 1);
                if 2 * cx < w as u64 && 2 * cy < h as u64 {
                    let yo = (2 * cy * w as u64 + 2 * cx) as usize;
                    assert!((out[yo] as i32 - fy as i32).abs() <= 1);
                }
            }
        }
    }
    // P010 input is 10 bits in the top of 16-bit words.
    let p010 = packed_planes(Fourcc::P010, 2, 2).unwrap();
    let mut buf = vec![0u8; 2 * 2 * 2 + 4];
    for (i, v) in [940u16, 940, 940, 940, 512, 512].iter().enumerate() {
        buf[i * 2..i * 2 + 2].copy_from_slice(&(v << 6).to_le_bytes());
    }
    let mut rgba = vec![0u8; 16];
    let plane = PlaneLayout::linear(0, 8, 2);
    yuv_to_rgb((Fourcc::P010, Fourcc::ABGR8888), (ColourMatrix::Bt709, ColourRange::Limited), (2, 2), (&buf, &p010), (&mut rgba, plane)).unwrap();
    assert_eq!(rgba, [255u8; 16]);
}

/// A linear plane whose declared size ends before its last row contradicts itself: the CPU
/// conversions and the GPU dispatch parameters refuse it by name, and one byte more is
/// enough.
#[test]
fn a_plane_smaller_than_its_rows_is_refused() {
    let (w, h) = (64u32, 32u32);
    let g = tiled_size(TileLayout::Nv12_4L4, Fourcc::NV12, w, h).unwrap();
    let tiled = vec![7u8; g.size as usize];
    let mut planes = packed_planes(Fourcc::NV12, w, h).unwrap();
    let mut dst = vec![0u8; g.size as usize];
    // The luma rows span 63 x 64 + 64 bytes.
    let needed = 64 * 32;
    planes[0].size = needed - 1;
    let frame = TiledFrame { layout: TileLayout::Nv12_4L4, fourcc: Fourcc::NV12, extent: (w, h) };
    let r = detile(frame, &tiled, (&mut dst, &planes));
    assert!(matches!(r, Err(TilingError::PlaneSize { offset: 0, stride: 64, size, needed: n }) if size == needed - 1 && n == needed), "{r:?}");
    let r = plane_dispatches(frame, 0, &planes, false);
    assert!(matches!(r, Err(dmabridge_interop::tiling::gpu::GpuParamError::Layout(TilingError::PlaneSize { .. }))), "{r:?}");
    planes[0].size = needed;
    detile(frame, &tiled, (&mut dst, &planes)).expect("a plane exactly its rows");
    plane_dispatches(frame, 0, &planes, false).expect("a plane exactly its rows");
}
