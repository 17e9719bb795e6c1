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
//!   offset and stride per linear plane; [`tile_to_vec`] and [`detile_to_vec`] allocate the
//!   output themselves, after checking the input and [`MAX_CPU_FRAME_BYTES`].
//! - [`fast`]: the same conversions at memory speed ([`detile_fast`], [`tile_fast`]):
//!   band by band, constant-size copies, on several threads. What the copy path runs on the
//!   CPU; the reference stays the simple one the tests compare against.
//! - [`colour`]: NV12/P010 -> every 8-bit RGB layout and AR30/XR30, and 8-bit RGB -> NV12,
//!   in fixed point, BT.601/BT.709/BT.2020,
//!   limited/full range, with the rounding documented there (and `_vec` forms that
//!   allocate their output the same way).
//! - [`colour_fast`]: the CPU fast path of colour conversion, detiling fused in
//!   ([`tiled_yuv_to_rgb_fast`]): tiled NV12/P010 -> RGB in one pass, and
//!   [`rgb_to_nv12_fast`], on several threads, with AVX2 loops (`colour_simd`) in the
//!   reference's own arithmetic where the CPU has it.
//! - [`frame`]: one whole-frame conversion ([`FrameConversion`]): its steps, fused where
//!   they can be, and its CPU fast path.
//! - [`gpu`]: the push constants and dispatch sizes of the shaders, computed from the same
//!   geometry so that the engine cannot disagree with the CPU reference.
//!
//! ## Conventions of a tiled buffer
//! A tiled plane's width in bytes is padded up to the tile width and its rows up to the
//! tile height; tiles are stored back to back in the layout's order; planes are
//! concatenated (Y, then UV) with no gap. Padding written by [`tile`] is zero.

pub mod address;
pub mod colour;
pub mod colour_fast;
mod colour_simd;
pub mod cpu;
pub mod fast;
mod parallel;
pub mod frame;
pub mod geometry;
pub mod gpu;

pub use address::{AddressKind, PlaneAddress};
pub use colour::{rgb_to_nv12, rgb_to_nv12_vec, yuv_to_rgb, yuv_to_rgb_vec, ColourError, ColourMatrix, RgbPacking, RGB10_FORMATS, RGB8_FORMATS, ColourRange};
pub use cpu::{detile, detile_to_vec, tile, tile_to_vec};
pub use colour_fast::{rgb_to_nv12_fast, tiled_yuv_to_rgb_fast};
pub use fast::{detile_fast, detile_plane_fast, tile_fast};
pub use parallel::default_threads;
pub use frame::{FrameConversion, FrameConversionError, Step};
pub use geometry::{packed_planes, tiled_size, PlaneGeometry, TiledFrame, TiledGeometry};

use crate::plane_layout::PlaneLayout;
use crate::{Fourcc, TileLayout};

/// The largest output a CPU conversion allocates: 1 GiB, a 16384 x 16384 RGBA8 frame (the
/// largest extent Vulkan devices commonly allow). Sizes are computed with checked arithmetic
/// and compared with this before any allocation, so a hostile extent (200000 x 200000) is a
/// [`TilingError::FrameTooLarge`], not an abort.
pub const MAX_CPU_FRAME_BYTES: u64 = 1 << 30;

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
    /// A linear plane's `size` does not reach the end of its last row: the layout
    /// contradicts itself, so neither the declared size nor the rows can be trusted.
    #[error("the linear plane at offset {offset} with stride {stride} declares {size} bytes, but its rows span {needed}")]
    PlaneSize { offset: u64, stride: u64, size: u64, needed: u64 },
    #[error("{what} buffer is {got} bytes, but plane {plane} needs {needed}")]
    BufferTooSmall { what: &'static str, plane: usize, needed: u64, got: u64 },
    #[error("the {what} would be {bytes} bytes, more than the {max} the CPU path allocates")]
    FrameTooLarge { what: &'static str, bytes: u64, max: u64 },
    #[error("could not allocate the {bytes}-byte {what}")]
    OutOfMemory { what: &'static str, bytes: u64 },
}

/// A zeroed output buffer of `bytes` for a CPU conversion: refused beyond
/// [`MAX_CPU_FRAME_BYTES`], and allocated fallibly, so that neither a huge size nor a
/// failed allocation aborts the process.
pub(crate) fn alloc_output(what: &'static str, bytes: u64) -> Result<Vec<u8>, TilingError> {
    if bytes > MAX_CPU_FRAME_BYTES {
        return Err(TilingError::FrameTooLarge { what, bytes, max: MAX_CPU_FRAME_BYTES });
    }
    let n = usize::try_from(bytes).map_err(|_| TilingError::OutOfMemory { what, bytes })?;
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| TilingError::OutOfMemory { what, bytes })?;
    out.resize(n, 0);
    Ok(out)
}

/// Deterministic bytes that differ from row to row and plane to plane (xorshift, no
/// dependency): the test frames of this workspace's tests and benches, in one place.
pub fn test_pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}
