//! `BufferImportCache`: a producer's recycled buffers are imported as storage buffers once
//! each, a hit rechecks the fd, a file that can shrink is refused, and the least recently
//! used import makes room for a new one.

mod common;

use std::sync::Arc;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::ImportCheckError;
use dmabridge::{BufferImportCache, Capability, ImportError};

const STORAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::STORAGE_BUFFER;

#[test]
fn a_recycled_buffer_is_imported_once_and_rechecked() {
    let engine = common::engine();
    assert!(engine.has_capability(Capability::DmaBufImport), "lavapipe imports dma-bufs in every configuration");
    let mut cache = BufferImportCache::new(&engine, 2);
    let (a, b, c) = (common::memfd_with(&[1u8; 8192]), common::memfd_with(&[2u8; 8192]), common::memfd_with(&[3u8; 8192]));
    let first = cache.import(std::os::fd::AsFd::as_fd(&a), 8192, STORAGE).expect("import a");
    // A dup of the same fd (as a producer hands the same buffer again) is the same import.
    let dup = a.try_clone().expect("dup");
    let again = cache.import(std::os::fd::AsFd::as_fd(&dup), 8192, STORAGE).expect("a again");
    assert!(Arc::ptr_eq(&first, &again), "a hit hands out the cached import");
    assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));
    // Longer than the file: refused on a miss, as the import checks it.
    let r = cache.import(std::os::fd::AsFd::as_fd(&a), 1 << 20, STORAGE);
    assert!(matches!(r, Err(ImportError::Check(ImportCheckError::PastEndOfFd { .. }))), "{r:?}");
    // Room for two: a third file evicts the least recently used (b, after a's hit).
    cache.import(std::os::fd::AsFd::as_fd(&b), 4096, STORAGE).expect("import b");
    cache.import(std::os::fd::AsFd::as_fd(&a), 8192, STORAGE).expect("a hit");
    cache.import(std::os::fd::AsFd::as_fd(&c), 4096, STORAGE).expect("import c");
    assert_eq!(cache.len(), 2);
    assert_eq!(cache.stats().evictions, 1);
    let hits = cache.stats().hits;
    cache.import(std::os::fd::AsFd::as_fd(&a), 8192, STORAGE).expect("a is still cached");
    assert_eq!(cache.stats().hits, hits + 1);
    drop((first, again, cache));
    common::assert_clean(&engine);
}

#[test]
fn a_file_that_can_shrink_is_refused() {
    let engine = common::engine();
    let mut cache = BufferImportCache::new(&engine, 4);
    // An unsealed memfd could shrink under the mapping: never imported.
    let fd = rustix::fs::memfd_create("dmabridge-test-unsealed", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
    rustix::fs::ftruncate(&fd, 4096).expect("size");
    let r = cache.import(std::os::fd::AsFd::as_fd(&fd), 4096, STORAGE);
    assert!(matches!(r, Err(ImportError::Check(ImportCheckError::NotFixedSize { .. }))), "{r:?}");
    assert!(cache.is_empty());
    common::assert_clean(&engine);
}
