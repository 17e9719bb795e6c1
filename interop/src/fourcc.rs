//! DRM fourcc codes, the kernel's names for pixel formats.
//!
//! [`Fourcc`] is a plain `u32` newtype so that every code stays representable, including
//! ones that `drm_fourcc::DrmFourcc` (which this builds on) does not list: GStreamer keeps
//! unknown codes opaque, and so do we. [`Fourcc::known`] gives the `drm_fourcc` view.

use std::fmt;
use std::str::FromStr;

use drm_fourcc::DrmFourcc;

/// A DRM fourcc: four ASCII bytes packed little-endian, as the kernel's `fourcc_code()` does.
///
/// The text form is always four characters, padded with spaces the way the kernel pads
/// short codes (`"R8  "`). Parsing accepts one to four characters and pads them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fourcc(u32);

/// Why a string is not a fourcc.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FourccParseError {
    #[error("a fourcc has 1 to 4 characters, got {0}")]
    Length(usize),
    #[error("fourcc {0:?} has a character that is not printable ASCII")]
    NotAscii(String),
}

impl Fourcc {
    pub const ARGB8888: Fourcc = Fourcc::from_bytes(*b"AR24");
    pub const XRGB8888: Fourcc = Fourcc::from_bytes(*b"XR24");
    pub const ABGR8888: Fourcc = Fourcc::from_bytes(*b"AB24");
    pub const XBGR8888: Fourcc = Fourcc::from_bytes(*b"XB24");
    pub const RGBA8888: Fourcc = Fourcc::from_bytes(*b"RA24");
    pub const BGRA8888: Fourcc = Fourcc::from_bytes(*b"BA24");
    pub const RGBX8888: Fourcc = Fourcc::from_bytes(*b"RX24");
    pub const BGRX8888: Fourcc = Fourcc::from_bytes(*b"BX24");
    pub const RGB565: Fourcc = Fourcc::from_bytes(*b"RG16");
    pub const ARGB2101010: Fourcc = Fourcc::from_bytes(*b"AR30");
    pub const XRGB2101010: Fourcc = Fourcc::from_bytes(*b"XR30");
    pub const ABGR2101010: Fourcc = Fourcc::from_bytes(*b"AB30");
    pub const XBGR2101010: Fourcc = Fourcc::from_bytes(*b"XB30");
    pub const ABGR16161616F: Fourcc = Fourcc::from_bytes(*b"AB4H");
    pub const XBGR16161616F: Fourcc = Fourcc::from_bytes(*b"XB4H");
    pub const ARGB16161616F: Fourcc = Fourcc::from_bytes(*b"AR4H");
    pub const XRGB16161616F: Fourcc = Fourcc::from_bytes(*b"XR4H");
    pub const R8: Fourcc = Fourcc::from_bytes(*b"R8  ");
    pub const R16: Fourcc = Fourcc::from_bytes(*b"R16 ");
    pub const GR88: Fourcc = Fourcc::from_bytes(*b"GR88");
    pub const NV12: Fourcc = Fourcc::from_bytes(*b"NV12");
    pub const NV21: Fourcc = Fourcc::from_bytes(*b"NV21");
    pub const NV16: Fourcc = Fourcc::from_bytes(*b"NV16");
    pub const P010: Fourcc = Fourcc::from_bytes(*b"P010");
    pub const P016: Fourcc = Fourcc::from_bytes(*b"P016");
    pub const YUV420: Fourcc = Fourcc::from_bytes(*b"YU12");
    pub const YVU420: Fourcc = Fourcc::from_bytes(*b"YV12");
    pub const YUYV: Fourcc = Fourcc::from_bytes(*b"YUYV");
    pub const UYVY: Fourcc = Fourcc::from_bytes(*b"UYVY");

    /// Wraps a raw code as the kernel stores it.
    pub const fn from_code(code: u32) -> Self {
        Fourcc(code)
    }

    /// Packs four bytes the way `fourcc_code(a, b, c, d)` does.
    pub const fn from_bytes(b: [u8; 4]) -> Self {
        Fourcc(u32::from_le_bytes(b))
    }

    pub const fn code(self) -> u32 {
        self.0
    }

    pub const fn bytes(self) -> [u8; 4] {
        self.0.to_le_bytes()
    }

    /// The `drm_fourcc` enum value, where that crate knows the code.
    pub fn known(self) -> Option<DrmFourcc> {
        DrmFourcc::try_from(self.0).ok()
    }

    /// Four characters, space padded as the kernel pads them (`"R8  "`). Bytes that are
    /// not printable ASCII show as `?`, so hostile input cannot inject control characters.
    pub fn padded(self) -> String {
        self.bytes()
            .iter()
            .map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '?' })
            .collect()
    }

    /// The padded form without its trailing spaces (`"R8"`), as command lines accept it.
    pub fn trimmed(self) -> String {
        self.padded().trim_end_matches(' ').to_owned()
    }
}

impl From<DrmFourcc> for Fourcc {
    fn from(f: DrmFourcc) -> Self {
        Fourcc(f as u32)
    }
}

impl FromStr for Fourcc {
    type Err = FourccParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = s.as_bytes();
        if bytes.is_empty() || bytes.len() > 4 {
            return Err(FourccParseError::Length(s.chars().count()));
        }
        if !bytes.iter().all(|b| b.is_ascii_graphic() || *b == b' ') || bytes[0] == b' ' {
            return Err(FourccParseError::NotAscii(s.to_owned()));
        }
        let mut code = [b' '; 4];
        code[..bytes.len()].copy_from_slice(bytes);
        Ok(Fourcc::from_bytes(code))
    }
}

impl fmt::Display for Fourcc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.padded())
    }
}

impl fmt::Debug for Fourcc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fourcc({:?}, {:#010x})", self.padded(), self.0)
    }
}

impl serde::Serialize for Fourcc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.padded())
    }
}

impl<'de> serde::Deserialize<'de> for Fourcc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_like_the_kernel() {
        // fourcc_code('A','R','2','4') = 0x34325241
        assert_eq!(Fourcc::ARGB8888.code(), 0x3432_5241);
        assert_eq!(Fourcc::from(DrmFourcc::Argb8888), Fourcc::ARGB8888);
        assert_eq!(Fourcc::NV12.known(), Some(DrmFourcc::Nv12));
    }

    #[test]
    fn short_codes_are_space_padded() {
        let r8: Fourcc = "R8".parse().unwrap();
        assert_eq!(r8, Fourcc::R8);
        assert_eq!(r8.padded(), "R8  ");
        assert_eq!(r8.trimmed(), "R8");
        assert_eq!("R8  ".parse::<Fourcc>().unwrap(), Fourcc::R8);
    }

    #[test]
    fn unknown_codes_stay_representable() {
        let f: Fourcc = "ZZZZ".parse().unwrap();
        assert_eq!(f.known(), None);
        assert_eq!(f.to_string(), "ZZZZ");
    }

    #[test]
    fn rejects_bad_text() {
        assert_eq!("".parse::<Fourcc>(), Err(FourccParseError::Length(0)));
        assert_eq!("ABCDE".parse::<Fourcc>(), Err(FourccParseError::Length(5)));
        assert!(matches!("A\u{1}".parse::<Fourcc>(), Err(FourccParseError::NotAscii(_))));
        assert!(matches!(" R8".parse::<Fourcc>(), Err(FourccParseError::NotAscii(_))));
        assert_eq!(Fourcc::from_code(0x0000_0001).padded(), "????");
    }
}
