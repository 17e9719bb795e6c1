//! A token held in any process: the client end of a `SOCK_SEQPACKET` pair whose other end
//! the collection's [`Server`](super::Server) polls. Every call that waits takes a timeout
//! and returns [`CollectionError::Timeout`] rather than hang.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use tracing::debug;

use crate::dmabuf::{classify, recv as recv_buffer, DmaBuf, FdClass, FdTrust, HandoffError, Received};
use crate::negotiate::Participant;

use super::attrs::{describe, outputs_of_one, Reconciled};
use crate::negotiate::Conflict;
use super::limits::{MAX_BUFFERS, MAX_NAME_LEN};
use super::state::{Failure, Rights};
use super::transport::{self, wait_readable, TransportError};
use crate::framing::SocketError;
use super::wire::Message;

/// Messages a token keeps while it waits for a reply to something else.
const MAX_PENDING: usize = 4;

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CollectionError {
    /// The collection failed (or this token's dispensable sub-tree was dropped).
    #[error("the collection failed: {0}")]
    Failed(Failure),
    /// This late joiner's constraints do not fit the existing buffers.
    #[error("late join refused: {}", describe(.0))]
    LateJoinRefused(Vec<Conflict>),
    #[error("no answer from the collection server within {0:?} ({1})")]
    Timeout(Duration, &'static str),
    /// The server closed this token's socket (after a Close, or because the server stopped).
    #[error("the collection server closed this token's connection")]
    Closed,
    #[error(transparent)]
    Transport(TransportError),
    #[error("receiving a buffer failed: {0}")]
    Buffer(#[from] HandoffError),
    /// A name the collection would refuse (and fail this token for): checked here first.
    #[error("token name {0:?} must be 1 to {MAX_NAME_LEN} bytes without NUL")]
    BadName(String),
    /// The server sent something it should not have: the connection is not trusted further.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A buffer the server sent fails the client's own check ([`check_received`]): the
    /// server is broken or forged, and the buffers are not handed to the holder.
    #[error("buffer {buffer} from the server: {field}: {detail}")]
    BadBuffer { buffer: u32, field: BufferField, detail: String },
}

/// What about a received buffer the client refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferField {
    /// The fd is not a dma-buf or a sealed memfd (a pipe, a directory, a file that can shrink).
    FdKind,
    /// The fd's size is not what the reconciled list's outputs say.
    Size,
    /// A plane's bytes run past the end of its fd.
    PlaneExtent,
    /// The plane layout is not the reconciled list's outputs.
    Layout,
    /// A writable fd for a holder that bound read-only.
    AccessMode,
}

impl fmt::Display for BufferField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BufferField::FdKind => "fd kind",
            BufferField::Size => "size",
            BufferField::PlaneExtent => "plane extent",
            BufferField::Layout => "layout",
            BufferField::AccessMode => "access mode",
        })
    }
}

/// Checks buffer `index` as received from a collection server before the holder sees it,
/// trusting nothing the server said: every fd is a dma-buf or a memfd sealed against
/// shrinking; each file's real size is the one the outputs give; every plane lies where the
/// outputs put it and inside its file; and a holder that bound read-only got only read-only
/// fds.
pub fn check_received(index: u32, buf: &DmaBuf, reconciled: &Reconciled, read_only: bool) -> Result<(), CollectionError> {
    let bad = |field, detail: String| CollectionError::BadBuffer { buffer: index, field, detail };
    if read_only && !buf.read_only() {
        return Err(bad(BufferField::AccessMode, "a writable fd for a holder bound read-only".into()));
    }
    for (i, p) in buf.planes().enumerate() {
        let class = classify(p.fd, FdTrust::Untrusted).map_err(|e| bad(BufferField::FdKind, format!("plane {i}: {e}")))?;
        if !matches!(class, FdClass::DmaBuf | FdClass::SealedMemfd) {
            return Err(bad(BufferField::FdKind, format!("plane {i}: {class:?}, not a dma-buf or a sealed memfd")));
        }
    }
    // The buffer as its files say: its planes, and each object's real size.
    let actual = outputs_of_one(buf, index as usize).map_err(|e| bad(BufferField::Size, e.to_string()))?;
    for (i, p) in actual.planes.iter().enumerate() {
        // Every object has its size (outputs_of_one numbers them as it sizes them); a
        // missing one reads as 0 bytes, which no plane fits.
        let size = actual.object_sizes.get(p.object).copied().unwrap_or(0);
        match p.end() {
            Some(end) if end <= size => {}
            end => return Err(bad(BufferField::PlaneExtent, format!("plane {i}: bytes {}..{} of a {size}-byte fd", p.offset, end.map_or("2^64".into(), |e| e.to_string())))),
        }
    }
    if let Some(o) = &reconciled.outputs {
        if o.planes != actual.planes {
            return Err(bad(BufferField::Layout, format!("planes {:?}, the outputs say {:?}", actual.planes, o.planes)));
        }
        if o.object_sizes != actual.object_sizes {
            return Err(bad(BufferField::Size, format!("files of {:?} bytes, the outputs say {:?}", actual.object_sizes, o.object_sizes)));
        }
    }
    Ok(())
}

impl From<SocketError> for CollectionError {
    fn from(e: SocketError) -> Self {
        TransportError::from(e).into()
    }
}

impl From<TransportError> for CollectionError {
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::Socket(SocketError::Closed) => CollectionError::Closed,
            TransportError::Socket(SocketError::Timeout(d)) => CollectionError::Timeout(d, "waiting for a message"),
            other => CollectionError::Transport(other),
        }
    }
}

/// A holder's buffers: the reconciled list (with computed outputs) and its own fds
/// (read-only ones for a read-only token). The holder owns all of them.
#[derive(Debug)]
pub struct Buffers {
    pub reconciled: Reconciled,
    pub buffers: Vec<DmaBuf>,
}

/// Something the collection told a token.
#[derive(Debug)]
pub enum TokenEvent {
    Allocated(Buffers),
    LateJoinRefused(Vec<Conflict>),
    Failed(Failure),
}

/// A token of a buffer collection, possibly in another process than the collection.
///
/// # fd ownership
/// A `Token` owns its socket fd and closes it when dropped. Dropping a token without
/// [`Token::close`] looks to the server like its process died: a non-dispensable token
/// fails the collection (sysmem: closing a channel without Release). [`Token::send_token_over`]
/// gives the fd away; [`Token::into_fd`] hands it to the caller.
pub struct Token {
    sock: OwnedFd,
    name: String,
    pending: VecDeque<TokenEvent>,
    /// Whether this token bound read-only constraints: its buffers must come read-only.
    read_only: bool,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token").field("name", &self.name).field("fd", &self.sock.as_raw_fd()).finish()
    }
}

impl Token {
    /// A token from its socket, which the token now owns (inherited from a parent process,
    /// say).
    pub fn from_fd(sock: OwnedFd) -> Token {
        Token { sock, name: String::new(), pending: VecDeque::new(), read_only: false }
    }

    pub(crate) fn named(sock: OwnedFd, name: &str) -> Token {
        Token { sock, name: name.to_owned(), pending: VecDeque::new(), read_only: false }
    }

    /// Gives up the token's socket to the caller.
    pub fn into_fd(self) -> OwnedFd {
        self.sock
    }

    /// The name the token was created with (empty for a token made with [`Token::from_fd`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for the NewToken reply to a request; events that arrive first (the buffers, for
    /// a bound token attaching one) are kept for [`Token::wait_event`] and [`Token::bind`].
    fn await_token(&mut self, deadline: Instant, timeout: Duration) -> Result<Token, CollectionError> {
        loop {
            match self.next(deadline, timeout)? {
                Incoming::Token(t) => return Ok(t),
                Incoming::Event(TokenEvent::Failed(f)) => return Err(CollectionError::Failed(f)),
                Incoming::Event(e) => self.keep(e)?,
            }
        }
    }

    fn keep(&mut self, e: TokenEvent) -> Result<(), CollectionError> {
        if self.pending.len() >= MAX_PENDING {
            return Err(CollectionError::Protocol("the server sent too many unrequested messages".into()));
        }
        self.pending.push_back(e);
        Ok(())
    }

    /// A new token (sysmem Duplicate), before this one binds. `rights` cannot exceed this
    /// token's; a `dispensable` token's failure drops only its own sub-tree.
    ///
    /// A request the collection refuses (past [`MAX_TOKENS`](super::MAX_TOKENS) tokens, after
    /// binding) fails this token, as any protocol misuse does.
    pub fn duplicate(&mut self, rights: Rights, dispensable: bool, name: &str, timeout: Duration) -> Result<Token, CollectionError> {
        check_name(name)?;
        let deadline = Instant::now() + timeout;
        let msg = Message::Duplicate { read_only: rights.read_only, dispensable, name: name.to_owned() };
        transport::send(self.sock.as_fd(), &msg, None)?;
        self.await_token(deadline, timeout)
    }

    /// A late joiner's token (sysmem AttachToken): its bind is judged against the existing
    /// buffers and never changes them.
    pub fn attach_token(&mut self, name: &str, timeout: Duration) -> Result<Token, CollectionError> {
        check_name(name)?;
        let deadline = Instant::now() + timeout;
        transport::send(self.sock.as_fd(), &Message::AttachToken { name: name.to_owned() }, None)?;
        self.await_token(deadline, timeout)
    }

    /// Binds this token to `p` and waits (at most `timeout`) for the buffers: they come
    /// once every token has bound, or at once for a late joiner that fits.
    pub fn bind(&mut self, p: &Participant, timeout: Duration) -> Result<Buffers, CollectionError> {
        let deadline = Instant::now() + timeout;
        self.read_only = p.constraints.read_only;
        transport::send(self.sock.as_fd(), &Message::Bind(p.clone()), None)?;
        let e = match self.pending.pop_front() {
            Some(e) => e,
            None => match self.next(deadline, timeout)? {
                Incoming::Event(e) => e,
                Incoming::Token(_) => return Err(CollectionError::Protocol("a token arrived unrequested".into())),
            },
        };
        match e {
            TokenEvent::Allocated(b) => Ok(b),
            TokenEvent::LateJoinRefused(c) => Err(CollectionError::LateJoinRefused(c)),
            TokenEvent::Failed(f) => Err(CollectionError::Failed(f)),
        }
    }

    /// The next thing the collection tells this token (a later failure, typically), or
    /// `None` if nothing comes within `timeout`.
    pub fn wait_event(&mut self, timeout: Duration) -> Result<Option<TokenEvent>, CollectionError> {
        if let Some(e) = self.pending.pop_front() {
            return Ok(Some(e));
        }
        match self.next(Instant::now() + timeout, timeout) {
            Ok(Incoming::Event(e)) => Ok(Some(e)),
            Ok(Incoming::Token(_)) => Err(CollectionError::Protocol("a token arrived unrequested".into())),
            Err(CollectionError::Timeout(..)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Tells the collection this holder is done (sysmem Release) and closes the socket.
    /// The holder's buffers stay valid; the collection's are released once every token
    /// has closed.
    pub fn close(self) -> Result<(), CollectionError> {
        match transport::send(self.sock.as_fd(), &Message::Close, None) {
            Ok(()) => Ok(()),
            // Already gone (the collection failed and closed us): nothing left to release.
            Err(e) if e.is_hangup() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Sends this token to another process over `socket` (a Unix socket, borrowed): its
    /// socket fd travels in `SCM_RIGHTS` and is closed here, so the receiver holds the
    /// only copy and can forward it again.
    pub fn send_token_over(self, socket: BorrowedFd<'_>) -> Result<(), CollectionError> {
        let msg = Message::NewToken { name: self.name.clone() };
        transport::send(socket, &msg, Some(self.sock.as_fd()))?;
        debug!(name = %self.name, "token sent to another process");
        Ok(())
    }

    /// Receives a token that [`Token::send_token_over`] sent on `socket`, waiting at most `timeout`.
    pub fn recv_token(socket: BorrowedFd<'_>, timeout: Duration) -> Result<Token, CollectionError> {
        match transport::recv_timeout(socket, timeout)? {
            (Message::NewToken { name }, Some(sock)) => Ok(Token { sock, name, pending: VecDeque::new(), read_only: false }),
            (other, _) => Err(CollectionError::Protocol(format!("expected a token, got {}", other.kind_name()))),
        }
    }

    /// The next message, with an Allocated message's buffers read in full.
    fn next(&mut self, deadline: Instant, timeout: Duration) -> Result<Incoming, CollectionError> {
        let left = deadline.saturating_duration_since(Instant::now());
        wait_readable(self.sock.as_fd(), left).map_err(|e| match e {
            SocketError::Timeout(_) => CollectionError::Timeout(timeout, "waiting for the collection"),
            other => TransportError::from(other).into(),
        })?;
        let (msg, fd) = transport::recv(self.sock.as_fd())?;
        Ok(match (msg, fd) {
            (Message::NewToken { name }, Some(sock)) => Incoming::Token(Token { sock, name, pending: VecDeque::new(), read_only: false }),
            (Message::Allocated { reconciled, buffers }, None) => {
                if buffers > MAX_BUFFERS {
                    return Err(CollectionError::Protocol(format!("{buffers} buffers announced")));
                }
                let mut out = Vec::with_capacity(buffers as usize);
                for i in 0..u64::from(buffers) {
                    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
                    wait_readable(self.sock.as_fd(), left).map_err(CollectionError::from)?;
                    match recv_buffer(self.sock.as_fd())? {
                        Received::Buffer { id, buf } if id == i => {
                            let shape = (buf.format(), buf.width(), buf.height());
                            if shape != (reconciled.format, reconciled.width, reconciled.height) {
                                return Err(CollectionError::Protocol(format!("buffer {i} is {shape:?}, not what the list says")));
                            }
                            // i < buffers <= MAX_BUFFERS, so the cast is exact.
                            check_received(i as u32, &buf, &reconciled, self.read_only)?;
                            out.push(buf)
                        }
                        _ => return Err(CollectionError::Protocol(format!("expected buffer {i}"))),
                    }
                }
                Incoming::Event(TokenEvent::Allocated(Buffers { reconciled, buffers: out }))
            }
            (Message::LateJoinRefused(c), None) => Incoming::Event(TokenEvent::LateJoinRefused(c)),
            (Message::Failed(f), None) => Incoming::Event(TokenEvent::Failed(f)),
            (other, _) => return Err(CollectionError::Protocol(format!("unexpected {} message", other.kind_name()))),
        })
    }
}

fn check_name(name: &str) -> Result<(), CollectionError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.contains('\0') {
        return Err(CollectionError::BadName(crate::text::quoted(name)));
    }
    Ok(())
}

enum Incoming {
    Token(Token),
    Event(TokenEvent),
}
