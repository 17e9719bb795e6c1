//! The vendors whose modifiers are a few fixed values with no fields: NONE (LINEAR and
//! INVALID), Samsung, Qualcomm and Allwinner.

use super::Decoded;

/// A fixed value of `table` (value, name), spelled `{prefix}{name}` by the header.
fn lookup(value: u64, vendor: &'static str, prefix: &str, table: &[(u64, &'static str)]) -> Decoded {
    match table.iter().find(|(v, _)| *v == value) {
        Some((_, name)) => Decoded::fixed(*name, format!("{prefix}{name}")),
        None => Decoded::unknown(vendor),
    }
}

/// `DRM_FORMAT_MOD_LINEAR` (`fourcc_mod_code(NONE, 0)`) and `DRM_FORMAT_MOD_INVALID`
/// (`fourcc_mod_code(NONE, DRM_FORMAT_RESERVED)`). `DRM_FORMAT_MOD_NONE` is the header's
/// deprecated alias of LINEAR.
pub(super) fn none(value: u64) -> Decoded {
    lookup(value, "NONE", "DRM_FORMAT_MOD_", &[(0, "LINEAR"), (super::VALUE_MASK, "INVALID")])
}

/// `DRM_FORMAT_MOD_SAMSUNG_*`. `DRM_FORMAT_MOD_GENERIC_16_16_TILE` is, in the header's
/// words, "a purely symbolic alias" of SAMSUNG_16_16_TILE, so the value is named after the
/// original definition.
pub(super) fn samsung(value: u64) -> Decoded {
    lookup(value, "SAMSUNG", "DRM_FORMAT_MOD_", &[(1, "SAMSUNG_64_32_TILE"), (2, "SAMSUNG_16_16_TILE")])
}

/// `DRM_FORMAT_MOD_QCOM_*`.
pub(super) fn qcom(value: u64) -> Decoded {
    lookup(value, "QCOM", "DRM_FORMAT_MOD_", &[(1, "QCOM_COMPRESSED"), (2, "QCOM_TILED2"), (3, "QCOM_TILED3")])
}

/// `DRM_FORMAT_MOD_ALLWINNER_TILED`.
pub(super) fn allwinner(value: u64) -> Decoded {
    lookup(value, "ALLWINNER", "DRM_FORMAT_MOD_", &[(1, "ALLWINNER_TILED")])
}
