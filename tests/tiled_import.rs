//! The copy fallback for tiled dma-bufs: a buffer in a layout no Vulkan driver samples
//! (a V4L2 decoder's Samsung tiles, NVIDIA block linear) is imported as storage buffers and
//! detiled on the GPU, after the layout checks and the tiled ones (stride = padded row,
//! padded tiles inside the fd).

mod common;

use dmabridge::interop::dmabuf::{plane_rows, DmaBuf, PlaneLayout};
use dmabridge::interop::tiling::{self, packed_planes, tiled_size};
use dmabridge::interop::{Fourcc, Layout, TileLayout};
use std::io::Write;

use dmabridge::{ConvertError, ConvertPath, Converter, ImportError, ImportOptions};

/// A tiled buffer of `layout` holding `linear`, in one memfd with `gap` bytes before each
/// plane (so plane offsets differ from the concatenated convention).
fn tiled_dmabuf(layout: TileLayout, fourcc: Fourcc, extent: (u32, u32), linear: &[u8], gap: u64) -> DmaBuf {
    tiled_dmabuf_in(layout, fourcc, extent, linear, gap, true)
}

/// [`tiled_dmabuf`], in a sealed memfd (`sealed`) or one that can shrink.
fn tiled_dmabuf_in(layout: TileLayout, fourcc: Fourcc, (w, h): (u32, u32), linear: &[u8], gap: u64, sealed: bool) -> DmaBuf {
    let g = tiled_size(layout, fourcc, w, h).expect("geometry");
    let mut tiled = vec![0u8; g.size as usize];
    tiling::tile(tiling::TiledFrame { layout, fourcc, extent: (w, h) }, (linear, &packed_planes(fourcc, w, h).expect("planes")), &mut tiled).expect("tile");
    let mut file = Vec::new();
    let mut planes = Vec::new();
    for p in &g.planes {
        file.resize(file.len() + gap as usize, 0xAA);
        let offset = file.len() as u64;
        file.extend_from_slice(&tiled[p.offset as usize..(p.offset + p.size) as usize]);
        planes.push(PlaneLayout { object: 0, offset, stride: p.padded_width_bytes as u64, size: p.size });
    }
    let modifier = layout.modifier().expect("a layout with a DRM modifier");
    let fd = if sealed {
        common::dmabuf_with(&file)
    } else {
        let fd = rustix::fs::memfd_create("dmabridge-test-unsealed", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
        std::fs::File::from(fd.try_clone().expect("dup")).write_all(&file).expect("write");
        fd
    };
    DmaBuf::in_one_file(fourcc, Layout::Explicit(modifier), w, h, fd, &planes).expect("descriptor")
}

/// The copy path runs where the cost model says, or where it is told: on the CPU (a fixed-
/// size fd mapped read-only, a shrinkable one read with pread) and on the GPU, the same bytes.
#[test]
fn a_tiled_dmabuf_detiles_the_same_on_every_path() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    for (layout, fourcc, extent) in [
        (TileLayout::Samsung64x32, Fourcc::NV12, (130u32, 66u32)),
        (TileLayout::I915Y, Fourcc::NV12, (200, 40)),
        (TileLayout::NvidiaBlockLinear(1), Fourcc::ARGB8888, (70, 45)),
    ] {
        let len = tiled_size(TileLayout::Linear, fourcc, extent.0, extent.1).expect("g").size as usize;
        let linear = common::pattern(len, 44);
        for sealed in [true, false] {
            let buf = tiled_dmabuf_in(layout, fourcc, extent, &linear, 4096, sealed);
            for path in [ConvertPath::Cpu, ConvertPath::Gpu] {
                engine.set_convert_path(Some(path));
                let d = conv.detile_dmabuf(&buf, ImportOptions::default(), dmabridge::READBACK_TIMEOUT).expect("detile");
                assert_eq!(d.run.layout, layout);
                assert!(d.buffer.bytes().expect("idle") == &linear[..], "{layout} {fourcc} on {path}, sealed {sealed}");
            }
        }
    }
    engine.set_convert_path(None);
    drop(conv);
    common::assert_clean(&engine);
}

#[test]
fn samsung_nv12_and_nvidia_ar24_are_detiled_on_the_gpu() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    for (layout, fourcc, extent) in [
        (TileLayout::Samsung64x32, Fourcc::NV12, (130u32, 66u32)),
        (TileLayout::NvidiaBlockLinear(2), Fourcc::ARGB8888, (70, 45)),
        (TileLayout::Allwinner32x32, Fourcc::NV12, (64, 64)),
    ] {
        let len = tiled_size(TileLayout::Linear, fourcc, extent.0, extent.1).expect("g").size as usize;
        let linear = common::pattern(len, 40);
        let buf = tiled_dmabuf(layout, fourcc, extent, &linear, 4096);
        // The Vulkan import refuses it (lavapipe has no such modifier)...
        let e = engine.import_dmabuf(&buf, dmabridge::ash::vk::ImageUsageFlags::SAMPLED).expect_err("no driver samples it");
        assert!(matches!(e, ImportError::NeedsConversion(_)), "{e}");
        // ...and the copy fallback detiles it.
        let d = conv.detile_dmabuf(&buf, ImportOptions::default(), dmabridge::READBACK_TIMEOUT).expect("detile");
        assert_eq!(d.run.layout, layout);
        assert!(d.buffer.bytes().expect("idle") == &linear[..], "{layout} {fourcc}: wrong bytes");
    }
    drop(conv);
    common::assert_clean(&engine);
}

#[test]
fn tiled_layouts_are_checked_before_the_driver() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let (w, h) = (128u32, 64u32);
    let g = tiled_size(TileLayout::Samsung64x32, Fourcc::NV12, w, h).expect("g");
    let samsung = Layout::Explicit(TileLayout::Samsung64x32.modifier().expect("modifier"));
    // A stride that is not the padded row of whole tiles (in a file big enough that the
    // generic layout checks pass, so the tiled check is the one that refuses).
    let roomy = vec![0u8; 1 << 20];
    let bad_stride = DmaBuf::in_one_file(Fourcc::NV12, samsung, w, h, common::memfd_with(&roomy), &[PlaneLayout::linear(0, g.planes[0].padded_width_bytes as u64 + 64, plane_rows(Fourcc::NV12, 0, h)), PlaneLayout::linear(1 << 19, g.planes[1].padded_width_bytes as u64, plane_rows(Fourcc::NV12, 1, h))])
    .expect("descriptor");
    assert!(matches!(conv.detile_dmabuf(&bad_stride, ImportOptions::default(), dmabridge::READBACK_TIMEOUT), Err(ConvertError::TiledStride { .. })));
    // Tiles that run past the end of the fd (the visible rows fit, the padded ones do not).
    let short = vec![0u8; (g.planes[1].offset + g.planes[1].size - 1) as usize];
    let past = DmaBuf::in_one_file(Fourcc::NV12, samsung, w, h, common::memfd_with(&short), &[PlaneLayout::linear(0, g.planes[0].padded_width_bytes as u64, plane_rows(Fourcc::NV12, 0, h)), PlaneLayout::linear(g.planes[1].offset, g.planes[1].padded_width_bytes as u64, plane_rows(Fourcc::NV12, 1, h))])
    .expect("descriptor");
    let e = conv.detile_dmabuf(&past, ImportOptions::default(), dmabridge::READBACK_TIMEOUT).expect_err("refused");
    assert!(matches!(e, ConvertError::TilesPastEndOfFd { .. } | ConvertError::Check(_)), "{e}");
    // A linear buffer is not for the detiler.
    let linear = DmaBuf::in_one_file(Fourcc::R8, Layout::Explicit(dmabridge::interop::Modifier::LINEAR), 4, 4, common::memfd_with(&[0u8; 16]), &[PlaneLayout::linear(0, 4, plane_rows(Fourcc::R8, 0, 4))])
        .expect("descriptor");
    assert!(matches!(conv.detile_dmabuf(&linear, ImportOptions::default(), dmabridge::READBACK_TIMEOUT), Err(ConvertError::NotTiled(_))));
    drop(conv);
    common::assert_clean(&engine);
}

#[test]
fn every_copy_plan_step_runs() {
    use dmabridge::interop::negotiate::ConversionKind;
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let (w, h) = (64u32, 32u32);
    let nv12 = common::pattern((w * h * 3 / 2) as usize, 41);
    let tiled = conv.run_step(&ConversionKind::Tile(TileLayout::Samsung64x32), Fourcc::NV12, (w, h), &nv12).expect("tile");
    let back = conv.run_step(&ConversionKind::Detile(TileLayout::Samsung64x32), Fourcc::NV12, (w, h), &tiled).expect("detile");
    assert!(back == nv12);
    let rgba = conv
        .run_step(&ConversionKind::YuvToRgb { from: Fourcc::NV12, to: Fourcc::ABGR8888 }, Fourcc::NV12, (w, h), &nv12)
        .expect("yuv->rgb");
    assert_eq!(rgba.len(), (w * h * 4) as usize);
    let yuv = conv
        .run_step(&ConversionKind::RgbToYuv { from: Fourcc::ABGR8888, to: Fourcc::NV12 }, Fourcc::ABGR8888, (w, h), &rgba)
        .expect("rgb->yuv");
    assert_eq!(yuv.len(), nv12.len());
    let copy = conv.run_step(&ConversionKind::CopyLinear, Fourcc::NV12, (w, h), &nv12).expect("copy");
    assert!(copy == nv12);
    drop(conv);
    common::assert_clean(&engine);
}
