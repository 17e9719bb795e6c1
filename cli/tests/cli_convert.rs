//! `dmabridge convert` is a contract: layout names or hex modifiers, GPU by default, the
//! CPU reference with --cpu, identical bytes either way, exit 1 on bad input.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

/// A scratch directory of this test alone (tests run in parallel threads).
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmabridge-cli-convert-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// The cost model's disk cache of this test process (never the user's).
fn cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("dmabridge-cli-convert-{}-cache", std::process::id()))
}

fn convert(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .arg("convert")
        .args(args)
        .env("DMABRIDGE_VALIDATION", "1")
        .env("XDG_CACHE_HOME", cache_dir())
        .output()
        .expect("run dmabridge")
}

fn ok(r: &Output) -> String {
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    String::from_utf8_lossy(&r.stdout).into_owned()
}

#[test]
fn gpu_and_cpu_agree_and_round_trip() {
    let d = dir("round-trip");
    let (w, h) = (130u32, 66u32);
    let linear = common::pattern((w * h + w * h.div_ceil(2)) as usize, 5);
    let input = d.join("in.nv12");
    std::fs::write(&input, &linear).expect("write");
    let (gpu, cpu, back) = (d.join("gpu.tiled"), d.join("cpu.tiled"), d.join("back.nv12"));
    let size = [s(w), s(h)];
    let common_args = |from: &str, to: &str, i: &PathBuf, o: &PathBuf| {
        vec![s("--format"), s("NV12"), s("--width"), size[0].clone(), s("--height"), size[1].clone(), s("--from"), s(from), s("--to"), s(to), s("--in"), s(i.display()), s("--out"), s(o.display())]
    };
    let run = |args: Vec<String>| convert(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let mut gpu_args = common_args("linear", "samsung-64x32", &input, &gpu);
    gpu_args.extend([s("--path"), s("gpu")]);
    assert!(ok(&run(gpu_args)).contains("(gpu; tile linear -> samsung-64x32)"));
    let mut cpu_args = common_args("linear", "samsung-64x32", &input, &cpu);
    cpu_args.push(s("--cpu"));
    assert!(ok(&run(cpu_args)).contains("(cpu; tile linear -> samsung-64x32)"));
    assert_eq!(std::fs::read(&gpu).expect("gpu"), std::fs::read(&cpu).expect("cpu"));
    // A hex modifier names the same layout (DRM_FORMAT_MOD_SAMSUNG_64_32_TILE).
    ok(&run(common_args("0x0400000000000001", "linear", &gpu, &back)));
    assert_eq!(std::fs::read(&back).expect("back"), linear);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn colour_conversion_gpu_equals_cpu() {
    let d = dir("colour");
    let (w, h) = (64u32, 32u32);
    let nv12 = common::pattern((w * h * 3 / 2) as usize, 6);
    let input = d.join("in2.nv12");
    std::fs::write(&input, &nv12).expect("write");
    let (gpu, cpu) = (d.join("gpu.rgba"), d.join("cpu.rgba"));
    for (out, extra) in [(&gpu, None), (&cpu, Some("--cpu"))] {
        let mut args = vec!["--format", "NV12", "--width", "64", "--height", "32", "--from", "linear", "--to", "linear",
            "--to-format", "AB24", "--matrix", "bt601", "--range", "full"];
        let (i, o) = (s(input.display()), s(out.display()));
        args.extend(["--in", i.as_str(), "--out", o.as_str()]);
        args.extend(extra);
        ok(&convert(&args));
    }
    let g = std::fs::read(&gpu).expect("gpu");
    assert_eq!(g.len(), (w * h * 4) as usize);
    assert_eq!(g, std::fs::read(&cpu).expect("cpu"));
    let _ = std::fs::remove_dir_all(d);
}

/// Issue #13's contract: tiled NV12 straight to each RGB format a display scans out, on
/// the CPU and on the GPU, equals the CPU reference byte for byte; `--explain` and `--json`
/// say which path ran and why.
#[test]
fn tiled_nv12_to_every_rgb_format_on_every_path() {
    use dmabridge::interop::tiling::{detile_to_vec, tile_to_vec, yuv_to_rgb_vec, ColourMatrix, ColourRange, RGB10_FORMATS, RGB8_FORMATS};
    use dmabridge::interop::{Fourcc, TileLayout};
    let d = dir("rgb");
    let (w, h) = (96u32, 40u32);
    let linear = common::pattern((w * h * 3 / 2) as usize, 8);
    let tiled = tile_to_vec(TileLayout::Nv12_4L4, Fourcc::NV12, w, h, &linear).expect("tile");
    assert_eq!(detile_to_vec(TileLayout::Nv12_4L4, Fourcc::NV12, w, h, &tiled).expect("detile"), linear);
    let input = d.join("in.4l4");
    std::fs::write(&input, &tiled).expect("write");
    let (i, ws, hs) = (s(input.display()), s(w), s(h));
    for to in RGB8_FORMATS.into_iter().chain(RGB10_FORMATS) {
        for (matrix, m, range, r) in [(ColourMatrix::Bt709, "bt709", ColourRange::Limited, "limited"), (ColourMatrix::Bt2020, "bt2020", ColourRange::Full, "full")] {
            let want = yuv_to_rgb_vec((Fourcc::NV12, to), (matrix, range), (w, h), &linear).expect("reference");
            let to_name = to.trimmed().to_owned();
            for path in ["cpu", "gpu"] {
                let out = d.join(format!("{to_name}-{m}-{path}"));
                let o = s(out.display());
                let args = ["--format", "NV12", "--width", &ws, "--height", &hs, "--from", "nv12-4l4", "--to", "linear", "--to-format", &to_name,
                    "--matrix", m, "--range", r, "--path", path, "--explain", "--in", &i, "--out", &o];
                let stdout = ok(&convert(&args));
                assert!(stdout.contains(&format!("({path}; detile+yuv->rgb nv12-4l4 NV12 -> {to_name} (fused))")), "{stdout}");
                assert!(stdout.contains(&format!("path {path} (forced")), "{stdout}");
                assert!(std::fs::read(&out).expect("out") == want, "{to_name} {m} {r} on {path}");
            }
        }
    }
    // Auto: the cost model measures every candidate once, says so, then answers from its
    // disk cache in the next process.
    let o = s(d.join("auto").display());
    let args = ["--format", "NV12", "--width", &ws, "--height", &hs, "--from", "nv12-4l4", "--to", "linear", "--to-format", "XR24", "--json", "--in", &i, "--out", &o];
    let first: serde_json::Value = serde_json::from_str(&ok(&convert(&args))).expect("json");
    assert_eq!(first["steps"], serde_json::json!(["detile+yuv->rgb nv12-4l4 NV12 -> XR24 (fused)"]));
    let candidates = first["choice"]["candidates"].as_array().expect("candidates");
    assert!(candidates.len() >= 2 && candidates.iter().all(|c| c["gbps"].as_f64().is_some_and(|g| g > 0.0)), "{first}");
    let second: serde_json::Value = serde_json::from_str(&ok(&convert(&args))).expect("json");
    assert_eq!(second["choice"]["reason"], "cached", "{second}");
    assert_eq!(second["path"], first["path"]);
    let _ = std::fs::remove_dir_all(d);
}

/// `--drm-format FOURCC:0xMODIFIER` names the format and the input layout in one, as
/// GStreamer's drm-format spells them.
#[test]
fn drm_format_names_the_format_and_the_layout() {
    let d = dir("drm-format");
    let (w, h) = (130u32, 66u32);
    let linear = common::pattern((w * h + w * h.div_ceil(2)) as usize, 12);
    let tiled = dmabridge::interop::tiling::tile_to_vec(dmabridge::interop::TileLayout::Samsung64x32, dmabridge::interop::Fourcc::NV12, w, h, &linear).expect("tile");
    let input = d.join("in.tiled");
    std::fs::write(&input, &tiled).expect("write");
    let (i, o, ws, hs) = (s(input.display()), s(d.join("out").display()), s(w), s(h));
    ok(&convert(&["--drm-format", "NV12:0x0400000000000001", "--width", &ws, "--height", &hs, "--to", "linear", "--cpu", "--in", &i, "--out", &o]));
    assert_eq!(std::fs::read(d.join("out")).expect("out"), linear);
    for (args, needle) in [
        (&["--drm-format", "NV12:0x0400000000000001", "--from", "linear"][..], "not both"),
        (&["--drm-format", "NV12:0x0000000000000000"][..], "LINEAR"),
        (&["--drm-format", "NV12:0x0100000000000003"][..], "not a layout dmabridge converts"),
    ] {
        let mut a = args.to_vec();
        a.extend(["--width", &ws, "--height", &hs, "--to", "linear", "--cpu", "--in", &i, "--out", &o]);
        let r = convert(&a);
        assert_eq!(r.status.code(), Some(1), "{a:?}");
        assert!(String::from_utf8_lossy(&r.stderr).contains(needle), "{a:?}: {}", String::from_utf8_lossy(&r.stderr));
    }
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn bad_input_exits_1() {
    let d = dir("bad-input");
    let input = d.join("small");
    std::fs::write(&input, [0u8; 10]).expect("write");
    let i = s(input.display());
    let o = s(d.join("x").display());
    let sized = |n: usize| {
        let p = d.join(format!("in-{n}"));
        std::fs::write(&p, vec![0u8; n]).expect("write");
        s(p.display())
    };
    let four_by_four = sized(64);
    let cases: [(&[&str], &str, &str); 6] = [
        (&["--format", "NV12", "--width", "64", "--height", "32", "--from", "zigzag", "--to", "linear"], "unknown layout", &i),
        (&["--format", "NV12", "--width", "64", "--height", "32", "--from", "samsung-64x32", "--to", "linear"], "holds 10 bytes, but the frame described is", &i),
        (&["--format", "P010", "--width", "64", "--height", "32", "--from", "linear", "--to", "nv12-4l4"], "not defined for", &i),
        (&["--format", "AR24", "--width", "4", "--height", "4", "--from", "linear", "--to", "linear", "--to-format", "P010"], "no conversion from AR24", &four_by_four),
        (&["--format", "NV12", "--width", "64", "--height", "32", "--from", "linear", "--to", "linear", "--matrix", "bt2021"], "--matrix", &i),
        // linear -> linear once took an input of any size.
        (&["--format", "AR24", "--width", "2", "--height", "2", "--from", "linear", "--to", "linear"], "holds more than the 16 bytes", &four_by_four),
    ];
    for (args, needle, input) in cases {
        let mut a = args.to_vec();
        a.extend(["--in", input, "--out", o.as_str()]);
        let r = convert(&a);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{a:?}: {err}");
        assert!(err.contains(needle), "{a:?}: expected {needle:?} in {err}");
    }
    let _ = std::fs::remove_dir_all(d);
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// `dmabridge convert` in a child limited to 256 MiB of address space.
fn convert_bounded(args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dmabridge"));
    cmd.arg("convert").args(args);
    // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = rustix::process::Rlimit { current: Some(256 << 20), maximum: Some(256 << 20) };
            rustix::process::setrlimit(rustix::process::Resource::As, limit).map_err(std::io::Error::from)
        });
    }
    cmd.output().expect("run dmabridge")
}

#[test]
fn huge_frames_and_endless_inputs_exit_1_in_bounded_memory() {
    let d = dir("bounded");
    let o = s(d.join("out").display());
    let small = d.join("small");
    std::fs::write(&small, [0u8; 64]).expect("write");
    let small = s(small.display());
    // A file longer than the frame (sparse: it costs no disk) is read up to the frame's size
    // and one byte more.
    let long = d.join("long");
    std::fs::File::create(&long).and_then(|f| f.set_len(1 << 30)).expect("a sparse file");
    let long = s(long.display());
    let cases: [(&[&str], &str); 5] = [
        // 200000 x 200000 RGBA once allocated 160 GB before looking at the input.
        (&["--format", "AB24", "--width", "200000", "--height", "200000", "--from", "linear", "--to", "linear", "--cpu", "--in", &small], "more than the"),
        (&["--format", "NV12", "--width", "200000", "--height", "200000", "--from", "linear", "--to", "linear", "--to-format", "AB24", "--cpu", "--in", &small], "more than the"),
        (&["--format", "AB24", "--width", "64", "--height", "64", "--from", "linear", "--to", "linear", "--cpu", "--in", &long], "holds more than the 16384 bytes"),
        (&["--format", "NV12", "--width", "3840", "--height", "2160", "--from", "samsung-64x32", "--to", "linear", "--cpu", "--in", &long], "holds more than the"),
        // An endless input is not a regular file: refused before a byte is read.
        (&["--format", "AB24", "--width", "64", "--height", "64", "--from", "linear", "--to", "linear", "--cpu", "--in", "/dev/zero"], "/dev/zero is a character device, not a regular file"),
    ];
    for (args, needle) in cases {
        let mut a = args.to_vec();
        a.extend(["--out", o.as_str()]);
        let r = convert_bounded(&a);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{a:?}: {err}");
        assert!(err.contains(needle), "{a:?}: expected {needle:?} in {err}");
    }
    let _ = std::fs::remove_dir_all(d);
}

/// `convert` reports the path that ran: a cost cache that names the GPU for NV12 -> XR24
/// frames of the large class, and a 8192x4100 frame whose 134 MB of XR24 the compute path
/// cannot bind on this device (lavapipe's maxStorageBufferRange is 128 MiB). The CPU
/// converts it, and the report says so and why, in both forms; the cache no longer names
/// the GPU.
#[test]
fn a_cached_path_that_fails_is_dropped_and_the_report_names_the_cpu() {
    let d = dir("fell-back");
    let cache = d.join("cost.json");
    let run = |args: Vec<String>| {
        Command::new(env!("CARGO_BIN_EXE_dmabridge"))
            .arg("convert")
            .args(args)
            .env("DMABRIDGE_VALIDATION", "1")
            .env("DMABRIDGE_COST_CACHE", &cache)
            .output()
            .expect("run dmabridge")
    };
    let frame = |w: u32, h: u32, name: &str| {
        let input = d.join(format!("{name}.nv12"));
        let bytes = common::pattern((w * h + w * h.div_ceil(2)) as usize, 13);
        std::fs::write(&input, &bytes).expect("write");
        (input, d.join(format!("{name}.xr24")))
    };
    let args = |w: u32, h: u32, input: &PathBuf, output: &PathBuf, extra: &[&str]| -> Vec<String> {
        let mut a = vec![s("--format"), s("NV12"), s("--from"), s("linear"), s("--to"), s("linear"), s("--to-format"), s("XR24"), s("--width"), s(w), s("--height"), s(h)];
        a.extend([s("--in"), s(input.display()), s("--out"), s(output.display())]);
        a.extend(extra.iter().map(s));
        a
    };
    // A small frame writes the device's figures into the cache...
    let (small_in, small_out) = frame(320, 180, "small");
    ok(&run(args(320, 180, &small_in, &small_out, &[])));
    // ...and a forged figure makes the GPU the fastest for large frames.
    let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&cache).expect("the cache")).expect("JSON");
    let key = "NV12 linear -> XR24 linear large";
    for combos in json["devices"].as_object_mut().expect("devices").values_mut() {
        combos.as_object_mut().expect("combinations").insert(key.into(), serde_json::json!([{ "path": "gpu", "gbps": 1000.0 }]));
    }
    std::fs::write(&cache, serde_json::to_vec(&json).expect("json")).expect("write");
    let (w, h) = (8192u32, 4100u32);
    let (big_in, big_out) = frame(w, h, "big");
    let cpu_out = d.join("cpu.xr24");
    ok(&run(args(w, h, &big_in, &cpu_out, &["--cpu"])));
    let report: serde_json::Value = serde_json::from_str(ok(&run(args(w, h, &big_in, &big_out, &["--json"]))).trim()).expect("JSON report");
    assert_eq!(report["path"], "cpu", "{report}");
    assert_eq!(report["choice"]["reason"], serde_json::json!({ "fell-back": { "failed": "gpu" } }), "{report}");
    assert!(std::fs::read(&big_out).expect("out") == std::fs::read(&cpu_out).expect("cpu"), "the fallback's bytes differ from --cpu's");
    let paths: Vec<serde_json::Value> = serde_json::from_slice::<serde_json::Value>(&std::fs::read(&cache).expect("the cache")).expect("JSON")["devices"]
        .as_object()
        .expect("devices")
        .values()
        .flat_map(|c| c[key].as_array().cloned().unwrap_or_default())
        .map(|m| m["path"].clone())
        .collect();
    assert_eq!(paths, [serde_json::json!("cpu")], "the GPU's figure is dropped from the cache file");
    // The next run chooses the CPU from the cache, and says so.
    let stdout = ok(&run(args(w, h, &big_in, &big_out, &["--explain"])));
    assert!(stdout.contains("(cpu; yuv->rgb") && stdout.contains("as measured before"), "{stdout}");
    let _ = std::fs::remove_dir_all(d);
}
