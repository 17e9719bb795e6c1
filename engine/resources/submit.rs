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
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ash::vk;

use crate::error::{VkError, VkResultExt};
use crate::device::requirements::Capability;
use crate::Engine;

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
    /// A sync_file was asked for, or given, but the device lacks the capability.
    #[error("sync_file fences need the {0} capability, which this device lacks")]
    NoSyncFile(Capability),
    /// A completion from a different engine was passed as a wait.
    #[error("a wait names a timeline of another engine")]
    ForeignCompletion,
    /// A sync_file was asked of a submission that waits for a host timeline point the host
    /// has not signalled yet. Exporting a SYNC_FD payload waits until the batch has really
    /// been submitted (Mesa's lavapipe blocks in `vkGetSemaphoreFdKHR`, found in the kernel
    /// lab), which a wait-before-signal delays until the host signals: the caller would
    /// block itself. Signal the point first, or export from a later submission.
    #[error("a sync_file cannot be exported from a submission that waits for host timeline point {value}, not yet signalled: the export would block until the host signals it")]
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
    /// A binary semaphore of a submission's sync_file fences, back to its pool once the
    /// submission is done (its payload is unsignalled again then).
    PooledSemaphore(vk::Semaphore, SemaphoreKind),
    DescriptorPool(vk::DescriptorPool),
    Sampler(vk::Sampler),
    YcbcrConversion(vk::SamplerYcbcrConversion),
    Pipeline(vk::Pipeline),
    PipelineLayout(vk::PipelineLayout),
    DescriptorSetLayout(vk::DescriptorSetLayout),
}

/// The binary semaphores the engine keeps for sync_file fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SemaphoreKind {
    /// Exportable as SYNC_FD: signalled by a submission that hands out a fence.
    Export,
    /// Plain: holds an imported fence, temporarily, for one wait.
    Import,
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
    /// Timelines handed to hosts ([`HostTimeline`]), destroyed with the engine.
    host_timelines: Mutex<Vec<vk::Semaphore>>,
    /// Binary semaphores no submission uses, per kind, for the next sync_file fence.
    free_binaries: Mutex<Vec<(vk::Semaphore, SemaphoreKind)>>,
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
            free_binaries: Mutex::new(Vec::new()),
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
    pub(crate) fn retire(&self, device: &ash::Device, allocator: &crate::resources::memory::Memory, uses: Vec<Completion>, garbage: Vec<Garbage>) {
        if uses.iter().all(|c| self.is_reached(device, c)) {
            self.destroy(device, allocator, garbage);
        } else {
            self.graveyard.lock().unwrap_or_else(PoisonError::into_inner).push((uses, garbage));
        }
    }

    /// Destroys every retired object whose uses are complete. Never blocks on the GPU.
    pub(crate) fn collect(&self, device: &ash::Device, allocator: &crate::resources::memory::Memory) {
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
    pub(crate) fn shutdown(&self, device: &ash::Device, allocator: &crate::resources::memory::Memory) {
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
            for s in self.host_timelines.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                device.destroy_semaphore(s, None);
            }
            for (s, _) in self.free_binaries.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                device.destroy_semaphore(s, None);
            }
        }
    }
}

impl Submitter {
    /// A binary semaphore of `kind` from the pool, or a new one.
    fn binary(&self, device: &ash::Device, kind: SemaphoreKind) -> Result<vk::Semaphore, VkError> {
        {
            let mut free = self.free_binaries.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(i) = free.iter().position(|(_, k)| *k == kind) {
                return Ok(free.swap_remove(i).0);
            }
        }
        let mut export = vk::ExportSemaphoreCreateInfo::default().handle_types(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        let mut info = vk::SemaphoreCreateInfo::default();
        if kind == SemaphoreKind::Export {
            info = info.push_next(&mut export);
        }
        // SAFETY: the device reports SYNC_FD semaphores exportable (the SyncFile capability,
        // checked by the caller; VUID-VkExportSemaphoreCreateInfo-handleTypes-01124).
        unsafe { device.create_semaphore(&info, None) }.vk("vkCreateSemaphore")
    }

    /// Destroys `garbage`, whose GPU work is complete (pooled semaphores go back to the pool).
    fn destroy(&self, device: &ash::Device, allocator: &crate::resources::memory::Memory, garbage: Vec<Garbage>) {
        let mut rest = Vec::with_capacity(garbage.len());
        for g in garbage {
            match g {
                Garbage::PooledSemaphore(s, kind) => self.free_binaries.lock().unwrap_or_else(PoisonError::into_inner).push((s, kind)),
                other => rest.push(other),
            }
        }
        destroy(device, allocator, rest);
    }
}

fn destroy(device: &ash::Device, allocator: &crate::resources::memory::Memory, garbage: Vec<Garbage>) {
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
                Garbage::PooledSemaphore(x, _) => device.destroy_semaphore(x, None),
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
    sync_file: Option<OwnedFd>,
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

    /// Blocks the calling thread until the work is done or `timeout` passes.
    pub fn wait(&self, timeout: Duration) -> Result<(), SubmitError> {
        self.engine.wait(&[self.completion], timeout)
    }

    /// The sync_file fence that signals when the work is done, when one was asked for
    /// ([`SubmitOptions::export_sync_file`]). Owned by the caller once taken.
    pub fn take_sync_file(&mut self) -> Option<OwnedFd> {
        self.sync_file.take()
    }
}

/// What a submission waits for and signals besides its timeline point.
#[derive(Debug, Default)]
pub struct SubmitOptions {
    /// Timeline points of this engine (its own submissions, or host timelines) to wait for.
    pub waits: Vec<Completion>,
    /// sync_file fences (another process's or device's release) to wait for. Ownership
    /// passes to the engine.
    pub wait_sync_files: Vec<OwnedFd>,
    /// Also signal a sync_file fence ([`Submission::take_sync_file`]) for another process
    /// or device.
    ///
    /// Some drivers (lavapipe among them) return from the export only once the batch is
    /// done, so the fence is already signalled and the submit call takes as long as the
    /// work: do not count on exporting to overlap CPU and GPU work.
    pub export_sync_file: bool,
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
        if (options.export_sync_file || !options.wait_sync_files.is_empty()) && shared.sync_file_fn().is_none() {
            return Err(SubmitError::NoSyncFile(Capability::SyncFile).into());
        }
        if options.export_sync_file {
            let host = submitter.host_timelines.lock().unwrap_or_else(PoisonError::into_inner).clone();
            if let Some(c) = options.waits.iter().find(|c| host.contains(&c.semaphore) && !self.is_reached(c)) {
                return Err(SubmitError::ExportBehindHostWait { value: c.value }.into());
            }
        }
        let mut state = submitter.lock();
        let reached = submitter.refresh(device);
        while state.busy.front().is_some_and(|(v, _)| *v <= reached) {
            if let Some((_, cmd)) = state.busy.pop_front() {
                state.idle.push(cmd);
            }
        }
        let cmd = match state.idle.pop() {
            Some(cmd) => cmd,
            None => {
                let alloc = vk::CommandBufferAllocateInfo::default()
                    .command_pool(state.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: the pool belongs to this device and is guarded by the lock held here.
                let cmds = unsafe { device.allocate_command_buffers(&alloc) }.vk("vkAllocateCommandBuffers").map_err(SubmitError::from)?;
                cmds[0]
            }
        };
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer is not pending (idle, or busy with a reached value), its
        // pool allows resetting single buffers, and the pool is guarded by the lock
        // (VUID-vkBeginCommandBuffer-commandBuffer-00049, -00050).
        let begun = unsafe { device.begin_command_buffer(cmd, &begin) }.vk("vkBeginCommandBuffer");
        if let Err(e) = begun {
            state.idle.push(cmd);
            return Err(SubmitError::from(e).into());
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
                return Err(e);
            }
            (Ok(_), Err(e)) => {
                state.idle.push(cmd);
                return Err(SubmitError::from(e).into());
            }
        };
        let mut binaries: Vec<(vk::Semaphore, SemaphoreKind)> = Vec::new();
        let result = self.queue_submit(&mut state, cmd, completion, options, binary, &mut binaries);
        let sync_file = match result {
            Ok(fd) => fd,
            Err(e) => {
                // The command buffer never became pending; binary semaphores made for this
                // submission are unused.
                state.idle.push(cmd);
                drop(state);
                for (s, kind) in binaries {
                    if kind == SemaphoreKind::Export {
                        submitter.free_binaries.lock().unwrap_or_else(PoisonError::into_inner).push((s, kind));
                    } else {
                        // SAFETY: a semaphore of this device that no submitted batch refers to;
                        // an import may have left a payload in it, so it is not reused.
                        unsafe { device.destroy_semaphore(s, None) };
                    }
                }
                return Err(e.into());
            }
        };
        state.last_value = value;
        state.busy.push_back((value, cmd));
        drop(state);
        if !binaries.is_empty() {
            shared.retire(vec![completion], binaries.into_iter().map(|(s, k)| Garbage::PooledSemaphore(s, k)).collect());
        }
        submitter.collect(device, &shared.memory);
        Ok((output, Submission { engine: self.clone(), completion, sync_file }))
    }

    /// `vkQueueSubmit` of `cmd` signalling `completion`, with the options' waits and fences.
    /// Binary semaphores it takes from the pool are pushed to `binaries` (returned to it by
    /// the caller once the submission is done, or at once when it failed).
    fn queue_submit(
        &self,
        state: &mut QueueState,
        cmd: vk::CommandBuffer,
        completion: Completion,
        options: SubmitOptions,
        binary: BinarySemaphores,
        binaries: &mut Vec<(vk::Semaphore, SemaphoreKind)>,
    ) -> Result<Option<OwnedFd>, SubmitError> {
        let shared = self.shared();
        let device = shared.device();
        let mut wait_semaphores: Vec<vk::Semaphore> = options.waits.iter().map(|c| c.semaphore).collect();
        let mut wait_values: Vec<u64> = options.waits.iter().map(|c| c.value).collect();
        for fd in options.wait_sync_files {
            let semaphore = self.import_sync_file(fd)?;
            binaries.push((semaphore, SemaphoreKind::Import));
            wait_semaphores.push(semaphore);
            // Ignored for binary semaphores.
            wait_values.push(0);
        }
        let mut stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; wait_semaphores.len()];
        for (semaphore, stage) in &binary.waits {
            wait_semaphores.push(*semaphore);
            wait_values.push(0);
            stages.push(*stage);
        }
        let mut signal_semaphores = vec![completion.semaphore];
        let mut signal_values = vec![completion.value];
        for semaphore in &binary.signals {
            signal_semaphores.push(*semaphore);
            signal_values.push(0);
        }
        let export = if options.export_sync_file {
            let s = shared.submitter.binary(device, SemaphoreKind::Export)?;
            binaries.push((s, SemaphoreKind::Export));
            signal_semaphores.push(s);
            signal_values.push(0);
            Some(s)
        } else {
            None
        };
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
        // values name points of the engine's own timelines (checked by the caller).
        unsafe { device.queue_submit(state.queue, &[submit], vk::Fence::null()) }.vk("vkQueueSubmit")?;
        match (export, shared.sync_file_fn()) {
            (Some(semaphore), Some(fd_fn)) => {
                let info = vk::SemaphoreGetFdInfoKHR::default()
                    .semaphore(semaphore)
                    .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
                // SAFETY: the semaphore was created exportable as SYNC_FD and a signal
                // operation on it has been submitted (VUID-VkSemaphoreGetFdInfoKHR-handleType-03254).
                let raw = unsafe { fd_fn.get_semaphore_fd(&info) }.vk("vkGetSemaphoreFdKHR")?;
                // SAFETY: vkGetSemaphoreFdKHR returns a new fd the caller owns; -1 means
                // "already signalled", which is no fd at all.
                Ok((raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) }))
            }
            _ => Ok(None),
        }
    }

    /// A binary semaphore holding `fd`'s fence (temporarily, for one wait).
    fn import_sync_file(&self, fd: OwnedFd) -> Result<vk::Semaphore, SubmitError> {
        let shared = self.shared();
        let device = shared.device();
        let fd_fn = shared.sync_file_fn().ok_or(SubmitError::NoSyncFile(Capability::SyncFile))?;
        let semaphore = shared.submitter.binary(device, SemaphoreKind::Import)?;
        let info = vk::ImportSemaphoreFdInfoKHR::default()
            .semaphore(semaphore)
            .flags(vk::SemaphoreImportFlags::TEMPORARY)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD)
            .fd(fd.as_raw_fd());
        let before = dmabridge_interop::dmabuf::FileId::of(std::os::fd::AsFd::as_fd(&fd)).ok();
        // SAFETY: SYNC_FD imports must be temporary (VUID-VkImportSemaphoreFdInfoKHR-handleType-07307);
        // the semaphore is new and unused.
        match unsafe { fd_fn.import_semaphore_fd(&info) }.vk("vkImportSemaphoreFdKHR") {
            Ok(()) => {
                // A successful import transfers the fd's ownership to Vulkan.
                let _ = fd.into_raw_fd();
                Ok(semaphore)
            }
            Err(e) => {
                crate::resources::memory::close_after_failed_import(fd, before);
                // The import failed and left the semaphore as it was: back to the pool.
                shared.submitter.free_binaries.lock().unwrap_or_else(PoisonError::into_inner).push((semaphore, SemaphoreKind::Import));
                Err(e.into())
            }
        }
    }

    /// Whether `semaphore` is one of this engine's timelines.
    fn owns_timeline(&self, semaphore: vk::Semaphore) -> bool {
        let s = &self.shared().submitter;
        semaphore == s.timeline || s.host_timelines.lock().unwrap_or_else(PoisonError::into_inner).contains(&semaphore)
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
        shared.submitter.host_timelines.lock().unwrap_or_else(PoisonError::into_inner).push(semaphore);
        Ok(HostTimeline { semaphore, next: AtomicU64::new(0) })
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
