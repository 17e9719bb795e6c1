//! `dmabridge view`: show a raw frame in a window of its own, through the real import path.
//!
//! FILE holds the frame's planes tightly packed and concatenated (the format `dmabridge
//! import --out` writes). They go into a memfd (a dma-buf stand-in: lavapipe imports any
//! mmap-able fd), described as a dma-buf with the given modifier (LINEAR by default), planes
//! at their packed offsets and minimum strides, and imported with `Engine::import_dmabuf`,
//! the same checks and paths as any producer's buffer. The window is winit's (X11 or
//! Wayland, whichever the environment names) and the frame is drawn by
//! [`dmabridge::present::Presenter`], which is told about every resize.
//!
//! Exit status: 0, 1 for bad input or any failure (with a message), 3 when
//! `DMABRIDGE_VALIDATION=1` and the validation layer reported a problem.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{DmaBuf, PlaneLayout};
use dmabridge::interop::{format_info, Fourcc};
use dmabridge::present::{
    self, FrameOptions, PresentModePolicy, PresentOutcome, Presenter, PresenterOptions, YcbcrMatrix, YcbcrRange,
};
use dmabridge::{Engine, EngineOptions};
use winit::application::ApplicationHandler;
use winit::dpi::PhysicalSize;
use winit::event::WindowEvent;
use winit::event_loop::{ActiveEventLoop, EventLoop};
use winit::platform::pump_events::{EventLoopExtPumpEvents, PumpStatus};
use winit::raw_window_handle::{HasDisplayHandle, HasWindowHandle};
use winit::window::{Window, WindowId};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum MatrixArg {
    Bt709,
    Bt601,
    Bt2020,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum RangeArg {
    Limited,
    Full,
}

#[derive(clap::Args)]
pub struct ViewArgs {
    /// The frame: every plane's rows tightly packed, planes concatenated.
    #[arg(long = "in")]
    input: PathBuf,
    #[command(flatten)]
    frame: crate::frame::FrameArgs,
    /// `0x` and 16 hex digits. The planes are laid out linearly, so LINEAR (the default) is
    /// the one that describes FILE truthfully; others go to the import checks as given.
    #[arg(long)]
    modifier: Option<String>,
    /// Close the window after this many seconds (default: when the window is closed).
    #[arg(long)]
    seconds: Option<f64>,
    /// Y'CbCr matrix of YUV frames.
    #[arg(long, value_enum, default_value_t = MatrixArg::Bt709)]
    matrix: MatrixArg,
    /// Quantisation range of YUV frames.
    #[arg(long, value_enum, default_value_t = RangeArg::Limited)]
    range: RangeArg,
    /// FIFO (every frame, paced by the display) instead of MAILBOX.
    #[arg(long)]
    vsync: bool,
}

/// The memfd descriptor for FILE's packed planes.
fn build(args: &ViewArgs) -> Result<DmaBuf, String> {
    let fourcc: Fourcc = args.frame.fourcc()?;
    let layout = args.frame.layout_with(args.modifier.as_deref())?;
    let info = format_info(fourcc).ok_or_else(|| format!("--format: {fourcc} has no plane layout in dmabridge's table"))?;
    if args.frame.width == 0 || args.frame.height == 0 {
        return Err(format!("--width/--height: {}x{} has no pixels", args.frame.width, args.frame.height));
    }
    let expected = info.packed_size(args.frame.width, args.frame.height);
    // A regular file, at most the frame's size (a FIFO or a device is refused, not waited on).
    let bytes = dmabridge::interop::user_file::read_regular(&args.input, expected).map_err(|e| match e {
        dmabridge::interop::user_file::ReadFileError::TooLarge { .. } => format!(
            "{} is more than {expected} bytes; a tightly packed {}x{} {fourcc} frame is {expected}",
            args.input.display(),
            args.frame.width,
            args.frame.height
        ),
        e => e.to_string(),
    })?;
    if bytes.len() as u64 != expected {
        return Err(format!(
            "{} is {} bytes; a tightly packed {}x{} {fourcc} frame is {expected}",
            args.input.display(),
            bytes.len(),
            args.frame.width,
            args.frame.height
        ));
    }
    let mut planes = Vec::with_capacity(info.plane_count());
    let mut offset = 0u64;
    for i in 0..info.plane_count() {
        planes.push(PlaneLayout::linear(offset, info.min_stride(i, args.frame.width), info.plane_height(i, args.frame.height)));
        offset += info.packed_plane_size(i, args.frame.width, args.frame.height);
    }
    let fd = dmabridge::interop::dmabuf::sealed_memfd("dmabridge-view", &bytes).map_err(|e| format!("cannot make a memfd for the frame: {e}"))?;
    DmaBuf::in_one_file(fourcc, layout, args.frame.width, args.frame.height, fd, &planes).map_err(|e| e.to_string())
}

/// winit's side: the window and what happened to it since the last look.
struct App {
    title: String,
    size: PhysicalSize<u32>,
    window: Option<Window>,
    error: Option<String>,
    resized: Option<(u32, u32)>,
    redraw: bool,
    close: bool,
}

impl ApplicationHandler for App {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.window.is_some() {
            return;
        }
        let attributes = Window::default_attributes().with_title(self.title.clone()).with_inner_size(self.size);
        match event_loop.create_window(attributes) {
            Ok(w) => self.window = Some(w),
            Err(e) => self.error = Some(format!("cannot create a window: {e}")),
        }
    }

    fn window_event(&mut self, _event_loop: &ActiveEventLoop, _id: WindowId, event: WindowEvent) {
        match event {
            WindowEvent::Resized(s) => {
                self.resized = Some((s.width, s.height));
                self.redraw = true;
            }
            WindowEvent::RedrawRequested => self.redraw = true,
            WindowEvent::CloseRequested | WindowEvent::Destroyed => self.close = true,
            _ => {}
        }
    }
}

pub fn run(args: &ViewArgs) -> ExitCode {
    match view(args) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("dmabridge view: {msg}");
            ExitCode::from(1)
        }
    }
}

fn view(args: &ViewArgs) -> Result<ExitCode, String> {
    if let Some(s) = args.seconds {
        if !(s.is_finite() && s >= 0.0) {
            return Err(format!("--seconds {s} is not a duration"));
        }
    }
    // Check the input before any window appears.
    let buf = build(args)?;
    if std::env::var_os("DISPLAY").is_none() && std::env::var_os("WAYLAND_DISPLAY").is_none() {
        return Err("no display: neither DISPLAY (X11) nor WAYLAND_DISPLAY (Wayland) is set".into());
    }
    let mut event_loop = EventLoop::new().map_err(|e| format!("cannot connect to the display: {e}"))?;
    let mut app = App {
        title: format!("dmabridge view: {}", args.input.display()),
        size: PhysicalSize::new(args.frame.width, args.frame.height),
        window: None,
        error: None,
        resized: None,
        redraw: true,
        close: false,
    };
    let window_deadline = Instant::now() + Duration::from_secs(10);
    while app.window.is_none() {
        if let PumpStatus::Exit(code) = event_loop.pump_app_events(Some(Duration::from_millis(10)), &mut app) {
            return Err(format!("the event loop exited ({code}) before the window appeared"));
        }
        if let Some(e) = app.error.take() {
            return Err(e);
        }
        if Instant::now() > window_deadline {
            return Err("the window did not appear within 10 s".into());
        }
    }
    let (display, window_handle, size) = {
        let window = app.window.as_ref().ok_or("no window")?;
        let display = window.display_handle().map_err(|e| format!("window display handle: {e}"))?.as_raw();
        let handle = window.window_handle().map_err(|e| format!("window handle: {e}"))?.as_raw();
        let s = window.inner_size();
        (display, handle, (s.width, s.height))
    };

    let mut options = EngineOptions::from_env();
    options.instance_extensions = present::required_instance_extensions(display).map_err(|e| e.to_string())?;
    options.present = true;
    let engine = Engine::new(&options).map_err(|e| e.to_string())?;
    let image = engine.import_dmabuf(&buf, vk::ImageUsageFlags::SAMPLED).map_err(|e| e.to_string())?;
    println!("path: {}", image.path());
    let presenter_options = PresenterOptions {
        present_mode: if args.vsync { PresentModePolicy::Vsync } else { PresentModePolicy::LowLatency },
        ..PresenterOptions::default()
    };
    // SAFETY: the handles are the live window's in `app`, which is dropped only after the
    // presenter (below); the instance has the surface extensions for this display.
    let mut presenter = unsafe { Presenter::new(&engine, display, window_handle, size, presenter_options) }
        .map_err(|e| e.to_string())?;
    println!("present mode: {:?}, surface format: {:?}", presenter.present_mode(), presenter.surface_format().format);
    let frame = FrameOptions {
        matrix: match args.matrix {
            MatrixArg::Bt709 => YcbcrMatrix::Bt709,
            MatrixArg::Bt601 => YcbcrMatrix::Bt601,
            MatrixArg::Bt2020 => YcbcrMatrix::Bt2020,
        },
        range: match args.range {
            RangeArg::Limited => YcbcrRange::Limited,
            RangeArg::Full => YcbcrRange::Full,
        },
    };

    let end = args.seconds.map(|s| Instant::now() + Duration::from_secs_f64(s));
    // A still frame needs drawing only after a resize or an expose; a slow repaint as
    // well covers an X server that dropped what was drawn before the window was mapped.
    let repaint_every = Duration::from_millis(250);
    let mut last_present: Option<Instant> = None;
    let mut resizes = 0u64;
    let result: Result<(), String> = loop {
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            break Ok(());
        }
        let wait = end.map_or(Duration::from_millis(20), |e| e.saturating_duration_since(now).min(Duration::from_millis(20)));
        if let PumpStatus::Exit(_) = event_loop.pump_app_events(Some(wait), &mut app) {
            break Ok(());
        }
        if app.close {
            break Ok(());
        }
        if let Some((w, h)) = app.resized.take() {
            resizes += 1;
            presenter.resize(w, h);
        }
        if app.redraw || last_present.map_or(true, |t| t.elapsed() >= repaint_every) {
            match presenter.present(&image, &frame) {
                Ok(PresentOutcome::Presented { .. }) => {
                    app.redraw = false;
                    last_present = Some(Instant::now());
                }
                // Try again on the next turn (the swapchain is replaced there).
                Ok(PresentOutcome::Skipped(reason)) => tracing::debug!(?reason, "frame skipped"),
                Err(e) => break Err(e.to_string()),
            }
        }
    };
    let stats = presenter.stats();
    drop(presenter);
    drop(image);
    drop(app);
    result?;
    println!(
        "presented {} frame(s), skipped {}, {} swapchain(s), {} resize(s)",
        stats.presented, stats.skipped, stats.swapchains, resizes
    );
    Ok(crate::exit_status(engine.adapter()))
}
