//! dmabridge's names for the memory layouts it can convert between, and [`TILE_LAYOUTS`]:
//! the one table that says everything about each of them.
//!
//! Most have a DRM modifier. Three V4L2 decoder layouts (Hantro's NV12_4L4, MediaTek's
//! MM21 and Amphion's NV12_8L128) have none, so the kernel cannot name them in a
//! format+modifier pair; they still need detiling, so they get an id here. The names are
//! part of the CLI contract (`dmabridge convert --from samsung-64x32`).
//!
//! A layout's tile geometry, modifier, CLI name, GStreamer name and V4L2 pixel formats are
//! its row of [`TILE_LAYOUTS`]; the geometry ([`crate::tiling::tiled_size`]), the V4L2 table
//! ([`crate::peers::v4l2::V4L2_FORMATS`]), the GStreamer element's and benchmark's format
//! names and the CLI's parsing all read them from there. Adding a layout is one row here,
//! plus its address function ([`AddressKind`]) where no existing one fits.

use std::fmt;
use std::str::FromStr;

use drm_fourcc::DrmModifier;

use crate::tiling::AddressKind;
use crate::{Fourcc, Modifier};

/// How wide a tile is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileWidth {
    /// A fixed number of bytes, whatever the format.
    Bytes(u32),
    /// A number of samples of the plane (Vivante's 4x4 pixels): bytes = samples x cpp.
    Samples(u32),
}

/// The tile of one plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    pub width: TileWidth,
    /// Height in rows (1 for linear; the block height for NVIDIA block linear).
    pub height: u32,
    /// A plane's row is padded to a multiple of this many tiles (GStreamer pads NV12_64Z32
    /// rows to 128 bytes, so that every row of tiles holds whole 2x2 Z groups:
    /// gst_video_info fill_planes, `GST_ROUND_UP_128 (width)`).
    pub row_tiles: u32,
}

impl Tile {
    /// A tile `width` bytes by `height` rows, rows padded to whole tiles.
    pub const fn bytes(width: u32, height: u32) -> Tile {
        Tile { width: TileWidth::Bytes(width), height, row_tiles: 1 }
    }

    /// Width in bytes for a plane of `cpp` bytes per sample.
    pub const fn width_bytes(&self, cpp: u32) -> u32 {
        match self.width {
            TileWidth::Bytes(b) => b,
            TileWidth::Samples(n) => n * cpp,
        }
    }
}

/// A V4L2 pixel format that carries a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V4l2Name {
    /// The `V4L2_PIX_FMT_` suffix: `NV12MT`.
    pub name: &'static str,
    /// The pixel format code: `TM12`.
    pub code: [u8; 4],
    /// Buffers the planes are spread over (1, or one per plane for the `M` variants).
    pub mem_planes: u8,
}

/// One layout: everything dmabridge and its peers call it, and its tile geometry.
#[derive(Debug, Clone, Copy)]
pub struct LayoutInfo {
    pub layout: TileLayout,
    /// The CLI name (`dmabridge convert --from samsung-64x32`).
    pub name: &'static str,
    /// The DRM modifier, as drm-fourcc names it (`DrmModifier::Unrecognized` for a value
    /// drm-fourcc lacks); `None`: the kernel defines none.
    pub drm: Option<DrmModifier>,
    /// The address function of its planes.
    pub address: AddressKind,
    /// The tile of plane 0 and of the other planes.
    pub tiles: [Tile; 2],
    /// The one fourcc the layout is defined for, if it is not defined for all. The V4L2 and
    /// GStreamer decoder layouts are defined on the 8-bit NV12 planes; a 16-bit P010 sample
    /// would straddle the tile geometry those decoders use (they have separate 10-bit
    /// variants), so anything else is refused rather than guessed.
    pub only: Option<Fourcc>,
    /// GStreamer's name of `only` in this layout (`gst_video_format_to_string`): `NV12_64Z32`.
    pub gst: Option<&'static str>,
    /// V4L2's pixel formats of `only` in this layout.
    pub v4l2: &'static [V4l2Name],
}

/// A row of the table as written: a [`LayoutInfo`] but for its `layout`, which
/// [`tile_layouts!`] gives it (the variant named beside the row).
#[derive(Debug, Clone, Copy)]
struct LayoutRow {
    name: &'static str,
    drm: Option<DrmModifier>,
    address: AddressKind,
    tiles: [Tile; 2],
    only: Option<Fourcc>,
    gst: Option<&'static str>,
    v4l2: &'static [V4l2Name],
}

impl LayoutRow {
    const fn of(self, layout: TileLayout) -> LayoutInfo {
        let LayoutRow { name, drm, address, tiles, only, gst, v4l2 } = self;
        LayoutInfo { layout, name, drm, address, tiles, only, gst, v4l2 }
    }

    /// A layout defined for every fourcc, with no GStreamer or V4L2 name.
    const fn any_format(name: &'static str, drm: DrmModifier, address: AddressKind, tiles: [Tile; 2]) -> LayoutRow {
        LayoutRow { name, drm: Some(drm), address, tiles, only: None, gst: None, v4l2: &[] }
    }
}

const fn same(t: Tile) -> [Tile; 2] {
    [t, t]
}

const fn nvidia(n: u8, name: &'static str, drm: DrmModifier) -> LayoutInfo {
    LayoutRow::any_format(name, drm, AddressKind::NvidiaBlock, same(Tile::bytes(64, 8 << n))).of(TileLayout::NvidiaBlockLinear(n))
}

const fn nv12_decoder(name: &'static str, drm: Option<DrmModifier>, tiles: [Tile; 2], gst: &'static str, v4l2: &'static [V4l2Name]) -> LayoutRow {
    LayoutRow { name, drm, address: AddressKind::RowMajorTiles, tiles, only: Some(Fourcc::NV12), gst: Some(gst), v4l2 }
}

const fn v4l2(name: &'static str, code: &[u8; 4], mem_planes: u8) -> V4l2Name {
    V4l2Name { name, code: *code, mem_planes }
}

/// Declares [`TileLayout`] and [`TILE_LAYOUTS`] from one list, so that a layout is its row
/// and nothing else: `Variant => row`, the row being the [`LayoutInfo`] but for its
/// `layout` (the variant beside it), with the variant's doc (and `cfg`) above it. The one
/// layout with a parameter, NVIDIA's block height, is written out once, after the rows
/// (in their brackets).
macro_rules! tile_layouts {
    (
        [ $( $(#[doc = $doc:literal])* $(#[cfg($cfg:meta)])? $variant:ident => $row:expr, )* ]
        $(#[doc = $pdoc:literal])* $pvariant:ident($arg:ty) => [ $($prow:expr,)* ]
    ) => {
        /// A layout dmabridge knows the addressing of. Its data is its row of [`TILE_LAYOUTS`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum TileLayout {
            $( $(#[doc = $doc])* $(#[cfg($cfg)])? $variant, )*
            $(#[doc = $pdoc])* $pvariant($arg),
        }

        /// Every layout dmabridge converts, in a stable order (that of [`TileLayout::ALL`]).
        /// Every modifier comes from drm-fourcc; it lacks none of these. The three V4L2
        /// decoder layouts have no modifier at all, and V4L2 tile alignments are from the
        /// kernel's pixfmt-yuv-planar documentation.
        pub const TILE_LAYOUTS: &[LayoutInfo] = &[
            $( $(#[cfg($cfg)])? LayoutRow::of($row, TileLayout::$variant), )*
            $($prow,)*
        ];
    };
}

tile_layouts! {
    [
        Linear => LayoutRow::any_format("linear", DrmModifier::Linear, AddressKind::Linear, same(Tile::bytes(1, 1))),
        /// `I915_FORMAT_MOD_X_TILED`.
        I915X => LayoutRow::any_format("i915-x", DrmModifier::I915_x_tiled, AddressKind::RowMajorTiles, same(Tile::bytes(512, 8))),
        /// `I915_FORMAT_MOD_Y_TILED`.
        I915Y => LayoutRow::any_format("i915-y", DrmModifier::I915_y_tiled, AddressKind::I915Y, same(Tile::bytes(128, 32))),
        /// `DRM_FORMAT_MOD_VIVANTE_TILED`: 4x4 pixels, so the tile is as wide in bytes as four
        /// samples of the plane.
        VivanteTiled => LayoutRow::any_format("vivante-tiled", DrmModifier::Vivante_tiled, AddressKind::RowMajorTiles, same(Tile { width: TileWidth::Samples(4), height: 4, row_tiles: 1 })),
        /// `DRM_FORMAT_MOD_SAMSUNG_64_32_TILE` (V4L2 NV12MT, GStreamer NV12_64Z32): 64x32 tiles
        /// in Z order; the row is a whole number of Z shapes (2 tiles).
        Samsung64x32 => LayoutRow {
            address: AddressKind::SamsungZFlipZ,
            ..nv12_decoder(
                "samsung-64x32",
                Some(DrmModifier::Samsung_64_32_tile),
                same(Tile { width: TileWidth::Bytes(64), height: 32, row_tiles: 2 }),
                "NV12_64Z32",
                &[v4l2("NV12MT", b"TM12", 2)],
            )
        },
        /// `DRM_FORMAT_MOD_ALLWINNER_TILED` (V4L2/GStreamer NV12_32L32).
        Allwinner32x32 => nv12_decoder("allwinner-32x32", Some(DrmModifier::Allwinner_tiled), same(Tile::bytes(32, 32)), "NV12_32L32", &[v4l2("NV12_32L32", b"ST12", 1)]),
        /// V4L2 NV12_4L4 (Hantro). No DRM modifier.
        Nv12_4L4 => nv12_decoder("nv12-4l4", None, same(Tile::bytes(4, 4)), "NV12_4L4", &[v4l2("NV12_4L4", b"VT12", 1)]),
        /// V4L2 MM21 / GStreamer NV12_16L32S (MediaTek). No DRM modifier. 16x32 luma tiles,
        /// 16x16 chroma tiles (as many as luma has), planes in two buffers.
        Nv12_16L32S => nv12_decoder("nv12-16l32s", None, [Tile::bytes(16, 32), Tile::bytes(16, 16)], "NV12_16L32S", &[v4l2("MM21", b"MM21", 2)]),
        /// V4L2 NV12_8L128 (Amphion). No DRM modifier.
        Nv12_8L128 => nv12_decoder(
            "nv12-8l128",
            None,
            same(Tile::bytes(8, 128)),
            "NV12_8L128",
            &[v4l2("NV12_8L128", b"AT12", 1), v4l2("NV12M_8L128", b"NA12", 2)],
        ),
        /// The made-up layout of the `test-layout` feature, the proof that a layout is its row
        /// plus an address function: modifier vendor 0x7f, which the kernel has not assigned.
        #[cfg(feature = "test-layout")]
        TestInterlaced16x16 => LayoutRow::any_format("test-interlaced-16x16", DrmModifier::Unrecognized(0x7f00_0000_0000_7e57), AddressKind::InterlacedTiles, same(Tile::bytes(16, 16))),
    ]
    /// `DRM_FORMAT_MOD_NVIDIA_16BX2_BLOCK(n)`, blocks 2^n GOBs tall, n in 0..=5.
    NvidiaBlockLinear(u8) => [
        nvidia(0, "nvidia-block-linear-v0", DrmModifier::Nvidia_16bx2_block_one_gob),
        nvidia(1, "nvidia-block-linear-v1", DrmModifier::Nvidia_16bx2_block_two_gob),
        nvidia(2, "nvidia-block-linear-v2", DrmModifier::Nvidia_16bx2_block_four_gob),
        nvidia(3, "nvidia-block-linear-v3", DrmModifier::Nvidia_16bx2_block_eight_gob),
        nvidia(4, "nvidia-block-linear-v4", DrmModifier::Nvidia_16bx2_block_sixteen_gob),
        nvidia(5, "nvidia-block-linear-v5", DrmModifier::Nvidia_16bx2_block_thirtytwo_gob),
    ]
}

/// Why a string names no layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TileLayoutParseError {
    #[error("unknown layout {0:?}: expected a layout name ({names}) or the hex modifier of one", names = layout_names())]
    Unknown(String),
}

fn layout_names() -> String {
    TILE_LAYOUTS.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
}

impl TileLayout {
    /// Every layout, in a stable order (for tests and benchmarks): the rows of [`TILE_LAYOUTS`].
    pub const ALL: [TileLayout; TILE_LAYOUTS.len()] = {
        let mut all = [TileLayout::Linear; TILE_LAYOUTS.len()];
        let mut i = 0;
        while i < all.len() {
            all[i] = TILE_LAYOUTS[i].layout;
            i += 1;
        }
        all
    };

    /// This layout's row; `None` for a layout with no row (NVIDIA block linear beyond v5).
    pub fn info(self) -> Option<&'static LayoutInfo> {
        TILE_LAYOUTS.iter().find(|r| r.layout == self)
    }

    /// The CLI name.
    pub fn name(self) -> String {
        match (self.info(), self) {
            (Some(r), _) => r.name.to_owned(),
            // No row, so no name to parse back; it still prints as what it would be.
            (None, TileLayout::NvidiaBlockLinear(n)) => format!("nvidia-block-linear-v{n}"),
            (None, other) => format!("{other:?}"),
        }
    }

    /// The DRM modifier of this layout, where the kernel defines one.
    pub fn modifier(self) -> Option<Modifier> {
        self.info()?.drm.map(Modifier::from)
    }

    /// The layout a modifier denotes, if dmabridge can convert it.
    pub fn from_modifier(m: Modifier) -> Option<TileLayout> {
        TileLayout::ALL.into_iter().find(|l| l.modifier() == Some(m))
    }

    /// GStreamer's video format name of this layout (`NV12_64Z32`), where GStreamer has one.
    pub fn gst_name(self) -> Option<&'static str> {
        self.info()?.gst
    }

    /// The layout and fourcc a GStreamer video format name (`NV12_64Z32`) denotes.
    pub fn from_gst_name(name: &str) -> Option<(TileLayout, Fourcc)> {
        TILE_LAYOUTS.iter().find(|r| r.gst == Some(name)).and_then(|r| Some((r.layout, r.only?)))
    }
}

impl fmt::Display for TileLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for TileLayout {
    type Err = TileLayoutParseError;

    /// A layout name, or the hex modifier (`0x` + 16 digits) of a layout that has one.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(r) = TILE_LAYOUTS.iter().find(|r| r.name == s) {
            return Ok(r.layout);
        }
        Modifier::parse_hex(s)
            .ok()
            .and_then(TileLayout::from_modifier)
            .ok_or_else(|| TileLayoutParseError::Unknown(s.chars().take(64).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::{tiled_size, PlaneAddress};

    #[test]
    fn every_row_round_trips_and_is_unique() {
        for (i, r) in TILE_LAYOUTS.iter().enumerate() {
            let l = r.layout;
            assert_eq!(TileLayout::ALL[i], l);
            assert_eq!(l.info().map(|x| x.name), Some(r.name), "{l:?} has one row");
            assert_eq!(l.name().parse::<TileLayout>(), Ok(l));
            assert_eq!(l.to_string(), r.name);
            if let Some(m) = l.modifier() {
                assert_eq!(TileLayout::from_modifier(m), Some(l));
                assert_eq!(m.to_hex().parse::<TileLayout>(), Ok(l));
            }
            if let Some(g) = r.gst {
                assert_eq!(TileLayout::from_gst_name(g), Some((l, r.only.expect("a GStreamer name names a fourcc"))));
            }
            assert!(r.v4l2.is_empty() || r.only.is_some(), "{l}: a V4L2 pixel format names a fourcc");
            for other in &TILE_LAYOUTS[i + 1..] {
                assert_ne!(other.layout, l);
                assert_ne!(other.name, r.name);
                assert!(r.gst.is_none() || other.gst != r.gst, "{l}: GStreamer name twice");
                assert!(other.modifier_raw().is_none() || other.modifier_raw() != r.modifier_raw(), "{l}: modifier twice");
            }
        }
    }

    impl LayoutInfo {
        fn modifier_raw(&self) -> Option<u64> {
            self.drm.map(u64::from)
        }
    }

    #[test]
    fn geometry_follows_the_row() {
        for r in TILE_LAYOUTS {
            let fourcc = r.only.unwrap_or(Fourcc::NV12);
            let g = tiled_size(r.layout, fourcc, 70, 45).unwrap_or_else(|e| panic!("{}: {e}", r.name));
            for (p, plane) in g.planes.iter().enumerate() {
                let t = r.tiles[p.min(1)];
                let cpp = crate::format_info(fourcc).unwrap().planes[p].cpp as u32;
                assert_eq!(plane.kind, r.address, "{} plane {p}", r.name);
                assert_eq!((plane.tile_width, plane.tile_height), (t.width_bytes(cpp), t.height), "{} plane {p}", r.name);
                assert_eq!(plane.padded_width_bytes % (t.width_bytes(cpp) * t.row_tiles), 0);
                assert_eq!(plane.padded_rows % t.height, 0);
                assert_eq!(plane.size, plane.padded_width_bytes as u64 * plane.padded_rows as u64);
                // The address function is a bijection of the padded plane onto itself, and
                // has the shape the CPU fast path relies on (see `tiling::address`).
                let a = PlaneAddress::of(plane);
                let (tw, th) = (plane.tile_width, plane.tile_height);
                let tile_bytes = u64::from(tw) * u64::from(th);
                let band_bytes = tile_bytes * u64::from(plane.tiles_x) * if r.address == AddressKind::SamsungZFlipZ { 2 } else { 1 };
                let band_rows = if r.address == AddressKind::SamsungZFlipZ { 2 * th } else { th };
                let run = a.run_bytes().min(tw);
                assert_eq!(a.offset(0, 0), 0, "{} plane {p}: tile (0, 0) comes first", r.name);
                let mut seen = vec![false; plane.size as usize];
                for y in 0..plane.padded_rows {
                    for x in 0..plane.padded_width_bytes {
                        let o = a.checked_offset(x, y).expect("inside the plane");
                        assert!(!seen[o as usize], "{} plane {p}: ({x},{y}) lands on {o} twice", r.name);
                        seen[o as usize] = true;
                        let base = a.offset(x / tw * tw, y / th * th);
                        assert_eq!(base % tile_bytes, 0, "{} plane {p}: tile of ({x},{y}) starts mid-tile", r.name);
                        assert_eq!(o - base, a.offset(x % tw, y % th) - a.offset(0, 0), "{} plane {p}: ({x},{y}) inside its tile", r.name);
                        assert_eq!(o / band_bytes, u64::from(y / band_rows), "{} plane {p}: ({x},{y}) outside its band", r.name);
                        assert_eq!(o, a.offset(x / run * run, y) + u64::from(x % run), "{} plane {p}: ({x},{y}) not in its run", r.name);
                    }
                }
            }
            if let Some(only) = r.only {
                assert!(tiled_size(r.layout, Fourcc::P010, 64, 64).is_err() || only == Fourcc::P010, "{}", r.name);
            }
        }
    }

    /// `KIND_ROW_MAJOR_TILES` for `AddressKind::RowMajorTiles`.
    fn glsl_name(kind: AddressKind) -> String {
        let mut name = String::from("KIND");
        for (i, c) in format!("{kind:?}").chars().enumerate() {
            if i == 0 || c.is_ascii_uppercase() {
                name.push('_');
            }
            name.push(c.to_ascii_uppercase());
        }
        name
    }

    #[test]
    fn the_shaders_kind_numbers_are_the_address_kinds() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../shaders/tiled_address.glsl");
        let glsl = std::fs::read_to_string(path).expect("read shaders/tiled_address.glsl");
        // The test layout's lines count only when the shader is built with it (build.rs
        // defines DMABRIDGE_TEST_LAYOUT with the feature).
        let mut in_test_block = false;
        let mut in_shader = std::collections::BTreeMap::new();
        for line in glsl.lines().map(str::trim) {
            match line {
                "#ifdef DMABRIDGE_TEST_LAYOUT" => in_test_block = true,
                "#endif" => in_test_block = false,
                _ => {
                    let Some(def) = line.strip_prefix("const uint KIND_") else { continue };
                    if in_test_block && !cfg!(feature = "test-layout") {
                        continue;
                    }
                    let (name, value) = def.split_once(" = ").expect("const uint KIND_X = Nu;");
                    let value: u32 = value.trim_end_matches(';').trim_end_matches('u').parse().expect("a number");
                    assert!(in_shader.insert(format!("KIND_{name}"), value).is_none(), "KIND_{name} twice");
                }
            }
        }
        let in_rust: std::collections::BTreeMap<String, u32> =
            TILE_LAYOUTS.iter().map(|r| (glsl_name(r.address), r.address as u32)).collect();
        assert_eq!(in_shader, in_rust, "shaders/tiled_address.glsl's KIND_ constants differ from AddressKind");
    }

    #[test]
    fn modifiers_agree_with_drm_fourcc() {
        let pairs = [
            (TileLayout::I915X, DrmModifier::I915_x_tiled),
            (TileLayout::I915Y, DrmModifier::I915_y_tiled),
            (TileLayout::VivanteTiled, DrmModifier::Vivante_tiled),
            (TileLayout::Samsung64x32, DrmModifier::Samsung_64_32_tile),
            (TileLayout::Allwinner32x32, DrmModifier::Allwinner_tiled),
            (TileLayout::NvidiaBlockLinear(4), DrmModifier::Nvidia_16bx2_block_sixteen_gob),
        ];
        for (l, d) in pairs {
            assert_eq!(l.modifier(), Some(Modifier::from(d)), "{l}");
        }
        for n in 0..=5 {
            assert_eq!(TileLayout::NvidiaBlockLinear(n).modifier(), Some(Modifier::nvidia_16bx2_block(n)));
        }
    }

    #[test]
    fn unknown_names_are_rejected() {
        assert!("nvidia-block-linear-v6".parse::<TileLayout>().is_err());
        assert!("0x0100000000000003".parse::<TileLayout>().is_err()); // Yf: no converter
        assert_eq!(TileLayout::NvidiaBlockLinear(6).info().map(|r| r.name), None);
        assert_eq!(TileLayout::NvidiaBlockLinear(6).modifier(), None);
        let e = "bogus".parse::<TileLayout>().unwrap_err().to_string();
        assert!(e.contains("samsung-64x32") && e.contains("nvidia-block-linear-v5"), "{e}");
    }
}
