//! `dmabridge bench --report DIR` and `--compare OLD.json [NEW.json]`, from the JSON of a real
//! run on this machine (`tests/data/bench-lavapipe.json`, release build, udmabuf emulation):
//! the page parses, its charts carry their titles, units and legends, a run compared with
//! itself changes nothing, a halved detile is flagged, and Chromium renders the page.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bench-lavapipe.json")
}

fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmabridge-bench-report-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn bench(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmabridge")).arg("bench").args(args).output().expect("run dmabridge")
}

fn report(old: &Path, new: &Path, out: &Path) -> (Output, String) {
    let r = bench(&["--compare".as_ref(), old.as_os_str(), new.as_os_str(), "--report".as_ref(), out.as_os_str()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    (r, html)
}

#[test]
fn the_report_parses_and_its_charts_are_labelled() {
    let d = dir("labels");
    let (r, html) = report(&fixture(), &fixture(), &d);
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(&html, options).expect("the page is well-formed XHTML");
    let svgs: Vec<roxmltree::Node> = doc.descendants().filter(|n| n.tag_name().name() == "svg").collect();
    assert_eq!(svgs.len(), 2, "two charts");
    let text = |n: &roxmltree::Node| n.descendants().filter_map(|t| t.text()).collect::<Vec<_>>().join("|");
    let (paths, conversions) = (text(&svgs[0]), text(&svgs[1]));
    for needle in ["Time per frame by path", "megapixels per frame", "µs per frame (log scale)", "zero-copy AR24", "copy-gpu NV12", "10 µs", "1 ms"] {
        assert!(paths.contains(needle), "paths chart lacks {needle:?}: {paths}");
    }
    for needle in ["GB/s (output bytes per second)", "memcpy (baseline)", "samsung-64x32 -> NV12 — dmabridge cpu", "— GStreamer"] {
        assert!(conversions.contains(needle), "conversions chart lacks {needle:?}: {conversions}");
    }
    let page = text(&doc.root_element());
    for needle in ["Goals", "slowest 4K detile ÷ memcpy GB/s", "Change since the old run", "llvmpipe"] {
        assert!(page.contains(needle), "page lacks {needle:?}");
    }
    // The same run against itself: nothing changed, nothing flagged. The table is the
    // command's output, on stdout (`bench --compare A B > f` puts it in f).
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(stdout.contains("+0.0%") && !stdout.contains("SLOWER") && !stdout.contains("FASTER"), "{stdout}");
    assert!(!html.contains("class=\"flag\""));
    assert!(d.join("bench.json").exists());
    // The PNG carries its titles: dark pixels in the strip above the charts, where there is
    // nothing but the caption (without a font that strip is white).
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(d.join("bench.png")).expect("bench.png")));
    let mut reader = decoder.read_info().expect("png");
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("frame");
    let row = info.line_size;
    let dark = (4..30).flat_map(|y| buf[y * row..(y + 1) * row].chunks_exact(3)).filter(|p| p.iter().all(|c| *c < 90)).count();
    assert!(dark > 200, "the plot's caption is missing: {dark} dark pixels");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_halved_detile_is_flagged() {
    let d = dir("halved");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture()).expect("fixture")).expect("json");
    let entry = v["convert"].as_array_mut().expect("convert").iter_mut().find(|c| c["layout"] == "samsung-64x32" && c["to_format"] == "NV12").expect("the samsung detile");
    entry["gbps"] = serde_json::json!(entry["gbps"].as_f64().expect("gbps") / 2.0);
    let doctored = d.join("doctored.json");
    std::fs::write(&doctored, v.to_string()).expect("write");
    let (r, html) = report(&fixture(), &doctored, &d.join("report"));
    let stdout = String::from_utf8_lossy(&r.stdout);
    let line = stdout.lines().find(|l| l.contains("convert NV12 samsung-64x32 -> NV12")).expect("the detile's line");
    assert!(line.contains("-50.0%") && line.contains("SLOWER"), "{line}");
    assert_eq!(stdout.matches("SLOWER").count() + stdout.matches("FASTER").count(), 1, "only the doctored figure moved: {stdout}");
    assert!(html.contains("class=\"flag\""));
    // A file that is not a bench run is refused, not half-read.
    let bad = d.join("bad.json");
    std::fs::write(&bad, "{\"x\": 1}").expect("write");
    let r = bench(&["--compare".as_ref(), bad.as_os_str(), doctored.as_os_str()]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("not a dmabridge bench JSON"));
    let _ = std::fs::remove_dir_all(d);
}

/// Headless Chromium renders the page: a screenshot that is not blank, with the charts'
/// colours in it. Skipped, loudly, where Chromium is not installed (scripts/setup.sh installs it).
#[test]
fn chromium_renders_the_page() {
    let Some(chromium) = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().map(Path::new).find(|p| p.exists()) else {
        eprintln!("SKIPPED: no chromium (scripts/setup.sh installs it)");
        return;
    };
    let d = dir("chromium");
    report(&fixture(), &fixture(), &d);
    let shot = d.join("shot.png");
    let r = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1700"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", d.join("index.html").display()))
        .env("HOME", &d)
        .output()
        .expect("run chromium");
    assert!(shot.exists(), "no screenshot: {}", String::from_utf8_lossy(&r.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).expect("shot")));
    let mut reader = decoder.read_info().expect("png");
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("frame");
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks_exact(px).collect();
    let ink = pixels.iter().filter(|p| p[..3].iter().any(|c| *c < 200)).count();
    assert!(ink * 100 > pixels.len(), "the screenshot is (almost) blank: {ink} of {} pixels", pixels.len());
    // The bars' blue (#2a5ad8) and the zero-copy line's green (#28aa50) are on the page.
    let near = |p: &&[u8], c: [u8; 3]| p[..3].iter().zip(c).all(|(a, b)| (*a as i32 - b as i32).abs() < 12);
    assert!(pixels.iter().any(|p| near(p, [0x2a, 0x5a, 0xd8])), "no blue bars");
    assert!(pixels.iter().any(|p| near(p, [0x28, 0xaa, 0x50])), "no green line");
    let _ = std::fs::remove_dir_all(d);
}
