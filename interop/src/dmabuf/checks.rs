//! The import checks: every fact about a layout that can be checked against the fds and the
//! device's limits, checked before any driver call, in a fixed order, each with its own error.
//!
//! The order follows wlroots' `vulkan_texture_from_dmabuf` (render/vulkan/texture.c): what the
//! format is, whether the device takes it, how big it may be and how many planes it has come
//! first, because every later check needs them. Then come the checks that read the fds.
//! lavapipe imports a dma-buf by mmapping it, so a layout that passes the driver but runs past
//! the end of the file faults inside Mesa: these checks are a security boundary.

use std::collections::HashMap;
use std::io;
use std::os::fd::BorrowedFd;

use rustix::fs::{fcntl_get_seals, fstat, seek, FileType, SealFlags, SeekFrom};

use super::descriptor::{DmaBuf, FileId};
use crate::{format_info, Format, Fourcc, Layout, Modifier};

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
    /// Check 4.
    #[error(
        "the buffer has {got} planes but {format} has {expected} memory planes on this device"
    )]
    PlaneCount {
        format: Format,
        got: usize,
        expected: usize,
    },
    /// Check 5.
    #[error("plane {plane}: stride {stride} is less than the {min} bytes of one row")]
    StrideTooSmall { plane: usize, stride: u64, min: u64 },
    /// Check 6: the size of the fd could not be read.
    #[error("plane {plane}: could not read the size of its fd: {source}")]
    FdSize { plane: usize, source: io::Error },
    /// Check 6: offset + stride x rows does not fit in 64 bits.
    #[error("plane {plane}: offset {offset} + stride {stride} x {rows} rows overflows 64 bits")]
    Overflow {
        plane: usize,
        offset: u64,
        stride: u64,
        rows: u32,
    },
    /// Check 6.
    #[error("plane {plane}: bytes {offset}..{end} run past the end of its {fd_size}-byte fd")]
    PastEndOfFd {
        plane: usize,
        offset: u64,
        end: u64,
        fd_size: u64,
    },
    /// Check 7: planes in different files, but the device needs them in one.
    #[error("the planes are in different files (disjoint), which the device does not support for {format}")]
    DisjointUnsupported { format: Format },
    /// Check 7: two planes in one file share bytes.
    #[error("planes {a} and {b} are in the same file and overlap")]
    PlanesOverlap { a: usize, b: usize },
}

/// One plane as checked: the byte range `offset..end` (`end = offset + stride x rows`) lies
/// inside a file of `file_size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedPlane {
    pub offset: u64,
    pub stride: u64,
    pub rows: u32,
    pub end: u64,
    pub file: FileId,
    pub file_size: u64,
    /// Whether the file cannot shrink below `file_size` after the check: a dma-buf (size fixed
    /// at export) or a memfd sealed with `F_SEAL_SHRINK`. An unsealed memfd can be truncated by
    /// whoever else holds it, after which touching the mapping raises SIGBUS; a consumer that
    /// does not trust the producer should require this or copy.
    pub size_fixed: bool,
}

impl CheckedPlane {
    /// Bytes the plane spans (`stride x rows`).
    pub fn size(&self) -> u64 {
        self.end - self.offset
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

    /// Whether no plane's file can shrink after the check ([`CheckedPlane::size_fixed`]).
    pub fn sizes_fixed(&self) -> bool {
        self.planes.iter().all(|p| p.size_fixed)
    }
}

/// Runs the seven checks, in this order, stopping at the first failure:
///
/// 1. the fourcc is known ([`format_info`]);
/// 2. the device imports this format+layout for this usage ([`DeviceFacts::import_facts`]);
/// 3. the extent is within the device's maximum for it;
/// 4. the plane count equals the device's memory-plane count for it;
/// 5. each format plane's stride is at least its row of samples (`min_stride`);
/// 6. each plane's `offset + stride x rows` is computed without overflow and is at most the
///    size of its fd (`fstat`, or `lseek(SEEK_END)` for non-regular files such as dma-bufs);
/// 7. the disjoint rules: planes are disjoint exactly when they are not all in one file (by
///    dev+ino); a disjoint buffer needs a device that supports disjoint import; planes that
///    share a file (disjoint or not) must not share bytes.
///
/// Memory planes beyond the format's planes (a vendor modifier's metadata planes) have no
/// known row size, so check 5 skips them and check 6 counts the image's full height of rows.
///
/// The fds are borrowed from `buf`, only `fstat`ed (and, for non-regular files, seeked to the
/// end and back). The result borrows `buf`.
pub fn check_import<'a>(
    buf: &'a DmaBuf,
    device: &dyn DeviceFacts,
) -> Result<CheckedImport<'a>, ImportCheckError> {
    let format = buf.format();
    let result = run_checks(buf, device, format);
    if let Err(e) = &result {
        tracing::debug!(%format, width = buf.width(), height = buf.height(), error = %e, "dma-buf layout rejected");
    }
    result
}

fn run_checks<'a>(
    buf: &'a DmaBuf,
    device: &dyn DeviceFacts,
    format: Format,
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
    if buf.plane_count() != facts.memory_plane_count {
        return Err(ImportCheckError::PlaneCount {
            format,
            got: buf.plane_count(),
            expected: facts.memory_plane_count,
        });
    }
    // 5
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
    // 6
    let mut sizes: Vec<(FileId, u64, bool)> = Vec::with_capacity(buf.plane_count());
    let mut planes = Vec::with_capacity(buf.plane_count());
    for (i, p) in buf.planes().enumerate() {
        let rows = if i < info.plane_count() {
            info.plane_height(i, height)
        } else {
            height
        };
        let end = p
            .stride
            .checked_mul(u64::from(rows))
            .and_then(|bytes| bytes.checked_add(p.offset))
            .ok_or(ImportCheckError::Overflow {
                plane: i,
                offset: p.offset,
                stride: p.stride,
                rows,
            })?;
        let (file_size, size_fixed) = match sizes.iter().find(|(f, _, _)| *f == p.file) {
            Some(&(_, size, fixed)) => (size, fixed),
            None => {
                let (size, fixed) = fd_size(p.fd)
                    .map_err(|source| ImportCheckError::FdSize { plane: i, source })?;
                sizes.push((p.file, size, fixed));
                (size, fixed)
            }
        };
        if end > file_size {
            return Err(ImportCheckError::PastEndOfFd {
                plane: i,
                offset: p.offset,
                end,
                fd_size: file_size,
            });
        }
        planes.push(CheckedPlane {
            offset: p.offset,
            stride: p.stride,
            rows,
            end,
            file: p.file,
            file_size,
            size_fixed,
        });
    }
    // 7
    let disjoint = buf.disjoint();
    if disjoint && !facts.disjoint {
        return Err(ImportCheckError::DisjointUnsupported { format });
    }
    for a in 0..planes.len() {
        for b in a + 1..planes.len() {
            let (pa, pb) = (&planes[a], &planes[b]);
            // A metadata plane may declare stride 0: an empty range shares no bytes.
            let empty = pa.end == pa.offset || pb.end == pb.offset;
            if pa.file == pb.file && !empty && pa.offset < pb.end && pb.offset < pa.end {
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

/// The size of the file behind `fd` (borrowed), and whether that size is fixed. Regular
/// files (memfds) report their size in `fstat` and can shrink unless sealed with
/// `F_SEAL_SHRINK`; a dma-buf is an anonymous inode whose size, fixed at export, only
/// `lseek(SEEK_END)` reports. Seeking moves the offset shared by every dup of the fd, so it is
/// put back.
fn fd_size(fd: BorrowedFd<'_>) -> io::Result<(u64, bool)> {
    let st = fstat(fd)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
        let size = u64::try_from(st.st_size)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "negative file size"))?;
        // Files without sealing support answer EINVAL: they are simply not sealed.
        let sealed = fcntl_get_seals(fd).is_ok_and(|s| s.contains(SealFlags::SHRINK));
        return Ok((size, sealed));
    }
    let here = seek(fd, SeekFrom::Current(0))?;
    let end = seek(fd, SeekFrom::End(0));
    seek(fd, SeekFrom::Start(here))?;
    Ok((end?, true))
}
