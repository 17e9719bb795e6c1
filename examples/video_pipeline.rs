//! A three-stage video pipeline, chained by `Submission`s.
//!
//! - A **decoder-like producer** thread writes NV12 frames in Samsung's 64x32 tiles (the
//!   layout of an Exynos MFC decoder's CAPTURE buffers) into a pool of system-memory
//!   buffers (dma-bufs from the system dma-heap where the kernel has one, sealed memfds
//!   elsewhere) and hands each one on. It reuses a buffer only after it came back released,
//!   as a V4L2 decoder must.
//! - A **converter** thread detiles each frame on the GPU into a linear buffer
//!   (`Converter::detile_dmabuf_into`): it submits and passes the `Submission` on at once.
//! - The **consumer** (the main thread) chains its own GPU step, a copy of the linear frame
//!   into its own buffer, after the converter's submission (a timeline wait, not a CPU
//!   wait), then waits for that one on the CPU, checks the frame against the reference,
//!   and releases the converter's output.
//!
//! The producer's buffer goes back to it as V4L2 and Wayland hand buffers back, with the
//! best sync method the device has:
//! - **sync-file** (a device with `SYNC_FD` semaphores on a kernel with sync_file): the
//!   converter's submission exports a sync_file, and the converter releases the buffer at
//!   once with it as the release fence; the producer waits for that fence before it writes
//!   the buffer again. Nobody waits for the GPU to hand a buffer back.
//! - **cpu-wait**: the consumer releases the buffer once its own step, chained after the
//!   detile, is done.
//!
//! At most `IN_FLIGHT` frames are between the converter and the consumer at once.
//!
//! `cargo run --release --example video_pipeline` (with `DMABRIDGE_VALIDATION=1` the
//! engine runs the validation layer, and any message fails the run with exit 3).

use std::process::ExitCode;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dmabridge::ash::vk;
use std::os::fd::{AsFd, OwnedFd};

use dmabridge::interop::dmabuf::{fd_count, write_all_at, DmaBuf, SystemMemory};
use dmabridge::interop::sync::{SyncFile, SyncMethod};
use dmabridge::interop::tiling::{self, packed_planes, tiled_size};
use dmabridge::interop::dmabuf::PlaneLayout;
use dmabridge::interop::{Fourcc, Layout, TileLayout};
use dmabridge::{BufferLocation, Converter, Engine, EngineOptions, GpuBuffer, ImportOptions, SubmitOptions, Submission};

const FRAMES: u32 = 120;
/// The decoder's buffers (decoded picture buffer + pipeline depth).
const POOL: usize = 4;
/// Frames between the converter and the consumer at once.
const IN_FLIGHT: usize = 2;
const WIDTH: u32 = 1280;
const HEIGHT: u32 = 720;
const LAYOUT: TileLayout = TileLayout::Samsung64x32;
const TIMEOUT: Duration = Duration::from_secs(30);

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Frame `f` as the decoder produced it: tightly packed NV12 (Y plane, then UV).
fn reference(f: u32) -> Vec<u8> {
    let (w, h) = (WIDTH as usize, HEIGHT as usize);
    let mut out = vec![0u8; w * h + w * h / 2];
    for y in 0..h {
        for x in 0..w {
            out[y * w + x] = ((x + y * 3) as u32 + f * 7) as u8;
        }
    }
    for y in 0..h / 2 {
        for x in 0..w {
            out[w * h + y * w + x] = ((x * 5 + y) as u32 ^ f) as u8;
        }
    }
    out
}

/// A frame on its way from the producer to the converter.
struct Decoded {
    frame: u32,
    slot: usize,
    buf: DmaBuf,
}

/// A frame on its way from the converter to the consumer.
struct Converted {
    frame: u32,
    /// The producer's buffer, still to be released (cpu-wait); `None` once the converter
    /// released it with a fence (sync-file).
    slot: Option<usize>,
    output: usize,
    submission: Submission,
}

/// A producer's buffer coming back, with the fence (a sync_file) to wait for before it is
/// written again; `None`: free now.
type Release = (usize, Option<SyncFile>);

/// A buffer the producer gets back: free once its release fence has signalled.
fn back((slot, fence): Release, held: &mut [bool], free: &mut Vec<usize>) -> Result<(), Error> {
    if !std::mem::replace(held.get_mut(slot).ok_or("an unknown buffer came back")?, false) {
        return Err(format!("buffer {slot} was released twice").into());
    }
    // The GPU may still be reading it: the release fence says when it is done.
    if let Some(fence) = fence {
        fence.wait(TIMEOUT)?;
    }
    free.push(slot);
    Ok(())
}

/// The producer: tiles each frame into a free buffer of its pool and hands it on.
fn produce(to_converter: SyncSender<Decoded>, released: Receiver<Release>) -> Result<u32, Error> {
    let g = tiled_size(LAYOUT, Fourcc::NV12, WIDTH, HEIGHT)?;
    let packed = packed_planes(Fourcc::NV12, WIDTH, HEIGHT)?;
    let planes: Vec<PlaneLayout> =
        g.planes.iter().map(|p| PlaneLayout { object: 0, offset: p.offset, stride: u64::from(p.padded_width_bytes), size: p.size }).collect();
    let modifier = LAYOUT.modifier().ok_or("the layout has no DRM modifier")?;
    let memory = SystemMemory::detect();
    let mut pool: Vec<OwnedFd> = Vec::with_capacity(POOL);
    let mut tiled = vec![0u8; g.size as usize];
    for _ in 0..POOL {
        pool.push(memory.alloc("video-pipeline-frame", g.size)?);
    }
    let mut free: Vec<usize> = (0..POOL).rev().collect();
    let mut held = [false; POOL];
    for f in 0..FRAMES {
        while free.is_empty() {
            back(released.recv_timeout(TIMEOUT)?, &mut held, &mut free)?;
        }
        let slot = free.pop().ok_or("no free buffer")?;
        tiling::tile(tiling::TiledFrame { layout: LAYOUT, fourcc: Fourcc::NV12, extent: (WIDTH, HEIGHT) }, (&reference(f), &packed), &mut tiled)?;
        // Written before the descriptor leaves (through the dma-buf's CPU-access bracket
        // where it is one): the decoder's frame is complete when it is handed on.
        write_all_at(pool[slot].as_fd(), 0, &tiled)?;
        let buf = DmaBuf::in_one_file(Fourcc::NV12, Layout::Explicit(modifier), WIDTH, HEIGHT, pool[slot].try_clone()?, &planes)?;
        held[slot] = true;
        to_converter.send(Decoded { frame: f, slot, buf })?;
    }
    drop(to_converter);
    // Every buffer comes back before the decoder stops (end of stream: drain).
    while free.len() < POOL {
        back(released.recv_timeout(TIMEOUT)?, &mut held, &mut free)?;
    }
    Ok(FRAMES)
}

/// The converter: detiles each frame into a free output and passes the submission on.
fn convert(
    converter: Converter,
    outputs: Arc<Vec<GpuBuffer>>,
    from_producer: Receiver<Decoded>,
    free_outputs: Receiver<usize>,
    (to_consumer, release): (SyncSender<Converted>, SyncSender<Release>),
    sync: SyncMethod,
) -> Result<(), Error> {
    let planes: Vec<PlaneLayout> = packed_planes(Fourcc::NV12, WIDTH, HEIGHT)?;
    let sync_file = sync == SyncMethod::SyncFile;
    while let Ok(Decoded { frame, slot, buf }) = from_producer.recv() {
        let output = free_outputs.recv_timeout(TIMEOUT)?;
        let options = SubmitOptions { export_sync_file: sync_file, ..SubmitOptions::default() };
        // The decoder's own buffers, in this process: nothing to distrust.
        let import = ImportOptions::default();
        let (run, mut submission) = converter.detile_dmabuf_into(&buf, &outputs[output], &planes, import, options)?;
        if run.layout != LAYOUT {
            return Err(format!("the converter read {}", run.layout).into());
        }
        // The descriptor's fds go now; Vulkan holds its own dups until the GPU is done.
        drop(buf);
        let slot = if sync_file {
            // Back to the producer at once: the fence (none if the detile was already done)
            // says when the GPU has finished reading it.
            release.send((slot, submission.take_sync_file()))?;
            None
        } else {
            Some(slot)
        };
        to_consumer.send(Converted { frame, slot, output, submission })?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("video_pipeline: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<ExitCode, Error> {
    let fds_before = fd_count()?;
    let engine = Engine::new(&EngineOptions::from_env())?;
    let linear_len = tiled_size(TileLayout::Linear, Fourcc::NV12, WIDTH, HEIGHT)?.size;
    let outputs: Arc<Vec<GpuBuffer>> =
        Arc::new((0..IN_FLIGHT).map(|_| GpuBuffer::new(&engine, linear_len, BufferLocation::DeviceLocal)).collect::<Result<_, _>>()?);
    let mine: Vec<GpuBuffer> = (0..IN_FLIGHT).map(|_| GpuBuffer::new(&engine, linear_len, BufferLocation::Readback)).collect::<Result<_, _>>()?;
    let (to_converter, from_producer) = sync_channel::<Decoded>(POOL);
    let (release, released) = sync_channel::<Release>(POOL);
    // The best method this device and kernel have: how buffers go back to the producer.
    let sync = engine.sync_methods().best();
    let (to_consumer, from_converter) = sync_channel::<Converted>(IN_FLIGHT);
    let (free_output, free_outputs) = sync_channel::<usize>(IN_FLIGHT);
    for k in 0..IN_FLIGHT {
        free_output.send(k)?;
    }
    let producer = std::thread::spawn(move || produce(to_converter, released));
    let converter = {
        // Made before the stream starts: its shaders compile once, here, and no frame waits for them.
        let converter = Converter::new(&engine)?;
        let (outputs, release) = (outputs.clone(), release.clone());
        std::thread::spawn(move || convert(converter, outputs, from_producer, free_outputs, (to_consumer, release), sync))
    };
    let start = Instant::now();
    let mut checked = 0u32;
    let consumed = (|| -> Result<(), Error> {
        loop {
            let Converted { frame, slot, output, submission } = match from_converter.recv_timeout(TIMEOUT) {
                Ok(c) => c,
                // The converter is done (or failed: its own error says why).
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => return Err(format!("no frame from the converter for {TIMEOUT:?}").into()),
            };
            if frame != checked {
                return Err(format!("frame {frame} arrived where {checked} was due").into());
            }
            // The consumer's own GPU step, after the converter's: chained on the timeline.
            let (src, dst) = (&outputs[output], &mine[output]);
            let (_, copied) = engine.submit(SubmitOptions::after(&[submission.completion()]), |cmd, until| {
                let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: linear_len };
                let host = dmabridge::resources::image::buffer_barrier(dst.buffer(), vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::HOST_READ, vk::QUEUE_FAMILY_IGNORED, vk::QUEUE_FAMILY_IGNORED);
                // SAFETY: the engine's command buffer, recording; both buffers have transfer
                // usage and hold `linear_len` bytes; both are tracked until `until`.
                unsafe {
                    engine.device().cmd_copy_buffer(cmd, src.buffer(), dst.buffer(), &[region]);
                    engine.device().cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[], &[host], &[]);
                }
                src.track(until);
                dst.track(until);
                Ok::<(), dmabridge::SubmitError>(())
            })?;
            copied.wait(TIMEOUT)?;
            // cpu-wait: done with the producer's buffer (the detile read it).
            if let Some(slot) = slot {
                release.send((slot, None))?;
            }
            // Done with the converter's output.
            // The converter stops taking outputs once the stream has ended.
            let _ = free_output.send(output);
            if dst.bytes()? != reference(frame).as_slice() {
                return Err(format!("frame {frame}: the detiled bytes differ from the decoder's").into());
            }
            checked += 1;
        }
        Ok(())
    })();
    drop((release, free_output));
    let produced = producer.join().map_err(|_| "the producer panicked")?;
    let converted = converter.join().map_err(|_| "the converter panicked")?;
    // One stage's failure closes the channels of the others: report every stage's error.
    let errors: Vec<String> = [("producer", produced.as_ref().err()), ("converter", converted.as_ref().err()), ("consumer", consumed.as_ref().err())]
        .into_iter()
        .filter_map(|(stage, e)| e.map(|e| format!("{stage}: {e}")))
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("; ").into());
    }
    let produced = produced?;
    let elapsed = start.elapsed();
    if checked != produced {
        return Err(format!("{checked} of {produced} frames came through").into());
    }
    println!(
        "{checked}/{FRAMES} frames {WIDTH}x{HEIGHT} NV12 {LAYOUT} detiled on {} and checked; {:.2} ms per frame, at most {IN_FLIGHT} in flight; buffers in {}, released by {sync}",
        engine.info().name,
        elapsed.as_secs_f64() * 1e3 / f64::from(checked),
        SystemMemory::detect(),
    );
    let problems = engine.validation().map(|v| v.problems()).unwrap_or_default();
    drop((outputs, mine));
    drop(engine);
    let fds_after = fd_count()?;
    println!("fds before {fds_before}, after {fds_after}");
    if fds_after != fds_before {
        return Err(format!("{} fds leaked", fds_after as i64 - fds_before as i64).into());
    }
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("validation: {p}");
        }
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}
