//! The `dmabridge` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod allocate;
mod bench;
mod convert;
mod demo;
mod display_check;
mod frame;
mod import;
mod negotiate;
mod probe;
mod view;
mod wayland_demo;

/// What `dmabridge --help` says after the commands: the limits and the access rights.
const AFTER_HELP: &str = "\
Limits (checked before anything is allocated or read):
  collections: 64 tokens, 64 buffers, 16384 pixels a side, 1 GiB per buffer (a holder's
  min-size over it is refused naming the holder); base alignment at most 4096 (the page a
  memfd or dma-buf starts on), refused by every allocator above it
  cost cache: a regular file only, opened without blocking, at most 1 MiB
  reports: at most 16 MiB of JSON, 1024 entries, dimensions up to 65536
Access rights:
  a read-only holder gets O_RDONLY fds: the kernel refuses it write(2), writable mappings and
  mprotect. Real dma-bufs cannot be reopened; memfds are mode 0600, so another user cannot
  reopen one writable through /proc/self/fd (the same user can: one trust domain).
  A write-only fd is refused wherever a frame is described.";

#[derive(Parser)]
#[command(name = "dmabridge", version, about = "Share images between GPUs, codecs, displays and compositors without copying", after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Which DRM format+modifier pairs the Vulkan device can import and export, per usage.
    Probe(probe::ProbeArgs),
    /// Validate and import a dma-buf given as inherited fds, read it back through the GPU.
    Import(import::ImportArgs),
    /// Convert between tiled and linear layouts, and between YUV and RGB, on the GPU.
    Convert(convert::ConvertArgs),
    /// Reconcile participants' formats and constraints: shared buffers, a copy plan, or why not.
    Negotiate(negotiate::NegotiateArgs),
    /// Negotiate like `negotiate`, then allocate the collection on the live device, honouring every constraint.
    Allocate(allocate::AllocateArgs),
    /// Two processes, a producer and a consumer, pass animated frames zero-copy and by GPU copy; summary, table and contact sheet.
    Demo(demo::DemoArgs),
    /// The demo's consumer process (started by `demo` with inherited sockets).
    #[command(hide = true)]
    DemoConsumer(demo::ConsumerArgs),
    /// The decoder demo's consumer and recorder processes (started by `demo --producer decoder`).
    #[command(hide = true)]
    DemoDecoderPeer(demo::DecoderPeerArgs),
    /// Per-frame cost of the zero-copy, GPU-copy and CPU-copy paths per size, against memcpy.
    Bench(bench::BenchArgs),
    /// Show frames on a KMS device and read them back through its writeback connector (vkms): compared byte for byte with their sources.
    DisplayCheck(display_check::DisplayCheckArgs),
    /// Show a raw frame (tightly packed planes) in a window, imported as a dma-buf.
    View(view::ViewArgs),
    /// Show animated frames on the compositor in WAYLAND_DISPLAY through linux-dmabuf.
    WaylandDemo(wayland_demo::WaylandDemoArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DMABRIDGE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // Bad input exits 1 (the commands' contracts), not clap's default 2; help and
    // --version still print and succeed.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Probe(args) => probe::run(&args),
        Command::Import(args) => import::run(&args),
        Command::Convert(args) => convert::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::DemoConsumer(args) => demo::run_consumer(&args),
        Command::DemoDecoderPeer(args) => demo::run_decoder_peer(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Negotiate(args) => negotiate_with_device(&args),
        Command::Allocate(args) => allocate::run(&args, &load_participant),
        Command::View(args) => view::run(&args),
        Command::DisplayCheck(args) => display_check::run(&args),
        Command::WaylandDemo(args) => wayland_demo::run(&args),
    }
}

/// Success, unless validation was on and the layer reported a problem.
fn exit_status(adapter: &dmabridge::Adapter) -> ExitCode {
    let problems = adapter.validation().map(|v| v.problems()).unwrap_or_default();
    if problems.is_empty() {
        return ExitCode::SUCCESS;
    }
    for p in &problems {
        eprintln!("validation: {p}");
    }
    ExitCode::from(3)
}

/// The live device a `--vulkan` participant names: opened where it can be (its participant
/// then states the LINEAR pitch its driver takes, measured with images), or answering
/// queries only (radv's null device), with the reason it was not opened.
#[derive(Clone)]
pub enum LiveDevice {
    Opened(dmabridge::Engine),
    QueriesOnly(dmabridge::Adapter, String),
}

impl LiveDevice {
    /// The device's adapter, opened where it can be.
    fn of(adapter: dmabridge::Adapter) -> Self {
        match adapter.open(&dmabridge::EngineOptions::from_env()) {
            Ok(engine) => LiveDevice::Opened(engine),
            Err(e) => {
                tracing::debug!(error = %e, "the device is not opened: its participants are from its queries alone");
                LiveDevice::QueriesOnly(adapter, e.to_string())
            }
        }
    }

    fn participant(&self, req: &dmabridge::ParticipantRequest) -> Result<dmabridge_interop::negotiate::Participant, dmabridge::FormatSupportError> {
        match self {
            LiveDevice::Opened(engine) => engine.participant(req),
            // The pitch a driver takes is measured with images, which this device cannot
            // make: the report says so rather than let `stride alignment 1` stand as its rule.
            LiveDevice::QueriesOnly(adapter, _) => adapter.participant(req).map(|mut p| {
                let name = p.device.take().unwrap_or_else(|| adapter.info().name.clone());
                p.device = Some(format!("{name}; queries only, so the LINEAR row pitch its driver needs is not measured"));
                p
            }),
        }
    }
}

/// `negotiate`, with each `--vulkan NAME=USE[:device=D]` answered by the live device it
/// names, for exactly that use. Each device is made once and opened where it can be; a
/// driver that answers queries and can do nothing more (radv's null device) takes part by
/// its queries, and two drivers in one process (both ICDs in `VK_ICD_FILENAMES`) are two
/// participants. `--paths` asks the cost model of the default device's engine.
fn negotiate_with_device(args: &negotiate::NegotiateArgs) -> ExitCode {
    let devices: std::cell::RefCell<std::collections::HashMap<Option<String>, Result<LiveDevice, String>>> = Default::default();
    let device = |name: Option<&str>| -> Result<LiveDevice, String> {
        devices
            .borrow_mut()
            .entry(name.map(str::to_owned))
            .or_insert_with(|| {
                let mut options = dmabridge::EngineOptions::from_env();
                if let Some(d) = name {
                    options.device = Some(dmabridge::DeviceSelector::parse(d));
                }
                dmabridge::Adapter::new(&options).map(LiveDevice::of).map_err(|e| e.to_string())
            })
            .clone()
    };
    let converter = std::cell::OnceCell::new();
    negotiate::run_with(
        args,
        &|spec| load_participant(spec, &device),
        &|c| {
            let conv = converter.get_or_init(|| match device(None)? {
                LiveDevice::Opened(engine) => dmabridge::Converter::new(&engine).map_err(|e| e.to_string()),
                LiveDevice::QueriesOnly(_, why) => Err(why),
            });
            let choice = conv.as_ref().map_err(|e| format!("no Vulkan device: {e}"))?.choose(c, None).map_err(|e| e.to_string())?;
            Ok(choice.explain())
        },
    )
}

/// Loads one participant: the two live kinds here (`--vulkan NAME=USE[:device=D]` is the
/// device `device(D)` gives, for exactly that use; `--wayland NAME` asks the compositor
/// `WAYLAND_DISPLAY` names), every other kind through the library's loader.
fn load_participant(
    spec: &dmabridge_interop::spec::ParticipantSpec,
    device: &dyn Fn(Option<&str>) -> Result<LiveDevice, String>,
) -> Result<dmabridge_interop::negotiate::Participant, dmabridge_interop::spec::SpecError> {
    use dmabridge_interop::spec::{PeerKind, SpecError};
    match spec.kind {
        PeerKind::Vulkan => {}
        PeerKind::Wayland => {
            let formats = dmabridge::wayland::query_formats(&dmabridge::wayland::Display::Env).map_err(|e| spec.peer_error(e))?;
            let p = formats.participant();
            return Ok(dmabridge_interop::negotiate::Participant { name: spec.name.clone(), ..p }.with_sync(dmabridge_interop::peers::wayland::SYNC_METHODS));
        }
        _ => return spec.load(),
    }
    let peer = |reason: String| SpecError::Peer { participant: spec.name.clone(), kind: spec.kind, reason };
    // The device is the value's `device=` part; the rest is the use.
    let (device_parts, use_parts): (Vec<&str>, Vec<&str>) = spec.value.split(':').partition(|p| p.starts_with("device="));
    let named = match device_parts.as_slice() {
        [] => None,
        [d] => Some(d.trim_start_matches("device=")),
        _ => return Err(peer("device= is given more than once".into())),
    };
    let usage = dmabridge::ImageUse::parse(&use_parts.join(":")).map_err(|e| spec.peer_error(e))?;
    let request = dmabridge::ParticipantRequest::new(spec.name.as_str(), usage, dmabridge::Direction::Both);
    let live = device(named).map_err(|e| peer(format!("no Vulkan device: {e}")))?;
    live.participant(&request).map_err(|e| peer(e.to_string()))
}
