//! Detile throughput per layout at 3840x2160 NV12 on the CPU fast path and on the GPU,
//! beside memcpy of the same bytes measured in the same run (the baseline every figure is
//! reported against).
//!
//! `cargo bench --bench convert`. The GPU figure covers recording, submission and the
//! compute work, with the buffers already on the device (uploads excluded), as a consumer
//! that imports a tiled dma-buf as a buffer would see it. The CPU figure is
//! `tiling::detile_fast` from host memory into host memory, on the default threads.
//!
//! `device_copy_ar24_4k`: a copy plan's device copy (`ExportedImage::copy_from_and_release`,
//! `vkCmdCopyImage` from an imported 3840x2160 AR24 frame pitched to 256 bytes into an
//! exported image), submission and wait included, beside a row-by-row `memcpy` of the same
//! frame into a packed one on one thread in the same run (the row copy libyuv's `ARGBCopy`
//! makes).

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
                b.iter(|| detile_fast(TiledFrame { layout, fourcc: Fourcc::NV12, extent: (W, H) }, &tiled, (&mut dst, &planes), default_threads()))
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

fn device_copy(c: &mut Criterion) {
    use dmabridge::ash::vk;
    use dmabridge::interop::dmabuf::{sealed_memfd, DmaBuf, PlaneDesc};
    use dmabridge::interop::{Layout, Modifier};
    let (row, pitch) = (W as usize * 4, (W as usize * 4).next_multiple_of(256) + 256);
    let mut group = c.benchmark_group("device_copy_ar24_4k");
    group.sample_size(10);
    group.throughput(Throughput::Bytes((row * H as usize) as u64));
    let file = vec![5u8; pitch * H as usize + 65536];
    let mut packed = vec![0u8; row * H as usize];
    group.bench_function("memcpy rows, 1 thread", |b| {
        b.iter(|| {
            for (dst, src) in packed.chunks_exact_mut(row).zip(file.chunks_exact(pitch)) {
                dst.copy_from_slice(std::hint::black_box(&src[..row]));
            }
        })
    });
    let Ok(engine) = Engine::new(&EngineOptions::default()) else {
        eprintln!("no Vulkan device: only the memcpy baseline was measured");
        return;
    };
    let Ok(fd) = sealed_memfd("dmabridge-bench", &file) else { return };
    let Ok(buf) = DmaBuf::new(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), W, H, vec![PlaneDesc { fd, offset: 0, stride: pitch as u64 }]) else { return };
    let Ok(src) = engine.import_dmabuf(&buf, vk::ImageUsageFlags::TRANSFER_SRC) else { return };
    let usage = vk::ImageUsageFlags::TRANSFER_DST;
    let req = dmabridge::ExportRequest::new(Fourcc::ARGB8888, W, H, usage).with_acceptable([Layout::Explicit(Modifier::LINEAR)]);
    let Ok(dst) = engine.export_image(&req).or_else(|_| engine.export_opaque(Fourcc::ARGB8888, W, H, usage)) else { return };
    let path = if src.path() == dmabridge::ImportPath::Explicit { "device copy (import in place)" } else { "device copy (buffer-copy import)" };
    group.bench_function(path, |b| b.iter(|| dst.copy_from_and_release(&src, Default::default()).map(|s| s.wait(READBACK_TIMEOUT))));
    group.finish();
}

// No plots: criterion's fallback plotter (no gnuplot here) needs system fonts, and panics
// without them after the first measurement; the numbers are what the benches are for.
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = bench, device_copy
}
criterion_main!(benches);
