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
