//! Synchronisation as the device and the kernel offer it, asserted per configuration. In the
//! kernel lab (Linux 6.12: lavapipe has SYNC_FD semaphores, the dma-buf sync_file ioctls
//! exist) the device must report sync-file, implicit-bridge and cpu-wait, a submission's
//! sync_file must reach another submission's waits and cross a process boundary with a
//! buffer, and the implicit bridge must work on a real dma-buf. Where the device has no
//! SYNC_FD (this CI host) it must report cpu-wait only, and asking for a sync_file is a typed
//! error. The timeline `Submission`s that every method rests on are checked everywhere.
//!
//! Found in the lab: lavapipe's SYNC_FD export returns only once the batch is done, so every
//! sync_file it exports is already signalled (the tests print it). These tests prove the
//! plumbing (export, import, wait, SCM_RIGHTS, the data); that a submission really waits for
//! a pending sync_file is proved by `tests/kernel_fences.rs` with vgem's fences, which fail
//! when the engine drops the wait and these do not.

mod common;

use std::time::Duration;

use std::os::fd::AsFd;

use dmabridge::interop::dmabuf::{plane_rows, PlaneLayout, recv_fenced, send_buffer_with_fence, send_release_with_fence, socketpair, DmaBuf, FencedReceived};
use dmabridge::interop::sync::{CpuAccessGuard, SyncAccess, SyncError, SyncMethod};
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
fn the_device_reports_the_sync_methods_the_kernel_gives_it() {
    let engine = common::engine();
    let methods: Vec<SyncMethod> = engine.sync_methods().iter().collect();
    if common::in_kernel_lab() {
        assert!(engine.has_capability(Capability::SyncFile), "lavapipe on Linux 6.12 has SYNC_FD semaphores");
        assert_eq!(methods, [SyncMethod::SyncFile, SyncMethod::ImplicitBridge, SyncMethod::CpuWait]);
    } else if !engine.has_capability(Capability::SyncFile) {
        assert_eq!(methods, [SyncMethod::CpuWait]);
    }
    let best = methods[0];
    let p = engine.participant(&ParticipantRequest::new("gpu", dmabridge::ash::vk::ImageUsageFlags::SAMPLED, Direction::Both)).expect("participant");
    assert_eq!(p.sync.best(), best);
    let report = dmabridge::device::probe::probe(engine.adapter(), &Default::default()).expect("probe");
    assert_eq!(report.sync, best);
    common::assert_clean(&engine);
}

#[test]
fn asking_for_a_sync_file_without_the_capability_is_a_typed_error() {
    let engine = common::engine();
    if engine.has_capability(Capability::SyncFile) {
        eprintln!("skipped: this device has SYNC_FD semaphores (the sync_file tests below run instead)");
        return;
    }
    let export = SubmitOptions { export_sync_file: true, ..Default::default() };
    let r = engine.submit(export, |_, _| Ok::<(), SubmitError>(()));
    assert!(matches!(r, Err(SubmitError::NoSyncFile(Capability::SyncFile))), "{r:?}");
    // A wait needs no capability (the engine polls fences itself), only a real sync_file,
    // which a memfd is not: it cannot even be put in the options.
    let memfd = dmabridge::interop::dmabuf::sealed_memfd("not-a-fence", &[0]).expect("memfd");
    let r = dmabridge::interop::sync::SyncFile::new(memfd);
    assert!(matches!(r, Err(dmabridge::interop::sync::SyncFileError::NotASyncFile)), "{r:?}");
    common::assert_clean(&engine);
}

/// The engine when it has SYNC_FD semaphores (always in the kernel lab), else `None`.
fn sync_file_engine() -> Option<dmabridge::Engine> {
    let engine = common::engine();
    if engine.has_capability(Capability::SyncFile) {
        return Some(engine);
    }
    assert!(!common::in_kernel_lab(), "lavapipe has SYNC_FD semaphores in the kernel lab");
    eprintln!("skipped: this device has no SYNC_FD semaphores (the kernel lab runs this)");
    None
}

/// Bytes of the copy whose fence the sync_file tests pass around: enough work that a driver
/// whose export does not wait would export it pending (lavapipe's export waits for it).
const BIG: u64 = 32 << 20;

/// A submitted copy of BIG bytes from `src` into `dst`, exporting a sync_file.
fn big_copy(engine: &dmabridge::Engine, src: &GpuBuffer, dst: &GpuBuffer) -> dmabridge::Submission {
    big_copy_exporting(engine, src, dst, true)
}

/// A submitted copy of BIG bytes from `src` into `dst`, exporting a sync_file if `export`.
fn big_copy_exporting(engine: &dmabridge::Engine, src: &GpuBuffer, dst: &GpuBuffer, export: bool) -> dmabridge::Submission {
    let options = SubmitOptions { export_sync_file: export, ..Default::default() };
    let (_, s) = engine
        .submit(options, |cmd, until| {
            let region = dmabridge::ash::vk::BufferCopy { src_offset: 0, dst_offset: 0, size: BIG };
            // SAFETY: the engine's command buffer; both buffers hold BIG bytes with transfer
            // usage and are tracked until the submission is done (VUID-vkDestroyBuffer-buffer-00922).
            unsafe { engine.device().cmd_copy_buffer(cmd, src.buffer(), dst.buffer(), &[region]) };
            src.track(until);
            dst.track(until);
            Ok::<(), SubmitError>(())
        })
        .expect("submit");
    s
}

/// What an exported fence was when the test had it: none, pending or already signalled.
fn fence_state(fence: Option<&dmabridge::interop::sync::SyncFile>) -> &'static str {
    match fence.map(|f| dmabridge::interop::sync::wait_sync_file(f.as_fd(), Duration::ZERO)) {
        None => "none (the work was done)",
        Some(Ok(())) => "exported, already signalled",
        Some(Err(dmabridge::interop::sync::WaitError::Timeout { .. })) => "exported, pending",
        Some(Err(e)) => panic!("an exported fence is a sync_file: {e}"),
    }
}

#[test]
fn a_sync_file_gates_the_next_submission() {
    let Some(engine) = sync_file_engine() else { return };
    // Found in the kernel lab: exporting a sync_file from a submission that waits for a host
    // timeline point not yet signalled blocks in vkGetSemaphoreFdKHR until the host signals,
    // which the caller cannot do while blocked. The engine refuses it instead.
    let timeline = engine.host_timeline().expect("host timeline");
    let gate = timeline.next();
    let behind = SubmitOptions { waits: vec![gate], export_sync_file: true, ..Default::default() };
    let r = engine.submit(behind, |_, _| Ok::<(), SubmitError>(()));
    assert!(matches!(r, Err(SubmitError::ExportBehindHostWait { .. })), "{r:?}");
    let a = GpuBuffer::from_bytes(&engine, &vec![7u8; BIG as usize]).expect("buffer");
    let b = GpuBuffer::new(&engine, BIG, BufferLocation::DeviceLocal).expect("buffer");
    let c = GpuBuffer::new(&engine, 4096, BufferLocation::Readback).expect("buffer");
    // How long the copy takes, and how long submitting it with an export takes (reported, not
    // asserted: on lavapipe the export returns only once the batch is done).
    let t = std::time::Instant::now();
    big_copy_exporting(&engine, &a, &b, false).wait(Duration::from_secs(30)).expect("done");
    let copy_took = t.elapsed();
    let t = std::time::Instant::now();
    let mut first = big_copy(&engine, &a, &b);
    let export_took = t.elapsed();
    eprintln!("the copy took {copy_took:?} to submit and finish; submitting it with an export took {export_took:?}");
    let fence = first.take_sync_file();
    eprintln!("the first copy's fence: {}", fence_state(fence.as_ref()));
    // The second waits for the first through the sync_file alone (no timeline wait).
    let (_, second) = engine
        .submit(SubmitOptions { wait_sync_files: fence.into_iter().collect(), ..Default::default() }, |cmd, until| {
            let region = dmabridge::ash::vk::BufferCopy { src_offset: BIG - 4096, dst_offset: 0, size: 4096 };
            // SAFETY: as above: the last 4096 bytes of b into c.
            unsafe { engine.device().cmd_copy_buffer(cmd, b.buffer(), c.buffer(), &[region]) };
            b.track(until);
            c.track(until);
            Ok::<(), SubmitError>(())
        })
        .expect("submit");
    second.wait(Duration::from_secs(30)).expect("done");
    assert_eq!(c.bytes().expect("idle"), &[7u8; 4096][..]);
    // The host signals its gate: nothing waits for it, and teardown is clean.
    let signal = dmabridge::ash::vk::SemaphoreSignalInfo::default().semaphore(gate.semaphore()).value(gate.value());
    // SAFETY: a timeline semaphore of this device, signalled to the value the host took.
    unsafe { engine.device().signal_semaphore(&signal) }.expect("signal");
    common::assert_clean(&engine);
}

const CHILD_ENV: &str = "DMABRIDGE_SYNC_CHILD_FD";
/// What the child prints once it is about to receive.
const CHILD_READY: &str = "CHILD READY to receive";

/// Only does something in the child that `a_sync_file_crosses_a_process_boundary` starts:
/// tells the parent it is ready, receives a buffer with its acquire fence, reports whether the
/// fence was still pending, waits for it, and answers with a release.
#[test]
fn sync_file_child_process() {
    let Ok(fd) = std::env::var(CHILD_ENV) else { return };
    let raw: i32 = fd.parse().expect("fd number");
    // SAFETY: the parent passed this fd open and inheritable and named it in CHILD_ENV;
    // nothing else in this process owns it.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    // The parent submits its work only once it reads this (a child starts slowly under TCG:
    // it would find the work long done even where the exported fence was pending).
    println!("{CHILD_READY}");
    std::io::Write::flush(&mut std::io::stdout()).expect("flush stdout");
    let FencedReceived::Buffer { id, buf: _, acquire_fence } = recv_fenced(&sock).expect("a fenced buffer") else { panic!("expected a buffer") };
    let fence = acquire_fence.expect("the buffer came with its acquire fence");
    // A sync_file: the kernel answers its query (anything else is NotASyncFile).
    let pending = matches!(dmabridge::interop::sync::wait_sync_file(fence.as_fd(), Duration::ZERO), Err(dmabridge::interop::sync::WaitError::Timeout { .. }));
    dmabridge::interop::sync::wait_sync_file(fence.as_fd(), Duration::from_secs(30)).expect("signals once the parent's GPU work is done");
    send_release_with_fence(&sock, id, None).expect("release");
    println!("CHILD waited for the fence ({} when it arrived)", if pending { "pending" } else { "signalled" });
}

#[test]
fn a_sync_file_crosses_a_process_boundary() {
    let Some(engine) = sync_file_engine() else { return };
    let (ours, theirs) = socketpair().expect("socketpair");
    let inheritable = rustix::io::dup(&theirs).expect("dup");
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "sync_file_child_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, std::os::fd::AsRawFd::as_raw_fd(&inheritable).to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the child");
    drop((inheritable, theirs));
    // Nothing is submitted before the child is ready to receive (see sync_file_child_process).
    let mut child_out = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut stdout = String::new();
    while !stdout.contains(CHILD_READY) {
        let n = std::io::BufRead::read_line(&mut child_out, &mut stdout).expect("the child's stdout");
        assert!(n > 0, "the child ended before it was ready:\n{stdout}");
    }
    let fd = common::dmabuf_with(&[3u8; 4096]);
    let buf = DmaBuf::in_one_file(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), 32, 32, fd, &[PlaneLayout::linear(0, 128, plane_rows(Fourcc::ARGB8888, 0, 32))]).expect("descriptor");
    let a = GpuBuffer::from_bytes(&engine, &vec![1u8; BIG as usize]).expect("buffer");
    let b = GpuBuffer::new(&engine, BIG, BufferLocation::DeviceLocal).expect("buffer");
    let mut work = big_copy(&engine, &a, &b);
    // A fence exported from finished work is -1 (no fd): a signalled sync_file stands in, so
    // the child always gets a real one.
    let fence = work.take_sync_file();
    eprintln!("the parent's fence: {}", fence_state(fence.as_ref()));
    let fence = match fence {
        Some(f) => f,
        None => dmabridge::interop::sync::export_sync_file(buf.plane(0).expect("plane").fd, SyncAccess::Read).expect("a signalled sync_file"),
    };
    send_buffer_with_fence(&ours, 1, &buf, Some(&fence)).expect("send with the fence");
    drop(fence);
    assert!(matches!(recv_fenced(&ours).expect("release"), FencedReceived::Release { id: 1, release_fence: None }));
    std::io::Read::read_to_string(&mut child_out, &mut stdout).expect("the child's stdout");
    let out = child.wait_with_output().expect("child");
    assert!(out.status.success() && stdout.contains("CHILD waited for the fence"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", stdout.lines().find(|l| l.contains("CHILD waited")).unwrap_or_default());
    work.wait(Duration::from_secs(10)).expect("done");
    common::assert_clean(&engine);
}

#[test]
fn the_implicit_bridge_publishes_a_submission_on_a_real_dmabuf() {
    let Some(engine) = sync_file_engine() else { return };
    if !common::real_dmabufs() {
        eprintln!("skipped: the implicit bridge needs a real dma-buf (the kernel lab has them)");
        return;
    }
    let fd = common::dmabuf_with(&[0u8; 4096]);
    let buf = DmaBuf::in_one_file(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), 32, 32, fd, &[PlaneLayout::linear(0, 128, plane_rows(Fourcc::ARGB8888, 0, 32))]).expect("descriptor");
    let a = GpuBuffer::from_bytes(&engine, &vec![1u8; BIG as usize]).expect("buffer");
    let b = GpuBuffer::new(&engine, BIG, BufferLocation::DeviceLocal).expect("buffer");
    let mut work = big_copy(&engine, &a, &b);
    dmabridge::dmabuf::sync::publish_to_dmabuf(&mut work, &buf).expect("IMPORT_SYNC_FILE on a real dma-buf");
    // An implicitly synchronised reader gets the submission's fence back from the dma-buf.
    let fences = dmabridge::dmabuf::sync::fences_of_dmabuf(&buf).expect("EXPORT_SYNC_FILE on a real dma-buf");
    assert_eq!(fences.len(), 1);
    dmabridge::interop::sync::wait_sync_file(fences[0].as_fd(), Duration::from_secs(30)).expect("signals with the submission");
    assert!(work.is_done() || work.wait(Duration::from_secs(1)).is_ok(), "the dma-buf's fence signalled only once the work was done");
    let plane = buf.plane(0).expect("plane").fd;
    drop(CpuAccessGuard::begin(plane, SyncAccess::Read, Duration::from_secs(10)).expect("the guard begins once it has signalled"));
    common::assert_clean(&engine);
}

#[test]
fn the_implicit_bridge_refuses_a_memfd_cleanly() {
    let fd = common::memfd_with(&[0u8; 64]);
    let buf = DmaBuf::in_one_file(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), 4, 4, fd, &[PlaneLayout::linear(0, 16, plane_rows(Fourcc::ARGB8888, 0, 4))]).expect("descriptor");
    let e = dmabridge::dmabuf::sync::fences_of_dmabuf(&buf).expect_err("a memfd is no dma-buf");
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
