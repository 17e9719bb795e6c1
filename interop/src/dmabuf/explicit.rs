//! The rules an explicit layout keeps before any driver sees it: a modifier, and per memory
//! plane an offset and a row pitch (`VkImageDrmFormatModifierExplicitCreateInfoEXT` on
//! export, a descriptor on import).
//!
//! Each rule here is one the Vulkan spec, the format or the modifier's own definition
//! states, so it holds on every driver:
//! - the plane count is the modifier's memory-plane count on the device
//!   (VUID-VkImageDrmFormatModifierExplicitCreateInfoEXT-drmFormatModifierPlaneCount-02265);
//! - a format plane's row pitch holds one row of its samples, in whole texels;
//! - a plane's bytes (where its size is known) do not run past 64 bits or into another
//!   plane's;
//! - an AMD swizzled plane (`AMD_FMT_MOD` with a GFX9+ `TILE`) is whole swizzle blocks of
//!   2^n bytes (256 B to 256 KiB, by the tile): its pitch is a multiple of the block's row
//!   of texels and its offset of the block size (the geometry `drm_fourcc.h` names; the
//!   kernel checks the same of an amdgpu framebuffer, `amdgpu_display_verify_sizes`).
//!
//! A driver may have more rules than these. radv, for one, wants its own pitch for any
//! tiled AMD layout and exactly its own offsets for the DCC planes (radv_image.c); those
//! come back as the driver's typed error (`VK_ERROR_INVALID_DRM_FORMAT_MODIFIER_PLANE_LAYOUT_EXT`).
//!
//! A memory plane past the format's planes (DCC or CCS metadata) has no row of samples:
//! its pitch is the vendor's and is not checked here, and its size is known only where the
//! driver reported it (a plane of `size` 0 is one of unknown size and overlaps nothing).

use crate::{format_info, Fourcc, Modifier};

use crate::plane_layout::PlaneLayout;

/// Which rule an explicit layout breaks; each names the plane.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutRuleError {
    /// The layout gives another number of planes than the modifier has memory planes on the
    /// device (VUID-VkImageDrmFormatModifierExplicitCreateInfoEXT-drmFormatModifierPlaneCount-02265).
    #[error("{got} planes given, but the modifier has {expected} memory planes on this device (drmFormatModifierPlaneCount)")]
    PlaneCount { expected: usize, got: usize },
    /// A format plane's pitch is shorter than one row of its samples.
    #[error("plane {plane}: row pitch {stride} is less than the {min} bytes of one row of samples")]
    StrideTooSmall { plane: usize, stride: u64, min: u64 },
    /// A format plane's pitch splits a texel.
    #[error("plane {plane}: row pitch {stride} is not a whole number of {texel}-byte texels")]
    StrideNotWholeTexels { plane: usize, stride: u64, texel: u64 },
    /// An AMD swizzled plane's pitch is not whole swizzle blocks.
    #[error("plane {plane}: row pitch {stride} is not a multiple of {block_pitch} bytes, the row of one {tile} swizzle block ({block_bytes} bytes) at {texel} bytes a texel")]
    SwizzlePitch { plane: usize, stride: u64, block_pitch: u64, block_bytes: u64, texel: u64, tile: &'static str },
    /// An AMD swizzled plane does not start on a swizzle block.
    #[error("plane {plane}: offset {offset} is not a multiple of {block_bytes}, the size of one {tile} swizzle block")]
    SwizzleOffset { plane: usize, offset: u64, block_bytes: u64, tile: &'static str },
    /// `offset + size` does not fit in 64 bits.
    #[error("plane {plane}: offset {offset} + size {size} overflows 64 bits")]
    Overflow { plane: usize, offset: u64, size: u64 },
    /// Two planes in one memory object share bytes.
    #[error("planes {a} and {b} share bytes ({a}: {a_start}..{a_end}, {b}: {b_start}..{b_end})")]
    Overlap { a: usize, b: usize, a_start: u64, a_end: u64, b_start: u64, b_end: u64 },
}

/// Checks `planes` (one per memory plane, `size` 0 where unknown) as the explicit layout of a
/// `fourcc` image `width` pixels wide with `modifier`, which has `memory_planes` memory
/// planes on the device. The first rule broken is returned, in the order of the module docs.
/// An unknown fourcc has no texel rules (the import checks refuse it on their own).
pub fn check_explicit_layout(fourcc: Fourcc, modifier: Modifier, width: u32, memory_planes: usize, planes: &[PlaneLayout]) -> Result<(), LayoutRuleError> {
    if planes.len() != memory_planes {
        return Err(LayoutRuleError::PlaneCount { expected: memory_planes, got: planes.len() });
    }
    if let Some(info) = format_info(fourcc) {
        for (plane, (p, pi)) in planes.iter().zip(info.planes).enumerate() {
            let min = info.min_stride(plane, width);
            if p.stride < min || p.stride == 0 {
                return Err(LayoutRuleError::StrideTooSmall { plane, stride: p.stride, min: min.max(1) });
            }
            let texel = u64::from(pi.cpp.max(1));
            if p.stride % texel != 0 {
                return Err(LayoutRuleError::StrideNotWholeTexels { plane, stride: p.stride, texel });
            }
            if let Some((tile, log2)) = modifier.as_amd().and_then(|a| a.swizzle_block()) {
                let block_bytes = 1u64 << log2;
                let block_pitch = amd_block_width(log2, texel) * texel;
                if p.stride % block_pitch != 0 {
                    return Err(LayoutRuleError::SwizzlePitch { plane, stride: p.stride, block_pitch, block_bytes, texel, tile });
                }
                if p.offset % block_bytes != 0 {
                    return Err(LayoutRuleError::SwizzleOffset { plane, offset: p.offset, block_bytes, tile });
                }
            }
        }
    }
    let mut spans = Vec::with_capacity(planes.len());
    for (plane, p) in planes.iter().enumerate() {
        let end = p.end().ok_or(LayoutRuleError::Overflow { plane, offset: p.offset, size: p.size })?;
        spans.push((p.object, p.offset, end));
    }
    for (a, &(oa, sa, ea)) in spans.iter().enumerate() {
        for (b, &(ob, sb, eb)) in spans.iter().enumerate().skip(a + 1) {
            // A plane of unknown size (0) overlaps nothing: its end is not known.
            if oa == ob && sa < ea && sb < eb && sa < eb && sb < ea {
                return Err(LayoutRuleError::Overlap { a, b, a_start: sa, a_end: ea, b_start: sb, b_end: eb });
            }
        }
    }
    Ok(())
}

/// The width in texels of a 2-D swizzle block of 2^`log2` bytes at `texel` bytes a texel: the
/// block's texels split as evenly as powers of two allow, the width taking the odd bit
/// (the kernel's `get_block_dimensions`).
fn amd_block_width(log2: u32, texel: u64) -> u64 {
    let texels_log2 = log2.saturating_sub(texel.trailing_zeros());
    1 << texels_log2.div_ceil(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAVI31_DCC: Modifier = Modifier::from_raw(0x0200_0000_28a6_7f04);

    fn plane(offset: u64, stride: u64, size: u64) -> PlaneLayout {
        PlaneLayout { object: 0, offset, stride, size }
    }

    #[test]
    fn radv_navi31_dcc_layout_keeps_every_rule() {
        // What radv on navi31 (drm-shim) reports for a 1920x1080 AR24 image with this modifier.
        let planes = [plane(0, 8192, 10485760), plane(10485760, 2048, 49152), plane(10534912, 2048, 65536)];
        check_explicit_layout(Fourcc::ARGB8888, NAVI31_DCC, 1920, 3, &planes).unwrap();
    }

    #[test]
    fn each_rule_names_its_plane() {
        let good = [plane(0, 8192, 10485760), plane(10485760, 2048, 49152), plane(10534912, 2048, 65536)];
        let e = check_explicit_layout(Fourcc::ARGB8888, NAVI31_DCC, 1920, 3, &good[..2]).unwrap_err();
        assert_eq!(e, LayoutRuleError::PlaneCount { expected: 3, got: 2 });
        let mut p = good;
        p[0].stride = 7680 - 4;
        assert!(matches!(check_explicit_layout(Fourcc::ARGB8888, NAVI31_DCC, 1920, 3, &p), Err(LayoutRuleError::StrideTooSmall { plane: 0, .. })));
        p[0].stride = 8194;
        assert!(matches!(check_explicit_layout(Fourcc::ARGB8888, NAVI31_DCC, 1920, 3, &p), Err(LayoutRuleError::StrideNotWholeTexels { plane: 0, texel: 4, .. })));
        p[0].stride = 8192 + 256;
        // GFX11's 256K_R_X block at 4 bytes a texel: 256 x 256 texels, a 1024-byte row.
        assert!(matches!(check_explicit_layout(Fourcc::ARGB8888, NAVI31_DCC, 1920, 3, &p), Err(LayoutRuleError::SwizzlePitch { plane: 0, block_pitch: 1024, .. })));
        p[0].stride = 8192;
        p[0].offset = 4096;
        assert!(matches!(check_explicit_layout(Fourcc::ARGB8888, NAVI31_DCC, 1920, 3, &p), Err(LayoutRuleError::SwizzleOffset { plane: 0, block_bytes: 262144, .. })));
        p[0].offset = 0;
        p[2].offset = 10485760 + 4096;
        assert!(matches!(check_explicit_layout(Fourcc::ARGB8888, NAVI31_DCC, 1920, 3, &p), Err(LayoutRuleError::Overlap { a: 1, b: 2, .. })));
        p[2].offset = u64::MAX - 10;
        assert!(matches!(check_explicit_layout(Fourcc::ARGB8888, NAVI31_DCC, 1920, 3, &p), Err(LayoutRuleError::Overflow { plane: 2, .. })));
    }

    #[test]
    fn unknown_sizes_overlap_nothing_and_linear_has_no_block() {
        let planes = [plane(0, 7680, 0), plane(100, 7680, 0)];
        // NV12-like counts aside, LINEAR has no swizzle rule and size-0 planes never overlap.
        check_explicit_layout(Fourcc::ARGB8888, Modifier::LINEAR, 1920, 2, &planes).unwrap();
        assert_eq!(amd_block_width(16, 1), 256);
        assert_eq!(amd_block_width(16, 2), 256);
        assert_eq!(amd_block_width(16, 8), 128);
        assert_eq!(amd_block_width(12, 4), 32);
    }
}
