//! The interface of the compute shaders `shaders/tile.comp` and `shaders/colour.comp`:
//! push constants and dispatch sizes, computed here from the same geometry as the CPU
//! reference. This is plain data (no Vulkan); the engine re-exports it next to the SPIR-V.
//!
//! Both shaders: `local_size_x = 64`. Dispatch exactly [`Dispatch::group_counts`]; the
//! shaders map it back to their work (flat index `gid.x + gid.y * num_groups.x * 64` for
//! flat work, so more than 65535 groups fit; `(16-byte group, row)` grids use `gid.y +
//! gid.z * num_groups.y` as the row). Invocations past the work return at once.
//!
//! ## `tile.comp`, one dispatch per plane
//! - binding 0: `readonly buffer { uint src[]; }`: the source (tiled side in detile mode,
//!   linear side in tile mode).
//! - binding 1: `buffer { uint dst[]; }`: the destination. Bound read-write: a linear
//!   destination word that holds bytes outside the plane is read, merged and written back.
//! - Both bindings are also declared as `uvec4[]` aliases of the same descriptor (16-byte
//!   accesses); bind whole buffers, or ranges whose offset is a multiple of 16.
//! - push constants: [`TilePushConstants`] (64 bytes).
//! - Modes: 1 tiles (grid over the padded rows, 16 bytes per invocation); 2 detiles to a
//!   linear side whose offset and stride are multiples of 4 (grid over the visible rows);
//!   0 detiles to any offset and stride (flat over the destination words, slower: it
//!   divides by the stride per byte). The linear layout is always a detile-mode copy.
//! - Every destination word is written by exactly one invocation of a dispatch. Dispatches
//!   of two planes whose linear destinations share a word (unaligned offset or stride) must
//!   be separated by a buffer memory barrier (shader write -> shader read/write).
//!
//! ## `colour.comp`, one dispatch per image
//! - binding 0: the Y plane's buffer, binding 1: the UV plane's buffer (may be the same
//!   buffer as binding 0), binding 2: the RGB buffer; all `buffer { uint data[]; }`.
//! - push constants: [`ColourPushConstants`] (116 bytes, within the 128 every device has).
//! - The YUV side may be tiled ([`tiled_yuv_to_rgb_dispatch`]): the shader then reads it
//!   through the same address function as `tile.comp` (`shaders/tiled_address.glsl`), so
//!   detile and colour conversion are one pass.

use super::colour::{ColourError, ColourMatrix, ColourRange, RgbPacking, RgbToYuv, YuvToRgb};
use super::geometry::{tiled_size, PlaneGeometry, TiledFrame};
use super::geometry::rows_end;
use super::{AddressKind, PlaneLayout, TilingError};
use crate::{Fourcc, TileLayout};

/// Why the shaders cannot run a conversion that the CPU reference could.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuParamError {
    #[error("{what} reaches byte {end}; the shaders address at most 4 GiB per binding")]
    TooLarge { what: &'static str, end: u64 },
    #[error("{what} offset {offset} / stride {stride} must be multiples of 4 for the GPU path")]
    Unaligned { what: &'static str, offset: u64, stride: u64 },
    #[error(transparent)]
    Colour(#[from] ColourError),
    #[error(transparent)]
    Layout(#[from] TilingError),
}

/// Push constants of `tile.comp` (std430, 16 x u32 = 64 bytes). Field order is the
/// shader's `PushConstants` block order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TilePushConstants {
    /// 0: detile, any linear alignment (binding 0 laid out by `layout_kind`, binding 1
    /// linear); 1: tile (binding 0 linear, binding 1 laid out by `layout_kind`, never
    /// linear); 2: detile to a linear side with offset and stride multiples of 4.
    pub mode: u32,
    /// [`AddressKind`] as u32.
    pub layout_kind: u32,
    /// Visible bytes per row.
    pub width_bytes: u32,
    /// Visible rows.
    pub rows: u32,
    /// log2 of the tile width in bytes (every layout's tiles are powers of two).
    pub tile_width_log2: u32,
    /// log2 of the tile height in rows.
    pub tile_height_log2: u32,
    pub tiles_x: u32,
    pub tiles_y: u32,
    pub padded_width: u32,
    pub padded_rows: u32,
    /// Byte offset of the plane in the tiled-side binding.
    pub tiled_offset: u32,
    /// Bytes per row of the tiled side when `layout_kind` is linear.
    pub tiled_pitch: u32,
    /// Byte offset of the plane in the linear-side binding.
    pub linear_offset: u32,
    /// Byte stride of the linear side.
    pub linear_stride: u32,
    /// Mode 0: destination words from `(linear_offset / 16) * 4` (the plane's first
    /// 16-byte group) to its last byte; else 0.
    pub linear_words: u32,
    /// Mode 0: flat invocations that do work; else 0.
    pub invocations: u32,
}

/// Push constants of `colour.comp` (std430, 29 x 32-bit = 116 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ColourPushConstants {
    /// 0: NV12 -> RGB, 1: P010 -> RGB, 2: RGB -> NV12.
    pub mode: u32,
    pub width: u32,
    pub height: u32,
    /// The Y plane's start, and its stride when `tiled_kind` is 0 (linear).
    pub y_offset: u32,
    pub y_stride: u32,
    pub uv_offset: u32,
    pub uv_stride: u32,
    pub rgba_offset: u32,
    pub rgba_stride: u32,
    pub invocations: u32,
    /// [`RgbPacking::shader_word`] of the RGB side.
    pub packing: u32,
    /// [`AddressKind`] of the YUV planes (modes 0/1); 0: linear, at the strides above.
    pub tiled_kind: u32,
    /// log2 tile width | log2 tile height << 8, tiles per row, rows of tiles: Y plane.
    pub y_tiles: u32,
    pub y_tiles_x: u32,
    pub y_tiles_y: u32,
    /// The same for the UV plane.
    pub uv_tiles: u32,
    pub uv_tiles_x: u32,
    pub uv_tiles_y: u32,
    /// Modes 0/1: [`YuvToRgb::words`] then zeros; mode 2: [`RgbToYuv::words`].
    pub k: [i32; 11],
}

macro_rules! as_bytes {
    ($t:ty) => {
        impl $t {
            /// The bytes to hand to `vkCmdPushConstants`.
            pub fn as_bytes(&self) -> &[u8] {
                bytemuck::bytes_of(self)
            }
        }
    };
}
as_bytes!(TilePushConstants);
as_bytes!(ColourPushConstants);

/// Push constants plus the `vkCmdDispatch` group counts for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatch<P> {
    pub push: P,
    pub group_counts: [u32; 3],
}

/// Workgroup size of both shaders.
pub const LOCAL_SIZE: u32 = 64;

/// Group counts covering `invocations` with the 2D flattening the shaders use.
pub fn group_counts(invocations: u32) -> [u32; 3] {
    let groups = invocations.div_ceil(LOCAL_SIZE).max(1);
    if groups <= 65535 {
        [groups, 1, 1]
    } else {
        [65535, groups.div_ceil(65535), 1]
    }
}

fn fits(what: &'static str, end: Option<u64>) -> Result<u32, GpuParamError> {
    match end {
        // A little headroom: the shaders round byte addresses up to whole 16-byte groups.
        Some(e) if e <= (u32::MAX - 64) as u64 => Ok(e as u32),
        _ => Err(GpuParamError::TooLarge { what, end: end.unwrap_or(u64::MAX) }),
    }
}

/// Last byte (exclusive) of a linear plane, which must fit a binding.
fn linear_end(what: &'static str, p: &PlaneGeometry, l: PlaneLayout) -> Result<u32, GpuParamError> {
    fits(what, rows_end(p, &l)?)
}

fn base(p: &PlaneGeometry) -> TilePushConstants {
    TilePushConstants {
        layout_kind: p.kind as u32,
        width_bytes: p.width_bytes,
        rows: p.rows,
        tile_width_log2: p.tile_width.trailing_zeros(),
        tile_height_log2: p.tile_height.trailing_zeros(),
        tiles_x: p.tiles_x,
        tiles_y: p.tiles_y,
        padded_width: p.padded_width_bytes,
        padded_rows: p.padded_rows,
        ..Default::default()
    }
}

/// Group counts of a `(16-byte group, row)` grid: x covers the row, y and z the rows.
fn row_grid(row_bytes: u32, rows: u32) -> Result<[u32; 3], GpuParamError> {
    let gx = row_bytes.div_ceil(16).div_ceil(LOCAL_SIZE).max(1);
    if gx > 65535 {
        return Err(GpuParamError::TooLarge { what: "row", end: row_bytes as u64 });
    }
    Ok([gx, rows.clamp(1, 65535), rows.div_ceil(65535).max(1)])
}

/// Detile with binding 0 addressed by `push.layout_kind` at `tiled_offset`, and binding 1
/// linear at `linear`.
fn detile_mode(
    mut push: TilePushConstants,
    p: &PlaneGeometry,
    linear: PlaneLayout,
) -> Result<Dispatch<TilePushConstants>, GpuParamError> {
    let end = linear_end("linear plane", p, linear)?;
    push.linear_offset = fits("linear plane", Some(linear.offset))?;
    push.linear_stride = fits("linear stride", Some(linear.stride))?;
    if linear.offset % 4 == 0 && linear.stride % 4 == 0 {
        push.mode = 2;
        return Ok(Dispatch { push, group_counts: row_grid(p.width_bytes, p.rows)? });
    }
    push.mode = 0;
    push.linear_words = end.div_ceil(4) - push.linear_offset / 16 * 4;
    push.invocations = push.linear_words.div_ceil(4);
    Ok(Dispatch { push, group_counts: group_counts(push.invocations) })
}

/// `tile.comp` parameters for tiled -> linear of one plane. `tiled_base` is where the
/// concatenated tiled buffer starts in binding 0; `linear` is the plane in binding 1.
pub fn detile_plane(
    p: &PlaneGeometry,
    tiled_base: u64,
    linear: PlaneLayout,
) -> Result<Dispatch<TilePushConstants>, GpuParamError> {
    let mut push = base(p);
    let start = tiled_base.checked_add(p.offset);
    fits("tiled plane", start.and_then(|s| s.checked_add(p.size)))?;
    push.tiled_offset = fits("tiled plane", start)?;
    push.tiled_pitch = p.padded_width_bytes;
    detile_mode(push, p, linear)
}

/// `tile.comp` parameters for linear -> tiled of one plane: `linear` is the plane in
/// binding 0, `tiled_base` where the tiled buffer starts in binding 1 (a multiple of 4).
/// Every byte of the padded tiled plane is written, padding with zeros. For the linear
/// layout this is a detile-mode copy from the source rows to the packed destination.
pub fn tile_plane(
    p: &PlaneGeometry,
    linear: PlaneLayout,
    tiled_base: u64,
) -> Result<Dispatch<TilePushConstants>, GpuParamError> {
    let start = tiled_base.checked_add(p.offset);
    fits("tiled plane", start.and_then(|s| s.checked_add(p.size)))?;
    let start = fits("tiled plane", start)?;
    if p.kind == AddressKind::Linear {
        let mut push = base(p);
        push.tiled_offset = fits("linear plane", Some(linear.offset))?;
        push.tiled_pitch = fits("linear stride", Some(linear.stride))?;
        linear_end("linear plane", p, linear)?;
        return detile_mode(push, p, PlaneLayout::linear(start as u64, p.width_bytes as u64, p.rows));
    }
    if start % 4 != 0 {
        return Err(GpuParamError::Unaligned {
            what: "tiled plane",
            offset: start as u64,
            stride: p.padded_width_bytes as u64,
        });
    }
    let mut push = base(p);
    push.mode = 1;
    push.tiled_offset = start;
    push.linear_offset = fits("linear plane", Some(linear.offset))?;
    push.linear_stride = fits("linear stride", Some(linear.stride))?;
    linear_end("linear plane", p, linear)?;
    Ok(Dispatch { push, group_counts: row_grid(p.padded_width_bytes, p.padded_rows)? })
}

/// One dispatch per plane for a whole image: tiled <-> linear, in the direction given.
pub fn plane_dispatches(frame: TiledFrame, tiled_base: u64, linear: &[PlaneLayout], to_tiled: bool) -> Result<Vec<Dispatch<TilePushConstants>>, GpuParamError> {
    let g = frame.geometry()?;
    if linear.len() != g.planes.len() {
        return Err(TilingError::PlaneCount { fourcc: frame.fourcc, expected: g.planes.len(), got: linear.len() }.into());
    }
    g.planes
        .iter()
        .zip(linear)
        .map(|(p, &l)| if to_tiled { tile_plane(p, l, tiled_base) } else { detile_plane(p, tiled_base, l) })
        .collect()
}

fn aligned(what: &'static str, l: PlaneLayout) -> Result<(), GpuParamError> {
    if l.offset % 4 != 0 || l.stride % 4 != 0 {
        return Err(GpuParamError::Unaligned { what, offset: l.offset, stride: l.stride });
    }
    Ok(())
}

fn colour_common(
    mode: u32,
    (yuv_fourcc, rgb_fourcc): (Fourcc, Fourcc),
    width: u32,
    height: u32,
    yuv: &[PlaneLayout],
    rgb: PlaneLayout,
) -> Result<ColourPushConstants, GpuParamError> {
    let yg = tiled_size(TileLayout::Linear, yuv_fourcc, width, height)?;
    let rg = tiled_size(TileLayout::Linear, rgb_fourcc, width, height)?;
    if yuv.len() != 2 {
        return Err(TilingError::PlaneCount { fourcc: yuv_fourcc, expected: 2, got: yuv.len() }.into());
    }
    linear_end("Y plane", &yg.planes[0], yuv[0])?;
    linear_end("UV plane", &yg.planes[1], yuv[1])?;
    linear_end("RGB plane", &rg.planes[0], rgb)?;
    aligned("RGB plane", rgb)?;
    Ok(ColourPushConstants {
        mode,
        width,
        height,
        y_offset: yuv[0].offset as u32,
        y_stride: yuv[0].stride as u32,
        uv_offset: yuv[1].offset as u32,
        uv_stride: yuv[1].stride as u32,
        rgba_offset: rgb.offset as u32,
        rgba_stride: rgb.stride as u32,
        ..ColourPushConstants::default()
    })
}

/// The mode and sample depth of a YUV -> RGB conversion, and the RGB packing.
fn yuv_to_rgb_kind(from: Fourcc, to: Fourcc) -> Result<(u32, u32, RgbPacking), GpuParamError> {
    let (mode, bits) = match from {
        f if f == Fourcc::NV12 => (0, 8),
        f if f == Fourcc::P010 => (1, 10),
        _ => return Err(ColourError::Unsupported { from, to }.into()),
    };
    let packing = RgbPacking::of(to).ok_or(ColourError::Unsupported { from, to })?;
    Ok((mode, bits, packing))
}

/// `colour.comp` parameters for linear NV12/P010 `from` (`yuv` = Y and UV planes, any
/// alignment) -> RGB format `to` (`rgb`, offset and stride multiples of 4), in `matrix` and
/// `range`. One invocation per 2x2 pixels.
pub fn yuv_to_rgb_dispatch(
    (from, to): (Fourcc, Fourcc),
    (matrix, range): (ColourMatrix, ColourRange),
    (width, height): (u32, u32),
    yuv: &[PlaneLayout],
    rgb: PlaneLayout,
) -> Result<Dispatch<ColourPushConstants>, GpuParamError> {
    let (mode, bits, packing) = yuv_to_rgb_kind(from, to)?;
    let mut push = colour_common(mode, (from, to), width, height, yuv, rgb)?;
    push.packing = packing.shader_word();
    push.k[..10].copy_from_slice(&YuvToRgb::new(matrix, range, bits, packing.bits()).words());
    push.invocations = fits("image", (width.div_ceil(2) as u64).checked_mul(height.div_ceil(2) as u64))?;
    Ok(Dispatch { push, group_counts: group_counts(push.invocations) })
}

/// `colour.comp` parameters for NV12/P010 `frame` (the tiled buffer at `tiled_base` in the
/// YUV bindings, planes as [`tiled_size`] places them) -> RGB format `to`, in `matrix` and
/// `range`: detile and colour conversion in one pass. A linear frame is the packed linear
/// image.
pub fn tiled_yuv_to_rgb_dispatch(
    frame: TiledFrame,
    to: Fourcc,
    (matrix, range): (ColourMatrix, ColourRange),
    tiled_base: u64,
    rgb: PlaneLayout,
) -> Result<Dispatch<ColourPushConstants>, GpuParamError> {
    let TiledFrame { fourcc: from, extent, .. } = frame;
    let g = frame.geometry()?;
    if g.planes.len() != 2 {
        return Err(TilingError::PlaneCount { fourcc: from, expected: 2, got: g.planes.len() }.into());
    }
    // As linear planes at their padded pitch; the tiled fields below override the addressing.
    let planes: Vec<PlaneLayout> =
        g.planes.iter().map(|p| PlaneLayout::linear(tiled_base + p.offset, p.padded_width_bytes as u64, p.padded_rows)).collect();
    let mut d = yuv_to_rgb_dispatch((from, to), (matrix, range), extent, &planes, rgb)?;
    fits("tiled buffer", tiled_base.checked_add(g.size))?;
    let kind = g.planes[0].kind;
    if kind != AddressKind::Linear {
        let tiles = |p: &PlaneGeometry| p.tile_width.trailing_zeros() | p.tile_height.trailing_zeros() << 8;
        let (y, uv) = (&g.planes[0], &g.planes[1]);
        d.push.tiled_kind = kind as u32;
        (d.push.y_tiles, d.push.y_tiles_x, d.push.y_tiles_y) = (tiles(y), y.tiles_x, y.tiles_y);
        (d.push.uv_tiles, d.push.uv_tiles_x, d.push.uv_tiles_y) = (tiles(uv), uv.tiles_x, uv.tiles_y);
    }
    Ok(d)
}

/// `colour.comp` parameters for 8-bit RGB format `from` -> NV12, in `matrix` and `range`.
/// All offsets and strides must be multiples of 4. One invocation per 4x2 pixels.
pub fn rgb_to_nv12_dispatch(
    from: Fourcc,
    (matrix, range): (ColourMatrix, ColourRange),
    (width, height): (u32, u32),
    rgb: PlaneLayout,
    nv12: &[PlaneLayout],
) -> Result<Dispatch<ColourPushConstants>, GpuParamError> {
    let packing = RgbPacking::of(from).filter(|p| p.bits() == 8).ok_or(ColourError::Unsupported { from, to: Fourcc::NV12 })?;
    let mut push = colour_common(2, (Fourcc::NV12, from), width, height, nv12, rgb)?;
    aligned("Y plane", nv12[0])?;
    aligned("UV plane", nv12[1])?;
    push.packing = packing.shader_word();
    push.k = RgbToYuv::new(matrix, range).words();
    push.invocations = fits("image", (width.div_ceil(4) as u64).checked_mul(height.div_ceil(2) as u64))?;
    Ok(Dispatch { push, group_counts: group_counts(push.invocations) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_constant_sizes() {
        assert_eq!(std::mem::size_of::<TilePushConstants>(), 64);
        assert_eq!(std::mem::size_of::<ColourPushConstants>(), 116);
        assert_eq!(TilePushConstants::default().as_bytes().len(), 64);
    }

    #[test]
    fn big_dispatches_use_two_dimensions() {
        assert_eq!(group_counts(64), [1, 1, 1]);
        assert_eq!(group_counts(65535 * 64 + 1), [65535, 2, 1]);
    }
}
