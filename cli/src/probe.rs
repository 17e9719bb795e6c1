//! `dmabridge probe [--json]`.

use std::process::ExitCode;

use dmabridge::ash::vk;
use dmabridge::{Engine, EngineOptions};

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// Print the JSON report (a contract other tools read) instead of the table.
    #[arg(long)]
    json: bool,
    /// Device index or name substring (default: $DMABRIDGE_DEVICE, else the best device).
    #[arg(long)]
    device: Option<String>,
    /// Image create flags to query with, comma-separated: mutable-format, extended-usage, alias.
    #[arg(long, value_delimiter = ',')]
    create_flags: Vec<String>,
}

fn create_flag(name: &str) -> Option<vk::ImageCreateFlags> {
    Some(match name {
        "mutable-format" => vk::ImageCreateFlags::MUTABLE_FORMAT,
        "extended-usage" => vk::ImageCreateFlags::EXTENDED_USAGE,
        "alias" => vk::ImageCreateFlags::ALIAS,
        _ => return None,
    })
}

pub fn run(args: &ProbeArgs) -> ExitCode {
    let mut create = vk::ImageCreateFlags::empty();
    for name in &args.create_flags {
        match create_flag(name) {
            Some(f) => create |= f,
            None => {
                eprintln!("dmabridge probe: unknown create flag {name:?} (expected mutable-format, extended-usage or alias)");
                return ExitCode::from(1);
            }
        }
    }
    let mut options = EngineOptions::from_env();
    if let Some(d) = &args.device {
        options.device = Some(dmabridge::DeviceSelector::parse(d));
    }
    let engine = match Engine::new(&options) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("dmabridge probe: {e}");
            return ExitCode::from(1);
        }
    };
    let report = match dmabridge::probe::probe(&engine, create) {
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
