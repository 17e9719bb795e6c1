//! `dmabridge demo [--frames N] [--out DIR] [--mode zero-copy|copy|both]`: the producer
//! process; it starts the consumer as `dmabridge demo-consumer` with two inherited sockets.
//!
//! Exit status: 0 when every frame verified and no fd leaked; 4 when a frame failed its
//! checksum; 5 when fds leaked; 1 for any other failure (message on stderr).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use dmabridge::interop::Fourcc;
use dmabridge_lab::decoder::peer::Role;
use dmabridge_lab::demo::config::{DemoConfig, Mode};
use dmabridge_lab::demo::control::DEFAULT_PEER_TIMEOUT;
use dmabridge_lab::demo::{consumer, producer};
use dmabridge_lab::kernel_codecs as vicodec;
use dmabridge_lab::{decoder, live};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    ZeroCopy,
    Copy,
    Both,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    #[value(name = "AR24", alias = "ar24")]
    Ar24,
    #[value(name = "NV12", alias = "nv12")]
    Nv12,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProducerArg {
    /// A GPU renderer: animated frames, zero-copy and by GPU copy.
    Render,
    /// A V4L2 stateless decoder: NV12 frames with reference frames, buffers from
    /// collections, a resolution change and a late-joining recorder (three processes).
    Decoder,
    /// A live V4L2 camera (`--device`), negotiated with the Vulkan device and, with
    /// `--kms-device`, a KMS plane, all from their drivers' own lists (one process).
    V4l2,
    /// The kernel's vicodec (kernel lab): its stateful encoder makes an FWHT stream, its
    /// stateless decoder decodes it through the request API into collection buffers, and
    /// every frame is verified through the device against its stateful decoder.
    Vicodec,
    /// The kernel's visl (kernel lab): a short MPEG-2 request sequence (I, P and B
    /// pictures with their references) into collection buffers, each frame read back
    /// through the device.
    Visl,
}

#[derive(clap::Args)]
pub struct DemoArgs {
    /// What produces the frames.
    #[arg(long, value_enum, default_value = "render")]
    producer: ProducerArg,
    /// Decoder and vicodec: the stream switches size at this frame (decoder: 1280x720 to
    /// 1920x1080; vicodec: 640x480 to 1280x720), and a new collection is negotiated and
    /// allocated.
    #[arg(long, value_name = "N")]
    resolution_change_at: Option<u32>,
    /// Vicodec only: an I frame every N frames (1 to 16), P frames between.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=16))]
    gop: u32,
    /// Vicodec only: decode each P frame into its own reference's buffer, breaking the
    /// decoder's buffer rule on purpose (the verification must fail).
    #[arg(long, hide = true)]
    break_references: bool,
    /// Decoder only: a read-only recorder process attaches to the running collection at this
    /// frame and verifies every frame after it (if it dies, the loss is reported and the
    /// stream goes on).
    #[arg(long, value_name = "N")]
    late_join_at: Option<u32>,
    /// V4L2 only: the camera's video node.
    #[arg(long, value_name = "/dev/videoN")]
    device: Option<PathBuf>,
    /// V4L2 only: the display, a KMS card and optionally its plane (default: the first
    /// primary plane).
    #[arg(long, value_name = "/dev/dri/cardN[:PLANE_ID]")]
    kms_device: Option<String>,
    /// V4L2 only: read every frame shown back through the display's writeback connector
    /// (vkms) and compare it with the frame (XR24 and AR24 frames).
    #[arg(long, requires = "kms_device")]
    writeback: bool,
    /// Frames per mode.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    frames: u32,
    /// Where summary.json and contact_sheet.png are written (created if missing).
    #[arg(long, default_value = "demo-out")]
    out: PathBuf,
    /// Which modes run: zero-copy, copy (a forced GPU copy), or both.
    #[arg(long, value_enum, default_value = "both")]
    mode: ModeArg,
    /// Frame format: AR24 (the default), or NV12 (sampled through a YCbCr conversion; width
    /// a multiple of 4, height of 2). With --producer v4l2: the camera's format (default: the
    /// first the camera lists that the device imports).
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    #[arg(long, default_value_t = 1280, value_parser = clap::value_parser!(u32).range(16..=8192))]
    width: u32,
    #[arg(long, default_value_t = 720, value_parser = clap::value_parser!(u32).range(16..=8192))]
    height: u32,
    /// Damage frame K after its checksum is taken, to show that verification catches it.
    #[arg(long, hide = true)]
    corrupt_frame: Option<u32>,
    /// Run both processes with the Vulkan validation layer (also DMABRIDGE_VALIDATION=1);
    /// any message fails the demo.
    #[arg(long)]
    validation: bool,
    /// Seconds either process waits for the other before it gives up with an error naming it.
    #[arg(long, default_value_t = DEFAULT_PEER_TIMEOUT.as_secs_f64(), value_parser = peer_timeout)]
    peer_timeout: f64,
}

fn peer_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.01..=3600.0).contains(&v) {
        return Err(format!("{v} s: expected 0.01 to 3600 seconds"));
    }
    Ok(v)
}

#[derive(clap::Args)]
pub struct ConsumerArgs {
    #[arg(long)]
    buffers_fd: RawFd,
    #[arg(long)]
    control_fd: RawFd,
    #[arg(long)]
    validation: bool,
    #[arg(long, default_value_t = DEFAULT_PEER_TIMEOUT.as_secs_f64(), value_parser = peer_timeout)]
    peer_timeout: f64,
}

fn validation_wanted(flag: bool) -> bool {
    flag || std::env::var("DMABRIDGE_VALIDATION").is_ok_and(|v| v == "1" || v == "true")
}

/// The arguments of the hidden `demo-decoder-peer` subcommand.
#[derive(clap::Args)]
pub struct DecoderPeerArgs {
    #[arg(long)]
    role: Role,
    #[arg(long)]
    control_fd: RawFd,
    #[arg(long)]
    validation: bool,
    #[arg(long, default_value_t = DEFAULT_PEER_TIMEOUT.as_secs_f64(), value_parser = peer_timeout)]
    peer_timeout: f64,
}

pub fn run_decoder_peer(args: &DecoderPeerArgs) -> ExitCode {
    let control = match inherited(args.control_fd, "control") {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dmabridge demo-decoder-peer: {e}");
            return ExitCode::from(1);
        }
    };
    match decoder::peer::run(args.role, control, args.validation, std::time::Duration::from_secs_f64(args.peer_timeout)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dmabridge demo-decoder-peer ({}): {e}", args.role.name());
            ExitCode::from(1)
        }
    }
}

/// A producer's outcome with its `summary.json` written into `out`; on failure (the run's,
/// said on stderr, or the file's) the exit status to return.
fn summarised<T, E: std::fmt::Display>(out: &std::path::Path, run: Result<T, E>, summary: impl Fn(&T) -> &serde_json::Value) -> Result<(T, PathBuf), ExitCode> {
    let outcome = run.map_err(|e| {
        eprintln!("dmabridge demo: {e}");
        ExitCode::from(1)
    })?;
    let path = write_summary(out, summary(&outcome))?;
    Ok((outcome, path))
}

/// Writes `summary.json` into `out`; the exit status to return when it cannot.
fn write_summary(out: &std::path::Path, summary: &serde_json::Value) -> Result<PathBuf, ExitCode> {
    let path = out.join("summary.json");
    let text = serde_json::to_string_pretty(summary).unwrap_or_else(|_| "{}".into());
    dmabridge::interop::user_file::write_regular(&path, (text + "\n").as_bytes()).map_err(|e| {
        eprintln!("dmabridge demo: {e}");
        ExitCode::from(1)
    })?;
    Ok(path)
}

fn run_live(args: &DemoArgs, out: PathBuf, validation: bool) -> ExitCode {
    let Some(device) = args.device.clone() else {
        eprintln!("dmabridge demo: --producer v4l2 needs --device /dev/videoN");
        return ExitCode::from(1);
    };
    let display = match args.kms_device.as_deref().map(|v| {
        use dmabridge::interop::spec::{ParticipantSpec, PeerKind};
        let spec = ParticipantSpec { kind: PeerKind::KmsDevice, name: "display".into(), value: v.to_owned() };
        spec.kms_device_target().map(|(path, plane)| (PathBuf::from(path), plane))
    }) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => {
            eprintln!("dmabridge demo: --kms-device: {e}");
            return ExitCode::from(1);
        }
    };
    let config = live::LiveConfig {
        device,
        display,
        fourcc: args.format.map(|f| match f {
            FormatArg::Ar24 => Fourcc::ARGB8888,
            FormatArg::Nv12 => Fourcc::NV12,
        }),
        frames: args.frames,
        width: args.width,
        height: args.height,
        validation,
        out_dir: out.clone(),
        writeback: args.writeback,
    };
    let (outcome, summary_path) = match summarised(&out, live::run(&config), |o| &o.summary) {
        Ok(done) => done,
        Err(code) => return code,
    };
    let s = &outcome.summary;
    println!(
        "dmabridge demo --producer v4l2: {} ({}) -> {} ({} frames)",
        s["camera"]["device"].as_str().unwrap_or("?"),
        s["camera"]["card"].as_str().unwrap_or("?"),
        s["vulkan_device"].as_str().unwrap_or("?"),
        args.frames
    );
    for p in s["negotiation"]["participants"].as_array().into_iter().flatten() {
        let formats = p["formats"].as_array().map_or_else(|| "any".to_owned(), |f| f.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(","));
        println!("  {:<8} {}: {}", p["name"].as_str().unwrap_or("?"), p["from"].as_str().unwrap_or("?"), formats);
    }
    println!("negotiated: {} ({})", s["negotiation"]["outcome"].as_str().unwrap_or("?"), s["stream"]["format"].as_str().unwrap_or("?"));
    println!("camera -> device: {}/{} frames verified against the camera's mapping ({})", s["verified_frames"], args.frames, s["import_path"].as_str().unwrap_or("?"));
    println!("picture: {}/{} frames show vivid's colour bars", s["pattern_frames"], args.frames);
    if let Some(d) = s["display"].as_object() {
        let how = if d["zero_copy"].as_bool() == Some(true) {
            "zero-copy: the camera's buffers are the framebuffers".to_owned()
        } else {
            let how = match d["copy_plan"].as_str() {
                Some(plan) => format!("the copy plan's {plan}"),
                None => format!("its own dumb buffer in {}, written by the engine's conversion", d["copy_format"].as_str().unwrap_or("?")),
            };
            format!("{how}; not the camera's buffers because {}", d["refused"].as_str().unwrap_or("?"))
        };
        println!("camera -> display {}: {} frames shown ({} modeset, {} flips), {how}", d["device"].as_str().unwrap_or("?"), d["frames_shown"], d["modesets"], d["flips"]);
        match d["blocking_flips_because"].as_str() {
            Some(why) => println!("flips: blocking commits (the driver refused a non-blocking flip with an event: {why})"),
            None => println!("flips: non-blocking, {} page-flip events received", d["flip_events"]),
        }
        if let Some(w) = d["writeback"].as_object() {
            println!(
                "written back: {}/{} frames shown match the frame ({} byte for byte; the X/A byte comes back 0xff), {:.2} ms a round trip",
                w["frames_matched"], d["frames_shown"], w["frames_identical"], w["round_trip_ms_mean"].as_f64().unwrap_or(0.0)
            );
        }
        if let Some(png) = d["png"].as_str() {
            println!("the display's last frame: {png}");
        }
    }
    println!("leaked fds: {}", outcome.leaked_fds);
    println!("summary: {}", summary_path.display());
    if !outcome.problems.is_empty() {
        for p in &outcome.problems {
            eprintln!("dmabridge demo: {p}");
        }
        return ExitCode::from(4);
    }
    if outcome.leaked_fds != 0 {
        eprintln!("dmabridge demo: {} fds leaked", outcome.leaked_fds);
        return ExitCode::from(5);
    }
    ExitCode::SUCCESS
}

fn run_decoder(args: &DemoArgs, out: PathBuf, validation: bool) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("dmabridge demo: cannot find this program to start the peers: {e}");
            return ExitCode::from(1);
        }
    };
    let config = decoder::DecoderConfig {
        frames: args.frames,
        resolution_change_at: args.resolution_change_at,
        late_join_at: args.late_join_at,
        out_dir: out.clone(),
        validation,
        peer_timeout: std::time::Duration::from_secs_f64(args.peer_timeout),
        corrupt_frame: args.corrupt_frame,
    };
    let (outcome, summary_path) = match summarised(&out, decoder::run(&config, &exe), |o| &o.summary) {
        Ok(done) => done,
        Err(code) => return code,
    };
    let s = &outcome.summary;
    println!("dmabridge demo --producer decoder on {} ({} frames)", s["device"].as_str().unwrap_or("?"), args.frames);
    println!();
    println!("{:<11} {:>10} {:>8} {:>20} {:>15} {:>9}", "collection", "size", "buffers", "modifier", "frames carried", "released");
    for c in s["collections"].as_array().into_iter().flatten() {
        println!(
            "{:<11} {:>10} {:>8} {:>20} {:>15} {:>9}",
            c["index"].to_string(),
            c["size"].as_str().unwrap_or("?"),
            c["buffer_count"].to_string(),
            c["modifier"].as_str().unwrap_or("?"),
            c["frames_carried"].to_string(),
            c["buffers_released"].to_string()
        );
    }
    println!();
    println!("consumer: {}/{} frames verified through the device ({})", s["verified_frames"], args.frames, s["consumer"]["import_path"].as_str().unwrap_or("?"));
    if let Some(l) = s["late_joiner"].as_object() {
        match l["lost"].as_object() {
            Some(lost) => println!(
                "late joiner (read-only recorder, attached at frame {}): lost at frame {}: {}",
                l["joined_at"],
                lost["at_frame"],
                lost["reason"].as_str().unwrap_or("?")
            ),
            None => println!(
                "late joiner (read-only recorder, attached at frame {}): {}/{} frames verified, writes through its fds refused: {}",
                l["joined_at"], l["frames_verified"], l["frames"], l["writes_refused"]
            ),
        }
    }
    println!("dropped frames: {}; reference frames broken: {}", s["dropped_frames"], s["reference_errors"]);
    println!("leaked fds: {}", s["leaked_fds"]);
    println!("summary: {}", summary_path.display());
    for w in &outcome.warnings {
        eprintln!("dmabridge demo: warning: {w}");
    }
    if !outcome.ok {
        for p in &outcome.problems {
            eprintln!("dmabridge demo: {p}");
        }
        return ExitCode::from(4);
    }
    ExitCode::SUCCESS
}

/// `--producer vicodec` or `--producer visl`: a kernel stateless decoder into collection
/// buffers.
fn run_stateless(args: &DemoArgs, out: &std::path::Path, validation: bool) -> ExitCode {
    let timeout = std::time::Duration::from_secs_f64(args.peer_timeout);
    let run = match args.producer {
        ProducerArg::Visl => vicodec::visl::run(args.frames, validation, timeout),
        _ => vicodec::run(&vicodec::VicodecConfig {
            frames: args.frames,
            resolution_change_at: args.resolution_change_at,
            gop: args.gop,
            validation,
            timeout,
            break_references: args.break_references,
        }),
    };
    let (outcome, summary_path) = match summarised(out, run, |o| &o.summary) {
        Ok(done) => done,
        Err(code) => return code,
    };
    let s = &outcome.summary;
    let stream = match s["pictures"].as_str() {
        Some(p) => format!("MPEG-2 pictures {p} in decode order"),
        None => format!("FWHT, an I frame every {}", args.gop),
    };
    println!("dmabridge demo --producer {}: {} ({} frames, {stream})", if args.producer == ProducerArg::Visl { "visl" } else { "vicodec" }, s["device"].as_str().unwrap_or("?"), args.frames);
    println!();
    println!("{:<10} {:>7} {:>7} {:>9} {:>8} {:>8} {:>9} {:>10}", "size", "frames", "I/P", "verified", "buffers", "stride", "in flight", "collection");
    for r in s["segments"].as_array().into_iter().flatten() {
        let frames = r["frames"].as_u64().unwrap_or(0);
        let intra = r["intra_frames"].as_u64().unwrap_or(0);
        println!(
            "{:<10} {:>7} {:>7} {:>9} {:>8} {:>8} {:>9} {:>10}",
            r["size"].as_str().unwrap_or("?"),
            frames,
            format!("{intra}/{}", frames.saturating_sub(intra)),
            r["verified"].to_string(),
            r["buffer_count"].to_string(),
            r["planes"][0][1].to_string(),
            r["most_in_flight"].to_string(),
            r["collection"].as_str().unwrap_or("?"),
        );
    }
    println!();
    if let Some(first) = s["segments"].get(0).and_then(|v| v.as_object()) {
        println!("participants: {}", first["participants"].as_array().into_iter().flatten().filter_map(|p| p.as_str()).collect::<Vec<_>>().join(", "));
        println!("import: {}", first["import_path"].as_str().unwrap_or("?"));
    }
    match args.producer {
        ProducerArg::Visl => println!(
            "visl: {}/{} frames decoded statelessly (requests) into collection buffers and written by visl, read back through the device",
            s["verified_frames"], args.frames
        ),
        _ => println!(
            "vicodec: {}/{} frames decoded statelessly (requests) into collection buffers and equal, read back through the device, to the stateful decoder's",
            s["verified_frames"], args.frames
        ),
    }
    println!("references honoured: {}/{} frames with references decoded with every reference untouched in its buffer", s["references_honoured"], s["p_frames"]);
    for r in s["segments"].as_array().into_iter().flatten() {
        for m in r["mismatches"].as_array().into_iter().flatten() {
            println!("mismatch: frame {} differs from the stateful decoder's in {} bytes", m[0], m[1]);
        }
    }
    println!("drained: {}; leaked fds: {}", if s["drained"] == true { "every frame accounted for" } else { "frames missing" }, s["leaked_fds"]);
    println!(
        "ms/frame (lab kernel, TCG; collection set-up included): stateless decode + import + read-back {:.2}{}",
        s["ms_per_frame_stateless"].as_f64().unwrap_or(0.0),
        s["ms_per_frame_stateful_encode_and_decode"].as_f64().map_or(String::new(), |v| format!("; stateful encode + reference decode {v:.2}"))
    );
    println!("summary: {}", summary_path.display());
    for v in s["validation"].as_array().into_iter().flatten() {
        eprintln!("dmabridge demo: validation: {v}");
    }
    if !outcome.ok {
        eprintln!("dmabridge demo: the stream did not hold (see above)");
        return ExitCode::from(4);
    }
    ExitCode::SUCCESS
}

pub fn run(args: &DemoArgs) -> ExitCode {
    if args.producer == ProducerArg::Render && (args.resolution_change_at.is_some() || args.late_join_at.is_some()) {
        eprintln!("dmabridge demo: --resolution-change-at and --late-join-at need --producer decoder");
        return ExitCode::from(1);
    }
    let modes = match args.mode {
        ModeArg::ZeroCopy => vec![Mode::ZeroCopy],
        ModeArg::Copy => vec![Mode::Copy],
        ModeArg::Both => vec![Mode::ZeroCopy, Mode::Copy],
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("dmabridge demo: cannot create {}: {e}", args.out.display());
        return ExitCode::from(1);
    }
    let out = std::fs::canonicalize(&args.out).unwrap_or_else(|_| args.out.clone());
    let validation = validation_wanted(args.validation);
    if args.producer == ProducerArg::Decoder {
        return run_decoder(args, out, validation);
    }
    if args.producer == ProducerArg::V4l2 {
        return run_live(args, out, validation);
    }
    if matches!(args.producer, ProducerArg::Vicodec | ProducerArg::Visl) {
        return run_stateless(args, &out, validation);
    }
    if args.device.is_some() || args.kms_device.is_some() {
        eprintln!("dmabridge demo: --device and --kms-device need --producer v4l2");
        return ExitCode::from(1);
    }
    let fourcc = match args.format.unwrap_or(FormatArg::Ar24) {
        FormatArg::Ar24 => Fourcc::ARGB8888,
        FormatArg::Nv12 => Fourcc::NV12,
    };
    if fourcc == Fourcc::NV12 && (args.width % 4 != 0 || args.height % 2 != 0) {
        eprintln!("dmabridge demo: an NV12 frame needs a width that is a multiple of 4 and an even height");
        return ExitCode::from(1);
    }
    let config = DemoConfig {
        fourcc,
        frames: args.frames,
        width: args.width,
        height: args.height,
        modes,
        out_dir: out.clone(),
        corrupt_frame: args.corrupt_frame,
        validation,
        peer_timeout: std::time::Duration::from_secs_f64(args.peer_timeout),
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("dmabridge demo: cannot find this program to start the consumer: {e}");
            return ExitCode::from(1);
        }
    };
    let mut spawn = |buffers: BorrowedFd<'_>, control: BorrowedFd<'_>| -> std::io::Result<std::process::Child> {
        // dup() gives fds without FD_CLOEXEC: the consumer inherits exactly these two.
        let b = rustix::io::dup(buffers)?;
        let c = rustix::io::dup(control)?;
        let mut cmd = Command::new(&exe);
        cmd.arg("demo-consumer")
            .arg("--buffers-fd")
            .arg(b.as_raw_fd().to_string())
            .arg("--control-fd")
            .arg(c.as_raw_fd().to_string());
        if validation {
            cmd.arg("--validation");
        }
        cmd.arg("--peer-timeout").arg(args.peer_timeout.to_string());
        let child = cmd.spawn();
        drop((b, c));
        child
    };
    let (outcome, summary_path) = match summarised(&out, producer::run(&config, &mut spawn), |o| &o.summary) {
        Ok(done) => done,
        Err(code) => return code,
    };

    println!("dmabridge demo on {} ({} frames per mode)", outcome.device, args.frames);
    println!();
    println!(
        "{:<10} {:<6} {:>10} {:>7} {:>14} {:>12} {:>13} {:>9} {:<24} verified",
        "mode", "format", "size", "frames", "µs/frame med", "µs/frame p99", "transfer µs", "GB/s", "import"
    );
    for r in &outcome.results {
        let j = &r.json;
        let verified = j["verified_frames"].as_u64().unwrap_or(0);
        println!(
            "{:<10} {:<6} {:>10} {:>7} {:>14.0} {:>12.0} {:>13.1} {:>9.2} {:<24} {}/{}",
            r.mode.name(),
            j["format"].as_str().unwrap_or("?"),
            format!("{}x{}", args.width, args.height),
            args.frames,
            r.frame.median,
            r.frame.p99,
            r.transfer.total.median,
            r.gbps,
            j["import_path"].as_str().unwrap_or("?"),
            verified,
            args.frames,
        );
    }
    for (mode, reason) in &outcome.unavailable {
        println!("{:<10} unavailable on this machine: {reason}", mode.name());
    }
    println!();
    println!("µs/frame: producer (render, conversion, send) + consumer (receive, cached import, composite, verify, release);");
    println!("GB/s: frame bytes over that time, rendering included (`dmabridge bench` times the paths alone).");
    print_transfer(&outcome.results);
    println!("leaked fds (both processes): {}", outcome.leaked_fds);
    println!("summary: {}", summary_path.display());
    if let Some(sheet) = outcome.summary["contact_sheet"].as_str() {
        println!("contact sheet: {sheet} (rows: green zero-copy, orange copy)");
    }
    if outcome.mismatches > 0 {
        for r in &outcome.results {
            if let Some(list) = r.json["mismatches"].as_array() {
                for m in list {
                    eprintln!(
                        "dmabridge demo: {} frame {} FAILED verification: checksum {:#010x}, expected {:#010x}",
                        r.mode.name(),
                        m["frame"],
                        m["got"].as_u64().unwrap_or(0),
                        m["expected"].as_u64().unwrap_or(0)
                    );
                }
            }
        }
        return ExitCode::from(4);
    }
    if outcome.leaked_fds != 0 {
        eprintln!("dmabridge demo: {} fds leaked", outcome.leaked_fds);
        return ExitCode::from(5);
    }
    ExitCode::SUCCESS
}

/// Each mode's transfer cost apart from the rendering and the verification that dominate
/// the end-to-end time, and what zero-copy saves of it.
fn print_transfer(results: &[dmabridge_lab::demo::producer::ModeResult]) {
    if results.is_empty() {
        return;
    }
    println!();
    println!("transfer: handoff (descriptor send + receive) + import (cached import + acquire, CPU and GPU) + copy (copy mode:");
    println!("the plan's steps on the producer's GPU), without rendering or verification; each part timed where it runs (CPU");
    println!("time of the thread doing it, GPU time by timestamps); µs per frame:");
    for r in results {
        let t = &r.transfer;
        println!(
            "  {:<10} {:>9.1} (p99 {:>9.1}): handoff {:>7.1}, import {:>8.1}, copy {:>9.1}{}",
            r.mode.name(),
            t.total.median,
            t.total.p99,
            t.handoff.median,
            t.import.median,
            t.copy.median,
            if t.gpu_timed { "" } else { "  (GPU parts not timed: the queue writes no timestamps)" }
        );
    }
    let of = |mode: Mode| results.iter().find(|r| r.mode == mode).map(|r| r.transfer.total.median);
    if let (Some(zero), Some(copy)) = (of(Mode::ZeroCopy), of(Mode::Copy)) {
        let times = if zero > 0.0 { format!(", {:.0}x less", copy / zero) } else { String::new() };
        println!("  zero-copy saves {:.1} µs of transfer per frame against copy{times}", copy - zero);
    }
}

/// Takes ownership of an fd number the parent passed on the command line, after checking
/// that it is open, and marks it close-on-exec.
fn inherited(fd: RawFd, what: &str) -> Result<OwnedFd, String> {
    if fd < 3 {
        return Err(format!("--{what}-fd {fd} is not an inherited socket"));
    }
    // SAFETY: only used for the F_GETFD probe below, which fails cleanly on a closed fd.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_getfd(borrowed).map_err(|e| format!("--{what}-fd {fd}: {e}"))?;
    // SAFETY: the fd is open (checked) and the parent handed it to this process to own: the
    // demo dup()s it for the child and nothing else in this process refers to it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC);
    Ok(owned)
}

pub fn run_consumer(args: &ConsumerArgs) -> ExitCode {
    let (buffers, control) = match (inherited(args.buffers_fd, "buffers"), inherited(args.control_fd, "control")) {
        (Ok(b), Ok(c)) => (b, c),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("dmabridge demo-consumer: {e}");
            return ExitCode::from(1);
        }
    };
    match consumer::run(buffers, control, args.validation, std::time::Duration::from_secs_f64(args.peer_timeout)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dmabridge demo-consumer: {e}");
            ExitCode::from(1)
        }
    }
}
