//! The zero-copy path against the real lavapipe: buffers laid out by the test, export from
//! one device and import into another, hostile layouts, fd accounting and the import cache.
//! Every test runs with the validation layer on and fails on any message.

mod common;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{plane_rows, PlaneLayout, DmaBuf, PlaneDesc};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{ExportError, ExportRequest, ImportPath};

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);
const SAMPLE_AND_READ: vk::ImageUsageFlags =
    vk::ImageUsageFlags::from_raw(vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw());

/// The path lavapipe takes for a single-plane RGB format in this configuration.
fn rgb_path() -> ImportPath {
    if common::expect_modifiers() {
        ImportPath::Explicit
    } else {
        ImportPath::BufferCopy
    }
}

#[test]
fn ar24_with_padded_stride_and_offset_reads_back_exactly() {
    let engine = common::engine();
    let (w, h) = (61usize, 37usize);
    let (offset, stride) = (4096usize, w * 4 + 76);
    let packed = common::pattern(w * h * 4, 1);
    let mut file = vec![0xEEu8; offset + stride * h];
    common::place_rows(&mut file, &packed, w * 4, h, offset, stride);
    let fd = common::dmabuf_with(&file);
    let buf = DmaBuf::new(Fourcc::ARGB8888, LINEAR, w as u32, h as u32, vec![PlaneDesc {
        fd,
        offset: offset as u64,
        stride: stride as u64,
    }])
    .expect("descriptor");
    let image = engine.import_dmabuf(&buf, SAMPLE_AND_READ).expect("import");
    assert_eq!(image.path(), rgb_path());
    assert_eq!(image.read_back().expect("read back"), packed);
    drop(image);
    common::assert_clean(&engine);
}

#[test]
fn nv12_in_one_fd_with_a_gap_between_planes() {
    let engine = common::engine();
    let (w, h) = (64usize, 36usize);
    let y = common::pattern(w * h, 2);
    let uv = common::pattern(w * (h / 2), 3);
    let stride = 128usize;
    let uv_offset = stride * h + 8192; // the gap
    let mut file = vec![0x11u8; uv_offset + stride * (h / 2)];
    common::place_rows(&mut file, &y, w, h, 0, stride);
    common::place_rows(&mut file, &uv, w, h / 2, uv_offset, stride);
    let fd = common::dmabuf_with(&file);
    let buf = DmaBuf::in_one_file(Fourcc::NV12, LINEAR, w as u32, h as u32, fd, &[PlaneLayout::linear(0, stride as u64, plane_rows(Fourcc::NV12, 0, h as u32)), PlaneLayout::linear(uv_offset as u64, stride as u64, plane_rows(Fourcc::NV12, 1, h as u32))])
    .expect("descriptor");
    assert!(!buf.disjoint());
    let image = engine.import_dmabuf(&buf, SAMPLE_AND_READ).expect("import");
    // lavapipe imports no multi-planar format as an image: the copy path, in both configurations.
    assert_eq!(image.path(), ImportPath::BufferCopy);
    let back = image.read_back().expect("read back");
    assert_eq!(&back[..w * h], &y[..]);
    assert_eq!(&back[w * h..], &uv[..]);
    drop(image);
    common::assert_clean(&engine);
}

#[test]
fn nv12_with_one_fd_per_plane() {
    let engine = common::engine();
    let (w, h) = (48usize, 30usize);
    let y = common::pattern(w * h, 4);
    let uv = common::pattern(w * (h / 2), 5);
    let buf = DmaBuf::new(Fourcc::NV12, LINEAR, w as u32, h as u32, vec![
        PlaneDesc { fd: common::dmabuf_with(&y), offset: 0, stride: w as u64 },
        PlaneDesc { fd: common::dmabuf_with(&uv), offset: 0, stride: w as u64 },
    ])
    .expect("descriptor");
    assert!(buf.disjoint(), "two files, told apart by dev+inode");
    let image = engine.import_dmabuf(&buf, SAMPLE_AND_READ).expect("import");
    assert_eq!(image.path(), ImportPath::BufferCopy);
    let back = image.read_back().expect("read back");
    assert_eq!(&back[..w * h], &y[..]);
    assert_eq!(&back[w * h..], &uv[..]);
    drop(image);
    common::assert_clean(&engine);
}

#[test]
fn export_from_one_device_import_into_another() {
    let a = common::engine();
    let b = common::engine();
    let req = ExportRequest {
        fourcc: Fourcc::ABGR8888,
        width: 70,
        height: 45,
        image_use: (vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::SAMPLED).into(),
        acceptable: vec![LINEAR],
        negotiated: None,
    };
    match a.export_image(&req) {
        Err(ExportError::DmaBufExportUnsupported { .. }) if !common::expect_modifiers() => {
            // Plain lavapipe cannot export DMA_BUF at all; the refusal is typed and clear.
            common::assert_clean(&a);
            return;
        }
        Err(e) => panic!("export failed: {e}"),
        Ok(exported) => {
            assert!(common::expect_modifiers(), "plain lavapipe exported a dma-buf?");
            assert_eq!(exported.layout(), LINEAR, "the chosen modifier is reported, and is in the list");
            exported.clear_and_release([1.0, 0.0, 0.6, 1.0], Default::default()).expect("render on A").wait(dmabridge::READBACK_TIMEOUT).expect("render on A");
            let image = b.import_dmabuf(exported.dmabuf().expect("a dma-buf export"), SAMPLE_AND_READ).expect("import on B");
            assert_eq!(image.path(), ImportPath::Explicit);
            let back = image.read_back().expect("read back on B");
            assert_eq!(back.len(), 70 * 45 * 4);
            // AB24 is R, G, B, A in memory; 0.6 * 255 = 153.
            for px in back.chunks_exact(4) {
                assert_eq!(px, [255, 0, 153, 255]);
            }
            drop(image);
            drop(exported);
        }
    }
    common::assert_clean(&a);
    common::assert_clean(&b);
}

#[test]
fn export_refuses_a_modifier_list_it_cannot_meet() {
    let engine = common::engine();
    let y_tiled = Modifier::from_raw(0x0100_0000_0000_0002);
    let req = ExportRequest {
        fourcc: Fourcc::ARGB8888,
        width: 16,
        height: 16,
        image_use: (vk::ImageUsageFlags::SAMPLED).into(),
        acceptable: vec![Layout::Explicit(y_tiled)],
        negotiated: None,
    };
    let err = engine.export_image(&req).expect_err("lavapipe has no Y-tiling");
    assert!(
        matches!(err, ExportError::NoAcceptableModifier { .. } | ExportError::DmaBufExportUnsupported { .. }),
        "{err}"
    );
    common::assert_clean(&engine);
}

#[test]
fn opaque_fd_between_two_engines_on_the_same_driver() {
    let a = common::engine();
    let b = common::engine();
    let usage = vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC;
    let exported = a.export_opaque(Fourcc::ABGR8888, 33, 17, usage).expect("OPAQUE_FD export works in both configurations");
    assert_eq!(exported.layout(), Layout::Implicit);
    exported.clear_and_release([0.0, 1.0, 0.2, 1.0], Default::default()).expect("render on A").wait(dmabridge::READBACK_TIMEOUT).expect("render on A");
    let share = exported.opaque_fd().expect("opaque share");
    let image = b.import_opaque(share).expect("same driver, same device");
    assert_eq!(image.path(), ImportPath::OpaqueFd);
    let back = image.read_back().expect("read back on B");
    for px in back.chunks_exact(4) {
        assert_eq!(px, [0, 255, 51, 255]);
    }
    drop(image);
    // A share that claims another driver is refused before Vulkan sees the fd.
    let forged = dmabridge::OpaqueFd {
        fd: share.fd.try_clone().expect("dup"),
        allocation_size: share.allocation_size,
        memory_type_index: share.memory_type_index,
        device_uuid: share.device_uuid,
        driver_uuid: [0xAB; 16],
        fourcc: share.fourcc,
        width: share.width,
        height: share.height,
        image_use: share.image_use,
    };
    assert!(matches!(b.import_opaque(&forged), Err(dmabridge::ImportError::ForeignOpaqueFd { .. })));
    drop(exported);
    common::assert_clean(&a);
    common::assert_clean(&b);
}


#[test]
fn a_read_only_dma_buf_is_read_not_handed_to_a_driver_that_maps_it_writable() {
    use dmabridge::interop::dmabuf::SystemMemory;
    let SystemMemory::DmaHeap(heap) = SystemMemory::detect() else {
        assert!(!common::in_kernel_lab(), "the kernel lab has a system dma-heap");
        return;
    };
    let engine = common::engine();
    let (w, h) = (64u32, 16u32);
    // Exported read-only by the heap: the kernel refuses a writable mapping of it, and a
    // heap zeroes what it hands out.
    let fd = heap.alloc_read_only(u64::from(w * h * 4)).expect("read-only dma-buf");
    let buf = DmaBuf::new(Fourcc::ARGB8888, LINEAR, w, h, vec![PlaneDesc { fd, offset: 0, stride: u64::from(w) * 4 }]).expect("descriptor");
    assert!(buf.read_only());
    let strict = dmabridge::ImportOptions { require_zero_copy: true, ..Default::default() };
    let maps = engine.info().imports_by_mapping();
    match engine.import_dmabuf_with(&buf, SAMPLE_AND_READ, strict) {
        Err(dmabridge::ImportError::NotZeroCopy(why)) => assert!(maps && why.contains("read-only"), "{why}"),
        Ok(image) => assert!(!maps, "a driver that maps imports took a read-only fd: {:?}", image.path()),
        Err(e) => panic!("{e}"),
    }
    let image = engine.import_dmabuf(&buf, SAMPLE_AND_READ).expect("import");
    if maps && common::expect_modifiers() {
        assert_eq!(image.path(), ImportPath::ReadCopy, "read through a read-only mapping, never given to lavapipe");
    }
    assert_eq!(image.read_back().expect("read back"), vec![0u8; (w * h * 4) as usize]);
    assert!(dmabridge::interop::sync::is_dma_buf(buf.plane(0).expect("plane").fd).expect("the caller's fd is still open"));
    drop(image);
    common::assert_clean(&engine);
}
