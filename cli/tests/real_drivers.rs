//! Real GPU drivers on a machine with no GPU: radv's null device (`RADV_FORCE_FAMILY`, the
//! installed Mesa's `radeon_icd.json`) answers every query with the chip's real lists and
//! crashes beyond them (`vkCreateImage`, `vkDestroyDevice`). dmabridge must probe it,
//! negotiate with it, refuse to open it by name, and read the saved reports of it (and of a
//! real NVIDIA driver, `data/probe/nvidia-h200-580.json`, probed on a device machine) as
//! participants. The tests assert what the driver answers, never a belief about a chip: the
//! saved reports are inputs, and the live answers are checked for their shape and their
//! consistency with each other. The validation layer is on in every run.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// The families the issue lists, GFX6-8 included (they list no modifier).
const FAMILIES: [&str; 7] = ["navi31", "navi21", "gfx1150", "vega10", "raven", "tahiti", "polaris10"];

const RADEON_ICD: &str = "/usr/share/vulkan/icd.d/radeon_icd.json";
const LVP_ICD: &str = "/usr/share/vulkan/icd.d/lvp_icd.json";

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/probe").join(name)
}

/// `dmabridge ARGS` with the radv null device of `family` (and `icds`' other drivers).
fn on_null_device(family: &str, icds: &[&str], args: &[&str]) -> Output {
    let icds: Vec<&str> = icds.iter().copied().chain([RADEON_ICD]).collect();
    Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .args(args)
        .env("VK_ICD_FILENAMES", icds.join(":"))
        .env("RADV_FORCE_FAMILY", family)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env("DMABRIDGE_VALIDATION", "1")
        .env_remove("DMABRIDGE_DEVICE")
        .output()
        .expect("run dmabridge")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Skipped, saying why, where the installed Mesa has no radv (it always has on a machine
/// set up by scripts/setup.sh).
fn radv_installed() -> bool {
    let there = std::path::Path::new(RADEON_ICD).exists();
    if !there {
        eprintln!("skipped: {RADEON_ICD} is not installed (scripts/setup.sh installs Mesa's Vulkan drivers)");
    }
    there
}

#[test]
fn every_family_is_probed_and_named_without_opening_a_device() {
    if !radv_installed() {
        return;
    }
    for family in FAMILIES {
        let o = on_null_device(family, &[], &["probe", "--json", "--usage", "sampled+color-attachment"]);
        let (stdout, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{family}: {stderr}");
        assert!(!stderr.contains("validation:"), "{family}: {stderr}");
        let v: Value = serde_json::from_str(&stdout).expect("JSON");
        let name = v["device"]["name"].as_str().expect("device name");
        assert!(name.to_lowercase().contains(family), "{family}: {name}");
        let keys: Vec<&str> = v["usage_keys"].as_array().expect("usage keys").iter().filter_map(Value::as_str).collect();
        assert!(keys.contains(&"sampled+color-attachment"), "{keys:?}");
        let explicit = v["modifier_extension"].as_bool().expect("modifier_extension");
        let mut listed = 0;
        for f in v["formats"].as_array().expect("formats") {
            for m in f["modifiers"].as_array().expect("modifiers") {
                listed += 1;
                let raw = u64::from_str_radix(m["modifier"].as_str().expect("hex").trim_start_matches("0x"), 16).expect("hex");
                let modifier = dmabridge::interop::Modifier::from_raw(raw);
                // Every modifier a real driver gives is named as drm_fourcc.h defines it.
                assert!(modifier.name().is_some(), "{family}: {raw:#018x} has no name");
                assert_eq!(m["name"].as_str(), Some(modifier.display_name().as_str()));
                let usages = m["usages"].as_object().expect("usages");
                for k in &keys {
                    assert!(usages.contains_key(*k), "{family} {raw:#x}: no answer for {k}");
                }
                // A use the combination allows, each of its parts allows.
                let allowed = |k: &str| usages[k]["import"].as_bool() == Some(true) || usages[k]["export"].as_bool() == Some(true);
                if allowed("sampled+color-attachment") {
                    assert!(allowed("sampled") && allowed("color-attachment"), "{family} {raw:#x}: {usages:?}");
                }
                if !explicit {
                    assert_eq!(raw, 0, "{family}: without the extension only LINEAR tiling is answered");
                }
            }
        }
        assert!(listed > 0, "{family}: every format has at least its LINEAR row");
        // The human form says why a device lists no modifier.
        let o = on_null_device(family, &[], &["probe"]);
        let (table, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{family}: {stderr}");
        if !explicit {
            assert!(table.contains("the driver does not offer VK_EXT_image_drm_format_modifier on this device"), "{family}:\n{table}");
        }
        eprintln!("{family}: {name}, modifier extension {explicit}, {listed} format+modifier rows");
    }
}

#[test]
fn the_null_device_is_queried_never_opened() {
    if !radv_installed() {
        return;
    }
    // A command that needs a device says why there is none, and does not crash in radv's
    // null winsys (the engine used to, in vkDestroyDevice after its set-up failed).
    let o = on_null_device("navi31", &[], &["convert", "--format", "AB24", "--width", "16", "--height", "16", "--from", "linear", "--to", "linear", "--path", "gpu", "--in", "/dev/null", "--out", "/dev/null"]);
    let (_, stderr) = text(&o);
    assert!(o.status.code().is_some(), "killed by a signal: {stderr}");
    let o = on_null_device("navi31", &[], &["demo", "--frames", "2", "--out", &std::env::temp_dir().join("dmabridge-null-demo").display().to_string()]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("answers queries only") && stderr.contains("radv's null device"), "{stderr}");
}

#[test]
fn two_live_drivers_in_one_process_are_two_participants_named_by_their_devices() {
    if !radv_installed() {
        return;
    }
    let o = on_null_device(
        "navi31",
        &[LVP_ICD],
        &["negotiate", "--json", "--vulkan", "dgpu=color-attachment:device=navi31", "--vulkan", "cpu=sampled:device=llvmpipe"],
    );
    let (stdout, stderr) = text(&o);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    let devices: Vec<&str> = v["participants"].as_array().expect("participants").iter().filter_map(|p| p["device"].as_str()).collect();
    assert_eq!(devices.len(), 2, "{v:#}");
    assert!(devices[0].contains("NAVI31") && devices[1].contains("llvmpipe"), "{devices:?}");
    // The null device cannot make the images its LINEAR pitch is measured with, and says so;
    // lavapipe, opened, measured its own.
    assert!(devices[0].contains("LINEAR row pitch its driver needs is not measured"), "{devices:?}");
    assert!(!devices[1].contains("not measured"), "{devices:?}");
    // lavapipe lists modifiers only where it can export dma-bufs (the udmabuf emulation, the
    // kernel lab); without them it speaks implicit modifiers (DRM_FORMAT_MOD_INVALID), which
    // no explicit list meets, and takes the AMD device's LINEAR buffer by its copy import.
    let lavapipe_explicit = v["participants"][1]["formats"].as_array().expect("formats").iter().any(|f| f.as_str().is_some_and(|f| !f.ends_with(":0x00ffffffffffffff")));
    if lavapipe_explicit {
        assert_eq!(v["outcome"], "shared", "{v:#}");
        assert_eq!(v["modifiers"], serde_json::json!(["0x0000000000000000"]));
        assert_eq!(v["gives_up"][0]["participant"], "dgpu", "the AMD device gives up its tiled layouts: {v:#}");
    } else {
        assert_eq!(v["outcome"], "copy", "{v:#}");
        let kind = v["conversions"][0]["kind"].as_str().unwrap_or_default();
        assert!(kind.starts_with("device copy ") && kind.ends_with(" LINEAR -> its own image (implicit layout)"), "{v:#}");
        assert!(v["conversions"][0]["runs_on"].as_str().is_some_and(|r| r.starts_with("cpu (llvmpipe")), "{v:#}");
    }
}

#[test]
fn a_prime_laptop_shares_linear_and_says_what_each_side_gives_up() {
    if !radv_installed() {
        return;
    }
    // A discrete navi21 renders (its saved probe), the integrated gfx1150 samples (live),
    // and a display plane takes AR24 tiled the gfx1150 way or LINEAR.
    let dgpu = format!("dgpu={}:color-attachment", data("radv-null-navi21.json").display());
    let display = "display=AR24:0x0200000000001b04,AR24:0x0200000000000a04,AR24,XR24";
    let o = on_null_device("gfx1150", &[], &["negotiate", "--json", "--probe-report", &dgpu, "--vulkan", "igpu=sampled", "--drm-formats", display]);
    let (stdout, stderr) = text(&o);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert_eq!(v["outcome"], "shared", "{v:#}");
    assert_eq!(v["format"], "AR24");
    assert_eq!(v["modifiers"], serde_json::json!(["0x0000000000000000"]), "the two GPUs' tilings differ: only LINEAR is shared");
    let p = v["participants"].as_array().expect("participants");
    assert!(p[0]["device"].as_str().is_some_and(|d| d.contains("NAVI21") && d.contains("saved probe")), "{p:?}");
    assert!(p[1]["device"].as_str().is_some_and(|d| d.contains("GFX1150")), "{p:?}");
    let gave: Vec<&str> = v["gives_up"].as_array().expect("gives_up").iter().filter_map(|g| g["participant"].as_str()).collect();
    assert_eq!(gave, ["dgpu", "igpu", "display"], "{v:#}");
    // What it gives up is what its own list held for AR24 besides LINEAR, named.
    for g in v["gives_up"].as_array().expect("gives_up") {
        for name in g["names"].as_array().expect("names") {
            assert!(name.as_str().is_some_and(|n| n.starts_with("AMD(")), "{g}");
        }
    }
    // The human form says the same in words.
    let o = on_null_device("gfx1150", &[], &["negotiate", "--probe-report", &dgpu, "--vulkan", "igpu=sampled", "--drm-formats", display]);
    let (human, _) = text(&o);
    assert!(human.contains("LINEAR is the only layout every participant shares") && human.contains("dgpu gives up AMD(GFX10_RBPLUS"), "{human}");
    assert!(human.contains("device igpu: Null hardware (RADV GFX1150)"), "{human}");
}

/// The PRIME laptop where no layout is shared: the display scans out only gfx1150's own
/// tiling, which navi21 cannot write. The integrated GPU's driver answers that it imports
/// LINEAR for transfer reads and exports that tiling for transfer writes, so the plan is its
/// copy (`vkCmdCopyImage`), named, and carried in the plan file to the GPU that runs it.
#[test]
fn a_prime_laptop_with_no_shared_layout_is_fed_by_the_integrated_gpus_copy() {
    let dgpu = format!("dgpu={}:color-attachment", data("radv-null-navi21.json").display());
    let saved_igpu = format!("igpu={}:sampled", data("radv-null-gfx1150.json").display());
    let display = "display=AR24:0x0200000000001b04";
    let plan_out = std::env::temp_dir().join(format!("dmabridge-prime-plan-{}.json", std::process::id()));
    let check = |o: &Output, live: bool| {
        let (stdout, stderr) = text(o);
        assert_eq!(o.status.code(), Some(0), "{stdout}\n{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
        assert_eq!(v["outcome"], "copy", "{v:#}");
        let groups: Vec<(&Value, &Value)> = v["groups"].as_array().expect("groups").iter().map(|g| (&g["participants"], &g["modifiers"])).collect();
        assert_eq!(groups[0], (&serde_json::json!(["dgpu", "igpu"]), &serde_json::json!(["0x0000000000000000"])), "{v:#}");
        assert_eq!(groups[1], (&serde_json::json!(["display"]), &serde_json::json!(["0x0200000000001b04"])), "{v:#}");
        let c = &v["conversions"][0];
        assert!(c["kind"].as_str().is_some_and(|k| k.starts_with("device copy AR24 LINEAR -> AMD(GFX11")), "{c}");
        let runs_on = c["runs_on"].as_str().expect("the copier is named");
        assert!(runs_on.starts_with("igpu (Null hardware (RADV GFX1150)") && runs_on.ends_with("with vkCmdCopyImage"), "{runs_on}");
        assert_eq!(runs_on.contains("saved probe"), !live, "{runs_on}");
        assert!(c.get("convert").is_none(), "no `dmabridge convert` runs a driver's layout: {c}");
    };
    let bin = env!("CARGO_BIN_EXE_dmabridge");
    let plan_arg = plan_out.display().to_string();
    let o = Command::new(bin)
        .args(["negotiate", "--json", "--probe-report", &dgpu, "--probe-report", &saved_igpu, "--drm-formats", display, "--plan-out", &plan_arg])
        .output()
        .expect("run dmabridge");
    check(&o, false);
    // The plan file names the GPU, and the converter refuses the step, saying whose it is.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&plan_out).expect("plan file")).expect("JSON");
    assert_eq!(file["conversions"][0]["plan"]["steps"][0]["op"], "device-copy", "{file:#}");
    let frame = std::env::temp_dir().join(format!("dmabridge-prime-frame-{}.raw", std::process::id()));
    std::fs::write(&frame, vec![0u8; 64 * 64 * 4]).expect("frame");
    let out = frame.with_extension("out");
    let (frame_arg, out_arg) = (frame.display().to_string(), out.display().to_string());
    let o = Command::new(bin).args(["convert", "--plan", &plan_arg, "--width", "64", "--height", "64", "--in", &frame_arg, "--out", &out_arg]).output().expect("run dmabridge");
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is a GPU's copy between dma-bufs (vkCmdCopyImage), not a converter step"), "{stderr}");
    for f in [&plan_out, &frame, &out] {
        let _ = std::fs::remove_file(f);
    }
    // The integrated GPU asked live gives the same plan.
    if radv_installed() {
        let o = on_null_device("gfx1150", &[], &["negotiate", "--json", "--probe-report", &dgpu, "--vulkan", "igpu=sampled", "--drm-formats", display]);
        check(&o, true);
    }
}

#[test]
fn saved_probe_reports_are_participants_and_their_faults_are_named() {
    let bin = env!("CARGO_BIN_EXE_dmabridge");
    let run = |args: &[&str]| Command::new(bin).args(args).output().expect("run dmabridge");
    // The real NVIDIA driver (580.159.04, H200, no nvidia-drm): block-linear modifiers listed,
    // none importable or exportable as a dma-buf there. As a participant it lists nothing.
    let nvidia = format!("nv={}:sampled", data("nvidia-h200-580.json").display());
    let navi31 = format!("amd={}:sampled", data("radv-null-navi31.json").display());
    let o = run(&["negotiate", "--json", "--probe-report", &nvidia, "--probe-report", &navi31]);
    let v: Value = serde_json::from_str(&String::from_utf8_lossy(&o.stdout)).expect("JSON");
    assert_eq!(v["outcome"], "impossible", "{v:#}");
    assert_eq!(v["participants"][0]["formats"], serde_json::json!([]), "{v:#}");
    assert!(v["participants"][0]["device"].as_str().is_some_and(|d| d.starts_with("NVIDIA H200 (NVIDIA, 580.159.04)")), "{v:#}");
    // Two saved AMD reports: LINEAR, and what each gives up.
    let navi21 = format!("old={}:sampled", data("radv-null-navi21.json").display());
    let o = run(&["negotiate", "--json", "--probe-report", &navi31, "--probe-report", &navi21]);
    let v: Value = serde_json::from_str(&String::from_utf8_lossy(&o.stdout)).expect("JSON");
    assert_eq!(v["modifiers"], serde_json::json!(["0x0000000000000000"]), "{v:#}");
    // A use the report did not probe, and a file that is no report, are named.
    let o = run(&["negotiate", "--probe-report", &format!("amd={}:storage+transfer-src", data("radv-null-navi31.json").display())]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("did not probe the use \"storage+transfer-src\""), "{err}");
    let o = run(&["negotiate", "--probe-report", &format!("x={}:sampled", PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml").display())]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a dmabridge probe --json report"));
    let o = run(&["negotiate", "--probe-report", "x=no-use-given.json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected NAME=FILE:USAGE"));
}

/// radv's DCC layouts, as the driver lists them on Mesa's drm-shim (navi31:
/// `data/probe/radv-drm-shim-navi31.json`, `dmabridge probe --json` under
/// `scripts/real-drivers.sh`), negotiate like any other modifier: a display that scans out
/// a DCC layout of the same chip shares it, and the report names its DCC fields.
#[test]
fn a_saved_dcc_list_from_the_drm_shim_negotiates_its_compressed_layouts() {
    let report = data("radv-drm-shim-navi31.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("the saved report")).expect("JSON");
    // The modifiers with more memory planes than the format has, as the driver listed them.
    let ar24 = saved["formats"].as_array().expect("formats").iter().find(|f| f["fourcc"] == "AR24").expect("AR24 listed");
    let dcc: Vec<&str> = ar24["modifiers"]
        .as_array()
        .expect("modifiers")
        .iter()
        .filter(|m| m["plane_count"].as_u64() > Some(1))
        .filter_map(|m| m["modifier"].as_str())
        .collect();
    assert!(!dcc.is_empty(), "the saved drm-shim report lists multi-plane (DCC) modifiers: {ar24:#}");
    let display = format!("display=AR24:{},AR24", dcc[0]);
    let dgpu = format!("dgpu={}:color-attachment", report.display());
    let o = Command::new(env!("CARGO_BIN_EXE_dmabridge")).args(["negotiate", "--json", "--probe-report", &dgpu, "--drm-formats", &display]).output().expect("run dmabridge");
    let (stdout, stderr) = text(&o);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert_eq!(v["outcome"], "shared", "{v:#}");
    assert!(v["modifiers"].as_array().expect("modifiers").iter().any(|m| m == dcc[0]), "{v:#}");
    let names = v["modifier_names"].as_array().expect("names");
    assert!(names.iter().any(|n| n.as_str().is_some_and(|n| n.contains("DCC") && n.contains(dcc[0]))), "the DCC layout is named: {names:?}");
    assert!(v["participants"][0]["device"].as_str().is_some_and(|d| d.contains("NAVI31")), "{v:#}");
}
