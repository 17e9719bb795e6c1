//! `dmabridge allocate --width W --height H PARTICIPANT... [--constraint NAME:KEY=VALUE]...`
//!
//! Negotiates exactly like `negotiate` (same participants, same constraints, plus the keys
//! `max-buffers`, `min-size` and `offset-align`), then allocates the shared collection on
//! the live device with [`dmabridge::Engine::allocate`], which honours the merged
//! constraints. Each buffer is then checked through the device: a test pattern is written
//! into its planes at their offsets and strides, and the device's read-back (import, or
//! detile for a tiled layout) must give the pattern back. Read-only participants get fds
//! re-opened `O_RDONLY`, and a write through one must fail.
//!
//! Output: the negotiation's summary, or with `--json` its document (see
//! [`dmabridge_interop::negotiate::Report`]) where `buffers` becomes the list of buffers
//! (`{"modifier", "fds", "planes": [{"fd_index", "offset", "stride", "size", "file"}],
//! "verified"}`, `file` being `dma-buf` or `sealed memfd`) and the count moves to
//! `buffer_count`, plus `layout_source`, `disjoint`, `disjoint_reason`, `memory` (where
//! the memory came from: `dma-heap:system` where the kernel has a system dma-heap,
//! `memfd` elsewhere or when a participant is read-only, with `memory_reason`; `device` for
//! the device's exports), the merged `stride_align`, `offset_align`, `min_size`, `max_buffers`
//! and `domain`, and `read_only` (per read-only participant, whether its fds refuse writes).
//!
//! Exit status: 0 allocated, 2 impossible (the conflicts, or the constraint the device
//! cannot meet, are named), 1 bad input or a device failure. A copy outcome is 2: there is
//! no one collection every participant shares, and `negotiate` shows the plan.

use std::io::Write;
use std::process::ExitCode;

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{check_read_only, classify, file_size, write_all_at, write_planes, DmaBuf, FdTrust};
use dmabridge::interop::negotiate::{Allocation, Outcome, Participant, Report};
use dmabridge::interop::tiling::{test_pattern, tile_to_vec, tiled_size};
use dmabridge::interop::{Layout, TileLayout};
use dmabridge::{AllocateError, Allocated, AllocationSpec, Converter, Engine, EngineOptions, ImageUse, ImportOptions, LayoutSource};
use dmabridge_interop::negotiate::spec::{ParticipantSpec, SpecError};

use crate::negotiate::{negotiation_of, NegotiateArgs};

/// The arguments of `dmabridge allocate`: `negotiate`'s, plus the extent.
#[derive(Debug, Clone)]
pub struct AllocateArgs {
    pub negotiate: NegotiateArgs,
    pub width: u32,
    pub height: u32,
}

impl Args for AllocateArgs {
    fn augment_args(cmd: Command) -> Command {
        NegotiateArgs::augment_args(cmd)
            .about("Negotiate, then allocate the shared collection on the live device, honouring every constraint")
            .arg(Arg::new("width").long("width").required(true).value_parser(clap::value_parser!(u32).range(1..)).help("buffer width in pixels"))
            .arg(Arg::new("height").long("height").required(true).value_parser(clap::value_parser!(u32).range(1..)).help("buffer height in pixels"))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for AllocateArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let missing = || clap::Error::new(clap::error::ErrorKind::MissingRequiredArgument);
        Ok(AllocateArgs {
            negotiate: NegotiateArgs::from_arg_matches(m)?,
            width: *m.get_one::<u32>("width").ok_or_else(missing)?,
            height: *m.get_one::<u32>("height").ok_or_else(missing)?,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// Loads a participant; `--vulkan` through the adapter the second argument gives for a
/// `:device=` (none: the default device).
type Loader<'a> = dyn Fn(&ParticipantSpec, &dyn Fn(Option<&str>) -> Result<crate::LiveDevice, String>) -> Result<Participant, SpecError> + 'a;

fn say(text: &str) {
    // A closed stdout (`| head`) must not panic, as println! would.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn fail(code: u8, msg: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr().lock(), "dmabridge allocate: {msg}");
    ExitCode::from(code)
}

/// Whether the device could never meet the constraints (exit 2) rather than failed (1).
fn impossible(e: &AllocateError) -> bool {
    use dmabridge::ExportError as X;
    use dmabridge::interop::dmabuf::PlacementError as P;
    match e {
        AllocateError::Extent { .. } | AllocateError::TooManyBuffers { .. } | AllocateError::DriverLayout { .. } | AllocateError::NoLayout => true,
        AllocateError::Placement(p) => matches!(p, P::OpaqueLayout(_) | P::Alignment { .. } | P::TiledStride { .. } | P::Overflow | P::Geometry(_)),
        AllocateError::Export(x) => matches!(x, X::NoAcceptableModifier { .. } | X::DmaBufExportUnsupported { .. } | X::ExtentTooLarge { .. }),
        _ => false,
    }
}

pub fn run(args: &AllocateArgs, load: &Loader<'_>) -> ExitCode {
    let engine = Engine::new(&EngineOptions::from_env()).map_err(|e| e.to_string());
    // The allocation is made on this engine: its `--vulkan` participants are its device.
    let this_device = |device: Option<&str>| match device {
        None => engine.as_ref().map(|e| crate::LiveDevice::Opened(e.clone())).map_err(Clone::clone),
        Some(_) => Err("allocate allocates on its own device (DMABRIDGE_DEVICE); :device= is for negotiate".to_owned()),
    };
    let negotiation = match negotiation_of(&args.negotiate, &|spec| load(spec, &this_device)) {
        Ok(n) => n,
        Err(e) => return fail(1, &e),
    };
    let report = Report::new(&negotiation);
    let (allocation, read_only) = match &negotiation.outcome {
        Outcome::Shared(a) => (a, read_only_names(&args.negotiate, &negotiation)),
        Outcome::Copy { .. } => {
            say(&if args.negotiate.json { report.to_json() + "\n" } else { dmabridge::interop::negotiate::human(&negotiation) });
            return fail(2, "no one collection is shared by every participant (the outcome is a copy plan); run `dmabridge negotiate` for it");
        }
        Outcome::Impossible(c) => {
            say(&if args.negotiate.json { report.to_json() + "\n" } else { dmabridge::interop::negotiate::human(&negotiation) });
            let kinds: Vec<&str> = c.iter().map(|c| c.constraint.name()).collect();
            return fail(2, &format!("impossible: {}", kinds.join(", ")));
        }
    };
    let engine = match engine {
        Ok(e) => e,
        Err(e) => return fail(1, &format!("no Vulkan device: {e}")),
    };
    let image_use = ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC);
    let allocated = match AllocationSpec::from_allocation(allocation, args.width, args.height, image_use).and_then(|s| engine.allocate(&s)) {
        Ok(a) => a,
        Err(e) => return fail(if impossible(&e) { 2 } else { 1 }, &e.to_string()),
    };
    let verified: Vec<Result<(), String>> = allocated.buffers.iter().enumerate().map(|(i, b)| verify(&engine, &b.dmabuf, i as u32)).collect();
    let read_only: Vec<(String, Result<(), String>)> = read_only.into_iter().map(|n| {
        let r = allocated.buffers.iter().try_for_each(|b| refuses_writes(&b.dmabuf));
        (n, r)
    }).collect();
    let doc = document(&report, allocation, &allocated, &verified, &read_only);
    if args.negotiate.json {
        say(&(doc.to_string() + "\n"));
    } else {
        say(&dmabridge::interop::negotiate::human(&negotiation));
        say(&summary(&allocated, &verified, &read_only));
    }
    if let Some(e) = verified.iter().find_map(|v| v.as_ref().err()) {
        return fail(1, &format!("a buffer did not read back through the device: {e}"));
    }
    if let Some((n, Err(e))) = read_only.iter().find(|(_, r)| r.is_err()) {
        return fail(1, &format!("read-only participant {n}: {e}"));
    }
    crate::exit_status(engine.adapter())
}

/// The participants that set `read-only=true`, in order.
fn read_only_names(_args: &NegotiateArgs, n: &dmabridge::interop::negotiate::Negotiation) -> Vec<String> {
    match &n.outcome {
        Outcome::Shared(a) => a.participants.iter().filter(|p| !a.writers.contains(p)).cloned().collect(),
        _ => vec![],
    }
}

/// Re-opens the buffer read-only, as a read-only participant receives it, and checks that a
/// write through each fd fails with `EBADF`.
fn refuses_writes(buf: &DmaBuf) -> Result<(), String> {
    let ro = buf.reopen_read_only().map_err(|e| e.to_string())?;
    check_read_only(&ro).map_err(|e| e.to_string())
}

/// Writes a pattern into the buffer's planes at their offsets and strides, and reads it
/// back through the device.
fn verify(engine: &Engine, buf: &DmaBuf, seed: u32) -> Result<(), String> {
    let (f, w, h) = (buf.fourcc(), buf.width(), buf.height());
    let tile = match buf.layout() {
        Layout::Implicit => TileLayout::Linear,
        Layout::Explicit(m) => TileLayout::from_modifier(m).ok_or_else(|| format!("{m} is laid out by the driver; dmabridge cannot write it"))?,
    };
    let linear = tiled_size(TileLayout::Linear, f, w, h).map_err(|e| e.to_string())?;
    let pattern = test_pattern(linear.size as usize, seed);
    if tile == TileLayout::Linear {
        write_planes(buf, &pattern).map_err(|e| e.to_string())?;
    } else {
        // A tiled plane is whole rows of tiles, `stride` apart.
        let tiled = tile_to_vec(tile, f, w, h, &pattern).map_err(|e| e.to_string())?;
        let g = tiled_size(tile, f, w, h).map_err(|e| e.to_string())?;
        for (p, gp) in buf.planes().zip(&g.planes) {
            let row = gp.padded_width_bytes as usize * gp.tile_height as usize;
            let plane = tiled.get(gp.offset as usize..(gp.offset + gp.size) as usize).ok_or("the tiled frame is shorter than its geometry")?;
            for (r, bytes) in plane.chunks_exact(row).enumerate() {
                let at = p.offset + r as u64 * p.stride * u64::from(gp.tile_height);
                write_all_at(p.fd, at, bytes).map_err(|e| e.to_string())?;
            }
        }
    }
    let back = if tile == TileLayout::Linear {
        let image = engine.import_dmabuf(buf, ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC)).map_err(|e| e.to_string())?;
        image.read_back().map_err(|e| e.to_string())?
    } else {
        let conv = Converter::new(engine).map_err(|e| e.to_string())?;
        let detiled = conv.detile_dmabuf(buf, ImportOptions::default(), dmabridge::READBACK_TIMEOUT).map_err(|e| e.to_string())?;
        detiled.buffer.bytes().map_err(|e| e.to_string())?.to_vec()
    };
    if back != pattern {
        let at = back.iter().zip(&pattern).position(|(a, b)| a != b).unwrap_or(back.len().min(pattern.len()));
        return Err(format!("read back differs from what was written at byte {at} (of {})", pattern.len()));
    }
    Ok(())
}

fn document(report: &Report, a: &Allocation, allocated: &Allocated, verified: &[Result<(), String>], read_only: &[(String, Result<(), String>)]) -> serde_json::Value {
    let mut doc = serde_json::to_value(report).unwrap_or_else(|_| serde_json::json!({}));
    let buffers: Vec<serde_json::Value> = allocated
        .buffers
        .iter()
        .zip(verified)
        .map(|(b, v)| {
            let d = &b.dmabuf;
            let mut files: Vec<dmabridge::interop::dmabuf::FileId> = Vec::new();
            let planes: Vec<serde_json::Value> = d
                .planes()
                .map(|p| {
                    let fd_index = files.iter().position(|f| *f == p.file).unwrap_or_else(|| {
                        files.push(p.file);
                        files.len() - 1
                    });
                    let class = classify(p.fd, FdTrust::Untrusted).ok();
                    let size = class.and_then(|c| file_size(p.fd, c).ok()).unwrap_or(0);
                    let kind = class.map_or("unknown", |c| c.name());
                    serde_json::json!({ "fd_index": fd_index, "offset": p.offset, "stride": p.stride, "size": size, "file": kind })
                })
                .collect();
            let modifier = format!("0x{:016x}", d.layout().to_wire().raw());
            serde_json::json!({
                "modifier": modifier,
                "fds": files.len(),
                "planes": planes,
                "verified": v.is_ok(),
            })
        })
        .collect();
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("buffer_count".into(), serde_json::json!(allocated.buffers.len()));
        obj.insert("buffers".into(), serde_json::Value::Array(buffers));
        obj.insert("layout_source".into(), serde_json::json!(allocated.source.name()));
        obj.insert("disjoint".into(), serde_json::json!(allocated.disjoint));
        obj.insert("disjoint_reason".into(), serde_json::json!(allocated.disjoint_reason));
        obj.insert("memory".into(), serde_json::json!(allocated.memory));
        obj.insert("memory_reason".into(), serde_json::json!(allocated.memory_reason));
        obj.insert("stride_align".into(), serde_json::json!(a.constraints.stride_align));
        obj.insert("offset_align".into(), serde_json::json!(a.constraints.offset_align));
        obj.insert("min_size".into(), serde_json::json!(a.constraints.min_size));
        obj.insert("max_buffers".into(), serde_json::json!(a.constraints.max_buffers));
        obj.insert("domain".into(), serde_json::json!(a.constraints.domain.name()));
        let ro: Vec<serde_json::Value> = read_only
            .iter()
            .map(|(n, r)| serde_json::json!({ "participant": n, "writes_refused": r.is_ok() }))
            .collect();
        obj.insert("read_only".into(), serde_json::Value::Array(ro));
    }
    doc
}

fn summary(allocated: &Allocated, verified: &[Result<(), String>], read_only: &[(String, Result<(), String>)]) -> String {
    let mut s = format!(
        "allocated {} buffers in {} memory, layout {}, {}: {}\n",
        allocated.buffers.len(),
        allocated.memory,
        allocated.source.name(),
        if allocated.disjoint { "one fd per plane" } else { "one fd" },
        allocated.disjoint_reason
    );
    for (i, (b, v)) in allocated.buffers.iter().zip(verified).enumerate() {
        let planes: Vec<String> = b.dmabuf.planes().map(|p| format!("offset {} stride {}", p.offset, p.stride)).collect();
        s += &format!(
            "  buffer {i}: {} [{}] {}\n",
            b.dmabuf.layout(),
            planes.join("; "),
            match v {
                Ok(()) => "read back through the device".to_owned(),
                Err(e) => format!("NOT verified: {e}"),
            }
        );
    }
    for (n, r) in read_only {
        s += &format!("  {n} (read-only): {}\n", if r.is_ok() { "writes through its fds are refused" } else { "its fds accept writes" });
    }
    if allocated.source == LayoutSource::DriverChosen {
        s += "  the driver chose the layout; it was checked against every constraint\n";
    }
    s
}
