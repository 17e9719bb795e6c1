//! Where the GPU reads a checked dma-buf's planes from: the room's one rule for giving a
//! caller's file to the driver, and its one fallback when it may not.
//!
//! - **Mapped**: every file that may be given to the driver ([`not_mappable`] says `None`)
//!   becomes one [`ImportedBuffer`], however many planes it holds (dedupe by file identity),
//!   spanning the furthest plane in it. The GPU reads the fd in place.
//! - **Read**: otherwise each use reads the planes into a staging buffer of dmabridge's own
//!   (`pread`; a dma-buf through a read-only mapping inside its `DMA_BUF_IOCTL_SYNC`
//!   bracket), so a sender that truncates the file gets a clean error, not a SIGBUS in the
//!   receiver. A caller that requires zero-copy gets [`ImportError::NotZeroCopy`] instead.
//!
//! The image import's copy path and the converter's dma-buf detile both read through a
//! [`PlaneSource`]; only the bytes each plane spans differ (visible rows, or padded tiles).

use ash::vk;
use dmabridge_interop::dmabuf::{read_exact_at, CheckedImport, DmaBuf, FdClass, FileId, ImportOptions, ReadError};

use super::{ImportError, ImportedBuffer};
use crate::device::submit::Completion;
use crate::resources::buffer::{BufferLocation, GpuBuffer};
use crate::Engine;

/// Where staged planes start: aligned for any texel a copy reads and any 16-byte group a
/// shader reads.
const STAGING_ALIGN: u64 = 16;

/// Why the planes may not be given to the driver, or `None` where they may: fixed-size files
/// only (a dma-buf, a sealed memfd, a file the caller's trust vouches for), and no read-only
/// fd where the driver would map it writable. A memfd or regular file is only ever imported
/// by mapping; a dma-buf is, by a driver that
/// [`imports_by_mapping`](crate::DeviceInfo::imports_by_mapping) (lavapipe refuses an
/// `O_RDONLY` dma-buf on Linux 6.12, found in the kernel lab).
pub(crate) fn not_mappable(engine: &Engine, checked: &CheckedImport<'_>) -> Option<String> {
    if let Some((i, reason)) = checked.planes().iter().enumerate().find_map(|(i, p)| match p.file.class {
        FdClass::Shrinkable(reason) => Some((i, reason)),
        _ => None,
    }) {
        return Some(format!("plane {i}: {reason}"));
    }
    let maps = engine.info().imports_by_mapping();
    (checked.dmabuf().read_only() && checked.planes().iter().any(|p| p.file.class != FdClass::DmaBuf || maps))
        .then(|| "its fds are read-only, and the driver maps an imported file writable".to_owned())
}

/// What a [`PlaneSource`] is for.
pub(crate) struct SourceRequest<'a> {
    /// Per plane: the bytes it spans from its offset (its visible rows for a copy, its padded
    /// tiles for a detile). Each must lie inside its file; the caller checked that.
    pub spans: &'a [u64],
    /// The usage of the buffers over mapped files.
    pub usage: vk::BufferUsageFlags,
    pub options: ImportOptions,
    /// The most bytes one buffer (a file's, or the staging buffer) may span.
    pub max_len: u64,
}

enum Files {
    Mapped(Vec<(FileId, ImportedBuffer)>),
    /// The descriptor's own dups, read on every fetch into a staging buffer of `len` bytes.
    Read { buf: DmaBuf, len: u64 },
}

#[derive(Debug, Clone, Copy)]
struct SourcePlane {
    /// Index of its buffer among the mapped files (0 when read).
    buffer: usize,
    /// Where its first byte is in that buffer (its offset in the file, or in the staging).
    offset: u64,
    /// Where it is in its file, and how many bytes it spans.
    file_offset: u64,
    len: u64,
}

/// A checked dma-buf's planes as buffers the GPU reads (see the module docs).
pub(crate) struct PlaneSource {
    files: Files,
    planes: Vec<SourcePlane>,
}

impl PlaneSource {
    /// Decides between the two ways (refusing a read when `request.options` require
    /// zero-copy) and imports the mapped files now. Borrows `checked`'s fds; the read way
    /// keeps dups.
    pub(crate) fn new(engine: &Engine, checked: &CheckedImport<'_>, request: SourceRequest<'_>) -> Result<PlaneSource, ImportError> {
        let planes = checked.planes();
        let too_large = |what: String, bytes: u64| ImportError::TooLarge { what, bytes, max: request.max_len };
        if let Some(why) = not_mappable(engine, checked) {
            if request.options.require_zero_copy {
                return Err(ImportError::NotZeroCopy(why));
            }
            tracing::debug!(fourcc = %checked.dmabuf().fourcc(), %why, "the planes are read into dmabridge's memory, not given to the driver");
            let mut len = 0u64;
            let mut out = Vec::with_capacity(planes.len());
            for (i, (p, &span)) in planes.iter().zip(request.spans).enumerate() {
                let end = len.checked_add(span).ok_or(ImportError::Read { plane: i, source: ReadError::Overflow { offset: len, len: span } })?;
                out.push(SourcePlane { buffer: 0, offset: len, file_offset: p.offset, len: span });
                len = end.div_ceil(STAGING_ALIGN) * STAGING_ALIGN;
            }
            if len > request.max_len {
                return Err(too_large(format!("{} staging buffer", checked.dmabuf().fourcc()), len));
            }
            let own = checked.dmabuf().try_clone().map_err(|e| ImportError::Dup { plane: 0, source: std::io::Error::other(e) })?;
            return Ok(PlaneSource { files: Files::Read { buf: own, len }, planes: out });
        }
        let mut files: Vec<(FileId, ImportedBuffer)> = Vec::new();
        let mut out = Vec::with_capacity(planes.len());
        for (i, (p, &span)) in planes.iter().zip(request.spans).enumerate() {
            let buffer = match files.iter().position(|(f, _)| *f == p.file.id) {
                Some(b) => b,
                None => {
                    let len = planes
                        .iter()
                        .zip(request.spans)
                        .filter(|(q, _)| q.file.id == p.file.id)
                        .map(|(q, s)| q.offset.saturating_add(*s))
                        .max()
                        .unwrap_or(0);
                    if len > request.max_len {
                        return Err(too_large(format!("file of plane {i}"), len));
                    }
                    let fd = checked.dmabuf().plane(i).map(|pl| pl.fd).ok_or(ImportError::Dup {
                        plane: i,
                        source: std::io::Error::other("the descriptor has no such plane"),
                    })?;
                    // not_mappable said every file is fixed-size; the spans lie inside them.
                    files.push((p.file.id, ImportedBuffer::of_checked(engine, fd, p.file, len, request.usage)?));
                    files.len() - 1
                }
            };
            out.push(SourcePlane { buffer, offset: p.offset, file_offset: p.offset, len: span });
        }
        Ok(PlaneSource { files: Files::Mapped(files), planes: out })
    }

    /// Whether the GPU reads the files in place (else each fetch reads them).
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.files, Files::Mapped(_))
    }

    /// Where plane `plane`'s first byte is in the buffer [`Fetched::buffer_of`] gives for it.
    pub(crate) fn offset(&self, plane: usize) -> u64 {
        self.planes.get(plane).map_or(0, |p| p.offset)
    }

    /// The buffers for one use: the mapped files, or a staging buffer read now (a file that
    /// shrank since the check is an [`ImportError::Read`], never a signal).
    pub(crate) fn fetch(&self, engine: &Engine) -> Result<Fetched<'_>, ImportError> {
        let staging = match &self.files {
            Files::Mapped(_) => None,
            Files::Read { buf, len } => {
                let mut staging = GpuBuffer::new(engine, *len, BufferLocation::Upload)?;
                let bytes = staging.bytes_mut()?;
                for (i, p) in self.planes.iter().enumerate() {
                    let fd = buf.plane(i).map(|pl| pl.fd).ok_or(ImportError::Dup { plane: i, source: std::io::Error::other("no such plane") })?;
                    let dst = p
                        .offset
                        .checked_add(p.len)
                        .and_then(|end| bytes.get_mut(usize::try_from(p.offset).ok()?..usize::try_from(end).ok()?))
                        .ok_or(ImportError::Read { plane: i, source: ReadError::Overflow { offset: p.offset, len: p.len } })?;
                    read_exact_at(fd, p.file_offset, dst).map_err(|source| ImportError::Read { plane: i, source })?;
                }
                Some(staging)
            }
        };
        Ok(Fetched { source: self, staging })
    }

    /// Records that GPU work completing at `until` reads the mapped files.
    pub(crate) fn track(&self, until: Completion) {
        if let Files::Mapped(files) = &self.files {
            for (_, b) in files {
                b.track(until);
            }
        }
    }
}

/// A [`PlaneSource`]'s buffers for one use.
pub(crate) struct Fetched<'a> {
    source: &'a PlaneSource,
    staging: Option<GpuBuffer>,
}

impl Fetched<'_> {
    /// The distinct buffers, in plane order of first use.
    pub(crate) fn buffers(&self) -> Vec<vk::Buffer> {
        match (&self.staging, &self.source.files) {
            (Some(s), _) => vec![s.buffer()],
            (None, Files::Mapped(files)) => files.iter().map(|(_, b)| b.buffer()).collect(),
            (None, Files::Read { .. }) => Vec::new(),
        }
    }

    /// The buffer plane `plane` is read from.
    pub(crate) fn buffer_of(&self, plane: usize) -> vk::Buffer {
        match (&self.staging, &self.source.files) {
            (Some(s), _) => s.buffer(),
            (None, Files::Mapped(files)) => {
                self.source.planes.get(plane).and_then(|p| files.get(p.buffer)).map_or(vk::Buffer::null(), |(_, b)| b.buffer())
            }
            (None, Files::Read { .. }) => vk::Buffer::null(),
        }
    }

    /// Whether the buffers are the producer's memory (acquired from and released to its
    /// side), not a staging buffer the host wrote.
    pub(crate) fn is_external(&self) -> bool {
        self.staging.is_none()
    }

    /// Records that GPU work completing at `until` reads the buffers; a staging buffer is
    /// dropped now and freed once that work is done.
    pub(crate) fn track(self, until: Completion) {
        self.source.track(until);
        if let Some(s) = self.staging {
            s.track(until);
        }
    }
}
