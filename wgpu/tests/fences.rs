//! A producer's fence in front of wgpu's work, and the release fence behind it, on a real
//! kernel: the frame's sync_file comes from sw_sync (a timeline only the test advances), the
//! producer writes the frame and only then signals, and the wgpu pass that waited for it
//! reads the new frame. The same pass without the wait reads the old one: the test sees a
//! skipped wait. The release exports a sync_file that signals once wgpu's work is done.
//!
//! Runs in the kernel lab (sw_sync, sync_file, a dma-heap, lavapipe with SYNC_FD);
//! elsewhere it asserts that the device has no sync_file and stops.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../interop/tests/support_swsync/mod.rs"]
mod support_swsync;
mod support;

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use dmabridge::interop::dmabuf::{write_all_at, DmaBuf, PlaneDesc};
use dmabridge::interop::sync::{FenceStatus, SyncFile};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{Capability, SubmitOptions};
use dmabridge_wgpu::{wgpu, FrameSubmission, ImportedTexture, SharedDevice};
use support::{assert_clean, read_ar24_with, shared, TIMEOUT};
use support_swsync::Timeline;

/// How long the producer takes to write the frame after the consumer's pass is submitted:
/// long enough that a pass that does not wait has run by then (a 32x16 compute
/// pass on lavapipe, under the lab's TCG too).
const PRODUCER_DELAY: Duration = Duration::from_millis(1000);
const SIZE: (u32, u32) = (32, 16);

/// The shared device, and sw_sync's timeline; `None` (after asserting what the device
/// reports) where there is no sync_file.
fn setup() -> Option<(SharedDevice, Timeline)> {
    let shared = shared(wgpu::Features::empty());
    if !shared.engine().has_capability(Capability::SyncFile) {
        assert!(!common::in_kernel_lab(), "lavapipe has SYNC_FD semaphores on a real kernel");
        eprintln!("skipped: the device has no sync_file here ({:?}): the kernel lab runs this", shared.engine().capabilities());
        assert_clean(Some(&shared));
        return None;
    }
    Some((shared, Timeline::for_test()?))
}

/// An AR24 frame holding `old`, imported; and a dup of its fd for the producer's writes.
fn frame(shared: &SharedDevice, old: &[u8]) -> (ImportedTexture, OwnedFd) {
    let (w, h) = SIZE;
    let fd = common::dmabuf_with(old);
    let writer = fd.try_clone().expect("dup the fd");
    let buf = DmaBuf::new(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), w, h, vec![PlaneDesc { fd, offset: 0, stride: u64::from(w) * 4 }]).expect("descriptor");
    (shared.import(&buf).expect("import as a wgpu texture"), writer)
}

/// Runs the AR24 pass over `frame` with `options`, while the producer, [`PRODUCER_DELAY`]
/// after the pass is recorded and being submitted, writes `new` into the frame and then
/// advances `timeline` to 1: a pass that waits for the fence reads `new`; one that does not
/// has long run. (Not after `submit_frame` returns: with a release sync_file, lavapipe's
/// export returns only once the batch is done, which waits for this producer.)
fn read_while_producing(shared: &SharedDevice, frame: &ImportedTexture, (writer, new): (&OwnedFd, &[u8]), timeline: &Timeline, options: SubmitOptions) -> (Vec<u8>, FrameSubmission) {
    let (submitting, queued) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(move || {
            queued.recv().expect("the pass is being submitted");
            std::thread::sleep(PRODUCER_DELAY);
            write_all_at(writer.as_fd(), 0, new).expect("the producer writes the frame");
            timeline.advance(1).expect("the producer signals");
        });
        read_ar24_with(shared, frame, options, move || submitting.send(()).expect("the producer waits"))
    })
}

#[test]
fn a_pending_producer_fence_holds_the_wgpu_pass_and_the_release_fence_follows_it() {
    let Some((shared, timeline)) = setup() else { return };
    let (w, h) = SIZE;
    let old = common::pattern((w * h * 4) as usize, 1);
    let new = common::pattern((w * h * 4) as usize, 2);
    let (frame, writer) = frame(&shared, &old);
    let fence = timeline.fence(1).expect("a sw_sync fence");
    let options = SubmitOptions { wait_sync_files: vec![fence], export_sync_file: true, ..SubmitOptions::default() };
    let (read, mut submitted) = read_while_producing(&shared, &frame, (&writer, &new), &timeline, options);
    assert!(read == new, "the wgpu pass read {} bytes of the old frame: it did not wait for the producer's fence", read.iter().zip(&old).filter(|(a, b)| a == b).count());
    let release: SyncFile = submitted.take_sync_file().expect("the release's sync_file, on a device with SYNC_FD");
    release.wait(TIMEOUT).expect("the release fence signals");
    assert_eq!(release.status().expect("the release fence's status"), FenceStatus::Signalled);
    drop(frame);
    assert_clean(Some(&shared));
}

#[test]
fn the_same_pass_without_the_wait_reads_the_old_frame() {
    let Some((shared, timeline)) = setup() else { return };
    let (w, h) = SIZE;
    let old = common::pattern((w * h * 4) as usize, 1);
    let new = common::pattern((w * h * 4) as usize, 2);
    let (frame, writer) = frame(&shared, &old);
    // The mutation the other test must catch: the producer's fence left out.
    let (read, _) = read_while_producing(&shared, &frame, (&writer, &new), &timeline, SubmitOptions::default());
    assert!(read == old, "without the wait, the pass ran before the producer wrote: it must read the old frame");
    drop(frame);
    assert_clean(Some(&shared));
}
