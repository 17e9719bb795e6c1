//! Vivante: a colour tiling (TILED, SUPER_TILED, SPLIT_TILED, SPLIT_SUPER_TILED: values 1 to
//! 4) in the low bits, and in bits 55:48 the extensions: the tile-status layout
//! (`VIVANTE_MOD_TS_*`, bits 51:48) and compression (`VIVANTE_MOD_COMP_*`, bits 55:52), which
//! "depend on a TS modifier being present". Without extensions the name is the tiling's
//! (`VIVANTE_SUPER_TILED`); with them, the tiling and the extensions' macro suffixes
//! (`VIVANTE_SUPER_TILED(TS_64_4, COMP_DEC400)`).

use super::{bits, Decoded};

const TS_SHIFT: u32 = 48;
const COMP_SHIFT: u32 = 52;
/// `VIVANTE_MOD_EXT_MASK`: "Masking out the extension bits will yield the base modifier."
const EXT_MASK: u64 = 0xff << TS_SHIFT;

fn tiling(base: u64) -> Option<&'static str> {
    Some(match base {
        1 => "TILED",
        2 => "SUPER_TILED",
        3 => "SPLIT_TILED",
        4 => "SPLIT_SUPER_TILED",
        _ => return None,
    })
}

/// `VIVANTE_MOD_TS_{name}`: bytes of colour per entry, status bits per entry.
fn tile_status(ts: u64) -> Option<&'static str> {
    Some(match ts {
        1 => "TS_64_4",
        2 => "TS_64_2",
        3 => "TS_128_4",
        4 => "TS_256_4",
        _ => return None,
    })
}

/// `VIVANTE_MOD_COMP_{name}`.
fn compression(comp: u64) -> Option<&'static str> {
    Some(match comp {
        1 => "COMP_DEC400",
        _ => return None,
    })
}

pub(super) fn decode(v: u64) -> Decoded {
    let base = v & !EXT_MASK;
    let ts = (v >> TS_SHIFT) & 0xf;
    let comp = (v >> COMP_SHIFT) & 0xf;
    let Some(t) = tiling(base) else {
        let mut d = Decoded::family("VIVANTE");
        d.problem(format!("unknown tiling {}", bits(base)));
        if v & EXT_MASK != 0 {
            d.problem(format!("extensions {}", bits(v & EXT_MASK)));
        }
        return d;
    };
    let name = format!("VIVANTE_{t}");
    let base_macro = format!("DRM_FORMAT_MOD_VIVANTE_{t}");
    if ts == 0 && comp == 0 {
        return Decoded::fixed(name, base_macro);
    }
    let mut d = Decoded::family(name);
    let mut terms = vec![base_macro];
    if ts != 0 {
        match tile_status(ts) {
            Some(s) => {
                d.part(s);
                terms.push(format!("VIVANTE_MOD_{s}"));
            }
            None => d.problem(format!("unknown TS {ts}")),
        }
    }
    if comp != 0 {
        match compression(comp) {
            Some(c) => {
                d.part(c);
                terms.push(format!("VIVANTE_MOD_{c}"));
            }
            None => d.problem(format!("unknown COMP {comp}")),
        }
        if ts == 0 {
            d.problem("compression without TS");
        }
    }
    d.macro_name = Some(terms.join(" | "));
    d
}
