//! GPU time between two points of one submission, from timestamp queries: what the transfer
//! cost takes from the GPU (the consumer's acquire, copy mode's plan steps) without the
//! rendering and the composite around it in the same command buffer.

use std::cell::Cell;
use std::time::Duration;

use dmabridge::ash::vk;
use dmabridge::{Completion, Engine, VkError};

use crate::error::DemoError;

use super::config::FRAME_TIMEOUT;

/// A pair of timestamp queries, written around a span of one command buffer and read once
/// its submission is complete. One span at a time: each recording reuses the pair.
pub struct GpuTimer {
    engine: Engine,
    pool: vk::QueryPool,
    /// Nanoseconds per tick (`timestampPeriod`).
    period_ns: f64,
    /// The bits of a timestamp the queue writes (`timestampValidBits`).
    mask: u64,
    /// The last submission that wrote the pair: the pool goes once it is complete.
    last: Cell<Option<Completion>>,
}

impl GpuTimer {
    /// A timer on `engine`'s queue; `None` where the queue writes no timestamps.
    pub fn new(engine: &Engine) -> Result<Option<GpuTimer>, DemoError> {
        let instance = engine.instance();
        // SAFETY: the engine's own physical device, of its own instance.
        let families = unsafe { instance.get_physical_device_queue_family_properties(engine.physical_device()) };
        let bits = families.get(engine.queue_family() as usize).map_or(0, |f| f.timestamp_valid_bits);
        // SAFETY: as above.
        let period = unsafe { instance.get_physical_device_properties(engine.physical_device()) }.limits.timestamp_period;
        if bits == 0 || period.is_nan() || period <= 0.0 {
            return Ok(None);
        }
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(2);
        // SAFETY: a valid create info on the engine's device.
        let pool = unsafe { engine.device().create_query_pool(&info, None) }.map_err(|result| VkError { call: "vkCreateQueryPool", result })?;
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        Ok(Some(GpuTimer { engine: engine.clone(), pool, period_ns: f64::from(period), mask, last: Cell::new(None) }))
    }

    /// Records the span's start: once every command before it has completed.
    ///
    /// # Safety
    /// `cmd` is the engine's command buffer, recording, outside a render pass, submitted
    /// signalling `until`; no other pending submission uses this timer (the last one's
    /// [`GpuTimer::elapsed`] was read).
    pub unsafe fn record_start(&self, cmd: vk::CommandBuffer, until: Completion) {
        let device = self.engine.device();
        // SAFETY: the caller's contract: recording, outside a render pass, and no pending
        // submission uses the queries (VUID-vkCmdResetQueryPool-None-02841); the reset
        // precedes the writes in submission order (VUID-vkCmdWriteTimestamp-None-00830).
        unsafe {
            device.cmd_reset_query_pool(cmd, self.pool, 0, 2);
            device.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.pool, 0);
        }
        self.last.set(Some(until));
    }

    /// Records the span's end: once every command before it has completed.
    ///
    /// # Safety
    /// As [`GpuTimer::record_start`], in the same command buffer, after it.
    pub unsafe fn record_stop(&self, cmd: vk::CommandBuffer) {
        // SAFETY: the caller's contract; the query was reset by record_start before it.
        unsafe { self.engine.device().cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.pool, 1) };
    }

    /// The span's GPU time, once the submission that recorded it is complete.
    pub fn elapsed(&self) -> Result<Duration, DemoError> {
        let mut ticks = [0u64; 2];
        // SAFETY: the pool's two queries, as 64-bit values; the submission that wrote them
        // is complete (the caller waited for it), so both are available.
        unsafe { self.engine.device().get_query_pool_results(self.pool, 0, &mut ticks, vk::QueryResultFlags::TYPE_64) }
            .map_err(|result| VkError { call: "vkGetQueryPoolResults", result })?;
        let span = ticks[1].wrapping_sub(ticks[0]) & self.mask;
        Ok(Duration::from_nanos((span as f64 * self.period_ns) as u64))
    }
}

impl Drop for GpuTimer {
    fn drop(&mut self) {
        if let Some(last) = self.last.get() {
            if let Err(e) = self.engine.wait(&[last], FRAME_TIMEOUT) {
                tracing::error!(%e, "a timed submission did not complete; leaking its query pool");
                return;
            }
        }
        // SAFETY: every submission that used the pool is complete (waited above;
        // VUID-vkDestroyQueryPool-queryPool-00793).
        unsafe { self.engine.device().destroy_query_pool(self.pool, None) };
    }
}
