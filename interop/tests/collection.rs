//! Buffer collections (sysmem tokens, NvSciBuf attribute lists): the state machine with real
//! memfd buffers, the wire format with hostile bytes, and the server and tokens over real
//! sockets between threads. The cross-process cases are in `collection_processes.rs`.

use std::os::fd::AsFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dmabridge_interop::collection::wire::{self, ImportError, Message, WireError, HEADER_LEN, MAX_MESSAGE_LEN};
use dmabridge_interop::framing::FrameError;
use dmabridge_interop::collection::{
    reconcile, validate, Collection, CollectionError, Event, Failure, Outputs, MAX_BUFFER_BYTES,
    Progress, ReconcileOptions, Reconciled, Rights, Server, ServerOutcome, StateError, SystemAllocator, TokenEvent,
};
use dmabridge_interop::dmabuf::{fd_count, socketpair, PlaneLayout};
use dmabridge_interop::negotiate::{
    BufferConstraints, Conflict, ConstraintKind, Constraints, CpuAccess, Domain, ExtentRange, Participant, Usage,
};
use dmabridge_interop::sync::{SyncMethod, SyncMethods};
use dmabridge_interop::{Format, FormatSet, Fourcc, Modifier};

static FD_LOCK: Mutex<()> = Mutex::new(());

/// fd counts are per process and tests run on parallel threads: every test here holds this.
fn lock() -> MutexGuard<'static, ()> {
    FD_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

const T: Duration = Duration::from_secs(10);

fn linear(f: Fourcc) -> FormatSet {
    [Format::linear(f)].into_iter().collect()
}

/// A participant accepting linear `f` at 64x48, with `min_buffers`, built the way the
/// project asks (`..Default::default()`).
fn part(name: &str, f: Fourcc, min_buffers: u32) -> Participant {
    Participant::new(name, linear(f)).with_constraints(Constraints {
        width: ExtentRange::exactly(64),
        height: ExtentRange::exactly(48),
        min_buffers,
        ..Default::default()
    })
}

fn reader(name: &str, f: Fourcc, min_buffers: u32) -> Participant {
    part(name, f, min_buffers).constrain(|c| c.read_only = true).with_usage(Usage::SAMPLE)
}

fn events_for(evs: &[(dmabridge_interop::collection::TokenId, Event)], t: dmabridge_interop::collection::TokenId) -> Vec<Event> {
    evs.iter().filter(|(id, _)| *id == t).map(|(_, e)| e.clone()).collect()
}

/// Three tokens (root, a, b), all bound; returns them with the collection allocated.
fn allocated_three(b_dispensable: bool) -> (Collection, [dmabridge_interop::collection::TokenId; 3]) {
    let (mut c, root) = Collection::new("frames").unwrap();
    let a = c.duplicate(root, Rights::default(), false, "encoder").unwrap();
    let b = c.duplicate(root, Rights { read_only: true }, b_dispensable, "preview").unwrap();
    c.bind(root, part("camera", Fourcc::XRGB8888, 1)).unwrap();
    c.bind(a, reader("encoder", Fourcc::XRGB8888, 2)).unwrap();
    assert!(matches!(c.bind(b, reader("preview", Fourcc::XRGB8888, 1)).unwrap(), Progress::Allocate(_)));
    assert_eq!(c.allocate_with(&mut SystemAllocator::new("t")), Progress::Allocated);
    (c, [root, a, b])
}

// ---- the state machine -----------------------------------------------------------------

#[test]
fn allocation_waits_for_the_last_bind() {
    let _g = lock();
    let (mut c, root) = Collection::new("frames").unwrap();
    let a = c.duplicate(root, Rights::default(), false, "encoder").unwrap();
    let b = c.duplicate(a, Rights { read_only: true }, false, "preview").unwrap();
    let p = c.bind(root, part("camera", Fourcc::XRGB8888, 1)).unwrap();
    assert_eq!(p, Progress::Waiting { unbound: vec!["encoder".into(), "preview".into()] });
    let p = c.bind(b, reader("preview", Fourcc::XRGB8888, 1)).unwrap();
    assert_eq!(p, Progress::Waiting { unbound: vec!["encoder".into()] });
    assert!(c.take_events().is_empty(), "nobody hears anything before allocation");
    assert!(c.set_buffers(vec![]).is_err(), "no allocation is due yet");
    let Progress::Allocate(r) = c.bind(a, reader("encoder", Fourcc::XRGB8888, 2)).unwrap() else {
        panic!("the last bind makes allocation due")
    };
    assert_eq!(r.constraints.buffers, 4, "min-buffers summed: 1 + 1 + 2");
    assert_eq!(r.format, Format::linear(Fourcc::XRGB8888));
    assert_eq!((r.width, r.height), (64, 48));
    assert!(r.outputs.is_none());
    assert_eq!(c.allocate_with(&mut SystemAllocator::new("t")), Progress::Allocated);
    let evs = c.take_events();
    for t in [root, a, b] {
        assert_eq!(events_for(&evs, t), vec![Event::Allocated], "{t}");
    }
    let r = c.reconciled().unwrap();
    let o = r.outputs.as_ref().expect("computed outputs after allocation");
    assert_eq!(o.planes, vec![PlaneLayout::linear(0, 256, 48)]);
    assert!(o.size() >= 256 * 48);
    let mine = c.buffers_for(root).unwrap();
    assert_eq!(mine.len(), 4);
    assert!(mine.iter().all(|b| !b.read_only()));
    let theirs = c.buffers_for(b).unwrap();
    assert!(theirs.iter().all(|b| b.read_only()), "a read-only token gets read-only fds");
    assert_eq!(theirs[0].identity().planes[0].file, mine[0].identity().planes[0].file, "the same memory");
}

#[test]
fn duplicates_are_checked() {
    let _g = lock();
    let (mut c, root) = Collection::new("frames").unwrap();
    let ro = c.duplicate(root, Rights { read_only: true }, false, "ro").unwrap();
    let child = c.duplicate(ro, Rights { read_only: false }, false, "child").unwrap();
    assert_eq!(c.rights(child), Some(Rights { read_only: true }), "rights never grow");
    assert!(matches!(c.duplicate(root, Rights::default(), false, ""), Err(StateError::BadName(_))));
    assert!(matches!(c.duplicate(root, Rights::default(), false, &"n".repeat(200)), Err(StateError::BadName(_))));
    let long = Participant::new("p".repeat(129), linear(Fourcc::R8));
    assert!(matches!(c.bind(root, long), Err(StateError::BadName(_))), "a list's name is bounded too");
    // A read-only holder binding writable constraints fails (here: the whole collection).
    let p = c.bind(child, part("child", Fourcc::XRGB8888, 1)).unwrap();
    let Progress::Failed(f) = p else { panic!("{p:?}") };
    assert_eq!(f.participant, "child");
    assert!(f.reason.contains("read-only"), "{}", f.reason);
    assert!(matches!(c.bind(root, part("x", Fourcc::XRGB8888, 1)), Err(StateError::Failed(_))));
}

#[test]
fn token_count_is_capped() {
    let _g = lock();
    let (mut c, root) = Collection::new("many").unwrap();
    let mut n = 1;
    let err = loop {
        match c.duplicate(root, Rights::default(), true, "d") {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n <= 64, "the cap holds");
    };
    assert!(matches!(err, StateError::TooManyTokens { max: 64 }), "{err}");
}

#[test]
fn buffer_count_is_summed_over_participants() {
    let _g = lock();
    let lists = [part("a", Fourcc::NV12, 2), reader("b", Fourcc::NV12, 3), reader("c", Fourcc::NV12, 0)];
    let r = reconcile(&lists, ReconcileOptions::default()).unwrap();
    assert_eq!(r.constraints.buffers, 5);
    assert_eq!(r.participants, ["a", "b", "c"]);
    // Nobody asks for any: still one buffer.
    let r = reconcile(&[part("a", Fourcc::NV12, 0)], ReconcileOptions::default()).unwrap();
    assert_eq!(r.constraints.buffers, 1);
}

#[test]
fn min_above_max_is_a_max_buffers_conflict() {
    let _g = lock();
    let decoder = part("decoder", Fourcc::NV12, 3).constrain(|c| c.max_buffers = Some(4));
    let display = reader("display", Fourcc::NV12, 3);
    let conflicts = reconcile(&[decoder.clone(), display.clone()], ReconcileOptions::default()).unwrap_err();
    let c = conflicts.iter().find(|c| c.constraint == ConstraintKind::MaxBuffers).expect("a max-buffers conflict");
    assert!(c.participants.contains(&"decoder".to_owned()), "{c}");
    assert!(c.to_string().starts_with("max-buffers"), "{c}");

    // Through the collection: the last bind fails everyone, naming who and which attribute.
    let (mut col, root) = Collection::new("video").unwrap();
    let d = col.duplicate(root, Rights { read_only: true }, false, "display").unwrap();
    col.bind(root, decoder).unwrap();
    let Progress::Failed(f) = col.bind(d, display).unwrap() else { panic!("expected failure") };
    assert!(f.participant.contains("decoder"), "{f}");
    assert!(f.reason.contains("max-buffers"), "{f}");
    let evs = col.take_events();
    assert_eq!(events_for(&evs, root), vec![Event::Failed(f.clone())]);
    assert_eq!(events_for(&evs, d), vec![Event::Failed(f)]);
}

#[test]
fn caps_on_buffers_and_extent_are_conflicts() {
    let _g = lock();
    let big = part("a", Fourcc::R8, 40);
    let conflicts = reconcile(&[big.clone(), big.clone().constrain(|_| ())], ReconcileOptions::default()).unwrap_err();
    assert!(conflicts.iter().any(|c| c.constraint == ConstraintKind::MinBuffers && c.detail.contains("64")), "{conflicts:?}");
    let wide = part("w", Fourcc::R8, 1).constrain(|c| c.width = ExtentRange::exactly(100_000));
    let conflicts = reconcile(&[wide], ReconcileOptions::default()).unwrap_err();
    assert_eq!(conflicts.iter().map(|c| c.constraint).collect::<Vec<_>>(), vec![ConstraintKind::Width]);
    let unbounded = reader("r", Fourcc::R8, 1).constrain(|c| c.height = ExtentRange::ANY);
    let conflicts = reconcile(&[unbounded.clone().constrain(|c| c.read_only = false)], ReconcileOptions::default()).unwrap_err();
    assert_eq!(conflicts.iter().map(|c| c.constraint).collect::<Vec<_>>(), vec![ConstraintKind::Height], "nobody bounds it");
}

#[test]
fn validate_names_the_failing_attribute_of_each_list() {
    let _g = lock();
    let lists = [part("a", Fourcc::XRGB8888, 1), reader("b", Fourcc::XRGB8888, 1)];
    let r = reconcile(&lists, ReconcileOptions::default()).unwrap();
    assert_eq!(validate(&r, &lists), Ok(()));

    let picky = reader("gpu", Fourcc::XRGB8888, 1).constrain(|c| c.stride_align = 4096);
    let other_format = reader("scanout", Fourcc::NV12, 1);
    let too_few = reader("decoder", Fourcc::XRGB8888, 5);
    let errs = validate(&r, &[lists[0].clone(), picky, other_format, too_few]).unwrap_err();
    let got: Vec<(usize, &str, ConstraintKind)> = errs.iter().map(|v| (v.list, v.participant.as_str(), v.attribute)).collect();
    assert_eq!(
        got,
        vec![(1, "gpu", ConstraintKind::StrideAlign), (2, "scanout", ConstraintKind::Format), (3, "decoder", ConstraintKind::MinBuffers)]
    );

    // With computed outputs, the actual pitch is judged: 64 * 4 = 256 is 256-aligned.
    let mut r2 = r.clone();
    r2.outputs = Some(Outputs { object_sizes: vec![256 * 48], planes: vec![PlaneLayout::linear(0, 256, 48)] });
    let fits = reader("gpu", Fourcc::XRGB8888, 1).constrain(|c| c.stride_align = 256);
    assert_eq!(validate(&r2, &[fits]), Ok(()));
    let bigger = reader("dec", Fourcc::XRGB8888, 1).constrain(|c| c.min_size = 1 << 20);
    let errs = validate(&r2, &[bigger]).unwrap_err();
    assert_eq!(errs[0].attribute, ConstraintKind::MinSize);
    let modifier = Participant::new("tiled", [Format::explicit(Fourcc::XRGB8888, Modifier::from_raw(0x0100_0000_0000_0001))].into_iter().collect())
        .constrain(|c| c.read_only = true);
    assert_eq!(validate(&r2, &[modifier]).unwrap_err()[0].attribute, ConstraintKind::Modifier);
}

#[test]
fn system_allocator_honours_alignments_min_size_and_disjoint() {
    let _g = lock();
    let before = fd_count().unwrap();
    {
        let opts = ReconcileOptions { disjoint: true, ..ReconcileOptions::default() };
        let (mut c, root) = Collection::with_options("nv12", opts).unwrap();
        let d = c.duplicate(root, Rights { read_only: true }, false, "display").unwrap();
        c.bind(root, part("decoder", Fourcc::NV12, 2).constrain(|c| c.offset_align = 4096)).unwrap();
        let display = reader("display", Fourcc::NV12, 1).constrain(|c| {
            c.stride_align = 128;
            c.min_size = 1 << 16;
        });
        assert!(matches!(c.bind(d, display).unwrap(), Progress::Allocate(_)));
        assert_eq!(c.allocate_with(&mut SystemAllocator::new("nv12")), Progress::Allocated);
        let r = c.reconciled().unwrap().clone();
        let o = r.outputs.clone().unwrap();
        assert!(r.disjoint);
        assert_eq!(o.object_sizes.len(), 2, "one memory object per plane");
        assert!(o.object_sizes.iter().all(|s| *s >= 1 << 16), "{o:?}");
        for p in &o.planes {
            assert_eq!(p.stride % 128, 0);
            assert_eq!(p.offset % 4096, 0);
        }
        let bufs = c.buffers_for(d).unwrap();
        assert_eq!(bufs.len(), 3);
        assert!(bufs.iter().all(|b| b.disjoint() && b.read_only()));
    }
    assert_eq!(fd_count().unwrap(), before, "every fd closed");
}

#[test]
fn the_system_allocator_refuses_what_it_cannot_honour() {
    let _g = lock();
    let r = reconcile(&[part("gpu", Fourcc::XRGB8888, 1).constrain(|c| c.align = 1 << 16)], ReconcileOptions::default()).unwrap();
    let err = dmabridge_interop::collection::Allocator::allocate(&mut SystemAllocator::new("t"), &r, Default::default()).unwrap_err();
    assert!(matches!(err, dmabridge_interop::collection::AllocatorError::Align(65536)), "{err}");
    // Through a collection the allocator's failure fails it, naming the allocator.
    let (mut c, root) = Collection::new("big").unwrap();
    c.bind(root, part("gpu", Fourcc::XRGB8888, 1).constrain(|c| c.align = 1 << 16)).unwrap();
    let Progress::Failed(f) = c.allocate_with(&mut SystemAllocator::new("t")) else { panic!("failed") };
    assert!(f.participant.contains("allocator") && f.reason.contains("65536"), "{f}");
}

#[test]
fn a_dispensable_failure_changes_nothing_for_the_others() {
    let _g = lock();
    let (mut c, [root, a, b]) = allocated_three(true);
    c.take_events();
    let files: Vec<_> = c.buffers_for(root).unwrap().iter().map(|b| b.identity()).collect();
    let p = c.fail(b, "crashed").unwrap();
    assert_eq!(p, Progress::Allocated);
    let evs = c.take_events();
    assert_eq!(evs.len(), 1, "only the dispensable holder hears: {evs:?}");
    assert_eq!(
        events_for(&evs, b),
        vec![Event::Failed(Failure { participant: "preview".into(), reason: "crashed".into() })]
    );
    assert!(c.is_live(root) && c.is_live(a) && !c.is_live(b));
    let again: Vec<_> = c.buffers_for(a).unwrap().iter().map(|b| b.identity()).collect();
    assert_eq!(files, again, "the same buffers");
    assert!(c.weak().unwrap().alive());
}

#[test]
fn a_dispensable_failure_before_allocation_lets_it_proceed() {
    let _g = lock();
    let (mut c, root) = Collection::new("frames").unwrap();
    let d = c.duplicate(root, Rights { read_only: true }, true, "stand-in").unwrap();
    let sub = c.duplicate(d, Rights { read_only: true }, false, "under-stand-in").unwrap();
    assert!(matches!(c.bind(root, part("camera", Fourcc::XRGB8888, 1)).unwrap(), Progress::Waiting { .. }));
    // A failure below the dispensable token stops there: both go, the root carries on.
    assert!(matches!(c.fail(sub, "gave up").unwrap(), Progress::Allocate(_)));
    assert!(!c.is_live(d) && !c.is_live(sub));
    let evs = c.take_events();
    assert_eq!(evs.len(), 2);
    assert!(events_for(&evs, root).is_empty());
}

#[test]
fn a_non_dispensable_failure_fails_everyone_with_name_and_reason() {
    let _g = lock();
    let (mut c, [root, a, b]) = allocated_three(false);
    c.take_events();
    let weak = c.weak().unwrap();
    let p = c.fail(a, "process exited").unwrap();
    let f = Failure { participant: "encoder".into(), reason: "process exited".into() };
    assert_eq!(p, Progress::Failed(f.clone()));
    let evs = c.take_events();
    for t in [root, a, b] {
        assert_eq!(events_for(&evs, t), vec![Event::Failed(f.clone())], "{t}");
    }
    assert!(!weak.alive(), "a failed collection lets go of its buffers");
    assert!(matches!(c.close(root), Err(StateError::Failed(g)) if g == f));
    assert_eq!(c.failure(), Some(&f));
}

#[test]
fn late_joiners_are_judged_against_the_buffers_and_never_reallocate() {
    let _g = lock();
    let (mut c, [root, _a, b]) = allocated_three(false);
    c.take_events();
    let before: Vec<_> = c.buffers_for(root).unwrap().iter().map(|b| b.identity()).collect();

    let ok = c.attach_token(root, "recorder").unwrap();
    assert_eq!(c.bind(ok, reader("recorder", Fourcc::XRGB8888, 1)).unwrap(), Progress::Allocated);
    assert_eq!(events_for(&c.take_events(), ok), vec![Event::Allocated]);
    assert_eq!(c.buffers_for(ok).unwrap().len(), 4);

    let bad = c.attach_token(root, "scanout").unwrap();
    let scanout = reader("scanout", Fourcc::XRGB8888, 1).constrain(|c| {
        c.stride_align = 1024;
        c.max_buffers = Some(2);
    });
    let Progress::Refused(conflicts) = c.bind(bad, scanout).unwrap() else { panic!("refused") };
    let attrs: Vec<ConstraintKind> = conflicts.iter().map(|c| c.constraint).collect();
    assert_eq!(attrs, vec![ConstraintKind::MaxBuffers, ConstraintKind::StrideAlign], "{conflicts:?}");
    assert_eq!(events_for(&c.take_events(), bad), vec![Event::LateJoinRefused(conflicts)]);
    assert!(matches!(c.buffers_for(bad), Err(StateError::NoBuffers(_))));

    assert_eq!(c.progress(), Progress::Allocated, "the collection carries on");
    let after: Vec<_> = c.buffers_for(root).unwrap().iter().map(|b| b.identity()).collect();
    assert_eq!(before, after, "not reallocated");
    // A writer joining through a read-only token is refused, naming read-only.
    let ro = c.duplicate(b, Rights::default(), false, "x").err();
    assert!(ro.is_some(), "a bound token cannot be duplicated");
    let ro_late = c.attach_token(b, "writer").unwrap();
    assert_eq!(c.rights(ro_late), Some(Rights { read_only: true }), "attached tokens keep the parent's rights");
    let Progress::Refused(conflicts) = c.bind(ro_late, part("writer", Fourcc::XRGB8888, 1)).unwrap() else { panic!("refused") };
    assert_eq!(conflicts.iter().map(|c| c.constraint).collect::<Vec<_>>(), vec![ConstraintKind::ReadOnly]);
    // A late joiner that then fails is dropped alone.
    assert_eq!(c.fail(ok, "gone").unwrap(), Progress::Allocated);
    // Duplicating an initial token after allocation is refused: attach instead.
    assert!(matches!(c.duplicate(root, Rights::default(), false, "x"), Err(StateError::DuplicateAfterBind | StateError::AlreadyAllocated)));
}

#[test]
fn a_late_joiner_bound_before_allocation_is_judged_once_buffers_exist() {
    let _g = lock();
    let (mut c, root) = Collection::new("frames").unwrap();
    let late = c.attach_token(root, "late").unwrap();
    assert_eq!(c.bind(late, reader("late", Fourcc::NV12, 1)).unwrap(), Progress::Waiting { unbound: vec!["frames".into()] });
    assert!(matches!(c.bind(root, part("camera", Fourcc::XRGB8888, 1)).unwrap(), Progress::Allocate(_)));
    c.allocate_with(&mut SystemAllocator::new("t"));
    let evs = c.take_events();
    assert_eq!(events_for(&evs, root), vec![Event::Allocated]);
    let refused = events_for(&evs, late);
    assert!(matches!(&refused[..], [Event::LateJoinRefused(c)] if c[0].constraint == ConstraintKind::Format), "{refused:?}");
}

#[test]
fn buffers_are_freed_only_after_the_last_close() {
    let _g = lock();
    let before = fd_count().unwrap();
    let (mut c, [root, a, b]) = allocated_three(false);
    let weak = c.weak().unwrap();
    assert_eq!(c.close(b).unwrap(), Progress::Allocated);
    assert!(weak.alive());
    assert_eq!(c.close(root).unwrap(), Progress::Allocated);
    assert!(weak.alive(), "one holder is left");
    assert_eq!(c.close(a).unwrap(), Progress::Released);
    assert!(!weak.alive(), "freed after the last close");
    assert!(c.take_events().iter().all(|(_, e)| *e == Event::Allocated), "closing is not failing");
    drop(c);
    assert_eq!(fd_count().unwrap(), before);
}

#[test]
fn late_joiners_alone_fail_when_every_initial_participant_leaves() {
    let _g = lock();
    let (mut c, root) = Collection::new("frames").unwrap();
    let late = c.attach_token(root, "late").unwrap();
    assert!(matches!(c.bind(late, reader("late", Fourcc::R8, 1)).unwrap(), Progress::Waiting { .. }));
    let Progress::Failed(f) = c.close(root).unwrap() else { panic!("failed") };
    assert!(f.reason.contains("closed before allocation"), "{f}");
    assert_eq!(events_for(&c.take_events(), late), vec![Event::Failed(f)]);
}

#[test]
fn closing_an_unbound_token_stops_the_wait_for_it() {
    let _g = lock();
    let (mut c, root) = Collection::new("frames").unwrap();
    let a = c.duplicate(root, Rights::default(), false, "never-binds").unwrap();
    assert!(matches!(c.bind(root, part("camera", Fourcc::XRGB8888, 1)).unwrap(), Progress::Waiting { .. }));
    assert!(matches!(c.close(a).unwrap(), Progress::Allocate(_)));
}

// ---- the wire format ---------------------------------------------------------------------

// Every field is set, on purpose (the round trip must cover them all); the struct update
// keeps this building as Constraints grows.
#[allow(clippy::needless_update)]
fn rich_participant() -> Participant {
    let formats: FormatSet = [
        Format::linear(Fourcc::NV12),
        Format::explicit(Fourcc::NV12, Modifier::from_raw(0x0100_0000_0000_0002)),
        Format::implicit(Fourcc::P010),
    ]
    .into_iter()
    .collect();
    Participant::new("décodeur", formats)
        .with_usage(Usage::DECODE | Usage::CPU_READ)
        .with_sync(SyncMethods::of([SyncMethod::SyncFile]))
        .with_constraints(Constraints {
            width: ExtentRange::new(16, 4096),
            height: ExtentRange::new(16, 2160),
            min_buffers: 4,
            max_buffers: Some(8),
            min_size: 1 << 20,
            offset_align: 4096,
            align: 256,
            stride_align: 64,
            cpu_access: CpuAccess::Read,
            domain: Domain::System,
            read_only: false,
            ..Default::default()
        })
}

fn sample_reconciled() -> Reconciled {
    Reconciled {
        format: Format::linear(Fourcc::NV12),
        width: 64,
        height: 48,
        constraints: BufferConstraints {
            buffers: 3,
            max_buffers: Some(4),
            align: 4096,
            stride_align: 64,
            offset_align: 4096,
            min_size: 0,
            cpu_access: CpuAccess::ReadWrite,
            domain: Domain::Any,
        },
        disjoint: true,
        participants: vec!["a".into(), "b".into()],
        outputs: Some(Outputs {
            object_sizes: vec![4096, 4096],
            // NV12 64x48: 48 luma rows and 24 chroma rows of 64 bytes, one object each.
            planes: vec![PlaneLayout::linear(0, 64, 48), PlaneLayout { object: 1, ..PlaneLayout::linear(0, 64, 24) }],
        }),
    }
}

fn all_messages() -> Vec<Message> {
    let s = sample_reconciled();
    vec![
        Message::Bind(rich_participant()),
        Message::Bind(Participant::any_format("any")),
        Message::Duplicate { read_only: true, dispensable: true, name: "preview".into() },
        Message::AttachToken { name: "late".into() },
        Message::Close,
        Message::NewToken { name: "t".into() },
        Message::Allocated { reconciled: sample_reconciled(), buffers: 3 },
        Message::Allocated { reconciled: Reconciled { outputs: None, constraints: BufferConstraints { max_buffers: None, ..s.constraints }, ..s.clone() }, buffers: 3 },
        Message::LateJoinRefused(vec![Conflict::new(["scanout"], ConstraintKind::StrideAlign, "pitch 256 is not a multiple of 1024", "")]),
        Message::Failed(Failure { participant: "encoder".into(), reason: "process exited".into() }),
        Message::Reconciled(sample_reconciled()),
    ]
}

#[test]
fn attribute_lists_export_and_import_like_nvscibuf() {
    let p = rich_participant();
    let bytes = wire::export_unreconciled(&p).unwrap();
    assert_eq!(wire::import_unreconciled(&bytes), Ok(p));
    assert!(matches!(wire::import_reconciled(&bytes, &[]), Err(ImportError::Wire(WireError::Unexpected { want: "reconciled", got: "bind" }))));

    // The importer validates the reconciled list against its own lists.
    let lists = [part("a", Fourcc::XRGB8888, 1), reader("b", Fourcc::XRGB8888, 1)];
    let r = reconcile(&lists, ReconcileOptions::default()).unwrap();
    let bytes = wire::export_reconciled(&r).unwrap();
    assert_eq!(wire::import_reconciled(&bytes, &lists[1..]), Ok(r));
    let mine = reader("c", Fourcc::XRGB8888, 1).constrain(|c| c.offset_align = 3);
    let Err(ImportError::Invalid(v)) = wire::import_reconciled(&bytes, &[mine]) else { panic!("refused") };
    assert_eq!((v[0].participant.as_str(), v[0].attribute), ("c", ConstraintKind::OffsetAlign));
}

#[test]
fn every_message_round_trips() {
    for m in all_messages() {
        let bytes = wire::encode(&m).unwrap();
        assert_eq!(wire::decode(&bytes), Ok(m.clone()), "{m:?}");
        assert_eq!(wire::encode(&wire::decode(&bytes).unwrap()).unwrap(), bytes);
    }
}

/// Writes the corpus of the `collection_wire` fuzz target when asked to
/// (`DMABRIDGE_WRITE_CORPUS=1`): every valid message and a few malformed ones.
#[test]
fn write_fuzz_corpus_when_asked() {
    if std::env::var_os("DMABRIDGE_WRITE_CORPUS").is_none() {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/collection_wire");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, m) in all_messages().iter().enumerate() {
        std::fs::write(dir.join(format!("valid_{i:02}")), wire::encode(m).unwrap()).unwrap();
    }
    for (name, bytes) in hostile() {
        std::fs::write(dir.join(format!("bad_{name}")), bytes).unwrap();
    }
}

fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn hostile() -> Vec<(&'static str, Vec<u8>)> {
    let bind = wire::encode(&Message::Bind(rich_participant())).unwrap();
    let dup = wire::encode(&Message::Duplicate { read_only: false, dispensable: false, name: "x".into() }).unwrap();
    let alloc = wire::encode(&Message::Allocated { reconciled: sample_reconciled(), buffers: 3 }).unwrap();
    let mut out = vec![("empty", vec![]), ("short_header", bind[..10].to_vec())];
    let mut b = bind.clone();
    b[0] = b'X';
    out.push(("magic", b));
    let mut b = bind.clone();
    set_u16(&mut b, 4, 9);
    out.push(("version", b));
    let mut b = bind.clone();
    set_u16(&mut b, 6, 99);
    out.push(("kind", b));
    out.push(("truncated_body", bind[..bind.len() - 3].to_vec()));
    let mut b = bind.clone();
    b.push(0);
    out.push(("trailing", b));
    let mut b = dup.clone();
    set_u16(&mut b, 12, 1);
    out.push(("fd_count", b));
    let mut b = dup.clone();
    set_u16(&mut b, 14, 1);
    out.push(("header_reserved", b));
    let mut b = dup.clone();
    b[HEADER_LEN] |= 0x80;
    out.push(("dup_flags", b));
    let mut b = dup.clone();
    b[HEADER_LEN + 6] = 0xff; // the name's one byte: not UTF-8
    out.push(("utf8", b));
    // The participant name's length says 60000.
    let mut b = bind.clone();
    set_u16(&mut b, HEADER_LEN, 60000);
    out.push(("long_name", b));
    // The body length field says one more than there is.
    let mut b = alloc.clone();
    let n = u32::from_le_bytes(b[8..12].try_into().unwrap()) + 1;
    b[8..12].copy_from_slice(&n.to_le_bytes());
    out.push(("body_len", b));
    // A duplicated format in an attribute list: the last format entry copied over the one before.
    let mut b = bind.clone();
    let end = b.len();
    let last: Vec<u8> = b[end - 12..end].to_vec();
    b[end - 24..end - 12].copy_from_slice(&last);
    out.push(("duplicate_format", b));
    out
}

#[test]
fn hostile_bytes_get_typed_errors() {
    let got: Vec<(&str, WireError)> = hostile().into_iter().map(|(n, b)| (n, wire::decode(&b).unwrap_err())).collect();
    for (name, e) in &got {
        let ok = match *name {
            "empty" | "short_header" | "truncated_body" => matches!(e, WireError::Frame(FrameError::Truncated { .. } | FrameError::BodyLength { .. })),
            "magic" => matches!(e, WireError::Frame(FrameError::Magic { .. })),
            "version" => matches!(e, WireError::Frame(FrameError::Version { got: 9, supported: 1, .. })),
            "kind" => matches!(e, WireError::Frame(FrameError::Kind(99))),
            "trailing" | "body_len" => matches!(e, WireError::Frame(FrameError::BodyLength { .. })),
            "fd_count" => matches!(e, WireError::Frame(FrameError::FdCount { declared: 1, expected: 0, .. })),
            "header_reserved" | "dup_flags" => matches!(e, WireError::Frame(FrameError::Reserved { .. })),
            "utf8" => matches!(e, WireError::Utf8 { .. }),
            "long_name" => matches!(e, WireError::StringTooLong { len: 60000, .. }),
            "duplicate_format" => matches!(e, WireError::DuplicateFormat(_)),
            _ => false,
        };
        assert!(ok, "{name}: {e}");
    }
    assert!(matches!(wire::decode(&vec![0u8; MAX_MESSAGE_LEN + 1]), Err(WireError::Frame(FrameError::TooLong { .. }))));
    // Encoding refuses what decoding would.
    let long = Message::AttachToken { name: "n".repeat(129) };
    assert!(matches!(wire::encode(&long), Err(WireError::StringTooLong { .. })));
    let none = Message::LateJoinRefused(vec![]);
    assert!(matches!(wire::encode(&none), Err(WireError::Count { .. })));
}

#[test]
fn mutated_messages_never_panic() {
    // A deterministic xorshift walk over every byte of every valid message: each mutant gives
    // a message (which must round-trip) or a typed error.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut decoded = 0;
    for m in all_messages() {
        let bytes = wire::encode(&m).unwrap();
        for _ in 0..400 {
            let mut b = bytes.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() as usize) % b.len();
                b[at] = next() as u8;
            }
            if (next() % 8) == 0 {
                b.truncate((next() as usize) % b.len());
            }
            if let Ok(m2) = wire::decode(&b) {
                decoded += 1;
                assert_eq!(wire::encode(&m2).unwrap(), b, "canonical: {m2:?}");
            }
        }
    }
    assert!(decoded > 0, "some mutants are still valid (names, sizes)");
}

// ---- server and tokens over sockets, threads in one process --------------------------

fn server() -> (std::thread::JoinHandle<Result<ServerOutcome, dmabridge_interop::collection::ServerError>>, dmabridge_interop::collection::Token) {
    let (s, root) = Server::new("frames", Box::new(SystemAllocator::new("frames"))).unwrap();
    (s.spawn(), root)
}

#[test]
fn tokens_over_sockets_allocate_share_and_release() {
    let _g = lock();
    let before = fd_count().unwrap();
    {
        let (serving, mut root) = server();
        let consumer = root.duplicate(Rights { read_only: true }, false, "preview", T).unwrap();
        // The token travels over a socket, as it would to another process.
        let (a, b) = socketpair().unwrap();
        consumer.send_token_over(a.as_fd()).unwrap();
        let mut consumer = dmabridge_interop::collection::Token::recv_token(b.as_fd(), T).unwrap();
        assert_eq!(consumer.name(), "preview");
        let th = std::thread::spawn(move || {
            let got = consumer.bind(&reader("preview", Fourcc::XRGB8888, 2), T);
            (consumer, got)
        });
        let mine = root.bind(&part("camera", Fourcc::XRGB8888, 1), T).unwrap();
        let (consumer, theirs) = th.join().unwrap();
        let theirs = theirs.unwrap();
        assert_eq!(mine.buffers.len(), 3);
        assert_eq!(theirs.buffers.len(), 3);
        assert!(theirs.buffers.iter().all(|b| b.read_only()) && mine.buffers.iter().all(|b| !b.read_only()));
        assert_eq!(mine.reconciled, theirs.reconciled, "one reconciled list with its outputs");
        assert!(mine.reconciled.outputs.is_some());

        // A late joiner that does not fit is refused; the others carry on.
        let mut late = root.attach_token("scanout", T).unwrap();
        let err = late.bind(&reader("scanout", Fourcc::NV12, 1), T).unwrap_err();
        assert!(matches!(&err, CollectionError::LateJoinRefused(c) if c[0].constraint == ConstraintKind::Format), "{err}");
        late.close().unwrap();
        let mut late = root.attach_token("recorder", T).unwrap();
        assert_eq!(late.bind(&reader("recorder", Fourcc::XRGB8888, 1), T).unwrap().buffers.len(), 3);
        late.close().unwrap();

        consumer.close().unwrap();
        root.close().unwrap();
        assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
    }
    assert_eq!(fd_count().unwrap(), before, "no fd left behind");
}

#[test]
fn a_token_dropped_without_close_fails_the_collection_promptly() {
    let _g = lock();
    let before = fd_count().unwrap();
    {
        let (serving, mut root) = server();
        let consumer = root.duplicate(Rights { read_only: true }, false, "preview", T).unwrap();
        let spare = root.duplicate(Rights { read_only: true }, true, "spare", T).unwrap();
        // The dispensable one vanishes first: nothing happens to the others.
        drop(spare);
        let mut consumer = consumer;
        let th = std::thread::spawn(move || {
            let got = consumer.bind(&reader("preview", Fourcc::XRGB8888, 1), T).map(|b| b.buffers.len());
            (consumer, got)
        });
        let _mine = root.bind(&part("camera", Fourcc::XRGB8888, 1), T).unwrap();
        let (consumer, got) = th.join().unwrap();
        assert_eq!(got.unwrap(), 2);
        assert!(root.wait_event(Duration::from_millis(100)).unwrap().is_none(), "nothing to report");
        let dropped = Instant::now();
        drop(consumer);
        let ev = root.wait_event(Duration::from_secs(5)).unwrap();
        let elapsed = dropped.elapsed();
        let Some(TokenEvent::Failed(f)) = ev else { panic!("{ev:?}") };
        assert_eq!(f, Failure { participant: "preview".into(), reason: "process exited".into() });
        assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
        assert!(matches!(serving.join().unwrap().unwrap(), ServerOutcome::Failed(_)));
        assert!(matches!(root.wait_event(T), Err(CollectionError::Closed)));
    }
    assert_eq!(fd_count().unwrap(), before);
}

#[test]
fn a_hostile_client_fails_only_itself_when_dispensable() {
    let _g = lock();
    let (serving, mut root) = server();
    let evil = root.duplicate(Rights::default(), true, "evil", T).unwrap();
    let fd = evil.into_fd();
    dmabridge_interop::collection::transport::send_raw(fd.as_fd(), b"DMBC garbage", &[]).unwrap();
    // The server answers with Failed (naming the token) and hangs up.
    dmabridge_interop::collection::transport::wait_readable(fd.as_fd(), T).unwrap();
    let (msg, _) = dmabridge_interop::collection::transport::recv(fd.as_fd()).unwrap();
    let Message::Failed(f) = msg else { panic!("{msg:?}") };
    assert_eq!(f.participant, "evil");
    assert!(f.reason.starts_with("protocol error"), "{}", f.reason);
    let mine = root.bind(&part("camera", Fourcc::XRGB8888, 1), T).unwrap();
    assert_eq!(mine.buffers.len(), 1);
    root.close().unwrap();
    assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
}

#[test]
fn the_most_buffers_a_collection_holds_reach_every_holder() {
    let _g = lock();
    let before = fd_count().unwrap();
    {
        let (serving, mut root) = server();
        let mut other = root.duplicate(Rights { read_only: true }, false, "preview", T).unwrap();
        // The server's sockets are non-blocking: 64 buffers and their fds must still fit.
        let th = std::thread::spawn(move || {
            let got = other.bind(&reader("preview", Fourcc::NV12, 32), T).map(|b| b.buffers.len());
            other.close().unwrap();
            got
        });
        let mine = root.bind(&part("decoder", Fourcc::NV12, 32), T).unwrap();
        assert_eq!(mine.buffers.len(), 64);
        assert_eq!(th.join().unwrap().unwrap(), 64);
        drop(mine);
        root.close().unwrap();
        assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
    }
    assert_eq!(fd_count().unwrap(), before);
}

#[test]
fn a_hostile_server_gets_typed_errors_and_leaks_no_fd() {
    let _g = lock();
    let before = fd_count().unwrap();
    {
        let (server_end, client_end) = socketpair().unwrap();
        let mut token = dmabridge_interop::collection::Token::from_fd(client_end);
        let raw = |bytes: &[u8]| dmabridge_interop::collection::transport::send_raw(server_end.as_fd(), bytes, &[]).unwrap();
        // Garbage where the buffers should be.
        raw(b"not a collection message at all");
        assert!(matches!(token.wait_event(T), Err(CollectionError::Transport(_))));
        // Buffers announced, then one of another shape than the list says.
        let s = sample_reconciled();
        let r = Reconciled { outputs: None, disjoint: false, constraints: BufferConstraints { buffers: 1, ..s.constraints }, ..s };
        raw(&wire::encode(&Message::Allocated { reconciled: r, buffers: 1 }).unwrap());
        let fd = dmabridge_interop::dmabuf::sealed_memfd_of_size("x", 4096).unwrap();
        let wrong = dmabridge_interop::dmabuf::DmaBuf::in_one_file(Fourcc::R8, dmabridge_interop::Layout::Explicit(Modifier::LINEAR), 8, 8, fd, &[PlaneLayout::linear(0, 8, 8)]).unwrap();
        dmabridge_interop::dmabuf::send_buffer(server_end.as_fd(), 0, &wrong).unwrap();
        let err = token.wait_event(T).unwrap_err();
        assert!(matches!(&err, CollectionError::Protocol(m) if m.contains("buffer 0")), "{err}");
        // A token where none was asked for.
        let (x, _y) = socketpair().unwrap();
        dmabridge_interop::collection::transport::send(server_end.as_fd(), &Message::NewToken { name: "x".into() }, Some(x.as_fd())).unwrap();
        assert!(matches!(token.wait_event(T), Err(CollectionError::Protocol(_))));
        // The server goes away.
        drop(server_end);
        assert!(matches!(token.wait_event(T), Err(CollectionError::Closed)));
    }
    assert_eq!(fd_count().unwrap(), before);
}

#[test]
fn a_bad_name_is_refused_before_it_reaches_the_server() {
    let _g = lock();
    let (serving, mut root) = server();
    assert!(matches!(root.duplicate(Rights::default(), false, "", T), Err(CollectionError::BadName(_))));
    assert!(matches!(root.attach_token(&"n".repeat(300), T), Err(CollectionError::BadName(_))));
    root.bind(&part("camera", Fourcc::XRGB8888, 1), T).unwrap();
    root.close().unwrap();
    assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
}

#[test]
fn the_stop_flag_ends_the_server_and_holders_see_it() {
    let _g = lock();
    let (s, mut root) = Server::new("frames", Box::new(SystemAllocator::new("frames"))).unwrap();
    let stop = s.stop_flag();
    let serving = s.spawn();
    let _other = root.duplicate(Rights::default(), false, "other", T).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Stopped);
    assert!(matches!(root.wait_event(T), Err(CollectionError::Closed)));
}

#[test]
fn bind_times_out_instead_of_hanging() {
    let _g = lock();
    let (serving, mut root) = server();
    let other = root.duplicate(Rights::default(), false, "slow", T).unwrap();
    let err = root.bind(&part("camera", Fourcc::XRGB8888, 1), Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, CollectionError::Timeout(..)), "{err}");
    other.close().unwrap();
    // Its close made allocation due; the buffers arrive after all.
    let ev = root.wait_event(T).unwrap();
    assert!(matches!(ev, Some(TokenEvent::Allocated(_))), "{ev:?}");
    root.close().unwrap();
    assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
}

#[test]
fn holders_bound_read_only_get_fds_they_cannot_write_through() {
    let _g = lock();
    // "encoder" holds a full-rights token but binds read-only constraints; a late joiner
    // attached with full rights binds read-only too. Both get O_RDONLY fds; the camera does not.
    let (mut c, [root, a, _]) = allocated_three(false);
    let late = c.attach_token(root, "recorder").unwrap();
    c.bind(late, reader("recorder", Fourcc::XRGB8888, 0)).unwrap();
    for t in [a, late] {
        let bufs = c.buffers_for(t).unwrap();
        assert!(!bufs.is_empty());
        for b in &bufs {
            assert!(b.read_only());
            let p = b.plane(0).unwrap();
            assert_eq!(rustix::io::pwrite(p.fd, &[1], p.offset), Err(rustix::io::Errno::BADF));
        }
    }
    assert!(c.buffers_for(root).unwrap().iter().all(|b| !b.read_only()));
}

/// A holder cannot make the collection ask for more memory than one buffer may take: its
/// own min size over the limit is a conflict naming it; alignments that blow one buffer up
/// past the limit are a conflict naming the limit; both before anything is allocated. The
/// limit is the collection's to set.
#[test]
fn buffer_sizes_are_bounded_before_allocation() {
    let greedy = part("greedy", Fourcc::XRGB8888, 1).constrain(|c| c.min_size = 1 << 40);
    let errs = reconcile(&[part("producer", Fourcc::XRGB8888, 2), greedy], ReconcileOptions::default()).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].constraint, ConstraintKind::MinSize);
    assert_eq!(errs[0].participants, vec!["greedy".to_string()]);
    assert!(errs[0].detail.contains(&MAX_BUFFER_BYTES.to_string()), "{}", errs[0].detail);

    let wide = part("wide", Fourcc::XRGB8888, 1).constrain(|c| c.stride_align = 1 << 31);
    let errs = reconcile(&[part("producer", Fourcc::XRGB8888, 2), wide], ReconcileOptions::default()).unwrap_err();
    assert_eq!(errs[0].constraint, ConstraintKind::Other, "{errs:?}");
    assert!(errs[0].detail.contains("limit of one buffer"), "{}", errs[0].detail);

    // 64 x 48 XRGB is 12288 bytes: over a 4096-byte limit, within the default.
    let small = ReconcileOptions { max_buffer_bytes: 4096, ..ReconcileOptions::default() };
    assert!(reconcile(&[part("producer", Fourcc::XRGB8888, 2)], small).is_err());
    assert!(reconcile(&[part("producer", Fourcc::XRGB8888, 2)], ReconcileOptions::default()).is_ok());
}

/// A dispensable holder whose constraints break the rules is dropped alone and the others
/// allocate without it (sysmem's failure domains): one asks for a buffer over the size
/// limit, another (bound first, so its format leads) for a format nobody else has. Each
/// hears Failed naming what it broke (the limit, for the size); the lists left are
/// reconciled and allocated. A non-dispensable holder asking the same still fails everyone.
#[test]
fn a_dispensable_holder_that_breaks_the_rules_is_dropped_and_the_others_allocate() {
    let _g = lock();
    let (mut c, root) = Collection::new("frames").unwrap();
    let display = c.duplicate(root, Rights { read_only: true }, false, "display").unwrap();
    let greedy = c.duplicate(root, Rights::default(), true, "greedy").unwrap();
    let odd = c.duplicate(root, Rights { read_only: true }, true, "odd").unwrap();
    // A non-dispensable token made from a dispensable one is in its sub-tree.
    let under = c.duplicate(greedy, Rights::default(), false, "under-greedy").unwrap();
    c.bind(odd, reader("odd", Fourcc::NV12, 4)).unwrap();
    c.bind(under, part("under-greedy", Fourcc::XRGB8888, 1)).unwrap();
    c.bind(greedy, part("greedy", Fourcc::XRGB8888, 1).constrain(|c| c.min_size = 1 << 40)).unwrap();
    c.bind(display, reader("display", Fourcc::XRGB8888, 2)).unwrap();
    let Progress::Allocate(r) = c.bind(root, part("camera", Fourcc::XRGB8888, 1)).unwrap() else {
        panic!("the others allocate: {:?}", c.progress());
    };
    assert_eq!(r.participants, ["display", "camera"], "reconciled without the dropped lists");
    assert_eq!(r.constraints.buffers, 3);
    let evs = c.take_events();
    let Event::Failed(f) = &events_for(&evs, greedy)[0] else { panic!("{evs:?}") };
    assert_eq!(f.participant, "greedy, under-greedy");
    assert!(f.reason.contains("min size") && f.reason.contains(&format!("{MAX_BUFFER_BYTES}-byte limit")), "{f}");
    assert_eq!(events_for(&evs, under), events_for(&evs, greedy), "its whole sub-tree");
    let Event::Failed(f) = &events_for(&evs, odd)[0] else { panic!("{evs:?}") };
    assert_eq!(f.participant, "odd");
    assert!(f.reason.contains("format") && f.reason.contains("NV12"), "{f}");
    assert_eq!(evs.len(), 3, "nobody else hears: {evs:?}");
    assert!(!c.is_live(greedy) && !c.is_live(under) && !c.is_live(odd));
    assert_eq!(c.allocate_with(&mut SystemAllocator::new("t")), Progress::Allocated);
    for t in [root, display] {
        assert_eq!(c.buffers_for(t).unwrap().len(), 3);
    }

    // Alone with the root, bound first (its format leads) and under the root's own name:
    // still only the dispensable one fails.
    let (mut c, root) = Collection::new("frames").unwrap();
    let odd = c.duplicate(root, Rights::default(), true, "odd").unwrap();
    c.bind(odd, part("camera", Fourcc::NV12, 1)).unwrap();
    let Progress::Allocate(r) = c.bind(root, part("camera", Fourcc::XRGB8888, 1)).unwrap() else { panic!("{:?}", c.progress()) };
    assert_eq!(r.format, Format::linear(Fourcc::XRGB8888));
    let evs = c.take_events();
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert!(matches!(&events_for(&evs, odd)[..], [Event::Failed(_)]), "{evs:?}");

    // The same list from a non-dispensable holder is everyone's failure.
    let (mut c, root) = Collection::new("frames").unwrap();
    let greedy = c.duplicate(root, Rights::default(), false, "greedy").unwrap();
    c.bind(greedy, part("greedy", Fourcc::XRGB8888, 1).constrain(|c| c.min_size = 1 << 40)).unwrap();
    let Progress::Failed(f) = c.bind(root, part("camera", Fourcc::XRGB8888, 1)).unwrap() else { panic!("fails all") };
    assert_eq!(f.participant, "greedy");
    assert!(f.reason.contains(&format!("{MAX_BUFFER_BYTES}-byte limit")), "{f}");
    assert_eq!(c.take_events().len(), 2, "both hear");
}

/// A non-dispensable holder whose list reconciles only with a dispensable one's help (issue
/// 43): a display that accepts any format at any size and only reads, rooted in the
/// collection, and a dispensable decoder, the only writer, the only one to name a format
/// and to bound the extent. A second dispensable holder breaks the reconcile (a min size
/// over the limit). As in sysmem, the live dispensable decoder's list counts in the
/// allocation like any other: the breaker fails alone, whether its token comes before the
/// helper's or after, and the display and the decoder allocate. Before, the display's list
/// had to reconcile alone, which it cannot, so everyone failed over the breaker's list.
/// When the helper is itself the breaker, it fails alone with its own conflict and the rest
/// fail with what they then lack (nobody writes): the display cannot allocate by itself.
#[test]
fn a_holder_that_reconciles_only_with_a_dispensable_ones_help_allocates_without_the_breaker() {
    let _g = lock();
    let display = || Participant::any_format("display").constrain(|c| c.read_only = true).with_usage(Usage::SAMPLE);
    let decoder = || part("decoder", Fourcc::NV12, 2);
    let greedy = || part("greedy", Fourcc::NV12, 1).constrain(|c| c.min_size = 1 << 40);
    for breaker_first in [true, false] {
        let (mut c, root) = Collection::new("frames").unwrap();
        let (g, d) = if breaker_first {
            let g = c.duplicate(root, Rights::default(), true, "greedy").unwrap();
            (g, c.duplicate(root, Rights::default(), true, "decoder").unwrap())
        } else {
            let d = c.duplicate(root, Rights::default(), true, "decoder").unwrap();
            (c.duplicate(root, Rights::default(), true, "greedy").unwrap(), d)
        };
        c.bind(root, display()).unwrap();
        c.bind(g, greedy()).unwrap();
        let Progress::Allocate(r) = c.bind(d, decoder()).unwrap() else {
            panic!("the display and its helper allocate (breaker first: {breaker_first}): {:?}", c.progress());
        };
        assert_eq!(r.participants, ["display", "decoder"], "reconciled without the breaker");
        assert_eq!((r.format, r.width, r.height), (Format::linear(Fourcc::NV12), 64, 48), "the helper's format and extent");
        let evs = c.take_events();
        assert_eq!(evs.len(), 1, "only the breaker hears: {evs:?}");
        let Event::Failed(f) = &events_for(&evs, g)[0] else { panic!("{evs:?}") };
        assert_eq!(f.participant, "greedy");
        assert!(f.reason.contains(&format!("{MAX_BUFFER_BYTES}-byte limit")), "{f}");
        assert_eq!(c.allocate_with(&mut SystemAllocator::new("t")), Progress::Allocated);
        for t in [root, d] {
            assert_eq!(c.buffers_for(t).unwrap().len(), 2, "{t}");
        }
        assert!(c.buffers_for(root).unwrap().iter().all(|b| b.read_only()), "the display reads only");
    }

    // The helper breaks the reconcile itself: it fails alone, told its own conflict; without
    // it nobody writes, and that is everyone's failure.
    let (mut c, root) = Collection::new("frames").unwrap();
    let d = c.duplicate(root, Rights::default(), true, "decoder").unwrap();
    c.bind(root, display()).unwrap();
    let Progress::Failed(f) = c.bind(d, decoder().constrain(|c| c.min_size = 1 << 40)).unwrap() else {
        panic!("the display cannot allocate alone: {:?}", c.progress());
    };
    assert_eq!(f.participant, "display");
    assert!(f.reason.contains("nobody produces the content"), "{f}");
    let evs = c.take_events();
    let Event::Failed(own) = &events_for(&evs, d)[0] else { panic!("{evs:?}") };
    assert!(own.participant == "decoder" && own.reason.contains(&format!("{MAX_BUFFER_BYTES}-byte limit")), "{own}");
    assert_eq!(events_for(&evs, root), vec![Event::Failed(f)]);
    assert_eq!(evs.len(), 2, "{evs:?}");
}

/// The same over sockets: a dispensable holder over a collection's own (lower) size limit
/// gets a typed Failed naming the limit at its bind; the others get their buffers.
#[test]
fn a_dispensable_holder_over_the_size_limit_fails_alone_over_sockets() {
    let _g = lock();
    let before = fd_count().unwrap();
    {
        let options = ReconcileOptions { max_buffer_bytes: 1 << 20, ..ReconcileOptions::default() };
        let (s, mut root) = Server::with_options("frames", Box::new(SystemAllocator::new("frames")), options).unwrap();
        let serving = s.spawn();
        let mut greedy = root.duplicate(Rights::default(), true, "greedy", T).unwrap();
        let mut display = root.duplicate(Rights { read_only: true }, false, "display", T).unwrap();
        let th = std::thread::spawn(move || {
            let got = display.bind(&reader("display", Fourcc::XRGB8888, 1), T).map(|b| b.buffers.len());
            display.close().unwrap();
            got
        });
        let greedy = std::thread::spawn(move || {
            let got = greedy.bind(&part("greedy", Fourcc::XRGB8888, 1).constrain(|c| c.min_size = 2 << 20), T);
            (greedy, got)
        });
        let mine = root.bind(&part("camera", Fourcc::XRGB8888, 1), T).unwrap();
        assert_eq!(mine.buffers.len(), 2);
        assert_eq!(th.join().unwrap().unwrap(), 2);
        let (greedy, got) = greedy.join().unwrap();
        match got {
            Err(CollectionError::Failed(f)) => {
                assert_eq!(f.participant, "greedy");
                assert!(f.reason.contains("min size 2097152 is more than the 1048576-byte limit"), "{f}");
            }
            other => panic!("expected greedy's own failure, got {other:?}"),
        }
        drop((greedy, mine));
        root.close().unwrap();
        assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
    }
    assert_eq!(fd_count().unwrap(), before);
}

/// A dispensable holder that floods the server with token requests fails only itself: past
/// MAX_TOKENS_PER_SUBTREE its sub-tree is dropped (naming the quota), and the other holders
/// still get tokens and buffers.
#[test]
fn a_dispensable_flood_of_tokens_sinks_only_the_flooder() {
    let _g = lock();
    let before = fd_count().unwrap();
    {
        let (serving, mut root) = server();
        let mut flooder = root.duplicate(Rights::default(), true, "flooder", T).unwrap();
        let mut made = Vec::new();
        let err = loop {
            match flooder.duplicate(Rights::default(), false, "spawn", T) {
                Ok(t) => made.push(t),
                Err(e) => break e,
            }
            assert!(made.len() < dmabridge_interop::collection::MAX_TOKENS, "the flood was never stopped");
        };
        assert_eq!(made.len(), dmabridge_interop::collection::MAX_TOKENS_PER_SUBTREE - 1, "{err}");
        match err {
            CollectionError::Failed(f) => assert!(f.reason.contains("at most 8 tokens"), "{f:?}"),
            other => panic!("expected the flooder's failure, got {other}"),
        }
        // The others go on: a new holder, and the allocation.
        let mut display = root.duplicate(Rights { read_only: true }, false, "display", T).unwrap();
        let th = std::thread::spawn(move || {
            let got = display.bind(&reader("display", Fourcc::XRGB8888, 1), T).map(|b| b.buffers.len());
            display.close().unwrap();
            got
        });
        let mine = root.bind(&part("camera", Fourcc::XRGB8888, 1), T).unwrap();
        assert_eq!(th.join().unwrap().unwrap(), mine.buffers.len());
        drop(made);
        drop(flooder);
        root.close().unwrap();
        drop(mine);
        assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
    }
    assert_eq!(fd_count().unwrap(), before);
}
