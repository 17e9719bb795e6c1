//! The cost model's cache as an embedder sees it: where `EngineOptions::cost_cache` says,
//! or nowhere; measured ahead of time by `Engine::calibrate`, after which a conversion
//! does not measure; and a cached figure for a path the device cannot run is set aside.

mod common;

use std::path::Path;

use dmabridge::interop::tiling::FrameConversion;
use dmabridge::interop::{Fourcc, TileLayout};
use dmabridge::{ChoiceReason, ConvertPath, Converter, CostCache, Engine, EngineOptions};

fn engine(cache: CostCache) -> Engine {
    Engine::new(&EngineOptions { validation: true, cost_cache: cache, ..EngineOptions::default() })
        .unwrap_or_else(|e| panic!("cannot create a validated engine (run scripts/setup.sh): {e}"))
}

fn detile() -> FrameConversion {
    FrameConversion::new((TileLayout::Nv12_4L4, Fourcc::NV12), (TileLayout::Linear, Fourcc::NV12), 320, 180)
}

fn colour() -> FrameConversion {
    FrameConversion::new((TileLayout::Linear, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), 320, 180)
}

/// The cache file's devices and their combination keys.
fn cache_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("the cache file")).expect("the cache is JSON")
}

#[test]
fn calibrate_then_convert_does_not_measure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cost.json");
    let engine = engine(CostCache::File(file.clone()));
    let choices = engine.calibrate(&[detile()]).expect("calibrate");
    assert_eq!(choices.len(), 1);
    assert_eq!(choices[0].reason, ChoiceReason::Measured, "{:?}", choices[0]);
    let written = std::fs::read(&file).expect("calibrate wrote the cache");
    let conv = Converter::new(&engine).expect("pipelines");
    let (in_size, _) = detile().sizes().expect("sizes");
    let (_, choice) = conv.convert_frame(&detile(), None, &vec![0u8; in_size as usize]).expect("convert");
    assert_eq!((choice.reason, choice.path), (ChoiceReason::Cached, choices[0].path), "{choice:?}");
    drop(conv);
    common::assert_clean(&engine);
    drop(engine);

    // Another engine (as another process would) answers from the file, writing nothing.
    let again = self::engine(CostCache::File(file.clone()));
    let choices = again.calibrate(&[detile()]).expect("calibrate");
    assert_eq!(choices[0].reason, ChoiceReason::Cached, "{:?}", choices[0]);
    assert_eq!(std::fs::read(&file).expect("cache"), written, "nothing was measured, nothing rewritten");
    common::assert_clean(&again);
}

#[test]
fn a_cached_path_the_device_cannot_run_is_measured_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cost.json");
    let engine = engine(CostCache::File(file.clone()));
    assert!(!Converter::new(&engine).expect("pipelines").paths(&colour()).expect("paths").contains(&ConvertPath::CopyCommands));
    engine.calibrate(&[colour()]).expect("calibrate");
    drop(engine);
    // Every figure of the combination now names copy commands, which cannot run it.
    let mut json = cache_json(&file);
    for combos in json["devices"].as_object_mut().expect("devices").values_mut() {
        for figures in combos.as_object_mut().expect("combinations").values_mut() {
            *figures = serde_json::json!([{ "path": "copy-commands", "gbps": 1000.0 }]);
        }
    }
    std::fs::write(&file, serde_json::to_vec(&json).expect("json")).expect("write");
    let engine = self::engine(CostCache::File(file.clone()));
    let choice = &engine.calibrate(&[colour()]).expect("not an error")[0];
    assert_eq!(choice.reason, ChoiceReason::Measured, "{choice:?}");
    assert_ne!(choice.path, ConvertPath::CopyCommands);
    common::assert_clean(&engine);
}

/// The child half of [`no_cache_path_writes_no_file`]: an engine with the cache named by
/// the variable's value, in a process whose cache home is the parent's directory.
const CHILD: &str = "DMABRIDGE_COST_MODEL_TEST_CHILD";

#[test]
fn no_cache_path_writes_no_file() {
    if let Ok(which) = std::env::var(CHILD) {
        let cache = if which == "off" { CostCache::Off } else { CostCache::Default };
        engine(cache).calibrate(&[detile()]).expect("calibrate");
        return;
    }
    let run = |which: &str| {
        let home = tempfile::tempdir().expect("tempdir");
        let status = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["--exact", "no_cache_path_writes_no_file", "--test-threads=1"])
            .env(CHILD, which)
            .env("XDG_CACHE_HOME", home.path())
            .env("HOME", home.path())
            .stdout(std::process::Stdio::null())
            .status()
            .expect("spawn");
        assert!(status.success(), "{which}: {status}");
        // Only dmabridge's (Mesa keeps its shader cache there too).
        let files: Vec<String> = walk(home.path())
            .iter()
            .map(|p| p.strip_prefix(home.path()).expect("under").display().to_string())
            .filter(|p| p.starts_with("dmabridge"))
            .collect();
        files
    };
    // The default writes under the cache home (so the test can tell), `Off` writes nothing.
    let default = run("default");
    assert!(default.iter().any(|f| f == "dmabridge/cost-model.json"), "{default:?}");
    assert_eq!(run("off"), Vec::<String>::new());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        out.push(path.clone());
        if path.is_dir() {
            out.extend(walk(&path));
        }
    }
    out
}

/// NV12 -> XR24 at 8192x4100: a frame of the large class whose 134 MB XR24 output is more
/// than lavapipe's compute path may bind (maxStorageBufferRange is 128 MiB), while the
/// class's measured frame (3840x2160, 33 MB) is well inside it.
fn too_large_for_the_compute_path() -> FrameConversion {
    FrameConversion::new((TileLayout::Linear, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), 8192, 4100)
}

/// A cache file that names the GPU for a combination whose frame the GPU cannot convert
/// here: the conversion runs on the CPU instead, the choice is dropped in memory and in the
/// file (with the CPU's time on the frame kept), and later frames
/// and later engines choose the CPU without trying the GPU again.
#[test]
fn a_cached_path_that_fails_at_run_time_is_dropped_and_the_cpu_converts() {
    let big = too_large_for_the_compute_path();
    let limits = {
        let probe = engine(CostCache::Off);
        // SAFETY: a plain query of the engine's physical device.
        unsafe { probe.instance().get_physical_device_properties(probe.physical_device()) }.limits
    };
    let (_, out_size) = big.sizes().expect("sizes");
    assert!(out_size > u64::from(limits.max_storage_buffer_range), "the frame must be beyond this device's compute path");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cost.json");
    // The device's key in the file, from a small calibration of the same combination...
    let small = FrameConversion { width: 320, height: 180, ..big };
    engine(CostCache::File(file.clone())).calibrate(&[small]).expect("calibrate");
    // ...and a forged figure that makes the GPU the fastest for the large class.
    let mut json = cache_json(&file);
    let large_key = "NV12 linear -> XR24 linear large";
    for combos in json["devices"].as_object_mut().expect("devices").values_mut() {
        combos.as_object_mut().expect("combinations").insert(large_key.into(), serde_json::json!([{ "path": "gpu", "gbps": 1000.0 }]));
    }
    std::fs::write(&file, serde_json::to_vec(&json).expect("json")).expect("write");

    let engine = self::engine(CostCache::File(file.clone()));
    let conv = Converter::new(&engine).expect("pipelines");
    let known = conv.known(&big).expect("known").expect("the cache names a path");
    assert_eq!((known.path, known.reason), (ConvertPath::Gpu, ChoiceReason::Cached), "{known:?}");
    let (in_size, _) = big.sizes().expect("sizes");
    let input = common::pattern(in_size as usize, 9);
    let want = big.run_cpu(&input, 0).expect("the CPU reference");
    // Forced onto the GPU, the frame is a typed refusal before the driver sees it...
    match conv.convert_frame(&big, Some(ConvertPath::Gpu), &input) {
        Err(dmabridge::ConvertError::BindingTooLarge { bytes, max, .. }) => assert!(bytes > max.saturating_sub(80), "{bytes} {max}"),
        other => panic!("the GPU path converted a frame beyond its binding range: {:?}", other.map(|(_, c)| c)),
    }
    // ...and where the cost model chose it, the CPU converts the frame and the choice goes.
    let (out, choice) = conv.convert_frame(&big, None, &input).expect("the CPU converts what the GPU cannot");
    assert!(out == want, "the fallback's bytes differ from the CPU reference");
    assert_eq!((choice.path, choice.reason), (ConvertPath::Cpu, ChoiceReason::FellBack { failed: ConvertPath::Gpu }), "{choice:?}");
    assert!(choice.explain().contains("gpu path the model chose failed"), "{}", choice.explain());
    let on_disk = |file: &Path| -> Vec<String> {
        let json = cache_json(file);
        let devices = json["devices"].as_object().expect("devices");
        devices.values().flat_map(|combos| combos[large_key].as_array().cloned().unwrap_or_default()).map(|m| m["path"].as_str().unwrap_or("?").to_owned()).collect()
    };
    assert_eq!(on_disk(&file), ["cpu"], "the GPU's figure is gone from the file, the CPU's time on the frame is kept");
    // The next frame goes to the CPU at once, as the model now knows it.
    let known = conv.known(&big).expect("known").expect("a path");
    assert_eq!((known.path, known.reason), (ConvertPath::Cpu, ChoiceReason::Cached), "{known:?}");
    let (again, choice) = conv.convert_frame(&big, None, &input).expect("convert");
    assert!(again == want);
    assert_eq!((choice.path, choice.reason), (ConvertPath::Cpu, ChoiceReason::Cached), "{choice:?}");
    drop(conv);
    common::assert_clean(&engine);
    drop(engine);
    // So does another engine (another process) reading the file.
    let later = self::engine(CostCache::File(file.clone()));
    let known = Converter::new(&later).expect("pipelines").known(&big).expect("known").expect("a path");
    assert_eq!((known.path, known.reason), (ConvertPath::Cpu, ChoiceReason::Cached), "{known:?}");
    common::assert_clean(&later);
}
