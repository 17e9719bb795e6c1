//! The connection, its event queue and the state every event lands in.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use dmabridge_interop::peers::wayland::{Feedback, FeedbackBuilder, V3Formats};
use tracing::{debug, warn};
use wayland_client::backend::ObjectId;
use wayland_client::protocol::{wl_buffer, wl_callback, wl_compositor, wl_registry, wl_surface};
use wayland_client::{event_created_child, Connection, Dispatch, EventQueue, Proxy, QueueHandle, WEnum};
use wayland_protocols::wp::linux_dmabuf::zv1::client::{
    zwp_linux_buffer_params_v1, zwp_linux_dmabuf_feedback_v1, zwp_linux_dmabuf_v1,
};
use wayland_protocols::xdg::shell::client::{xdg_surface, xdg_toplevel, xdg_wm_base};

use super::{Display, WaylandError};

/// The highest linux-dmabuf version this client speaks (v4: feedback).
pub(crate) const DMABUF_MAX_VERSION: u32 = 4;

/// What a `zwp_linux_buffer_params_v1` came to.
#[derive(Debug)]
pub(crate) enum ParamsResult {
    Created(wl_buffer::WlBuffer),
    Failed,
}

/// Everything the events tell.
#[derive(Default)]
pub(crate) struct State {
    pub compositor: Option<wl_compositor::WlCompositor>,
    pub wm_base: Option<xdg_wm_base::XdgWmBase>,
    pub dmabuf: Option<zwp_linux_dmabuf_v1::ZwpLinuxDmabufV1>,
    pub dmabuf_version: u32,
    pub v3: V3Formats,
    pub v3_events: usize,
    builder: FeedbackBuilder,
    /// The latest complete feedback, and how many `done`s arrived (a change after the first
    /// means the compositor wants the client to renegotiate).
    pub feedback: Option<Feedback>,
    pub feedback_generation: u64,
    /// The first malformed feedback message, if any.
    pub feedback_error: Option<WaylandError>,
    /// `params` object id -> outcome.
    pub params: HashMap<ObjectId, ParamsResult>,
    /// Buffers the compositor released since the sink last looked.
    pub released: Vec<ObjectId>,
    pub configured: Option<(i32, i32)>,
    pub closed: bool,
    /// Frame callbacks that fired.
    pub frames_done: u64,
}

/// A connection with one event queue and its state.
pub(crate) struct Client {
    pub queue: EventQueue<State>,
    pub qh: QueueHandle<State>,
    pub state: State,
}

impl Client {
    /// Connects, binds the globals and waits until the initial linux-dmabuf formats (and v4
    /// default feedback, when offered) have arrived.
    pub fn connect(display: &Display) -> Result<Client, WaylandError> {
        let conn = match display {
            Display::Env => Connection::connect_to_env()?,
            Display::Socket(path) => {
                let stream =
                    UnixStream::connect(path).map_err(|source| WaylandError::Socket { path: path.clone(), source })?;
                Connection::from_socket(stream)?
            }
        };
        let queue = conn.new_event_queue();
        let qh = queue.handle();
        conn.display().get_registry(&qh, ());
        let mut client = Client { queue, qh, state: State::default() };
        client.roundtrip()?; // globals
        let dmabuf = client.state.dmabuf.clone().ok_or(WaylandError::MissingGlobal("zwp_linux_dmabuf_v1"))?;
        if client.state.dmabuf_version >= 4 {
            dmabuf.get_default_feedback(&client.qh, ());
        }
        client.roundtrip()?; // formats / feedback
        if let Some(e) = client.state.feedback_error.take() {
            return Err(e);
        }
        Ok(client)
    }

    pub fn roundtrip(&mut self) -> Result<(), WaylandError> {
        self.queue.roundtrip(&mut self.state)?;
        Ok(())
    }

    /// Handles what has arrived, without blocking.
    pub fn poll(&mut self) -> Result<(), WaylandError> {
        self.queue.flush()?;
        if let Some(guard) = self.queue.prepare_read() {
            match guard.read() {
                Ok(_) => {}
                Err(wayland_client::backend::WaylandError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.queue.dispatch_pending(&mut self.state)?;
        Ok(())
    }

    /// Waits for at least one event and handles it.
    pub fn wait(&mut self) -> Result<(), WaylandError> {
        self.queue.blocking_dispatch(&mut self.state)?;
        Ok(())
    }
}

impl Dispatch<wl_registry::WlRegistry, ()> for State {
    fn event(
        state: &mut Self,
        registry: &wl_registry::WlRegistry,
        event: wl_registry::Event,
        _: &(),
        _: &Connection,
        qh: &QueueHandle<Self>,
    ) {
        if let wl_registry::Event::Global { name, interface, version } = event {
            match interface.as_str() {
                "wl_compositor" => state.compositor = Some(registry.bind(name, version.min(4), qh, ())),
                "xdg_wm_base" => state.wm_base = Some(registry.bind(name, 1, qh, ())),
                "zwp_linux_dmabuf_v1" => {
                    let v = version.min(DMABUF_MAX_VERSION);
                    debug!(advertised = version, bound = v, "linux-dmabuf");
                    state.dmabuf_version = v;
                    state.dmabuf = Some(registry.bind(name, v, qh, ()));
                }
                _ => {}
            }
        }
    }
}

impl Dispatch<zwp_linux_dmabuf_v1::ZwpLinuxDmabufV1, ()> for State {
    fn event(
        state: &mut Self,
        _: &zwp_linux_dmabuf_v1::ZwpLinuxDmabufV1,
        event: zwp_linux_dmabuf_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        match event {
            zwp_linux_dmabuf_v1::Event::Format { format } => {
                state.v3_events += 1;
                if let Err(e) = state.v3.format(format) {
                    state.feedback_error.get_or_insert(e.into());
                }
            }
            zwp_linux_dmabuf_v1::Event::Modifier { format, modifier_hi, modifier_lo } => {
                state.v3_events += 1;
                // A compositor that announces more pairs than dmabridge keeps is an error,
                // reported by `connect`, not a process that grows without bound.
                if let Err(e) = state.v3.modifier(format, modifier_hi, modifier_lo) {
                    state.feedback_error.get_or_insert(e.into());
                }
            }
            _ => {}
        }
    }
}

impl Dispatch<zwp_linux_dmabuf_feedback_v1::ZwpLinuxDmabufFeedbackV1, ()> for State {
    fn event(
        state: &mut Self,
        _: &zwp_linux_dmabuf_feedback_v1::ZwpLinuxDmabufFeedbackV1,
        event: zwp_linux_dmabuf_feedback_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        use zwp_linux_dmabuf_feedback_v1::Event;
        let result = match event {
            Event::FormatTable { fd, size } => match read_table(fd, size) {
                Ok(bytes) => state.builder.format_table(&bytes).map_err(WaylandError::from),
                Err(e) => Err(WaylandError::FormatTable(e)),
            },
            Event::MainDevice { device } => state.builder.main_device(&device).map_err(Into::into),
            Event::TrancheTargetDevice { device } => state.builder.tranche_target_device(&device).map_err(Into::into),
            Event::TrancheFormats { indices } => state.builder.tranche_formats(&indices).map_err(Into::into),
            Event::TrancheFlags { flags } => {
                let bits = match flags {
                    WEnum::Value(f) => f.bits(),
                    WEnum::Unknown(u) => u,
                };
                state.builder.tranche_flags(bits);
                Ok(())
            }
            Event::TrancheDone => state.builder.tranche_done().map_err(Into::into),
            Event::Done => state
                .builder
                .done()
                .map(|fb| {
                    debug!(tranches = fb.tranches.len(), table = fb.table.len(), "linux-dmabuf feedback");
                    state.feedback = Some(fb);
                    state.feedback_generation += 1;
                })
                .map_err(Into::into),
            _ => Ok(()),
        };
        if let Err(e) = result {
            warn!(error = %e, "malformed linux-dmabuf feedback");
            state.feedback_error.get_or_insert(e);
        }
    }
}

/// Reads the format table through its fd. A read rather than an mmap: the table is small
/// (16 bytes an entry), and a read needs no `unsafe` and cannot fault if the compositor
/// truncates the file. The compositor's `size` bounds the read; a short file is an error.
fn read_table(fd: OwnedFd, size: u32) -> std::io::Result<Vec<u8>> {
    /// More than every (format, modifier) pair a compositor could sensibly list.
    const MAX_TABLE: u32 = 16 << 20;
    if size > MAX_TABLE {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{size}-byte table is too large")));
    }
    let mut buf = vec![0u8; size as usize];
    let mut done = 0usize;
    while done < buf.len() {
        let n = rustix::io::pread(fd.as_fd(), &mut buf[done..], done as u64)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("table fd holds {done} of the {size} bytes announced"),
            ));
        }
        done += n;
    }
    Ok(buf)
}

impl Dispatch<zwp_linux_buffer_params_v1::ZwpLinuxBufferParamsV1, ()> for State {
    fn event(
        state: &mut Self,
        params: &zwp_linux_buffer_params_v1::ZwpLinuxBufferParamsV1,
        event: zwp_linux_buffer_params_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        match event {
            zwp_linux_buffer_params_v1::Event::Created { buffer } => {
                state.params.insert(params.id(), ParamsResult::Created(buffer));
            }
            zwp_linux_buffer_params_v1::Event::Failed => {
                state.params.insert(params.id(), ParamsResult::Failed);
            }
            _ => {}
        }
    }

    event_created_child!(State, zwp_linux_buffer_params_v1::ZwpLinuxBufferParamsV1, [
        zwp_linux_buffer_params_v1::EVT_CREATED_OPCODE => (wl_buffer::WlBuffer, ()),
    ]);
}

impl Dispatch<wl_buffer::WlBuffer, ()> for State {
    fn event(
        state: &mut Self,
        buffer: &wl_buffer::WlBuffer,
        event: wl_buffer::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let wl_buffer::Event::Release = event {
            state.released.push(buffer.id());
        }
    }
}

impl Dispatch<xdg_wm_base::XdgWmBase, ()> for State {
    fn event(
        _: &mut Self,
        wm_base: &xdg_wm_base::XdgWmBase,
        event: xdg_wm_base::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let xdg_wm_base::Event::Ping { serial } = event {
            wm_base.pong(serial);
        }
    }
}

impl Dispatch<xdg_surface::XdgSurface, ()> for State {
    fn event(
        state: &mut Self,
        surface: &xdg_surface::XdgSurface,
        event: xdg_surface::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let xdg_surface::Event::Configure { serial } = event {
            surface.ack_configure(serial);
            state.configured.get_or_insert((0, 0));
        }
    }
}

impl Dispatch<xdg_toplevel::XdgToplevel, ()> for State {
    fn event(
        state: &mut Self,
        _: &xdg_toplevel::XdgToplevel,
        event: xdg_toplevel::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        match event {
            xdg_toplevel::Event::Configure { width, height, .. } => state.configured = Some((width, height)),
            xdg_toplevel::Event::Close => state.closed = true,
            _ => {}
        }
    }
}

impl Dispatch<wl_callback::WlCallback, ()> for State {
    fn event(
        state: &mut Self,
        _: &wl_callback::WlCallback,
        event: wl_callback::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let wl_callback::Event::Done { .. } = event {
            state.frames_done += 1;
        }
    }
}

wayland_client::delegate_noop!(State: ignore wl_compositor::WlCompositor);
wayland_client::delegate_noop!(State: ignore wl_surface::WlSurface);
