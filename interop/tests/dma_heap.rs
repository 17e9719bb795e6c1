//! System memory from the kernel's dma-heap, and what a real dma-buf is, asserted from what
//! the kernel reports: in the kernel lab (`DMABRIDGE_TEST_CONFIG=kernel`, scripts/lab.sh)
//! the system heap must be there and every fact below is checked on its dma-bufs; elsewhere
//! (no dma-heap on this project's CI host) system memory must fall back to sealed memfds.

use std::os::fd::AsFd;
use std::sync::Arc;

use dmabridge_interop::collection::{Collection, Progress, Rights, SystemAllocator};
use dmabridge_interop::negotiate::ConstraintKind;
use dmabridge_interop::dmabuf::{plane_rows, PlaneLayout, 
    check_read_only, classify, file_size, read_exact_at, write_planes, DescriptorError, DmaBuf, DmaHeap, FdClass, FdTrust,
    NotReadOnly, PlaneMap, ReadError, SystemMemory,
};
use dmabridge_interop::negotiate::{Constraints, ExtentRange, Participant, Usage};
use dmabridge_interop::sync::{is_dma_buf, CpuAccessGuard, SyncAccess};
use dmabridge_interop::{Format, FormatSet, Fourcc, Layout, Modifier};

fn in_kernel_lab() -> bool {
    std::env::var("DMABRIDGE_TEST_CONFIG").as_deref() == Ok("kernel")
}

/// The system heap, which the lab must have; `None` (and nothing to test) elsewhere.
fn heap() -> Option<Arc<DmaHeap>> {
    match SystemMemory::detect() {
        SystemMemory::DmaHeap(h) => Some(h),
        SystemMemory::Memfd => {
            assert!(!in_kernel_lab(), "the kernel lab has /dev/dma_heap/system, but SystemMemory::detect() found no heap");
            None
        }
    }
}

#[test]
fn without_a_heap_system_memory_is_sealed_memfds() {
    if heap().is_some() {
        return;
    }
    let m = SystemMemory::detect();
    assert_eq!(m.name(), "memfd");
    let fd = m.alloc("heap-test", 100).unwrap();
    assert_eq!(classify(fd.as_fd(), FdTrust::Untrusted).unwrap(), FdClass::SealedMemfd);
    assert_eq!(file_size(fd.as_fd(), FdClass::SealedMemfd).unwrap(), 100);
}

#[test]
fn a_heap_buffer_is_a_dma_buf_with_no_pread_sized_by_seek_end() {
    let Some(heap) = heap() else { return };
    assert_eq!(SystemMemory::DmaHeap(heap.clone()).name(), "dma-heap:system");
    let fd = heap.alloc(100).unwrap();
    assert!(is_dma_buf(fd.as_fd()).unwrap());
    assert_eq!(classify(fd.as_fd(), FdTrust::Untrusted).unwrap(), FdClass::DmaBuf);
    let page = rustix::param::page_size() as u64;
    assert_eq!(file_size(fd.as_fd(), FdClass::DmaBuf).unwrap(), page, "the heap rounds up to whole pages");
    // What the kernel says of a dma-buf, which is why dmabridge never uses these on one.
    assert_eq!(rustix::fs::seek(&fd, rustix::fs::SeekFrom::Current(0)).err(), Some(rustix::io::Errno::INVAL), "no SEEK_CUR");
    assert_eq!(rustix::io::pread(&fd, &mut [0u8; 4], 0).err(), Some(rustix::io::Errno::SPIPE), "no pread");
    assert_eq!(rustix::io::pwrite(&fd, &[0u8; 4], 0).err(), Some(rustix::io::Errno::SPIPE), "no pwrite");
    let reopen = rustix::fs::open(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)).as_str(), rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty());
    assert_eq!(reopen.err(), Some(rustix::io::Errno::NXIO), "no reopen through /proc");
    // The heap zeroes what it hands out.
    let mut bytes = vec![1u8; page as usize];
    read_exact_at(fd.as_fd(), 0, &mut bytes).unwrap();
    assert!(bytes.iter().all(|b| *b == 0));
}

#[test]
fn bytes_go_in_and_out_of_a_dma_buf_through_the_guarded_mapping() {
    let Some(heap) = heap() else { return };
    let (w, h, stride, uv) = (6u32, 4u32, 16u64, 128u64);
    let fd = heap.alloc(uv + stride * 2).unwrap();
    let buf = DmaBuf::in_one_file(Fourcc::NV12, Layout::Explicit(Modifier::LINEAR), w, h, fd, &[PlaneLayout::linear(0, stride, plane_rows(Fourcc::NV12, 0, h)), PlaneLayout::linear(uv, stride, plane_rows(Fourcc::NV12, 1, h))]).unwrap();
    let frame: Vec<u8> = (1..=36).collect();
    write_planes(&buf, &frame).unwrap();
    let p0 = buf.plane(0).unwrap().fd;
    let mut file = vec![0u8; (uv + stride * 2) as usize];
    read_exact_at(p0, 0, &mut file).unwrap();
    assert_eq!(&file[16..22], &frame[6..12], "luma row 1 at the stride");
    assert_eq!(&file[128..134], &frame[24..30], "chroma at its offset");
    assert!(file[6..16].iter().all(|b| *b == 0), "padding untouched");
    // A read past the end is a short read, as a file's would be, not a fault.
    let page = rustix::param::page_size() as u64;
    let mut past = [0u8; 8];
    assert!(matches!(read_exact_at(p0, page - 4, &mut past), Err(ReadError::ShortRead { end_of_file, .. }) if end_of_file == page));
    // The mapping holds the bracket for as long as it lives.
    let map = PlaneMap::of_file(p0, 16, 6, SyncAccess::Read, FdTrust::Untrusted, std::time::Duration::from_secs(1)).unwrap();
    assert!(map.is_dma_buf());
    assert_eq!(map.bytes(), &frame[6..12]);
    let access = CpuAccessGuard::begin(p0, SyncAccess::ReadWrite, std::time::Duration::from_secs(1)).unwrap();
    assert!(access.is_dma_buf());
}

#[test]
fn read_only_is_the_kernel_refusing_a_writable_mapping() {
    let Some(heap) = heap() else { return };
    let fd = heap.alloc(4096).unwrap();
    let buf = DmaBuf::in_one_file(Fourcc::R8, Layout::Explicit(Modifier::LINEAR), 64, 64, fd, &[PlaneLayout::linear(0, 64, plane_rows(Fourcc::R8, 0, 64))]).unwrap();
    assert!(matches!(check_read_only(&buf), Err(NotReadOnly::Writable { plane: 0 })), "a read-write dma-buf is writable");
    assert!(matches!(buf.reopen_read_only(), Err(DescriptorError::Reopen { plane: 0, .. })), "a dma-buf cannot be reopened read-only");
    // A heap buffer exported read-only: the kernel refuses PROT_WRITE.
    let ro = heap.alloc_read_only(4096).unwrap();
    let ro = DmaBuf::in_one_file(Fourcc::R8, Layout::Explicit(Modifier::LINEAR), 64, 64, ro, &[PlaneLayout::linear(0, 64, plane_rows(Fourcc::R8, 0, 64))]).unwrap();
    assert!(ro.read_only());
    check_read_only(&ro).unwrap();
    let mut byte = [9u8];
    read_exact_at(ro.plane(0).unwrap().fd, 0, &mut byte).unwrap();
    assert_eq!(byte, [0], "a read-only holder still reads");
}

fn part(name: &str, min_buffers: u32) -> Participant {
    Participant::new(name, [Format::linear(Fourcc::XRGB8888)].into_iter().collect::<FormatSet>()).with_constraints(Constraints {
        width: ExtentRange::exactly(64),
        height: ExtentRange::exactly(48),
        min_buffers,
        ..Default::default()
    })
}

fn reader(name: &str) -> Participant {
    part(name, 1).constrain(|c| c.read_only = true).with_usage(Usage::SAMPLE)
}

#[test]
fn collections_use_the_heap_unless_a_holder_is_read_only() {
    let dma_bufs = |bufs: &[DmaBuf]| bufs.iter().flat_map(|b| b.planes()).all(|p| is_dma_buf(p.fd).unwrap());
    // Writers only: heap dma-bufs where there is a heap.
    let (mut c, root) = Collection::new("writers").unwrap();
    let a = c.duplicate(root, Rights::default(), false, "encoder").unwrap();
    c.bind(root, part("camera", 1)).unwrap();
    assert!(matches!(c.bind(a, part("encoder", 1)).unwrap(), Progress::Allocate(_)));
    assert_eq!(c.allocate_with(&mut SystemAllocator::new("t")), Progress::Allocated);
    assert_eq!(dma_bufs(&c.buffers_for(root).unwrap()), heap().is_some());

    // A read-only holder: memfds, which it gets read-only.
    let (mut c, root) = Collection::new("with-a-reader").unwrap();
    let b = c.duplicate(root, Rights { read_only: true }, false, "preview").unwrap();
    c.bind(root, part("camera", 1)).unwrap();
    assert!(matches!(c.bind(b, reader("preview")).unwrap(), Progress::Allocate(_)));
    assert_eq!(c.allocate_with(&mut SystemAllocator::new("t")), Progress::Allocated);
    assert!(!dma_bufs(&c.buffers_for(root).unwrap()));
    let theirs = c.buffers_for(b).unwrap();
    assert!(theirs.iter().all(|x| x.read_only() && check_read_only(x).is_ok()));

    // A read-only late joiner of heap buffers is refused, naming read-only; the others go on.
    let (mut c, root) = Collection::new("late").unwrap();
    c.bind(root, part("camera", 2)).unwrap();
    assert_eq!(c.allocate_with(&mut SystemAllocator::new("t")), Progress::Allocated);
    let late = c.attach_token(root, "recorder").unwrap();
    let p = c.bind(late, reader("recorder")).unwrap();
    if heap().is_some() {
        let Progress::Refused(conflicts) = p else { panic!("a read-only late joiner of dma-bufs: {p:?}") };
        assert_eq!(conflicts.iter().map(|c| c.constraint).collect::<Vec<_>>(), vec![ConstraintKind::ReadOnly], "{conflicts:?}");
        assert!(conflicts[0].detail.contains("no read-only reopen"), "{conflicts:?}");
    } else {
        assert_eq!(p, Progress::Allocated);
    }
    assert_eq!(c.buffers_for(root).unwrap().len(), 2, "the collection carries on");
}

/// A consumer that sees the same buffers again maps each once: the second view of a file is
/// a hit, shows what was written since (the mapping is shared and each view begins its own
/// CPU access), the cache holds no more than its capacity (the oldest goes first), and a
/// file that can shrink is refused as by `map_plane`. System memory: real dma-bufs in the
/// kernel lab, sealed memfds elsewhere.
#[test]
fn a_map_cache_maps_each_file_once_and_sees_new_bytes() {
    use dmabridge_interop::dmabuf::{check_import_with, write_all_at, ImportFacts, ImportOptions, MapCache, MapError};
    let memory = SystemMemory::detect();
    let buffer = |fill: u8| {
        let fd = memory.alloc("map-cache-test", 4096).unwrap();
        write_all_at(fd.as_fd(), 0, &[fill; 4096]).unwrap();
        DmaBuf::in_one_file(Fourcc::R8, Layout::Explicit(Modifier::LINEAR), 64, 64, fd, &[PlaneLayout::linear(0, 64, 64)]).unwrap()
    };
    let facts = |f: Format| (f.fourcc == Fourcc::R8).then_some(ImportFacts { memory_plane_count: 1, max_width: 64, max_height: 64, disjoint: false });
    let (a, b, c) = (buffer(1), buffer(2), buffer(3));
    let mut cache = MapCache::new(2);
    let view = |cache: &mut MapCache, buf: &DmaBuf| {
        let checked = check_import_with(buf, &facts, ImportOptions::default()).unwrap();
        cache.map_plane(&checked, 0, 4096).map(|v| v.bytes().to_vec())
    };
    assert!(view(&mut cache, &a).unwrap().iter().all(|x| *x == 1));
    assert_eq!((cache.len(), cache.hits()), (1, 0));
    write_all_at(a.plane(0).unwrap().fd, 100, &[9; 8]).unwrap();
    let again = view(&mut cache, &a).unwrap();
    assert_eq!((cache.len(), cache.hits()), (1, 1), "the second view of a file is a hit");
    assert_eq!(&again[98..110], &[1, 1, 9, 9, 9, 9, 9, 9, 9, 9, 1, 1], "a hit sees the bytes written since");
    assert!(view(&mut cache, &b).unwrap().iter().all(|x| *x == 2));
    assert!(view(&mut cache, &c).unwrap().iter().all(|x| *x == 3));
    assert_eq!(cache.len(), 2, "at most its capacity");
    assert!(view(&mut cache, &a).unwrap()[100] == 9);
    assert_eq!(cache.hits(), 1, "a was evicted first, so it is mapped again");
    // A plain memfd can shrink: never mapped, cached or not.
    let loose = rustix::fs::memfd_create("map-cache-loose", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&loose, 4096).unwrap();
    let loose = DmaBuf::in_one_file(Fourcc::R8, Layout::Explicit(Modifier::LINEAR), 64, 64, loose, &[PlaneLayout::linear(0, 64, 64)]).unwrap();
    assert!(matches!(view(&mut cache, &loose), Err(MapError::Shrinkable(0))));
}
