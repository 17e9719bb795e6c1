//! Broadcom: `fourcc_mod_broadcom_code(val, params)`, the type in bits 7:0 and a 48-bit
//! parameter above it (`__fourcc_mod_broadcom_param_shift` 8, `_bits` 48; the header's prose
//! says "lower 32 bits", its macros say 8, and the macros are what builds the values).
//! VC4_T_TILED (1) and UIF (6) take no parameter; SAND32 to SAND256 (2 to 5) take the column
//! height, and with a height of 0 are the header's plain `DRM_FORMAT_MOD_BROADCOM_SANDn`.

use super::{bits, Decoded};

const PARAM_SHIFT: u32 = 8;
const PARAM_MASK: u64 = (1 << 48) - 1;

const VC4_T_TILED: u64 = 1;
const UIF: u64 = 6;

/// `DRM_FORMAT_MOD_BROADCOM_SAND{width}_COL_HEIGHT(v)` for types 2 to 5.
fn sand_width(ty: u64) -> Option<u32> {
    Some(match ty {
        2 => 32,
        3 => 64,
        4 => 128,
        5 => 256,
        _ => return None,
    })
}

pub(super) fn decode(v: u64) -> Decoded {
    let ty = v & 0xff;
    let param = (v >> PARAM_SHIFT) & PARAM_MASK;
    if let Some(w) = sand_width(ty) {
        return if param == 0 {
            Decoded::fixed(format!("BROADCOM_SAND{w}"), format!("DRM_FORMAT_MOD_BROADCOM_SAND{w}"))
        } else {
            let mut d = Decoded::family(format!("BROADCOM_SAND{w}_COL_HEIGHT"));
            d.part(param.to_string());
            d.macro_name = Some(format!("DRM_FORMAT_MOD_BROADCOM_SAND{w}_COL_HEIGHT({param})"));
            d
        };
    }
    let name = match ty {
        VC4_T_TILED => "VC4_T_TILED",
        UIF => "UIF",
        _ => {
            let mut d = Decoded::family("BROADCOM");
            d.problem(format!("unknown type {ty}"));
            if param != 0 {
                d.problem(format!("parameter {}", bits(param)));
            }
            return d;
        }
    };
    if param == 0 {
        return Decoded::fixed(format!("BROADCOM_{name}"), format!("DRM_FORMAT_MOD_BROADCOM_{name}"));
    }
    let mut d = Decoded::family(format!("BROADCOM_{name}"));
    d.problem(format!("parameter {} it does not take", bits(param)));
    d
}
