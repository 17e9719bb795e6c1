//! Where one plane of an image lies among its buffer's memory objects.

/// One plane's place: which memory object (fd) of its buffer holds it, where in that
/// object it starts, its row pitch, and the bytes it spans from its offset to the end of
/// its last row (of tiles). Placement ([`super::place`]) computes these, and V4L2's
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
/// stride counts: the format's (subsampled) rows, or `height` for a plane the format table
/// does not list (a modifier's metadata plane, an unknown fourcc). The import check sizes a
/// plane as `stride x plane_rows`, and so does every [`PlaneLayout`] made from a descriptor
/// ([`super::DmaBuf::plane_layouts`]) or a wire message: for a tiled layout that is a lower
/// bound, its padding rows being the layout's business.
pub fn plane_rows(fourcc: crate::Fourcc, plane: usize, height: u32) -> u32 {
    match crate::format_info(fourcc) {
        Some(info) if plane < info.plane_count() => info.plane_height(plane, height),
        _ => height,
    }
}
