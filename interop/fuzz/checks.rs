//! What each peers' fuzz target checks, shared with the corpus regression test
//! (`interop/tests/fuzz_corpus.rs` includes this file), so that a corpus replay checks
//! exactly what fuzzing checked. Every function takes arbitrary bytes; it may only panic
//! when a parser breaks a promise (a panic inside a parser, or a failed round trip). Each
//! returns whether its main parser accepted the input, so the corpus test can check that a
//! corpus holds both valid and malformed inputs.

#![allow(dead_code)]

use dmabridge_interop::peers::{gst, kms, v4l2, wayland};
use dmabridge_interop::FormatSet;

/// Same pairs, whatever the order (an IN_FORMATS blob has one modifier order for all
/// formats, so a write/parse round trip may reorder a format's modifiers).
fn same_pairs(a: &FormatSet, b: &FormatSet) -> bool {
    a.len() == b.len() && a.iter().all(|f| b.contains(f))
}

/// `Caps::parse`; what parses prints (both spellings) to text that parses back to the same
/// caps, and intersects with itself to itself.
pub fn gst_caps(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(caps) = gst::Caps::parse(text) else { return false };
    let printed = caps.to_string();
    let again = gst::Caps::parse(&printed).unwrap_or_else(|e| panic!("{printed:?} does not parse back: {e}"));
    assert_eq!(again, caps, "{printed:?}");
    assert_eq!(again.to_string(), printed);
    let inspect = caps.to_inspect_string();
    let from_inspect = gst::Caps::parse(&inspect).unwrap_or_else(|e| panic!("{inspect:?} does not parse back: {e}"));
    assert_eq!(from_inspect, caps, "{inspect:?}");
    let _ = (caps.drm_formats(), caps.width(), caps.height());
    // Generic lists intersect in quadratic time; keep the fuzzer's inputs where that is cheap.
    if text.len() <= 4096 {
        let _ = caps.intersect(&again);
    }
    true
}

/// `parse_drm_format_list` and `parse_drm_format`; what parses prints back to itself.
pub fn drm_format_list(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let list = gst::parse_drm_format_list(text);
    if let Ok(set) = &list {
        let printed = gst::print_drm_format_list(set);
        assert_eq!(gst::parse_drm_format_list(&printed).as_ref(), Ok(set), "{printed:?}");
    }
    if let Ok(f) = gst::parse_drm_format(text) {
        assert_eq!(gst::parse_drm_format(&gst::print_drm_format(f)), Ok(f));
    }
    let _ = gst::parse_drm_format_value(text);
    list.is_ok()
}

/// `parse_in_formats`; what parses writes to a blob that parses to the same pairs.
pub fn kms_in_formats(data: &[u8]) -> bool {
    let Ok(set) = kms::parse_in_formats(data) else { return false };
    let blob = kms::write_in_formats(&set);
    let again = kms::parse_in_formats(&blob).unwrap_or_else(|e| panic!("written blob does not parse: {e}"));
    assert!(same_pairs(&set, &again), "{set:?} != {again:?}");
    true
}

/// The first byte says how many of the next bytes are a tranche index array; the rest is
/// a format table.
pub fn wayland_table(data: &[u8]) -> bool {
    let Some((&n, rest)) = data.split_first() else { return false };
    let split = usize::from(n).min(rest.len());
    let (indices, table) = rest.split_at(split);
    let Ok(formats) = wayland::parse_format_table(table) else { return false };
    assert_eq!(wayland::parse_format_table(&wayland::write_format_table(&formats)).as_ref(), Ok(&formats));
    match wayland::tranche_formats(&formats, indices) {
        Ok(set) => {
            assert!(set.len() <= indices.len() / 2);
            true
        }
        Err(_) => false,
    }
}

/// Bytes as a `v4l2_format` (width, height, a table index or raw code, then bytesperline
/// and sizeimage pairs) for `plane_layouts`, and as text for `formats_of_list`; either
/// accepting counts.
pub fn v4l2_format(data: &[u8]) -> bool {
    let listed = std::str::from_utf8(data).is_ok_and(|text| v4l2::formats_of_list(text).is_ok());
    let word = |i: usize| -> u32 {
        let mut w = [0u8; 4];
        for (k, b) in w.iter_mut().enumerate() {
            *b = data.get(i * 4 + k).copied().unwrap_or(0);
        }
        u32::from_le_bytes(w)
    };
    let selector = word(2);
    let pixelformat = match v4l2::V4L2_FORMATS.get(selector as usize % 64) {
        Some(e) if selector & 0x8000_0000 == 0 => e.pixfmt.code(),
        _ => selector,
    };
    let count = (word(3) % 5) as usize;
    let planes =
        (0..count).map(|p| v4l2::V4l2Plane { bytesperline: word(4 + 2 * p), sizeimage: word(5 + 2 * p) }).collect();
    let fmt = v4l2::V4l2PlaneFormat { width: word(0), height: word(1), pixelformat, planes };
    let Ok(layouts) = v4l2::plane_layouts(&fmt) else { return listed };
    for l in &layouts {
        assert!(l.buffer < fmt.planes.len());
        let buffer_size = fmt.planes.get(l.buffer).map_or(0, |p| u64::from(p.sizeimage));
        assert!(l.offset.checked_add(l.size).is_some_and(|end| end <= buffer_size), "{l:?} in {fmt:?}");
    }
    true
}
