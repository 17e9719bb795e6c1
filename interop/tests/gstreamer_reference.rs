//! Cross-check of the CPU tiling reference against GStreamer's own detiling, for the NV12
//! layouts GStreamer knows: random NV12 is tiled by [`tile`], GStreamer 1.22's
//! `rawvideoparse ! videoconvert` turns it back into linear NV12, and the result must equal
//! the original. `scripts/setup.sh` installs gst-launch-1.0 (gstreamer1.0-tools and
//! gstreamer1.0-plugins-base); without it the test is skipped with a message, except in CI
//! (`CI` set), where a missing GStreamer is a failure.

use std::path::PathBuf;
use std::process::Command;

use dmabridge_interop::tiling::{packed_planes, tile, tiled_size, TiledFrame};
use dmabridge_interop::{Fourcc, TileLayout};

const GST: &str = "gst-launch-1.0";

/// dmabridge layout, and GStreamer's rawvideoparse `format` nick for it.
const LAYOUTS: [(TileLayout, &str); 5] = [
    (TileLayout::Samsung64x32, "nv12-64z32"),
    (TileLayout::Allwinner32x32, "nv12-32l32"),
    (TileLayout::Nv12_4L4, "nv12-4l4"),
    (TileLayout::Nv12_16L32S, "nv12-16l32s"),
    (TileLayout::Nv12_8L128, "nv12-8l128"),
];

fn gstreamer_present() -> bool {
    let found = Command::new(GST).arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{GST} is missing in CI: scripts/setup.sh installs gstreamer1.0-tools and gstreamer1.0-plugins-base"
        );
        eprintln!("skipping: {GST} not found (run scripts/setup.sh)");
    }
    found
}

/// This test's own scratch directory (removed at the end; nothing else is touched).
fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("dmabridge-gst-{}", std::process::id()))
}

fn scratch(name: &str) -> PathBuf {
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Linear NV12 as GStreamer lays it out by default: rows padded to 4 bytes, the UV plane
/// after RU2(height) rows.
fn from_gstreamer_nv12(data: &[u8], w: u32, h: u32) -> Vec<u8> {
    let (w, h) = (w as usize, h as usize);
    let stride = w.div_ceil(4) * 4;
    let uv_offset = stride * h.div_ceil(2) * 2;
    let uv_bytes = w.div_ceil(2) * 2;
    let mut out = Vec::with_capacity(w * h + uv_bytes * h.div_ceil(2));
    for y in 0..h {
        out.extend_from_slice(&data[y * stride..y * stride + w]);
    }
    for y in 0..h.div_ceil(2) {
        let row = uv_offset + y * stride;
        out.extend_from_slice(&data[row..row + uv_bytes]);
    }
    out
}

#[test]
fn gstreamer_detiles_our_tiled_nv12_to_the_original() {
    if !gstreamer_present() {
        return;
    }
    let mut seed = 0u32;
    let mut random = |n: usize| -> Vec<u8> {
        seed += 1;
        dmabridge_interop::tiling::test_pattern(n, seed)
    };
    let mut checked = Vec::new();
    for (layout, nick) in LAYOUTS {
        for (w, h) in [(256u32, 128u32), (130, 66), (64, 32), (300, 260)] {
            let planes = packed_planes(Fourcc::NV12, w, h).unwrap();
            let g = tiled_size(layout, Fourcc::NV12, w, h).unwrap();
            let linear = random((w * h) as usize + (w.div_ceil(2) * 2 * h.div_ceil(2)) as usize);
            let mut tiled = vec![0u8; g.size as usize];
            tile(TiledFrame { layout, fourcc: Fourcc::NV12, extent: (w, h) }, (&linear, &planes), &mut tiled).unwrap();

            let input = scratch(&format!("{nick}-{w}x{h}.in"));
            let output = scratch(&format!("{nick}-{w}x{h}.out"));
            std::fs::write(&input, &tiled).unwrap();
            // chroma-mode/matrix-mode/dither none: a pure repack, no resampling or rounding.
            let status = Command::new(GST)
                .arg("-q")
                .args(["filesrc", &format!("location={}", input.display()), "!"])
                .args(["rawvideoparse", &format!("format={nick}"), &format!("width={w}"), &format!("height={h}"), "!"])
                .args(["videoconvert", "chroma-mode=none", "matrix-mode=none", "dither=none", "!"])
                .args(["video/x-raw,format=NV12", "!", "filesink", &format!("location={}", output.display())])
                .status()
                .unwrap();
            assert!(status.success(), "{GST} failed for {nick} {w}x{h}");
            let got = std::fs::read(&output).unwrap();
            let got = from_gstreamer_nv12(&got, w, h);
            let (luma, _) = linear.split_at((w * h) as usize);
            assert_eq!(&got[..luma.len()], luma, "{layout} ({nick}) {w}x{h}: Y plane differs from GStreamer");
            assert_eq!(got, linear, "{layout} ({nick}) {w}x{h}: UV plane differs from GStreamer");
            checked.push(format!("{nick} {w}x{h}"));
        }
    }
    std::fs::remove_dir_all(scratch_dir()).unwrap();
    eprintln!("matched GStreamer: {}", checked.join(", "));
}
