//! V4L2 pixel formats: which DRM format+modifier (or dmabridge layout) each one is, how many
//! buffers it spreads its planes over, and the per-plane layout of a `v4l2_format`.
//!
//! V4L2 names memory arrangements that DRM splits in two: `NV12M` is NV12 with each plane in
//! its own buffer (the `M` variants, used through the multi-planar API), `NV12MT` is NV12 in
//! Samsung 64x32 tiles, `NV12_32L32` NV12 in Allwinner 32x32 tiles. Three decoder layouts
//! have no DRM modifier at all (Hantro `NV12_4L4`, MediaTek `MM21`, Amphion `NV12_8L128`):
//! they get a [`TileLayout`] so the copy fallback can detile them, but no [`Format`], and
//! the type says so ([`V4l2Mapping::DmabridgeOnly`]). Two more (`NV12MT_16X16`,
//! `NV12_16L16`) are known but have neither ([`V4l2Mapping::Unmapped`]), so that a request
//! for them gets a precise answer instead of "unknown".
//!
//! V4L2 fourccs are packed like DRM's (`v4l2_fourcc(a, b, c, d)` = `fourcc_code(a, b, c, d)`)
//! but name different things: V4L2 `XR24` (XBGR32) happens to be DRM `XR24`, V4L2 `NV12` is
//! DRM `NV12`, but V4L2 `RGBP` is DRM `RG16`. The table is the only place they meet.

use std::sync::LazyLock;

use crate::dmabuf::PlaneLayout;
use crate::sync::SyncMethods;
use crate::tile_layout::{LayoutInfo, TILE_LAYOUTS};
use crate::{format_info, Format, FormatSet, Fourcc, TileLayout};

use crate::text::quoted;

/// Most pixel formats one [`formats_of`] list may name; a device enumerates a few dozen.
pub const MAX_V4L2_FORMATS: usize = 256;
/// Longest text [`formats_of_list`] reads.
pub const MAX_V4L2_LIST_LEN: usize = 4096;

/// How a V4L2 device synchronises: it has no fences at all. A buffer is done when `DQBUF`
/// returns it (the CPU waits), and it is handed back with `QBUF` when the consumer is done;
/// drivers attach no implicit fences to the dma-bufs either, so only the CPU wait is sure.
pub const SYNC_METHODS: SyncMethods = SyncMethods::CPU_WAIT;

/// Where a V4L2 pixel format lands in dmabridge's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V4l2Mapping {
    /// A DRM format+modifier any DRM-speaking party can name.
    Drm(Format),
    /// A layout with no DRM modifier: only dmabridge (and the V4L2 driver) can name it, so no
    /// other party can share it; the copy fallback can detile it.
    DmabridgeOnly { fourcc: Fourcc, layout: TileLayout },
    /// Known to V4L2, but neither DRM nor dmabridge can describe its layout.
    Unmapped { fourcc: Fourcc },
}

/// One row of [`V4L2_FORMATS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V4l2Entry {
    /// The `V4L2_PIX_FMT_` suffix: `NV12M`.
    pub name: &'static str,
    /// The V4L2 pixel format code: `NM12`.
    pub pixfmt: Fourcc,
    pub mapping: V4l2Mapping,
    /// Buffers the planes are spread over (`v4l2_format_info.mem_planes`): 1 for contiguous
    /// formats, one per plane for the `M` variants.
    pub mem_planes: u8,
    /// Required alignment of the luma `bytesperline`, in bytes (the tile row width).
    pub stride_align: u32,
    /// Required alignment of the luma height, in rows (the tile height); chroma planes of a
    /// contiguous buffer start after the aligned luma plane.
    pub height_align: u32,
}

impl V4l2Entry {
    /// The DRM fourcc of the pixel data (whatever its layout).
    pub fn fourcc(&self) -> Fourcc {
        match self.mapping {
            V4l2Mapping::Drm(f) => f.fourcc,
            V4l2Mapping::DmabridgeOnly { fourcc, .. } | V4l2Mapping::Unmapped { fourcc } => fourcc,
        }
    }

    /// The layout dmabridge can convert, if any.
    pub fn tile_layout(&self) -> Option<TileLayout> {
        match self.mapping {
            V4l2Mapping::Drm(f) => f.layout.modifier().and_then(TileLayout::from_modifier),
            V4l2Mapping::DmabridgeOnly { layout, .. } => Some(layout),
            V4l2Mapping::Unmapped { .. } => None,
        }
    }

}

const fn fcc(b: &[u8; 4]) -> Fourcc {
    Fourcc::from_bytes(*b)
}

const fn linear(name: &'static str, pixfmt: &[u8; 4], drm: Fourcc, mem_planes: u8) -> V4l2Entry {
    V4l2Entry {
        name,
        pixfmt: fcc(pixfmt),
        mapping: V4l2Mapping::Drm(Format::linear(drm)),
        mem_planes,
        stride_align: 1,
        height_align: 1,
    }
}

const fn tiled(
    name: &'static str,
    pixfmt: &[u8; 4],
    mapping: V4l2Mapping,
    mem_planes: u8,
    align: (u32, u32),
) -> V4l2Entry {
    V4l2Entry { name, pixfmt: fcc(pixfmt), mapping, mem_planes, stride_align: align.0, height_align: align.1 }
}

/// The linear V4L2 pixel formats dmabridge knows.
const LINEAR_FORMATS: &[V4l2Entry] = &[
    linear("NV12", b"NV12", Fourcc::NV12, 1),
    linear("NV21", b"NV21", Fourcc::NV21, 1),
    linear("NV16", b"NV16", Fourcc::NV16, 1),
    linear("NV12M", b"NM12", Fourcc::NV12, 2),
    linear("NV21M", b"NM21", Fourcc::NV21, 2),
    linear("NV16M", b"NM16", Fourcc::NV16, 2),
    linear("YUV420", b"YU12", Fourcc::YUV420, 1),
    linear("YVU420", b"YV12", Fourcc::YVU420, 1),
    linear("YUV420M", b"YM12", Fourcc::YUV420, 3),
    linear("YVU420M", b"YM21", Fourcc::YVU420, 3),
    linear("P010", b"P010", Fourcc::P010, 1),
    linear("YUYV", b"YUYV", Fourcc::YUYV, 1),
    linear("UYVY", b"UYVY", Fourcc::UYVY, 1),
    // Luma-only formats travel as single-channel DRM formats, as libcamera maps them.
    linear("GREY", b"GREY", Fourcc::R8, 1),
    linear("Y16", b"Y16 ", Fourcc::R16, 1),
    // V4L2 names RGB by memory byte order, DRM by little-endian word: the same bytes.
    linear("XBGR32", b"XR24", Fourcc::XRGB8888, 1),
    linear("ABGR32", b"AR24", Fourcc::ARGB8888, 1),
    linear("RGB565", b"RGBP", Fourcc::RGB565, 1),
];

/// The tiled formats V4L2 knows whose layout neither DRM nor dmabridge can describe.
const UNMAPPED_FORMATS: &[V4l2Entry] = &[
    tiled("NV12MT_16X16", b"VM12", V4l2Mapping::Unmapped { fourcc: Fourcc::NV12 }, 2, (16, 16)),
    tiled("NV12_16L16", b"HM12", V4l2Mapping::Unmapped { fourcc: Fourcc::NV12 }, 1, (16, 16)),
];

/// The V4L2 pixel formats of a tiled layout, from its row of
/// [`crate::tile_layout::TILE_LAYOUTS`]: a DRM format where the layout has a modifier,
/// dmabridge's alone where it has none; the stride and height alignments are its luma tile.
fn layout_formats(row: &'static LayoutInfo) -> Vec<V4l2Entry> {
    // A V4L2 pixel format names one fourcc; the table's tests check such a row has it.
    let Some(fourcc) = row.only else { return Vec::new() };
    let mapping = match row.layout.modifier() {
        Some(m) => V4l2Mapping::Drm(Format::new(fourcc, m)),
        None => V4l2Mapping::DmabridgeOnly { fourcc, layout: row.layout },
    };
    let luma = row.tiles[0];
    let cpp = format_info(fourcc).map_or(1, |i| u32::from(i.planes[0].cpp));
    let align = (luma.width_bytes(cpp) * luma.row_tiles, luma.height);
    row.v4l2.iter().map(|v| tiled(v.name, &v.code, mapping, v.mem_planes, align)).collect()
}

/// Every V4L2 pixel format dmabridge knows: the linear ones, those of the tiled layouts
/// (from [`crate::tile_layout::TILE_LAYOUTS`]) and the unmapped ones. Tile alignments are
/// from the kernel's pixfmt-yuv-planar documentation ("line stride and image height must be
/// aligned to ...").
pub static V4L2_FORMATS: LazyLock<Vec<V4l2Entry>> = LazyLock::new(|| {
    let tiled = TILE_LAYOUTS.iter().flat_map(layout_formats);
    LINEAR_FORMATS.iter().copied().chain(tiled).chain(UNMAPPED_FORMATS.iter().copied()).collect()
});

/// Why a V4L2 request or format was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum V4l2Error {
    #[error(
        "unknown V4L2 pixel format {0:?} (give a code such as NM12, a name such as NV12M, or 0x plus 8 hex digits)"
    )]
    UnknownPixelFormat(String),
    #[error("V4L2 {name}: a {width}x{height} image has no pixels")]
    ZeroSize { name: &'static str, width: u32, height: u32 },
    #[error("V4L2 {name} uses {expected} buffer plane(s), the format gives {got}")]
    PlaneCount { name: &'static str, expected: usize, got: usize },
    #[error("V4L2 {name}: dmabridge has no plane layout for its DRM fourcc {fourcc}")]
    NoPlaneInfo { name: &'static str, fourcc: Fourcc },
    #[error("V4L2 {name} plane {plane}: bytesperline {stride} is less than the {min} bytes of a row")]
    StrideTooSmall { name: &'static str, plane: usize, stride: u64, min: u64 },
    #[error("V4L2 {name}: bytesperline {stride} is not a multiple of the {align}-byte tile row")]
    StrideMisaligned { name: &'static str, stride: u32, align: u32 },
    #[error("V4L2 {name} plane {plane}: sizeimage {size} is less than the {need} bytes the plane needs")]
    PlaneTooSmall { name: &'static str, plane: usize, size: u64, need: u64 },
    #[error("V4L2 {name}: plane sizes overflow 64 bits")]
    Overflow { name: &'static str },
    #[error("more than {max} V4L2 pixel formats in one list")]
    TooManyFormats { max: usize },
    #[error("V4L2 format list is {len} bytes, more than the {max} dmabridge reads")]
    ListTooLong { len: usize, max: usize },
}

/// Finds a pixel format by V4L2 code (`NM12`, exact case), by name (`NV12M`, any case) or
/// by number (`0x32314d4e`).
pub fn lookup(pixfmt: &str) -> Option<&'static V4l2Entry> {
    let s = pixfmt.trim();
    if let Some(hex) = s.strip_prefix("0x").filter(|h| h.len() == 8) {
        return u32::from_str_radix(hex, 16).ok().and_then(lookup_code);
    }
    V4L2_FORMATS
        .iter()
        .find(|e| e.pixfmt.trimmed() == s || e.pixfmt.padded() == s)
        .or_else(|| V4L2_FORMATS.iter().find(|e| e.name.eq_ignore_ascii_case(s)))
}

/// Finds a pixel format by its 32-bit code, as `v4l2_format.fmt.pix_mp.pixelformat` has it.
pub fn lookup_code(pixfmt: u32) -> Option<&'static V4l2Entry> {
    V4L2_FORMATS.iter().find(|e| e.pixfmt.code() == pixfmt)
}

/// The V4L2 pixel format that is DRM format `f`: the contiguous one where V4L2 has both
/// (`NV12` before `NV12M`, which needs one buffer per plane); `None` where V4L2 has none.
pub fn lookup_format(f: Format) -> Option<&'static V4l2Entry> {
    V4L2_FORMATS.iter().filter(|e| e.mapping == V4l2Mapping::Drm(f)).min_by_key(|e| e.mem_planes)
}

/// The formats a V4L2 device offers, split by what can name them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V4l2Formats {
    /// DRM format+modifier pairs, in the order given (repeats dropped: `NV12` and `NV12M`
    /// are both NV12 LINEAR).
    pub drm: FormatSet,
    /// Layouts only dmabridge can name; sharing them needs a copy.
    pub dmabridge_only: Vec<(Fourcc, TileLayout)>,
    /// Formats neither can describe.
    pub unmapped: Vec<&'static V4l2Entry>,
}

/// Reads the `PIXFMT[,PIXFMT]` of `dmabridge negotiate --v4l2`.
pub fn formats_of<S: AsRef<str>>(pixfmts: &[S]) -> Result<V4l2Formats, V4l2Error> {
    if pixfmts.len() > MAX_V4L2_FORMATS {
        return Err(V4l2Error::TooManyFormats { max: MAX_V4L2_FORMATS });
    }
    let mut out = V4l2Formats::default();
    for p in pixfmts {
        let p = p.as_ref();
        let entry = lookup(p).ok_or_else(|| V4l2Error::UnknownPixelFormat(quoted(p)))?;
        match entry.mapping {
            V4l2Mapping::Drm(f) => {
                out.drm.insert(f);
            }
            V4l2Mapping::DmabridgeOnly { fourcc, layout } => {
                if !out.dmabridge_only.contains(&(fourcc, layout)) {
                    out.dmabridge_only.push((fourcc, layout));
                }
            }
            V4l2Mapping::Unmapped { .. } => {
                if !out.unmapped.iter().any(|e| e.pixfmt == entry.pixfmt) {
                    out.unmapped.push(entry);
                }
            }
        }
    }
    Ok(out)
}

/// Splits `NV12,NM12` into its elements (for the CLI).
pub fn formats_of_list(list: &str) -> Result<V4l2Formats, V4l2Error> {
    if list.len() > MAX_V4L2_LIST_LEN {
        return Err(V4l2Error::ListTooLong { len: list.len(), max: MAX_V4L2_LIST_LEN });
    }
    if list.split(',').nth(MAX_V4L2_FORMATS).is_some() {
        return Err(V4l2Error::TooManyFormats { max: MAX_V4L2_FORMATS });
    }
    formats_of(&list.split(',').collect::<Vec<_>>())
}

/// One plane of `v4l2_format.fmt.pix_mp.plane_fmt[]` (or, for the single-planar API, the
/// `bytesperline`/`sizeimage` of `fmt.pix` as the only element).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V4l2Plane {
    pub bytesperline: u32,
    pub sizeimage: u32,
}

/// The parts of a `v4l2_format` that fix the memory layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V4l2PlaneFormat {
    pub width: u32,
    pub height: u32,
    pub pixelformat: u32,
    /// One per buffer (`num_planes`).
    pub planes: Vec<V4l2Plane>,
}

/// Maps a `v4l2_format` to per-plane layouts (`object`: the V4L2 buffer, one dma-buf fd).
/// In a single buffer the chroma planes follow the (tile-aligned) luma plane, with strides
/// derived from `bytesperline` as V4L2 defines them (NV12: the same; YUV420: half); in the
/// `M` variants each plane sits at offset 0 of its own buffer with its own `bytesperline`
/// and spans the buffer's `sizeimage`.
pub fn plane_layouts(fmt: &V4l2PlaneFormat) -> Result<Vec<PlaneLayout>, V4l2Error> {
    let entry = lookup_code(fmt.pixelformat)
        .ok_or_else(|| V4l2Error::UnknownPixelFormat(Fourcc::from_code(fmt.pixelformat).padded()))?;
    let name = entry.name;
    let info = format_info(entry.fourcc()).ok_or(V4l2Error::NoPlaneInfo { name, fourcc: entry.fourcc() })?;
    if fmt.width == 0 || fmt.height == 0 {
        return Err(V4l2Error::ZeroSize { name, width: fmt.width, height: fmt.height });
    }
    let expected = usize::from(entry.mem_planes);
    if fmt.planes.len() != expected {
        return Err(V4l2Error::PlaneCount { name, expected, got: fmt.planes.len() });
    }
    let luma = fmt.planes.first().ok_or(V4l2Error::PlaneCount { name, expected, got: 0 })?;
    if luma.bytesperline % entry.stride_align.max(1) != 0 {
        return Err(V4l2Error::StrideMisaligned { name, stride: luma.bytesperline, align: entry.stride_align });
    }
    let overflow = V4l2Error::Overflow { name };
    let aligned_height = u64::from(fmt.height).next_multiple_of(u64::from(entry.height_align.max(1)));
    let cpp0 = info.planes.first().map_or(1, |p| u64::from(p.cpp));
    let mut layouts = Vec::with_capacity(info.plane_count());
    let mut offset = 0u64;
    for (i, p) in info.planes.iter().enumerate() {
        let rows = aligned_height.div_ceil(u64::from(p.vsub));
        let min = info.min_stride(i, fmt.width);
        let (object, stride) = if expected == 1 {
            let bpl = u64::from(luma.bytesperline);
            (0, (bpl * u64::from(p.cpp)).div_ceil(cpp0 * u64::from(p.hsub)))
        } else {
            let own = fmt.planes.get(i).ok_or(V4l2Error::PlaneCount { name, expected, got: fmt.planes.len() })?;
            (i, u64::from(own.bytesperline))
        };
        if stride < min {
            return Err(V4l2Error::StrideTooSmall { name, plane: i, stride, min });
        }
        let need = stride.checked_mul(rows).ok_or(overflow.clone())?;
        if expected == 1 {
            layouts.push(PlaneLayout { object, offset, stride, size: need });
            offset = offset.checked_add(need).ok_or(overflow.clone())?;
        } else {
            let size = fmt.planes.get(i).map_or(0, |pl| u64::from(pl.sizeimage));
            if size < need {
                return Err(V4l2Error::PlaneTooSmall { name, plane: i, size, need });
            }
            layouts.push(PlaneLayout { object, offset: 0, stride, size });
        }
    }
    if expected == 1 && u64::from(luma.sizeimage) < offset {
        return Err(V4l2Error::PlaneTooSmall { name, plane: 0, size: luma.sizeimage.into(), need: offset });
    }
    Ok(layouts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn table_keys_are_unique_and_unambiguous() {
        let mut codes = HashSet::new();
        let mut names = HashSet::new();
        for e in V4L2_FORMATS.iter() {
            assert!(codes.insert(e.pixfmt), "duplicate code {}", e.pixfmt);
            assert!(names.insert(e.name.to_ascii_uppercase()), "duplicate name {}", e.name);
        }
        // A string that is one entry's code and another's name would be ambiguous.
        for e in V4L2_FORMATS.iter() {
            for other in V4L2_FORMATS.iter().filter(|o| o.pixfmt != e.pixfmt) {
                assert!(!other.name.eq_ignore_ascii_case(&e.pixfmt.trimmed()), "{} vs {}", e.name, other.name);
            }
        }
    }

    #[test]
    fn every_entry_has_plane_info_and_consistent_buffers() {
        for e in V4L2_FORMATS.iter() {
            let info =
                format_info(e.fourcc()).unwrap_or_else(|| panic!("{}: {} not in format_info", e.name, e.fourcc()));
            let planes = info.plane_count();
            assert!(e.mem_planes == 1 || usize::from(e.mem_planes) == planes, "{}", e.name);
            assert!(e.stride_align.is_power_of_two() && e.height_align.is_power_of_two(), "{}", e.name);
            assert!(e.mem_planes == 1 || planes > 1, "{}: one plane cannot need two buffers", e.name);
        }
    }

    #[test]
    fn every_entry_round_trips_through_lookup() {
        for e in V4L2_FORMATS.iter() {
            assert_eq!(lookup(&e.pixfmt.trimmed()), Some(e));
            assert_eq!(lookup(e.name), Some(e));
            assert_eq!(lookup(&e.name.to_ascii_lowercase()), Some(e));
            assert_eq!(lookup(&format!("0x{:08x}", e.pixfmt.code())), Some(e));
            assert_eq!(lookup_code(e.pixfmt.code()), Some(e));
        }
    }

    #[test]
    fn tiled_mappings_agree_with_tile_layouts() {
        let e = lookup("NV12MT").unwrap();
        assert_eq!(e.pixfmt, fcc(b"TM12"));
        assert_eq!(e.tile_layout(), Some(TileLayout::Samsung64x32));
        assert_eq!(
            e.mapping,
            V4l2Mapping::Drm(Format::new(Fourcc::NV12, TileLayout::Samsung64x32.modifier().unwrap()))
        );
        assert_eq!(lookup("ST12").unwrap().tile_layout(), Some(TileLayout::Allwinner32x32));
        assert_eq!(
            lookup("ST12").unwrap().mapping,
            V4l2Mapping::Drm(Format::new(Fourcc::NV12, TileLayout::Allwinner32x32.modifier().unwrap()))
        );
        for (code, layout) in
            [("VT12", TileLayout::Nv12_4L4), ("MM21", TileLayout::Nv12_16L32S), ("AT12", TileLayout::Nv12_8L128)]
        {
            let e = lookup(code).unwrap();
            assert_eq!(e.mapping, V4l2Mapping::DmabridgeOnly { fourcc: Fourcc::NV12, layout });
            assert_eq!(layout.modifier(), None, "{code} must have no DRM modifier");
        }
        for e in V4L2_FORMATS.iter() {
            if let Some(l) = e.tile_layout() {
                assert!(TileLayout::ALL.contains(&l));
            }
        }
    }

    #[test]
    fn tiled_entries_from_the_layout_table_keep_the_kernels_alignments() {
        // pixfmt-yuv-planar: (code, buffers, stride alignment, height alignment).
        let kernel = [("TM12", 2, 128, 32), ("ST12", 1, 32, 32), ("VT12", 1, 4, 4), ("MM21", 2, 16, 32), ("AT12", 1, 8, 128), ("NA12", 2, 8, 128)];
        for (code, mem_planes, stride_align, height_align) in kernel {
            let e = lookup(code).unwrap();
            assert_eq!((e.mem_planes, e.stride_align, e.height_align), (mem_planes, stride_align, height_align), "{code}");
        }
        let tiled_rows: usize = crate::tile_layout::TILE_LAYOUTS.iter().map(|r| r.v4l2.len()).sum();
        assert_eq!(tiled_rows, kernel.len());
    }

    #[test]
    fn a_drm_format_finds_its_contiguous_v4l2_format() {
        assert_eq!(lookup_format(Format::linear(Fourcc::NV12)).map(|e| e.name), Some("NV12"));
        assert_eq!(lookup_format(Format::linear(Fourcc::XRGB8888)).map(|e| e.pixfmt), Some(fcc(b"XR24")));
        let samsung = Format::new(Fourcc::NV12, TileLayout::Samsung64x32.modifier().unwrap());
        assert_eq!(lookup_format(samsung).map(|e| e.pixfmt), Some(fcc(b"TM12")));
        assert_eq!(lookup_format(Format::new(Fourcc::NV12, crate::Modifier::from_raw(0x0100_0000_0000_0001))), None);
    }

    #[test]
    fn formats_of_splits_by_nameability() {
        let f = formats_of(&["NV12", "NM12", "TM12", "VT12", "MM21", "HM12", "VT12"]).unwrap();
        assert_eq!(
            f.drm.iter().copied().collect::<Vec<_>>(),
            vec![Format::linear(Fourcc::NV12), Format::new(Fourcc::NV12, TileLayout::Samsung64x32.modifier().unwrap())]
        );
        assert_eq!(
            f.dmabridge_only,
            vec![(Fourcc::NV12, TileLayout::Nv12_4L4), (Fourcc::NV12, TileLayout::Nv12_16L32S)]
        );
        assert_eq!(f.unmapped.len(), 1);
        assert_eq!(formats_of(&["NV12", "XXXX"]), Err(V4l2Error::UnknownPixelFormat("XXXX".into())));
        assert_eq!(formats_of_list("NV12M,YM12").unwrap().drm.len(), 2);
    }

    #[test]
    fn list_bounds() {
        let at_max = vec!["NV12"; MAX_V4L2_FORMATS].join(",");
        assert_eq!(formats_of_list(&at_max).unwrap().drm.len(), 1);
        assert_eq!(formats_of_list(&format!("{at_max},NV12")), Err(V4l2Error::TooManyFormats { max: MAX_V4L2_FORMATS }));
        let long = "N".repeat(MAX_V4L2_LIST_LEN + 1);
        assert!(matches!(formats_of_list(&long), Err(V4l2Error::ListTooLong { .. })));
    }

    fn fmt(pixfmt: &[u8; 4], w: u32, h: u32, planes: &[(u32, u32)]) -> V4l2PlaneFormat {
        V4l2PlaneFormat {
            width: w,
            height: h,
            pixelformat: fcc(pixfmt).code(),
            planes: planes.iter().map(|&(bytesperline, sizeimage)| V4l2Plane { bytesperline, sizeimage }).collect(),
        }
    }

    #[test]
    fn single_buffer_nv12_puts_uv_after_y() {
        let l = plane_layouts(&fmt(b"NV12", 1920, 1080, &[(2048, 2048 * 1080 * 3 / 2)])).unwrap();
        assert_eq!(
            l,
            vec![
                PlaneLayout { object: 0, offset: 0, stride: 2048, size: 2048 * 1080 },
                PlaneLayout { object: 0, offset: 2048 * 1080, stride: 2048, size: 2048 * 540 },
            ]
        );
    }

    #[test]
    fn single_buffer_yuv420_halves_chroma_strides() {
        let l = plane_layouts(&fmt(b"YU12", 64, 32, &[(64, 64 * 32 * 3 / 2)])).unwrap();
        assert_eq!(l.iter().map(|p| (p.offset, p.stride)).collect::<Vec<_>>(), vec![(0, 64), (2048, 32), (2560, 32)]);
    }

    #[test]
    fn multi_buffer_nm12_puts_each_plane_at_offset_zero() {
        let l = plane_layouts(&fmt(b"NM12", 1920, 1080, &[(1920, 1920 * 1080), (1920, 1920 * 540)])).unwrap();
        assert_eq!(
            l,
            vec![
                PlaneLayout { object: 0, offset: 0, stride: 1920, size: 1920 * 1080 },
                PlaneLayout { object: 1, offset: 0, stride: 1920, size: 1920 * 540 },
            ]
        );
    }

    #[test]
    fn tiled_single_buffer_aligns_the_luma_height() {
        // 4L4 at 1080 rows: luma is 1080 rows already a multiple of 4; at 1082 it rounds up.
        let l = plane_layouts(&fmt(b"VT12", 1920, 1082, &[(1920, 1920 * 1084 * 3 / 2)])).unwrap();
        assert_eq!(l[1].offset, 1920 * 1084);
    }

    #[test]
    fn inconsistent_formats_are_typed_errors() {
        use V4l2Error::*;
        assert!(matches!(
            plane_layouts(&fmt(b"NM12", 64, 64, &[(64, 4096)])),
            Err(PlaneCount { expected: 2, got: 1, .. })
        ));
        assert!(matches!(plane_layouts(&fmt(b"NV12", 64, 64, &[(32, 6144)])), Err(StrideTooSmall { plane: 0, .. })));
        assert!(matches!(plane_layouts(&fmt(b"NV12", 64, 64, &[(64, 6143)])), Err(PlaneTooSmall { need: 6144, .. })));
        assert!(matches!(
            plane_layouts(&fmt(b"NM12", 64, 64, &[(64, 4096), (64, 2047)])),
            Err(PlaneTooSmall { plane: 1, .. })
        ));
        assert!(matches!(
            plane_layouts(&fmt(b"TM12", 64, 64, &[(64, 1 << 20), (64, 1 << 20)])),
            Err(StrideMisaligned { align: 128, .. })
        ));
        assert!(matches!(plane_layouts(&fmt(b"NV12", 0, 64, &[(64, 6144)])), Err(ZeroSize { .. })));
        assert!(matches!(plane_layouts(&fmt(b"ZZZZ", 64, 64, &[(64, 6144)])), Err(UnknownPixelFormat(_))));
        // The largest values V4L2 can carry stay in range: u32 * u32 fits a u64.
        assert!(plane_layouts(&fmt(b"NV12", u32::MAX, u32::MAX, &[(u32::MAX, u32::MAX)])).is_err());
    }
}
