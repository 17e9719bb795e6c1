//! Where one plane of an image lies among its buffer's memory objects: vocabulary shared by
//! the dma-buf checks and placement (`dmabuf`), the converters (`tiling`) and the peers.

/// One plane's place: which memory object (fd) of its buffer holds it, where in that
/// object it starts, its row pitch, and the bytes it spans from its offset to the end of
/// its last row (of tiles). Placement ([`crate::dmabuf::place`]) computes these, and V4L2's
/// `v4l2_format` maps to them ([`crate::peers::v4l2::plane_layouts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneLayout {
    /// Index of the memory object (a V4L2 buffer, a dma-buf fd, a placement's file).
    pub object: usize,
    /// Byte offset of the plane's first row in its object.
    pub offset: u64,
    /// Bytes from the start of one row to the start of the next.
    pub stride: u64,
    /// Bytes from `offset` to the end of the plane.
    pub size: u64,
}

impl PlaneLayout {
    /// A plane of `rows` rows at `offset` in object 0 (a single-buffer image, as the CPU and
    /// GPU conversions address it), spanning `stride x rows` bytes, as Vulkan reports a
    /// linear plane. The product saturates at `u64::MAX`, a span no buffer has, so a hostile
    /// stride fails the bounds check that follows instead of wrapping.
    pub fn linear(offset: u64, stride: u64, rows: u32) -> PlaneLayout {
        PlaneLayout { object: 0, offset, stride, size: stride.saturating_mul(u64::from(rows)) }
    }

    /// The first byte past the plane in its object, or `None` when `offset + size` overflows.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }
}

/// The rows of plane `plane` of a `fourcc` image `height` rows tall that a descriptor's
/// stride counts: the format's (subsampled) rows; 0 for a memory plane past the format's
/// planes (a modifier's compression metadata: AMD's DCC, Intel's CCS), whose rows are the
/// vendor's blocks, not the image's, so that neither its row count nor its size follows
/// from its pitch (radv's DCC planes at 1920x1080 have a 2048-byte pitch and span 48 or 64
/// KiB, not 2048 x 1080); `height` for a fourcc the table does not know. The import check
/// sizes a plane as `stride x plane_rows`, and so does every [`PlaneLayout`] made from a
/// descriptor ([`crate::dmabuf::DmaBuf::plane_layouts`]) or a wire message: for a tiled layout that
/// is a lower bound, its padding rows being the layout's business, and for a metadata plane
/// it is 0, a size not known.
pub fn plane_rows(fourcc: crate::Fourcc, plane: usize, height: u32) -> u32 {
    match crate::format_info(fourcc) {
        Some(info) if plane < info.plane_count() => info.plane_height(plane, height),
        Some(_) => 0,
        None => height,
    }
}

/// A frame's visible bytes, each plane's rows tightly packed and the planes one after
/// another (what [`crate::dmabuf::write_planes`] takes and an engine's read-back returns), gathered
/// from memory laid out as `layouts` say: `memory[l.object]` is the bytes of the file plane
/// `l` lives in (a mapping of a V4L2 buffer, a file read whole). `None` for a fourcc without
/// a plane table, a plane whose rows run past its memory, or sizes past `usize`.
pub fn pack_planes(fourcc: crate::Fourcc, width: u32, height: u32, layouts: &[PlaneLayout], memory: &[&[u8]]) -> Option<Vec<u8>> {
    let info = crate::format_info(fourcc)?;
    let mut out = Vec::with_capacity(usize::try_from(info.packed_size(width, height)).ok()?);
    for (i, l) in layouts.iter().enumerate().take(info.plane_count()) {
        let row = usize::try_from(info.min_stride(i, width)).ok()?;
        let (offset, stride) = (usize::try_from(l.offset).ok()?, usize::try_from(l.stride).ok()?);
        let mem = memory.get(l.object)?;
        for r in 0..plane_rows(fourcc, i, height) as usize {
            let start = offset.checked_add(r.checked_mul(stride)?)?;
            out.extend_from_slice(mem.get(start..start.checked_add(row)?)?);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Fourcc;

    #[test]
    fn pack_planes_gathers_rows_from_each_memory_plane() {
        // NV12 4x2: Y rows at stride 8 in file 0; UV at offset 4 in file 1, stride 6.
        let y: Vec<u8> = (0..16).collect();
        let uv: Vec<u8> = (100..110).collect();
        let layouts = [PlaneLayout { object: 0, offset: 0, stride: 8, size: 16 }, PlaneLayout { object: 1, offset: 4, stride: 6, size: 6 }];
        let packed = pack_planes(Fourcc::NV12, 4, 2, &layouts, &[&y, &uv]).unwrap();
        assert_eq!(packed, [0, 1, 2, 3, 8, 9, 10, 11, 104, 105, 106, 107]);
        assert_eq!(pack_planes(Fourcc::NV12, 4, 4, &layouts, &[&y, &uv]), None, "rows past the memory");
        assert_eq!(pack_planes(Fourcc::NV12, 4, 2, &layouts, &[&y]), None, "a missing memory plane");
    }
}
