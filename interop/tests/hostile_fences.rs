//! Hostile fences, made by the kernel's sw_sync (`support_swsync`) so that only the test
//! decides when, in what order and how they signal: a fence that never signals is a typed
//! timeout within its limit, never a hang; a fence that signals with an error is a typed
//! failure (it polls readable like a good one, so a wait that only polled would take it for
//! success), and in a handoff stream that frame alone is lost; fences that signal out of
//! order each wake their own waiter, not before; and a peer that floods 10 000 fenced
//! buffers leaves the receiver with the fds and memory it had.
//!
//! Runs in the kernel lab (`scripts/lab.sh --modules sw_sync`); elsewhere each test says why
//! it is skipped.

#[path = "support_swsync/mod.rs"]
mod support_swsync;

use std::os::fd::AsFd;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use dmabridge_interop::dmabuf::{fd_count, recv_fenced, sealed_memfd_of_size, send_buffer_with_fence, socketpair, DmaBuf, FencedReceived, PlaneDesc};
use dmabridge_interop::sync::{poll_readable, wait_sync_file, FenceStatus, SyncFile, WaitError};
use dmabridge_interop::{Fourcc, Layout, Modifier};
use support_swsync::{rss_kib, Timeline};

const ENOENT: i32 = 2;

static FD_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// fd counts are per process and tests run on parallel threads: every test here holds this.
fn lock() -> MutexGuard<'static, ()> {
    FD_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pending, as a zero-timeout wait and the kernel's status both say.
fn assert_pending(fence: &SyncFile, what: &str) {
    assert!(matches!(fence.wait(Duration::ZERO), Err(WaitError::Timeout { .. })), "{what}: a zero-timeout wait returned before the fence signalled");
    assert_eq!(fence.status().expect("SYNC_IOC_FILE_INFO"), FenceStatus::Pending, "{what}");
    assert!(!fence.is_signalled().expect("status"), "{what}");
}

fn assert_signalled(fence: &SyncFile, what: &str) {
    fence.wait(Duration::ZERO).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(fence.status().expect("SYNC_IOC_FILE_INFO"), FenceStatus::Signalled, "{what}");
}

fn buffer() -> DmaBuf {
    let fd = sealed_memfd_of_size("fenced", 64 * 64 * 4).expect("memfd");
    DmaBuf::new(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), 64, 64, vec![PlaneDesc { fd, offset: 0, stride: 256 }]).expect("descriptor")
}

/// One way of waiting for a fence.
type Wait<'a> = dyn Fn() -> Result<(), WaitError> + 'a;

#[test]
fn a_fence_that_never_signals_is_a_typed_timeout_within_its_limit() {
    let _g = lock();
    let Some(timeline) = Timeline::for_test() else { return };
    let fence = timeline.fence(1).expect("SW_SYNC_IOC_CREATE_FENCE");
    assert_pending(&fence, "a fence at 1 on a timeline at 0");
    for limit in [Duration::ZERO, Duration::from_millis(50), Duration::from_millis(300)] {
        let waits: [(&str, &Wait); 2] =
            [("SyncFile::wait", &|| fence.wait(limit)), ("wait_sync_file", &|| wait_sync_file(fence.as_fd(), limit))];
        for (how, wait) in waits {
            let t = Instant::now();
            let r = wait();
            let elapsed = t.elapsed();
            assert!(matches!(r, Err(WaitError::Timeout { timeout }) if timeout == limit), "{how} {limit:?}: {r:?}");
            assert!(elapsed >= limit, "{how} returned after {elapsed:?}, before its limit {limit:?}");
            assert!(elapsed < limit + Duration::from_secs(2), "{how} {limit:?} returned after {elapsed:?}");
        }
    }
    // It is the timeline, not the wait, that decides: advanced, the same fence signals.
    timeline.advance(1).expect("SW_SYNC_IOC_INC");
    fence.wait(Duration::from_secs(5)).expect("signalled once the timeline reached it");
    wait_sync_file(fence.as_fd(), Duration::ZERO).expect("signalled");
    assert_signalled(&fence, "after the timeline reached 1");
}

#[test]
fn a_fence_that_signals_with_an_error_is_a_typed_failure_though_it_polls_readable() {
    let _g = lock();
    let Some(timeline) = Timeline::for_test() else { return };
    let doomed = timeline.fence(2).expect("fence");
    let good = timeline.fence(1).expect("fence");
    timeline.advance(1).expect("inc");
    assert_signalled(&good, "the fence at 1");
    assert_pending(&doomed, "the fence at 2");
    // Closing the timeline signals its pending fences with -ENOENT (sw_sync_debugfs_release).
    drop(timeline);
    // To poll, it is signalled like any other: a wait that only polled would call it a success.
    poll_readable(doomed.as_fd(), Duration::ZERO).expect("an errored fence polls readable");
    assert_eq!(doomed.status().expect("status"), FenceStatus::Failed { errno: ENOENT });
    let t = Instant::now();
    for (how, r) in [
        ("SyncFile::wait", doomed.wait(Duration::from_secs(5))),
        ("wait_sync_file", wait_sync_file(doomed.as_fd(), Duration::from_secs(5))),
        ("is_signalled", doomed.is_signalled().map(drop)),
        ("wait of a clone", doomed.try_clone().expect("dup").wait(Duration::ZERO)),
    ] {
        let e = r.expect_err(how);
        assert!(matches!(e, WaitError::Failed { errno: ENOENT }), "{how}: {e:?}");
        assert!(e.to_string().contains("signalled with an error (No such file or directory"), "{how}: {e}");
    }
    assert!(t.elapsed() < Duration::from_secs(1), "a failed fence is reported at once ({:?})", t.elapsed());
    // The fence that had signalled before the timeline closed keeps its verdict.
    assert_signalled(&good, "the fence at 1, after the timeline closed");
    eprintln!("an errored sw_sync fence: POLLIN, SYNC_IOC_FILE_INFO status {:?}", doomed.status().expect("status"));
}

#[test]
fn fences_signalled_out_of_order_each_wake_their_own_waiter() {
    let _g = lock();
    let Some(timeline) = Timeline::for_test() else { return };
    // One timeline, fences made at 3, 1, 2: each signals when the timeline reaches its value.
    let fences: Vec<(u32, SyncFile)> = [3, 1, 2].into_iter().map(|v| (v, timeline.fence(v).expect("fence"))).collect();
    for (v, f) in &fences {
        assert_pending(f, &format!("fence {v} on a timeline at 0"));
    }
    for reached in 1..=3 {
        timeline.advance(1).expect("inc");
        for (v, f) in &fences {
            if *v <= reached {
                assert_signalled(f, &format!("fence {v} on a timeline at {reached}"));
            } else {
                assert_pending(f, &format!("fence {v} on a timeline at {reached}"));
            }
        }
    }
    // Two timelines, signalled in the opposite order of their fences' creation, with a waiter
    // blocked on each: the later fence's signal wakes only its own waiter.
    let first = Timeline::open().expect("timeline");
    let second = Timeline::open().expect("timeline");
    let a = first.fence(1).expect("fence");
    let b = second.fence(1).expect("fence");
    let waiter = |f: SyncFile| {
        std::thread::spawn(move || {
            let t = Instant::now();
            let r = f.wait(Duration::from_secs(10));
            (r, t.elapsed())
        })
    };
    let wait_a = waiter(a.try_clone().expect("dup"));
    let wait_b = waiter(b.try_clone().expect("dup"));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!wait_a.is_finished() && !wait_b.is_finished(), "a waiter returned before any fence signalled");
    second.advance(1).expect("inc");
    let (r, waited_b) = wait_b.join().expect("waiter b");
    r.expect("b signalled");
    assert_signalled(&b, "b after its timeline advanced");
    assert_pending(&a, "a after the other timeline advanced");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!wait_a.is_finished(), "the wait for a returned when b signalled");
    first.advance(1).expect("inc");
    let (r, waited_a) = wait_a.join().expect("waiter a");
    r.expect("a signalled");
    assert_signalled(&a, "a after its timeline advanced");
    assert!(waited_a >= waited_b + Duration::from_millis(200), "a's waiter woke with b's ({waited_a:?}, {waited_b:?})");
}

#[test]
fn a_handoff_stream_loses_only_the_frame_whose_fence_failed() {
    let _g = lock();
    let Some(timeline) = Timeline::for_test() else { return };
    const FRAMES: u64 = 8;
    const BAD: u64 = 3;
    let (tx, rx) = socketpair().expect("socketpair");
    let buf = buffer();
    let before = fd_count().expect("fd count");
    // The producer: each frame goes out with its acquire fence pending, and the fence
    // signals a little later; frame BAD's work "fails" (its own timeline closes under it).
    let producer = std::thread::spawn(move || {
        for id in 0..FRAMES {
            if id == BAD {
                let doomed = Timeline::open().expect("timeline");
                let fence = doomed.fence(1).expect("fence");
                send_buffer_with_fence(&tx, id, &buf, Some(&fence)).expect("send");
                std::thread::sleep(Duration::from_millis(20));
                drop(doomed);
            } else {
                let fence = timeline.fence(1).expect("fence");
                send_buffer_with_fence(&tx, id, &buf, Some(&fence)).expect("send");
                std::thread::sleep(Duration::from_millis(20));
                timeline.advance(1).expect("inc");
            }
        }
        (tx, buf, timeline)
    });
    let mut shown = Vec::new();
    let mut lost = Vec::new();
    for expect in 0..FRAMES {
        let FencedReceived::Buffer { id, buf: got, acquire_fence: Some(fence) } = recv_fenced(&rx).expect("recv") else {
            panic!("expected a fenced buffer")
        };
        assert_eq!(id, expect);
        match fence.wait(Duration::from_secs(5)) {
            Ok(()) => shown.push(id),
            Err(WaitError::Failed { errno }) => lost.push((id, errno)),
            Err(e) => panic!("frame {id}: {e}"),
        }
        drop((got, fence));
    }
    let sender = producer.join().expect("producer");
    assert_eq!(lost, [(BAD, ENOENT)], "only the frame whose fence failed is lost");
    assert_eq!(shown, (0..FRAMES).filter(|&i| i != BAD).collect::<Vec<_>>(), "the stream went on");
    assert_eq!(fd_count().expect("fd count"), before, "every fd received, and the failed frame's timeline, closed");
    drop(sender);
}

#[test]
fn a_peer_flooding_10000_fenced_buffers_leaves_fds_and_memory_bounded() {
    let _g = lock();
    let Some(timeline) = Timeline::for_test() else { return };
    let stalled = Timeline::open().expect("timeline");
    const FLOOD: u32 = 10_000;
    /// What the receiver may hold beyond its start: the message in hand (a plane and a
    /// fence) and the producer thread's fence of the moment.
    const FD_SLACK: usize = 4;
    /// VmRSS may grow by this much during and after the flood (allocator slack; a receiver
    /// that kept each message's fds or bytes would grow by far more, and run out of fds).
    const RSS_SLACK_KIB: u64 = 8 * 1024;
    let (tx, rx) = socketpair().expect("socketpair");
    let buf = buffer();
    // Warm up the paths (first allocations) before measuring.
    {
        let f = timeline.fence(0).expect("fence");
        send_buffer_with_fence(&tx, 0, &buf, Some(&f)).expect("send");
        drop(recv_fenced(&rx).expect("recv"));
    }
    let fds_before = fd_count().expect("fd count");
    let (rss_before, _) = rss_kib().expect("VmRSS");
    let start = Instant::now();
    // The hostile peer: a fence per buffer; every other one signalled before it is sent, the
    // rest on a timeline it never advances (they never signal).
    let producer = std::thread::spawn(move || {
        for i in 1..=FLOOD {
            let fence = if i % 2 == 0 {
                let f = timeline.fence(i / 2).expect("fence");
                timeline.advance(1).expect("inc");
                f
            } else {
                stalled.fence(i).expect("fence")
            };
            send_buffer_with_fence(&tx, u64::from(i), &buf, Some(&fence)).expect("send");
        }
        (tx, buf, (timeline, stalled))
    });
    // The receiver does not hold a frame whose fence is pending: it is dropped as lost.
    let (mut signalled, mut pending, mut failed) = (0u32, 0u32, 0u32);
    let (mut fds_max, mut rss_max) = (fds_before, rss_before);
    for i in 1..=FLOOD {
        let FencedReceived::Buffer { id, buf: got, acquire_fence: Some(fence) } = recv_fenced(&rx).expect("recv") else {
            panic!("expected a fenced buffer")
        };
        assert_eq!(id, u64::from(i));
        match fence.status().expect("status") {
            FenceStatus::Signalled => signalled += 1,
            FenceStatus::Pending => pending += 1,
            FenceStatus::Failed { .. } => failed += 1,
        }
        if i % 100 == 0 {
            fds_max = fds_max.max(fd_count().expect("fd count"));
            rss_max = rss_max.max(rss_kib().expect("VmRSS").0);
        }
        drop((got, fence));
    }
    let took = start.elapsed();
    let (tx, buf, timeline) = producer.join().expect("producer");
    let fds_after = fd_count().expect("fd count");
    let (rss_after, hwm) = rss_kib().expect("VmRSS");
    eprintln!(
        "flood of {FLOOD} fenced buffers: {:.1} us a fence ({took:?}); at receipt {signalled} signalled, {pending} pending, {failed} failed; \
         fds {fds_before} before, at most {fds_max} during, {fds_after} after; VmRSS {rss_before} KiB before, at most {rss_max} during, {rss_after} after (VmHWM {hwm})",
        took.as_secs_f64() * 1e6 / f64::from(FLOOD)
    );
    assert_eq!((signalled, pending, failed), (FLOOD / 2, FLOOD / 2, 0), "what the kernel said of the fences at receipt");
    assert!(fds_max <= fds_before + FD_SLACK, "fds grew to {fds_max} during the flood (from {fds_before})");
    assert_eq!(fds_after, fds_before, "every fd of the flood closed");
    assert!(rss_max <= rss_before + RSS_SLACK_KIB, "VmRSS grew from {rss_before} to {rss_max} KiB during the flood");
    assert!(rss_after <= rss_before + RSS_SLACK_KIB, "VmRSS grew from {rss_before} to {rss_after} KiB");
    drop((tx, buf, timeline));
}
