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

/// Two participants on the live device synchronise by the best method the device and the
/// kernel give it: sync_file fences in the kernel lab (lavapipe's SYNC_FD semaphores on a
/// kernel with sync_file), the CPU wait where the device has no SYNC_FD.
#[test]
fn two_parties_on_the_live_device_use_its_best_sync_method() {
    let (out, v) = negotiate(&["--vulkan", "decoder=sampled", "--vulkan", "compositor=sampled"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["outcome"], "shared", "{v}");
    let expected = if common::in_kernel_lab() { "sync-file" } else { common::engine().sync_methods().best().name() };
    assert_eq!(v["sync"], expected, "{v}");
    // A KMS plane takes IN_FENCE_FD sync_files too; the display from --drm-formats does not say.
    let (_, with_display) = negotiate(&["--vulkan", "decoder=sampled", "--drm-formats", "display=AR24,XR24"]);
    if with_display["outcome"] != "impossible" {
        assert_eq!(with_display["sync"], "cpu-wait", "{with_display}");
    }
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
        // A display given by --drm-formats states no sync method beyond the CPU wait.
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
fn the_device_participant_is_for_the_exact_use() {
    // A compositor that samples and renders to the buffer, with an sRGB view, against a
    // display: lavapipe with udmabuf shares AB24 LINEAR for exactly that use.
    let (out, v) = negotiate(&["--vulkan", "gpu=sampled+color-attachment:create=mutable-format:srgb-view", "--drm-formats", "display=AB24"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("validation"), "{stderr}");
    if common::expect_modifiers() {
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(v["format"], "AB24");
        assert_eq!(v["modifiers"], serde_json::json!(["0x0000000000000000"]));
    } else {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
    }
    // NV12 can't be stored to: no buffer is shared with an NV12-only decoder for that use
    // (with udmabuf the device offers RGB and a conversion; plain, nothing explicit at all).
    let (out, v) = negotiate(&["--vulkan", "gpu=sampled+storage", "--drm-formats", "decoder=NV12"]);
    assert_ne!(v["outcome"], "shared", "{v}");
    if common::expect_modifiers() {
        assert_eq!(out.status.code(), Some(0), "a copy plan: {v}");
        assert_eq!(v["outcome"], "copy");
        assert_eq!(v["groups"][0]["participants"], serde_json::json!(["gpu"]));
        assert_ne!(v["groups"][0]["format"], "NV12", "{v}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{v}");
    }
    // A bad create flag names the participant and the word.
    let (out, _) = negotiate(&["--vulkan", "gpu=sampled:create=compressed", "--drm-formats", "d=AB24"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("\"gpu\"") && stderr.contains("compressed"), "{stderr}");
}

/// Issue #13: a decoder that writes tiled NV12 and a display that scans out RGB only share
/// no format, so negotiation plans a copy through one fused conversion, and `dmabridge
/// convert` runs exactly that conversion with the arguments the plan gives.
#[test]
fn a_tiled_decoder_and_an_rgb_display_get_a_copy_plan_that_convert_runs() {
    use dmabridge::interop::tiling::{tile_to_vec, yuv_to_rgb_vec, ColourMatrix, ColourRange};
    use dmabridge::interop::{Fourcc, TileLayout};
    let cache = std::env::temp_dir().join(format!("dmabridge-cli-negotiate-{}-cache", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .args(["negotiate", "--json", "--paths", "--v4l2", "decoder=NV12MT", "--drm-formats", "display=XR24,AR24"])
        .env("DMABRIDGE_VALIDATION", "1")
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("run dmabridge");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["outcome"], "copy", "{v}");
    assert_eq!(v["groups"][0]["format"], "NV12");
    assert_eq!(v["groups"][1]["format"], "XR24");
    let c = &v["conversions"][0];
    assert_eq!(c["steps"], serde_json::json!(["detile+yuv->rgb samsung-64x32 NV12 -> XR24 (fused)"]), "{c}");
    let runs_on = c["runs_on"].as_str().expect("--paths names where it runs");
    assert!(["path cpu", "path gpu", "path copy-commands"].iter().any(|p| runs_on.starts_with(p)), "{runs_on}");
    let convert_args: Vec<&str> = c["convert"].as_str().expect("convert args").split(' ').collect();
    assert_eq!(convert_args, ["--format", "NV12", "--from", "samsung-64x32", "--to", "linear", "--to-format", "XR24"]);

    // Run the plan's conversion on a frame, and check it against the reference.
    let (w, h) = (200u32, 90u32);
    let linear = common::pattern((w * h + w * h.div_ceil(2)) as usize, 41);
    let tiled = tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &linear).expect("tile");
    let dir = std::env::temp_dir().join(format!("dmabridge-cli-negotiate-{}-plan", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (input, output) = (dir.join("frame.tiled"), dir.join("frame.xr24"));
    std::fs::write(&input, &tiled).expect("write");
    let r = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .arg("convert")
        .args(&convert_args)
        .args(["--width", &w.to_string(), "--height", &h.to_string()])
        .arg("--in")
        .arg(&input)
        .arg("--out")
        .arg(&output)
        .env("DMABRIDGE_VALIDATION", "1")
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("run dmabridge convert");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let want = yuv_to_rgb_vec((Fourcc::NV12, Fourcc::XRGB8888), (ColourMatrix::Bt709, ColourRange::Limited), (w, h), &linear).expect("reference");
    assert!(std::fs::read(&output).expect("output") == want, "the plan's conversion, run by convert, equals the reference");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(cache);
}

/// A `drm_info -j` file (drm_info's documented shape: node -> planes[] ->
/// properties.IN_FORMATS.data = [{modifier, formats[]}], integers) negotiates exactly like the
/// same plane's raw IN_FORMATS blob.
#[test]
fn drm_info_json_negotiates_like_the_raw_blob() {
    use dmabridge::interop::peers::kms::write_in_formats;
    use dmabridge::interop::{Format, FormatSet, Fourcc, Modifier};
    let dir = std::env::temp_dir().join(format!("dmabridge-cli-negotiate-{}-drm-info", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let x_tiled = Modifier::from_raw(0x0100_0000_0000_0001);
    let set: FormatSet = [
        Format::new(Fourcc::XRGB8888, Modifier::LINEAR),
        Format::new(Fourcc::XRGB8888, x_tiled),
        Format::new(Fourcc::NV12, Modifier::LINEAR),
        Format::new(Fourcc::NV12, x_tiled),
    ]
    .into_iter()
    .collect();
    let blob = dir.join("in_formats.bin");
    std::fs::write(&blob, write_in_formats(&set)).expect("blob");
    // What drm_info -j prints for an i915 card with a cursor and a primary plane (ids 31, 41).
    let json = r#"{"/dev/dri/card0": {"driver": {"name": "i915", "desc": "Intel Graphics"}, "device": {"bus_type": 0},
        "planes": [
            {"id": 31, "possible_crtcs": 1, "properties": {"type": {"id": 7, "value": 2, "raw_value": 2},
                "IN_FORMATS": {"id": 33, "value": 50, "data": [{"modifier": 0, "formats": [875713089]}]}}},
            {"id": 41, "possible_crtcs": 1, "properties": {"type": {"id": 7, "value": 1, "raw_value": 1},
                "IN_FORMATS": {"id": 33, "value": 51, "data": [
                    {"modifier": 0, "formats": [875713112, 842094158]},
                    {"modifier": 72057594037927937, "formats": [875713112, 842094158]}]}}}
        ]}}"#;
    let info = dir.join("drm_info.json");
    std::fs::write(&info, json).expect("json");
    let run = |display: &str| negotiate(&["--v4l2", "dec=NV12MT", display]);
    let (a, va) = run(&format!("--kms-in-formats=display={}", blob.display()));
    let (b, vb) = run(&format!("--drm-info=display={}", info.display()));
    let (c, vc) = run(&format!("--drm-info=display={}:41", info.display()));
    for o in [&a, &b, &c] {
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // The same lists as read, from different sources (`participants[].from` says which).
    let lists = |mut v: Value| {
        let read = v.as_object_mut().and_then(|o| o.remove("participants")).unwrap_or(Value::Null);
        let formats: Vec<Value> = read.as_array().into_iter().flatten().map(|p| p["formats"].clone()).collect();
        (v, formats)
    };
    let (va, fa) = lists(va);
    let (vb, fb) = lists(vb);
    let (vc, fc) = lists(vc);
    assert_eq!(fa, fb, "drm_info's primary plane is the blob's list");
    assert_eq!(fa, fc);
    assert_eq!(fa[1].as_array().map(Vec::len), Some(4), "the display's list as read: {fa:?}");
    assert_eq!(va, vb, "drm_info's primary plane negotiates like the blob");
    assert_eq!(va, vc, "and so does the plane named by id");
    let (d, _) = run(&format!("--drm-info=display={}:99", info.display()));
    assert_eq!(d.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&d.stderr).contains("no plane with id 99"));
    let _ = std::fs::remove_dir_all(dir);
}

/// `--wayland NAME` asks the compositor WAYLAND_DISPLAY names (the test Weston that
/// scripts/test.sh starts) for its linux-dmabuf formats, as the Wayland sink does.
#[test]
fn the_live_compositor_is_a_participant() {
    let (name, dir) = match (std::env::var("DMABRIDGE_TEST_WAYLAND_DISPLAY"), std::env::var("DMABRIDGE_TEST_XDG_RUNTIME_DIR")) {
        (Ok(n), Ok(d)) if !n.is_empty() && !d.is_empty() => (n, d),
        _ if std::env::var_os("CI").is_some() => panic!("no test Weston (scripts/test.sh starts it)"),
        _ => {
            eprintln!("skipped: no test Weston (run through scripts/test.sh)");
            return;
        }
    };
    let offered = dmabridge::wayland::query_formats(&dmabridge::wayland::Display::in_dir(&dir, &name)).expect("Weston's formats");
    let run = |display: &str| {
        Command::new(env!("CARGO_BIN_EXE_dmabridge"))
            .args(["negotiate", "--json", "--wayland", "weston", "--drm-formats", "producer=XR24,AR24"])
            .env("WAYLAND_DISPLAY", display)
            .env("XDG_RUNTIME_DIR", &dir)
            .output()
            .expect("run dmabridge")
    };
    let out = run(&name);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    // Weston here offers LINEAR XR24 (llvmpipe): one shared buffer, the compositor named.
    let linear_xr24 = offered.formats.contains(&dmabridge::interop::Format::linear(dmabridge::interop::Fourcc::XRGB8888));
    if linear_xr24 {
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(v["outcome"], "shared", "{v}");
        assert!(v["groups"][0]["participants"].as_array().is_some_and(|p| p.contains(&"weston".into())), "{v}");
    } else {
        assert!(out.status.code() != Some(1), "the compositor was asked: {stderr}");
    }
    let gone = run("no-such-compositor");
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("\"weston\""), "{}", String::from_utf8_lossy(&gone.stderr));
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

/// `dmabridge negotiate` in a child limited to 512 MiB of address space.
fn negotiate_bounded(args: &[String]) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dmabridge"));
    cmd.arg("negotiate").args(args);
    // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = rustix::process::Rlimit { current: Some(512 << 20), maximum: Some(512 << 20) };
            rustix::process::setrlimit(rustix::process::Resource::As, limit).map_err(std::io::Error::from)
        });
    }
    cmd.output().expect("run dmabridge")
}

/// A version-1 IN_FORMATS blob: `formats` fourccs, `entries` modifiers that each claim all of them.
fn expanding_blob(formats: u32, entries: usize) -> Vec<u8> {
    let formats_offset = 24u32;
    let modifiers_offset = (formats_offset + formats * 4).next_multiple_of(8);
    let mut b = Vec::new();
    for w in [1, 0, formats, formats_offset, entries as u32, modifiers_offset] {
        b.extend_from_slice(&w.to_ne_bytes());
    }
    for i in 0..formats {
        b.extend_from_slice(&(0x3030_3030u32 + i).to_ne_bytes());
    }
    b.resize(modifiers_offset as usize, 0);
    for i in 0..entries {
        b.extend_from_slice(&u64::MAX.to_ne_bytes());
        b.extend_from_slice(&[0u8; 8]);
        b.extend_from_slice(&(0x0100_0000_0000_0000u64 + i as u64).to_ne_bytes());
    }
    b
}

#[test]
fn expanding_inputs_exit_1_with_a_message_in_bounded_memory() {
    let dir = std::env::temp_dir().join(format!("dmabridge-cli-negotiate-bounded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // A 4.8 MB blob claiming 12.8 million format/modifier pairs.
    let blob = dir.join("in_formats.bin");
    std::fs::write(&blob, expanding_blob(64, 200_000)).expect("write");
    let o = negotiate_bounded(&["--kms-in-formats".into(), format!("plane={}", blob.display()), "--drm-formats".into(), "d=AR24".into()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("\"plane\""), "the message names the participant: {stderr}");
    // 10,000 participants: more than the negotiation takes.
    let mut args = Vec::new();
    for i in 0..10_000 {
        args.push("--drm-formats".to_owned());
        args.push(format!("p{i}=AR24"));
    }
    let o = negotiate_bounded(&args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("participants"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}
