//! vgem as a second DRM device beside the Vulkan one, sharing dma-bufs with it both ways
//! through PRIME (`tests/support_vgem`):
//! - vgem -> Vulkan: a dumb buffer written through vgem's own mapping, exported, imported
//!   by the engine and read back byte-exact, and then written again by vgem and read again
//!   without a new import (the import aliases vgem's memory);
//! - Vulkan -> vgem: an image the engine exports and fills, imported into vgem; vgem holds the
//!   same dma-buf (re-exported, it is the same file; a fence vgem attaches through its handle
//!   is one the exporter's fd waits for) and its bytes are the engine's; vgem's own mapping
//!   of an imported object (MAP_DUMB) is refused with EINVAL, as the kernel does for every
//!   imported GEM object.
//!
//! Each test counts the process's fds before and after, so they take a lock (the lab runs
//! test binaries on two threads). Runs in the kernel lab (`scripts/lab.sh --modules vgem`);
//! elsewhere it says why it is skipped.

mod common;
#[path = "support_vgem/mod.rs"]
mod support_vgem;

use std::os::fd::AsFd;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{
    fd_count, plane_rows, read_exact_at, DmaBuf, FileId, PlaneLayout,
};
use dmabridge::interop::sync::{is_dma_buf, CpuAccessError, CpuAccessGuard, SyncAccess};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{Capability, ExportRequest, GpuBuffer, ImportPath};
use support_vgem::{RawMapping, Vgem};

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);
const SAMPLE_AND_READ: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw(),
);
/// AR24 rather than XR24: every byte, alpha included, is compared, and an ignored alpha
/// channel is not promised to survive a copy.
const FOURCC: Fourcc = Fourcc::ARGB8888;
const WIDTH: u32 = 256;
const HEIGHT: u32 = 64;
const ROW: usize = WIDTH as usize * 4;

static FD_LOCK: Mutex<()> = Mutex::new(());

/// The fd-count lock, or `None` (with the reason printed) outside the kernel lab.
fn in_lab() -> Option<MutexGuard<'static, ()>> {
    if !common::in_kernel_lab() {
        eprintln!("skipped: PRIME between vgem and the Vulkan device needs the kernel lab (scripts/lab.sh --modules vgem)");
        return None;
    }
    Some(FD_LOCK.lock().unwrap_or_else(PoisonError::into_inner))
}

fn open_vgem() -> Vgem {
    Vgem::open().expect("the kernel lab loads vgem (scripts/lab.sh --modules vgem)")
}

/// The `rows` visible rows of `ROW` bytes at `stride` from `offset` in `file`, packed.
fn packed_rows(file: &[u8], offset: usize, stride: usize, rows: usize) -> Vec<u8> {
    (0..rows)
        .flat_map(|r| &file[offset + r * stride..offset + r * stride + ROW])
        .copied()
        .collect()
}

/// The dma-buf's exporter, as the kernel names it (`exp_name` in its fdinfo).
fn exporter(fd: std::os::fd::BorrowedFd<'_>) -> String {
    use std::os::fd::AsRawFd;
    let info =
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).expect("fdinfo");
    info.lines()
        .find_map(|l| l.strip_prefix("exp_name:"))
        .map_or_else(|| "an unnamed exporter".to_owned(), |n| n.trim().to_owned())
}

fn errno(e: &std::io::Error) -> Option<rustix::io::Errno> {
    e.raw_os_error().map(rustix::io::Errno::from_raw_os_error)
}

#[test]
fn a_vgem_dumb_buffer_is_imported_and_read_back_byte_exact() {
    let Some(_guard) = in_lab() else { return };
    let before = fd_count().expect("fd count");
    let engine = common::engine();
    // The lab's lavapipe (real udmabuf, no emulation) imports dma-bufs, explicitly by modifier.
    assert!(
        engine.has_capability(Capability::DmaBufImport),
        "the lab's device imports dma-bufs: {:?}",
        engine.capabilities()
    );
    assert!(
        engine.has_capability(Capability::ExplicitModifiers),
        "the lab's lavapipe has the modifier extension: {:?}",
        engine.capabilities()
    );
    let vgem = open_vgem();

    let buffer = vgem.dumb(WIDTH, HEIGHT, 32).expect("dumb buffer");
    let (pitch, size) = (buffer.pitch as usize, buffer.size as usize);
    assert!(
        pitch >= ROW && size >= pitch * HEIGHT as usize,
        "vgem's dumb layout: pitch {pitch}, size {size}"
    );
    // Written through vgem's own mapping of its object (MAP_DUMB on the card), as a
    // producer on that device would, not through the dma-buf.
    let offset = vgem
        .map_offset(buffer.handle)
        .expect("MAP_DUMB on vgem's own dumb buffer");
    let map = RawMapping::at(vgem.card(), offset, size).expect("mmap through the card");
    let first = common::pattern(ROW * HEIGHT as usize, 31);
    let mut file = vec![0u8; size];
    common::place_rows(&mut file, &first, ROW, HEIGHT as usize, 0, pitch);
    map.write(&file);

    let fd = vgem.export(&buffer).expect("PRIME export");
    assert!(
        is_dma_buf(fd.as_fd()).expect("fstatfs"),
        "a PRIME export is a dma-buf"
    );
    // PRIME knows its own export: importing it back gives vgem the handle it already has.
    assert_eq!(
        vgem.import(fd.as_fd())
            .expect("PRIME import of vgem's own export"),
        buffer.handle
    );

    let buf = DmaBuf::in_one_file(
        FOURCC,
        LINEAR,
        WIDTH,
        HEIGHT,
        fd,
        &[PlaneLayout::linear(
            0,
            u64::from(buffer.pitch),
            plane_rows(FOURCC, 0, HEIGHT),
        )],
    )
    .expect("descriptor");
    let image = engine
        .import_dmabuf(&buf, SAMPLE_AND_READ)
        .expect("import the vgem dma-buf");
    assert_eq!(
        image.path(),
        ImportPath::Explicit,
        "a LINEAR dma-buf that cannot shrink is imported zero-copy"
    );
    assert_eq!(image.read_back().expect("read back"), first);

    // vgem writes a new frame into the same memory: the same import shows it, since the
    // image is vgem's memory, not a copy of it.
    let second = common::pattern(ROW * HEIGHT as usize, 32);
    common::place_rows(&mut file, &second, ROW, HEIGHT as usize, 0, pitch);
    map.write(&file);
    assert_eq!(
        image.read_back().expect("read back"),
        second,
        "the import aliases vgem's dumb buffer"
    );

    drop((image, buf, map));
    vgem.close(buffer).expect("GEM_CLOSE");
    let closed = vgem
        .export_handle(buffer.handle)
        .expect_err("the handle is closed");
    assert_eq!(errno(&closed), Some(rustix::io::Errno::NOENT), "{closed}");
    drop(vgem);
    engine.collect_garbage();
    assert_eq!(
        engine.deferred_destructions(),
        0,
        "the read-backs were waited for"
    );
    common::assert_clean(&engine);
    drop(engine);
    assert_eq!(fd_count().expect("fd count"), before, "fds leaked");
}

#[test]
fn a_vulkan_export_is_imported_into_vgem_as_the_same_dma_buf() {
    let Some(_guard) = in_lab() else { return };
    let before = fd_count().expect("fd count");
    let engine = common::engine();
    assert!(
        engine.has_capability(Capability::DmaBufExport),
        "the lab's device exports dma-bufs: {:?}",
        engine.capabilities()
    );
    let vgem = open_vgem();

    let req = ExportRequest::new(FOURCC, WIDTH, HEIGHT, vk::ImageUsageFlags::TRANSFER_DST)
        .with_acceptable([LINEAR]);
    let exported = engine
        .export_image(&req)
        .expect("export a LINEAR AR24 image");
    assert_eq!(exported.layout(), LINEAR);
    let shared = exported.dmabuf().expect("a dma-buf export");
    let plane = shared.plane(0).expect("plane 0");
    assert!(
        is_dma_buf(plane.fd).expect("fstatfs"),
        "the engine exports a real dma-buf in the lab"
    );
    let (plane_offset, stride) = (plane.offset as usize, plane.stride as usize);
    assert!(stride >= ROW, "stride {stride}");
    let pattern = common::pattern(ROW * HEIGHT as usize, 33);
    let src = GpuBuffer::from_bytes(&engine, &pattern).expect("upload buffer");
    exported
        .upload_and_release(
            &src,
            &[PlaneLayout::linear(0, ROW as u64, HEIGHT)],
            Default::default(),
        )
        .expect("upload")
        .wait(dmabridge::READBACK_TIMEOUT)
        .expect("upload done");

    eprintln!(
        "importing into vgem a dma-buf exported by {}",
        exporter(plane.fd)
    );
    let handle = vgem
        .import(plane.fd)
        .expect("PRIME import of the engine's dma-buf into vgem");
    assert_eq!(
        vgem.import(plane.fd).expect("second PRIME import"),
        handle,
        "the same dma-buf gives the same handle"
    );
    // Re-exported by its importer, the object is the dma-buf it came from: the same file.
    let again = vgem
        .export_handle(handle)
        .expect("PRIME re-export of the imported handle");
    assert!(is_dma_buf(again.as_fd()).expect("fstatfs"));
    assert_eq!(
        FileId::of(again.as_fd()).expect("fstat"),
        plane.file,
        "vgem re-exports the engine's dma-buf itself"
    );

    let mut file = vec![0u8; plane_offset + stride * HEIGHT as usize];
    read_exact_at(again.as_fd(), 0, &mut file).expect("guarded read through vgem's re-export");
    assert_eq!(
        packed_rows(&file, plane_offset, stride, HEIGHT as usize),
        pattern,
        "vgem's object holds the engine's pixels"
    );

    // vgem's object shares the dma-buf's reservation object: a fence vgem attaches through
    // its handle is one the exporter's own fd waits for.
    let fence = vgem
        .attach_write_fence_to(handle)
        .expect("VGEM_FENCE_ATTACH on the imported handle");
    let blocked = CpuAccessGuard::begin(plane.fd, SyncAccess::Read, Duration::from_millis(100))
        .expect_err("vgem's fence is pending");
    assert!(
        matches!(blocked, CpuAccessError::Timeout { .. }),
        "{blocked}"
    );
    vgem.signal(fence).expect("signal");
    drop(CpuAccessGuard::begin(plane.fd, SyncAccess::Read, Duration::from_secs(5)).expect("signalled"));

    // vgem's own mapping of an imported object: MAP_DUMB refuses it (vgem has no
    // dumb_map_offset of its own, and drm_gem_dumb_map_offset turns imported objects away
    // with EINVAL), so the card never maps another device's memory; the dma-buf is the way.
    let refused = vgem
        .map_offset(handle)
        .expect_err("MAP_DUMB on an imported handle");
    assert_eq!(errno(&refused), Some(rustix::io::Errno::INVAL), "{refused}");

    vgem.close_handle(handle)
        .expect("GEM_CLOSE of the imported handle");
    let closed = vgem.close_handle(handle).expect_err("closed already");
    assert_eq!(errno(&closed), Some(rustix::io::Errno::INVAL), "{closed}");
    drop((again, src, exported, vgem));
    engine.collect_garbage();
    assert_eq!(
        engine.deferred_destructions(),
        0,
        "the upload was waited for"
    );
    common::assert_clean(&engine);
    drop(engine);
    assert_eq!(fd_count().expect("fd count"), before, "fds leaked");
}

/// The library's guarded CPU access reaches the bytes at the offset it is given on a dma-buf
/// whose exporter ignores the mmap offset: vgem's (and virtio-gpu's) DRM shmem helpers fault
/// pages in by their place in the mapping, so a mapping that starts at page 1 shows page 0.
/// dmabridge maps dma-bufs from their first byte; a mapping of the whole file (offset 0,
/// right under any exporter) is the reference.
#[test]
fn guarded_access_at_an_offset_reaches_that_offset() {
    let Some(_lock) = in_lab() else { return };
    let vgem = open_vgem();
    let buffer = vgem.dumb(64, 64, 32).expect("dumb buffer");
    let fd = vgem.export(&buffer).expect("PRIME export");
    let len = buffer.size as usize;
    let at = 4096 + 1024;
    dmabridge::interop::dmabuf::write_all_at(fd.as_fd(), at as u64, &[0x5a; 64]).expect("guarded write");
    let whole = RawMapping::new(&fd, len).expect("mmap from 0").read();
    assert!(whole[at..at + 64].iter().all(|&b| b == 0x5a), "the write landed at its offset");
    assert!(whole[1024..1024 + 64].iter().all(|&b| b == 0), "and not at the same place in page 0");
    let mut back = [0u8; 64];
    dmabridge::interop::dmabuf::read_exact_at(fd.as_fd(), at as u64, &mut back).expect("guarded read");
    assert_eq!(back, [0x5a; 64]);
    drop(fd);
    vgem.close(buffer).expect("close");
}
