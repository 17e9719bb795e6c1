//! What the plugin's tests share: where the built plugin is, GStreamer initialised to find
//! it, and dma-buf buffers made from sealed memfds (the crate's one memfd helper).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use dmabridge_interop::{Fourcc, TileLayout};

/// The directory holding libgstdmabridge.so (target/debug or target/release, beside this
/// test's deps/).
pub fn plugin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf();
    assert!(dir.join("libgstdmabridge.so").exists(), "build the plugin first: cargo build -p gst-plugin-dmabridge");
    dir
}

/// Initialises GStreamer once per test process, finding the plugin. `dma_drm` forces GStreamer
/// 1.24's DMA_DRM caps on (this machine's runtime is 1.22), with a registry of the process's
/// own so that the shared cache never learns templates only forcing gives.
pub fn init(dma_drm: bool) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Set before init, which scans the registry; no other thread reads the environment yet.
        std::env::set_var("GST_PLUGIN_PATH", plugin_dir());
        if dma_drm {
            std::env::set_var("DMABRIDGE_GST_DMA_DRM", "1");
            std::env::set_var("GST_REGISTRY", std::env::temp_dir().join(format!("dmabridge-dma-drm-registry-{}.bin", std::process::id())));
        }
        gst::init().expect("GStreamer");
    });
}

/// A buffer of one dma-buf memory holding `bytes`, owned by the memory: a real dma-buf from
/// the system dma-heap where the kernel has one (the kernel lab), else a sealed memfd (fixed
/// size, as a dma-buf is).
pub fn dmabuf_buffer(bytes: &[u8]) -> gst::Buffer {
    use dmabridge_interop::dmabuf::SystemMemory;
    let fd = match SystemMemory::detect() {
        SystemMemory::Memfd => {
            assert_ne!(std::env::var("DMABRIDGE_TEST_CONFIG").as_deref(), Ok("kernel"), "the kernel lab has a system dma-heap");
            dmabridge_interop::dmabuf::sealed_memfd("gst-plugin-test", bytes).expect("sealed memfd")
        }
        heap => {
            let fd = heap.alloc("gst-plugin-test", bytes.len().max(1) as u64).expect("dma-heap allocation");
            dmabridge_interop::dmabuf::write_all_at(std::os::fd::AsFd::as_fd(&fd), 0, bytes).expect("writing the dma-buf");
            fd
        }
    };
    // SAFETY: the memory takes ownership of the fd, which holds `bytes.len()` bytes.
    let mem = unsafe { gst_allocators::DmaBufAllocator::new().alloc(fd, bytes.len()) }.expect("dma-buf memory");
    let mut buffer = gst::Buffer::new();
    buffer.get_mut().expect("a new buffer is writable").append_memory(mem);
    buffer
}

/// An fd of `size` bytes holding `writes` (offset, bytes) and zeros elsewhere: a real
/// dma-buf from the system dma-heap where the kernel has one (the kernel lab), else a sealed
/// memfd (fixed size, as a dma-buf is; sparse: its holes cost no memory).
pub fn dmabuf_fd(size: usize, writes: &[(usize, &[u8])]) -> std::os::fd::OwnedFd {
    use dmabridge_interop::dmabuf::SystemMemory;
    let memory = SystemMemory::detect();
    if matches!(memory, SystemMemory::Memfd) {
        assert_ne!(std::env::var("DMABRIDGE_TEST_CONFIG").as_deref(), Ok("kernel"), "the kernel lab has a system dma-heap");
    }
    let fd = memory.alloc("gst-plugin-test", size.max(1) as u64).expect("a dma-buf (dma-heap or sealed memfd)");
    for (at, bytes) in writes {
        dmabridge_interop::dmabuf::write_all_at(std::os::fd::AsFd::as_fd(&fd), *at as u64, bytes).expect("writing the dma-buf");
    }
    fd
}

/// A buffer of one dma-buf memory of `fd` (which holds `fd_size` bytes; the memory takes
/// it), given only the bytes `window` of it: the memory's offset and size in its fd.
pub fn dmabuf_memory(fd: std::os::fd::OwnedFd, fd_size: usize, window: std::ops::Range<usize>) -> gst::Buffer {
    assert!(window.end <= fd_size);
    // SAFETY: the memory takes ownership of the fd, which holds `fd_size` bytes.
    let mut mem = unsafe { gst_allocators::DmaBufAllocator::new().alloc(fd, fd_size) }.expect("dma-buf memory");
    mem.get_mut().expect("a new memory is writable").resize(window);
    let mut buffer = gst::Buffer::new();
    buffer.get_mut().expect("a new buffer is writable").append_memory(mem);
    buffer
}

/// A `GstVideoMeta` as upstream may write one, unchecked: `offsets.len()` planes (however
/// many the format has), any strides (negative ones too), through GStreamer's C API (the
/// Rust binding refuses what these tests need to send).
pub fn add_raw_video_meta(buffer: &mut gst::BufferRef, format: gst_video::VideoFormat, (w, h): (u32, u32), offsets: &[usize], strides: &[i32]) {
    use gst::glib::translate::IntoGlib;
    assert!(offsets.len() == strides.len() && offsets.len() <= 4);
    let (mut o, mut s) = ([0usize; 4], [0i32; 4]);
    o[..offsets.len()].copy_from_slice(offsets);
    s[..strides.len()].copy_from_slice(strides);
    // SAFETY: a writable buffer (`&mut BufferRef`), and arrays of GST_VIDEO_MAX_PLANES entries
    // that the call copies the first `n_planes` of.
    let meta = unsafe { gst_video::ffi::gst_buffer_add_video_meta_full(buffer.as_mut_ptr(), 0, format.into_glib(), w, h, offsets.len() as u32, &o, &s) };
    assert!(!meta.is_null(), "a video meta");
}

/// Pushes `buffer` then end-of-stream into `run` and returns the text of the error the
/// pipeline posts; panics where the stream ends without one (the element converted the
/// frame: `converted` says what that means) or nothing comes within two minutes.
pub fn expect_error(run: &Run, buffer: gst::Buffer, converted: &str) -> String {
    use gst::prelude::*;
    // A converted frame waits in the sink, unpulled: let the end of the stream pass it.
    run.sink.set_wait_on_eos(false);
    let _ = run.src.push_buffer(buffer);
    let _ = run.src.end_of_stream();
    let bus = run.pipeline.bus().expect("bus");
    let msg = bus.timed_pop_filtered(gst::ClockTime::from_seconds(120), &[gst::MessageType::Error, gst::MessageType::Eos]).expect("an error or the end of the stream, not a hang");
    let text = match msg.view() {
        gst::MessageView::Error(e) => format!("{} {:?}", e.error(), e.debug()),
        _ => panic!("no error: the element converted the frame ({converted})"),
    };
    run.pipeline.set_state(gst::State::Null).expect("stop");
    text
}

/// Whether this process is the child that runs test `name` alone (`DMABRIDGE_TEST_CHILD=name`).
/// In the test's own process it runs `name` again in a child process of its own (alone, so
/// that the process's memory is the test's) and asserts that the child passed it: a test
/// that measures the process, or whose failure before its fix was a crash, runs so.
pub fn run_in_child(name: &str) -> bool {
    const CHILD: &str = "DMABRIDGE_TEST_CHILD";
    if std::env::var(CHILD).as_deref() == Ok(name) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test path"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .output()
        .expect("the child process");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let how = match std::os::unix::process::ExitStatusExt::signal(&out.status) {
        Some(sig) => format!("was killed by signal {sig}"),
        None => format!("exited with {:?}", out.status.code()),
    };
    assert!(out.status.success() && stdout.contains("1 passed"), "the child process running {name} {how}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    false
}

/// This process's peak resident memory (`VmHWM`), in bytes.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).expect("VmHWM");
    kb * 1024
}

/// Resets this process's peak resident memory to what it holds now (`clear_refs` 5).
pub fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak RSS (/proc/self/clear_refs)");
}

/// A pipeline from `gst-launch` syntax with an `appsrc` named `src` and an `appsink` named
/// `sink`, set playing.
pub struct Run {
    pub pipeline: gst::Pipeline,
    pub src: gst_app::AppSrc,
    pub sink: gst_app::AppSink,
}

pub fn pipeline(description: &str) -> Run {
    use gst::prelude::*;
    let pipeline = gst::parse::launch(description).expect("pipeline").downcast::<gst::Pipeline>().expect("a pipeline");
    let src = pipeline.by_name("src").expect("src").downcast::<gst_app::AppSrc>().expect("appsrc");
    let sink = pipeline.by_name("sink").expect("sink").downcast::<gst_app::AppSink>().expect("appsink");
    pipeline.set_state(gst::State::Playing).expect("playing");
    Run { pipeline, src, sink }
}

/// An NV12 `w`x`h` frame (even extents) whose rows are `pitch` bytes apart and whose chroma
/// plane starts `uv_offset` bytes in: the tightly packed frame (`test_pattern(seed)`), and
/// the bytes laid out so (the gaps are 0x5a).
pub fn padded_nv12(w: u32, h: u32, pitch: usize, uv_offset: usize, seed: u32) -> (Vec<u8>, Vec<u8>) {
    let (w, h) = (w as usize, h as usize);
    let packed = dmabridge_interop::tiling::test_pattern(w * h * 3 / 2, seed);
    let mut bytes = vec![0x5au8; uv_offset + pitch * (h / 2)];
    for y in 0..h {
        bytes[y * pitch..y * pitch + w].copy_from_slice(&packed[y * w..(y + 1) * w]);
    }
    for y in 0..h / 2 {
        let src = w * h + y * w;
        bytes[uv_offset + y * pitch..uv_offset + y * pitch + w].copy_from_slice(&packed[src..src + w]);
    }
    (packed, bytes)
}

/// The video meta that says where [`padded_nv12`]'s planes are.
pub fn add_nv12_meta(buffer: &mut gst::BufferRef, (w, h): (u32, u32), pitch: usize, uv_offset: usize) {
    gst_video::VideoMeta::add_full(buffer, gst_video::VideoFrameFlags::empty(), gst_video::VideoFormat::Nv12, w, h, &[0, uv_offset], &[pitch as i32, pitch as i32])
        .expect("meta");
}

/// Asserts that the one frame `run` gives (BGRx, at its caps' stride) is `packed` converted
/// by dmabridge's BT.709 limited-range reference, row by row.
pub fn assert_bgrx_is_reference(run: &Run, packed: &[u8], (w, h): (u32, u32)) {
    use dmabridge_interop::tiling::{yuv_to_rgb_vec, ColourMatrix, ColourRange};
    use dmabridge_interop::Fourcc;
    use gst_video::prelude::*;
    let sample = run.sink.pull_sample().expect("a frame");
    let info = gst_video::VideoInfo::from_caps(sample.caps().expect("caps")).expect("info");
    let frame = gst_video::VideoFrameRef::from_buffer_ref_readable(sample.buffer().expect("buffer"), &info).expect("frame");
    let expected = yuv_to_rgb_vec((Fourcc::NV12, Fourcc::XRGB8888), (ColourMatrix::Bt709, ColourRange::Limited), (w, h), packed).expect("reference");
    let stride = frame.plane_stride()[0] as usize;
    let data = frame.plane_data(0).expect("plane");
    let row = w as usize * 4;
    for y in 0..h as usize {
        assert!(data[y * stride..y * stride + row] == expected[y * row..(y + 1) * row], "row {y}");
    }
}

/// A `w`x`h` frame in `layout` as one dma-buf, through `dmabridgeconvert path=PATH` into
/// linear system memory of the same fourcc (`gst_format`): asserts the frame detiles to the
/// original (the width must be one GStreamer does not pad: a multiple of 4), and returns
/// the element.
pub fn detile_by_modifier(layout: TileLayout, fourcc: Fourcc, gst_format: &str, path: &str, (w, h): (u32, u32)) -> gst::Element {
    use gst::prelude::*;
    let linear = dmabridge_interop::tiling::test_pattern(dmabridge_interop::tiling::tiled_size(TileLayout::Linear, fourcc, w, h).expect("linear size").size as usize, 37);
    let tiled = dmabridge_interop::tiling::tile_to_vec(layout, fourcc, w, h, &linear).expect("tile");
    let modifier = layout.modifier().expect("a layout with a modifier").to_hex();
    let run = pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format={fourcc}:{modifier},width={w},height={h},framerate=0/1 ! \
         dmabridgeconvert name=conv path={path} ! video/x-raw,format={gst_format} ! appsink name=sink sync=false"
    ));
    run.src.push_buffer(dmabuf_buffer(&tiled)).expect("push");
    run.src.end_of_stream().expect("eos");
    let sample = run.sink.pull_sample().unwrap_or_else(|_| panic!("{layout} {fourcc}: a frame, so the caps negotiated"));
    let map = sample.buffer().expect("buffer").map_readable().expect("map");
    assert!(map.as_slice().get(..linear.len()) == Some(&linear[..]), "{layout} {fourcc} on the {path}: the frame detiles to the original");
    drop(map);
    let conv = run.pipeline.by_name("conv").expect("conv");
    assert_eq!(conv.property::<u64>("dmabuf-imports"), 1, "{layout}: read from its dma-buf");
    run.pipeline.set_state(gst::State::Null).expect("stop");
    conv
}
