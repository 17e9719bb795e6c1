//! The host side of a benchmark loop: an embedding host's frame loop, with its own command
//! buffers and submits and at most [`FRAMES_IN_FLIGHT`] frames in flight.

use dmabridge::ash::vk;
use dmabridge::{Completion, Engine, HostTimeline, VkError};

use crate::demo::config::FRAME_TIMEOUT;
use crate::error::DemoError;

/// Frames a benchmark loop keeps in flight, as a host engine's frame loop would.
pub const FRAMES_IN_FLIGHT: usize = 3;

/// The host side of a benchmark loop: its own command pool and buffers, a
/// [`HostTimeline`], and its own submits on the engine's queue (under its lock).
pub struct HostLoop {
    engine: Engine,
    pool: vk::CommandPool,
    cmds: Vec<(vk::CommandBuffer, Option<Completion>)>,
    timeline: HostTimeline,
    frame: usize,
}

impl HostLoop {
    pub fn new(engine: &Engine) -> Result<HostLoop, DemoError> {
        let device = engine.device();
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(engine.queue_family())
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: the engine's queue family exists on its device.
        let pool = unsafe { device.create_command_pool(&info, None) }.map_err(|result| VkError { call: "vkCreateCommandPool", result })?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(FRAMES_IN_FLIGHT as u32);
        // SAFETY: the pool was just made on this device.
        let cmds = match unsafe { device.allocate_command_buffers(&alloc) } {
            Ok(c) => c,
            Err(result) => {
                // SAFETY: an unused pool of this device.
                unsafe { device.destroy_command_pool(pool, None) };
                return Err(VkError { call: "vkAllocateCommandBuffers", result }.into());
            }
        };
        let timeline = engine.host_timeline()?;
        Ok(HostLoop { engine: engine.clone(), pool, cmds: cmds.into_iter().map(|c| (c, None)).collect(), timeline, frame: 0 })
    }

    /// Waits, as a host's frame loop does, for the previous frame of the command buffer the
    /// next frame uses (and of whatever per-slot resources go with it).
    pub fn wait_next(&self) -> Result<(), DemoError> {
        if let (_, Some(p)) = self.cmds[self.frame % self.cmds.len()] {
            self.engine.wait(&[p], FRAME_TIMEOUT)?;
        }
        Ok(())
    }

    /// Records a frame with `record` into the next command buffer (after [`HostLoop::wait_next`])
    /// and submits it.
    pub fn frame(&mut self, record: impl FnOnce(vk::CommandBuffer, Completion) -> Result<(), DemoError>) -> Result<(), DemoError> {
        let device = self.engine.device();
        self.wait_next()?;
        let slot = self.frame % self.cmds.len();
        self.frame += 1;
        let cmd = self.cmds[slot].0;
        let point = self.timeline.next();
        // SAFETY: the command buffer's previous submission is complete (waited above); its
        // pool allows resetting single buffers (VUID-vkBeginCommandBuffer-commandBuffer-00050).
        unsafe { device.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT)) }
            .map_err(|result| VkError { call: "vkBeginCommandBuffer", result })?;
        let recorded = record(cmd, point);
        // SAFETY: recording state (VUID-vkEndCommandBuffer-commandBuffer-00059).
        let ended = unsafe { device.end_command_buffer(cmd) }.map_err(|result| VkError { call: "vkEndCommandBuffer", result });
        recorded?;
        ended?;
        let cmds = [cmd];
        let signals = [point.semaphore()];
        let values = [point.value()];
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
        let submit = vk::SubmitInfo::default().command_buffers(&cmds).signal_semaphores(&signals).push_next(&mut timeline);
        {
            let queue = self.engine.lock_queue();
            // SAFETY: the queue is held under the engine's lock (VUID-vkQueueSubmit-queue-parameter);
            // the host timeline's points are signalled in the order they were taken
            // (VUID-VkSubmitInfo-pSignalSemaphores-03242).
            unsafe { device.queue_submit(queue.queue(), &[submit], vk::Fence::null()) }.map_err(|result| VkError { call: "vkQueueSubmit", result })?;
        }
        self.cmds[slot].1 = Some(point);
        Ok(())
    }

    /// Waits for every frame submitted.
    pub fn finish(&self) -> Result<(), DemoError> {
        let points: Vec<Completion> = self.cmds.iter().filter_map(|(_, p)| *p).collect();
        self.engine.wait(&points, FRAME_TIMEOUT)?;
        Ok(())
    }
}

impl Drop for HostLoop {
    fn drop(&mut self) {
        let points: Vec<Completion> = self.cmds.iter().filter_map(|(_, p)| *p).collect();
        if let Err(e) = self.engine.wait(&points, FRAME_TIMEOUT) {
            tracing::error!(%e, "benchmark frames did not complete; leaking their command pool");
            return;
        }
        // SAFETY: every submission of the pool's command buffers is complete (waited above;
        // VUID-vkDestroyCommandPool-commandPool-00041).
        unsafe { self.engine.device().destroy_command_pool(self.pool, None) };
    }
}
