//! One hand-over around wgpu's work on the shared queue: dmabridge acquires the frames,
//! wgpu's submission waits for that on the GPU and signals a point of its own, dmabridge
//! releases the frames after that point. Imports ([`SharedDevice::submit_frame`]) and
//! exports ([`SharedDevice::submit_render`]) differ only in what they acquire and release.

use dmabridge::ash::vk;
use dmabridge::interop::sync::SyncFile;
use dmabridge::{Completion, SubmitError, SubmitOptions, Submission};
use wgpu_hal::api::Vulkan;

use crate::device::SharedDevice;

/// One frame's three submissions on the shared queue: dmabridge's acquisition, wgpu's
/// work, dmabridge's release.
#[derive(Debug)]
pub struct FrameSubmission {
    /// dmabridge's acquisition (after the producer's fences).
    pub acquired: Submission,
    /// wgpu's work, which waited for `acquired`.
    pub wgpu: wgpu::SubmissionIndex,
    /// The point wgpu's work signals.
    pub wgpu_done: Completion,
    /// dmabridge's release, after wgpu's work: the frame is the other side's again once it
    /// completes (an imported frame's producer, an exported frame's consumer).
    pub released: Submission,
}

impl FrameSubmission {
    /// Blocks until the release is done (and so wgpu's work), or `timeout` passes.
    pub fn wait(&self, timeout: std::time::Duration) -> Result<(), SubmitError> {
        self.released.wait(timeout)?;
        self.acquired.check_fences()
    }

    /// The sync_file that signals once wgpu's work and the release are done, when
    /// [`SubmitOptions::export_sync_file`] asked for one: the other side's fence for its next
    /// use of the frame. Owned by the caller once taken.
    pub fn take_sync_file(&mut self) -> Option<SyncFile> {
        self.released.take_sync_file()
    }
}

/// Which of the three submissions of a hand-over around wgpu's work failed.
pub(crate) enum HandOverError<E> {
    /// dmabridge's submission before wgpu's: nothing was submitted.
    Acquire(E),
    /// dmabridge's submission after wgpu's: wgpu's work was submitted.
    Release(E),
}

impl SharedDevice {
    /// The three submissions of one hand-over around wgpu's work, on the shared queue:
    /// dmabridge's `acquire` (after `options`' waits), wgpu's `commands` (waiting for it at
    /// `wgpu_waits_at` and signalling a point of `self.timeline`), dmabridge's `release`
    /// (after that point; it exports the sync_file when `options` asks for one). wgpu-hal
    /// folds the wait and the signal into its next `vkQueueSubmit`, which the queue lock
    /// makes the one of `commands`.
    pub(crate) fn around_wgpu<I, E>(
        &self,
        options: SubmitOptions,
        wgpu_waits_at: vk::PipelineStageFlags,
        acquire: impl FnOnce(vk::CommandBuffer, Completion) -> Result<(), E>,
        commands: I,
        release: impl FnOnce(vk::CommandBuffer, Completion) -> Result<(), E>,
    ) -> Result<FrameSubmission, HandOverError<E>>
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
        E: From<SubmitError>,
    {
        // The sync_file, if asked for, is the release's: it signals once wgpu is done.
        let export_sync_file = options.export_sync_file;
        let before = SubmitOptions { export_sync_file: false, ..options };
        let (_, acquired) = self.engine.submit(before, acquire).map_err(HandOverError::Acquire)?;
        let acquired_at = acquired.completion();
        let wgpu_done = self.timeline.next();
        let wgpu = {
            let _queue = self.engine.lock_queue();
            {
                // SAFETY: the guard borrows the queue, which outlives it.
                let hal_queue = unsafe { self.queue.as_hal::<Vulkan>() };
                // SharedDevice is made from Vulkan devices only (open and from_wgpu check).
                if let Some(q) = hal_queue {
                    q.add_wait_semaphore(acquired_at.semaphore(), Some(acquired_at.value()), wgpu_waits_at);
                    q.add_signal_semaphore(wgpu_done.semaphore(), Some(wgpu_done.value()));
                }
            }
            let index = self.queue.submit(commands);
            // wgpu-core calls vkQueueSubmit inside `submit`, the signal folded in: the
            // release may export a sync_file behind it without blocking.
            self.timeline.submitted(wgpu_done);
            index
        };
        let after = SubmitOptions { waits: vec![wgpu_done], export_sync_file, ..SubmitOptions::default() };
        let (_, released) = self.engine.submit(after, release).map_err(HandOverError::Release)?;
        Ok(FrameSubmission { acquired, wgpu, wgpu_done, released })
    }
}
