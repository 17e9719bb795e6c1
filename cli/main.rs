//! The `dmabridge` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod convert;
mod import;
mod probe;

#[derive(Parser)]
#[command(name = "dmabridge", version, about = "Share images between GPUs, codecs, displays and compositors without copying")]
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
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DMABRIDGE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Probe(args) => probe::run(&args),
        Command::Import(args) => import::run(&args),
        Command::Convert(args) => convert::run(&args),
    }
}

/// Success, unless validation was on and the layer reported a problem.
fn exit_status(engine: &dmabridge::Engine) -> ExitCode {
    let problems = engine.validation().map(|v| v.problems()).unwrap_or_default();
    if problems.is_empty() {
        return ExitCode::SUCCESS;
    }
    for p in &problems {
        eprintln!("validation: {p}");
    }
    ExitCode::from(3)
}
