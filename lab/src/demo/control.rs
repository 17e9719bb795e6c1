//! The demo's control channel: JSON messages, one per `SOCK_SEQPACKET` record, beside the
//! buffer socket that carries descriptors and fds in the interop wire format.
//!
//! The other process is not trusted: every message is decoded with a size cap and then
//! range-checked ([`ControlMessage::check`]) before anything uses it, and both sockets have
//! receive and send timeouts, so that a peer that stops answering gives an error naming it
//! ([`DemoError::PeerStalled`]) instead of a hang. A peer that hangs up (its sockets reach
//! end of file, or a send or receive is refused with `EPIPE`/`ECONNRESET`) is named too
//! ([`DemoError::PeerHungUp`]); when the peer is this process's child, [`Peer::reap`] turns
//! that into how it ended ([`DemoError::PeerDied`]: its wait status).

use std::os::fd::AsFd;
use std::process::Child;
use std::time::{Duration, Instant};

use dmabridge_interop::sync::SyncMethod;
use rustix::io::Errno;
use rustix::net::{recv, send, RecvFlags, SendFlags};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{who, DemoError, Ending};
use crate::stats::Percentiles;

use super::config::Mode;
use super::transfer::{ProducerShare, TransferTiming};

/// The largest control message (a mode report with 10 000 frame times fits).
pub const MAX_CONTROL_LEN: usize = 200 * 1024;

/// Most frames per mode (the CLI's `--frames` range).
pub const MAX_FRAMES: u32 = 10_000;
/// Largest pool of buffers a producer may announce.
pub const MAX_POOL: u32 = 64;
/// Frame extents the demo takes (the CLI's `--width`/`--height` range).
pub const EXTENTS: std::ops::RangeInclusive<u32> = 16..=8192;
/// Longest text field (names, paths, errors) in a message.
pub const MAX_TEXT: usize = 4096;
/// Most formats a participant may list.
pub const MAX_FORMATS: usize = 256;

/// The default of `--peer-timeout`: how long either process waits for the other.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a child that hung up is given to be seen exiting before it is taken to be
/// alive: the kernel closes a dying process's files a moment before its wait status is
/// ready, and a process that closed its sockets and lives on is not waited for longer.
pub const EXIT_GRACE: Duration = Duration::from_secs(5);

/// The process at the other end of the sockets, for errors that name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its role: "consumer", "producer", "decoder", "recorder".
    pub name: &'static str,
    /// Its process id: a child's from its spawn, the parent's from `getppid` at start-up
    /// (taken then: once the parent dies the child is re-parented). `None` where unknown.
    pub pid: Option<u32>,
    pub timeout: Duration,
}

impl Peer {
    /// This process's parent, which started it, as `name`: its pid is taken now, since a
    /// child whose parent dies is re-parented.
    pub fn parent(name: &'static str, timeout: Duration) -> Peer {
        let pid = rustix::process::getppid().and_then(|p| u32::try_from(p.as_raw_pid()).ok());
        Peer { name, pid, timeout }
    }

    /// This peer's role and pid as errors name them: "the consumer (pid 1234)".
    pub fn who(&self) -> String {
        who(self.name, self.pid)
    }

    /// The error for this peer having hung up.
    pub fn hung_up(&self) -> DemoError {
        DemoError::PeerHungUp { peer: self.name, pid: self.pid }
    }

    /// What `error` means once this peer, `child`, may have ended: after a hang-up, a child
    /// that ends within [`EXIT_GRACE`] is reaped and named with its wait status
    /// ([`DemoError::PeerDied`]); one still running keeps the hang-up error (the caller
    /// kills it). Any other error is returned as it is, and the child left alone.
    pub fn reap(&self, child: &mut Child, error: DemoError) -> DemoError {
        if !matches!(error, DemoError::PeerHungUp { .. }) {
            return error;
        }
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return DemoError::PeerDied { peer: self.name, pid: child.id(), how: Ending::of(status) },
                Ok(None) if start.elapsed() < EXIT_GRACE => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) | Err(_) => return error,
            }
        }
    }

    /// Sets the receive and send timeouts of `socket` to this peer's.
    pub fn apply(&self, socket: impl AsFd) -> Result<(), DemoError> {
        use rustix::net::sockopt::{set_socket_timeout, Timeout};
        for which in [Timeout::Recv, Timeout::Send] {
            set_socket_timeout(socket.as_fd(), which, Some(self.timeout)).map_err(|e| DemoError::Io(e.into()))?;
        }
        Ok(())
    }

    /// Waits until `socket` has something to read (or is hung up), at most this peer's
    /// timeout, so that what follows times the receive alone.
    pub fn wait_readable(&self, socket: impl AsFd) -> Result<(), DemoError> {
        use rustix::event::{poll, PollFd, PollFlags};
        let timeout = rustix::time::Timespec::try_from(self.timeout).map_err(|_| DemoError::Protocol("a peer timeout out of range".into()))?;
        loop {
            let mut fds = [PollFd::new(&socket, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(0) => return Err(DemoError::PeerStalled { peer: self.name, after: self.timeout }),
                // Data, a hang-up or an error: the receive says which.
                Ok(_) => return Ok(()),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(DemoError::Io(e.into())),
            }
        }
    }

    /// What a failed receive or send from this peer means: a timeout or a hang-up names the
    /// peer.
    pub fn error(&self, e: Errno) -> DemoError {
        if e == Errno::AGAIN || e == Errno::WOULDBLOCK {
            DemoError::PeerStalled { peer: self.name, after: self.timeout }
        } else if e == Errno::PIPE || e == Errno::CONNRESET {
            self.hung_up()
        } else {
            DemoError::Io(e.into())
        }
    }

    /// [`Peer::error`] for the buffer socket's handoff errors.
    pub fn handoff_error(&self, e: dmabridge_interop::dmabuf::HandoffError) -> DemoError {
        use dmabridge_interop::dmabuf::HandoffError;
        use dmabridge_interop::framing::SocketError;
        match &e {
            HandoffError::Socket(SocketError::Recv(io) | SocketError::Send(io)) if io.kind() == std::io::ErrorKind::WouldBlock => {
                DemoError::PeerStalled { peer: self.name, after: self.timeout }
            }
            HandoffError::Socket(s) if s.is_hangup() => self.hung_up(),
            HandoffError::NotAFence(_) => DemoError::PeerFence { peer: self.name, pid: self.pid, reason: e.to_string() },
            _ => DemoError::Handoff(e),
        }
    }

    /// What a failed wait for a submission means when that submission waited for this
    /// peer's fences: an expired or failed fence is the peer's broken promise, named as such.
    pub fn submit_error(&self, e: dmabridge::SubmitError) -> DemoError {
        match e {
            dmabridge::SubmitError::FenceExpired { .. } | dmabridge::SubmitError::FenceFailed { .. } => DemoError::PeerFence { peer: self.name, pid: self.pid, reason: e.to_string() },
            other => DemoError::Submit(other),
        }
    }

    /// [`Peer::error`] for a collection token sent over this peer's socket.
    pub fn collection_error(&self, e: dmabridge_interop::collection::CollectionError) -> DemoError {
        use dmabridge_interop::collection::CollectionError;
        match &e {
            CollectionError::Transport(t) if t.is_hangup() => self.hung_up(),
            _ => DemoError::Collection(e),
        }
    }
}

/// A message of the control channel: decoded, then checked before use.
pub trait ControlMessage: Serialize + DeserializeOwned {
    /// Every count, size and index in range.
    fn check(&self) -> Result<(), String>;
}

fn text(what: &str, s: &str) -> Result<(), String> {
    if s.len() > MAX_TEXT {
        return Err(format!("{what} is {} bytes long (at most {MAX_TEXT})", s.len()));
    }
    Ok(())
}

/// One format a participant accepts: fourcc and modifier (`None`: implicit).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WireFormat {
    pub fourcc: String,
    pub modifier: Option<String>,
}

/// A participant as it crosses the socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireParticipant {
    pub name: String,
    pub formats: Vec<WireFormat>,
    pub min_buffers: u32,
    pub read_only: bool,
    /// The device, for the report.
    pub device: String,
    /// Whether the device has `VK_EXT_image_drm_format_modifier`.
    pub modifiers_extension: bool,
    /// The sync methods its device and kernel take part in (cpu-wait when it says none).
    #[serde(default)]
    pub sync: Vec<SyncMethod>,
}

fn cpu_wait() -> SyncMethod {
    SyncMethod::CpuWait
}

/// Producer to consumer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ToConsumer {
    /// A mode begins; `sync` is how its frames are synchronised: with sync-file every
    /// buffer may come with an acquire fence and the consumer answers with a release fence
    /// (cpu-wait when the producer does not say).
    Start {
        mode: Mode,
        fourcc: String,
        width: u32,
        height: u32,
        frames: u32,
        pool: u32,
        sample_every: u32,
        #[serde(default = "cpu_wait")]
        sync: SyncMethod,
    },
    /// The frame in buffer `id`: its index, the checksum the consumer must find, and the
    /// producer's share of its transfer cost (absent: none measured).
    Frame {
        index: u32,
        id: u64,
        checksum: u32,
        #[serde(default)]
        transfer: ProducerShare,
    },
    End,
    Bye { out_dir: String },
}

/// What the consumer measured in one mode.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConsumerReport {
    pub verified: u32,
    pub mismatches: Vec<Mismatch>,
    /// Per-frame time from receiving the descriptor to handing the buffer back, in µs.
    pub frame_us: Vec<f64>,
    pub import_path: String,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_evictions: u64,
    pub max_held: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Mismatch {
    pub frame: u32,
    pub expected: u32,
    pub got: u32,
}

/// Consumer to producer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ToProducer {
    Caps { participant: WireParticipant },
    /// A mode's report, its frame times, and its transfer cost (absent: none measured).
    ModeDone {
        report: ConsumerReport,
        timing: Percentiles,
        #[serde(default)]
        transfer: TransferTiming,
    },
    Final { leaked_fds: i64, fds_before: usize, fds_after: usize, contact_sheet: Option<String> },
    Failed { error: String },
}

impl ControlMessage for ToConsumer {
    fn check(&self) -> Result<(), String> {
        match self {
            ToConsumer::Start { fourcc, width, height, frames, pool, sample_every, .. } => {
                text("the format", fourcc)?;
                if !EXTENTS.contains(width) || !EXTENTS.contains(height) {
                    return Err(format!("a {width}x{height} frame is outside {}..={} on a side", EXTENTS.start(), EXTENTS.end()));
                }
                if !(1..=MAX_FRAMES).contains(frames) {
                    return Err(format!("{frames} frames (1..={MAX_FRAMES})"));
                }
                if !(1..=MAX_POOL).contains(pool) {
                    return Err(format!("a pool of {pool} buffers (1..={MAX_POOL})"));
                }
                if *sample_every == 0 {
                    return Err("sample_every is 0".into());
                }
                Ok(())
            }
            ToConsumer::Frame { transfer, .. } => transfer.check(),
            ToConsumer::End => Ok(()),
            ToConsumer::Bye { out_dir } => text("the output directory", out_dir),
        }
    }
}

impl ControlMessage for ToProducer {
    fn check(&self) -> Result<(), String> {
        match self {
            ToProducer::Caps { participant: p } => {
                text("the participant's name", &p.name)?;
                text("the device's name", &p.device)?;
                if p.formats.len() > MAX_FORMATS {
                    return Err(format!("{} formats (at most {MAX_FORMATS})", p.formats.len()));
                }
                for f in &p.formats {
                    text("a fourcc", &f.fourcc)?;
                    text("a modifier", f.modifier.as_deref().unwrap_or(""))?;
                }
                if p.sync.len() > SyncMethod::ALL.len() {
                    return Err(format!("{} sync methods (at most {})", p.sync.len(), SyncMethod::ALL.len()));
                }
                if p.min_buffers > MAX_POOL {
                    return Err(format!("min_buffers {} (at most {MAX_POOL})", p.min_buffers));
                }
                Ok(())
            }
            ToProducer::ModeDone { report, timing, transfer } => {
                transfer.check()?;
                if report.frame_us.len() > MAX_FRAMES as usize || report.mismatches.len() > MAX_FRAMES as usize {
                    return Err(format!("a report of {} frames and {} mismatches", report.frame_us.len(), report.mismatches.len()));
                }
                if report.verified > MAX_FRAMES || report.max_held > MAX_POOL {
                    return Err(format!("{} verified frames, {} held at once", report.verified, report.max_held));
                }
                let finite = |v: f64| v.is_finite() && v >= 0.0;
                if !report.frame_us.iter().copied().all(finite) || !finite(timing.median) || !finite(timing.p99) {
                    return Err("a frame time that is negative or not a number".into());
                }
                text("the import path", &report.import_path)
            }
            ToProducer::Final { contact_sheet, .. } => text("the contact sheet's path", contact_sheet.as_deref().unwrap_or("")),
            ToProducer::Failed { error } => text("the error", error),
        }
    }
}

/// One control message as the socket carries it.
pub fn encode<T: ControlMessage>(msg: &T) -> Result<Vec<u8>, DemoError> {
    Ok(serde_json::to_vec(msg)?)
}

/// Decodes and checks one control message.
pub fn decode<T: ControlMessage>(bytes: &[u8]) -> Result<T, DemoError> {
    if bytes.len() > MAX_CONTROL_LEN {
        return Err(DemoError::Protocol(format!("a {}-byte control message is too long", bytes.len())));
    }
    let msg: T = serde_json::from_slice(bytes)?;
    msg.check().map_err(|e| DemoError::Protocol(format!("out of range: {e}")))?;
    Ok(msg)
}

pub fn send_msg<T: ControlMessage>(socket: impl AsFd, peer: &Peer, msg: &T) -> Result<(), DemoError> {
    let bytes = encode(msg)?;
    if bytes.len() > MAX_CONTROL_LEN {
        return Err(DemoError::Protocol(format!("a {}-byte control message is too long", bytes.len())));
    }
    loop {
        match send(socket.as_fd(), &bytes, SendFlags::NOSIGNAL) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(n) => return Err(DemoError::Protocol(format!("short send: {n} of {} bytes", bytes.len()))),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(peer.error(e)),
        }
    }
}

/// The next control message from `peer`, decoded and checked; an error after the peer's
/// timeout.
pub fn recv_msg<T: ControlMessage>(socket: impl AsFd, peer: &Peer) -> Result<T, DemoError> {
    let mut buf = vec![0u8; MAX_CONTROL_LEN + 1];
    let n = loop {
        match recv(socket.as_fd(), &mut buf, RecvFlags::empty()) {
            Ok((_, total)) => break total,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(peer.error(e)),
        }
    };
    if n == 0 {
        return Err(peer.hung_up());
    }
    if n > MAX_CONTROL_LEN {
        return Err(DemoError::Protocol("control message too long".into()));
    }
    decode(&buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_messages_are_refused() {
        let start = |sample_every: u32, pool: u32, width: u32| {
            serde_json::to_vec(&ToConsumer::Start {
                mode: Mode::Copy,
                fourcc: "AR24".into(),
                width,
                height: 64,
                frames: 10,
                pool,
                sample_every,
                sync: SyncMethod::CpuWait,
            })
                .unwrap()
        };
        assert!(decode::<ToConsumer>(&start(1, 4, 64)).is_ok());
        for bad in [start(0, 4, 64), start(1, 0, 64), start(1, 65, 64), start(1, 4, 1 << 20)] {
            assert!(matches!(decode::<ToConsumer>(&bad), Err(DemoError::Protocol(_))));
        }
        assert!(matches!(decode::<ToConsumer>(b"{\"type\":\"frame\"}"), Err(DemoError::Json(_))));
        assert!(matches!(decode::<ToProducer>(&vec![b' '; MAX_CONTROL_LEN + 1]), Err(DemoError::Protocol(_))));
        let nan = br#"{"type":"mode-done","report":{"verified":1,"mismatches":[],"frame_us":[1.0],"import_path":"x","cache_hits":0,"cache_misses":0,"cache_evictions":0,"max_held":1},"timing":{"median":-1.0,"p99":1.0}}"#;
        assert!(matches!(decode::<ToProducer>(nan), Err(DemoError::Protocol(_))));
    }

    /// The transfer figures are optional (a message without them decodes, as before them),
    /// and checked when present.
    #[test]
    fn transfer_figures_are_optional_and_checked() {
        let old = decode::<ToConsumer>(br#"{"type":"frame","index":1,"id":0,"checksum":7}"#).unwrap();
        assert!(matches!(old, ToConsumer::Frame { transfer, .. } if transfer == ProducerShare::default()));
        let share = |ns: u64| format!(r#"{{"type":"frame","index":1,"id":0,"checksum":7,"transfer":{{"send_ns":{ns},"copy_ns":null}}}}"#);
        assert!(decode::<ToConsumer>(share(12_000).as_bytes()).is_ok());
        assert!(matches!(decode::<ToConsumer>(share(u64::MAX).as_bytes()), Err(DemoError::Protocol(_))));
        let done = |median: f64| {
            let p = Percentiles { median, p99: 1.0 };
            let transfer = TransferTiming { total: p, handoff: p, ..TransferTiming::default() };
            serde_json::to_vec(&ToProducer::ModeDone { report: ConsumerReport::default(), timing: Percentiles::default(), transfer }).unwrap()
        };
        assert!(decode::<ToProducer>(&done(3.5)).is_ok());
        assert!(matches!(decode::<ToProducer>(&done(-1.0)), Err(DemoError::Protocol(_))));
    }
}
