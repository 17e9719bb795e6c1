//! `dmabridge allocate` end to end on the live device: every stride and offset is a multiple
//! of what was asked, files are at least min-size, the count is min-buffers summed and at most
//! max-buffers, read-only participants' fds refuse writes, and the domain picks the path.
//! The command itself writes a pattern into every buffer's planes and reads it back through
//! the device (import, or the detile conversion for a tiled layout); `verified` says so.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

use serde_json::Value;

fn allocate(args: &[&str]) -> (Output, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .arg("allocate")
        .arg("--json")
        .args(args)
        .env("DMABRIDGE_VALIDATION", "1")
        .output()
        .expect("run dmabridge");
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, json)
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a number"))
}

#[test]
fn system_memory_honours_every_alignment_count_size_and_read_only() {
    let (out, v) = allocate(&[
        "--width", "100", "--height", "64",
        "--drm-formats", "dec=NV12",
        "--drm-formats", "disp=NV12",
        "--constraint", "dec:min-buffers=4",
        "--constraint", "disp:min-buffers=2",
        "--constraint", "dec:max-buffers=8",
        "--constraint", "dec:stride-align=256",
        "--constraint", "disp:offset-align=4096",
        "--constraint", "disp:min-size=65536",
        "--constraint", "disp:read-only=true",
        "--constraint", "disp:domain=system",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{v}");
    assert!(!stderr.contains("validation"), "{stderr}");
    assert_eq!(v["outcome"], "shared");
    assert_eq!(v["layout_source"], "imposed", "{v}");
    assert_eq!(v["domain"], "system");
    assert_eq!(n(&v["buffer_count"]), 6, "min-buffers summed");
    let buffers = v["buffers"].as_array().expect("buffers");
    assert_eq!(buffers.len(), 6);
    for b in buffers {
        assert_eq!(b["modifier"], "0x0000000000000000", "{b}");
        assert_eq!(b["verified"], true, "{b}");
        let planes = b["planes"].as_array().expect("planes");
        assert_eq!(planes.len(), 2, "NV12 has two planes: {b}");
        assert_eq!(n(&b["fds"]), if v["disjoint"] == true { 2 } else { 1 }, "{v}");
        for p in planes {
            assert_eq!(n(&p["stride"]) % 256, 0, "{p}");
            assert!(n(&p["stride"]) >= 100, "{p}");
            assert_eq!(n(&p["offset"]) % 4096, 0, "{p}");
            assert!(n(&p["size"]) >= 65536, "{p}");
        }
        // The chroma plane does not overlap the luma plane.
        assert!(n(&planes[1]["offset"]) >= 63 * n(&planes[0]["stride"]) + 100, "{b}");
    }
    assert!(v["disjoint_reason"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    assert_eq!(v["read_only"], serde_json::json!([{ "participant": "disp", "writes_refused": true }]), "{v}");
    // A read-only participant keeps system memory on memfds, even where the kernel has a
    // dma-heap: a dma-buf cannot be reopened read-only.
    assert_eq!(v["memory"], "memfd", "{v}");
    if common::real_dmabufs() {
        assert!(v["memory_reason"].as_str().is_some_and(|r| r.contains("read-only")), "{v}");
    }
}

#[test]
fn system_memory_is_the_dma_heap_where_the_kernel_has_one_and_the_device_reads_it_back() {
    let (out, v) = allocate(&[
        "--width", "100", "--height", "64",
        "--drm-formats", "dec=AR24",
        "--vulkan", "gpu=sampled",
        "--constraint", "dec:stride-align=256",
        "--constraint", "gpu:domain=system",
        "--constraint", "dec:min-buffers=2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{v}");
    assert!(!stderr.contains("validation"), "{stderr}");
    // Without the modifier extension the device takes AR24 only implicitly: the decoder's
    // LINEAR buffers are its own group, which the device copies from (the last test).
    let group = if common::expect_modifiers() {
        assert_eq!(v["outcome"], "shared", "{v}");
        &v
    } else {
        assert_eq!(v["outcome"], "copy", "{v}");
        &v["allocated"][0]
    };
    let heap = std::path::Path::new("/dev/dma_heap/system").exists();
    assert!(heap || !common::in_kernel_lab(), "the kernel lab has a system dma-heap");
    assert_eq!(group["memory"], if heap { "dma-heap:system" } else { "memfd" }, "{v}");
    let buffers = group["buffers"].as_array().expect("buffers");
    assert_eq!(buffers.len(), 2, "{v}");
    for b in buffers {
        assert_eq!(b["verified"], true, "written through the CPU, read back through the device: {b}");
        assert_eq!(b["planes"][0]["file"], if heap { "dma-buf" } else { "sealed memfd" }, "{b}");
        assert_eq!(n(&b["planes"][0]["stride"]) % 256, 0, "{b}");
    }
}

#[test]
fn min_buffers_above_max_buffers_exits_2_naming_max_buffers() {
    let (out, v) = allocate(&[
        "--width", "64", "--height", "32",
        "--drm-formats", "dec=NV12",
        "--drm-formats", "disp=NV12",
        "--constraint", "dec:min-buffers=4",
        "--constraint", "disp:min-buffers=3",
        "--constraint", "disp:max-buffers=5",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(v["outcome"], "impossible");
    let c = v["conflicts"].as_array().expect("conflicts");
    assert!(c.iter().any(|c| c["constraint"] == "max-buffers" && c["participants"][0] == "disp"), "{v}");
    assert!(stderr.contains("max-buffers"), "{stderr}");
}

#[test]
fn a_tiled_layout_is_placed_and_read_back_through_the_detile_conversion() {
    let (out, v) = allocate(&[
        "--width", "130", "--height", "66",
        "--v4l2", "dec=NV12MT",
        "--drm-formats", "sink=NV12:0x0400000000000001",
        "--constraint", "sink:stride-align=128",
        "--constraint", "dec:min-buffers=3",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{v}");
    let buffers = v["buffers"].as_array().expect("buffers");
    assert_eq!(buffers.len(), 3);
    for b in buffers {
        assert_eq!(b["modifier"], "0x0400000000000001");
        assert_eq!(b["verified"], true, "{b}");
        for p in b["planes"].as_array().expect("planes") {
            // GStreamer's NV12_64Z32 row: the width rounded up to 128 bytes of 64x32 tiles.
            assert_eq!(n(&p["stride"]), 256, "{p}");
        }
    }
    // A stride alignment the tiles cannot give is impossible, and says why.
    let (out, _) = allocate(&[
        "--width", "130", "--height", "66",
        "--v4l2", "dec=NV12MT",
        "--drm-formats", "sink=NV12:0x0400000000000001",
        "--constraint", "sink:stride-align=1024",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("stride-align 1024"), "{stderr}");
}

#[test]
fn device_local_memory_is_exported_with_the_layout_imposed_where_the_driver_misses() {
    let (out, v) = allocate(&[
        "--width", "64", "--height", "64",
        "--drm-formats", "gpu=AR24",
        "--drm-formats", "display=AR24",
        "--constraint", "display:domain=device-local",
        "--constraint", "display:stride-align=4096",
        "--constraint", "gpu:min-buffers=2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !common::expect_modifiers() {
        // Plain lavapipe exports no dma-buf: device-local memory cannot be shared.
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cannot export"), "{stderr}");
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{v}");
    assert!(!stderr.contains("validation"), "{stderr}");
    // lavapipe's own pitch for 64 AR24 pixels is 256 bytes, so the layout was imposed.
    assert_eq!(v["layout_source"], "imposed-on-export", "{v}");
    let buffers = v["buffers"].as_array().expect("buffers");
    assert_eq!(buffers.len(), 2);
    for b in buffers {
        assert_eq!(b["verified"], true, "{b}");
        assert_eq!(n(&b["planes"][0]["stride"]), 4096, "{b}");
    }
    // Without a constraint the driver's choice stands.
    let (out, v) = allocate(&[
        "--width", "64", "--height", "64",
        "--drm-formats", "gpu=AR24",
        "--drm-formats", "display=AR24",
        "--constraint", "display:domain=device-local",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["layout_source"], "driver-chosen", "{v}");
}

#[test]
fn bad_input_exits_1() {
    for args in [
        &["--width", "0", "--height", "4", "--drm-formats", "a=NV12"][..],
        &["--width", "4", "--height", "4", "--drm-formats", "a=NV12", "--constraint", "a:max-buffers=lots"][..],
        &["--height", "4", "--drm-formats", "a=NV12"][..],
    ] {
        let (out, _) = allocate(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The driver sizes an image's memory by its own rules: at a pitch wider than its own
/// (stride-align 256 for a 100-wide AR24) lavapipe asks for more than the placement's last
/// row. The buffers are then as large as the driver asked, and verified through it (it was
/// "the driver needs 20480 bytes for plane 0's memory but the fd has 18944").
#[test]
fn buffers_are_as_large_as_the_driver_asks() {
    if !common::expect_modifiers() {
        // Without the modifier extension the device takes AR24 from a LINEAR buffer only by
        // copy, into an image of its own (the next test): no buffer is the driver's to size.
        return;
    }
    let (out, v) = allocate(&["--width", "100", "--height", "37", "--drm-formats", "a=AR24", "--vulkan", "dev=sampled", "--constraint", "a:stride-align=256"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{v}");
    for b in v["buffers"].as_array().expect("buffers") {
        assert_eq!(b["verified"], true, "{b}");
        for p in b["planes"].as_array().expect("planes") {
            assert_eq!(n(&p["stride"]) % 256, 0, "{p}");
            assert!(n(&p["size"]) >= n(&p["stride"]) * 37, "{p}");
        }
    }
}

/// A device without the modifier extension lists AR24 with implicit modifiers only, and a
/// participant takes LINEAR only: no buffer is shared, and the copy that joins them is the
/// device's own copy import (`vkCmdCopyBufferToImage` from the LINEAR buffer into an image
/// of its own). `allocate` allocates the LINEAR group and runs that copy through the device
/// (it was "impossible: no split into groups is joined by conversions").
#[test]
fn an_implicit_only_device_is_fed_from_a_linear_buffer_by_its_copy_import() {
    let (out, v) = allocate(&["--width", "100", "--height", "37", "--drm-formats", "a=AR24", "--vulkan", "dev=sampled"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{v}");
    // With the modifier extension the device imports LINEAR itself, and shares it.
    if common::expect_modifiers() {
        assert_eq!(v["outcome"], "shared", "{v}");
        return;
    }
    assert_eq!(v["outcome"], "copy", "{v}");
    assert_eq!(v["groups"][1]["participants"], serde_json::json!(["dev"]), "{v}");
    assert_eq!(v["groups"][1]["modifiers"], serde_json::json!([]), "the device's own image is implicit: {v}");
    let conversion = &v["conversions"][0];
    assert_eq!(conversion["kind"], "device copy AR24 LINEAR -> its own image (implicit layout)", "{v}");
    assert!(conversion["runs_on"].as_str().is_some_and(|r| r.starts_with("dev (") && r.ends_with("with vkCmdCopyBufferToImage")), "{conversion}");
    let allocated = v["allocated"].as_array().expect("allocated");
    assert_eq!(allocated.len(), 1, "only the LINEAR group is a collection: {v}");
    assert_eq!(allocated[0]["group"], 0);
    for b in allocated[0]["buffers"].as_array().expect("buffers") {
        assert_eq!((b["modifier"].as_str(), &b["verified"]), (Some("0x0000000000000000"), &Value::Bool(true)), "{b}");
    }
    let copy = &v["own_image_copies"][0];
    assert_eq!((&copy["from_group"], &copy["to_group"], &copy["verified"]), (&Value::from(0), &Value::from(1), &Value::Bool(true)), "{v}");
}
