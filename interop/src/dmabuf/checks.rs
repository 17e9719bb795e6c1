//! The import checks: every fact about a layout that can be checked against the fds and the
//! device's limits, checked before any driver call, in a fixed order, each with its own error.
//!
//! The order follows wlroots' `vulkan_texture_from_dmabuf` (render/vulkan/texture.c): what the
//! format is, whether the device takes it, how big it may be and how many planes it has come
//! first, because every later check needs them. Then come the checks that read the fds:
//! what kind of file each one is (a directory or a socket is no buffer, and a file its
//! sender can truncate is no buffer to map), then whether the layout fits in them.
//! lavapipe imports a dma-buf by mmapping it, so a layout that passes the driver but runs past
//! the end of the file faults inside Mesa, and so does a file that shrinks after the check:
//! these checks are a security boundary.
//!
//! The order, fixed (each number is the `Check N` of its [`ImportCheckError`] variants):
//!
//! 1. the fourcc is known ([`format_info`]);
//! 2. the device imports this format+layout for this usage ([`DeviceFacts::import_facts`]);
//! 3. the extent is within the device's maximum for it;
//! 4. the extent is a whole number of chroma blocks: an even width where the format
//!    subsamples chroma horizontally (4:2:0, 4:2:2, packed YUYV/UYVY), an even height where
//!    it subsamples vertically (4:2:0), as Vulkan requires of those formats;
//! 5. the plane count equals the device's memory-plane count for it;
//! 6. each format plane's stride is at least its row of samples (`min_stride`);
//! 7. each plane's fd is a dma-buf or a regular file ([`classify`]); then, if
//!    [`ImportOptions::require_zero_copy`], each one's size is fixed ([`FdClass`]);
//! 8. each plane's `offset + stride x rows` is computed without overflow and is at most the
//!    size of its fd (`fstat`, or `lseek(SEEK_END)` for a dma-buf); a metadata plane (a
//!    memory plane past the format's, whose rows are not known) starts inside its fd;
//! 9. the disjoint rules: planes are disjoint exactly when they are not all in one file (by
//!    dev+ino); a disjoint buffer needs a device that supports disjoint import; planes that
//!    share a file (disjoint or not) must not share bytes, and no metadata plane starts
//!    inside another plane's.

use std::collections::HashMap;
use std::io;
use std::os::fd::BorrowedFd;

use super::descriptor::{DmaBuf, FileId};
use super::fd_kind::{classify, file_size, FdClass, FdClassError, FdTrust, NotFixedReason};
use super::pread::{read_at, ReadError};
use crate::plane_layout::plane_rows;
use crate::{format_info, Format, Fourcc, Layout, Modifier, Subsampling};

/// What a device says about importing one format+layout for the usage at hand: from
/// `VkDrmFormatModifierPropertiesEXT` and `VkImageFormatProperties` (or the equivalent
/// for EGL, KMS, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportFacts {
    /// `drmFormatModifierPlaneCount`: memory planes the layout has. For LINEAR it is the
    /// format's plane count; a vendor modifier may add planes (compression metadata).
    pub memory_plane_count: usize,
    /// `maxExtent` for this format, layout and usage.
    pub max_width: u32,
    pub max_height: u32,
    /// Whether planes may live in different files (`VK_FORMAT_FEATURE_DISJOINT_BIT`).
    pub disjoint: bool,
}

/// The device side of the checks. The engine implements it from its capability query;
/// `None` means the format+layout cannot be imported for this usage on this device.
pub trait DeviceFacts {
    fn import_facts(&self, format: Format) -> Option<ImportFacts>;
}

impl<F: Fn(Format) -> Option<ImportFacts>> DeviceFacts for F {
    fn import_facts(&self, format: Format) -> Option<ImportFacts> {
        self(format)
    }
}

/// A [`DeviceFacts`] written out as a table, for callers without a device query (a CPU
/// consumer, a command line, tests).
#[derive(Debug, Clone, Default)]
pub struct ImportLimits {
    facts: HashMap<Format, ImportFacts>,
}

impl ImportLimits {
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows `format` with these facts (replacing earlier facts for it).
    pub fn allow(mut self, format: Format, facts: ImportFacts) -> Self {
        self.facts.insert(format, facts);
        self
    }

    /// Every fourcc in [`crate::FORMAT_INFO`] with an explicit LINEAR layout, as a CPU reader
    /// takes them: memory planes = format planes, extent up to `max` x `max`, disjoint allowed.
    pub fn linear_cpu(max: u32) -> Self {
        let mut l = Self::new();
        for info in crate::FORMAT_INFO {
            l.facts.insert(
                Format {
                    fourcc: info.fourcc,
                    layout: Layout::Explicit(Modifier::LINEAR),
                },
                ImportFacts {
                    memory_plane_count: info.plane_count(),
                    max_width: max,
                    max_height: max,
                    disjoint: true,
                },
            );
        }
        l
    }
}

impl DeviceFacts for ImportLimits {
    fn import_facts(&self, format: Format) -> Option<ImportFacts> {
        self.facts.get(&format).copied()
    }
}

/// How an import may treat the caller's fds: the one options type of every import of a
/// dma-buf, whatever it becomes (an image, a buffer, a detile's source, a CPU read). The
/// default trusts nothing and lets a shrinkable file pass: it is then marked
/// [`FdClass::Shrinkable`] and read into the importer's own memory, never mapped (see
/// [`CheckedImport::zero_copy_safe`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ImportOptions {
    /// Whether regular files that are not sealed count as fixed-size (the caller vouches
    /// that nobody truncates them): see [`FdTrust`].
    pub trust: FdTrust,
    /// Refuse every path but a zero-copy one, naming what stands in the way: check 7
    /// refuses a plane whose file can shrink ([`ImportCheckError::NotFixedSize`]), and an
    /// importer refuses to copy (a layout its device cannot import in place, a read-only fd
    /// its driver would map writable).
    pub require_zero_copy: bool,
}

/// Why a layout may not be imported. The variants are in the order the checks run, and the
/// first failing check is the one reported.
#[derive(Debug, thiserror::Error)]
pub enum ImportCheckError {
    /// Check 1.
    #[error("unknown pixel format {fourcc} ({:#010x}): its plane layout is not known", fourcc.code())]
    UnknownFormat { fourcc: Fourcc },
    /// Check 2.
    #[error("the device cannot import {format} for this usage (modifier not allowed)")]
    LayoutNotAllowed { format: Format },
    /// Check 3.
    #[error("{width}x{height} is larger than the device's maximum {max_width}x{max_height} for {format}")]
    ExtentTooLarge {
        format: Format,
        width: u32,
        height: u32,
        max_width: u32,
        max_height: u32,
    },
    /// Check 4: the format subsamples chroma horizontally and the width is odd.
    #[error("{format} is {} (one chroma sample per {} pixels of a row), so the width must be a multiple of {}; got {width}", subsampling.name(), subsampling.h, subsampling.h)]
    OddWidth {
        format: Format,
        width: u32,
        subsampling: Subsampling,
    },
    /// Check 4: the format subsamples chroma vertically and the height is odd.
    #[error("{format} is {} (one chroma row per {} rows), so the height must be a multiple of {}; got {height}", subsampling.name(), subsampling.v, subsampling.v)]
    OddHeight {
        format: Format,
        height: u32,
        subsampling: Subsampling,
    },
    /// Check 5.
    #[error(
        "the buffer has {got} planes but {format} has {expected} memory planes on this device"
    )]
    PlaneCount {
        format: Format,
        got: usize,
        expected: usize,
    },
    /// Check 6.
    #[error("plane {plane}: stride {stride} is less than the {min} bytes of one row")]
    StrideTooSmall { plane: usize, stride: u64, min: u64 },
    /// Check 7: the fd is not a buffer (a directory, socket, pipe, device...), or could not
    /// be examined.
    #[error("plane {plane}: {source}")]
    FdKind { plane: usize, source: FdClassError },
    /// Check 7, only with [`ImportOptions::require_zero_copy`]: the file can shrink, so
    /// mapping it could fault.
    #[error("plane {plane}: the fd's size is not fixed: {reason}; zero-copy import needs a dma-buf or a memfd sealed with F_SEAL_SHRINK (dmabuf::sealed_memfd), otherwise copy it")]
    NotFixedSize { plane: usize, reason: NotFixedReason },
    /// Check 8: the size of the fd could not be read.
    #[error("plane {plane}: could not read the size of its fd: {source}")]
    FdSize { plane: usize, source: io::Error },
    /// Check 8: offset + stride x rows does not fit in 64 bits.
    #[error("plane {plane}: offset {offset} + stride {stride} x {rows} rows overflows 64 bits")]
    Overflow {
        plane: usize,
        offset: u64,
        stride: u64,
        rows: u32,
    },
    /// Check 8.
    #[error("plane {plane}: bytes {offset}..{end} run past the end of its {fd_size}-byte fd")]
    PastEndOfFd {
        plane: usize,
        offset: u64,
        end: u64,
        fd_size: u64,
    },
    /// Check 9: planes in different files, but the device needs them in one.
    #[error("the planes are in different files (disjoint), which the device does not support for {format}")]
    DisjointUnsupported { format: Format },
    /// Check 9: two planes in one file share bytes.
    #[error("planes {a} and {b} are in the same file and overlap")]
    PlanesOverlap { a: usize, b: usize },
    /// A recheck ([`CheckedFile::recheck`]): the fd is no longer the kind of file it was
    /// when it was checked (a seal cannot be lost, but a file can be replaced).
    #[error("plane {plane}: the file was a {was} when it was checked and is a {now} now")]
    FileReplaced { plane: usize, was: FdClass, now: FdClass },
}

/// One file as checks 7 and 8 found it: which file, what kind, and how long it was then.
/// Planes in one file share one (the checks look at each file once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedFile {
    pub id: FileId,
    /// What the file is, and so whether `size` holds after the check
    /// ([`FdClass::is_fixed_size`]). An unsealed memfd can be truncated by whoever else holds
    /// it, after which touching a mapping of it raises SIGBUS.
    pub class: FdClass,
    /// Its size at the check.
    pub size: u64,
}

impl CheckedFile {
    /// Check 7 for the file behind `fd` (borrowed): what it is, under `options.trust`,
    /// refused where `options.require_zero_copy` and it can shrink; then its size. `plane`
    /// names it in the error.
    pub fn check(fd: BorrowedFd<'_>, plane: usize, options: ImportOptions) -> Result<CheckedFile, ImportCheckError> {
        let id = FileId::of(fd).map_err(|e| ImportCheckError::FdKind { plane, source: FdClassError::Stat(e) })?;
        Self::check_known(fd, id, plane, options)
    }

    /// [`CheckedFile::check`] of a file whose identity the descriptor already knows.
    fn check_known(fd: BorrowedFd<'_>, id: FileId, plane: usize, options: ImportOptions) -> Result<CheckedFile, ImportCheckError> {
        let class = classify(fd, options.trust).map_err(|source| ImportCheckError::FdKind { plane, source })?;
        if let FdClass::Shrinkable(reason) = class {
            if options.require_zero_copy {
                return Err(ImportCheckError::NotFixedSize { plane, reason });
            }
        }
        let size = file_size(fd, class).map_err(|source| ImportCheckError::FdSize { plane, source })?;
        Ok(CheckedFile { id, class, size })
    }

    /// Checks 7 and 8 for a whole file that is to be mapped from its first byte to `len`
    /// (a buffer over it): a file of fixed size (whatever `options.require_zero_copy` says:
    /// a mapping of a file that can shrink is never safe) holding at least `len` bytes.
    pub fn check_mappable(fd: BorrowedFd<'_>, len: u64, options: ImportOptions) -> Result<CheckedFile, ImportCheckError> {
        let file = CheckedFile::check(fd, 0, ImportOptions { require_zero_copy: true, ..options })?;
        file.holds(0, len, 0)?;
        Ok(file)
    }

    /// Check 8's bound: bytes `offset..end` lie inside the file as checked.
    fn holds(&self, offset: u64, end: u64, plane: usize) -> Result<(), ImportCheckError> {
        if end > self.size {
            return Err(ImportCheckError::PastEndOfFd { plane, offset, end, fd_size: self.size });
        }
        Ok(())
    }

    /// That `fd`, a new fd of this file (a producer's next frame in a recycled buffer), is
    /// still the kind of file it was, under the same `trust`, and still holds `end` bytes:
    /// what an import cache runs on every hit before it hands out what it imported.
    pub fn recheck(&self, fd: BorrowedFd<'_>, end: u64, plane: usize, trust: FdTrust) -> Result<(), ImportCheckError> {
        let now = classify(fd, trust).map_err(|source| ImportCheckError::FdKind { plane, source })?;
        if now != self.class {
            return Err(ImportCheckError::FileReplaced { plane, was: self.class, now });
        }
        let size = file_size(fd, now).map_err(|source| ImportCheckError::FdSize { plane, source })?;
        CheckedFile { size, ..*self }.holds(0, end, plane)
    }
}

/// One plane as checked: the byte range `offset..end` (`end = offset + stride x rows`) lies
/// inside `file` (at the time of the check; see [`CheckedFile::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedPlane {
    pub offset: u64,
    pub stride: u64,
    pub rows: u32,
    pub end: u64,
    pub file: CheckedFile,
}

impl CheckedPlane {
    /// Bytes the plane spans (`stride x rows`).
    pub fn size(&self) -> u64 {
        self.end - self.offset
    }

    /// [`CheckedFile::recheck`] for this plane's bytes.
    pub fn recheck(&self, fd: BorrowedFd<'_>, plane: usize, trust: FdTrust) -> Result<(), ImportCheckError> {
        self.file.recheck(fd, self.end, plane, trust)
    }
}

/// Proof that [`check_import`] passed for one descriptor, borrowed from it so that the proof
/// cannot be used with another. Only `check_import` makes one.
#[derive(Debug)]
pub struct CheckedImport<'a> {
    buf: &'a DmaBuf,
    facts: ImportFacts,
    planes: Vec<CheckedPlane>,
    disjoint: bool,
}

impl<'a> CheckedImport<'a> {
    /// The descriptor that was checked (its fds remain owned by it).
    pub fn dmabuf(&self) -> &'a DmaBuf {
        self.buf
    }

    pub fn facts(&self) -> ImportFacts {
        self.facts
    }

    pub fn planes(&self) -> &[CheckedPlane] {
        &self.planes
    }

    /// Whether the import must be disjoint (one memory binding per plane).
    pub fn disjoint(&self) -> bool {
        self.disjoint
    }

    /// Whether every plane's file has a fixed size ([`FdClass::is_fixed_size`]), so that the
    /// planes may be imported zero-copy (mapped). When this is false, copy the planes with
    /// [`CheckedImport::read_plane`] instead: a mapping could fault when the sender shrinks
    /// the file.
    pub fn zero_copy_safe(&self) -> bool {
        self.planes.iter().all(|p| p.file.class.is_fixed_size())
    }

    /// A private copy of plane `plane`'s bytes (`offset..end`), read with `pread`, refusing
    /// more than `max` bytes before allocating. A file that shrank since the check gives
    /// [`ReadError::ShortRead`], never a signal. `None` past the last plane. This is the copy
    /// path for planes that are not [`FdClass::is_fixed_size`]; real dma-bufs have no `read`
    /// (an [`ReadError::Io`]), and need none: their size is fixed, so they are mapped.
    pub fn read_plane(&self, plane: usize, max: u64) -> Option<Result<Vec<u8>, ReadError>> {
        let p = self.planes.get(plane)?;
        let fd = self.buf.plane(plane)?.fd;
        Some(read_at(fd, p.offset, p.size(), max))
    }
}

/// Runs the checks in the order of the module docs, stopping at the first failure, with the
/// default [`ImportOptions`] (nothing trusted, shrinkable files allowed and marked).
///
/// Memory planes beyond the format's planes (a vendor modifier's metadata planes) have no
/// known row size or row count ([`plane_rows`] is 0 for them), so check 6 skips them, check
/// 8 only asks that each starts inside its fd, and check 9 that none starts inside another
/// plane's bytes.
///
/// The fds are borrowed from `buf` and only `fstatfs`ed, `fstat`ed and asked for their
/// seals (and, for dma-bufs, seeked to the end and back). The result borrows `buf`.
pub fn check_import<'a>(
    buf: &'a DmaBuf,
    device: &dyn DeviceFacts,
) -> Result<CheckedImport<'a>, ImportCheckError> {
    check_import_with(buf, device, ImportOptions::default())
}

/// [`check_import`] with explicit [`ImportOptions`].
pub fn check_import_with<'a>(
    buf: &'a DmaBuf,
    device: &dyn DeviceFacts,
    options: ImportOptions,
) -> Result<CheckedImport<'a>, ImportCheckError> {
    let format = buf.format();
    let result = run_checks(buf, device, format, options);
    match &result {
        Err(e) => {
            tracing::debug!(%format, width = buf.width(), height = buf.height(), error = %e, "dma-buf layout rejected")
        }
        Ok(c) if !c.zero_copy_safe() => {
            tracing::debug!(%format, "dma-buf layout accepted, but a plane's file can shrink: copy, do not map")
        }
        Ok(_) => {}
    }
    result
}

fn run_checks<'a>(
    buf: &'a DmaBuf,
    device: &dyn DeviceFacts,
    format: Format,
    options: ImportOptions,
) -> Result<CheckedImport<'a>, ImportCheckError> {
    // 1
    let info = format_info(buf.fourcc()).ok_or(ImportCheckError::UnknownFormat {
        fourcc: buf.fourcc(),
    })?;
    // 2
    let facts = device
        .import_facts(format)
        .ok_or(ImportCheckError::LayoutNotAllowed { format })?;
    // 3
    let (width, height) = (buf.width(), buf.height());
    if width > facts.max_width || height > facts.max_height {
        return Err(ImportCheckError::ExtentTooLarge {
            format,
            width,
            height,
            max_width: facts.max_width,
            max_height: facts.max_height,
        });
    }
    // 4
    let subsampling = info.subsampling;
    if width % u32::from(subsampling.h) != 0 {
        return Err(ImportCheckError::OddWidth { format, width, subsampling });
    }
    if height % u32::from(subsampling.v) != 0 {
        return Err(ImportCheckError::OddHeight { format, height, subsampling });
    }
    // 5
    if buf.plane_count() != facts.memory_plane_count {
        return Err(ImportCheckError::PlaneCount {
            format,
            got: buf.plane_count(),
            expected: facts.memory_plane_count,
        });
    }
    // 6
    for (i, p) in buf.planes().enumerate().take(info.plane_count()) {
        let min = info.min_stride(i, width);
        if p.stride < min {
            return Err(ImportCheckError::StrideTooSmall {
                plane: i,
                stride: p.stride,
                min,
            });
        }
    }
    // 7, and the size half of 8: one look at each file; planes in one file share it.
    let mut files: Vec<CheckedFile> = Vec::with_capacity(buf.plane_count());
    let mut planes = Vec::with_capacity(buf.plane_count());
    for (i, p) in buf.planes().enumerate() {
        let file = match files.iter().find(|f| f.id == p.file) {
            Some(&file) => file,
            None => {
                let file = CheckedFile::check_known(p.fd, p.file, i, options)?;
                files.push(file);
                file
            }
        };
        planes.push((p, file));
    }
    // 8
    let planes = planes
        .into_iter()
        .enumerate()
        .map(|(i, (p, file))| {
            let rows = plane_rows(buf.fourcc(), i, height);
            let end = p
                .stride
                .checked_mul(u64::from(rows))
                .and_then(|bytes| bytes.checked_add(p.offset))
                .ok_or(ImportCheckError::Overflow { plane: i, offset: p.offset, stride: p.stride, rows })?;
            // A metadata plane (no rows known) must at least start inside the fd.
            file.holds(p.offset, end.max(p.offset.saturating_add(u64::from(rows == 0))), i)?;
            Ok(CheckedPlane { offset: p.offset, stride: p.stride, rows, end, file })
        })
        .collect::<Result<Vec<_>, ImportCheckError>>()?;
    // 9
    let disjoint = buf.disjoint();
    if disjoint && !facts.disjoint {
        return Err(ImportCheckError::DisjointUnsupported { format });
    }
    for a in 0..planes.len() {
        for b in a + 1..planes.len() {
            let (pa, pb) = (&planes[a], &planes[b]);
            // A metadata plane's bytes are not known (its range is empty), but it may not
            // start inside another plane's.
            let starts_inside = |p: &CheckedPlane, q: &CheckedPlane| p.end == p.offset && q.offset <= p.offset && p.offset < q.end;
            let empty = pa.end == pa.offset || pb.end == pb.offset;
            let shared = if empty { starts_inside(pa, pb) || starts_inside(pb, pa) } else { pa.offset < pb.end && pb.offset < pa.end };
            if pa.file.id == pb.file.id && shared {
                return Err(ImportCheckError::PlanesOverlap { a, b });
            }
        }
    }
    Ok(CheckedImport {
        buf,
        facts,
        planes,
        disjoint,
    })
}
