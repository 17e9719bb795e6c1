//! Synchronisation across processes, as far as this machine goes: lavapipe has no
//! `VK_KHR_external_semaphore_fd` and the kernel no DRM, so the device reports cpu-wait
//! only, asking for a sync_file is a typed error, and the implicit bridge's ioctls refuse a
//! memfd cleanly. The timeline `Submission`s that cpu-wait rests on are checked too.

mod common;

use std::time::Duration;

use dmabridge::interop::dmabuf::DmaBuf;
use dmabridge::interop::sync::{SyncError, SyncMethod};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{BufferLocation, Capability, Direction, GpuBuffer, ParticipantRequest, SubmitError, SubmitOptions};

/// A submitted copy of the first 4096 bytes of `src` into `dst`, after `after`.
fn submit_copy(engine: &dmabridge::Engine, src: &GpuBuffer, dst: &GpuBuffer, after: &[dmabridge::Completion]) -> dmabridge::Submission {
    let (_, s) = engine
        .submit(SubmitOptions::after(after), |cmd, until| {
            let region = dmabridge::ash::vk::BufferCopy { src_offset: 0, dst_offset: 0, size: 4096 };
            // SAFETY: the engine's command buffer; both buffers hold 4096 bytes with transfer
            // usage and are tracked until the submission is done (VUID-vkDestroyBuffer-buffer-00922).
            unsafe { engine.device().cmd_copy_buffer(cmd, src.buffer(), dst.buffer(), &[region]) };
            src.track(until);
            dst.track(until);
            Ok::<(), SubmitError>(())
        })
        .expect("submit");
    s
}

#[test]
fn lavapipe_synchronises_by_cpu_wait_and_says_so() {
    let engine = common::engine();
    assert!(!engine.has_capability(Capability::SyncFile), "lavapipe has no SYNC_FD semaphores");
    let methods = engine.sync_methods();
    assert_eq!(methods.iter().collect::<Vec<_>>(), [SyncMethod::CpuWait]);
    let p = engine.participant(&ParticipantRequest::new("gpu", dmabridge::ash::vk::ImageUsageFlags::SAMPLED, Direction::Both)).expect("participant");
    assert_eq!(p.sync.best(), SyncMethod::CpuWait);
    let report = dmabridge::probe::probe(&engine, &Default::default()).expect("probe");
    assert_eq!(report.sync, SyncMethod::CpuWait);
    common::assert_clean(&engine);
}

#[test]
fn asking_for_a_sync_file_without_the_capability_is_a_typed_error() {
    let engine = common::engine();
    let export = SubmitOptions { export_sync_file: true, ..Default::default() };
    let r = engine.submit(export, |_, _| Ok::<(), SubmitError>(()));
    assert!(matches!(r, Err(SubmitError::NoSyncFile(Capability::SyncFile))), "{r:?}");
    let fence = dmabridge::interop::dmabuf::sealed_memfd("not-a-fence", &[0]).expect("memfd");
    let wait = SubmitOptions { wait_sync_files: vec![fence], ..Default::default() };
    let r = engine.submit(wait, |_, _| Ok::<(), SubmitError>(()));
    assert!(matches!(r, Err(SubmitError::NoSyncFile(Capability::SyncFile))), "{r:?}");
    common::assert_clean(&engine);
}

#[test]
fn the_implicit_bridge_refuses_a_memfd_cleanly() {
    let fd = common::memfd_with(&[0u8; 64]);
    let buf = DmaBuf::in_one_file(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), 4, 4, fd, &[(0, 16)]).expect("descriptor");
    let e = dmabridge::sync::fences_of_dmabuf(&buf).expect_err("a memfd is no dma-buf");
    assert!(matches!(e, SyncError::NotSupported { .. }), "{e}");
}

#[test]
fn submissions_chain_and_wait_on_the_timeline() {
    let engine = common::engine();
    let a = GpuBuffer::from_bytes(&engine, &[5u8; 4096]).expect("buffer");
    let b = GpuBuffer::new(&engine, 4096, BufferLocation::DeviceLocal).expect("buffer");
    let c = GpuBuffer::new(&engine, 4096, BufferLocation::Readback).expect("buffer");
    let copy = |src: &GpuBuffer, dst: &GpuBuffer, after: &[dmabridge::Completion]| submit_copy(&engine, src, dst, after);
    let first = copy(&a, &b, &[]);
    let second = copy(&b, &c, &[first.completion()]);
    // The second waited for the first on the GPU; the CPU waits only here.
    second.wait(Duration::from_secs(10)).expect("done");
    assert!(first.is_done() && second.is_done());
    assert_eq!(c.bytes().expect("idle"), &[5u8; 4096][..]);
    // A completion of another engine is refused, not waited on.
    let other = common::engine();
    assert!(matches!(other.wait(&[second.completion()], Duration::from_millis(1)), Err(SubmitError::ForeignCompletion)));
    // Dropping a buffer the GPU still uses defers its destruction instead of freeing it.
    let d = GpuBuffer::new(&engine, 1 << 20, BufferLocation::DeviceLocal).expect("buffer");
    let pending = copy(&a, &d, &[]);
    drop(d);
    pending.wait(Duration::from_secs(10)).expect("done");
    engine.collect_garbage();
    assert_eq!(engine.deferred_destructions(), 0, "everything retired once the GPU was done");
    common::assert_clean(&engine);
    common::assert_clean(&other);
}

#[test]
fn a_handle_dropped_while_its_work_is_pending_is_destroyed_only_after_it() {
    let engine = common::engine();
    // Work that cannot start before the host signals its own timeline point.
    let timeline = engine.host_timeline().expect("host timeline");
    let gate = timeline.next();
    let src = GpuBuffer::from_bytes(&engine, &[9u8; 4096]).expect("buffer");
    let dst = GpuBuffer::new(&engine, 4096, BufferLocation::Readback).expect("buffer");
    let pending = submit_copy(&engine, &src, &dst, &[gate]);
    let before = engine.deferred_destructions();
    let t = std::time::Instant::now();
    drop(src);
    assert!(t.elapsed() < Duration::from_millis(200), "dropping never waits for the GPU");
    assert!(!pending.is_done());
    assert_eq!(engine.deferred_destructions(), before + 1, "the source waits for its copy");
    assert!(matches!(dst.bytes(), Err(dmabridge::BufferError::Busy)), "the CPU may not read what the GPU will write");
    // The host opens the gate; the copy runs; then the source goes.
    let signal = dmabridge::ash::vk::SemaphoreSignalInfo::default().semaphore(gate.semaphore()).value(gate.value());
    // SAFETY: a timeline semaphore of this device, signalled to the value the host took.
    unsafe { engine.device().signal_semaphore(&signal) }.expect("signal");
    pending.wait(Duration::from_secs(10)).expect("done");
    engine.collect_garbage();
    assert_eq!(engine.deferred_destructions(), before);
    assert_eq!(dst.bytes().expect("idle"), &[9u8; 4096][..]);
    common::assert_clean(&engine);
}
