//! Amlogic: `DRM_FORMAT_MOD_AMLOGIC_FBC(layout, options)`, the layout in bits 7:0 (BASIC 1,
//! SCATTER 2) and the options in bits 15:8 (MEM_SAVING, bit 0). Named
//! `AMLOGIC_FBC(LAYOUT=BASIC, OPTIONS=MEM_SAVING)`, in libdrm's words.

use super::{bits, Decoded};

const OPTIONS_SHIFT: u32 = 8;
const OPTION_MEM_SAVING: u64 = 1;

fn layout(l: u64) -> Option<&'static str> {
    Some(match l {
        1 => "BASIC",
        2 => "SCATTER",
        _ => return None,
    })
}

pub(super) fn decode(v: u64) -> Decoded {
    let mut d = Decoded::family("AMLOGIC_FBC");
    let l = v & 0xff;
    let options = (v >> OPTIONS_SHIFT) & 0xff;
    let layout_macro = match layout(l) {
        Some(name) => {
            d.part(format!("LAYOUT={name}"));
            format!("AMLOGIC_FBC_LAYOUT_{name}")
        }
        None => {
            d.problem(format!("unknown LAYOUT {l}"));
            String::new()
        }
    };
    let options_macro = if options & OPTION_MEM_SAVING != 0 {
        d.part("OPTIONS=MEM_SAVING");
        "AMLOGIC_FBC_OPTION_MEM_SAVING"
    } else {
        "0"
    };
    if options & !OPTION_MEM_SAVING != 0 {
        d.problem(format!("unknown OPTIONS {}", bits(options & !OPTION_MEM_SAVING)));
    }
    if v >> 16 != 0 {
        d.problem(format!("undefined bits {}", bits(v & !0xffff)));
    }
    d.macro_name = Some(format!("DRM_FORMAT_MOD_AMLOGIC_FBC({layout_macro}, {options_macro})"));
    d
}
