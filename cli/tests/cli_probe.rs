//! `dmabridge probe --json` is a contract: check its shape against the real device, with
//! the validation layer on (the command exits 3 if the layer complains).

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;

use serde_json::Value;

const USAGES: [&str; 5] = ["sampled", "storage", "color-attachment", "transfer-src", "transfer-dst"];

fn probe(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .arg("probe")
        .args(args)
        .env("DMABRIDGE_VALIDATION", "1")
        .output()
        .expect("run dmabridge");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "probe failed ({}):\n{stderr}", out.status);
    assert!(!stderr.contains("validation"), "validation output:\n{stderr}");
    (stdout, stderr)
}

fn usage(m: &Value, u: &str) -> (bool, bool) {
    let s = &m["usages"][u];
    (s["import"].as_bool().expect("import bool"), s["export"].as_bool().expect("export bool"))
}

#[test]
fn json_has_the_contract_shape() {
    let (stdout, _) = probe(&["--json"]);
    let v: Value = serde_json::from_str(&stdout).expect("valid JSON");
    for k in ["name", "driver", "api_version"] {
        assert!(v["device"][k].as_str().is_some_and(|s| !s.is_empty()), "device.{k}");
    }
    assert_eq!(v["modifier_extension"].as_bool(), Some(common::expect_modifiers()));
    // What the device and the kernel give it: in the kernel lab lavapipe has SYNC_FD
    // semaphores and Linux 6.12 the dma-buf sync_file ioctls; elsewhere, what the library says.
    let methods: Vec<&str> = if common::in_kernel_lab() {
        vec!["sync-file", "implicit-bridge", "cpu-wait"]
    } else {
        common::engine().sync_methods().iter().map(|m| m.name()).collect()
    };
    assert_eq!(v["sync"], methods[0], "{v:#}");
    assert_eq!(v["sync_methods"], serde_json::json!(methods));
    let formats = v["formats"].as_array().expect("formats");
    assert_eq!(formats.len(), dmabridge::device::vk_format::VK_FORMAT_TABLE.len());
    for f in formats {
        let fourcc = f["fourcc"].as_str().expect("fourcc");
        assert_eq!(fourcc.len(), 4, "{fourcc:?} is padded to 4");
        assert!(f["vk_format"].as_str().is_some_and(|s| !s.is_empty()));
        let mods = f["modifiers"].as_array().expect("modifiers");
        assert!(!mods.is_empty(), "{fourcc}: LINEAR is always listed on lavapipe");
        for m in mods {
            let hex = m["modifier"].as_str().expect("modifier");
            assert!(
                hex.len() == 18 && hex.starts_with("0x") && hex[2..].bytes().all(|b| b.is_ascii_hexdigit()),
                "{hex}"
            );
            assert!(m["plane_count"].as_u64().is_some());
            for u in USAGES {
                assert!(m["usages"][u].is_object(), "{fourcc} {hex}: usage {u} missing");
            }
        }
    }
    let find = |code: &str| formats.iter().find(|f| f["fourcc"] == code).unwrap_or_else(|| panic!("{code}"));
    assert!(find("R8  ")["vk_format"] == "R8_UNORM");
    for code in ["AR24", "XR24", "AB24", "XB24"] {
        let linear = &find(code)["modifiers"][0];
        assert_eq!(linear["modifier"], "0x0000000000000000");
        for u in USAGES {
            assert_eq!(usage(linear, u), (true, common::expect_modifiers()), "{code} {u}");
        }
    }
    let nv12 = &find("NV12")["modifiers"][0];
    assert_eq!(nv12["plane_count"], 2);
    if common::expect_modifiers() {
        for u in USAGES {
            assert_eq!(usage(nv12, u), (false, false), "lavapipe refuses NV12 {u} with modifiers");
        }
    }
}

#[test]
fn table_names_modifiers_and_usages() {
    let (stdout, _) = probe(&[]);
    assert!(stdout.contains("AR24  B8G8R8A8_UNORM"), "{stdout}");
    assert!(stdout.contains("LINEAR"));
    for u in USAGES {
        assert!(stdout.contains(u));
    }
    let expect = if common::expect_modifiers() { "explicit modifiers: yes" } else { "explicit modifiers: no" };
    assert!(stdout.contains(expect), "{stdout}");
}

#[test]
fn unknown_create_flag_is_bad_input() {
    let out = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .args(["probe", "--create-flags", "bogus"])
        .output()
        .expect("run dmabridge");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown create flag"));
}

/// The exact-use probe of issue #16: combinations as keys of their own, create flags and an
/// sRGB view for every query, validation on (exit 3 on any message).
#[test]
fn combinations_create_flags_and_srgb_views() {
    let (stdout, _) = probe(&[
        "--json",
        "--usage",
        "sampled+color-attachment",
        "--usage",
        "sampled+storage",
        "--create-flags",
        "mutable-format",
        "--srgb-view",
    ]);
    let v: Value = serde_json::from_str(&stdout).expect("valid JSON");
    assert_eq!(v["create_flags"], "mutable-format");
    assert_eq!(v["srgb_view"], true);
    let keys: Vec<&str> = v["usage_keys"].as_array().expect("usage_keys").iter().filter_map(Value::as_str).collect();
    assert_eq!(keys, [&USAGES[..], &["sampled+color-attachment", "sampled+storage"]].concat());
    let formats = v["formats"].as_array().expect("formats");
    for f in formats {
        for m in f["modifiers"].as_array().expect("modifiers") {
            for k in &keys {
                let s = &m["usages"][*k];
                assert!(s["import"].is_boolean() && s["export"].is_boolean(), "{} {k}: {s}", f["fourcc"]);
                // A use the driver accepts says how large; one it refuses says nothing.
                if s["import"] == true || s["export"] == true {
                    assert!(s["max_extent"].as_array().is_some_and(|e| e.len() == 2), "{} {k}: {s}", f["fourcc"]);
                }
            }
        }
    }
    let find = |code: &str| formats.iter().find(|f| f["fourcc"] == code).unwrap_or_else(|| panic!("{code}"));
    // NV12 with storage: refused, whatever the configuration.
    for m in find("NV12")["modifiers"].as_array().expect("modifiers") {
        assert_eq!(usage(m, "sampled+storage"), (false, false), "{m}");
    }
    // AB24 sampled and rendered to, with an sRGB view: what a compositor asks.
    let ab24 = &find("AB24")["modifiers"][0];
    assert_eq!(usage(ab24, "sampled+color-attachment"), (true, common::expect_modifiers()));
    // RG16 has no storage on lavapipe: the combination inherits the refusal.
    assert_eq!(usage(&find("RG16")["modifiers"][0], "sampled+storage"), (false, false));
}

#[test]
fn the_table_prints_combinations_as_columns() {
    let (stdout, _) = probe(&["--usage", "sampled+color-attachment", "--create-flags", "alias", "--srgb-view"]);
    assert!(stdout.contains("every query with: alias, an sRGB view"), "{stdout}");
    let header = stdout.lines().find(|l| l.trim_start().starts_with("modifier")).expect("a header row");
    assert!(header.trim_end().ends_with("transfer-dst  sampled+color-attachment"), "{header}");
    let out = Command::new(env!("CARGO_BIN_EXE_dmabridge")).args(["probe", "--usage", "sampled+scanout"]).output().expect("run dmabridge");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"scanout\""));
}

/// Every caps string probe prints is one GStreamer itself parses (gst-launch hands it to
/// `gst_caps_from_string` through capsfilter's `caps` property), and every modifier row
/// carries the kernel's macro name next to the hex, as drm_info prints it.
#[test]
fn paste_able_caps_parse_in_gstreamer_and_modifiers_have_kernel_names() {
    let (stdout, _) = probe(&["--json"]);
    let v: Value = serde_json::from_str(&stdout).expect("valid JSON");
    let mut caps: Vec<String> = Vec::new();
    for f in v["formats"].as_array().expect("formats") {
        for m in f["modifiers"].as_array().expect("modifiers") {
            let label = m["kernel_name"].as_str().expect("kernel_name");
            assert!(label.ends_with(&format!("({})", m["modifier"].as_str().expect("hex"))), "{label}");
        }
        caps.extend(f["gst_caps"].as_array().expect("gst_caps").iter().filter_map(|c| c.as_str().map(str::to_owned)));
    }
    let ar24 = v["formats"].as_array().expect("formats").iter().find(|f| f["fourcc"] == "AR24").expect("AR24");
    assert_eq!(ar24["modifiers"][0]["kernel_name"], "DRM_FORMAT_MOD_LINEAR (0x0000000000000000)");
    assert!(caps.contains(&"video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=AR24".to_owned()), "{caps:?}");
    assert!(caps.contains(&"video/x-raw(memory:DMABuf),format=BGRA".to_owned()), "{caps:?}");
    caps.sort();
    caps.dedup();
    for c in caps.iter().chain(std::iter::once(&"video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=(string){ NV12:0x0100000000000002, NV12 }".to_owned())) {
        let out = Command::new("gst-launch-1.0")
            .args(["-q", "fakesrc", "num-buffers=0", "!", "capsfilter", &format!("caps={c}"), "!", "fakesink"])
            .output()
            .expect("gst-launch-1.0 (scripts/setup.sh installs gstreamer1.0-tools)");
        assert!(out.status.success(), "GStreamer cannot parse {c:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // A broken string is refused by the same check (so the check can fail).
    let broken = Command::new("gst-launch-1.0").args(["-q", "fakesrc", "num-buffers=0", "!", "capsfilter", "caps=video/x-raw,format=(string){ NV12", "!", "fakesink"]).output().expect("gst-launch");
    assert!(!broken.status.success());
}
