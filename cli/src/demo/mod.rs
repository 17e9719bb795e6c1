//! The end-to-end demo (`dmabridge demo`) and the path benchmark (`dmabridge bench`).
//!
//! ## The demo: two processes, one pipeline
//! A **producer** (the `demo` command) and a **consumer** (the same binary re-executed as
//! the hidden `demo-consumer` subcommand, over two inherited `SOCK_SEQPACKET` sockets) each
//! open their own Vulkan device and state what they can do:
//! - the consumer sends its participant: the AR24 and NV12 layouts its device imports for
//!   sampling (LINEAR always: the engine's buffer-copy import takes it anywhere);
//! - the producer adds its own: the layouts its device exports (zero-copy), or, in copy mode,
//!   its device-local render target.
//!
//! Both describe themselves with the engine's one device-to-participant function
//! ([`dmabridge::Engine::participant`]), and the producer runs
//! [`negotiate`](dmabridge_interop::negotiate::negotiate_with) on both.
//! A shared outcome gives the pool size (the sum of both sides' `min-buffers`) and the
//! acceptable modifiers of the exported images; a copy plan gives the steps the producer
//! runs on the GPU (the engine's [`Converter::record_plan`](dmabridge::Converter::record_plan))
//! into a pool of linear frames in system memory.
//!
//! Then, per frame, the producer takes a buffer that the consumer does not hold (it waits for
//! a "release buffer N" message otherwise: the sysmem/V4L2 rule), renders an animated
//! pattern into it with a compute shader (`shaders/demo_pattern.comp` for AR24,
//! `demo_pattern_nv12.comp` for NV12; each also sums the frame's checksum), and sends the
//! descriptor and fds (buffer socket) and the frame index and expected checksum (control
//! socket). The consumer imports the frame through the [`ImportCache`](dmabridge::ImportCache),
//! composites it under its own overlay with a compute shader that samples it
//! (`shaders/demo_composite.comp`; NV12 through a sampler YCbCr conversion), sums the same
//! checksum over what it sampled, compares, and hands the buffer back. `--corrupt-frame K`
//! damages frame K after its checksum was taken, as a transport fault would.
//!
//! ## Modes
//! - **zero-copy**: the pool is exported images (DMA_BUF, negotiated modifier); the pattern
//!   is written straight into their memory and the consumer imports them explicitly.
//! - **copy** (forced): the producer renders into its own device-local buffer in the layout
//!   its GPU renders ([`producer::RENDER_LAYOUT`]: X-tiled AR24), and the engine runs the
//!   negotiated copy plan's steps ([`dmabridge::Converter::record_plan`], in the frame's own
//!   submission) into a pool of system-memory buffers it allocated itself: dma-bufs from the
//!   system dma-heap where the kernel has one, sealed memfds elsewhere (`"memory"` in
//!   `summary.json`). For AR24 the plan is one step (detile); for NV12 two (detile, then
//!   RGB -> NV12), and the checksum the consumer verifies is taken from what the plan wrote
//!   ([`producer::nv12_checksum`]). `summary.json` lists the plan's steps and the frames
//!   verified through it (`copy.plan`).
//!
//! ## Synchronisation
//! Each mode synchronises with the best method both devices support, as negotiated
//! ([`dmabridge_interop::sync::SyncMethods::best_common`]), and `summary.json` says which
//! (`"sync"`):
//! - **sync-file** (a device with `SYNC_FD` semaphores on a kernel with sync_file, such as
//!   lavapipe on the kernel lab's Linux): the producer's frame submission exports a sync_file,
//!   which travels with the descriptor as its acquire fence; the consumer's composite waits
//!   for it on the GPU and exports a release fence, which travels with the release message;
//!   the producer's next submission into that buffer waits for it on the GPU. No process
//!   waits for the other's GPU work on the CPU. (Each still waits for its own, to read the
//!   checksum it verifies.)
//! - **cpu-wait** (lavapipe on a kernel without sync_file, or this machine's host): the
//!   producer waits for its frame's submission before it sends the descriptor, and the
//!   consumer's release message is the release.
//!
//! The demo uses only dmabridge's public API: the engine's buffers, compute pipelines,
//! samplers, submissions and the import cache.
//!
//! Without udmabuf (plain lavapipe) the device cannot export DMA_BUF and has no modifier
//! extension: zero-copy is reported unavailable (with the negotiation's reason) and copy
//! mode runs: the producer allocates memfds itself and writes them by GPU copy, and the
//! consumer imports them through the engine's buffer-copy path. The same holds for NV12
//! on lavapipe with udmabuf, whose modifier support covers single-plane formats only.
//!
//! ## fd accounting
//! Both processes count `/proc/self/fd` before the first frame and after the last buffer
//! is handed back and every pool, cache and import is dropped; `leaked_fds` is the sum of
//! both differences.

pub mod bench;
pub mod command;
pub mod consumer;
pub mod cpu_peers;
pub mod control;
pub mod decoder;
pub mod decoder_peer;
pub mod decoder_stream;
pub mod gst_baseline;
pub mod html_report;
pub mod live;
pub mod producer;
pub mod report;

use dmabridge::{
    BufferError, FormatSupportError, ComputeError, EngineError, ExportError, ImportError, SamplerError, SubmitError, TransferError, ReadBackError, VkError,
};
use serde::{Deserialize, Serialize};

/// SPIR-V of `cli/shaders/demo_pattern.comp`: the producer's animated pattern into a linear
/// AR24 frame, plus its checksum.
pub static PATTERN_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_pattern.spv"));
/// SPIR-V of `cli/shaders/demo_pattern_nv12.comp`: the same for an NV12 frame.
pub static PATTERN_NV12_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_pattern_nv12.spv"));
/// SPIR-V of `cli/shaders/demo_composite.comp`: the consumer's sampler-based composite and checksum.
pub static COMPOSITE_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_composite.spv"));

/// The push constants of the demo's shaders: seven 32-bit words.
pub type Push = [u32; 7];

/// How long the demo waits for one frame's GPU work before it gives up.
pub const FRAME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Why the demo or the benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Transfer(#[from] TransferError),
    #[error(transparent)]
    ReadBack(#[from] ReadBackError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Caps(#[from] FormatSupportError),
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error(transparent)]
    Compute(#[from] ComputeError),
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Image(#[from] dmabridge::ImageError),
    #[error(transparent)]
    Convert(#[from] dmabridge::ConvertError),
    #[error(transparent)]
    Handoff(#[from] dmabridge_interop::dmabuf::HandoffError),
    #[error(transparent)]
    Descriptor(#[from] dmabridge_interop::dmabuf::DescriptorError),
    #[error(transparent)]
    Memfd(#[from] dmabridge_interop::dmabuf::MemfdError),
    #[error(transparent)]
    Write(#[from] dmabridge_interop::dmabuf::WriteError),
    #[error(transparent)]
    Heap(#[from] dmabridge_interop::dmabuf::HeapError),
    /// A fence from the other process did not signal in time.
    #[error("a fence from the other process: {0}")]
    Fence(#[from] dmabridge_interop::sync::WaitError),
    #[error(transparent)]
    Vk(#[from] VkError),
    #[error(transparent)]
    Collection(#[from] dmabridge_interop::collection::CollectionError),
    #[error(transparent)]
    CollectionServer(#[from] dmabridge_interop::collection::ServerError),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("control message: {0}")]
    Json(#[from] serde_json::Error),
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The other process did not answer within its timeout (stopped, or hung).
    #[error("the {peer} did not answer within {after:?} (stopped or hung?)")]
    PeerStalled { peer: &'static str, after: std::time::Duration },
    /// The other process closed its sockets or reset them (it died, or closed them and
    /// lives on); `pid` where it is known.
    #[error("{} hung up", control::who(peer, *pid))]
    PeerHungUp { peer: &'static str, pid: Option<u32> },
    /// The other process, this one's child, ended before its work was done (reaped after
    /// it hung up, or after it exited with a failure).
    #[error("the {peer} (pid {pid}) {how}")]
    PeerDied { peer: &'static str, pid: u32, how: control::Ending },
    /// A fence from the other process was refused (not a sync_file), or did not signal
    /// within the peer timeout: this process's GPU went on without it.
    #[error("{} sent a fence that broke its promise: {reason}", control::who(peer, *pid))]
    PeerFence { peer: &'static str, pid: Option<u32>, reason: String },
    /// The other process failed and said why (its own error, sent before it exited).
    #[error("{} failed: {error}", control::who(peer, *pid))]
    PeerFailed { peer: &'static str, pid: Option<u32>, error: String },
    #[error("cannot write {path}: {detail}")]
    Output { path: String, detail: String },
    #[error("{0}")]
    Unavailable(String),
}

/// How frames travel from producer to consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    ZeroCopy,
    Copy,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero-copy",
            Mode::Copy => "copy",
        }
    }

    /// The key of this mode in `summary.json`.
    pub fn key(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero_copy",
            Mode::Copy => "copy",
        }
    }
}

/// What `dmabridge demo` runs.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// AR24 or NV12 ([`DEMO_FORMATS`]).
    pub fourcc: dmabridge_interop::Fourcc,
    pub frames: u32,
    pub width: u32,
    pub height: u32,
    pub modes: Vec<Mode>,
    /// Where summary.json and contact_sheet.png go.
    pub out_dir: std::path::PathBuf,
    /// Damage this frame after its checksum was taken (a test of the verification).
    pub corrupt_frame: Option<u32>,
    pub validation: bool,
    /// How long either process waits for the other before giving up.
    pub peer_timeout: std::time::Duration,
}

/// Median and 99th percentile of per-frame times, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub median: f64,
    pub p99: f64,
}

impl Percentiles {
    pub fn of(samples: &[f64]) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        Percentiles { median: at(0.5), p99: at(0.99) }
    }
}

/// The frame formats the demo renders and verifies.
pub const DEMO_FORMATS: [dmabridge_interop::Fourcc; 2] = [dmabridge_interop::Fourcc::ARGB8888, dmabridge_interop::Fourcc::NV12];

