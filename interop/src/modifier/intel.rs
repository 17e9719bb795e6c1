//! Intel (`I915_FORMAT_MOD_*`): fixed values, no fields. X, Y, Yf and Tile 4, with their
//! colour control surfaces (CCS) for render (RC) and media (MC) compression and clear colour
//! (CC), per generation (GEN12, DG2, MTL).

use super::Decoded;

/// `I915_FORMAT_MOD_{name}` is `fourcc_mod_code(INTEL, index + 1)`. The header's own case
/// (`Yf`) is kept in both spellings.
const NAMES: [&str; 15] = [
    "X_TILED",
    "Y_TILED",
    "Yf_TILED",
    "Y_TILED_CCS",
    "Yf_TILED_CCS",
    "Y_TILED_GEN12_RC_CCS",
    "Y_TILED_GEN12_MC_CCS",
    "Y_TILED_GEN12_RC_CCS_CC",
    "4_TILED",
    "4_TILED_DG2_RC_CCS",
    "4_TILED_DG2_MC_CCS",
    "4_TILED_DG2_RC_CCS_CC",
    "4_TILED_MTL_RC_CCS",
    "4_TILED_MTL_MC_CCS",
    "4_TILED_MTL_RC_CCS_CC",
];

pub(super) fn decode(value: u64) -> Decoded {
    let name = value
        .checked_sub(1)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| NAMES.get(i));
    match name {
        // drm-fourcc's spelling: the macro's family prefix shortened to I915_.
        Some(n) => Decoded::fixed(format!("I915_{n}"), format!("I915_FORMAT_MOD_{n}")),
        None => Decoded::unknown("INTEL"),
    }
}
