//! dmabridge-interop: the half of dmabridge that needs no Vulkan.
//!
//! It speaks the vocabulary every party to a dma-buf exchange shares: DRM fourccs,
//! format modifiers (with `INVALID` lifted into [`Layout::Implicit`]), ordered format
//! sets, and the static plane layout of each format. On top of that it reads peers'
//! format lists ([`peers`]), reconciles participants ([`negotiate`]), describes and passes
//! dma-bufs ([`dmabuf`]; both wire protocols share [`framing`]), names how the parties
//! synchronise ([`sync`]), reads the files a user names ([`user_file`]: regular files only, bounded) and holds the CPU reference of every layout conversion ([`tiling`]). [`collection`] runs sysmem-style buffer
//! collections (tokens, attribute lists, late joiners) across processes. An engine with no
//! Vulkan at all can use all of it.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod collection;
pub mod dmabuf;
pub mod user_file;
pub mod format;
pub mod format_info;
pub mod framing;
pub mod fourcc;
pub mod modifier;
pub mod negotiate;
pub mod peers;
pub mod plane_layout;
pub mod report;
pub mod spec;
pub mod sync;
pub mod tile_layout;
pub mod text;
pub mod tiling;

pub use format::{Format, FormatSet, Layout};
pub use format_info::{format_info, FormatInfo, PlaneInfo, Subsampling, FORMAT_INFO};
pub use fourcc::{Fourcc, FourccParseError};
pub use modifier::{AmdModifier, Modifier, ModifierParseError, NvidiaBlockLinear, Vendor};
pub use tile_layout::{TileLayout, TileLayoutParseError};
