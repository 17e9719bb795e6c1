//! The proof that a tiled layout is one table row plus its address function: the
//! `test-layout` feature adds a made-up layout (`test-interlaced-16x16`, modifier
//! `0x7f00000000007e57`: one row of `TILE_LAYOUTS` and `AddressKind::InterlacedTiles`, with its
//! mirror in `shaders/tiled_address.glsl`) and touches nothing else, and `dmabridge convert`
//! (on the GPU and the CPU) and `dmabridge negotiate` take it.
//!
//! `cargo test -p dmabridge-cli --features test-layout --test test_layout`

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use dmabridge::interop::tiling::{tile_to_vec, tiled_size};
use dmabridge::interop::{Fourcc, Modifier, TileLayout};

const NAME: &str = "test-interlaced-16x16";

/// The made-up layout's modifier, as its row gives it.
const TEST_MODIFIER: Modifier = Modifier::from_vendor(0x7f, 0x7e57);

fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmabridge-test-layout-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Runs `dmabridge ARGS` with its own cost-model cache, and returns its stdout once it
/// has succeeded.
fn dmabridge(args: &[&str], cache: &PathBuf) -> String {
    let r: Output = Command::new(env!("CARGO_BIN_EXE_dmabridge")).args(args).env("DMABRIDGE_VALIDATION", "1").env("XDG_CACHE_HOME", cache).output().expect("run dmabridge");
    assert!(r.status.success(), "dmabridge {}: {}", args.join(" "), String::from_utf8_lossy(&r.stderr));
    String::from_utf8_lossy(&r.stdout).into_owned()
}

#[test]
fn the_made_up_layout_is_a_layout_everywhere() {
    let l: TileLayout = NAME.parse().expect("its name parses");
    assert_eq!(l, TileLayout::TestInterlaced16x16);
    assert_eq!(TileLayout::from_modifier(TEST_MODIFIER), Some(l));
    assert!(TileLayout::ALL.contains(&l));
}

#[test]
fn convert_tiles_on_gpu_and_cpu_and_detiles_by_modifier() {
    let d = scratch("convert");
    let cache = d.join("cache");
    // Not whole tiles: the padding is part of the layout too.
    let (w, h) = (130u32, 66u32);
    let linear = common::pattern(tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).expect("size").size as usize, 11);
    let want = tile_to_vec(TileLayout::TestInterlaced16x16, Fourcc::NV12, w, h, &linear).expect("CPU reference");
    let input = d.join("in.nv12");
    std::fs::write(&input, &linear).expect("write");
    let (ws, hs) = (w.to_string(), h.to_string());
    for (path, out) in [("gpu", d.join("gpu.tiled")), ("cpu", d.join("cpu.tiled"))] {
        let o = out.to_str().expect("utf-8 path");
        let args = ["convert", "--format", "NV12", "--width", &ws, "--height", &hs, "--from", "linear", "--to", NAME, "--path", path, "--in", input.to_str().expect("utf-8"), "--out", o];
        let said = dmabridge(&args, &cache);
        assert!(said.contains(&format!("({path}; tile linear -> {NAME})")), "{said}");
        assert!(std::fs::read(&out).expect("output") == want, "{path}: the tiled frame differs from the CPU reference");
    }
    // Back to linear, naming the layout by its modifier.
    let back = d.join("back.nv12");
    let hex = TEST_MODIFIER.to_hex();
    let gpu = d.join("gpu.tiled");
    let args = ["convert", "--format", "NV12", "--width", &ws, "--height", &hs, "--from", &hex, "--to", "linear", "--in", gpu.to_str().expect("utf-8"), "--out", back.to_str().expect("utf-8")];
    dmabridge(&args, &cache);
    assert!(std::fs::read(&back).expect("back") == linear, "the round trip changed the frame");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn negotiate_plans_a_detile_of_the_made_up_layout_that_convert_runs() {
    let d = scratch("negotiate");
    let cache = d.join("cache");
    let producer = format!("decoder=NV12:{}", TEST_MODIFIER.to_hex());
    let out = dmabridge(&["negotiate", "--json", "--paths", "--drm-formats", &producer, "--drm-formats", "display=NV12"], &cache);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["outcome"], "copy", "{v}");
    let c = &v["conversions"][0];
    assert_eq!(c["steps"], serde_json::json!([format!("detile {NAME} -> linear")]), "{c}");
    let convert_args: Vec<&str> = c["convert"].as_str().expect("convert args").split(' ').collect();
    assert_eq!(convert_args, ["--format", "NV12", "--from", NAME, "--to", "linear", "--to-format", "NV12"]);

    let (w, h) = (64u32, 48u32);
    let linear = common::pattern(tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).expect("size").size as usize, 12);
    let tiled = tile_to_vec(TileLayout::TestInterlaced16x16, Fourcc::NV12, w, h, &linear).expect("tile");
    let (input, output) = (d.join("frame.tiled"), d.join("frame.nv12"));
    std::fs::write(&input, &tiled).expect("write");
    let (ws, hs) = (w.to_string(), h.to_string());
    let mut args = vec!["convert"];
    args.extend(&convert_args);
    args.extend(["--width", &ws, "--height", &hs, "--in", input.to_str().expect("utf-8"), "--out", output.to_str().expect("utf-8")]);
    dmabridge(&args, &cache);
    assert!(std::fs::read(&output).expect("output") == linear, "the plan's detile, run by convert, gives the frame back");
    let _ = std::fs::remove_dir_all(d);
}
