//! `dmabridge probe [--json] [--usage U+U ...] [--create-flags F,...] [--srgb-view]`: the
//! Vulkan device's formats and modifiers for every use. With `--v4l2-device` or
//! `--kms-device` it lists those devices instead, as their drivers report them (what
//! `negotiate` reads from them), and opens no Vulkan device.

use std::process::ExitCode;

use dmabridge::device::probe::ProbeOptions;
use dmabridge::device::usage::{parse_create_flags, parse_image_usage};
use dmabridge::{Adapter, EngineOptions};

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// Print the JSON report (a contract other tools read) instead of the table.
    #[arg(long)]
    json: bool,
    /// Device index or name substring (default: $DMABRIDGE_DEVICE, else the best device).
    #[arg(long)]
    device: Option<String>,
    /// A usage combination to ask about as well, e.g. sampled+color-attachment: a key of
    /// its own in every modifier's `usages` (a column in the table). Repeatable.
    #[arg(long = "usage", value_name = "USAGE[+USAGE...]")]
    usages: Vec<String>,
    /// Image create flags for every query of the run, comma-separated: mutable-format,
    /// extended-usage, alias, disjoint.
    #[arg(long, value_delimiter = ',')]
    create_flags: Vec<String>,
    /// Every query also asks for a view in the format's sRGB twin (implies mutable-format
    /// for formats that have one).
    #[arg(long)]
    srgb_view: bool,
    /// List a live V4L2 device instead: its formats (V4L2 code, DRM format+modifier or why
    /// none), frame sizes, and the participant `negotiate --v4l2-device` makes of it.
    #[arg(long, value_name = "/dev/videoN[:capture|:output]")]
    v4l2_device: Option<String>,
    /// List a live KMS device's planes instead (or the one named): kind, IN_FORMATS or the
    /// plain list with implicit modifiers, and the card's atomic and modifier support.
    #[arg(long, value_name = "/dev/dri/cardN[:PLANE_ID]")]
    kms_device: Option<String>,
}

/// `--v4l2-device` and `--kms-device`: the devices as their drivers list them.
fn probe_peers(args: &ProbeArgs) -> Result<String, String> {
    use dmabridge::interop::spec::{ParticipantSpec, PeerKind};
    use dmabridge::interop::peers::kms_device::KmsDevice;
    use dmabridge::interop::peers::v4l2_device::V4l2Device;
    let spec = |kind, value: &str| ParticipantSpec { kind, name: "probe".into(), value: value.to_owned() };
    let mut doc = serde_json::Map::new();
    let mut table = String::new();
    if let Some(v) = &args.v4l2_device {
        let s = spec(PeerKind::V4l2Device, v);
        let (path, direction) = s.v4l2_device_target().map_err(|e| e.to_string())?;
        let device = V4l2Device::open(std::path::Path::new(path), direction).map_err(|e| e.to_string())?;
        let formats = device.enum_formats().map_err(|e| e.to_string())?;
        let summary = device.summary(&formats);
        let participant = device.participant_of("v4l2", &formats).map_err(|e| e.to_string())?;
        let read = dmabridge::interop::report::ReportParticipant::of(&participant, Some(format!("--v4l2-device {v}")));
        table += &format!(
            "V4L2 {} ({}, {}, {}{})\n",
            summary.path,
            summary.card,
            summary.driver,
            summary.direction,
            if summary.multiplanar { ", multi-planar" } else { "" }
        );
        table += &format!("  {:<6} {:<14} {:<24} {:<15} sizes\n", "v4l2", "name", "drm", "mapping");
        for f in &summary.formats {
            table += &format!(
                "  {:<6} {:<14} {:<24} {:<15} {}\n",
                f.v4l2,
                f.name.unwrap_or("-"),
                f.drm.as_deref().unwrap_or("-"),
                f.mapping,
                f.sizes
            );
        }
        table += &format!(
            "  as a participant: {} formats, width {}-{}, height {}-{}, min-buffers {}, stride-align {}\n",
            read.formats.as_ref().map_or(0, Vec::len),
            read.width[0],
            read.width[1],
            read.height[0],
            read.height[1],
            read.min_buffers,
            read.stride_align
        );
        doc.insert("v4l2".into(), serde_json::json!({ "device": summary, "participant": read }));
    }
    if let Some(v) = &args.kms_device {
        let s = spec(PeerKind::KmsDevice, v);
        let (path, plane) = s.kms_device_target().map_err(|e| e.to_string())?;
        let device = KmsDevice::open(std::path::Path::new(path)).map_err(|e| e.to_string())?;
        let ids: Vec<u32> = match plane {
            Some(id) => vec![id],
            None => device.planes().map_err(|e| e.to_string())?.iter().map(|p| p.id).collect(),
        };
        let mut planes = Vec::new();
        for id in ids {
            planes.push(device.summary(Some(id)).map_err(|e| e.to_string())?);
        }
        table += &format!("KMS {} ({})\n", device.path(), device.driver_name());
        for p in &planes {
            table += &format!(
                "  plane {} {:?}: {} (atomic {}, ADDFB2 modifiers {}, IN_FORMATS {})\n",
                p.plane,
                p.kind,
                p.formats.join(","),
                if p.atomic { "yes" } else { "no" },
                if p.addfb2_modifiers { "yes" } else { "no" },
                if p.in_formats { "yes" } else { "no: implicit modifiers only" }
            );
        }
        doc.insert("kms".into(), serde_json::json!(planes));
    }
    if args.json {
        serde_json::to_string_pretty(&serde_json::Value::Object(doc)).map(|s| s + "\n").map_err(|e| e.to_string())
    } else {
        Ok(table)
    }
}

/// The probe's options from the command line, or the message for the first bad word.
fn options(args: &ProbeArgs) -> Result<ProbeOptions, String> {
    let create = parse_create_flags(args.create_flags.iter().map(String::as_str)).map_err(|e| e.to_string())?;
    let combinations = args.usages.iter().map(|u| parse_image_usage(u).map_err(|e| format!("--usage {u:?}: {e}"))).collect::<Result<_, _>>()?;
    Ok(ProbeOptions { combinations, create, srgb_view: args.srgb_view })
}

pub fn run(args: &ProbeArgs) -> ExitCode {
    if args.v4l2_device.is_some() || args.kms_device.is_some() {
        return match probe_peers(args) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dmabridge probe: {e}");
                ExitCode::from(1)
            }
        };
    }
    let options = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("dmabridge probe: {e}");
            return ExitCode::from(1);
        }
    };
    let mut engine_options = EngineOptions::from_env();
    if let Some(d) = &args.device {
        engine_options.device = Some(dmabridge::DeviceSelector::parse(d));
    }
    // Queries only: no device is opened, so any device that answers them can be probed.
    let adapter = match Adapter::new(&engine_options) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("dmabridge probe: {e}");
            return ExitCode::from(1);
        }
    };
    let report = match dmabridge::device::probe::probe(&adapter, &options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("dmabridge probe: {e}");
            return ExitCode::from(1);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("dmabridge probe: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", report.to_table());
    }
    crate::exit_status(&adapter)
}
