//! A real Wayland peer: a client of the compositor's `zwp_linux_dmabuf_v1` that reads what the
//! compositor can import, negotiates with dmabridge's Vulkan producer, and presents frames
//! through `zwp_linux_buffer_params_v1` onto an `xdg_toplevel` (feature `wayland`).
//!
//! Built on `wayland-client` and the protocol bindings of `wayland-protocols`; there is no
//! hand-written wire code, and nothing of libwayland is needed to build (the backend is
//! wayland-backend's pure-Rust one, or libwayland-client opened at run time when another
//! dependency, winit, selects that).
//!
//! - [`formats`]: the compositor's formats, from v3 `format`/`modifier` events or v4 feedback
//!   (format table read through its fd, main device, tranches with flags), as an interop
//!   [`Participant`](dmabridge_interop::negotiate::Participant).
//! - [`plan`](mod@plan): the negotiation between the producer and the compositor, through
//!   `dmabridge_interop::negotiate`, with the kernel's implicit-modifier rules (seed 001).
//! - [`sink`]: [`WaylandSink`], which allocates (export from Vulkan, or the copy path's own
//!   memfd), wraps buffers as `wl_buffer`s, handles `created`/`failed`, presents, and
//!   recycles a buffer only after the compositor's `wl_buffer.release`.
//! - [`frames`]: test and demo pictures (colour bars, BT.601 NV12).

mod client;
pub mod formats;
pub mod frames;
pub mod plan;
pub mod sink;
mod upload;

use std::path::PathBuf;

pub use formats::{query_formats, CompositorFormats, FormatSource};
pub use plan::{plan, producer_participant, Plan, PlanReason};
pub use sink::{SinkError, SinkOptions, SinkStats, WaylandSink};
pub use upload::UploadError;

/// Which compositor to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Display {
    /// `WAYLAND_DISPLAY` (and `XDG_RUNTIME_DIR`), as every Wayland client does.
    Env,
    /// The socket at this path (`$XDG_RUNTIME_DIR/$WAYLAND_DISPLAY`), without touching the
    /// environment (tests run threads that must not change it).
    Socket(PathBuf),
}

impl Display {
    /// The socket `name` in the runtime directory `dir`.
    pub fn in_dir(dir: impl Into<PathBuf>, name: &str) -> Display {
        Display::Socket(dir.into().join(name))
    }
}

/// Why talking to the compositor failed.
#[derive(Debug, thiserror::Error)]
pub enum WaylandError {
    #[error("cannot connect to the compositor: {0}")]
    Connect(#[from] wayland_client::ConnectError),
    #[error("cannot connect to the compositor socket {path}: {source}")]
    Socket { path: PathBuf, source: std::io::Error },
    #[error("the Wayland connection failed: {0}")]
    Backend(#[from] wayland_client::backend::WaylandError),
    #[error("dispatching Wayland events failed: {0}")]
    Dispatch(#[from] wayland_client::DispatchError),
    #[error("the compositor does not offer {0}")]
    MissingGlobal(&'static str),
    #[error("the compositor sent a malformed linux-dmabuf message: {0}")]
    Peer(#[from] dmabridge_interop::peers::WaylandError),
    #[error("cannot read the linux-dmabuf format table: {0}")]
    FormatTable(std::io::Error),
    #[error("the compositor offers no format at all")]
    NoFormats,
    #[error("the compositor closed the window")]
    Closed,
}
