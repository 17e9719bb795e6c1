//! The kernel side of the sync vocabulary on a kernel without dma-bufs or sync_files (this
//! one): every call on a stand-in fd fails cleanly with its typed error, and the CPU wait
//! times out, hangs up and wakes as poll says. Fences travel over the handoff socket as
//! owned fds (an eventfd stands in for a sync_file: both are pollable anonymous inodes).

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use dmabridge_interop::dmabuf::{
    fd_count, recv, recv_fenced, sealed_memfd_of_size, send_buffer, send_buffer_with_fence, send_raw,
    send_release_with_fence, socketpair, DmaBuf, FencedReceived, FileId, HandoffError, PlaneDesc, Received,
};
use dmabridge_interop::sync::{
    export_sync_file, implicit_bridge_supported, import_sync_file, poll_readable, wait_sync_file, SyncAccess,
    SyncError, WaitError,
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
        let fence = eventfd_fence();
        let e = import_sync_file(memfd.as_fd(), fence.as_fd(), access).unwrap_err();
        assert!(matches!(e, SyncError::NotSupported { op: "DMA_BUF_IOCTL_IMPORT_SYNC_FILE" }), "{e:?}");
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

#[test]
fn fences_travel_with_buffers_and_releases_as_owned_fds() {
    let _g = lock();
    let (a, b) = socketpair().unwrap();
    let buf = buffer();
    let fence = eventfd_fence();
    let before = fd_count().unwrap();

    send_buffer_with_fence(&a, 3, &buf, Some(fence.as_fd())).unwrap();
    let FencedReceived::Buffer { id, buf: got, acquire_fence: Some(acquire) } = recv_fenced(&b).unwrap() else {
        panic!("expected a fenced buffer")
    };
    assert_eq!(id, 3);
    assert_eq!(got.plane_count(), 1);
    // The same fence, in an fd of the receiver's own: signalling ours wakes theirs.
    assert_eq!(FileId::of(acquire.as_fd()).unwrap(), FileId::of(fence.as_fd()).unwrap());
    assert!(matches!(poll_readable(acquire.as_fd(), Duration::ZERO), Err(WaitError::Timeout { .. })));
    signal(&fence);
    poll_readable(acquire.as_fd(), Duration::from_secs(60)).unwrap();

    send_release_with_fence(&b, 3, Some(acquire.as_fd())).unwrap();
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
    let (a, b) = socketpair().unwrap();
    let buf = buffer();
    let fence = eventfd_fence();
    let before = fd_count().unwrap();
    send_buffer_with_fence(&a, 5, &buf, Some(fence.as_fd())).unwrap();
    assert!(matches!(recv(&b), Err(HandoffError::UnexpectedFence { id: 5 })));
    send_release_with_fence(&a, 6, Some(fence.as_fd())).unwrap();
    assert!(matches!(recv(&b), Err(HandoffError::UnexpectedFence { id: 6 })));
    assert_eq!(fd_count().unwrap(), before);
    // The socket is still in step.
    send_buffer(&a, 7, &buf).unwrap();
    assert!(matches!(recv(&b), Ok(Received::Buffer { id: 7, .. })));
    // A "fence" that is a file is refused by recv_fenced too.
    let bytes = dmabridge_interop::dmabuf::wire::encode(&dmabridge_interop::dmabuf::wire::Message::Release {
        id: 8,
        release_fence: true,
    })
    .unwrap();
    let file = sealed_memfd_of_size("not-a-fence", 1).unwrap();
    send_raw(a.as_fd(), &bytes, &[file.as_fd()]).unwrap();
    assert!(matches!(recv_fenced(&b), Err(HandoffError::FenceNotSyncFile)));
    assert_eq!(fd_count().unwrap(), before + 1, "only the memfd we still hold");
}
