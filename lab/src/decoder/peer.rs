//! The decoder demo's other two processes (`dmabridge demo-decoder-peer`):
//! - the **consumer**, a display queue: it binds its collection token read-only, imports
//!   every frame through the engine's import cache and reads it back through the device,
//!   holds [`CONSUMER_DEPTH`] frames as a display would, and re-checks a frame's header when
//!   it hands the buffer back (a buffer overwritten while held would show there);
//! - the **recorder**, a late joiner: its token is attached to a running collection; it binds
//!   read-only and checks every frame it gets with `pread` (no Vulkan), and that a write
//!   through its fds fails.
//!
//! Both close a collection's token once they hold none of its buffers and a newer
//! collection has started (the old one drains), and report frames, drops, mismatches and
//! leaked fds at the end of the stream.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use dmabridge::ash::vk;
use dmabridge::interop::collection::Token;
use dmabridge::interop::dmabuf::{check_read_only, fd_count, read_exact_at, DmaBuf};
use dmabridge::interop::negotiate::{Constraints, CpuAccess, Participant};
use dmabridge::interop::{Format, FormatSet, Fourcc};
use dmabridge::{Engine, EngineOptions, ImageUse, ImportCache};

use crate::demo::control::{recv_msg, send_msg, Peer, EXIT_GRACE};
use crate::error::DemoError;

use super::stream::{header_of, packed_frame, planes, FromPeer, Header, PeerReport, ToPeer, CONSUMER_DEPTH, HEADER_LEN};

/// Which peer this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Consumer,
    Recorder,
}

impl std::str::FromStr for Role {
    type Err = String;

    /// A role by its [`Role::name`], as the decoder names it on the peer's command line.
    fn from_str(s: &str) -> Result<Role, String> {
        [Role::Consumer, Role::Recorder].into_iter().find(|r| r.name() == s).ok_or_else(|| format!("{s:?} is not a peer role (consumer or recorder)"))
    }
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Consumer => "consumer",
            Role::Recorder => "recorder",
        }
    }

    /// Frames held at once before the oldest is handed back (the decoder counts a peer
    /// that holds more after a quiet peer timeout as stalled).
    pub(super) fn depth(self) -> usize {
        match self {
            Role::Consumer => CONSUMER_DEPTH as usize,
            Role::Recorder => 1,
        }
    }

    /// What this peer binds: NV12 LINEAR, read-only; the consumer camps on its queue's
    /// buffers, the late joiner on none (it must fit what exists).
    pub fn participant(self) -> Participant {
        let formats: FormatSet = [Format::linear(Fourcc::NV12)].into_iter().collect();
        let constraints = match self {
            Role::Consumer => Constraints { min_buffers: CONSUMER_DEPTH, read_only: true, ..Default::default() },
            Role::Recorder => Constraints { min_buffers: 0, read_only: true, cpu_access: CpuAccess::Read, ..Default::default() },
        };
        Participant::new(self.name(), formats).with_constraints(constraints)
    }
}

struct Held {
    token: Option<Token>,
    buffers: Vec<DmaBuf>,
    width: u32,
    height: u32,
}

struct PeerState {
    role: Role,
    peer: Peer,
    engine: Option<Engine>,
    cache: Option<ImportCache>,
    collections: BTreeMap<u32, Held>,
    queue: VecDeque<(u32, u32, u32)>,
    last_frame: Option<u32>,
    report: PeerReport,
}

const USE: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw());

/// How long a peer waits for the decoder, given the peer timeout: the decoder may wait one
/// peer timeout on the other peer before it answers (a stalled recorder), one more on a
/// collection it then allocates without that peer, and up to [`EXIT_GRACE`] for a peer that
/// hung up to end. A peer that gave up sooner would fail the stream the decoder is saving.
pub fn patience(timeout: Duration) -> Duration {
    timeout.saturating_mul(2).saturating_add(EXIT_GRACE)
}

/// Runs one peer until the end of the stream; `control` is the inherited socket; `timeout`
/// is the demo's peer timeout, and this peer waits [`patience`] for the decoder.
pub fn run(role: Role, control: OwnedFd, validation: bool, timeout: Duration) -> Result<(), DemoError> {
    let peer = Peer::parent("decoder", patience(timeout));
    peer.apply(&control)?;
    let result = serve(role, control.as_fd(), validation, peer);
    if let Err(e) = &result {
        // Best effort: the decoder may already be gone.
        let _ = send_msg(&control, &peer, &FromPeer::Failed { error: e.to_string() });
    }
    result
}

fn serve(role: Role, control: BorrowedFd<'_>, validation: bool, peer: Peer) -> Result<(), DemoError> {
    // Counted across the device's whole life: the driver's own threads open and close files
    // while a device lives (Mesa's shader-cache writer), so a count with it open can race them.
    let before = fd_count()?;
    let engine = match role {
        Role::Consumer => Some(Engine::new(&EngineOptions { validation, ..EngineOptions::from_env() })?),
        Role::Recorder => None,
    };
    let cache = engine.as_ref().map(|e| ImportCache::new(e, 32));
    let mut s = PeerState { role, peer, engine, cache, collections: BTreeMap::new(), queue: VecDeque::new(), last_frame: None, report: PeerReport::default() };
    loop {
        match recv_msg::<ToPeer>(control, &peer)? {
            ToPeer::Collection { index, width, height, late } => s.bind(control, index, width, height, late)?,
            ToPeer::Frame { collection, buffer, frame } => {
                s.receive(collection, buffer, frame)?;
                while s.queue.len() > role.depth() {
                    s.release_oldest(control)?;
                }
            }
            ToPeer::End => break,
        }
    }
    while !s.queue.is_empty() {
        s.release_oldest(control)?;
    }
    for (index, held) in std::mem::take(&mut s.collections) {
        if let Some(t) = held.token {
            t.close()?;
        }
        send_msg(control, &peer, &FromPeer::Closed { collection: index })?;
    }
    if let Some(e) = &s.engine {
        for p in e.validation().map(|v| v.problems()).unwrap_or_default() {
            s.report.mismatches.push(format!("validation: {p}"));
        }
    }
    if let Some(c) = &s.cache {
        let st = c.stats();
        s.report.import_path = format!("{} (import cache: {} hits, {} misses)", s.report.import_path, st.hits, st.misses);
    }
    let mut report = std::mem::take(&mut s.report);
    drop(s.cache.take());
    drop(s);
    report.leaked_fds = fd_count()? as i64 - before as i64;
    report.mismatches.truncate(64);
    send_msg(control, &peer, &FromPeer::Final(report))
}

impl PeerState {
    fn bind(&mut self, control: BorrowedFd<'_>, index: u32, width: u32, height: u32, late: bool) -> Result<(), DemoError> {
        let timeout = self.peer.timeout;
        let mut token = Token::recv_token(control, timeout)?;
        let got = token.bind(&self.role.participant(), timeout)?;
        let (w, h) = (got.reconciled.width, got.reconciled.height);
        if (w, h) != (width, height) {
            return Err(DemoError::Protocol(format!("collection {index} was announced {width}x{height} but allocated {w}x{h}")));
        }
        if self.role == Role::Recorder {
            let refused = got.buffers.iter().all(|b| check_read_only(b).is_ok());
            self.report.writes_refused = Some(self.report.writes_refused.unwrap_or(true) && refused);
        }
        tracing::info!(role = self.role.name(), index, late, buffers = got.buffers.len(), "bound");
        let n = got.buffers.len() as u32;
        self.collections.insert(index, Held { token: Some(token), buffers: got.buffers, width, height });
        send_msg(control, &self.peer, &FromPeer::Bound { collection: index, buffers: n })
    }

    fn receive(&mut self, collection: u32, buffer: u32, frame: u32) -> Result<(), DemoError> {
        self.report.frames += 1;
        if let Some(last) = self.last_frame {
            if frame <= last {
                self.report.mismatches.push(format!("frame {frame} came after frame {last}"));
            } else {
                self.report.dropped += frame - last - 1;
            }
        }
        self.last_frame = Some(frame);
        let held = self.collections.get(&collection).ok_or_else(|| DemoError::Protocol(format!("frame {frame} in collection {collection}, which this process never bound")))?;
        let buf = held.buffers.get(buffer as usize).ok_or_else(|| DemoError::Protocol(format!("buffer {buffer} of collection {collection} does not exist")))?;
        let expected = packed_frame(frame, held.width, held.height);
        let got = match (&mut self.cache, self.role) {
            (Some(cache), Role::Consumer) => {
                let image = cache.import(buf.try_clone()?, ImageUse::new(USE))?;
                if self.report.import_path.is_empty() {
                    self.report.import_path = image.path().to_string();
                }
                image.read_back()?
            }
            _ => read_frame(buf, held.width, held.height)?,
        };
        if got == expected {
            self.report.verified += 1;
        } else {
            // A read-back shorter than a header (a broken path) says so instead of a header.
            let header = got.get(..HEADER_LEN).and_then(|h| <&[u8; HEADER_LEN]>::try_from(h).ok()).map(Header::from_bytes);
            let at = got.iter().zip(&expected).position(|(a, b)| a != b).unwrap_or(got.len().min(expected.len()));
            let header = header.map_or_else(|| format!("nothing: only {} bytes came back", got.len()), |h| format!("{h:?}"));
            self.report.mismatches.push(format!("frame {frame} ({}x{}) differs at byte {at}; its header says {header}", held.width, held.height));
        }
        self.queue.push_back((collection, buffer, frame));
        Ok(())
    }

    /// Hands the oldest held buffer back, after checking it still holds its frame; then
    /// closes any older collection this process no longer uses.
    fn release_oldest(&mut self, control: BorrowedFd<'_>) -> Result<(), DemoError> {
        let Some((collection, buffer, frame)) = self.queue.pop_front() else { return Ok(()) };
        if let Some(buf) = self.collections.get(&collection).and_then(|h| h.buffers.get(buffer as usize)) {
            let now = header_of(buf)?;
            if now.frame != frame {
                self.report.mismatches.push(format!("buffer {buffer} was overwritten while it held frame {frame} (now {now:?})"));
            }
        }
        send_msg(control, &self.peer, &FromPeer::Release { collection, buffer, frame })?;
        let newest = self.collections.keys().next_back().copied();
        let in_use: Vec<u32> = self.queue.iter().map(|q| q.0).collect();
        let old: Vec<u32> = self.collections.keys().copied().filter(|c| Some(*c) != newest && !in_use.contains(c)).collect();
        for c in old {
            if let Some(held) = self.collections.remove(&c) {
                // The import cache keeps images of these buffers: forget them with the buffers.
                if let Some(cache) = &mut self.cache {
                    for b in &held.buffers {
                        cache.forget(&b.identity());
                    }
                }
                if let Some(t) = held.token {
                    t.close()?;
                }
                drop(held.buffers);
                tracing::info!(role = self.role.name(), collection = c, "old collection drained and closed");
                send_msg(control, &self.peer, &FromPeer::Closed { collection: c })?;
            }
        }
        Ok(())
    }
}

/// The frame's visible rows, tightly packed, read with `pread` (the fds may be read-only).
fn read_frame(buf: &DmaBuf, width: u32, height: u32) -> Result<Vec<u8>, DemoError> {
    let mut out = Vec::new();
    for (p, (row, rows)) in buf.planes().zip(planes(width, height)) {
        let start = out.len();
        out.resize(start + row * rows, 0);
        for (y, dst) in out[start..].chunks_exact_mut(row).enumerate() {
            read_exact_at(p.fd, p.offset + y as u64 * p.stride, dst).map_err(|e| DemoError::Protocol(format!("reading row {y}: {e}")))?;
        }
    }
    Ok(out)
}
