//! The frame arguments several commands share: `--format FOURCC --width W --height H`.

use dmabridge::interop::Fourcc;

#[derive(clap::Args)]
pub struct FrameArgs {
    /// DRM fourcc, trailing spaces optional (`R8` = `R8  `).
    #[arg(long)]
    pub format: String,
    #[arg(long)]
    pub width: u32,
    #[arg(long)]
    pub height: u32,
}

impl FrameArgs {
    /// The fourcc, or a one-line message naming the flag.
    pub fn fourcc(&self) -> Result<Fourcc, String> {
        self.format.parse().map_err(|e| format!("--format: {e}"))
    }
}
