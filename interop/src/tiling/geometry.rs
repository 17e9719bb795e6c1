//! Tile sizes per layout and plane, and the padded size of every plane of a tiled buffer.

use super::address::{AddressKind, PlaneAddress};
use super::{PlaneLayout, TilingError};
use crate::{format_info, FormatInfo, Fourcc, TileLayout};

/// One plane of a tiled buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneGeometry {
    /// The address function family of this plane.
    pub kind: AddressKind,
    /// Visible bytes per row (the tightly packed row of the linear image).
    pub width_bytes: u32,
    /// Visible rows.
    pub rows: u32,
    /// Tile width in bytes (1 for linear).
    pub tile_width: u32,
    /// Tile height in rows (1 for linear; the block height for NVIDIA block linear).
    pub tile_height: u32,
    /// Tiles per row of tiles.
    pub tiles_x: u32,
    /// Rows of tiles.
    pub tiles_y: u32,
    /// `tiles_x * tile_width`: the row padded to whole tiles.
    pub padded_width_bytes: u32,
    /// `tiles_y * tile_height`: the rows padded to whole tiles.
    pub padded_rows: u32,
    /// Where the plane starts in the concatenated tiled buffer.
    pub offset: u64,
    /// `padded_width_bytes * padded_rows`.
    pub size: u64,
}

/// What a frame is, before any bytes: its layout, format and extent. What the conversions
/// take where they would otherwise take those four loose; [`TiledFrame::geometry`] places
/// its planes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TiledFrame {
    pub layout: TileLayout,
    pub fourcc: Fourcc,
    /// Width and height in pixels.
    pub extent: (u32, u32),
}

impl TiledFrame {
    /// The frame's planes in a buffer laid out by the module conventions ([`tiled_size`]).
    pub fn geometry(&self) -> Result<TiledGeometry, TilingError> {
        tiled_size(self.layout, self.fourcc, self.extent.0, self.extent.1)
    }
}

/// The whole tiled buffer: its planes, concatenated, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiledGeometry {
    pub layout: TileLayout,
    pub fourcc: Fourcc,
    pub width: u32,
    pub height: u32,
    pub planes: Vec<PlaneGeometry>,
    /// Bytes of all planes together.
    pub size: u64,
}

/// `(kind, tile width in bytes, tile height in rows, width alignment in bytes)` of one
/// plane, from the layout's row of [`crate::tile_layout::TILE_LAYOUTS`].
fn plane_tiles(layout: TileLayout, plane: usize, cpp: u32) -> Result<(AddressKind, u32, u32, u32), TilingError> {
    let row = layout.info().ok_or(TilingError::InvalidLayout(layout))?;
    let tile = row.tiles[plane.min(1)];
    let width = tile.width_bytes(cpp);
    Ok((row.address, width, tile.height, width * tile.row_tiles))
}

fn info_for(layout: TileLayout, fourcc: Fourcc) -> Result<&'static FormatInfo, TilingError> {
    let info = format_info(fourcc).ok_or(TilingError::UnknownFormat(fourcc))?;
    let only = layout.info().ok_or(TilingError::InvalidLayout(layout))?.only;
    if only.is_some_and(|only| only != fourcc) {
        return Err(TilingError::UnsupportedFormat {
            layout,
            fourcc,
            why: "this is a V4L2/GStreamer NV12 decoder layout, defined for 8-bit NV12 only",
        });
    }
    Ok(info)
}

fn round_up(v: u64, to: u64) -> Option<u64> {
    v.checked_add(to - 1).map(|s| s / to * to)
}

/// The size and plane layout of `fourcc` at `width`x`height` in `layout`, under the
/// conventions of the module docs. For [`TileLayout::Linear`] it is the tightly packed image.
pub fn tiled_size(layout: TileLayout, fourcc: Fourcc, width: u32, height: u32) -> Result<TiledGeometry, TilingError> {
    if width == 0 || height == 0 {
        return Err(TilingError::EmptyImage { width, height });
    }
    let info = info_for(layout, fourcc)?;
    let overflow = TilingError::SizeOverflow { layout, fourcc, width, height };
    let mut planes = Vec::with_capacity(info.plane_count());
    let mut offset = 0u64;
    for (p, pi) in info.planes.iter().enumerate() {
        let (kind, tile_width, tile_height, align) = plane_tiles(layout, p, pi.cpp as u32)?;
        let width_bytes = info.min_stride(p, width);
        let rows = info.plane_height(p, height) as u64;
        let padded_w = round_up(width_bytes, align as u64).ok_or_else(|| overflow.clone())?;
        let padded_rows = round_up(rows, tile_height as u64).ok_or_else(|| overflow.clone())?;
        let size = padded_w.checked_mul(padded_rows).ok_or_else(|| overflow.clone())?;
        let to_u32 = |v: u64| u32::try_from(v).map_err(|_| overflow.clone());
        planes.push(PlaneGeometry {
            kind,
            width_bytes: to_u32(width_bytes)?,
            rows: to_u32(rows)?,
            tile_width,
            tile_height,
            tiles_x: to_u32(padded_w / tile_width as u64)?,
            tiles_y: to_u32(padded_rows / tile_height as u64)?,
            padded_width_bytes: to_u32(padded_w)?,
            padded_rows: to_u32(padded_rows)?,
            offset,
            size,
        });
        offset = offset.checked_add(size).ok_or_else(|| overflow.clone())?;
    }
    Ok(TiledGeometry { layout, fourcc, width, height, planes, size: offset })
}

/// The tightly packed linear layout (the CLI's): planes back to back, stride = row bytes.
pub fn packed_planes(fourcc: Fourcc, width: u32, height: u32) -> Result<Vec<PlaneLayout>, TilingError> {
    let g = tiled_size(TileLayout::Linear, fourcc, width, height)?;
    Ok(g.planes.iter().map(|p| PlaneLayout::linear(p.offset, p.width_bytes as u64, p.rows)).collect())
}

/// Checks that `planes` describe a linear image of `geometry` that fits in `len` bytes,
/// with rows that do not overlap.
pub(crate) fn check_linear(
    geometry: &TiledGeometry,
    planes: &[PlaneLayout],
    len: usize,
    what: &'static str,
) -> Result<(), TilingError> {
    if planes.len() != geometry.planes.len() {
        return Err(TilingError::PlaneCount {
            fourcc: geometry.fourcc,
            expected: geometry.planes.len(),
            got: planes.len(),
        });
    }
    for (i, (g, l)) in geometry.planes.iter().zip(planes).enumerate() {
        let row_bytes = g.width_bytes as u64;
        if l.stride < row_bytes {
            return Err(TilingError::StrideTooSmall { plane: i, stride: l.stride, row_bytes });
        }
        let end = rows_end(g, l)?;
        match end {
            Some(end) if end <= len as u64 => {}
            _ => {
                return Err(TilingError::BufferTooSmall {
                    what,
                    plane: i,
                    needed: end.unwrap_or(u64::MAX),
                    got: len as u64,
                })
            }
        }
    }
    Ok(())
}

/// The first byte past the last row of linear plane `l` laid out as `p` (`None` when that
/// overflows), after checking that `l.size` covers those rows: the conversions touch only
/// the rows, so a size that ends before them is a contradiction, not padding.
pub(crate) fn rows_end(p: &PlaneGeometry, l: &PlaneLayout) -> Result<Option<u64>, TilingError> {
    let span = (p.rows as u64).saturating_sub(1).checked_mul(l.stride).and_then(|v| v.checked_add(p.width_bytes as u64));
    if let Some(needed) = span.filter(|&n| n > l.size) {
        return Err(TilingError::PlaneSize { offset: l.offset, stride: l.stride, size: l.size, needed });
    }
    Ok(span.and_then(|v| v.checked_add(l.offset)))
}

/// A plane's address function, from its geometry (here, so that the address functions need
/// not know how a plane is laid out).
impl PlaneAddress {
    /// The address function of `plane`.
    pub fn of(plane: &PlaneGeometry) -> Self {
        PlaneAddress {
            kind: plane.kind,
            tile_width: plane.tile_width,
            tile_height: plane.tile_height,
            tiles_x: plane.tiles_x,
            tiles_y: plane.tiles_y,
            pitch: plane.padded_width_bytes as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gstreamer_sizes() {
        // NV12_64Z32 (video-info.c): offset[1] = RU128(w) * RU32(h); size adds RU128(w) * RU64(h)/2.
        let g = tiled_size(TileLayout::Samsung64x32, Fourcc::NV12, 130, 66).unwrap();
        assert_eq!(g.planes[1].offset, 256 * 96);
        assert_eq!(g.size, 256 * 96 + 256 * 128 / 2);
        // NV12_16L32S: chroma has as many (16x16) tiles as luma has (16x32) tiles.
        let g = tiled_size(TileLayout::Nv12_16L32S, Fourcc::NV12, 17, 33).unwrap();
        assert_eq!((g.planes[0].tiles_x, g.planes[0].tiles_y), (2, 2));
        assert_eq!((g.planes[1].tiles_x, g.planes[1].tiles_y), (2, 2));
        // NV12_8L128: uv tile rows = RU2(y tile rows) / 2.
        let g = tiled_size(TileLayout::Nv12_8L128, Fourcc::NV12, 9, 300).unwrap();
        assert_eq!((g.planes[0].tiles_y, g.planes[1].tiles_y), (3, 2));
    }

    #[test]
    fn refuses_p010_for_decoder_layouts_and_bad_sizes() {
        assert!(matches!(
            tiled_size(TileLayout::Nv12_4L4, Fourcc::P010, 64, 64),
            Err(TilingError::UnsupportedFormat { .. })
        ));
        assert!(tiled_size(TileLayout::I915Y, Fourcc::P010, 64, 64).is_ok());
        assert!(matches!(tiled_size(TileLayout::I915X, Fourcc::NV12, 0, 4), Err(TilingError::EmptyImage { .. })));
        assert!(matches!(
            tiled_size(TileLayout::I915X, Fourcc::ABGR16161616F, u32::MAX, u32::MAX),
            Err(TilingError::SizeOverflow { .. })
        ));
        assert!(matches!(
            tiled_size(TileLayout::NvidiaBlockLinear(6), Fourcc::R8, 4, 4),
            Err(TilingError::InvalidLayout(_))
        ));
    }
}
