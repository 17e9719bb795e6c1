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
    // lavapipe has no SYNC_FD semaphores: the CPU wait is its only way to synchronise.
    assert_eq!(v["sync"], "cpu-wait");
    assert_eq!(v["sync_methods"], serde_json::json!(["cpu-wait"]));
    let formats = v["formats"].as_array().expect("formats");
    assert_eq!(formats.len(), dmabridge::vk_format::VK_FORMAT_TABLE.len());
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
