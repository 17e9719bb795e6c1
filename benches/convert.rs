//! Detile throughput per layout at 3840x2160 NV12 on the CPU fast path and on the GPU,
//! beside memcpy of the same bytes measured in the same run (the baseline every figure is
//! reported against).
//!
//! `cargo bench --bench convert`. The GPU figure covers recording, submission and the
//! compute work, with the buffers already on the device (uploads excluded), as a consumer
//! that imports a tiled dma-buf as a buffer would see it. The CPU figure is
//! `tiling::detile_fast` from host memory into host memory, on the default threads.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dmabridge::interop::tiling::{default_threads, detile_fast, packed_planes, tiled_size};
use dmabridge::interop::{Fourcc, TileLayout};
use dmabridge::{BufferLocation, Converter, Engine, EngineOptions, GpuBuffer, TiledFrame, READBACK_TIMEOUT};

const W: u32 = 3840;
const H: u32 = 2160;

fn bench(c: &mut Criterion) {
    let linear_len = tiled_size(TileLayout::Linear, Fourcc::NV12, W, H).map(|g| g.size as usize).unwrap_or(0);
    let mut group = c.benchmark_group("detile_nv12_4k");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(linear_len as u64));

    let src = vec![7u8; linear_len];
    let mut dst = vec![0u8; linear_len];
    group.bench_function("memcpy", |b| b.iter(|| dst.copy_from_slice(std::hint::black_box(&src))));

    if let Ok(planes) = packed_planes(Fourcc::NV12, W, H) {
        for layout in TileLayout::ALL.into_iter().filter(|l| !matches!(l, TileLayout::NvidiaBlockLinear(n) if *n != 4)) {
            let Ok(g) = tiled_size(layout, Fourcc::NV12, W, H) else { continue };
            let tiled = vec![9u8; g.size as usize];
            group.bench_function(BenchmarkId::new("cpu", layout.name()), |b| {
                b.iter(|| detile_fast(layout, Fourcc::NV12, W, H, &tiled, &mut dst, &planes, default_threads()))
            });
        }
    }

    let Ok(engine) = Engine::new(&EngineOptions::default()) else {
        eprintln!("no Vulkan device: only the memcpy baseline was measured");
        return;
    };
    let Ok(conv) = Converter::new(&engine) else { return };
    let planes = match packed_planes(Fourcc::NV12, W, H) {
        Ok(p) => p,
        Err(_) => return,
    };
    for layout in TileLayout::ALL.into_iter().filter(|l| !matches!(l, TileLayout::NvidiaBlockLinear(n) if *n != 4)) {
        let Ok(g) = tiled_size(layout, Fourcc::NV12, W, H) else { continue };
        let (Ok(tiled), Ok(out)) =
            (GpuBuffer::new(&engine, g.size, BufferLocation::DeviceLocal), GpuBuffer::new(&engine, linear_len as u64, BufferLocation::DeviceLocal))
        else {
            continue;
        };
        let frame = TiledFrame { layout, fourcc: Fourcc::NV12, extent: (W, H) };
        group.bench_with_input(BenchmarkId::new("gpu", layout.name()), &frame, |b, &frame| {
            b.iter(|| conv.detile(frame, &tiled, &out, &planes, Default::default()).and_then(|s| Ok(s.wait(READBACK_TIMEOUT)?)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
