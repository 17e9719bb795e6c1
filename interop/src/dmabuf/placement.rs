//! Where each plane of a buffer goes when the allocator decides, not the driver: the
//! per-plane offsets, strides and sizes that honour a collection's merged constraints
//! (stride alignment, offset alignment, a minimum size, one file or one per plane), and
//! sealed memfds that hold them.
//!
//! The layout is computed for every layout interop knows the geometry of: LINEAR and the
//! tiled layouts of [`crate::tiling`]. For a vendor's opaque modifier only the driver knows
//! the layout, so [`place`] refuses it ([`PlacementError::OpaqueLayout`]) and the caller must
//! let the device allocate.
//!
//! Rules, chosen so that a strict importer (KMS, a V4L2 decoder) takes the result:
//! - a linear plane's stride is its packed row rounded up to `stride_align`;
//! - a tiled plane's stride is its row of tiles; it must already be a multiple of
//!   `stride_align` (widening a tiled row changes its tile count, which the tiled layouts
//!   do not express), otherwise [`PlacementError::TiledStride`];
//! - each plane starts at a multiple of `offset_align` in its file;
//! - every file is at least `min_size` bytes, and a multiple of `offset_align`.

use std::os::fd::OwnedFd;

use super::descriptor::{DescriptorError, DmaBuf, MAX_PLANES};
use super::heap::{HeapError, SystemMemory};
use crate::plane_layout::PlaneLayout;
use crate::tiling::{tiled_size, TilingError};
use crate::{Fourcc, Layout, TileLayout};

/// What to place: a format at an extent, and the merged constraints on its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementRequest {
    pub fourcc: Fourcc,
    /// LINEAR or a tiled layout interop knows; `Layout::Implicit` means LINEAR here (the
    /// allocator picks, and a system-memory allocator has nothing but LINEAR to pick).
    pub layout: Layout,
    pub width: u32,
    pub height: u32,
    /// Row pitch alignment in bytes, a power of two (1: none).
    pub stride_align: u64,
    /// Plane start alignment in bytes, a power of two (1: none).
    pub offset_align: u64,
    /// The least size of each file, in bytes (0: none).
    pub min_size: u64,
    /// One file per plane (disjoint) rather than all planes in one file.
    pub disjoint: bool,
}

/// The computed layout: the files' sizes and where each plane is in them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub object_sizes: Vec<u64>,
    /// Each plane's place; `object` indexes [`Placement::object_sizes`].
    pub planes: Vec<PlaneLayout>,
}

/// Why a layout could not be placed or allocated.
/// The base alignment of every buffer dmabridge allocates: a memfd's or a dma-buf's first
/// byte starts a page wherever it is mapped or imported (4096 bytes, the smallest page of
/// the targets dmabridge runs on). A collection's `align` above it is refused by every
/// allocator, never silently dropped.
pub const BASE_ALIGN: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// Only the driver knows where this modifier's planes go.
    #[error("{0:?} is not a layout dmabridge can compute; the device must allocate it")]
    OpaqueLayout(Layout),
    /// An alignment was 0 or not a power of two.
    #[error("{what} {value} is not a power of two")]
    Alignment { what: &'static str, value: u64 },
    /// The format, extent or layout is not one the geometry knows, or overflows.
    #[error(transparent)]
    Geometry(#[from] TilingError),
    /// A tiled plane's row of tiles is not a multiple of the stride alignment.
    #[error("plane {plane}'s row of tiles is {stride} bytes, not a multiple of stride-align {stride_align}; a tiled layout's stride cannot be widened")]
    TiledStride { plane: usize, stride: u64, stride_align: u64 },
    /// A size or offset does not fit in 64 bits.
    #[error("the layout's sizes overflow 64 bits")]
    Overflow,
    /// The memory could not be had (a dma-heap allocation, a memfd).
    #[error(transparent)]
    Memory(#[from] HeapError),
    /// The descriptor refused the planes (it owns the fds by then, and closed them).
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
}

fn round_up(v: u64, to: u64) -> Result<u64, PlacementError> {
    v.checked_add(to - 1).map(|s| s / to * to).ok_or(PlacementError::Overflow)
}

fn pow2(what: &'static str, value: u64) -> Result<u64, PlacementError> {
    if value.is_power_of_two() {
        Ok(value)
    } else {
        Err(PlacementError::Alignment { what, value })
    }
}

/// The placement of `req`'s planes, or why there is none.
pub fn place(req: &PlacementRequest) -> Result<Placement, PlacementError> {
    let stride_align = pow2("stride-align", req.stride_align)?;
    let offset_align = pow2("offset-align", req.offset_align)?;
    let tile = match req.layout {
        Layout::Implicit => TileLayout::Linear,
        Layout::Explicit(m) => TileLayout::from_modifier(m).ok_or(PlacementError::OpaqueLayout(req.layout))?,
    };
    let g = tiled_size(tile, req.fourcc, req.width, req.height)?;
    let mut planes = Vec::with_capacity(g.planes.len());
    let mut object_sizes: Vec<u64> = Vec::new();
    for (i, p) in g.planes.iter().enumerate() {
        let (stride, size) = if tile == TileLayout::Linear {
            let stride = round_up(u64::from(p.width_bytes), stride_align)?;
            // Every row at the full stride, the last one too: the import checks (and a
            // driver's memory requirements for an explicit layout) count offset + stride x
            // rows, so a plane sized to its last row's visible bytes is refused.
            let size = u64::from(p.rows).checked_mul(stride).ok_or(PlacementError::Overflow)?;
            (stride, size)
        } else {
            let stride = u64::from(p.padded_width_bytes);
            if stride % stride_align != 0 {
                return Err(PlacementError::TiledStride { plane: i, stride, stride_align });
            }
            (stride, p.size)
        };
        if req.disjoint || object_sizes.is_empty() {
            object_sizes.push(0);
        }
        let object = object_sizes.len() - 1;
        let offset = round_up(object_sizes[object], offset_align)?;
        object_sizes[object] = offset.checked_add(size).ok_or(PlacementError::Overflow)?;
        planes.push(PlaneLayout { object, offset, stride, size });
    }
    for s in &mut object_sizes {
        *s = round_up((*s).max(req.min_size), offset_align)?;
    }
    Ok(Placement { object_sizes, planes })
}

impl Placement {
    /// Zeroed files of the placement's sizes from `memory` (dma-heap buffers or sealed
    /// memfds), described as `fourcc`/`layout` at `width`x`height` (`Layout::Implicit` stays
    /// implicit: the chain had no explicit modifier, so none is claimed). The returned
    /// descriptor owns every fd; a failure closes the ones made so far. `name` shows in
    /// `/proc/PID/fd` for memfds.
    pub fn allocate(
        &self,
        memory: &SystemMemory,
        name: &str,
        fourcc: Fourcc,
        layout: Layout,
        width: u32,
        height: u32,
    ) -> Result<DmaBuf, PlacementError> {
        if self.planes.is_empty() || self.planes.len() > MAX_PLANES {
            return Err(DescriptorError::PlaneCount(self.planes.len()).into());
        }
        let files: Vec<OwnedFd> = self
            .object_sizes
            .iter()
            .map(|&size| memory.alloc(name, size))
            .collect::<Result<_, _>>()?;
        Ok(DmaBuf::of_objects(fourcc, layout, width, height, &files, &self.planes)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Modifier;

    fn req(fourcc: Fourcc, layout: Layout, w: u32, h: u32) -> PlacementRequest {
        PlacementRequest {
            fourcc,
            layout,
            width: w,
            height: h,
            stride_align: 1,
            offset_align: 1,
            min_size: 0,
            disjoint: false,
        }
    }

    #[test]
    fn linear_nv12_honours_stride_and_offset_alignment() {
        let mut r = req(Fourcc::NV12, Layout::Explicit(Modifier::LINEAR), 100, 10);
        r.stride_align = 256;
        r.offset_align = 4096;
        let p = place(&r).unwrap();
        assert_eq!(p.planes.len(), 2);
        for pl in &p.planes {
            assert_eq!(pl.stride % 256, 0);
            assert_eq!(pl.offset % 4096, 0);
            assert_eq!(pl.object, 0);
        }
        assert_eq!(p.planes[0].size, 10 * 256, "every row at the full stride, the last one too");
        assert_eq!(p.planes[1].offset, 4096);
        assert_eq!(p.object_sizes, vec![8192]);
    }

    #[test]
    fn disjoint_gives_a_file_per_plane_and_min_size_pads_each() {
        let mut r = req(Fourcc::NV12, Layout::Implicit, 64, 64);
        r.disjoint = true;
        r.min_size = 10_000;
        let p = place(&r).unwrap();
        assert_eq!(p.object_sizes, vec![10_000, 10_000]);
        assert_eq!((p.planes[1].object, p.planes[1].offset), (1, 0));
        let buf = p.allocate(&SystemMemory::Memfd, "t", Fourcc::NV12, Layout::Implicit, 64, 64).unwrap();
        assert!(buf.disjoint());
        assert_eq!(buf.layout(), Layout::Implicit);
        assert_eq!(rustix::fs::fstat(buf.plane(1).unwrap().fd).unwrap().st_size, 10_000);
    }

    #[test]
    fn tiled_strides_are_rows_of_tiles_and_are_not_widened() {
        let l = Layout::Explicit(TileLayout::Samsung64x32.modifier().unwrap());
        let p = place(&req(Fourcc::NV12, l, 130, 66)).unwrap();
        assert_eq!(p.planes[0].stride, 256);
        let mut r = req(Fourcc::NV12, l, 130, 66);
        r.stride_align = 512;
        assert!(matches!(place(&r), Err(PlacementError::TiledStride { plane: 0, .. })));
    }

    #[test]
    fn refuses_opaque_layouts_bad_alignments_and_overflow() {
        let opaque = Layout::Explicit(Modifier::from_vendor(0x02, 0x1234));
        assert!(matches!(place(&req(Fourcc::XRGB8888, opaque, 4, 4)), Err(PlacementError::OpaqueLayout(_))));
        let mut r = req(Fourcc::XRGB8888, Layout::Implicit, 4, 4);
        r.offset_align = 3;
        assert!(matches!(place(&r), Err(PlacementError::Alignment { .. })));
        let mut r = req(Fourcc::XRGB8888, Layout::Implicit, u32::MAX, u32::MAX);
        r.stride_align = 1 << 62;
        assert!(place(&r).is_err());
    }
}
