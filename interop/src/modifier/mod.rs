//! DRM format modifiers: the memory layout (tiling, compression) of a buffer.
//!
//! Two values are special and easy to confuse (seed 001, "Implicit modifiers"):
//! - [`Modifier::LINEAR`] is **zero**: an explicit promise that the image is linear.
//! - [`Modifier::INVALID`] (`0x00ffffffffffffff`) is **not a layout**: it says "the layout is
//!   not known; the driver decides". It appears only on the wire (KMS blobs, Wayland,
//!   GStreamer caps). Inside dmabridge it is turned into [`crate::Layout::Implicit`] at the
//!   boundary, so no code has to remember that one `u64` means "no modifier".
//!
//! # Names
//! Every modifier the kernel's `drm_fourcc.h` defines is decoded here, one file per vendor,
//! by the header's own macros: its field shifts and masks, its fixed values, and the
//! combinations it allows. Vendors come from `drm_fourcc::DrmVendor`, and where drm-fourcc
//! names a fixed modifier the name here is the same (a test holds them together). A modifier
//! has three spellings:
//! - [`Modifier::name`], for people: fixed ones as drm-fourcc spells them (`LINEAR`,
//!   `I915_Y_TILED`, `BROADCOM_SAND128`), parameterised ones as the family and its fields in
//!   libdrm's and drm_info's words (`AMD(GFX11, GFX9_64K_R_X, DCC, DCC_RETILE,
//!   DCC_MAX_COMPRESSED_BLOCK=64B, PIPE_XOR_BITS=3, PACKERS=3)`, `ARM_AFBC(BLOCK_SIZE=16x16,
//!   YTR, SPARSE)`, `NVIDIA_16BX2_BLOCK(4)`). Every field the header gives a value is shown,
//!   so two modifiers never share a name.
//! - [`Modifier::macro_name`]: the header's spelling, the macro or the macro call that makes
//!   the value (`I915_FORMAT_MOD_X_TILED`, `DRM_FORMAT_MOD_BROADCOM_SAND128_COL_HEIGHT(96)`,
//!   `DRM_FORMAT_MOD_ARM_AFBC(AFBC_FORMAT_MOD_BLOCK_SIZE_16x16 | AFBC_FORMAT_MOD_YTR)`); AMD's
//!   modifiers and NVIDIA's general block-linear form have no one macro, so they are spelled
//!   as drm_info prints them.
//! - [`Modifier::display_name`]: the name; or, for a value the header does not define (an
//!   unknown vendor or value, reserved bits set, a combination the header rules out), what
//!   does decode followed by the hex (`AMD(unknown tile version 9) 0x0200000000000009`). Any
//!   `u64` gets a display name: none is refused, none panics.

mod amd;
mod amlogic;
mod arm;
mod broadcom;
mod fixed;
mod intel;
mod nvidia;
mod vivante;

#[cfg(test)]
mod c_header;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;

use drm_fourcc::{DrmModifier, DrmVendor};

pub use amd::AmdModifier;
pub use nvidia::NvidiaBlockLinear;

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

/// The 56 bits below the vendor byte (`fourcc_mod_code`'s `val`).
const VALUE_MASK: u64 = 0x00ff_ffff_ffff_ffff;

/// What a vendor's decoder makes of a modifier: the name's parts, whether the header
/// defines every bit of it, and the header's spelling.
#[derive(Debug, Clone)]
struct Decoded {
    /// A fixed modifier's whole name (`I915_X_TILED`), or a family (`AMD`, `ARM_AFBC`).
    head: Cow<'static, str>,
    /// The family's fields, in the header's order; empty for a fixed modifier, which
    /// has no parentheses.
    parts: Vec<String>,
    /// Joins `parts`: `", "`, or `","` in the NVIDIA form this crate has always printed.
    sep: &'static str,
    /// Every set bit is one the header defines, in a combination it allows.
    well_formed: bool,
    /// The header's spelling; ignored unless `well_formed`.
    macro_name: Option<String>,
}

impl Decoded {
    fn fixed(name: impl Into<Cow<'static, str>>, macro_name: String) -> Self {
        Decoded { head: name.into(), parts: Vec::new(), sep: ", ", well_formed: true, macro_name: Some(macro_name) }
    }

    fn family(head: impl Into<Cow<'static, str>>) -> Self {
        Decoded { head: head.into(), parts: Vec::new(), sep: ", ", well_formed: true, macro_name: None }
    }

    /// A value of a known vendor that the header does not define (`INTEL(unknown)`).
    fn unknown(vendor: &'static str) -> Self {
        let mut d = Decoded::family(vendor);
        d.problem("unknown");
        d
    }

    fn part(&mut self, p: impl Into<String>) {
        self.parts.push(p.into());
    }

    /// A part the header does not allow: shown in place, and the modifier is not well formed.
    fn problem(&mut self, p: impl Into<String>) {
        self.well_formed = false;
        self.parts.push(p.into());
    }

    fn text(&self) -> String {
        if self.parts.is_empty() {
            self.head.clone().into_owned()
        } else {
            format!("{}({})", self.head, self.parts.join(self.sep))
        }
    }
}

/// `0x…` of a few bits, for the parts that name bits the header leaves undefined.
fn bits(mask: u64) -> String {
    format!("{mask:#x}")
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
        Modifier(((vendor as u64) << 56) | (value & VALUE_MASK))
    }

    /// `DRM_FORMAT_MOD_NVIDIA_BLOCK_LINEAR_2D(c, s, g, k, h)`.
    pub const fn nvidia_block_linear(p: NvidiaBlockLinear) -> Self {
        Modifier::from_vendor(nvidia::VENDOR, p.value())
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

    /// `AMD_FMT_MOD | AMD_FMT_MOD_SET(TILE_VERSION, …) | AMD_FMT_MOD_SET(TILE, …) | …`,
    /// each field cut to its mask (`AMD_FMT_MOD_SET` itself would let a wide value spill
    /// into the next field).
    pub const fn amd(p: AmdModifier) -> Self {
        Modifier::from_vendor(amd::VENDOR, p.value())
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

    /// Decodes the NVIDIA block-linear parameters, if this is such a modifier with none of
    /// the bits the header reserves set (so that [`Modifier::nvidia_block_linear`] gives
    /// this modifier back).
    pub fn as_nvidia_block_linear(self) -> Option<NvidiaBlockLinear> {
        if self.vendor_id() != nvidia::VENDOR {
            return None;
        }
        NvidiaBlockLinear::from_value(self.0 & VALUE_MASK)
    }

    /// Decodes AMD's fields, if this is an AMD modifier with none of the reserved bits
    /// (55:36) set (so that [`Modifier::amd`] gives this modifier back). The fields are as
    /// the bits say, whether or not the header defines their values: see [`Modifier::name`].
    pub fn as_amd(self) -> Option<AmdModifier> {
        if self.vendor_id() != amd::VENDOR {
            return None;
        }
        AmdModifier::from_value(self.0 & VALUE_MASK)
    }

    fn decode(self) -> Option<Decoded> {
        let value = self.0 & VALUE_MASK;
        Some(match self.vendor() {
            Vendor::None => fixed::none(value),
            Vendor::Unknown(_) => return None,
            Vendor::Known(v) => match v {
                DrmVendor::Intel => intel::decode(value),
                DrmVendor::Amd => amd::decode(value),
                DrmVendor::Nvidia => nvidia::decode(value),
                DrmVendor::Samsung => fixed::samsung(value),
                DrmVendor::Qcom => fixed::qcom(value),
                DrmVendor::Vivante => vivante::decode(value),
                DrmVendor::Broadcom => broadcom::decode(value),
                DrmVendor::Arm => arm::decode(value),
                DrmVendor::Allwinner => fixed::allwinner(value),
                DrmVendor::Amlogic => amlogic::decode(value),
            },
        })
    }

    /// The name of a modifier the header defines: `LINEAR`, `INVALID`, `I915_Y_TILED`,
    /// `NVIDIA_16BX2_BLOCK(4)`, `NVIDIA_BLOCK_LINEAR_2D(c=0,s=1,g=2,k=0xfe,h=4)`,
    /// `AMD(GFX10_RBPLUS, GFX9_64K_R_X, DCC, DCC_INDEPENDENT_64B, DCC_MAX_COMPRESSED_BLOCK=64B,
    /// PIPE_XOR_BITS=4, PACKERS=3)` (see the module docs). `None` for a value the header does
    /// not define; [`Modifier::display_name`] shows what of it decodes.
    pub fn name(self) -> Option<Cow<'static, str>> {
        let d = self.decode()?;
        if !d.well_formed {
            return None;
        }
        Some(if d.parts.is_empty() { d.head } else { Cow::Owned(d.text()) })
    }

    /// The kernel's macro name, as `drm_info` prints it: `DRM_FORMAT_MOD_LINEAR`,
    /// `I915_FORMAT_MOD_X_TILED`, `DRM_FORMAT_MOD_SAMSUNG_64_32_TILE`,
    /// `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(4)`; the macro call for the other parameterised
    /// families (`DRM_FORMAT_MOD_BROADCOM_SAND128_COL_HEIGHT(96)`,
    /// `DRM_FORMAT_MOD_ARM_AFBC(AFBC_FORMAT_MOD_BLOCK_SIZE_16x16 | AFBC_FORMAT_MOD_SPARSE)`,
    /// `DRM_FORMAT_MOD_VIVANTE_TILED | VIVANTE_MOD_TS_64_4`), which the header evaluates to
    /// this value; and for the two with no such macro drm_info's form: the general NVIDIA one
    /// as `NVIDIA_BLOCK_LINEAR_2D(h=4, k=254, g=2, s=1, c=0)`, AMD's as its name. `None` for
    /// a value the header does not define.
    pub fn macro_name(self) -> Option<String> {
        let d = self.decode()?;
        if !d.well_formed {
            return None;
        }
        d.macro_name
    }

    /// `MACRO (0x…)` as drm_info prints a modifier; for a value the header does not define,
    /// what decodes of it and the hex (`INTEL(unknown) (0x0100000000000010)`), or the hex
    /// alone when not even the vendor is known.
    pub fn kernel_label(self) -> String {
        match self.decode() {
            Some(d) => match d.macro_name.as_ref().filter(|_| d.well_formed) {
                Some(m) => format!("{m} ({})", self.to_hex()),
                None => format!("{} ({})", d.text(), self.to_hex()),
            },
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

    /// The name if the header defines the value; else what decodes of it followed by the
    /// hex (`AMD(unknown tile version 9) 0x0200000000000009`), or the hex alone when not even
    /// the vendor is known. For people, not for parsing.
    pub fn display_name(self) -> String {
        match self.decode() {
            Some(d) if d.well_formed => d.text(),
            Some(d) => format!("{} {}", d.text(), self.to_hex()),
            None => self.to_hex(),
        }
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
            None => write!(f, "Modifier({})", self.display_name()),
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
