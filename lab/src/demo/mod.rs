//! The two-process demo (`dmabridge demo`, the render producer).
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
//!   its GPU renders ([`negotiation::RENDER_LAYOUT`]: X-tiled AR24), and the engine runs the
//!   negotiated copy plan's steps ([`dmabridge::Converter::record_plan`], in the frame's own
//!   submission) into a pool of system-memory buffers it allocated itself: dma-bufs from the
//!   system dma-heap where the kernel has one, sealed memfds elsewhere (`"memory"` in
//!   `summary.json`). For AR24 the plan is one step (detile); for NV12 two (detile, then
//!   RGB -> NV12), and the checksum the consumer verifies is taken from what the plan wrote
//!   ([`copy_path::nv12_checksum`]). `summary.json` lists the plan's steps and the frames
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
//!
//! ## Transfer cost
//! A frame's end-to-end time is mostly the producer's rendering and the consumer's composite
//! and verification (on lavapipe, milliseconds), which are the same in both modes. Each
//! mode's transfer cost is measured apart ([`transfer`]): the handoff (the descriptor's send
//! and receive), the import (the cache's import and the acquire, on the CPU and on the
//! consumer's GPU), and in copy mode the copy (the plan's steps on the producer's GPU), each
//! timed where it runs: on a CPU the CPU time of the thread doing it, on a GPU timestamps
//! ([`gpu_timer`]). The handoff is timed cold, as the demo runs it: rendering 3.7 MB frames
//! between two handoffs evicts the caches, and the same send and receive cost 6 and 8 µs
//! back to back but 70 and 37 µs with 64 MB touched between them (CPU time, this machine).

pub mod config;
pub mod consumer;
pub mod contact_sheet;
pub mod control;
pub mod copy_path;
pub mod gpu_timer;
pub mod negotiation;
mod pool;
pub mod producer;
pub mod shaders;
pub mod transfer;
