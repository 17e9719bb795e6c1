//! System-memory input that only its `GstVideoMeta` describes: NV12 with a padded pitch and
//! the chroma plane at an offset the caps do not imply, converted to BGRx and compared with
//! dmabridge's reference conversion of the packed frame. Without the meta honoured, the rows
//! are read at the caps' pitch and the pixels are wrong.

mod common;

use common::pipeline;
use gst::prelude::*;

#[test]
fn system_memory_is_read_where_its_video_meta_puts_the_planes() {
    common::init(false);
    let (w, h) = (128u32, 64u32);
    let (pitch, uv_offset) = (160usize, 160 * 64 + 1024);
    let (packed, bytes) = common::padded_nv12(w, h, pitch, uv_offset, 47);
    let mut buffer = gst::Buffer::from_mut_slice(bytes);
    common::add_nv12_meta(buffer.get_mut().expect("writable"), (w, h), pitch, uv_offset);
    let run = pipeline(&format!(
        "appsrc name=src format=time caps=video/x-raw,format=NV12,width={w},height={h},framerate=0/1,colorimetry=bt709 ! \
         dmabridgeconvert path=cpu ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    ));
    run.src.push_buffer(buffer).expect("push");
    run.src.end_of_stream().expect("eos");
    common::assert_bgrx_is_reference(&run, &packed, (w, h));
    run.pipeline.set_state(gst::State::Null).expect("stop");
}
