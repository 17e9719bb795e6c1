//! The process that owns a [`Collection`]: one `SOCK_SEQPACKET` socket per token, polled
//! together; messages drive the state machine, the [`Allocator`] runs when allocation is
//! due, and each holder is sent what concerns it. A socket that hangs up without a prior
//! Close is its holder's process dying: that token fails with "process exited".
//!
//! The server's ends are non-blocking: a holder that stops reading cannot stall the
//! server; once its socket buffer is full, a send to it fails and so does that holder.
//!
//! What the server itself cannot do for a holder (copy its buffers' fds, make a token's
//! socket pair: out of fds, EMFILE/ENFILE, or memory) fails that holder as
//! [`Collection::fail`] does, with a reason naming the errno, sent in a Failed message
//! before its socket is closed; the others are served on.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use tracing::{debug, info, warn};

use crate::dmabuf::{send_buffer, socketpair, HandoffError};

use super::alloc::Allocator;
use super::attrs::ReconcileOptions;
use crate::negotiate::Conflict;
use super::client::Token;
use super::limits::{MAX_CONFLICTS, MAX_NAME_LEN, MAX_TEXT_LEN};
use super::state::{Collection, Event, Failure, Progress, Rights, StateError, TokenId};
use super::transport::{self, TransportError};
use crate::framing::SocketError;
use super::wire::{conflict_text, Message, MAX_CONFLICT_NAMES};
use crate::text::clipped;

/// How long one poll waits before the loop looks at its stop flag again. Not a busy loop:
/// messages wake it at once.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Why a server could not start or stopped early.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("creating a token socket pair failed: {0}")]
    Socket(std::io::Error),
    #[error("poll failed: {0}")]
    Poll(std::io::Error),
}

/// How a server's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOutcome {
    /// Every holder closed its token; the buffers were released.
    Released,
    /// The collection failed; every live holder was told.
    Failed(Failure),
    /// The stop flag was raised.
    Stopped,
}

/// How reports name it: `released`, `failed: WHY`, `stopped`.
impl std::fmt::Display for ServerOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerOutcome::Released => f.write_str("released"),
            ServerOutcome::Failed(why) => write!(f, "failed: {why}"),
            ServerOutcome::Stopped => f.write_str("stopped"),
        }
    }
}

/// The server end of a collection. Build it with [`Server::new`], hand the root [`Token`]
/// to the initiator, and [`Server::run`] it (on a thread: [`Server::spawn`]).
pub struct Server {
    collection: Collection,
    allocator: Box<dyn Allocator>,
    /// The server's end of each live token's socket pair. The server owns these.
    sockets: BTreeMap<TokenId, OwnedFd>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("collection", &self.collection).field("sockets", &self.sockets.len()).finish()
    }
}

impl Server {
    /// A collection named `name` whose buffers `allocator` makes, and its root token.
    pub fn new(name: &str, allocator: Box<dyn Allocator>) -> Result<(Server, Token), ServerError> {
        Server::with_options(name, allocator, ReconcileOptions::default())
    }

    /// [`Server::new`] with collection-wide choices (disjoint planes).
    pub fn with_options(name: &str, allocator: Box<dyn Allocator>, options: ReconcileOptions) -> Result<(Server, Token), ServerError> {
        let (collection, root) = Collection::with_options(name, options)?;
        let (ours, theirs) = server_pair().map_err(ServerError::Socket)?;
        let mut sockets = BTreeMap::new();
        sockets.insert(root, ours);
        let server = Server { collection, allocator, sockets, stop: Arc::new(AtomicBool::new(false)) };
        Ok((server, Token::named(theirs, name)))
    }

    /// A flag that makes [`Server::run`] return [`ServerOutcome::Stopped`] within a poll
    /// interval once raised (the token sockets are then closed, which holders see as failure).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Runs [`Server::run`] on a new thread.
    pub fn spawn(self) -> JoinHandle<Result<ServerOutcome, ServerError>> {
        std::thread::spawn(move || self.run())
    }

    /// Serves until no token socket is left (every holder closed, or the collection failed
    /// and everyone was told) or the stop flag is raised.
    pub fn run(mut self) -> Result<ServerOutcome, ServerError> {
        info!(collection = %self.collection.name(), "collection server running");
        let ts = Timespec::try_from(POLL_INTERVAL).map_err(|_| ServerError::Poll(std::io::ErrorKind::InvalidInput.into()))?;
        while !self.sockets.is_empty() {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(ServerOutcome::Stopped);
            }
            let ids: Vec<TokenId> = self.sockets.keys().copied().collect();
            let ready: Vec<TokenId> = {
                let mut fds: Vec<PollFd<'_>> = self.sockets.values().map(|s| PollFd::new(s, PollFlags::IN)).collect();
                match poll(&mut fds, Some(&ts)) {
                    Ok(_) => {}
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(ServerError::Poll(e.into())),
                }
                ids.iter().zip(&fds).filter(|(_, f)| !f.revents().is_empty()).map(|(t, _)| *t).collect()
            };
            for t in ready {
                self.serve_one(t);
                self.drive();
            }
        }
        let outcome = match self.collection.failure() {
            Some(f) => ServerOutcome::Failed(f.clone()),
            None => ServerOutcome::Released,
        };
        info!(collection = %self.collection.name(), ?outcome, "collection server done");
        Ok(outcome)
    }

    /// Reads and handles one message from `t`'s socket.
    fn serve_one(&mut self, t: TokenId) {
        let Some(sock) = self.sockets.get(&t) else { return };
        let got = transport::recv(sock.as_fd());
        let result = match got {
            Ok((msg, fd)) => {
                drop(fd); // A client sends none; the decoder already refused a count mismatch.
                self.handle(t, msg)
            }
            // A wake-up without a message (the socket is non-blocking): not the holder's fault.
            Err(e) if e.is_would_block() => Ok(()),
            Err(e) if e.is_hangup() => {
                self.sockets.remove(&t);
                if self.collection.is_live(t) {
                    let name = self.collection.token_name(t).unwrap_or_default();
                    warn!(collection = %self.collection.name(), participant = %name, "holder hung up without closing");
                    self.collection.fail(t, "process exited").map(|_| ())
                } else {
                    Ok(())
                }
            }
            Err(e) => {
                warn!(collection = %self.collection.name(), %t, error = %e, "bad message");
                self.collection.fail(t, &format!("protocol error: {e}")).map(|_| ())
            }
        };
        if let Err(e) = result {
            debug!(%t, error = %e, "request refused");
            // A refused request is the requester's failure: it must not wait for a reply
            // that never comes.
            if self.collection.is_live(t) {
                let _ = self.collection.fail(t, &e.to_string());
            } else if let Some(sock) = self.sockets.remove(&t) {
                let f = Failure { participant: self.collection.name().to_owned(), reason: e.to_string() };
                let _ = transport::send(sock.as_fd(), &failed_msg(&f), None);
            }
        }
    }

    fn handle(&mut self, t: TokenId, msg: Message) -> Result<(), StateError> {
        match msg {
            Message::Bind(p) => self.collection.bind(t, p).map(|_| ()),
            Message::Duplicate { read_only, dispensable, name } => {
                let new = self.collection.duplicate(t, Rights { read_only }, dispensable, &name)?;
                self.hand_out(t, new, &name);
                Ok(())
            }
            Message::AttachToken { name } => {
                let new = self.collection.attach_token(t, &name)?;
                self.hand_out(t, new, &name);
                Ok(())
            }
            Message::Close => {
                self.sockets.remove(&t);
                self.collection.close(t).map(|_| ())
            }
            other => {
                let reason = format!("protocol error: a holder sent a {} message, which only the server sends", other.kind_name());
                self.collection.fail(t, &reason).map(|_| ())
            }
        }
    }

    /// Makes the socket pair of token `new` and sends its client end to `requester`. If the
    /// server cannot make the pair (out of fds), the requester, who waits for the token,
    /// fails with that cause (as any refused request does) rather than wait out its timeout.
    fn hand_out(&mut self, requester: TokenId, new: TokenId, name: &str) {
        let pair = match server_pair() {
            Ok(pair) => pair,
            Err(e) => {
                let reason = format!("{} while making token {name:?}: {e}", cause(e.raw_os_error().map(Errno::from_raw_os_error), "could not make a socket pair"));
                warn!(%new, %reason, "could not hand out a token");
                let _ = self.collection.close(new);
                if self.collection.is_live(requester) {
                    let _ = self.collection.fail(requester, &reason);
                }
                return;
            }
        };
        let (ours, theirs) = pair;
        let Some(sock) = self.sockets.get(&requester) else {
            let _ = self.collection.close(new);
            return;
        };
        match transport::send(sock.as_fd(), &Message::NewToken { name: name.to_owned() }, Some(theirs.as_fd())) {
            // `theirs` closes here: the requester holds the only client end now.
            Ok(()) => {
                self.sockets.insert(new, ours);
            }
            // The requester is gone or not reading; its own socket's state says which.
            Err(e) => {
                warn!(%new, error = %e, "could not hand out a token");
                let _ = self.collection.close(new);
            }
        }
    }

    /// Runs the allocator when due and delivers every queued event.
    fn drive(&mut self) {
        if let Progress::Allocate(_) = self.collection.progress() {
            self.collection.allocate_with(self.allocator.as_mut());
        }
        for (t, event) in self.collection.take_events() {
            let Some(sock) = self.sockets.get(&t) else { continue };
            let sent = match &event {
                Event::Allocated => self.send_buffers(t),
                Event::LateJoinRefused(c) => {
                    transport::send(sock.as_fd(), &Message::LateJoinRefused(wire_conflicts(c)), None).map_err(Delivery::from)
                }
                Event::Failed(f) => {
                    let r = transport::send(sock.as_fd(), &failed_msg(f), None).map_err(Delivery::from);
                    // Sysmem closes a failed node's channel; the holder keeps its buffers.
                    self.sockets.remove(&t);
                    r
                }
            };
            match sent {
                Ok(()) => {}
                Err(Delivery::Server(reason)) if self.collection.is_live(t) => {
                    warn!(%t, %reason, "could not hand out what a holder is owed");
                    // The holder is still listening: failing it queues a Failed that names
                    // the cause, delivered below before its socket is closed. Nothing else
                    // was sent to it (its copies are made before the first message).
                    let _ = self.collection.fail(t, &reason);
                }
                // A token leaves the collection by Close (its socket is gone already) or by a
                // failure, whose queued Failed tells it and closes its socket.
                Err(Delivery::Server(reason)) => debug!(%t, %reason, "nothing handed out to a token that has left"),
                Err(Delivery::Peer(e)) => {
                    warn!(%t, error = %e, "could not deliver an event");
                    // A holder that cannot be told cannot take part: it is gone, or it stopped
                    // reading and its socket buffer is full. Either way the server lets go of it.
                    self.sockets.remove(&t);
                    if self.collection.is_live(t) {
                        let _ = self.collection.fail(t, Delivery::peer_reason(&e));
                    }
                }
            }
        }
        // Failing a holder above may have queued events; deliver them now, not on the next
        // message, so that every survivor hears promptly.
        if self.collection.has_events() {
            self.drive();
        }
    }

    /// Sends `t` its buffers: the Allocated message, then each buffer with its fds. The
    /// holder's copies of every fd are made first, so that a server out of fds (or memory)
    /// says so in a Failed message instead of breaking off halfway through the buffers.
    fn send_buffers(&self, t: TokenId) -> Result<(), Delivery> {
        let sock = self.sockets.get(&t).ok_or(Delivery::Peer(TransportError::Socket(SocketError::Closed)))?;
        let bufs = self.collection.buffers_for(t).map_err(|e| Delivery::Server(server_side(&e)))?;
        let reconciled = self.collection.reconciled().cloned().ok_or_else(|| Delivery::Server("the server has no reconciled list to send".into()))?;
        let n = reconciled.constraints.buffers;
        transport::send(sock.as_fd(), &Message::Allocated { reconciled, buffers: n }, None)?;
        for (i, b) in bufs.iter().enumerate() {
            send_buffer(sock.as_fd(), i as u64, b).map_err(|e| match e {
                HandoffError::Socket(e) => Delivery::Peer(TransportError::Socket(e)),
                other => Delivery::Server(format!("the server could not encode buffer {i}: {other}")),
            })?;
        }
        // `bufs` (dups or read-only re-opens) close here; the holder has its own copies.
        Ok(())
    }
}

/// Why a holder was not sent what concerns it.
enum Delivery {
    /// The server could not make what it owes the holder (its copies of the fds: the
    /// process's or the system's file table is full, or memory ran out). The holder is
    /// still there and is told this reason.
    Server(String),
    /// The holder cannot be sent its messages: it is gone, or it stopped reading.
    Peer(TransportError),
}

impl Delivery {
    /// The failure reason the collection records for a holder that cannot be sent to.
    fn peer_reason(e: &TransportError) -> &'static str {
        if e.is_would_block() {
            "stopped reading its messages (its socket buffer is full)"
        } else if e.is_hangup() {
            "process exited"
        } else {
            "could not be sent its messages"
        }
    }
}

impl From<TransportError> for Delivery {
    fn from(e: TransportError) -> Self {
        Delivery::Peer(e)
    }
}

/// A holder's failure reason when the server could not copy its buffers: the cause by its
/// errno's name (the one a reader looks up), then which buffer, then the full error.
fn server_side(e: &StateError) -> String {
    let StateError::Descriptor { buffer, source, .. } = e else {
        return format!("the server could not hand out the buffers: {e}");
    };
    // The io::Error at the bottom of the chain (DescriptorError's source) carries the errno.
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(source);
    let mut errno = None;
    while let Some(err) = at {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            errno = io.raw_os_error().map(Errno::from_raw_os_error);
        }
        at = err.source();
    }
    format!("{} while handing out buffer {buffer}: {source}", cause(errno, "could not copy its fds"))
}

/// What ran out on the server's side, by the errno's name; `otherwise` when it was not a
/// shortage.
fn cause(errno: Option<Errno>, otherwise: &str) -> String {
    match errno {
        Some(Errno::MFILE) => "the server ran out of file descriptors (EMFILE)".into(),
        Some(Errno::NFILE) => "the system ran out of open files (ENFILE)".into(),
        Some(Errno::NOMEM) => "the server ran out of memory (ENOMEM)".into(),
        _ => format!("the server {otherwise}"),
    }
}

/// A token's socket pair: the server's end (first) non-blocking, the holder's blocking.
fn server_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (ours, theirs) = socketpair()?;
    rustix::io::ioctl_fionbio(&ours, true)?;
    Ok((ours, theirs))
}

fn failed_msg(f: &Failure) -> Message {
    Message::Failed(Failure { participant: clipped(&f.participant, MAX_TEXT_LEN), reason: clipped(&f.reason, MAX_TEXT_LEN) })
}

/// Conflicts cut to what the wire carries.
fn wire_conflicts(c: &[Conflict]) -> Vec<Conflict> {
    c.iter()
        .take(MAX_CONFLICTS)
        .map(|c| {
            let names = c.participants.iter().take(MAX_CONFLICT_NAMES).map(|n| clipped(n, MAX_NAME_LEN));
            Conflict::new(names, c.constraint, clipped(&conflict_text(c), MAX_TEXT_LEN), "")
        })
        .collect()
}

// The server runs on its own thread.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Server>();
};
