//! A buffer collection across three real processes (this test binary, re-executed once per
//! role): a producer that runs the collection's server, a consumer, and a third party (a
//! late joiner, or a dispensable participant). Tokens travel as fds: producer -> this
//! process -> the other child, so each is forwarded once more than it must be.
//!
//! - A non-dispensable participant killed with SIGKILL halfway: every survivor hears
//!   `Failed` naming it within 1 s of the kill.
//! - A dispensable participant, or a late joiner (attached to the allocated collection),
//!   killed halfway: nothing happens to the others; they go on sharing the same buffers and
//!   close normally.
//! - A server that runs out of fds (its process's `RLIMIT_NOFILE`, lowered in its child
//!   only) while it hands a late joiner its buffers, or makes a token for one: that holder
//!   hears `Failed` naming EMFILE at once; the others hear nothing and are still served.
//! - Every surviving process ends with the fds it started with.
//!
//! Every wait has a timeout; nothing sleeps in place of waiting for a message.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dmabridge_interop::collection::transport::wait_readable;
use dmabridge_interop::collection::{CollectionError, Rights, Server, ServerOutcome, SystemAllocator, Token, TokenEvent};
use dmabridge_interop::dmabuf::{fd_count, socketpair, DmaBuf};
use dmabridge_interop::negotiate::{Constraints, ExtentRange, Participant, Usage};
use dmabridge_interop::{Format, FormatSet, Fourcc};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

const ROLE_ENV: &str = "DMABRIDGE_COLLECTION_ROLE";
const FD_ENV: &str = "DMABRIDGE_COLLECTION_CTL_FD";
/// Generous for a debug build on a loaded two-core machine; only a hang reaches it.
const WAIT: Duration = Duration::from_secs(30);
/// How soon every survivor must know of a non-dispensable participant's death.
const PROMPT: Duration = Duration::from_secs(1);

static LOCK: Mutex<()> = Mutex::new(());

/// The children inherit one fd each; two tests spawning at once could leak each other's.
fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- control messages between this process and the children ---------------------------

fn say(sock: BorrowedFd<'_>, text: &str) {
    rustix::net::send(sock, text.as_bytes(), rustix::net::SendFlags::NOSIGNAL).expect("send a control message");
}

fn hear(sock: BorrowedFd<'_>, within: Duration) -> String {
    wait_readable(sock, within).unwrap_or_else(|e| panic!("no control message within {within:?}: {e}"));
    let mut buf = [0u8; 512];
    let (n, _) = rustix::net::recv(sock, &mut buf, rustix::net::RecvFlags::empty()).expect("recv a control message");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn forward_token(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    Token::recv_token(from, WAIT).expect("a token from the producer").send_token_over(to).expect("forward the token");
}

fn formats() -> FormatSet {
    [Format::linear(Fourcc::XRGB8888)].into_iter().collect()
}

fn producer() -> Participant {
    Participant::new("producer", formats()).with_usage(Usage::RENDER).with_constraints(Constraints {
        width: ExtentRange::exactly(64),
        height: ExtentRange::exactly(32),
        min_buffers: 1,
        ..Default::default()
    })
}

fn reader(name: &str) -> Participant {
    Participant::new(name, formats()).with_usage(Usage::SAMPLE).with_constraints(Constraints {
        min_buffers: 1,
        stride_align: 64,
        read_only: true,
        ..Default::default()
    })
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..64 * 4 * 32).map(|i: usize| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

/// Through the crate's own access (a real dma-buf, as the system allocator makes in the
/// kernel lab, has no pwrite or pread).
fn write_buffer(b: &DmaBuf, seed: u8) {
    let p = b.plane(0).expect("plane 0");
    dmabridge_interop::dmabuf::write_all_at(p.fd, p.offset, &pattern(seed)).expect("write the buffer");
}

fn read_buffer(b: &DmaBuf) -> Vec<u8> {
    let p = b.plane(0).expect("plane 0");
    let v = dmabridge_interop::dmabuf::read_at(p.fd, p.offset, 64 * 4 * 32, 1 << 20).expect("read the buffer");
    assert_eq!(v.len(), 64 * 4 * 32);
    v
}

// ---- the children ------------------------------------------------------------------------

/// Only does something in a child this file spawns: runs the role its environment names.
#[test]
fn collection_child() {
    let Ok(role) = std::env::var(ROLE_ENV) else { return };
    let raw: RawFd = std::env::var(FD_ENV).expect("the control fd").parse().expect("an fd number");
    // SAFETY: the parent passed this fd to us open and inheritable and named it in FD_ENV;
    // nothing else in this process owns or closes it.
    let ctl = unsafe { OwnedFd::from_raw_fd(raw) };
    let before = fd_count().expect("fd count");
    match role.as_str() {
        "producer-a" => producer_a(ctl.as_fd()),
        "producer-b" => producer_with_a_victim(ctl.as_fd(), false),
        "producer-c" => producer_with_a_victim(ctl.as_fd(), true),
        "consumer-a" | "spare-b" | "joiner-c" => victim(ctl.as_fd()),
        "joiner-a" => joiner_a(ctl.as_fd()),
        "consumer-b" => consumer_b(ctl.as_fd()),
        "producer-d" => producer_out_of_fds(ctl.as_fd()),
        other => panic!("unknown role {other}"),
    }
    let after = fd_count().expect("fd count");
    say(ctl.as_fd(), &format!("fds {before} {after}"));
    assert_eq!(before, after, "{role}: fds leaked");
}

/// Scenario A's producer: serves the collection, binds, hands out the consumer's token and
/// a late joiner's, then waits to hear of the consumer's death.
fn producer_a(ctl: BorrowedFd<'_>) {
    let (server, mut root) = Server::new("frames", Box::new(SystemAllocator::new("frames"))).unwrap();
    let serving = server.spawn();
    let consumer = root.duplicate(Rights { read_only: true }, false, "consumer", WAIT).unwrap();
    consumer.send_token_over(ctl).unwrap();
    let mine = root.bind(&producer(), WAIT).unwrap();
    write_buffer(&mine.buffers[0], 1);
    let late = root.attach_token("joiner", WAIT).unwrap();
    late.send_token_over(ctl).unwrap();
    say(ctl, "ready");
    let ev = root.wait_event(WAIT).unwrap();
    let Some(TokenEvent::Failed(f)) = ev else { panic!("expected Failed, got {ev:?}") };
    say(ctl, &format!("failed {}: {}", f.participant, f.reason));
    drop(mine);
    drop(root);
    assert!(matches!(serving.join().unwrap().unwrap(), ServerOutcome::Failed(_)));
}

/// Binds the token it is sent, says so, and waits to be killed.
fn victim(ctl: BorrowedFd<'_>) {
    let mut t = Token::recv_token(ctl, WAIT).unwrap();
    let name = t.name().to_owned();
    let _bufs = t.bind(&reader(&name), WAIT).unwrap();
    say(ctl, "ready");
    // Killed long before this returns; if not, the parent's own timeout fails the test.
    let _ = hear(ctl, WAIT);
}

/// Scenario A's late joiner: accepted against the existing buffers (it sees the producer's
/// bytes), then hears of the consumer's death.
fn joiner_a(ctl: BorrowedFd<'_>) {
    let mut t = Token::recv_token(ctl, WAIT).unwrap();
    let bufs = t.bind(&reader("joiner"), WAIT).unwrap();
    assert_eq!(bufs.buffers.len(), 2, "the existing buffers, not new ones");
    assert_eq!(read_buffer(&bufs.buffers[0]), pattern(1), "the producer's memory");
    say(ctl, "ready");
    let ev = t.wait_event(WAIT).unwrap();
    let Some(TokenEvent::Failed(f)) = ev else { panic!("expected Failed, got {ev:?}") };
    say(ctl, &format!("failed {}: {}", f.participant, f.reason));
}

/// Scenarios B and C's producer: a consumer, and a participant that will be killed: a
/// dispensable duplicate bound before allocation (B), or a late joiner attached after it
/// (C). After the kill it keeps writing, and closes when told.
fn producer_with_a_victim(ctl: BorrowedFd<'_>, late: bool) {
    let (server, mut root) = Server::new("frames", Box::new(SystemAllocator::new("frames"))).unwrap();
    let serving = server.spawn();
    root.duplicate(Rights { read_only: true }, false, "consumer", WAIT).unwrap().send_token_over(ctl).unwrap();
    if !late {
        root.duplicate(Rights { read_only: true }, true, "spare", WAIT).unwrap().send_token_over(ctl).unwrap();
    }
    let mine = root.bind(&producer(), WAIT).unwrap();
    assert_eq!(mine.buffers.len(), if late { 2 } else { 3 }, "min-buffers summed over the initial holders");
    if late {
        root.attach_token("joiner", WAIT).unwrap().send_token_over(ctl).unwrap();
    }
    say(ctl, "ready");
    assert_eq!(hear(ctl, WAIT), "killed");
    assert!(root.wait_event(Duration::from_millis(300)).unwrap().is_none(), "the victim's death is not ours");
    write_buffer(mine.buffers.last().unwrap(), 7);
    say(ctl, "written");
    assert_eq!(hear(ctl, WAIT), "close");
    drop(mine);
    root.close().unwrap();
    assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
}

/// Scenario B's consumer: after the spare's death it still reads what the producer writes.
fn consumer_b(ctl: BorrowedFd<'_>) {
    let mut t = Token::recv_token(ctl, WAIT).unwrap();
    let bufs = t.bind(&reader("consumer"), WAIT).unwrap();
    assert!(bufs.buffers.iter().all(DmaBuf::read_only));
    say(ctl, "ready");
    assert_eq!(hear(ctl, WAIT), "check");
    assert!(t.wait_event(Duration::from_millis(300)).unwrap().is_none(), "the spare's death is not ours");
    assert_eq!(read_buffer(bufs.buffers.last().unwrap()), pattern(7), "the same buffers, still shared");
    say(ctl, "checked");
    assert_eq!(hear(ctl, WAIT), "close");
    drop(bufs);
    t.close().unwrap();
}

/// Scenario D: how many buffers the collection has, and how many fds the server may still
/// open when the first late joiner binds (fewer, so its copies run out at this buffer).
const D_BUFFERS: u32 = 8;
const D_FREE: usize = 3;

/// Caps this process's fd numbers (`RLIMIT_NOFILE`) so that exactly `free` more fds can be
/// opened, and returns the limit to restore. Only the children call it.
fn cap_fds(free: usize) -> Rlimit {
    let old = getrlimit(Resource::Nofile);
    let mut open: Vec<usize> = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("list my fds") {
        let entry = entry.expect("an fd entry");
        // The listing's own fd, closed once read, is the one that links to this directory.
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        if target.starts_with("/proc/") && target.ends_with("fd") {
            continue;
        }
        open.push(entry.file_name().to_string_lossy().parse().expect("an fd number"));
    }
    // A new fd takes the lowest free number below the limit: find the limit below which
    // exactly `free` numbers are free.
    let limit = (0..).find(|&l| l - open.iter().filter(|&&o| o < l).count() == free).expect("some limit");
    setrlimit(Resource::Nofile, Rlimit { current: Some(limit as u64), maximum: old.maximum }).expect("lower RLIMIT_NOFILE");
    old
}

fn producer_of(buffers: u32) -> Participant {
    producer().constrain(|c| c.min_buffers = buffers)
}

/// Scenario D's producer, whose process runs the server: it binds (holding the buffers), and
/// hands out two late joiners' tokens; then it caps its fds so that the first joiner's
/// copies run out (at buffer D_FREE), and, once that joiner has heard, so that the second
/// joiner's token request cannot get a socket pair. Then it lifts the cap: it heard nothing
/// of the joiners' failures, and a third joiner gets the same buffers.
fn producer_out_of_fds(ctl: BorrowedFd<'_>) {
    let (server, mut root) = Server::new("frames", Box::new(SystemAllocator::new("frames"))).unwrap();
    let serving = server.spawn();
    let mine = root.bind(&producer_of(D_BUFFERS), WAIT).unwrap();
    assert_eq!(mine.buffers.len(), D_BUFFERS as usize);
    write_buffer(&mine.buffers[0], 5);
    root.attach_token("hungry", WAIT).unwrap().send_token_over(ctl).unwrap();
    root.attach_token("greedy", WAIT).unwrap().send_token_over(ctl).unwrap();
    // The server closes its copy of a token's fd after sending it, maybe after this thread
    // has the token. A round trip that carries no fd (a refused late joiner) settles that:
    // the server serves one message at a time, so it is done with every earlier request.
    let mut probe = root.attach_token("probe", WAIT).unwrap();
    let nv12: FormatSet = [Format::linear(Fourcc::NV12)].into_iter().collect();
    let refused = probe.bind(&Participant::new("probe", nv12), WAIT);
    assert!(matches!(refused, Err(CollectionError::LateJoinRefused(_))), "{refused:?}");
    let lifted = cap_fds(D_FREE);
    say(ctl, "capped");
    assert_eq!(hear(ctl, WAIT), "recap");
    cap_fds(1);
    say(ctl, "capped");
    assert_eq!(hear(ctl, WAIT), "lift");
    setrlimit(Resource::Nofile, lifted).unwrap();
    assert!(root.wait_event(Duration::from_millis(300)).unwrap().is_none(), "the joiners' failures are not ours");
    root.attach_token("second", WAIT).unwrap().send_token_over(ctl).unwrap();
    assert_eq!(hear(ctl, WAIT), "close");
    probe.close().unwrap();
    drop(mine);
    root.close().unwrap();
    assert_eq!(serving.join().unwrap().unwrap(), ServerOutcome::Released);
}

// ---- the parent ---------------------------------------------------------------------------

struct Kid {
    role: &'static str,
    child: Child,
    ctl: OwnedFd,
}

fn spawn(role: &'static str) -> Kid {
    let (ours, theirs) = socketpair().unwrap();
    // dup() leaves FD_CLOEXEC clear, so the child inherits this copy; ours keeps CLOEXEC.
    let inheritable = rustix::io::dup(&theirs).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "collection_child", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .env(FD_ENV, inheritable.as_raw_fd().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before the next spawn, or that child would inherit it too.
    drop(inheritable);
    drop(theirs);
    Kid { role, child, ctl: ours }
}

impl Kid {
    fn hear(&self) -> String {
        hear(self.ctl.as_fd(), WAIT)
    }

    fn say(&self, s: &str) {
        say(self.ctl.as_fd(), s)
    }

    /// Its final fd report, then its exit status (within WAIT).
    fn finish(mut self) {
        let report = self.hear();
        let mut it = report.split_whitespace();
        assert_eq!(it.next(), Some("fds"), "{}: {report}", self.role);
        let before: usize = it.next().and_then(|v| v.parse().ok()).unwrap();
        let after: usize = it.next().and_then(|v| v.parse().ok()).unwrap();
        assert_eq!(before, after, "{}: leaked {} fds", self.role, after as i64 - before as i64);
        let status = wait_exit(&mut self.child);
        let mut out = String::new();
        let mut err = String::new();
        let _ = self.child.stdout.take().map(|mut s| s.read_to_string(&mut out));
        let _ = self.child.stderr.take().map(|mut s| s.read_to_string(&mut err));
        assert!(status.success(), "{}: {status}\n{out}\n{err}", self.role);
        assert!(out.contains("1 passed"), "{}: the child did not run its role:\n{out}", self.role);
    }

    fn kill(&mut self) -> Instant {
        let at = Instant::now();
        self.child.kill().unwrap();
        wait_exit(&mut self.child);
        at
    }
}

impl Drop for Kid {
    /// A test that failed halfway leaves no child behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a child is still running after {WAIT:?}");
        }
        // Polling a child's exit has no fd to wait on here; the interval bounds the delay.
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn killing_a_non_dispensable_participant_fails_every_survivor_within_a_second() {
    let _g = lock();
    let before = fd_count().unwrap();
    let producer = spawn("producer-a");
    let mut consumer = spawn("consumer-a");
    let joiner = spawn("joiner-a");
    forward_token(producer.ctl.as_fd(), consumer.ctl.as_fd());
    assert_eq!(consumer.hear(), "ready");
    forward_token(producer.ctl.as_fd(), joiner.ctl.as_fd());
    assert_eq!(producer.hear(), "ready");
    assert_eq!(joiner.hear(), "ready");

    let killed = consumer.kill();
    let deadline = killed + PROMPT;
    for survivor in [&producer, &joiner] {
        let left = deadline.saturating_duration_since(Instant::now());
        let heard = hear(survivor.ctl.as_fd(), left);
        assert_eq!(heard, "failed consumer: process exited", "{}", survivor.role);
    }
    let took = killed.elapsed();
    assert!(took < PROMPT, "every survivor knew within {PROMPT:?} ({took:?})");
    println!("every survivor heard of the kill after {took:?}");
    producer.finish();
    joiner.finish();
    drop(consumer);
    assert_eq!(fd_count().unwrap(), before, "this process too");
}

/// Kills the participant whose death must not matter (`victim`, after everyone is ready),
/// then checks that the producer and the consumer go on sharing the same buffers, close
/// normally, and leak nothing.
fn kill_one_that_does_not_matter(producer_role: &'static str, victim_role: &'static str) {
    let _g = lock();
    let before = fd_count().unwrap();
    let producer = spawn(producer_role);
    let consumer = spawn("consumer-b");
    let mut victim = spawn(victim_role);
    // The consumer binds before allocation; a late joiner's token exists only after it.
    forward_token(producer.ctl.as_fd(), consumer.ctl.as_fd());
    forward_token(producer.ctl.as_fd(), victim.ctl.as_fd());
    for k in [&producer, &consumer, &victim] {
        assert_eq!(k.hear(), "ready", "{}", k.role);
    }
    victim.kill();
    producer.say("killed");
    assert_eq!(producer.hear(), "written");
    consumer.say("check");
    assert_eq!(consumer.hear(), "checked");
    consumer.say("close");
    producer.say("close");
    consumer.finish();
    producer.finish();
    drop(victim);
    assert_eq!(fd_count().unwrap(), before, "this process too");
}

#[test]
fn killing_a_dispensable_participant_changes_nothing_for_the_others() {
    kill_one_that_does_not_matter("producer-b", "spare-b");
}

#[test]
fn killing_a_late_joiner_halfway_changes_nothing_for_the_others() {
    kill_one_that_does_not_matter("producer-c", "joiner-c");
}

/// The server's process runs out of fds: while it copies a late joiner's buffers, and while
/// it makes a token's socket pair. Each time the holder concerned hears a Failed naming
/// EMFILE (and, for the buffers, which one) at once, instead of a closed socket or its
/// timeout; the producer hears nothing, and a joiner that comes once fds are free again gets
/// the same buffers.
#[test]
fn a_server_out_of_fds_says_so_to_the_holder_and_serves_the_others() {
    let _g = lock();
    let before = fd_count().unwrap();
    let producer = spawn("producer-d");
    let joiner = |name: &str| Participant::new(name, formats()).with_usage(Usage::SAMPLE).with_constraints(Constraints { min_buffers: 1, ..Default::default() });
    let mut hungry = Token::recv_token(producer.ctl.as_fd(), WAIT).unwrap();
    let mut greedy = Token::recv_token(producer.ctl.as_fd(), WAIT).unwrap();
    assert_eq!(producer.hear(), "capped");

    match hungry.bind(&joiner("hungry"), WAIT) {
        Err(CollectionError::Failed(f)) => {
            println!("hungry heard: {f}");
            assert_eq!(f.participant, "hungry");
            assert!(f.reason.starts_with(&format!("the server ran out of file descriptors (EMFILE) while handing out buffer {D_FREE}")), "{}", f.reason);
        }
        other => panic!("expected Failed naming EMFILE, got {other:?}"),
    }
    // The server closes a failed holder's socket after telling it (and so frees that fd
    // before the next cap is measured).
    assert!(matches!(hungry.wait_event(WAIT), Err(CollectionError::Closed)));
    producer.say("recap");
    assert_eq!(producer.hear(), "capped");

    match greedy.attach_token("more", WAIT) {
        Err(CollectionError::Failed(f)) => {
            println!("greedy heard: {f}");
            assert_eq!(f.participant, "greedy");
            assert!(f.reason.starts_with("the server ran out of file descriptors (EMFILE) while making token \"more\""), "{}", f.reason);
        }
        other => panic!("expected Failed naming EMFILE, got {other:?}"),
    }
    assert!(matches!(greedy.wait_event(WAIT), Err(CollectionError::Closed)));
    producer.say("lift");

    let mut second = Token::recv_token(producer.ctl.as_fd(), WAIT).unwrap();
    let bufs = second.bind(&joiner("second"), WAIT).unwrap();
    assert_eq!(bufs.buffers.len(), D_BUFFERS as usize);
    assert_eq!(read_buffer(&bufs.buffers[0]), pattern(5), "the producer's buffers");
    drop(bufs);
    second.close().unwrap();
    drop((hungry, greedy));
    producer.say("close");
    producer.finish();
    assert_eq!(fd_count().unwrap(), before, "this process too");
}
