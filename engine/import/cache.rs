//! Import caches, so that a buffer a producer recycles every frame is imported once.
//!
//! A file identity is only meaningful while the file is open, since inode numbers are
//! reused, so each entry **owns an fd of what it imported** (the descriptor, or a dup of
//! the one fd): it keeps the files alive and the identity valid. Dropping an entry
//! (eviction, [`ImportCache::forget`], or dropping the cache) drops that fd and the Vulkan
//! objects together.
//!
//! On a hit the files are checked again, with the import's own check
//! ([`CheckedFile::recheck`](dmabridge_interop::dmabuf::CheckedFile::recheck): still the same kind of file, still long enough), then the
//! newly received fds are dropped (they are dups of files the entry already holds). A hit
//! that fails the recheck evicts the entry and returns the error. The caches hand out
//! clones: an evicted import stays alive while the caller holds it, and its Vulkan objects
//! wait for the GPU work that uses them.

use std::collections::HashMap;
use std::hash::Hash;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use ash::vk;
use dmabridge_interop::dmabuf::{BufferIdentity, DmaBuf, FdClassError, FileId, ImportCheckError, ImportOptions};

use super::{ImportError, ImportedBuffer, ImportedImage};
use crate::device::usage::ImageUse;
use crate::Engine;

/// Counters, for benchmarks and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

/// The least-recently-used bookkeeping both caches share.
struct Lru<K, V> {
    capacity: usize,
    entries: HashMap<K, (V, u64)>,
    clock: u64,
    stats: CacheStats,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    fn new(capacity: usize) -> Self {
        Lru { capacity: capacity.max(1), entries: HashMap::new(), clock: 0, stats: CacheStats::default() }
    }

    /// A hit: what `hand_out` makes of the entry for `key` once it passed its recheck (a
    /// failure evicts it). `None`: a miss, to be [`Lru::insert`]ed.
    fn hit<R, E>(&mut self, key: &K, hand_out: impl FnOnce(&V) -> Result<R, E>) -> Result<Option<R>, E> {
        self.clock += 1;
        let Some((value, used)) = self.entries.get_mut(key) else {
            self.stats.misses += 1;
            return Ok(None);
        };
        self.stats.hits += 1;
        *used = self.clock;
        match hand_out(value) {
            Ok(out) => Ok(Some(out)),
            Err(e) => {
                self.entries.remove(key);
                self.stats.evictions += 1;
                Err(e)
            }
        }
    }

    /// Keeps `value` for `key`, evicting the least recently used entry when full.
    fn insert(&mut self, key: K, value: V) {
        if self.entries.len() >= self.capacity {
            let oldest = self.entries.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
                self.stats.evictions += 1;
            }
        }
        self.entries.insert(key, (value, self.clock));
    }
}

struct Entry {
    // Field order matters: the image (and its Vulkan objects) drop before the descriptor.
    image: ImportedImage,
    _dmabuf: DmaBuf,
}

/// A least-recently-used cache of image imports on one engine, keyed by [`BufferIdentity`]
/// (dev+inode of every plane plus the layout), the use and the options. `Send`; not `Sync`
/// (it is `&mut` for every lookup). A copy-path entry copies the producer's new bytes each
/// time it is acquired ([`ImportedImage::record_acquire`]); an explicit one aliases the memory.
pub struct ImportCache {
    engine: Engine,
    lru: Lru<(BufferIdentity, ImageUse, ImportOptions), Entry>,
}

impl ImportCache {
    /// A cache holding at most `capacity` imports (at least 1). Size it to the producer's
    /// buffer pool: a pool larger than the cache re-imports every frame.
    pub fn new(engine: &Engine, capacity: usize) -> Self {
        ImportCache { engine: engine.clone(), lru: Lru::new(capacity) }
    }

    /// [`ImportCache::import_with`] with the default options.
    pub fn import(&mut self, buf: DmaBuf, usage: impl Into<ImageUse>) -> Result<ImportedImage, ImportError> {
        self.import_with(buf, usage, ImportOptions::default())
    }

    /// The import of `buf` for `usage`: cached (after [`ImportedImage::recheck`]), or
    /// imported now ([`Engine::import_dmabuf_with`]). Takes ownership of `buf`; on a hit it is
    /// dropped (closing its fds), on a miss the entry keeps it.
    pub fn import_with(&mut self, buf: DmaBuf, usage: impl Into<ImageUse>, options: ImportOptions) -> Result<ImportedImage, ImportError> {
        let usage: ImageUse = usage.into();
        let key = (buf.identity(), usage, options);
        if let Some(image) = self.lru.hit(&key, |e| e.image.recheck(&buf).map(|()| e.image.clone()))? {
            return Ok(image);
        }
        let image = self.engine.import_dmabuf_with(&buf, usage, options)?;
        self.lru.insert(key, Entry { image: image.clone(), _dmabuf: buf });
        Ok(image)
    }

    /// Drops the entry for a buffer the producer destroyed (any usage). Returns whether one was held.
    pub fn forget(&mut self, identity: &BufferIdentity) -> bool {
        let before = self.lru.entries.len();
        self.lru.entries.retain(|(id, _, _), _| id != identity);
        before != self.lru.entries.len()
    }

    pub fn clear(&mut self) {
        self.lru.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.lru.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lru.entries.is_empty()
    }

    pub fn stats(&self) -> CacheStats {
        self.lru.stats
    }
}

struct BufferEntry {
    // Field order matters: the buffer (and its Vulkan objects) drop before the fd.
    buffer: Arc<ImportedBuffer>,
    /// A dup of the fd it was imported from: keeps the file, and so its identity, alive.
    _fd: OwnedFd,
}

/// A least-recently-used cache of buffer imports ([`ImportedBuffer`]: a file's memory as a
/// storage buffer, what a conversion reads a producer's tiled frame from), keyed by the
/// file's identity, the length, the usage and the options: a producer's recycled dma-bufs
/// are imported once.
pub struct BufferImportCache {
    engine: Engine,
    lru: Lru<(FileId, u64, vk::BufferUsageFlags, ImportOptions), BufferEntry>,
}

impl BufferImportCache {
    /// A cache holding at most `capacity` imports (at least 1): size it to the producer's pool.
    pub fn new(engine: &Engine, capacity: usize) -> Self {
        BufferImportCache { engine: engine.clone(), lru: Lru::new(capacity) }
    }

    /// [`BufferImportCache::import_with`] with the default options.
    pub fn import(&mut self, fd: BorrowedFd<'_>, len: u64, usage: vk::BufferUsageFlags) -> Result<Arc<ImportedBuffer>, ImportError> {
        self.import_with(fd, len, usage, ImportOptions::default())
    }

    /// The first `len` bytes of the file behind `fd` as a buffer for `usage`: cached (after
    /// [`CheckedFile::recheck`](dmabridge_interop::dmabuf::CheckedFile::recheck)), or imported now ([`ImportedBuffer::import_with`], which
    /// refuses a file that can shrink). `fd` is borrowed; a miss keeps a dup of it.
    pub fn import_with(&mut self, fd: BorrowedFd<'_>, len: u64, usage: vk::BufferUsageFlags, options: ImportOptions) -> Result<Arc<ImportedBuffer>, ImportError> {
        let id = FileId::of(fd).map_err(|e| ImportCheckError::FdKind { plane: 0, source: FdClassError::Stat(e) })?;
        let key = (id, len, usage, options);
        let recheck = |e: &BufferEntry| e.buffer.file().recheck(fd, len, 0, options.trust).map(|()| e.buffer.clone()).map_err(ImportError::Changed);
        if let Some(buffer) = self.lru.hit(&key, recheck)? {
            return Ok(buffer);
        }
        let buffer = Arc::new(ImportedBuffer::import_with(&self.engine, fd, len, usage, options)?);
        let dup = fd.try_clone_to_owned().map_err(|source| ImportError::Dup { plane: 0, source })?;
        self.lru.insert(key, BufferEntry { buffer: buffer.clone(), _fd: dup });
        Ok(buffer)
    }

    pub fn len(&self) -> usize {
        self.lru.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lru.entries.is_empty()
    }

    pub fn stats(&self) -> CacheStats {
        self.lru.stats
    }
}
