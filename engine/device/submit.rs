//! Submissions without waiting: a timeline semaphore, pooled command buffers, and
//! destruction deferred until the GPU is done.
//!
//! Every submission dmabridge makes signals the engine's timeline semaphore with the next
//! value; a [`Submission`] is that value. The caller waits on it (with a timeout) when it
//! needs the result on the CPU, or passes its [`Completion`] as a wait to the next
//! operation, or to its own `vkQueueSubmit` through [`Completion::semaphore`] and
//! [`Completion::value`]. Nothing here blocks the CPU on the way in: command buffers come
//! from a pool and are reused once their value has been reached, and objects a handle
//! drops while the GPU still uses them are kept until it no longer does.
//!
//! Work a host records into its own command buffers (the `record_*` functions) is tracked
//! the same way, on a [`HostTimeline`]: the host takes the next point with
//! [`HostTimeline::next`], passes it to every `record_*` call for that command buffer,
//! and signals it in its own submit.
//!
//! # Locks
//! One mutex ([`Engine::lock_queue`]) guards the queue, the command pool and the timeline
//! counter, as `vkQueueSubmit` and command-pool use require (VUID-vkQueueSubmit-queue-parameter,
//! VUID-vkBeginCommandBuffer-commandBuffer-00049's pool rule). It is held while dmabridge
//! records and submits one operation, never while waiting for the GPU. A host that submits
//! to the same queue takes the same lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ash::vk;
use dmabridge_interop::dmabuf::take_returned_fd;
use dmabridge_interop::sync::{FenceStatus, SyncFile, SyncFileError, WaitError};

use super::fence_gate::{FenceGates, Gate, Verdict};
use crate::error::{VkError, VkResultExt};
use crate::device::requirements::Capability;
use crate::Engine;

/// How long a fence from outside may hold a submission back by default
/// ([`SubmitOptions::fence_limit`]).
pub const FENCE_LIMIT: Duration = Duration::from_secs(5);

/// A point on one of the engine's timelines: the GPU work recorded against it is complete
/// once the timeline's semaphore reaches `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Completion {
    semaphore: vk::Semaphore,
    value: u64,
}

impl Completion {
    /// The timeline semaphore (owned by the engine; valid while any clone of it lives).
    pub fn semaphore(&self) -> vk::Semaphore {
        self.semaphore
    }

    /// The value it reaches when the work is done.
    pub fn value(&self) -> u64 {
        self.value
    }

}

/// Why a submission or a wait failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// The wait ran out of time; the work may still complete later.
    #[error("the GPU work did not complete within {0:?}")]
    Timeout(Duration),
    /// A sync_file was asked for, but the device lacks the capability.
    #[error("sync_file fences need the {0} capability, which this device lacks")]
    NoSyncFile(Capability),
    /// The `index`th fence of [`SubmitOptions::wait_sync_files`] did not signal within
    /// `limit` ([`SubmitOptions::fence_limit`]): the work ran without it, so what it read may
    /// not have been written yet. Whoever made that fence (the peer that sent it) did not
    /// keep its promise; this engine's queue went on.
    #[error("sync_file fence {index} of the submission's waits did not signal within {limit:?}: the work ran without it (whoever sent that fence did not keep its promise)")]
    FenceExpired { index: usize, limit: Duration },
    /// The `index`th fence of [`SubmitOptions::wait_sync_files`] signalled with an error
    /// (`errno`, positive): the work that made it failed or was abandoned, so what it guards
    /// was never finished. At submit time the work is refused (nothing is submitted, the
    /// fences are closed); a fence that fails later, while it holds the work back, lets the
    /// work run (a submitted batch cannot be taken back) and [`Submission::wait`] reports
    /// this. Either way the frame is lost; this engine's queue goes on.
    #[error("sync_file fence {index} of the submission's waits signalled with an error ({}): whoever sent it failed to finish the work it guards, so that frame is lost", std::io::Error::from_raw_os_error(*errno))]
    FenceFailed { index: usize, errno: i32 },
    /// The `index`th fence of [`SubmitOptions::wait_sync_files`] could not be polled.
    #[error("sync_file fence {index} of the submission's waits cannot be polled: {source}")]
    FencePoll { index: usize, source: WaitError },
    /// The driver's `SYNC_FD` export is not a sync_file ([`SyncFile::new`] refused it).
    #[error("the driver's exported fence is not a sync_file: {0}")]
    ExportedNotASyncFile(SyncFileError),
    /// `vkGetSemaphoreFdKHR` succeeded with an fd number that is not open in this process:
    /// nothing is owned.
    #[error("the driver's exported fence is fd {0}, which is not open")]
    ExportedFenceNotOpen(i32),
    /// A completion from a different engine was passed as a wait.
    #[error("a wait names a timeline of another engine")]
    ForeignCompletion,
    /// A sync_file was asked of a submission that waits for a host timeline point the host
    /// has neither signalled nor submitted a signal of ([`HostTimeline::submitted`]). Exporting a SYNC_FD payload waits until the batch has really
    /// been submitted (Mesa's lavapipe blocks in `vkGetSemaphoreFdKHR`, found in the kernel
    /// lab), which a wait-before-signal delays until the host signals: the caller would
    /// block itself. Signal the point first (or say that its signal is submitted), or
    /// export from a later submission.
    #[error("a sync_file cannot be exported from a submission that waits for host timeline point {value}, not yet signalled or submitted: the export would block until the host signals it")]
    ExportBehindHostWait { value: u64 },
}

/// Objects whose destruction waits for the GPU.
pub(crate) enum Garbage {
    Image(vk::Image),
    ImageView(vk::ImageView),
    Buffer(vk::Buffer),
    /// Memory from `vkAllocateMemory` (dedicated dma-buf imports and exports).
    Memory(vk::DeviceMemory),
    /// Memory from the engine's allocator.
    Allocation(gpu_allocator::vulkan::Allocation),
    /// An exportable binary semaphore of a submission's sync_file, back to its pool once
    /// the submission is done (its payload is unsignalled again then).
    ExportSemaphore(vk::Semaphore),
    /// A fence gate's timeline semaphore (`fence_gate`).
    Semaphore(vk::Semaphore),
    DescriptorPool(vk::DescriptorPool),
    Sampler(vk::Sampler),
    YcbcrConversion(vk::SamplerYcbcrConversion),
    Pipeline(vk::Pipeline),
    PipelineLayout(vk::PipelineLayout),
    DescriptorSetLayout(vk::DescriptorSetLayout),
}

/// The points a resource was last used at, one per timeline.
#[derive(Debug, Default)]
pub(crate) struct Uses(Mutex<Vec<Completion>>);

impl Uses {
    /// Records a use that completes at `c` (keeping the later point per timeline).
    pub(crate) fn add(&self, c: Completion) {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match v.iter_mut().find(|x| x.semaphore == c.semaphore) {
            Some(x) => x.value = x.value.max(c.value),
            None => v.push(c),
        }
    }

    pub(crate) fn snapshot(&self) -> Vec<Completion> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// What the queue lock guards.
pub(crate) struct QueueState {
    queue: vk::Queue,
    pool: vk::CommandPool,
    /// Command buffers ready to record.
    idle: Vec<vk::CommandBuffer>,
    /// Command buffers submitted, with the value that frees them, oldest first.
    busy: VecDeque<(u64, vk::CommandBuffer)>,
    /// The last value a submission was asked to signal.
    last_value: u64,
}

/// The engine's submission machinery.
pub(crate) struct Submitter {
    state: Mutex<QueueState>,
    timeline: vk::Semaphore,
    /// The highest value known to be reached (a cache of `vkGetSemaphoreCounterValue`).
    reached: AtomicU64,
    graveyard: Mutex<Vec<(Vec<Completion>, Vec<Garbage>)>>,
    /// Timelines handed to hosts ([`HostTimeline`]), destroyed with the engine, each with
    /// the highest point whose signal the host says it has submitted.
    host_timelines: Mutex<Vec<(vk::Semaphore, Arc<AtomicU64>)>>,
    /// Exportable binary semaphores no submission uses, for the next sync_file export.
    free_exports: Mutex<Vec<vk::Semaphore>>,
    /// The fence thread that opens the gates of fences from outside.
    gates: FenceGates,
}

fn timeline_semaphore(device: &ash::Device) -> Result<vk::Semaphore, VkError> {
    let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
    // SAFETY: the timelineSemaphore feature is enabled (checked before the engine is built;
    // VUID-VkSemaphoreTypeCreateInfo-timelineSemaphore-03252).
    unsafe { device.create_semaphore(&info, None) }.vk("vkCreateSemaphore")
}

impl Submitter {
    pub(crate) fn new(device: &ash::Device, queue: vk::Queue, family: u32) -> Result<Submitter, VkError> {
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: the family exists on this device (checked by the caller).
        let pool = unsafe { device.create_command_pool(&info, None) }.vk("vkCreateCommandPool")?;
        let timeline = match timeline_semaphore(device) {
            Ok(t) => t,
            Err(e) => {
                // SAFETY: the pool has no command buffers yet.
                unsafe { device.destroy_command_pool(pool, None) };
                return Err(e);
            }
        };
        Ok(Submitter {
            state: Mutex::new(QueueState { queue, pool, idle: Vec::new(), busy: VecDeque::new(), last_value: 0 }),
            timeline,
            reached: AtomicU64::new(0),
            graveyard: Mutex::new(Vec::new()),
            host_timelines: Mutex::new(Vec::new()),
            free_exports: Mutex::new(Vec::new()),
            gates: FenceGates::default(),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value the engine timeline has reached, asking the driver.
    fn refresh(&self, device: &ash::Device) -> u64 {
        // SAFETY: the timeline semaphore belongs to this device.
        let now = unsafe { device.get_semaphore_counter_value(self.timeline) }.unwrap_or(0);
        self.reached.fetch_max(now, Ordering::AcqRel).max(now)
    }

    /// Whether `c` has been reached, without blocking.
    fn is_reached(&self, device: &ash::Device, c: &Completion) -> bool {
        if c.semaphore == self.timeline {
            c.value <= self.reached.load(Ordering::Acquire) || c.value <= self.refresh(device)
        } else {
            // SAFETY: a host timeline this engine created and still owns.
            unsafe { device.get_semaphore_counter_value(c.semaphore) }.is_ok_and(|v| v >= c.value)
        }
    }

    /// Destroys what `uses` no longer needs now, or later once it is no longer in use.
    pub(crate) fn retire(&self, device: &ash::Device, allocator: &crate::device::memory::Memory, uses: Vec<Completion>, garbage: Vec<Garbage>) {
        if uses.iter().all(|c| self.is_reached(device, c)) {
            self.destroy(device, allocator, garbage);
        } else {
            self.graveyard.lock().unwrap_or_else(PoisonError::into_inner).push((uses, garbage));
        }
    }

    /// Destroys every retired object whose uses are complete. Never blocks on the GPU.
    pub(crate) fn collect(&self, device: &ash::Device, allocator: &crate::device::memory::Memory) {
        let ready: Vec<Vec<Garbage>> = {
            let mut yard = self.graveyard.lock().unwrap_or_else(PoisonError::into_inner);
            if yard.is_empty() {
                return;
            }
            let mut ready = Vec::new();
            let mut i = 0;
            while i < yard.len() {
                if yard[i].0.iter().all(|c| self.is_reached(device, c)) {
                    ready.push(yard.swap_remove(i).1);
                } else {
                    i += 1;
                }
            }
            ready
        };
        for g in ready {
            self.destroy(device, allocator, g);
        }
    }

    pub(crate) fn pending_garbage(&self) -> usize {
        self.graveyard.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Teardown: waits (bounded) for every submission, then destroys what is left. Objects
    /// still used by a host timeline that was never signalled are leaked, with a warning,
    /// rather than freed early.
    pub(crate) fn shutdown(&self, device: &ash::Device, allocator: &crate::device::memory::Memory) {
        // Gates still closed would hold the last submissions back for their whole limit.
        self.gates.shutdown();
        let last = self.lock().last_value;
        let semaphores = [self.timeline];
        let values = [last];
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        // SAFETY: a timeline semaphore of this device, a value that was submitted.
        let waited = unsafe { device.wait_semaphores(&info, 10_000_000_000) };
        if let Err(result) = waited {
            tracing::error!(%result, "the engine's last submissions did not complete; leaking their objects");
            return;
        }
        self.refresh(device);
        self.collect(device, allocator);
        let left = std::mem::take(&mut *self.graveyard.lock().unwrap_or_else(PoisonError::into_inner));
        if !left.is_empty() {
            tracing::warn!(
                count = left.len(),
                "objects still used by host command buffers whose timeline points were never signalled are leaked"
            );
            std::mem::forget(left);
        }
        let state = self.lock();
        // SAFETY: every submission completed (waited above), so no command buffer of the
        // pool is pending (VUID-vkDestroyCommandPool-commandPool-00041) and no queue
        // operation refers to the semaphores (VUID-vkDestroySemaphore-semaphore-05149).
        unsafe {
            device.destroy_command_pool(state.pool, None);
            device.destroy_semaphore(self.timeline, None);
            for (s, _) in self.host_timelines.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                device.destroy_semaphore(s, None);
            }
            for s in self.free_exports.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                device.destroy_semaphore(s, None);
            }
        }
    }
}

impl Submitter {
    /// An exportable binary semaphore from the pool, or a new one.
    fn export_semaphore(&self, device: &ash::Device) -> Result<vk::Semaphore, VkError> {
        if let Some(s) = self.free_exports.lock().unwrap_or_else(PoisonError::into_inner).pop() {
            return Ok(s);
        }
        let mut export = vk::ExportSemaphoreCreateInfo::default().handle_types(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut export);
        // SAFETY: the device reports SYNC_FD semaphores exportable (the SyncFile capability,
        // checked by the caller; VUID-VkExportSemaphoreCreateInfo-handleTypes-01124).
        unsafe { device.create_semaphore(&info, None) }.vk("vkCreateSemaphore")
    }

    /// Destroys `garbage`, whose GPU work is complete (export semaphores go back to the pool).
    fn destroy(&self, device: &ash::Device, allocator: &crate::device::memory::Memory, garbage: Vec<Garbage>) {
        let mut rest = Vec::with_capacity(garbage.len());
        for g in garbage {
            match g {
                Garbage::ExportSemaphore(s) => self.free_exports.lock().unwrap_or_else(PoisonError::into_inner).push(s),
                other => rest.push(other),
            }
        }
        destroy(device, allocator, rest);
    }
}

fn destroy(device: &ash::Device, allocator: &crate::device::memory::Memory, garbage: Vec<Garbage>) {
    for g in garbage {
        // SAFETY: every object was created from this device, by dmabridge, and the GPU no
        // longer uses it: each of its uses' timeline points has been reached
        // (VUID-vkDestroyImage-image-01000, VUID-vkDestroyBuffer-buffer-00922,
        // VUID-vkFreeMemory-memory-00677 and the like for the other types).
        unsafe {
            match g {
                Garbage::Image(x) => device.destroy_image(x, None),
                Garbage::ImageView(x) => device.destroy_image_view(x, None),
                Garbage::Buffer(x) => device.destroy_buffer(x, None),
                Garbage::Memory(x) => device.free_memory(x, None),
                Garbage::Allocation(a) => allocator.free(a),
                Garbage::ExportSemaphore(x) | Garbage::Semaphore(x) => device.destroy_semaphore(x, None),
                Garbage::DescriptorPool(x) => device.destroy_descriptor_pool(x, None),
                Garbage::Sampler(x) => device.destroy_sampler(x, None),
                Garbage::YcbcrConversion(x) => device.destroy_sampler_ycbcr_conversion(x, None),
                Garbage::Pipeline(x) => device.destroy_pipeline(x, None),
                Garbage::PipelineLayout(x) => device.destroy_pipeline_layout(x, None),
                Garbage::DescriptorSetLayout(x) => device.destroy_descriptor_set_layout(x, None),
            }
        }
    }
}

/// GPU work the engine submitted. Dropping it does not wait or cancel anything.
#[derive(Debug)]
pub struct Submission {
    engine: Engine,
    completion: Completion,
    sync_file: Option<SyncFile>,
    /// What became of the fences it waited for that were pending when it was submitted.
    gates: Vec<Arc<Verdict>>,
}

impl Submission {
    /// The timeline point this work signals: a wait for the next operation, or for the
    /// host's own `vkQueueSubmit`.
    pub fn completion(&self) -> Completion {
        self.completion
    }

    /// Whether the work is done, without blocking.
    pub fn is_done(&self) -> bool {
        self.engine.is_reached(&self.completion)
    }

    /// Blocks the calling thread until the work is done or `timeout` passes; then
    /// [`Submission::check_fences`].
    pub fn wait(&self, timeout: Duration) -> Result<(), SubmitError> {
        self.engine.wait(&[self.completion], timeout)?;
        self.check_fences()
    }

    /// [`SubmitError::FenceExpired`] once a fence of [`SubmitOptions::wait_sync_files`] has
    /// expired (the work runs, or ran, without it), [`SubmitError::FenceFailed`] once one
    /// has signalled with an error (the work ran on what its sender never finished); `Ok`
    /// while they are pending or signalled. Does not block.
    pub fn check_fences(&self) -> Result<(), SubmitError> {
        for v in &self.gates {
            if v.expired() {
                return Err(SubmitError::FenceExpired { index: v.index, limit: v.limit });
            }
            if let Some(errno) = v.failed() {
                return Err(SubmitError::FenceFailed { index: v.index, errno });
            }
        }
        Ok(())
    }

    /// The sync_file fence that signals when the work is done, when one was asked for
    /// ([`SubmitOptions::export_sync_file`]). Owned by the caller once taken.
    pub fn take_sync_file(&mut self) -> Option<SyncFile> {
        self.sync_file.take()
    }
}

/// What a submission waits for and signals besides its timeline point.
#[derive(Debug)]
pub struct SubmitOptions {
    /// Timeline points of this engine (its own submissions, or host timelines) to wait for.
    pub waits: Vec<Completion>,
    /// sync_file fences (another process's or device's work) to wait for. Ownership passes
    /// to the engine. The queue never waits for them itself: a fence still pending at submit
    /// time holds the work back for at most [`SubmitOptions::fence_limit`] (the module
    /// `device::fence_gate` says how and why). A fence that has already signalled with an
    /// error is refused ([`SubmitError::FenceFailed`]): nothing is submitted.
    pub wait_sync_files: Vec<SyncFile>,
    /// How long a fence of `wait_sync_files` may hold this work back. Past it, the fence has
    /// *expired*: the work runs without it and [`Submission::wait`] reports
    /// [`SubmitError::FenceExpired`]. [`FENCE_LIMIT`] by default.
    pub fence_limit: Duration,
    /// Also signal a sync_file fence ([`Submission::take_sync_file`]) for another process
    /// or device.
    ///
    /// Some drivers (lavapipe among them) return from the export only once the batch is
    /// done, so the fence is already signalled and the submit call takes as long as the
    /// work: do not count on exporting to overlap CPU and GPU work.
    pub export_sync_file: bool,
}

impl Default for SubmitOptions {
    fn default() -> Self {
        SubmitOptions { waits: Vec::new(), wait_sync_files: Vec::new(), fence_limit: FENCE_LIMIT, export_sync_file: false }
    }
}

/// Binary semaphores of the presenter's swapchain (not part of the public options: raw
/// handles whose validity dmabridge itself guarantees).
#[derive(Debug, Default)]
pub(crate) struct BinarySemaphores {
    /// To wait for, at these stages (the swapchain's acquire).
    pub waits: Vec<(vk::Semaphore, vk::PipelineStageFlags)>,
    /// To signal (render-finished).
    pub signals: Vec<vk::Semaphore>,
}

impl SubmitOptions {
    pub fn after(waits: &[Completion]) -> Self {
        SubmitOptions { waits: waits.to_vec(), ..SubmitOptions::default() }
    }
}

/// A timeline semaphore that the host signals in its own submissions, so that dmabridge
/// knows when the commands it recorded into the host's command buffers are done.
#[derive(Debug)]
pub struct HostTimeline {
    semaphore: vk::Semaphore,
    next: AtomicU64,
    /// The highest point whose signal operation the host has submitted (shared with the
    /// engine's submitter, which reads it before exporting a sync_file).
    submitted: Arc<AtomicU64>,
}

impl HostTimeline {
    /// The next point: pass it to each `record_*` call for one command buffer, and signal
    /// `(point.semaphore(), point.value())` when submitting that command buffer. Points must
    /// be signalled in the order they were taken.
    pub fn next(&self) -> Completion {
        Completion { semaphore: self.semaphore, value: self.next.fetch_add(1, Ordering::AcqRel) + 1 }
    }

    pub fn semaphore(&self) -> vk::Semaphore {
        self.semaphore
    }

    /// Tells dmabridge that the host's submission signalling `point` (and so every earlier
    /// point) has been submitted: its `vkQueueSubmit` has returned. A submission that waits
    /// for such a point may export a sync_file ([`SubmitOptions::export_sync_file`]); the
    /// export waits for the batch to be submitted, which it then already is, not for the
    /// host (VUID-VkSemaphoreGetFdInfoKHR-handleType-03254 asks that every signal the
    /// exported one depends on has been submitted). Saying so before the submission
    /// returned is the host's bug: the export may then block until it does.
    pub fn submitted(&self, point: Completion) {
        if point.semaphore == self.semaphore {
            self.submitted.fetch_max(point.value, Ordering::AcqRel);
        }
    }
}

impl Engine {
    /// Records with `record` into a pooled command buffer, submits it on the engine's queue
    /// after `options`' waits, and returns at once with the [`Submission`].
    ///
    /// `record` gets the command buffer (recording) and the point the submission will
    /// signal. dmabridge's `record_*` functions take that point and track their resources
    /// with it; whatever else `record` records must be tracked too (`track(until)` on the
    /// buffers, images and pipelines it uses), so that they are not destroyed before the GPU
    /// is done. `record` runs under the queue lock: it must not submit or wait itself.
    /// When it fails, nothing is submitted.
    pub fn submit<R, E: From<SubmitError>>(
        &self,
        options: SubmitOptions,
        record: impl FnOnce(vk::CommandBuffer, Completion) -> Result<R, E>,
    ) -> Result<(R, Submission), E> {
        self.submit_with_binaries(options, BinarySemaphores::default(), record)
    }

    /// [`Engine::submit`], also waiting for and signalling binary semaphores.
    pub(crate) fn submit_with_binaries<R, E: From<SubmitError>>(
        &self,
        options: SubmitOptions,
        binary: BinarySemaphores,
        record: impl FnOnce(vk::CommandBuffer, Completion) -> Result<R, E>,
    ) -> Result<(R, Submission), E> {
        let shared = self.shared();
        let device = shared.device();
        let submitter = &shared.submitter;
        if options.waits.iter().any(|c| !self.owns_timeline(c.semaphore)) {
            return Err(SubmitError::ForeignCompletion.into());
        }
        if options.export_sync_file && shared.sync_file_fn().is_none() {
            return Err(SubmitError::NoSyncFile(Capability::SyncFile).into());
        }
        if options.export_sync_file {
            let host = submitter.host_timelines.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let behind = |c: &&Completion| {
                host.iter().any(|(s, submitted)| *s == c.semaphore && submitted.load(Ordering::Acquire) < c.value) && !self.is_reached(c)
            };
            if let Some(c) = options.waits.iter().find(behind) {
                return Err(SubmitError::ExportBehindHostWait { value: c.value }.into());
            }
        }
        let gates = self.gates(options.wait_sync_files, options.fence_limit)?;
        let mut state = submitter.lock();
        let reached = submitter.refresh(device);
        while state.busy.front().is_some_and(|(v, _)| *v <= reached) {
            if let Some((_, cmd)) = state.busy.pop_front() {
                state.idle.push(cmd);
            }
        }
        // Fails before anything is submitted: the gates' semaphores go with the error.
        let unsubmitted = |state: MutexGuard<'_, QueueState>, gates: Vec<Gate>, e: E| {
            drop(state);
            self.destroy_gates(gates);
            Err(e)
        };
        let cmd = match state.idle.pop() {
            Some(cmd) => cmd,
            None => {
                let alloc = vk::CommandBufferAllocateInfo::default()
                    .command_pool(state.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: the pool belongs to this device and is guarded by the lock held here.
                match unsafe { device.allocate_command_buffers(&alloc) }.vk("vkAllocateCommandBuffers") {
                    Ok(cmds) => cmds[0],
                    Err(e) => return unsubmitted(state, gates, SubmitError::from(e).into()),
                }
            }
        };
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer is not pending (idle, or busy with a reached value), its
        // pool allows resetting single buffers, and the pool is guarded by the lock
        // (VUID-vkBeginCommandBuffer-commandBuffer-00049, -00050).
        let begun = unsafe { device.begin_command_buffer(cmd, &begin) }.vk("vkBeginCommandBuffer");
        if let Err(e) = begun {
            state.idle.push(cmd);
            return unsubmitted(state, gates, SubmitError::from(e).into());
        }
        let value = state.last_value + 1;
        let completion = Completion { semaphore: submitter.timeline, value };
        let recorded = record(cmd, completion);
        // SAFETY: recording state (VUID-vkEndCommandBuffer-commandBuffer-00059).
        let ended = unsafe { device.end_command_buffer(cmd) }.vk("vkEndCommandBuffer");
        let output = match (recorded, ended) {
            (Ok(r), Ok(())) => r,
            (Err(e), _) => {
                state.idle.push(cmd);
                return unsubmitted(state, gates, e);
            }
            (Ok(_), Err(e)) => {
                state.idle.push(cmd);
                return unsubmitted(state, gates, SubmitError::from(e).into());
            }
        };
        let export = match options.export_sync_file.then(|| submitter.export_semaphore(device)).transpose() {
            Ok(s) => s,
            Err(e) => {
                state.idle.push(cmd);
                return unsubmitted(state, gates, SubmitError::from(e).into());
            }
        };
        if let Err(e) = self.queue_submit(&state, cmd, (completion, &options.waits), &gates, export, binary) {
            // The command buffer never became pending, nor did the semaphores.
            state.idle.push(cmd);
            if let Some(s) = export {
                submitter.free_exports.lock().unwrap_or_else(PoisonError::into_inner).push(s);
            }
            return unsubmitted(state, gates, e.into());
        }
        state.last_value = value;
        state.busy.push_back((value, cmd));
        let verdicts: Vec<Arc<Verdict>> = gates.iter().map(Gate::verdict).collect();
        let mut garbage: Vec<Garbage> = gates.iter().map(|g| Garbage::Semaphore(g.semaphore())).collect();
        // The gates open from the fence thread, before the export below: lavapipe's export
        // returns only once the batch has run, which needs them open.
        submitter.gates.watch(device, gates);
        // Exported at once, under the queue lock, before anything asks the driver whether
        // the batch is done: the validation layer takes the export of a batch it has already
        // seen complete for no unsignal, and reports the semaphore's next signal (found in
        // the kernel lab). On lavapipe, whose export waits for the batch, the lock is held
        // that long: at most the fence limit, where a gate is pending.
        let exported = export.map(|semaphore| {
            let fence = self.export_sync_file(semaphore);
            // A semaphore whose payload was not taken by a successful export stays signalled
            // once the batch has run: destroyed then, never reused.
            garbage.push(if fence.is_ok() { Garbage::ExportSemaphore(semaphore) } else { Garbage::Semaphore(semaphore) });
            fence
        });
        drop(state);
        if !garbage.is_empty() {
            shared.retire(vec![completion], garbage);
        }
        submitter.collect(device, &shared.memory);
        let sync_file = exported.transpose()?.flatten();
        Ok((output, Submission { engine: self.clone(), completion, sync_file, gates: verdicts }))
    }

    /// Gates for the fences of `fences` still pending (those signalled already need none),
    /// each opening at the latest `limit` from now. A fence that signalled with an error is
    /// [`SubmitError::FenceFailed`]: the work would read what its sender never finished.
    fn gates(&self, fences: Vec<SyncFile>, limit: Duration) -> Result<Vec<Gate>, SubmitError> {
        let mut gates = Vec::new();
        for (index, fence) in fences.into_iter().enumerate() {
            let pending = match fence.status() {
                Ok(FenceStatus::Pending) => true,
                Ok(FenceStatus::Signalled) => false,
                Ok(FenceStatus::Failed { errno }) => {
                    self.destroy_gates(gates);
                    tracing::warn!(fence = index, errno, "a sync_file fence signalled with an error: the work that waited for it is refused");
                    return Err(SubmitError::FenceFailed { index, errno });
                }
                Err(source) => {
                    self.destroy_gates(gates);
                    return Err(SubmitError::FencePoll { index, source });
                }
            };
            if pending {
                match timeline_semaphore(self.shared().device()) {
                    Ok(s) => gates.push(Gate::new(fence, s, index, limit)),
                    Err(e) => {
                        self.destroy_gates(gates);
                        return Err(e.into());
                    }
                }
            }
        }
        Ok(gates)
    }

    /// Destroys the semaphores of gates no submitted batch waits for.
    fn destroy_gates(&self, gates: Vec<Gate>) {
        for g in gates {
            // SAFETY: a semaphore of this device that no submitted batch refers to
            // (VUID-vkDestroySemaphore-semaphore-05149).
            unsafe { self.shared().device().destroy_semaphore(g.semaphore(), None) };
        }
    }

    /// `vkQueueSubmit` of `cmd` signalling `completion` (and `export`, when given), after the
    /// options' timeline waits, the gates' semaphores and the binary semaphores.
    fn queue_submit(
        &self,
        state: &QueueState,
        cmd: vk::CommandBuffer,
        (completion, waits): (Completion, &[Completion]),
        gates: &[Gate],
        export: Option<vk::Semaphore>,
        binary: BinarySemaphores,
    ) -> Result<(), SubmitError> {
        let device = self.shared().device();
        let all = vk::PipelineStageFlags::ALL_COMMANDS;
        // (semaphore, value, stage): timeline points, the gates' value 1, binary semaphores
        // (whose value is ignored).
        let timeline = waits.iter().map(|c| (c.semaphore, c.value, all));
        let gated = gates.iter().map(|g| (g.semaphore(), 1, all));
        let binaries = binary.waits.iter().map(|&(s, stage)| (s, 0, stage));
        let mut wait_semaphores: Vec<vk::Semaphore> = Vec::new();
        let mut wait_values: Vec<u64> = Vec::new();
        let mut stages: Vec<vk::PipelineStageFlags> = Vec::new();
        for (semaphore, value, stage) in timeline.chain(gated).chain(binaries) {
            wait_semaphores.push(semaphore);
            wait_values.push(value);
            stages.push(stage);
        }
        let mut signal_semaphores = vec![completion.semaphore];
        let mut signal_values = vec![completion.value];
        for semaphore in binary.signals.iter().copied().chain(export) {
            signal_semaphores.push(semaphore);
            // Ignored for binary semaphores.
            signal_values.push(0);
        }
        let mut timeline_info =
            vk::TimelineSemaphoreSubmitInfo::default().wait_semaphore_values(&wait_values).signal_semaphore_values(&signal_values);
        let cmds = [cmd];
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&wait_semaphores)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signal_semaphores)
            .push_next(&mut timeline_info);
        // SAFETY: the queue is guarded by the lock the caller holds
        // (VUID-vkQueueSubmit-queue-parameter); the command buffer is executable; the signal
        // value is greater than every value signalled or pending on the timeline, since values
        // are handed out under the same lock (VUID-VkSubmitInfo-pSignalSemaphores-03242); wait
        // values name points of the engine's own timelines (checked by the caller) or value 1
        // of a gate, which the fence thread signals.
        unsafe { device.queue_submit(state.queue, &[submit], vk::Fence::null()) }.vk("vkQueueSubmit")?;
        Ok(())
    }

    /// The sync_file of `semaphore`, an export semaphore a submitted batch signals; `None`
    /// when the driver says it has already signalled.
    fn export_sync_file(&self, semaphore: vk::Semaphore) -> Result<Option<SyncFile>, SubmitError> {
        let Some(fd_fn) = self.shared().sync_file_fn() else {
            return Err(SubmitError::NoSyncFile(Capability::SyncFile));
        };
        let info = vk::SemaphoreGetFdInfoKHR::default().semaphore(semaphore).handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        // SAFETY: the semaphore was created exportable as SYNC_FD and a signal operation on
        // it has been submitted (VUID-VkSemaphoreGetFdInfoKHR-handleType-03254).
        let raw = unsafe { fd_fn.get_semaphore_fd(&info) }.vk("vkGetSemaphoreFdKHR")?;
        if raw < 0 {
            return Ok(None);
        }
        // SAFETY: vkGetSemaphoreFdKHR returns a new fd the caller owns; it is taken only
        // once confirmed open (a driver may report success with a number that is not).
        let fd = unsafe { take_returned_fd(raw) }.map_err(|_| SubmitError::ExportedFenceNotOpen(raw))?;
        SyncFile::new(fd).map(Some).map_err(SubmitError::ExportedNotASyncFile)
    }

    /// Whether `semaphore` is one of this engine's timelines.
    fn owns_timeline(&self, semaphore: vk::Semaphore) -> bool {
        let s = &self.shared().submitter;
        semaphore == s.timeline || s.host_timelines.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|(h, _)| *h == semaphore)
    }

    /// Whether `c` has been reached, without blocking.
    pub fn is_reached(&self, c: &Completion) -> bool {
        let shared = self.shared();
        shared.submitter.is_reached(shared.device(), c)
    }

    /// Blocks until every point in `points` is reached, or `timeout` passes. For the
    /// caller's own synchronisation with the CPU; dmabridge never calls it on a frame path.
    pub fn wait(&self, points: &[Completion], timeout: Duration) -> Result<(), SubmitError> {
        if points.is_empty() {
            return Ok(());
        }
        if points.iter().any(|c| !self.owns_timeline(c.semaphore)) {
            return Err(SubmitError::ForeignCompletion);
        }
        let semaphores: Vec<vk::Semaphore> = points.iter().map(|c| c.semaphore).collect();
        let values: Vec<u64> = points.iter().map(|c| c.value).collect();
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let shared = self.shared();
        // SAFETY: timeline semaphores of this device (checked above).
        match unsafe { shared.device().wait_semaphores(&info, nanos) } {
            Ok(()) => {
                shared.submitter.collect(shared.device(), &shared.memory);
                Ok(())
            }
            Err(vk::Result::TIMEOUT) => Err(SubmitError::Timeout(timeout)),
            Err(result) => Err(VkError { call: "vkWaitSemaphores", result }.into()),
        }
    }

    /// A new timeline for work the host records with dmabridge's `record_*` functions and
    /// submits itself. It lives as long as the engine.
    pub fn host_timeline(&self) -> Result<HostTimeline, VkError> {
        let shared = self.shared();
        let semaphore = timeline_semaphore(shared.device())?;
        let submitted = Arc::new(AtomicU64::new(0));
        shared.submitter.host_timelines.lock().unwrap_or_else(PoisonError::into_inner).push((semaphore, submitted.clone()));
        Ok(HostTimeline { semaphore, next: AtomicU64::new(0), submitted })
    }

    /// The engine's queue, locked: a host that submits to it holds this guard for the
    /// call (the queue must be externally synchronised, VUID-vkQueueSubmit-queue-parameter).
    pub fn lock_queue(&self) -> QueueGuard<'_> {
        QueueGuard(self.shared().submitter.lock())
    }

    /// Destroys objects whose GPU work has completed (also done on every submission).
    pub fn collect_garbage(&self) {
        let shared = self.shared();
        shared.submitter.collect(shared.device(), &shared.memory);
    }

    /// How many dropped objects still wait for their GPU work (for tests and diagnostics).
    pub fn deferred_destructions(&self) -> usize {
        self.shared().submitter.pending_garbage()
    }
}

/// The engine's queue, held under its lock.
pub struct QueueGuard<'a>(MutexGuard<'a, QueueState>);

impl QueueGuard<'_> {
    pub fn queue(&self) -> vk::Queue {
        self.0.queue
    }
}
