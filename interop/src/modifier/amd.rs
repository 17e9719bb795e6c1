//! AMD (`AMD_FMT_MOD`): one value built of fields, `AMD_FMT_MOD_SET(FIELD, value)` each, at
//! the header's shifts and masks:
//!
//! | bits  | field                    |
//! |-------|--------------------------|
//! |   7:0 | TILE_VERSION             |
//! |  12:8 | TILE                     |
//! |    13 | DCC                      |
//! |    14 | DCC_RETILE               |
//! |    15 | DCC_PIPE_ALIGN           |
//! |    16 | DCC_INDEPENDENT_64B      |
//! |    17 | DCC_INDEPENDENT_128B     |
//! | 19:18 | DCC_MAX_COMPRESSED_BLOCK |
//! |    20 | DCC_CONSTANT_ENCODE      |
//! | 23:21 | PIPE_XOR_BITS            |
//! | 26:24 | BANK_XOR_BITS            |
//! | 29:27 | PACKERS                  |
//! | 32:30 | RB                       |
//! | 35:33 | PIPE                     |
//! | 55:36 | reserved, must be zero   |
//!
//! Names list the fields in that order, with libdrm's words (`drmGetFormatModifierName`):
//! the tile version and tile as the suffixes of their macros (`GFX11`, `GFX9_64K_R_X`: the
//! header names a tile after the first version that has it), the DCC flags by their field
//! names, the numbers as `FIELD=n`. Unlike libdrm, every field with a value is shown
//! (libdrm leaves out PIPE_XOR_BITS of GFX11_256K_R_X and PACKERS of GFX11, so two
//! modifiers can share its name).
//!
//! Which fields a modifier may carry (the header's "PIPE_XOR_BITS = always needed ..."):
//! - the XOR fields only on an `_X` tile of GFX9 to GFX11 (GFX12 has none); PIPE_XOR_BITS
//!   on every one, BANK_XOR_BITS on GFX9's, PACKERS on GFX10_RBPLUS's and GFX11's. The
//!   header's comment predates GFX11 and names only GFX10_RBPLUS for PACKERS, but the
//!   kernel's own GFX11 modifier list (amdgpu_dm_plane.c) sets PACKERS on every GFX11 `_X`
//!   modifier, with or without DCC, so GFX11's are shown and allowed too;
//! - RB on GFX9 with DCC, and PIPE when DCC_RETILE or DCC_PIPE_ALIGN is also set;
//! - the DCC sub-fields only with DCC; DCC_PIPE_ALIGN "only set if DCC_RETILE = false".
//!
//! Fields a modifier must carry are shown even when zero (`PIPE_XOR_BITS=0`); fields it may
//! not carry make it malformed when set. The header's
//! `AMD_FMT_MOD_GFX12_DCC_MAX_COMPRESSED_BLOCK_SHIFT` (3) is not a modifier field: bits 4:3
//! lie inside TILE_VERSION (GFX12 is 5, so they are always zero there); it is where amdgpu's
//! GFX12 tiling flags keep the value, and GFX12 modifiers carry DCC_MAX_COMPRESSED_BLOCK at
//! 19:18 like the others (the kernel builds them with `AMD_FMT_MOD_SET(DCC_MAX_COMPRESSED_BLOCK, …)`).

use drm_fourcc::DrmVendor;

use super::{bits, Decoded};

pub(super) const VENDOR: u8 = DrmVendor::Amd as u8;

/// A field: `AMD_FMT_MOD_{name}_SHIFT` and `_MASK`.
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    shift: u32,
    mask: u64,
}

impl Field {
    const fn get(self, v: u64) -> u64 {
        (v >> self.shift) & self.mask
    }

    const fn set(self, x: u64) -> u64 {
        (x & self.mask) << self.shift
    }
}

const fn field(name: &'static str, shift: u32, mask: u64) -> Field {
    Field { name, shift, mask }
}

const TILE_VERSION: Field = field("TILE_VERSION", 0, 0xff);
const TILE: Field = field("TILE", 8, 0x1f);
const DCC: Field = field("DCC", 13, 0x1);
const DCC_RETILE: Field = field("DCC_RETILE", 14, 0x1);
const DCC_PIPE_ALIGN: Field = field("DCC_PIPE_ALIGN", 15, 0x1);
const DCC_INDEPENDENT_64B: Field = field("DCC_INDEPENDENT_64B", 16, 0x1);
const DCC_INDEPENDENT_128B: Field = field("DCC_INDEPENDENT_128B", 17, 0x1);
const DCC_MAX_COMPRESSED_BLOCK: Field = field("DCC_MAX_COMPRESSED_BLOCK", 18, 0x3);
const DCC_CONSTANT_ENCODE: Field = field("DCC_CONSTANT_ENCODE", 20, 0x1);
const PIPE_XOR_BITS: Field = field("PIPE_XOR_BITS", 21, 0x7);
const BANK_XOR_BITS: Field = field("BANK_XOR_BITS", 24, 0x7);
const PACKERS: Field = field("PACKERS", 27, 0x7);
const RB: Field = field("RB", 30, 0x7);
const PIPE: Field = field("PIPE", 33, 0x7);
/// Bits 55:36: "Reserved for future use, must be zero".
const RESERVED: u64 = super::VALUE_MASK & !((1 << 36) - 1);

/// `AMD_FMT_MOD_TILE_VER_*`; 0 is "reserved for GFX8 and older", which have no modifiers.
const GFX9: u64 = 1;
const GFX10: u64 = 2;
const GFX10_RBPLUS: u64 = 3;
const GFX11: u64 = 4;
const GFX12: u64 = 5;

fn version_name(v: u64) -> Option<&'static str> {
    Some(match v {
        GFX9 => "GFX9",
        GFX10 => "GFX10",
        GFX10_RBPLUS => "GFX10_RBPLUS",
        GFX11 => "GFX11",
        GFX12 => "GFX12",
        _ => return None,
    })
}

/// `AMD_FMT_MOD_TILE_GFX9_64K_S_X`, `_D_X`, `_R_X` and `AMD_FMT_MOD_TILE_GFX11_256K_R_X`:
/// the XOR-swizzled tiles, the only ones the XOR fields apply to.
const X_TILES: [u64; 4] = [25, 26, 27, 31];

/// The tile's name for this version, `AMD_FMT_MOD_TILE_{name}`, and log2 of the bytes of its
/// swizzle block (the size the name gives: 256B, 4K, 64K, 256K). The GFX9 tiles serve GFX9 to
/// GFX11 ("64K_S is the same for GFX9/GFX10/GFX10_RBPLUS and hence has GFX9 as canonical
/// version", 64K_D "on GFX11" too); GFX11_256K_R_X is GFX11's. GFX12 numbers its swizzle
/// modes afresh: the header defines 64K_2D (3) and 256K_2D (4) and lists the others in a
/// comment (0 LINEAR, which a modifier spells DRM_FORMAT_MOD_LINEAR, 1 256B_2D, 2 4KB_2D,
/// 5 4KB_3D, 6 64KB_3D, 7 256KB_3D), named here the way the header names 3 and 4.
fn tile_info(version: u64, tile: u64) -> Option<(&'static str, u32)> {
    Some(match (version, tile) {
        (GFX9..=GFX11, 9) => ("GFX9_64K_S", 16),
        (GFX9..=GFX11, 10) => ("GFX9_64K_D", 16),
        (GFX9..=GFX11, 25) => ("GFX9_64K_S_X", 16),
        (GFX9..=GFX11, 26) => ("GFX9_64K_D_X", 16),
        (GFX9..=GFX11, 27) => ("GFX9_64K_R_X", 16),
        (GFX11, 31) => ("GFX11_256K_R_X", 18),
        (GFX12, 1) => ("GFX12_256B_2D", 8),
        (GFX12, 2) => ("GFX12_4K_2D", 12),
        (GFX12, 3) => ("GFX12_64K_2D", 16),
        (GFX12, 4) => ("GFX12_256K_2D", 18),
        (GFX12, 5) => ("GFX12_4K_3D", 12),
        (GFX12, 6) => ("GFX12_64K_3D", 16),
        (GFX12, 7) => ("GFX12_256K_3D", 18),
        _ => return None,
    })
}

/// `AMD_FMT_MOD_DCC_BLOCK_*`.
fn dcc_block_name(b: u64) -> Option<&'static str> {
    Some(match b {
        0 => "64B",
        1 => "128B",
        2 => "256B",
        _ => return None,
    })
}

/// The fields of an AMD modifier, as `AMD_FMT_MOD_GET` reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AmdModifier {
    /// `AMD_FMT_MOD_TILE_VER_*`: 1 GFX9, 2 GFX10, 3 GFX10_RBPLUS, 4 GFX11, 5 GFX12.
    pub tile_version: u8,
    /// The swizzle mode, `AMD_FMT_MOD_TILE_<version>_*` (5 bits).
    pub tile: u8,
    /// Delta colour compression: a DCC surface beside the main one.
    pub dcc: bool,
    /// Two DCC surfaces: a displayable one and a pipe-aligned one.
    pub dcc_retile: bool,
    /// The DCC surface is pipe-aligned (only without `dcc_retile`).
    pub dcc_pipe_align: bool,
    pub dcc_independent_64b: bool,
    pub dcc_independent_128b: bool,
    /// `AMD_FMT_MOD_DCC_BLOCK_*`: 0 64B, 1 128B, 2 256B (2 bits).
    pub dcc_max_compressed_block: u8,
    /// Embedded clear colours need no fast-clear eliminate.
    pub dcc_constant_encode: bool,
    /// 3 bits each: per-GPU parameters of the XOR swizzles and DCC placement.
    pub pipe_xor_bits: u8,
    pub bank_xor_bits: u8,
    pub packers: u8,
    pub rb: u8,
    pub pipe: u8,
}

impl AmdModifier {
    /// The 56-bit value, each field cut to its mask.
    pub(super) const fn value(self) -> u64 {
        TILE_VERSION.set(self.tile_version as u64)
            | TILE.set(self.tile as u64)
            | DCC.set(self.dcc as u64)
            | DCC_RETILE.set(self.dcc_retile as u64)
            | DCC_PIPE_ALIGN.set(self.dcc_pipe_align as u64)
            | DCC_INDEPENDENT_64B.set(self.dcc_independent_64b as u64)
            | DCC_INDEPENDENT_128B.set(self.dcc_independent_128b as u64)
            | DCC_MAX_COMPRESSED_BLOCK.set(self.dcc_max_compressed_block as u64)
            | DCC_CONSTANT_ENCODE.set(self.dcc_constant_encode as u64)
            | PIPE_XOR_BITS.set(self.pipe_xor_bits as u64)
            | BANK_XOR_BITS.set(self.bank_xor_bits as u64)
            | PACKERS.set(self.packers as u64)
            | RB.set(self.rb as u64)
            | PIPE.set(self.pipe as u64)
    }

    /// The swizzle mode's `AMD_FMT_MOD_TILE_*` name and log2 of the bytes of its block, where
    /// `drm_fourcc.h` defines the tile for this tile version; `None` otherwise.
    pub fn swizzle_block(&self) -> Option<(&'static str, u32)> {
        tile_info(self.tile_version.into(), self.tile.into())
    }

    /// The fields of a value with no reserved bit set.
    pub(super) fn from_value(v: u64) -> Option<Self> {
        if v & RESERVED != 0 {
            return None;
        }
        // Every mask is at most 8 bits wide, so each field fits its type.
        let small = |f: Field| f.get(v) as u8;
        let flag = |f: Field| f.get(v) != 0;
        Some(AmdModifier {
            tile_version: small(TILE_VERSION),
            tile: small(TILE),
            dcc: flag(DCC),
            dcc_retile: flag(DCC_RETILE),
            dcc_pipe_align: flag(DCC_PIPE_ALIGN),
            dcc_independent_64b: flag(DCC_INDEPENDENT_64B),
            dcc_independent_128b: flag(DCC_INDEPENDENT_128B),
            dcc_max_compressed_block: small(DCC_MAX_COMPRESSED_BLOCK),
            dcc_constant_encode: flag(DCC_CONSTANT_ENCODE),
            pipe_xor_bits: small(PIPE_XOR_BITS),
            bank_xor_bits: small(BANK_XOR_BITS),
            packers: small(PACKERS),
            rb: small(RB),
            pipe: small(PIPE),
        })
    }
}

pub(super) fn decode(v: u64) -> Decoded {
    let version = TILE_VERSION.get(v);
    let Some(version_name) = version_name(version) else {
        let mut d = Decoded::family("AMD");
        d.problem(format!("unknown tile version {version}"));
        return d;
    };
    let mut d = Decoded::family("AMD");
    d.part(version_name);
    let tile = TILE.get(v);
    let known_tile = tile_info(version, tile).map(|(name, _)| name);
    match known_tile {
        Some(t) => d.part(t),
        None => d.problem(format!("unknown tile {tile}")),
    }

    let dcc = DCC.get(v) != 0;
    let retile = DCC_RETILE.get(v) != 0;
    let pipe_align = DCC_PIPE_ALIGN.get(v) != 0;
    let flags = [DCC_RETILE, DCC_PIPE_ALIGN, DCC_INDEPENDENT_64B, DCC_INDEPENDENT_128B];
    if dcc {
        d.part(DCC.name);
        for f in flags.into_iter().filter(|f| f.get(v) != 0) {
            d.part(f.name);
        }
        if retile && pipe_align {
            d.problem("DCC_PIPE_ALIGN with DCC_RETILE");
        }
        let block = DCC_MAX_COMPRESSED_BLOCK.get(v);
        match dcc_block_name(block) {
            Some(b) => d.part(format!("{}={b}", DCC_MAX_COMPRESSED_BLOCK.name)),
            None => d.problem(format!("{}={block}", DCC_MAX_COMPRESSED_BLOCK.name)),
        }
        if DCC_CONSTANT_ENCODE.get(v) != 0 {
            d.part(DCC_CONSTANT_ENCODE.name);
        }
    } else {
        for f in flags.into_iter().chain([DCC_CONSTANT_ENCODE]).filter(|f| f.get(v) != 0) {
            d.problem(format!("{} without DCC", f.name));
        }
        let block = DCC_MAX_COMPRESSED_BLOCK.get(v);
        if block != 0 {
            let shown = dcc_block_name(block).map_or_else(|| block.to_string(), str::to_owned);
            d.problem(format!("{}={shown} without DCC", DCC_MAX_COMPRESSED_BLOCK.name));
        }
    }

    // tile_info gives GFX12 no _X tile, and an unknown tile carries no field.
    let x_tile = known_tile.is_some() && X_TILES.contains(&tile);
    let carried = [
        (PIPE_XOR_BITS, x_tile),
        (BANK_XOR_BITS, x_tile && version == GFX9),
        (PACKERS, x_tile && (version == GFX10_RBPLUS || version == GFX11)),
        (RB, x_tile && version == GFX9 && dcc),
        (PIPE, x_tile && version == GFX9 && dcc && (retile || pipe_align)),
    ];
    for (f, carries) in carried {
        let n = f.get(v);
        if carries {
            d.part(format!("{}={n}", f.name));
        } else if n != 0 {
            d.problem(format!("{}={n} unused here", f.name));
        }
    }
    if v & RESERVED != 0 {
        d.problem(format!("reserved bits {}", bits(v & RESERVED)));
    }
    if d.well_formed {
        d.macro_name = Some(d.text());
    }
    d
}
