//! dmabridge's names for the memory layouts it can convert between.
//!
//! Most have a DRM modifier. Three V4L2 decoder layouts (Hantro's NV12_4L4, MediaTek's
//! MM21 and Amphion's NV12_8L128) have none, so the kernel cannot name them in a
//! format+modifier pair; they still need detiling, so they get an id here. The names are
//! part of the CLI contract (`dmabridge convert --from samsung-64x32`).

use std::fmt;
use std::str::FromStr;

use crate::Modifier;

/// A layout dmabridge knows the addressing of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TileLayout {
    Linear,
    /// `I915_FORMAT_MOD_X_TILED`.
    I915X,
    /// `I915_FORMAT_MOD_Y_TILED`.
    I915Y,
    /// `DRM_FORMAT_MOD_VIVANTE_TILED`.
    VivanteTiled,
    /// `DRM_FORMAT_MOD_SAMSUNG_64_32_TILE` (V4L2 NV12MT, GStreamer NV12_64Z32).
    Samsung64x32,
    /// `DRM_FORMAT_MOD_ALLWINNER_TILED` (V4L2/GStreamer NV12_32L32).
    Allwinner32x32,
    /// V4L2 NV12_4L4 (Hantro). No DRM modifier.
    Nv12_4L4,
    /// V4L2 MM21 / GStreamer NV12_16L32S (MediaTek). No DRM modifier.
    Nv12_16L32S,
    /// V4L2 NV12_8L128 (Amphion). No DRM modifier.
    Nv12_8L128,
    /// `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(n)`, blocks 2^n GOBs tall, n in 0..=5.
    NvidiaBlockLinear(u8),
}

/// Why a string names no layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TileLayoutParseError {
    #[error("unknown layout {0:?}: expected a layout name (linear, i915-x, i915-y, vivante-tiled, samsung-64x32, allwinner-32x32, nv12-4l4, nv12-16l32s, nv12-8l128, nvidia-block-linear-v0..v5) or the hex modifier of one")]
    Unknown(String),
}

impl TileLayout {
    /// Every layout, in a stable order (for tests and benchmarks).
    pub const ALL: [TileLayout; 15] = [
        TileLayout::Linear,
        TileLayout::I915X,
        TileLayout::I915Y,
        TileLayout::VivanteTiled,
        TileLayout::Samsung64x32,
        TileLayout::Allwinner32x32,
        TileLayout::Nv12_4L4,
        TileLayout::Nv12_16L32S,
        TileLayout::Nv12_8L128,
        TileLayout::NvidiaBlockLinear(0),
        TileLayout::NvidiaBlockLinear(1),
        TileLayout::NvidiaBlockLinear(2),
        TileLayout::NvidiaBlockLinear(3),
        TileLayout::NvidiaBlockLinear(4),
        TileLayout::NvidiaBlockLinear(5),
    ];

    /// The CLI name.
    pub fn name(self) -> String {
        match self {
            TileLayout::Linear => "linear".into(),
            TileLayout::I915X => "i915-x".into(),
            TileLayout::I915Y => "i915-y".into(),
            TileLayout::VivanteTiled => "vivante-tiled".into(),
            TileLayout::Samsung64x32 => "samsung-64x32".into(),
            TileLayout::Allwinner32x32 => "allwinner-32x32".into(),
            TileLayout::Nv12_4L4 => "nv12-4l4".into(),
            TileLayout::Nv12_16L32S => "nv12-16l32s".into(),
            TileLayout::Nv12_8L128 => "nv12-8l128".into(),
            TileLayout::NvidiaBlockLinear(n) => format!("nvidia-block-linear-v{n}"),
        }
    }

    /// The DRM modifier of this layout, where the kernel defines one.
    pub fn modifier(self) -> Option<Modifier> {
        Some(match self {
            TileLayout::Linear => Modifier::LINEAR,
            TileLayout::I915X => Modifier::from_vendor(0x01, 1),
            TileLayout::I915Y => Modifier::from_vendor(0x01, 2),
            TileLayout::VivanteTiled => Modifier::from_vendor(0x06, 1),
            TileLayout::Samsung64x32 => Modifier::from_vendor(0x04, 1),
            TileLayout::Allwinner32x32 => Modifier::from_vendor(0x09, 1),
            TileLayout::NvidiaBlockLinear(n) => Modifier::nvidia_16bx2_block(n),
            TileLayout::Nv12_4L4 | TileLayout::Nv12_16L32S | TileLayout::Nv12_8L128 => return None,
        })
    }

    /// The layout a modifier denotes, if dmabridge can convert it.
    pub fn from_modifier(m: Modifier) -> Option<TileLayout> {
        TileLayout::ALL.into_iter().find(|l| l.modifier() == Some(m))
    }
}

impl fmt::Display for TileLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for TileLayout {
    type Err = TileLayoutParseError;

    /// A layout name, or the hex modifier (`0x` + 16 digits) of a layout that has one.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(l) = TileLayout::ALL.into_iter().find(|l| l.name() == s) {
            return Ok(l);
        }
        Modifier::parse_hex(s)
            .ok()
            .and_then(TileLayout::from_modifier)
            .ok_or_else(|| TileLayoutParseError::Unknown(s.chars().take(64).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drm_fourcc::DrmModifier;

    #[test]
    fn names_and_modifiers_round_trip() {
        for l in TileLayout::ALL {
            assert_eq!(l.name().parse::<TileLayout>(), Ok(l));
            if let Some(m) = l.modifier() {
                assert_eq!(TileLayout::from_modifier(m), Some(l));
                assert_eq!(m.to_hex().parse::<TileLayout>(), Ok(l));
            }
        }
    }

    #[test]
    fn modifiers_agree_with_drm_fourcc() {
        let pairs = [
            (TileLayout::I915X, DrmModifier::I915_x_tiled),
            (TileLayout::I915Y, DrmModifier::I915_y_tiled),
            (TileLayout::VivanteTiled, DrmModifier::Vivante_tiled),
            (TileLayout::Samsung64x32, DrmModifier::Samsung_64_32_tile),
            (TileLayout::Allwinner32x32, DrmModifier::Allwinner_tiled),
            (TileLayout::NvidiaBlockLinear(4), DrmModifier::Nvidia_16bx2_block_sixteen_gob),
        ];
        for (l, d) in pairs {
            assert_eq!(l.modifier(), Some(Modifier::from(d)), "{l}");
        }
    }

    #[test]
    fn unknown_names_are_rejected() {
        assert!("nvidia-block-linear-v6".parse::<TileLayout>().is_err());
        assert!("0x0100000000000003".parse::<TileLayout>().is_err()); // Yf: no converter
    }
}
