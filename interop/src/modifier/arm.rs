//! Arm: `DRM_FORMAT_MOD_ARM_CODE(type, value)`, the type in bits 55:52. Three types:
//! - AFBC (0), `DRM_FORMAT_MOD_ARM_AFBC(mode)`: the superblock size in bits 3:0 and nine
//!   flags above it (YTR, SPLIT, SPARSE, CBR, TILED, SC, DB, BCH, USM). The header says not
//!   every combination is valid without saying which, so any set of flags is named.
//! - MISC (1): `DRM_FORMAT_MOD_ARM_16X16_BLOCK_U_INTERLEAVED` alone.
//! - AFRC (2), `DRM_FORMAT_MOD_ARM_AFRC(mode)`: the coding unit size of plane 0 (bits 3:0,
//!   required) and of planes 1 and 2 (bits 7:4, zero for a one-plane buffer), and the
//!   scanline layout bit (8); without it the layout is the rotation-optimised one (ROT).
//!
//! Names in libdrm's and drm_info's words: `ARM_AFBC(BLOCK_SIZE=16x16, YTR, SPARSE)`,
//! `ARM_AFRC(P0=CU_16, P12=CU_24, SCAN)`.

use super::{bits, Decoded};

const TYPE_SHIFT: u32 = 52;
/// `DRM_FORMAT_MOD_ARM_CODE`'s value: the 52 bits below the type.
const MODE_MASK: u64 = 0x000f_ffff_ffff_ffff;

const TYPE_AFBC: u64 = 0x00;
const TYPE_MISC: u64 = 0x01;
const TYPE_AFRC: u64 = 0x02;

/// `DRM_FORMAT_MOD_ARM_16X16_BLOCK_U_INTERLEAVED`'s value among the MISC type.
const MISC_16X16_BLOCK_U_INTERLEAVED: u64 = 1;

/// `AFBC_FORMAT_MOD_BLOCK_SIZE_*` (mask 0xf).
fn afbc_block_size(b: u64) -> Option<&'static str> {
    Some(match b {
        1 => "16x16",
        2 => "32x8",
        3 => "64x4",
        4 => "32x8_64x4",
        _ => return None,
    })
}

/// `AFBC_FORMAT_MOD_{name}`: bit 4 upwards.
const AFBC_FLAGS: [(u64, &str); 9] = [
    (1 << 4, "YTR"),
    (1 << 5, "SPLIT"),
    (1 << 6, "SPARSE"),
    (1 << 7, "CBR"),
    (1 << 8, "TILED"),
    (1 << 9, "SC"),
    (1 << 10, "DB"),
    (1 << 11, "BCH"),
    (1 << 12, "USM"),
];
const AFBC_DEFINED: u64 = 0x1fff;

/// `AFRC_FORMAT_MOD_CU_SIZE_*` (mask 0xf): bytes per coding unit.
fn afrc_cu_size(c: u64) -> Option<&'static str> {
    Some(match c {
        1 => "16",
        2 => "24",
        3 => "32",
        _ => return None,
    })
}
const AFRC_LAYOUT_SCAN: u64 = 1 << 8;
const AFRC_DEFINED: u64 = 0x1ff;

pub(super) fn decode(v: u64) -> Decoded {
    let mode = v & MODE_MASK;
    match v >> TYPE_SHIFT {
        TYPE_AFBC => afbc(mode),
        TYPE_AFRC => afrc(mode),
        TYPE_MISC if mode == MISC_16X16_BLOCK_U_INTERLEAVED => Decoded::fixed(
            "ARM_16X16_BLOCK_U_INTERLEAVED",
            "DRM_FORMAT_MOD_ARM_16X16_BLOCK_U_INTERLEAVED".to_owned(),
        ),
        TYPE_MISC => Decoded::unknown("ARM_MISC"),
        other => {
            let mut d = Decoded::family("ARM");
            d.problem(format!("unknown type {other}"));
            d
        }
    }
}

fn afbc(mode: u64) -> Decoded {
    let mut d = Decoded::family("ARM_AFBC");
    let mut terms = Vec::new();
    let size = mode & 0xf;
    match afbc_block_size(size) {
        Some(s) => {
            d.part(format!("BLOCK_SIZE={s}"));
            terms.push(format!("AFBC_FORMAT_MOD_BLOCK_SIZE_{s}"));
        }
        None => d.problem(format!("unknown BLOCK_SIZE {size}")),
    }
    for (bit, name) in AFBC_FLAGS {
        if mode & bit != 0 {
            d.part(name);
            terms.push(format!("AFBC_FORMAT_MOD_{name}"));
        }
    }
    if mode & !AFBC_DEFINED != 0 {
        d.problem(format!("undefined bits {}", bits(mode & !AFBC_DEFINED)));
    }
    d.macro_name = Some(format!("DRM_FORMAT_MOD_ARM_AFBC({})", terms.join(" | ")));
    d
}

fn afrc(mode: u64) -> Decoded {
    let mut d = Decoded::family("ARM_AFRC");
    let mut terms = Vec::new();
    let p0 = mode & 0xf;
    match afrc_cu_size(p0) {
        Some(s) => {
            d.part(format!("P0=CU_{s}"));
            terms.push(format!("AFRC_FORMAT_MOD_CU_SIZE_P0(AFRC_FORMAT_MOD_CU_SIZE_{s})"));
        }
        // "AFRC_FORMAT_MOD_CU_SIZE_P0 must be specified".
        None if p0 == 0 => d.problem("no P0 coding unit size"),
        None => d.problem(format!("unknown P0 coding unit size {p0}")),
    }
    let p12 = (mode >> 4) & 0xf;
    match afrc_cu_size(p12) {
        Some(s) => {
            d.part(format!("P12=CU_{s}"));
            terms.push(format!("AFRC_FORMAT_MOD_CU_SIZE_P12(AFRC_FORMAT_MOD_CU_SIZE_{s})"));
        }
        None if p12 == 0 => {}
        None => d.problem(format!("unknown P12 coding unit size {p12}")),
    }
    if mode & AFRC_LAYOUT_SCAN != 0 {
        d.part("SCAN");
        terms.push("AFRC_FORMAT_MOD_LAYOUT_SCAN".to_owned());
    } else {
        d.part("ROT");
    }
    if mode & !AFRC_DEFINED != 0 {
        d.problem(format!("undefined bits {}", bits(mode & !AFRC_DEFINED)));
    }
    d.macro_name = Some(format!("DRM_FORMAT_MOD_ARM_AFRC({})", terms.join(" | ")));
    d
}
