//! The byte address of `(x, y)` (x in bytes, y in rows) inside one tiled plane.
//!
//! Every layout reduces to a tile index (which tile holds the byte) and an offset inside the
//! tile. These functions are the single definition of both: the CPU copy loops call them in
//! both directions, and `shaders/tiled_address.glsl` mirrors them line for line (keep the two
//! in step; the `AddressKind` discriminants are the shader's `KIND_*` constants, and a test
//! reads the shader to check them).
//!
//! A layout whose address no family here describes gets a new [`AddressKind`]: its variant,
//! its arms in [`PlaneAddress::offset`] and [`PlaneAddress::run_bytes`], and its mirror in the
//! shader (the `test-layout` feature's `InterlacedTiles` is the example). The CPU fast path
//! (`fast`) relies on what every family here has, and the layout table's tests check for
//! every row: tile (0, 0) comes first, each tile is `tile_width * tile_height` contiguous
//! bytes starting at the address of its first byte and laid out inside as every other tile,
//! each row of tiles (two, for Z-flip-Z) fills a contiguous band, and a row's bytes are
//! contiguous in runs of [`PlaneAddress::run_bytes`].


/// Layout families that share an address function. The discriminant is the shader's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AddressKind {
    /// Rows one after another, `pitch` bytes apart.
    Linear = 0,
    /// Row-major tiles with bytes row-major inside (i915-x, vivante, allwinner, the V4L2
    /// NV12 decoder layouts).
    RowMajorTiles = 1,
    /// i915 Y-tiles: 16-byte columns, column-major inside a 128x32 tile.
    I915Y = 2,
    /// 64x32 tiles in GStreamer's ZFLIPZ_2X2 order, bytes row-major inside.
    SamsungZFlipZ = 3,
    /// NVIDIA 16Bx2 block linear: blocks of 64 bytes x `tile_height` rows (2^N GOBs).
    NvidiaBlock = 4,
    /// The `test-layout` feature's made-up family: row-major tiles, each holding its even
    /// rows and then its odd rows.
    #[cfg(feature = "test-layout")]
    InterlacedTiles = 5,
}

/// Everything the address function of one plane needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneAddress {
    pub kind: AddressKind,
    /// Tile (block) width in bytes; 1 for linear.
    pub tile_width: u32,
    /// Tile (block) height in rows; 1 for linear.
    pub tile_height: u32,
    /// Tiles per row of tiles.
    pub tiles_x: u32,
    /// Rows of tiles.
    pub tiles_y: u32,
    /// Bytes per row; only [`AddressKind::Linear`] uses it.
    pub pitch: u64,
}

/// Offset of byte `(x, y)` inside an i915 Y-tile (`x < 128`, `y < 32`). Other inputs give a
/// meaningless number, never a panic (the arithmetic wraps).
pub const fn i915y_in_tile(x: u32, y: u32) -> u32 {
    (x / 16).wrapping_mul(512).wrapping_add(y.wrapping_mul(16)).wrapping_add(x % 16)
}

/// Offset of byte `(x, y)` inside an NVIDIA GOB (64 bytes x 8 rows): 16-byte x 2-row
/// sectors, as `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK` defines them. Only `x % 64` and `y % 8`
/// matter.
pub const fn nvidia_gob_offset(x: u32, y: u32) -> u32 {
    ((x % 64) / 32) * 256 + ((y % 8) / 2) * 64 + ((x % 32) / 16) * 32 + (y % 2) * 16 + x % 16
}

/// Index of tile `(tx, ty)` in memory, for GStreamer's `GST_VIDEO_TILE_MODE_ZFLIPZ_2X2`
/// (`gst_video_tile_get_index`): pairs of tile rows are walked in a Z, flipped Z, Z... of
/// 2x2 tiles; the last row of an odd number of tile rows is plain row-major.
/// `tiles_x` must be even (the geometry pads the plane to 128 bytes to ensure it). Every
/// input gives a number without panicking: u32 operands cannot overflow the u64 arithmetic.
pub const fn zflipz_tile_index(tx: u32, ty: u32, tiles_x: u32, tiles_y: u32) -> u64 {
    let (tx, ty64, tiles_x) = (tx as u64, ty as u64, tiles_x as u64);
    // < 2^32 * 2^32 - 2^32 + 2^32 + 2^32: fits in u64.
    let mut index = (ty64 & !1) * tiles_x + tx;
    if ty64 & 1 == 1 {
        index += 2 + (tx & !3);
    } else if tiles_y & 1 == 0 || ty != tiles_y.wrapping_sub(1) {
        index += (tx + 2) & !3;
    }
    index
}

impl PlaneAddress {
    /// Byte offset of `(x, y)` from the start of the plane. `x` and `y` must lie inside the
    /// padded plane; then the result is below the plane size, which the geometry checked.
    /// Outside it the result means nothing, but the arithmetic wraps rather than panics (and
    /// a zero tile size counts as one); [`PlaneAddress::checked_offset`] checks instead.
    pub fn offset(&self, x: u32, y: u32) -> u64 {
        if self.kind == AddressKind::Linear {
            return (y as u64).wrapping_mul(self.pitch).wrapping_add(x as u64);
        }
        let (tw, th) = (self.tile_width.max(1), self.tile_height.max(1));
        let (tx, ty, ix, iy) = (x / tw, y / th, x % tw, y % th);
        let tile_bytes = tw as u64 * th as u64;
        let row_major = (ty as u64).wrapping_mul(self.tiles_x as u64).wrapping_add(tx as u64);
        let (tile_index, inner) = match self.kind {
            AddressKind::Linear | AddressKind::RowMajorTiles => (row_major, iy as u64 * tw as u64 + ix as u64),
            AddressKind::I915Y => (row_major, i915y_in_tile(ix, iy) as u64),
            AddressKind::SamsungZFlipZ => {
                (zflipz_tile_index(tx, ty, self.tiles_x, self.tiles_y), iy as u64 * tw as u64 + ix as u64)
            }
            AddressKind::NvidiaBlock => (row_major, (iy / 8) as u64 * 512 + nvidia_gob_offset(ix, iy) as u64),
            #[cfg(feature = "test-layout")]
            AddressKind::InterlacedTiles => {
                let row = if iy % 2 == 0 { iy / 2 } else { th / 2 + iy / 2 };
                (row_major, row as u64 * tw as u64 + ix as u64)
            }
        };
        tile_index.wrapping_mul(tile_bytes).wrapping_add(inner)
    }

    /// [`PlaneAddress::offset`], or `None` when `(x, y)` lies outside the padded plane
    /// (`tiles_x * tile_width` bytes by `tiles_y * tile_height` rows; `pitch` bytes by any
    /// rows for linear) or the address does not fit in 64 bits.
    pub fn checked_offset(&self, x: u32, y: u32) -> Option<u64> {
        if self.kind == AddressKind::Linear {
            if u64::from(x) >= self.pitch {
                return None;
            }
            return u64::from(y).checked_mul(self.pitch)?.checked_add(u64::from(x));
        }
        let (tw, th) = (self.tile_width, self.tile_height);
        if tw == 0 || th == 0 || x / tw >= self.tiles_x || y / th >= self.tiles_y {
            return None;
        }
        // tiles_x * tiles_y tiles of tw * th bytes: the plane's size must fit for any byte to.
        let tiles = u64::from(self.tiles_x).checked_mul(u64::from(self.tiles_y))?;
        tiles.checked_mul(u64::from(tw) * u64::from(th))?;
        Some(self.offset(x, y))
    }

    /// Length of the runs of bytes that are contiguous in memory along a row, starting at
    /// every multiple of the run length. The copy loops move whole runs at a time.
    pub fn run_bytes(&self) -> u32 {
        match self.kind {
            AddressKind::Linear => u32::MAX,
            AddressKind::RowMajorTiles | AddressKind::SamsungZFlipZ => self.tile_width,
            AddressKind::I915Y | AddressKind::NvidiaBlock => 16,
            #[cfg(feature = "test-layout")]
            AddressKind::InterlacedTiles => self.tile_width,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zflipz_matches_the_gstreamer_table() {
        // The 8x7-tile table in GStreamer's video-tile.c comment.
        let table: [[u64; 8]; 7] = [
            [0, 1, 6, 7, 8, 9, 14, 15],
            [2, 3, 4, 5, 10, 11, 12, 13],
            [16, 17, 22, 23, 24, 25, 30, 31],
            [18, 19, 20, 21, 26, 27, 28, 29],
            [32, 33, 38, 39, 40, 41, 46, 47],
            [34, 35, 36, 37, 42, 43, 44, 45],
            [48, 49, 50, 51, 52, 53, 54, 55],
        ];
        for (y, row) in table.iter().enumerate() {
            for (x, &want) in row.iter().enumerate() {
                assert_eq!(zflipz_tile_index(x as u32, y as u32, 8, 7), want, "({x},{y})");
            }
        }
    }

    #[test]
    fn every_tile_index_is_used_once() {
        for tiles_x in [2u32, 4, 6, 8, 10] {
            for tiles_y in 1u32..8 {
                let mut seen = vec![false; (tiles_x * tiles_y) as usize];
                for ty in 0..tiles_y {
                    for tx in 0..tiles_x {
                        let i = zflipz_tile_index(tx, ty, tiles_x, tiles_y) as usize;
                        assert!(!seen[i], "{tiles_x}x{tiles_y}: {i} twice");
                        seen[i] = true;
                    }
                }
            }
        }
    }

    #[test]
    fn hostile_coordinates_and_sizes_do_not_panic() {
        for kind in [
            AddressKind::Linear,
            AddressKind::RowMajorTiles,
            AddressKind::I915Y,
            AddressKind::SamsungZFlipZ,
            AddressKind::NvidiaBlock,
        ] {
            for (tw, th, tx, ty, pitch) in [(0, 0, 0, 0, 0), (u32::MAX, u32::MAX, u32::MAX, u32::MAX, u64::MAX), (64, 8, 1, 0, 1)] {
                let a = PlaneAddress { kind, tile_width: tw, tile_height: th, tiles_x: tx, tiles_y: ty, pitch };
                for (x, y) in [(0, 0), (u32::MAX, u32::MAX), (63, 7), (64, 8)] {
                    let _ = a.offset(x, y);
                    if let Some(o) = a.checked_offset(x, y) {
                        assert_eq!(o, a.offset(x, y));
                    }
                }
            }
        }
        assert_eq!(zflipz_tile_index(u32::MAX, u32::MAX, u32::MAX, 0), zflipz_tile_index(u32::MAX, u32::MAX, u32::MAX, 0));
        let _ = i915y_in_tile(u32::MAX, u32::MAX);
    }

    #[test]
    fn gob_is_a_permutation() {
        let mut seen = [false; 512];
        for y in 0..8 {
            for x in 0..64 {
                let o = nvidia_gob_offset(x, y) as usize;
                assert!(!seen[o]);
                seen[o] = true;
            }
        }
    }
}
