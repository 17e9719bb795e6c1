//! How much one collection takes on, whoever drives it (a trusted initiator or a hostile
//! peer process): every count and length that comes from outside is checked against these
//! before anything is allocated.

/// Most tokens alive at once in one collection (sysmem tracks a few dozen participants).
pub const MAX_TOKENS: usize = 64;
/// Most tokens one isolated sub-tree (a dispensable token or a late joiner, with everything
/// made from it) may hold at once. Past it, the request fails that sub-tree, which is
/// dropped as any failure of it is; so a dispensable holder cannot fill the collection's
/// [`MAX_TOKENS`] and make the next holder's request fail everyone.
pub const MAX_TOKENS_PER_SUBTREE: usize = 8;
/// Most buffers in one collection.
pub const MAX_BUFFERS: u32 = 64;
/// Largest width or height a collection allocates.
pub const MAX_EXTENT: u32 = 16384;
/// Longest token or participant name, in bytes.
pub const MAX_NAME_LEN: usize = 128;
/// Longest failure reason or conflict detail on the wire, in bytes.
pub const MAX_TEXT_LEN: usize = 1024;
/// Most formats in one attribute list on the wire.
pub const MAX_FORMATS: usize = 256;
/// Most conflicts in one refusal on the wire.
pub const MAX_CONFLICTS: usize = 16;
/// Largest buffer (all its files together) a collection allocates unless its
/// [`ReconcileOptions::max_buffer_bytes`](super::ReconcileOptions::max_buffer_bytes) says
/// otherwise: 1 GiB, a 16384 x 16384 RGBA8 frame. A holder's min size over it, or a layout
/// its alignments blow up past it, is a conflict at reconcile time, before any memory is
/// asked for (memfds are sparse, so an oversized one would only fail later; a dma-heap or
/// device allocation of that size takes the machine's memory).
pub const MAX_BUFFER_BYTES: u64 = 1 << 30;
