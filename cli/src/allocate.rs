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
//! [`dmabridge_interop::report::Report`]) where `buffers` becomes the list of buffers
//! (`{"modifier", "fds", "planes": [{"fd_index", "offset", "stride", "size", "file"}],
//! "verified"}`, `file` being `dma-buf` or `sealed memfd`) and the count moves to
//! `buffer_count`, plus `layout_source`, `disjoint`, `disjoint_reason`, `memory` (where
//! the memory came from: `dma-heap:system` where the kernel has a system dma-heap,
//! `memfd` elsewhere or when a participant is read-only, with `memory_reason`; `device` for
//! the device's exports), the merged `stride_align`, `offset_align`, `min_size`, `max_buffers`
//! and `domain`, and `read_only` (per read-only participant, whether its fds refuse writes).
//!
//! A copy plan (no one collection every participant shares) allocates each of its groups
//! the same way, but a group that is a copier's own image: a device without the modifier
//! extension fed from a LINEAR buffer by its copy import (`vkCmdCopyBufferToImage`), whose
//! driver makes that image when it imports. That copy is run: the check of the group it
//! copies from is this device's import of each buffer, which must be by that copy (other
//! conversions are not run here: `dmabridge convert --plan` runs the converter's). With
//! `--json`, `allocated` then lists each group allocated (`group` and the fields above) and
//! `own_image_copies` each copy into a copier's own image (`from_group`, `to_group`,
//! `verified`, `detail`).
//!
//! Exit status: 0 allocated, 2 impossible (the conflicts, or the constraint the device
//! cannot meet, are named), 1 bad input or a device failure.

use std::io::Write;
use std::process::ExitCode;

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{check_read_only, classify, file_size, write_all_at, write_planes, DmaBuf, FdTrust};
use dmabridge::interop::negotiate::{Allocation, Conversion, ConversionKind, CopyPlan, Outcome, Participant};
use dmabridge::interop::report::Report;
use dmabridge::interop::tiling::{test_pattern, tile_to_vec, tiled_size};
use dmabridge::interop::{Layout, TileLayout};
use dmabridge::{AllocateError, Allocated, AllocationSpec, Converter, Engine, EngineOptions, ImageUse, ImportOptions, ImportPath, LayoutSource};
use dmabridge_interop::spec::{ParticipantSpec, SpecError};

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
    // The collections to allocate: the shared one, or each group of a copy plan but a
    // copier's own image (its driver allocates that when it imports by copy).
    let groups: Vec<(usize, &Allocation)> = match &negotiation.outcome {
        Outcome::Shared(a) => vec![(0, a)],
        Outcome::Copy { plan, .. } => plan.groups.iter().enumerate().filter(|(g, _)| own_image_copy(plan, *g).is_none()).map(|(g, group)| (g, &group.allocation)).collect(),
        Outcome::Impossible(c) => {
            say(&if args.negotiate.json { report.to_json() + "\n" } else { dmabridge::interop::report::human(&negotiation) });
            let kinds: Vec<&str> = c.iter().map(|c| c.constraint.name()).collect();
            return fail(2, &format!("impossible: {}", kinds.join(", ")));
        }
    };
    let engine = match engine {
        Ok(e) => e,
        Err(e) => return fail(1, &format!("no Vulkan device: {e}")),
    };
    let mut allocated = Vec::new();
    for (group, allocation) in groups {
        match allocate_group(&engine, allocation, (args.width, args.height)) {
            Ok(a) => allocated.push((group, a)),
            Err(e) => return fail(if impossible(&e) { 2 } else { 1 }, &e.to_string()),
        }
    }
    let copies = match &negotiation.outcome {
        Outcome::Copy { plan, .. } => own_image_copies(plan, &allocated),
        _ => Vec::new(),
    };
    let shared = matches!(negotiation.outcome, Outcome::Shared(_));
    if args.negotiate.json {
        let doc = match allocated.as_slice() {
            [(_, one)] if shared => buffers_document(serde_json::to_value(&report).unwrap_or_else(|_| serde_json::json!({})), one),
            _ => copy_document(&report, &allocated, &copies),
        };
        say(&(doc.to_string() + "\n"));
    } else {
        say(&dmabridge::interop::report::human(&negotiation));
        for (g, a) in &allocated {
            say(&if shared { summary(a) } else { format!("group {g}: {}", summary(a)) });
        }
        for c in &copies {
            say(&format!("group {} -> group {}: {}\n", c.from_group, c.to_group, c.outcome.as_ref().map_or_else(|e| format!("NOT verified: {e}"), Clone::clone)));
        }
    }
    for (g, a) in &allocated {
        if let Some(e) = a.verified.iter().find_map(|v| v.as_ref().err()) {
            return fail(1, &format!("a buffer of group {g} did not read back through the device: {e}"));
        }
        if let Some((n, Err(e))) = a.read_only.iter().find(|(_, r)| r.is_err()) {
            return fail(1, &format!("read-only participant {n}: {e}"));
        }
    }
    if let Some(c) = copies.iter().find(|c| c.outcome.is_err()) {
        return fail(1, &format!("the copy from group {} into group {}'s own image did not read back", c.from_group, c.to_group));
    }
    crate::exit_status(engine.adapter())
}

/// One collection, allocated on the device and checked through it.
struct GroupAllocation<'a> {
    allocation: &'a Allocation,
    allocated: Allocated,
    /// Per buffer: the device read back what was written (and how it imported it), or why not.
    verified: Vec<Result<Option<ImportPath>, String>>,
    /// Per read-only participant: whether its fds refuse writes.
    read_only: Vec<(String, Result<(), String>)>,
}

fn allocate_group<'a>(engine: &Engine, allocation: &'a Allocation, (width, height): (u32, u32)) -> Result<GroupAllocation<'a>, AllocateError> {
    let image_use = ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC);
    let allocated = engine.allocate(&AllocationSpec::from_allocation(allocation, width, height, image_use)?)?;
    let verified = allocated.buffers.iter().enumerate().map(|(i, b)| verify(engine, &b.dmabuf, i as u32)).collect();
    let read_only = allocation
        .participants
        .iter()
        .filter(|p| !allocation.writers.contains(p))
        .map(|n| (n.clone(), allocated.buffers.iter().try_for_each(|b| refuses_writes(&b.dmabuf))))
        .collect();
    Ok(GroupAllocation { allocation, allocated, verified, read_only })
}

/// The conversion into group `g`, where it is a copy into the copier's own image (a
/// device that imports by copy, `vkCmdCopyBufferToImage`).
fn own_image_copy(plan: &CopyPlan, g: usize) -> Option<&Conversion> {
    plan.conversions.iter().find(|c| c.to_group == g && matches!(c.kind, ConversionKind::DeviceCopy { to, .. } if to.is_invalid()))
}

/// A copy into a copier's own image, run: this engine is the copier (`allocate`'s
/// `--vulkan` participants are its device), and its import of each buffer of the group it
/// copies from ([`verify`]) is that copy. What it read back, or why it is not known.
struct OwnImageCopy {
    from_group: usize,
    to_group: usize,
    outcome: Result<String, String>,
}

fn own_image_copies(plan: &CopyPlan, allocated: &[(usize, GroupAllocation<'_>)]) -> Vec<OwnImageCopy> {
    (0..plan.groups.len())
        .filter_map(|g| own_image_copy(plan, g))
        .map(|c| {
            let from = allocated.iter().find(|(g, _)| *g == c.from_group).map(|(_, a)| a);
            let copier = c.copier.as_ref().map_or_else(|| "the device".to_owned(), ToString::to_string);
            let outcome = match from {
                None => Err(format!("group {} was not allocated", c.from_group)),
                Some(a) => match a.verified.iter().find(|v| !matches!(v, Ok(Some(ImportPath::BufferCopy)))) {
                    None => Ok(format!("{copier} copied each of group {}'s {} buffers into an image of its own (its copy import) and read the pattern back", c.from_group, a.verified.len())),
                    Some(Ok(path)) => Err(format!("the device read group {}'s buffers by {}, not by its copy import", c.from_group, path.map_or("the converter's detile".to_owned(), |p| format!("{p:?}")))),
                    Some(Err(e)) => Err(e.clone()),
                },
            };
            OwnImageCopy { from_group: c.from_group, to_group: c.to_group, outcome }
        })
        .collect()
}

/// Re-opens the buffer read-only, as a read-only participant receives it, and checks that a
/// write through each fd fails with `EBADF`.
fn refuses_writes(buf: &DmaBuf) -> Result<(), String> {
    let ro = buf.reopen_read_only().map_err(|e| e.to_string())?;
    check_read_only(&ro).map_err(|e| e.to_string())
}

/// Writes a pattern into the buffer's planes at their offsets and strides, and reads it
/// back through the device: how it imported the buffer, or `None` where the converter
/// detiled it.
fn verify(engine: &Engine, buf: &DmaBuf, seed: u32) -> Result<Option<ImportPath>, String> {
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
    let (back, path) = if tile == TileLayout::Linear {
        let image = engine.import_dmabuf(buf, ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC)).map_err(|e| e.to_string())?;
        (image.read_back().map_err(|e| e.to_string())?, Some(image.path()))
    } else {
        let conv = Converter::new(engine).map_err(|e| e.to_string())?;
        let detiled = conv.detile_dmabuf(buf, ImportOptions::default(), dmabridge::READBACK_TIMEOUT).map_err(|e| e.to_string())?;
        (detiled.buffer.bytes().map_err(|e| e.to_string())?.to_vec(), None)
    };
    if back != pattern {
        let at = back.iter().zip(&pattern).position(|(a, b)| a != b).unwrap_or(back.len().min(pattern.len()));
        return Err(format!("read back differs from what was written at byte {at} (of {})", pattern.len()));
    }
    Ok(path)
}

/// A copy plan's document: the report, with `allocated` listing each group allocated
/// (`group` and the fields [`buffers_document`] adds) and `own_image_copies` each copy into
/// a copier's own image (`from_group`, `to_group`, `verified`, `detail`).
fn copy_document(report: &Report, allocated: &[(usize, GroupAllocation<'_>)], copies: &[OwnImageCopy]) -> serde_json::Value {
    let mut doc = serde_json::to_value(report).unwrap_or_else(|_| serde_json::json!({}));
    let groups: Vec<serde_json::Value> = allocated.iter().map(|(g, a)| buffers_document(serde_json::json!({ "group": g }), a)).collect();
    let copies: Vec<serde_json::Value> = copies
        .iter()
        .map(|c| {
            let (verified, detail) = match &c.outcome {
                Ok(d) => (true, d),
                Err(e) => (false, e),
            };
            serde_json::json!({ "from_group": c.from_group, "to_group": c.to_group, "verified": verified, "detail": detail })
        })
        .collect();
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("allocated".into(), serde_json::Value::Array(groups));
        obj.insert("own_image_copies".into(), serde_json::Value::Array(copies));
    }
    doc
}

/// `doc` with one collection's buffers and how they were made (the module docs).
fn buffers_document(mut doc: serde_json::Value, group: &GroupAllocation<'_>) -> serde_json::Value {
    let GroupAllocation { allocation: a, allocated, verified, read_only } = group;
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

fn summary(group: &GroupAllocation<'_>) -> String {
    let GroupAllocation { allocated, verified, read_only, .. } = group;
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
                Ok(_) => "read back through the device".to_owned(),
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
