//! `dmabridge display-check`: frames of the system dma-heap shown on a KMS device and read
//! back through its writeback connector, compared byte for byte with their sources
//! (`dmabridge_lab::writeback`). Exit status 0 when every frame matched, 4 when one did not,
//! 1 when the check could not run (no writeback connector, a format it does not offer...).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use dmabridge_interop::Fourcc;
use dmabridge_lab::writeback::{run_display_check, DisplayCheckConfig};

#[derive(Args)]
pub struct DisplayCheckArgs {
    /// The KMS device (vkms: the one with a writeback connector).
    #[arg(long, value_name = "/dev/dri/cardN")]
    kms_device: PathBuf,
    /// The source frames' format: XR24 or AR24.
    #[arg(long, default_value = "XR24")]
    format: String,
    /// Frames shown and written back (at least 2: a modeset, then flips).
    #[arg(long, default_value_t = 8)]
    frames: u32,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &DisplayCheckArgs) -> ExitCode {
    let fourcc = match args.format.parse::<Fourcc>() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("dmabridge display-check: --format {:?}: {e}", args.format);
            return ExitCode::from(1);
        }
    };
    let cfg = DisplayCheckConfig { device: args.kms_device.clone(), fourcc, frames: args.frames };
    let outcome = match run_display_check(&cfg) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("dmabridge display-check: {e}");
            return ExitCode::from(1);
        }
    };
    let s = &outcome.summary;
    if args.json {
        println!("{}", serde_json::to_string_pretty(s).unwrap_or_default());
    } else {
        let ms = &s["ms"];
        println!(
            "{} ({}): writeback connector {} {} offers {}",
            s["device"].as_str().unwrap_or("?"),
            s["driver"].as_str().unwrap_or("?"),
            s["writeback"]["connector"],
            s["writeback"]["name"].as_str().unwrap_or("?"),
            s["writeback"]["formats"].as_array().map(|f| f.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(",")).unwrap_or_default()
        );
        println!(
            "shown: {} {}x{} {} frames from the system dma-heap on plane {} ({} mode {}), by a modeset then non-blocking flips (page-flip events {})",
            s["source"]["format"].as_str().unwrap_or("?"),
            s["source"]["width"],
            s["source"]["height"],
            s["frames"],
            s["output"]["plane"],
            s["output"]["connector"].as_str().unwrap_or("?"),
            s["output"]["mode"]["name"].as_str().unwrap_or("?"),
            s["flip_events"]
        );
        if s["display_unbound"].as_bool() == Some(true) {
            println!("the kernel refused the writeback connector beside the display's on one CRTC (EINVAL): the CRTC writes back alone, the display's connector unbound");
        }
        println!(
            "written back: {}/{} frames match their source ({} byte for byte; the X/A byte comes back 0xff)",
            s["frames_matched"], s["frames"], s["frames_identical"]
        );
        println!(
            "ms: modeset {:.2}, first writeback {:.2}, writeback round trip {:.2} (fence wait {:.2}), flip queue {:.2}, flip to event {:.2}; baseline flip to event without writeback {:.2}",
            ms["modeset"].as_f64().unwrap_or(0.0),
            ms["first_writeback"].as_f64().unwrap_or(0.0),
            ms["writeback_round_trip_mean"].as_f64().unwrap_or(0.0),
            ms["writeback_fence_wait_mean"].as_f64().unwrap_or(0.0),
            ms["flip_queue_mean"].as_f64().unwrap_or(0.0),
            ms["flip_to_event_mean"].as_f64().unwrap_or(0.0),
            ms["baseline_flip_to_event_mean"].as_f64().unwrap_or(0.0),
        );
    }
    for p in &outcome.problems {
        eprintln!("display-check: {p}");
    }
    if outcome.problems.is_empty() {
        println!("program ok: display showed what dmabridge meant");
        ExitCode::SUCCESS
    } else {
        ExitCode::from(4)
    }
}
