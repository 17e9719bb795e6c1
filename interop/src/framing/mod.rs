//! The framing both dmabridge wire protocols share: the 16-byte header, the byte cursor and
//! writer their body codecs are built on, the errors of both, and the `SCM_RIGHTS` socket
//! I/O that carries one framed message with its fds.
//!
//! Two protocols frame their messages this way, each with its own magic, version and body
//! codec: the handoff format `DMBF` ([`crate::dmabuf::wire`]: one dma-buf or a release) and
//! the collection format `DMBC` ([`crate::collection::wire`]: tokens and attribute lists).
//!
//! ```text
//! header  0 magic [u8; 4] | 4 version u16 | 6 kind u16 | 8 body_len u32 (exact)
//!        12 fd_count u16 | 14 flags u16 (each protocol says which bits it knows)
//! ```
//!
//! Every field is little-endian. What a kind's body holds, which header flags exist and how
//! many fds a message has are the protocol's; framing checks only what every message has in
//! common ([`Protocol::header`], [`Protocol::body`]) and receives a message without looking
//! into it ([`recv_record`], [`recv_exact`]).

mod frame;
mod socket;

pub(crate) use frame::clean;
pub use frame::{Cursor, FrameError, Header, Protocol, Writer, HEADER_LEN};
pub use socket::{recv_exact, recv_record, send, wait_readable, SocketError};
