//! Why an import failed: one error for every entry of the import room.

use dmabridge_interop::dmabuf::{ImportCheckError, ReadError};
use dmabridge_interop::{Fourcc, Layout};

use crate::device::format_support::FormatSupportError;
use crate::device::requirements::Capability;
use crate::device::submit::SubmitError;
use crate::error::VkError;
use crate::resources::buffer::BufferError;
use crate::resources::image::ImageError;

/// Why an import failed. Layout and file problems come first, as [`ImportCheckError`], in the
/// fixed order of the checks.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The fourcc has no entry in dmabridge's Vulkan format table.
    #[error("{0} has no Vulkan format in dmabridge's table")]
    UnknownFourcc(Fourcc),
    /// One of the layout checks failed (before any driver call).
    #[error(transparent)]
    Check(#[from] ImportCheckError),
    /// The capability query failed.
    #[error(transparent)]
    Caps(#[from] FormatSupportError),
    /// The driver needs more memory for the object than the fd holds.
    #[error("the driver needs {needed} bytes for plane {plane}'s memory but the fd has {fd_size}")]
    ImageLargerThanFd { plane: usize, needed: u64, fd_size: u64 },
    /// The copy path copies whole texels.
    #[error("plane {plane}: stride {stride} is not a whole number of {texel}-byte texels, which a buffer copy needs")]
    StrideNotTexelAligned { plane: usize, stride: u64, texel: u64 },
    /// The copy path copies from texel-aligned offsets.
    #[error("plane {plane}: offset {offset} is not a multiple of the {texel}-byte texel, which a buffer copy needs")]
    OffsetNotTexelAligned { plane: usize, offset: u64, texel: u64 },
    /// A tiled layout the device does not import needs a detiling conversion, not a copy.
    #[error("layout {0} cannot be copied as linear rows; it needs a detiling conversion")]
    NeedsConversion(Layout),
    /// The device lacks a capability the import needs.
    #[error("this device lacks the {0} capability")]
    Unsupported(Capability),
    /// OPAQUE_FD memory from elsewhere means nothing here.
    #[error("OPAQUE_FD memory from another device or driver (device UUID {theirs_device}, driver UUID {theirs_driver}; ours {ours_device}, {ours_driver}) cannot be imported")]
    ForeignOpaqueFd { theirs_device: String, theirs_driver: String, ours_device: String, ours_driver: String },
    /// The exporter's image and ours disagree on memory.
    #[error("the exporter's image needs {theirs} bytes in memory type {type_index}; the same image here needs {ours} bytes in types {ours_types:#x}")]
    OpaqueMismatch { theirs: u64, ours: u64, type_index: u32, ours_types: u32 },
    /// No memory type can import the fd for the object.
    #[error("no memory type can import this fd")]
    NoMemoryType,
    /// An fd could not be duplicated.
    #[error("cannot duplicate the fd of plane {plane}: {source}")]
    Dup { plane: usize, source: std::io::Error },
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// A buffer of dmabridge's own (the read-copy path's staging) could not be made.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// The copy path's image could not be made.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// Submitting or waiting failed.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The caller required zero-copy and this buffer cannot be imported so.
    #[error("zero-copy import is not possible: {0}")]
    NotZeroCopy(String),
    /// A plane's file could not be read (the read-copy path): it shrank, or was never that long.
    #[error("plane {plane}: {source}")]
    Read { plane: usize, source: ReadError },
    /// A cached import's file is not what it was when it was checked.
    #[error("the buffer changed since it was imported: {0}")]
    Changed(ImportCheckError),
    /// A buffer over the files (or the staging buffer they are read into) would span more
    /// than its user may bind (a storage buffer's `maxStorageBufferRange`).
    #[error("the {what} spans {bytes} bytes, more than the {max} bytes its binding may span on this device")]
    TooLarge { what: String, bytes: u64, max: u64 },
}
