//! GStreamer's DMABuf vocabulary (seed 000): `drm-format` strings and `memory:DMABuf` caps.
//!
//! A `drm-format` value pairs a DRM fourcc with a modifier, and the pair is one opaque
//! format: `NV12:0x0100000000000002` is neither NV12 nor a subset of it.
//! - `FOURCC` alone means [`Modifier::LINEAR`] (an explicit promise of a linear layout).
//! - `FOURCC:0x` + exactly 16 hex digits means that modifier.
//! - `FOURCC:0x0000000000000000` is **invalid** (the seed: LINEAR must be written as the bare
//!   fourcc) and is rejected with [`GstError::ExplicitLinear`].
//! - `FOURCC:0x00ffffffffffffff` (`DRM_FORMAT_MOD_INVALID`) is accepted and read as
//!   [`Layout::Implicit`]. GStreamer's reader (`gst_video_dma_drm_fourcc_from_string`)
//!   accepts it too, but its writer refuses to print it, so it only comes from hand-written
//!   caps or from dmabridge, which prints `Implicit` that way so that nothing is lost.
//! - Fourcc codes are kept opaque: `AR39` or `I420` are carried through even though no DRM
//!   format has that code, as GStreamer does.
//!
//! GStreamer always prints the four characters of a fourcc (`GST_FOURCC_FORMAT`), trailing
//! spaces included, and its reader wants exactly four; [`print_drm_format`] does the same so
//! that GStreamer can read what we write. [`parse_drm_format`] also accepts 1 to 3
//! characters and pads them (`R8` = `R8  `), which is kinder to command lines.

mod caps;
mod syntax;

pub use caps::{Caps, CapsStructure, Field, IntRange, Value, ValueBody};

use crate::sync::{SyncMethod, SyncMethods};
use crate::{Format, FormatSet, Fourcc, FourccParseError, Layout, Modifier};

use crate::text::quoted;

/// Longest caps string [`Caps::parse`] (and drm-format list [`parse_drm_format_list`])
/// reads. Real caps are a few KiB; the bound keeps the work on hostile input proportional
/// to something small.
pub const MAX_CAPS_LEN: usize = 256 * 1024;
/// Deepest nesting of `{ }`, `[ ]` and `< >` [`Caps::parse`] accepts; it bounds recursion.
pub const MAX_NESTING: usize = 16;
/// Most structures in one caps. gst-inspect templates have a handful.
pub const MAX_CAPS_STRUCTURES: usize = 64;
/// Most elements of one `{ }` list, `< >` array or `[ ]` range.
pub const MAX_LIST_LEN: usize = 8192;
/// Most `drm-format` values in one structure, one [`parse_drm_format_value`] or one
/// [`parse_drm_format_list`]. Drivers list a few hundred format+modifier pairs.
pub const MAX_DRM_FORMATS: usize = 4096;
/// Most elementary steps [`Caps::intersect`] takes (value comparisons, values produced):
/// generic lists intersect pairwise, and a list against a list of lists multiplies, so the
/// work is bounded here rather than by the input size. Each step may leave a value behind
/// (a hundred bytes or so), so this also bounds the memory: about 25 MB at worst. Real caps
/// take a few thousand steps (two templates of 100-format lists: 10^4 per structure pair).
pub const MAX_INTERSECT_STEPS: usize = 1 << 18;

/// How a GStreamer element synchronises on `memory:DMABuf` buffers: it relies on the
/// dma-buf's implicit fences (GStreamer's buffers carry no fences), or the producer finished
/// before pushing the buffer.
pub const SYNC_METHODS: SyncMethods = SyncMethods::CPU_WAIT.with(SyncMethod::ImplicitBridge);

/// Why a `drm-format` value or a caps string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GstError {
    #[error("empty drm-format value")]
    EmptyDrmFormat,
    #[error("drm-format {text:?}: bad fourcc: {source}")]
    Fourcc { text: String, source: FourccParseError },
    #[error("drm-format {text:?}: the modifier must be 0x followed by exactly 16 hex digits")]
    ModifierSyntax { text: String },
    #[error("drm-format {text:?}: LINEAR is written as the bare fourcc {fourcc:?}, never as :0x0000000000000000")]
    ExplicitLinear { text: String, fourcc: String },
    #[error("drm-format list {text:?} has an empty element")]
    EmptyListElement { text: String },
    #[error("caps string is empty")]
    EmptyCaps,
    #[error("caps string is {len} bytes, more than the {max} dmabridge reads")]
    TooLong { len: usize, max: usize },
    #[error("caps nest lists/ranges deeper than {max} levels at byte {at}")]
    TooDeep { at: usize, max: usize },
    #[error("caps end at byte {at}, expecting {expected}")]
    UnexpectedEnd { at: usize, expected: &'static str },
    #[error("caps: unexpected {found:?} at byte {at}, expecting {expected}")]
    UnexpectedChar { at: usize, found: char, expected: &'static str },
    #[error("caps: {open:?} opened at byte {at} is never closed")]
    Unclosed { at: usize, open: char },
    #[error("caps: {found:?} at byte {at} closes nothing that is open")]
    UnmatchedClose { at: usize, found: char },
    #[error("caps: {open:?} opened at byte {open_at} is closed by {found:?} at byte {at}")]
    MismatchedClose { open_at: usize, open: char, at: usize, found: char },
    #[error("caps: string opened at byte {at} has no closing quote")]
    UnterminatedString { at: usize },
    #[error("caps: a range at byte {at} has {count} bounds; it needs [ min, max ] or [ min, max, step ]")]
    RangeArity { at: usize, count: usize },
    #[error("caps: {name:?} is a caps keyword, not a media type")]
    ReservedStructureName { name: String },
    #[error("caps: field {name:?} appears twice in structure {structure:?}")]
    DuplicateField { structure: String, name: String },
    #[error("caps: drm-format in {structure:?} must be a string or a list of strings, got {found}")]
    DrmFormatNotString { structure: String, found: String },
    #[error("caps: drm-format may only appear with the memory:DMABuf feature (structure {structure:?})")]
    DrmFormatOutsideDmaBuf { structure: String },
    #[error("caps: drm-format in {structure:?} is an empty list")]
    EmptyDrmFormatList { structure: String },
    #[error("caps have more than {max} structures")]
    TooManyStructures { max: usize },
    #[error("caps: the list opened at byte {at} has more than {max} elements")]
    ListTooLong { at: usize, max: usize },
    #[error("more than {max} drm-format values{}", if structure.is_empty() { String::new() } else { format!(" in {structure:?}") })]
    TooManyDrmFormats { structure: String, max: usize },
    #[error("intersecting these caps takes more than {max} steps (lists of lists multiply); real caps take a few thousand")]
    IntersectionTooLarge { max: usize },
}

/// Parses one `drm-format` value (see the module docs for the rules).
pub fn parse_drm_format(text: &str) -> Result<Format, GstError> {
    if text.is_empty() {
        return Err(GstError::EmptyDrmFormat);
    }
    let (fourcc_text, modifier_text) = match text.split_once(':') {
        Some((f, m)) => (f, Some(m)),
        None => (text, None),
    };
    let fourcc: Fourcc = fourcc_text.parse().map_err(|source| GstError::Fourcc { text: quoted(text), source })?;
    let Some(modifier_text) = modifier_text else {
        return Ok(Format::linear(fourcc));
    };
    let modifier = Modifier::parse_hex(modifier_text).map_err(|_| GstError::ModifierSyntax { text: quoted(text) })?;
    if modifier.is_linear() {
        return Err(GstError::ExplicitLinear { text: quoted(text), fourcc: fourcc.padded() });
    }
    Ok(Format::new(fourcc, modifier))
}

/// The `drm-format` spelling of `f`: the bare fourcc for LINEAR, `FOURCC:0x<16 hex>` for any
/// other modifier, and `FOURCC:0x00ffffffffffffff` for [`Layout::Implicit`].
pub fn print_drm_format(f: Format) -> String {
    match f.layout {
        Layout::Explicit(m) if m.is_linear() => f.fourcc.padded(),
        layout => format!("{}:{}", f.fourcc.padded(), layout.to_wire().to_hex()),
    }
}

/// Parses a comma-separated list of `drm-format` values (`NV12:0x0100000000000002,AR24`), the
/// syntax of `dmabridge negotiate --drm-formats`. Order is preference; repeats are dropped.
/// Blanks around elements are ignored.
pub fn parse_drm_format_list(text: &str) -> Result<FormatSet, GstError> {
    if text.len() > MAX_CAPS_LEN {
        return Err(GstError::TooLong { len: text.len(), max: MAX_CAPS_LEN });
    }
    if text.trim().is_empty() {
        return Err(GstError::EmptyDrmFormat);
    }
    let mut set = FormatSet::new();
    for (i, element) in text.split(',').enumerate() {
        if i >= MAX_DRM_FORMATS {
            return Err(GstError::TooManyDrmFormats { structure: String::new(), max: MAX_DRM_FORMATS });
        }
        let element = element.trim();
        if element.is_empty() {
            return Err(GstError::EmptyListElement { text: quoted(text) });
        }
        set.insert(parse_drm_format(element)?);
    }
    Ok(set)
}

/// Parses a `drm-format` value in caps syntax: `{ (string)NV12:0x0100000000000001, BGRA }`,
/// `(string)NV12` or `NV12` (how the seed writes a query answer).
pub fn parse_drm_format_value(text: &str) -> Result<FormatSet, GstError> {
    let value = syntax::Parser::new(text)?.lone_value()?;
    let elements =
        caps::drm_elements(&value).map_err(|found| GstError::DrmFormatNotString { structure: String::new(), found })?;
    if elements.len() > MAX_DRM_FORMATS {
        return Err(GstError::TooManyDrmFormats { structure: String::new(), max: MAX_DRM_FORMATS });
    }
    let mut set = FormatSet::new();
    for e in elements {
        set.insert(parse_drm_format(e)?);
    }
    if set.is_empty() {
        return Err(GstError::EmptyDrmFormatList { structure: String::new() });
    }
    Ok(set)
}

/// GStreamer's video format name for a DRM fourcc (`AR24` is `BGRA`: both name memory byte
/// order differently, see `gst_video_dma_drm_fourcc_to_format`), where GStreamer has one.
pub fn video_format_name(fourcc: Fourcc) -> Option<&'static str> {
    const TABLE: [(Fourcc, &str); 22] = [
        (Fourcc::ARGB8888, "BGRA"),
        (Fourcc::XRGB8888, "BGRx"),
        (Fourcc::ABGR8888, "RGBA"),
        (Fourcc::XBGR8888, "RGBx"),
        (Fourcc::RGBA8888, "ABGR"),
        (Fourcc::RGBX8888, "xBGR"),
        (Fourcc::BGRA8888, "ARGB"),
        (Fourcc::BGRX8888, "xRGB"),
        (Fourcc::RGB565, "RGB16"),
        (Fourcc::ARGB2101010, "BGR10A2_LE"),
        (Fourcc::ABGR2101010, "RGB10A2_LE"),
        (Fourcc::R8, "GRAY8"),
        (Fourcc::R16, "GRAY16_LE"),
        (Fourcc::NV12, "NV12"),
        (Fourcc::NV21, "NV21"),
        (Fourcc::NV16, "NV16"),
        (Fourcc::P010, "P010_10LE"),
        (Fourcc::P016, "P016_LE"),
        (Fourcc::YUV420, "I420"),
        (Fourcc::YVU420, "YV12"),
        (Fourcc::YUYV, "YUY2"),
        (Fourcc::UYVY, "UYVY"),
    ];
    TABLE.iter().find(|(f, _)| *f == fourcc).map(|(_, n)| *n)
}

/// The caps to paste into a pipeline for `formats` (one fourcc's layouts): GStreamer 1.24's
/// `video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=...` and, where the list holds
/// LINEAR and GStreamer names the format, the 1.22 form a linear dma-buf negotiates with
/// (`video/x-raw(memory:DMABuf),format=NV12`). Implicit layouts have no caps spelling and are
/// left out.
pub fn paste_caps(formats: &[Format]) -> Vec<String> {
    let explicit: Vec<Format> = formats.iter().copied().filter(|f| matches!(f.layout, Layout::Explicit(_))).collect();
    let mut out = Vec::new();
    match explicit.as_slice() {
        [] => {}
        [one] => out.push(format!("video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format={}", print_drm_format(*one).trim_end())),
        many => out.push(format!(
            "video/x-raw(memory:DMABuf),format=DMA_DRM,drm-format=(string){{ {} }}",
            many.iter().map(|f| print_drm_format(*f).trim_end().to_owned()).collect::<Vec<_>>().join(", ")
        )),
    }
    let linear = explicit.iter().find(|f| f.layout == Layout::Explicit(Modifier::LINEAR));
    if let Some(name) = linear.and_then(|f| video_format_name(f.fourcc)) {
        out.push(format!("video/x-raw(memory:DMABuf),format={name}"));
    }
    out
}

/// The inverse of [`parse_drm_format_list`].
pub fn print_drm_format_list(set: &FormatSet) -> String {
    set.iter().map(|f| print_drm_format(*f)).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    const Y_TILED: Modifier = Modifier::from_raw(0x0100_0000_0000_0002);

    #[test]
    fn bare_fourcc_is_linear() {
        assert_eq!(parse_drm_format("NV12"), Ok(Format::linear(Fourcc::NV12)));
        assert_eq!(print_drm_format(Format::linear(Fourcc::NV12)), "NV12");
    }

    #[test]
    fn explicit_modifier_round_trips() {
        let f = parse_drm_format("NV12:0x0100000000000002").unwrap();
        assert_eq!(f, Format::new(Fourcc::NV12, Y_TILED));
        assert_eq!(print_drm_format(f), "NV12:0x0100000000000002");
    }

    #[test]
    fn explicit_linear_is_rejected() {
        assert!(matches!(parse_drm_format("NV12:0x0000000000000000"), Err(GstError::ExplicitLinear { .. })));
    }

    #[test]
    fn modifiers_must_have_sixteen_hex_digits() {
        for bad in [
            "NV12:0x1",
            "NV12:0x010000000000000",
            "NV12:0x01000000000000020",
            "NV12:0x0x0100000000000001",
            "NV12:0100000000000001",
            "NV12:0x010000000000000g",
            "NV12:",
            "NV12:0x0100000000000001:0x0100000000000001",
        ] {
            assert!(
                matches!(parse_drm_format(bad), Err(GstError::ModifierSyntax { .. })),
                "{bad}: {:?}",
                parse_drm_format(bad)
            );
        }
    }

    #[test]
    fn invalid_modifier_is_implicit_and_round_trips() {
        let f = parse_drm_format("NV12:0x00ffffffffffffff").unwrap();
        assert_eq!(f, Format::implicit(Fourcc::NV12));
        assert_eq!(print_drm_format(f), "NV12:0x00ffffffffffffff");
    }

    #[test]
    fn unknown_fourcc_stays_opaque() {
        let f = parse_drm_format("AR39:0x0100000000000002").unwrap();
        assert_eq!(f.fourcc, Fourcc::from_bytes(*b"AR39"));
        assert_eq!(f.fourcc.known(), None);
        assert_eq!(print_drm_format(f), "AR39:0x0100000000000002");
    }

    #[test]
    fn short_fourccs_print_padded_like_gstreamer() {
        let f = parse_drm_format("R8").unwrap();
        assert_eq!(f, Format::linear(Fourcc::R8));
        assert_eq!(print_drm_format(f), "R8  ");
        assert_eq!(parse_drm_format(&print_drm_format(f)), Ok(f));
    }

    #[test]
    fn bad_fourccs() {
        assert!(matches!(parse_drm_format("NV123:0x0100000000000002"), Err(GstError::Fourcc { .. })));
        assert!(matches!(parse_drm_format(":0x0100000000000002"), Err(GstError::Fourcc { .. })));
        assert_eq!(parse_drm_format(""), Err(GstError::EmptyDrmFormat));
    }

    #[test]
    fn list_bounds() {
        let at_max = vec!["NV12"; MAX_DRM_FORMATS].join(",");
        assert_eq!(parse_drm_format_list(&at_max).map(|s| s.len()), Ok(1));
        let over = format!("{at_max},NV12");
        assert!(matches!(parse_drm_format_list(&over), Err(GstError::TooManyDrmFormats { .. })));
        let long = format!("NV12{}", " ".repeat(MAX_CAPS_LEN));
        assert!(matches!(parse_drm_format_list(&long), Err(GstError::TooLong { .. })));
    }

    #[test]
    fn lists() {
        let set = parse_drm_format_list("NV12:0x0100000000000002, AR24,NV12:0x0100000000000002").unwrap();
        assert_eq!(
            set.iter().copied().collect::<Vec<_>>(),
            vec![Format::new(Fourcc::NV12, Y_TILED), Format::linear(Fourcc::ARGB8888)]
        );
        assert_eq!(print_drm_format_list(&set), "NV12:0x0100000000000002,AR24");
        assert!(matches!(parse_drm_format_list("NV12,,AR24"), Err(GstError::EmptyListElement { .. })));
        assert!(matches!(parse_drm_format_list("NV12,"), Err(GstError::EmptyListElement { .. })));
        assert_eq!(parse_drm_format_list(" "), Err(GstError::EmptyDrmFormat));
    }
}
