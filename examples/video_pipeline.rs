//! A three-stage video pipeline, chained by `Submission`s.
//!
//! - A **decoder-like producer** thread writes NV12 frames in Samsung's 64x32 tiles (the
//!   layout of an Exynos MFC decoder's CAPTURE buffers) into a pool of dma-buf stand-ins
//!   (sealed memfds) and hands each one on. It reuses a buffer only after it came back
//!   released, as a V4L2 decoder must.
//! - A **converter** thread detiles each frame on the GPU into a linear buffer
//!   (`Converter::detile_dmabuf_into`): it submits and passes the `Submission` on at once.
//! - The **consumer** (the main thread) chains its own GPU step, a copy of the linear frame
//!   into its own buffer, after the converter's submission (a timeline wait, not a CPU
//!   wait), then waits for that one on the CPU, checks the frame against the reference,
//!   and releases the producer's buffer and the converter's output.
//!
//! At most `IN_FLIGHT` frames are between the converter and the consumer at once.
//!
//! `cargo run --release --example video_pipeline` (with `DMABRIDGE_VALIDATION=1` the
//! engine runs the validation layer, and any message fails the run with exit 3).

use std::process::ExitCode;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{fd_count, DmaBuf};
use dmabridge::interop::tiling::{self, packed_planes, tiled_size, LinearPlane};
use dmabridge::interop::{Fourcc, Layout, TileLayout};
use dmabridge::{BufferLocation, Converter, Engine, EngineOptions, GpuBuffer, SubmitOptions, Submission};

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
    slot: usize,
    output: usize,
    submission: Submission,
}

/// The producer: tiles each frame into a free buffer of its pool and hands it on.
fn produce(to_converter: SyncSender<Decoded>, released: Receiver<usize>) -> Result<u32, Error> {
    let g = tiled_size(LAYOUT, Fourcc::NV12, WIDTH, HEIGHT)?;
    let packed = packed_planes(Fourcc::NV12, WIDTH, HEIGHT)?;
    let planes: Vec<(u64, u64)> = g.planes.iter().map(|p| (p.offset, u64::from(p.padded_width_bytes))).collect();
    let modifier = LAYOUT.modifier().ok_or("the layout has no DRM modifier")?;
    let mut pool: Vec<std::os::fd::OwnedFd> = Vec::with_capacity(POOL);
    let mut tiled = vec![0u8; g.size as usize];
    for _ in 0..POOL {
        pool.push(dmabridge::interop::dmabuf::sealed_memfd("video-pipeline-frame", &tiled)?);
    }
    let mut free: Vec<usize> = (0..POOL).rev().collect();
    let mut held = [false; POOL];
    for f in 0..FRAMES {
        while free.is_empty() {
            let slot = released.recv_timeout(TIMEOUT)?;
            if !std::mem::replace(&mut held[slot], false) {
                return Err(format!("buffer {slot} was released twice").into());
            }
            free.push(slot);
        }
        let slot = free.pop().ok_or("no free buffer")?;
        tiling::tile(LAYOUT, Fourcc::NV12, WIDTH, HEIGHT, &reference(f), &packed, &mut tiled)?;
        // Written before the descriptor leaves: the cpu-wait sync method.
        rustix::io::pwrite(&pool[slot], &tiled, 0)?;
        let buf = DmaBuf::in_one_file(Fourcc::NV12, Layout::Explicit(modifier), WIDTH, HEIGHT, pool[slot].try_clone()?, &planes)?;
        held[slot] = true;
        to_converter.send(Decoded { frame: f, slot, buf })?;
    }
    drop(to_converter);
    // Every buffer comes back before the decoder stops (end of stream: drain).
    let mut returned = free.len();
    while returned < POOL {
        let slot = released.recv_timeout(TIMEOUT)?;
        if !std::mem::replace(&mut held[slot], false) {
            return Err(format!("buffer {slot} was released twice").into());
        }
        returned += 1;
    }
    Ok(FRAMES)
}

/// The converter: detiles each frame into a free output and passes the submission on.
fn convert(
    engine: Engine,
    outputs: Arc<Vec<GpuBuffer>>,
    from_producer: Receiver<Decoded>,
    free_outputs: Receiver<usize>,
    to_consumer: SyncSender<Converted>,
) -> Result<(), Error> {
    let converter = Converter::new(&engine)?;
    let planes: Vec<LinearPlane> = packed_planes(Fourcc::NV12, WIDTH, HEIGHT)?;
    while let Ok(Decoded { frame, slot, buf }) = from_producer.recv() {
        let output = free_outputs.recv_timeout(TIMEOUT)?;
        let (layout, submission) = converter.detile_dmabuf_into(&buf, &outputs[output], &planes, SubmitOptions::default())?;
        if layout != LAYOUT {
            return Err(format!("the converter read {layout}").into());
        }
        // The descriptor's fds go now; Vulkan holds its own dups until the GPU is done.
        drop(buf);
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
    let (release, released) = sync_channel::<usize>(POOL);
    let (to_consumer, from_converter) = sync_channel::<Converted>(IN_FLIGHT);
    let (free_output, free_outputs) = sync_channel::<usize>(IN_FLIGHT);
    for k in 0..IN_FLIGHT {
        free_output.send(k)?;
    }
    let producer = std::thread::spawn(move || produce(to_converter, released));
    let converter = {
        let (engine, outputs) = (engine.clone(), outputs.clone());
        std::thread::spawn(move || convert(engine, outputs, from_producer, free_outputs, to_consumer))
    };
    let start = Instant::now();
    let mut checked = 0u32;
    let consumed = (|| -> Result<(), Error> {
        while let Ok(Converted { frame, slot, output, submission }) = from_converter.recv_timeout(TIMEOUT) {
            if frame != checked {
                return Err(format!("frame {frame} arrived where {checked} was due").into());
            }
            // The consumer's own GPU step, after the converter's: chained on the timeline.
            let (src, dst) = (&outputs[output], &mine[output]);
            let (_, copied) = engine.submit(SubmitOptions::after(&[submission.completion()]), |cmd, until| {
                let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: linear_len };
                let host = dmabridge::image::buffer_barrier(dst.buffer(), vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::HOST_READ, vk::QUEUE_FAMILY_IGNORED, vk::QUEUE_FAMILY_IGNORED);
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
            // Done with the producer's buffer (the detile read it) and the converter's output.
            release.send(slot)?;
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
    consumed?;
    converted?;
    let produced = produced?;
    let elapsed = start.elapsed();
    if checked != produced {
        return Err(format!("{checked} of {produced} frames came through").into());
    }
    println!(
        "{checked}/{FRAMES} frames {WIDTH}x{HEIGHT} NV12 {LAYOUT} detiled on {} and checked; {:.2} ms per frame, at most {IN_FLIGHT} in flight",
        engine.info().name,
        elapsed.as_secs_f64() * 1e3 / f64::from(checked)
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
