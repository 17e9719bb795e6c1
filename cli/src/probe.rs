//! `dmabridge probe [--json] [--usage U+U ...] [--create-flags F,...] [--srgb-view]`.

use std::process::ExitCode;

use dmabridge::device::probe::ProbeOptions;
use dmabridge::device::usage::{parse_create_flags, parse_image_usage};
use dmabridge::{Engine, EngineOptions};

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
}

/// The probe's options from the command line, or the message for the first bad word.
fn options(args: &ProbeArgs) -> Result<ProbeOptions, String> {
    let create = parse_create_flags(args.create_flags.iter().map(String::as_str)).map_err(|e| e.to_string())?;
    let combinations = args.usages.iter().map(|u| parse_image_usage(u).map_err(|e| format!("--usage {u:?}: {e}"))).collect::<Result<_, _>>()?;
    Ok(ProbeOptions { combinations, create, srgb_view: args.srgb_view })
}

pub fn run(args: &ProbeArgs) -> ExitCode {
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
    let engine = match Engine::new(&engine_options) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("dmabridge probe: {e}");
            return ExitCode::from(1);
        }
    };
    let report = match dmabridge::device::probe::probe(&engine, &options) {
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
    crate::exit_status(&engine)
}
