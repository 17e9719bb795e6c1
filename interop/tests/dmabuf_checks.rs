//! The import checks against real memfds (standing in for dma-bufs, which this kernel lacks):
//! good layouts pass, and each kind of hostile descriptor is rejected with its own error,
//! without leaking an fd.

use std::os::fd::OwnedFd;
use std::sync::{Mutex, MutexGuard};

use dmabridge_interop::dmabuf::{plane_rows, PlaneLayout, 
    check_import, fd_count, sealed_memfd_of_size, DescriptorError, DmaBuf, FdClassError,
    FileKind, ImportCheckError, ImportFacts, ImportLimits, PlaneDesc,
};
use dmabridge_interop::{Format, Fourcc, Layout, Modifier};

/// fd counts are per process and the harness runs tests on parallel threads: every test in
/// this file holds this lock so that the leak checks see only their own fds.
static FD_LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    FD_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);
const X_TILED: Modifier = Modifier::from_raw(0x0100_0000_0000_0001);

fn memfd(size: u64) -> OwnedFd {
    sealed_memfd_of_size("dmabuf-checks", size).unwrap()
}

fn facts(planes: usize, disjoint: bool) -> ImportFacts {
    ImportFacts {
        memory_plane_count: planes,
        max_width: 4096,
        max_height: 4096,
        disjoint,
    }
}

/// A device that takes linear AR24 and NV12 (disjoint too), X-tiled AR24 with one extra
/// metadata plane, and nothing else.
fn device() -> ImportLimits {
    ImportLimits::new()
        .allow(Format::linear(Fourcc::ARGB8888), facts(1, false))
        .allow(Format::linear(Fourcc::NV12), facts(2, true))
        .allow(Format::linear(Fourcc::YUV420), facts(3, true))
        .allow(Format::explicit(Fourcc::ARGB8888, X_TILED), facts(2, false))
}

fn ar24(width: u32, height: u32, fd: OwnedFd, offset: u64, stride: u64) -> DmaBuf {
    DmaBuf::new(
        Fourcc::ARGB8888,
        LINEAR,
        width,
        height,
        vec![PlaneDesc { fd, offset, stride }],
    )
    .unwrap()
}

// ---- good layouts ------------------------------------------------------------------------

#[test]
fn ar24_with_padded_stride_and_offset_passes_and_fits_exactly() {
    let _g = lock();
    // 64x32, stride 320 > 256, starting 4096 bytes in; the file is exactly big enough.
    let size = 4096 + 320 * 32;
    let buf = ar24(64, 32, memfd(size), 4096, 320);
    let checked = check_import(&buf, &device()).unwrap();
    let p = checked.planes()[0];
    assert_eq!(
        (p.offset, p.stride, p.rows, p.end, p.file.size),
        (4096, 320, 32, size, size)
    );
    assert_eq!(p.size(), 320 * 32);
    assert!(!checked.disjoint());
    assert!(std::ptr::eq(checked.dmabuf(), &buf));

    // One byte less and the last row runs off the end.
    let short = ar24(64, 32, memfd(size - 1), 4096, 320);
    assert!(matches!(
        check_import(&short, &device()),
        Err(ImportCheckError::PastEndOfFd { plane: 0, end, fd_size, .. }) if end == size && fd_size == size - 1
    ));
}

#[test]
fn a_sealed_memfd_is_safe_to_map() {
    let _g = lock();
    // tests/fd_classes.rs covers every class; here, the helper every test uses is one.
    let sealed = ar24(16, 16, memfd(4096), 0, 64);
    assert!(check_import(&sealed, &device()).unwrap().zero_copy_safe());
}

#[test]
fn nv12_in_one_fd_with_a_gap_passes() {
    let _g = lock();
    // Y: 64x48 at 0 (3072 bytes); a gap; UV: 32x24 pairs of 2 bytes at 8192.
    let buf = DmaBuf::in_one_file(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        memfd(8192 + 64 * 24),
        &[PlaneLayout::linear(0, 64, plane_rows(Fourcc::NV12, 0, 48)), PlaneLayout::linear(8192, 64, plane_rows(Fourcc::NV12, 1, 48))])
    .unwrap();
    assert!(!buf.disjoint());
    assert_eq!(buf.plane(0).unwrap().file, buf.plane(1).unwrap().file);
    // One object, each plane sized as the check below spans it.
    assert_eq!(buf.plane_layouts(), vec![PlaneLayout::linear(0, 64, 48), PlaneLayout::linear(8192, 64, 24)]);
    let checked = check_import(&buf, &device()).unwrap();
    assert_eq!(checked.planes()[1].rows, 24);
    assert_eq!(checked.planes()[1].end, 8192 + 64 * 24);
    assert!(!checked.disjoint());
}

#[test]
fn nv12_with_one_fd_per_plane_is_disjoint_by_inode() {
    let _g = lock();
    let buf = DmaBuf::new(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        vec![
            PlaneDesc {
                fd: memfd(64 * 48),
                offset: 0,
                stride: 64,
            },
            PlaneDesc {
                fd: memfd(64 * 24),
                offset: 0,
                stride: 64,
            },
        ],
    )
    .unwrap();
    assert!(buf.disjoint());
    assert_eq!(buf.plane_layouts(), vec![PlaneLayout::linear(0, 64, 48), PlaneLayout { object: 1, ..PlaneLayout::linear(0, 64, 24) }]);
    let checked = check_import(&buf, &device()).unwrap();
    assert!(checked.disjoint());
    // Both planes at offset 0 is fine: they are in different files.
    assert_ne!(checked.planes()[0].file, checked.planes()[1].file);
}

/// A buffer's memory objects and its planes' layouts make the descriptor: each plane's
/// `object` picks its file (dup'd), the caller keeps its fds, and a plane in an object that
/// was not given is a typed error.
#[test]
fn of_objects_puts_each_plane_in_the_file_its_layout_names() {
    let _g = lock();
    let before = fd_count().unwrap();
    let objects = vec![memfd(64 * 48), memfd(64 * 24)];
    let layouts = [PlaneLayout::linear(0, 64, 48), PlaneLayout { object: 1, ..PlaneLayout::linear(0, 64, 24) }];
    let buf = DmaBuf::of_objects(Fourcc::NV12, LINEAR, 64, 48, &objects, &layouts).unwrap();
    assert!(buf.disjoint());
    assert_eq!(buf.plane_layouts(), layouts);
    let one = DmaBuf::of_objects(Fourcc::NV12, LINEAR, 64, 48, &objects[..1], &[layouts[0], PlaneLayout::linear(64 * 48, 64, 24)]).unwrap();
    assert!(!one.disjoint(), "two planes in one object are one file");
    match DmaBuf::of_objects(Fourcc::NV12, LINEAR, 64, 48, &objects[..1], &layouts) {
        Err(DescriptorError::NoSuchObject { plane: 1, object: 1, objects: 1 }) => {}
        other => panic!("expected NoSuchObject, got {:?}", other.map(|b| b.plane_count())),
    }
    drop((buf, one, objects));
    assert_eq!(fd_count().unwrap(), before, "no fd kept or leaked");
}

#[test]
fn dups_and_reopens_are_the_same_file_whatever_the_fd_number() {
    let _g = lock();
    let fd = memfd(8192);
    let dup = fd.try_clone().unwrap();
    let buf = DmaBuf::new(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        vec![
            PlaneDesc {
                fd,
                offset: 0,
                stride: 64,
            },
            PlaneDesc {
                fd: dup,
                offset: 4096,
                stride: 64,
            },
        ],
    )
    .unwrap();
    assert!(!buf.disjoint(), "a dup is the same file");
    let ro = buf.reopen_read_only().unwrap();
    assert!(ro.read_only() && !buf.read_only());
    assert_eq!(
        ro.identity(),
        buf.identity(),
        "a read-only re-open is the same file"
    );
    assert_eq!(buf.try_clone().unwrap().identity(), buf.identity());
}

#[test]
fn identity_keys_a_cache_on_files_and_layout() {
    let _g = lock();
    use std::collections::HashMap;
    let a = ar24(16, 16, memfd(4096), 0, 64);
    let a2 = a.try_clone().unwrap();
    let b = ar24(16, 16, memfd(4096), 0, 64);
    let a_other_stride = DmaBuf::new(
        Fourcc::ARGB8888,
        LINEAR,
        16,
        16,
        vec![PlaneDesc {
            fd: a.dup_fd(0).unwrap(),
            offset: 0,
            stride: 128,
        }],
    )
    .unwrap();
    let mut cache = HashMap::new();
    cache.insert(a.identity(), "a");
    assert_eq!(
        cache.get(&a2.identity()),
        Some(&"a"),
        "new fds to the same file hit"
    );
    assert_eq!(cache.get(&b.identity()), None, "another file misses");
    assert_eq!(
        cache.get(&a_other_stride.identity()),
        None,
        "the same file read differently misses"
    );
    assert!(a.dup_fd(1).is_err());
}

#[test]
fn tiled_modifier_with_a_metadata_plane() {
    let _g = lock();
    // The device reports 2 memory planes for X-tiled AR24; the metadata plane's rows are not
    // known (radv's DCC planes span far less than stride x height), so it must only start
    // inside the fd and outside the pixels, and is not held to the format's row size.
    let fd = memfd(1 << 16);
    let buf = DmaBuf::in_one_file(
        Fourcc::ARGB8888,
        Layout::Explicit(X_TILED),
        64,
        64,
        fd,
        &[PlaneLayout::linear(0, 512, plane_rows(Fourcc::ARGB8888, 0, 64)), PlaneLayout::linear(32768, 16, plane_rows(Fourcc::ARGB8888, 1, 64))])
    .unwrap();
    let checked = check_import(&buf, &device()).unwrap();
    assert_eq!((checked.planes()[1].rows, checked.planes()[1].end), (0, 32768));
}

// ---- hostile descriptors: each its own error ---------------------------------------------

#[test]
fn check_1_unknown_format() {
    let _g = lock();
    let buf = DmaBuf::new(
        Fourcc::from_bytes(*b"ZZZZ"),
        LINEAR,
        16,
        16,
        vec![PlaneDesc {
            fd: memfd(4096),
            offset: 0,
            stride: 64,
        }],
    )
    .unwrap();
    assert!(
        matches!(check_import(&buf, &device()), Err(ImportCheckError::UnknownFormat { fourcc }) if fourcc.padded() == "ZZZZ")
    );
}

#[test]
fn check_2_modifier_not_allowed() {
    let _g = lock();
    let y_tiled = Modifier::from_raw(0x0100_0000_0000_0002);
    let buf = DmaBuf::new(
        Fourcc::ARGB8888,
        Layout::Explicit(y_tiled),
        16,
        16,
        vec![PlaneDesc {
            fd: memfd(4096),
            offset: 0,
            stride: 64,
        }],
    )
    .unwrap();
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::LayoutNotAllowed { .. })
    ));
    // Implicit is a layout of its own, not a wildcard.
    let implicit = DmaBuf::new(
        Fourcc::ARGB8888,
        Layout::Implicit,
        16,
        16,
        vec![PlaneDesc {
            fd: memfd(4096),
            offset: 0,
            stride: 64,
        }],
    )
    .unwrap();
    assert!(
        matches!(check_import(&implicit, &device()), Err(ImportCheckError::LayoutNotAllowed { format }) if format.layout == Layout::Implicit)
    );
}

#[test]
fn check_3_extent_too_large() {
    let _g = lock();
    let buf = ar24(4097, 1, memfd(4097 * 4), 0, 4097 * 4);
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::ExtentTooLarge {
            width: 4097,
            max_width: 4096,
            ..
        })
    ));
}

#[test]
fn check_4_subsampled_formats_need_even_extents() {
    let _g = lock();
    let cpu = ImportLimits::linear_cpu(4096);
    let one_file = |fourcc: Fourcc, w: u32, h: u32| {
        let info = dmabridge_interop::format_info(fourcc).unwrap();
        let planes: Vec<PlaneLayout> = (0..info.plane_count())
            .map(|i| PlaneLayout::linear((i as u64) << 20, info.min_stride(i, w), info.plane_height(i, h)))
            .collect();
        DmaBuf::in_one_file(fourcc, LINEAR, w, h, memfd(4 << 20), &planes).unwrap()
    };
    // 4:2:0 needs both even; 4:2:2 (planar or packed) an even width only; RGB neither.
    for fourcc in [Fourcc::NV12, Fourcc::P010, Fourcc::YUV420] {
        assert!(matches!(
            check_import(&one_file(fourcc, 33, 32), &cpu),
            Err(ImportCheckError::OddWidth { width: 33, .. })
        ), "{fourcc}");
        assert!(matches!(
            check_import(&one_file(fourcc, 32, 33), &cpu),
            Err(ImportCheckError::OddHeight { height: 33, .. })
        ), "{fourcc}");
        assert!(check_import(&one_file(fourcc, 32, 32), &cpu).is_ok(), "{fourcc}");
    }
    for fourcc in [Fourcc::NV16, Fourcc::YUYV, Fourcc::UYVY] {
        assert!(matches!(
            check_import(&one_file(fourcc, 33, 32), &cpu),
            Err(ImportCheckError::OddWidth { width: 33, .. })
        ), "{fourcc}");
        assert!(check_import(&one_file(fourcc, 32, 33), &cpu).is_ok(), "{fourcc}");
    }
    assert!(check_import(&one_file(Fourcc::ARGB8888, 33, 33), &cpu).is_ok());
    let e = check_import(&one_file(Fourcc::NV12, 33, 32), &cpu).unwrap_err();
    assert!(e.to_string().contains("4:2:0") && e.to_string().contains("multiple of 2"), "{e}");
}

#[test]
fn check_5_plane_count_against_the_device() {
    let _g = lock();
    // NV12 with one plane.
    let buf = DmaBuf::new(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        vec![PlaneDesc {
            fd: memfd(1 << 16),
            offset: 0,
            stride: 64,
        }],
    )
    .unwrap();
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::PlaneCount {
            got: 1,
            expected: 2,
            ..
        })
    ));
    // X-tiled AR24: the device says 2 memory planes though the format has 1.
    let tiled = DmaBuf::new(
        Fourcc::ARGB8888,
        Layout::Explicit(X_TILED),
        16,
        16,
        vec![PlaneDesc {
            fd: memfd(4096),
            offset: 0,
            stride: 64,
        }],
    )
    .unwrap();
    assert!(matches!(
        check_import(&tiled, &device()),
        Err(ImportCheckError::PlaneCount {
            got: 1,
            expected: 2,
            ..
        })
    ));
}

#[test]
fn check_6_stride_too_small() {
    let _g = lock();
    let buf = ar24(64, 32, memfd(1 << 16), 0, 64 * 4 - 1);
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::StrideTooSmall {
            plane: 0,
            stride: 255,
            min: 256
        })
    ));
    // The chroma plane of 34-wide NV12 holds 17 pairs: 34 bytes.
    let nv12 = DmaBuf::in_one_file(
        Fourcc::NV12,
        LINEAR,
        34,
        34,
        memfd(1 << 16),
        &[PlaneLayout::linear(0, 64, plane_rows(Fourcc::NV12, 0, 34)), PlaneLayout::linear(4096, 33, plane_rows(Fourcc::NV12, 1, 34))])
    .unwrap();
    assert!(matches!(
        check_import(&nv12, &device()),
        Err(ImportCheckError::StrideTooSmall {
            plane: 1,
            stride: 33,
            min: 34
        })
    ));
}

#[test]
fn check_8_plane_past_the_end_of_the_fd() {
    let _g = lock();
    // The chroma plane starts inside the file but its last row does not fit.
    let nv12 = DmaBuf::in_one_file(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        memfd(8192),
        &[PlaneLayout::linear(0, 64, plane_rows(Fourcc::NV12, 0, 48)), PlaneLayout::linear(8192 - 64 * 24 + 1, 64, plane_rows(Fourcc::NV12, 1, 48))])
    .unwrap();
    assert!(matches!(
        check_import(&nv12, &device()),
        Err(ImportCheckError::PastEndOfFd {
            plane: 1,
            fd_size: 8192,
            ..
        })
    ));
    // An offset beyond the end entirely.
    let far = ar24(16, 16, memfd(4096), 1 << 40, 64);
    assert!(matches!(
        check_import(&far, &device()),
        Err(ImportCheckError::PastEndOfFd { plane: 0, .. })
    ));
}

#[test]
fn check_8_overflow_in_offset_plus_stride_times_rows() {
    let _g = lock();
    // stride x rows overflows.
    let buf = ar24(16, 16, memfd(4096), 0, u64::MAX / 8);
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::Overflow {
            plane: 0,
            rows: 16,
            ..
        })
    ));
    // stride x rows fits, the offset pushes it over.
    let buf = ar24(16, 16, memfd(4096), u64::MAX - 100, 64);
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::Overflow { plane: 0, .. })
    ));
}

#[test]
fn check_7_a_pipe_is_not_a_buffer() {
    let _g = lock();
    // lseek on a pipe fails and on a directory answers 2^63 - 1: neither reaches the size
    // check any more (tests/fd_classes.rs has every kind).
    let (r, _w) = rustix::pipe::pipe().unwrap();
    let buf = ar24(16, 16, r, 0, 64);
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::FdKind {
            plane: 0,
            source: FdClassError::NotAFile {
                kind: FileKind::Fifo
            }
        })
    ));
}

#[test]
fn check_9_overlapping_planes_in_one_file() {
    let _g = lock();
    // The chroma plane starts in the last row of luma.
    let nv12 = DmaBuf::in_one_file(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        memfd(1 << 16),
        &[PlaneLayout::linear(0, 64, plane_rows(Fourcc::NV12, 0, 48)), PlaneLayout::linear(64 * 47, 64, plane_rows(Fourcc::NV12, 1, 48))])
    .unwrap();
    assert!(matches!(
        check_import(&nv12, &device()),
        Err(ImportCheckError::PlanesOverlap { a: 0, b: 1 })
    ));
    // Planes that merely touch are fine.
    let touching = DmaBuf::in_one_file(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        memfd(1 << 16),
        &[PlaneLayout::linear(0, 64, plane_rows(Fourcc::NV12, 0, 48)), PlaneLayout::linear(64 * 48, 64, plane_rows(Fourcc::NV12, 1, 48))])
    .unwrap();
    assert!(check_import(&touching, &device()).is_ok());
    // YUV420 with Y alone and U, V sharing a second file: U and V overlap.
    let uv = memfd(1 << 16);
    let buf = DmaBuf::new(
        Fourcc::YUV420,
        LINEAR,
        64,
        48,
        vec![
            PlaneDesc {
                fd: memfd(64 * 48),
                offset: 0,
                stride: 64,
            },
            PlaneDesc {
                fd: uv.try_clone().unwrap(),
                offset: 0,
                stride: 32,
            },
            PlaneDesc {
                fd: uv,
                offset: 32 * 23,
                stride: 32,
            },
        ],
    )
    .unwrap();
    assert!(buf.disjoint());
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::PlanesOverlap { a: 1, b: 2 })
    ));
}

#[test]
fn check_9_disjoint_planes_on_a_device_without_disjoint() {
    let _g = lock();
    let no_disjoint = ImportLimits::new().allow(Format::linear(Fourcc::NV12), facts(2, false));
    let buf = DmaBuf::new(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        vec![
            PlaneDesc {
                fd: memfd(64 * 48),
                offset: 0,
                stride: 64,
            },
            PlaneDesc {
                fd: memfd(64 * 24),
                offset: 0,
                stride: 64,
            },
        ],
    )
    .unwrap();
    assert!(matches!(
        check_import(&buf, &no_disjoint),
        Err(ImportCheckError::DisjointUnsupported { .. })
    ));
}

#[test]
fn zero_extent_and_plane_counts_are_structural_errors() {
    let _g = lock();
    let one = |fd| {
        vec![PlaneDesc {
            fd,
            offset: 0,
            stride: 64,
        }]
    };
    assert!(matches!(
        DmaBuf::new(Fourcc::ARGB8888, LINEAR, 0, 16, one(memfd(4096))),
        Err(DescriptorError::ZeroExtent {
            width: 0,
            height: 16
        })
    ));
    assert!(matches!(
        DmaBuf::new(Fourcc::ARGB8888, LINEAR, 16, 0, one(memfd(4096))),
        Err(DescriptorError::ZeroExtent {
            width: 16,
            height: 0
        })
    ));
    assert!(matches!(
        DmaBuf::new(Fourcc::ARGB8888, LINEAR, 16, 16, vec![]),
        Err(DescriptorError::PlaneCount(0))
    ));
    let five = (0..5)
        .map(|_| PlaneDesc {
            fd: memfd(4096),
            offset: 0,
            stride: 64,
        })
        .collect();
    assert!(matches!(
        DmaBuf::new(Fourcc::YUV420, LINEAR, 16, 16, five),
        Err(DescriptorError::PlaneCount(5))
    ));
    assert!(matches!(
        DmaBuf::in_one_file(Fourcc::NV12, LINEAR, 16, 16, memfd(4096), &[]),
        Err(DescriptorError::PlaneCount(0))
    ));
}

#[test]
fn checks_run_in_order() {
    let _g = lock();
    // Too large *and* stride too small *and* past the end: the extent is reported.
    let buf = ar24(8192, 8192, memfd(16), 0, 1);
    assert!(matches!(
        check_import(&buf, &device()),
        Err(ImportCheckError::ExtentTooLarge { .. })
    ));
    // Stride too small and overlapping: the stride is reported.
    let nv12 = DmaBuf::in_one_file(
        Fourcc::NV12,
        LINEAR,
        64,
        48,
        memfd(1 << 16),
        &[PlaneLayout::linear(0, 63, plane_rows(Fourcc::NV12, 0, 48)), PlaneLayout::linear(0, 64, plane_rows(Fourcc::NV12, 1, 48))])
    .unwrap();
    assert!(matches!(
        check_import(&nv12, &device()),
        Err(ImportCheckError::StrideTooSmall { plane: 0, .. })
    ));
    // Odd 4:2:0 extent and too few planes: the extent (check 4) is reported, before the plane
    // count (check 5).
    let odd = DmaBuf::new(
        Fourcc::NV12,
        LINEAR,
        63,
        48,
        vec![PlaneDesc {
            fd: memfd(1 << 16),
            offset: 0,
            stride: 64,
        }],
    )
    .unwrap();
    assert!(matches!(
        check_import(&odd, &device()),
        Err(ImportCheckError::OddWidth { .. })
    ));
    // Every error renders a message (no panic on hostile numbers).
    let e = check_import(&ar24(16, 16, memfd(4096), u64::MAX, u64::MAX), &device()).unwrap_err();
    assert!(e.to_string().contains("overflows"), "{e}");
}

#[test]
fn linear_cpu_limits_take_every_known_format() {
    let _g = lock();
    let cpu = ImportLimits::linear_cpu(1 << 14);
    for info in dmabridge_interop::FORMAT_INFO {
        use dmabridge_interop::dmabuf::DeviceFacts;
        let f = cpu.import_facts(Format::linear(info.fourcc)).unwrap();
        assert_eq!(f.memory_plane_count, info.plane_count());
        assert!(cpu.import_facts(Format::implicit(info.fourcc)).is_none());
    }
    // A closure is a DeviceFacts too.
    let only_r8 = |f: Format| (f == Format::linear(Fourcc::R8)).then_some(facts(1, false));
    let r8 = DmaBuf::new(
        Fourcc::R8,
        LINEAR,
        7,
        3,
        vec![PlaneDesc {
            fd: memfd(21),
            offset: 0,
            stride: 7,
        }],
    )
    .unwrap();
    assert!(check_import(&r8, &only_r8).is_ok());
}

#[test]
fn no_fd_leaks_across_accepted_and_rejected_descriptors() {
    let _g = lock();
    let before = fd_count().unwrap();
    for i in 0..200u64 {
        // Rejected at construction: the fds passed in are closed.
        let _ = DmaBuf::new(
            Fourcc::ARGB8888,
            LINEAR,
            0,
            1,
            vec![PlaneDesc {
                fd: memfd(64),
                offset: 0,
                stride: 4,
            }],
        );
        let _ = DmaBuf::in_one_file(Fourcc::NV12, LINEAR, 16, 16, memfd(64), &[PlaneLayout::linear(0, 16, 16); 5]);
        // Accepted or rejected by the checks, then dropped with its clones.
        let buf = DmaBuf::in_one_file(
            Fourcc::NV12,
            LINEAR,
            64,
            48,
            memfd(8192),
            &[PlaneLayout::linear(0, 64, plane_rows(Fourcc::NV12, 0, 48)), PlaneLayout::linear(4096 + i, 64, plane_rows(Fourcc::NV12, 1, 48))])
        .unwrap();
        let clone = buf.try_clone().unwrap();
        let ro = buf.reopen_read_only().unwrap();
        let _ = check_import(&clone, &device());
        let _ = check_import(&ro, &device());
        let _ = buf.dup_fd(1).unwrap();
        drop(buf.into_fds());
    }
    let after = fd_count().unwrap();
    println!(
        "fd_count before={before} after={after} (200 rounds of accepted and rejected descriptors)"
    );
    assert_eq!(before, after);
}

/// A write-only fd is refused when the descriptor is made: every consumer reads a frame.
#[test]
fn a_write_only_fd_is_refused() {
    let _g = lock();
    let fd = memfd(4096);
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    let wronly = rustix::fs::open(path.as_str(), rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty()).expect("reopen write-only");
    let r = DmaBuf::new(Fourcc::R8, LINEAR, 64, 64, vec![PlaneDesc { fd: wronly, offset: 0, stride: 64 }]);
    assert!(matches!(r, Err(DescriptorError::WriteOnly { plane: 0 })), "{r:?}");
    let ok = DmaBuf::new(Fourcc::R8, LINEAR, 64, 64, vec![PlaneDesc { fd, offset: 0, stride: 64 }]);
    assert!(ok.is_ok(), "{ok:?}");
}
