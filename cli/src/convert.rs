//! `dmabridge convert`: tiled <-> linear for any layout, and YUV <-> RGB, as one frame
//! conversion ([`FrameConversion`]): its steps fused where they can be (tiled NV12 -> XR24
//! in one pass), on the path the engine's cost model picks, or the one `--path` names. With
//! no Vulkan device at all it runs the CPU path.
//!
//! Linear files are tightly packed planes, concatenated; tiled files follow the tiled-buffer
//! conventions of `dmabridge_interop::tiling`.
//!
//! `--plan FILE` runs a copy plan that `dmabridge negotiate --plan-out FILE` wrote, step by
//! step on the GPU (`Converter::convert_plan`; on the CPU with `--path cpu` or without a
//! Vulkan device), on a `--width` x `--height` frame: the plan's formats replace `--format`,
//! `--from`, `--to` and `--to-format`, and `--conversion N` picks one of several.

use std::process::ExitCode;

use dmabridge::interop::tiling::{tiled_size, ColourMatrix, ColourRange, FrameConversion, MAX_CPU_FRAME_BYTES};
use dmabridge::interop::{user_file, Fourcc, Layout, TileLayout};
use dmabridge::{ConvertPath, Converter, Engine, EngineOptions};

#[derive(clap::Args)]
#[command(mut_arg("format", |a| a.required_unless_present_any(["drm_format", "plan"])))]
pub struct ConvertArgs {
    #[command(flatten)]
    frame: crate::frame::FrameArgs,
    /// Input layout: a name (linear, i915-x, samsung-64x32, nvidia-block-linear-v4, ...)
    /// or the hex modifier of one; `--drm-format` names it instead.
    #[arg(long, required_unless_present_any = ["drm_format", "plan"])]
    from: Option<String>,
    /// Output layout, as --from.
    #[arg(long, required_unless_present = "plan")]
    to: Option<String>,
    /// Run the copy plan in FILE (what `dmabridge negotiate --plan-out FILE` writes)
    /// instead of a conversion named by the flags.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["from", "to", "to_format", "drm_format", "format", "matrix", "range"])]
    plan: Option<std::path::PathBuf>,
    /// Which conversion of the plan file to run (its index in `conversions`), when it has
    /// more than one.
    #[arg(long, value_name = "N", requires = "plan")]
    conversion: Option<usize>,
    #[arg(long = "in")]
    input: std::path::PathBuf,
    #[arg(long = "out")]
    output: std::path::PathBuf,
    /// Where it runs: cpu, gpu (compute shaders, detile and colour fused), copy-commands
    /// (GPU copies for the layout steps), or auto (the cost model's measured choice).
    #[arg(long, default_value = "auto")]
    path: String,
    /// The same as --path cpu.
    #[arg(long)]
    cpu: bool,
    /// Say which path was chosen and why (each candidate's measured GB/s).
    #[arg(long)]
    explain: bool,
    /// Print what was done as JSON (steps, path, candidates) instead of the summary line.
    #[arg(long)]
    json: bool,
    /// Output format for a colour conversion: an RGB format (AR24, XR24, AB24, XB24, RA24,
    /// RX24, BA24, BX24; AR30, XR30) from NV12/P010, or NV12 from an 8-bit RGB format.
    #[arg(long)]
    to_format: Option<String>,
    /// bt601, bt709 or bt2020.
    #[arg(long, default_value = "bt709")]
    matrix: String,
    /// limited or full.
    #[arg(long, default_value = "limited")]
    range: String,
}

/// What `--json` prints.
#[derive(serde::Serialize)]
struct Report<'a> {
    conversion: String,
    steps: Vec<String>,
    path: ConvertPath,
    #[serde(skip_serializing_if = "Option::is_none")]
    choice: Option<&'a dmabridge::Choice>,
    bytes: usize,
}

/// The whole of `path`, which must be a regular file of exactly `expected` bytes: read with
/// a cap, so a huge file is refused after `expected + 1` bytes, and a FIFO or a device
/// (`/dev/zero`) is refused before any read ([`user_file`]).
/// The bytes of a `layout` `fourcc` frame, refused past [`MAX_CPU_FRAME_BYTES`]: every size
/// is known from the arguments alone, so a frame too large is refused before any data is read.
fn frame_bytes(layout: TileLayout, fourcc: Fourcc, (width, height): (u32, u32), name: &str) -> Result<u64, String> {
    match tiled_size(layout, fourcc, width, height) {
        Ok(g) if g.size <= MAX_CPU_FRAME_BYTES => Ok(g.size),
        Ok(g) => Err(format!("a {name} {width}x{height} frame is {} bytes, more than the {MAX_CPU_FRAME_BYTES} this command converts", g.size)),
        Err(e) => Err(e.to_string()),
    }
}

/// The input frame (`len` bytes), and the device to convert it on: none where `path` is the
/// CPU's; where no device opens, the CPU path when `fallback`, else an error.
fn input_and_engine(args: &ConvertArgs, len: u64, path: Option<ConvertPath>, fallback: bool) -> Result<(Vec<u8>, Option<Engine>), String> {
    let input = read_exactly(&args.input, len)?;
    if path == Some(ConvertPath::Cpu) {
        return Ok((input, None));
    }
    match Engine::new(&EngineOptions::from_env()) {
        Ok(e) => Ok((input, Some(e))),
        Err(e) if fallback => {
            eprintln!("dmabridge convert: no Vulkan device ({e}); using the CPU path");
            Ok((input, None))
        }
        Err(e) => Err(format!("--path {}: no Vulkan device ({e})", args.path)),
    }
}

fn read_exactly(path: &std::path::Path, expected: u64) -> Result<Vec<u8>, String> {
    match user_file::read_regular(path, expected) {
        Ok(data) if data.len() as u64 == expected => Ok(data),
        Ok(data) => Err(format!("{} holds {} bytes, but the frame described is {expected}", path.display(), data.len())),
        Err(user_file::ReadFileError::TooLarge { .. }) => {
            Err(format!("{} holds more than the {expected} bytes of the frame described", path.display()))
        }
        Err(e) => Err(e.to_string()),
    }
}

pub fn run(args: &ConvertArgs) -> ExitCode {
    if let Some(file) = &args.plan {
        return run_plan_file(args, file);
    }
    let fail = |msg: String| {
        eprintln!("dmabridge convert: {msg}");
        ExitCode::from(1)
    };
    let parsed = (|| -> Result<_, String> {
        let fourcc: Fourcc = args.frame.fourcc()?;
        let to_fourcc: Fourcc = match &args.to_format {
            Some(f) => f.parse().map_err(|e| format!("--to-format: {e}"))?,
            None => fourcc,
        };
        let from: TileLayout = match (&args.from, args.frame.drm_format_layout()?) {
            (Some(_), Some(_)) => return Err("give --drm-format or --from, not both".into()),
            (Some(f), None) => f.parse().map_err(|e| format!("--from: {e}"))?,
            (None, Some(Layout::Explicit(m))) => TileLayout::from_modifier(m).ok_or_else(|| format!("--drm-format: {m} is not a layout dmabridge converts"))?,
            (None, Some(Layout::Implicit)) => return Err("--drm-format: an implicit layout has no addressing to convert".into()),
            (None, None) => return Err("give --from or --drm-format".into()),
        };
        let to: TileLayout = args.to.as_deref().ok_or("give --to")?.parse().map_err(|e| format!("--to: {e}"))?;
        let matrix: ColourMatrix = args.matrix.parse().map_err(|e| format!("--matrix {e}"))?;
        let range: ColourRange = args.range.parse().map_err(|e| format!("--range {e}"))?;
        let path: Option<ConvertPath> = match (args.cpu, args.path.as_str()) {
            (true, _) => Some(ConvertPath::Cpu),
            (false, "auto") => None,
            (false, p) => Some(p.parse().map_err(|e| format!("--path {e}"))?),
        };
        let c = FrameConversion { matrix, range, ..FrameConversion::new((from, fourcc), (to, to_fourcc), args.frame.width, args.frame.height) };
        let steps = c.steps().map_err(|e| e.to_string())?;
        Ok((c, steps, path))
    })();
    let (c, steps, path) = match parsed {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    // Refuse a frame too large to convert before touching any data: every size is known
    // from the arguments alone.
    let size = |layout: TileLayout, f: Fourcc| frame_bytes(layout, f, (c.width, c.height), &format!("{layout} {f}"));
    let sizes = size(c.from_layout, c.from).and_then(|first| size(c.to_layout, c.to).map(|_| first));
    let (input, engine) = match sizes.and_then(|first| input_and_engine(args, first, path, path.is_none())) {
        Ok(ie) => ie,
        Err(e) => return fail(e),
    };
    let converted = match &engine {
        Some(e) => Converter::new(e).map_err(|e| e.to_string()).and_then(|conv| conv.convert_frame(&c, path, &input).map_err(|e| e.to_string())),
        None => c.run_cpu(&input, 0).map(|out| {
            let choice = dmabridge::Choice { path: ConvertPath::Cpu, reason: dmabridge::ChoiceReason::Forced, size_class: dmabridge::SizeClass::of(c.width, c.height), candidates: Vec::new() };
            (out, choice)
        }).map_err(|e| e.to_string()),
    };
    let (out, choice) = match converted {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    if let Err(e) = user_file::write_regular(&args.output, &out) {
        return fail(e.to_string());
    }
    let step_names: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
    if args.json {
        let report = Report { conversion: c.to_string(), steps: step_names, path: choice.path, choice: Some(&choice), bytes: out.len() };
        match serde_json::to_string(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => return fail(e.to_string()),
        }
    } else {
        println!("{} {} -> {} {}: {} bytes ({}; {})", c.from.trimmed(), c.from_layout, c.to.trimmed(), c.to_layout, out.len(), choice.path, step_names.join(", then "));
        if args.explain {
            println!("{}", choice.explain());
        }
    }
    match &engine {
        Some(e) => crate::exit_status(e.adapter()),
        None => ExitCode::SUCCESS,
    }
}

/// The most bytes a plan file may hold: a plan of 8 conversions of 8 steps is a few KiB.
const MAX_PLAN_FILE_BYTES: u64 = 1 << 20;

/// What `--plan FILE --json` prints.
#[derive(serde::Serialize)]
struct PlanReport<'a> {
    plan: &'a dmabridge::interop::negotiate::ConversionPlan,
    steps: Vec<String>,
    path: ConvertPath,
    bytes: usize,
}

/// `dmabridge convert --plan FILE`: one conversion of the plan file, at the frame's extent.
fn run_plan_file(args: &ConvertArgs, file: &std::path::Path) -> ExitCode {
    use dmabridge::interop::negotiate::PlanFile;
    let fail = |msg: String| {
        eprintln!("dmabridge convert: {msg}");
        ExitCode::from(1)
    };
    let parsed = (|| -> Result<_, String> {
        let bytes = user_file::read_regular(file, MAX_PLAN_FILE_BYTES).map_err(|e| format!("the plan file: {e}"))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| format!("{} is not a plan file: not UTF-8 ({e})", file.display()))?;
        let plans = PlanFile::parse(text).map_err(|e| format!("{}: {e}", file.display()))?;
        let index = match (args.conversion, plans.conversions.len()) {
            (Some(i), n) if i < n => i,
            (Some(i), n) => return Err(format!("--conversion {i}: {} has {n} conversion(s)", file.display())),
            (None, 1) => 0,
            (None, n) => return Err(format!("{} has {n} conversions: pick one with --conversion N", file.display())),
        };
        let plan = plans.conversions[index].plan.at_extent(args.frame.width, args.frame.height);
        plan.check().map_err(|e| e.to_string())?;
        let path: Option<ConvertPath> = match (args.cpu, args.path.as_str()) {
            (true, _) => Some(ConvertPath::Cpu),
            (false, "auto" | "gpu") => None,
            (false, "cpu") => Some(ConvertPath::Cpu),
            (false, p) => return Err(format!("--path {p}: a plan runs its steps on the gpu or the cpu")),
        };
        Ok((plan, path))
    })();
    let (plan, path) = match parsed {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let size = |f: dmabridge::interop::negotiate::PlanFormat| frame_bytes(f.layout().map_err(|e| e.to_string())?, f.fourcc, (plan.width, plan.height), &f.to_string());
    let (input, engine) = match size(plan.from).and_then(|first| size(plan.to).map(|_| first)).and_then(|first| input_and_engine(args, first, path, args.path == "auto")) {
        Ok(ie) => ie,
        Err(e) => return fail(e),
    };
    let converted = match &engine {
        Some(e) => Converter::new(e).and_then(|conv| conv.convert_plan(&plan, &input)).map(|o| (o, ConvertPath::Gpu)).map_err(|e| e.to_string()),
        None => plan.run_cpu(&input, 0).map(|o| (o, ConvertPath::Cpu)).map_err(|e| e.to_string()),
    };
    let (out, ran_on) = match converted {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    if let Err(e) = user_file::write_regular(&args.output, &out) {
        return fail(e.to_string());
    }
    let steps: Vec<String> = plan.steps.iter().map(|s| s.to_string()).collect();
    if args.json {
        match serde_json::to_string(&PlanReport { plan: &plan, steps, path: ran_on, bytes: out.len() }) {
            Ok(s) => println!("{s}"),
            Err(e) => return fail(e.to_string()),
        }
    } else {
        println!("{} -> {} {}x{}: {} bytes ({ran_on}; {})", plan.from, plan.to, plan.width, plan.height, out.len(), steps.join(", then "));
    }
    match &engine {
        Some(e) => crate::exit_status(e.adapter()),
        None => ExitCode::SUCCESS,
    }
}
