//! One table of collection constraints against every allocator dmabridge has: the system
//! allocator (interop, no Vulkan) and the device allocator (the engine, on the real
//! lavapipe with the validation layer on). Each row is honoured by both, checked on the
//! buffers they return, or refused by both with an error naming the constraint: none is
//! dropped by one allocator and kept by the other.

mod common;

use dmabridge::ash::vk;
use dmabridge::interop::collection::{reconcile, Allocator, AllocatorError, Holders, ReconcileOptions, Reconciled, SystemAllocator};
use dmabridge::interop::dmabuf::{file_size, classify, FdTrust, BASE_ALIGN};
use dmabridge::interop::negotiate::{Constraints, ExtentRange, Participant};
use dmabridge::interop::{Format, Fourcc};
use dmabridge::DeviceAllocator;

/// One row: what the holder asks for.
#[derive(Debug, Clone, Copy)]
struct Row {
    align: u64,
    stride_align: u64,
    offset_align: u64,
    min_size: u64,
    /// Whether an allocator can honour it.
    honoured: bool,
}

const TABLE: [Row; 5] = [
    Row { align: 1, stride_align: 1, offset_align: 1, min_size: 0, honoured: true },
    Row { align: 4096, stride_align: 256, offset_align: 4096, min_size: 0, honoured: true },
    Row { align: 64, stride_align: 1024, offset_align: 65536, min_size: 1 << 20, honoured: true },
    // A base alignment beyond the page a memfd or dma-buf starts on.
    Row { align: 8192, stride_align: 1, offset_align: 1, min_size: 0, honoured: false },
    Row { align: 1 << 20, stride_align: 64, offset_align: 64, min_size: 0, honoured: false },
];

fn reconciled(row: Row) -> Reconciled {
    let holder = Participant::new("holder", [Format::linear(Fourcc::NV12)].into_iter().collect()).with_constraints(Constraints {
        width: ExtentRange::exactly(130),
        height: ExtentRange::exactly(66),
        min_buffers: 2,
        align: row.align,
        stride_align: row.stride_align,
        offset_align: row.offset_align,
        min_size: row.min_size,
        ..Default::default()
    });
    reconcile(&[holder], ReconcileOptions::default()).expect("one holder reconciles")
}

fn check(what: &str, row: Row, got: Result<Vec<dmabridge::interop::dmabuf::DmaBuf>, AllocatorError>) {
    if !row.honoured {
        let e = got.expect_err(&format!("{what}: {row:?} must be refused"));
        assert!(e.to_string().contains("align"), "{what}: {row:?}: {e}");
        assert!(e.to_string().contains(&row.align.to_string()), "{what}: {row:?}: {e}");
        return;
    }
    let bufs = got.unwrap_or_else(|e| panic!("{what}: {row:?}: {e}"));
    assert_eq!(bufs.len(), 2, "{what}");
    for b in &bufs {
        for (i, p) in b.plane_layouts().iter().enumerate() {
            assert_eq!(p.stride % row.stride_align, 0, "{what}: {row:?}: plane {i} stride {}", p.stride);
            assert_eq!(p.offset % row.offset_align, 0, "{what}: {row:?}: plane {i} offset {}", p.offset);
        }
        let fd = b.plane(0).expect("a plane").fd;
        let size = classify(fd, FdTrust::Untrusted).map_err(std::io::Error::other).and_then(|c| file_size(fd, c)).expect("size");
        assert!(size >= row.min_size, "{what}: {row:?}: {size} bytes");
    }
}

#[test]
fn every_allocator_honours_or_refuses_every_row() {
    assert_eq!(BASE_ALIGN, 4096);
    let engine = common::engine();
    for row in TABLE {
        let r = reconciled(row);
        check("system", row, SystemAllocator::new("table").allocate(&r, Holders::default()));
        let mut device = DeviceAllocator::new(&engine, vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST);
        check("device", row, device.allocate(&r, Holders::default()));
    }
    common::assert_clean(&engine);
}
