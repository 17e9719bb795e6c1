//! The KMS plane property `IN_FORMATS`: which format+modifier pairs a plane can scan out.
//!
//! The blob is `struct drm_format_modifier_blob` (`include/uapi/drm/drm_mode.h`), in host
//! byte order, offsets counted from the start of the blob:
//!
//! ```text
//! u32 version            = 1 (FORMAT_BLOB_CURRENT)
//! u32 flags              (none defined)
//! u32 count_formats
//! u32 formats_offset     -> u32 formats[count_formats]
//! u32 count_modifiers
//! u32 modifiers_offset   -> struct drm_format_modifier[count_modifiers], 24 bytes each:
//!                           u64 formats (bit i: formats[offset + i] supports the modifier)
//!                           u32 offset, u32 pad, u64 modifier
//! ```
//!
//! The kernel aligns the format array to 4 and the modifier array to 8 bytes; a blob that
//! does not is malformed (a C reader would make misaligned loads), and so is one whose
//! arrays run past its end or whose sizes do not fit the `u32` a blob length is. A modifier
//! of `DRM_FORMAT_MOD_INVALID` becomes [`Layout::Implicit`]; a format no modifier entry
//! covers is not in the result, since the plane then advertises no layout for it.
//!
//! ## Bounds
//! A blob's arrays are compact and its pairs are not: each 24-byte modifier entry can claim
//! 64 formats, so a few megabytes of blob can claim tens of millions of format+modifier
//! pairs. The parser counts everything the header and the masks claim and refuses a blob
//! beyond [`MAX_IN_FORMATS_FORMATS`], [`MAX_IN_FORMATS_MODIFIERS`] or
//! [`MAX_IN_FORMATS_PAIRS`] before it allocates anything for it. Real planes stay far below:
//! an i915 or amdgpu plane lists tens of formats, a few hundred modifier entries and a few
//! thousand pairs.

use crate::sync::{SyncMethod, SyncMethods};
use crate::{Format, FormatSet, Fourcc, Layout, Modifier};

/// `FORMAT_BLOB_CURRENT`, the only version the kernel has defined.
pub const FORMAT_BLOB_VERSION: u32 = 1;
/// Most formats a blob may list (`count_formats`).
pub const MAX_IN_FORMATS_FORMATS: u32 = 4096;
/// Most modifier entries a blob may hold (`count_modifiers`).
pub const MAX_IN_FORMATS_MODIFIERS: u32 = 16384;
/// Most format+modifier pairs the masks may claim in all (duplicates counted).
pub const MAX_IN_FORMATS_PAIRS: u64 = 65536;

/// How a KMS plane synchronises with the buffers it scans out: atomic commits take an
/// explicit `IN_FENCE_FD` (a sync_file) and wait for the buffer's implicit fences when none
/// is given; both are on top of the CPU wait every dmabridge exchange supports.
pub const SYNC_METHODS: SyncMethods =
    SyncMethods::CPU_WAIT.with(SyncMethod::SyncFile).with(SyncMethod::ImplicitBridge);
const HEADER_LEN: u32 = 24;
const FORMAT_LEN: u32 = 4;
const MODIFIER_LEN: u32 = 24;

/// Why an `IN_FORMATS` blob was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KmsError {
    #[error("IN_FORMATS blob is {len} bytes, shorter than its 24-byte header")]
    TruncatedHeader { len: usize },
    #[error("IN_FORMATS blob is {len} bytes; a blob's size is a u32")]
    BlobTooLarge { len: usize },
    #[error("IN_FORMATS blob has version {0}; only version 1 is defined")]
    UnsupportedVersion(u32),
    #[error("IN_FORMATS {array} array at offset {offset} starts inside the 24-byte header")]
    OverlapsHeader { array: &'static str, offset: u32 },
    #[error("IN_FORMATS {array} array at offset {offset} is not {align}-byte aligned")]
    Misaligned { array: &'static str, offset: u32, align: u32 },
    #[error("IN_FORMATS {array} array: {count} entries from offset {offset} overflow a u32 size")]
    CountOverflow { array: &'static str, count: u32, offset: u32 },
    #[error("IN_FORMATS {array} array offset {offset} is past the blob's {len} bytes")]
    OffsetPastEnd { array: &'static str, offset: u32, len: usize },
    #[error("IN_FORMATS {array} array (bytes {start}..{end}) is cut off by the blob's end at {len} bytes")]
    Truncated { array: &'static str, start: u32, end: u64, len: usize },
    #[error("IN_FORMATS format array (bytes {formats_start}..{formats_end}) and modifier array (bytes {modifiers_start}..{modifiers_end}) overlap")]
    ArraysOverlap { formats_start: u32, formats_end: u32, modifiers_start: u32, modifiers_end: u32 },
    #[error("IN_FORMATS modifier entry {entry} ({modifier:?}) sets bit {bit} at offset {offset}: format {offset}+{bit} is past the {count_formats} formats")]
    MaskBitPastFormats { entry: u32, modifier: Modifier, bit: u32, offset: u32, count_formats: u32 },
    #[error("IN_FORMATS blob lists {count} formats, more than the {max} dmabridge reads")]
    TooManyFormats { count: u32, max: u32 },
    #[error("IN_FORMATS blob has {count} modifier entries, more than the {max} dmabridge reads")]
    TooManyModifiers { count: u32, max: u32 },
    #[error("IN_FORMATS blob's modifier masks claim more than {max} format+modifier pairs (at least {pairs}); real planes have a few thousand")]
    TooManyPairs { pairs: u64, max: u64 },
}

fn u32_at(blob: &[u8], at: u32) -> Option<u32> {
    let at = usize::try_from(at).ok()?;
    let bytes = blob.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

fn u64_at(blob: &[u8], at: u32) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    let bytes = blob.get(at..at.checked_add(8)?)?;
    Some(u64::from_ne_bytes(bytes.try_into().ok()?))
}

/// Where one array lies, once checked against the blob: bytes `start..end`.
struct Span {
    start: u32,
    end: u32,
}

fn span(blob_len: u32, array: &'static str, count: u32, offset: u32, elem: u32, align: u32) -> Result<Span, KmsError> {
    if count == 0 {
        return Ok(Span { start: offset, end: offset });
    }
    if offset < HEADER_LEN {
        return Err(KmsError::OverlapsHeader { array, offset });
    }
    if offset % align != 0 {
        return Err(KmsError::Misaligned { array, offset, align });
    }
    let end = count.checked_mul(elem).and_then(|bytes| bytes.checked_add(offset)).ok_or(KmsError::CountOverflow {
        array,
        count,
        offset,
    })?;
    if offset >= blob_len {
        return Err(KmsError::OffsetPastEnd { array, offset, len: blob_len as usize });
    }
    if end > blob_len {
        return Err(KmsError::Truncated { array, start: offset, end: end.into(), len: blob_len as usize });
    }
    Ok(Span { start: offset, end })
}

/// Reads an `IN_FORMATS` blob. Formats come in blob order; for each, its layouts in the
/// order of the modifier entries that cover it.
pub fn parse_in_formats(blob: &[u8]) -> Result<FormatSet, KmsError> {
    let len = u32::try_from(blob.len()).map_err(|_| KmsError::BlobTooLarge { len: blob.len() })?;
    if len < HEADER_LEN {
        return Err(KmsError::TruncatedHeader { len: blob.len() });
    }
    let header = |i: u32| u32_at(blob, i * 4).ok_or(KmsError::TruncatedHeader { len: blob.len() });
    let version = header(0)?;
    if version != FORMAT_BLOB_VERSION {
        return Err(KmsError::UnsupportedVersion(version));
    }
    let (count_formats, formats_offset) = (header(2)?, header(3)?);
    let (count_modifiers, modifiers_offset) = (header(4)?, header(5)?);
    if count_formats > MAX_IN_FORMATS_FORMATS {
        return Err(KmsError::TooManyFormats { count: count_formats, max: MAX_IN_FORMATS_FORMATS });
    }
    if count_modifiers > MAX_IN_FORMATS_MODIFIERS {
        return Err(KmsError::TooManyModifiers { count: count_modifiers, max: MAX_IN_FORMATS_MODIFIERS });
    }
    let formats = span(len, "format", count_formats, formats_offset, FORMAT_LEN, 4)?;
    let modifiers = span(len, "modifier", count_modifiers, modifiers_offset, MODIFIER_LEN, 8)?;
    let disjoint = formats.start == formats.end
        || modifiers.start == modifiers.end
        || formats.end <= modifiers.start
        || modifiers.end <= formats.start;
    if !disjoint {
        return Err(KmsError::ArraysOverlap {
            formats_start: formats.start,
            formats_end: formats.end,
            modifiers_start: modifiers.start,
            modifiers_end: modifiers.end,
        });
    }
    // The spans were checked against the blob, so these reads cannot fail; if they did, the
    // array would be cut off.
    let past_end = |array, start: u32| KmsError::Truncated { array, start, end: u64::from(start) + 8, len: blob.len() };

    // First pass, no allocation: every mask bit names a listed format, and the pairs they
    // add up to are within bounds.
    let entry_at = |entry: u32| -> Result<(u64, u32, Modifier), KmsError> {
        let at = modifiers.start + entry * MODIFIER_LEN;
        let mask = u64_at(blob, at).ok_or(past_end("modifier", at))?;
        let offset = u32_at(blob, at + 8).ok_or(past_end("modifier", at))?;
        let modifier = Modifier::from_raw(u64_at(blob, at + 16).ok_or(past_end("modifier", at))?);
        Ok((mask, offset, modifier))
    };
    let mut pairs = 0u64;
    for entry in 0..count_modifiers {
        let (mask, offset, modifier) = entry_at(entry)?;
        if mask != 0 {
            let top = 63 - mask.leading_zeros();
            if offset.checked_add(top).map_or(true, |i| i >= count_formats) {
                let bit = (0..64u32)
                    .find(|b| mask & (1u64 << b) != 0 && offset.checked_add(*b).map_or(true, |i| i >= count_formats))
                    .unwrap_or(top);
                return Err(KmsError::MaskBitPastFormats { entry, modifier, bit, offset, count_formats });
            }
        }
        pairs += u64::from(mask.count_ones());
        if pairs > MAX_IN_FORMATS_PAIRS {
            return Err(KmsError::TooManyPairs { pairs, max: MAX_IN_FORMATS_PAIRS });
        }
    }

    let fourccs = (0..count_formats)
        .map(|i| u32_at(blob, formats.start + i * FORMAT_LEN).map(Fourcc::from_code))
        .collect::<Option<Vec<_>>>()
        .ok_or(past_end("format", formats.start))?;
    // Bucket the layouts per format first, so the work is linear in the blob's size however
    // many formats and modifier entries it claims.
    let mut layouts: Vec<Vec<Layout>> = vec![Vec::new(); fourccs.len()];
    for entry in 0..count_modifiers {
        let (mask, offset, modifier) = entry_at(entry)?;
        for bit in (0..64u32).filter(|b| mask & (1u64 << b) != 0) {
            let slot = offset
                .checked_add(bit)
                .and_then(|i| layouts.get_mut(usize::try_from(i).ok()?))
                .ok_or(KmsError::MaskBitPastFormats { entry, modifier, bit, offset, count_formats })?;
            slot.push(Layout::from_wire(modifier));
        }
    }
    Ok(fourccs
        .iter()
        .zip(&layouts)
        .flat_map(|(&fourcc, ls)| ls.iter().map(move |&layout| Format { fourcc, layout }))
        .collect())
}

/// Writes `set` as a version-1 `IN_FORMATS` blob laid out as the kernel lays it out.
///
/// A blob has one modifier order for all formats, so `parse_in_formats(write_in_formats(s))`
/// gives back `s` exactly when every format lists its modifiers in one common order (as a
/// plane's do); otherwise the same pairs come back, each format's in first-seen order.
/// [`Layout::Implicit`] is written as `DRM_FORMAT_MOD_INVALID`.
pub fn write_in_formats(set: &FormatSet) -> Vec<u8> {
    let fourccs = set.fourccs();
    let mut modifiers: Vec<Modifier> = Vec::new();
    for f in set.iter() {
        let m = f.layout.to_wire();
        if !modifiers.contains(&m) {
            modifiers.push(m);
        }
    }
    let mut entries: Vec<(u64, u32, Modifier)> = Vec::new();
    for &m in &modifiers {
        for (chunk_index, chunk) in fourccs.chunks(64).enumerate() {
            let mask = chunk
                .iter()
                .enumerate()
                .filter(|(_, &fourcc)| set.contains(&Format::new(fourcc, m)))
                .fold(0u64, |mask, (bit, _)| mask | (1u64 << bit));
            if mask != 0 {
                entries.push((mask, to_u32(chunk_index * 64), m));
            }
        }
    }
    let formats_offset = HEADER_LEN as usize;
    let modifiers_offset = (formats_offset + fourccs.len() * FORMAT_LEN as usize).next_multiple_of(8);
    let mut blob = Vec::with_capacity(modifiers_offset + entries.len() * MODIFIER_LEN as usize);
    for word in [
        FORMAT_BLOB_VERSION,
        0,
        to_u32(fourccs.len()),
        to_u32(formats_offset),
        to_u32(entries.len()),
        to_u32(modifiers_offset),
    ] {
        blob.extend_from_slice(&word.to_ne_bytes());
    }
    for f in &fourccs {
        blob.extend_from_slice(&f.code().to_ne_bytes());
    }
    blob.resize(modifiers_offset, 0);
    for (mask, offset, m) in entries {
        blob.extend_from_slice(&mask.to_ne_bytes());
        blob.extend_from_slice(&offset.to_ne_bytes());
        blob.extend_from_slice(&0u32.to_ne_bytes());
        blob.extend_from_slice(&m.raw().to_ne_bytes());
    }
    blob
}

/// Sizes in a blob are u32; a set needing more would be 100 million formats, which no
/// FormatSet in memory reaches, so saturating is only a guard.
fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const Y: Modifier = Modifier::from_raw(0x0100_0000_0000_0002);
    const X: Modifier = Modifier::from_raw(0x0100_0000_0000_0001);

    /// A blob assembled field by field, so each test can break exactly one thing.
    struct Blob {
        header: [u32; 6],
        formats: Vec<u32>,
        modifiers: Vec<(u64, u32, u64)>,
        total: Option<usize>,
    }

    impl Blob {
        fn new(formats: &[Fourcc], modifiers: &[(u64, u32, Modifier)]) -> Blob {
            let mods_off = (24 + formats.len() * 4).next_multiple_of(8) as u32;
            Blob {
                header: [1, 0, formats.len() as u32, 24, modifiers.len() as u32, mods_off],
                formats: formats.iter().map(|f| f.code()).collect(),
                modifiers: modifiers.iter().map(|&(m, o, md)| (m, o, md.raw())).collect(),
                total: None,
            }
        }

        fn bytes(&self) -> Vec<u8> {
            let mut b = Vec::new();
            for w in self.header {
                b.extend_from_slice(&w.to_ne_bytes());
            }
            for f in &self.formats {
                b.extend_from_slice(&f.to_ne_bytes());
            }
            b.resize((24 + self.formats.len() * 4).next_multiple_of(8), 0);
            for &(mask, off, m) in &self.modifiers {
                b.extend_from_slice(&mask.to_ne_bytes());
                b.extend_from_slice(&off.to_ne_bytes());
                b.extend_from_slice(&0u32.to_ne_bytes());
                b.extend_from_slice(&m.to_ne_bytes());
            }
            if let Some(t) = self.total {
                b.resize(t, 0);
            }
            b
        }
    }

    fn sample() -> Blob {
        Blob::new(
            &[Fourcc::XRGB8888, Fourcc::ARGB8888, Fourcc::NV12],
            &[(0b011, 0, Y), (0b111, 0, Modifier::LINEAR), (0b100, 0, Modifier::INVALID)],
        )
    }

    #[test]
    fn reads_formats_in_blob_order_with_their_modifiers() {
        let set = parse_in_formats(&sample().bytes()).unwrap();
        assert_eq!(
            set.iter().copied().collect::<Vec<_>>(),
            vec![
                Format::new(Fourcc::XRGB8888, Y),
                Format::linear(Fourcc::XRGB8888),
                Format::new(Fourcc::ARGB8888, Y),
                Format::linear(Fourcc::ARGB8888),
                Format::linear(Fourcc::NV12),
                Format::implicit(Fourcc::NV12),
            ]
        );
    }

    #[test]
    fn write_then_parse_round_trips_including_implicit() {
        let set = parse_in_formats(&sample().bytes()).unwrap();
        let blob = write_in_formats(&set);
        assert_eq!(parse_in_formats(&blob).unwrap(), set);
        assert_eq!(blob, sample().bytes(), "laid out as the kernel does");
    }

    #[test]
    fn offsets_beyond_64_formats_use_the_entry_offset() {
        let formats: Vec<Fourcc> = (0..70u32).map(|i| Fourcc::from_code(0x3030_3030 + i)).collect();
        let set: FormatSet = formats.iter().map(|&f| Format::new(f, X)).collect();
        let blob = write_in_formats(&set);
        assert_eq!(parse_in_formats(&blob).unwrap(), set);
        let b = Blob::new(&formats, &[(1 << 5, 64, X)]);
        let only = parse_in_formats(&b.bytes()).unwrap();
        assert_eq!(only.iter().copied().collect::<Vec<_>>(), vec![Format::new(formats[69], X)]);
    }

    #[test]
    fn empty_blob_is_an_empty_set() {
        let blob = write_in_formats(&FormatSet::new());
        assert_eq!(blob.len(), 24);
        assert!(parse_in_formats(&blob).unwrap().is_empty());
    }

    #[test]
    fn truncated_header() {
        assert_eq!(parse_in_formats(&[1, 0, 0]), Err(KmsError::TruncatedHeader { len: 3 }));
        assert_eq!(parse_in_formats(&sample().bytes()[..23]), Err(KmsError::TruncatedHeader { len: 23 }));
    }

    #[test]
    fn bad_version() {
        let mut b = sample();
        b.header[0] = 2;
        assert_eq!(parse_in_formats(&b.bytes()), Err(KmsError::UnsupportedVersion(2)));
    }

    #[test]
    fn offsets_past_the_end() {
        let mut b = sample();
        b.header[3] = 4096;
        assert_eq!(
            parse_in_formats(&b.bytes()),
            Err(KmsError::OffsetPastEnd { array: "format", offset: 4096, len: 112 })
        );
        let mut b = sample();
        b.header[5] = 4096;
        assert_eq!(
            parse_in_formats(&b.bytes()),
            Err(KmsError::OffsetPastEnd { array: "modifier", offset: 4096, len: 112 })
        );
    }

    #[test]
    fn truncated_arrays() {
        let mut b = sample();
        b.total = Some(b.bytes().len() - 1);
        assert_eq!(
            parse_in_formats(&b.bytes()),
            Err(KmsError::Truncated { array: "modifier", start: 40, end: 112, len: 111 })
        );
        let b = Blob::new(&[Fourcc::NV12, Fourcc::P010], &[]);
        assert_eq!(
            parse_in_formats(&b.bytes()[..28]),
            Err(KmsError::Truncated { array: "format", start: 24, end: 32, len: 28 })
        );
    }

    #[test]
    fn counts_that_overflow() {
        // Counts within the bounds, at an offset where the array's end passes 2^32.
        let mut b = sample();
        b.header[4] = 1000;
        b.header[5] = 0xffff_fff8;
        assert_eq!(
            parse_in_formats(&b.bytes()),
            Err(KmsError::CountOverflow { array: "modifier", count: 1000, offset: 0xffff_fff8 })
        );
        let mut b = sample();
        b.header[2] = MAX_IN_FORMATS_FORMATS;
        b.header[3] = 0xffff_fffc;
        assert!(matches!(parse_in_formats(&b.bytes()), Err(KmsError::CountOverflow { array: "format", .. })));
        // A count that fits a u32 size but not the blob truncates the array; no overflow.
        let mut b = sample();
        b.header[4] = 1000;
        assert!(matches!(parse_in_formats(&b.bytes()), Err(KmsError::Truncated { array: "modifier", .. })));
    }

    #[test]
    fn mask_bit_past_the_format_list() {
        let b = Blob::new(&[Fourcc::XRGB8888, Fourcc::NV12], &[(0b101, 0, Y)]);
        assert_eq!(
            parse_in_formats(&b.bytes()),
            Err(KmsError::MaskBitPastFormats { entry: 0, modifier: Y, bit: 2, offset: 0, count_formats: 2 })
        );
        let b = Blob::new(&[Fourcc::XRGB8888], &[(1 << 63, u32::MAX, Y)]);
        assert!(matches!(parse_in_formats(&b.bytes()), Err(KmsError::MaskBitPastFormats { bit: 63, .. })));
    }

    #[test]
    fn counts_beyond_the_bounds_are_refused_before_reading_the_arrays() {
        let mut b = sample();
        b.header[2] = MAX_IN_FORMATS_FORMATS + 1;
        assert_eq!(
            parse_in_formats(&b.bytes()),
            Err(KmsError::TooManyFormats { count: MAX_IN_FORMATS_FORMATS + 1, max: MAX_IN_FORMATS_FORMATS })
        );
        let mut b = sample();
        b.header[4] = u32::MAX;
        assert!(matches!(parse_in_formats(&b.bytes()), Err(KmsError::TooManyModifiers { .. })));
    }

    #[test]
    fn masks_claiming_too_many_pairs_are_refused() {
        // 64 formats, and (MAX / 64) + 1 entries each claiming all 64: one pair too many.
        let formats: Vec<Fourcc> = (0..64u32).map(|i| Fourcc::from_code(0x3030_3030 + i)).collect();
        let n = (MAX_IN_FORMATS_PAIRS / 64) as usize + 1;
        let entries: Vec<(u64, u32, Modifier)> = (0..n).map(|i| (u64::MAX, 0, Modifier::from_raw(i as u64))).collect();
        let b = Blob::new(&formats, &entries);
        assert_eq!(
            parse_in_formats(&b.bytes()),
            Err(KmsError::TooManyPairs { pairs: MAX_IN_FORMATS_PAIRS + 64, max: MAX_IN_FORMATS_PAIRS })
        );
        // Exactly at the bound parses (and repeats of a pair count but collapse).
        let b = Blob::new(&formats, &entries[..n - 1]);
        assert_eq!(parse_in_formats(&b.bytes()).map(|s| s.len()), Ok(MAX_IN_FORMATS_PAIRS as usize));
    }

    #[test]
    fn misaligned_and_overlapping_arrays() {
        let mut b = sample();
        b.header[5] += 4;
        b.total = Some(b.bytes().len() + 4);
        assert_eq!(parse_in_formats(&b.bytes()), Err(KmsError::Misaligned { array: "modifier", offset: 44, align: 8 }));
        let mut b = sample();
        b.header[3] = 26;
        assert_eq!(parse_in_formats(&b.bytes()), Err(KmsError::Misaligned { array: "format", offset: 26, align: 4 }));
        let mut b = sample();
        b.header[3] = 8;
        assert_eq!(parse_in_formats(&b.bytes()), Err(KmsError::OverlapsHeader { array: "format", offset: 8 }));
        let mut b = sample();
        b.header[5] = 24;
        assert!(matches!(parse_in_formats(&b.bytes()), Err(KmsError::ArraysOverlap { .. })));
    }
}
