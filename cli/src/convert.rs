//! `dmabridge convert`: tiled <-> linear for any layout, and YUV <-> RGB, on the GPU by
//! default (the CPU reference with `--cpu`, or when there is no Vulkan device at all).
//!
//! The steps, each skipped when it is the identity: FROM layout -> linear (in FORMAT),
//! colour FORMAT -> TO-FORMAT (linear), linear -> TO layout (in TO-FORMAT). Linear files
//! are tightly packed planes, concatenated; tiled files follow the tiled-buffer conventions
//! of `dmabridge_interop::tiling`.

use std::process::ExitCode;

use dmabridge::interop::tiling::{self, packed_planes, tiled_size, ColourMatrix, ColourRange, LinearPlane, MAX_CPU_FRAME_BYTES};
use dmabridge::interop::{Fourcc, TileLayout};
use dmabridge::{Converter, Engine, EngineOptions};

#[derive(clap::Args)]
pub struct ConvertArgs {
    #[command(flatten)]
    frame: crate::frame::FrameArgs,
    /// Input layout: a name (linear, i915-x, samsung-64x32, nvidia-block-linear-v4, ...)
    /// or the hex modifier of one.
    #[arg(long)]
    from: String,
    /// Output layout, as --from.
    #[arg(long)]
    to: String,
    #[arg(long = "in")]
    input: std::path::PathBuf,
    #[arg(long = "out")]
    output: std::path::PathBuf,
    /// Run the CPU reference instead of the GPU shaders.
    #[arg(long)]
    cpu: bool,
    /// Output format for a colour conversion: AB24 (RGBA8) from NV12/P010, or NV12 from AB24.
    #[arg(long)]
    to_format: Option<String>,
    #[arg(long, default_value = "bt709")]
    matrix: String,
    #[arg(long, default_value = "limited")]
    range: String,
}

/// Where the work runs.
enum Backend {
    Gpu(Box<Converter>),
    Cpu,
}

fn parse_matrix(s: &str) -> Result<ColourMatrix, String> {
    match s {
        "bt601" => Ok(ColourMatrix::Bt601),
        "bt709" => Ok(ColourMatrix::Bt709),
        _ => Err(format!("--matrix {s:?}: expected bt601 or bt709")),
    }
}

fn parse_range(s: &str) -> Result<ColourRange, String> {
    match s {
        "limited" => Ok(ColourRange::Limited),
        "full" => Ok(ColourRange::Full),
        _ => Err(format!("--range {s:?}: expected limited or full")),
    }
}

fn layout_step(backend: &Backend, from: TileLayout, to: TileLayout, fourcc: Fourcc, (w, h): (u32, u32), data: &[u8]) -> Result<Vec<u8>, String> {
    if from == to {
        return Ok(data.to_vec());
    }
    match backend {
        Backend::Gpu(c) => c.convert_layout(from, to, fourcc, (w, h), data).map_err(|e| e.to_string()),
        Backend::Cpu => {
            let packed = packed_planes(fourcc, w, h).map_err(|e| e.to_string())?;
            let linear_len = tiled_size(TileLayout::Linear, fourcc, w, h).map_err(|e| e.to_string())?.size as usize;
            let linear = if from == TileLayout::Linear {
                data.to_vec()
            } else {
                let mut out = vec![0u8; linear_len];
                tiling::detile(from, fourcc, w, h, data, &mut out, &packed).map_err(|e| e.to_string())?;
                out
            };
            if to == TileLayout::Linear {
                return Ok(linear);
            }
            let size = tiled_size(to, fourcc, w, h).map_err(|e| e.to_string())?.size as usize;
            let mut out = vec![0u8; size];
            tiling::tile(to, fourcc, w, h, &linear, &packed, &mut out).map_err(|e| e.to_string())?;
            Ok(out)
        }
    }
}

fn colour_step(
    backend: &Backend,
    from: Fourcc,
    to: Fourcc,
    matrix: ColourMatrix,
    range: ColourRange,
    (w, h): (u32, u32),
    data: &[u8],
) -> Result<Vec<u8>, String> {
    let rgba = LinearPlane { offset: 0, stride: w as u64 * 4 };
    let yuv_in = (from == Fourcc::NV12 || from == Fourcc::P010) && to == Fourcc::ABGR8888;
    let rgb_in = from == Fourcc::ABGR8888 && to == Fourcc::NV12;
    if !yuv_in && !rgb_in {
        return Err(format!("no colour conversion from {} to {} (NV12/P010 -> AB24, AB24 -> NV12)", from.trimmed(), to.trimmed()));
    }
    match backend {
        Backend::Gpu(c) if yuv_in => c.yuv_to_rgba(from, matrix, range, (w, h), data).map_err(|e| e.to_string()),
        Backend::Gpu(c) => c.rgba_to_nv12(matrix, range, (w, h), data).map_err(|e| e.to_string()),
        Backend::Cpu if yuv_in => {
            let planes = packed_planes(from, w, h).map_err(|e| e.to_string())?;
            let mut out = vec![0u8; (w as usize) * (h as usize) * 4];
            tiling::yuv_to_rgba(from, matrix, range, w, h, data, &planes, &mut out, rgba).map_err(|e| e.to_string())?;
            Ok(out)
        }
        Backend::Cpu => {
            let planes = packed_planes(Fourcc::NV12, w, h).map_err(|e| e.to_string())?;
            let len = tiled_size(TileLayout::Linear, Fourcc::NV12, w, h).map_err(|e| e.to_string())?.size as usize;
            let mut out = vec![0u8; len];
            tiling::rgba_to_nv12(matrix, range, w, h, data, rgba, &mut out, &planes).map_err(|e| e.to_string())?;
            Ok(out)
        }
    }
}

/// The whole of `path`, which must be exactly `expected` bytes: read with a cap, so an
/// endless input (`/dev/zero`, a pipe) or a huge file is refused after `expected + 1` bytes.
fn read_exactly(path: &std::path::Path, expected: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut data = Vec::new();
    data.try_reserve_exact(expected as usize + 1).map_err(|_| format!("cannot allocate {expected} bytes for {}", path.display()))?;
    file.take(expected + 1).read_to_end(&mut data).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match data.len() as u64 {
        n if n == expected => Ok(data),
        n if n > expected => Err(format!("{} holds more than the {expected} bytes of the frame described", path.display())),
        n => Err(format!("{} holds {n} bytes, but the frame described is {expected}", path.display())),
    }
}

pub fn run(args: &ConvertArgs) -> ExitCode {
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
        let from: TileLayout = args.from.parse().map_err(|e| format!("--from: {e}"))?;
        let to: TileLayout = args.to.parse().map_err(|e| format!("--to: {e}"))?;
        Ok((fourcc, to_fourcc, from, to, parse_matrix(&args.matrix)?, parse_range(&args.range)?))
    })();
    let (fourcc, to_fourcc, from, to, matrix, range) = match parsed {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    // Refuse a layout that is not defined for the format, and a frame too large to convert,
    // before touching any data: every size is known from the arguments alone.
    let mut sizes = Vec::with_capacity(2);
    for (layout, f) in [(from, fourcc), (to, to_fourcc)] {
        match tiled_size(layout, f, args.frame.width, args.frame.height) {
            Ok(g) if g.size <= MAX_CPU_FRAME_BYTES => sizes.push(g.size),
            Ok(g) => return fail(format!("a {layout} {f} {}x{} frame is {} bytes, more than the {MAX_CPU_FRAME_BYTES} this command converts", args.frame.width, args.frame.height, g.size)),
            Err(e) => return fail(e.to_string()),
        }
    }
    let input = match read_exactly(&args.input, sizes[0]) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let engine = if args.cpu {
        None
    } else {
        match Engine::new(&EngineOptions::from_env()) {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!("dmabridge convert: no Vulkan device ({e}); using the CPU reference");
                None
            }
        }
    };
    let backend = match &engine {
        Some(e) => match Converter::new(e) {
            Ok(c) => Backend::Gpu(Box::new(c)),
            Err(err) => return fail(err.to_string()),
        },
        None => Backend::Cpu,
    };
    let extent = (args.frame.width, args.frame.height);
    let result = (|| -> Result<Vec<u8>, String> {
        let mut data = layout_step(&backend, from, TileLayout::Linear, fourcc, extent, &input)?;
        if to_fourcc != fourcc {
            data = colour_step(&backend, fourcc, to_fourcc, matrix, range, extent, &data)?;
        }
        layout_step(&backend, TileLayout::Linear, to, to_fourcc, extent, &data)
    })();
    let out = match result {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    if let Err(e) = std::fs::write(&args.output, &out) {
        return fail(format!("cannot write {}: {e}", args.output.display()));
    }
    let on = if matches!(backend, Backend::Gpu(_)) { "gpu" } else { "cpu" };
    println!("{} {from} -> {} {to}: {} bytes ({on})", fourcc.trimmed(), to_fourcc.trimmed(), out.len());
    drop(backend);
    match &engine {
        Some(e) => crate::exit_status(e),
        None => ExitCode::SUCCESS,
    }
}
