//! Each mode's transfer cost: what it takes to get a rendered frame from the producer into
//! a usable image on the consumer, without the rendering and the verification around it.
//! Per frame, each part timed where it runs, on the CPU as the CPU time of the thread that
//! does it ([`CpuSpan`]) and on a GPU by timestamps:
//! - **handoff**: the descriptor's send (producer) and its receive once it has arrived
//!   (consumer: the wait for it is not counted);
//! - **import**: the import cache's import and the acquire (consumer, CPU), and the
//!   acquire's commands on the consumer's GPU: an ownership transfer for an explicit import,
//!   the copy into an image for the buffer-copy import;
//! - **copy**: copy mode's plan steps on the producer's GPU (timestamps), from its own render
//!   target into the shared frame; none in zero-copy mode.
//!
//! The producer sends its share with each frame's message ([`ProducerShare`]); the consumer
//! adds its own and reports the mode's [`TransferTiming`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::stats::Percentiles;

/// A span of this thread's CPU time. Not wall time: a wall-clock span of a few µs also holds
/// every wait for a CPU (a machine shared with other work, or the peer a send wakes taking
/// the sender's core), which is not what the work costs.
pub struct CpuSpan(Duration);

impl CpuSpan {
    pub fn start() -> CpuSpan {
        CpuSpan(thread_cpu_time())
    }

    pub fn elapsed(&self) -> Duration {
        thread_cpu_time().saturating_sub(self.0)
    }
}

fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// The longest span a share may report: anything longer is a broken clock or a broken peer.
pub const MAX_SPAN_NS: u64 = 3_600_000_000_000;

/// The producer's share of one frame's transfer cost, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerShare {
    /// The descriptor's send.
    pub send_ns: u64,
    /// Copy mode: the plan's steps on the GPU; `None` in zero-copy mode, or where the GPU
    /// writes no timestamps.
    pub copy_ns: Option<u64>,
}

impl ProducerShare {
    pub fn new(send: Duration, copy: Option<Duration>) -> ProducerShare {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).min(MAX_SPAN_NS);
        ProducerShare { send_ns: ns(send), copy_ns: copy.map(ns) }
    }

    /// Every span in range.
    pub fn check(&self) -> Result<(), String> {
        match [Some(self.send_ns), self.copy_ns].into_iter().flatten().find(|&ns| ns > MAX_SPAN_NS) {
            Some(ns) => Err(format!("a transfer span of {ns} ns (at most {MAX_SPAN_NS})")),
            None => Ok(()),
        }
    }
}

/// One frame's transfer cost, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FrameTransfer {
    pub handoff: f64,
    pub import: f64,
    pub copy: f64,
}

impl FrameTransfer {
    /// The producer's share and the consumer's: its receive, and its import (on the CPU and
    /// on the GPU, added).
    pub fn new(producer: ProducerShare, receive: Duration, import: Duration) -> FrameTransfer {
        let us = |ns: u64| ns as f64 / 1e3;
        FrameTransfer {
            handoff: us(producer.send_ns) + receive.as_secs_f64() * 1e6,
            import: import.as_secs_f64() * 1e6,
            copy: producer.copy_ns.map_or(0.0, us),
        }
    }

    pub fn total(&self) -> f64 {
        self.handoff + self.import + self.copy
    }
}

/// A mode's transfer cost over its frames: the total per frame and each part, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TransferTiming {
    pub total: Percentiles,
    pub handoff: Percentiles,
    pub import: Percentiles,
    pub copy: Percentiles,
    /// Whether the GPU's parts (the consumer's acquire, copy mode's copy) were timed: a GPU
    /// without timestamps leaves them out.
    pub gpu_timed: bool,
}

impl TransferTiming {
    pub fn of(frames: &[FrameTransfer], gpu_timed: bool) -> TransferTiming {
        let each = |f: fn(&FrameTransfer) -> f64| Percentiles::of(&frames.iter().map(f).collect::<Vec<_>>());
        TransferTiming {
            total: each(FrameTransfer::total),
            handoff: each(|f| f.handoff),
            import: each(|f| f.import),
            copy: each(|f| f.copy),
            gpu_timed,
        }
    }

    /// Every figure a finite time.
    pub fn check(&self) -> Result<(), String> {
        let finite = |p: &Percentiles| [p.median, p.p99].iter().all(|v| v.is_finite() && *v >= 0.0);
        if [&self.total, &self.handoff, &self.import, &self.copy].into_iter().all(finite) {
            Ok(())
        } else {
            Err("a transfer time that is negative or not a number".into())
        }
    }
}
