//! An import cache, so that a buffer a producer recycles every frame is imported once.
//!
//! Entries are keyed by [`BufferIdentity`] (dev+inode of every plane plus the layout) and
//! the usage. A file identity is only meaningful while the file is open, since inode numbers
//! are reused, so each entry **owns the descriptor it was imported from**: its fds keep the
//! files alive and the identity valid. Dropping an entry (eviction, [`ImportCache::forget`],
//! or dropping the cache) drops that descriptor and the Vulkan objects together.
//!
//! On a hit the files are checked again ([`ImportedImage::recheck`]: still the same kind of
//! file, still long enough), then the newly received descriptor is dropped (its fds are dups
//! of files the entry already holds). A hit that fails the recheck evicts the entry and
//! returns the error. The cache hands out clones of its [`ImportedImage`]s: an evicted
//! import stays alive while the caller holds it, and its Vulkan objects wait for the GPU
//! work that uses them. A copy-path entry copies the producer's new bytes each time it is
//! acquired ([`ImportedImage::record_acquire`]); an explicit one aliases the memory.

use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use ash::vk;
use dmabridge_interop::dmabuf::{BufferIdentity, DmaBuf, FdTrust, FileId};

use crate::resources::buffer::{BufferError, ImportedBuffer};
use crate::dmabuf::import::{ImportError, ImportOptions, ImportedImage};
use crate::device::usage::ImageUse;
use crate::Engine;

/// Counters, for benchmarks and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

struct Entry {
    // Field order matters: the image (and its Vulkan objects) drop before the descriptor.
    image: ImportedImage,
    _dmabuf: DmaBuf,
    last_used: u64,
}

/// A least-recently-used cache of imports on one engine. `Send`; not `Sync` (it is `&mut`
/// for every lookup).
pub struct ImportCache {
    engine: Engine,
    capacity: usize,
    entries: HashMap<(BufferIdentity, ImageUse, ImportOptions), Entry>,
    clock: u64,
    stats: CacheStats,
}

impl ImportCache {
    /// A cache holding at most `capacity` imports (at least 1). Size it to the producer's
    /// buffer pool: a pool larger than the cache re-imports every frame.
    pub fn new(engine: &Engine, capacity: usize) -> Self {
        ImportCache { engine: engine.clone(), capacity: capacity.max(1), entries: HashMap::new(), clock: 0, stats: CacheStats::default() }
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
        use std::collections::hash_map::Entry as Slot;
        self.clock += 1;
        let key = (buf.identity(), usage, options);
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.evict_oldest();
        }
        match self.entries.entry(key) {
            Slot::Occupied(slot) => {
                self.stats.hits += 1;
                if let Err(e) = slot.get().image.recheck(&buf) {
                    slot.remove();
                    self.stats.evictions += 1;
                    return Err(e);
                }
                drop(buf);
                let entry = slot.into_mut();
                entry.last_used = self.clock;
                Ok(entry.image.clone())
            }
            Slot::Vacant(slot) => {
                self.stats.misses += 1;
                let image = self.engine.import_dmabuf_with(&buf, usage, options)?;
                Ok(slot.insert(Entry { image, _dmabuf: buf, last_used: self.clock }).image.clone())
            }
        }
    }

    /// Drops the entry for a buffer the producer destroyed (any usage). Returns whether one was held.
    pub fn forget(&mut self, identity: &BufferIdentity) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(id, _, _), _| id != identity);
        before != self.entries.len()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    fn evict_oldest(&mut self) {
        let oldest = self.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            self.entries.remove(&k);
            self.stats.evictions += 1;
        }
    }
}

struct BufferEntry {
    // Field order matters: the buffer (and its Vulkan objects) drop before the fd.
    buffer: Arc<ImportedBuffer>,
    /// A dup of the fd it was imported from: keeps the file, and so its identity, alive.
    _fd: OwnedFd,
    last_used: u64,
}

/// A least-recently-used cache of buffer imports ([`ImportedBuffer`]: a file's memory as a
/// storage buffer, what a conversion reads a producer's tiled frame from), keyed by the
/// file's identity, the length and the usage: a producer's recycled dma-bufs are imported
/// once. As [`ImportCache`], each entry owns a dup of the fd it was imported from, and a hit
/// checks the fd again (still a file that cannot shrink, still long enough).
pub struct BufferImportCache {
    engine: Engine,
    capacity: usize,
    entries: HashMap<(FileId, u64, vk::BufferUsageFlags), BufferEntry>,
    clock: u64,
    stats: CacheStats,
}

impl BufferImportCache {
    /// A cache holding at most `capacity` imports (at least 1): size it to the producer's pool.
    pub fn new(engine: &Engine, capacity: usize) -> Self {
        BufferImportCache { engine: engine.clone(), capacity: capacity.max(1), entries: HashMap::new(), clock: 0, stats: CacheStats::default() }
    }

    /// The first `len` bytes of the file behind `fd` as a buffer for `usage`: cached, or
    /// imported now ([`ImportedBuffer::import`], which refuses a file that can shrink). `fd`
    /// is borrowed; a miss keeps a dup of it.
    pub fn import(&mut self, fd: BorrowedFd<'_>, len: u64, usage: vk::BufferUsageFlags) -> Result<Arc<ImportedBuffer>, BufferError> {
        self.clock += 1;
        let key = (FileId::of(fd).map_err(BufferError::Fd)?, len, usage);
        if let Some(entry) = self.entries.get_mut(&key) {
            self.stats.hits += 1;
            // The same file (the entry's fd keeps its identity), but checked again as the
            // import checks it: it must still be fixed-size and long enough.
            let class = dmabridge_interop::dmabuf::classify(fd, FdTrust::Untrusted).map_err(|e| BufferError::NotMappable(e.to_string()))?;
            let recheck = if !class.is_fixed_size() {
                Err(BufferError::NotMappable(format!("a {class}")))
            } else {
                match dmabridge_interop::dmabuf::file_size(fd, class).map_err(BufferError::Fd)? {
                    fd_size if fd_size < len => Err(BufferError::FdTooSmall { needed: len, fd_size }),
                    _ => Ok(()),
                }
            };
            if let Err(e) = recheck {
                self.entries.remove(&key);
                self.stats.evictions += 1;
                return Err(e);
            }
            entry.last_used = self.clock;
            return Ok(entry.buffer.clone());
        }
        self.stats.misses += 1;
        if self.entries.len() >= self.capacity {
            let oldest = self.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.entries.remove(&k);
                self.stats.evictions += 1;
            }
        }
        let buffer = Arc::new(ImportedBuffer::import(&self.engine, fd, len, usage)?);
        let dup = fd.try_clone_to_owned().map_err(BufferError::Fd)?;
        self.entries.insert(key, BufferEntry { buffer: buffer.clone(), _fd: dup, last_used: self.clock });
        Ok(buffer)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }
}
