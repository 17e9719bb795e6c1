//! Copy plans the engine runs (#22): `dmabridge negotiate --paths --plan-out FILE` writes a
//! plan's steps, `dmabridge convert --plan FILE` runs them on the real lavapipe and matches
//! the direct conversion; `Converter::convert_plan` of a two-step plan equals the two
//! conversions done by hand; a plan with a step the converter lacks is a typed error
//! naming the step.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use dmabridge::interop::negotiate::{ConversionPlan, PlanError, PlanFile, StepOp};
use dmabridge::interop::tiling::{tile_to_vec, ColourMatrix, ColourRange};
use dmabridge::interop::{Format, Fourcc, TileLayout};
use dmabridge::{ConvertError, Converter};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmabridge-copy-plans-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn dmabridge(args: &[&str], cache: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .args(args)
        .env("DMABRIDGE_VALIDATION", "1")
        .env("XDG_CACHE_HOME", cache)
        .output()
        .expect("run dmabridge")
}

fn x_tiled_argb() -> Format {
    Format::explicit(Fourcc::ARGB8888, TileLayout::I915X.modifier().expect("modifier"))
}

/// Every byte within `tolerance` of the other's.
fn close(a: &[u8], b: &[u8], tolerance: u8) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.abs_diff(*y) <= tolerance)
}

#[test]
fn negotiate_writes_a_plan_that_convert_runs_and_it_matches_the_direct_conversion() {
    let d = dir("e2e");
    let cache = d.join("cache");
    let plan_path = d.join("plan.json");
    // A GPU that renders X-tiled AR24 and an encoder that takes linear NV12 only: detile,
    // then colour convert.
    let plan_arg = plan_path.to_str().expect("utf-8");
    let out = dmabridge(&["negotiate", "--paths", "--plan-out", plan_arg, "--drm-formats", "gpu=AR24:0x0100000000000001", "--drm-formats", "enc=NV12"], &cache);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("group 0 -> group 1 plan: detile AR24 i915-x -> AR24 linear"), "{stdout}");
    let file = PlanFile::parse(&std::fs::read_to_string(&plan_path).expect("plan file")).expect("a valid plan file");
    assert_eq!(file.conversions.len(), 1);
    let c = &file.conversions[0];
    assert!(c.runs_on.as_deref().is_some_and(|r| r.starts_with("path ")), "--paths says where it runs: {c:?}");
    let ops: Vec<StepOp> = c.plan.steps.iter().map(|s| s.op).collect();
    assert_eq!(ops, [StepOp::Detile, StepOp::RgbToYuv]);

    // Run it on a frame whose width is not a multiple of 4 (the colour step's aligned path).
    let (w, h) = (130u32, 66u32);
    let linear = common::pattern((w * h * 4) as usize, 23);
    let tiled = tile_to_vec(TileLayout::I915X, Fourcc::ARGB8888, w, h, &linear).expect("tile");
    let (input, via_plan, direct) = (d.join("frame.xtiled"), d.join("via-plan.nv12"), d.join("direct.nv12"));
    std::fs::write(&input, &tiled).expect("write");
    let (ws, hs) = (w.to_string(), h.to_string());
    let run = |args: &[&str], output: &Path| {
        let mut all: Vec<&str> = vec!["convert"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--width", &ws, "--height", &hs, "--in", input.to_str().expect("utf-8"), "--out", output.to_str().expect("utf-8")]);
        let r = dmabridge(&all, &cache);
        assert!(r.status.success(), "{all:?}: {}", String::from_utf8_lossy(&r.stderr));
        String::from_utf8_lossy(&r.stdout).into_owned()
    };
    let said = run(&["--plan", plan_arg, "--json"], &via_plan);
    let report: serde_json::Value = serde_json::from_str(&said).expect("json");
    assert_eq!(report["steps"].as_array().map(Vec::len), Some(2), "{report}");
    assert_eq!(report["path"], "gpu", "{report}");
    run(&["--format", "AR24", "--from", "i915-x", "--to", "linear", "--to-format", "NV12"], &direct);
    let (a, b) = (std::fs::read(&via_plan).expect("plan output"), std::fs::read(&direct).expect("direct output"));
    assert_eq!(a.len() as u32, w * h + w * h.div_ceil(2));
    // The direct conversion may run on the CPU (the cost model's choice), whose colour
    // arithmetic may round differently by one.
    assert!(close(&a, &b, 1), "the plan's output is the direct conversion's, within +-1");
    // Without a copy plan there is nothing to write, and negotiate says so.
    let shared = d.join("shared.json");
    let out = dmabridge(&["negotiate", "--plan-out", shared.to_str().expect("utf-8"), "--drm-formats", "a=NV12", "--drm-formats", "b=NV12"], &cache);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no copy plan"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!shared.exists());
    // And on the CPU path, the plan runs too.
    run(&["--plan", plan_arg, "--path", "cpu"], &via_plan);
    assert!(close(&std::fs::read(&via_plan).expect("cpu plan output"), &b, 1));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn convert_plan_of_two_steps_equals_the_two_conversions_by_hand() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("converter");
    for (w, h) in [(128u32, 64u32), (130, 66)] {
        let linear = common::pattern((w * h * 4) as usize, 7);
        let tiled = tile_to_vec(TileLayout::I915X, Fourcc::ARGB8888, w, h, &linear).expect("tile");
        let plan = ConversionPlan::derive(x_tiled_argb(), Format::linear(Fourcc::NV12), (w, h)).expect("plan");
        assert_eq!(plan.steps.len(), 2);
        let via_plan = conv.convert_plan(&plan, &tiled).expect("run the plan");
        let detiled = conv.convert_layout(TileLayout::I915X, TileLayout::Linear, Fourcc::ARGB8888, (w, h), &tiled).expect("detile");
        assert_eq!(detiled, linear);
        let by_hand = conv.rgb_to_nv12(Fourcc::ARGB8888, (ColourMatrix::Bt709, ColourRange::Limited), (w, h), &detiled).expect("colour");
        assert!(via_plan == by_hand, "{w}x{h}: the plan's two steps equal the two conversions by hand");
    }
    // Tiled -> tiled through linear, and the fused one-step plan, as well.
    let (w, h) = (96u32, 64u32);
    let nv12 = common::pattern((w * h * 3 / 2) as usize, 5);
    let samsung = Format::explicit(Fourcc::NV12, TileLayout::Samsung64x32.modifier().expect("modifier"));
    let tiled = tile_to_vec(TileLayout::Samsung64x32, Fourcc::NV12, w, h, &nv12).expect("tile");
    let to_y = ConversionPlan::derive(samsung, Format::explicit(Fourcc::NV12, TileLayout::I915Y.modifier().expect("modifier")), (w, h)).expect("plan");
    let retiled = conv.convert_plan(&to_y, &tiled).expect("retile");
    assert_eq!(retiled, tile_to_vec(TileLayout::I915Y, Fourcc::NV12, w, h, &nv12).expect("reference"));
    if let Some(log) = engine.validation() {
        assert!(log.problems().is_empty(), "{:?}", log.problems());
    }
}

#[test]
fn a_plan_with_an_impossible_step_is_a_typed_error_naming_it() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("converter");
    let plan = ConversionPlan::derive(x_tiled_argb(), Format::linear(Fourcc::NV12), (64, 32)).expect("plan");
    // R8 has no colour conversion to NV12: the second step cannot run.
    let mut bad = plan.clone();
    bad.steps[0].from.fourcc = Fourcc::R8;
    bad.steps[0].to.fourcc = Fourcc::R8;
    bad.steps[1].from.fourcc = Fourcc::R8;
    bad.from.fourcc = Fourcc::R8;
    let input = vec![0u8; 1 << 16];
    match conv.convert_plan(&bad, &input) {
        Err(ConvertError::Plan(PlanError::Step { step, .. })) => assert!(step.starts_with("rgb-to-yuv R8 linear -> NV12 linear"), "{step}"),
        other => panic!("expected the step named, got {other:?}"),
    }
    // Buffers smaller than the plan's frames are refused before anything is recorded.
    let huge = ConversionPlan::derive(x_tiled_argb(), Format::linear(Fourcc::NV12), (16384, 16384)).expect("plan");
    let src = dmabridge::GpuBuffer::new(&engine, 64, dmabridge::BufferLocation::Upload).expect("buffer");
    assert!(matches!(conv.run_plan(&huge, &src, &src, Default::default()), Err(ConvertError::InputSize { .. })));
    // The CLI says the same about a plan file with that step.
    let d = dir("bad");
    let file = PlanFile { dmabridge_plan: 1, conversions: vec![dmabridge::interop::negotiate::PlannedConversion { from_group: 0, to_group: 1, runs_on: None, plan: bad }] };
    let path = d.join("bad.json");
    std::fs::write(&path, serde_json::to_string(&file).expect("json")).expect("write");
    let frame = d.join("frame");
    std::fs::write(&frame, vec![0u8; 64 * 32]).expect("write");
    let r = dmabridge(&["convert", "--plan", path.to_str().expect("utf-8"), "--width", "64", "--height", "32", "--in", frame.to_str().expect("utf-8"), "--out", d.join("out").to_str().expect("utf-8")], &d.join("cache"));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("step 'rgb-to-yuv R8 linear -> NV12 linear"), "{stderr}");
    let _ = std::fs::remove_dir_all(&d);
}
