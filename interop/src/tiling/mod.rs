//! CPU reference implementations of every layout conversion dmabridge does on the GPU.
//!
//! The GPU compute shaders (`shaders/tile.comp`, `shaders/colour.comp`) must match these
//! byte for byte; the tests compare against them, and `dmabridge convert --cpu` and the
//! no-Vulkan case run them directly.
//!
//! - [`geometry`]: how big a tiled plane is (padding to whole tiles) and where each plane of
//!   the concatenated tiled buffer starts: [`tiled_size`].
//! - [`address`]: the byte address of `(x, y)` inside a tiled plane, one small pure function
//!   per layout family, used by both directions and mirrored in the shader.
//! - [`cpu`]: [`tile`] (linear -> tiled) and [`detile`] (tiled -> linear), with an explicit
//!   offset and stride per linear plane.
//! - [`colour`]: NV12/P010 -> RGBA8 and RGBA8 -> NV12 in fixed point, BT.601/BT.709,
//!   limited/full range, with the rounding documented there.
//! - [`gpu`]: the push constants and dispatch sizes of the shaders, computed from the same
//!   geometry so that the engine cannot disagree with the CPU reference.
//!
//! ## Conventions of a tiled buffer
//! A tiled plane's width in bytes is padded up to the tile width and its rows up to the
//! tile height; tiles are stored back to back in the layout's order; planes are
//! concatenated (Y, then UV) with no gap. Padding written by [`tile`] is zero.

pub mod address;
pub mod colour;
pub mod cpu;
pub mod geometry;
pub mod gpu;

pub use address::{AddressKind, PlaneAddress};
pub use colour::{rgba_to_nv12, yuv_to_rgba, ColourError, ColourMatrix, ColourRange};
pub use cpu::{detile, tile};
pub use geometry::{packed_planes, tiled_size, PlaneGeometry, TiledGeometry};

use crate::{Fourcc, TileLayout};

/// Where one plane of a linear image lives in its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinearPlane {
    /// Byte offset of the plane's first row from the start of the buffer.
    pub offset: u64,
    /// Bytes from the start of one row to the start of the next (at least the row's width).
    pub stride: u64,
}

/// Why a layout conversion was refused. Nothing is written when one of these is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TilingError {
    #[error("format {0} has no plane table in dmabridge")]
    UnknownFormat(Fourcc),
    #[error("layout {layout} is not defined for {fourcc}: {why}")]
    UnsupportedFormat { layout: TileLayout, fourcc: Fourcc, why: &'static str },
    #[error("{0} is not a layout dmabridge can address (NVIDIA block linear needs N <= 5)")]
    InvalidLayout(TileLayout),
    #[error("image size {width}x{height} is empty")]
    EmptyImage { width: u32, height: u32 },
    #[error("image size {width}x{height} of {fourcc} in {layout} overflows the address arithmetic")]
    SizeOverflow { layout: TileLayout, fourcc: Fourcc, width: u32, height: u32 },
    #[error("{fourcc} has {expected} planes, but {got} linear plane descriptions were given")]
    PlaneCount { fourcc: Fourcc, expected: usize, got: usize },
    #[error("plane {plane}: stride {stride} is smaller than the row of {row_bytes} bytes")]
    StrideTooSmall { plane: usize, stride: u64, row_bytes: u64 },
    #[error("{what} buffer is {got} bytes, but plane {plane} needs {needed}")]
    BufferTooSmall { what: &'static str, plane: usize, needed: u64, got: u64 },
}
