//! Readers (and, where dmabridge must answer in kind, writers) of the format lists that the
//! other parties to a dma-buf exchange publish:
//!
//! - [`gst`]: GStreamer `drm-format` strings and `memory:DMABuf` caps (seed 000);
//! - [`kms`]: the KMS plane property `IN_FORMATS` (`struct drm_format_modifier_blob`);
//! - [`wayland`]: linux-dmabuf v4 feedback (format table, tranches) and v3 `modifier` events;
//! - [`egl`]: the answers of `eglQueryDmaBufFormatsEXT` / `eglQueryDmaBufModifiersEXT`;
//! - [`v4l2`]: V4L2 pixel formats, including the tiled decoder layouts with no DRM modifier.
//!
//! Every reader turns the wire's `DRM_FORMAT_MOD_INVALID` into [`crate::Layout::Implicit`] and
//! returns a typed error (one enum per module) for malformed input; none of them panics or
//! does unbounded work on hostile input. Each byte/text parser has a fuzz target in
//! `interop/fuzz`, whose corpus `tests/fuzz_corpus.rs` replays.

pub mod egl;
pub mod gst;
pub mod kms;
pub mod v4l2;
pub mod wayland;

pub use egl::{EglEntry, EglError, EglFormats, EglModifier, EglUsage};
pub use gst::{
    parse_drm_format, parse_drm_format_list, parse_drm_format_value, print_drm_format, Caps, GstError, IntRange,
};
pub use kms::{parse_in_formats, write_in_formats, KmsError};
pub use v4l2::{V4l2Entry, V4l2Error, V4l2Formats, V4l2Mapping, V4l2PlaneFormat};
pub use wayland::{
    modifier_from_hi_lo, parse_format_table, tranche_formats, Feedback, FeedbackBuilder, Tranche, TrancheFlags,
    V3Formats, WaylandError,
};

/// Cuts peer-supplied text down for an error message, so that a hostile megabyte of input
/// does not become a megabyte of stderr.
pub(crate) fn clip(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(MAX).collect();
        t.push('…');
        t
    }
}
