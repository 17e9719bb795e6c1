//! The decoders against the kernel's header: expected values come from evaluating
//! `drm_fourcc.h`'s own macros (see `c_header`), names from its macro names.

use std::collections::HashMap;
use std::sync::OnceLock;

use drm_fourcc::{DrmModifier, DrmVendor};

use super::c_header::Header;
use super::*;

fn header() -> &'static Header {
    static HEADER: OnceLock<Header> = OnceLock::new();
    HEADER.get_or_init(Header::load)
}

fn eval(expr: &str) -> u64 {
    header().eval(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

/// splitmix64: reproducible, and no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The object-like macros whose names start with `prefix`, less those ending in `_MASK`
/// or `_SHIFT`, as (suffix, value).
fn constants(prefix: &str) -> Vec<(String, u64)> {
    header()
        .object_macros()
        .filter_map(|(name, _)| name.strip_prefix(prefix).map(|s| (name, s)))
        .filter(|(_, s)| !s.ends_with("_MASK") && !s.ends_with("_SHIFT") && *s != "MASK" && *s != "SHIFT")
        .map(|(name, s)| (s.to_owned(), eval(name)))
        .collect()
}

/// A modifier the header defines: named, spelled by a macro, displayed as its name.
fn assert_well_formed(m: Modifier) -> String {
    let name = m.name().unwrap_or_else(|| panic!("{} is not well formed", m.display_name()));
    assert_eq!(m.display_name(), name);
    let mac = m.macro_name().unwrap_or_else(|| panic!("{name} has no macro name"));
    assert_eq!(m.kernel_label(), format!("{mac} ({})", m.to_hex()));
    name.into_owned()
}

/// A modifier the header does not define: shown as what decodes, then the hex.
fn assert_malformed(m: Modifier, shown: &str) {
    assert_eq!(m.name(), None, "{shown}");
    assert_eq!(m.macro_name(), None, "{shown}");
    assert_eq!(m.display_name(), format!("{shown} {}", m.to_hex()));
    assert_eq!(m.kernel_label(), format!("{shown} ({})", m.to_hex()));
}

/// Where the header has a macro call for the value, the call evaluates back to it.
fn assert_macro_evaluates_back(m: Modifier) {
    let mac = m.macro_name().expect("macro name");
    assert_eq!(header().eval(&mac), Ok(m.raw()), "{mac}");
}

#[test]
fn special_values() {
    assert_eq!(Modifier::LINEAR.raw(), 0);
    assert_eq!(Modifier::INVALID.raw(), 0x00ff_ffff_ffff_ffff);
    assert_eq!(Modifier::LINEAR.name().as_deref(), Some("LINEAR"));
    assert_eq!(Modifier::INVALID.name().as_deref(), Some("INVALID"));
    assert_eq!(Modifier::LINEAR.vendor(), Vendor::None);
    assert_eq!(Modifier::INVALID.raw(), eval("DRM_FORMAT_MOD_INVALID"));
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

/// Every fixed modifier the header defines (every object-like `DRM_FORMAT_MOD_*` and
/// `I915_FORMAT_MOD_*` but the vendor ids and ARM's type numbers) has its macro as its
/// macro name and the macro less its family prefix as its name; the header's aliases
/// (a body that is another modifier's spelling, and the deprecated `DRM_FORMAT_MOD_NONE`)
/// are named after what they alias.
#[test]
fn every_fixed_modifier_of_the_header_is_named_by_its_macro() {
    let mut seen = 0;
    for (name, body) in header().object_macros() {
        let modifier_macro = name.starts_with("I915_FORMAT_MOD_")
            || (name.starts_with("DRM_FORMAT_MOD_")
                && !name.starts_with("DRM_FORMAT_MOD_VENDOR_")
                && !name.starts_with("DRM_FORMAT_MOD_ARM_TYPE_"));
        if !modifier_macro {
            continue;
        }
        let m = Modifier::from_raw(eval(name));
        let ours = assert_well_formed(m);
        let mac = m.macro_name().unwrap_or_default();
        assert_macro_evaluates_back(m);
        if mac == name {
            let short = name.strip_prefix("DRM_FORMAT_MOD_").map_or_else(|| name.replacen("I915_FORMAT_MOD_", "I915_", 1), str::to_owned);
            assert_eq!(ours, short, "{name}");
        } else {
            assert!(body == mac || name == "DRM_FORMAT_MOD_NONE", "{name} ({body}) is spelled {mac}");
        }
        seen += 1;
    }
    // 43 in libdrm 2.4.123's header; fewer means the header was not read as it should be.
    assert!(seen >= 43, "only {seen} fixed modifiers read from the header");
}

/// One vocabulary: where drm-fourcc names a modifier, the name here is its name (less its
/// two alias spellings: the symbolic GENERIC_16_16_TILE and the GOB counts of 16BX2_BLOCK).
#[test]
fn names_agree_with_drm_fourcc() {
    let mut compared = 0;
    for (name, _) in header().object_macros() {
        if !(name.starts_with("DRM_FORMAT_MOD_") || name.starts_with("I915_FORMAT_MOD_")) {
            continue;
        }
        let Ok(v) = header().eval(name) else { continue };
        let m = Modifier::from_raw(v);
        let known = m.known();
        if matches!(known, DrmModifier::Unrecognized(_)) {
            continue;
        }
        let theirs = format!("{known:?}").to_ascii_uppercase();
        if theirs == "GENERIC_16_16_TILE" || theirs.starts_with("NVIDIA_16BX2_BLOCK_") {
            continue;
        }
        assert_eq!(m.name().as_deref(), Some(theirs.as_str()), "{name}");
        compared += 1;
    }
    assert!(compared >= 15, "{compared}");
}

/// The modifiers real drivers list: radv's (navi31, navi21, vega10/raven, and drm-shim's
/// navi31 with DCC) and NVIDIA's 580 driver on an H200.
#[test]
fn real_drivers_modifiers() {
    let cases: &[(u64, &str)] = &[
        (0x0200_0000_0000_1b04, "AMD(GFX11, GFX9_64K_R_X, PIPE_XOR_BITS=0, PACKERS=0)"),
        (0x0200_0000_0000_1f04, "AMD(GFX11, GFX11_256K_R_X, PIPE_XOR_BITS=0, PACKERS=0)"),
        (0x0200_0000_0000_0a04, "AMD(GFX11, GFX9_64K_D)"),
        (0, "LINEAR"),
        (0x0200_0000_0000_1b03, "AMD(GFX10_RBPLUS, GFX9_64K_R_X, PIPE_XOR_BITS=0, PACKERS=0)"),
        (0x0200_0000_0000_0901, "AMD(GFX9, GFX9_64K_S)"),
        (0x0200_0000_0000_1a01, "AMD(GFX9, GFX9_64K_D_X, PIPE_XOR_BITS=0, BANK_XOR_BITS=0)"),
        (0x0200_0000_0000_1901, "AMD(GFX9, GFX9_64K_S_X, PIPE_XOR_BITS=0, BANK_XOR_BITS=0)"),
        (0x0200_0000_0000_0a01, "AMD(GFX9, GFX9_64K_D)"),
        (
            0x0200_0000_28a6_bf04,
            "AMD(GFX11, GFX11_256K_R_X, DCC, DCC_PIPE_ALIGN, DCC_INDEPENDENT_128B, DCC_MAX_COMPRESSED_BLOCK=128B, PIPE_XOR_BITS=5, PACKERS=5)",
        ),
        (
            0x0200_0000_28a6_7f04,
            "AMD(GFX11, GFX11_256K_R_X, DCC, DCC_RETILE, DCC_INDEPENDENT_128B, DCC_MAX_COMPRESSED_BLOCK=128B, PIPE_XOR_BITS=5, PACKERS=5)",
        ),
        (
            0x0200_0000_28a3_7f04,
            "AMD(GFX11, GFX11_256K_R_X, DCC, DCC_RETILE, DCC_INDEPENDENT_64B, DCC_INDEPENDENT_128B, DCC_MAX_COMPRESSED_BLOCK=64B, PIPE_XOR_BITS=5, PACKERS=5)",
        ),
        (0x0200_0000_28a0_1f04, "AMD(GFX11, GFX11_256K_R_X, PIPE_XOR_BITS=5, PACKERS=5)"),
        (
            0x0200_0000_28a6_bb04,
            "AMD(GFX11, GFX9_64K_R_X, DCC, DCC_PIPE_ALIGN, DCC_INDEPENDENT_128B, DCC_MAX_COMPRESSED_BLOCK=128B, PIPE_XOR_BITS=5, PACKERS=5)",
        ),
        (
            0x0200_0000_28a6_7b04,
            "AMD(GFX11, GFX9_64K_R_X, DCC, DCC_RETILE, DCC_INDEPENDENT_128B, DCC_MAX_COMPRESSED_BLOCK=128B, PIPE_XOR_BITS=5, PACKERS=5)",
        ),
        (
            0x0200_0000_28a3_7b04,
            "AMD(GFX11, GFX9_64K_R_X, DCC, DCC_RETILE, DCC_INDEPENDENT_64B, DCC_INDEPENDENT_128B, DCC_MAX_COMPRESSED_BLOCK=64B, PIPE_XOR_BITS=5, PACKERS=5)",
        ),
        (0x0200_0000_28a0_1b04, "AMD(GFX11, GFX9_64K_R_X, PIPE_XOR_BITS=5, PACKERS=5)"),
    ];
    for &(raw, want) in cases {
        let m = Modifier::from_raw(raw);
        assert_eq!(assert_well_formed(m), want, "{raw:#018x}");
        if m.vendor_id() == amd::VENDOR {
            assert_eq!(m.kernel_label(), format!("{want} ({})", m.to_hex()));
            assert_eq!(m.as_amd().map(Modifier::amd), Some(m));
        }
    }
    for h in 0..=5u8 {
        let m = Modifier::from_raw(0x0300_0000_0060_6010 + h as u64);
        assert_eq!(assert_well_formed(m), format!("NVIDIA_BLOCK_LINEAR_2D(c=0,s=1,g=2,k=0x6,h={h})"));
        assert_eq!(m.kernel_label(), format!("NVIDIA_BLOCK_LINEAR_2D(h={h}, k=6, g=2, s=1, c=0) ({})", m.to_hex()));
        assert_eq!(eval(&format!("DRM_FORMAT_MOD_NVIDIA_BLOCK_LINEAR_2D(0, 1, 2, 6, {h})")), m.raw());
    }
}

const AMD_FIELDS: [&str; 14] = [
    "TILE_VERSION",
    "TILE",
    "DCC",
    "DCC_RETILE",
    "DCC_PIPE_ALIGN",
    "DCC_INDEPENDENT_64B",
    "DCC_INDEPENDENT_128B",
    "DCC_MAX_COMPRESSED_BLOCK",
    "DCC_CONSTANT_ENCODE",
    "PIPE_XOR_BITS",
    "BANK_XOR_BITS",
    "PACKERS",
    "RB",
    "PIPE",
];

fn amd_field(a: &AmdModifier, field: &str) -> u64 {
    match field {
        "TILE_VERSION" => a.tile_version as u64,
        "TILE" => a.tile as u64,
        "DCC" => a.dcc as u64,
        "DCC_RETILE" => a.dcc_retile as u64,
        "DCC_PIPE_ALIGN" => a.dcc_pipe_align as u64,
        "DCC_INDEPENDENT_64B" => a.dcc_independent_64b as u64,
        "DCC_INDEPENDENT_128B" => a.dcc_independent_128b as u64,
        "DCC_MAX_COMPRESSED_BLOCK" => a.dcc_max_compressed_block as u64,
        "DCC_CONSTANT_ENCODE" => a.dcc_constant_encode as u64,
        "PIPE_XOR_BITS" => a.pipe_xor_bits as u64,
        "BANK_XOR_BITS" => a.bank_xor_bits as u64,
        "PACKERS" => a.packers as u64,
        "RB" => a.rb as u64,
        "PIPE" => a.pipe as u64,
        other => panic!("{other}"),
    }
}

fn amd_from_fields(values: &HashMap<&str, u64>) -> AmdModifier {
    let small = |f: &str| values[f] as u8;
    let flag = |f: &str| values[f] != 0;
    AmdModifier {
        tile_version: small("TILE_VERSION"),
        tile: small("TILE"),
        dcc: flag("DCC"),
        dcc_retile: flag("DCC_RETILE"),
        dcc_pipe_align: flag("DCC_PIPE_ALIGN"),
        dcc_independent_64b: flag("DCC_INDEPENDENT_64B"),
        dcc_independent_128b: flag("DCC_INDEPENDENT_128B"),
        dcc_max_compressed_block: small("DCC_MAX_COMPRESSED_BLOCK"),
        dcc_constant_encode: flag("DCC_CONSTANT_ENCODE"),
        pipe_xor_bits: small("PIPE_XOR_BITS"),
        bank_xor_bits: small("BANK_XOR_BITS"),
        packers: small("PACKERS"),
        rb: small("RB"),
        pipe: small("PIPE"),
    }
}

/// Random field values, each within the header's `AMD_FMT_MOD_*_MASK`, built with
/// `AMD_FMT_MOD_SET` and read back with `AMD_FMT_MOD_GET` by the header, against
/// [`Modifier::amd`] and [`Modifier::as_amd`].
#[test]
fn amd_fields_round_trip_through_the_header() {
    let masks: HashMap<&str, u64> = AMD_FIELDS.iter().map(|f| (*f, eval(&format!("AMD_FMT_MOD_{f}_MASK")))).collect();
    let mut rng = Rng(41);
    for _ in 0..300 {
        let values: HashMap<&str, u64> = AMD_FIELDS.iter().map(|f| (*f, rng.next() & masks[f])).collect();
        let expr = std::iter::once("AMD_FMT_MOD".to_owned())
            .chain(AMD_FIELDS.iter().map(|f| format!("AMD_FMT_MOD_SET({f}, {})", values[f])))
            .collect::<Vec<_>>()
            .join(" | ");
        let raw = eval(&expr);
        let fields = amd_from_fields(&values);
        let m = Modifier::from_raw(raw);
        assert_eq!(Modifier::amd(fields), m, "{expr}");
        let decoded = m.as_amd().unwrap_or_else(|| panic!("{expr}: not AMD"));
        assert_eq!(decoded, fields);
        for f in AMD_FIELDS {
            assert_eq!(eval(&format!("AMD_FMT_MOD_GET({f}, {raw:#x}ULL)")), amd_field(&decoded, f), "{f} of {raw:#x}");
        }
        assert!(!m.display_name().is_empty());
    }
    // Bits 55:36 are reserved: such a modifier has no fields and is shown raw.
    let reserved = Modifier::from_raw(0x0200_0010_0000_1b04);
    assert_eq!(reserved.as_amd(), None);
    assert_malformed(reserved, "AMD(GFX11, GFX9_64K_R_X, PIPE_XOR_BITS=0, PACKERS=0, reserved bits 0x1000000000)");
}

/// Every tile version, tile and DCC block size the header defines gets its macro's suffix
/// in the name: the GFX9 tiles with GFX9 to GFX11, GFX11's with GFX11, GFX12's with GFX12.
#[test]
fn amd_names_are_the_header_constants() {
    let versions = constants("AMD_FMT_MOD_TILE_VER_");
    assert!(versions.len() >= 5, "{versions:?}");
    let gfx = |name: &str| versions.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("{name}"));
    let tiles: Vec<(String, u64)> = constants("AMD_FMT_MOD_TILE_").into_iter().filter(|(n, _)| !n.starts_with("VER_") && !n.starts_with("VERSION")).collect();
    assert!(tiles.len() >= 8, "{tiles:?}");
    let mut named = 0;
    for (tile, t) in &tiles {
        let generation = tile.split('_').next().unwrap_or_default();
        let range = match generation {
            "GFX9" => gfx("GFX9")..=gfx("GFX11"),
            "GFX11" => gfx("GFX11")..=gfx("GFX11"),
            "GFX12" => gfx("GFX12")..=gfx("GFX12"),
            other => panic!("tile {tile} of an unknown generation {other}"),
        };
        for (version, v) in &versions {
            let m = Modifier::from_raw(eval(&format!("AMD_FMT_MOD | AMD_FMT_MOD_SET(TILE_VERSION, {v}) | AMD_FMT_MOD_SET(TILE, {t})")));
            if range.contains(v) {
                let name = assert_well_formed(m);
                assert!(name.starts_with(&format!("AMD({version}, {tile}")), "{name}");
                named += 1;
            } else {
                assert_malformed(m, &format!("AMD({version}, unknown tile {t})"));
            }
        }
    }
    assert!(named >= 18, "{named}");
    for (block, b) in constants("AMD_FMT_MOD_DCC_BLOCK_") {
        let m = Modifier::from_raw(eval(&format!(
            "AMD_FMT_MOD | AMD_FMT_MOD_SET(TILE_VERSION, AMD_FMT_MOD_TILE_VER_GFX10) | AMD_FMT_MOD_SET(TILE, AMD_FMT_MOD_TILE_GFX9_64K_S_X) | \
             AMD_FMT_MOD_SET(DCC, 1) | AMD_FMT_MOD_SET(DCC_MAX_COMPRESSED_BLOCK, {b}) | AMD_FMT_MOD_SET(PIPE_XOR_BITS, 4)"
        )));
        assert_eq!(assert_well_formed(m), format!("AMD(GFX10, GFX9_64K_S_X, DCC, DCC_MAX_COMPRESSED_BLOCK={block}, PIPE_XOR_BITS=4)"));
    }
    // GFX12 as the kernel lists it: DCC with a maximum compressed block at 19:18.
    let gfx12 = Modifier::from_raw(eval(
        "AMD_FMT_MOD | AMD_FMT_MOD_SET(TILE_VERSION, AMD_FMT_MOD_TILE_VER_GFX12) | AMD_FMT_MOD_SET(TILE, AMD_FMT_MOD_TILE_GFX12_256K_2D) | \
         AMD_FMT_MOD_SET(DCC, 1) | AMD_FMT_MOD_SET(DCC_MAX_COMPRESSED_BLOCK, AMD_FMT_MOD_DCC_BLOCK_128B)",
    ));
    assert_eq!(assert_well_formed(gfx12), "AMD(GFX12, GFX12_256K_2D, DCC, DCC_MAX_COMPRESSED_BLOCK=128B)");
}

/// Which fields each version carries, as the header's comment says (PACKERS also on GFX11,
/// as the kernel builds GFX11's modifiers).
#[test]
fn amd_fields_belong_to_their_versions() {
    let set = |fields: &str| Modifier::from_raw(eval(&format!("AMD_FMT_MOD | {fields}")));
    let gfx9_dcc = set(
        "AMD_FMT_MOD_SET(TILE_VERSION, AMD_FMT_MOD_TILE_VER_GFX9) | AMD_FMT_MOD_SET(TILE, AMD_FMT_MOD_TILE_GFX9_64K_S_X) | AMD_FMT_MOD_SET(DCC, 1) | \
         AMD_FMT_MOD_SET(DCC_RETILE, 1) | AMD_FMT_MOD_SET(DCC_CONSTANT_ENCODE, 1) | AMD_FMT_MOD_SET(DCC_MAX_COMPRESSED_BLOCK, AMD_FMT_MOD_DCC_BLOCK_256B) | \
         AMD_FMT_MOD_SET(PIPE_XOR_BITS, 2) | AMD_FMT_MOD_SET(BANK_XOR_BITS, 3) | AMD_FMT_MOD_SET(RB, 1) | AMD_FMT_MOD_SET(PIPE, 2)",
    );
    assert_eq!(
        assert_well_formed(gfx9_dcc),
        "AMD(GFX9, GFX9_64K_S_X, DCC, DCC_RETILE, DCC_MAX_COMPRESSED_BLOCK=256B, DCC_CONSTANT_ENCODE, PIPE_XOR_BITS=2, BANK_XOR_BITS=3, RB=1, PIPE=2)"
    );
    // RB and PIPE only with DCC, PIPE only with DCC_RETILE or DCC_PIPE_ALIGN.
    let gfx9_dcc_no_align = set(
        "AMD_FMT_MOD_SET(TILE_VERSION, AMD_FMT_MOD_TILE_VER_GFX9) | AMD_FMT_MOD_SET(TILE, AMD_FMT_MOD_TILE_GFX9_64K_R_X) | AMD_FMT_MOD_SET(DCC, 1) | \
         AMD_FMT_MOD_SET(RB, 1) | AMD_FMT_MOD_SET(PIPE, 2)",
    );
    assert_malformed(
        gfx9_dcc_no_align,
        "AMD(GFX9, GFX9_64K_R_X, DCC, DCC_MAX_COMPRESSED_BLOCK=64B, PIPE_XOR_BITS=0, BANK_XOR_BITS=0, RB=1, PIPE=2 unused here)",
    );
    let gfx10_bank = set(
        "AMD_FMT_MOD_SET(TILE_VERSION, AMD_FMT_MOD_TILE_VER_GFX10) | AMD_FMT_MOD_SET(TILE, AMD_FMT_MOD_TILE_GFX9_64K_R_X) | AMD_FMT_MOD_SET(BANK_XOR_BITS, 2) | \
         AMD_FMT_MOD_SET(PACKERS, 1)",
    );
    assert_malformed(gfx10_bank, "AMD(GFX10, GFX9_64K_R_X, PIPE_XOR_BITS=0, BANK_XOR_BITS=2 unused here, PACKERS=1 unused here)");
    // No XOR on a tile that is not _X.
    let plain_xor = set("AMD_FMT_MOD_SET(TILE_VERSION, AMD_FMT_MOD_TILE_VER_GFX9) | AMD_FMT_MOD_SET(TILE, AMD_FMT_MOD_TILE_GFX9_64K_D) | AMD_FMT_MOD_SET(PIPE_XOR_BITS, 1)");
    assert_malformed(plain_xor, "AMD(GFX9, GFX9_64K_D, PIPE_XOR_BITS=1 unused here)");
    // The DCC sub-fields only with DCC; DCC_PIPE_ALIGN only without DCC_RETILE.
    let retile_alone = set("AMD_FMT_MOD_SET(TILE_VERSION, AMD_FMT_MOD_TILE_VER_GFX11) | AMD_FMT_MOD_SET(TILE, AMD_FMT_MOD_TILE_GFX9_64K_S) | AMD_FMT_MOD_SET(DCC_RETILE, 1)");
    assert_malformed(retile_alone, "AMD(GFX11, GFX9_64K_S, DCC_RETILE without DCC)");
    let both = set(
        "AMD_FMT_MOD_SET(TILE_VERSION, AMD_FMT_MOD_TILE_VER_GFX11) | AMD_FMT_MOD_SET(TILE, AMD_FMT_MOD_TILE_GFX9_64K_D) | AMD_FMT_MOD_SET(DCC, 1) | \
         AMD_FMT_MOD_SET(DCC_RETILE, 1) | AMD_FMT_MOD_SET(DCC_PIPE_ALIGN, 1) | AMD_FMT_MOD_SET(DCC_MAX_COMPRESSED_BLOCK, 3)",
    );
    assert_malformed(
        both,
        "AMD(GFX11, GFX9_64K_D, DCC, DCC_RETILE, DCC_PIPE_ALIGN, DCC_PIPE_ALIGN with DCC_RETILE, DCC_MAX_COMPRESSED_BLOCK=3)",
    );
    // Tile version 0 is "reserved for GFX8 and older", which have no modifiers.
    assert_malformed(Modifier::from_raw(eval("AMD_FMT_MOD")), "AMD(unknown tile version 0)");
    assert_malformed(Modifier::from_raw(0x0200_0000_0000_0009), "AMD(unknown tile version 9)");
}

/// Every AFBC superblock size with every set of the header's AFBC flags, and every AFRC
/// coding-unit size and layout, built with the header's macros.
#[test]
fn arm_names_are_the_header_constants() {
    let sizes: Vec<_> = constants("AFBC_FORMAT_MOD_BLOCK_SIZE_");
    let flags: Vec<_> = constants("AFBC_FORMAT_MOD_").into_iter().filter(|(n, _)| !n.starts_with("BLOCK_SIZE")).collect();
    assert!(sizes.len() >= 4 && flags.len() >= 9, "{sizes:?} {flags:?}");
    for (size, _) in &sizes {
        for subset in 0u32..(1 << flags.len()) {
            let chosen: Vec<&String> = flags.iter().enumerate().filter(|(i, _)| subset & (1 << i) != 0).map(|(_, (n, _))| n).collect();
            let mode = std::iter::once(format!("AFBC_FORMAT_MOD_BLOCK_SIZE_{size}"))
                .chain(chosen.iter().map(|f| format!("AFBC_FORMAT_MOD_{f}")))
                .collect::<Vec<_>>()
                .join(" | ");
            let m = Modifier::from_raw(eval(&format!("DRM_FORMAT_MOD_ARM_AFBC({mode})")));
            let mut want = vec![format!("BLOCK_SIZE={size}")];
            want.extend(chosen.iter().map(|f| f.to_string()));
            assert_eq!(assert_well_formed(m), format!("ARM_AFBC({})", want.join(", ")));
            assert_macro_evaluates_back(m);
        }
    }
    let cus = constants("AFRC_FORMAT_MOD_CU_SIZE_");
    assert!(cus.len() >= 3, "{cus:?}");
    for (p0, _) in &cus {
        for p12 in std::iter::once(None).chain(cus.iter().map(|(n, _)| Some(n))) {
            for scan in [false, true] {
                let mut terms = vec![format!("AFRC_FORMAT_MOD_CU_SIZE_P0(AFRC_FORMAT_MOD_CU_SIZE_{p0})")];
                let mut want = vec![format!("P0=CU_{p0}")];
                if let Some(p12) = p12 {
                    terms.push(format!("AFRC_FORMAT_MOD_CU_SIZE_P12(AFRC_FORMAT_MOD_CU_SIZE_{p12})"));
                    want.push(format!("P12=CU_{p12}"));
                }
                if scan {
                    terms.push("AFRC_FORMAT_MOD_LAYOUT_SCAN".to_owned());
                }
                want.push(if scan { "SCAN" } else { "ROT" }.to_owned());
                let m = Modifier::from_raw(eval(&format!("DRM_FORMAT_MOD_ARM_AFRC({})", terms.join(" | "))));
                assert_eq!(assert_well_formed(m), format!("ARM_AFRC({})", want.join(", ")));
                assert_macro_evaluates_back(m);
            }
        }
    }
    // No superblock size, or no plane-0 coding unit: shown raw.
    assert_malformed(Modifier::from_raw(eval("DRM_FORMAT_MOD_ARM_AFBC(AFBC_FORMAT_MOD_YTR)")), "ARM_AFBC(unknown BLOCK_SIZE 0, YTR)");
    assert_malformed(
        Modifier::from_raw(eval("DRM_FORMAT_MOD_ARM_AFBC(AFBC_FORMAT_MOD_BLOCK_SIZE_16x16 | (1ULL << 40))")),
        "ARM_AFBC(BLOCK_SIZE=16x16, undefined bits 0x10000000000)",
    );
    assert_malformed(Modifier::from_raw(eval("DRM_FORMAT_MOD_ARM_AFRC(AFRC_FORMAT_MOD_LAYOUT_SCAN)")), "ARM_AFRC(no P0 coding unit size, SCAN)");
    assert_malformed(Modifier::from_raw(eval("DRM_FORMAT_MOD_ARM_CODE(DRM_FORMAT_MOD_ARM_TYPE_MISC, 2)")), "ARM_MISC(unknown)");
    assert_malformed(Modifier::from_raw(eval("DRM_FORMAT_MOD_ARM_CODE(7, 1)")), "ARM(unknown type 7)");
}

/// Broadcom's SAND column heights, Vivante's tile-status and compression extensions, and
/// Amlogic's FBC layouts and options, built with the header's macros.
#[test]
fn broadcom_vivante_amlogic_names_are_the_header_constants() {
    let mut rng = Rng(7);
    for w in [32, 64, 128, 256] {
        for v in [0, 1, 96, 4096, rng.below(1 << 48), (1 << 48) - 1] {
            let m = Modifier::from_raw(eval(&format!("DRM_FORMAT_MOD_BROADCOM_SAND{w}_COL_HEIGHT({v}ULL)")));
            let want = if v == 0 { format!("BROADCOM_SAND{w}") } else { format!("BROADCOM_SAND{w}_COL_HEIGHT({v})") };
            assert_eq!(assert_well_formed(m), want);
            assert_macro_evaluates_back(m);
            if v < 1 << 31 {
                assert_eq!(eval(&format!("fourcc_mod_broadcom_param({:#x}ULL)", m.raw())), v);
            }
        }
    }
    assert_malformed(Modifier::from_raw(eval("fourcc_mod_broadcom_code(6, 3)")), "BROADCOM_UIF(parameter 0x3 it does not take)");
    assert_malformed(Modifier::from_raw(eval("fourcc_mod_broadcom_code(9, 0)")), "BROADCOM(unknown type 9)");

    let tilings = constants("DRM_FORMAT_MOD_VIVANTE_");
    let ts = constants("VIVANTE_MOD_TS_");
    let comp = constants("VIVANTE_MOD_COMP_");
    assert!(tilings.len() >= 4 && ts.len() >= 4 && !comp.is_empty(), "{tilings:?} {ts:?} {comp:?}");
    for (t, _) in &tilings {
        for s in std::iter::once(None).chain(ts.iter().map(|(n, _)| Some(n))) {
            for c in std::iter::once(None).chain(comp.iter().map(|(n, _)| Some(n))) {
                let expr = std::iter::once(format!("DRM_FORMAT_MOD_VIVANTE_{t}"))
                    .chain(s.map(|s| format!("VIVANTE_MOD_TS_{s}")))
                    .chain(c.map(|c| format!("VIVANTE_MOD_COMP_{c}")))
                    .collect::<Vec<_>>()
                    .join(" | ");
                let m = Modifier::from_raw(eval(&expr));
                let ext: Vec<String> = s.map(|s| format!("TS_{s}")).into_iter().chain(c.map(|c| format!("COMP_{c}"))).collect();
                let shown = if ext.is_empty() { format!("VIVANTE_{t}") } else { format!("VIVANTE_{t}({})", ext.join(", ")) };
                if s.is_none() && c.is_some() {
                    // Compression "depend[s] on a TS modifier being present".
                    assert_malformed(m, &format!("VIVANTE_{t}({}, compression without TS)", ext.join(", ")));
                } else {
                    assert_eq!(assert_well_formed(m), shown);
                    assert_eq!(m.macro_name().as_deref(), Some(expr.as_str()));
                }
            }
        }
    }

    let layouts = constants("AMLOGIC_FBC_LAYOUT_");
    let options = constants("AMLOGIC_FBC_OPTION_");
    assert!(layouts.len() >= 2 && !options.is_empty());
    for (l, _) in &layouts {
        for o in std::iter::once(None).chain(options.iter().map(|(n, _)| Some(n))) {
            let arg = o.map_or_else(|| "0".to_owned(), |o| format!("AMLOGIC_FBC_OPTION_{o}"));
            let m = Modifier::from_raw(eval(&format!("DRM_FORMAT_MOD_AMLOGIC_FBC(AMLOGIC_FBC_LAYOUT_{l}, {arg})")));
            let want = match o {
                Some(o) => format!("AMLOGIC_FBC(LAYOUT={l}, OPTIONS={o})"),
                None => format!("AMLOGIC_FBC(LAYOUT={l})"),
            };
            assert_eq!(assert_well_formed(m), want);
            assert_macro_evaluates_back(m);
        }
    }
}

#[test]
fn nvidia_block_linear_round_trips() {
    for h in 0..=5 {
        let m = Modifier::nvidia_16bx2_block(h);
        assert_eq!(m.raw(), 0x0300_0000_0000_0010 | h as u64);
        assert_eq!(m.name().unwrap(), format!("NVIDIA_16BX2_BLOCK({h})"));
        // drm_fourcc knows these six by other names; ours must agree on the value.
        assert!(!matches!(m.known(), DrmModifier::Unrecognized(_)));
        assert_eq!(m.raw(), eval(&format!("DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK({h})")));
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

/// `DRM_FORMAT_MOD_NVIDIA_BLOCK_LINEAR_2D(c, s, g, k, h)` with random parameters within its
/// masks; the values the header reserves are shown raw.
#[test]
fn nvidia_block_linear_follows_the_header() {
    let mut rng = Rng(3);
    for _ in 0..500 {
        let p = NvidiaBlockLinear {
            log2_block_height: rng.below(16) as u8,
            page_kind: if rng.below(4) == 0 { 0 } else { rng.below(256) as u8 },
            gob_kind: rng.below(4) as u8,
            sector_layout: rng.below(2) as u8,
            compression: rng.below(8) as u8,
        };
        let m = Modifier::nvidia_block_linear(p);
        let (c, s, g, k, h) = (p.compression, p.sector_layout, p.gob_kind, p.page_kind, p.log2_block_height);
        assert_eq!(m.raw(), eval(&format!("DRM_FORMAT_MOD_NVIDIA_BLOCK_LINEAR_2D({c}, {s}, {g}, {k}, {h})")));
        assert_eq!(m.as_nvidia_block_linear(), Some(p));
        let mut problems = Vec::new();
        let mut shown = if p.is_plain_16bx2() {
            if h > 5 {
                problems.push(format!("v={h} beyond THIRTYTWO_GOBS"));
            }
            format!("NVIDIA_16BX2_BLOCK({h}")
        } else {
            if g == 3 {
                problems.push("reserved g=3".to_owned());
            }
            if c >= 5 {
                problems.push(format!("reserved c={c}"));
            }
            format!("NVIDIA_BLOCK_LINEAR_2D(c={c},s={s},g={g},k={k:#x},h={h}")
        };
        let sep = if p.is_plain_16bx2() { ", " } else { "," };
        for problem in &problems {
            shown = format!("{shown}{sep}{problem}");
        }
        shown.push(')');
        if problems.is_empty() {
            assert_eq!(assert_well_formed(m), shown);
        } else {
            assert_malformed(m, &shown);
        }
    }
    // Bits 8:5 and 11:9 must be zero, and so must 55:26.
    for bit in [5, 9, 11, 26, 40, 55] {
        let m = Modifier::from_raw(Modifier::nvidia_16bx2_block(2).raw() | 1 << bit);
        assert_eq!(m.as_nvidia_block_linear(), None);
        assert_malformed(m, &format!("NVIDIA_16BX2_BLOCK(2, reserved bits {:#x})", 1u64 << bit));
    }
    assert_malformed(Modifier::from_raw(0x0300_0000_0000_0002), "NVIDIA(unknown)");
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
    assert_eq!(m.kernel_label(), "0x7800000000000001");
}

#[test]
fn unknown_values_of_known_vendors_are_shown_raw() {
    assert_malformed(Modifier::from_raw(0x0100_0000_0000_0010), "INTEL(unknown)");
    assert_malformed(Modifier::from_raw(0x0000_0000_0000_0005), "NONE(unknown)");
    assert_malformed(Modifier::from_raw(0x0400_0000_0000_0003), "SAMSUNG(unknown)");
    assert_malformed(Modifier::from_raw(0x0500_0000_0000_0004), "QCOM(unknown)");
    assert_malformed(Modifier::from_raw(0x0900_0000_0000_0002), "ALLWINNER(unknown)");
    assert_malformed(Modifier::from_raw(0x0600_0000_0000_0000), "VIVANTE(unknown tiling 0x0)");
    assert_malformed(Modifier::from_raw(0x0a00_0000_0000_0003), "AMLOGIC_FBC(unknown LAYOUT 3)");
}

#[test]
fn kernel_labels_are_drm_infos() {
    assert_eq!(Modifier::from_raw(0x0100_0000_0000_0001).kernel_label(), "I915_FORMAT_MOD_X_TILED (0x0100000000000001)");
    assert_eq!(Modifier::LINEAR.kernel_label(), "DRM_FORMAT_MOD_LINEAR (0x0000000000000000)");
    assert_eq!(Modifier::from(DrmModifier::Samsung_64_32_tile).macro_name().as_deref(), Some("DRM_FORMAT_MOD_SAMSUNG_64_32_TILE"));
    assert_eq!(Modifier::nvidia_16bx2_block(4).macro_name().as_deref(), Some("DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(4)"));
    assert_eq!(Modifier::from_raw(0x7800_0000_0000_0001).kernel_label(), "0x7800000000000001");
}

/// Every spelling of a modifier, checked: whatever the value, a non-empty display name, a
/// kernel label with the hex, the hex in the display name unless the header defines the
/// value, and a macro name exactly when there is a name.
fn check_any(m: Modifier) {
    let display = m.display_name();
    assert!(!display.is_empty());
    let hex = m.to_hex();
    assert!(m.kernel_label().contains(&hex), "{}", m.kernel_label());
    match m.name() {
        Some(name) => {
            assert_eq!(display, name);
            assert!(!display.contains(&hex));
            assert!(m.macro_name().is_some(), "{display}");
        }
        None => {
            assert!(display.ends_with(&hex), "{display}");
            assert_eq!(m.macro_name(), None, "{display}");
        }
    }
    assert!(!format!("{m:?}").is_empty());
}

/// A few hundred thousand random values, and every vendor byte with random payloads (dense,
/// sparse and small, to reach the fields): no panic, and every spelling as promised.
#[test]
fn any_u64_gets_a_name_or_its_hex() {
    let mut rng = Rng(0x4141);
    for _ in 0..300_000 {
        check_any(Modifier::from_raw(rng.next()));
    }
    for vendor in 0..=255u8 {
        for i in 0..400u64 {
            let payload = match i % 4 {
                0 => rng.next(),
                1 => rng.next() & rng.next() & rng.next(),
                2 => rng.below(64),
                _ => (rng.next() & rng.next() & rng.next() & !0xff) | rng.below(16),
            };
            check_any(Modifier::from_vendor(vendor, payload));
        }
    }
}

/// Two modifiers the header defines never share a name: every field with a value is shown.
#[test]
fn names_are_unique() {
    let mut rng = Rng(0x5151);
    let mut seen: HashMap<String, u64> = HashMap::new();
    let amd_tiles = [1, 2, 3, 4, 5, 6, 7, 9, 10, 25, 26, 27, 31];
    for _ in 0..200_000 {
        let m = if rng.below(3) == 0 {
            let tile_version = 1 + (rng.below(5) as u8);
            let tile = amd_tiles[rng.below(amd_tiles.len() as u64) as usize];
            let mut small = |mask: u64| if rng.below(2) == 0 { 0 } else { (rng.next() & mask) as u8 };
            let a = AmdModifier {
                tile_version,
                tile,
                dcc: small(1) != 0,
                dcc_retile: small(1) != 0,
                dcc_pipe_align: small(1) != 0,
                dcc_independent_64b: small(1) != 0,
                dcc_independent_128b: small(1) != 0,
                dcc_max_compressed_block: small(3),
                dcc_constant_encode: small(1) != 0,
                pipe_xor_bits: small(7),
                bank_xor_bits: small(7),
                packers: small(7),
                rb: small(7),
                pipe: small(7),
            };
            Modifier::amd(a)
        } else {
            let vendor = rng.below(11) as u8;
            let low = if rng.below(2) == 0 { rng.below(9) } else { rng.below(256) };
            let high = rng.next() & rng.next() & rng.next() & !0xff;
            Modifier::from_vendor(vendor, high | low)
        };
        if let Some(name) = m.name() {
            if let Some(other) = seen.insert(name.to_string(), m.raw()) {
                assert_eq!(other, m.raw(), "{name} names both {other:#018x} and {}", m.to_hex());
            }
        }
    }
    // About 3800 with these seeds: most random values are malformed by design.
    assert!(seen.len() > 3_000, "only {} well-formed names met", seen.len());
}
