//! The command line's participant grammar (`dmabridge_interop::spec`): participants from
//! command-line text through the peer parsers, constraints, and what the negotiation makes
//! of them.

use dmabridge_interop::spec::{build_participants, ConstraintSpec, ParticipantSpec, PeerKind, SpecError};
use dmabridge_interop::negotiate::*;
use dmabridge_interop::report::{OutcomeName, Report};
use dmabridge_interop::{Format, FormatSet, Fourcc, Modifier};

const X_TILED: Modifier = Modifier::from_raw(0x0100_0000_0000_0001);

fn set(formats: &[Format]) -> FormatSet {
    formats.iter().copied().collect()
}

fn p(name: &str, formats: &[Format]) -> Participant {
    Participant::new(name, set(formats))
}

fn nv12() -> Format {
    Format::linear(Fourcc::NV12)
}

fn shared(parts: &[Participant]) -> Allocation {
    match reconcile(parts) {
        Ok(a) => a,
        Err(c) => panic!("expected a shared allocation, got {c}"),
    }
}

fn members(parts: Vec<Participant>) -> Vec<Member> {
    parts.into_iter().map(Member::from).collect()
}

// ---- item 11: participants from command-line text, through the peer parsers ----

fn spec(kind: PeerKind, arg: &str) -> ParticipantSpec {
    ParticipantSpec::parse(kind, arg).unwrap()
}

fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("dmabridge-negotiate-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn seed_example_from_caps_and_drm_format_text() {
    let specs = [
        spec(
            PeerKind::GstCaps,
            "vapostproc=video/x-raw(memory:DMABuf), width=(int)[ 16, 16384 ], height=(int)[ 16, 16384 ], \
             drm-format=(string){ NV12:0x0100000000000001, NV12, I420, YV12, BGRA:0x0100000000000002 }",
        ),
        spec(PeerKind::DrmFormats, "glupload=NV12:0x0100000000000001,BGRA"),
    ];
    let parts = build_participants(
        &specs,
        &[ConstraintSpec::parse("glupload:min-buffers=2").unwrap()],
    )
    .unwrap();
    assert_eq!(
        parts[0].constraints.width,
        ExtentRange::new(16, 16384),
        "caps extents become constraints"
    );
    let n = negotiate(&members(parts)).unwrap();
    let r = Report::new(&n);
    assert_eq!(r.format.as_deref(), Some("NV12"));
    assert_eq!(r.modifiers, vec![X_TILED]);
    assert_eq!(r.buffers, Some(2));
}

#[test]
fn caps_without_drm_format_accept_anything() {
    let parts = build_participants(
        &[
            spec(PeerKind::DrmFormats, "src=NV12:0x0100000000000001,NV12"),
            spec(
                PeerKind::GstCaps,
                "glupload=video/x-raw(memory:DMABuf), width=(int)[ 1, 2147483647 ]",
            ),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(parts[1].formats, Candidates::Any);
    assert_eq!(
        shared(&parts).layout,
        ChainLayout::Explicit(vec![Modifier::LINEAR, X_TILED])
    );
}

#[test]
fn bad_peer_text_is_a_typed_error_naming_the_participant() {
    for (kind, arg) in [
        (PeerKind::DrmFormats, "enc=NV12:0x0000000000000000"),
        (PeerKind::DrmFormats, "enc=NV12:0x1"),
        (
            PeerKind::GstCaps,
            "enc=video/x-raw(memory:DMABuf), drm-format=(string){ NV12",
        ),
        (PeerKind::V4l2, "enc=XXXX"),
    ] {
        let e = spec(kind, arg).load().unwrap_err();
        assert!(matches!(e, SpecError::Peer { .. }), "{arg}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("\"enc\"") && !msg.contains('\n'), "{msg}");
    }
}

#[test]
fn kms_blobs_and_wayland_tables_are_read_from_files() {
    use dmabridge_interop::peers::{kms, wayland};
    let plane: FormatSet = [
        Format::linear(Fourcc::XRGB8888),
        Format::explicit(Fourcc::NV12, X_TILED),
    ]
    .into_iter()
    .collect();
    let blob = temp_file("in_formats", &kms::write_in_formats(&plane));
    let table = temp_file(
        "table",
        &wayland::write_format_table(&[Format::explicit(Fourcc::NV12, X_TILED), nv12()]),
    );
    let parts = build_participants(
        &[
            spec(
                PeerKind::WaylandTable,
                &format!("compositor={}", table.display()),
            ),
            spec(PeerKind::KmsInFormats, &format!("plane={}", blob.display())),
        ],
        &[],
    );
    let _ = std::fs::remove_file(&blob);
    let _ = std::fs::remove_file(&table);
    let a = shared(&parts.unwrap());
    assert_eq!(
        (a.fourcc, a.layout),
        (Fourcc::NV12, ChainLayout::Explicit(vec![X_TILED]))
    );

    let junk = temp_file("junk", &[1, 2, 3]);
    let e = spec(
        PeerKind::WaylandTable,
        &format!("compositor={}", junk.display()),
    )
    .load()
    .unwrap_err();
    let _ = std::fs::remove_file(&junk);
    assert!(matches!(e, SpecError::Peer { .. }), "{e}");
}

#[test]
fn v4l2_tiled_decoder_and_a_linear_display_plan_a_detile() {
    let parts = build_participants(
        &[
            spec(PeerKind::V4l2, "dec=NV12MT"),
            spec(PeerKind::DrmFormats, "display=NV12,AR24"),
        ],
        &[
            ConstraintSpec::parse("display:read-only=true").unwrap(),
            ConstraintSpec::parse("dec:width=1920").unwrap(),
            ConstraintSpec::parse("dec:height=1080").unwrap(),
        ],
    )
    .unwrap();
    let n = negotiate(&members(parts)).unwrap();
    let r = Report::new(&n);
    assert_eq!(r.outcome, OutcomeName::Copy);
    assert_eq!(r.conversions[0].kind, "detile samsung-64x32 -> linear");
}

#[test]
fn the_first_format_everyone_has_wins_whoever_lacks_the_earlier_ones() {
    let (x, y, z) = (
        nv12(),
        Format::linear(Fourcc::ARGB8888),
        Format::linear(Fourcc::P010),
    );
    let lead = p("lead", &[x, y, z]);
    let no_x = p("no_x", &[z, y]);
    let no_y = p("no_y", &[x, z]);
    assert_eq!(
        shared(&[lead.clone(), no_x.clone(), no_y]).fourcc,
        Fourcc::P010
    );
    assert_eq!(
        shared(&[lead, no_x, p("all", &[z, y, x])]).fourcc,
        Fourcc::ARGB8888
    );
}

