//! Why the demos or the benchmark failed ([`DemoError`]), and how an error names the other
//! process: its role and pid ([`who`]) and, for a child, how it ended ([`Ending`]).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use dmabridge::{
    BufferError, FormatSupportError, ComputeError, EngineError, ExportError, ImportError, SamplerError, SubmitError, TransferError, ReadBackError, VkError,
};

/// Why the demo or the benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Transfer(#[from] TransferError),
    #[error(transparent)]
    ReadBack(#[from] ReadBackError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Caps(#[from] FormatSupportError),
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error(transparent)]
    Compute(#[from] ComputeError),
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Image(#[from] dmabridge::ImageError),
    #[error(transparent)]
    Convert(#[from] dmabridge::ConvertError),
    #[error(transparent)]
    Handoff(#[from] dmabridge_interop::dmabuf::HandoffError),
    #[error(transparent)]
    Descriptor(#[from] dmabridge_interop::dmabuf::DescriptorError),
    #[error(transparent)]
    Memfd(#[from] dmabridge_interop::dmabuf::MemfdError),
    #[error(transparent)]
    Write(#[from] dmabridge_interop::dmabuf::WriteError),
    #[error(transparent)]
    Heap(#[from] dmabridge_interop::dmabuf::HeapError),
    /// A fence from the other process did not signal in time.
    #[error("a fence from the other process: {0}")]
    Fence(#[from] dmabridge_interop::sync::WaitError),
    #[error(transparent)]
    Vk(#[from] VkError),
    #[error(transparent)]
    Collection(#[from] dmabridge_interop::collection::CollectionError),
    #[error(transparent)]
    CollectionServer(#[from] dmabridge_interop::collection::ServerError),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("control message: {0}")]
    Json(#[from] serde_json::Error),
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The other process did not answer within its timeout (stopped, or hung).
    #[error("the {peer} did not answer within {after:?} (stopped or hung?)")]
    PeerStalled { peer: &'static str, after: std::time::Duration },
    /// The other process closed its sockets or reset them (it died, or closed them and
    /// lives on); `pid` where it is known.
    #[error("{} hung up", who(peer, *pid))]
    PeerHungUp { peer: &'static str, pid: Option<u32> },
    /// The other process, this one's child, ended before its work was done (reaped after
    /// it hung up, or after it exited with a failure).
    #[error("the {peer} (pid {pid}) {how}")]
    PeerDied { peer: &'static str, pid: u32, how: Ending },
    /// A fence from the other process was refused (not a sync_file), or did not signal
    /// within the peer timeout: this process's GPU went on without it.
    #[error("{} sent a fence that broke its promise: {reason}", who(peer, *pid))]
    PeerFence { peer: &'static str, pid: Option<u32>, reason: String },
    /// The other process failed and said why (its own error, sent before it exited).
    #[error("{} failed: {error}", who(peer, *pid))]
    PeerFailed { peer: &'static str, pid: Option<u32>, error: String },
    #[error("cannot write {path}: {detail}")]
    Output { path: String, detail: String },
    #[error("{0}")]
    Unavailable(String),
}

/// How a child process ended, from its wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It exited with this status.
    Exited(i32),
    /// This signal killed it.
    Killed(i32),
}

impl Ending {
    /// The ending `status` records (a status that is neither, as a stop is, reads as exit 0:
    /// `wait` reports none for a child that has not ended).
    pub fn of(status: ExitStatus) -> Ending {
        match (status.code(), status.signal()) {
            (Some(code), _) => Ending::Exited(code),
            (None, Some(signal)) => Ending::Killed(signal),
            (None, None) => Ending::Exited(0),
        }
    }
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Ending::Exited(code) => write!(f, "exited with status {code}"),
            Ending::Killed(signal) => {
                // rustix's Debug names the signals it knows ("Signal::KILL", quoted by some
                // versions); a number it does not know (a real-time signal) stays a number.
                let name = rustix::process::Signal::from_named_raw(signal).map(|s| format!("{s:?}"));
                match name.as_deref().and_then(|n| n.trim_matches('"').strip_prefix("Signal::")) {
                    Some(n) => write!(f, "was killed by signal {signal} (SIG{n})"),
                    None => write!(f, "was killed by signal {signal}"),
                }
            }
        }
    }
}

/// A peer's role and pid as errors name them: "the consumer (pid 1234)", "the producer".
pub fn who(name: &str, pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("the {name} (pid {pid})"),
        None => format!("the {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ending_names_its_signal_or_its_status() {
        assert_eq!(Ending::Killed(9).to_string(), "was killed by signal 9 (SIGKILL)");
        assert_eq!(Ending::Killed(11).to_string(), "was killed by signal 11 (SIGSEGV)");
        assert_eq!(Ending::Killed(40).to_string(), "was killed by signal 40");
        assert_eq!(Ending::Exited(3).to_string(), "exited with status 3");
        assert_eq!(Ending::of(ExitStatus::from_raw(9)), Ending::Killed(9));
        assert_eq!(Ending::of(ExitStatus::from_raw(3 << 8)), Ending::Exited(3));
    }
}
