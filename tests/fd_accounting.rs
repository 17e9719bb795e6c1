//! fd accounting and the import cache against the real lavapipe. These tests count the
//! process's open fds, so they take a lock: other tests in the same binary must not open
//! or close fds meanwhile.

mod common;

use std::sync::Mutex;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{fd_count, DmaBuf, ImportCheckError, PlaneDesc};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{ImportCache, ImportError};

static FD_LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    FD_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);
const SAMPLE_AND_READ: vk::ImageUsageFlags =
    vk::ImageUsageFlags::from_raw(vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw());

fn ar24(file: &[u8], w: u32, h: u32, offset: u64, stride: u64, layout: Layout) -> DmaBuf {
    DmaBuf::new(Fourcc::ARGB8888, layout, w, h, vec![PlaneDesc { fd: common::dmabuf_with(file), offset, stride }])
        .expect("descriptor")
}

/// A hostile case: its name, the descriptor, and the error it must get.
type Case = (&'static str, DmaBuf, fn(&ImportError) -> bool);

#[test]
fn hostile_layouts_never_reach_the_driver() {
    let _guard = lock();
    let engine = common::engine();
    let page = vec![0u8; 4096];
    let cases: Vec<Case> = vec![
        ("unknown fourcc", DmaBuf::new(Fourcc::from_bytes(*b"ZZZZ"), LINEAR, 4, 4, vec![PlaneDesc {
            fd: common::dmabuf_with(&page), offset: 0, stride: 16 }]).expect("descriptor"),
            |e| matches!(e, ImportError::UnknownFourcc(_))),
        ("past the end of the fd", ar24(&page, 32, 33, 0, 128, LINEAR),
            |e| matches!(e, ImportError::Check(ImportCheckError::PastEndOfFd { .. }))),
        ("offset past the end", ar24(&page, 4, 4, 8192, 16, LINEAR),
            |e| matches!(e, ImportError::Check(ImportCheckError::PastEndOfFd { .. }))),
        ("stride too small", ar24(&page, 16, 4, 0, 32, LINEAR),
            |e| matches!(e, ImportError::Check(ImportCheckError::StrideTooSmall { .. }))),
        ("overflowing stride x rows", ar24(&page, 4, 4, 0, u64::MAX / 2, LINEAR),
            |e| matches!(e, ImportError::Check(ImportCheckError::Overflow { .. }))),
        ("extent beyond the device", ar24(&page, 1 << 20, 1, 0, 4 << 20, LINEAR),
            |e| matches!(e, ImportError::Check(ImportCheckError::ExtentTooLarge { .. }))),
        ("a tiled modifier lavapipe lacks", ar24(&page, 4, 4, 0, 16, Layout::Explicit(Modifier::from_raw(0x0100_0000_0000_0002))),
            |e| matches!(e, ImportError::NeedsConversion(_))),
    ];
    let before = fd_count().expect("fd count");
    for (what, buf, expected) in cases {
        match engine.import_dmabuf(&buf, SAMPLE_AND_READ) {
            Ok(_) => panic!("{what}: accepted"),
            Err(e) => assert!(expected(&e), "{what}: wrong error {e:?}"),
        }
        drop(buf);
    }
    // The case descriptors were made before counting; dropping them closed 7 fds.
    assert_eq!(fd_count().expect("fd count"), before - 7);
    common::assert_clean(&engine);
}

#[test]
fn a_thousand_import_release_cycles_leak_no_fd() {
    let _guard = lock();
    let engine = common::engine();
    let (w, h) = (16u32, 8u32);
    let file = common::pattern((w * h * 4) as usize, 9);
    let buf = ar24(&file, w, h, 0, (w * 4) as u64, LINEAR);
    // Warm up: the first import loads driver state that stays for the process.
    drop(engine.import_dmabuf(&buf, SAMPLE_AND_READ).expect("import"));
    let before = fd_count().expect("fd count");
    for _ in 0..1000 {
        let image = engine.import_dmabuf(&buf, SAMPLE_AND_READ).expect("import");
        drop(image);
    }
    assert_eq!(fd_count().expect("fd count"), before);
    common::assert_clean(&engine);
}

#[test]
fn the_cache_imports_a_recycled_buffer_once_and_follows_its_contents() {
    let _guard = lock();
    let engine = common::engine();
    let (w, h) = (8u32, 4u32);
    let first = common::pattern((w * h * 4) as usize, 10);
    let fd = common::dmabuf_with(&first);
    let buf = DmaBuf::new(Fourcc::ARGB8888, LINEAR, w, h, vec![PlaneDesc { fd, offset: 0, stride: (w * 4) as u64 }])
        .expect("descriptor");
    let mut cache = ImportCache::new(&engine, 2);
    let before = fd_count().expect("fd count");
    let mut steady = None;
    // The producer sends the same buffer again and again, each time with new fds.
    for frame in 0..20u32 {
        let copy = buf.try_clone().expect("dup");
        let image = cache.import(copy, SAMPLE_AND_READ).expect("cached import");
        if frame == 10 {
            // The producer writes a new frame into the same memory.
            let fresh = common::pattern((w * h * 4) as usize, 11);
            dmabridge::interop::dmabuf::write_all_at(buf.plane(0).expect("plane").fd, 0, &fresh).expect("write");
            let image = cache.import(buf.try_clone().expect("dup"), SAMPLE_AND_READ).expect("hit");
            assert_eq!(image.read_back().expect("read"), fresh, "a hit shows the producer's latest frame");
        } else if frame == 0 {
            assert_eq!(image.read_back().expect("read"), first);
        }
        // A live import holds the entry's descriptor fd and the dup Vulkan owns for the
        // imported memory; the count must not grow with the number of frames.
        let now = fd_count().expect("fd count");
        assert_eq!(*steady.get_or_insert(now), now, "frame {frame}");
    }
    let stats = cache.stats();
    assert_eq!(stats.misses, 1);
    assert_eq!(stats.hits, 20);
    // A different buffer evicts nothing until the capacity is reached, then the oldest.
    for seed in 0..3 {
        let other = ar24(&common::pattern((w * h * 4) as usize, 20 + seed), w, h, 0, (w * 4) as u64, LINEAR);
        cache.import(other, SAMPLE_AND_READ).expect("import");
    }
    assert_eq!(cache.len(), 2);
    assert_eq!(cache.stats().evictions, 2);
    assert!(!cache.forget(&buf.identity()), "evicted already");
    cache.clear();
    assert_eq!(fd_count().expect("fd count"), before);
    drop(cache);
    common::assert_clean(&engine);
}
