//! Buffer collections: Fuchsia sysmem's tokens and NvSciBuf's attribute lists (seeds 003
//! and 004) over Unix sockets.
//!
//! An initiator creates a collection and its root token; tokens are duplicated (optionally
//! read-only, optionally *dispensable*) and handed to other participants, in this process or
//! another (a token is a socket; it travels as an fd). Each holder binds its token to an
//! attribute list (a [`Participant`](crate::negotiate::Participant): formats, usage, buffer
//! counts, alignments, extents, CPU access, domain, read-only). Once every live token that
//! was not attached late has bound (dispensable ones too: their lists are stand-ins for a
//! later joiner), the lists are reconciled by
//! [`crate::negotiate`] (the one merge dmabridge has), the [`Allocator`] makes the buffers,
//! and each holder gets its own fds (read-only ones through a read-only token) plus the
//! reconciled list with its computed outputs (size, per-plane offsets and pitches).
//!
//! Failure domains: a holder that fails (its process exits without closing, it sends garbage,
//! it binds what its rights forbid) fails the whole collection, and every live holder is told
//! who and why, unless the failure is inside a dispensable or late-attached sub-tree, which is
//! then dropped alone. So are its lists: when the bound lists conflict and those outside
//! every dispensable sub-tree do not conflict among themselves, each dispensable sub-tree
//! whose lists bring a conflict (a size over [`ReconcileOptions::max_buffer_bytes`], a
//! format nobody else has) fails alone, told the conflict, and the rest allocate. As in
//! sysmem, a live dispensable holder's list counts in the allocation like any other: the
//! others need not reconcile alone, and one that gives what they leave unsaid (the only
//! writer, the only bound on the extent, the only named format) helps them allocate. Only
//! when the lists left after the breakers are dropped still lack it does everyone fail:
//! the non-dispensable holders cannot allocate without a list that is not there. A late joiner ([`Collection::attach_token`]) is judged against the
//! buffers that exist and accepted or refused with the conflicts; nothing is reallocated.
//! Buffers are released when the last holder closes ([`WeakBuffers`] observes it).
//!
//! - [`state`]: the pure state machine ([`Collection`]), unit-testable without I/O.
//! - [`attrs`]: attribute lists: [`reconcile`], [`validate`], computed [`Outputs`].
//! - [`alloc`]: the [`Allocator`] trait and the memfd [`SystemAllocator`].
//! - [`wire`]: the versioned message format (pure bytes, fuzzed); [`transport`]: one message
//!   per `SOCK_SEQPACKET` record with its fds.
//! - [`server`]: the collection's owner, polling every token's socket; [`client`]: [`Token`].
//! - [`limits`]: the caps on tokens, buffers, names and lists.
//!
//! # How to use
//!
//! ```
//! use std::time::Duration;
//! use dmabridge_interop::collection::{Rights, Server, SystemAllocator};
//! use dmabridge_interop::negotiate::{Constraints, ExtentRange, Participant};
//! use dmabridge_interop::{Format, FormatSet, Fourcc};
//!
//! let t = Duration::from_secs(5);
//! let (server, mut root) = Server::new("frames", Box::new(SystemAllocator::new("frames")))?;
//! let serving = server.spawn();
//!
//! // Hand a duplicate to the consumer (here a thread; `Token::send_token_over` moves it to
//! // another process over any Unix socket).
//! let mut consumer = root.duplicate(Rights { read_only: true }, false, "display", t)?;
//! let formats: FormatSet = [Format::linear(Fourcc::XRGB8888)].into_iter().collect();
//! let display = Participant::new("display", formats.clone()).with_constraints(Constraints {
//!     min_buffers: 2,
//!     stride_align: 256,
//!     read_only: true,
//!     ..Default::default()
//! });
//! let waiting = std::thread::spawn(move || {
//!     let bufs = consumer.bind(&display, t);
//!     consumer.close().map(|()| bufs)
//! });
//!
//! let producer = Participant::new("renderer", formats).with_constraints(Constraints {
//!     width: ExtentRange::exactly(640),
//!     height: ExtentRange::exactly(480),
//!     min_buffers: 1,
//!     ..Default::default()
//! });
//! let mine = root.bind(&producer, t)?;
//! assert_eq!(mine.buffers.len(), 3); // 2 + 1: min-buffers summed
//! let outputs = mine.reconciled.outputs.as_ref().expect("computed outputs");
//! assert_eq!(outputs.planes[0].stride % 256, 0);
//! let theirs = waiting.join().expect("consumer thread")??;
//! assert!(theirs.buffers.iter().all(|b| b.read_only()));
//! root.close()?;
//! serving.join().expect("server thread")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod alloc;
pub mod attrs;
pub mod client;
pub mod limits;
pub mod server;
pub mod state;
pub mod transport;
pub mod wire;

pub use alloc::{Allocator, AllocatorError, Holders, SystemAllocator};
pub use attrs::{
    outputs_of, reconcile, validate, Outputs, OutputsError, ReconcileOptions,
    Reconciled, ValidateFailure,
};
pub use client::{check_received, BufferField, Buffers, CollectionError, Token, TokenEvent};
pub use limits::{MAX_BUFFERS, MAX_BUFFER_BYTES, MAX_EXTENT, MAX_NAME_LEN, MAX_TOKENS, MAX_TOKENS_PER_SUBTREE};
pub use server::{Server, ServerError, ServerOutcome};
pub use state::{BufferSet, Collection, Event, Failure, Progress, Rights, StateError, TokenId, WeakBuffers};
pub use transport::TransportError;
pub use wire::WireError;
