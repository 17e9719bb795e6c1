//! NVIDIA: `DRM_FORMAT_MOD_NVIDIA_TEGRA_TILED`, and the block-linear family
//! `DRM_FORMAT_MOD_NVIDIA_BLOCK_LINEAR_2D(c, s, g, k, h)` with its older spelling
//! `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(v)`. The block-linear parameters matter for detiling.

use drm_fourcc::DrmVendor;

use super::{bits, Decoded};

pub(super) const VENDOR: u8 = DrmVendor::Nvidia as u8;

/// Bit 4: "Must be 1, to indicate block-linear layout".
const BLOCK_LINEAR_BIT: u64 = 0x10;
/// Bits 8:5 and 11:9 ("Must be zero") and 55:26 ("Reserved for future use. Must be zero";
/// the header's table says 55:25, but bit 25 is the top bit of `c`, 25:23).
const RESERVED: u64 = 0x0000_0000_0000_0fe0 | (super::VALUE_MASK & !((1 << 26) - 1));
/// `DRM_FORMAT_MOD_NVIDIA_TEGRA_TILED`.
const TEGRA_TILED: u64 = 1;
/// `g = 3`: "Reserved for future use".
const GOB_KIND_RESERVED: u8 = 3;
/// `c = 5..=7`: "Reserved for future use".
const COMPRESSION_RESERVED: u8 = 5;
/// `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(v)`: "Valid values are" 0 (one GOB) to 5 (32 GOBs).
const MAX_16BX2_LOG2_HEIGHT: u8 = 5;

/// Parameters of `DRM_FORMAT_MOD_NVIDIA_BLOCK_LINEAR_2D(c, s, g, k, h)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct NvidiaBlockLinear {
    /// log2 of the block height in GOBs (`h`, 0..=5 in practice).
    pub log2_block_height: u8,
    /// Page kind (`k`): 0 for the plain 16Bx2 layout, else a GPU-specific kind.
    pub page_kind: u8,
    /// GOB height and kind generation (`g`).
    pub gob_kind: u8,
    /// Sector layout (`s`): 0 = Tegra, 1 = desktop.
    pub sector_layout: u8,
    /// Compression type (`c`): 0 = none.
    pub compression: u8,
}

impl NvidiaBlockLinear {
    /// True for `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(N)`: no kind, generation, sector layout
    /// or compression. Only this form has a documented, detilable layout.
    pub fn is_plain_16bx2(&self) -> bool {
        self.page_kind == 0 && self.gob_kind == 0 && self.sector_layout == 0 && self.compression == 0
    }

    /// The 56-bit value, as the macro builds it (each parameter cut to its mask).
    pub(super) const fn value(self) -> u64 {
        BLOCK_LINEAR_BIT
            | (self.log2_block_height as u64 & 0xf)
            | ((self.page_kind as u64) << 12)
            | ((self.gob_kind as u64 & 0x3) << 20)
            | ((self.sector_layout as u64 & 0x1) << 22)
            | ((self.compression as u64 & 0x7) << 23)
    }

    /// The parameters of a block-linear value with no reserved bit set.
    pub(super) fn from_value(v: u64) -> Option<Self> {
        if v & BLOCK_LINEAR_BIT == 0 || v & RESERVED != 0 {
            return None;
        }
        Some(Self::fields(v))
    }

    fn fields(v: u64) -> Self {
        NvidiaBlockLinear {
            log2_block_height: (v & 0xf) as u8,
            page_kind: ((v >> 12) & 0xff) as u8,
            gob_kind: ((v >> 20) & 0x3) as u8,
            sector_layout: ((v >> 22) & 0x1) as u8,
            compression: ((v >> 23) & 0x7) as u8,
        }
    }
}

pub(super) fn decode(v: u64) -> Decoded {
    if v & BLOCK_LINEAR_BIT == 0 {
        return match v {
            TEGRA_TILED => Decoded::fixed("NVIDIA_TEGRA_TILED", "DRM_FORMAT_MOD_NVIDIA_TEGRA_TILED".to_owned()),
            _ => Decoded::unknown("NVIDIA"),
        };
    }
    let nv = NvidiaBlockLinear::fields(v);
    let mut d;
    if nv.is_plain_16bx2() {
        d = Decoded::family("NVIDIA_16BX2_BLOCK");
        d.part(nv.log2_block_height.to_string());
        if nv.log2_block_height > MAX_16BX2_LOG2_HEIGHT {
            d.problem(format!("v={} beyond THIRTYTWO_GOBS", nv.log2_block_height));
        }
        d.macro_name = Some(format!("DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK({})", nv.log2_block_height));
    } else {
        // The names this crate printed before every vendor was decoded, kept.
        d = Decoded::family("NVIDIA_BLOCK_LINEAR_2D");
        d.sep = ",";
        d.part(format!("c={}", nv.compression));
        d.part(format!("s={}", nv.sector_layout));
        d.part(format!("g={}", nv.gob_kind));
        d.part(format!("k={:#x}", nv.page_kind));
        d.part(format!("h={}", nv.log2_block_height));
        if nv.gob_kind >= GOB_KIND_RESERVED {
            d.problem(format!("reserved g={}", nv.gob_kind));
        }
        if nv.compression >= COMPRESSION_RESERVED {
            d.problem(format!("reserved c={}", nv.compression));
        }
        d.macro_name = Some(format!(
            "NVIDIA_BLOCK_LINEAR_2D(h={}, k={}, g={}, s={}, c={})",
            nv.log2_block_height, nv.page_kind, nv.gob_kind, nv.sector_layout, nv.compression
        ));
    }
    if v & RESERVED != 0 {
        d.problem(format!("reserved bits {}", bits(v & RESERVED)));
    }
    d
}
