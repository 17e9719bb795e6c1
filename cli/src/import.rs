//! `dmabridge import`: validate a dma-buf layout given on the command line, import it into
//! Vulkan (explicitly where the device can, else through the buffer-copy fallback, or for a
//! tiled layout no driver samples, by detiling it where the cost model says, under the same
//! import options), read it back and write each plane's visible rows, tightly packed,
//! planes concatenated, saying which path ran. The fds are inherited from the parent
//! process.

use std::process::ExitCode;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{dup_foreign_fd, plane_rows, DmaBuf, FdTrust, PlaneDesc, PlaneLayout};
use dmabridge::interop::Fourcc;
use dmabridge::{Converter, Engine, EngineOptions, ImageUse, ImportError, ImportOptions};

#[derive(clap::Args)]
pub struct ImportArgs {
    #[command(flatten)]
    frame: crate::frame::FrameArgs,
    /// `0x` and 16 hex digits (default LINEAR); `0x00ffffffffffffff` (INVALID) means an
    /// implicit layout. `--drm-format` names it instead.
    #[arg(long)]
    modifier: Option<String>,
    /// FD:OFFSET:STRIDE of one plane, in plane order; FD is inherited from the parent.
    #[arg(long = "plane", required = true)]
    planes: Vec<String>,
    /// Where to write the planes' visible rows, tightly packed and concatenated.
    #[arg(long)]
    out: std::path::PathBuf,
    /// Fail unless the import is zero-copy: a file that can shrink (an unsealed memfd) or a
    /// layout the device only copies is an error naming why, instead of a copy.
    #[arg(long)]
    require_zero_copy: bool,
    /// Treat unsealed regular files as fixed-size (you vouch that nobody truncates them).
    #[arg(long)]
    trust_files: bool,
    /// The usage to import for, `+`-joined (TRANSFER_SRC is added: the read-back needs it).
    #[arg(long, default_value = "sampled", value_name = "USAGE[+USAGE...]")]
    usage: String,
    /// Image create flags, comma-separated: mutable-format, extended-usage, alias
    /// (disjoint is the layout's to decide: one fd per plane or not).
    #[arg(long, value_delimiter = ',')]
    create_flags: Vec<String>,
    /// Also view the image in its format's sRGB twin (implies mutable-format where one exists).
    #[arg(long)]
    srgb_view: bool,
}

impl ImportArgs {
    /// The exact use the image is created for.
    fn image_use(&self) -> Result<ImageUse, String> {
        let usage = dmabridge::device::usage::parse_image_usage(&self.usage).map_err(|e| format!("--usage: {e}"))?;
        let create = dmabridge::device::usage::parse_create_flags(self.create_flags.iter().map(String::as_str)).map_err(|e| format!("--create-flags: {e}"))?;
        let image_use = ImageUse::new(usage | vk::ImageUsageFlags::TRANSFER_SRC).with_create(create);
        Ok(if self.srgb_view { image_use.with_srgb_view() } else { image_use })
    }
}

/// One `--plane FD:OFFSET:STRIDE`: the inherited fd number and where the plane lies.
/// Every `--plane` names its own fd, so the plane's object is its own position `index`.
/// The CLI is not told a size: it is `stride x rows`, the span the import check holds the fd
/// to ([`plane_rows`]).
fn parse_plane(s: &str, index: usize, rows: u32) -> Result<(i32, PlaneLayout), String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [fd, offset, stride] = parts.as_slice() else {
        return Err(format!("plane {s:?} must be FD:OFFSET:STRIDE"));
    };
    let fd: i32 = fd.parse().map_err(|_| format!("plane {s:?}: {fd:?} is not an fd number"))?;
    if fd < 0 {
        return Err(format!("plane {s:?}: fd {fd} is negative"));
    }
    let offset = offset.parse().map_err(|_| format!("plane {s:?}: offset {offset:?} is not a number"))?;
    let stride: u64 = stride.parse().map_err(|_| format!("plane {s:?}: stride {stride:?} is not a number"))?;
    let size = stride.checked_mul(u64::from(rows)).ok_or_else(|| format!("plane {s:?}: stride {stride} x {rows} rows overflows"))?;
    Ok((fd, PlaneLayout { object: index, offset, stride, size }))
}

fn build(args: &ImportArgs) -> Result<DmaBuf, String> {
    let fourcc: Fourcc = args.frame.fourcc()?;
    let layout = args.frame.layout_with(args.modifier.as_deref())?;
    if args.planes.len() > 4 {
        return Err(format!("{} planes given; a dma-buf has 1 to 4", args.planes.len()));
    }
    let mut planes = Vec::with_capacity(args.planes.len());
    for (i, p) in args.planes.iter().enumerate() {
        let (fd, p) = parse_plane(p, i, plane_rows(fourcc, i, args.frame.height))?;
        let fd = dup_foreign_fd(fd).map_err(|e| format!("plane {i}: {e} (was it inherited?)"))?;
        planes.push(PlaneDesc { fd, offset: p.offset, stride: p.stride });
    }
    DmaBuf::new(fourcc, layout, args.frame.width, args.frame.height, planes).map_err(|e| e.to_string())
}

pub fn run(args: &ImportArgs) -> ExitCode {
    let fail = |msg: String| {
        eprintln!("dmabridge import: {msg}");
        ExitCode::from(1)
    };
    let (buf, image_use) = match build(args).and_then(|b| Ok((b, args.image_use()?))) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let engine = match Engine::new(&EngineOptions::from_env()) {
        Ok(e) => e,
        Err(e) => return fail(e.to_string()),
    };
    let options = ImportOptions {
        trust: if args.trust_files { FdTrust::TrustRegularFiles } else { FdTrust::Untrusted },
        require_zero_copy: args.require_zero_copy,
    };
    let bytes = match engine.import_dmabuf_with(&buf, image_use, options) {
        Ok(image) => {
            println!("path: {}", image.path());
            println!("use: {}", image.image_use());
            match image.read_back() {
                Ok(b) => b,
                Err(e) => return fail(e.to_string()),
            }
        }
        // A tiled layout no Vulkan driver samples (a V4L2 decoder's, a foreign GPU's):
        // the copy fallback detiles it, on the path the cost model picks (or
        // DMABRIDGE_CONVERT_PATH names), reaching the buffer as the import would have.
        Err(ImportError::NeedsConversion(_)) if !args.require_zero_copy => {
            let detiled = Converter::new(&engine).map_err(|e| e.to_string()).and_then(|c| {
                let d = c.detile_dmabuf(&buf, options, dmabridge::READBACK_TIMEOUT).map_err(|e| e.to_string())?;
                Ok((d.buffer.bytes().map_err(|e| e.to_string())?.to_vec(), d.run))
            });
            match detiled {
                Ok((bytes, run)) => {
                    println!("path: {run} (copy fallback)");
                    bytes
                }
                Err(e) => return fail(e),
            }
        }
        Err(e) => return fail(e.to_string()),
    };
    if let Err(e) = dmabridge::interop::user_file::write_regular(&args.out, &bytes) {
        return fail(e.to_string());
    }
    println!("wrote {} bytes to {}", bytes.len(), args.out.display());
    crate::exit_status(engine.adapter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plane_syntax() {
        assert_eq!(parse_plane("3:0:256", 1, 4), Ok((3, PlaneLayout { object: 1, offset: 0, stride: 256, size: 1024 })));
        for bad in ["3:0", "3:0:256:1", "x:0:1", "-1:0:1", "3:-1:1", "3:0:1e3", "3:18446744073709551616:1", "3:0:18446744073709551615"] {
            assert!(parse_plane(bad, 0, 2).is_err(), "{bad}");
        }
    }
}
