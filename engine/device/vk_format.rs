//! The VkFormat <-> DRM fourcc table, as data.
//!
//! The trap is byte order: DRM names packed pixels from the most significant bit of a
//! little-endian word (`AR24` = `[31:0] A:R:G:B`, so memory holds B, G, R, A), while
//! Vulkan's non-packed formats name components in memory order. So DRM `AR24` is
//! `VK_FORMAT_B8G8R8A8_UNORM`, and DRM `AB24` is `VK_FORMAT_R8G8B8A8_UNORM`.

use ash::vk;
use dmabridge_interop::Fourcc;

/// How a DRM format's memory reads as its Vulkan format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Same memory, same meaning.
    Direct,
    /// Same memory as the Vulkan format, whose alpha (the DRM `X` bits) carries no meaning;
    /// sample it with an `a = ONE` swizzle.
    AlphaIgnored,
    /// The chroma components are in the other order (NV21's CrCb, YV12's V-before-U
    /// planes): the Vulkan format plus a swap of Cb and Cr, done by the YCbCr
    /// conversion's component mapping (r <-> b), or for 3-plane formats by swapping the
    /// layouts of planes 1 and 2 at import.
    ChromaSwapped,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VkFormatEntry {
    pub fourcc: Fourcc,
    pub vk_format: vk::Format,
    pub mapping: Mapping,
    /// Planes of the Vulkan format (1 for packed, 2 or 3 for multi-planar YCbCr).
    pub vk_planes: u8,
}

const fn e(fourcc: Fourcc, vk_format: vk::Format, mapping: Mapping, vk_planes: u8) -> VkFormatEntry {
    VkFormatEntry { fourcc, vk_format, mapping, vk_planes }
}

use Mapping::{AlphaIgnored, ChromaSwapped, Direct};

/// Every fourcc dmabridge can hand to Vulkan. A fourcc appears once; a VkFormat appears
/// once with `Direct` mapping (its canonical fourcc) and possibly again as `AlphaIgnored`
/// or `ChromaSwapped`.
pub static VK_FORMAT_TABLE: &[VkFormatEntry] = &[
    // 8-bit RGB: the byte-order trap.
    e(Fourcc::ARGB8888, vk::Format::B8G8R8A8_UNORM, Direct, 1),
    e(Fourcc::XRGB8888, vk::Format::B8G8R8A8_UNORM, AlphaIgnored, 1),
    e(Fourcc::ABGR8888, vk::Format::R8G8B8A8_UNORM, Direct, 1),
    e(Fourcc::XBGR8888, vk::Format::R8G8B8A8_UNORM, AlphaIgnored, 1),
    e(Fourcc::RGB565, vk::Format::R5G6B5_UNORM_PACK16, Direct, 1),
    // 10-bit RGB: packed formats name bits from the top, like DRM.
    e(Fourcc::ARGB2101010, vk::Format::A2R10G10B10_UNORM_PACK32, Direct, 1),
    e(Fourcc::XRGB2101010, vk::Format::A2R10G10B10_UNORM_PACK32, AlphaIgnored, 1),
    e(Fourcc::ABGR2101010, vk::Format::A2B10G10R10_UNORM_PACK32, Direct, 1),
    e(Fourcc::XBGR2101010, vk::Format::A2B10G10R10_UNORM_PACK32, AlphaIgnored, 1),
    // 16-bit float RGB: `AB4H` is [63:0] A:B:G:R little endian = R, G, B, A in memory.
    e(Fourcc::ABGR16161616F, vk::Format::R16G16B16A16_SFLOAT, Direct, 1),
    e(Fourcc::XBGR16161616F, vk::Format::R16G16B16A16_SFLOAT, AlphaIgnored, 1),
    // Single and dual channel.
    e(Fourcc::R8, vk::Format::R8_UNORM, Direct, 1),
    e(Fourcc::R16, vk::Format::R16_UNORM, Direct, 1),
    e(Fourcc::GR88, vk::Format::R8G8_UNORM, Direct, 1),
    // YUV. Vulkan's G is Y, B is Cb (U), R is Cr (V).
    e(Fourcc::NV12, vk::Format::G8_B8R8_2PLANE_420_UNORM, Direct, 2),
    e(Fourcc::NV21, vk::Format::G8_B8R8_2PLANE_420_UNORM, ChromaSwapped, 2),
    e(Fourcc::NV16, vk::Format::G8_B8R8_2PLANE_422_UNORM, Direct, 2),
    e(Fourcc::P010, vk::Format::G10X6_B10X6R10X6_2PLANE_420_UNORM_3PACK16, Direct, 2),
    e(Fourcc::P016, vk::Format::G16_B16R16_2PLANE_420_UNORM, Direct, 2),
    e(Fourcc::YUV420, vk::Format::G8_B8_R8_3PLANE_420_UNORM, Direct, 3),
    e(Fourcc::YVU420, vk::Format::G8_B8_R8_3PLANE_420_UNORM, ChromaSwapped, 3),
    // Packed 4:2:2: YUYV is Y0 U Y1 V in memory, UYVY is U Y0 V Y1.
    e(Fourcc::YUYV, vk::Format::G8B8G8R8_422_UNORM, Direct, 1),
    e(Fourcc::UYVY, vk::Format::B8G8R8G8_422_UNORM, Direct, 1),
];

/// The sRGB format with the same memory as `format` (an 8-bit UNORM colour format), which a
/// `MUTABLE_FORMAT` image may be viewed in; `None` where there is none.
pub fn srgb_twin(format: vk::Format) -> Option<vk::Format> {
    Some(match format {
        vk::Format::B8G8R8A8_UNORM => vk::Format::B8G8R8A8_SRGB,
        vk::Format::R8G8B8A8_UNORM => vk::Format::R8G8B8A8_SRGB,
        vk::Format::A8B8G8R8_UNORM_PACK32 => vk::Format::A8B8G8R8_SRGB_PACK32,
        vk::Format::R8G8B8_UNORM => vk::Format::R8G8B8_SRGB,
        vk::Format::B8G8R8_UNORM => vk::Format::B8G8R8_SRGB,
        vk::Format::R8G8_UNORM => vk::Format::R8G8_SRGB,
        vk::Format::R8_UNORM => vk::Format::R8_SRGB,
        _ => return None,
    })
}

/// The formats a `MUTABLE_FORMAT` image of the multi-planar `format` may view each plane
/// in (the spec's "Plane Format Compatibility" table, and for the 10- and 12-bit planes the
/// 16-bit formats of the same size class, which is how wgpu and GL view P010's planes):
/// listed in its `VkImageFormatListCreateInfo`, which VUID-VkImageViewCreateInfo-pNext-01585
/// checks every view against. Empty for a single-plane format.
pub fn plane_view_formats(format: vk::Format) -> &'static [vk::Format] {
    use vk::Format as F;
    match format {
        F::G8_B8R8_2PLANE_420_UNORM | F::G8_B8R8_2PLANE_422_UNORM => &[F::R8_UNORM, F::R8G8_UNORM],
        F::G8_B8_R8_3PLANE_420_UNORM => &[F::R8_UNORM],
        F::G10X6_B10X6R10X6_2PLANE_420_UNORM_3PACK16 => &[F::R10X6_UNORM_PACK16, F::R10X6G10X6_UNORM_2PACK16, F::R16_UNORM, F::R16G16_UNORM],
        F::G16_B16R16_2PLANE_420_UNORM => &[F::R16_UNORM, F::R16G16_UNORM],
        _ => &[],
    }
}

/// The Vulkan side of a DRM fourcc.
pub fn to_vk(fourcc: Fourcc) -> Option<&'static VkFormatEntry> {
    VK_FORMAT_TABLE.iter().find(|e| e.fourcc == fourcc)
}

/// The canonical DRM fourcc of a Vulkan format (its `Direct` entry).
pub fn from_vk(format: vk::Format) -> Option<&'static VkFormatEntry> {
    VK_FORMAT_TABLE.iter().find(|e| e.vk_format == format && e.mapping == Mapping::Direct)
}

/// `B8G8R8A8_UNORM` for `vk::Format::B8G8R8A8_UNORM`, as the JSON contract spells it.
pub fn vk_format_name(format: vk::Format) -> String {
    format!("{format:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmabridge_interop::format_info;
    use std::collections::HashSet;

    #[test]
    fn fourccs_are_unique() {
        let mut seen = HashSet::new();
        for e in VK_FORMAT_TABLE {
            assert!(seen.insert(e.fourcc), "{} twice", e.fourcc);
        }
    }

    #[test]
    fn each_vk_format_has_exactly_one_direct_entry() {
        let formats: HashSet<vk::Format> = VK_FORMAT_TABLE.iter().map(|e| e.vk_format).collect();
        for f in formats {
            let direct = VK_FORMAT_TABLE.iter().filter(|e| e.vk_format == f && e.mapping == Direct).count();
            assert_eq!(direct, 1, "{f:?}");
        }
    }

    #[test]
    fn round_trips() {
        for e in VK_FORMAT_TABLE {
            assert_eq!(to_vk(e.fourcc), Some(e));
            let back = from_vk(e.vk_format).expect("every Vulkan format has a canonical fourcc");
            assert_eq!(back.vk_format, e.vk_format);
            if e.mapping == Direct {
                assert_eq!(back.fourcc, e.fourcc);
            }
        }
    }

    #[test]
    fn plane_counts_agree_with_the_drm_side() {
        for e in VK_FORMAT_TABLE {
            let info = format_info(e.fourcc).unwrap_or_else(|| panic!("{} has no plane info", e.fourcc));
            assert_eq!(info.plane_count(), e.vk_planes as usize, "{}", e.fourcc);
        }
    }

    #[test]
    fn alpha_ignored_pairs_with_an_alpha_format() {
        for e in VK_FORMAT_TABLE.iter().filter(|e| e.mapping == AlphaIgnored) {
            let info = format_info(e.fourcc).expect("plane info");
            assert!(!info.has_alpha, "{}", e.fourcc);
            let canonical = from_vk(e.vk_format).expect("canonical");
            assert!(format_info(canonical.fourcc).expect("plane info").has_alpha);
        }
    }

    #[test]
    fn the_byte_order_trap() {
        assert_eq!(to_vk(Fourcc::ARGB8888).map(|e| e.vk_format), Some(vk::Format::B8G8R8A8_UNORM));
        assert_eq!(to_vk(Fourcc::ABGR8888).map(|e| e.vk_format), Some(vk::Format::R8G8B8A8_UNORM));
        assert_eq!(vk_format_name(vk::Format::B8G8R8A8_UNORM), "B8G8R8A8_UNORM");
    }
}
