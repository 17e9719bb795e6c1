//! The GPU conversions against the CPU reference, byte for byte, on the real lavapipe with
//! the validation layer on: every layout, both directions, NV12 (both planes), P010 where
//! the layout defines it, AR24 and R8, at sizes that are and are not whole tiles.

mod common;

use dmabridge::interop::tiling::{self, packed_planes, tiled_size, ColourMatrix, ColourRange, FrameConversion, TiledFrame, TilingError};
use dmabridge::interop::dmabuf::PlaneLayout;
use dmabridge::interop::{Fourcc, TileLayout};
use dmabridge::{ChoiceReason, ConvertError, ConvertPath, Converter};

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
                let frame = TiledFrame { layout, fourcc, extent: (w, h) };
                let linear_len = tiled_size(TileLayout::Linear, fourcc, w, h).expect("linear").size as usize;
                let linear = common::pattern(linear_len, checked);

                let mut cpu_tiled = vec![0u8; g.size as usize];
                tiling::tile(frame, (&linear, &planes), &mut cpu_tiled).expect("cpu tile");
                let gpu_tiled = conv.convert_layout(TileLayout::Linear, layout, fourcc, (w, h), &linear).expect("gpu tile");
                assert!(gpu_tiled == cpu_tiled, "{layout} {fourcc} {w}x{h}: GPU tile differs from the CPU reference");

                // Detile random tiled data (padding included): only visible bytes matter.
                let tiled = common::pattern(g.size as usize, checked + 1000);
                let mut cpu_linear = vec![0u8; linear_len];
                tiling::detile(frame, &tiled, (&mut cpu_linear, &planes)).expect("cpu detile");
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
        for matrix in ColourMatrix::ALL {
            for range in [ColourRange::Limited, ColourRange::Full] {
                for fourcc in [Fourcc::NV12, Fourcc::P010] {
                    let planes = packed_planes(fourcc, w, h).expect("planes");
                    let len = tiled_size(TileLayout::Linear, fourcc, w, h).expect("g").size as usize;
                    let yuv = common::pattern(len, w + h);
                    let rgba_plane = PlaneLayout::linear(0, w as u64 * 4, h);
                    for to in [Fourcc::ABGR8888, Fourcc::XRGB2101010] {
                        let mut cpu = vec![0u8; (w * h * 4) as usize];
                        tiling::yuv_to_rgb((fourcc, to), (matrix, range), (w, h), (&yuv, &planes), (&mut cpu, rgba_plane)).expect("cpu");
                        let gpu = conv.yuv_to_rgb(TiledFrame { layout: TileLayout::Linear, fourcc, extent: (w, h) }, to, (matrix, range), &yuv).expect("gpu");
                        assert!(gpu == cpu, "{fourcc} -> {to} {matrix:?} {range:?} {w}x{h}");
                    }
                }
                let rgba = common::pattern((w * h * 4) as usize, 99);
                let planes = packed_planes(Fourcc::NV12, w, h).expect("planes");
                let len = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).expect("g").size as usize;
                let rgba_plane = PlaneLayout::linear(0, w as u64 * 4, h);
                for from in tiling::RGB8_FORMATS {
                    let mut cpu = vec![0u8; len];
                    tiling::rgb_to_nv12(from, (matrix, range), (w, h), (&rgba, rgba_plane), (&mut cpu, &planes)).expect("cpu");
                    let gpu = conv.rgb_to_nv12(from, (matrix, range), (w, h), &rgba).expect("gpu");
                    assert!(gpu == cpu, "{from} -> NV12 {matrix:?} {range:?} {w}x{h}");
                }
            }
        }
    }
    drop(conv);
    common::assert_clean(&engine);
}

/// Tiled NV12 straight to every RGB format a display scans out: every path the engine has
/// for it (the CPU fast path, the fused shader, copy commands plus the colour shader) writes
/// exactly what detiling and then the CPU reference write.
#[test]
fn every_path_agrees_on_tiled_yuv_to_every_rgb_format() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let (w, h) = (130u32, 66u32);
    let layouts = [TileLayout::Samsung64x32, TileLayout::Nv12_4L4, TileLayout::I915Y, TileLayout::NvidiaBlockLinear(1), TileLayout::Linear];
    let mut copy_commands_seen = false;
    for layout in layouts {
        let g = tiled_size(layout, Fourcc::NV12, w, h).expect("g");
        let tiled = common::pattern(g.size as usize, 17);
        let linear = tiling::detile_to_vec(layout, Fourcc::NV12, w, h, &tiled).expect("detile");
        for to in tiling::RGB8_FORMATS.into_iter().chain(tiling::RGB10_FORMATS) {
            for (matrix, range) in [(ColourMatrix::Bt601, ColourRange::Limited), (ColourMatrix::Bt2020, ColourRange::Full)] {
                let want = tiling::yuv_to_rgb_vec((Fourcc::NV12, to), (matrix, range), (w, h), &linear).expect("reference");
                let c = FrameConversion { matrix, range, ..FrameConversion::new((layout, Fourcc::NV12), (TileLayout::Linear, to), w, h) };
                let paths = conv.paths(&c).expect("paths");
                copy_commands_seen |= paths.contains(&ConvertPath::CopyCommands);
                for path in paths {
                    let (got, choice) = conv.convert_frame(&c, Some(path), &tiled).expect("convert");
                    assert_eq!(choice.path, path);
                    assert!(got == want, "{c} on {path} ({matrix:?} {range:?})");
                }
            }
        }
    }
    assert!(copy_commands_seen, "samsung-64x32 has wide row-major tiles: copy commands are a candidate");
    // Back: every 8-bit RGB format to a tiled NV12, on every path.
    let rgb = common::pattern((w * h * 4) as usize, 23);
    for from in tiling::RGB8_FORMATS {
        let c = FrameConversion::new((TileLayout::Linear, from), (TileLayout::Samsung64x32, Fourcc::NV12), w, h);
        let nv12 = tiling::rgb_to_nv12_vec(from, (c.matrix, c.range), (w, h), &rgb).expect("reference");
        let want = tiling::tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &nv12).expect("tile");
        for path in conv.paths(&c).expect("paths") {
            assert!(conv.convert_frame(&c, Some(path), &rgb).expect("convert").0 == want, "{c} on {path}");
        }
    }
    drop(conv);
    common::assert_clean(&engine);
}

/// The fused detile+colour shader recorded into a command buffer the caller submits (here the
/// engine's own submit, standing in for a host's): the same bytes as the CPU reference, and
/// a destination too small for the frame is a typed error before anything is recorded.
#[test]
fn the_fused_conversion_records_into_the_callers_command_buffer() {
    use dmabridge::{BufferLocation, GpuBuffer, SubmitOptions};
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let (w, h) = (200u32, 90u32);
    let layout = TileLayout::Samsung64x32;
    let frame = TiledFrame { layout, fourcc: Fourcc::NV12, extent: (w, h) };
    let g = frame.geometry().expect("g");
    let tiled = common::pattern(g.size as usize, 61);
    let linear = tiling::detile_to_vec(layout, Fourcc::NV12, w, h, &tiled).expect("detile");
    let want = tiling::yuv_to_rgb_vec((Fourcc::NV12, Fourcc::XBGR8888), (ColourMatrix::Bt709, ColourRange::Limited), (w, h), &linear).expect("reference");
    // The tiled frame 256 bytes into its buffer, the RGB rows padded to 1024 bytes.
    let mut src_bytes = vec![0u8; 256];
    src_bytes.extend_from_slice(&tiled);
    let src = GpuBuffer::from_bytes(&engine, &src_bytes).expect("src");
    let rgb = PlaneLayout::linear(64, 1024, h);
    let dst = GpuBuffer::new(&engine, 64 + 1024 * h as u64, BufferLocation::Readback).expect("dst");
    let (_, done) = engine
        .submit(SubmitOptions::default(), |cmd, until| {
            // SAFETY: the engine's own command buffer, recording, submitted with `until`;
            // both buffers are tracked below and outlive the wait.
            let r = unsafe {
                conv.record_yuv_to_rgb(cmd, (frame, Fourcc::XBGR8888), (ColourMatrix::Bt709, ColourRange::Limited), (&src, 256), (&dst, rgb), until)
            };
            src.track(until);
            dst.track(until);
            r
        })
        .expect("record");
    done.wait(dmabridge::READBACK_TIMEOUT).expect("wait");
    let out = dst.bytes().expect("idle");
    for y in 0..h as usize {
        let row = &out[64 + y * 1024..64 + y * 1024 + w as usize * 4];
        assert!(row == &want[y * w as usize * 4..(y + 1) * w as usize * 4], "row {y}");
    }
    let small = GpuBuffer::new(&engine, 1024, BufferLocation::Readback).expect("small");
    let (refused, nothing) = engine.submit(SubmitOptions::default(), |cmd, until| {
        // SAFETY: as above.
        let r = unsafe { conv.record_yuv_to_rgb(cmd, (frame, Fourcc::XBGR8888), (ColourMatrix::Bt709, ColourRange::Limited), (&src, 256), (&small, rgb), until) };
        Ok::<_, ConvertError>(r)
    }).expect("submit");
    assert!(matches!(refused, Err(ConvertError::InputSize { .. })), "{refused:?}");
    nothing.wait(dmabridge::READBACK_TIMEOUT).expect("an empty submission completes");
    drop((src, dst, small));
    drop(conv);
    common::assert_clean(&engine);
}

/// The model measures once per combination and size class, then answers from what it
/// measured; a forced path (per call, or for the whole engine) wins over it.
#[test]
fn the_cost_model_measures_once_and_can_be_overridden() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let c = FrameConversion::new((TileLayout::Nv12_4L4, Fourcc::NV12), (TileLayout::Linear, Fourcc::NV12), 320, 180);
    let first = conv.choose(&c, None).expect("choose");
    assert!(matches!(first.reason, ChoiceReason::Measured | ChoiceReason::Cached), "{first:?}");
    assert_eq!(first.candidates.len(), conv.paths(&c).expect("paths").len());
    assert!(first.candidates.iter().all(|m| m.gbps.is_finite() && m.gbps > 0.0), "{first:?}");
    let fastest = first.candidates.iter().copied().reduce(|a, b| if b.gbps > a.gbps { b } else { a }).expect("candidates");
    assert_eq!(first.path, fastest.path, "the fastest as measured wins");
    let again = conv.choose(&c, None).expect("choose");
    assert_eq!((again.reason, again.path, &again.candidates), (ChoiceReason::Cached, first.path, &first.candidates));
    assert!(again.explain().contains("as measured before"), "{}", again.explain());
    let forced = conv.choose(&c, Some(ConvertPath::Gpu)).expect("choose");
    assert_eq!((forced.path, forced.reason), (ConvertPath::Gpu, ChoiceReason::Forced));
    engine.set_convert_path(Some(ConvertPath::Cpu));
    assert_eq!(conv.choose(&c, None).expect("choose").path, ConvertPath::Cpu);
    engine.set_convert_path(None);
    // A path that cannot do the conversion is a typed error.
    let colour = FrameConversion::new((TileLayout::Linear, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), 64, 64);
    let input = vec![0u8; 64 * 64 * 3 / 2];
    assert!(matches!(conv.convert_frame(&colour, Some(ConvertPath::CopyCommands), &input), Err(ConvertError::PathUnavailable { .. })));
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
