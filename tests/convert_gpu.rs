//! The GPU conversions against the CPU reference, byte for byte, on the real lavapipe with
//! the validation layer on: every layout, both directions, NV12 (both planes), P010 where
//! the layout defines it, AR24 and R8, at sizes that are and are not whole tiles.

mod common;

use dmabridge::interop::tiling::{self, packed_planes, tiled_size, ColourMatrix, ColourRange, TilingError};
use dmabridge::interop::{Fourcc, TileLayout};
use dmabridge::{ConvertError, Converter};

const FORMATS: [Fourcc; 4] = [Fourcc::NV12, Fourcc::P010, Fourcc::ARGB8888, Fourcc::R8];
const SIZES: [(u32, u32); 3] = [(64, 32), (130, 66), (17, 9)];

#[test]
fn every_layout_matches_the_cpu_reference_both_ways() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let mut checked = 0;
    for layout in TileLayout::ALL {
        for fourcc in FORMATS {
            for (w, h) in SIZES {
                let g = match tiled_size(layout, fourcc, w, h) {
                    Ok(g) => g,
                    // NV12-only decoder layouts refuse P010 and RGB: the GPU must refuse too.
                    Err(TilingError::UnsupportedFormat { .. }) => {
                        let r = conv.convert_layout(TileLayout::Linear, layout, fourcc, (w, h), &[0u8; 1 << 16]);
                        assert!(matches!(r, Err(ConvertError::Tiling(_)) | Err(ConvertError::Params(_))), "{layout} {fourcc}");
                        continue;
                    }
                    Err(e) => panic!("{layout} {fourcc} {w}x{h}: {e}"),
                };
                let planes = packed_planes(fourcc, w, h).expect("planes");
                let linear_len = tiled_size(TileLayout::Linear, fourcc, w, h).expect("linear").size as usize;
                let linear = common::pattern(linear_len, checked);

                let mut cpu_tiled = vec![0u8; g.size as usize];
                tiling::tile(layout, fourcc, w, h, &linear, &planes, &mut cpu_tiled).expect("cpu tile");
                let gpu_tiled = conv.convert_layout(TileLayout::Linear, layout, fourcc, (w, h), &linear).expect("gpu tile");
                assert!(gpu_tiled == cpu_tiled, "{layout} {fourcc} {w}x{h}: GPU tile differs from the CPU reference");

                // Detile random tiled data (padding included): only visible bytes matter.
                let tiled = common::pattern(g.size as usize, checked + 1000);
                let mut cpu_linear = vec![0u8; linear_len];
                tiling::detile(layout, fourcc, w, h, &tiled, &mut cpu_linear, &planes).expect("cpu detile");
                let gpu_linear = conv.convert_layout(layout, TileLayout::Linear, fourcc, (w, h), &tiled).expect("gpu detile");
                assert!(gpu_linear == cpu_linear, "{layout} {fourcc} {w}x{h}: GPU detile differs from the CPU reference");

                // And the round trip gives back the input.
                let back = conv.convert_layout(layout, TileLayout::Linear, fourcc, (w, h), &gpu_tiled).expect("round trip");
                assert!(back == linear, "{layout} {fourcc} {w}x{h}: tile then detile is not the identity");
                checked += 1;
            }
        }
    }
    assert!(checked >= 60, "only {checked} combinations ran");
    drop(conv);
    common::assert_clean(&engine);
}

#[test]
fn tiled_to_tiled_goes_through_linear() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let (w, h) = (130, 66);
    let linear = common::pattern(tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).expect("g").size as usize, 7);
    let samsung = conv.convert_layout(TileLayout::Linear, TileLayout::Samsung64x32, Fourcc::NV12, (w, h), &linear).expect("tile");
    let nvidia = conv
        .convert_layout(TileLayout::Samsung64x32, TileLayout::NvidiaBlockLinear(2), Fourcc::NV12, (w, h), &samsung)
        .expect("samsung -> nvidia");
    let back = conv.convert_layout(TileLayout::NvidiaBlockLinear(2), TileLayout::Linear, Fourcc::NV12, (w, h), &nvidia).expect("detile");
    assert!(back == linear);
    drop(conv);
    common::assert_clean(&engine);
}

#[test]
fn colour_matches_the_cpu_reference_exactly() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    for (w, h) in [(64u32, 32u32), (33, 17)] {
        for matrix in [ColourMatrix::Bt601, ColourMatrix::Bt709] {
            for range in [ColourRange::Limited, ColourRange::Full] {
                for fourcc in [Fourcc::NV12, Fourcc::P010] {
                    let planes = packed_planes(fourcc, w, h).expect("planes");
                    let len = tiled_size(TileLayout::Linear, fourcc, w, h).expect("g").size as usize;
                    let yuv = common::pattern(len, w + h);
                    let rgba_plane = tiling::LinearPlane { offset: 0, stride: w as u64 * 4 };
                    let mut cpu = vec![0u8; (w * h * 4) as usize];
                    tiling::yuv_to_rgba(fourcc, matrix, range, w, h, &yuv, &planes, &mut cpu, rgba_plane).expect("cpu");
                    let gpu = conv.yuv_to_rgba(fourcc, matrix, range, (w, h), &yuv).expect("gpu");
                    assert!(gpu == cpu, "{fourcc} -> RGBA {matrix:?} {range:?} {w}x{h}");
                }
                let rgba = common::pattern((w * h * 4) as usize, 99);
                let planes = packed_planes(Fourcc::NV12, w, h).expect("planes");
                let len = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).expect("g").size as usize;
                let mut cpu = vec![0u8; len];
                let rgba_plane = tiling::LinearPlane { offset: 0, stride: w as u64 * 4 };
                tiling::rgba_to_nv12(matrix, range, w, h, &rgba, rgba_plane, &mut cpu, &planes).expect("cpu");
                let gpu = conv.rgba_to_nv12(matrix, range, (w, h), &rgba).expect("gpu");
                assert!(gpu == cpu, "RGBA -> NV12 {matrix:?} {range:?} {w}x{h}");
            }
        }
    }
    drop(conv);
    common::assert_clean(&engine);
}

#[test]
fn short_input_is_a_typed_error() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let r = conv.convert_layout(TileLayout::Samsung64x32, TileLayout::Linear, Fourcc::NV12, (64, 32), &[0u8; 100]);
    assert!(matches!(r, Err(ConvertError::InputSize { .. })), "{r:?}");
    drop(conv);
    common::assert_clean(&engine);
}
