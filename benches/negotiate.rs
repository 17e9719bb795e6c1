//! Reconciliation speed: 8 participants x 100 fourccs x 20 modifiers each (2000 formats per
//! participant), with lists that overlap only partly, so that the first participant's
//! favourite fourccs are missing elsewhere and the common set is a real intersection.
//! Goal (issue #3): under 100 µs per reconciliation.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use dmabridge_interop::negotiate::{negotiate, reconcile, DeviceCopy, Member, Outcome, Participant};
use dmabridge_interop::report::Report;
use dmabridge_interop::{Format, FormatSet, Fourcc, Modifier};

const PARTIES: usize = 8;
const FOURCCS: usize = 100;
const MODIFIERS: usize = 20;
/// Each party's window slides by this much, so party i lacks the first 5*i fourccs.
const FOURCC_SHIFT: usize = 5;

fn fourcc(i: usize) -> Fourcc {
    let digits = format!("{i:03}");
    let b = digits.as_bytes();
    Fourcc::from_bytes([b'F', b[0], b[1], b[2]])
}

fn modifier(i: usize) -> Modifier {
    Modifier::from_vendor(0x01, i as u64 + 1)
}

fn parties() -> Vec<Participant> {
    (0..PARTIES)
        .map(|p| {
            let set: FormatSet = (p * FOURCC_SHIFT..p * FOURCC_SHIFT + FOURCCS)
                .flat_map(|f| {
                    (p..p + MODIFIERS).map(move |m| Format::explicit(fourcc(f), modifier(m)))
                })
                .collect();
            Participant::new(format!("p{p}"), set)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let parts = parties();
    // Sanity: the common set is fourccs 35..100 with modifiers 7..20.
    let a = reconcile(&parts).expect("the lists overlap");
    assert_eq!(a.fourcc, fourcc((PARTIES - 1) * FOURCC_SHIFT));
    assert_eq!(a.layout.modifiers().len(), MODIFIERS - (PARTIES - 1));

    c.bench_function("reconcile 8 parties x 100 formats x 20 modifiers", |b| {
        b.iter(|| reconcile(black_box(&parts)))
    });

    let members: Vec<Member> = parts.iter().cloned().map(Member::from).collect();
    c.bench_function("negotiate + JSON, 8 x 100 x 20", |b| {
        b.iter(|| negotiate(black_box(&members)).map(|n| Report::new(&n).to_json()))
    });

    // No common format: the explanation path (who blocks what).
    let mut blocked = parts.clone();
    blocked.push(Participant::new(
        "odd",
        [Format::linear(Fourcc::YUYV)].into_iter().collect(),
    ));
    c.bench_function("conflict explanation, 9 parties", |b| {
        b.iter(|| reconcile(black_box(&blocked)))
    });
}

/// The PRIME laptop with no shared layout (two GPUs, a display that scans out one tiling
/// only the integrated GPU's copy writes), each GPU listing `layouts` AR24 tilings of its
/// driver's: the copy planner's search grows with the lists' length, not its square.
fn prime(layouts: u64) -> Vec<Member> {
    let ar24 = |m| Format::explicit(Fourcc::ARGB8888, m);
    let scanout = ar24(Modifier::from_raw(0x0200_0000_0000_1b04));
    let all: FormatSet = std::iter::once(ar24(Modifier::LINEAR)).chain((1..=layouts).map(|m| ar24(Modifier::from_vendor(0x02, m << 20)))).collect();
    let mut igpu = all.clone();
    igpu.insert(scanout);
    let copy = DeviceCopy { reads: igpu.clone(), writes: igpu.clone() };
    let mut dgpu = Participant::new("dgpu", all);
    dgpu.constraints.width = dmabridge_interop::negotiate::ExtentRange::exactly(1920);
    dgpu.constraints.height = dmabridge_interop::negotiate::ExtentRange::exactly(1080);
    let mut igpu = Participant::new("igpu", igpu).with_copy(Some(copy));
    igpu.constraints.read_only = true;
    let mut display = Participant::new("display", [scanout].into_iter().collect());
    display.constraints.read_only = true;
    [dgpu, igpu, display].into_iter().map(Member::from).collect()
}

fn copy_plan(c: &mut Criterion) {
    let mut group = c.benchmark_group("copy plan");
    for layouts in [256u64, 4096] {
        let members = prime(layouts);
        assert!(matches!(negotiate(&members).map(|n| n.outcome), Ok(Outcome::Copy { .. })));
        group.bench_function(format!("PRIME, {layouts} layouts each GPU"), |b| b.iter(|| negotiate(black_box(&members))));
    }
    group.finish();
}

// No plots: criterion's fallback plotter (no gnuplot here) needs system fonts, and panics
// without them after the first measurement; the numbers are what the benches are for.
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = bench, copy_plan
}
criterion_main!(benches);
