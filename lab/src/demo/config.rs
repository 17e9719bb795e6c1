//! What the two-process demo runs: its modes, formats and frame size, and how long it waits.

use serde::{Deserialize, Serialize};

/// How long the demo waits for one frame's GPU work before it gives up.
pub const FRAME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How frames travel from producer to consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    ZeroCopy,
    Copy,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero-copy",
            Mode::Copy => "copy",
        }
    }

    /// The key of this mode in `summary.json`.
    pub fn key(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero_copy",
            Mode::Copy => "copy",
        }
    }
}

/// What `dmabridge demo` runs.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// AR24 or NV12 ([`DEMO_FORMATS`]).
    pub fourcc: dmabridge_interop::Fourcc,
    pub frames: u32,
    pub width: u32,
    pub height: u32,
    pub modes: Vec<Mode>,
    /// Where summary.json and contact_sheet.png go.
    pub out_dir: std::path::PathBuf,
    /// Damage this frame after its checksum was taken (a test of the verification).
    pub corrupt_frame: Option<u32>,
    pub validation: bool,
    /// How long either process waits for the other before giving up.
    pub peer_timeout: std::time::Duration,
}

/// The frame formats the demo renders and verifies.
pub const DEMO_FORMATS: [dmabridge_interop::Fourcc; 2] = [dmabridge_interop::Fourcc::ARGB8888, dmabridge_interop::Fourcc::NV12];
