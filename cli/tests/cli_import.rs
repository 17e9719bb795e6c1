//! `dmabridge import` is a contract: inherited fds, exact bytes out, exit 1 with a clear
//! message for every layout the checks reject, never a crash.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Output};

fn inheritable(bytes: &[u8]) -> OwnedFd {
    // dmabuf_with sets CLOEXEC; a dup does not carry it, so the child inherits the dup.
    rustix::io::dup(common::dmabuf_with(bytes)).expect("dup")
}

fn import(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .arg("import")
        .args(args)
        .env("DMABRIDGE_VALIDATION", "1")
        .output()
        .expect("run dmabridge")
}

/// A file of this call's own: tests run on parallel threads of one process, and two of them
/// importing the same frame on the same path once wrote each other's output (a flake).
fn out_path(name: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("dmabridge-cli-import-{}-{n}-{name}", std::process::id()))
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

#[test]
fn ar24_with_offset_and_padded_stride() {
    let (w, h, offset, stride) = (20usize, 10usize, 512usize, 20 * 4 + 48);
    let packed = common::pattern(w * h * 4, 30);
    let mut file = vec![0x55u8; offset + stride * h];
    common::place_rows(&mut file, &packed, w * 4, h, offset, stride);
    let fd = inheritable(&file);
    let out = out_path("ar24");
    let r = import(&[
        s("--format"), s("AR24"), s("--width"), s(w), s("--height"), s(h), s("--modifier"), s("0x0000000000000000"),
        s("--plane"), format!("{}:{offset}:{stride}", fd.as_raw_fd()), s("--out"), s(out.display()),
    ]);
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}\n{}", stdout, String::from_utf8_lossy(&r.stderr));
    let expected_path = if common::expect_modifiers() { "path: explicit" } else { "path: buffer-copy" };
    assert!(stdout.contains(expected_path), "{stdout}");
    assert_eq!(std::fs::read(&out).expect("output"), packed);
    let _ = std::fs::remove_file(out);
}

#[test]
fn nv12_two_fds_and_a_short_fourcc() {
    let (w, h) = (32usize, 16usize);
    let y = common::pattern(w * h, 31);
    let uv = common::pattern(w * h / 2, 32);
    let (fy, fuv) = (inheritable(&y), inheritable(&uv));
    let out = out_path("nv12");
    let r = import(&[
        s("--format"), s("NV12"), s("--width"), s(w), s("--height"), s(h),
        s("--plane"), format!("{}:0:{w}", fy.as_raw_fd()), s("--plane"), format!("{}:0:{w}", fuv.as_raw_fd()),
        s("--out"), s(out.display()),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let mut expected = y.clone();
    expected.extend_from_slice(&uv);
    assert_eq!(std::fs::read(&out).expect("output"), expected);
    let _ = std::fs::remove_file(out);

    // R8 without its trailing spaces.
    let r8 = inheritable(&common::pattern(64, 33));
    let out = out_path("r8");
    let r = import(&[s("--format"), s("R8"), s("--width"), s(8), s("--height"), s(8), s("--plane"),
        format!("{}:0:8", r8.as_raw_fd()), s("--out"), s(out.display())]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&out).expect("output").len(), 64);
    let _ = std::fs::remove_file(out);
}

#[test]
fn rejected_layouts_exit_1_with_a_message() {
    let page = inheritable(&[0u8; 4096]);
    let fd = page.as_raw_fd();
    let out = s(out_path("never").display());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![s("--format"), s("AR24"), s("--width"), s(64), s("--height"), s(64), s("--plane"), format!("{fd}:0:256")], "past the end"),
        (vec![s("--format"), s("AR24"), s("--width"), s(64), s("--height"), s(4), s("--plane"), format!("{fd}:0:100")], "stride"),
        (vec![s("--format"), s("AR24"), s("--width"), s(4), s("--height"), s(4), s("--plane"), format!("{fd}:0:18446744073709551615")], "overflow"),
        (vec![s("--format"), s("ZZZZ"), s("--width"), s(4), s("--height"), s(4), s("--plane"), format!("{fd}:0:16")], "ZZZZ"),
        (vec![s("--format"), s("TOOLONG"), s("--width"), s(4), s("--height"), s(4), s("--plane"), format!("{fd}:0:16")], "--format"),
        (vec![s("--format"), s("AR24"), s("--width"), s(4), s("--height"), s(4), s("--modifier"), s("0x12"), s("--plane"), format!("{fd}:0:16")], "--modifier"),
        (vec![s("--format"), s("AR24"), s("--width"), s(4), s("--height"), s(4), s("--modifier"), s("0x0100000000000003"), s("--plane"), format!("{fd}:0:16")], "not a tiled layout"),
        (vec![s("--format"), s("AR24"), s("--width"), s(4), s("--height"), s(4), s("--plane"), s("999:0:16")], "not open"),
        (vec![s("--format"), s("AR24"), s("--width"), s(4), s("--height"), s(4), s("--plane"), format!("{fd}:0")], "FD:OFFSET:STRIDE"),
        (vec![s("--format"), s("NV12"), s("--width"), s(4), s("--height"), s(4), s("--plane"), format!("{fd}:0:4")], "plane"),
        (vec![s("--format"), s("AR24"), s("--width"), s(0), s("--height"), s(4), s("--plane"), format!("{fd}:0:16")], "0x4"),
    ];
    for (mut args, needle) in cases {
        args.extend([s("--out"), out.clone()]);
        let r = import(&args);
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: expected {needle:?} in {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn the_image_is_created_for_the_use_asked_for() {
    let (w, h) = (24usize, 8usize);
    let packed = common::pattern(w * h * 4, 33);
    let fd = inheritable(&packed);
    let out = out_path("srgb");
    let frame = |extra: &[&str]| {
        let mut args = vec![
            s("--format"), s("AB24"), s("--width"), s(w), s("--height"), s(h),
            s("--plane"), format!("{}:0:{}", fd.as_raw_fd(), w * 4), s("--out"), s(out.display()),
        ];
        args.extend(extra.iter().map(s));
        args
    };
    let r = import(&frame(&["--usage", "sampled+color-attachment", "--create-flags", "mutable-format", "--srgb-view"]));
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&r.stderr));
    // TRANSFER_SRC is the read-back's; the copy path's image is written with TRANSFER_DST.
    let dst = if common::expect_modifiers() { "" } else { "+transfer-dst" };
    assert!(stdout.contains(&format!("use: sampled+color-attachment+transfer-src{dst}:create=mutable-format:srgb-view")), "{stdout}");
    assert_eq!(std::fs::read(&out).expect("output"), packed);
    for (bad, needle) in [(&["--usage", "sampled+teleport"][..], "teleport"), (&["--create-flags", "compressed"][..], "compressed")] {
        let r = import(&frame(bad));
        assert_eq!(r.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&r.stderr).contains(needle), "{}", String::from_utf8_lossy(&r.stderr));
    }
    let _ = std::fs::remove_file(out);
}

#[test]
fn drm_format_names_the_format_and_the_modifier() {
    let (w, h) = (16usize, 4usize);
    let packed = common::pattern(w * h * 4, 77);
    let fd = inheritable(&packed);
    let out = out_path("drm-format");
    let plane = format!("{}:0:{}", fd.as_raw_fd(), w * 4);
    let r = import(&[s("--drm-format"), s("AR24"), s("--width"), s(w), s("--height"), s(h), s("--plane"), plane.clone(), s("--out"), s(out.display())]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&out).expect("output"), packed);
    let r = import(&[s("--drm-format"), s("AR24"), s("--modifier"), s("0x0000000000000000"), s("--width"), s(w), s("--height"), s(h), s("--plane"), plane, s("--out"), s(out.display())]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("not both"));
    let _ = std::fs::remove_file(out);
}

/// A Samsung-tiled NV12 frame (no driver samples it, so `import` detiles it): the linear
/// frame, the tiled bytes, and the `--plane` offsets and strides of its two planes.
fn samsung_nv12(seed: u32) -> (Vec<u8>, Vec<u8>, [(u64, u64); 2]) {
    use dmabridge::interop::tiling::{self, packed_planes, tiled_size};
    use dmabridge::interop::{Fourcc, TileLayout};
    let (w, h) = SAMSUNG_EXTENT;
    let len = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).expect("g").size as usize;
    let linear = common::pattern(len, seed);
    let g = tiled_size(TileLayout::Samsung64x32, Fourcc::NV12, w, h).expect("g");
    let mut tiled = vec![0u8; g.size as usize];
    tiling::tile(tiling::TiledFrame { layout: TileLayout::Samsung64x32, fourcc: Fourcc::NV12, extent: (w, h) }, (&linear, &packed_planes(Fourcc::NV12, w, h).expect("p")), &mut tiled)
        .expect("tile");
    let planes = [0, 1].map(|i| (g.planes[i].offset, u64::from(g.planes[i].padded_width_bytes)));
    (linear, tiled, planes)
}

const SAMSUNG_EXTENT: (u32, u32) = (130, 66);

/// `dmabridge import` of the Samsung frame in `fd`, with `extra` arguments, on the
/// conversion path `path` names (`DMABRIDGE_CONVERT_PATH`): its stdout, after checking
/// that it succeeded and wrote `linear`.
fn import_samsung(fd: &OwnedFd, planes: [(u64, u64); 2], linear: &[u8], path: &str, extra: &[&str]) -> String {
    let out = out_path(&format!("samsung-{path}-{}", extra.join("")));
    let (w, h) = SAMSUNG_EXTENT;
    let mut args = vec![s("--format"), s("NV12"), s("--width"), s(w), s("--height"), s(h), s("--modifier"), s("0x0400000000000001")];
    for (offset, stride) in planes {
        args.extend([s("--plane"), format!("{}:{offset}:{stride}", fd.as_raw_fd())]);
    }
    args.extend([s("--out"), s(out.display())]);
    args.extend(extra.iter().map(s));
    let r = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .arg("import")
        .args(&args)
        .env("DMABRIDGE_VALIDATION", "1")
        .env("DMABRIDGE_CONVERT_PATH", path)
        .output()
        .expect("run dmabridge");
    let stdout = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(r.status.success(), "{path} {extra:?}: {stdout}\n{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::read(&out).expect("output") == linear, "{path} {extra:?}: wrong bytes");
    let _ = std::fs::remove_file(out);
    stdout
}

/// The detile says where it ran: the CPU when the CPU ran it, the GPU when the GPU did.
#[test]
fn a_tiled_modifier_is_detiled_and_the_path_that_ran_is_reported() {
    let (linear, tiled, planes) = samsung_nv12(50);
    let fd = inheritable(&tiled);
    let stdout = import_samsung(&fd, planes, &linear, "cpu", &[]);
    assert!(stdout.contains("path: detile samsung-64x32 on the CPU, its planes mapped read-only"), "{stdout}");
    assert!(!stdout.contains("GPU"), "{stdout}");
    let stdout = import_samsung(&fd, planes, &linear, "gpu", &[]);
    assert!(stdout.contains("path: detile samsung-64x32 on the GPU, its planes imported in place"), "{stdout}");
    assert!(!stdout.contains("CPU"), "{stdout}");
}

/// `--trust-files` reaches the detile: an unsealed memfd is read into dmabridge's memory
/// without it and imported in place with it (on the CPU: read with pread, or mapped).
#[test]
fn trust_files_decides_whether_the_detile_reads_an_unsealed_file() {
    let (linear, tiled, planes) = samsung_nv12(51);
    let fd = rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::empty()).expect("memfd");
    rustix::io::pwrite(&fd, &tiled, 0).expect("fill");
    for (path, read, in_place) in [("gpu", "read into dmabridge's memory first", "imported in place"), ("cpu", "read with pread", "mapped read-only")] {
        let stdout = import_samsung(&fd, planes, &linear, path, &[]);
        assert!(stdout.contains(read), "{path}, untrusted: {stdout}");
        let stdout = import_samsung(&fd, planes, &linear, path, &["--trust-files"]);
        assert!(stdout.contains(in_place), "{path}, --trust-files: {stdout}");
    }
}

/// The README's read-only share (a sealed memfd re-opened `O_RDONLY`) detiled on the GPU:
/// read, not handed to lavapipe, which would refuse it (`ERROR_INVALID_EXTERNAL_HANDLE`).
#[test]
fn a_read_only_share_is_detiled_on_the_gpu() {
    let (linear, tiled, planes) = samsung_nv12(52);
    let sealed = common::memfd_with(&tiled);
    // Without O_CLOEXEC, so that the child inherits it.
    let path = format!("/proc/self/fd/{}", sealed.as_raw_fd());
    let fd = rustix::fs::open(path.as_str(), rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()).expect("re-open read-only");
    let stdout = import_samsung(&fd, planes, &linear, "gpu", &[]);
    assert!(stdout.contains("path: detile samsung-64x32 on the GPU, its planes read into dmabridge's memory first"), "{stdout}");
    let stdout = import_samsung(&fd, planes, &linear, "cpu", &[]);
    assert!(stdout.contains("path: detile samsung-64x32 on the CPU, its planes mapped read-only"), "{stdout}");
}

#[test]
fn files_that_can_shrink_are_read_not_mapped_and_zero_copy_can_be_required() {
    let (w, h) = (16usize, 8usize);
    let packed = common::pattern(w * h * 4, 41);
    // A memfd nobody sealed: its sender could truncate it under a mapping.
    let fd = rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::empty()).expect("memfd");
    rustix::io::pwrite(&fd, &packed, 0).expect("fill");
    let plane = format!("{}:0:{}", fd.as_raw_fd(), w * 4);
    let out = out_path("unsealed");
    let base = [s("--format"), s("AR24"), s("--width"), s(w), s("--height"), s(h), s("--plane"), plane, s("--out"), s(out.display())];
    let r = import(&base);
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(stdout.contains("path: read-copy"), "{stdout}");
    assert_eq!(std::fs::read(&out).expect("output"), packed);
    let mut strict = base.to_vec();
    strict.push(s("--require-zero-copy"));
    let r = import(&strict);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{stderr}");
    let why = if common::expect_modifiers() { "F_SEAL_SHRINK" } else { "VK_EXT_image_drm_format_modifier" };
    assert!(stderr.contains(why), "{stderr}");
    let _ = std::fs::remove_file(out);
}

#[test]
fn a_directory_fd_is_refused_before_anything_else() {
    let dir: OwnedFd = std::fs::File::open("/tmp").expect("a directory").into();
    let dir = rustix::io::dup(dir).expect("an inheritable dup");
    let out = out_path("dir");
    let r = import(&[
        s("--format"), s("AR24"), s("--width"), s(4), s("--height"), s(4),
        s("--plane"), format!("{}:0:16", dir.as_raw_fd()), s("--out"), s(out.display()),
    ]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("directory, not a dma-buf or a regular file"), "{stderr}");
    assert!(!stderr.contains("validation"), "{stderr}");
}
