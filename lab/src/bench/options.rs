//! What `dmabridge bench` measures: the sizes, paths and formats, and how many repetitions.

use dmabridge_interop::Fourcc;

use super::conversions::conversions;

/// The sizes measured; `--quick` drops the last.
pub const SIZES: [(u32, u32); 4] = [(1280, 720), (1920, 1080), (3840, 2160), (7680, 4320)];
pub const PATHS: [&str; 3] = ["zero-copy", "copy-gpu", "copy-cpu"];
pub const FORMATS: [Fourcc; 2] = [Fourcc::ARGB8888, Fourcc::NV12];

#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    pub quick: bool,
}

impl BenchOptions {
    pub fn sizes(&self) -> &'static [(u32, u32)] {
        if self.quick {
            &SIZES[..3]
        } else {
            &SIZES
        }
    }

    pub fn reps(&self, bytes: u64) -> usize {
        let base = if self.quick { 5 } else { 20 };
        // Fewer repetitions of the 8K frames, which take long on a CPU device.
        if bytes > 64 << 20 {
            base / 2
        } else {
            base
        }
    }

    /// Rounds of the loops where sides take turns (dmabridge on one thread and the peers;
    /// the fused and the linear conversion): their medians are the ratios' two sides. With
    /// eight, per thread ÷ libyuv `NV12ToARGBMatrix` read 0.87-1.17 over twelve runs of one
    /// binary (2026-11-26). Sixteen halve the variance of each side's median; the whole run
    /// took as long (82-85 s against 82-86 s, two runs each, 2026-11-27).
    pub fn turns(&self) -> usize {
        if self.quick {
            3
        } else {
            16
        }
    }

    /// The number of progress steps [`super::run`] reports.
    pub fn steps(&self) -> u64 {
        (self.sizes().len() * PATHS.len() * FORMATS.len() + conversions(16, 16).len()) as u64 + 3
    }
}
