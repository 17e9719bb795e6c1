//! `dmabridge wayland-demo [--frames N]`: animated colour bars on the compositor in
//! `WAYLAND_DISPLAY`, through linux-dmabuf (zero-copy from Vulkan where the compositor and
//! the device agree, the copy path otherwise).

use std::process::ExitCode;

use dmabridge::interop::Fourcc;
use dmabridge::wayland::{frames, Display, SinkOptions, WaylandSink};
use dmabridge::{Engine, EngineOptions};

#[derive(clap::Args)]
pub struct WaylandDemoArgs {
    /// Frames to show (paced by the compositor's frame callbacks).
    #[arg(long, default_value_t = 120)]
    frames: u64,
    /// Width of the window in pixels (a multiple of 16 keeps NV12 bars exact).
    #[arg(long, default_value_t = 640)]
    width: u32,
    /// Height of the window in pixels.
    #[arg(long, default_value_t = 360)]
    height: u32,
    /// Pixel formats to try, most preferred first (drm fourcc codes).
    #[arg(long, value_delimiter = ',', default_value = "AR24,XR24,NV12")]
    formats: Vec<String>,
}

pub fn run(args: &WaylandDemoArgs) -> ExitCode {
    let mut fourccs = Vec::new();
    for f in &args.formats {
        match f.parse::<Fourcc>() {
            Ok(c) if frames::colour_bars(c, 2, 2, 0).is_some() => fourccs.push(c),
            Ok(c) => {
                eprintln!("dmabridge wayland-demo: the demo cannot draw {c} (it draws AR24, XR24, AB24, XB24, NV12)");
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!("dmabridge wayland-demo: bad format {f:?}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    if args.width == 0 || args.height == 0 {
        eprintln!("dmabridge wayland-demo: the window needs a non-zero size");
        return ExitCode::from(1);
    }
    let engine = match Engine::new(&EngineOptions::from_env()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("dmabridge wayland-demo: {e}");
            return ExitCode::from(1);
        }
    };
    let mut opts = SinkOptions::new(Display::Env, args.width, args.height, fourccs);
    opts.title = "dmabridge wayland-demo".into();
    match show(&engine, opts, args.frames) {
        Ok(()) => super::exit_status(engine.adapter()),
        Err(e) => {
            eprintln!("dmabridge wayland-demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn show(engine: &Engine, opts: SinkOptions, n: u64) -> Result<(), dmabridge::wayland::SinkError> {
    let (w, h) = (opts.width, opts.height);
    let mut sink = WaylandSink::connect(engine, opts)?;
    let f = sink.formats();
    eprintln!("compositor: linux-dmabuf v{}, {} format/modifier pairs", f.version, f.formats.len());
    eprintln!("plan: {}", sink.plan());
    for i in 0..n {
        let fourcc = sink.fourcc();
        let frame = frames::colour_bars(fourcc, w, h, (i / 8) as usize).unwrap_or_default();
        sink.present(&frame)?;
    }
    sink.wait_shown()?;
    let s = sink.stats();
    eprintln!(
        "shown {} frames as {} ({}); {} buffers created, {} failed, {} releases, {} reused before release",
        s.frames,
        sink.sent_format().map_or_else(|| "-".into(), |f| f.to_string()),
        if sink.plan().is_zero_copy() { "zero-copy" } else { "copy path" },
        s.buffers_created,
        s.buffers_failed,
        s.releases,
        s.reuse_before_release
    );
    Ok(())
}
