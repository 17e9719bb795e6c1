//! One framed message and its fds over a Unix socket (`SCM_RIGHTS`). Every fd that arrives
//! is an [`OwnedFd`] at once (`MSG_CMSG_CLOEXEC`), pushed to the caller's list before
//! anything else can fail, so every error path closes it.

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

/// Why a framed message could not be sent or received, before its bytes were looked at
/// (or, [`SocketError::FdCount`], after: the fds that came are not the ones it declares).
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("sendmsg failed: {0}")]
    Send(io::Error),
    #[error("recvmsg failed: {0}")]
    Recv(io::Error),
    #[error("poll failed: {0}")]
    Poll(io::Error),
    /// The peer closed its end (or its process exited).
    #[error("the peer closed the socket")]
    Closed,
    #[error("the peer closed the socket in the middle of a message ({got} of {need} bytes)")]
    ClosedMidMessage { got: usize, need: usize },
    #[error("nothing arrived within {0:?}")]
    Timeout(Duration),
    #[error("the message is longer than any valid message ({max} bytes)")]
    TooLong { max: usize },
    #[error("the peer sent more fds than any message carries; the kernel dropped the rest")]
    ControlTruncated,
    #[error("the message declares {declared} fds but {received} arrived")]
    FdCount { declared: usize, received: usize },
}

impl SocketError {
    /// Whether a non-blocking socket simply had nothing (or no room) right now.
    pub fn is_would_block(&self) -> bool {
        match self {
            SocketError::Recv(e) | SocketError::Send(e) => e.raw_os_error() == Some(Errno::AGAIN.raw_os_error()),
            _ => false,
        }
    }

    /// Whether the peer is gone (EOF or a reset), as opposed to having sent something bad.
    pub fn is_hangup(&self) -> bool {
        match self {
            SocketError::Closed => true,
            SocketError::Recv(e) | SocketError::Send(e) => {
                matches!(e.raw_os_error(), Some(c) if c == Errno::CONNRESET.raw_os_error() || c == Errno::PIPE.raw_os_error())
            }
            _ => false,
        }
    }

    /// Refuses a message whose `received` fds are not the `declared` ones.
    pub fn check_fds(declared: usize, received: usize) -> Result<(), SocketError> {
        if declared != received {
            return Err(SocketError::FdCount { declared, received });
        }
        Ok(())
    }
}

/// Sends `bytes` with `fds` (borrowed; the kernel gives the peer its own copies) in one
/// message, without looking at either (tests send hostile ones). On a stream socket a
/// short write is completed without the fds, which went with the first part.
pub fn send(socket: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), SocketError> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut sent = 0usize;
    let mut first = true;
    while sent < bytes.len() || first {
        let mut control = SendAncillaryBuffer::new(&mut space);
        if first && !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(SocketError::Send(io::Error::new(io::ErrorKind::InvalidInput, "too many fds for one message")));
        }
        // NOSIGNAL: a peer that died must be an error here, not a SIGPIPE for the process.
        match sendmsg(socket, &[IoSlice::new(&bytes[sent..])], &mut control, SendFlags::NOSIGNAL) {
            // Without this a socket that accepts nothing would spin here forever.
            Ok(0) if !bytes.is_empty() => return Err(SocketError::Send(io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                sent += n;
                first = false;
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(SocketError::Send(e.into())),
        }
    }
    Ok(())
}

/// Waits until `socket` is readable (or hung up) for at most `timeout`.
pub fn wait_readable(socket: BorrowedFd<'_>, timeout: Duration) -> Result<(), SocketError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = Timespec::try_from(left).map_err(|_| SocketError::Poll(io::ErrorKind::InvalidInput.into()))?;
        let mut fds = [PollFd::new(&socket, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => return Err(SocketError::Timeout(timeout)),
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(SocketError::Poll(e.into())),
        }
    }
}

/// One `recvmsg` into `buf`, with room for `fd_slots` fds; every fd that arrives is
/// appended to `fds` (owned) before anything else can fail.
fn recv_once(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
    fd_slots: usize,
    fds: &mut Vec<OwnedFd>,
) -> Result<(usize, ReturnFlags), SocketError> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fd_slots))];
    loop {
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = recvmsg(socket, &mut [IoSliceMut::new(buf)], &mut control, RecvFlags::CMSG_CLOEXEC);
        for m in control.drain() {
            // Other control messages (credentials, if the socket asks for them) carry no fds.
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        match r {
            Ok(m) => {
                if m.flags.contains(ReturnFlags::CTRUNC) {
                    return Err(SocketError::ControlTruncated);
                }
                return Ok((m.bytes, m.flags));
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(SocketError::Recv(e.into())),
        }
    }
}

/// Receives one record from a record socket (seqpacket, datagram), where one `recvmsg` is
/// one whole message of at most `max_len` bytes, with room for `fd_slots` fds (give more
/// than any valid message carries, so that a few too many are reported precisely rather
/// than cut off by the kernel). Blocks unless the socket is non-blocking.
pub fn recv_record(
    socket: BorrowedFd<'_>,
    max_len: usize,
    fd_slots: usize,
    fds: &mut Vec<OwnedFd>,
) -> Result<Vec<u8>, SocketError> {
    // One byte more than the longest message, so that a longer one shows as such even where
    // the socket type does not report MSG_TRUNC.
    let mut buf = vec![0u8; max_len + 1];
    let (n, flags) = recv_once(socket, &mut buf, fd_slots, fds)?;
    if n == 0 && fds.is_empty() {
        return Err(SocketError::Closed);
    }
    if flags.contains(ReturnFlags::TRUNC) || n > max_len {
        return Err(SocketError::TooLong { max: max_len });
    }
    buf.truncate(n);
    Ok(buf)
}

/// Fills `buf[filled..]` from a stream socket, with room for `fd_slots` fds on each read:
/// a stream reader reads the header, then exactly the body it announces, so that the next
/// message (and its fds) stays in the socket.
pub fn recv_exact(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
    mut filled: usize,
    fd_slots: usize,
    fds: &mut Vec<OwnedFd>,
) -> Result<(), SocketError> {
    while filled < buf.len() {
        let (n, _) = recv_once(socket, &mut buf[filled..], fd_slots, fds)?;
        if n == 0 {
            if filled == 0 && fds.is_empty() {
                return Err(SocketError::Closed);
            }
            return Err(SocketError::ClosedMidMessage { got: filled, need: buf.len() });
        }
        filled += n;
    }
    Ok(())
}
