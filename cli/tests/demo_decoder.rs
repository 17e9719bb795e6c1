//! `dmabridge demo --producer decoder`, as a user runs it: three real processes (the
//! decoder, the consumer it starts, and a read-only recorder that joins late), buffers from
//! buffer collections allocated on the device, the validation layer on.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dmabridge-decoder-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn demo(out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .args(["demo", "--producer", "decoder", "--validation", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .expect("run dmabridge demo")
}

fn summary(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

#[test]
fn a_resolution_change_and_a_late_joiner_lose_no_frame_and_leak_no_fd() {
    let out = out_dir("full");
    let run = demo(&out, &["--resolution-change-at", "40", "--late-join-at", "60", "--frames", "120"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    let s = summary(&out);
    assert_eq!(s["problems"], serde_json::json!([]), "{s}");
    // Two collections, one per resolution, each DPB (4) + the frame decoded + the consumer's
    // queue (2) buffers, each released once every process closed its token.
    let colls = s["collections"].as_array().expect("collections");
    assert_eq!(colls.len(), 2, "{s}");
    for (c, (size, frames)) in colls.iter().zip([("1280x720", 40), ("1920x1080", 80)]) {
        assert_eq!(c["size"], size, "{c}");
        assert_eq!(c["buffer_count"], 7, "{c}");
        assert_eq!(c["frames_carried"], frames, "{c}");
        assert_eq!(c["buffers_released"], true, "{c}");
        assert_eq!(c["modifier"], "0x0000000000000000", "{c}");
        // The decoder's 64-byte row alignment reached the allocation.
        for p in c["planes"].as_array().expect("planes") {
            assert_eq!(p["stride"].as_u64().expect("stride") % 64, 0, "{c}");
        }
    }
    assert_eq!(s["verified_frames"], 120);
    assert_eq!(s["dropped_frames"], 0);
    assert_eq!(s["reference_errors"], 0);
    let late = &s["late_joiner"];
    assert_eq!(late["joined_at"], 60, "{s}");
    assert_eq!(late["frames_verified"], 60, "{s}");
    assert_eq!(late["writes_refused"], true, "the recorder is read-only: {s}");
    assert_eq!(s["leaked_fds"], serde_json::json!({"decoder": 0, "consumer": 0, "recorder": 0}), "{s}");
    assert!(stdout.contains("120/120 frames verified"), "{stdout}");
}

#[test]
fn a_frame_damaged_after_decoding_is_caught_by_both_peers() {
    let out = out_dir("corrupt");
    let run = demo(&out, &["--late-join-at", "5", "--frames", "12", "--corrupt-frame", "8"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(4), "{stderr}");
    let s = summary(&out);
    assert_eq!(s["verified_frames"], 11, "{s}");
    assert_eq!(s["late_joiner"]["frames_verified"], 6, "{s}");
    let consumer = s["consumer"]["mismatches"].as_array().expect("mismatches");
    assert_eq!(consumer.len(), 1, "{s}");
    assert!(consumer[0].as_str().is_some_and(|m| m.starts_with("frame 8 ")), "{s}");
    // One collection, no late joiner's frames lost, nothing leaked all the same.
    assert_eq!(s["collections"].as_array().map(Vec::len), Some(1));
    assert_eq!(s["total_leaked_fds"], 0, "{s}");
}

#[test]
fn render_only_flags_are_refused_for_the_renderer() {
    let out = out_dir("flags");
    let run = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .args(["demo", "--late-join-at", "3", "--out"])
        .arg(&out)
        .output()
        .expect("run dmabridge demo");
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--producer decoder"));
}
