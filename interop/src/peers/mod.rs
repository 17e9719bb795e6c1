//! Readers (and, where dmabridge must answer in kind, writers) of the format lists that the
//! other parties to a dma-buf exchange publish:
//!
//! - [`gst`]: GStreamer `drm-format` strings and `memory:DMABuf` caps (seed 000);
//! - [`kms`]: the KMS plane property `IN_FORMATS` (`struct drm_format_modifier_blob`);
//! - [`kms_device`]: a live KMS device (`/dev/dri/cardN`): its planes' lists read through the
//!   kernel, and a dma-buf imported as a framebuffer (PRIME, ADDFB2) and shown (atomic commit);
//! - [`drm_info`]: the same list as `drm_info -j` prints it (JSON);
//! - [`probe_report`]: a GPU as `dmabridge probe --json` saved it, on another machine or driver;
//! - [`wayland`]: linux-dmabuf v4 feedback (format table, tranches) and v3 `modifier` events;
//! - [`egl`]: the answers of `eglQueryDmaBufFormatsEXT` / `eglQueryDmaBufModifiersEXT`;
//! - [`v4l2`]: V4L2 pixel formats, including the tiled decoder layouts with no DRM modifier;
//! - [`v4l2_device`]: a live V4L2 node: its formats and sizes as a participant, and its
//!   buffers streamed as exported (`VIDIOC_EXPBUF`) or imported (`V4L2_MEMORY_DMABUF`) dma-bufs.
//!
//! Every reader turns the wire's `DRM_FORMAT_MOD_INVALID` into [`crate::Layout::Implicit`] and
//! returns a typed error (one enum per module) for malformed input; none of them panics or
//! does unbounded work on hostile input. Every count a peer controls has a documented bound
//! (a `pub const MAX_...` in its module), checked before anything is allocated for it. Each
//! byte/text parser has a fuzz target in `interop/fuzz`, whose corpus `tests/fuzz_corpus.rs`
//! replays.
//!
//! Each module also says how its kind of peer synchronises (`SYNC_METHODS`, a
//! [`SyncMethods`](crate::sync::SyncMethods)): what a participant built from its list
//! supports in negotiation. [`SYNC_DEFAULTS`] is the table of them.

pub mod drm_info;
pub mod egl;
pub mod gst;
pub mod kms;
pub mod kms_device;
pub mod probe_report;
pub mod v4l2;
pub mod v4l2_device;
pub mod wayland;

pub use egl::{EglEntry, EglError, EglFormats, EglModifier, EglUsage};
pub use gst::{
    parse_drm_format, parse_drm_format_list, parse_drm_format_value, print_drm_format, Caps, GstError, IntRange,
};
pub use drm_info::DrmInfoError;
pub use kms::{parse_in_formats, write_in_formats, KmsError};
pub use kms_device::{
    DumbExport, FlipEvent, Framebuffer, KmsDevice, KmsDeviceError, KmsMode, KmsOutput, KmsPlane, KmsSummary, KmsWriteback,
    PlaneKind, Shown, WritebackTarget, WrittenBack,
};
pub use v4l2::{V4l2Entry, V4l2Error, V4l2Formats, V4l2Mapping, V4l2PlaneFormat};
pub use v4l2_device::{
    BufferInfo, BufferPlane, Dequeued, DeviceFormat, DeviceSummary, Direction, FormatSummary, FrameSizes, MappedBuffer,
    Memory, SizeRange, V4l2Device, V4l2DeviceError,
};
pub use wayland::{
    modifier_from_hi_lo, parse_format_table, tranche_formats, Feedback, FeedbackBuilder, Tranche, TrancheFlags,
    V3Formats, WaylandError,
};

/// How each kind of peer synchronises, by module: the `SYNC_METHODS` of each, in one table.
pub static SYNC_DEFAULTS: &[(&str, crate::sync::SyncMethods)] = &[
    ("kms", kms::SYNC_METHODS),
    ("wayland", wayland::SYNC_METHODS),
    ("gst", gst::SYNC_METHODS),
    ("v4l2", v4l2::SYNC_METHODS),
    ("egl", egl::SYNC_METHODS),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::SyncMethod;

    #[test]
    fn sync_defaults_cover_every_peer_module_and_always_allow_the_cpu_wait() {
        let names: Vec<&str> = SYNC_DEFAULTS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["kms", "wayland", "gst", "v4l2", "egl"]);
        for (peer, methods) in SYNC_DEFAULTS {
            assert!(methods.contains(SyncMethod::CpuWait), "{peer}");
        }
        let best = |n: &str| SYNC_DEFAULTS.iter().find(|(p, _)| *p == n).map(|(_, m)| m.best());
        // Only parties with an explicit fence API prefer sync_files.
        assert_eq!(best("kms"), Some(SyncMethod::SyncFile));
        assert_eq!(best("egl"), Some(SyncMethod::SyncFile));
        assert_eq!(best("wayland"), Some(SyncMethod::ImplicitBridge));
        assert_eq!(best("gst"), Some(SyncMethod::ImplicitBridge));
        assert_eq!(best("v4l2"), Some(SyncMethod::CpuWait));
    }
}
