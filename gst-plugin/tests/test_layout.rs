//! The made-up layout of the `test-layout` feature (one row of dmabridge's layout table plus
//! its address function, no other edit) in the element: the sink lists it by its modifier,
//! and a frame in it is detiled from its dma-buf on the CPU and on the GPU.
//!
//! `cargo build -p gst-plugin-dmabridge --features test-layout` first (the test loads that
//! plugin), then `cargo test -p gst-plugin-dmabridge --features test-layout --test test_layout`.

mod common;

use dmabridge_interop::{Fourcc, TileLayout};
use gst::prelude::*;

#[test]
fn the_element_reads_the_made_up_layout_by_its_modifier() {
    common::init(true);
    let layout: TileLayout = "test-interlaced-16x16".parse().expect("the made-up layout's name");
    let modifier = layout.modifier().expect("a modifier").to_hex();
    let element = gst::ElementFactory::make("dmabridgeconvert").build().expect("element");
    let sink = element.pad_template("sink").map(|t| t.caps().to_string()).expect("sink template");
    for fourcc in ["NV12", "XR24"] {
        assert!(sink.contains(&format!("{fourcc}:{modifier}")), "the sink lists {fourcc} in the made-up layout: {sink}");
    }
    for path in ["cpu", "gpu"] {
        // Not whole tiles (the padding is part of the layout), but rows GStreamer does not pad.
        let conv = common::detile_by_modifier(layout, Fourcc::NV12, "NV12", path, (132, 66));
        assert_eq!(conv.property::<u64>("gpu-dmabuf-frames"), u64::from(path == "gpu"), "on the {path}");
        common::detile_by_modifier(layout, Fourcc::XRGB8888, "BGRx", path, (132, 66));
    }
}
