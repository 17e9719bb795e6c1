//! `dmabridge negotiate` end to end: the seed's GStreamer example through caps strings, and
//! the live Vulkan device as a participant, whose answer depends on the configuration
//! (plain lavapipe is implicit-only; with udmabuf it has explicit LINEAR).

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

use serde_json::Value;

fn negotiate(args: &[&str]) -> (Output, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .arg("negotiate")
        .arg("--json")
        .args(args)
        .env("DMABRIDGE_VALIDATION", "1")
        .output()
        .expect("run dmabridge");
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, json)
}

#[test]
fn the_seed_vapostproc_to_glupload_example() {
    let (out, v) = negotiate(&[
        "--gst-caps",
        "vapostproc=video/x-raw(memory:DMABuf), drm-format=(string){ NV12:0x0100000000000001, NV12, I420, YV12, BGRA:0x0100000000000002 }, width=(int)[ 16, 16384 ], height=(int)[ 16, 16384 ]",
        "--gst-caps",
        "glupload=video/x-raw(memory:DMABuf), drm-format=(string){ NV12:0x0100000000000001, BGRA }, width=(int)[ 1, 2147483647 ], height=(int)[ 1, 2147483647 ]",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["outcome"], "shared");
    assert_eq!(v["format"], "NV12");
    assert_eq!(v["modifiers"], serde_json::json!(["0x0100000000000001"]));
    assert_eq!(v["implicit"], false);
}

#[test]
fn the_live_device_follows_the_implicit_rules() {
    let (out, v) = negotiate(&["--vulkan", "gpu=sampled", "--drm-formats", "display=AR24,XR24"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("validation"), "{stderr}");
    if common::expect_modifiers() {
        // lavapipe with udmabuf imports and exports AR24 LINEAR: one shared buffer.
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(v["outcome"], "shared");
        assert_eq!(v["format"], "AR24");
        assert_eq!(v["modifiers"], serde_json::json!(["0x0000000000000000"]));
        // The pair's sync method: lavapipe has only the CPU wait.
        assert_eq!(v["sync"], "cpu-wait", "{v}");
    } else {
        // Without the modifier extension the device is implicit-only, the display
        // explicit-only: one buffer's chain must be fully one or the other (seed 001).
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(v["outcome"], "impossible");
        let conflicts = v["conflicts"].as_array().expect("conflicts");
        assert!(conflicts.iter().any(|c| c["constraint"] == "implicit"
            && c["participants"].as_array().is_some_and(|p| p.contains(&"gpu".into()) && p.contains(&"display".into()))),
            "{v}");
    }
}

#[test]
fn bad_input_names_the_participant() {
    let (out, _) = negotiate(&["--vulkan", "gpu=bogus", "--drm-formats", "d=AR24"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("\"gpu\"") && stderr.contains("bogus"), "{stderr}");
    let (out, _) = negotiate(&["--drm-formats", "d=NV12:0x0000000000000000"]);
    assert_eq!(out.status.code(), Some(1), "explicit LINEAR written out is invalid in drm-format syntax");
    let (out, _) = negotiate(&["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(1));
}
