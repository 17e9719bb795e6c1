//! Where an input frame's planes lie in the memory upstream gave the element, checked before
//! anything reads them, and the reads that follow, bounded by the frame's visible bytes.
//!
//! A `GstVideoMeta` is upstream's word, not a fact: GStreamer's own frame mapping checks only
//! that each plane's first byte is inside the buffer, and a view of `stride × rows` bytes from
//! there reads whatever lies past the memory (a heap disclosure), or faults. So every plane is
//! checked here against the bytes the buffer's memory holds: its size from its offset (the
//! window of the fd a dma-buf memory was given, not the fd), or the buffer's total size for
//! system memory. A plane ends at `offset + stride × (rows − 1) + row`: the last row's padding
//! need not be there. Everything is computed with checked arithmetic; a negative stride, a
//! stride shorter than a row and a meta with fewer planes than the format are errors too, each
//! naming its plane.

use std::os::fd::BorrowedFd;

use dmabridge::interop::dmabuf::{read_exact_at, ReadError};
use dmabridge::interop::tiling::TiledGeometry;
use dmabridge::interop::{format_info, Fourcc};

/// One plane of the input frame: its first byte (counted from the buffer's, or the dma-buf
/// memory's, first byte), the distance between its rows, its rows and the visible bytes of
/// each, and the end of its last visible row (`offset + stride × (rows − 1) + row`, known not
/// to overflow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlaneSpan {
    pub plane: usize,
    pub offset: u64,
    pub stride: u64,
    pub rows: u32,
    pub row: u64,
    pub end: u64,
}

/// Why an input frame's planes cannot be read from the memory upstream gave.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlaneBoundsError {
    /// dmabridge has no plane table for the format.
    #[error("{0}: no plane table")]
    UnknownFormat(Fourcc),
    /// The video meta describes fewer planes than the format has.
    #[error("plane {plane}: the video meta describes {described} planes, {fourcc} has {expected}")]
    MissingPlane { plane: usize, described: usize, expected: usize, fourcc: Fourcc },
    /// A negative stride (rows stored bottom-up), which the element does not read.
    #[error("plane {plane}: stride {stride} is negative")]
    NegativeStride { plane: usize, stride: i64 },
    /// Rows closer together than one row's visible bytes.
    #[error("plane {plane}: stride {stride} is less than the {row} bytes of one row")]
    StrideTooSmall { plane: usize, stride: u64, row: u64 },
    /// The end of the plane's last row does not fit in 64 bits.
    #[error("plane {plane}: offset {offset} + stride {stride} x ({rows} - 1) rows + {row} bytes overflows 64 bits")]
    Overflow { plane: usize, offset: u64, stride: u64, rows: u32, row: u64 },
    /// The plane's rows run past the memory upstream gave (`what` names it).
    #[error("plane {plane}: its rows span bytes {offset}..{end}, past the {size} bytes of {what}")]
    PastMemory { plane: usize, offset: u64, end: u64, size: u64, what: &'static str },
}

impl PlaneSpan {
    /// Plane `plane` at `offset`, `rows` rows of `row` visible bytes, `stride` bytes apart.
    pub(crate) fn new(plane: usize, offset: u64, stride: u64, rows: u32, row: u64) -> Result<PlaneSpan, PlaneBoundsError> {
        if stride < row {
            return Err(PlaneBoundsError::StrideTooSmall { plane, stride, row });
        }
        let end = match rows.checked_sub(1) {
            None => Some(offset),
            Some(before_last) => stride.checked_mul(u64::from(before_last)).and_then(|b| b.checked_add(offset)).and_then(|b| b.checked_add(row)),
        };
        let end = end.ok_or(PlaneBoundsError::Overflow { plane, offset, stride, rows, row })?;
        Ok(PlaneSpan { plane, offset, stride, rows, row, end })
    }
}

/// The planes of a linear `fourcc` frame of `width` x `height` at `offsets` and `strides`
/// (a video meta's, which may describe fewer planes than the format has, or the caps'
/// standard layout's), each row the format's visible bytes.
pub(crate) fn linear_planes(fourcc: Fourcc, width: u32, height: u32, offsets: &[usize], strides: &[i32]) -> Result<Vec<PlaneSpan>, PlaneBoundsError> {
    let fi = format_info(fourcc).ok_or(PlaneBoundsError::UnknownFormat(fourcc))?;
    let described = offsets.len().min(strides.len());
    (0..fi.plane_count())
        .map(|plane| {
            let (Some(&offset), Some(&stride)) = (offsets.get(plane), strides.get(plane)) else {
                return Err(PlaneBoundsError::MissingPlane { plane, described, expected: fi.plane_count(), fourcc });
            };
            let stride = u64::try_from(stride).map_err(|_| PlaneBoundsError::NegativeStride { plane, stride: i64::from(stride) })?;
            // usize is at most 64 bits on every target GStreamer runs on.
            PlaneSpan::new(plane, offset as u64, stride, fi.plane_height(plane, height), fi.min_stride(plane, width))
        })
        .collect()
}

/// The planes of a tiled frame as dmabridge's geometry places them (back to back from the
/// frame's first byte), each a run of whole tiles: read in full, padding and all.
pub(crate) fn tiled_planes(geometry: &TiledGeometry) -> Result<Vec<PlaneSpan>, PlaneBoundsError> {
    geometry
        .planes
        .iter()
        .enumerate()
        .map(|(plane, p)| {
            let row = u64::from(p.padded_width_bytes);
            PlaneSpan::new(plane, p.offset, row, p.padded_rows, row)
        })
        .collect()
}

/// Checks that every plane ends inside the `size` bytes of the memory `what` names.
pub(crate) fn check_within(planes: &[PlaneSpan], size: u64, what: &'static str) -> Result<(), PlaneBoundsError> {
    match planes.iter().find(|p| p.end > size) {
        Some(p) => Err(PlaneBoundsError::PastMemory { plane: p.plane, offset: p.offset, end: p.end, size, what }),
        None => Ok(()),
    }
}

/// Appends `plane`'s visible rows to `out`, from `bytes`, which start at the plane's first
/// byte (so hold at least `end - offset` bytes where the checks passed).
pub(crate) fn gather_rows(plane: &PlaneSpan, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), PlaneBoundsError> {
    let past = || PlaneBoundsError::PastMemory { plane: plane.plane, offset: plane.offset, end: plane.end, size: plane.offset + bytes.len() as u64, what: "the mapped bytes" };
    let row = usize::try_from(plane.row).map_err(|_| past())?;
    for y in 0..u64::from(plane.rows) {
        // At most `end - offset`, which the checks found inside the memory.
        let at = usize::try_from(y * plane.stride).map_err(|_| past())?;
        out.extend_from_slice(bytes.get(at..).and_then(|b| b.get(..row)).ok_or_else(past)?);
    }
    Ok(())
}

/// Bytes read at once where rows are read in runs ([`read_rows`]).
const RUN_BYTES: u64 = 1 << 20;

/// Appends `plane`'s visible rows to `out`, read with `pread` from `fd` (borrowed), the plane's
/// offset counted from byte `base` of the file (a dma-buf memory's offset in its fd). Rows
/// whose padding is at most their visible bytes are read in runs of up to [`RUN_BYTES`]
/// (through one staging buffer); rows further apart with one `pread` each: what is read is at
/// most twice the visible bytes, and nothing of `stride × rows` is ever allocated.
pub(crate) fn read_rows(fd: BorrowedFd<'_>, base: u64, plane: &PlaneSpan, out: &mut Vec<u8>) -> Result<(), ReadError> {
    let row = usize::try_from(plane.row).map_err(|_| ReadError::Alloc { len: plane.row })?;
    let start = base.checked_add(plane.offset).ok_or(ReadError::Overflow { offset: base, len: plane.end })?;
    let per_run = if plane.stride <= plane.row.saturating_mul(2) { u32::try_from((RUN_BYTES / plane.stride.max(1)).max(1)).unwrap_or(u32::MAX) } else { 1 };
    let stride = usize::try_from(plane.stride).map_err(|_| ReadError::Alloc { len: plane.stride })?;
    let mut staging = Vec::new();
    let mut y = 0u32;
    while y < plane.rows {
        let n = per_run.min(plane.rows - y);
        // Inside the plane, whose end the checks computed without overflow.
        let at = start + u64::from(y) * plane.stride;
        if n == 1 {
            let from = out.len();
            out.resize(from + row, 0);
            read_exact_at(fd, at, &mut out[from..])?;
        } else {
            // n >= 2 only where stride <= 2 x row, so this is at most RUN_BYTES + row.
            staging.resize(stride * (n as usize - 1) + row, 0);
            read_exact_at(fd, at, &mut staging)?;
            for r in staging.chunks(stride) {
                out.extend_from_slice(r.get(..row).ok_or(ReadError::ShortRead { wanted_end: at + staging.len() as u64, end_of_file: at })?);
            }
        }
        y += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plane_ends_at_its_last_visible_byte() {
        let p = PlaneSpan::new(1, 100, 64, 3, 48).expect("span");
        assert_eq!(p.end, 100 + 64 * 2 + 48);
        assert!(check_within(&[p], p.end, "m").is_ok());
        let e = check_within(&[p], p.end - 1, "the memory").expect_err("one byte short");
        assert!(e.to_string().starts_with("plane 1:"), "{e}");
        assert_eq!(PlaneSpan::new(0, 7, 64, 0, 48).expect("no rows").end, 7);
    }

    #[test]
    fn overflow_negative_strides_and_missing_planes_are_errors() {
        assert!(matches!(PlaneSpan::new(0, u64::MAX - 10, 1 << 40, 1 << 20, 8), Err(PlaneBoundsError::Overflow { plane: 0, .. })));
        assert!(matches!(PlaneSpan::new(0, 0, u64::MAX, 3, 8), Err(PlaneBoundsError::Overflow { .. })));
        assert!(matches!(PlaneSpan::new(0, 0, 16, 3, 32), Err(PlaneBoundsError::StrideTooSmall { .. })));
        assert!(matches!(linear_planes(Fourcc::NV12, 64, 32, &[0, 4096], &[-64, 64]), Err(PlaneBoundsError::NegativeStride { plane: 0, stride: -64 })));
        assert!(matches!(linear_planes(Fourcc::NV12, 64, 32, &[0], &[64]), Err(PlaneBoundsError::MissingPlane { plane: 1, described: 1, expected: 2, .. })));
        let planes = linear_planes(Fourcc::NV12, 64, 32, &[0, 2048], &[64, 64]).expect("planes");
        assert_eq!(planes.iter().map(|p| (p.rows, p.row, p.end)).collect::<Vec<_>>(), [(32, 64, 2048), (16, 64, 3072)]);
    }

    #[test]
    fn rows_are_gathered_without_their_padding() {
        let p = PlaneSpan::new(0, 0, 4, 3, 2).expect("span");
        let mut out = Vec::new();
        gather_rows(&p, &[1, 2, 0, 0, 3, 4, 0, 0, 5, 6], &mut out).expect("gather");
        assert_eq!(out, [1, 2, 3, 4, 5, 6]);
        assert!(gather_rows(&p, &[1, 2, 0, 0, 3, 4, 0, 0, 5], &mut out).is_err(), "short bytes are an error, not a panic");
    }

    /// Rows read from a file: in runs where the padding is small, one pread a row where it
    /// is not, and a file shorter than the plane is a short read, never a panic.
    #[test]
    fn rows_are_read_from_a_file_without_their_padding() {
        use std::os::fd::AsFd;
        let file: Vec<u8> = (0..=255u8).cycle().take(64 * 1024).collect();
        let fd = dmabridge::interop::dmabuf::sealed_memfd("planes-test", &file).expect("memfd");
        for (stride, row) in [(24u64, 16u64), (4096, 16)] {
            let p = PlaneSpan::new(0, 100, stride, 9, row).expect("span");
            let mut out = vec![7u8];
            read_rows(fd.as_fd(), 11, &p, &mut out).expect("rows");
            let want: Vec<u8> = (0..9).flat_map(|y| file[(111 + y * stride) as usize..][..row as usize].to_vec()).collect();
            assert_eq!(out[1..], want[..], "stride {stride}");
        }
        let p = PlaneSpan::new(0, 0, 8192, 9, 16).expect("span");
        assert!(matches!(read_rows(fd.as_fd(), 0, &p, &mut Vec::new()), Err(ReadError::ShortRead { .. })));
    }
}
