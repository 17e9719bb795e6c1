//! Tiling and detiling a whole image on the CPU: the reference the GPU must match.
//!
//! Both directions walk the visible rows in runs of bytes that are contiguous in the tiled
//! plane ([`PlaneAddress::run_bytes`]) and differ only in which side is copied from, so the
//! address arithmetic lives in one place ([`super::address`]).

use super::address::PlaneAddress;
use super::geometry::{check_linear, packed_planes, tiled_size, TiledFrame, TiledGeometry};
use super::{alloc_output, PlaneLayout, TilingError};
use crate::{Fourcc, TileLayout};

/// Which way bytes move between the linear and the tiled buffer.
#[derive(Clone, Copy)]
pub(super) enum Direction {
    LinearToTiled,
    TiledToLinear,
}

/// Calls `f(linear_offset, tiled_offset, len)` for every contiguous run of visible bytes of
/// every plane. Offsets are absolute in their buffers; the checks done by the callers keep
/// them inside the buffers.
fn for_each_run(geometry: &TiledGeometry, linear: &[PlaneLayout], mut f: impl FnMut(usize, usize, usize)) {
    for (g, l) in geometry.planes.iter().zip(linear) {
        let addr = PlaneAddress::of(g);
        let run = addr.run_bytes().min(g.width_bytes);
        for y in 0..g.rows {
            let row = l.offset + y as u64 * l.stride;
            let mut x = 0u32;
            while x < g.width_bytes {
                let len = run.min(g.width_bytes - x);
                let tiled = g.offset + addr.offset(x, y);
                f((row + x as u64) as usize, tiled as usize, len as usize);
                x += len;
            }
        }
    }
}

/// Validates both sides of a conversion of `frame` before anything is written (the fast
/// path runs the same checks).
pub(super) fn checked_geometry(
    direction: Direction,
    frame: TiledFrame,
    linear: &[PlaneLayout],
    linear_len: usize,
    tiled_len: usize,
) -> Result<TiledGeometry, TilingError> {
    let geometry = frame.geometry()?;
    let (linear_what, tiled_what) = match direction {
        Direction::LinearToTiled => ("linear source", "tiled destination"),
        Direction::TiledToLinear => ("linear destination", "tiled source"),
    };
    check_linear(&geometry, linear, linear_len, linear_what)?;
    check_tiled_len(&geometry, tiled_len, tiled_what)?;
    Ok(geometry)
}

/// Linear -> tiled. Reads the frame's planes from `src` at `src_planes` (offset and stride
/// per plane) and writes the whole tiled buffer (all planes, padding zeroed) to the start
/// of `dst`, which must hold at least [`TiledFrame::geometry`]`.size` bytes; bytes after
/// that are left alone. Returns the geometry written.
pub fn tile(frame: TiledFrame, (src, src_planes): (&[u8], &[PlaneLayout]), dst: &mut [u8]) -> Result<TiledGeometry, TilingError> {
    let g = checked_geometry(Direction::LinearToTiled, frame, src_planes, src.len(), dst.len())?;
    dst[..g.size as usize].fill(0);
    for_each_run(&g, src_planes, |l, t, n| dst[t..t + n].copy_from_slice(&src[l..l + n]));
    Ok(g)
}

/// Tiled -> linear. Reads the tiled buffer from the start of `src` and writes the visible
/// bytes of every plane to `dst` at `dst_planes`; bytes of `dst` outside the visible rows
/// (row padding up to the stride, gaps between planes) are left alone.
pub fn detile(frame: TiledFrame, src: &[u8], (dst, dst_planes): (&mut [u8], &[PlaneLayout])) -> Result<TiledGeometry, TilingError> {
    let g = checked_geometry(Direction::TiledToLinear, frame, dst_planes, dst.len(), src.len())?;
    for_each_run(&g, dst_planes, |l, t, n| dst[l..l + n].copy_from_slice(&src[t..t + n]));
    Ok(g)
}

/// Tiled -> linear into a new, tightly packed linear image ([`packed_planes`]): `src` is
/// checked to hold the whole tiled buffer, and the output against
/// [`MAX_CPU_FRAME_BYTES`](super::MAX_CPU_FRAME_BYTES), before the output is allocated.
pub fn detile_to_vec(layout: TileLayout, fourcc: Fourcc, width: u32, height: u32, src: &[u8]) -> Result<Vec<u8>, TilingError> {
    let g = tiled_size(layout, fourcc, width, height)?;
    check_tiled_len(&g, src.len(), "tiled source")?;
    let packed = packed_planes(fourcc, width, height)?;
    let linear = tiled_size(TileLayout::Linear, fourcc, width, height)?;
    let mut out = alloc_output("linear image", linear.size)?;
    detile(TiledFrame { layout, fourcc, extent: (width, height) }, src, (&mut out, &packed))?;
    Ok(out)
}

/// Linear (tightly packed, [`packed_planes`]) -> tiled into a new buffer of
/// [`tiled_size`] bytes: `src` is checked to hold the whole linear image, and the output
/// against [`MAX_CPU_FRAME_BYTES`](super::MAX_CPU_FRAME_BYTES), before the output is
/// allocated.
pub fn tile_to_vec(layout: TileLayout, fourcc: Fourcc, width: u32, height: u32, src: &[u8]) -> Result<Vec<u8>, TilingError> {
    let g = tiled_size(layout, fourcc, width, height)?;
    let packed = packed_planes(fourcc, width, height)?;
    check_linear(&g, &packed, src.len(), "linear source")?;
    let mut out = alloc_output("tiled image", g.size)?;
    tile(TiledFrame { layout, fourcc, extent: (width, height) }, (src, &packed), &mut out)?;
    Ok(out)
}

fn check_tiled_len(g: &TiledGeometry, len: usize, what: &'static str) -> Result<(), TilingError> {
    if (len as u64) < g.size {
        return Err(TilingError::BufferTooSmall {
            what,
            plane: g.planes.len().saturating_sub(1),
            needed: g.size,
            got: len as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i915x_is_row_major_inside_tiles() {
        let (w, h) = (1024u32, 8u32);
        let src: Vec<u8> = (0..w * h).map(|i| (i % 251) as u8).collect();
        let planes = packed_planes(Fourcc::R8, w, h).unwrap();
        let mut dst = vec![0xaa; 8192];
        tile(TiledFrame { layout: TileLayout::I915X, fourcc: Fourcc::R8, extent: (w, h) }, (&src, &planes), &mut dst).unwrap();
        // Byte (600, 3) is in tile 1, row 3, column 88.
        assert_eq!(dst[4096 + 3 * 512 + 88], src[3 * 1024 + 600]);
    }

    #[test]
    fn too_small_buffers_are_refused() {
        let planes = packed_planes(Fourcc::NV12, 16, 16).unwrap();
        let src = vec![0u8; 16 * 16 + 16 * 8 - 1];
        let mut dst = vec![0u8; 1 << 16];
        let frame = TiledFrame { layout: TileLayout::Nv12_4L4, fourcc: Fourcc::NV12, extent: (16, 16) };
        assert!(matches!(
            tile(frame, (&src, &planes), &mut dst),
            Err(TilingError::BufferTooSmall { plane: 1, .. })
        ));
        let src = vec![0u8; 16 * 16 + 16 * 8];
        let mut small = vec![0u8; 100];
        assert!(matches!(
            tile(frame, (&src, &planes), &mut small),
            Err(TilingError::BufferTooSmall { .. })
        ));
        let bad = [PlaneLayout::linear(0, 15, 16), planes[1]];
        assert!(matches!(
            tile(frame, (&src, &bad), &mut dst),
            Err(TilingError::StrideTooSmall { plane: 0, .. })
        ));
        let huge = [PlaneLayout::linear(u64::MAX - 2, 16, 16), planes[1]];
        assert!(matches!(
            tile(frame, (&src, &huge), &mut dst),
            Err(TilingError::BufferTooSmall { .. })
        ));
    }

    #[test]
    fn to_vec_checks_the_input_before_allocating_the_output() {
        // 200000 x 200000 NV12: a 60 GB output, refused by the input check (the input is
        // empty), then by the cap with an input claimed big enough.
        let (w, h) = (200_000, 200_000);
        assert!(matches!(
            detile_to_vec(TileLayout::I915Y, Fourcc::NV12, w, h, &[]),
            Err(TilingError::BufferTooSmall { what: "tiled source", .. })
        ));
        assert!(matches!(
            tile_to_vec(TileLayout::I915Y, Fourcc::NV12, w, h, &[]),
            Err(TilingError::BufferTooSmall { what: "linear source", .. })
        ));
        assert!(matches!(
            alloc_output("x", crate::tiling::MAX_CPU_FRAME_BYTES + 1),
            Err(TilingError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn to_vec_round_trips() {
        let (w, h) = (70u32, 38u32);
        let n = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).unwrap().size as usize;
        let linear: Vec<u8> = (0..n).map(|i| (i * 7 % 253) as u8).collect();
        for layout in TileLayout::ALL {
            let tiled = tile_to_vec(layout, Fourcc::NV12, w, h, &linear).unwrap();
            assert_eq!(tiled.len() as u64, tiled_size(layout, Fourcc::NV12, w, h).unwrap().size);
            assert_eq!(detile_to_vec(layout, Fourcc::NV12, w, h, &tiled).unwrap(), linear, "{layout}");
        }
    }
}
