//! Hostile inputs that used to expand into gigabytes (issue #12), each run in a child
//! process (this test binary, re-executed for one test) under `RLIMIT_AS`: the child must
//! exit normally, having seen the typed error, not die of a signal or an allocation abort,
//! and it must finish (it is killed, and the test fails, after a generous time that no
//! correct run comes near; no speed is asserted).
//!
//! Without the bounds these fail: the KMS blob expands to millions of pairs and the split
//! negotiation writes hundreds of megabytes, both far past the address-space limit, and the
//! child aborts.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dmabridge_interop::dmabuf::{check_import, sealed_memfd_of_size, DmaBuf, ImportCheckError, ImportLimits, PlaneDesc};
use dmabridge_interop::negotiate::{negotiate, Member, NegotiateError, Outcome, Participant, MAX_PARTICIPANTS};
use dmabridge_interop::report::{human, Report};
use dmabridge_interop::peers::{gst, kms, wayland};
use dmabridge_interop::tiling::{
    detile_to_vec, tile_to_vec, tiled_size, yuv_to_rgb_vec, ColourError, ColourMatrix, ColourRange, TilingError,
    MAX_CPU_FRAME_BYTES,
};
use dmabridge_interop::{Format, Fourcc, Layout, Modifier, TileLayout};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

const CASE_ENV: &str = "DMABRIDGE_BOUNDED_CASE";
const MIB: u64 = 1 << 20;
/// Long enough for a debug build on a loaded two-core machine to finish every case many
/// times over; only a hang reaches it.
const HANG: Duration = Duration::from_secs(300);

/// Runs `body` in a child process limited to `limit` bytes of address space. In the child
/// (the environment names the case), checks that the limit is in force and runs the body.
fn in_child(case: &str, limit: u64, body: fn()) {
    if std::env::var(CASE_ENV).as_deref() == Ok(case) {
        let got = getrlimit(Resource::As);
        assert_eq!(got.current, Some(limit), "the child runs under the limit");
        // The limit bites: more than it cannot even be reserved.
        let mut v: Vec<u8> = Vec::new();
        assert!(v.try_reserve_exact(limit as usize).is_err(), "{limit} bytes could be had despite RLIMIT_AS");
        body();
        println!("bounded case {case}: done");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([case, "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE_ENV, case)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec and only makes the
    // setrlimit system call (no allocation, no locks), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            setrlimit(Resource::As, Rlimit { current: Some(limit), maximum: Some(limit) })
                .map_err(std::io::Error::from)
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn the child");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{case}: still running after {HANG:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    assert_eq!(status.signal(), None, "{case}: killed by a signal\n{out}\n{err}");
    assert!(status.success(), "{case}: {status}\n{out}\n{err}");
    assert!(out.contains(&format!("bounded case {case}: done")), "{case}: the case did not run\n{out}\n{err}");
}

// ---- KMS IN_FORMATS --------------------------------------------------------------------

/// A version-1 blob: `formats` fourccs, then one modifier entry per element of `masks`
/// (mask, offset 0, a distinct modifier).
fn in_formats_blob(formats: u32, masks: &[u64]) -> Vec<u8> {
    let formats_offset = 24u32;
    let modifiers_offset = (formats_offset + formats * 4).next_multiple_of(8);
    let mut b = Vec::with_capacity(modifiers_offset as usize + masks.len() * 24);
    for w in [1, 0, formats, formats_offset, masks.len() as u32, modifiers_offset] {
        b.extend_from_slice(&w.to_ne_bytes());
    }
    for i in 0..formats {
        b.extend_from_slice(&(0x3030_3030u32 + i).to_ne_bytes());
    }
    b.resize(modifiers_offset as usize, 0);
    for (i, &mask) in masks.iter().enumerate() {
        b.extend_from_slice(&mask.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(0x0100_0000_0000_0000u64 + i as u64).to_ne_bytes());
    }
    b
}

#[test]
fn a_kms_blob_claiming_millions_of_pairs_is_refused_in_bounded_memory() {
    in_child("a_kms_blob_claiming_millions_of_pairs_is_refused_in_bounded_memory", 256 * MIB, || {
        // 64 formats and as many entries as the bound allows, each claiming all 64: a
        // 393 KB blob claiming a million pairs.
        let blob = in_formats_blob(64, &vec![u64::MAX; kms::MAX_IN_FORMATS_MODIFIERS as usize]);
        assert_eq!(
            kms::parse_in_formats(&blob),
            Err(kms::KmsError::TooManyPairs { pairs: kms::MAX_IN_FORMATS_PAIRS + 64, max: kms::MAX_IN_FORMATS_PAIRS })
        );
        // A 4.8 MB blob (200,000 entries, 12.8 million pairs) is refused on its count.
        let blob = in_formats_blob(64, &vec![u64::MAX; 200_000]);
        assert!(blob.len() > 4_000_000);
        assert!(matches!(kms::parse_in_formats(&blob), Err(kms::KmsError::TooManyModifiers { count: 200_000, .. })));
        // The bound itself parses.
        let blob = in_formats_blob(64, &vec![u64::MAX; (kms::MAX_IN_FORMATS_PAIRS / 64) as usize]);
        assert_eq!(kms::parse_in_formats(&blob).map(|s| s.len()), Ok(kms::MAX_IN_FORMATS_PAIRS as usize));
    });
}

#[test]
fn other_peer_lists_are_refused_past_their_bounds_in_bounded_memory() {
    in_child("other_peer_lists_are_refused_past_their_bounds_in_bounded_memory", 256 * MIB, || {
        let table = vec![0u8; (wayland::MAX_FORMAT_TABLE_ENTRIES + 1) * wayland::TABLE_ENTRY_LEN];
        assert!(matches!(wayland::parse_format_table(&table), Err(wayland::WaylandError::TableTooLarge { .. })));
        // A list against a list of lists: 16 million values if it were computed.
        let ones = vec!["1"; gst::MAX_LIST_LEN / 2].join(", ");
        let a = gst::Caps::parse(&format!("video/x-raw, a={{ {ones} }}")).unwrap();
        let b = gst::Caps::parse(&format!("video/x-raw, a={{ {{ {ones} }}, {{ {ones} }} }}")).unwrap();
        assert!(matches!(a.intersect(&b), Err(gst::GstError::IntersectionTooLarge { .. })));
    });
}

// ---- negotiation -----------------------------------------------------------------------

/// `n` participants, alternately NV12-only and AR24-only: each one of a half blocks the
/// format the other half shares.
fn split(n: usize) -> Vec<Member> {
    (0..n)
        .map(|i| {
            let f = if i % 2 == 0 { Fourcc::NV12 } else { Fourcc::ARGB8888 };
            let set = [Format { fourcc: f, layout: Layout::Explicit(Modifier::LINEAR) }].into_iter().collect();
            Participant::new(format!("participant-{i:05}"), set).into()
        })
        .collect()
}

#[test]
fn ten_thousand_participants_are_refused_and_the_maximum_reports_in_bounded_memory() {
    in_child("ten_thousand_participants_are_refused_and_the_maximum_reports_in_bounded_memory", 256 * MIB, || {
        assert_eq!(
            negotiate(&split(10_000)),
            Err(NegotiateError::TooManyParticipants { count: 10_000, max: MAX_PARTICIPANTS })
        );
        // At the maximum, the report is a few hundred bytes per participant.
        let n = negotiate(&split(MAX_PARTICIPANTS)).unwrap();
        assert!(matches!(n.outcome, Outcome::Impossible(_)));
        let json = Report::new(&n).to_json();
        let text = human(&n);
        println!("{MAX_PARTICIPANTS} participants: {} bytes of JSON, {} of text", json.len(), text.len());
        assert!(json.len() < MAX_PARTICIPANTS * 1024 && text.len() < MAX_PARTICIPANTS * 1024);
    });
}

// ---- giant extents ---------------------------------------------------------------------

#[test]
fn giant_extents_are_refused_before_anything_is_allocated() {
    in_child("giant_extents_are_refused_before_anything_is_allocated", 256 * MIB, || {
        let (m, r) = (ColourMatrix::Bt709, ColourRange::Limited);
        // `dmabridge convert --cpu` at 200000x200000 used to allocate 40 GB for the output.
        assert!(matches!(
            detile_to_vec(TileLayout::I915Y, Fourcc::NV12, 200_000, 200_000, &[0; 4096]),
            Err(TilingError::BufferTooSmall { .. })
        ));
        assert!(matches!(
            tile_to_vec(TileLayout::I915Y, Fourcc::ABGR8888, 200_000, 200_000, &[0; 4096]),
            Err(TilingError::BufferTooSmall { .. })
        ));
        assert!(matches!(
            yuv_to_rgb_vec((Fourcc::NV12, Fourcc::XRGB8888), (m, r), (200_000, 200_000), &[0; 4096]),
            Err(ColourError::Layout(TilingError::BufferTooSmall { .. }))
        ));
        // A whole input whose tiled output is past the cap: 4 MiB of one-row R8 pads to 256
        // rows of NVIDIA blocks, 1 GiB and 16 KiB.
        let width = (MAX_CPU_FRAME_BYTES / 256) as u32 + 64;
        let linear = vec![0u8; width as usize];
        assert!(matches!(
            tile_to_vec(TileLayout::NvidiaBlockLinear(5), Fourcc::R8, width, 1, &linear),
            Err(TilingError::FrameTooLarge { bytes, .. }) if bytes > MAX_CPU_FRAME_BYTES
        ));
        assert!(matches!(
            tiled_size(TileLayout::I915X, Fourcc::ABGR16161616F, u32::MAX, u32::MAX),
            Err(TilingError::SizeOverflow { .. })
        ));
        // The import checks do arithmetic, never allocation, on hostile extents.
        let buf = DmaBuf::new(
            Fourcc::ABGR16161616F,
            Layout::Explicit(Modifier::LINEAR),
            u32::MAX,
            u32::MAX,
            vec![PlaneDesc { fd: sealed_memfd_of_size("giant", 4096).unwrap(), offset: 0, stride: u64::MAX / 2 }],
        )
        .unwrap();
        assert!(matches!(
            check_import(&buf, &ImportLimits::linear_cpu(u32::MAX)),
            Err(ImportCheckError::Overflow { plane: 0, .. })
        ));
    });
}
