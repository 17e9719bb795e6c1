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

/// How a format subsamples chroma, as the image's extent sees it: the width must be a multiple
/// of `h` and the height a multiple of `v`, because one chroma sample covers an `h` x `v`
/// block of pixels. Vulkan requires exactly that of the formats it calls `_422` and `_420`
/// (VUID-VkImageCreateInfo-format-04712/04713), and so do packed 4:2:2 formats, whose
/// two-pixel macropixel cannot be cut in half even though their one plane is not subsampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subsampling {
    /// Pixels per chroma sample along a row.
    pub h: u8,
    /// Rows per chroma sample.
    pub v: u8,
}

impl Subsampling {
    /// 4:4:4, and every RGB format: no constraint on the extent.
    pub const NONE: Subsampling = Subsampling { h: 1, v: 1 };
    /// 4:2:2: even width.
    pub const S422: Subsampling = Subsampling { h: 2, v: 1 };
    /// 4:2:0: even width and even height.
    pub const S420: Subsampling = Subsampling { h: 2, v: 2 };

    /// Names as the 4:x:y notation writes them, for messages.
    pub const fn name(self) -> &'static str {
        match (self.h, self.v) {
            (1, 1) => "4:4:4",
            (2, 1) => "4:2:2",
            (2, 2) => "4:2:0",
            _ => "subsampled",
        }
    }
}

/// Static facts about one fourcc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatInfo {
    pub fourcc: Fourcc,
    pub planes: &'static [PlaneInfo],
    pub is_yuv: bool,
    pub has_alpha: bool,
    /// The chroma block every extent must be a whole number of (see [`Subsampling`]).
    pub subsampling: Subsampling,
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

    /// Bytes of a tightly packed copy of `plane`. Saturates at `u64::MAX` (extents near
    /// 2^32 x 2^32), a size no buffer has, so a caller's size check fails instead of wrapping.
    pub fn packed_plane_size(&self, plane: usize, width: u32, height: u32) -> u64 {
        self.min_stride(plane, width).saturating_mul(self.plane_height(plane, height) as u64)
    }

    /// Bytes of all planes, tightly packed and concatenated; saturating like
    /// [`FormatInfo::packed_plane_size`].
    pub fn packed_size(&self, width: u32, height: u32) -> u64 {
        (0..self.plane_count()).fold(0u64, |sum, p| sum.saturating_add(self.packed_plane_size(p, width, height)))
    }

    /// Whether `width` x `height` is a whole number of chroma blocks.
    pub fn extent_fits_subsampling(&self, width: u32, height: u32) -> bool {
        width % u32::from(self.subsampling.h) == 0 && height % u32::from(self.subsampling.v) == 0
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
    FormatInfo { fourcc, planes, is_yuv: false, has_alpha, subsampling: Subsampling::NONE }
}

const fn yuv(fourcc: Fourcc, planes: &'static [PlaneInfo], subsampling: Subsampling) -> FormatInfo {
    FormatInfo { fourcc, planes, is_yuv: true, has_alpha: false, subsampling }
}

/// Every fourcc dmabridge knows the plane layout of.
pub static FORMAT_INFO: &[FormatInfo] = &[
    rgb(Fourcc::ARGB8888, ONE_4, true),
    rgb(Fourcc::XRGB8888, ONE_4, false),
    rgb(Fourcc::ABGR8888, ONE_4, true),
    rgb(Fourcc::XBGR8888, ONE_4, false),
    rgb(Fourcc::RGBA8888, ONE_4, true),
    rgb(Fourcc::BGRA8888, ONE_4, true),
    rgb(Fourcc::RGBX8888, ONE_4, false),
    rgb(Fourcc::BGRX8888, ONE_4, false),
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
    yuv(Fourcc::NV12, SEMI_420_8, Subsampling::S420),
    yuv(Fourcc::NV21, SEMI_420_8, Subsampling::S420),
    yuv(Fourcc::NV16, SEMI_422_8, Subsampling::S422),
    yuv(Fourcc::P010, SEMI_420_16, Subsampling::S420),
    yuv(Fourcc::P016, SEMI_420_16, Subsampling::S420),
    yuv(Fourcc::YUV420, PLANAR_420_8, Subsampling::S420),
    yuv(Fourcc::YVU420, PLANAR_420_8, Subsampling::S420),
    // Packed 4:2:2: one plane, a Y and half a chroma pair per pixel; the plane is not
    // subsampled, the image is.
    yuv(Fourcc::YUYV, ONE_2, Subsampling::S422),
    yuv(Fourcc::UYVY, ONE_2, Subsampling::S422),
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
    fn subsampling_agrees_with_the_planes() {
        for i in FORMAT_INFO {
            let s = i.subsampling;
            assert!([Subsampling::NONE, Subsampling::S422, Subsampling::S420].contains(&s), "{}", i.fourcc);
            if !i.is_yuv {
                assert_eq!(s, Subsampling::NONE, "{}: RGB is never subsampled", i.fourcc);
            }
            match i.planes.get(1) {
                // Planar: the chroma planes say it.
                Some(chroma) => assert_eq!((chroma.hsub, chroma.vsub), (s.h, s.v), "{}", i.fourcc),
                // Packed YUV: one 2-byte sample per pixel, chroma shared by two pixels.
                None if i.is_yuv => assert_eq!((s, i.planes[0].cpp), (Subsampling::S422, 2), "{}", i.fourcc),
                None => {}
            }
        }
    }

    #[test]
    fn odd_extents_fit_only_unsubsampled_formats() {
        for i in FORMAT_INFO {
            let (h, v) = (u32::from(i.subsampling.h), u32::from(i.subsampling.v));
            assert!(i.extent_fits_subsampling(64, 48), "{}", i.fourcc);
            assert_eq!(i.extent_fits_subsampling(33, 48), h == 1, "{}", i.fourcc);
            assert_eq!(i.extent_fits_subsampling(64, 33), v == 1, "{}", i.fourcc);
            assert!(i.extent_fits_subsampling(u32::MAX - 1, u32::MAX - 1), "{}", i.fourcc);
        }
        assert_eq!(Subsampling::S420.name(), "4:2:0");
    }

    #[test]
    fn sizes_saturate_instead_of_wrapping() {
        for i in FORMAT_INFO {
            assert!(i.packed_size(u32::MAX, u32::MAX) >= i.packed_plane_size(0, u32::MAX, u32::MAX));
        }
        let wide = format_info(Fourcc::ABGR16161616F).unwrap();
        assert_eq!(wide.packed_size(u32::MAX, u32::MAX), u64::MAX);
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
