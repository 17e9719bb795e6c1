//! [`DmaBuf`]: a dma-buf image described the way `GstVideoMeta` describes one (seed 000),
//! together with the fds that hold its memory.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{fcntl_getfl, fstat, Mode, OFlags};

use crate::{Format, Fourcc, Layout};
use crate::plane_layout::{plane_rows, PlaneLayout};

/// The most memory planes a dma-buf has (the kernel's `DRM_FORMAT_MAX_PLANES`, and
/// `VK_IMAGE_ASPECT_MEMORY_PLANE_3_BIT_EXT` is the last aspect Vulkan names).
pub const MAX_PLANES: usize = 4;

/// Why a set of fds and numbers is not a descriptor.
#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    #[error("a dma-buf has 1 to {MAX_PLANES} planes, got {0}")]
    PlaneCount(usize),
    #[error("no plane {plane}: the descriptor has {count}")]
    NoSuchPlane { plane: usize, count: usize },
    #[error("a dma-buf image needs a non-zero extent, got {width}x{height}")]
    ZeroExtent { width: u32, height: u32 },
    #[error("plane {plane}: fstat of its fd failed: {source}")]
    Stat { plane: usize, source: io::Error },
    #[error("plane {plane}: reading the fd's access mode failed: {source}")]
    AccessMode { plane: usize, source: io::Error },
    /// Every consumer of a frame reads it (a mapping, a device import, a copy), which an
    /// `O_WRONLY` fd cannot give.
    #[error("plane {plane}: the fd is open write-only (O_WRONLY); a frame's fd must be readable")]
    WriteOnly { plane: usize },
    #[error("plane {plane}: duplicating its fd failed: {source}")]
    Dup { plane: usize, source: io::Error },
    /// A plane's layout names a memory object (file) the caller did not give.
    #[error("plane {plane} lives in memory object {object}, but {objects} were given")]
    NoSuchObject { plane: usize, object: usize, objects: usize },
    #[error("plane {plane}: re-opening its fd read-only through /proc/self/fd failed (real dma-bufs are anonymous inodes and cannot be re-opened; export them read-only at the source): {source}")]
    Reopen { plane: usize, source: io::Error },
    #[error("plane {plane}: re-opening /proc/self/fd gave a different file than the fd it names")]
    ReopenedOtherFile { plane: usize },
}

/// A file's identity: the device and inode numbers from `fstat`.
///
/// Two fds are the same file exactly when these match, whatever their fd numbers (a dup, a
/// re-open and an fd received from a peer are all the same file). Inode numbers are reused
/// once a file is freed, so an identity is only meaningful while an fd to the file is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// The identity of the file `fd` refers to. `fd` is borrowed.
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<FileId> {
        let st = fstat(fd)?;
        // st_dev/st_ino are u64 on 64-bit Linux and narrower on some 32-bit ABIs.
        #[allow(clippy::unnecessary_cast)]
        Ok(FileId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        })
    }
}

/// One plane handed to [`DmaBuf::new`]: the descriptor takes ownership of `fd`.
#[derive(Debug)]
pub struct PlaneDesc {
    pub fd: OwnedFd,
    /// Byte offset of the plane's first row in the file.
    pub offset: u64,
    /// Bytes from one row (or row of tiles) to the next.
    pub stride: u64,
}

#[derive(Debug)]
struct Plane {
    fd: OwnedFd,
    offset: u64,
    stride: u64,
    file: FileId,
    read_only: bool,
}

/// A borrowed view of one plane. The fd is borrowed from the [`DmaBuf`] and must not outlive it;
/// dup it (`try_clone_to_owned`, or [`DmaBuf::dup_fd`]) to hand it to an API that takes
/// ownership, as Vulkan's `VkImportMemoryFdInfoKHR` does.
#[derive(Debug, Clone, Copy)]
pub struct PlaneRef<'a> {
    pub fd: BorrowedFd<'a>,
    pub offset: u64,
    pub stride: u64,
    pub file: FileId,
}

/// One plane of a [`BufferIdentity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlaneIdentity {
    pub file: FileId,
    pub offset: u64,
    pub stride: u64,
}

/// What makes two descriptors the same image: the same files (by dev+ino, never fd number)
/// interpreted with the same layout. An import cache keys on this so that a buffer that comes
/// back every frame, through a new fd each time, is imported once. Like [`FileId`], it is only
/// valid while the files are open: drop cache entries when their descriptor is dropped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BufferIdentity {
    pub fourcc: Fourcc,
    pub layout: Layout,
    pub width: u32,
    pub height: u32,
    pub planes: Vec<PlaneIdentity>,
}

/// A dma-buf image: fourcc, layout, extent and 1 to [`MAX_PLANES`] planes of {fd, offset,
/// stride}; `GstVideoMeta` plus the fds.
///
/// # fd ownership
/// The descriptor owns one [`OwnedFd`] per plane and closes them all when dropped. Planes that
/// live in one file hold one fd each (dups or separate opens of the same file): that keeps
/// every plane independently borrowable and sendable, and sameness is decided by [`FileId`]
/// anyway. Accessors lend [`BorrowedFd`]s; [`DmaBuf::try_clone`] and [`DmaBuf::dup_fd`] dup.
///
/// # What construction checks
/// Only structure: 1..=4 planes, a non-zero extent, and that every fd can be `fstat`ed. It
/// records each plane's file identity, whether the planes are disjoint (in more than one
/// file) and whether every fd is read-only. Whether the layout fits the files and the device
/// is [`check_import`](super::check_import)'s job.
pub struct DmaBuf {
    fourcc: Fourcc,
    layout: Layout,
    width: u32,
    height: u32,
    planes: Vec<Plane>,
}

impl DmaBuf {
    /// Builds a descriptor, taking ownership of every plane's fd. On error the fds are closed.
    pub fn new(
        fourcc: Fourcc,
        layout: Layout,
        width: u32,
        height: u32,
        planes: Vec<PlaneDesc>,
    ) -> Result<DmaBuf, DescriptorError> {
        if planes.is_empty() || planes.len() > MAX_PLANES {
            return Err(DescriptorError::PlaneCount(planes.len()));
        }
        if width == 0 || height == 0 {
            return Err(DescriptorError::ZeroExtent { width, height });
        }
        let mut out = Vec::with_capacity(planes.len());
        for (i, p) in planes.into_iter().enumerate() {
            let file = FileId::of(p.fd.as_fd())
                .map_err(|source| DescriptorError::Stat { plane: i, source })?;
            let read_only = access_mode(p.fd.as_fd())
                .map_err(|source| DescriptorError::AccessMode { plane: i, source })?
                .ok_or(DescriptorError::WriteOnly { plane: i })?;
            out.push(Plane {
                fd: p.fd,
                offset: p.offset,
                stride: p.stride,
                file,
                read_only,
            });
        }
        Ok(DmaBuf {
            fourcc,
            layout,
            width,
            height,
            planes: out,
        })
    }

    /// Builds a descriptor whose planes all live in the one file `fd` (the usual non-disjoint
    /// export). Takes ownership of `fd`; each plane gets its own dup of it. `planes` gives
    /// each plane's offset and stride; their `object` is 0 by definition here and their
    /// `size` is the import check's business, so neither is read.
    pub fn in_one_file(
        fourcc: Fourcc,
        layout: Layout,
        width: u32,
        height: u32,
        fd: OwnedFd,
        planes: &[PlaneLayout],
    ) -> Result<DmaBuf, DescriptorError> {
        if planes.is_empty() || planes.len() > MAX_PLANES {
            return Err(DescriptorError::PlaneCount(planes.len()));
        }
        // Plane 0 keeps `fd`; the others get dups of it.
        let mut dups = Vec::with_capacity(planes.len() - 1);
        for i in 1..planes.len() {
            let dup = fd.try_clone();
            dups.push(dup.map_err(|source| DescriptorError::Dup { plane: i, source })?);
        }
        let mut descs = Vec::with_capacity(planes.len());
        for (fd, pl) in std::iter::once(fd).chain(dups).zip(planes) {
            descs.push(PlaneDesc {
                fd,
                offset: pl.offset,
                stride: pl.stride,
            });
        }
        DmaBuf::new(fourcc, layout, width, height, descs)
    }

    /// Builds a descriptor from the files of a buffer's memory objects (one fd per V4L2
    /// memory plane, per allocated file) and each plane's layout, whose `object` picks its
    /// file: each plane gets its own dup, and `objects` (borrowed) stay the caller's. A plane
    /// whose object is not in `objects` is [`DescriptorError::NoSuchObject`].
    pub fn of_objects(
        fourcc: Fourcc,
        layout: Layout,
        width: u32,
        height: u32,
        objects: &[OwnedFd],
        planes: &[PlaneLayout],
    ) -> Result<DmaBuf, DescriptorError> {
        if planes.is_empty() || planes.len() > MAX_PLANES {
            return Err(DescriptorError::PlaneCount(planes.len()));
        }
        let mut descs = Vec::with_capacity(planes.len());
        for (plane, p) in planes.iter().enumerate() {
            let file = objects.get(p.object).ok_or(DescriptorError::NoSuchObject { plane, object: p.object, objects: objects.len() })?;
            let fd = file.try_clone().map_err(|source| DescriptorError::Dup { plane, source })?;
            descs.push(PlaneDesc { fd, offset: p.offset, stride: p.stride });
        }
        DmaBuf::new(fourcc, layout, width, height, descs)
    }

    pub fn fourcc(&self) -> Fourcc {
        self.fourcc
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn format(&self) -> Format {
        Format {
            fourcc: self.fourcc,
            layout: self.layout,
        }
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    /// Memory planes: 1 to [`MAX_PLANES`].
    pub fn plane_count(&self) -> usize {
        self.planes.len()
    }

    /// Plane `i`, with its fd borrowed from `self`; `None` past the last plane.
    pub fn plane(&self, i: usize) -> Option<PlaneRef<'_>> {
        self.planes.get(i).map(|p| PlaneRef {
            fd: p.fd.as_fd(),
            offset: p.offset,
            stride: p.stride,
            file: p.file,
        })
    }

    /// All planes in order, fds borrowed from `self`.
    pub fn planes(&self) -> impl ExactSizeIterator<Item = PlaneRef<'_>> + '_ {
        self.planes.iter().map(|p| PlaneRef {
            fd: p.fd.as_fd(),
            offset: p.offset,
            stride: p.stride,
            file: p.file,
        })
    }

    /// Where each plane lies, as one [`PlaneLayout`] per plane: `object` numbers the distinct
    /// files in order of first appearance (0 for every plane of a non-disjoint buffer), and
    /// `size` is `stride x` [`plane_rows`], the span [`check_import`](super::check_import)
    /// checks against the file.
    pub fn plane_layouts(&self) -> Vec<PlaneLayout> {
        let mut files: Vec<FileId> = Vec::with_capacity(self.planes.len());
        let mut out = Vec::with_capacity(self.planes.len());
        for (i, p) in self.planes.iter().enumerate() {
            let object = files.iter().position(|f| *f == p.file).unwrap_or_else(|| {
                files.push(p.file);
                files.len() - 1
            });
            let mut layout = PlaneLayout::linear(p.offset, p.stride, plane_rows(self.fourcc, i, self.height));
            layout.object = object;
            out.push(layout);
        }
        out
    }

    /// A new fd for plane `i` (a dup: same open file description, `O_CLOEXEC`), owned by the
    /// caller. This is what to give Vulkan, which takes ownership of an imported fd.
    pub fn dup_fd(&self, i: usize) -> Result<OwnedFd, DescriptorError> {
        let p = self.planes.get(i).ok_or(DescriptorError::NoSuchPlane {
            plane: i,
            count: self.planes.len(),
        })?;
        p.fd.try_clone()
            .map_err(|source| DescriptorError::Dup { plane: i, source })
    }

    /// Whether the planes are in more than one file (compared by dev+ino, not fd number).
    /// A single-plane buffer is never disjoint.
    pub fn disjoint(&self) -> bool {
        self.planes.iter().any(|p| p.file != self.planes[0].file)
    }

    /// Whether every plane's fd was opened read-only, so that no shared writable mapping of
    /// it can be made.
    pub fn read_only(&self) -> bool {
        self.planes.iter().all(|p| p.read_only)
    }

    /// The key an import cache uses: file identities plus the whole layout.
    pub fn identity(&self) -> BufferIdentity {
        BufferIdentity {
            fourcc: self.fourcc,
            layout: self.layout,
            width: self.width,
            height: self.height,
            planes: self
                .planes
                .iter()
                .map(|p| PlaneIdentity {
                    file: p.file,
                    offset: p.offset,
                    stride: p.stride,
                })
                .collect(),
        }
    }

    /// A second descriptor of the same image whose fds are dups of these (the caller owns the
    /// new descriptor and its fds; both descriptors close their own).
    pub fn try_clone(&self) -> Result<DmaBuf, DescriptorError> {
        let mut planes = Vec::with_capacity(self.planes.len());
        for (i, p) in self.planes.iter().enumerate() {
            let fd =
                p.fd.try_clone()
                    .map_err(|source| DescriptorError::Dup { plane: i, source })?;
            planes.push(Plane { fd, ..*p });
        }
        Ok(DmaBuf { planes, ..*self })
    }

    /// A descriptor of the same image whose fds are new, read-only opens of the same files,
    /// made by re-opening `/proc/self/fd/N` with `O_RDONLY`. Nothing holding only these fds can
    /// map the memory shared and writable (`mmap` fails with `EACCES`), so this is what to send
    /// to a peer that must only read. The caller owns the new descriptor; `self` is untouched.
    ///
    /// Limits: it needs a re-openable file (memfd, tmpfs). A real dma-buf is an anonymous inode
    /// and fails with [`DescriptorError::Reopen`]; export those read-only at the source. A peer
    /// with the same uid can itself re-open `/proc/<pid>/fd/N` writable, as the file's mode
    /// allows. Memfds from [`sealed_memfd`](super::sealed_memfd) carry `F_SEAL_SEAL`, so no
    /// write seal can be added to them afterwards (by the producer or by a hostile peer).
    pub fn reopen_read_only(&self) -> Result<DmaBuf, DescriptorError> {
        let mut planes = Vec::with_capacity(self.planes.len());
        for (i, p) in self.planes.iter().enumerate() {
            let path = format!("/proc/self/fd/{}", p.fd.as_raw_fd());
            let fd = rustix::fs::open(
                path.as_str(),
                OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| DescriptorError::Reopen {
                plane: i,
                source: e.into(),
            })?;
            let file = FileId::of(fd.as_fd())
                .map_err(|source| DescriptorError::Stat { plane: i, source })?;
            // /proc/self/fd/N is a magic link to the open file, so this only differs if N was
            // closed and reused by another thread behind our back; refuse rather than guess.
            if file != p.file {
                return Err(DescriptorError::ReopenedOtherFile { plane: i });
            }
            planes.push(Plane {
                fd,
                offset: p.offset,
                stride: p.stride,
                file,
                read_only: true,
            });
        }
        tracing::debug!(fourcc = %self.fourcc, planes = planes.len(), "re-opened dma-buf read-only");
        Ok(DmaBuf { planes, ..*self })
    }

    /// Gives up the descriptor and hands its fds, in plane order, to the caller, who owns them.
    pub fn into_fds(self) -> Vec<OwnedFd> {
        self.planes.into_iter().map(|p| p.fd).collect()
    }
}

/// The fd's access mode: `Some(true)` read-only, `Some(false)` read-write, `None`
/// write-only (`O_WRONLY`).
fn access_mode(fd: BorrowedFd<'_>) -> io::Result<Option<bool>> {
    let mode = fcntl_getfl(fd)? & OFlags::ACCMODE;
    Ok(if mode == OFlags::RDONLY {
        Some(true)
    } else if mode == OFlags::WRONLY {
        None
    } else {
        Some(false)
    })
}

impl fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("DmaBuf");
        d.field("format", &self.format())
            .field("width", &self.width)
            .field("height", &self.height)
            .field("disjoint", &self.disjoint())
            .field("read_only", &self.read_only());
        for (i, p) in self.planes.iter().enumerate() {
            d.field(
                ["plane0", "plane1", "plane2", "plane3"]
                    .get(i)
                    .copied()
                    .unwrap_or("plane"),
                &format_args!(
                    "fd {} @{} stride {} ino {}",
                    p.fd.as_raw_fd(),
                    p.offset,
                    p.stride,
                    p.file.ino
                ),
            );
        }
        d.finish()
    }
}
