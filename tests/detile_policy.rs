//! The dma-buf detile reaches a buffer as the import path would, under the caller's
//! `ImportOptions`: a read-only share (a sealed memfd re-opened `O_RDONLY`, the README's way
//! of sharing read-only; in the kernel lab also a dma-buf exported read-only) is read into
//! dmabridge's memory and detiled from there, never handed to a driver that maps imports
//! writable (lavapipe refuses it with `VK_ERROR_INVALID_EXTERNAL_HANDLE`); an unsealed file
//! is imported in place only when the caller vouches for it (`FdTrust`), and read otherwise;
//! `require_zero_copy` refuses a read. Every detile says what ran, and the bytes equal the
//! CPU reference on every path.

mod common;
#[path = "support_vgem/mod.rs"]
mod support_vgem;

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};

use dmabridge::interop::dmabuf::{DmaBuf, FdTrust, ImportCheckError, PlaneLayout};
use dmabridge::interop::tiling::{self, packed_planes, tiled_size};
use dmabridge::interop::{Fourcc, Layout, TileLayout};
use dmabridge::{BufferLocation, ConvertError, ConvertPath, Converter, DetileRun, DetileSource, Engine, GpuBuffer, ImportOptions, SubmitOptions};

/// The frames every test detiles: a Samsung-tiled NV12 (two planes) and an NVIDIA
/// block-linear AR24, at extents that are not whole tiles.
const FRAMES: [(TileLayout, Fourcc, (u32, u32)); 2] =
    [(TileLayout::Samsung64x32, Fourcc::NV12, (130, 66)), (TileLayout::NvidiaBlockLinear(1), Fourcc::ARGB8888, (70, 45))];

/// One tiled frame: the file that holds it (a page of 0xAA before each plane, so plane
/// offsets differ from the concatenated convention), its planes in that file, and the
/// linear frame the CPU reference detiles it to.
struct TiledFile {
    layout: TileLayout,
    fourcc: Fourcc,
    extent: (u32, u32),
    file: Vec<u8>,
    planes: Vec<PlaneLayout>,
    linear: Vec<u8>,
}

fn tiled_file(layout: TileLayout, fourcc: Fourcc, (w, h): (u32, u32), seed: u32) -> TiledFile {
    let len = tiled_size(TileLayout::Linear, fourcc, w, h).expect("geometry").size as usize;
    let linear = common::pattern(len, seed);
    let g = tiled_size(layout, fourcc, w, h).expect("geometry");
    let mut tiled = vec![0u8; g.size as usize];
    tiling::tile(tiling::TiledFrame { layout, fourcc, extent: (w, h) }, (&linear, &packed_planes(fourcc, w, h).expect("planes")), &mut tiled).expect("tile");
    // The reference is the CPU's own detile of these bytes, which must give the frame back.
    assert_eq!(tiling::detile_to_vec(layout, fourcc, w, h, &tiled).expect("cpu detile"), linear);
    let mut file = Vec::new();
    let mut planes = Vec::new();
    for p in &g.planes {
        file.resize(file.len() + 4096, 0xAA);
        let offset = file.len() as u64;
        file.extend_from_slice(&tiled[p.offset as usize..(p.offset + p.size) as usize]);
        planes.push(PlaneLayout { object: 0, offset, stride: p.padded_width_bytes as u64, size: p.size });
    }
    TiledFile { layout, fourcc, extent: (w, h), file, planes, linear }
}

impl TiledFile {
    fn descriptor(&self, fd: OwnedFd) -> DmaBuf {
        let modifier = self.layout.modifier().expect("a layout with a DRM modifier");
        DmaBuf::in_one_file(self.fourcc, Layout::Explicit(modifier), self.extent.0, self.extent.1, fd, &self.planes).expect("descriptor")
    }
}

/// A memfd holding `bytes` that nobody sealed: whoever else holds it could truncate it.
fn unsealed(bytes: &[u8]) -> OwnedFd {
    let fd = rustix::fs::memfd_create("dmabridge-test-unsealed", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
    std::fs::File::from(fd.try_clone().expect("dup")).write_all(bytes).expect("write");
    fd
}

/// Detiles `buf` on `path` (forced, as `DMABRIDGE_CONVERT_PATH` would) through both entry
/// points (into a new buffer; into the caller's buffer on the GPU), checks the bytes
/// against the reference, and returns what ran.
fn detile_on(engine: &Engine, conv: &Converter, frame: &TiledFile, buf: &DmaBuf, path: ConvertPath, options: ImportOptions) -> Result<DetileRun, ConvertError> {
    engine.set_convert_path(Some(path));
    let detiled = conv.detile_dmabuf(buf, options, dmabridge::READBACK_TIMEOUT);
    engine.set_convert_path(None);
    let detiled = detiled?;
    assert!(detiled.buffer.bytes().expect("idle") == &frame.linear[..], "{} {} on {path}: wrong bytes", frame.layout, frame.fourcc);
    assert_eq!((detiled.run.layout, detiled.run.path), (frame.layout, path), "{}", detiled.run);
    if path == ConvertPath::Gpu {
        let (w, h) = frame.extent;
        let dst = GpuBuffer::new(engine, frame.linear.len() as u64, BufferLocation::Readback).expect("buffer");
        let planes = packed_planes(frame.fourcc, w, h).expect("planes");
        let (run, s) = conv.detile_dmabuf_into(buf, &dst, &planes, options, SubmitOptions::default())?;
        s.wait(dmabridge::READBACK_TIMEOUT).expect("the detile finishes");
        assert!(dst.bytes().expect("idle") == &frame.linear[..], "{} {} into the caller's buffer: wrong bytes", frame.layout, frame.fourcc);
        assert_eq!(run, detiled.run, "both entry points take the same way");
    }
    Ok(detiled.run)
}

/// What lavapipe refused before: a tiled frame in a sealed memfd re-opened read-only, the
/// README's read-only share, detiled with the GPU path forced. It is read (the import
/// path's read-copy rule for a read-only fd on a driver that imports by mapping), never
/// imported; the CPU maps it read-only in place. Requiring zero-copy is a typed refusal
/// naming why.
#[test]
fn a_read_only_sealed_memfd_is_read_for_the_gpu_and_mapped_by_the_cpu() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    assert!(engine.info().imports_by_mapping(), "lavapipe imports by mapping the fd writable");
    for (i, (layout, fourcc, extent)) in FRAMES.into_iter().enumerate() {
        let frame = tiled_file(layout, fourcc, extent, 60 + i as u32);
        let buf = frame.descriptor(common::memfd_with(&frame.file)).reopen_read_only().expect("re-opened read-only");
        assert!(buf.read_only());
        for _ in 0..3 {
            let run = detile_on(&engine, &conv, &frame, &buf, ConvertPath::Gpu, ImportOptions::default()).expect("GPU detile of a read-only share");
            assert_eq!(run.source, DetileSource::Read, "{run}");
        }
        let run = detile_on(&engine, &conv, &frame, &buf, ConvertPath::Cpu, ImportOptions::default()).expect("CPU detile");
        assert_eq!(run.source, DetileSource::InPlace, "{run}");
        let strict = ImportOptions { require_zero_copy: true, ..ImportOptions::default() };
        match detile_on(&engine, &conv, &frame, &buf, ConvertPath::Gpu, strict) {
            Err(ConvertError::NotZeroCopy(why)) => assert!(why.contains("read-only"), "{why}"),
            other => panic!("zero-copy of a read-only share on a driver that maps imports: {other:?}"),
        }
        // The caller's fds are still its own (a refused import would have closed a dup).
        for p in buf.planes() {
            rustix::fs::fstat(p.fd).expect("the caller's fd is open");
        }
    }
    drop(conv);
    common::assert_clean(&engine);
}

/// An unsealed memfd can shrink under a mapping: without trust the detile reads it (GPU and
/// CPU alike), and requiring zero-copy names the missing seal; with `FdTrust` the caller
/// vouches for it, and it is imported (GPU) or mapped (CPU) in place.
#[test]
fn trust_decides_whether_an_unsealed_file_is_imported_or_read() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    let trusted = ImportOptions { trust: FdTrust::TrustRegularFiles, ..ImportOptions::default() };
    let strict = ImportOptions { require_zero_copy: true, ..ImportOptions::default() };
    for (i, (layout, fourcc, extent)) in FRAMES.into_iter().enumerate() {
        let frame = tiled_file(layout, fourcc, extent, 70 + i as u32);
        let buf = frame.descriptor(unsealed(&frame.file));
        for path in [ConvertPath::Gpu, ConvertPath::Cpu] {
            let run = detile_on(&engine, &conv, &frame, &buf, path, ImportOptions::default()).expect("untrusted detile");
            assert_eq!(run.source, DetileSource::Read, "untrusted: {run}");
            let run = detile_on(&engine, &conv, &frame, &buf, path, trusted).expect("trusted detile");
            assert_eq!(run.source, DetileSource::InPlace, "trusted: {run}");
            match detile_on(&engine, &conv, &frame, &buf, path, strict) {
                Err(ConvertError::Check(e @ ImportCheckError::NotFixedSize { .. })) => assert!(e.to_string().contains("F_SEAL_SHRINK"), "{e}"),
                other => panic!("zero-copy of an unsealed file on {path}: {other:?}"),
            }
            let run = detile_on(&engine, &conv, &frame, &buf, path, ImportOptions { trust: FdTrust::TrustRegularFiles, require_zero_copy: true })
                .expect("trusted, zero-copy");
            assert_eq!(run.source, DetileSource::InPlace, "{run}");
        }
    }
    drop(conv);
    common::assert_clean(&engine);
}

/// A buffer the producer shares writable (a real dma-buf in the lab, a sealed memfd
/// elsewhere) is imported in place on the GPU and mapped in place by the CPU.
#[test]
fn a_writable_fixed_size_share_is_used_in_place() {
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    for (i, (layout, fourcc, extent)) in FRAMES.into_iter().enumerate() {
        let frame = tiled_file(layout, fourcc, extent, 80 + i as u32);
        let buf = frame.descriptor(common::dmabuf_with(&frame.file));
        assert!(!buf.read_only());
        for path in [ConvertPath::Gpu, ConvertPath::Cpu] {
            let run = detile_on(&engine, &conv, &frame, &buf, path, ImportOptions::default()).expect("detile");
            assert_eq!(run.source, DetileSource::InPlace, "{run}");
        }
    }
    drop(conv);
    common::assert_clean(&engine);
}

/// The kernel lab's read-only real dma-buf (vgem's PRIME export without `DRM_RDWR`: an
/// `O_RDONLY` file the kernel refuses to map writable), the case lavapipe refuses on Linux
/// 6.12: the GPU detile reads it through a guarded read-only mapping, the CPU maps it
/// read-only. Outside the lab there is no vgem, and the memfd test above covers the rule.
#[test]
fn a_read_only_dma_buf_is_read_for_the_gpu_and_mapped_by_the_cpu() {
    if !common::in_kernel_lab() {
        eprintln!("not in the kernel lab: no vgem to export a read-only dma-buf");
        return;
    }
    let vgem = support_vgem::Vgem::open().expect("the kernel lab loads vgem (scripts/lab.sh --modules vgem)");
    let engine = common::engine();
    let conv = Converter::new(&engine).expect("pipelines");
    for (i, (layout, fourcc, extent)) in FRAMES.into_iter().enumerate() {
        let frame = tiled_file(layout, fourcc, extent, 90 + i as u32);
        let rows = (frame.file.len() as u32).div_ceil(4096);
        let dumb = vgem.dumb(4096, rows, 8).expect("dumb buffer");
        assert!(dumb.size as usize >= frame.file.len(), "vgem's dumb layout: {dumb:?}");
        // Exported read-only first: that fixes the dma-buf's access mode.
        let fd = vgem.export_read_only(&dumb).expect("read-only PRIME export");
        assert!(dmabridge::interop::sync::is_dma_buf(fd.as_fd()).expect("fstatfs"), "a PRIME export is a dma-buf");
        // Written through vgem's own mapping of its object, as the producer would.
        let offset = vgem.map_offset(dumb.handle).expect("MAP_DUMB");
        support_vgem::RawMapping::at(vgem.card(), offset, dumb.size as usize).expect("mmap through the card").write(&frame.file);
        let buf = frame.descriptor(fd);
        assert!(buf.read_only(), "DRM_CLOEXEC without DRM_RDWR exports O_RDONLY");
        let run = detile_on(&engine, &conv, &frame, &buf, ConvertPath::Gpu, ImportOptions::default()).expect("GPU detile of a read-only dma-buf");
        assert_eq!(run.source, DetileSource::Read, "{run}");
        let run = detile_on(&engine, &conv, &frame, &buf, ConvertPath::Cpu, ImportOptions::default()).expect("CPU detile");
        assert_eq!(run.source, DetileSource::InPlace, "{run}");
        let strict = ImportOptions { require_zero_copy: true, ..ImportOptions::default() };
        assert!(matches!(detile_on(&engine, &conv, &frame, &buf, ConvertPath::Gpu, strict), Err(ConvertError::NotZeroCopy(_))));
        assert!(dmabridge::interop::sync::is_dma_buf(buf.plane(0).expect("plane").fd).expect("the caller's fd is still open"));
        drop(buf);
        vgem.close(dumb).expect("GEM close");
    }
    drop(conv);
    common::assert_clean(&engine);
}
