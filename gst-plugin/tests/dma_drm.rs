//! GStreamer 1.24's `DMA_DRM` negotiation, run on this machine's 1.22 with
//! `DMABRIDGE_GST_DMA_DRM=1` (the caps are plain structures to the core; `appsrc` and
//! `appsink` pass them as they are): a tiled frame named by its DRM format and modifier is
//! read from its dma-buf and detiled into a DMA_DRM linear frame carrying a video meta; a
//! linear frame whose pitches only its video meta knows is converted to BGRx; layouts
//! GStreamer has no format name for (i915, NVIDIA block linear) are read by their modifier,
//! on the CPU and on the GPU; a modifier the element cannot read does not negotiate.

mod common;

use common::{dmabuf_buffer, pipeline};
use dmabridge_interop::tiling::{test_pattern, tile_to_vec};
use dmabridge_interop::{Fourcc, TileLayout};
use gst::prelude::*;

#[test]
fn the_templates_list_drm_formats() {
    common::init(true);
    // The element's class templates (the factory's may come from a registry cache that a
    // process without DMABRIDGE_GST_DMA_DRM wrote).
    let element = gst::ElementFactory::make("dmabridgeconvert").build().expect("element");
    let caps = |name: &str| element.pad_template(name).map(|t| t.caps().to_string()).expect("template");
    let (sink, src) = (caps("sink"), caps("src"));
    // Samsung and Allwinner NV12 (GStreamer names them), i915 Y-tiled NV12 and NVIDIA block
    // linear XRGB (it names neither: read from dmabridge's layout table).
    for wanted in ["format=(string)DMA_DRM", "NV12:0x0400000000000001", "NV12:0x0900000000000001", "NV12:0x0100000000000002", "XR24:0x0300000000000012", "AR24", "P010"] {
        assert!(sink.contains(wanted), "sink lacks {wanted}: {sink}");
    }
    assert!(src.contains("format=(string)DMA_DRM") && src.contains("XR24") && !src.contains("NV12:0x"), "the source writes linear: {src}");
}

#[test]
fn a_tiled_dma_drm_frame_detiles_into_a_linear_dma_drm_frame_with_a_video_meta() {
    common::init(true);
    let (w, h) = (256u32, 128u32);
    let linear = test_pattern((w * h * 3 / 2) as usize, 29);
    let tiled = tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &linear).expect("tile");
    let run = pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12:0x0400000000000001,width={w},height={h},framerate=0/1 ! \
         dmabridgeconvert name=conv ! video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12 ! appsink name=sink sync=false"
    ));
    run.src.push_buffer(dmabuf_buffer(&tiled)).expect("push");
    run.src.end_of_stream().expect("eos");
    let sample = run.sink.pull_sample().expect("a frame: the DMA_DRM caps negotiated");
    let caps = sample.caps().expect("caps").to_string();
    assert!(caps.contains("drm-format=(string)NV12") && caps.contains("memory:DMABuf"), "{caps}");
    let buffer = sample.buffer().expect("buffer");
    let mem = buffer.peek_memory(0);
    assert!(mem.downcast_memory_ref::<gst_allocators::DmaBufMemory>().is_some(), "dma-buf memory out");
    let meta = buffer.meta::<gst_video::VideoMeta>().expect("a video meta: where the planes are");
    let (offsets, strides) = (meta.offset().to_vec(), meta.stride().to_vec());
    assert_eq!((meta.width(), meta.height()), (w, h));
    let map = buffer.map_readable().expect("map");
    let bytes = map.as_slice();
    // Read the frame the way a DMA_DRM consumer must: through the meta's offsets and pitches.
    let mut got = Vec::new();
    for (p, rows) in [(0usize, h as usize), (1, h as usize / 2)] {
        for y in 0..rows {
            let at = offsets[p] + y * strides[p] as usize;
            got.extend_from_slice(&bytes[at..at + w as usize]);
        }
    }
    assert!(got == linear, "the DMA_DRM frame detiles to the original");
    drop(map);
    assert_eq!(run.pipeline.by_name("conv").expect("conv").property::<u64>("dmabuf-imports"), 1);
    run.pipeline.set_state(gst::State::Null).expect("stop");
}

#[test]
fn layouts_gstreamer_has_no_name_for_are_read_by_their_modifier() {
    common::init(true);
    for (layout, fourcc, gst_format) in [(TileLayout::I915Y, Fourcc::NV12, "NV12"), (TileLayout::NvidiaBlockLinear(2), Fourcc::XRGB8888, "BGRx")] {
        for path in ["cpu", "gpu"] {
            let conv = common::detile_by_modifier(layout, fourcc, gst_format, path, (192, 96));
            assert_eq!(conv.property::<u64>("gpu-dmabuf-frames"), u64::from(path == "gpu"), "{layout} on the {path}");
        }
    }
}

/// Zero-copy colour: a tiled NV12 dma-buf on the GPU path is imported and converted to RGB
/// by the fused shader straight from its fd (no CPU read, no upload), in the element's
/// matrix (BT.601 here, not the plan default), exactly as dmabridge's CPU reference.
#[test]
fn a_tiled_dma_buf_is_converted_to_rgb_by_the_gpu_from_its_fd() {
    use dmabridge_interop::tiling::{yuv_to_rgb_vec, ColourMatrix, ColourRange};
    common::init(true);
    let (w, h) = (192u32, 96u32);
    let linear = test_pattern((w * h * 3 / 2) as usize, 41);
    let tiled = tile_to_vec(TileLayout::I915Y, Fourcc::NV12, w, h, &linear).expect("tile");
    let run = pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12:0x0100000000000002,width={w},height={h},framerate=0/1 ! \
         dmabridgeconvert name=conv path=gpu matrix=bt601 ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    ));
    for _ in 0..3 {
        run.src.push_buffer(dmabuf_buffer(&tiled)).expect("push");
    }
    run.src.end_of_stream().expect("eos");
    let want = yuv_to_rgb_vec((Fourcc::NV12, Fourcc::XRGB8888), (ColourMatrix::Bt601, ColourRange::Limited), (w, h), &linear).expect("reference");
    for i in 0..3 {
        let sample = run.sink.pull_sample().expect("a frame");
        let map = sample.buffer().expect("buffer").map_readable().expect("map");
        assert!(map.as_slice().get(..want.len()) == Some(&want[..]), "frame {i}: the GPU's RGB is the BT.601 reference");
    }
    let conv = run.pipeline.by_name("conv").expect("conv");
    assert_eq!(conv.property::<u64>("gpu-dmabuf-frames"), 3, "the GPU read every frame from its dma-buf");
    assert_eq!(conv.property::<String>("current-path"), "gpu");
    run.pipeline.set_state(gst::State::Null).expect("stop");
}

#[test]
fn a_linear_frame_is_read_at_the_pitches_its_video_meta_gives() {
    common::init(true);
    let (w, h) = (128u32, 64u32);
    // Pitch 192 (not GStreamer's 128) and the chroma plane 4 KiB past the luma: only the meta says so.
    let (pitch, uv_offset) = (192usize, 192 * 64 + 4096);
    let (packed, file) = common::padded_nv12(w, h, pitch, uv_offset, 31);
    let mut buffer = dmabuf_buffer(&file);
    common::add_nv12_meta(buffer.get_mut().expect("writable"), (w, h), pitch, uv_offset);
    let run = pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12,width={w},height={h},framerate=0/1,colorimetry=bt709 ! \
         dmabridgeconvert ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    ));
    run.src.push_buffer(buffer).expect("push");
    run.src.end_of_stream().expect("eos");
    common::assert_bgrx_is_reference(&run, &packed, (w, h));
    run.pipeline.set_state(gst::State::Null).expect("stop");
}

#[test]
fn a_modifier_the_element_cannot_read_does_not_negotiate() {
    common::init(true);
    let common::Run { pipeline, src, .. } = pipeline(
        "appsrc name=src format=time caps=video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12:0x0200000000000001,width=64,height=64,framerate=0/1 ! \
         dmabridgeconvert ! video/x-raw,format=NV12 ! appsink name=sink sync=false",
    );
    let _ = src.push_buffer(dmabuf_buffer(&vec![0u8; 64 * 64 * 3 / 2]));
    let bus = pipeline.bus().expect("bus");
    let msg = bus.timed_pop_filtered(gst::ClockTime::from_seconds(10), &[gst::MessageType::Error]).expect("an error, not a hang");
    let gst::MessageView::Error(e) = msg.view() else { unreachable!() };
    let text = format!("{} {:?}", e.error(), e.debug());
    assert!(text.contains("not-negotiated") || text.contains("negotiat"), "{text}");
    pipeline.set_state(gst::State::Null).expect("stop");
}

/// DMA_DRM frames whose planes run past their dma-buf memory, in an fd that holds the rest: a
/// linear frame whose meta's last chroma row does, and an i915 Y-tiled frame 4 KiB longer
/// than its memory, on the CPU and on the GPU. Each is an error naming the plane; before the
/// fix the planes were checked against the fd, and the frame converted from bytes that were
/// never part of the memory.
#[test]
fn a_dma_drm_frame_whose_planes_run_past_its_memory_is_an_error() {
    common::init(true);
    let (w, h) = (128u32, 64u32);
    let (pitch, uv_offset) = (192usize, 192 * 64 + 4096);
    let (_, file) = common::padded_nv12(w, h, pitch, uv_offset, 43);
    let mut buffer = common::dmabuf_memory(common::dmabuf_fd(file.len(), &[(0, &file)]), file.len(), 0..file.len() - pitch);
    common::add_nv12_meta(buffer.get_mut().expect("writable"), (w, h), pitch, uv_offset);
    let run = pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12,width={w},height={h},framerate=0/1,colorimetry=bt709 ! \
         dmabridgeconvert ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    ));
    let text = common::expect_error(&run, buffer, "its last chroma row came from past the memory, in the fd");
    assert!(text.contains("plane 1") && text.contains("dma-buf memory"), "linear: {text}");

    let (w, h) = (192u32, 96u32);
    let tiled = tile_to_vec(TileLayout::I915Y, Fourcc::NV12, w, h, &test_pattern((w * h * 3 / 2) as usize, 44)).expect("tile");
    for path in ["cpu", "gpu"] {
        let buffer = common::dmabuf_memory(common::dmabuf_fd(tiled.len(), &[(0, &tiled)]), tiled.len(), 0..tiled.len() - 4096);
        let run = pipeline(&format!(
            "appsrc name=src format=time caps=video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12:0x0100000000000002,width={w},height={h},framerate=0/1 ! \
             dmabridgeconvert name=conv path={path} ! video/x-raw,format=NV12 ! appsink name=sink sync=false"
        ));
        let conv = run.pipeline.by_name("conv").expect("conv");
        let text = common::expect_error(&run, buffer, "its last 4 KiB of chroma tiles came from past the memory, in the fd");
        assert!(text.contains("plane 1") && text.contains("dma-buf memory"), "i915-y on the {path}: {text}");
        assert_eq!(conv.property::<u64>("gpu-dmabuf-frames"), 0, "{path}: the GPU read nothing");
    }
}
