//! `memory:DMABuf` into `dmabridgeconvert`: a tiled NV12 frame in a (sealed) memfd, wrapped
//! as GStreamer dma-buf memory by `appsrc`, is read from its fd after dmabridge's layout
//! checks (the element counts those reads in `dmabuf-imports`), and detiled exactly; on the
//! GPU path the GPU reads it from its fd (`gpu-dmabuf-frames`); and every element of the
//! process shares one engine (`engines-opened`).

mod common;

use dmabridge_interop::tiling::{test_pattern, tile_to_vec};
use dmabridge_interop::{Fourcc, TileLayout};
use gst::prelude::*;

#[test]
fn a_tiled_dmabuf_is_read_from_its_fd_and_detiled() {
    common::init(false);
    let (w, h) = (256u32, 128u32);
    let linear = test_pattern((w * h * 3 / 2) as usize, 17);
    let tiled = tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &linear).expect("tile");
    let common::Run { pipeline, src, sink } = common::pipeline(&format!(
        "appsrc name=src caps=video/x-raw(memory:DMABuf),format=NV12_64Z32,width={w},height={h},framerate=0/1 format=time ! \
         dmabridgeconvert name=conv ! video/x-raw,format=NV12 ! appsink name=sink sync=false"
    ));
    // A sealed memfd: fixed-size, as a dma-buf is, so it is mapped.
    src.push_buffer(common::dmabuf_buffer(&tiled)).expect("push");
    src.end_of_stream().expect("eos");
    let sample = sink.pull_sample().expect("a frame");
    let out = sample.buffer().expect("buffer").map_readable().expect("map");
    assert!(out.as_slice() == &linear[..], "the frame read from the dma-buf detiles to the original");
    let conv = pipeline.by_name("conv").expect("conv");
    assert_eq!(conv.property::<u64>("dmabuf-imports"), 1, "read from the fd, not through GStreamer's mapping");
    pipeline.set_state(gst::State::Null).expect("stop");
}

/// On the GPU path a tiled dma-buf is read by the GPU from its fd, frame after frame into
/// the element's one readback buffer, and detiled exactly. Two dma-bufs pushed in turn (an
/// upstream pool) are imported once each.
#[test]
fn a_tiled_dmabuf_is_detiled_by_the_gpu_from_its_fd() {
    common::init(false);
    let (w, h) = (256u32, 128u32);
    let frames: Vec<Vec<u8>> = (0..2).map(|seed| test_pattern((w * h * 3 / 2) as usize, 40 + seed)).collect();
    let pool: Vec<gst::Buffer> =
        frames.iter().map(|l| common::dmabuf_buffer(&tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, l).expect("tile"))).collect();
    let common::Run { pipeline, src, sink } = common::pipeline(&format!(
        "appsrc name=src caps=video/x-raw(memory:DMABuf),format=NV12_64Z32,width={w},height={h},framerate=0/1 format=time ! \
         dmabridgeconvert name=conv path=gpu ! video/x-raw,format=NV12 ! appsink name=sink sync=false"
    ));
    for i in 0..6 {
        src.push_buffer(pool[i % 2].clone()).expect("push");
    }
    src.end_of_stream().expect("eos");
    for i in 0..6 {
        let sample = sink.pull_sample().expect("a frame");
        let out = sample.buffer().expect("buffer").map_readable().expect("map");
        assert!(out.as_slice() == &frames[i % 2][..], "frame {i}: the GPU's detile of the dma-buf is the original");
    }
    let conv = pipeline.by_name("conv").expect("conv");
    assert_eq!(conv.property::<String>("current-path"), "gpu");
    assert_eq!(conv.property::<u64>("gpu-dmabuf-frames"), 6, "the GPU read every frame from its dma-buf");
    assert_eq!(conv.property::<u64>("dmabuf-imports"), 6);
    assert_eq!(conv.property::<u64>("gpu-dmabuf-imports"), 2, "each of the pool's dma-bufs imported once");
    pipeline.set_state(gst::State::Null).expect("stop");
}

/// Two elements in one pipeline (a detile, then a colour conversion) share the process's
/// one engine: the process opened one Vulkan device, whatever the number of elements.
#[test]
fn two_elements_share_one_engine() {
    common::init(false);
    let (w, h) = (128u32, 64u32);
    let linear = test_pattern((w * h * 3 / 2) as usize, 31);
    let tiled = tile_to_vec(TileLayout::Nv12_4L4, Fourcc::NV12, w, h, &linear).expect("tile");
    let common::Run { pipeline, src, sink } = common::pipeline(&format!(
        "appsrc name=src caps=video/x-raw,format=NV12_4L4,width={w},height={h},framerate=0/1 format=time ! \
         dmabridgeconvert name=a ! video/x-raw,format=NV12 ! dmabridgeconvert name=b ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    ));
    src.push_buffer(gst::Buffer::from_slice(tiled)).expect("push");
    src.end_of_stream().expect("eos");
    let sample = sink.pull_sample().expect("a frame");
    assert_eq!(sample.buffer().expect("buffer").size(), (w * h * 4) as usize);
    let (a, b) = (pipeline.by_name("a").expect("a"), pipeline.by_name("b").expect("b"));
    assert_eq!(a.property::<u64>("engines-opened"), 1, "one engine for the whole process");
    assert_eq!(b.property::<u64>("engines-opened"), 1);
    pipeline.set_state(gst::State::Null).expect("stop");
}

/// Downstream takes `memory:DMABuf`: the element writes each frame into a sealed memfd handed
/// on as dma-buf memory, and the bytes are the converted frame.
#[test]
fn dmabuf_output_where_downstream_takes_it() {
    common::init(false);
    let (w, h) = (128u32, 64u32);
    let linear = test_pattern((w * h * 3 / 2) as usize, 23);
    let tiled = tile_to_vec(TileLayout::Nv12_4L4, Fourcc::NV12, w, h, &linear).expect("tile");
    let common::Run { pipeline, src, sink } = common::pipeline(&format!(
        "appsrc name=src caps=video/x-raw,format=NV12_4L4,width={w},height={h},framerate=0/1 format=time ! \
         dmabridgeconvert ! video/x-raw(memory:DMABuf),format=NV12 ! appsink name=sink sync=false"
    ));
    src.push_buffer(gst::Buffer::from_slice(tiled)).expect("push");
    src.end_of_stream().expect("eos");
    let sample = sink.pull_sample().expect("a frame");
    let buffer = sample.buffer().expect("buffer");
    let mem = buffer.peek_memory(0);
    let dm = mem.downcast_memory_ref::<gst_allocators::DmaBufMemory>().expect("the output is dma-buf memory");
    // SAFETY: the memory's fd, alive while the sample is held; only queried.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(dm.fd()) };
    let seals = rustix::fs::fcntl_get_seals(fd).expect("seals");
    assert!(seals.contains(rustix::fs::SealFlags::SHRINK), "sealed against shrinking: {seals:?}");
    let out = buffer.map_readable().expect("map");
    assert!(out.as_slice() == &linear[..], "the dma-buf holds the detiled frame");
    drop(out);
    pipeline.set_state(gst::State::Null).expect("stop");
}

/// Dma-buf output is recycled: a memfd downstream has let go of is written again, each
/// frame's bytes its own.
#[test]
fn dmabuf_output_memories_are_recycled() {
    common::init(false);
    let (w, h) = (128u32, 64u32);
    let common::Run { pipeline, src, sink } = common::pipeline(&format!(
        "appsrc name=src caps=video/x-raw,format=NV12_4L4,width={w},height={h},framerate=0/1 format=time ! \
         dmabridgeconvert ! video/x-raw(memory:DMABuf),format=NV12 ! appsink name=sink sync=false enable-last-sample=false"
    ));
    let mut files = std::collections::BTreeSet::new();
    let frames = 6;
    for i in 0..frames {
        // One frame at a time, each let go of before the next is pushed.
        let linear = test_pattern((w * h * 3 / 2) as usize, 60 + i);
        let tiled = tile_to_vec(TileLayout::Nv12_4L4, Fourcc::NV12, w, h, &linear).expect("tile");
        src.push_buffer(gst::Buffer::from_slice(tiled)).expect("push");
        let sample = sink.pull_sample().expect("a frame");
        let buffer = sample.buffer().expect("buffer");
        let mem = buffer.peek_memory(0);
        let dm = mem.downcast_memory_ref::<gst_allocators::DmaBufMemory>().expect("the output is dma-buf memory");
        // SAFETY: the memory's fd, alive while the sample is held; only queried.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(dm.fd()) };
        let st = rustix::fs::fstat(fd).expect("fstat");
        files.insert((st.st_dev, st.st_ino));
        assert!(buffer.map_readable().expect("map").as_slice() == &linear[..], "frame {i}: its own bytes");
    }
    src.end_of_stream().expect("eos");
    assert!(files.len() < frames as usize, "{} memfds for {frames} frames: none was recycled", files.len());
    pipeline.set_state(gst::State::Null).expect("stop");
}

/// A measurement, not a check (run it: `cargo test --release -p gst-plugin-dmabridge --test
/// dmabuf_input -- --ignored --nocapture`): 4K samsung-64x32 NV12 detiled to NV12 on the CPU
/// path, the same frames pushed as system memory and as dma-bufs, against memcpy of the frame
/// in the same run. The dma-buf input is read by the detile straight from its mapping.
#[test]
#[ignore]
fn measure_dmabuf_input_against_system_memory() {
    common::init(false);
    let (w, h, frames) = (3840u32, 2160u32, 160usize);
    let linear = test_pattern((w * h * 3 / 2) as usize, 5);
    let tiled = tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &linear).expect("tile");
    // The same frames for all: a pool of POOL distinct inputs (one frame reused would sit in
    // the cache) in turn, into four rotating outputs (a pool's worth).
    // Frames aligned to 64 bytes, as a decoder's pool hands them out (GStreamer's video
    // pools align their memory; a dma-buf is page-aligned), for the engine and the element
    // alike. (From plain `Vec`s, 16 bytes past a page, each 64-byte tile row straddles two
    // cache lines, and every figure here drops by 10-25%.)
    let mut backing: Vec<Vec<u8>> = (0..POOL).map(|_| vec![0u8; tiled.len() + 64]).collect();
    let inputs: Vec<&[u8]> = backing
        .iter_mut()
        .map(|b| {
            let at = b.as_ptr().align_offset(64);
            b[at..at + tiled.len()].copy_from_slice(&tiled);
            &b[at..at + tiled.len()]
        })
        .collect();
    let mut outs: Vec<Vec<u8>> = (0..4).map(|_| vec![1u8; linear.len().max(tiled.len())]).collect();
    let memcpy = {
        let t = std::time::Instant::now();
        for i in 0..frames {
            outs[i % 4][..tiled.len()].copy_from_slice(std::hint::black_box(inputs[i % POOL]));
        }
        std::hint::black_box(&outs);
        t.elapsed()
    };
    let run = |dmabuf: bool, frames: usize| {
        let features = if dmabuf { "(memory:DMABuf)" } else { "" };
        let caps = format!("video/x-raw{features},format=NV12_64Z32,width={w},height={h},framerate=0/1");
        let fps = element_fps(&caps, "dmabridgeconvert path=cpu", "video/x-raw,format=NV12", &tiled, dmabuf, frames);
        std::time::Duration::from_secs_f64(frames as f64 / fps)
    };
    // The engine's conversion called directly: the element's floor.
    let engine = dmabridge::Engine::new(&dmabridge::EngineOptions::from_env()).expect("engine");
    let conv = dmabridge::Converter::new(&engine).expect("converter");
    let c = dmabridge::interop::tiling::FrameConversion::new((TileLayout::Samsung64x32, Fourcc::NV12), (TileLayout::Linear, Fourcc::NV12), w, h);
    let mut direct = |frames: usize| {
        for i in 0..WARM {
            conv.convert_frame_into(&c, dmabridge::ConvertPath::Cpu, inputs[i % POOL], &mut outs[i % 4]).expect("warm");
        }
        let t = std::time::Instant::now();
        for i in 0..frames {
            conv.convert_frame_into(&c, dmabridge::ConvertPath::Cpu, inputs[i % POOL], &mut outs[i % 4]).expect("convert");
        }
        t.elapsed()
    };
    // The three take turns, a few frames each round, so that the machine's drift over the
    // run lands on all of them alike. Each figure is the sum of its rounds; each ratio the
    // median of the rounds' own ratios, which one disturbed round cannot move. (Three rounds
    // of 40 frames, with the ratio of the sums, read 0.68-0.96 for system memory over five
    // runs back to back, the engine alone 7.2-10.0 GB/s.)
    const ROUNDS: usize = 8;
    let per = frames / ROUNDS;
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        rounds.push([direct(per), run(false, per), run(true, per)]);
    }
    let frames = per * ROUNDS;
    let total = |k: usize| rounds.iter().map(|r| r[k]).sum::<std::time::Duration>();
    let ratio = |k: usize| {
        let mut v: Vec<f64> = rounds.iter().map(|r| r[0].as_secs_f64() / r[k].as_secs_f64()).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let gbps = |d: std::time::Duration| (tiled.len() * frames) as f64 / d.as_secs_f64() / 1e9;
    let ((system, s_lo, s_hi), (dmabuf, d_lo, d_hi)) = (ratio(1), ratio(2));
    println!(
        "4K samsung-64x32 -> NV12, {frames} frames from a pool of {POOL} in {ROUNDS} rounds, cpu path: the engine called directly {:.2} GB/s; \
         the element: system memory {:.2} GB/s ({system:.2}x the engine, median of the rounds; {s_lo:.2}-{s_hi:.2}), \
         dma-buf {:.2} GB/s ({dmabuf:.2}x the engine; {d_lo:.2}-{d_hi:.2}), memcpy {:.2} GB/s",
        gbps(total(0)),
        gbps(total(1)),
        gbps(total(2)),
        gbps(memcpy),
    );
}

/// Frames per second of `frames` frames of `bytes` pushed through `appsrc caps=CAPS !
/// ELEMENT ! OUT_CAPS ! appsink`, as dma-bufs or system memory: a pool of [`POOL`] distinct
/// buffers, pushed in turn as a decoder's pool would be. The buffers are made before the
/// clock starts (the measurement is the element, not the source), and the first [`WARM`]
/// frames (negotiation, device, pipelines, the output pool filling) are not timed.
fn element_fps(caps: &str, element: &str, out_caps: &str, bytes: &[u8], dmabuf: bool, frames: usize) -> f64 {
    let common::Run { pipeline, src, sink } =
        common::pipeline(&format!("appsrc name=src caps={caps} format=time ! {element} ! {out_caps} ! appsink name=sink sync=false max-buffers=4"));
    let pool: Vec<gst::Buffer> = (0..POOL).map(|_| if dmabuf { common::dmabuf_buffer(bytes) } else { aligned_buffer(bytes) }).collect();
    let buffers = (0..WARM + frames).map(move |i| pool[i % POOL].clone());
    // The warm-up frames are pushed ahead as the timed ones are, so that the output pool
    // has grown to what the pipeline keeps in flight before the clock starts.
    let pusher = std::thread::spawn(move || {
        for b in buffers {
            src.push_buffer(b).expect("push");
        }
        src.end_of_stream().expect("eos");
    });
    for _ in 0..WARM {
        sink.pull_sample().expect("a warm-up frame");
    }
    let t = std::time::Instant::now();
    for _ in 0..frames {
        sink.pull_sample().expect("a frame");
    }
    let took = t.elapsed();
    pusher.join().expect("pusher");
    pipeline.set_state(gst::State::Null).expect("stop");
    frames as f64 / took.as_secs_f64()
}

/// A system-memory buffer holding `bytes`, from GStreamer's default allocator aligned to 64
/// bytes (a video pool's memory).
fn aligned_buffer(bytes: &[u8]) -> gst::Buffer {
    let params = gst::AllocationParams::new(gst::MemoryFlags::empty(), 63, 0, 0);
    let allocator = gst::Allocator::find(None::<&str>).expect("the default allocator");
    let mut mem = allocator.alloc(bytes.len(), Some(&params)).expect("memory");
    mem.get_mut().expect("a new memory is writable").map_writable().expect("mapped").copy_from_slice(bytes);
    let mut buffer = gst::Buffer::new();
    buffer.get_mut().expect("a new buffer is writable").append_memory(mem);
    buffer
}

/// Distinct input buffers the measurements cycle through (a decoder's pool).
const POOL: usize = 6;
/// Frames through the element before its clock starts.
const WARM: usize = 8;
