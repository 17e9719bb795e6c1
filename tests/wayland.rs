//! The Wayland sink against a real compositor: the headless Weston that
//! `scripts/services/weston.sh` starts (GL renderer on llvmpipe, `--debug` for
//! `weston_capture_v1`, kiosk shell so that windows are never animated). Pixels are checked
//! in Weston's own screenshot (`weston-screenshooter`, decoded with `png`).
//!
//! Without that Weston (`DMABRIDGE_TEST_WAYLAND_DISPLAY` / `DMABRIDGE_TEST_XDG_RUNTIME_DIR`
//! unset) the tests fail under CI (`CI` set) and skip with a message otherwise.
//!
//! The tests share one compositor and look at its one output, and count the process's fds,
//! so they run one at a time.
#![cfg(feature = "wayland")]

mod common;

use std::path::PathBuf;
use std::sync::Mutex;

use dmabridge::interop::dmabuf::fd_count;
use dmabridge::interop::negotiate::{ChainLayout, ConstraintKind, Participant, Usage};
use dmabridge::interop::{Format, FormatSet, Fourcc, Layout, Modifier};
use dmabridge::wayland::formats::compositor_participant;
use dmabridge::wayland::frames::{bar_at, colour_bars, BARS};
use dmabridge::wayland::plan::{plan, producer_participant, Plan, PlanReason};
use dmabridge::wayland::sink::PRODUCER_USAGE;
use dmabridge::wayland::{query_formats, Display, FormatSource, SinkOptions, WaylandSink};

static WESTON: Mutex<()> = Mutex::new(());

struct Weston {
    name: String,
    dir: PathBuf,
}

impl Weston {
    fn display(&self) -> Display {
        Display::in_dir(&self.dir, &self.name)
    }
}

/// The test compositor, or `None` (skip) outside CI.
fn weston() -> Option<Weston> {
    match (std::env::var("DMABRIDGE_TEST_WAYLAND_DISPLAY"), std::env::var("DMABRIDGE_TEST_XDG_RUNTIME_DIR")) {
        (Ok(name), Ok(dir)) if !name.is_empty() && !dir.is_empty() => Some(Weston { name, dir: dir.into() }),
        _ if std::env::var_os("CI").is_some() => panic!(
            "no test Weston: DMABRIDGE_TEST_WAYLAND_DISPLAY/DMABRIDGE_TEST_XDG_RUNTIME_DIR are unset \
             (scripts/test.sh starts it through scripts/services/weston.sh)"
        ),
        _ => {
            eprintln!("skipped: no test Weston (run through scripts/test.sh, or source scripts/services/weston.sh)");
            None
        }
    }
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    WESTON.lock().unwrap_or_else(|e| e.into_inner())
}

/// Weston's screenshot of its output, as RGB rows.
struct Shot {
    width: usize,
    height: usize,
    rgb: Vec<[u8; 3]>,
}

impl Shot {
    fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.rgb[y * self.width + x]
    }
}

fn screenshot(w: &Weston) -> Shot {
    let dir = std::env::temp_dir().join(format!("dmabridge-shot-{}-{}", std::process::id(), fd_count().unwrap_or(0)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    let out = std::process::Command::new("weston-screenshooter")
        .current_dir(&dir)
        .env("XDG_RUNTIME_DIR", &w.dir)
        .env("WAYLAND_DISPLAY", &w.name)
        .output()
        .expect("run weston-screenshooter");
    assert!(out.status.success(), "weston-screenshooter failed: {}", String::from_utf8_lossy(&out.stderr));
    let file = std::fs::read_dir(&dir)
        .expect("list screenshot dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "png"))
        .expect("weston-screenshooter wrote a PNG");
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&file).expect("open PNG")));
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG data");
    assert_eq!(info.bit_depth, png::BitDepth::Eight, "8-bit screenshot");
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected screenshot colour type {other:?}"),
    };
    let (width, height) = (info.width as usize, info.height as usize);
    let mut rgb = Vec::with_capacity(width * height);
    for y in 0..height {
        let row = &buf[y * info.line_size..][..width * channels];
        rgb.extend(row.chunks_exact(channels).map(|p| [p[0], p[1], p[2]]));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Shot { width, height, rgb }
}

fn close(a: [u8; 3], b: [u8; 3], tol: u8) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= tol)
}

/// Where the `w`x`h` bars (rotated by `shift`) sit in the screenshot: the top-left pixel
/// of the first bar whose other corners and second bar match within `tol`.
fn locate(shot: &Shot, w: usize, h: usize, shift: usize, tol: u8) -> (usize, usize) {
    let first = BARS[shift % 8];
    let second = BARS[(shift + 1) % 8];
    let last = BARS[(shift + 7) % 8];
    for y in 0..=shot.height.saturating_sub(h) {
        for x in 0..=shot.width.saturating_sub(w) {
            if close(shot.at(x, y), first, tol)
                && close(shot.at(x + w / 8, y), second, tol)
                && close(shot.at(x + w - 1, y + h - 1), last, tol)
                && close(shot.at(x, y + h - 1), first, tol)
            {
                return (x, y);
            }
        }
    }
    let dump = std::env::temp_dir().join(format!("dmabridge-wayland-shot-{}.ppm", std::process::id()));
    let mut ppm = format!("P6\n{} {}\n255\n", shot.width, shot.height).into_bytes();
    ppm.extend(shot.rgb.iter().flatten());
    let _ = std::fs::write(&dump, ppm);
    panic!("the {w}x{h} colour bars are not on the compositor's output (screenshot: {})", dump.display());
}

/// The largest per-channel difference between the bars and the screenshot at (x0, y0).
fn max_error(shot: &Shot, (x0, y0): (usize, usize), w: u32, h: u32, shift: usize) -> (u8, usize) {
    let mut worst = 0u8;
    let mut wrong = 0usize;
    for y in 0..h as usize {
        for x in 0..w as usize {
            let want = bar_at(x as u32, w, shift);
            let got = shot.at(x0 + x, y0 + y);
            let e = want.iter().zip(got).map(|(a, b)| a.abs_diff(b)).max().unwrap_or(0);
            if e > 0 {
                wrong += 1;
            }
            worst = worst.max(e);
        }
    }
    (worst, wrong)
}

const W: u32 = 256;
const H: u32 = 128;

fn options(w: &Weston, fourcc: Fourcc) -> SinkOptions {
    let mut o = SinkOptions::new(w.display(), W, H, vec![fourcc]);
    o.title = format!("dmabridge test {fourcc}");
    o
}

#[test]
fn compositor_formats_are_read_into_a_participant() {
    let Some(w) = weston() else { return };
    let _g = lock();
    let f = query_formats(&w.display()).expect("read the compositor's formats");
    eprintln!(
        "linux-dmabuf v{} ({:?}), {} pairs: {:?}",
        f.version,
        match &f.source {
            FormatSource::Events { events, .. } => format!("{events} format/modifier events"),
            FormatSource::Feedback(fb) =>
                format!("feedback, main device {:#x}, {} tranches", fb.main_device, fb.tranches.len()),
        },
        f.formats.len(),
        f.formats
    );
    assert!(f.version >= 3, "Weston 14 offers at least linux-dmabuf v3");
    for fourcc in [Fourcc::ARGB8888, Fourcc::XRGB8888, Fourcc::NV12] {
        let layouts = f.layouts(fourcc);
        assert!(layouts.contains(&Layout::Explicit(Modifier::LINEAR)), "{fourcc}: LINEAR in {layouts:?}");
        assert!(layouts.contains(&Layout::Implicit), "{fourcc}: INVALID (implicit) in {layouts:?}");
    }
    let p = f.participant();
    assert_eq!(p.name, "compositor");
    assert!(p.constraints.read_only && p.usage == Usage::SAMPLE);
    assert_eq!(p.formats.as_set(), Some(&f.formats));
}

/// Presents the bars once, checks them in the screenshot within `tol`, and returns the plan
/// and the format the buffers were sent as.
fn show_bars(w: &Weston, opts: SinkOptions, shift: usize, tol: u8) -> (Plan, Option<Format>) {
    let engine = common::engine();
    let (width, height) = (opts.width, opts.height);
    let fourcc = opts.fourccs[0];
    let (plan, sent) = {
        let mut sink = WaylandSink::connect(&engine, opts).expect("connect the sink");
        let frame = colour_bars(fourcc, width, height, shift).expect("bars");
        sink.present(&frame).expect("present");
        sink.wait_shown().expect("frame shown");
        assert_eq!(sink.stats().buffers_failed, 0);
        let shot = screenshot(w);
        let at = locate(&shot, width as usize, height as usize, shift, tol);
        let (worst, wrong) = max_error(&shot, at, width, height, shift);
        eprintln!(
            "{fourcc}: plan {:?}, sent as {:?}: bars at {at:?}, max error {worst}, {wrong} pixels off",
            sink.plan(),
            sink.sent_format()
        );
        let out = (sink.plan().clone(), sink.sent_format());
        assert!(worst <= tol, "{fourcc}: max error {worst} > {tol} ({wrong} pixels)");
        out
    };
    common::assert_clean(&engine);
    (plan, sent)
}

#[test]
fn ar24_colour_bars_are_pixel_exact_in_westons_screenshot() {
    let Some(w) = weston() else { return };
    let _g = lock();
    let (plan, sent) = show_bars(&w, options(&w, Fourcc::ARGB8888), 0, 0);
    // With udmabuf the Vulkan producer exports AR24 LINEAR and the very buffer goes to Weston;
    // without it lavapipe cannot export, so the sink's copy path sends its own LINEAR memfd.
    assert_eq!(plan.is_zero_copy(), common::expect_modifiers(), "{plan:?}");
    assert_eq!(sent, Some(Format::linear(Fourcc::ARGB8888)));
}

/// NV12 tolerance, per channel, in 8-bit code values.
///
/// The bars are encoded to BT.601 limited-range YCbCr rounded to 8 bits
/// (`frames::bt601_limited`); Weston's GL renderer samples the Y and CbCr planes and decodes
/// with the same BT.601 limited-range matrix in float, then writes 8-bit RGB. The encoding's
/// rounding (at most 0.5 code value per component) comes back scaled by the decoder's gains:
/// 255/219 = 1.164 for luma, and up to 2.018 (Cb into blue) for chroma, so the worst channel
/// (blue) can be off by 0.5 x 1.164 + 0.5 x 2.018 = 1.59, i.e. 2 after the renderer's
/// rounding. Measured on Weston 14.0.2 / Mesa 25.0.7 llvmpipe: max error 1 (5 of the 8 bars
/// off by one in some channel, 20480 of 32768 pixels); the test prints it. Bars are 32 pixels wide, so no chroma sample straddles two bars.
const NV12_TOLERANCE: u8 = 2;

#[test]
fn nv12_colour_bars_within_bt601_rounding() {
    let Some(w) = weston() else { return };
    let _g = lock();
    let (plan, sent) = show_bars(&w, options(&w, Fourcc::NV12), 0, NV12_TOLERANCE);
    // lavapipe exports single-plane formats only: NV12 always takes the copy path.
    assert!(!plan.is_zero_copy(), "{plan:?}");
    assert_eq!(sent, Some(Format::linear(Fourcc::NV12)));
}

fn set(formats: &[Format]) -> FormatSet {
    formats.iter().copied().collect()
}

/// Seed 001, "Implicit modifiers", on the compositor lists a sink can meet.
#[test]
fn invalid_only_and_linear_only_compositors_follow_the_implicit_rules() {
    // No compositor here, but an engine: fd counts in the other tests are process-wide.
    let _g = lock();
    let ar24 = Fourcc::ARGB8888;
    let explicit_producer = Participant::new("vulkan", set(&[Format::linear(ar24)])).with_usage(Usage::RENDER);
    // A device without modifiers exports LINEAR tiling: the implicit world, where it is also LINEAR.
    let implicit_world_producer =
        Participant::new("vulkan", set(&[Format::linear(ar24), Format::implicit(ar24)])).with_usage(Usage::RENDER);
    let implicit_only_producer = Participant::new("vulkan", set(&[Format::implicit(ar24)])).with_usage(Usage::RENDER);
    let invalid_only = compositor_participant(set(&[Format::implicit(ar24)]));
    let linear_only = compositor_participant(set(&[Format::linear(ar24)]));

    // LINEAR is an explicit modifier like any other: explicit chain, zero-copy.
    let p = plan(&explicit_producer, &linear_only, &[ar24]).unwrap();
    let Plan::ZeroCopy { allocation } = &p else { panic!("{p:?}") };
    assert_eq!(allocation.layout, ChainLayout::Explicit(vec![Modifier::LINEAR]));
    assert_eq!(p.acceptable(), vec![Layout::Explicit(Modifier::LINEAR)]);

    // An explicitly allocated buffer must not be imported with INVALID: no shared buffer; the
    // sink allocates an implicit buffer of its own and copies (the seed's "allocate the buffer
    // separately and copy").
    let p = plan(&explicit_producer, &invalid_only, &[ar24]).unwrap();
    let Plan::Copy { layout, reason, .. } = &p else { panic!("{p:?}") };
    assert_eq!(*layout, Layout::Implicit);
    let conflicts = match reason {
        PlanReason::CopyPlan { conflicts } | PlanReason::Conflicts(conflicts) => conflicts,
        other => panic!("{other:?}"),
    };
    assert!(conflicts.iter().any(|c| c.constraint == ConstraintKind::Implicit), "{conflicts:?}");

    // Both implicit-capable: a fully implicit chain (INVALID on the wire).
    let p = plan(&implicit_world_producer, &invalid_only, &[ar24]).unwrap();
    let Plan::ZeroCopy { allocation } = &p else { panic!("{p:?}") };
    assert_eq!(allocation.layout, ChainLayout::Implicit);
    assert_eq!(p.acceptable(), vec![Layout::Implicit]);

    // A common explicit modifier wins over implicit.
    let p = plan(&implicit_world_producer, &linear_only, &[ar24]).unwrap();
    let Plan::ZeroCopy { allocation } = &p else { panic!("{p:?}") };
    assert_eq!(allocation.layout, ChainLayout::Explicit(vec![Modifier::LINEAR]));

    // Implicit-only producer, explicit-only compositor: never one buffer; copy into LINEAR.
    let p = plan(&implicit_only_producer, &linear_only, &[ar24]).unwrap();
    let Plan::Copy { layout, .. } = &p else { panic!("{p:?}") };
    assert_eq!(*layout, Layout::Explicit(Modifier::LINEAR));

    // The live producer: explicit modifiers only with the modifier extension (its images
    // are created from an explicit list), nothing exportable without udmabuf.
    let engine = common::engine();
    let live = producer_participant(&engine, &[ar24, Fourcc::NV12], PRODUCER_USAGE);
    let formats = live.formats.as_set().expect("a list").clone();
    if common::expect_modifiers() {
        assert!(formats.contains(&Format::linear(ar24)), "{formats:?}");
        assert!(formats.iter().all(|f| f.layout != Layout::Implicit), "{formats:?}");
    } else {
        assert!(formats.is_empty(), "{formats:?}");
    }
    common::assert_clean(&engine);
}

/// The same two lists against the real Weston: the sink sends what the list allows, and
/// Weston shows it exactly.
#[test]
fn live_sink_sends_invalid_to_an_invalid_only_list_and_linear_to_a_linear_only_list() {
    let Some(w) = weston() else { return };
    let _g = lock();
    let ar24 = Fourcc::ARGB8888;
    let mut o = options(&w, ar24);
    o.compositor_override = Some(set(&[Format::implicit(ar24)]));
    let (plan, sent) = show_bars(&w, o, 3, 0);
    assert!(!plan.is_zero_copy(), "explicit producer vs implicit-only compositor: copy, {plan:?}");
    assert_eq!(sent, Some(Format::implicit(ar24)), "sent with DRM_FORMAT_MOD_INVALID");

    let mut o = options(&w, ar24);
    o.compositor_override = Some(set(&[Format::linear(ar24)]));
    let (plan, sent) = show_bars(&w, o, 5, 0);
    assert_eq!(plan.is_zero_copy(), common::expect_modifiers(), "{plan:?}");
    assert_eq!(sent, Some(Format::linear(ar24)));
}

#[test]
fn a_buffer_the_compositor_fails_is_dropped_and_the_sink_recovers_without_leaking_fds() {
    let Some(w) = weston() else { return };
    let _g = lock();
    let engine = common::engine();
    let before = fd_count().unwrap();
    {
        let mut o = options(&w, Fourcc::ARGB8888);
        o.inject_bad_strides = 1; // stride 0 on the first buffer
        let mut sink = WaylandSink::connect(&engine, o).expect("connect");
        for i in 0..10 {
            sink.present(&colour_bars(Fourcc::ARGB8888, W, H, i).unwrap()).expect("present after a failure");
        }
        sink.wait_shown().unwrap();
        let s = sink.stats().clone();
        eprintln!("{s:?}");
        assert_eq!(s.buffers_failed, 1, "Weston's importer fails the stride-0 buffer");
        assert_eq!(s.frames, 10);
        assert!(s.buffers_created >= 1 && sink.pool_size() <= 3);
        let mid = fd_count().unwrap();
        for i in 10..20 {
            sink.present(&colour_bars(Fourcc::ARGB8888, W, H, i).unwrap()).unwrap();
        }
        sink.wait_shown().unwrap();
        assert_eq!(fd_count().unwrap(), mid, "fds stable while presenting after the failure");
        let shot = screenshot(&w);
        let at = locate(&shot, W as usize, H as usize, 19, 0);
        assert_eq!(max_error(&shot, at, W, H, 19).0, 0, "frames after the failure are exact");
    }
    assert_eq!(fd_count().unwrap(), before, "every fd of the failed and the good buffers is closed");
    common::assert_clean(&engine);
}

/// Two failures of the same format in a row: the sink excludes it from the compositor's
/// list and renegotiates (GStreamer's reconfigure); here AR24 LINEAR is dropped, so it
/// ends on its own buffer with the other layout Weston offers, implicit (INVALID).
#[test]
fn repeated_failures_renegotiate_to_another_layout() {
    let Some(w) = weston() else { return };
    let _g = lock();
    let engine = common::engine();
    let before = fd_count().unwrap();
    {
        let mut o = options(&w, Fourcc::ARGB8888);
        o.inject_bad_strides = 2;
        let mut sink = WaylandSink::connect(&engine, o).expect("connect");
        for i in 0..5 {
            sink.present(&colour_bars(Fourcc::ARGB8888, W, H, i).unwrap()).expect("present");
        }
        sink.wait_shown().unwrap();
        let s = sink.stats().clone();
        eprintln!("{s:?}, plan {:?}", sink.plan());
        assert_eq!(s.buffers_failed, 2);
        assert!(s.renegotiations >= 1);
        assert_eq!(sink.sent_format(), Some(Format::implicit(Fourcc::ARGB8888)));
        let Plan::Copy { reason, .. } = sink.plan() else { panic!("{:?}", sink.plan()) };
        assert_eq!(*reason, PlanReason::CompositorFailed(Format::linear(Fourcc::ARGB8888)));
        let shot = screenshot(&w);
        let at = locate(&shot, W as usize, H as usize, 4, 0);
        assert_eq!(max_error(&shot, at, W, H, 4).0, 0);
    }
    assert_eq!(fd_count().unwrap(), before);
    common::assert_clean(&engine);
}

#[test]
fn three_hundred_frames_never_reuse_a_buffer_before_its_release() {
    let Some(w) = weston() else { return };
    let _g = lock();
    let engine = common::engine();
    let before = fd_count().unwrap();
    {
        let mut sink = WaylandSink::connect(&engine, options(&w, Fourcc::ARGB8888)).expect("connect");
        let frames: Vec<Vec<u8>> = (0..8).map(|i| colour_bars(Fourcc::ARGB8888, W, H, i).unwrap()).collect();
        let mut warm = None;
        for i in 0..300usize {
            sink.present(&frames[i % 8]).expect("present");
            if i == 20 {
                warm = Some(fd_count().unwrap());
            }
        }
        sink.wait_shown().unwrap();
        let s = sink.stats().clone();
        eprintln!("{s:?}, pool {}", sink.pool_size());
        assert_eq!(s.frames, 300);
        assert_eq!(s.reuse_before_release, 0);
        assert_eq!(s.spurious_releases, 0);
        assert_eq!(s.buffers_failed, 0);
        assert!(s.buffers_created <= 3 && sink.pool_size() <= 3, "a bounded pool: {s:?}");
        // Every frame but the ones still on screen was released before its buffer came back.
        assert!(s.releases >= 300 - sink.pool_size() as u64, "{s:?}");
        assert_eq!(fd_count().unwrap(), warm.unwrap(), "fd count stable over 280 frames");
    }
    assert_eq!(fd_count().unwrap(), before);
    common::assert_clean(&engine);
}
