//! The peers' parsers against the seed's own examples (seed 000, GStreamer DMABuf caps) and
//! against each malformed-input class of issue #3 item 12 that concerns caps.

use dmabridge_interop::peers::gst::{self, Caps, GstError, IntRange};
use dmabridge_interop::{Format, FormatSet, Fourcc, Modifier};

/// The seed's examples, copied as the seed file has them (its code blocks were flattened to
/// one line, the `\` line continuations left in).
const SEED_CAPS_STRING: &str = r#"video/x-raw(memory:DMABuf), \ drm-format=(string)NV12:0x0x0100000000000001, \ width=(int)1920, \ height=(int)1080, \ interlace-mode=(string)progressive, \ multiview-mode=(string)mono, \ multiview-flags=(GstVideoMultiviewFlagsSet)0:ffffffff:/right-view-first/left-flipped/left-flopped/right-flipped/right-flopped/half-aspect/mixed-mono, \ pixel-aspect-ratio=(fraction)1/1, \ framerate=(fraction)24/1, \ colorimetry=(string)bt709""#;
const SEED_STATIC_TEMPLATE: &str = r#"video/x-raw(memory:DMABuf) width: [ 16, 16384 ] height: [ 16, 16384 ] drm-format: { (string)NV12:0x0100000000000001, \ (string)YU12, (string)YV12, \ (string)YUYV:0x0100000000000002, \ (string)P010:0x0100000000000002, \ (string)AR24:0x0100000000000002, \ (string)AB24:0x0100000000000002, \ (string)AR39:0x0100000000000002, \ (string)AYUV:0x0100000000000002 }"#;
const SEED_VAPOSTPROC_SRC: &str = r#"video/x-raw(memory:DMABuf) width: [ 16, 16384 ] height: [ 16, 16384 ] drm-format: { (string)NV12:0x0100000000000001, \ (string)NV12, (string)I420, (string)YV12, \ (string)BGRA:0x0100000000000002 }"#;
const SEED_GLUPLOAD_SINK: &str = "video/x-raw(memory:DMABuf) width: [ 1, 2147483647 ] height: [ 1, 2147483647 ]";
const SEED_GLUPLOAD_ANSWER: &str = "drm-format: { (string)NV12:0x0100000000000001, (string)BGRA }";

/// Blanks and `\`-continuations are layout, not content: compare texts without them.
fn normalize(s: &str) -> String {
    s.replace("\\ ", " ").replace("\\\n", " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

const Y_TILED: Modifier = Modifier::from_raw(0x0100_0000_0000_0002);
const X_TILED: Modifier = Modifier::from_raw(0x0100_0000_0000_0001);

#[test]
fn the_examples_are_the_seeds_text() {
    let seed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/seeds/000_561efb3277453018.txt");
    let Ok(seed) = std::fs::read_to_string(&seed) else {
        eprintln!("seed file not present at {}; the copies above stand alone", seed.display());
        return;
    };
    let seed = normalize(&seed);
    for example in
        [SEED_CAPS_STRING, SEED_STATIC_TEMPLATE, SEED_VAPOSTPROC_SRC, SEED_GLUPLOAD_SINK, SEED_GLUPLOAD_ANSWER]
    {
        assert!(seed.contains(&normalize(example)), "not in the seed: {example}");
    }
}

#[test]
fn seed_templates_round_trip_exactly() {
    for example in [SEED_STATIC_TEMPLATE, SEED_VAPOSTPROC_SRC, SEED_GLUPLOAD_SINK] {
        let caps = Caps::parse(example).unwrap();
        assert_eq!(normalize(&caps.to_inspect_string()), normalize(example));
        let serialized = caps.to_string();
        assert_eq!(Caps::parse(&serialized).unwrap(), caps, "{serialized}");
    }
}

#[test]
fn seed_static_template_reads_as_formats() {
    let caps = Caps::parse(SEED_STATIC_TEMPLATE).unwrap();
    let set = caps.drm_formats().unwrap();
    assert_eq!(set.len(), 9);
    assert_eq!(set.iter().next(), Some(&Format::new(Fourcc::NV12, X_TILED)));
    assert!(set.contains(&Format::linear(Fourcc::YUV420)));
    // AR39 is no DRM format; it stays an opaque code.
    let ar39 = Format::new(Fourcc::from_bytes(*b"AR39"), Y_TILED);
    assert!(set.contains(&ar39) && ar39.fourcc.known().is_none());
    assert_eq!(caps.width(), Some(IntRange { min: 16, max: 16384 }));
    assert_eq!(caps.height(), Some(IntRange { min: 16, max: 16384 }));
}

#[test]
fn seed_caps_string_has_a_typo_that_is_rejected_and_its_fix_round_trips() {
    // The seed writes `NV12:0x0x0100000000000001`: not 16 hex digits after `0x`.
    let err = Caps::parse(SEED_CAPS_STRING).unwrap_err();
    assert!(matches!(err, GstError::ModifierSyntax { ref text } if text.contains("0x0x")), "{err}");
    let fixed = normalize(SEED_CAPS_STRING).replace("0x0x", "0x").trim_end_matches('"').to_owned();
    let caps = Caps::parse(&fixed).unwrap();
    assert_eq!(caps.to_string(), fixed);
    assert_eq!(
        caps.drm_formats().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![Format::new(Fourcc::NV12, X_TILED)]
    );
    assert_eq!(caps.width(), Some(IntRange { min: 1920, max: 1920 }));
    // The stray quote after the last value is the other slip in that example.
    let quote_only = normalize(SEED_CAPS_STRING).replace("0x0x", "0x");
    assert!(
        matches!(Caps::parse(&quote_only), Err(GstError::UnexpectedChar { found: '"', .. })),
        "{:?}",
        Caps::parse(&quote_only)
    );
}

#[test]
fn vapostproc_to_glupload_negotiates_nv12_x_tiled() {
    let src = Caps::parse(SEED_VAPOSTPROC_SRC).unwrap();
    let sink = Caps::parse(SEED_GLUPLOAD_SINK).unwrap();
    assert_eq!(sink.drm_formats(), None, "absent drm-format means anything");
    let template = src.intersect(&sink).unwrap().unwrap();
    assert_eq!(template.drm_formats(), src.drm_formats());
    assert_eq!(template.width(), Some(IntRange { min: 16, max: 16384 }));

    let answer_value = SEED_GLUPLOAD_ANSWER.strip_prefix("drm-format: ").unwrap();
    let answer = gst::parse_drm_format_value(answer_value).unwrap();
    let expected = vec![Format::new(Fourcc::NV12, Modifier::from_raw(0x0100_0000_0000_0001))];
    assert_eq!(src.drm_formats().unwrap().intersection(&answer).iter().copied().collect::<Vec<_>>(), expected);

    let answer_caps = Caps::parse(&format!("video/x-raw(memory:DMABuf) {SEED_GLUPLOAD_ANSWER}")).unwrap();
    let fixed = template.intersect(&answer_caps).unwrap().unwrap();
    assert_eq!(fixed.drm_formats().unwrap().iter().copied().collect::<Vec<_>>(), expected);
    assert_eq!(
        fixed.to_string(),
        "video/x-raw(memory:DMABuf), width=[ 16, 16384 ], height=[ 16, 16384 ], drm-format=(string)NV12:0x0100000000000001"
    );
}

#[test]
fn serialized_caps_with_tags_lists_and_ranges_round_trip() {
    let text = "video/x-raw(memory:DMABuf), format=(string)DMA_DRM, drm-format=(string){ NV12:0x0100000000000001, NV12, AR24:0x00ffffffffffffff }, width=(int)[ 1, 2147483647 ], height=(int)[ 1, 2147483647 ], framerate=(fraction)[ 0/1, 2147483647/1 ]";
    let caps = Caps::parse(text).unwrap();
    assert_eq!(caps.to_string(), text);
    let set = caps.drm_formats().unwrap();
    assert_eq!(
        set.iter().copied().collect::<Vec<_>>(),
        vec![Format::new(Fourcc::NV12, X_TILED), Format::linear(Fourcc::NV12), Format::implicit(Fourcc::ARGB8888),]
    );
    // A single value without braces or tags.
    let one = Caps::parse("video/x-raw(memory:DMABuf), drm-format=NV12:0x0100000000000002").unwrap();
    assert_eq!(
        one.drm_formats().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![Format::new(Fourcc::NV12, Y_TILED)]
    );
    assert_eq!(one.to_string(), "video/x-raw(memory:DMABuf), drm-format=NV12:0x0100000000000002");
}

#[test]
fn several_structures_any_and_system_memory() {
    let caps = Caps::parse(
        "video/x-raw(memory:DMABuf), drm-format=(string)NV12; video/x-raw, format=(string)NV12; video/x-raw(memory:DMABuf), drm-format=(string){ AR24, NV12 }",
    )
    .unwrap();
    assert_eq!(caps.structures().len(), 3);
    assert_eq!(
        caps.drm_formats().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![Format::linear(Fourcc::NV12), Format::linear(Fourcc::ARGB8888)]
    );
    assert_eq!(Caps::parse(&caps.to_string()).unwrap(), caps);
    assert_eq!(Caps::parse("ANY").unwrap().drm_formats(), None);
    assert_eq!(Caps::parse("video/x-raw, format=NV12").unwrap().drm_formats(), Some(FormatSet::new()));
    assert!(Caps::parse("EMPTY").unwrap().is_empty());
}

#[test]
fn intersection_of_ranges_values_and_structures() {
    let a = Caps::parse("video/x-raw(memory:DMABuf), width=(int)[ 1, 1920 ], framerate=(fraction)30/1").unwrap();
    let b =
        Caps::parse("video/x-raw(memory:DMABuf), width=(int)[ 640, 4096 ], framerate=(fraction)[ 0/1, 60/1 ]").unwrap();
    let ab = a.intersect(&b).unwrap().unwrap();
    assert_eq!(ab.to_string(), "video/x-raw(memory:DMABuf), width=(int)[ 640, 1920 ], framerate=(fraction)30/1");
    let c = Caps::parse("video/x-raw(memory:DMABuf), width=(int){ 320, 1280, 8000 }").unwrap();
    assert_eq!(a.intersect(&c).unwrap().unwrap().width(), Some(IntRange { min: 320, max: 1280 }));
    let d = Caps::parse("video/x-raw(memory:DMABuf), width=(int)[ 2000, 4096 ]").unwrap();
    assert_eq!(a.intersect(&d), Ok(None));
    let sys = Caps::parse("video/x-raw, width=(int)[ 1, 1920 ]").unwrap();
    assert_eq!(a.intersect(&sys), Ok(None), "DMABuf and system memory do not meet");
    let e = Caps::parse("video/x-raw(memory:DMABuf), drm-format=(string){ NV12, AR24 }").unwrap();
    let f = Caps::parse("video/x-raw(memory:DMABuf), drm-format=(string)P010").unwrap();
    assert_eq!(e.intersect(&f), Ok(None));
    assert_eq!(Caps::any().intersect(&e), Ok(Some(e.clone())));
}

#[test]
fn caps_with_unbalanced_braces() {
    let open = Caps::parse("video/x-raw(memory:DMABuf), drm-format=(string){ NV12, AR24");
    assert_eq!(open, Err(GstError::Unclosed { at: 47, open: '{' }));
    assert!(matches!(
        Caps::parse("video/x-raw(memory:DMABuf), width=[ 1, 2"),
        Err(GstError::Unclosed { open: '[', .. })
    ));
    assert!(matches!(Caps::parse("video/x-raw(memory:DMABuf"), Err(GstError::Unclosed { open: '(', .. })));
    assert!(matches!(Caps::parse("video/x-raw, width=(int"), Err(GstError::Unclosed { open: '(', .. })));
    assert!(matches!(
        Caps::parse("video/x-raw(memory:DMABuf), drm-format=(string)NV12 }"),
        Err(GstError::UnmatchedClose { found: '}', .. })
    ));
    assert!(matches!(
        Caps::parse("video/x-raw(memory:DMABuf), drm-format={ NV12 ]"),
        Err(GstError::MismatchedClose { open: '{', found: ']', .. })
    ));
    assert!(matches!(Caps::parse("video/x-raw, a=\"unterminated"), Err(GstError::UnterminatedString { .. })));
}

#[test]
fn caps_with_bad_modifiers_and_bad_drm_format_fields() {
    for (text, check) in [
        ("video/x-raw(memory:DMABuf), drm-format=NV12:0x1", "ModifierSyntax"),
        ("video/x-raw(memory:DMABuf), drm-format={ NV12, AR24:0x01000000000000020 }", "ModifierSyntax"),
        ("video/x-raw(memory:DMABuf), drm-format=NV12:0x0000000000000000", "ExplicitLinear"),
        ("video/x-raw, drm-format=NV12", "DrmFormatOutsideDmaBuf"),
        ("video/x-raw(memory:DMABuf), drm-format=(int)12", "DrmFormatNotString"),
        ("video/x-raw(memory:DMABuf), drm-format=[ NV12, AR24 ]", "DrmFormatNotString"),
        ("video/x-raw(memory:DMABuf), drm-format={ }", "EmptyDrmFormatList"),
        ("video/x-raw, width=1, width=2", "DuplicateField"),
        ("video/x-raw, width=[ 1 ]", "RangeArity"),
        ("   ", "EmptyCaps"),
        ("video/x-raw, =1", "UnexpectedChar"),
        ("video/x-raw, width", "UnexpectedEnd"),
    ] {
        let err = Caps::parse(text).unwrap_err();
        assert!(format!("{err:?}").starts_with(check), "{text}: {err:?}");
    }
}

#[test]
fn hostile_caps_are_bounded() {
    let deep = format!("video/x-raw, a={}{}", "{ ".repeat(100), " }".repeat(100));
    assert!(matches!(Caps::parse(&deep), Err(GstError::TooDeep { .. })));
    let long = format!("video/x-raw, a={}", "x".repeat(gst::MAX_CAPS_LEN));
    assert!(matches!(Caps::parse(&long), Err(GstError::TooLong { .. })));
    let wide = |n: usize| {
        format!(
            "video/x-raw(memory:DMABuf), drm-format={{ {} }}",
            (0..n).map(|i| format!("N{:03}:0x{:016x}", i % 1000, i + 1)).collect::<Vec<_>>().join(", ")
        )
    };
    assert_eq!(Caps::parse(&wide(gst::MAX_DRM_FORMATS)).unwrap().drm_formats().unwrap().len(), gst::MAX_DRM_FORMATS);
    assert!(matches!(
        Caps::parse(&wide(gst::MAX_DRM_FORMATS + 1)),
        Err(GstError::TooManyDrmFormats { max: gst::MAX_DRM_FORMATS, .. })
    ));
    let structures = |n: usize| vec!["video/x-raw"; n].join("; ");
    assert_eq!(Caps::parse(&structures(gst::MAX_CAPS_STRUCTURES)).unwrap().structures().len(), gst::MAX_CAPS_STRUCTURES);
    assert!(matches!(
        Caps::parse(&structures(gst::MAX_CAPS_STRUCTURES + 1)),
        Err(GstError::TooManyStructures { .. })
    ));
    let list = |n: usize| format!("video/x-raw, a={{ {} }}", vec!["1"; n].join(", "));
    assert!(Caps::parse(&list(gst::MAX_LIST_LEN)).is_ok());
    assert!(matches!(Caps::parse(&list(gst::MAX_LIST_LEN + 1)), Err(GstError::ListTooLong { .. })));
    // Many fields: duplicate detection must not be quadratic.
    let many = format!("video/x-raw{}", (0..25_000).map(|i| format!(", f{i}=1")).collect::<String>());
    assert!(many.len() <= gst::MAX_CAPS_LEN);
    let many = Caps::parse(&many).unwrap();
    assert_eq!(many.structures()[0].fields().len(), 25_000);
    // ... but intersecting it with itself pairs every field with every other: refused.
    assert!(matches!(many.intersect(&many), Err(GstError::IntersectionTooLarge { .. })));
}

#[test]
fn intersecting_lists_of_lists_is_bounded() {
    // A list of 4096 ones against a list of 4096 lists: the result would hold 16 million
    // values (each element of one side kept once per element of the other).
    let ones = vec!["1"; 4096].join(", ");
    let a = Caps::parse(&format!("video/x-raw, a={{ {ones} }}")).unwrap();
    let b = Caps::parse(&format!("video/x-raw, a={{ {} }}", vec![format!("{{ {ones} }}"); 2].join(", "))).unwrap();
    assert!(matches!(a.intersect(&b), Err(GstError::IntersectionTooLarge { max: gst::MAX_INTERSECT_STEPS })));
    // Real caps are far below the bound.
    let small = Caps::parse("video/x-raw, a={ 1, 2, 3 }").unwrap();
    assert!(small.intersect(&small).unwrap().is_some());
}

#[test]
fn drm_format_list_for_the_cli() {
    let set = gst::parse_drm_format_list("NV12:0x0100000000000002,AR24").unwrap();
    assert_eq!(
        set.iter().copied().collect::<Vec<_>>(),
        vec![Format::new(Fourcc::NV12, Y_TILED), Format::linear(Fourcc::ARGB8888)]
    );
    assert_eq!(gst::print_drm_format_list(&set), "NV12:0x0100000000000002,AR24");
}
