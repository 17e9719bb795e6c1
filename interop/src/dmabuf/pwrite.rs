//! Writing into a buffer's files: the CPU's way to fill a buffer a producer owns (a sink's
//! copy target, a simulated decoder's output, a test pattern), and the probe that a read-only
//! holder cannot.
//!
//! A memfd or regular file is written with `pwrite`, no mapping. A dma-buf has no `write`
//! or `pwrite` (`ESPIPE`): it is mapped read-write, once per file, inside a
//! [`CpuAccessGuard`](crate::sync::CpuAccessGuard) write bracket (`DMA_BUF_IOCTL_SYNC`), which also
//! waits, at most [`CPU_ACCESS_TIMEOUT`], for everyone still using the buffer.

use std::io;
use std::os::fd::BorrowedFd;

use rustix::io::{pwrite, Errno};

use super::descriptor::DmaBuf;
use super::fd_kind::FdTrust;
use super::map::{MapError, PlaneMap};
use crate::format_info;
use crate::sync::{is_dma_buf, SyncAccess, CPU_ACCESS_TIMEOUT};

/// Why a frame could not be written into a buffer.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The buffer's fourcc has no plane table.
    #[error("{0} has no plane layout in dmabridge's table")]
    UnknownFourcc(crate::Fourcc),
    /// The packed frame is not the size of the buffer's format at its extent.
    #[error("the frame has {got} bytes; a packed {fourcc} {width}x{height} has {want}")]
    FrameSize { fourcc: crate::Fourcc, width: u32, height: u32, got: usize, want: u64 },
    /// A row's place in its file does not fit in 64 bits.
    #[error("the buffer's layout does not fit u64 arithmetic")]
    Overflow,
    /// `pwrite` failed, or the file took no bytes.
    #[error("writing plane {plane} of the buffer failed: {source}")]
    Write { plane: usize, source: io::Error },
    /// A dma-buf plane could not be mapped for writing (a read-only fd, fences that did not
    /// signal in time).
    #[error("writing plane {plane} of the dma-buf failed: {source}")]
    Map { plane: usize, source: MapError },
}

/// Writes all of `bytes` into `fd` (borrowed) at byte `offset`, retrying short writes and
/// interrupted calls. The file's offset is not moved. A file that takes no bytes is
/// [`io::ErrorKind::WriteZero`]. A dma-buf is written through a guarded mapping.
pub fn write_all_at(fd: BorrowedFd<'_>, offset: u64, bytes: &[u8]) -> io::Result<()> {
    if is_dma_buf(fd)? {
        let mut map = PlaneMap::of_file(fd, offset, bytes.len() as u64, SyncAccess::Write, FdTrust::Untrusted, CPU_ACCESS_TIMEOUT).map_err(io::Error::other)?;
        map.bytes_mut().ok_or_else(|| io::Error::other("a write mapping that is not writable"))?.copy_from_slice(bytes);
        return Ok(());
    }
    let mut done = 0usize;
    while let Some(rest) = bytes.get(done..).filter(|r| !r.is_empty()) {
        let at = offset.checked_add(done as u64).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        match pwrite(fd, rest, at) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Writes a packed frame (each plane's visible rows, tightly packed, planes one after
/// another) into `buf`'s planes at their offsets and strides, row by row. Only a layout whose
/// rows are rows (LINEAR, or an implicit layout that is linear) can be written this way.
pub fn write_planes(buf: &DmaBuf, frame: &[u8]) -> Result<(), WriteError> {
    let (fourcc, width, height) = (buf.fourcc(), buf.width(), buf.height());
    let info = format_info(fourcc).ok_or(WriteError::UnknownFourcc(fourcc))?;
    let want = info.packed_size(width, height);
    if frame.len() as u64 != want {
        return Err(WriteError::FrameSize { fourcc, width, height, got: frame.len(), want });
    }
    let mut src = 0usize;
    for (i, plane) in buf.planes().enumerate() {
        let row = usize::try_from(info.min_stride(i, width)).map_err(|_| WriteError::Overflow)?;
        let rows = u64::from(info.plane_height(i, height));
        let at = |r: u64| plane.stride.checked_mul(r).and_then(|o| o.checked_add(plane.offset)).ok_or(WriteError::Overflow);
        let take = |src: usize| src.checked_add(row).and_then(|end| frame.get(src..end)).ok_or(WriteError::Overflow);
        if is_dma_buf(plane.fd).map_err(|source| WriteError::Write { plane: i, source })? {
            // One mapping (and one write bracket) for the plane's rows.
            let span = match rows.checked_sub(1) {
                Some(last) => at(last)?.checked_add(row as u64).ok_or(WriteError::Overflow)? - plane.offset,
                None => continue,
            };
            let mut map = PlaneMap::of_file(plane.fd, plane.offset, span, SyncAccess::Write, FdTrust::Untrusted, CPU_ACCESS_TIMEOUT)
                .map_err(|source| WriteError::Map { plane: i, source })?;
            let dst = map.bytes_mut().ok_or(WriteError::Overflow)?;
            for r in 0..rows {
                let o = usize::try_from(at(r)? - plane.offset).map_err(|_| WriteError::Overflow)?;
                dst.get_mut(o..o + row).ok_or(WriteError::Overflow)?.copy_from_slice(take(src)?);
                src += row;
            }
            continue;
        }
        for r in 0..rows {
            write_all_at(plane.fd, at(r)?, take(src)?).map_err(|source| WriteError::Write { plane: i, source })?;
            src += row;
        }
    }
    Ok(())
}

/// Why a buffer that should be read-only is not shown to be.
#[derive(Debug, thiserror::Error)]
pub enum NotReadOnly {
    /// A write through the fd went in.
    #[error("plane {plane}: a write through the read-only fd succeeded")]
    Writable { plane: usize },
    /// The byte the probe writes back could not be read.
    #[error("plane {plane}: reading the probe's byte failed: {source}")]
    Read { plane: usize, source: super::pread::ReadError },
    /// The probe failed for another reason than the refusal wanted (`EBADF` from `pwrite`,
    /// `EACCES` from a dma-buf's writable mapping).
    #[error("plane {plane}: the write probe failed with {source}, not a refusal of the write")]
    Probe { plane: usize, source: io::Error },
}

/// Checks that every fd of `buf` refuses writes, as a read-only holder's must. For a memfd
/// or file the probe is `pwrite` (`EBADF` wanted), and it writes back the byte already at
/// each plane's offset, so on a writable fd it changes nothing. A dma-buf has no `pwrite`
/// whatever its mode: the probe is a shared writable mapping, which the kernel refuses
/// (`EACCES`) on an fd opened read-only.
pub fn check_read_only(buf: &DmaBuf) -> Result<(), NotReadOnly> {
    for (plane, p) in buf.planes().enumerate() {
        if is_dma_buf(p.fd).map_err(|source| NotReadOnly::Probe { plane, source })? {
            let page = rustix::param::page_size();
            // SAFETY: a fresh mapping at an address the kernel picks, of the first page of a
            // dma-buf (its size is at least a page); unmapped at once, nothing is accessed.
            match unsafe { rustix::mm::mmap(std::ptr::null_mut(), page, rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE, rustix::mm::MapFlags::SHARED, p.fd, 0) } {
                Err(Errno::ACCESS) => continue,
                Ok(m) => {
                    // SAFETY: exactly the mapping just made; nothing refers to it.
                    let _ = unsafe { rustix::mm::munmap(m, page) };
                    return Err(NotReadOnly::Writable { plane });
                }
                Err(e) => return Err(NotReadOnly::Probe { plane, source: e.into() }),
            }
        }
        let mut byte = [0u8];
        super::pread::read_exact_at(p.fd, p.offset, &mut byte).map_err(|source| NotReadOnly::Read { plane, source })?;
        match pwrite(p.fd, &byte, p.offset) {
            Err(Errno::BADF) => {}
            Ok(_) => return Err(NotReadOnly::Writable { plane }),
            Err(e) => return Err(NotReadOnly::Probe { plane, source: e.into() }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dmabuf::{sealed_memfd, PlaneLayout};
    use crate::{Fourcc, Layout, Modifier};

    fn nv12(stride: u64) -> DmaBuf {
        let uv = stride * 4 + 64;
        let fd = sealed_memfd("pwrite-test", &vec![0u8; (uv + stride * 2) as usize]).unwrap();
        DmaBuf::in_one_file(Fourcc::NV12, Layout::Explicit(Modifier::LINEAR), 6, 4, fd, &[PlaneLayout::linear(0, stride, 4), PlaneLayout::linear(uv, stride, 2)]).unwrap()
    }

    #[test]
    fn planes_land_at_their_offsets_and_strides() {
        let buf = nv12(16);
        let frame: Vec<u8> = (1..=36).collect();
        write_planes(&buf, &frame).unwrap();
        let mut file = vec![0u8; 16 * 6 + 64];
        crate::dmabuf::read_exact_at(buf.plane(0).unwrap().fd, 0, &mut file).unwrap();
        assert_eq!(&file[16..22], &frame[6..12], "luma row 1 at the stride");
        assert_eq!(&file[128..134], &frame[24..30], "chroma at its offset");
        assert!(file[6..16].iter().all(|b| *b == 0), "padding untouched");
        assert!(matches!(write_planes(&buf, &frame[1..]), Err(WriteError::FrameSize { .. })));
    }

    #[test]
    fn read_only_fds_refuse_writes_and_the_probe_changes_nothing() {
        let buf = nv12(8);
        write_planes(&buf, &[9u8; 36]).unwrap();
        assert!(matches!(check_read_only(&buf), Err(NotReadOnly::Writable { plane: 0 })));
        let mut b = [0u8];
        crate::dmabuf::read_exact_at(buf.plane(0).unwrap().fd, 0, &mut b).unwrap();
        assert_eq!(b, [9], "the probe wrote back what was there");
        check_read_only(&buf.reopen_read_only().unwrap()).unwrap();
    }
}
