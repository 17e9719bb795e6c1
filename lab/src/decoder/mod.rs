//! `dmabridge demo --producer decoder`: a V4L2 stateless decoder's buffer rules across three
//! processes, with the buffers coming from buffer collections (seeds 002 and 004).
//!
//! - The **decoder** (this process) owns each collection's server. It duplicates a token for
//!   the consumer and binds its own constraints: NV12 LINEAR at the stream's size, 64-byte
//!   row alignment, system memory it writes with the CPU, and min-buffers = its decoded
//!   picture buffer ([`DPB`]) + the frame being decoded. The consumer binds read-only with
//!   min-buffers = its queue depth, so the pool is DPB + 1 + pipeline depth, reconciled by
//!   the collection and allocated on the device ([`dmabridge::DeviceAllocator`]).
//! - Frame n references frames n-1, n-2 and n-4 of its segment. Before decoding it, the
//!   decoder checks that each reference is intact in its buffer; it decodes into a buffer
//!   that holds no frame a later frame references and that no peer holds, and waits for a
//!   release otherwise. Nothing is ever overwritten early: the peers re-check each frame's
//!   header when they hand it back.
//! - `--resolution-change-at N`: from frame N the stream is 1920x1080. A new collection is
//!   negotiated and allocated (new tokens to every peer) while the old frames drain; each
//!   process closes its old token once it holds none of its buffers, and the old server
//!   reports its buffers released once the last one has.
//! - `--late-join-at N`: a third process, a read-only recorder, is started at frame N; its
//!   token is attached to the running collection (sysmem AttachToken), judged against the
//!   existing buffers, and it verifies every frame from then on. A late joiner's failure is
//!   its own: if the recorder dies, hangs up, breaks the protocol or stops answering (a
//!   SIGSTOP, a hang), the decoder reaps it (killing one that still runs, stopped or not),
//!   takes back the buffers it held (its tokens fail with its process, and the collection
//!   drops a late-attached sub-tree alone), reports the loss (`late_joiner.lost`, naming its
//!   pid and how it ended, and a warning) and decodes on with the consumer.
//! - Who stalled: when no peer has said anything for the peer timeout, the peers that owe
//!   the decoder an answer are the ones in the way (`Decoder::owes`): a Bound for a
//!   collection they were given, their report after the end, or a buffer held beyond their
//!   queue depth (a peer hands its oldest frame back as soon as it holds more). A stalled
//!   consumer ends the stream; a stalled recorder alone is lost. The peers wait longer for
//!   the decoder than the decoder for them ([`peer::patience`]): the decoder may
//!   spend one peer timeout waiting on the recorder before it answers the consumer.
//! - End of stream: the peers release and close everything and report. One that then does
//!   not exit within the peer timeout (stopped on its way out) is killed and reaped: a
//!   recorder's is a loss, a consumer's a problem.
//!
//! `summary.json` has `collections` (size, buffer count, modifier, layout, frames carried,
//! released), `dropped_frames`, `late_joiner` and every process's leaked fds.

pub mod peer;
pub mod stream;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use dmabridge::ash::vk;
use dmabridge::interop::collection::{CollectionError, Rights, Server, ServerOutcome, Token, TokenEvent};
use dmabridge::interop::dmabuf::{fd_count, socketpair, write_all_at, write_planes, DmaBuf};
use dmabridge::interop::negotiate::{Constraints, CpuAccess, Domain, ExtentRange, Participant};
use dmabridge::interop::{Format, FormatSet, Fourcc};
use dmabridge::{DeviceAllocator, Engine, EngineOptions, ImageUse};
use rustix::event::{poll, PollFd, PollFlags};
use serde_json::json;

use crate::demo::control::{recv_msg, send_msg, Peer};
use crate::local_collection::Serving;
use crate::error::{who, DemoError, Ending};

use self::peer::Role;
use self::stream::{frame_bytes, header_of, FromPeer, PeerReport, ToPeer, DPB, REFERENCES, SIZES};

/// What the decoder demo runs.
#[derive(Debug, Clone)]
pub struct DecoderConfig {
    pub frames: u32,
    pub resolution_change_at: Option<u32>,
    pub late_join_at: Option<u32>,
    pub out_dir: PathBuf,
    pub validation: bool,
    pub peer_timeout: Duration,
    /// Damage this frame after decoding it (a test of the peers' verification).
    pub corrupt_frame: Option<u32>,
}

/// The decoder's result: the summary and whether everything held.
pub struct DecoderOutcome {
    pub summary: serde_json::Value,
    pub ok: bool,
    pub problems: Vec<String>,
    /// What went wrong without failing the stream (a late joiner lost).
    pub warnings: Vec<String>,
}

/// A late joiner the stream went on without.
struct Lost {
    role: Role,
    pid: u32,
    /// The frame being decoded when the loss was seen (the frame count: at the end).
    at_frame: u32,
    /// How it ended, or what it did wrong.
    reason: String,
}

/// What [`Decoder::poll_message`] heard.
enum Heard {
    /// A message from a peer, applied.
    Message(Role, FromPeer),
    /// A late joiner failed and was let go ([`Decoder::lose`]).
    Lost(Role),
}

struct PeerProc {
    role: Role,
    control: OwnedFd,
    child: Child,
    report: Option<PeerReport>,
    /// The collection whose Bound it owes (its token was sent).
    binding: Option<u32>,
    /// It was told the stream ended, and owes its report.
    ended: bool,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    frame: Option<u32>,
    /// Held by the consumer, the recorder.
    held: [bool; 2],
}

struct Coll {
    index: u32,
    width: u32,
    height: u32,
    token: Option<Token>,
    server: Serving,
    outcome: Option<String>,
    buffers: Vec<DmaBuf>,
    slots: Vec<Slot>,
    frames_carried: u32,
    summary: serde_json::Value,
}

fn peer_index(role: Role) -> usize {
    match role {
        Role::Consumer => 0,
        Role::Recorder => 1,
    }
}

fn decoder_participant(width: u32, height: u32) -> Participant {
    let formats: FormatSet = [Format::linear(Fourcc::NV12)].into_iter().collect();
    Participant::new("decoder", formats).with_constraints(Constraints {
        width: ExtentRange::exactly(width),
        height: ExtentRange::exactly(height),
        min_buffers: DPB + 1,
        stride_align: 64,
        // It writes each frame and reads its references back.
        cpu_access: CpuAccess::ReadWrite,
        domain: Domain::System,
        ..Default::default()
    })
}

/// Runs the decoder; `exe` is this program, started again for the peers.
pub fn run(config: &DecoderConfig, exe: &std::path::Path) -> Result<DecoderOutcome, DemoError> {
    // Counted across the device's whole life: the driver's own threads open and close files
    // while a device lives (Mesa's shader-cache writer), so a count with it open can race them.
    let before = fd_count()?;
    let engine = Engine::new(&EngineOptions { validation: config.validation, ..EngineOptions::from_env() })?;
    let mut d = Decoder { config: config.clone(), engine, exe: exe.to_owned(), peers: Vec::new(), colls: Vec::new(), reference_errors: 0, problems: Vec::new(), frame: 0, lost: None };
    let result = d.stream().map_err(|e| d.explain(e));
    if result.is_err() {
        for p in &mut d.peers {
            let _ = p.child.kill();
        }
    }
    let mut reports = Vec::new();
    let timeout = d.timeout();
    for mut p in std::mem::take(&mut d.peers) {
        let pid = p.child.id();
        match wait_or_end(&mut p.child, timeout)? {
            // It reported (or the stream failed) and then did not exit: stopped or hung on
            // its way out. A late joiner's is a loss like any other; the consumer's fails
            // the stream.
            (status, Some(state)) if result.is_ok() => {
                let reason = format!(
                    "{} did not exit within {timeout:?} of the end of the stream (it was {state}); the decoder ended it: it {}",
                    who(p.role.name(), Some(pid)),
                    Ending::of(status)
                );
                tracing::warn!(role = p.role.name(), pid, %reason, "a peer did not exit");
                match p.role {
                    Role::Recorder if d.lost.is_none() => d.lost = Some(Lost { role: p.role, pid, at_frame: d.frame, reason }),
                    _ => d.problems.push(reason),
                }
            }
            (status, _) if !status.success() && result.is_ok() => d.problems.push(format!("the {} exited with {status}", p.role.name())),
            _ => {}
        }
        reports.push((p.role, p.report.take()));
    }
    result?;
    let colls: Vec<serde_json::Value> = d.colls.iter().map(|c| c.summary.clone()).collect();
    let all_released = d.colls.iter().all(|c| c.outcome.as_deref() == Some("released"));
    let validation: Vec<String> = d.engine.validation().map(|v| v.problems()).unwrap_or_default().iter().map(|p| p.to_string()).collect();
    let device = d.engine.info().name.clone();
    let lost = d.lost.take();
    let mut problems = std::mem::take(&mut d.problems);
    let reference_errors = d.reference_errors;
    drop(d);
    let decoder_leaked = fd_count()? as i64 - before as i64;

    let report_of = |role: Role| reports.iter().find(|(r, _)| *r == role).and_then(|(_, rep)| rep.clone());
    let consumer = report_of(Role::Consumer).unwrap_or_default();
    let recorder = report_of(Role::Recorder);
    problems.extend(validation.iter().map(|v| format!("validation: {v}")));
    if consumer.verified != config.frames {
        problems.push(format!("the consumer verified {} of {} frames", consumer.verified, config.frames));
    }
    problems.extend(consumer.mismatches.iter().map(|m| format!("consumer: {m}")));
    if reference_errors > 0 {
        problems.push(format!("{} reference frames were not intact when a later frame used them", reference_errors));
    }
    if !all_released {
        problems.push("a collection's buffers were not released".into());
    }
    let expected_late = config.late_join_at.filter(|&n| n < config.frames).map(|n| config.frames - n);
    // A lost late joiner is reported as such, not counted against the stream.
    if let Some(want) = expected_late.filter(|_| lost.is_none()) {
        match &recorder {
            Some(r) if r.verified == want && r.mismatches.is_empty() && r.writes_refused == Some(true) => {}
            Some(r) => problems.push(format!(
                "the late joiner verified {} of {want} frames (writes refused: {:?}); {}",
                r.verified,
                r.writes_refused,
                r.mismatches.join("; ")
            )),
            None => problems.push("the late joiner sent no report".into()),
        }
    }
    let leaked = json!({
        "decoder": decoder_leaked,
        "consumer": consumer.leaked_fds,
        "recorder": recorder.as_ref().map(|r| r.leaked_fds),
    });
    let total_leaked = decoder_leaked + consumer.leaked_fds + recorder.as_ref().map_or(0, |r| r.leaked_fds);
    if total_leaked != 0 {
        problems.push(format!("leaked fds: {leaked}"));
    }
    let dropped = consumer.dropped + recorder.as_ref().map_or(0, |r| r.dropped);
    let summary = json!({
        "producer": "decoder",
        "device": device,
        "frames": config.frames,
        "resolution_change_at": config.resolution_change_at,
        "late_join_at": config.late_join_at,
        "dpb": DPB,
        "references": REFERENCES,
        "collections": colls,
        "verified_frames": consumer.verified,
        "dropped_frames": dropped,
        "reference_errors": reference_errors,
        "consumer": {
            "frames": consumer.frames,
            "verified": consumer.verified,
            "import_path": consumer.import_path,
            "mismatches": consumer.mismatches,
            "leaked_fds": consumer.leaked_fds,
        },
        "late_joiner": match (&recorder, &lost) {
            (_, Some(l)) => json!({
                "joined_at": config.late_join_at,
                "lost": {"role": l.role.name(), "at_frame": l.at_frame, "pid": l.pid, "reason": l.reason},
            }),
            (Some(r), None) => json!({
                "joined_at": config.late_join_at,
                "frames": r.frames,
                "frames_verified": r.verified,
                "writes_refused": r.writes_refused,
                "mismatches": r.mismatches,
                "leaked_fds": r.leaked_fds,
                "lost": null,
            }),
            (None, None) => serde_json::Value::Null,
        },
        "leaked_fds": leaked,
        "total_leaked_fds": total_leaked,
        "problems": problems,
    });
    let warnings = lost.iter().map(|l| format!("the late joiner was lost at frame {}: {}; the stream went on without it", l.at_frame, l.reason)).collect();
    Ok(DecoderOutcome { ok: problems.is_empty(), problems, warnings, summary })
}

struct Decoder {
    config: DecoderConfig,
    engine: Engine,
    exe: PathBuf,
    peers: Vec<PeerProc>,
    colls: Vec<Coll>,
    reference_errors: u32,
    problems: Vec<String>,
    /// The frame being decoded (the frame count once the stream ends).
    frame: u32,
    lost: Option<Lost>,
}

impl Decoder {
    fn timeout(&self) -> Duration {
        self.config.peer_timeout
    }

    /// The peer in `role`, with its pid once it runs.
    fn peer(&self, role: Role) -> Peer {
        let pid = self.peers.iter().find(|p| p.role == role).map(|p| p.child.id());
        Peer { name: role.name(), pid, timeout: self.timeout() }
    }

    /// The roles of the peers that run now (a lost late joiner is gone).
    fn roles(&self) -> Vec<Role> {
        self.peers.iter().map(|p| p.role).collect()
    }

    /// The stream's error, named by how a peer ended where that is the cause: a peer that
    /// hung up and then ended, or a peer killed by a signal that failed a collection (its
    /// token closed with its process while the decoder waited on the collection). A peer
    /// that exited with a status after a collection failed is a consequence, not the cause:
    /// the collection's error stays.
    fn explain(&mut self, e: DemoError) -> DemoError {
        let (named, any_ending) = match &e {
            DemoError::PeerHungUp { peer, .. } => (*peer, true),
            DemoError::Collection(CollectionError::Failed(f)) => (f.participant.as_str(), false),
            _ => return e,
        };
        let Some(i) = self.peers.iter().position(|p| p.role.name() == named) else { return e };
        let peer = self.peer(self.peers[i].role);
        match peer.reap(&mut self.peers[i].child, peer.hung_up()) {
            died @ DemoError::PeerDied { .. } if any_ending => died,
            died @ DemoError::PeerDied { how: Ending::Killed(_), .. } => died,
            _ => e,
        }
    }

    /// A late joiner's failure is its own: it is let go ([`Decoder::lose`]) and `Ok(None)`
    /// says so; any other peer's failure is the stream's.
    fn survive<T>(&mut self, role: Role, r: Result<T, DemoError>) -> Result<Option<T>, DemoError> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) if role == Role::Recorder => {
                self.lose(role, e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Lets the late joiner in `role` go after `error`: reaps it (killing one that still
    /// runs), takes back every buffer it held, and records the loss. Its collection tokens
    /// fail with its process; the collection drops its late-attached sub-tree alone.
    fn lose(&mut self, role: Role, error: DemoError) {
        let Some(i) = self.peers.iter().position(|p| p.role == role) else { return };
        let peer = self.peer(role);
        let mut p = self.peers.remove(i);
        // How a silent one was when the wait ended (stopped, sleeping, busy), before it is
        // killed: the kill makes them all alike.
        let state = match error {
            DemoError::PeerStalled { .. } => process_state(p.child.id()),
            _ => None,
        };
        let error = peer.reap(&mut p.child, error);
        let reason = match error {
            DemoError::PeerDied { .. } => error.to_string(),
            // It stopped answering, hung up and lives on, or broke the protocol: it is ended
            // here (SIGKILL ends a stopped process too) and reaped, and says how it ended.
            _ => {
                let _ = p.child.kill();
                let ended = p.child.wait().map_or_else(|e| format!("waiting for it failed: {e}"), |s| format!("it {}", Ending::of(s)));
                match error {
                    DemoError::PeerStalled { after, .. } => {
                        let state = state.map(|s| format!(" (it was {s})")).unwrap_or_default();
                        format!("{} did not answer within {after:?}{state}; the decoder ended it: {ended}", peer.who())
                    }
                    other => format!("{other}; the decoder ended it: {ended}"),
                }
            }
        };
        for c in &mut self.colls {
            for s in &mut c.slots {
                s.held[peer_index(role)] = false;
            }
        }
        tracing::info!(role = role.name(), pid = p.child.id(), frame = self.frame, %reason, "late joiner lost; the stream goes on");
        self.lost = Some(Lost { role, pid: p.child.id(), at_frame: self.frame, reason });
        // `p` goes here, and its control socket with it.
    }

    /// Whether `p` owes the decoder an answer: the Bound of a collection it was given, its
    /// report once told the stream ended, or the release of a buffer it holds beyond its
    /// queue depth (it hands its oldest frame back as soon as it holds more). A peer that
    /// owes nothing may be silent for as long as the decoder is.
    fn owes(&self, p: &PeerProc) -> bool {
        let held = self.colls.iter().flat_map(|c| &c.slots).filter(|s| s.held[peer_index(p.role)]).count();
        p.binding.is_some() || (p.ended && p.report.is_none()) || held > p.role.depth()
    }

    fn spawn(&mut self, role: Role) -> Result<(), DemoError> {
        let (ours, theirs) = socketpair()?;
        self.peer(role).apply(&ours)?;
        // dup() gives an fd without FD_CLOEXEC: the peer inherits exactly this one.
        let inherited = rustix::io::dup(&theirs).map_err(|e| DemoError::Io(e.into()))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("demo-decoder-peer").arg("--role").arg(role.name()).arg("--control-fd").arg(inherited.as_raw_fd().to_string());
        cmd.arg("--peer-timeout").arg(self.timeout().as_secs_f64().to_string());
        if self.config.validation {
            cmd.arg("--validation");
        }
        let child = cmd.spawn();
        drop((inherited, theirs));
        self.peers.push(PeerProc { role, control: ours, child: child?, report: None, binding: None, ended: false });
        Ok(())
    }

    /// Sends `msg` to the peer in `role`, unless it was lost.
    fn send(&mut self, role: Role, msg: &ToPeer) -> Result<(), DemoError> {
        let Some(p) = self.peers.iter().find(|p| p.role == role) else { return Ok(()) };
        let r = send_msg(&p.control, &self.peer(role), msg);
        self.survive(role, r).map(|_| ())
    }

    /// Sends `token` to the peer in `role`; to a lost one it is dropped, which closes it.
    fn send_token(&mut self, role: Role, token: Token) -> Result<(), DemoError> {
        let Some(p) = self.peers.iter().find(|p| p.role == role) else { return Ok(()) };
        let peer = self.peer(role);
        let r = token.send_token_over(p.control.as_fd()).map_err(|e| peer.collection_error(e));
        self.survive(role, r).map(|_| ())
    }

    fn stream(&mut self) -> Result<(), DemoError> {
        self.spawn(Role::Consumer)?;
        let change = self.config.resolution_change_at.filter(|&n| n > 0 && n < self.config.frames);
        for n in 0..self.config.frames {
            self.frame = n;
            let seg = usize::from(change.is_some_and(|c| n >= c));
            if self.colls.len() <= seg {
                self.open_collection(seg as u32, n)?;
            }
            if self.config.late_join_at == Some(n) {
                self.late_join(seg)?;
            }
            self.decode(seg, n)?;
            self.retire_old(seg)?;
        }
        self.frame = self.config.frames;
        for role in self.roles() {
            if let Some(p) = self.peers.iter_mut().find(|p| p.role == role) {
                p.ended = true;
            }
            self.send(role, &ToPeer::End)?;
        }
        while self.peers.iter().any(|p| p.report.is_none()) {
            self.wait_message()?;
        }
        for c in &mut self.colls {
            c.buffers.clear();
            if let Some(t) = c.token.take() {
                t.close()?;
            }
        }
        for c in &mut self.colls {
            finish_server(c)?;
        }
        Ok(())
    }

    /// A new collection for frames from `first`: a server on the device, a token for every
    /// peer, the decoder's own bind (which returns once every peer has bound).
    fn open_collection(&mut self, index: u32, first: u32) -> Result<(), DemoError> {
        let (width, height) = SIZES[index as usize];
        let image_use = ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC);
        let (server, mut root) = Server::new(&format!("stream-{index}"), Box::new(DeviceAllocator::new(&self.engine, image_use)))?;
        let serving = Serving::spawn(server);
        let t = self.timeout();
        for role in self.roles() {
            // The recorder is optional: its failure must not fail the stream.
            let token = root.duplicate(Rights { read_only: true }, role == Role::Recorder, role.name(), t)?;
            self.awaiting(role, index);
            self.send(role, &ToPeer::Collection { index, width, height, late: false })?;
            self.send_token(role, token)?;
        }
        let got = match root.bind(&decoder_participant(width, height), t) {
            Ok(got) => got,
            // Someone never bound, and the allocation waits for every initial token. The
            // recorder's is dispensable: it is let go (its process ends, its token fails
            // with it and the collection drops it alone) and the others get one more peer
            // timeout. Were the consumer the silent one, the stream fails all the same.
            Err(CollectionError::Timeout(..)) if self.roles().contains(&Role::Recorder) => {
                self.lose(Role::Recorder, DemoError::PeerStalled { peer: Role::Recorder.name(), after: t });
                match root.wait_event(t)? {
                    Some(TokenEvent::Allocated(got)) => got,
                    Some(TokenEvent::Failed(f)) => return Err(CollectionError::Failed(f).into()),
                    Some(TokenEvent::LateJoinRefused(c)) => return Err(CollectionError::LateJoinRefused(c).into()),
                    None => return Err(CollectionError::Timeout(t, "waiting for the collection's buffers").into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        self.expect_bound(index, &self.roles())?;
        let outputs = got.reconciled.outputs.clone();
        let first_buf = got.buffers.first().ok_or_else(|| DemoError::Protocol("a collection with no buffers".into()))?;
        let summary = json!({
            "index": index,
            "size": format!("{width}x{height}"),
            "first_frame": first,
            "buffer_count": got.buffers.len(),
            "modifier": format!("0x{:016x}", first_buf.layout().to_wire().raw()),
            "planes": first_buf.planes().map(|p| json!({"offset": p.offset, "stride": p.stride})).collect::<Vec<_>>(),
            "bytes_per_buffer": outputs.as_ref().map(|o| o.size()),
            "participants": got.reconciled.participants,
        });
        tracing::info!(index, width, height, buffers = got.buffers.len(), "collection allocated");
        let slots = vec![Slot::default(); got.buffers.len()];
        self.colls.push(Coll { index, width, height, token: Some(root), server: serving, outcome: None, buffers: got.buffers, slots, frames_carried: 0, summary });
        Ok(())
    }

    /// Notes that the peer in `role` owes the Bound of collection `index`.
    fn awaiting(&mut self, role: Role, index: u32) {
        if let Some(p) = self.peers.iter_mut().find(|p| p.role == role) {
            p.binding = Some(index);
        }
    }

    /// Waits until each peer in `roles` has bound collection `index` (or was lost).
    fn expect_bound(&mut self, index: u32, roles: &[Role]) -> Result<(), DemoError> {
        let mut waiting: Vec<Role> = roles.iter().copied().filter(|r| self.peers.iter().any(|p| p.role == *r)).collect();
        while !waiting.is_empty() {
            match self.wait_message()? {
                Heard::Message(role, FromPeer::Bound { collection, .. }) if collection == index => waiting.retain(|r| *r != role),
                Heard::Lost(role) => waiting.retain(|r| *r != role),
                Heard::Message(..) => {}
            }
        }
        Ok(())
    }

    /// Starts the recorder and attaches its token to the running collection.
    fn late_join(&mut self, seg: usize) -> Result<(), DemoError> {
        self.spawn(Role::Recorder)?;
        let t = self.timeout();
        let c = &mut self.colls[seg];
        let (index, width, height) = (c.index, c.width, c.height);
        let root = c.token.as_mut().ok_or_else(|| DemoError::Protocol("the running collection has no root token".into()))?;
        let token = root.attach_token("recorder", t)?;
        self.awaiting(Role::Recorder, index);
        self.send(Role::Recorder, &ToPeer::Collection { index, width, height, late: true })?;
        self.send_token(Role::Recorder, token)?;
        self.expect_bound(index, &[Role::Recorder])
    }

    fn decode(&mut self, seg: usize, n: u32) -> Result<(), DemoError> {
        let target = loop {
            let c = &self.colls[seg];
            let free = c.slots.iter().position(|s| s.frame.map_or(true, |f| f + DPB < n) && !s.held.iter().any(|h| *h));
            match free {
                Some(i) => break i,
                None => {
                    self.wait_message()?;
                }
            }
        };
        let c = &mut self.colls[seg];
        let first = c.summary["first_frame"].as_u64().unwrap_or(0) as u32;
        let mut refs_ok = 1;
        for d in REFERENCES {
            let Some(r) = n.checked_sub(d).filter(|r| *r >= first) else { continue };
            let intact = c.slots.iter().position(|s| s.frame == Some(r)).and_then(|i| header_of(&c.buffers[i]).ok()).is_some_and(|h| h.frame == r && h.width == c.width);
            if !intact {
                refs_ok = 0;
                self.reference_errors += 1;
            }
        }
        write_frame(&c.buffers[target], n, c.width, c.height, refs_ok)?;
        if self.config.corrupt_frame == Some(n) {
            // One chroma byte, as a transfer fault would leave it.
            if let Some(p) = c.buffers[target].plane(1) {
                write_all_at(p.fd, p.offset + p.stride * 3 + 17, &[0x5a ^ 0xff])?;
            }
        }
        c.slots[target].frame = Some(n);
        c.frames_carried += 1;
        let index = c.index;
        for role in self.roles() {
            self.colls[seg].slots[target].held[peer_index(role)] = true;
            self.send(role, &ToPeer::Frame { collection: index, buffer: target as u32, frame: n })?;
        }
        // Take what has arrived without waiting, so releases do not pile up.
        while self.poll_message(Duration::ZERO)?.is_some() {}
        Ok(())
    }

    /// Closes the decoder's token of every older collection no peer holds a buffer of.
    fn retire_old(&mut self, current: usize) -> Result<(), DemoError> {
        for c in self.colls.iter_mut().take(current) {
            if c.token.is_some() && c.slots.iter().all(|s| !s.held.iter().any(|h| *h)) {
                c.buffers.clear();
                if let Some(t) = c.token.take() {
                    t.close()?;
                }
                tracing::info!(collection = c.index, "decoder closed its token of the drained collection");
            }
        }
        Ok(())
    }

    /// Waits (at most the peer timeout) for the next message from any peer and applies it.
    /// When none comes, the peers that owe an answer ([`Decoder::owes`]) are the ones in
    /// the way: a silent recorder alone is lost ([`Heard::Lost`]); a silent consumer ends
    /// the stream, as does silence from a decoder's own mistake (nobody owes anything).
    fn wait_message(&mut self) -> Result<Heard, DemoError> {
        if let Some(m) = self.poll_message(self.timeout())? {
            return Ok(m);
        }
        let after = self.timeout();
        let silent: Vec<Role> = self.peers.iter().filter(|p| self.owes(p)).map(|p| p.role).collect();
        match silent[..] {
            [Role::Recorder] => {
                self.lose(Role::Recorder, DemoError::PeerStalled { peer: Role::Recorder.name(), after });
                Ok(Heard::Lost(Role::Recorder))
            }
            _ if silent.contains(&Role::Consumer) => Err(DemoError::PeerStalled { peer: Role::Consumer.name(), after }),
            _ => {
                let peer = if self.peers.len() > 1 { "consumer or recorder" } else { "consumer" };
                Err(DemoError::PeerStalled { peer, after })
            }
        }
    }

    fn poll_message(&mut self, timeout: Duration) -> Result<Option<Heard>, DemoError> {
        let ready = {
            let mut fds: Vec<PollFd<'_>> = self.peers.iter().filter(|p| p.report.is_none()).map(|p| PollFd::new(&p.control, PollFlags::IN)).collect();
            if fds.is_empty() {
                return Ok(None);
            }
            let ts = rustix::time::Timespec::try_from(timeout).map_err(|_| DemoError::Protocol("bad timeout".into()))?;
            match poll(&mut fds, Some(&ts)) {
                Ok(0) => return Ok(None),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => return Ok(None),
                Err(e) => return Err(DemoError::Io(e.into())),
            }
            fds.iter().position(|f| !f.revents().is_empty())
        };
        let Some(k) = ready else { return Ok(None) };
        let i = self.peers.iter().enumerate().filter(|(_, p)| p.report.is_none()).nth(k).map(|(i, _)| i).ok_or_else(|| DemoError::Protocol("poll".into()))?;
        let role = self.peers[i].role;
        let applied = recv_msg::<FromPeer>(&self.peers[i].control, &self.peer(role)).and_then(|msg| self.apply(i, msg));
        Ok(Some(match self.survive(role, applied)? {
            Some(msg) => Heard::Message(role, msg),
            None => Heard::Lost(role),
        }))
    }

    /// Applies `msg` from the peer at `i`.
    fn apply(&mut self, i: usize, msg: FromPeer) -> Result<FromPeer, DemoError> {
        let role = self.peers[i].role;
        match &msg {
            FromPeer::Release { collection, buffer, frame } => {
                let slot = self.colls.iter_mut().find(|c| c.index == *collection).and_then(|c| c.slots.get_mut(*buffer as usize));
                match slot {
                    Some(s) if s.frame == Some(*frame) && s.held[peer_index(role)] => s.held[peer_index(role)] = false,
                    _ => return Err(DemoError::Protocol(format!("the {} released buffer {buffer} of collection {collection} (frame {frame}), which it did not hold", role.name()))),
                }
            }
            FromPeer::Final(r) => self.peers[i].report = Some(r.clone()),
            FromPeer::Bound { collection, .. } if self.peers[i].binding == Some(*collection) => self.peers[i].binding = None,
            FromPeer::Failed { error } => return Err(DemoError::PeerFailed { peer: role.name(), pid: Some(self.peers[i].child.id()), error: error.clone() }),
            FromPeer::Bound { .. } | FromPeer::Closed { .. } => {}
        }
        Ok(msg)
    }
}

/// Waits at most `timeout` for `child` to exit. One that has not (stopped, hung) is killed
/// and reaped: its status comes back with how it was before the kill.
fn wait_or_end(child: &mut Child, timeout: Duration) -> std::io::Result<(std::process::ExitStatus, Option<String>)> {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status, None));
        }
        if start.elapsed() >= timeout {
            let state = process_state(child.id()).unwrap_or_else(|| "in a state /proc did not give".into());
            child.kill()?;
            return Ok((child.wait()?, Some(state)));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How process `pid` is now, from the state letter of `/proc/PID/stat` ("stopped" for a
/// SIGSTOP); `None` where that cannot be read.
fn process_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: the state follows the last ')'.
    let state = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().next()?;
    Some(
        match state {
            "T" => "stopped",
            "t" => "stopped by a tracer",
            "R" => "running",
            "S" => "sleeping",
            "D" => "in an uninterruptible wait",
            "Z" => "a zombie",
            other => return Some(format!("in state {other}")),
        }
        .to_owned(),
    )
}

/// Waits for a collection's server to finish (every token closed) and records how.
fn finish_server(c: &mut Coll) -> Result<(), DemoError> {
    if let Some(h) = c.server.handle.take() {
        let outcome = h.join().map_err(|_| DemoError::Protocol(format!("collection {}'s server thread panicked", c.index)))??;
        let name = outcome.to_string();
        if let Some(o) = c.summary.as_object_mut() {
            o.insert("frames_carried".into(), json!(c.frames_carried));
            o.insert("buffers_released".into(), json!(outcome == ServerOutcome::Released));
            o.insert("server_outcome".into(), json!(name));
        }
        c.outcome = Some(name);
    }
    Ok(())
}

/// "Decodes" frame `n` into `buf`: its rows at the buffer's offsets and strides, written
/// with `pwrite` (the decoder is a device writing memory, not a Vulkan user).
fn write_frame(buf: &DmaBuf, n: u32, width: u32, height: u32, refs_ok: u32) -> Result<(), DemoError> {
    Ok(write_planes(buf, &frame_bytes(n, width, height, refs_ok))?)
}
