//! Collection plumbing for a process that serves a collection itself: the server on a
//! thread of its own ([`Serving`]), and a collection between this process and one more
//! participant that lives in it too ([`LocalCollection`]: a decoder and the Vulkan device
//! it feeds, a pattern writer and the display it fills), both bound before the buffers
//! come.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use dmabridge::interop::collection::{Allocator, Buffers, CollectionError, Rights, Server, ServerError, ServerOutcome, Token};
use dmabridge::interop::negotiate::Participant;

/// A collection's server thread. One the demo lets go of while it still runs (an error
/// ended the demo, maybe before the collection was allocated) is stopped and joined when
/// dropped: otherwise the process would exit with that thread freeing the collection's
/// device memory while the driver tears itself down (the kernel lab saw the decoder die by
/// a signal after printing its error).
pub struct Serving {
    pub handle: Option<JoinHandle<Result<ServerOutcome, ServerError>>>,
    stop: Arc<AtomicBool>,
}

impl Serving {
    pub fn spawn(server: Server) -> Serving {
        let stop = server.stop_flag();
        Serving { handle: Some(server.spawn()), stop }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
    }
}

/// Why a local collection failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalCollectionError {
    #[error(transparent)]
    Collection(#[from] CollectionError),
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The thread that bound the other participant panicked.
    #[error("the thread binding {0} panicked")]
    Panicked(String),
    /// [`LocalCollection::finish`] found the server already joined.
    #[error("the collection's server was already joined")]
    Joined,
}

/// A collection allocated for this process's participant and one more of its own, both
/// holding read-write tokens: a read-only holder makes the collection use sealed memfds (a
/// dma-buf has no read-only reopen), and a kernel importer (V4L2's `DMABUF` queues, KMS)
/// takes only real dma-bufs.
pub struct LocalCollection {
    /// What this process's participant got.
    pub buffers: Buffers,
    tokens: Vec<Token>,
    serving: Serving,
}

impl LocalCollection {
    /// Negotiates and allocates collection `name` with `allocator` between `own` (bound
    /// here) and `other` (bound on a thread, since each bind waits for the other), each
    /// waiting at most `timeout`.
    pub fn negotiate(name: &str, allocator: Box<dyn Allocator>, own: &Participant, other: Participant, timeout: Duration) -> Result<LocalCollection, LocalCollectionError> {
        let (server, mut root) = Server::new(name, allocator)?;
        let serving = Serving::spawn(server);
        let other_name = other.name.clone();
        let token = root.duplicate(Rights { read_only: false }, false, &other_name, timeout)?;
        let bind = std::thread::spawn(move || {
            let mut token = token;
            let got = token.bind(&other, timeout);
            (token, got)
        });
        let buffers = root.bind(own, timeout)?;
        let (other_token, other_got) = bind.join().map_err(|_| LocalCollectionError::Panicked(other_name))?;
        // The other participant is this process: its fds are the same buffers'.
        drop(other_got?);
        Ok(LocalCollection { buffers, tokens: vec![root, other_token], serving })
    }

    /// Closes both tokens and waits for the server, which reports the buffers released
    /// once every holder has closed (the caller drops its buffers first).
    pub fn finish(mut self) -> Result<ServerOutcome, LocalCollectionError> {
        for t in self.tokens.drain(..) {
            t.close()?;
        }
        let handle = self.serving.handle.take().ok_or(LocalCollectionError::Joined)?;
        Ok(handle.join().map_err(|_| LocalCollectionError::Panicked("the collection's server".into()))??)
    }
}
