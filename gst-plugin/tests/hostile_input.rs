//! Upstream as an adversary: video metas and dma-buf memories that describe more bytes than
//! upstream gave the element. Every plane is checked against the memory actually given (a
//! system-memory buffer's size, a dma-buf memory's offset and size in its fd, never the fd's
//! size), before anything reads it: a plane that runs past it is an element error naming the
//! plane, not a frame converted from someone else's bytes, nor a crash. A frame that fits its
//! memory inside a larger fd is converted from that memory's bytes alone, and a tiny frame
//! whose rows are far apart costs its visible rows, not the span between them.

mod common;

use common::{add_raw_video_meta, assert_bgrx_is_reference, dmabuf_buffer, dmabuf_fd, dmabuf_memory, expect_error, pipeline};
use dmabridge_interop::tiling::{test_pattern, tile_to_vec};
use dmabridge_interop::{Fourcc, TileLayout};
use gst::prelude::*;
use gst_video::VideoFormat;

/// `appsrc` (NV12 `w`x`h`, BT.709; `features` "(memory:DMABuf)" or "") into the element
/// (`path`), BGRx out.
fn nv12_to_bgrx(features: &str, (w, h): (u32, u32), path: &str) -> common::Run {
    pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw{features},format=NV12,width={w},height={h},framerate=0/1,colorimetry=bt709 ! \
         dmabridgeconvert name=conv path={path} ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    ))
}

/// A system-memory buffer whose memory is given the first `size` bytes of `bytes` only (the
/// rest of the allocation is another owner's: past the memory's size, inside its maxsize).
fn system_memory(bytes: Vec<u8>, size: usize) -> gst::Buffer {
    let mut buffer = gst::Buffer::from_mut_slice(bytes);
    buffer.get_mut().expect("writable").set_size(size);
    buffer
}

/// A buffer of several system memories, one per slice.
fn system_memories(parts: &[&[u8]]) -> gst::Buffer {
    let mut buffer = gst::Buffer::new();
    for part in parts {
        buffer.get_mut().expect("writable").append_memory(gst::Memory::from_slice(part.to_vec()));
    }
    buffer
}

/// A 64x32 NV12 frame (3072 bytes) whose chroma plane the meta puts one row further in than
/// the memory allows, in one memory followed by another owner's bytes (0xee), and in two
/// memories: before the fix GStreamer's frame mapping gave the element a plane running 64
/// bytes past its memory, and the element converted those bytes (a heap disclosure).
#[test]
fn a_video_meta_a_row_past_system_memory_is_an_error_not_a_disclosure() {
    common::init(false);
    let (w, h) = (64u32, 32u32);
    let frame = test_pattern((w * h * 3 / 2) as usize, 11);
    let mut allocation = frame.clone();
    allocation.extend(std::iter::repeat(0xee).take(4096));
    let cases = [
        ("one memory, the secret past its size", system_memory(allocation, frame.len())),
        ("two memories, the chroma one 1024 bytes", system_memories(&[&frame[..2048], &frame[2048..]])),
    ];
    for (what, mut buffer) in cases {
        add_raw_video_meta(buffer.get_mut().expect("writable"), VideoFormat::Nv12, (w, h), &[0, 2048 + 64], &[64, 64]);
        let text = expect_error(&nv12_to_bgrx("", (w, h), "cpu"), buffer, "its last chroma row came from past the memory");
        assert!(text.contains("plane 1") && text.contains("3136") && text.contains("3072"), "{what}: {text}");
    }
}

/// A meta whose luma rows are 16 MiB apart on a 3072-byte buffer: before the fix the element
/// read rows 16 MiB, 32 MiB... past a heap block, and the process died of SIGSEGV (so this
/// test runs in a child process of its own).
#[test]
fn a_video_meta_far_past_system_memory_is_an_error_not_a_crash() {
    if !common::run_in_child("a_video_meta_far_past_system_memory_is_an_error_not_a_crash") {
        return;
    }
    common::init(false);
    let (w, h) = (64u32, 32u32);
    let mut buffer = gst::Buffer::from_mut_slice(test_pattern((w * h * 3 / 2) as usize, 12));
    add_raw_video_meta(buffer.get_mut().expect("writable"), VideoFormat::Nv12, (w, h), &[0, 2048], &[16 << 20, 64]);
    let text = expect_error(&nv12_to_bgrx("", (w, h), "cpu"), buffer, "rows 16 MiB past a 3072-byte buffer were read");
    assert!(text.contains("plane 0"), "{text}");
}

/// A negative stride and a meta with one plane for NV12's two: errors naming the plane (before
/// the fix: a panic in the stride arithmetic, and GStreamer's critical warning, neither of
/// which said which plane).
#[test]
fn negative_strides_and_missing_planes_are_errors_naming_the_plane() {
    common::init(false);
    let (w, h) = (64u32, 32u32);
    let frame = test_pattern((w * h * 3 / 2) as usize, 13);
    let cases: [(&[usize], &[i32], &str); 2] = [(&[31 * 64, 2048], &[-64, 64], "plane 0: stride -64 is negative"), (&[0], &[64], "plane 1: the video meta describes 1 planes")];
    for (offsets, strides, want) in cases {
        let mut buffer = gst::Buffer::from_mut_slice(frame.clone());
        add_raw_video_meta(buffer.get_mut().expect("writable"), VideoFormat::Nv12, (w, h), offsets, strides);
        let text = expect_error(&nv12_to_bgrx("", (w, h), "cpu"), buffer, "a meta the element cannot read was read");
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// The control: planes in two memories where the meta says, each inside its memory, are read
/// there (each plane through a mapping of its own memory); and planes across three memories
/// split mid-row, each row copied out of the memories that hold it.
#[test]
fn planes_in_separate_memories_are_read_where_the_meta_puts_them() {
    common::init(false);
    let (w, h) = (64u32, 32u32);
    let frame = test_pattern((w * h * 3 / 2) as usize, 14);
    for parts in [&[&frame[..2048], &frame[2048..]][..], &[&frame[..1000], &frame[1000..2500], &frame[2500..]][..]] {
        let mut buffer = system_memories(parts);
        add_raw_video_meta(buffer.get_mut().expect("writable"), VideoFormat::Nv12, (w, h), &[0, 2048], &[64, 64]);
        let run = nv12_to_bgrx("", (w, h), "cpu");
        run.src.push_buffer(buffer).expect("push");
        run.src.end_of_stream().expect("eos");
        assert_bgrx_is_reference(&run, &frame, (w, h));
        run.pipeline.set_state(gst::State::Null).expect("stop");
    }
}

/// A buffer of two dma-buf memories, the second claiming 8192 bytes of a 4096-byte fd: an
/// error naming the memory. Before the fix GStreamer's mapping of it was read to its end,
/// and the process died of SIGBUS past the end of the memfd (in a child process of its own).
#[test]
fn a_memory_past_the_end_of_its_fd_is_an_error_not_a_crash() {
    if !common::run_in_child("a_memory_past_the_end_of_its_fd_is_an_error_not_a_crash") {
        return;
    }
    common::init(false);
    let (w, h) = (64u32, 32u32);
    let frame = test_pattern((w * h * 3 / 2) as usize, 20);
    let mut buffer = dmabuf_buffer(&frame[..2048]);
    let chroma = dmabuf_memory(dmabuf_fd(4096, &[(0, &frame[2048..])]), 8192, 0..8192);
    buffer.get_mut().expect("writable").append_memory(chroma.memory(0).expect("the memory"));
    let text = expect_error(&nv12_to_bgrx("(memory:DMABuf)", (w, h), "cpu"), buffer, "a memory claiming bytes past its fd was read");
    assert!(text.contains("memory 1") && text.contains("4096"), "{text}");
}

/// Junk around a padded NV12 frame in one fd: the frame at 4096, 0xee before and after it.
fn nv12_in_larger_fd((w, h): (u32, u32), pitch: usize, uv_offset: usize, seed: u32) -> (Vec<u8>, Vec<u8>) {
    let (packed, bytes) = common::padded_nv12(w, h, pitch, uv_offset, seed);
    let mut file = vec![0xeeu8; 4096];
    file.extend_from_slice(&bytes);
    file.extend(std::iter::repeat(0xee).take(4096));
    (packed, file)
}

/// A linear NV12 dma-buf memory one pitch shorter than its meta's planes, inside a larger fd
/// that holds the rest: before the fix the planes were checked against the fd, and the last
/// chroma row was read from bytes that were never part of the memory.
#[test]
fn a_linear_dmabuf_whose_planes_run_past_its_memory_is_an_error() {
    common::init(false);
    let (w, h) = (128u32, 64u32);
    let (pitch, uv_offset) = (160usize, 160 * 64 + 1024);
    let (_, file) = nv12_in_larger_fd((w, h), pitch, uv_offset, 15);
    let frame_len = file.len() - 8192;
    let mut buffer = dmabuf_memory(dmabuf_fd(file.len(), &[(0, &file)]), file.len(), 4096..4096 + frame_len - pitch);
    common::add_nv12_meta(buffer.get_mut().expect("writable"), (w, h), pitch, uv_offset);
    let text = expect_error(&nv12_to_bgrx("(memory:DMABuf)", (w, h), "cpu"), buffer, "its last chroma row came from past the memory, in the fd");
    assert!(text.contains("plane 1") && text.contains("dma-buf memory"), "{text}");
}

/// The control: the same frame with the memory exactly its bytes, at 4096 in the fd with junk
/// around it: converted from the memory's bytes alone.
#[test]
fn a_linear_dmabuf_inside_a_larger_fd_is_read_from_its_memory_only() {
    common::init(false);
    let (w, h) = (128u32, 64u32);
    let (pitch, uv_offset) = (160usize, 160 * 64 + 1024);
    let (packed, file) = nv12_in_larger_fd((w, h), pitch, uv_offset, 16);
    let mut buffer = dmabuf_memory(dmabuf_fd(file.len(), &[(0, &file)]), file.len(), 4096..file.len() - 4096);
    common::add_nv12_meta(buffer.get_mut().expect("writable"), (w, h), pitch, uv_offset);
    let run = nv12_to_bgrx("(memory:DMABuf)", (w, h), "cpu");
    run.src.push_buffer(buffer).expect("push");
    run.src.end_of_stream().expect("eos");
    assert_bgrx_is_reference(&run, &packed, (w, h));
    run.pipeline.set_state(gst::State::Null).expect("stop");
}

/// `appsrc` (samsung-64x32 NV12 `w`x`h` as dma-bufs) into the element (`path`), NV12 out.
fn tiled_to_nv12((w, h): (u32, u32), path: &str) -> common::Run {
    pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw(memory:DMABuf),format=NV12_64Z32,width={w},height={h},framerate=0/1 ! \
         dmabridgeconvert name=conv path={path} ! video/x-raw,format=NV12 ! appsink name=sink sync=false"
    ))
}

/// A tiled dma-buf memory 4 KiB shorter than its frame, at the start of an fd that holds all
/// of it: before the fix the CPU read, and the GPU imported, the whole frame from the fd.
/// On the GPU path the element falls back to the CPU, which refuses it too.
#[test]
fn a_tiled_dmabuf_longer_than_its_memory_is_an_error() {
    common::init(false);
    let (w, h) = (256u32, 128u32);
    let tiled = tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &test_pattern((w * h * 3 / 2) as usize, 17)).expect("tile");
    for path in ["cpu", "gpu"] {
        let buffer = dmabuf_memory(dmabuf_fd(tiled.len(), &[(0, &tiled)]), tiled.len(), 0..tiled.len() - 4096);
        let run = tiled_to_nv12((w, h), path);
        let conv = run.pipeline.by_name("conv").expect("conv");
        let text = expect_error(&run, buffer, "its last 4 KiB of chroma tiles came from past the memory, in the fd");
        assert!(text.contains("plane 1") && text.contains("dma-buf memory"), "{path}: {text}");
        assert_eq!(conv.property::<u64>("gpu-dmabuf-frames"), 0, "{path}: the GPU read nothing");
    }
}

/// The control: a tiled frame in a memory 8 KiB into a larger fd, with junk around it, is
/// detiled from the memory's bytes alone, on the CPU and by the GPU from the fd. Two frames
/// each: under TCG with a cold shader cache (the kernel lab's first run) lavapipe's compile
/// can outlast the element's 60 s wait for the first, which is then read on the CPU.
#[test]
fn a_tiled_dmabuf_inside_a_larger_fd_is_read_from_its_memory_only() {
    common::init(false);
    let (w, h) = (256u32, 128u32);
    let linear = test_pattern((w * h * 3 / 2) as usize, 18);
    let tiled = tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &linear).expect("tile");
    let junk = vec![0xeeu8; 8192];
    let size = tiled.len() + 2 * junk.len();
    for path in ["cpu", "gpu"] {
        let run = tiled_to_nv12((w, h), path);
        for _ in 0..2 {
            let fd = dmabuf_fd(size, &[(0, &junk), (8192, &tiled), (8192 + tiled.len(), &junk)]);
            run.src.push_buffer(dmabuf_memory(fd, size, 8192..8192 + tiled.len())).expect("push");
        }
        run.src.end_of_stream().expect("eos");
        for i in 0..2 {
            let sample = run.sink.pull_sample().expect("a frame");
            let map = sample.buffer().expect("buffer").map_readable().expect("map");
            assert!(map.as_slice() == &linear[..], "{path}, frame {i}: the frame in the memory detiles to the original");
        }
        let gpu_frames = run.pipeline.by_name("conv").expect("conv").property::<u64>("gpu-dmabuf-frames");
        assert!(if path == "gpu" { gpu_frames >= 1 } else { gpu_frames == 0 }, "{path}: {gpu_frames} frames read by the GPU");
        run.pipeline.set_state(gst::State::Null).expect("stop");
    }
}

/// A 16x16 NV12 frame (384 visible bytes) whose meta puts rows 2 MiB apart, in a 46 MiB
/// dma-buf (a real one in the kernel lab; a sparse sealed memfd, so mapped, elsewhere) and in
/// an unsealed memfd (read with pread): it converts, and the process's peak memory grows by
/// less than 8 MiB. Before the fix the element copied each plane's whole span (30 MiB of luma)
/// before gathering its rows. In a child process of its own, so that its peak is this test's.
#[test]
fn a_huge_stride_costs_the_visible_rows_not_the_span() {
    if !common::run_in_child("a_huge_stride_costs_the_visible_rows_not_the_span") {
        return;
    }
    common::init(false);
    let (w, h) = (16u32, 16u32);
    const STRIDE: usize = 2 << 20;
    let uv_offset = 16 * STRIDE;
    let size = uv_offset + 8 * STRIDE;
    let packed = test_pattern((w * h * 3 / 2) as usize, 19);
    let (wu, hu) = (w as usize, h as usize);
    let mut rows: Vec<(usize, &[u8])> = (0..hu).map(|y| (y * STRIDE, &packed[y * wu..(y + 1) * wu])).collect();
    rows.extend((0..hu / 2).map(|y| (uv_offset + y * STRIDE, &packed[wu * hu + y * wu..wu * hu + (y + 1) * wu])));
    let unsealed = {
        let fd = rustix::fs::memfd_create("gst-plugin-test-unsealed", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
        rustix::fs::ftruncate(&fd, size as u64).expect("ftruncate");
        for (at, bytes) in &rows {
            dmabridge_interop::dmabuf::write_all_at(std::os::fd::AsFd::as_fd(&fd), *at as u64, bytes).expect("write");
        }
        fd
    };
    let cases = [("an unsealed memfd (read with pread)", unsealed), ("a dma-buf (mapped)", dmabuf_fd(size, &rows))];
    let run = nv12_to_bgrx("(memory:DMABuf)", (w, h), "cpu");
    // Warm: the first frame sets the element and its pools up.
    run.src.push_buffer(dmabuf_buffer(&packed)).expect("push");
    assert_bgrx_is_reference(&run, &packed, (w, h));
    for (what, fd) in cases {
        let mut buffer = dmabuf_memory(fd, size, 0..size);
        add_raw_video_meta(buffer.get_mut().expect("writable"), VideoFormat::Nv12, (w, h), &[0, uv_offset], &[STRIDE as i32, STRIDE as i32]);
        common::reset_peak_rss();
        let before = common::peak_rss();
        run.src.push_buffer(buffer).expect("push");
        assert_bgrx_is_reference(&run, &packed, (w, h));
        let grew = common::peak_rss().saturating_sub(before);
        assert!(grew < 8 << 20, "{what}: 384 visible bytes, rows 2 MiB apart, raised the peak RSS by {} KiB", grew >> 10);
    }
    run.src.end_of_stream().expect("eos");
    run.pipeline.set_state(gst::State::Null).expect("stop");
}
