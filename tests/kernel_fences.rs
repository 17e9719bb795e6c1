//! The proof that dmabridge's consumers wait for a producer's fence, with a fence nobody but
//! the test signals: vgem's (`tests/support_vgem`), on a vgem dumb buffer exported through
//! PRIME. The producer attaches an unsignalled write fence, writes the final content later,
//! then signals. A CPU consumer (`CpuAccessGuard`: poll, then `DMA_BUF_IOCTL_SYNC`) and a
//! GPU consumer (the implicit bridge: the dma-buf's fences as a sync_file its submission waits
//! for) must see only the final content; the same reads without the wait are checked to see
//! the old content, so a consumer that skipped the wait fails the test. A fence that never
//! signals gives each waiter its typed timeout, and cannot wedge the engine's queue: the work
//! that waited for it runs once its limit has passed, reports the fence as expired, and the
//! work submitted after it runs at once.
//!
//! The same queue meets sw_sync's fences (`interop/tests/support_swsync`), which the test
//! alone signals, or fails: a fence that never signals expires at its limit and the next work
//! runs at once; a fence that signalled with an error is refused before anything is submitted
//! (`SubmitError::FenceFailed`: the frame is lost), and one that fails while it holds work back
//! lets that work run and reports it lost; the queue goes on after each.
//!
//! Runs in the kernel lab (vgem, sw_sync, sync_file, lavapipe with SYNC_FD); elsewhere it
//! says why it is skipped.

mod common;
#[path = "../interop/tests/support_swsync/mod.rs"]
mod support_swsync;
#[path = "support_vgem/mod.rs"]
mod support_vgem;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{plane_rows, PlaneLayout, DmaBuf};
use dmabridge::interop::sync::{export_sync_file, wait_sync_file, CpuAccessError, CpuAccessGuard, FenceStatus, SyncAccess, WaitError};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{BufferLocation, Capability, GpuBuffer, ImportedBuffer, SubmitError, SubmitOptions};
use support_vgem::{DumbBuffer, RawMapping, Vgem};

const OLD: u8 = 0x11;
const FINAL: u8 = 0xee;
/// How long the producer takes to write its frame after attaching the fence.
const PRODUCER_DELAY: Duration = Duration::from_millis(400);

/// The vgem device, or `None` (with the reason printed) outside the kernel lab.
fn vgem() -> Option<Vgem> {
    if !common::in_kernel_lab() {
        eprintln!("skipped: vgem fences need the kernel lab (scripts/lab.sh --modules vgem)");
        return None;
    }
    Some(Vgem::open().expect("the kernel lab loads vgem (scripts/lab.sh --modules vgem)"))
}

/// A 64x64 XRGB8888 dumb buffer holding OLD, exported as a dma-buf, and its mapping.
fn old_buffer(vgem: &Vgem) -> (DumbBuffer, std::os::fd::OwnedFd, RawMapping) {
    let buffer = vgem.dumb(64, 64, 32).expect("dumb buffer");
    let fd = vgem.export(&buffer).expect("PRIME export");
    assert!(dmabridge::interop::sync::is_dma_buf(fd.as_fd()).expect("fstatfs"), "a PRIME export is a dma-buf");
    let map = RawMapping::new(&fd, buffer.size as usize).expect("mmap");
    map.fill(OLD);
    (buffer, fd, map)
}

/// The producer: after PRODUCER_DELAY writes FINAL (through its own mapping: the guard would
/// wait for its own fence) and signals.
fn produce_later(vgem: &Vgem, map: RawMapping, fence: support_vgem::Fence) -> std::thread::JoinHandle<()> {
    let vgem = vgem.try_clone().expect("dup the card");
    std::thread::spawn(move || {
        std::thread::sleep(PRODUCER_DELAY);
        map.fill(FINAL);
        vgem.signal(fence).expect("signal the fence");
    })
}

#[test]
fn a_cpu_reader_sees_only_what_the_fence_guards() {
    let Some(vgem) = vgem() else { return };
    let (buffer, fd, map) = old_buffer(&vgem);
    let len = buffer.size as usize;
    let fence = vgem.attach_write_fence(&buffer).expect("attach a write fence");
    // Without the wait: the old content (the fence is pending, the frame not written yet).
    let peek = RawMapping::new(&fd, len).expect("mmap");
    assert!(peek.read().iter().all(|&b| b == OLD), "a reader that skips the wait sees the old frame");
    let producer = produce_later(&vgem, map, fence);
    let t = Instant::now();
    let access = CpuAccessGuard::begin(fd.as_fd(), SyncAccess::Read, Duration::from_secs(5)).expect("the fence signals within 5 s");
    let waited = t.elapsed();
    let seen = peek.read();
    drop(access);
    producer.join().expect("producer");
    assert!(seen.iter().all(|&b| b == FINAL), "the guarded reader sees only the final frame (first byte {:#x})", seen[0]);
    assert!(waited >= PRODUCER_DELAY / 2, "the guard waited for the fence ({waited:?})");
    // The library's own guarded read (read_exact_at maps dma-bufs through the same guard).
    let mut bytes = vec![0u8; len];
    dmabridge::interop::dmabuf::read_exact_at(fd.as_fd(), 0, &mut bytes).expect("guarded read");
    assert!(bytes.iter().all(|&b| b == FINAL));
    vgem.close(buffer).expect("close");
}

/// Copies the first `len` bytes of `src` into a new readback buffer after `options`' waits.
fn gpu_copy(engine: &dmabridge::Engine, src: &ImportedBuffer, len: u64, options: SubmitOptions) -> (GpuBuffer, dmabridge::Submission) {
    try_gpu_copy(engine, src, len, options).expect("submit")
}

/// [`gpu_copy`], or why the submission was refused.
fn try_gpu_copy(engine: &dmabridge::Engine, src: &ImportedBuffer, len: u64, options: SubmitOptions) -> Result<(GpuBuffer, dmabridge::Submission), SubmitError> {
    let dst = GpuBuffer::new(engine, len, BufferLocation::Readback).expect("buffer");
    let (_, s) = engine
        .submit(options, |cmd, until| {
            let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: len };
            let host = dmabridge::resources::image::buffer_barrier(
                dst.buffer(),
                vk::AccessFlags::TRANSFER_WRITE,
                vk::AccessFlags::HOST_READ,
                vk::QUEUE_FAMILY_IGNORED,
                vk::QUEUE_FAMILY_IGNORED,
            );
            // SAFETY: the engine's command buffer, recording; both buffers have transfer usage
            // and hold `len` bytes; both are tracked until the submission is done
            // (VUID-vkDestroyBuffer-buffer-00922).
            unsafe {
                engine.device().cmd_copy_buffer(cmd, src.buffer(), dst.buffer(), &[region]);
                engine.device().cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::HOST,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[host],
                    &[],
                );
            }
            src.track(until);
            dst.track(until);
            Ok::<(), SubmitError>(())
        })?;
    Ok((dst, s))
}

fn descriptor(fd: &std::os::fd::OwnedFd, buffer: &DumbBuffer) -> DmaBuf {
    DmaBuf::in_one_file(Fourcc::XRGB8888, Layout::Explicit(Modifier::LINEAR), 64, 64, fd.try_clone().expect("dup"), &[PlaneLayout::linear(0, u64::from(buffer.pitch), plane_rows(Fourcc::XRGB8888, 0, 64))])
        .expect("descriptor")
}

#[test]
fn a_gpu_reader_waits_for_the_fence_through_the_implicit_bridge() {
    let Some(vgem) = vgem() else { return };
    let engine = common::engine();
    assert!(engine.has_capability(Capability::SyncFile), "lavapipe has SYNC_FD semaphores in the lab");
    let (buffer, fd, map) = old_buffer(&vgem);
    let len = buffer.size;
    let src = ImportedBuffer::import(&engine, fd.as_fd(), len, vk::BufferUsageFlags::TRANSFER_SRC).expect("import the vgem dma-buf");
    let fence = vgem.attach_write_fence(&buffer).expect("attach a write fence");
    // Without the wait the GPU reads the old frame: the fence is pending.
    let (skipped, s) = gpu_copy(&engine, &src, len, SubmitOptions::default());
    s.wait(Duration::from_secs(10)).expect("a copy with no wait runs");
    assert!(skipped.bytes().expect("idle").iter().all(|&b| b == OLD), "a GPU reader that skips the wait sees the old frame");
    // The implicit bridge: the dma-buf's write fences as sync_files the copy waits for.
    let fences = dmabridge::dmabuf::sync::fences_of_dmabuf(&descriptor(&fd, &buffer)).expect("EXPORT_SYNC_FILE");
    assert_eq!(fences.len(), 1);
    assert!(matches!(wait_sync_file(fences[0].as_fd(), Duration::ZERO), Err(WaitError::Timeout { .. })), "the exported fence is pending");
    let (copied, s) = gpu_copy(&engine, &src, len, SubmitOptions { wait_sync_files: fences, ..SubmitOptions::default() });
    assert!(!s.is_done(), "the copy waits for the producer's fence");
    let producer = produce_later(&vgem, map, fence);
    s.wait(Duration::from_secs(5)).expect("the copy runs once the fence signals");
    producer.join().expect("producer");
    assert!(copied.bytes().expect("idle").iter().all(|&b| b == FINAL), "the GPU reader sees only the final frame");
    drop((copied, skipped, src));
    vgem.close(buffer).expect("close");
    common::assert_clean(&engine);
}

#[test]
fn a_fence_that_never_signals_is_a_typed_timeout_for_every_waiter() {
    let Some(vgem) = vgem() else { return };
    let engine = common::engine();
    let (buffer, fd, _map) = old_buffer(&vgem);
    let src = ImportedBuffer::import(&engine, fd.as_fd(), buffer.size, vk::BufferUsageFlags::TRANSFER_SRC).expect("import");
    let fence = vgem.attach_write_fence(&buffer).expect("attach a write fence");
    let short = Duration::from_millis(200);
    // The CPU guard.
    let t = Instant::now();
    let e = CpuAccessGuard::begin(fd.as_fd(), SyncAccess::Read, short).expect_err("the fence never signals");
    assert!(matches!(e, CpuAccessError::Timeout { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A sync_file wait.
    let sync_file = export_sync_file(fd.as_fd(), SyncAccess::Read).expect("EXPORT_SYNC_FILE");
    assert!(matches!(wait_sync_file(sync_file.as_fd(), short), Err(WaitError::Timeout { .. })));
    // A submission that waits for it on the GPU.
    let (dst, s) = gpu_copy(&engine, &src, buffer.size, SubmitOptions { wait_sync_files: vec![sync_file], ..SubmitOptions::default() });
    assert!(matches!(s.wait(short), Err(SubmitError::Timeout(_))));
    // The producer finally signals: everything completes and tears down cleanly.
    vgem.signal(fence).expect("signal");
    s.wait(Duration::from_secs(10)).expect("done once signalled");
    drop((dst, src));
    vgem.close(buffer).expect("close");
    common::assert_clean(&engine);
}

#[test]
fn a_fence_that_never_signals_cannot_wedge_the_queue() {
    let Some(vgem) = vgem() else { return };
    let engine = common::engine();
    let (buffer, fd, _map) = old_buffer(&vgem);
    let src = ImportedBuffer::import(&engine, fd.as_fd(), buffer.size, vk::BufferUsageFlags::TRANSFER_SRC).expect("import");
    // Unsignalled until the test says so (vgem's own limit: 10 s).
    let fence = vgem.attach_write_fence(&buffer).expect("attach a write fence");
    let limit = Duration::from_millis(500);
    for export in [false, true] {
        let sync_file = export_sync_file(fd.as_fd(), SyncAccess::Read).expect("EXPORT_SYNC_FILE");
        assert!(!sync_file.is_signalled().expect("poll"), "the fence is pending");
        // A hostile producer's acquire fence. With an export, lavapipe's vkGetSemaphoreFdKHR
        // returns only once the batch has run: a queue wait on the fence kept submit itself
        // from returning until vgem gave up on it (and for ever with a fence that never ends).
        let t = Instant::now();
        let options = SubmitOptions { wait_sync_files: vec![sync_file], fence_limit: limit, export_sync_file: export, ..SubmitOptions::default() };
        let (dst, s) = gpu_copy(&engine, &src, buffer.size, options);
        let submitted_in = t.elapsed();
        // The work runs once the limit has passed, and says the fence expired.
        let e = s.wait(Duration::from_secs(8)).expect_err("the fence expired");
        let waited = t.elapsed();
        assert!(matches!(e, SubmitError::FenceExpired { index: 0, limit: l } if l == limit), "{e}");
        assert!(e.to_string().contains("did not signal within 500ms"), "{e}");
        // The next work waits for nobody and runs at once: the queue goes on.
        let t = Instant::now();
        let (after, s2) = gpu_copy(&engine, &src, buffer.size, SubmitOptions::default());
        s2.wait(Duration::from_secs(8)).expect("the queue is not wedged");
        eprintln!("export {export}: submit returned in {submitted_in:?}, the gated work ran after {waited:?}, the next in {:?}", t.elapsed());
        assert!(waited >= limit, "the work waited for the fence's limit ({waited:?})");
        assert!(waited < Duration::from_secs(8), "bounded by the limit, not by vgem's 10 s ({waited:?})");
        drop((dst, after));
    }
    vgem.signal(fence).expect("signal");
    drop(src);
    vgem.close(buffer).expect("close");
    common::assert_clean(&engine);
}

const SW_LEN: u64 = 64 * 1024;
const ENOENT: i32 = 2;

/// A dma-buf (the lab's dma-heap) holding a pattern, imported for the copies of the sw_sync
/// tests, and the pattern.
fn sw_source(engine: &dmabridge::Engine) -> (std::os::fd::OwnedFd, ImportedBuffer, Vec<u8>) {
    let bytes = common::pattern(SW_LEN as usize, 45);
    let fd = common::dmabuf_with(&bytes);
    let src = ImportedBuffer::import(engine, fd.as_fd(), SW_LEN, vk::BufferUsageFlags::TRANSFER_SRC).expect("import the dma-buf");
    (fd, src, bytes)
}

/// Work that waits for nobody runs at once, and copies what it should: the queue goes on.
fn assert_queue_goes_on(engine: &dmabridge::Engine, src: &ImportedBuffer, bytes: &[u8]) -> Duration {
    let t = Instant::now();
    let (after, s) = gpu_copy(engine, src, SW_LEN, SubmitOptions::default());
    s.wait(Duration::from_secs(8)).expect("the queue is not wedged");
    assert_eq!(after.bytes().expect("idle"), bytes, "the next work copied the frame");
    t.elapsed()
}

#[test]
fn a_sw_sync_fence_that_never_signals_expires_and_the_queue_goes_on() {
    let Some(timeline) = support_swsync::Timeline::for_test() else { return };
    let engine = common::engine();
    let (_fd, src, bytes) = sw_source(&engine);
    // Far above a submit's own time here (under 20 ms in the lab, under TCG), so a submit that
    // took this long waited for the fence.
    let limit = Duration::from_secs(1);
    for export in [false, true] {
        // At 1 on a timeline the test never advances while the work waits.
        let fence = timeline.fence(1).expect("SW_SYNC_IOC_CREATE_FENCE");
        let short = Duration::from_millis(200);
        let t = Instant::now();
        assert!(matches!(fence.wait(short), Err(WaitError::Timeout { .. })), "the CPU wait is a typed timeout");
        let cpu = t.elapsed();
        assert!(cpu >= short && cpu < short + Duration::from_secs(2), "the CPU wait took {cpu:?}");
        let t = Instant::now();
        let options = SubmitOptions { wait_sync_files: vec![fence], fence_limit: limit, export_sync_file: export, ..SubmitOptions::default() };
        let (dst, s) = gpu_copy(&engine, &src, SW_LEN, options);
        let submitted_in = t.elapsed();
        if !export {
            assert!(submitted_in < limit, "submit returned after {submitted_in:?}: it waited for the fence");
            assert!(!s.is_done(), "the work waits for the fence");
        }
        let e = s.wait(Duration::from_secs(8)).expect_err("the fence expired");
        let waited = t.elapsed();
        assert!(matches!(e, SubmitError::FenceExpired { index: 0, limit: l } if l == limit), "{e}");
        assert!(waited >= limit && waited < Duration::from_secs(8), "the work ran after {waited:?} (limit {limit:?})");
        let next = assert_queue_goes_on(&engine, &src, &bytes);
        eprintln!("sw_sync, export {export}: submit returned in {submitted_in:?}, the gated work ran after {waited:?}, the next in {next:?}");
        drop(dst);
    }
    drop(timeline);
    drop(src);
    common::assert_clean(&engine);
}

#[test]
fn a_fence_that_failed_before_submit_is_refused_and_the_queue_goes_on() {
    let Some(timeline) = support_swsync::Timeline::for_test() else { return };
    let engine = common::engine();
    let (_fd, src, bytes) = sw_source(&engine);
    // One good fence (signalled) and one whose producer failed (its timeline closed).
    let good = timeline.fence(1).expect("fence");
    timeline.advance(1).expect("inc");
    let doomed = support_swsync::Timeline::open().expect("timeline");
    let failed = doomed.fence(1).expect("fence");
    drop(doomed);
    assert_eq!(failed.status().expect("status"), FenceStatus::Failed { errno: ENOENT });
    let options = SubmitOptions { wait_sync_files: vec![good, failed], ..SubmitOptions::default() };
    let Err(e) = try_gpu_copy(&engine, &src, SW_LEN, options) else { panic!("work behind a failed fence was submitted") };
    assert!(matches!(e, SubmitError::FenceFailed { index: 1, errno: ENOENT }), "{e}");
    assert!(e.to_string().contains("fence 1") && e.to_string().contains("frame is lost"), "{e}");
    assert_queue_goes_on(&engine, &src, &bytes);
    drop(src);
    common::assert_clean(&engine);
}

#[test]
fn a_fence_that_fails_while_it_holds_work_back_reports_the_frame_lost() {
    let Some(_lab) = support_swsync::Timeline::for_test() else { return };
    let engine = common::engine();
    let (_fd, src, bytes) = sw_source(&engine);
    let limit = Duration::from_secs(5);
    for export in [false, true] {
        let doomed = support_swsync::Timeline::open().expect("timeline");
        let fence = doomed.fence(1).expect("fence");
        let options = SubmitOptions { wait_sync_files: vec![fence], fence_limit: limit, export_sync_file: export, ..SubmitOptions::default() };
        let t = Instant::now();
        let (dst, s) = if export {
            // lavapipe's export returns once the batch has run, which needs the fence settled:
            // the producer fails from another thread.
            let failing = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                drop(doomed);
            });
            let r = gpu_copy(&engine, &src, SW_LEN, options);
            failing.join().expect("producer");
            r
        } else {
            let r = gpu_copy(&engine, &src, SW_LEN, options);
            assert!(!r.1.is_done(), "the work waits for the pending fence");
            drop(doomed);
            r
        };
        let e = s.wait(Duration::from_secs(8)).expect_err("the fence failed");
        let waited = t.elapsed();
        assert!(matches!(e, SubmitError::FenceFailed { index: 0, errno: ENOENT }), "export {export}: {e}");
        assert!(waited < limit, "reported when the fence failed, not at its limit ({waited:?})");
        let next = assert_queue_goes_on(&engine, &src, &bytes);
        eprintln!("sw_sync, export {export}: a fence failed under gated work, reported after {waited:?}; the next work ran in {next:?}");
        drop(dst);
    }
    drop(src);
    common::assert_clean(&engine);
}
