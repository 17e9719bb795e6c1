//! The kernel side of the sync vocabulary on a kernel without dma-bufs or sync_files (this
//! one): every call on a stand-in fd fails cleanly with its typed error, and the CPU wait
//! times out, hangs up and wakes as poll says. Fences travel over the handoff socket as
//! sync_files, and nothing else passes for one (an eventfd, a timerfd, an epoll or inotify
//! fd is an anonymous inode like a sync_file, and was once let through); the tests that send
//! a real sync_file need a dma-heap, and run in the kernel lab.

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use dmabridge_interop::dmabuf::wire::{self, BufferMsg, Message};
use dmabridge_interop::dmabuf::{
    fd_count, recv, recv_fenced, sealed_memfd_of_size, send_buffer, send_buffer_with_fence, send_raw,
    send_release_with_fence, socketpair, DmaBuf, FencedReceived, FileId, HandoffError, PlaneDesc, Received,
};
use dmabridge_interop::sync::{
    export_sync_file, implicit_bridge_supported, import_sync_file, poll_readable, wait_sync_file, SyncAccess,
    SyncError, SyncFile, SyncFileError, WaitError,
};
use dmabridge_interop::{Fourcc, Layout, Modifier};
use rustix::event::{eventfd, EventfdFlags};

static FD_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// fd counts are per process and tests run on parallel threads: every test here holds this.
fn lock() -> std::sync::MutexGuard<'static, ()> {
    FD_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn eventfd_fence() -> OwnedFd {
    eventfd(0, EventfdFlags::CLOEXEC).unwrap()
}

fn signal(fence: &OwnedFd) {
    rustix::io::write(fence, &1u64.to_ne_bytes()).unwrap();
}

#[test]
fn sync_file_ioctls_on_a_memfd_say_not_a_dma_buf() {
    let _g = lock();
    let memfd = sealed_memfd_of_size("not-a-dma-buf", 4096).unwrap();
    for access in [SyncAccess::Read, SyncAccess::Write, SyncAccess::ReadWrite] {
        let e = export_sync_file(memfd.as_fd(), access).unwrap_err();
        assert!(matches!(e, SyncError::NotSupported { op: "DMA_BUF_IOCTL_EXPORT_SYNC_FILE" }), "{e:?}");
        assert!(e.to_string().contains("not a dma-buf"), "{e}");
        // A fence to import needs a real sync_file (the kernel lab's).
        if let Some(fence) = real_fence() {
            let e = import_sync_file(memfd.as_fd(), &fence, access).unwrap_err();
            assert!(matches!(e, SyncError::NotSupported { op: "DMA_BUF_IOCTL_IMPORT_SYNC_FILE" }), "{e:?}");
        }
    }
    assert!(!implicit_bridge_supported(memfd.as_fd()));
    let (r, _w) = rustix::pipe::pipe().unwrap();
    assert!(!implicit_bridge_supported(r.as_fd()));
}

#[test]
fn waiting_on_what_is_not_a_sync_file_is_refused_before_any_wait() {
    let _g = lock();
    // A memfd polls readable at once: without the check it would pass for a signalled fence.
    let memfd = sealed_memfd_of_size("not-a-fence", 16).unwrap();
    assert!(matches!(wait_sync_file(memfd.as_fd(), Duration::from_secs(60)), Err(WaitError::NotASyncFile)));
    let (r, _w) = rustix::pipe::pipe().unwrap();
    assert!(matches!(wait_sync_file(r.as_fd(), Duration::from_secs(60)), Err(WaitError::NotASyncFile)));
    let fence = eventfd_fence();
    signal(&fence);
    assert!(matches!(wait_sync_file(fence.as_fd(), Duration::from_secs(60)), Err(WaitError::NotASyncFile)));
}

#[test]
fn the_cpu_wait_times_out_hangs_up_and_wakes() {
    let _g = lock();
    // Never readable: the writer stays open and writes nothing.
    let (r, w) = rustix::pipe::pipe().unwrap();
    let start = Instant::now();
    let e = poll_readable(r.as_fd(), Duration::from_millis(50)).unwrap_err();
    assert!(matches!(e, WaitError::Timeout { timeout } if timeout == Duration::from_millis(50)), "{e:?}");
    assert!(start.elapsed() >= Duration::from_millis(50), "returned before the timeout");
    // The other end gone: a typed hang-up, not a wait forever.
    drop(w);
    assert!(matches!(poll_readable(r.as_fd(), Duration::from_secs(60)), Err(WaitError::HungUp)));
    // Signalled from another thread while waiting.
    let fence = eventfd_fence();
    let signaller = {
        let fence = fence.try_clone().unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            signal(&fence);
        })
    };
    poll_readable(fence.as_fd(), Duration::from_secs(60)).unwrap();
    signaller.join().unwrap();
}

fn buffer() -> DmaBuf {
    let fd = sealed_memfd_of_size("fenced", 64 * 64 * 4).unwrap();
    DmaBuf::new(
        Fourcc::ARGB8888,
        Layout::Explicit(Modifier::LINEAR),
        64,
        64,
        vec![PlaneDesc { fd, offset: 0, stride: 256 }],
    )
    .unwrap()
}

/// A real sync_file: a dma-heap buffer's implicit fences (none: a signalled stub fence).
/// Only where there is a dma-heap (the kernel lab, which must have one); `None` elsewhere.
fn real_fence() -> Option<SyncFile> {
    use dmabridge_interop::dmabuf::SystemMemory;
    let heap = SystemMemory::detect();
    if matches!(heap, SystemMemory::Memfd) {
        assert_ne!(std::env::var("DMABRIDGE_TEST_CONFIG").as_deref(), Ok("kernel"), "the kernel lab has a system dma-heap");
        eprintln!("skipped: no dma-heap, so no sync_file to send (the kernel lab runs this)");
        return None;
    }
    let buf = heap.alloc("fence-source", 4096).unwrap();
    Some(export_sync_file(buf.as_fd(), SyncAccess::Read).expect("a dma-heap buffer exports its fences"))
}

#[test]
fn fences_travel_with_buffers_and_releases_as_sync_files() {
    let _g = lock();
    let Some(fence) = real_fence() else { return };
    let (a, b) = socketpair().unwrap();
    let buf = buffer();
    let before = fd_count().unwrap();

    send_buffer_with_fence(&a, 3, &buf, Some(&fence)).unwrap();
    let FencedReceived::Buffer { id, buf: got, acquire_fence: Some(acquire) } = recv_fenced(&b).unwrap() else {
        panic!("expected a fenced buffer")
    };
    assert_eq!(id, 3);
    assert_eq!(got.plane_count(), 1);
    // The same fence, in an fd of the receiver's own.
    assert_eq!(FileId::of(acquire.as_fd()).unwrap(), FileId::of(fence.as_fd()).unwrap());
    acquire.wait(Duration::from_secs(60)).unwrap();

    send_release_with_fence(&b, 3, Some(&acquire)).unwrap();
    let FencedReceived::Release { id: 3, release_fence: Some(release) } = recv_fenced(&a).unwrap() else {
        panic!("expected a fenced release")
    };
    assert_eq!(FileId::of(release.as_fd()).unwrap(), FileId::of(fence.as_fd()).unwrap());
    drop((got, acquire, release));
    assert_eq!(fd_count().unwrap(), before, "every received fd is owned and closed");

    // Unfenced messages come through recv_fenced with no fence.
    send_buffer(&a, 4, &buf).unwrap();
    assert!(matches!(recv_fenced(&b).unwrap(), FencedReceived::Buffer { id: 4, acquire_fence: None, .. }));
    assert_eq!(fd_count().unwrap(), before);
}

#[test]
fn a_receiver_that_ignores_fences_refuses_them_and_leaks_nothing() {
    let _g = lock();
    let Some(fence) = real_fence() else { return };
    let (a, b) = socketpair().unwrap();
    let buf = buffer();
    let before = fd_count().unwrap();
    send_buffer_with_fence(&a, 5, &buf, Some(&fence)).unwrap();
    assert!(matches!(recv(&b), Err(HandoffError::UnexpectedFence { id: 5 })));
    send_release_with_fence(&a, 6, Some(&fence)).unwrap();
    assert!(matches!(recv(&b), Err(HandoffError::UnexpectedFence { id: 6 })));
    assert_eq!(fd_count().unwrap(), before);
    // The socket is still in step.
    send_buffer(&a, 7, &buf).unwrap();
    assert!(matches!(recv(&b), Ok(Received::Buffer { id: 7, .. })));
}

/// Every fd a hostile peer might pass off as a fence that is not one: the anonymous inodes
/// that look like a sync_file to `fstatfs` (an eventfd never signals unless its sender
/// writes it; a timerfd, an epoll and an inotify fd), and plain files, pipes and sockets.
fn fake_fences() -> Vec<(&'static str, OwnedFd)> {
    use rustix::fs::{inotify, Mode};
    let (r, _w) = rustix::pipe::pipe().unwrap();
    let (s, _t) = socketpair().unwrap();
    let timer = rustix::time::timerfd_create(rustix::time::TimerfdClockId::Monotonic, rustix::time::TimerfdFlags::CLOEXEC).unwrap();
    vec![
        ("eventfd", eventfd_fence()),
        ("timerfd", timer),
        ("epoll", rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC).unwrap()),
        ("inotify", inotify::init(inotify::CreateFlags::CLOEXEC).unwrap()),
        ("memfd", sealed_memfd_of_size("not-a-fence", 1).unwrap()),
        ("pipe", r),
        ("socket", s),
        ("/dev/null", rustix::fs::open("/dev/null", rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC, Mode::empty()).unwrap()),
    ]
}

#[test]
fn a_fence_that_is_not_a_sync_file_is_refused_wherever_it_enters() {
    let _g = lock();
    let (a, b) = socketpair().unwrap();
    let buf = buffer();
    for (kind, fake) in fake_fences() {
        // As a caller's fd.
        let dup = fake.try_clone().unwrap();
        assert!(matches!(SyncFile::new(dup), Err(SyncFileError::NotASyncFile)), "{kind} taken as a sync_file");
        // From a peer, with a buffer and with a release: refused, closed, the socket in step.
        let before = fd_count().unwrap();
        for msg in [
            Message::Buffer(BufferMsg::describe(1, &buf, true)),
            Message::Release { id: 2, release_fence: true },
        ] {
            let fds: Vec<_> = buf.planes().map(|p| p.fd).filter(|_| matches!(msg, Message::Buffer(_))).chain([fake.as_fd()]).collect();
            send_raw(a.as_fd(), &wire::encode(&msg).unwrap(), &fds).unwrap();
            let e = recv_fenced(&b).unwrap_err();
            assert!(matches!(e, HandoffError::NotAFence(SyncFileError::NotASyncFile)), "{kind}: {e:?}");
            assert!(e.to_string().contains("not a sync_file"), "{e}");
        }
        assert_eq!(fd_count().unwrap(), before, "{kind}: every fd of the refused messages was closed");
        send_buffer(&a, 7, &buf).unwrap();
        assert!(matches!(recv(&b), Ok(Received::Buffer { id: 7, .. })), "{kind}: the socket is still in step");
    }
}
