//! One collection message per `SOCK_SEQPACKET` record, with its fds in `SCM_RIGHTS`.
//! Every fd that arrives is an [`OwnedFd`] at once (`MSG_CMSG_CLOEXEC`), so every error
//! path closes it.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::wire::{self, Message, WireError, MAX_MESSAGE_LEN};

/// Room for more fds than any valid message carries, so a few too many are reported
/// precisely rather than cut off by the kernel.
const FD_SLOTS: usize = 8;

/// Why a message could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("sendmsg failed: {0}")]
    Send(io::Error),
    #[error("recvmsg failed: {0}")]
    Recv(io::Error),
    #[error("poll failed: {0}")]
    Poll(io::Error),
    /// The peer closed its end (or its process exited).
    #[error("the peer closed the socket")]
    Closed,
    #[error("nothing arrived within {0:?}")]
    Timeout(Duration),
    #[error("the message is longer than any valid one ({MAX_MESSAGE_LEN} bytes)")]
    TooLong,
    #[error("the peer sent more fds than any message carries; the kernel dropped the rest")]
    ControlTruncated,
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the message carries {received} fds, a valid one {expected}")]
    FdCount { expected: usize, received: usize },
}

impl TransportError {
    /// Whether a non-blocking socket simply had nothing (or no room) right now.
    pub fn is_would_block(&self) -> bool {
        match self {
            TransportError::Recv(e) | TransportError::Send(e) => e.raw_os_error() == Some(Errno::AGAIN.raw_os_error()),
            _ => false,
        }
    }

    /// Whether the peer is gone (EOF or a reset), as opposed to having sent something bad.
    pub fn is_hangup(&self) -> bool {
        match self {
            TransportError::Closed => true,
            TransportError::Recv(e) | TransportError::Send(e) => {
                matches!(e.raw_os_error(), Some(c) if c == Errno::CONNRESET.raw_os_error() || c == Errno::PIPE.raw_os_error())
            }
            _ => false,
        }
    }
}

/// Sends `msg` with `fd` (borrowed; the peer gets its own copy) where the message has one.
pub fn send(socket: BorrowedFd<'_>, msg: &Message, fd: Option<BorrowedFd<'_>>) -> Result<(), TransportError> {
    let bytes = wire::encode(msg)?;
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    if fds.len() != msg.fd_count() {
        return Err(TransportError::FdCount { expected: msg.fd_count(), received: fds.len() });
    }
    send_raw(socket, &bytes, &fds)
}

/// Sends `bytes` and `fds` as one record without looking at them (tests send hostile ones).
pub fn send_raw(socket: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), TransportError> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(TransportError::Send(io::Error::new(io::ErrorKind::InvalidInput, "too many fds")));
    }
    loop {
        // NOSIGNAL: a peer that died must be an error here, not a SIGPIPE for the process.
        match sendmsg(socket, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(TransportError::Send(e.into())),
        }
    }
}

/// Waits until `socket` is readable (or hung up) for at most `timeout`.
pub fn wait_readable(socket: BorrowedFd<'_>, timeout: Duration) -> Result<(), TransportError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = Timespec::try_from(left).map_err(|_| TransportError::Poll(io::ErrorKind::InvalidInput.into()))?;
        let mut fds = [PollFd::new(&socket, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => return Err(TransportError::Timeout(timeout)),
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(TransportError::Poll(e.into())),
        }
    }
}

/// Receives one record: a decoded message and the fds that came with it (exactly as many
/// as the message declares). Blocks until one arrives; use [`recv_timeout`] to bound it.
pub fn recv(socket: BorrowedFd<'_>) -> Result<(Message, Option<OwnedFd>), TransportError> {
    let mut buf = vec![0u8; MAX_MESSAGE_LEN + 1];
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(FD_SLOTS))];
    let (n, flags) = loop {
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = recvmsg(socket, &mut [IoSliceMut::new(&mut buf)], &mut control, RecvFlags::CMSG_CLOEXEC);
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        match r {
            Ok(m) => break (m.bytes, m.flags),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(TransportError::Recv(e.into())),
        }
    };
    if flags.contains(ReturnFlags::CTRUNC) {
        return Err(TransportError::ControlTruncated);
    }
    if n == 0 && fds.is_empty() {
        return Err(TransportError::Closed);
    }
    if flags.contains(ReturnFlags::TRUNC) || n > MAX_MESSAGE_LEN {
        return Err(TransportError::TooLong);
    }
    let msg = wire::decode(&buf[..n])?;
    if fds.len() != msg.fd_count() {
        return Err(TransportError::FdCount { expected: msg.fd_count(), received: fds.len() });
    }
    Ok((msg, fds.pop()))
}

/// [`recv`], waiting at most `timeout` for the record to arrive.
pub fn recv_timeout(socket: BorrowedFd<'_>, timeout: Duration) -> Result<(Message, Option<OwnedFd>), TransportError> {
    wait_readable(socket, timeout)?;
    recv(socket)
}
