//! One collection message per `SOCK_SEQPACKET` record, with its fds in `SCM_RIGHTS`
//! ([`crate::framing`]'s socket I/O). Every fd that arrives is an [`OwnedFd`] at once
//! (`MSG_CMSG_CLOEXEC`), so every error path closes it.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use crate::framing::{self, SocketError};

use super::wire::{self, Message, WireError, MAX_MESSAGE_LEN};

pub use crate::framing::wait_readable;

/// Room for more fds than any valid message carries, so a few too many are reported
/// precisely rather than cut off by the kernel.
const FD_SLOTS: usize = 8;

/// Why a message could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The socket, or the fds that came do not match the message.
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error(transparent)]
    Wire(#[from] WireError),
}

impl TransportError {
    /// Whether a non-blocking socket simply had nothing (or no room) right now.
    pub fn is_would_block(&self) -> bool {
        matches!(self, TransportError::Socket(e) if e.is_would_block())
    }

    /// Whether the peer is gone (EOF or a reset), as opposed to having sent something bad.
    pub fn is_hangup(&self) -> bool {
        matches!(self, TransportError::Socket(e) if e.is_hangup())
    }
}

/// Sends `msg` with `fd` (borrowed; the peer gets its own copy) where the message has one.
pub fn send(socket: BorrowedFd<'_>, msg: &Message, fd: Option<BorrowedFd<'_>>) -> Result<(), TransportError> {
    let bytes = wire::encode(msg)?;
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    SocketError::check_fds(msg.fd_count(), fds.len())?;
    send_raw(socket, &bytes, &fds)
}

/// Sends `bytes` and `fds` as one record without looking at them (tests send hostile ones).
pub fn send_raw(socket: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), TransportError> {
    Ok(framing::send(socket, bytes, fds)?)
}

/// Receives one record: a decoded message and the fds that came with it (exactly as many
/// as the message declares). Blocks until one arrives; use [`recv_timeout`] to bound it.
pub fn recv(socket: BorrowedFd<'_>) -> Result<(Message, Option<OwnedFd>), TransportError> {
    let mut fds: Vec<OwnedFd> = Vec::new();
    let bytes = framing::recv_record(socket, MAX_MESSAGE_LEN, FD_SLOTS, &mut fds)?;
    let msg = wire::decode(&bytes)?;
    SocketError::check_fds(msg.fd_count(), fds.len())?;
    Ok((msg, fds.pop()))
}

/// [`recv`], waiting at most `timeout` for the record to arrive.
pub fn recv_timeout(socket: BorrowedFd<'_>, timeout: Duration) -> Result<(Message, Option<OwnedFd>), TransportError> {
    wait_readable(socket, timeout)?;
    recv(socket)
}
