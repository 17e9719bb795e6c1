//! System-memory input that only its `GstVideoMeta` describes: NV12 with a padded pitch and
//! the chroma plane at an offset the caps do not imply, converted to BGRx and compared with
//! dmabridge's reference conversion of the packed frame. Without the meta honoured, the rows
//! are read at the caps' pitch and the pixels are wrong.

mod common;

use common::pipeline;
use dmabridge_interop::tiling::{test_pattern, yuv_to_rgb_vec, ColourMatrix, ColourRange};
use dmabridge_interop::Fourcc;
use gst::prelude::*;
use gst_video::prelude::*;

#[test]
fn system_memory_is_read_where_its_video_meta_puts_the_planes() {
    common::init(false);
    let (w, h) = (128u32, 64u32);
    let (pitch, uv_offset) = (160usize, 160 * 64 + 1024);
    let packed = test_pattern((w * h * 3 / 2) as usize, 47);
    let mut bytes = vec![0x5au8; uv_offset + pitch * 32];
    for y in 0..64 {
        bytes[y * pitch..y * pitch + 128].copy_from_slice(&packed[y * 128..(y + 1) * 128]);
    }
    for y in 0..32 {
        let src = 128 * 64 + y * 128;
        bytes[uv_offset + y * pitch..uv_offset + y * pitch + 128].copy_from_slice(&packed[src..src + 128]);
    }
    let mut buffer = gst::Buffer::from_mut_slice(bytes);
    gst_video::VideoMeta::add_full(
        buffer.get_mut().expect("writable"),
        gst_video::VideoFrameFlags::empty(),
        gst_video::VideoFormat::Nv12,
        w,
        h,
        &[0, uv_offset],
        &[pitch as i32, pitch as i32],
    )
    .expect("meta");
    let run = pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw,format=NV12,width={w},height={h},framerate=0/1,colorimetry=bt709 ! \
         dmabridgeconvert path=cpu ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    ));
    run.src.push_buffer(buffer).expect("push");
    run.src.end_of_stream().expect("eos");
    let sample = run.sink.pull_sample().expect("a frame");
    let info = gst_video::VideoInfo::from_caps(sample.caps().expect("caps")).expect("info");
    let frame = gst_video::VideoFrameRef::from_buffer_ref_readable(sample.buffer().expect("buffer"), &info).expect("frame");
    let expected = yuv_to_rgb_vec(Fourcc::NV12, Fourcc::XRGB8888, ColourMatrix::Bt709, ColourRange::Limited, w, h, &packed).expect("reference");
    let stride = frame.plane_stride()[0] as usize;
    let data = frame.plane_data(0).expect("plane");
    for y in 0..h as usize {
        assert!(data[y * stride..y * stride + w as usize * 4] == expected[y * w as usize * 4..(y + 1) * w as usize * 4], "row {y}");
    }
    drop(frame);
    run.pipeline.set_state(gst::State::Null).expect("stop");
}
