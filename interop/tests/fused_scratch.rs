//! The fused tiled -> RGB conversion keeps its cache-resident windows between frames:
//! after the first frame, converting another faults in no memory. (Fresh window buffers
//! every frame came from the allocator as fresh pages, faulted in one by one: 56 faults a
//! 4K frame on two threads.) Its own binary, so that no other test takes the spare windows
//! meanwhile.

use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::tiling::{tiled_size, tiled_yuv_to_rgb_fast, ColourMatrix, ColourRange, TiledFrame};
use dmabridge_interop::{Fourcc, TileLayout};

/// This thread's minor page faults so far (`minflt`, field 10 of `/proc/thread-self/stat`).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    // The fields after the command name (which may hold spaces) start at field 3.
    let rest = &stat[stat.rfind(')').expect("(comm)") + 2..];
    rest.split(' ').nth(10 - 3).and_then(|f| f.parse().ok()).expect("minflt")
}

#[test]
fn fused_frames_after_the_first_fault_in_no_memory() {
    let (w, h) = (3840, 2160);
    let layout = TileLayout::Samsung64x32;
    let g = tiled_size(layout, Fourcc::NV12, w, h).expect("geometry");
    let src: Vec<u8> = (0..g.size).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let plane = PlaneLayout::linear(0, u64::from(w) * 4, h);
    let mut out = vec![1u8; (w * h * 4) as usize];
    let convert = |out: &mut [u8]| {
        // One thread: the conversion runs on this one, whose faults the test counts.
        tiled_yuv_to_rgb_fast(TiledFrame { layout, fourcc: Fourcc::NV12, extent: (w, h) }, Fourcc::XRGB8888, (ColourMatrix::Bt709, ColourRange::Limited), &src, (out, plane), 1)
            .expect("convert")
    };
    convert(&mut out);
    let first = out.clone();
    let before = minor_faults();
    for _ in 0..5 {
        convert(&mut out);
    }
    let faults = minor_faults() - before;
    assert_eq!(out, first, "the same frame converts to the same bytes with reused windows");
    assert_eq!(faults, 0, "page faults in 5 fused 4K frames after the first");
}
