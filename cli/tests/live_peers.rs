//! The live V4L2 and KMS participants from the command line: `negotiate`, `probe` and
//! `demo --producer v4l2` name a missing device and exit 1 everywhere; in the kernel lab
//! (vivid and virtio-gpu loaded) they read the drivers' lists and `negotiate --json` shows
//! them as read.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn dmabridge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmabridge")).args(args).output().expect("run dmabridge")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn in_kernel_lab() -> bool {
    std::env::var("DMABRIDGE_TEST_CONFIG").as_deref() == Ok("kernel")
}

#[test]
fn a_missing_device_is_exit_1_naming_it() {
    for args in [
        &["negotiate", "--json", "--v4l2-device", "cam=/dev/video-none"][..],
        &["negotiate", "--json", "--kms-device", "disp=/dev/dri/card-none"],
        &["probe", "--v4l2-device", "/dev/video-none"],
        &["probe", "--kms-device", "/dev/dri/card-none:31"],
        &["demo", "--producer", "v4l2", "--device", "/dev/video-none", "--out", "target/live-peers-missing"],
    ] {
        let o = dmabridge(args);
        let text = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {text}");
        assert!(text.contains("-none"), "{args:?} names the device: {text}");
        assert_eq!(text.lines().count(), 1, "{args:?}: one line: {text}");
    }
    let o = dmabridge(&["negotiate", "--v4l2-device", "cam=/dev/video0:sideways"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a direction"), "{}", stderr(&o));
}

/// vivid's multi-planar capture node and virtio-gpu's card, which the lab must have.
fn lab_devices() -> Option<(String, String)> {
    if !in_kernel_lab() {
        eprintln!("skipped: live V4L2 and KMS devices need the kernel lab (scripts/lab.sh --modules vivid,virtio_gpu)");
        return None;
    }
    let video = std::fs::read_dir("/sys/class/video4linux")
        .expect("/sys/class/video4linux")
        .filter_map(Result::ok)
        .find(|e| std::fs::read_to_string(e.path().join("name")).is_ok_and(|n| n.trim() == "vivid-001-vid-cap"))
        .map(|e| PathBuf::from("/dev").join(e.file_name()))
        .expect("the lab loads vivid with a multi-planar instance");
    let card = std::fs::read_dir("/sys/class/drm")
        .expect("/sys/class/drm")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().strip_prefix("card").is_some_and(|n| n.chars().all(|c| c.is_ascii_digit())))
        .find(|e| std::fs::read_link(e.path().join("device/driver")).is_ok_and(|l| l.to_string_lossy().contains("virtio")))
        .map(|e| PathBuf::from("/dev/dri").join(e.file_name()))
        .expect("the lab loads virtio_gpu");
    Some((video.display().to_string(), card.display().to_string()))
}

#[test]
fn negotiate_shows_the_drivers_lists_as_read() {
    let Some((video, card)) = lab_devices() else { return };
    let o = dmabridge(&["negotiate", "--json", "--v4l2-device", &format!("cam={video}:capture"), "--kms-device", &format!("disp={card}")]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let read = v["participants"].as_array().expect("participants as read");
    assert_eq!(read[0]["from"], format!("--v4l2-device {video}:capture"));
    let cam: Vec<&str> = read[0]["formats"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(cam.contains(&"NV12") && cam.contains(&"XR24"), "vivid lists NV12 and XR24: {cam:?}");
    assert!(read[0]["min_buffers"].as_u64().unwrap() >= 1, "REQBUFS's count: {}", read[0]);
    assert_eq!(read[0]["width"], serde_json::json!([320, 3840]), "vivid's webcam sizes");
    // virtio-gpu lists XR24 with no IN_FORMATS: an implicit modifier only.
    assert_eq!(read[1]["formats"], serde_json::json!(["XR24:0x00ffffffffffffff"]));
    // The camera's LINEAR buffers and the display's implicit ones cannot be one buffer: the
    // negotiation says so and names the display.
    assert_eq!(v["outcome"], "impossible", "{v}");
    assert_eq!(o.status.code(), Some(2));
    let conflicts = v["conflicts"].as_array().unwrap();
    assert!(conflicts.iter().any(|c| c["participants"].as_array().unwrap().iter().any(|p| p == "disp")), "{conflicts:?}");
}

#[test]
fn probe_lists_the_live_devices() {
    let Some((video, card)) = lab_devices() else { return };
    let o = dmabridge(&["probe", "--json", "--v4l2-device", &video, "--kms-device", &card]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["v4l2"]["device"]["driver"], "vivid");
    assert_eq!(v["v4l2"]["device"]["multiplanar"], true);
    let formats = v["v4l2"]["device"]["formats"].as_array().unwrap();
    let nv12m = formats.iter().find(|f| f["v4l2"] == "NM12").expect("vivid-001 lists NV12M");
    assert_eq!(nv12m["mapping"], "drm");
    let planes = v["kms"].as_array().unwrap();
    assert!(planes.iter().any(|p| p["kind"] == "primary" || p["kind"] == "Primary"), "{planes:?}");
    assert!(planes.iter().all(|p| p["in_formats"] == false && p["addfb2_modifiers"] == false), "{planes:?}");
    let table = dmabridge(&["probe", "--v4l2-device", &video, "--kms-device", &card]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("NM12") && text.contains("implicit modifiers only"), "{text}");
}
