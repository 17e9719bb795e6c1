//! Cross-process handoff: a [`DmaBuf`] and its fds in one Unix-socket message (`SCM_RIGHTS`),
//! in the [`wire`] format, and the "release buffer N" return message, each
//! optionally with a fence (a sync_file fd) that says when the sender's GPU work is done.
//!
//! Fences: [`send_buffer_with_fence`] and [`send_release_with_fence`] send one;
//! [`recv_fenced`] hands it to the receiver as a [`SyncFile`] ([`FencedReceived`]), once the
//! kernel has confirmed that it is one: an eventfd or any other fd that only looks like a
//! fence would never signal, and a receiver that waited on it would wait for ever. The older
//! [`send_buffer`]/[`send_release`]/[`recv`] carry none; [`recv`] refuses a message that has
//! one ([`HandoffError::UnexpectedFence`]), because a receiver that ignores a fence would
//! read a buffer before it is written or reuse one still being read.
//!
//! Use a `SOCK_SEQPACKET` socket ([`socketpair`] makes a pair): each message is one record,
//! so a rejected message is consumed whole and the next one reads cleanly. `SOCK_STREAM`
//! works too (the header says how much more to read), but after any error the stream's
//! framing is lost and the connection must be dropped.
//!
//! Every fd that arrives is owned by an [`OwnedFd`] the moment it is received (`recvmsg` with
//! `MSG_CMSG_CLOEXEC`), so every error path closes it; fds the control buffer had no room for
//! are discarded by the kernel and reported as [`SocketError::ControlTruncated`].

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{sockopt::socket_type, AddressFamily, SocketFlags, SocketType};

use super::descriptor::{DescriptorError, DmaBuf, PlaneDesc};
use super::wire::{self, BufferMsg, Message, WireError, HEADER_LEN, MAX_FDS, MAX_MESSAGE_LEN};
use crate::framing::{self, SocketError};
use crate::sync::{SyncFile, SyncFileError};

/// Room for this many fds per received message: more than any valid message carries, so a
/// peer that sends a few too many gets a precise [`SocketError::FdCount`]; beyond that the
/// kernel drops the excess and sets `MSG_CTRUNC`.
const RECV_FD_SLOTS: usize = 16;

/// Why a send or receive failed.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// The socket, or the fds that came do not match the message.
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error("could not query the socket type: {0}")]
    SocketType(io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the buffer in the message is not a valid descriptor: {0}")]
    Descriptor(#[from] DescriptorError),
    #[error("the message says disjoint={claimed}, but the fds' files say disjoint={actual}")]
    DisjointMismatch { claimed: bool, actual: bool },
    #[error(
        "the message says read_only={claimed}, but the fds' access modes say read_only={actual}"
    )]
    ReadOnlyMismatch { claimed: bool, actual: bool },
    /// The fd sent as a fence is not a sync_file (an eventfd, a file, a socket...), or could
    /// not be examined: the kernel's own check ([`SyncFile::new`]) refused it.
    #[error("the fence that came with the message was refused: {0}")]
    NotAFence(#[from] SyncFileError),
    /// [`recv`] got a fenced message; only [`recv_fenced`] can hand the fence over.
    #[error("message {id} carries a fence, which this receiver does not handle (use recv_fenced)")]
    UnexpectedFence { id: u64 },
}

/// What [`recv_fenced`] got. Every fd in it belongs to the receiver.
#[derive(Debug)]
pub enum FencedReceived {
    /// A buffer, as in [`Received::Buffer`], and the fence (a sync_file) that signals when
    /// its contents are ready, if the sender sent one.
    Buffer {
        id: u64,
        buf: DmaBuf,
        acquire_fence: Option<SyncFile>,
    },
    /// The peer is done with buffer `id`; if it sent a fence, the buffer may be reused only
    /// once that fence has signalled.
    Release {
        id: u64,
        release_fence: Option<SyncFile>,
    },
}

/// What [`recv`] got.
#[derive(Debug)]
pub enum Received {
    /// A buffer, with its fds now owned by the receiver's [`DmaBuf`]. Its layout has been
    /// checked for structure only; run [`check_import`](super::check_import) before any driver
    /// sees it.
    Buffer { id: u64, buf: DmaBuf },
    /// The peer is done with the buffer it was sent as `id`.
    Release { id: u64 },
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, both `O_CLOEXEC`, owned by the caller.
/// To give one end to a child process, clear `FD_CLOEXEC` on it in the child
/// (`rustix::io::fcntl_setfd` in `Command::pre_exec`) or dup it onto a known number.
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Sends `buf` as buffer `id`: its geometry in the bytes, a dup of each plane's fd in the
/// control message (the kernel dups them into the peer; `buf` keeps and still owns its fds).
/// The message says whether the fds are read-only and the planes disjoint, and the receiver
/// checks both against the fds it gets. No fence: the contents are ready when it is sent.
pub fn send_buffer(socket: impl AsFd, id: u64, buf: &DmaBuf) -> Result<(), HandoffError> {
    send_buffer_with_fence(socket, id, buf, None)
}

/// [`send_buffer`], plus an acquire fence: a sync_file (borrowed; the peer gets its own
/// copy) that signals when the contents are written. `None` sends no fence.
pub fn send_buffer_with_fence(
    socket: impl AsFd,
    id: u64,
    buf: &DmaBuf,
    acquire_fence: Option<&SyncFile>,
) -> Result<(), HandoffError> {
    let acquire_fence = acquire_fence.map(AsFd::as_fd);
    let msg = Message::Buffer(BufferMsg::describe(id, buf, acquire_fence.is_some()));
    let bytes = wire::encode(&msg)?;
    let fds: Vec<BorrowedFd<'_>> = buf.planes().map(|p| p.fd).chain(acquire_fence).collect();
    send_raw(socket.as_fd(), &bytes, &fds)?;
    tracing::debug!(id, format = %buf.format(), planes = buf.plane_count(), read_only = buf.read_only(), fence = acquire_fence.is_some(), "sent dma-buf");
    Ok(())
}

/// Sends `buf` as buffer `id` such that the peer only ever holds read-only fds: each plane is
/// re-opened `O_RDONLY` through `/proc/self/fd` ([`DmaBuf::reopen_read_only`]), those fds are
/// sent and then closed here. `buf` and its fds are untouched. The peer cannot map the
/// memory shared and writable.
pub fn send_buffer_read_only(socket: impl AsFd, id: u64, buf: &DmaBuf) -> Result<(), HandoffError> {
    let ro = buf.reopen_read_only()?;
    send_buffer(socket, id, &ro)
}

/// Tells the peer that buffer `id` (which it sent) may be reused now. Carries no fds.
pub fn send_release(socket: impl AsFd, id: u64) -> Result<(), HandoffError> {
    send_release_with_fence(socket, id, None)
}

/// Tells the peer that buffer `id` may be reused once `release_fence` (a sync_file,
/// borrowed; the peer gets its own copy) signals; `None` means at once.
pub fn send_release_with_fence(
    socket: impl AsFd,
    id: u64,
    release_fence: Option<&SyncFile>,
) -> Result<(), HandoffError> {
    let release_fence = release_fence.map(AsFd::as_fd);
    let msg = Message::Release {
        id,
        release_fence: release_fence.is_some(),
    };
    let bytes = wire::encode(&msg)?;
    let fds: Vec<BorrowedFd<'_>> = release_fence.into_iter().collect();
    send_raw(socket.as_fd(), &bytes, &fds)?;
    tracing::trace!(id, fence = release_fence.is_some(), "sent release");
    Ok(())
}

/// Sends `bytes` with `fds` (borrowed; the kernel gives the peer its own copies) in one
/// message, without looking at either: [`send_buffer`] and [`send_release`] are built on it,
/// and tests use it to send hostile messages ([`framing::send`]).
pub fn send_raw(
    socket: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), HandoffError> {
    Ok(framing::send(socket, bytes, fds)?)
}

/// Receives one message without a fence: [`recv_fenced`], refusing (and closing) a fence
/// with [`HandoffError::UnexpectedFence`].
///
/// fd ownership: on success the fds belong to the returned [`DmaBuf`]; on any error every fd
/// that arrived with the message has been closed.
pub fn recv(socket: impl AsFd) -> Result<Received, HandoffError> {
    match recv_fenced(socket)? {
        FencedReceived::Buffer { id, buf, acquire_fence: None } => Ok(Received::Buffer { id, buf }),
        FencedReceived::Release { id, release_fence: None } => Ok(Received::Release { id }),
        FencedReceived::Buffer { id, .. } | FencedReceived::Release { id, .. } => {
            let e = HandoffError::UnexpectedFence { id };
            tracing::warn!(error = %e, "rejected a handoff message");
            Err(e)
        }
    }
}

/// Receives one message and validates all of it: the wire format ([`wire::decode`]), the fd
/// count against the declared planes and fence, the descriptor's structure, the message's
/// disjoint and read-only claims against the fds' files and access modes, and that a fence
/// is a sync_file ([`SyncFile::new`]). Blocks unless the socket is non-blocking (then
/// `EAGAIN` comes back as [`SocketError::Recv`]).
///
/// fd ownership: on success the plane fds belong to the returned [`DmaBuf`] and the fence to
/// the returned [`SyncFile`]; on any error every fd that arrived with the message has been
/// closed.
pub fn recv_fenced(socket: impl AsFd) -> Result<FencedReceived, HandoffError> {
    let socket = socket.as_fd();
    let ty = socket_type(socket).map_err(|e| HandoffError::SocketType(e.into()))?;
    let mut fds = Vec::new();
    let result = if ty == SocketType::STREAM {
        recv_stream(socket, &mut fds)
    } else {
        recv_record(socket, &mut fds)
    }
    .and_then(|bytes| assemble(&bytes, fds));
    if let Err(e) = &result {
        if !matches!(e, HandoffError::Socket(SocketError::Closed)) {
            tracing::warn!(error = %e, "rejected a handoff message");
        }
    }
    result
}

fn assemble(bytes: &[u8], mut fds: Vec<OwnedFd>) -> Result<FencedReceived, HandoffError> {
    let msg = wire::decode(bytes)?;
    SocketError::check_fds(msg.fd_count(), fds.len())?;
    // The wire puts the fence last; the count was just checked, so it is there.
    let fence = if msg.has_fence() { fds.pop().map(SyncFile::new).transpose()? } else { None };
    match msg {
        Message::Release { id, .. } => {
            tracing::trace!(id, fence = fence.is_some(), "received release");
            Ok(FencedReceived::Release {
                id,
                release_fence: fence,
            })
        }
        Message::Buffer(b) => {
            let planes = fds
                .into_iter()
                .zip(&b.planes)
                .map(|(fd, p)| PlaneDesc { fd, offset: p.offset, stride: p.stride })
                .collect();
            let buf = DmaBuf::new(b.fourcc, b.layout, b.width, b.height, planes)?;
            if buf.disjoint() != b.disjoint {
                return Err(HandoffError::DisjointMismatch {
                    claimed: b.disjoint,
                    actual: buf.disjoint(),
                });
            }
            if buf.read_only() != b.read_only {
                return Err(HandoffError::ReadOnlyMismatch {
                    claimed: b.read_only,
                    actual: buf.read_only(),
                });
            }
            tracing::debug!(id = b.id, format = %buf.format(), planes = buf.plane_count(), fence = fence.is_some(), "received dma-buf");
            Ok(FencedReceived::Buffer {
                id: b.id,
                buf,
                acquire_fence: fence,
            })
        }
    }
}

/// A record socket (seqpacket, datagram): one `recvmsg` is one whole message.
fn recv_record(socket: BorrowedFd<'_>, fds: &mut Vec<OwnedFd>) -> Result<Vec<u8>, HandoffError> {
    Ok(framing::recv_record(socket, MAX_MESSAGE_LEN, RECV_FD_SLOTS, fds)?)
}

/// A stream socket: read exactly the header, then exactly the body it announces, so that the
/// next message (and its fds) stays in the socket.
fn recv_stream(socket: BorrowedFd<'_>, fds: &mut Vec<OwnedFd>) -> Result<Vec<u8>, HandoffError> {
    let mut buf = vec![0u8; HEADER_LEN];
    framing::recv_exact(socket, &mut buf, 0, RECV_FD_SLOTS, fds)?;
    let header = wire::decode_header(&buf)?;
    // decode_header bounds body_len by the longest valid body.
    buf.resize(HEADER_LEN + header.body_len as usize, 0);
    framing::recv_exact(socket, &mut buf, HEADER_LEN, RECV_FD_SLOTS, fds)?;
    Ok(buf)
}

// Keep the constant honest: a valid message never carries more fds than its planes and a
// fence, and one more than that must still arrive to be reported precisely.
const _: () = assert!(RECV_FD_SLOTS > MAX_FDS);
