//! `dmabridgeconvert` in real `gst-launch-1.0` pipelines, with `GST_PLUGIN_PATH` at the build
//! output: every tiled NV12 layout GStreamer 1.22 names, detiled byte for byte as
//! `videoconvert` detiles it; NV12 -> BGRx/RGBx following the caps' colorimetry, equal to
//! dmabridge's reference (within ±1 of the float formula, tested in interop); and how far
//! `videoconvert` itself is from that formula (reported, not copied).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::plugin_dir;

use dmabridge_interop::tiling::colour::yuv_to_rgb_float;
use dmabridge_interop::tiling::{test_pattern as pattern, tile_to_vec, yuv_to_rgb_vec, ColourMatrix, ColourRange};
use dmabridge_interop::{Fourcc, TileLayout};

fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmabridge-gst-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    d
}

/// Runs `filesrc ! rawvideoparse PARSE ! ELEMENT ! CAPS ! filesink` and returns the output.
fn run(input: &Path, parse: &[String], element: &str, caps: &str, out: &Path) -> Vec<u8> {
    let mut args: Vec<String> = vec!["-q".into(), "filesrc".into(), format!("location={}", input.display()), "!".into(), "rawvideoparse".into()];
    args.extend(parse.iter().cloned());
    // gst-launch quotes an argument with spaces: an element and its properties go separately.
    args.push("!".into());
    args.extend(element.split_whitespace().map(String::from));
    args.extend(["!".into(), caps.into(), "!".into(), "filesink".into(), format!("location={}", out.display())]);
    let r = Command::new("gst-launch-1.0").args(&args).env("GST_PLUGIN_PATH", plugin_dir()).output().expect("gst-launch-1.0 (scripts/setup.sh installs it)");
    assert!(r.status.success(), "gst-launch-1.0 {}: {}", args.join(" "), String::from_utf8_lossy(&r.stderr));
    std::fs::read(out).expect("output")
}

#[test]
fn gst_inspect_finds_the_element() {
    let r = Command::new("gst-inspect-1.0").arg("dmabridgeconvert").env("GST_PLUGIN_PATH", plugin_dir()).output().expect("gst-inspect-1.0");
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for needle in ["NV12_4L4", "NV12_64Z32", "NV12_8L128", "BGRx", "path", "matrix"] {
        assert!(text.contains(needle), "gst-inspect lacks {needle}");
    }
}

/// DMA_DRM is in the templates with a 1.24 runtime, or when forced; 1.22's tools never see it
/// otherwise. Each run scans into its own registry, so no cached templates answer.
#[test]
fn dma_drm_templates_follow_the_runtime_version() {
    let version = Command::new("gst-inspect-1.0").arg("--version").output().expect("gst-inspect-1.0");
    let runtime_1_24 = String::from_utf8_lossy(&version.stdout).lines().find_map(|l| l.strip_prefix("GStreamer ")).and_then(|v| {
        let mut it = v.split('.').map(|n| n.trim().parse::<u32>().unwrap_or(0));
        Some((it.next()?, it.next()?) >= (1, 24))
    });
    for forced in [false, true] {
        let registry = std::env::temp_dir().join(format!("dmabridge-gst-registry-{}-{forced}.bin", std::process::id()));
        let mut cmd = Command::new("gst-inspect-1.0");
        cmd.arg("dmabridgeconvert").env("GST_PLUGIN_PATH", plugin_dir()).env("GST_REGISTRY", &registry);
        if forced {
            cmd.env("DMABRIDGE_GST_DMA_DRM", "1");
        } else {
            cmd.env_remove("DMABRIDGE_GST_DMA_DRM");
        }
        let r = cmd.output().expect("gst-inspect-1.0");
        let _ = std::fs::remove_file(&registry);
        let text = String::from_utf8_lossy(&r.stdout);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let expected = forced || runtime_1_24 == Some(true);
        assert_eq!(text.contains("DMA_DRM"), expected, "forced={forced}, runtime 1.24+={runtime_1_24:?}:\n{text}");
        if expected {
            assert!(text.contains("NV12:0x0400000000000001"), "{text}");
        }
    }
}

#[test]
fn every_tiled_layout_detiles_as_videoconvert_does() {
    let d = scratch("detile");
    let (w, h) = (256u32, 128u32);
    let linear = pattern((w * h * 3 / 2) as usize, 9);
    for (layout, name) in [
        (TileLayout::Nv12_4L4, "nv12-4l4"),
        (TileLayout::Allwinner32x32, "nv12-32l32"),
        (TileLayout::Samsung64x32, "nv12-64z32"),
        (TileLayout::Nv12_16L32S, "nv12-16l32s"),
        (TileLayout::Nv12_8L128, "nv12-8l128"),
    ] {
        let tiled = tile_to_vec(layout, Fourcc::NV12, w, h, &linear).expect("tile");
        let input = d.join(format!("{name}.raw"));
        std::fs::write(&input, &tiled).expect("write");
        let parse = vec![format!("format={name}"), format!("width={w}"), format!("height={h}")];
        let ours = run(&input, &parse, "dmabridgeconvert", "video/x-raw,format=NV12", &d.join(format!("{name}.ours")));
        let theirs = run(&input, &parse, "videoconvert", "video/x-raw,format=NV12", &d.join(format!("{name}.theirs")));
        assert!(ours == theirs, "{name}: dmabridgeconvert and videoconvert differ");
        assert!(ours == linear, "{name}: not the frame that was tiled");
        // The path property: the GPU shaders write the same bytes.
        let gpu = run(&input, &parse, "dmabridgeconvert path=gpu", "video/x-raw,format=NV12", &d.join(format!("{name}.gpu")));
        assert!(gpu == linear, "{name}: path=gpu differs");
    }
    // Same caps both sides: passthrough, bytes untouched.
    let input = d.join("linear.raw");
    std::fs::write(&input, &linear).expect("write");
    let same = run(&input, &["format=nv12".into(), format!("width={w}"), format!("height={h}")], "dmabridgeconvert", "video/x-raw,format=NV12", &d.join("same"));
    assert!(same == linear);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn nv12_to_rgb_follows_the_caps_colorimetry() {
    let d = scratch("colour");
    let (w, h) = (128u32, 64u32);
    // Luma varies per pixel; chroma is constant over 16x16-pixel blocks, so that a converter
    // that interpolates chroma (videoconvert does) and one that replicates it (dmabridge)
    // can be compared on the matrix alone, away from the blocks' edges.
    let mut nv12 = pattern((w * h) as usize, 21);
    let blocks = pattern(64, 5);
    for cy in 0..(h / 2) as usize {
        for cx in 0..(w / 2) as usize {
            let b = ((cy / 8) * 8 + cx / 8) % 32;
            nv12.extend_from_slice(&[blocks[2 * b], blocks[2 * b + 1]]);
        }
    }
    let input = d.join("in.nv12");
    std::fs::write(&input, &nv12).expect("write");
    // GStreamer colorimetry: range (1 full, 2 limited) : matrix (3 BT.709, 4 BT.601, 6 BT.2020).
    let cases = [
        ("2:4:0:0", ColourMatrix::Bt601, ColourRange::Limited),
        ("1:4:0:0", ColourMatrix::Bt601, ColourRange::Full),
        ("2:3:0:0", ColourMatrix::Bt709, ColourRange::Limited),
        ("1:3:0:0", ColourMatrix::Bt709, ColourRange::Full),
        ("2:6:0:0", ColourMatrix::Bt2020, ColourRange::Limited),
        ("1:6:0:0", ColourMatrix::Bt2020, ColourRange::Full),
    ];
    let mut report = Vec::new();
    for (colorimetry, m, r) in cases {
        let parse = vec!["format=nv12".into(), format!("width={w}"), format!("height={h}"), format!("colorimetry={colorimetry}")];
        for (gst, fourcc) in [("BGRx", Fourcc::XRGB8888), ("RGBx", Fourcc::XBGR8888)] {
            let caps = format!("video/x-raw,format={gst}");
            let ours = run(&input, &parse, "dmabridgeconvert", &caps, &d.join(format!("{gst}.ours")));
            let want = yuv_to_rgb_vec((Fourcc::NV12, fourcc), (m, r), (w, h), &nv12).expect("reference");
            assert!(ours == want, "{gst} {colorimetry}: not dmabridge's reference");
            // videoconvert against the float formula: reported, not required.
            let theirs = run(&input, &parse, "videoconvert", &caps, &d.join(format!("{gst}.theirs")));
            let (ri, bi) = if fourcc == Fourcc::XRGB8888 { (2, 0) } else { (0, 2) };
            let mut worst = (0i32, 0i32);
            let interior = |v: usize| (3..13).contains(&(v % 16));
            for y in (0..h as usize).filter(|y| interior(*y)) {
                for x in (0..w as usize).filter(|x| interior(*x)) {
                    let c = (w * h) as usize + (y / 2) * w as usize + (x / 2) * 2;
                    let f = yuv_to_rgb_float(m, r, 8, 8, nv12[y * w as usize + x] as i32, nv12[c] as i32, nv12[c + 1] as i32);
                    let o = (y * w as usize + x) * 4;
                    let ours_px = [ours[o + ri], ours[o + 1], ours[o + bi]];
                    let theirs_px = [theirs[o + ri], theirs[o + 1], theirs[o + bi]];
                    for k in 0..3 {
                        worst.0 = worst.0.max((ours_px[k] as i32 - f[k] as i32).abs());
                        worst.1 = worst.1.max((theirs_px[k] as i32 - f[k] as i32).abs());
                    }
                }
            }
            assert!(worst.0 <= 1, "{gst} {colorimetry}: dmabridgeconvert is {} code values off the float formula", worst.0);
            report.push(format!("{gst} {colorimetry}: dmabridgeconvert ±{}, videoconvert ±{}", worst.0, worst.1));
        }
    }
    eprintln!("largest difference from the float BT.601/709/2020 formula (inside uniform-chroma blocks):\n  {}", report.join("\n  "));
    let _ = std::fs::remove_dir_all(d);
}
