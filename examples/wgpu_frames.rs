//! `dmabridge demo`'s frames, drawn by wgpu: the example an embedder that renders with wgpu
//! copies.
//!
//! Run with no arguments, this program is the demo's producer
//! ([`dmabridge_lab::demo::producer::run`], what `dmabridge demo` runs): it negotiates each
//! mode with the consumer, renders an animated pattern into a pool of dma-bufs (zero-copy:
//! exported images; copy: system-memory buffers the negotiated plan writes) and hands each
//! frame over a Unix socket, with its acquire fence where both sides synchronise by
//! sync_file. The consumer is this program again, in a second process over the two
//! inherited sockets, speaking the demo's protocol (`lab/src/demo/control.rs`) as the lab's
//! consumer does, but with wgpu doing the consumer's work:
//! - one Vulkan device shared by wgpu and dmabridge (`SharedDevice::open`);
//! - each buffer of the producer's pool imported once (`SharedDevice::import`: its layout
//!   checked against its fds, zero-copy where the device imports the format and modifier,
//!   else a copy on every acquisition), as a `wgpu::Texture`;
//! - every frame drawn by a wgpu render pass into an RGBA8 target with this file's WGSL:
//!   AR24 sampled as it is, NV12 through its plane views (`Plane0` as `R8Unorm`, `Plane1` as
//!   `Rg8Unorm`) and converted (BT.709, narrow range) in the shader;
//! - the same pass sums the demo's checksum over the texels it read, which must equal the
//!   producer's for every frame;
//! - `SharedDevice::submit_frame` acquires the frame (after the producer's acquire fence),
//!   runs the pass and releases the frame, exporting the release fence; the buffer goes back
//!   to the producer with it at once, and the producer's GPU waits for it before writing
//!   the buffer again. Without sync_file (cpu-wait), the buffer goes back once the draw is done.
//!
//! Each mode's last frame is written as a PNG beside the run's other output (`--out`).
//! Exits 0 only if every frame of every mode that ran was verified and neither process
//! leaked an fd; with `DMABRIDGE_VALIDATION=1` both processes run the validation layer
//! (wgpu's `InstanceFlags::VALIDATION` here) and any message it sends fails the run.
//!
//! `cargo run -p dmabridge-wgpu --example wgpu_frames [-- --frames N --width W --height H --format ar24|nv12 --out DIR]`
//! (30 frames of 320x180 a mode, both formats, unless told; `--corrupt-frame K` damages frame K
//! after the producer took its checksum, which must fail the run; `--beside-vulkan` runs
//! every mode again with `dmabridge demo`'s own consumer, which does the same work through
//! dmabridge's raw Vulkan, and prints what the consumer's frame costs through each).

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Mutex;
use std::time::Duration;

use dmabridge::interop::dmabuf::{fd_count, BufferIdentity, DmaBuf};
use dmabridge::interop::sync::SyncMethod;
use dmabridge::interop::{FormatSet, Fourcc};
use dmabridge::SubmitOptions;
use dmabridge_lab::demo::config::{DemoConfig, Mode, DEMO_FORMATS, FRAME_TIMEOUT};
use dmabridge_lab::demo::control::{recv_msg, send_msg, ConsumerReport, Mismatch, Peer, ToConsumer, ToProducer, WireParticipant, DEFAULT_PEER_TIMEOUT, MAX_TEXT};
use dmabridge_lab::demo::negotiation::{consumer_formats, wire_formats, CONSUMER_MIN_BUFFERS};
use dmabridge_lab::demo::consumer::{hand_back, receive_frame, IncomingFrame};
use dmabridge_lab::demo::producer;
use dmabridge_lab::demo::transfer::{CpuSpan, FrameTransfer, TransferTiming};
use dmabridge_lab::stats::Percentiles;
use dmabridge_wgpu::{wgpu, ImportedTexture, SharedDevice, ValidationLog};

type Error = Box<dyn std::error::Error>;

/// The consumer's draw. One full-screen triangle per frame: each pixel of the target is
/// shaded exactly once (no multisampling), so the fragment shader sums the checksum too.
/// The checksum is the demo's (`lab/shaders/demo_pattern*.comp`, `demo_composite.comp`):
/// per pixel, the RGBA8 value the frame holds there packed as r | g << 8 | b << 16 | a << 24
/// (NV12: Cr, Y, Cb, 255, the chroma of the pixel's own 2x2 block), times a weight of its
/// position, summed mod 2^32. The texels are loaded, not filtered, so the sum is exact.
const SHADER: &str = r#"
@group(0) @binding(0) var frame: texture_2d<f32>;
@group(0) @binding(1) var luma: texture_2d<f32>;
@group(0) @binding(2) var chroma: texture_2d<f32>;
@group(0) @binding(3) var<storage, read_write> checksum: atomic<u32>;

@vertex
fn vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let corner = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return vec4<f32>(corner * 2.0 - 1.0, 0.0, 1.0);
}

fn weight(p: vec2<u32>) -> u32 {
    return ((p.x + 1u) * 2654435761u) ^ ((p.y + 1u) * 40503u);
}

// The consumer's own decoration over the frame, as a compositor draws one.
fn decorate(rgb: vec3<f32>, p: vec2<u32>, size: vec2<u32>) -> vec4<f32> {
    let edge = max(size.x, size.y) / 40u + 2u;
    let border = p.x < edge || p.y < edge || p.x + edge >= size.x || p.y + edge >= size.y;
    return vec4<f32>(select(rgb, mix(rgb, vec3<f32>(0.1, 0.3, 0.9), 0.75), border), 1.0);
}

@fragment
fn fs_rgba(@builtin(position) at: vec4<f32>) -> @location(0) vec4<f32> {
    let p = vec2<u32>(at.xy);
    let c = textureLoad(frame, p, 0);
    atomicAdd(&checksum, pack4x8unorm(c) * weight(p));
    return decorate(c.rgb, p, textureDimensions(frame));
}

@fragment
fn fs_nv12(@builtin(position) at: vec4<f32>) -> @location(0) vec4<f32> {
    let p = vec2<u32>(at.xy);
    let y = textureLoad(luma, p, 0).r;
    let cbcr = textureLoad(chroma, p / 2u, 0).rg;
    atomicAdd(&checksum, pack4x8unorm(vec4<f32>(cbcr.g, y, cbcr.r, 1.0)) * weight(p));
    let yy = (y * 255.0 - 16.0) / 219.0;
    let cb = (cbcr.r * 255.0 - 128.0) / 224.0;
    let cr = (cbcr.g * 255.0 - 128.0) / 224.0;
    let rgb = clamp(vec3<f32>(yy + 1.5748 * cr, yy - 0.1873 * cb - 0.4681 * cr, yy + 1.8556 * cb), vec3<f32>(0.0), vec3<f32>(1.0));
    return decorate(rgb, p, textureDimensions(luma));
}
"#;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("consumer") => consumer_main(&args[1..]),
        Some("vulkan-consumer") => vulkan_consumer_main(&args[1..]),
        _ => producer_main(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wgpu_frames: {e}");
            ExitCode::from(1)
        }
    }
}

fn validation_wanted() -> bool {
    std::env::var("DMABRIDGE_VALIDATION").is_ok_and(|v| v == "1" || v == "true")
}

/// The value after `--name` in `args`, parsed; `default` where it is absent.
fn option<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, Error>
where
    T::Err: std::fmt::Display,
{
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => {
            let v = args.get(i + 1).ok_or_else(|| format!("{name} needs a value"))?;
            v.parse().map_err(|e| format!("{name} {v}: {e}").into())
        }
    }
}

// ---- The producer: `dmabridge demo`'s, with this program as its consumer. ----

fn producer_main(args: &[String]) -> Result<ExitCode, Error> {
    let frames: u32 = option(args, "--frames", 30)?;
    let (width, height): (u32, u32) = (option(args, "--width", 320)?, option(args, "--height", 180)?);
    let formats = match option(args, "--format", String::from("all"))?.as_str() {
        "all" => DEMO_FORMATS.to_vec(),
        "ar24" => vec![Fourcc::ARGB8888],
        "nv12" => vec![Fourcc::NV12],
        other => return Err(format!("--format {other}: ar24, nv12 or all").into()),
    };
    let out_dir: PathBuf = option(args, "--out", std::env::temp_dir().join("dmabridge-wgpu-frames"))?;
    // The producer damages this frame after taking its checksum: the run must fail (exit 4).
    let corrupt_frame = u32::try_from(option::<i64>(args, "--corrupt-frame", -1)?).ok();
    std::fs::create_dir_all(&out_dir)?;
    let validation = validation_wanted();
    let peer_timeout = DEFAULT_PEER_TIMEOUT;
    // --beside-vulkan: every mode again with the lab's consumer, which does the same work
    // (import, sample, composite, checksum, release) through dmabridge's own Vulkan, on the
    // same producer and frames: what a frame costs through wgpu, beside raw Vulkan.
    let consumers: &[Consumer] = if args.iter().any(|a| a == "--beside-vulkan") { &[Consumer::Wgpu, Consumer::Vulkan] } else { &[Consumer::Wgpu] };
    let exe = std::env::current_exe()?;
    let spawn_as = |consumer: Consumer, buffers: BorrowedFd<'_>, control: BorrowedFd<'_>| -> std::io::Result<std::process::Child> {
        // dup() gives fds without FD_CLOEXEC: the consumer inherits exactly these two.
        let b = rustix::io::dup(buffers)?;
        let c = rustix::io::dup(control)?;
        let child = Command::new(&exe)
            .arg(consumer.command())
            .args(["--buffers-fd", &b.as_raw_fd().to_string(), "--control-fd", &c.as_raw_fd().to_string()])
            .args(["--peer-timeout", &peer_timeout.as_secs_f64().to_string()])
            .spawn();
        drop((b, c));
        child
    };
    let mut failed = false;
    let mut leaked = 0i64;
    let mut ran = 0;
    println!("{:<8} {:<10} {:<6} {:>9} {:>10} {:>11}  import path", "consumer", "mode", "format", "size", "verified", "µs/frame");
    let mut costs: Vec<(Consumer, Mode, Fourcc, f64)> = Vec::new();
    for (fourcc, &consumer) in formats.iter().flat_map(|f| consumers.iter().map(move |c| (*f, c))) {
        let mut spawn = |buffers: BorrowedFd<'_>, control: BorrowedFd<'_>| spawn_as(consumer, buffers, control);
        if fourcc == Fourcc::NV12 && (width % 4 != 0 || height % 2 != 0) {
            return Err("an NV12 frame needs a width that is a multiple of 4 and an even height".into());
        }
        let config = DemoConfig {
            fourcc,
            frames,
            width,
            height,
            modes: vec![Mode::ZeroCopy, Mode::Copy],
            out_dir: out_dir.clone(),
            corrupt_frame,
            validation,
            peer_timeout,
        };
        let outcome = producer::run(&config, &mut spawn).map_err(|e| format!("{}: {e}", fourcc.trimmed()))?;
        for r in &outcome.results {
            let j = &r.json;
            let verified = j["verified_frames"].as_u64().unwrap_or(0);
            // sync-file: how many frames came with an acquire fence and went back with a release fence.
            let fences = match (j["fences"]["acquire_sent"].as_u64(), j["fences"]["release_received"].as_u64()) {
                (Some(a), Some(r)) if j["sync"] == "sync-file" => format!(", fences: {a} acquire, {r} release"),
                _ => String::new(),
            };
            let consumer_us = j["consumer_us"]["median"].as_f64().unwrap_or(0.0);
            costs.push((consumer, r.mode, fourcc, consumer_us));
            println!(
                "{:<8} {:<10} {:<6} {:>9} {:>10} {:>11.0}  {} (consumer {:.0} µs/frame; sync {}{fences})",
                consumer.name(),
                r.mode.name(),
                fourcc.trimmed(),
                format!("{width}x{height}"),
                format!("{verified}/{frames}"),
                r.frame.median,
                j["import_path"].as_str().unwrap_or("?"),
                consumer_us,
                j["sync"].as_str().unwrap_or("?"),
            );
            failed |= verified != u64::from(frames) || r.mismatches != 0;
            ran += 1;
        }
        for (mode, reason) in &outcome.unavailable {
            println!("{:<8} {:<10} {:<6} unavailable: {reason}", consumer.name(), mode.name(), fourcc.trimmed());
        }
        leaked += outcome.leaked_fds;
    }
    println!("µs/frame: median, producer (render, send) + consumer (receive, import, draw, verify, release)");
    for (_, mode, fourcc, wgpu_us) in costs.iter().filter(|c| c.0 == Consumer::Wgpu) {
        if let Some((.., vulkan_us)) = costs.iter().find(|c| c.0 == Consumer::Vulkan && c.1 == *mode && c.2 == *fourcc) {
            println!(
                "the consumer's frame, {} {}: wgpu {wgpu_us:.0} µs, raw Vulkan {vulkan_us:.0} µs (wgpu/Vulkan {:.2})",
                mode.name(),
                fourcc.trimmed(),
                wgpu_us / vulkan_us
            );
        }
    }
    println!("leaked fds (both processes): {leaked}");
    println!("last frame of each mode: {}", out_dir.join("wgpu_frames_*.png").display());
    if failed || leaked != 0 || ran == 0 {
        eprintln!("wgpu_frames: FAILED: {}", if ran == 0 { "no mode ran" } else if failed { "a frame was not verified" } else { "fds leaked" });
        return Ok(ExitCode::from(4));
    }
    Ok(ExitCode::SUCCESS)
}

/// Which consumer a producer run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Consumer {
    /// This program's: wgpu on a device shared with dmabridge.
    Wgpu,
    /// The lab's (`dmabridge demo`'s own): dmabridge's import cache and a Vulkan compute
    /// composite through a YCbCr sampler.
    Vulkan,
}

impl Consumer {
    fn command(self) -> &'static str {
        match self {
            Consumer::Wgpu => "consumer",
            Consumer::Vulkan => "vulkan-consumer",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Consumer::Wgpu => "wgpu",
            Consumer::Vulkan => "vulkan",
        }
    }
}

/// The raw-Vulkan consumer of `--beside-vulkan`: `dmabridge demo`'s own.
fn vulkan_consumer_main(args: &[String]) -> Result<ExitCode, Error> {
    let buffers = inherited(args, "--buffers-fd")?;
    let control = inherited(args, "--control-fd")?;
    let timeout: f64 = option(args, "--peer-timeout", DEFAULT_PEER_TIMEOUT.as_secs_f64())?;
    let timeout = Duration::try_from_secs_f64(timeout).map_err(|e| format!("--peer-timeout {timeout}: {e}"))?;
    dmabridge_lab::demo::consumer::run(buffers, control, validation_wanted(), timeout)?;
    Ok(ExitCode::SUCCESS)
}

// ---- The consumer: the demo's protocol, the work in wgpu. ----

/// Takes an fd number the producer passed on the command line, after checking that it is open.
fn inherited(args: &[String], name: &str) -> Result<OwnedFd, Error> {
    let fd: RawFd = option(args, name, -1)?;
    if fd < 3 {
        return Err(format!("{name} {fd} is not an inherited socket").into());
    }
    // SAFETY: only used for the F_GETFD probe below, which fails cleanly on a closed fd.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_getfd(borrowed).map_err(|e| format!("{name} {fd}: {e}"))?;
    // SAFETY: the fd is open (checked) and the producer handed it to this process to own;
    // nothing else in this process refers to it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)?;
    Ok(owned)
}

fn consumer_main(args: &[String]) -> Result<ExitCode, Error> {
    let buffers = inherited(args, "--buffers-fd")?;
    let control = inherited(args, "--control-fd")?;
    let timeout: f64 = option(args, "--peer-timeout", DEFAULT_PEER_TIMEOUT.as_secs_f64())?;
    let timeout = Duration::try_from_secs_f64(timeout).map_err(|e| format!("--peer-timeout {timeout}: {e}"))?;
    let peer = Peer::parent("producer", timeout);
    peer.apply(&buffers)?;
    peer.apply(&control)?;
    let result = serve(buffers.as_fd(), control.as_fd(), &peer);
    if let Err(e) = &result {
        // The producer reports the consumer's own account of a failure.
        let mut error = e.to_string();
        error.truncate(MAX_TEXT);
        let _ = send_msg(control.as_fd(), &peer, &ToProducer::Failed { error });
    }
    result.map(|()| ExitCode::SUCCESS)
}

fn serve(buffers: BorrowedFd<'_>, control: BorrowedFd<'_>, peer: &Peer) -> Result<(), Error> {
    // Counted across the device's whole life, as the lab's consumer counts: the driver's
    // own threads open and close files while a device lives.
    let fds_before = fd_count()?;
    draw_modes(buffers, control, peer)?;
    let fds_after = fd_count()?;
    let leaked_fds = fds_after as i64 - fds_before as i64;
    send_msg(control, peer, &ToProducer::Final { leaked_fds, fds_before, fds_after, contact_sheet: None })?;
    Ok(())
}

/// The validation layer's messages, through wgpu-hal's log (with `DMABRIDGE_VALIDATION=1`).
static VALIDATION: ValidationLog = ValidationLog::new();

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// Opens the shared device, states what it takes, draws every mode the producer starts and
/// writes each mode's last frame at the end; the device is gone when it returns.
fn draw_modes(buffers: BorrowedFd<'_>, control: BorrowedFd<'_>, peer: &Peer) -> Result<(), Error> {
    let validation = validation_wanted();
    if validation {
        VALIDATION.install().map_err(|e| format!("the validation log: {e}"))?;
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        // DEBUG too: without it wgpu-hal registers no debug messenger, and the layer prints
        // to stdout instead of to the log read here.
        flags: if validation { wgpu::InstanceFlags::VALIDATION | wgpu::InstanceFlags::DEBUG } else { wgpu::InstanceFlags::empty() },
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))?;
    // NV12's plane views need the format; a device without it takes AR24 only.
    let features = adapter.features() & wgpu::Features::TEXTURE_FORMAT_NV12;
    let shared = SharedDevice::open(&adapter, &wgpu::DeviceDescriptor { required_features: features, ..Default::default() })?;
    let engine = shared.engine();
    // What the engine imports for sampling (LINEAR anywhere, through the buffer-copy import),
    // of the formats wgpu reads as they are with this device's features.
    let formats: FormatSet = consumer_formats(engine)?
        .iter()
        .filter(|f| dmabridge_wgpu::wgpu_format(f.fourcc).is_some_and(|(_, needs)| shared.device().features().contains(needs)))
        .copied()
        .collect();
    send_msg(
        control,
        peer,
        &ToProducer::Caps {
            participant: WireParticipant {
                name: "wgpu consumer".into(),
                formats: wire_formats(&formats),
                min_buffers: CONSUMER_MIN_BUFFERS,
                read_only: true,
                device: format!("{} (wgpu {:?})", engine.info().name, adapter.get_info().backend),
                modifiers_extension: engine.has_modifiers(),
                sync: engine.sync_methods().iter().collect(),
            },
        },
    )?;
    let drawer = Drawer::new(&shared);
    let mut last_frames: Vec<(String, u32, u32, Vec<u8>)> = Vec::new();
    let out_dir = loop {
        match recv_msg::<ToConsumer>(control, peer)? {
            ToConsumer::Start { mode, fourcc, width, height, frames, pool, sync, .. } => {
                if sync != SyncMethod::CpuWait && !engine.sync_methods().contains(sync) {
                    return Err(format!("the producer synchronises by {sync}, which this device cannot").into());
                }
                let Some(fourcc) = DEMO_FORMATS.into_iter().find(|f| f.trimmed() == fourcc) else {
                    return Err(format!("the producer sends {fourcc}; this consumer draws AR24 or NV12").into());
                };
                let ctx = ModeCtx { shared: &shared, drawer: &drawer, buffers, control, peer, sync, nv12: fourcc == Fourcc::NV12 };
                let (report, transfer, picture) = ctx.run((width, height), frames, pool)?;
                let timing = Percentiles::of(&report.frame_us);
                last_frames.push((format!("{}_{}", mode.key(), fourcc.trimmed().to_lowercase()), width, height, picture));
                send_msg(control, peer, &ToProducer::ModeDone { report, timing, transfer })?;
            }
            ToConsumer::Bye { out_dir } => break out_dir,
            other => return Err(format!("unexpected {other:?}").into()),
        }
    };
    for (name, w, h, rgba) in &last_frames {
        let rgb: Vec<u8> = rgba.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
        dmabridge_lab::picture::write_png(&Path::new(&out_dir).join(format!("wgpu_frames_{name}.png")), *w, *h, &rgb)?;
    }
    if validation {
        let problems = VALIDATION.take_problems(Some(&shared));
        if !problems.is_empty() {
            return Err(format!("consumer validation layer (wgpu): {}", problems.join("; ")).into());
        }
    }
    Ok(())
}

/// The two pipelines of [`SHADER`] and the buffer their checksum goes to.
struct Drawer {
    rgba: wgpu::RenderPipeline,
    nv12: wgpu::RenderPipeline,
    checksum: wgpu::Buffer,
    /// The checksum, for the CPU.
    checksum_read: wgpu::Buffer,
}

const TARGET_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

impl Drawer {
    fn new(shared: &SharedDevice) -> Drawer {
        let device = shared.device();
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some("wgpu_frames"), source: wgpu::ShaderSource::Wgsl(SHADER.into()) });
        let pipeline = |fragment: &str| {
            device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
                label: Some(fragment),
                layout: None,
                vertex: wgpu::VertexState { module: &module, entry_point: Some("vs"), compilation_options: Default::default(), buffers: &[] },
                primitive: wgpu::PrimitiveState::default(),
                depth_stencil: None,
                multisample: wgpu::MultisampleState::default(),
                fragment: Some(wgpu::FragmentState {
                    module: &module,
                    entry_point: Some(fragment),
                    compilation_options: Default::default(),
                    targets: &[Some(wgpu::ColorTargetState { format: TARGET_FORMAT, blend: None, write_mask: wgpu::ColorWrites::ALL })],
                }),
                multiview_mask: None,
                cache: None,
            })
        };
        let buffer = |usage| device.create_buffer(&wgpu::BufferDescriptor { label: Some("checksum"), size: 4, usage, mapped_at_creation: false });
        Drawer {
            rgba: pipeline("fs_rgba"),
            nv12: pipeline("fs_nv12"),
            checksum: buffer(wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST),
            checksum_read: buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
        }
    }

    /// The bind group that draws `frame`: the texture itself, or NV12's two plane views.
    fn bind(&self, device: &wgpu::Device, frame: &wgpu::Texture, nv12: bool) -> wgpu::BindGroup {
        let view = |format, aspect| frame.create_view(&wgpu::TextureViewDescriptor { format: Some(format), aspect, ..Default::default() });
        let views = if nv12 {
            vec![(1, view(wgpu::TextureFormat::R8Unorm, wgpu::TextureAspect::Plane0)), (2, view(wgpu::TextureFormat::Rg8Unorm, wgpu::TextureAspect::Plane1))]
        } else {
            vec![(0, frame.create_view(&wgpu::TextureViewDescriptor::default()))]
        };
        let mut entries: Vec<wgpu::BindGroupEntry<'_>> =
            views.iter().map(|(binding, v)| wgpu::BindGroupEntry { binding: *binding, resource: wgpu::BindingResource::TextureView(v) }).collect();
        entries.push(wgpu::BindGroupEntry { binding: 3, resource: self.checksum.as_entire_binding() });
        let layout = if nv12 { &self.nv12 } else { &self.rgba }.get_bind_group_layout(0);
        device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some("frame"), layout: &layout, entries: &entries })
    }
}

/// One buffer of the producer's pool, imported once.
struct Import {
    // Field order is drop order: wgpu's objects before the descriptor whose files they read.
    bind: wgpu::BindGroup,
    texture: ImportedTexture,
    identity: BufferIdentity,
    _buf: DmaBuf,
}

struct ModeCtx<'a> {
    shared: &'a SharedDevice,
    drawer: &'a Drawer,
    buffers: BorrowedFd<'a>,
    control: BorrowedFd<'a>,
    peer: &'a Peer,
    sync: SyncMethod,
    nv12: bool,
}

impl ModeCtx<'_> {
    /// Draws one mode's frames; returns its report, its transfer cost and the last frame
    /// as drawn (RGBA).
    fn run(&self, (w, h): (u32, u32), frames: u32, pool: u32) -> Result<(ConsumerReport, TransferTiming, Vec<u8>), Error> {
        let device = self.shared.device();
        let target = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("target"),
            size: wgpu::Extent3d { width: w, height: h, depth_or_array_layers: 1 },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: TARGET_FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let target_view = target.create_view(&wgpu::TextureViewDescriptor::default());
        let row = (w * 4).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let picture = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("last frame"),
            size: u64::from(row) * u64::from(h),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        // Keyed by the producer's buffer id: its pool is recycled, each buffer imported once.
        let mut imports: HashMap<u64, Import> = HashMap::new();
        let mut report = ConsumerReport { max_held: 1, ..ConsumerReport::default() };
        let mut transfers = Vec::with_capacity(frames as usize);
        for expected in 0..frames {
            let IncomingFrame { id, buf, acquire, index, checksum, producer_share, receive, started: t0 } =
                receive_frame((self.buffers, self.control, self.peer), self.sync, pool, expected)?;
            if (buf.width(), buf.height()) != (w, h) || !DEMO_FORMATS.contains(&buf.fourcc()) || (buf.fourcc() == Fourcc::NV12) != self.nv12 {
                return Err(format!("buffer {id} is {} {}x{}, not the mode's {w}x{h}", buf.fourcc().trimmed(), buf.width(), buf.height()).into());
            }
            let importing = CpuSpan::start();
            let identity = buf.identity();
            // A buffer seen before comes back through new fds (dropped here); one whose files
            // changed under the same id is imported again.
            let import = match imports.remove(&id) {
                Some(known) if known.identity == identity => {
                    report.cache_hits += 1;
                    known
                }
                _ => {
                    report.cache_misses += 1;
                    let texture = self.shared.import(&buf)?;
                    let bind = self.drawer.bind(device, texture.texture(), self.nv12);
                    Import { bind, texture, identity, _buf: buf }
                }
            };
            let import = imports.entry(id).or_insert(import);
            let import_cpu = importing.elapsed();
            report.import_path = import.texture.path().to_string();
            let last = index + 1 == frames;
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            encoder.clear_buffer(&self.drawer.checksum, 0, None);
            {
                let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                    label: Some("draw frame"),
                    color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                        view: &target_view,
                        depth_slice: None,
                        resolve_target: None,
                        ops: wgpu::Operations { load: wgpu::LoadOp::Clear(wgpu::Color::BLACK), store: wgpu::StoreOp::Store },
                    })],
                    ..Default::default()
                });
                pass.set_pipeline(if self.nv12 { &self.drawer.nv12 } else { &self.drawer.rgba });
                pass.set_bind_group(0, &import.bind, &[]);
                pass.draw(0..3, 0..1);
            }
            encoder.copy_buffer_to_buffer(&self.drawer.checksum, 0, &self.drawer.checksum_read, 0, 4);
            if last {
                encoder.copy_texture_to_buffer(
                    target.as_image_copy(),
                    wgpu::TexelCopyBufferInfo { buffer: &picture, layout: wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(row), rows_per_image: None } },
                    wgpu::Extent3d { width: w, height: h, depth_or_array_layers: 1 },
                );
            }
            let options = SubmitOptions {
                // sync-file: the acquisition waits for the producer's fence on the GPU.
                wait_sync_files: acquire.into_iter().collect(),
                // A producer that never signals holds this frame back no longer than it may
                // be silent, and never the queue.
                fence_limit: self.peer.timeout,
                export_sync_file: self.sync == SyncMethod::SyncFile,
                ..SubmitOptions::default()
            };
            let mut submitted = self.shared.submit_frame(&[&import.texture], [encoder.finish()], options)?;
            // sync-file: the buffer goes back at once with the release fence, which the
            // producer's GPU waits for before writing it again; cpu-wait: once the draw is done.
            let release = submitted.take_sync_file();
            hand_back((self.buffers, self.peer), self.sync, id, release, |t| submitted.wait(t))?;
            transfers.push(FrameTransfer::new(producer_share, receive, import_cpu));
            let got = read_back(device, &self.drawer.checksum_read, &submitted.wgpu, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))?;
            if got == checksum {
                report.verified += 1;
            } else {
                eprintln!("wgpu_frames: frame {index}: checksum {got:#010x}, the producer's {checksum:#010x}");
                report.mismatches.push(Mismatch { frame: index, expected: checksum, got });
            }
            report.frame_us.push(t0.elapsed().as_secs_f64() * 1e6);
            if last {
                let rows = read_back(device, &picture, &submitted.wgpu, |b| b.chunks(row as usize).flat_map(|r| &r[..w as usize * 4]).copied().collect::<Vec<u8>>())?;
                return match recv_msg::<ToConsumer>(self.control, self.peer)? {
                    ToConsumer::End => Ok((report, TransferTiming::of(&transfers, false), rows)),
                    other => Err(format!("expected the end of the mode, got {other:?}").into()),
                };
            }
        }
        Err("a mode of no frames".into())
    }
}

/// What `read` makes of `buffer`'s bytes once `submission` (which wrote them) is done.
fn read_back<T>(device: &wgpu::Device, buffer: &wgpu::Buffer, submission: &wgpu::SubmissionIndex, read: impl FnOnce(&[u8]) -> T) -> Result<T, Error> {
    let slice = buffer.slice(..);
    let mapped = std::sync::Arc::new(Mutex::new(None));
    let done = mapped.clone();
    slice.map_async(wgpu::MapMode::Read, move |r| *done.lock().unwrap_or_else(|e| e.into_inner()) = Some(r));
    device.poll(wgpu::PollType::Wait { submission_index: Some(submission.clone()), timeout: Some(FRAME_TIMEOUT) })?;
    mapped.lock().unwrap_or_else(|e| e.into_inner()).take().ok_or("the read-back was not mapped")??;
    let value = read(&slice.get_mapped_range()?);
    buffer.unmap();
    Ok(value)
}
