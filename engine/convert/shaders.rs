//! The compute shaders, compiled to SPIR-V by `build.rs` (glslc + spirv-val) and embedded.
//!
//! The push-constant structs and dispatch sizes live in the Vulkan-free crate, next to the
//! CPU reference they are derived from, and are re-exported here:
//! [`dmabridge_interop::tiling::gpu`] documents the bindings and the dispatch of each shader.

pub use dmabridge_interop::tiling::gpu::{
    detile_plane, group_counts, plane_dispatches, rgb_to_nv12_dispatch, tile_plane, tiled_yuv_to_rgb_dispatch, yuv_to_rgb_dispatch, ColourPushConstants,
    Dispatch, GpuParamError, TilePushConstants, LOCAL_SIZE,
};

/// SPIR-V of `shaders/tile.comp` (tiled <-> linear, one plane per dispatch), as bytes.
pub static TILE_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tile.spv"));

/// SPIR-V of `shaders/colour.comp` (NV12/P010, linear or tiled, -> RGB; 8-bit RGB -> NV12), as bytes.
pub static COLOUR_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/colour.spv"));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::compute::spirv_words;

    #[test]
    fn embedded_modules_are_spirv() {
        for spv in [TILE_SPV, COLOUR_SPV] {
            let words = spirv_words(spv).unwrap();
            assert_eq!(words[0], 0x0723_0203);
        }
    }
}
