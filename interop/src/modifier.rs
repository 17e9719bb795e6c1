//! DRM format modifiers: the memory layout (tiling, compression) of a buffer.
//!
//! Two values are special and easy to confuse (seed 001, "Implicit modifiers"):
//! - [`Modifier::LINEAR`] is **zero**: an explicit promise that the image is linear.
//! - [`Modifier::INVALID`] (`0x00ffffffffffffff`) is **not a layout**: it says "the layout is
//!   not known; the driver decides". It appears only on the wire (KMS blobs, Wayland,
//!   GStreamer caps). Inside dmabridge it is turned into [`crate::Layout::Implicit`] at the
//!   boundary, so no code has to remember that one `u64` means "no modifier".
//!
//! Names come from `drm_fourcc::DrmModifier` where that crate knows the code, with the
//! NVIDIA block-linear family decoded here because its parameters matter for detiling.

use std::borrow::Cow;
use std::fmt;

use drm_fourcc::{DrmModifier, DrmVendor};

/// A 64-bit DRM format modifier: vendor in the top 8 bits, vendor-defined value below.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Modifier(u64);

/// The vendor byte of a modifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// Vendor 0: LINEAR and the generic tilings.
    None,
    Known(DrmVendor),
    Unknown(u8),
}

/// Why a string is not a modifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModifierParseError {
    #[error("modifier {0:?} must be 0x followed by exactly 16 hex digits")]
    Syntax(String),
}

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

const NVIDIA_VENDOR: u64 = 0x03;
const NVIDIA_BLOCK_LINEAR_BIT: u64 = 0x10;

impl NvidiaBlockLinear {
    /// True for `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(N)`: no kind, generation, sector layout
    /// or compression. Only this form has a documented, detilable layout.
    pub fn is_plain_16bx2(&self) -> bool {
        self.page_kind == 0 && self.gob_kind == 0 && self.sector_layout == 0 && self.compression == 0
    }
}

impl Modifier {
    /// `DRM_FORMAT_MOD_LINEAR`: rows of pixels, one after the other.
    pub const LINEAR: Modifier = Modifier(0);
    /// `DRM_FORMAT_MOD_INVALID`: not a layout; see the module docs.
    pub const INVALID: Modifier = Modifier(0x00ff_ffff_ffff_ffff);

    pub const fn from_raw(raw: u64) -> Self {
        Modifier(raw)
    }

    pub const fn raw(self) -> u64 {
        self.0
    }

    /// `fourcc_mod_code(vendor, value)`.
    pub const fn from_vendor(vendor: u8, value: u64) -> Self {
        Modifier(((vendor as u64) << 56) | (value & 0x00ff_ffff_ffff_ffff))
    }

    /// `DRM_FORMAT_MOD_NVIDIA_BLOCK_LINEAR_2D(c, s, g, k, h)`.
    pub const fn nvidia_block_linear(p: NvidiaBlockLinear) -> Self {
        Modifier::from_vendor(
            NVIDIA_VENDOR as u8,
            NVIDIA_BLOCK_LINEAR_BIT
                | (p.log2_block_height as u64 & 0xf)
                | ((p.page_kind as u64) << 12)
                | ((p.gob_kind as u64 & 0x3) << 20)
                | ((p.sector_layout as u64 & 0x1) << 22)
                | ((p.compression as u64 & 0x7) << 23),
        )
    }

    /// `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(v)`: blocks of 2^v GOBs, nothing else set.
    pub const fn nvidia_16bx2_block(log2_block_height: u8) -> Self {
        Modifier::nvidia_block_linear(NvidiaBlockLinear {
            log2_block_height,
            page_kind: 0,
            gob_kind: 0,
            sector_layout: 0,
            compression: 0,
        })
    }

    pub const fn is_linear(self) -> bool {
        self.0 == Self::LINEAR.0
    }

    pub const fn is_invalid(self) -> bool {
        self.0 == Self::INVALID.0
    }

    pub const fn vendor_id(self) -> u8 {
        (self.0 >> 56) as u8
    }

    pub fn vendor(self) -> Vendor {
        match self.vendor_id() {
            0 => Vendor::None,
            v => DrmVendor::try_from(v).map(Vendor::Known).unwrap_or(Vendor::Unknown(v)),
        }
    }

    /// The `drm_fourcc` enum value (`Unrecognized` for codes it does not list).
    pub fn known(self) -> DrmModifier {
        DrmModifier::from(self.0)
    }

    /// Decodes the NVIDIA block-linear parameters, if this is such a modifier.
    pub fn as_nvidia_block_linear(self) -> Option<NvidiaBlockLinear> {
        if self.vendor_id() as u64 != NVIDIA_VENDOR || self.0 & NVIDIA_BLOCK_LINEAR_BIT == 0 {
            return None;
        }
        let v = self.0;
        Some(NvidiaBlockLinear {
            log2_block_height: (v & 0xf) as u8,
            page_kind: ((v >> 12) & 0xff) as u8,
            gob_kind: ((v >> 20) & 0x3) as u8,
            sector_layout: ((v >> 22) & 0x1) as u8,
            compression: ((v >> 23) & 0x7) as u8,
        })
    }

    /// The kernel-style name where one is known: `LINEAR`, `INVALID`, `I915_Y_TILED`,
    /// `NVIDIA_16BX2_BLOCK(4)`, `NVIDIA_BLOCK_LINEAR_2D(c=0,s=1,g=2,k=0xfe,h=4)`.
    pub fn name(self) -> Option<Cow<'static, str>> {
        if let Some(nv) = self.as_nvidia_block_linear() {
            return Some(Cow::Owned(if nv.is_plain_16bx2() {
                format!("NVIDIA_16BX2_BLOCK({})", nv.log2_block_height)
            } else {
                format!(
                    "NVIDIA_BLOCK_LINEAR_2D(c={},s={},g={},k={:#x},h={})",
                    nv.compression, nv.sector_layout, nv.gob_kind, nv.page_kind, nv.log2_block_height
                )
            }));
        }
        match self.known() {
            DrmModifier::Unrecognized(_) => None,
            // drm_fourcc's variants are the kernel's macro names in mixed case.
            known => Some(Cow::Owned(format!("{known:?}").to_ascii_uppercase())),
        }
    }

    /// The kernel's macro name, as `drm_info` prints it: `DRM_FORMAT_MOD_LINEAR`,
    /// `I915_FORMAT_MOD_X_TILED`, `DRM_FORMAT_MOD_SAMSUNG_64_32_TILE`,
    /// `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(4)`, and drm_info's
    /// `NVIDIA_BLOCK_LINEAR_2D(h=4, k=254, g=2, s=1, c=0)` for the general NVIDIA form.
    pub fn macro_name(self) -> Option<String> {
        if let Some(nv) = self.as_nvidia_block_linear() {
            return Some(if nv.is_plain_16bx2() {
                format!("DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK({})", nv.log2_block_height)
            } else {
                format!(
                    "NVIDIA_BLOCK_LINEAR_2D(h={}, k={}, g={}, s={}, c={})",
                    nv.log2_block_height, nv.page_kind, nv.gob_kind, nv.sector_layout, nv.compression
                )
            });
        }
        let name = self.name()?;
        // drm_fourcc's names drop the family prefix: Intel's macros are I915_FORMAT_MOD_*,
        // everyone else's DRM_FORMAT_MOD_*.
        Some(match name.strip_prefix("I915_") {
            Some(rest) => format!("I915_FORMAT_MOD_{rest}"),
            None => format!("DRM_FORMAT_MOD_{name}"),
        })
    }

    /// `MACRO (0x…)` as drm_info prints a modifier, or the hex alone when the kernel has no
    /// name for it.
    pub fn kernel_label(self) -> String {
        match self.macro_name() {
            Some(name) => format!("{name} ({})", self.to_hex()),
            None => self.to_hex(),
        }
    }

    /// `0x` and 16 hex digits: the form GStreamer caps and dmabridge's JSON use.
    pub fn to_hex(self) -> String {
        format!("{:#018x}", self.0)
    }

    /// Parses exactly `0x` followed by 16 hex digits (either case).
    pub fn parse_hex(s: &str) -> Result<Self, ModifierParseError> {
        let digits = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .filter(|d| d.len() == 16 && d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| ModifierParseError::Syntax(s.chars().take(40).collect()))?;
        u64::from_str_radix(digits, 16)
            .map(Modifier)
            .map_err(|_| ModifierParseError::Syntax(s.to_owned()))
    }

    /// The name if known, else the hex form. For people, not for parsing.
    pub fn display_name(self) -> String {
        self.name().map(Cow::into_owned).unwrap_or_else(|| self.to_hex())
    }
}

impl From<DrmModifier> for Modifier {
    fn from(m: DrmModifier) -> Self {
        Modifier(m.into())
    }
}

impl fmt::Display for Modifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display_name())
    }
}

impl fmt::Debug for Modifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "Modifier({n}, {})", self.to_hex()),
            None => write!(f, "Modifier({})", self.to_hex()),
        }
    }
}

impl serde::Serialize for Modifier {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for Modifier {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Modifier::parse_hex(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_values() {
        assert_eq!(Modifier::LINEAR.raw(), 0);
        assert_eq!(Modifier::INVALID.raw(), 0x00ff_ffff_ffff_ffff);
        assert_eq!(Modifier::LINEAR.name().as_deref(), Some("LINEAR"));
        assert_eq!(Modifier::INVALID.name().as_deref(), Some("INVALID"));
        assert_eq!(Modifier::LINEAR.vendor(), Vendor::None);
    }

    #[test]
    fn known_names_come_from_drm_fourcc() {
        let y = Modifier::from(DrmModifier::I915_y_tiled);
        assert_eq!(y.raw(), 0x0100_0000_0000_0002);
        assert_eq!(y.name().as_deref(), Some("I915_Y_TILED"));
        assert_eq!(y.vendor(), Vendor::Known(DrmVendor::Intel));
        let s = Modifier::from(DrmModifier::Samsung_64_32_tile);
        assert_eq!(s.name().as_deref(), Some("SAMSUNG_64_32_TILE"));
    }

    #[test]
    fn nvidia_block_linear_round_trips() {
        for h in 0..=5 {
            let m = Modifier::nvidia_16bx2_block(h);
            assert_eq!(m.raw(), 0x0300_0000_0000_0010 | h as u64);
            assert_eq!(m.name().unwrap(), format!("NVIDIA_16BX2_BLOCK({h})"));
            // drm_fourcc knows these six by other names; ours must agree on the value.
            assert!(!matches!(m.known(), DrmModifier::Unrecognized(_)));
        }
        let p = NvidiaBlockLinear {
            log2_block_height: 4,
            page_kind: 0xfe,
            gob_kind: 2,
            sector_layout: 1,
            compression: 0,
        };
        let m = Modifier::nvidia_block_linear(p);
        assert_eq!(m.as_nvidia_block_linear(), Some(p));
        assert_eq!(m.name().unwrap(), "NVIDIA_BLOCK_LINEAR_2D(c=0,s=1,g=2,k=0xfe,h=4)");
        assert_eq!(Modifier::from(DrmModifier::Nvidia_tegra_tiled).as_nvidia_block_linear(), None);
    }

    #[test]
    fn hex_is_strict() {
        let m = Modifier::parse_hex("0x0100000000000002").unwrap();
        assert_eq!(m.to_hex(), "0x0100000000000002");
        for bad in ["0x1", "0100000000000002", "0x01000000000000020", "0x010000000000000g", "", "0x"] {
            assert!(Modifier::parse_hex(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_vendor_is_kept() {
        let m = Modifier::from_raw(0x7800_0000_0000_0001);
        assert_eq!(m.vendor(), Vendor::Unknown(0x78));
        assert_eq!(m.name(), None);
        assert_eq!(m.to_string(), "0x7800000000000001");
    }

    #[test]
    fn kernel_labels_are_drm_infos() {
        assert_eq!(Modifier::from_raw(0x0100_0000_0000_0001).kernel_label(), "I915_FORMAT_MOD_X_TILED (0x0100000000000001)");
        assert_eq!(Modifier::LINEAR.kernel_label(), "DRM_FORMAT_MOD_LINEAR (0x0000000000000000)");
        assert_eq!(Modifier::from(DrmModifier::Samsung_64_32_tile).macro_name().as_deref(), Some("DRM_FORMAT_MOD_SAMSUNG_64_32_TILE"));
        assert_eq!(Modifier::nvidia_16bx2_block(4).macro_name().as_deref(), Some("DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(4)"));
        assert_eq!(Modifier::from_raw(0x7800_0000_0000_0001).kernel_label(), "0x7800000000000001");
    }
}
