//! The cases of `dmabridge bench` under criterion, with the same names: the per-frame paths
//! (`frame_path/zero-copy/AR24 3840x2160`: handoff + cached import + barrier + first sample,
//! plus the copy), the 4K conversions (`convert/NV12 samsung-64x32 -> NV12`, on the path the
//! cost model picks, as the bench runs them), the import cache's hit against a miss, the
//! demo's negotiation, and one descriptor handoff. Criterion's HTML reports (with the change
//! since the last run) land in `target/criterion/report/index.html`.
//!
//! `cargo bench -p dmabridge-lab --bench paths` (with the udmabuf emulation for the zero-copy entries:
//! `source scripts/emulation.sh && with_udmabuf cargo bench -p dmabridge-lab --bench paths`).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dmabridge::ash::vk;
use dmabridge_lab::bench::frame_paths::{measure, negotiate_us, Source};
use dmabridge_lab::bench::options::{BenchOptions, PATHS, SIZES};
use dmabridge::interop::dmabuf::{recv, send_buffer, socketpair, Received};
use dmabridge::interop::Fourcc;
use dmabridge::{Engine, EngineOptions, ImportCache};

fn paths(c: &mut Criterion, engine: &Engine) {
    let mut group = c.benchmark_group("frame_path");
    group.sample_size(10);
    let opts = BenchOptions { quick: true };
    for &(w, h) in &SIZES[..3] {
        for path in PATHS {
            // Each sample runs the bench's own loop (warm-up, then repetitions) and reports
            // its median per frame, so criterion compares like with like.
            let probe = measure(engine, path, Fourcc::ARGB8888, w, h, &opts);
            if !matches!(probe, Ok(Some(_))) {
                eprintln!("{path} AR24 {w}x{h}: not available here ({probe:?})");
                continue;
            }
            group.bench_with_input(BenchmarkId::new(path, format!("AR24 {w}x{h}")), &(w, h), |b, &(w, h)| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let us = measure(engine, path, Fourcc::ARGB8888, w, h, &opts)
                            .ok()
                            .flatten()
                            .map_or(0.0, |r| r.us_per_frame);
                        total += Duration::from_secs_f64(us / 1e6);
                    }
                    total
                })
            });
        }
    }
    group.finish();
}

fn conversions(c: &mut Criterion, engine: &Engine) {
    let Ok(conv) = dmabridge::Converter::new(engine) else { return };
    let mut group = c.benchmark_group("convert");
    group.sample_size(10);
    for fc in dmabridge_lab::bench::conversions::conversions(3840, 2160) {
        let Ok(choice) = conv.choose(&fc, None) else { continue };
        let Ok((in_size, out_size)) = fc.sizes() else { continue };
        let input = vec![0x80u8; in_size as usize];
        let mut out = vec![0u8; out_size as usize];
        group.throughput(criterion::Throughput::Bytes(out_size));
        let name = format!("{} {} -> {}", fc.from.trimmed(), fc.from_layout, fc.to.trimmed());
        group.bench_function(name, |b| b.iter(|| conv.convert_frame_into(&fc, choice.path, &input, &mut out)));
    }
    group.finish();
}

fn cache(c: &mut Criterion, engine: &Engine) {
    let Ok(source) = Source::new(engine, Fourcc::ARGB8888, 1920, 1080, true) else { return };
    let mut group = c.benchmark_group("import_cache_1080p");
    let usage = vk::ImageUsageFlags::SAMPLED;
    let mut warm = ImportCache::new(engine, 4);
    if let Ok(dup) = source.buf.try_clone() {
        let _ = warm.import(dup, usage);
    }
    group.bench_function("hit", |b| {
        b.iter(|| {
            if let Ok(dup) = source.buf.try_clone() {
                let _ = warm.import(dup, usage).map(|i| i.path());
            }
        })
    });
    group.bench_function("miss", |b| {
        b.iter(|| {
            let mut cold = ImportCache::new(engine, 4);
            if let Ok(dup) = source.buf.try_clone() {
                let _ = cold.import(dup, usage).map(|i| i.path());
            }
        })
    });
    group.finish();
}

fn negotiation_and_handoff(c: &mut Criterion, engine: &Engine) {
    c.bench_function("demo negotiation (producer + consumer)", |b| {
        b.iter_custom(|iters| {
            let us = negotiate_us(engine, iters as usize).unwrap_or(0.0);
            Duration::from_secs_f64(us * iters as f64 / 1e6)
        })
    });
    let Ok(source) = Source::new(engine, Fourcc::ARGB8888, 1280, 720, false) else { return };
    let Ok((a, b)) = socketpair() else { return };
    c.bench_function("descriptor handoff (send + recv + validate)", |bch| {
        bch.iter(|| {
            if send_buffer(&a, 0, &source.buf).is_ok() {
                if let Ok(Received::Buffer { buf, .. }) = recv(&b) {
                    drop(buf);
                }
            }
        })
    });
}

fn benches(c: &mut Criterion) {
    let engine = match Engine::new(&EngineOptions::default()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("no Vulkan device ({e}): nothing to measure");
            return;
        }
    };
    paths(c, &engine);
    conversions(c, &engine);
    cache(c, &engine);
    negotiation_and_handoff(c, &engine);
}

// No plots: criterion's fallback plotter (no gnuplot here) needs system fonts, and panics
// without them after the first measurement; the numbers are what the benches are for.
criterion_group! {
    name = group;
    config = Criterion::default().without_plots();
    targets = benches
}
criterion_main!(group);
