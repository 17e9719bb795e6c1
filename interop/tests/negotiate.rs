//! Negotiation (issue #3, items 7-11): implicit-modifier rules, constraint merging,
//! fallback groups, copy plans, conflict explanations and the JSON contract.

use dmabridge_interop::negotiate::*;
use dmabridge_interop::report::{human, Report};
use dmabridge_interop::{Format, FormatSet, Fourcc, Layout, Modifier, TileLayout};

const X_TILED: Modifier = Modifier::from_raw(0x0100_0000_0000_0001);
const Y_TILED: Modifier = Modifier::from_raw(0x0100_0000_0000_0002);
const SAMSUNG: Modifier = Modifier::from_raw(0x0400_0000_0000_0001);
const BGRA: Fourcc = Fourcc::from_bytes(*b"BGRA");

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

fn conflicts(parts: &[Participant]) -> Vec<Conflict> {
    match reconcile(parts) {
        Ok(a) => panic!("expected conflicts, got {a:?}"),
        Err(ReconcileError::Conflicts(Conflicts(c))) => c,
        Err(e) => panic!("expected conflicts, got {e}"),
    }
}

fn members(parts: Vec<Participant>) -> Vec<Member> {
    parts.into_iter().map(Member::from).collect()
}

fn find(c: &[Conflict], kind: ConstraintKind) -> &Conflict {
    c.iter()
        .find(|c| c.constraint == kind)
        .unwrap_or_else(|| panic!("no {kind} conflict in {c:?}"))
}

// ---- seed 000: vapostproc ! video/x-raw(memory:DMABuf) ! glupload ----

fn vapostproc() -> Participant {
    p(
        "vapostproc",
        &[
            Format::explicit(Fourcc::NV12, X_TILED),
            Format::linear(Fourcc::NV12),
            Format::linear(Fourcc::YUV420),
            Format::linear(Fourcc::YVU420),
            Format::explicit(BGRA, Y_TILED),
        ],
    )
}

#[test]
fn seed_vapostproc_to_glupload_gives_nv12_x_tiled_only() {
    // glupload's answer at runtime, from its EGL query.
    let glupload = p(
        "glupload",
        &[
            Format::explicit(Fourcc::NV12, X_TILED),
            Format::linear(BGRA),
        ],
    );
    let a = shared(&[vapostproc(), glupload]);
    assert_eq!(a.fourcc, Fourcc::NV12);
    assert_eq!(a.layout, ChainLayout::Explicit(vec![X_TILED]));

    let n = negotiate(&members(vec![
        vapostproc(),
        p(
            "glupload",
            &[
                Format::explicit(Fourcc::NV12, X_TILED),
                Format::linear(BGRA),
            ],
        ),
    ])).unwrap();
    let r = Report::new(&n);
    assert_eq!(r.exit_code(), 0);
    let json = r.to_json();
    assert!(
        json == r#"{"outcome":"shared","format":"NV12","modifiers":["0x0100000000000001"],"implicit":false,"buffers":1,"alignment":1,"groups":[{"participants":["vapostproc","glupload"],"format":"NV12","modifiers":["0x0100000000000001"],"sync":"cpu-wait","gst_caps":["video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12:0x0100000000000001"]}],"conversions":[],"conflicts":[],"sync":"cpu-wait","gst_caps":["video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12:0x0100000000000001"],"modifier_names":["I915_FORMAT_MOD_X_TILED (0x0100000000000001)"]}"#,
        "{json}"
    );
}

#[test]
fn seed_glupload_template_without_drm_format_accepts_anything() {
    // The sink template has no drm-format: "anything". vapostproc's first choice wins, with
    // every NV12 layout it lists (sorted numerically: LINEAR first).
    let a = shared(&[vapostproc(), Participant::any_format("glupload")]);
    assert_eq!(a.fourcc, Fourcc::NV12);
    assert_eq!(
        a.layout,
        ChainLayout::Explicit(vec![Modifier::LINEAR, X_TILED])
    );
}

// ---- item 8: format choice follows the first participant's preference ----

#[test]
fn first_participants_preference_wins() {
    let a = p("a", &[Format::linear(Fourcc::ARGB8888), nv12()]);
    let b = p("b", &[nv12(), Format::linear(Fourcc::ARGB8888)]);
    assert_eq!(shared(&[a.clone(), b.clone()]).fourcc, Fourcc::ARGB8888);
    assert_eq!(shared(&[b, a]).fourcc, Fourcc::NV12);
}

#[test]
fn modifier_list_is_every_common_modifier_sorted() {
    let a = p(
        "a",
        &[
            Format::explicit(Fourcc::NV12, Y_TILED),
            Format::explicit(Fourcc::NV12, X_TILED),
            nv12(),
        ],
    );
    let b = p(
        "b",
        &[
            nv12(),
            Format::explicit(Fourcc::NV12, Y_TILED),
            Format::explicit(Fourcc::NV12, X_TILED),
        ],
    );
    let c = p(
        "c",
        &[
            Format::explicit(Fourcc::NV12, X_TILED),
            Format::explicit(Fourcc::NV12, Y_TILED),
        ],
    );
    assert_eq!(
        shared(&[a, b, c]).layout,
        ChainLayout::Explicit(vec![X_TILED, Y_TILED])
    );
}

// ---- item 7: implicit modifiers ----

#[test]
fn enumeration_invalid_alone_means_implicit_only_and_in_a_list_means_also_implicit() {
    assert_eq!(
        ModifierSupport::from_wire(&[Modifier::INVALID]),
        Some(ModifierSupport::ImplicitOnly)
    );
    assert_eq!(
        ModifierSupport::from_wire(&[X_TILED, Modifier::INVALID]),
        Some(ModifierSupport::Either(vec![X_TILED]))
    );
    assert_eq!(
        ModifierSupport::from_wire(&[Modifier::LINEAR]),
        Some(ModifierSupport::ExplicitOnly(vec![Modifier::LINEAR]))
    );
    assert_eq!(ModifierSupport::from_wire(&[]), None);
    assert!(!ModifierSupport::ImplicitOnly.allows_explicit());
    assert!(!ModifierSupport::ExplicitOnly(vec![]).allows_implicit());
}

#[test]
fn allocation_request_invalid_alone_is_implicit_and_explicit_lists_never_carry_invalid() {
    let imp = AllocationRequest::implicit(Fourcc::NV12, 64, 64);
    assert_eq!(imp.wire_modifiers(), vec![Modifier::INVALID]);
    assert!(imp.allows_implicit());
    let no_list = AllocationRequest {
        fourcc: Fourcc::NV12,
        width: 64,
        height: 64,
        layouts: vec![],
    };
    assert!(
        no_list.allows_implicit(),
        "no list is the same as INVALID alone"
    );
    let exp = AllocationRequest::explicit(Fourcc::NV12, 64, 64, &[X_TILED, Modifier::INVALID]);
    assert_eq!(exp.wire_modifiers(), vec![X_TILED]);
    assert!(!exp.allows_implicit());
    // A reconciled explicit allocation asks explicitly; an implicit one asks with no modifier.
    let a = shared(&[
        vapostproc(),
        p("gl", &[Format::explicit(Fourcc::NV12, X_TILED)]),
    ]);
    assert_eq!(a.request(16, 16).wire_modifiers(), vec![X_TILED]);
}

#[test]
fn post_allocation_query_may_return_invalid_only_if_it_was_requested() {
    let explicit = [
        Layout::Explicit(X_TILED),
        Layout::Explicit(Modifier::LINEAR),
    ];
    assert_eq!(
        upgrade_or_validate(&explicit, Layout::Implicit),
        Err(ImplicitRuleError::ImplicitNotRequested)
    );
    assert_eq!(
        upgrade_or_validate(&explicit, Layout::Explicit(Y_TILED)),
        Err(ImplicitRuleError::NotInList(Y_TILED))
    );
    assert_eq!(
        upgrade_or_validate(&explicit, Layout::Explicit(X_TILED)),
        Ok(Layout::Explicit(X_TILED))
    );
    let mixed = [Layout::Explicit(X_TILED), Layout::Implicit];
    assert_eq!(
        upgrade_or_validate(&mixed, Layout::Implicit),
        Ok(Layout::Implicit)
    );
    assert_eq!(
        upgrade_or_validate(&[], Layout::Implicit),
        Ok(Layout::Implicit)
    );
}

#[test]
fn implicit_allocation_is_upgraded_when_a_valid_modifier_is_reported() {
    let req = AllocationRequest::implicit(Fourcc::NV12, 64, 64);
    assert_eq!(
        upgrade_or_validate(&req.layouts, Layout::Explicit(Y_TILED)),
        Ok(Layout::Explicit(Y_TILED))
    );
    let res = req.accept(Layout::Explicit(Y_TILED)).unwrap();
    assert_eq!(res.how, AllocatedAs::UpgradedFromImplicit);
    assert_eq!(res.layout, Layout::Explicit(Y_TILED));
    // Upgraded: explicit importers may use the reported modifier, implicit ones still work.
    assert_eq!(res.check_import(Layout::Explicit(Y_TILED)), Ok(()));
    assert_eq!(res.check_import(Layout::Implicit), Ok(()));
    assert!(res.check_import(Layout::Explicit(X_TILED)).is_err());
}

#[test]
fn import_with_invalid_only_when_not_allocated_explicitly() {
    let exp = AllocationRequest::explicit(Fourcc::NV12, 64, 64, &[X_TILED])
        .accept(Layout::Explicit(X_TILED))
        .unwrap();
    assert_eq!(exp.how, AllocatedAs::Explicit);
    assert_eq!(
        exp.check_import(Layout::Implicit),
        Err(ImplicitRuleError::ImplicitImportOfExplicitBuffer(X_TILED))
    );
    assert_eq!(exp.check_import(Layout::Explicit(X_TILED)), Ok(()));

    let imp = AllocationRequest::implicit(Fourcc::NV12, 64, 64)
        .accept(Layout::Implicit)
        .unwrap();
    assert_eq!(imp.how, AllocatedAs::Implicit);
    assert_eq!(imp.check_import(Layout::Implicit), Ok(()));
    assert_eq!(
        imp.check_import(Layout::Explicit(X_TILED)),
        Err(ImplicitRuleError::ExplicitImportOfImplicitBuffer(X_TILED))
    );
}

#[test]
fn implicit_only_and_explicit_only_never_share_a_buffer() {
    let media = p("media", &[Format::implicit(Fourcc::NV12)]);
    let gpu = p("gpu", &[Format::explicit(Fourcc::NV12, X_TILED), nv12()]);
    let c = conflicts(&[media.clone(), gpu.clone()]);
    let c = find(&c, ConstraintKind::Implicit);
    assert_eq!(c.participants, vec!["media", "gpu"]);
    assert!(c.fix.contains("allocate implicitly"), "{}", c.fix);
    assert!(
        c.fix.contains("copy between {media} and {gpu}"),
        "{}",
        c.fix
    );
    // Either order of preference: still a conflict, still both named.
    let c = conflicts(&[gpu, media]);
    assert_eq!(
        find(&c, ConstraintKind::Implicit).participants,
        vec!["media", "gpu"]
    );
}

#[test]
fn a_party_that_also_accepts_implicit_joins_an_implicit_chain() {
    let media = p("media", &[Format::implicit(Fourcc::NV12)]);
    let gpu = p(
        "gpu",
        &[
            Format::explicit(Fourcc::NV12, X_TILED),
            Format::implicit(Fourcc::NV12),
        ],
    );
    let n = negotiate(&members(vec![gpu, media])).unwrap();
    let Outcome::Shared(a) = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(a.layout, ChainLayout::Implicit);
    assert_eq!(a.request(8, 8).wire_modifiers(), vec![Modifier::INVALID]);
    let json = Report::new(&n).to_json();
    assert!(json.contains(r#""modifiers":[],"implicit":true"#), "{json}");
}

#[test]
fn explicit_wins_when_both_sides_also_accept_implicit() {
    let a = p(
        "a",
        &[
            Format::implicit(Fourcc::NV12),
            Format::explicit(Fourcc::NV12, X_TILED),
        ],
    );
    let b = p(
        "b",
        &[
            Format::explicit(Fourcc::NV12, X_TILED),
            Format::implicit(Fourcc::NV12),
        ],
    );
    assert_eq!(shared(&[a, b]).layout, ChainLayout::Explicit(vec![X_TILED]));
}

// ---- item 8: merge rules ----

#[test]
fn min_buffers_are_summed() {
    let a = p("a", &[nv12()]).constrain(|c| c.min_buffers = 2);
    let b = p("b", &[nv12()]).constrain(|c| c.min_buffers = 3);
    assert_eq!(shared(&[a.clone(), b]).constraints.buffers, 5);
    assert_eq!(shared(&[a, p("c", &[nv12()])]).constraints.buffers, 2);
    assert_eq!(
        shared(&[p("d", &[nv12()])]).constraints.buffers,
        1,
        "a collection has at least one buffer"
    );
}

#[test]
fn alignments_merge_by_maximum() {
    let a = p("a", &[nv12()]).constrain(|c| {
        c.align = 4096;
        c.stride_align = 64;
    });
    let b = p("b", &[nv12()]).constrain(|c| {
        c.align = 256;
        c.stride_align = 256;
    });
    let r = shared(&[a, b]);
    assert_eq!((r.constraints.align, r.constraints.stride_align), (4096, 256));
}

#[test]
fn an_alignment_that_is_not_a_power_of_two_is_its_owners_conflict() {
    let a = p("a", &[nv12()]).constrain(|c| c.align = 4096);
    let b = p("b", &[nv12()]).constrain(|c| c.align = 100);
    let c = conflicts(&[a.clone(), b]);
    let al = find(&c, ConstraintKind::Align);
    assert_eq!(al.participants, vec!["b"]);
    assert_eq!(al.detail, "100 is not a power of two");
    assert!(al.fix.contains("128"), "{}", al.fix);

    let z = p("z", &[nv12()]).constrain(|c| c.stride_align = 0);
    let c = conflicts(&[a, z]);
    assert_eq!(
        find(&c, ConstraintKind::StrideAlign).participants,
        vec!["z"]
    );
    // Not a conflict a copy can fix: the outcome is impossible.
    let n = negotiate(&members(vec![
        p("a", &[nv12()]),
        p("b", &[nv12()]).constrain(|c| c.align = 100),
    ])).unwrap();
    assert!(matches!(n.outcome, Outcome::Impossible(_)));
    let r = Report::new(&n);
    assert_eq!(r.exit_code(), 2);
    assert!(r.to_json().contains(
        r#"{"participants":["b"],"constraint":"align","detail":"100 is not a power of two""#
    ));
}

#[test]
fn extents_intersect_and_an_empty_intersection_names_both_ends() {
    let a = p("a", &[nv12()]).constrain(|c| c.width = ExtentRange::new(16, 4096));
    let b = p("b", &[nv12()]).constrain(|c| {
        c.width = ExtentRange::new(64, 8192);
        c.height = ExtentRange::new(1, 1080);
    });
    let r = shared(&[a.clone(), b]);
    assert_eq!(r.width, ExtentRange::new(64, 4096));
    assert_eq!(r.height, ExtentRange::new(1, 1080));

    let big = p("big", &[nv12()]).constrain(|c| c.width = ExtentRange::new(8192, 16384));
    let any = p("any", &[nv12()]);
    let c = conflicts(&[a, any, big]);
    let w = find(&c, ConstraintKind::Width);
    assert_eq!(w.participants, vec!["big", "a"]);
    assert!(
        w.detail.contains(">= 8192") && w.detail.contains("<= 4096"),
        "{}",
        w.detail
    );

    let own = p("own", &[nv12()]).constrain(|c| c.height = ExtentRange::new(100, 10));
    assert_eq!(
        find(&conflicts(&[own]), ConstraintKind::Height).participants,
        vec!["own"]
    );
}

#[test]
fn cpu_access_is_a_union_and_read_only_parties_cannot_write() {
    let r = p("r", &[nv12()]).constrain(|c| c.cpu_access = CpuAccess::Read);
    let w = p("w", &[nv12()]).constrain(|c| c.cpu_access = CpuAccess::Write);
    assert_eq!(shared(&[r.clone(), w]).constraints.cpu_access, CpuAccess::ReadWrite);
    assert_eq!(
        shared(&[r.clone(), p("n", &[nv12()])]).constraints.cpu_access,
        CpuAccess::Read
    );

    let ro = p("ro", &[nv12()]).constrain(|c| {
        c.read_only = true;
        c.cpu_access = CpuAccess::ReadWrite;
    });
    let c = conflicts(&[r, ro]);
    assert_eq!(find(&c, ConstraintKind::ReadOnly).participants, vec!["ro"]);
}

#[test]
fn domains_must_agree_and_device_local_memory_is_not_for_the_cpu() {
    let dev = p("gpu", &[nv12()]).constrain(|c| c.domain = Domain::DeviceLocal);
    let any = p("any", &[nv12()]);
    assert_eq!(shared(&[dev.clone(), any]).constraints.domain, Domain::DeviceLocal);

    let sys = p("cam", &[nv12()]).constrain(|c| c.domain = Domain::System);
    let c = conflicts(&[sys.clone(), dev.clone()]);
    let d = find(&c, ConstraintKind::Domain);
    assert_eq!(d.participants, vec!["gpu", "cam"]);
    assert!(d.fix.contains("copy between {gpu} and {cam}"), "{}", d.fix);

    let cpu = p("cpu", &[nv12()]).constrain(|c| c.cpu_access = CpuAccess::Read);
    let c = conflicts(&[dev, cpu]);
    assert_eq!(
        find(&c, ConstraintKind::CpuAccess).participants,
        vec!["gpu", "cpu"]
    );
}

#[test]
fn someone_must_write_and_the_writer_is_noted() {
    let ro = |n: &str| p(n, &[nv12()]).constrain(|c| c.read_only = true);
    let c = conflicts(&[ro("a"), ro("b")]);
    let c = find(&c, ConstraintKind::ReadOnly);
    assert_eq!(c.participants, vec!["a", "b"]);
    assert!(c.detail.contains("nobody produces"));
    let a = shared(&[ro("a"), p("dec", &[nv12()]), ro("b")]);
    assert_eq!(a.writers, vec!["dec"]);

    let renders = ro("r").with_usage(Usage::RENDER | Usage::SAMPLE);
    let c = conflicts(&[p("w", &[nv12()]), renders]);
    assert_eq!(find(&c, ConstraintKind::ReadOnly).participants, vec!["r"]);
}

// ---- conflict explanations ----

#[test]
fn a_fourcc_nobody_else_has_names_its_owner_and_the_requirement_to_drop() {
    let cam = p("cam", &[nv12(), Format::linear(Fourcc::ARGB8888)]);
    let gpu = p("gpu", &[Format::linear(Fourcc::ARGB8888), nv12()]);
    let encoder = p("encoder", &[Format::linear(Fourcc::P010)]);
    let c = conflicts(&[cam, gpu, encoder]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].participants, vec!["encoder"]);
    assert_eq!(c[0].constraint, ConstraintKind::Format);
    assert!(
        c[0].fix.starts_with("drop encoder's P010 requirement"),
        "{}",
        c[0].fix
    );
    assert!(
        c[0].fix.contains("copy between {encoder} and {cam, gpu}"),
        "{}",
        c[0].fix
    );
}

#[test]
fn the_smallest_set_of_blockers_is_named() {
    // NV12 is blocked by b and c; AR24 only by d. Removing d leaves a common format.
    let a = p("a", &[nv12(), Format::linear(Fourcc::ARGB8888)]);
    let b = p("b", &[Format::linear(Fourcc::ARGB8888)]);
    let c = p("c", &[Format::linear(Fourcc::ARGB8888)]);
    let d = p("d", &[nv12()]);
    let got = conflicts(&[a, b, c, d]);
    let names: Vec<&str> = got
        .iter()
        .flat_map(|c| c.participants.iter().map(String::as_str))
        .collect();
    assert_eq!(names, vec!["d"]);
}

#[test]
fn a_common_fourcc_without_a_common_modifier_is_a_modifier_conflict() {
    let a = p("a", &[Format::explicit(Fourcc::NV12, X_TILED)]);
    let b = p("b", &[Format::explicit(Fourcc::NV12, Y_TILED)]);
    let c = conflicts(&[a, b]);
    assert_eq!(c[0].constraint, ConstraintKind::Modifier);
    assert_eq!(c[0].participants, vec!["b"]);
    assert!(c[0].detail.contains("I915_Y_TILED"), "{}", c[0].detail);
}

// ---- item 9: fallback groups ----

fn failing(name: &str) -> Participant {
    p(name, &[Format::linear(Fourcc::P010)])
}

#[test]
fn fallback_group_first_child_fails_second_wins() {
    let display = p("display", &[nv12()]);
    let group = FallbackGroup::new(
        "enc",
        [
            Member::from(failing("enc-p010")),
            Member::from(p("enc-nv12", &[nv12()]).constrain(|c| c.min_buffers = 4)),
        ],
    );
    let n = negotiate(&[display.into(), group.into()]).unwrap();
    let Outcome::Shared(a) = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(a.participants, vec!["display", "enc-nv12"]);
    assert_eq!(a.constraints.buffers, 4);
    assert_eq!(n.combinations_tried, 2);
    assert!(!n.cap_hit);
}

#[test]
fn fallback_group_prefers_its_first_child() {
    let display = p("display", &[nv12(), Format::linear(Fourcc::ARGB8888)]);
    let group = FallbackGroup::new(
        "g",
        [
            Member::from(p("first", &[Format::linear(Fourcc::ARGB8888)])),
            Member::from(p("second", &[nv12()])),
        ],
    );
    let n = negotiate(&[display.into(), group.into()]).unwrap();
    let Outcome::Shared(a) = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(a.participants, vec!["display", "first"]);
    assert_eq!(n.combinations_tried, 1);
}

#[test]
fn nested_groups_are_expanded_in_order() {
    let inner = FallbackGroup::new(
        "inner",
        [
            Member::from(failing("i1")),
            Member::from(p("i2", &[nv12()])),
        ],
    );
    let outer = FallbackGroup::new(
        "outer",
        [Member::from(inner), Member::from(p("o2", &[nv12()]))],
    );
    let n = negotiate(&[p("sink", &[nv12()]).into(), outer.into()]).unwrap();
    assert_eq!(n.participants, vec!["sink", "i2"]);
    assert_eq!(
        combinations(&[Member::from(FallbackGroup::new(
            "x",
            [Member::from(failing("a")), Member::from(failing("b"))]
        ))]),
        2
    );
}

#[test]
fn fallback_combinations_are_capped_and_the_cap_is_reported() {
    // 3 groups of 7 failing children = 343 combinations, more than the cap of 256.
    let group = |g: usize| {
        FallbackGroup::new(
            format!("g{g}"),
            (0..7).map(|i| Member::from(failing(&format!("g{g}c{i}")))),
        )
    };
    let ms: Vec<Member> = vec![
        p("sink", &[nv12()]).into(),
        group(0).into(),
        group(1).into(),
        group(2).into(),
    ];
    assert_eq!(combinations(&ms), 343);
    let n = negotiate_with(
        &ms,
        NegotiateOptions {
            allow_copy: false,
            ..Default::default()
        },
    ).unwrap();
    assert!(n.cap_hit);
    assert_eq!(n.combinations_tried, MAX_COMBINATIONS);
    let Outcome::Impossible(c) = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    let cap = find(c, ConstraintKind::FallbackGroups);
    assert!(cap.detail.contains("tried 256 of 343"), "{}", cap.detail);

    // A success beyond a smaller cap is not reached.
    let late = FallbackGroup::new(
        "late",
        [
            Member::from(failing("x")),
            Member::from(failing("y")),
            Member::from(p("z", &[nv12()])),
        ],
    );
    let ms = vec![Member::from(p("sink", &[nv12()])), late.into()];
    let n = negotiate_with(
        &ms,
        NegotiateOptions {
            max_combinations: 2,
            allow_copy: false,
        },
    ).unwrap();
    assert!(n.cap_hit && matches!(n.outcome, Outcome::Impossible(_)));
    let n = negotiate_with(
        &ms,
        NegotiateOptions {
            max_combinations: 3,
            allow_copy: false,
        },
    ).unwrap();
    assert!(!n.cap_hit && matches!(n.outcome, Outcome::Shared(_)));
}

#[test]
fn an_empty_group_is_impossible() {
    let n = negotiate(&[
        p("a", &[nv12()]).into(),
        FallbackGroup::new("empty", []).into(),
    ]).unwrap();
    let Outcome::Impossible(c) = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(c[0].constraint, ConstraintKind::FallbackGroups);
}

// ---- item 10: copy plans ----

fn at_1080p(p: Participant) -> Participant {
    p.constrain(|c| {
        c.width = ExtentRange::exactly(1920);
        c.height = ExtentRange::exactly(1080);
    })
}

const NV12_1080P: u64 = 1920 * 1080 * 3 / 2;

#[test]
fn samsung_tiled_decoder_to_linear_display_is_a_detile_copy() {
    let dec = at_1080p(p("dec", &[Format::explicit(Fourcc::NV12, SAMSUNG)]));
    let display =
        p("display", &[Format::linear(Fourcc::ARGB8888), nv12()]).constrain(|c| c.read_only = true);
    let n = negotiate(&members(vec![dec, display])).unwrap();
    let Outcome::Copy { plan, conflicts } = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(plan.groups.len(), 2);
    assert_eq!(plan.groups[0].allocation.participants, vec!["dec"]);
    assert_eq!(
        plan.groups[0].format,
        Format::explicit(Fourcc::NV12, SAMSUNG)
    );
    assert_eq!(plan.groups[1].format, nv12());
    assert_eq!(plan.conversions.len(), 1);
    assert_eq!(
        plan.conversions[0].kind.to_string(),
        "detile samsung-64x32 -> linear"
    );
    let tiled =
        dmabridge_interop::tiling::tiled_size(TileLayout::Samsung64x32, Fourcc::NV12, 1920, 1080)
            .unwrap()
            .size;
    assert!(tiled > NV12_1080P, "tiles pad 1080 rows to 1088");
    assert_eq!(plan.bytes_per_frame, tiled + NV12_1080P);
    assert_eq!(plan.conversions[0].bytes_per_frame, tiled + NV12_1080P);
    assert!(
        !conflicts.is_empty(),
        "a copy plan says why one buffer was not enough"
    );

    let r = Report::new(&n);
    assert_eq!(r.exit_code(), 0);
    let json = r.to_json();
    assert!(json.starts_with(r#"{"outcome":"copy","format":"NV12","modifiers":["0x0400000000000001"],"implicit":false,"buffers":1,"alignment":1,"groups":[{"participants":["dec"],"format":"NV12","modifiers":["0x0400000000000001"],"sync":"cpu-wait","gst_caps":["video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12:0x0400000000000001"]},{"participants":["display"],"format":"NV12","modifiers":["0x0000000000000000"],"sync":"cpu-wait","gst_caps":["video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=NV12","video/x-raw(memory:DMABuf),format=NV12"]}],"conversions":[{"from_group":0,"to_group":1,"kind":"detile samsung-64x32 -> linear","steps":["detile samsung-64x32 -> linear"],"convert":"--format NV12 --from samsung-64x32 --to linear --to-format NV12"}],"conflicts":[{"#), "{json}");
}

#[test]
fn the_plan_with_the_fewest_bytes_wins() {
    // A linear NV12 producer; the display prefers RGBA8 but also scans out Y-tiled NV12.
    // Tiling NV12 moves 3 bytes per pixel, converting to RGBA8 5.5: tiling wins.
    let dec = at_1080p(p("dec", &[nv12()]));
    let display = p(
        "display",
        &[
            Format::linear(Fourcc::ABGR8888),
            Format::explicit(Fourcc::NV12, Y_TILED),
        ],
    )
    .constrain(|c| c.read_only = true);
    let n = negotiate(&members(vec![dec.clone(), display])).unwrap();
    let Outcome::Copy { plan, .. } = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(
        plan.conversions[0].kind.to_string(),
        "tile linear -> i915-y"
    );
    let tiled = dmabridge_interop::tiling::tiled_size(TileLayout::I915Y, Fourcc::NV12, 1920, 1080)
        .unwrap()
        .size;
    assert_eq!(plan.bytes_per_frame, NV12_1080P + tiled);
    assert!(tiled < 1920 * 1080 * 4);

    // Only RGBA8: then the colour conversion is the way.
    let rgba = p("display", &[Format::linear(Fourcc::ABGR8888)]).constrain(|c| c.read_only = true);
    let n = negotiate(&members(vec![dec, rgba])).unwrap();
    let Outcome::Copy { plan, .. } = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(
        plan.conversions[0].kind.to_string(),
        "yuv->rgb NV12 -> AB24"
    );
    assert_eq!(plan.bytes_per_frame, NV12_1080P + 1920 * 1080 * 4);
}

#[test]
fn participants_that_can_share_stay_together() {
    let dec = at_1080p(p("dec", &[Format::explicit(Fourcc::NV12, SAMSUNG)]));
    let vpu = p("vpu", &[Format::explicit(Fourcc::NV12, SAMSUNG), nv12()])
        .constrain(|c| c.read_only = true);
    let display = p("display", &[nv12()]).constrain(|c| c.read_only = true);
    let enc = p("enc", &[nv12()]).constrain(|c| c.read_only = true);
    let n = negotiate(&members(vec![dec, vpu, display, enc])).unwrap();
    let Outcome::Copy { plan, .. } = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(plan.groups.len(), 2, "{plan:?}");
    assert_eq!(plan.conversions.len(), 1);
    assert_eq!(plan.groups[0].allocation.participants[0], "dec");
    let sinks = &plan.groups[1].allocation.participants;
    assert!(
        sinks.contains(&"display".to_owned()) && sinks.contains(&"enc".to_owned()),
        "{sinks:?}"
    );
}

#[test]
fn a_domain_split_is_a_linear_copy() {
    let gpu = at_1080p(p("gpu", &[nv12()]).constrain(|c| c.domain = Domain::DeviceLocal));
    let cpu = p("cpu", &[nv12()]).constrain(|c| {
        c.cpu_access = CpuAccess::Read;
        c.read_only = true;
    });
    let n = negotiate(&members(vec![gpu, cpu])).unwrap();
    let Outcome::Copy { plan, conflicts } = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(plan.conversions[0].kind, ConversionKind::CopyLinear);
    assert_eq!(conflicts[0].constraint, ConstraintKind::CpuAccess);
}

// ---- device copies: a GPU joins layouts only its driver addresses ----

const GFX10_TILED: Modifier = Modifier::from_raw(0x0200_0000_0000_1b03);
const GFX11_TILED: Modifier = Modifier::from_raw(0x0200_0000_0000_1b04);

fn ar24(m: Modifier) -> Format {
    Format::explicit(Fourcc::ARGB8888, m)
}

/// The PRIME laptop where no layout is shared: a discrete GPU renders its own tiling or
/// LINEAR, the integrated GPU samples LINEAR and copies into its own tiling, and the display
/// scans out only that tiling.
fn prime(igpu_copies: bool) -> Vec<Participant> {
    let dgpu = at_1080p(p("dgpu", &[ar24(GFX10_TILED), ar24(Modifier::LINEAR)]));
    let copy = DeviceCopy { reads: set(&[ar24(GFX11_TILED), ar24(Modifier::LINEAR)]), writes: set(&[ar24(GFX11_TILED), ar24(Modifier::LINEAR)]) };
    let igpu = p("igpu", &[ar24(GFX11_TILED), ar24(Modifier::LINEAR)])
        .constrain(|c| c.read_only = true)
        .with_device("AMD Radeon 780M")
        .with_copy(igpu_copies.then_some(copy));
    let display = p("display", &[ar24(GFX11_TILED)]).constrain(|c| c.read_only = true);
    vec![dgpu, igpu, display]
}

#[test]
fn a_gpu_copy_joins_layouts_only_its_driver_addresses() {
    let n = negotiate(&members(prime(true))).unwrap();
    let Outcome::Copy { plan, conflicts } = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(conflicts[0].constraint, ConstraintKind::Modifier, "{conflicts:?}");
    let groups: Vec<(Vec<String>, Format)> = plan.groups.iter().map(|g| (g.allocation.participants.clone(), g.format)).collect();
    assert_eq!(groups, [(vec!["dgpu".to_owned(), "igpu".to_owned()], ar24(Modifier::LINEAR)), (vec!["display".to_owned()], ar24(GFX11_TILED))]);
    let c = &plan.conversions[0];
    assert_eq!(c.kind, ConversionKind::DeviceCopy { fourcc: Fourcc::ARGB8888, from: Modifier::LINEAR, to: GFX11_TILED });
    assert_eq!(c.copier, Some(Copier { participant: "igpu".into(), device: Some("AMD Radeon 780M".into()) }));
    // Costed as two packed 1080p frames (the driver's padding is unknown here).
    assert_eq!(c.bytes_per_frame, 2 * 1920 * 1080 * 4);
    assert_eq!(c.plan.steps.iter().map(|s| s.op).collect::<Vec<_>>(), [StepOp::DeviceCopy]);
    // The converter does not run it, and says so; the plan file carries it to the GPU.
    assert!(matches!(c.plan.check(), Err(PlanError::OnDevice(_))));
    let file = PlanFile::of(plan);
    assert_eq!(file.conversions[0].runs_on.as_deref(), Some("igpu (AMD Radeon 780M)"));
    assert_eq!(PlanFile::parse(&file.to_json()).unwrap(), file);
    // The report names the copier and offers no `dmabridge convert` line for it.
    let r = Report::new(&n);
    assert_eq!(r.conversions[0].convert, None);
    assert_eq!(r.conversions[0].runs_on.as_deref(), Some("igpu (AMD Radeon 780M) with vkCmdCopyImage"));
    assert!(human(&n).contains("copied by igpu (AMD Radeon 780M): vkCmdCopyImage"), "{}", human(&n));
    // Without the GPU's copy the same parties have no plan.
    let n = negotiate(&members(prime(false))).unwrap();
    assert!(matches!(n.outcome, Outcome::Impossible(_)), "{:?}", n.outcome);
}

/// The PRIME laptop with `modifiers` of a driver's own tilings of each of `fourccs` (AR24
/// first) besides LINEAR, in both GPUs' lists: the display takes one tiling neither GPU
/// renders, which the integrated GPU's copy writes.
fn prime_with_layouts(fourccs: usize, modifiers: u64) -> Vec<Participant> {
    let fourcc = |i: usize| match i {
        0 => Fourcc::ARGB8888,
        _ => Fourcc::from_bytes([b'Q', b'0' + (i / 100 % 10) as u8, b'0' + (i / 10 % 10) as u8, b'0' + (i % 10) as u8]),
    };
    let all: Vec<Format> = std::iter::once(ar24(Modifier::LINEAR))
        .chain((0..fourccs).flat_map(|f| (1..=modifiers).map(move |m| Format::explicit(fourcc(f), Modifier::from_vendor(0x02, m << 20)))))
        .collect();
    let scanout = ar24(GFX11_TILED);
    let dgpu = at_1080p(p("dgpu", &all));
    let mut igpu_list = all.clone();
    igpu_list.push(scanout);
    let copy = DeviceCopy { reads: set(&igpu_list), writes: set(&igpu_list) };
    let igpu = p("igpu", &igpu_list).constrain(|c| c.read_only = true).with_copy(Some(copy));
    let display = p("display", &[scanout]).constrain(|c| c.read_only = true);
    vec![dgpu, igpu, display]
}

#[test]
fn a_copy_plan_over_the_longest_driver_lists_is_found_without_comparing_every_pair() {
    use dmabridge_interop::peers::probe_report::{MAX_FORMATS, MAX_MODIFIERS};
    // The longest saved probe (every format with every modifier it may list), and one fourcc
    // with 16384 layouts, as a live driver's list could be. A search comparing every pair of
    // one fourcc's layouts took 6.5 s at 4096 (release) and over a minute at 16384; the bench
    // `copy plan` measures the growth.
    for (fourccs, modifiers) in [(MAX_FORMATS, MAX_MODIFIERS as u64 - 1), (1, 16_384)] {
        let n = negotiate(&members(prime_with_layouts(fourccs, modifiers))).unwrap();
        let Outcome::Copy { plan, .. } = &n.outcome else {
            panic!("{:?}", n.outcome)
        };
        let c = &plan.conversions[0];
        assert_eq!(c.kind, ConversionKind::DeviceCopy { fourcc: Fourcc::ARGB8888, from: Modifier::LINEAR, to: GFX11_TILED });
        assert_eq!(plan.groups[1].format, ar24(GFX11_TILED));
    }
}

#[test]
fn an_implicit_only_device_is_fed_by_its_copy_import_into_its_own_image() {
    // A GPU without the modifier extension samples AR24 (implicit only) and imports a LINEAR
    // dma-buf by copy; a decoder writes LINEAR only.
    let gpu = p("gpu", &[Format::implicit(Fourcc::ARGB8888)]).constrain(|c| c.read_only = true).with_copy(DeviceCopy::into_own_images([Fourcc::ARGB8888]));
    let dec = at_1080p(p("dec", &[ar24(Modifier::LINEAR)]));
    let n = negotiate(&members(vec![dec.clone(), gpu.clone()])).unwrap();
    let Outcome::Copy { plan, .. } = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(plan.groups[1].format, Format::implicit(Fourcc::ARGB8888));
    let c = &plan.conversions[0];
    assert_eq!(c.kind, ConversionKind::DeviceCopy { fourcc: Fourcc::ARGB8888, from: Modifier::LINEAR, to: Modifier::INVALID });
    assert_eq!(c.kind.device_command(), Some("vkCmdCopyBufferToImage"));
    assert_eq!(c.copier.as_ref().map(|c| c.participant.as_str()), Some("gpu"));
    let file = PlanFile::of(plan);
    assert_eq!(PlanFile::parse(&file.to_json()).unwrap(), file, "a plan file carries the copy into the GPU's own image");
    // Its own image is no one else's: a second implicit-only party with no copy of its own
    // cannot join that group, and nothing else feeds it.
    let compositor = p("compositor", &[Format::implicit(Fourcc::ARGB8888)]).constrain(|c| c.read_only = true);
    let n = negotiate(&members(vec![dec.clone(), gpu, compositor])).unwrap();
    assert!(matches!(n.outcome, Outcome::Impossible(_)), "{:?}", n.outcome);
    // Without the copy import there is nothing to plan.
    let bare = p("gpu", &[Format::implicit(Fourcc::ARGB8888)]).constrain(|c| c.read_only = true);
    assert!(matches!(negotiate(&members(vec![dec, bare])).unwrap().outcome, Outcome::Impossible(_)));
    // A copy reads an explicit layout: from an implicit one it is refused.
    assert!(matches!(ConversionPlan::device_copy(Format::implicit(Fourcc::ARGB8888), ar24(Modifier::LINEAR), (64, 32)), Err(PlanError::NoLayout(_))));
    let backwards = file.to_json().replace("\"0x0000000000000000\"", "\"0x00ffffffffffffff\"");
    assert!(PlanFile::parse(&backwards).is_err(), "{backwards}");
}

#[test]
fn a_converter_step_is_taken_before_a_gpu_copy_of_the_same_cost() {
    // The domain split of a_domain_split_is_a_linear_copy, with a GPU that could copy too.
    let copy = DeviceCopy { reads: set(&[nv12()]), writes: set(&[nv12()]) };
    let gpu = at_1080p(p("gpu", &[nv12()]).constrain(|c| c.domain = Domain::DeviceLocal)).with_copy(Some(copy));
    let cpu = p("cpu", &[nv12()]).constrain(|c| {
        c.cpu_access = CpuAccess::Read;
        c.read_only = true;
    });
    let n = negotiate(&members(vec![gpu, cpu])).unwrap();
    let Outcome::Copy { plan, .. } = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!((plan.conversions[0].kind, &plan.conversions[0].copier), (ConversionKind::CopyLinear, &None));
}

#[test]
fn a_device_copy_in_a_plan_file_is_one_step_between_layouts_of_one_fourcc() {
    let plan = ConversionPlan::device_copy(ar24(Modifier::LINEAR), ar24(GFX11_TILED), (64, 32)).unwrap();
    let file = PlanFile { dmabridge_plan: PLAN_FILE_VERSION, conversions: vec![PlannedConversion { from_group: 0, to_group: 1, runs_on: None, plan: plan.clone() }] };
    assert_eq!(PlanFile::parse(&file.to_json()).unwrap(), file);
    // A fourcc change, an odd 4:2:0 extent, and a second step are refused, named.
    let recolour = file.to_json().replace("\"AR24\"", "\"XR24\"").replacen("\"XR24\"", "\"AR24\"", 1);
    assert!(matches!(PlanFile::parse(&recolour), Err(PlanFileError::Plan { index: 0, source: PlanError::DeviceCopy(_) | PlanError::Broken { .. } })), "{recolour}");
    let nv12_plan = ConversionPlan::device_copy(Format::linear(Fourcc::NV12), Format::explicit(Fourcc::NV12, GFX11_TILED), (64, 32)).unwrap();
    assert!(matches!(nv12_plan.at_extent(63, 31).validate(), Err(PlanError::DeviceCopy(_))));
    let mut twice = plan.clone();
    twice.steps.push(plan.steps[0]);
    assert!(matches!(twice.validate(), Err(PlanError::DeviceCopy(_))));
    assert!(matches!(ConversionPlan::device_copy(Format::implicit(Fourcc::ARGB8888), ar24(GFX11_TILED), (64, 32)), Err(PlanError::NoLayout(_))));
}

#[test]
fn no_conversion_between_the_groups_is_impossible() {
    let a = p("a", &[nv12()]);
    let b = p("b", &[Format::linear(Fourcc::YUYV)]);
    let n = negotiate(&members(vec![a, b])).unwrap();
    let Outcome::Impossible(c) = &n.outcome else {
        panic!("{:?}", n.outcome)
    };
    assert_eq!(c[0].constraint, ConstraintKind::Format);
    assert_eq!(c.last().map(|c| c.constraint), Some(ConstraintKind::Copy));
    let r = Report::new(&n);
    assert_eq!(r.exit_code(), 2);
    assert!(r.to_json().starts_with(r#"{"outcome":"impossible","format":null,"modifiers":[],"implicit":false,"buffers":null,"alignment":null,"groups":[],"conversions":[],"conflicts":[{"participants":["b"]"#));
}

#[test]
fn implicit_layouts_are_never_converted() {
    let media = p("media", &[Format::implicit(Fourcc::NV12)]);
    let gpu = p("gpu", &[nv12()]).constrain(|c| c.read_only = true);
    let n = negotiate(&members(vec![media, gpu])).unwrap();
    assert!(
        matches!(n.outcome, Outcome::Impossible(_)),
        "{:?}",
        n.outcome
    );
}

#[test]
fn conversion_kinds_are_the_ones_copy_fallback_provides() {
    let k = |a: Format, b: Format| ConversionKind::between(a, b).map(|k| k.to_string());
    assert_eq!(
        k(Format::explicit(Fourcc::NV12, SAMSUNG), nv12()).as_deref(),
        Some("detile samsung-64x32 -> linear")
    );
    assert_eq!(
        k(nv12(), Format::explicit(Fourcc::NV12, SAMSUNG)).as_deref(),
        Some("tile linear -> samsung-64x32")
    );
    assert_eq!(k(nv12(), nv12()).as_deref(), Some("copy linear"));
    assert_eq!(
        k(
            Format::linear(Fourcc::P010),
            Format::linear(Fourcc::ABGR8888)
        )
        .as_deref(),
        Some("yuv->rgb P010 -> AB24")
    );
    assert_eq!(
        k(Format::linear(Fourcc::ABGR8888), nv12()).as_deref(),
        Some("rgb->yuv AB24 -> NV12")
    );
    // Chains: tiled YUV -> RGB in one fused pass, tiled -> tiled through linear, RGB ->
    // tiled YUV; and every RGB byte order.
    assert_eq!(
        k(
            Format::explicit(Fourcc::NV12, SAMSUNG),
            Format::linear(Fourcc::XRGB8888)
        )
        .as_deref(),
        Some("detile+yuv->rgb samsung-64x32 NV12 -> XR24 (fused)")
    );
    assert_eq!(
        k(
            Format::explicit(Fourcc::NV12, SAMSUNG),
            Format::explicit(Fourcc::NV12, Y_TILED)
        )
        .as_deref(),
        Some("detile samsung-64x32 -> linear, then tile linear -> i915-y")
    );
    assert_eq!(
        k(Format::linear(Fourcc::BGRX8888), Format::explicit(Fourcc::NV12, SAMSUNG)).as_deref(),
        Some("rgb->yuv BX24 -> NV12, then tile linear -> samsung-64x32")
    );
    assert_eq!(
        k(Format::linear(Fourcc::P010), Format::linear(Fourcc::XRGB2101010)).as_deref(),
        Some("yuv->rgb P010 -> XR30")
    );
    // An unconvertible modifier, implicit, or a pair colour conversion lacks: no.
    assert_eq!(k(Format::linear(Fourcc::XRGB2101010), nv12()), None);
    assert_eq!(
        k(
            Format::explicit(Fourcc::NV12, Modifier::from_raw(0x0100_0000_0000_0003)),
            nv12()
        ),
        None
    );
    assert_eq!(k(Format::implicit(Fourcc::NV12), nv12()), None);
    assert_eq!(
        k(
            Format::linear(Fourcc::YUYV),
            Format::linear(Fourcc::ABGR8888)
        ),
        None
    );
    // Decoder layouts are NV12-only in #5.
    assert_eq!(
        k(
            Format::explicit(Fourcc::P010, SAMSUNG),
            Format::linear(Fourcc::P010)
        ),
        None
    );
}

// ---- human output ----

#[test]
fn human_summary_names_the_outcome() {
    let n = negotiate(&members(vec![
        vapostproc(),
        p("glupload", &[Format::explicit(Fourcc::NV12, X_TILED)]),
    ])).unwrap();
    let h = human(&n);
    assert!(
        h.starts_with("shared: NV12 with I915_FORMAT_MOD_X_TILED (0x0100000000000001)"),
        "{h}"
    );
    let n = negotiate(&members(vec![p("a", &[nv12()]).constrain(|c| c.align = 3)])).unwrap();
    assert!(
        human(&n).contains("align [a]: 3 is not a power of two"),
        "{}",
        human(&n)
    );
}

// ---- invariants over many generated negotiations (no panics, results honour everyone) ----

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic, so a failure reproduces.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_participant(rng: &mut Rng, name: String) -> Participant {
    let fourccs = [
        Fourcc::NV12,
        Fourcc::P010,
        Fourcc::ABGR8888,
        Fourcc::ARGB8888,
    ];
    let layouts = [
        Layout::Implicit,
        Layout::Explicit(Modifier::LINEAR),
        Layout::Explicit(X_TILED),
        Layout::Explicit(SAMSUNG),
    ];
    let formats: FormatSet = (0..rng.below(6))
        .map(|_| Format {
            fourcc: fourccs[rng.below(4) as usize],
            layout: layouts[rng.below(4) as usize],
        })
        .collect();
    let mut p = if rng.below(8) == 0 {
        Participant::any_format(name)
    } else {
        Participant::new(name, formats)
    };
    let c = &mut p.constraints;
    c.min_buffers = rng.below(4) as u32;
    // Mostly satisfiable values, with a few bad ones so that every rule gets exercised.
    let mut pick = |common: u64, rare: u64| if rng.below(20) == 0 { rare } else { common };
    c.align = [1, 64, 4096][(pick(0, 1) + pick(0, 1)) as usize];
    c.align = if pick(0, 1) == 1 { 100 } else { c.align };
    c.stride_align = if pick(0, 1) == 1 { 3 } else { 256 };
    c.width = if pick(0, 1) == 1 {
        ExtentRange::new(8192, 9000)
    } else {
        ExtentRange::new(16, 4096)
    };
    let (cpu, dom) = (pick(0, 1) + pick(0, 1), pick(0, 1) + pick(0, 1));
    c.cpu_access = [CpuAccess::None, CpuAccess::Read, CpuAccess::Write][cpu as usize];
    c.domain = [Domain::Any, Domain::DeviceLocal, Domain::System][dom as usize];
    c.read_only = rng.below(3) == 0;
    p
}

#[test]
fn generated_negotiations_hold_their_invariants() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut shared_n, mut copy_n, mut impossible_n) = (0, 0, 0);
    for round in 0..400 {
        let n = 1 + rng.below(5) as usize;
        let mut ms: Vec<Member> = Vec::new();
        for i in 0..n {
            if rng.below(6) == 0 {
                let kids = (0..1 + rng.below(3))
                    .map(|k| Member::from(random_participant(&mut rng, format!("p{i}.{k}"))));
                ms.push(FallbackGroup::new(format!("g{i}"), kids).into());
            } else {
                ms.push(random_participant(&mut rng, format!("p{i}")).into());
            }
        }
        let neg = negotiate(&ms).unwrap();
        let report = Report::new(&neg);
        let json = report.to_json();
        assert!(json.starts_with("{\"outcome\":"), "round {round}: {json}");
        let _ = human(&neg);
        let all: Vec<Participant> = {
            // Flatten one level: enough to look participants up by name.
            let mut v = Vec::new();
            for m in &ms {
                match m {
                    Member::Participant(p) => v.push(p.clone()),
                    Member::Group(g) => v.extend(g.children.iter().filter_map(|c| match c {
                        Member::Participant(p) => Some(p.clone()),
                        Member::Group(_) => None,
                    })),
                }
            }
            v
        };
        let by_name = |name: &str| all.iter().find(|p| p.name == name).unwrap();
        let honours = |a: &Allocation| {
            for name in &a.participants {
                let p = by_name(name);
                match &a.layout {
                    ChainLayout::Implicit => assert!(
                        p.formats.accepts(&Format::implicit(a.fourcc)),
                        "round {round}"
                    ),
                    ChainLayout::Explicit(mods) => {
                        assert!(!mods.is_empty());
                        for m in mods {
                            assert!(
                                p.formats.accepts(&Format::explicit(a.fourcc, *m)),
                                "round {round}: {name} {m}"
                            );
                        }
                    }
                }
                assert!(
                    a.constraints.align >= p.constraints.align && a.constraints.align.is_power_of_two(),
                    "round {round}"
                );
                assert!(
                    a.width.min >= p.constraints.width.min
                        && a.width.max <= p.constraints.width.max
                );
            }
            assert!(a.constraints.buffers >= 1);
        };
        match &neg.outcome {
            Outcome::Shared(a) => {
                shared_n += 1;
                assert_eq!(report.exit_code(), 0);
                honours(a);
                assert!(!a.writers.is_empty(), "round {round}: nobody writes");
            }
            Outcome::Copy { plan, conflicts } => {
                copy_n += 1;
                assert_eq!(report.exit_code(), 0);
                assert!(
                    !conflicts.is_empty() && conflicts.iter().all(|c| c.constraint.copy_can_help()),
                    "round {round}"
                );
                assert!(plan.groups.len() >= 2 && plan.conversions.len() == plan.groups.len() - 1);
                for g in &plan.groups {
                    honours(&g.allocation);
                }
                assert!(
                    !plan.groups[0].allocation.writers.is_empty(),
                    "round {round}: the source has a writer"
                );
                for c in &plan.conversions {
                    let (from, to) = (
                        plan.groups[c.from_group].format,
                        plan.groups[c.to_group].format,
                    );
                    assert_eq!(
                        ConversionKind::between(from, to),
                        Some(c.kind),
                        "round {round}"
                    );
                }
            }
            Outcome::Impossible(c) => {
                impossible_n += 1;
                assert_eq!(report.exit_code(), 2);
                assert!(!c.is_empty(), "round {round}: impossible without a reason");
            }
        }
    }
    // The generator must reach every outcome, or this test proves little.
    assert!(
        shared_n > 10 && copy_n > 5 && impossible_n > 10,
        "{shared_n} {copy_n} {impossible_n}"
    );
}

// ---- sync methods (issue #11) ----

fn syncing(name: &str, methods: &[SyncMethod]) -> Participant {
    p(name, &[nv12()]).with_sync(SyncMethods::of(methods.iter().copied()))
}

fn json_of(n: &Negotiation) -> serde_json::Value {
    serde_json::from_str(&Report::new(n).to_json()).unwrap()
}

use dmabridge_interop::sync::{SyncMethod, SyncMethods};

#[test]
fn the_best_sync_method_everyone_supports_is_chosen() {
    use SyncMethod::*;
    for (a, b, want) in [
        (&[SyncFile, ImplicitBridge][..], &[SyncFile][..], "sync-file"),
        (&[SyncFile, ImplicitBridge][..], &[ImplicitBridge][..], "implicit-bridge"),
        (&[SyncFile][..], &[ImplicitBridge][..], "cpu-wait"),
        (&[][..], &[SyncFile, ImplicitBridge][..], "cpu-wait"),
    ] {
        let n = negotiate(&members(vec![syncing("a", a), syncing("b", b)])).unwrap();
        let Outcome::Shared(alloc) = &n.outcome else { panic!("{:?}", n.outcome) };
        assert_eq!(alloc.sync.name(), want, "{a:?} with {b:?}");
        let v = json_of(&n);
        assert_eq!(v["sync"], want);
        assert_eq!(v["groups"][0]["sync"], want);
        assert!(human(&n).contains(&format!("sync: {want}")), "{}", human(&n));
    }
    // Parties that say nothing can still always wait on the CPU.
    let n = negotiate(&members(vec![p("a", &[nv12()]), p("b", &[nv12()])])).unwrap();
    assert_eq!(json_of(&n)["sync"], "cpu-wait");
}

#[test]
fn peer_defaults_meet_at_their_best_common_method() {
    use dmabridge_interop::peers::{egl, kms, v4l2, wayland};
    let kms_plane = syncing("plane", &[]).with_sync(kms::SYNC_METHODS);
    let egl_importer = syncing("egl", &[]).with_sync(egl::SYNC_METHODS);
    let compositor = syncing("weston", &[]).with_sync(wayland::SYNC_METHODS);
    let decoder = syncing("v4l2", &[]).with_sync(v4l2::SYNC_METHODS);
    let sync_of = |parts: Vec<Participant>| json_of(&negotiate(&members(parts)).unwrap())["sync"].clone();
    assert_eq!(sync_of(vec![kms_plane.clone(), egl_importer.clone()]), "sync-file");
    assert_eq!(sync_of(vec![kms_plane.clone(), compositor.clone()]), "implicit-bridge");
    assert_eq!(sync_of(vec![egl_importer, compositor, decoder]), "cpu-wait");
}

#[test]
fn copy_groups_sync_on_their_own_and_impossible_names_none() {
    use SyncMethod::*;
    let dec = at_1080p(p("dec", &[Format::explicit(Fourcc::NV12, SAMSUNG)]).with_sync(SyncMethods::ALL));
    let display = at_1080p(p("display", &[nv12()]).with_sync(SyncMethods::of([ImplicitBridge]))).constrain(|c| c.read_only = true);
    let n = negotiate(&members(vec![dec, display])).unwrap();
    let Outcome::Copy { plan, .. } = &n.outcome else { panic!("{:?}", n.outcome) };
    assert_eq!(plan.groups[0].allocation.sync, SyncFile);
    assert_eq!(plan.groups[1].allocation.sync, ImplicitBridge);
    let v = json_of(&n);
    assert_eq!((v["sync"].clone(), v["groups"][1]["sync"].clone()), ("sync-file".into(), "implicit-bridge".into()));

    let n = negotiate(&members(vec![p("a", &[nv12()]).constrain(|c| c.align = 3)])).unwrap();
    assert_eq!(json_of(&n)["sync"], serde_json::Value::Null);
}

// ---- bounds (issue #12) ----

#[test]
fn too_many_participants_or_too_deep_groups_are_typed_errors() {
    let many: Vec<Participant> = (0..=MAX_PARTICIPANTS).map(|i| p(&format!("p{i}"), &[nv12()])).collect();
    assert_eq!(
        negotiate(&members(many.clone())),
        Err(NegotiateError::TooManyParticipants { count: MAX_PARTICIPANTS + 1, max: MAX_PARTICIPANTS })
    );
    assert_eq!(
        reconcile(&many).unwrap_err(),
        ReconcileError::TooManyParticipants { count: MAX_PARTICIPANTS + 1, max: MAX_PARTICIPANTS }
    );
    // Group children count: one group of MAX + 1 alternatives is too many participants.
    let group = FallbackGroup::new("g", many.iter().cloned().map(Member::from));
    assert!(matches!(negotiate(&[group.into()]), Err(NegotiateError::TooManyParticipants { .. })));
    // Exactly the maximum is negotiated.
    assert!(negotiate(&members(many[..MAX_PARTICIPANTS].to_vec())).is_ok());
    assert!(reconcile(&many[..MAX_PARTICIPANTS]).is_ok());

    let mut deep = Member::from(p("leaf", &[nv12()]));
    for i in 0..=MAX_GROUP_DEPTH {
        deep = FallbackGroup::new(format!("g{i}"), [deep]).into();
    }
    assert_eq!(negotiate(&[deep]), Err(NegotiateError::GroupsTooDeep { max: MAX_GROUP_DEPTH }));
    let e = negotiate(&members(many)).unwrap_err().to_string();
    assert!(e.contains("4097") && e.contains("4096"), "{e}");
}

/// Half the participants take only NV12, half only AR24: every one of one half blocks the
/// other half's format. The report used to name every other participant in each blocker's
/// conflict, so it grew with the square of the count.
fn split_negotiation(n: usize) -> (usize, usize) {
    let parts: Vec<Participant> = (0..n)
        .map(|i| {
            let f = if i % 2 == 0 { nv12() } else { Format::linear(Fourcc::ARGB8888) };
            p(&format!("participant-{i:05}"), &[f])
        })
        .collect();
    let neg = negotiate(&members(parts)).unwrap();
    assert!(matches!(neg.outcome, Outcome::Impossible(_)), "{:?}", neg.outcome);
    (Report::new(&neg).to_json().len(), human(&neg).len())
}

#[test]
fn the_report_grows_linearly_with_the_participants() {
    let (json_1k, human_1k) = split_negotiation(1000);
    let (json_2k, human_2k) = split_negotiation(2000);
    let (json_ratio, human_ratio) = (json_2k as f64 / json_1k as f64, human_2k as f64 / human_1k as f64);
    println!("report sizes: JSON {json_1k} -> {json_2k} bytes ({json_ratio:.2}x), human {human_1k} -> {human_2k} bytes ({human_ratio:.2}x)");
    assert!(json_ratio < 2.5, "JSON: {json_1k} -> {json_2k} bytes ({json_ratio:.2}x)");
    assert!(human_ratio < 2.5, "human: {human_1k} -> {human_2k} bytes ({human_ratio:.2}x)");
    // And per participant it stays small: a conflict names a few others, not all of them.
    assert!(json_2k / 2000 < 1024, "{} bytes per participant", json_2k / 2000);
}

#[test]
fn conflicts_name_a_few_others_and_count_the_rest() {
    let mut parts: Vec<Participant> = (0..20).map(|i| p(&format!("p{i}"), &[nv12()])).collect();
    parts.push(p("odd", &[Format::linear(Fourcc::P010)]));
    let c = conflicts(&parts);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].participants, ["odd"]);
    assert!(c[0].fix.contains("{p0, p1, p2, p3, p4, p5, p6, p7, and 12 more}"), "{}", c[0].fix);
}

#[test]
fn blockers_across_the_implicit_divide_share_one_conflict() {
    // Two explicit-only displays against implicit-only decoders that everyone else follows.
    let imp = |n: &str| p(n, &[Format::implicit(Fourcc::NV12)]);
    let exp = |n: &str| p(n, &[Format::explicit(Fourcc::NV12, X_TILED)]);
    let c = conflicts(&[imp("dec1"), imp("dec2"), imp("dec3"), exp("disp1"), exp("disp2")]);
    let divide: Vec<&Conflict> = c.iter().filter(|c| c.constraint == ConstraintKind::Implicit).collect();
    assert_eq!(divide.len(), 1, "{c:?}");
    assert_eq!(divide[0].participants, ["dec1", "dec2", "dec3", "disp1", "disp2"]);
}
