//! How many planes a fourcc has and how big each one is: the facts every layout check and
//! every copy needs. This is data, checked by the tests at the bottom over the whole table.

use crate::Fourcc;

/// One plane of a format, in the kernel's `drm_format_info` terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneInfo {
    /// Bytes per sample of this plane (a chroma pair counts as one sample of 2 bytes in NV12).
    pub cpp: u8,
    /// Horizontal subsampling: the plane has ceil(width / hsub) samples per row.
    pub hsub: u8,
    /// Vertical subsampling: the plane has ceil(height / vsub) rows.
    pub vsub: u8,
}

/// Static facts about one fourcc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatInfo {
    pub fourcc: Fourcc,
    pub planes: &'static [PlaneInfo],
    pub is_yuv: bool,
    pub has_alpha: bool,
}

impl FormatInfo {
    pub fn plane_count(&self) -> usize {
        self.planes.len()
    }

    /// Samples in one row of `plane` for an image `width` pixels wide.
    pub fn plane_width(&self, plane: usize, width: u32) -> u32 {
        width.div_ceil(self.planes[plane].hsub as u32)
    }

    /// Rows of `plane` for an image `height` pixels tall.
    pub fn plane_height(&self, plane: usize, height: u32) -> u32 {
        height.div_ceil(self.planes[plane].vsub as u32)
    }

    /// The smallest valid stride of `plane`: its row of samples, tightly packed.
    pub fn min_stride(&self, plane: usize, width: u32) -> u64 {
        self.plane_width(plane, width) as u64 * self.planes[plane].cpp as u64
    }

    /// Bytes of a tightly packed copy of `plane`.
    pub fn packed_plane_size(&self, plane: usize, width: u32, height: u32) -> u64 {
        self.min_stride(plane, width) * self.plane_height(plane, height) as u64
    }

    /// Bytes of all planes, tightly packed and concatenated.
    pub fn packed_size(&self, width: u32, height: u32) -> u64 {
        (0..self.plane_count()).map(|p| self.packed_plane_size(p, width, height)).sum()
    }
}

const fn p(cpp: u8, hsub: u8, vsub: u8) -> PlaneInfo {
    PlaneInfo { cpp, hsub, vsub }
}

const ONE_1: &[PlaneInfo] = &[p(1, 1, 1)];
const ONE_2: &[PlaneInfo] = &[p(2, 1, 1)];
const ONE_4: &[PlaneInfo] = &[p(4, 1, 1)];
const ONE_8: &[PlaneInfo] = &[p(8, 1, 1)];
const SEMI_420_8: &[PlaneInfo] = &[p(1, 1, 1), p(2, 2, 2)];
const SEMI_422_8: &[PlaneInfo] = &[p(1, 1, 1), p(2, 2, 1)];
const SEMI_420_16: &[PlaneInfo] = &[p(2, 1, 1), p(4, 2, 2)];
const PLANAR_420_8: &[PlaneInfo] = &[p(1, 1, 1), p(1, 2, 2), p(1, 2, 2)];

const fn rgb(fourcc: Fourcc, planes: &'static [PlaneInfo], has_alpha: bool) -> FormatInfo {
    FormatInfo { fourcc, planes, is_yuv: false, has_alpha }
}

const fn yuv(fourcc: Fourcc, planes: &'static [PlaneInfo]) -> FormatInfo {
    FormatInfo { fourcc, planes, is_yuv: true, has_alpha: false }
}

/// Every fourcc dmabridge knows the plane layout of.
pub static FORMAT_INFO: &[FormatInfo] = &[
    rgb(Fourcc::ARGB8888, ONE_4, true),
    rgb(Fourcc::XRGB8888, ONE_4, false),
    rgb(Fourcc::ABGR8888, ONE_4, true),
    rgb(Fourcc::XBGR8888, ONE_4, false),
    rgb(Fourcc::RGBA8888, ONE_4, true),
    rgb(Fourcc::BGRA8888, ONE_4, true),
    rgb(Fourcc::RGB565, ONE_2, false),
    rgb(Fourcc::ARGB2101010, ONE_4, true),
    rgb(Fourcc::XRGB2101010, ONE_4, false),
    rgb(Fourcc::ABGR2101010, ONE_4, true),
    rgb(Fourcc::XBGR2101010, ONE_4, false),
    rgb(Fourcc::ABGR16161616F, ONE_8, true),
    rgb(Fourcc::XBGR16161616F, ONE_8, false),
    rgb(Fourcc::ARGB16161616F, ONE_8, true),
    rgb(Fourcc::XRGB16161616F, ONE_8, false),
    rgb(Fourcc::R8, ONE_1, false),
    rgb(Fourcc::R16, ONE_2, false),
    rgb(Fourcc::GR88, ONE_2, false),
    yuv(Fourcc::NV12, SEMI_420_8),
    yuv(Fourcc::NV21, SEMI_420_8),
    yuv(Fourcc::NV16, SEMI_422_8),
    yuv(Fourcc::P010, SEMI_420_16),
    yuv(Fourcc::P016, SEMI_420_16),
    yuv(Fourcc::YUV420, PLANAR_420_8),
    yuv(Fourcc::YVU420, PLANAR_420_8),
    // Packed 4:2:2: one plane, a Y and half a chroma pair per pixel.
    yuv(Fourcc::YUYV, ONE_2),
    yuv(Fourcc::UYVY, ONE_2),
];

/// The plane layout of `fourcc`, if dmabridge knows it.
pub fn format_info(fourcc: Fourcc) -> Option<&'static FormatInfo> {
    FORMAT_INFO.iter().find(|i| i.fourcc == fourcc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn no_duplicate_fourccs() {
        let mut seen = HashSet::new();
        for i in FORMAT_INFO {
            assert!(seen.insert(i.fourcc), "duplicate {}", i.fourcc);
        }
    }

    #[test]
    fn every_entry_is_a_code_drm_fourcc_knows() {
        for i in FORMAT_INFO {
            assert!(i.fourcc.known().is_some(), "{} unknown to drm-fourcc", i.fourcc);
        }
    }

    #[test]
    fn plane_invariants() {
        for i in FORMAT_INFO {
            assert!((1..=4).contains(&i.plane_count()), "{}", i.fourcc);
            // The first plane is never subsampled; chroma planes of one format match.
            assert_eq!((i.planes[0].hsub, i.planes[0].vsub), (1, 1), "{}", i.fourcc);
            for pl in &i.planes[1..] {
                assert!(i.is_yuv, "{}: only YUV formats have several planes", i.fourcc);
                assert_eq!((pl.hsub, pl.vsub), (i.planes[1].hsub, i.planes[1].vsub));
            }
            for pl in i.planes {
                assert!(pl.cpp.is_power_of_two() && pl.hsub.is_power_of_two() && pl.vsub.is_power_of_two());
            }
        }
    }

    #[test]
    fn sizes_of_odd_nv12() {
        let nv12 = format_info(Fourcc::NV12).unwrap();
        assert_eq!(nv12.min_stride(0, 33), 33);
        assert_eq!(nv12.min_stride(1, 33), 34);
        assert_eq!(nv12.plane_height(1, 33), 17);
        assert_eq!(nv12.packed_size(33, 33), 33 * 33 + 34 * 17);
    }
}
