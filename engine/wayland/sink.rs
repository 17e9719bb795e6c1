//! [`WaylandSink`]: presents dmabridge buffers on a compositor through linux-dmabuf.
//!
//! Per buffer: allocate (export from the Vulkan producer on the zero-copy plan, or a memfd of
//! the sink's own on the copy plan), send its planes with one `zwp_linux_buffer_params_v1.add`
//! each (fd, offset, stride, modifier hi/lo; INVALID for an implicit layout), then `create`
//! and wait for `created` or `failed`. Per frame: take a buffer the compositor has released
//! (or a new one, up to [`SinkOptions::max_buffers`]), write the frame into it, attach,
//! damage, ask for a frame callback, commit. A buffer is written again only after its
//! `wl_buffer.release`; [`SinkStats::reuse_before_release`] counts violations and stays 0.
//!
//! Failures follow GStreamer's reconfigure: a `failed` buffer is dropped (its fds closed)
//! and allocated again; when the compositor fails the same format twice in a row, that
//! format is excluded from the compositor's participant and the sink renegotiates, which
//! ends on the copy plan or another format. New v4 feedback renegotiates too. Buffers of an
//! old plan are destroyed as the compositor releases them.

use ash::vk;
use dmabridge_interop::dmabuf::{DescriptorError, DmaBuf, PlaneLayout};
use dmabridge_interop::negotiate::{AllocationRequest, ImplicitRuleError, Participant};
use dmabridge_interop::peers::wayland::modifier_to_hi_lo;
use dmabridge_interop::{format_info, Format, FormatSet, Fourcc, Layout};
use tracing::{debug, info, warn};
use wayland_client::backend::ObjectId;
use wayland_client::protocol::{wl_buffer, wl_surface};
use wayland_client::Proxy;
use wayland_protocols::wp::linux_dmabuf::zv1::client::zwp_linux_buffer_params_v1;
use wayland_protocols::xdg::shell::client::{xdg_surface, xdg_toplevel};

use super::client::{Client, ParamsResult};
use super::formats::{compositor_participant, CompositorFormats};
use super::plan::{copy_plan, plan, producer_participant, Plan, PlanError, PlanReason};
use super::upload::{Staging, UploadError};
use dmabridge_interop::dmabuf::write_planes;
use super::{Display, WaylandError};
use crate::dmabuf::export::{ExportError, ExportRequest, ExportedImage};
use crate::Engine;

/// The Vulkan usage the producer writes buffers with (a transfer from its staging buffer).
pub const PRODUCER_USAGE: vk::ImageUsageFlags = vk::ImageUsageFlags::TRANSFER_DST;

/// The longest the sink waits for a frame's GPU upload before it attaches the buffer.
const UPLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Row pitch and plane offset alignment of the copy path's own buffers.
const COPY_ALIGN: u64 = 256;

/// What to show, and where.
#[derive(Debug, Clone)]
pub struct SinkOptions {
    pub display: Display,
    pub width: u32,
    pub height: u32,
    /// The formats frames can be drawn in, most preferred first.
    pub fourccs: Vec<Fourcc>,
    pub title: String,
    /// Buffers in the pool at most (the compositor holds one on screen, one may be queued).
    pub max_buffers: usize,
    /// Replace the compositor's list with this one for negotiation (for modelling other
    /// compositors; the buffers still go to the real one).
    pub compositor_override: Option<FormatSet>,
    /// Fault injection for tests: the first this-many buffers go out with a stride of 0,
    /// which the compositor's importer must reject (`failed`).
    pub inject_bad_strides: u32,
}

impl SinkOptions {
    pub fn new(display: Display, width: u32, height: u32, fourccs: Vec<Fourcc>) -> Self {
        SinkOptions {
            display,
            width,
            height,
            fourccs,
            title: "dmabridge".into(),
            max_buffers: 3,
            compositor_override: None,
            inject_bad_strides: 0,
        }
    }
}

/// Counters a test or the demo can check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkStats {
    pub frames: u64,
    /// `created` events.
    pub buffers_created: u64,
    /// `failed` events.
    pub buffers_failed: u64,
    /// `wl_buffer.release` events.
    pub releases: u64,
    /// Frames written into a buffer the compositor had not released (must stay 0).
    pub reuse_before_release: u64,
    /// Releases of a buffer that was not attached (a compositor bug; must stay 0).
    pub spurious_releases: u64,
    /// Most buffers attached and not yet released at once.
    pub max_in_flight: usize,
    pub renegotiations: u64,
    /// Frame callbacks received.
    pub frame_callbacks: u64,
}

/// Why the sink failed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error(transparent)]
    Wayland(#[from] WaylandError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("exporting a buffer failed: {0}")]
    Export(#[from] ExportError),
    #[error("writing a frame failed: {0}")]
    Upload(#[from] UploadError),
    #[error("describing a buffer failed: {0}")]
    Descriptor(#[from] DescriptorError),
    #[error("allocating a buffer failed: {0}")]
    Alloc(#[from] dmabridge_interop::dmabuf::MemfdError),
    #[error("the allocation breaks the implicit-modifier rules: {0}")]
    Implicit(#[from] ImplicitRuleError),
    #[error("a {0}-plane buffer cannot be described to linux-dmabuf (offsets and strides are 32-bit)")]
    LayoutTooLarge(usize),
    #[error("the producer's export is not a dma-buf")]
    NotADmaBuf,
    #[error("the frame's upload did not finish: {0}")]
    Submit(#[from] crate::device::submit::SubmitError),
    #[error("the compositor failed every usable format; excluded: [{}]", .0.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", "))]
    NoUsableFormat(Vec<Format>),
}

/// The memory behind one buffer.
enum Storage {
    /// Exported by the Vulkan producer; frames are copied in on the GPU.
    Exported { image: Box<ExportedImage>, staging: Staging },
    /// The copy path's own memfd; frames are copied in by the CPU.
    Own(DmaBuf),
}

impl Storage {
    fn dmabuf(&self) -> Option<&DmaBuf> {
        match self {
            Storage::Exported { image, .. } => image.dmabuf(),
            Storage::Own(d) => Some(d),
        }
    }
}

struct Slot {
    buffer: wl_buffer::WlBuffer,
    id: ObjectId,
    /// Attached and not released yet.
    busy: bool,
    /// From an old plan: destroy on release.
    retired: bool,
    storage: Storage,
}

/// A Wayland client presenting dmabridge buffers on an `xdg_toplevel`.
pub struct WaylandSink {
    engine: Engine,
    client: Client,
    surface: wl_surface::WlSurface,
    xdg_surface: xdg_surface::XdgSurface,
    toplevel: xdg_toplevel::XdgToplevel,
    opts: SinkOptions,
    formats: CompositorFormats,
    producer: Participant,
    excluded: Vec<Format>,
    plan: Plan,
    slots: Vec<Slot>,
    stats: SinkStats,
    frame_pending: bool,
    feedback_generation: u64,
    inject_pending: u32,
    consecutive_failures: u32,
}

impl WaylandSink {
    /// Connects, reads the compositor's formats, negotiates with `engine`'s producer, and
    /// maps an xdg_toplevel (waiting for its first configure).
    pub fn connect(engine: &Engine, opts: SinkOptions) -> Result<WaylandSink, SinkError> {
        let mut client = Client::connect(&opts.display)?;
        let formats = CompositorFormats::from_client(&client)?;
        info!(version = formats.version, formats = formats.formats.len(), "compositor formats");
        let producer = producer_participant(engine, &opts.fourccs, PRODUCER_USAGE);
        let compositor = match &opts.compositor_override {
            Some(set) => compositor_participant(set.clone()),
            None => formats.participant(),
        };
        let plan = plan(&producer, &compositor, &opts.fourccs)?;
        let compositor_global = client.state.compositor.clone().ok_or(WaylandError::MissingGlobal("wl_compositor"))?;
        let wm_base = client.state.wm_base.clone().ok_or(WaylandError::MissingGlobal("xdg_wm_base"))?;
        let surface = compositor_global.create_surface(&client.qh, ());
        let xdg_surface = wm_base.get_xdg_surface(&surface, &client.qh, ());
        let toplevel = xdg_surface.get_toplevel(&client.qh, ());
        toplevel.set_title(opts.title.clone());
        toplevel.set_app_id("dmabridge".into());
        surface.commit();
        while client.state.configured.is_none() {
            client.wait()?;
        }
        let feedback_generation = client.state.feedback_generation;
        let inject_pending = opts.inject_bad_strides;
        Ok(WaylandSink {
            engine: engine.clone(),
            client,
            surface,
            xdg_surface,
            toplevel,
            opts,
            formats,
            producer,
            excluded: Vec::new(),
            plan,
            slots: Vec::new(),
            stats: SinkStats::default(),
            frame_pending: false,
            feedback_generation,
            inject_pending,
            consecutive_failures: 0,
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn formats(&self) -> &CompositorFormats {
        &self.formats
    }

    pub fn stats(&self) -> &SinkStats {
        &self.stats
    }

    /// Buffers in the pool (attached or free).
    pub fn pool_size(&self) -> usize {
        self.slots.len()
    }

    /// The layout buffers are sent with (`None` before the first buffer).
    pub fn sent_format(&self) -> Option<Format> {
        self.slots.iter().rev().find(|s| !s.retired).and_then(|s| s.storage.dmabuf()).map(|d| d.format())
    }

    /// The fourcc frames must be drawn in now (it may change on renegotiation).
    pub fn fourcc(&self) -> Fourcc {
        self.plan.fourcc()
    }

    /// Presents one frame: `frame` holds the packed planes of [`Self::fourcc`] at the sink's
    /// extent. Waits for the previous frame's callback, so frames are paced by the compositor.
    pub fn present(&mut self, frame: &[u8]) -> Result<(), SinkError> {
        self.client.poll()?;
        self.handle_events()?;
        while self.frame_pending {
            self.client.wait()?;
            self.handle_events()?;
        }
        let slot = self.free_slot()?;
        let (w, h) = (self.opts.width, self.opts.height);
        let fourcc = self.plan.fourcc();
        let s = &mut self.slots[slot];
        if s.busy {
            self.stats.reuse_before_release += 1;
        }
        match &mut s.storage {
            Storage::Exported { image, staging } => {
                // linux-dmabuf v3 has no explicit fences: the frame must be written before the
                // compositor sees the commit (the cpu-wait sync method).
                staging.upload(image, w, h, fourcc, frame)?.wait(UPLOAD_TIMEOUT)?;
            }
            Storage::Own(d) => write_planes(d, frame).map_err(UploadError::from)?,
        }
        let qh = &self.client.qh;
        self.surface.attach(Some(&s.buffer), 0, 0);
        self.surface.damage_buffer(0, 0, w as i32, h as i32);
        self.surface.frame(qh, ());
        self.surface.commit();
        s.busy = true;
        self.frame_pending = true;
        self.stats.frames += 1;
        let in_flight = self.slots.iter().filter(|s| s.busy).count();
        self.stats.max_in_flight = self.stats.max_in_flight.max(in_flight);
        self.client.queue.flush().map_err(WaylandError::from)?;
        Ok(())
    }

    /// Waits until the last frame was shown (its frame callback fired).
    pub fn wait_shown(&mut self) -> Result<(), SinkError> {
        while self.frame_pending {
            self.client.wait()?;
            self.handle_events()?;
        }
        // One more roundtrip so that releases sent with the repaint are in.
        self.client.roundtrip()?;
        self.handle_events()
    }

    fn handle_events(&mut self) -> Result<(), SinkError> {
        if self.client.state.closed {
            return Err(WaylandError::Closed.into());
        }
        if self.client.state.frames_done != self.stats.frame_callbacks {
            self.stats.frame_callbacks = self.client.state.frames_done;
            self.frame_pending = false;
        }
        let released: Vec<ObjectId> = std::mem::take(&mut self.client.state.released);
        for id in released {
            let Some(i) = self.slots.iter().position(|s| s.id == id) else { continue };
            if !self.slots[i].busy {
                self.stats.spurious_releases += 1;
                continue;
            }
            self.stats.releases += 1;
            self.slots[i].busy = false;
            if self.slots[i].retired {
                let s = self.slots.remove(i);
                s.buffer.destroy();
            }
        }
        if self.client.state.feedback_generation != self.feedback_generation {
            self.feedback_generation = self.client.state.feedback_generation;
            info!("linux-dmabuf feedback changed: renegotiating");
            self.formats = CompositorFormats::from_client(&self.client)?;
            self.renegotiate(None)?;
        }
        Ok(())
    }

    /// Negotiates again (after a feedback change or failures) and retires the old buffers
    /// if the plan changed.
    fn renegotiate(&mut self, failed: Option<Format>) -> Result<(), SinkError> {
        self.stats.renegotiations += 1;
        let mut offered = self.opts.compositor_override.clone().unwrap_or_else(|| self.formats.formats.clone());
        offered.retain(|f| !self.excluded.contains(f));
        let compositor = compositor_participant(offered.clone());
        let mut new_plan = plan(&self.producer, &compositor, &self.opts.fourccs)
            .map_err(|_| SinkError::NoUsableFormat(self.excluded.clone()))?;
        if let (Some(f), Plan::Copy { reason, .. }) = (failed, &mut new_plan) {
            *reason = PlanReason::CompositorFailed(f);
        }
        if new_plan != self.plan {
            info!(old = ?self.plan, new = ?new_plan, "new plan");
            self.plan = new_plan;
            self.retire_all();
        }
        Ok(())
    }

    fn retire_all(&mut self) {
        let mut keep = Vec::new();
        for mut s in self.slots.drain(..) {
            if s.busy {
                s.retired = true;
                keep.push(s);
            } else {
                s.buffer.destroy();
            }
        }
        self.slots = keep;
    }

    /// A buffer the compositor does not hold: a released one, or a new one while the pool
    /// is not full, else waits for a release.
    fn free_slot(&mut self) -> Result<usize, SinkError> {
        loop {
            if let Some(i) = self.slots.iter().position(|s| !s.busy && !s.retired) {
                return Ok(i);
            }
            let live = self.slots.iter().filter(|s| !s.retired).count();
            if live < self.opts.max_buffers.max(1) {
                match self.new_slot()? {
                    Some(i) => {
                        self.consecutive_failures = 0;
                        return Ok(i);
                    }
                    None => continue, // failed: new_slot renegotiated if needed; try again
                }
            }
            self.client.wait()?;
            self.handle_events()?;
        }
    }

    /// Allocates and wraps a buffer for the current plan. `None` if the compositor failed it.
    fn new_slot(&mut self) -> Result<Option<usize>, SinkError> {
        let storage = match self.allocate()? {
            Some(s) => s,
            None => return Ok(None),
        };
        let Some(dmabuf) = storage.dmabuf() else { return Err(SinkError::NotADmaBuf) };
        let format = dmabuf.format();
        let inject = self.inject_pending > 0;
        self.inject_pending = self.inject_pending.saturating_sub(1);
        match self.wrap(dmabuf, inject)? {
            Some(buffer) => {
                self.stats.buffers_created += 1;
                let id = buffer.id();
                self.slots.push(Slot { buffer, id, busy: false, retired: false, storage });
                Ok(Some(self.slots.len() - 1))
            }
            None => {
                self.stats.buffers_failed += 1;
                drop(storage); // closes the buffer's fds
                self.consecutive_failures += 1;
                warn!(%format, failures = self.consecutive_failures, injected = inject, "the compositor failed a buffer");
                if self.consecutive_failures >= 2 {
                    self.consecutive_failures = 0;
                    if !self.excluded.contains(&format) {
                        self.excluded.push(format);
                    }
                    self.renegotiate(Some(format))?;
                }
                Ok(None)
            }
        }
    }

    /// Allocates a buffer for the plan; a zero-copy plan whose export fails turns into the
    /// copy plan (`None`: try again).
    fn allocate(&mut self) -> Result<Option<Storage>, SinkError> {
        let (w, h) = (self.opts.width, self.opts.height);
        match &self.plan {
            Plan::ZeroCopy { allocation } => {
                let req = ExportRequest::new(allocation.fourcc, w, h, PRODUCER_USAGE).with_acceptable(self.plan.acceptable());
                let request: AllocationRequest = allocation.request(w, h);
                match self.engine.export_image(&req) {
                    Ok(image) => {
                        // Seed 001, rule 3: what the allocator reports must fit the request;
                        // rule 4: the compositor imports with the layout we send.
                        let result = request.accept(image.layout())?;
                        let send = if allocation.layout.is_implicit() { Layout::Implicit } else { image.layout() };
                        result.check_import(send)?;
                        let size = format_info(allocation.fourcc).map_or(0, |i| i.packed_size(w, h));
                        let staging = Staging::new(&self.engine, size)?;
                        debug!(layout = %image.layout(), "exported a buffer");
                        Ok(Some(Storage::Exported { image: Box::new(image), staging }))
                    }
                    Err(e) => {
                        warn!(error = %e, "the producer cannot export the negotiated format: copy path");
                        let offered =
                            self.opts.compositor_override.clone().unwrap_or_else(|| self.formats.formats.clone());
                        let fourccs = self.opts.fourccs.clone();
                        let mut offered = offered;
                        offered.retain(|f| !self.excluded.contains(f));
                        self.plan = copy_plan(&offered, &fourccs, PlanReason::Conflicts(Vec::new()))?;
                        self.stats.renegotiations += 1;
                        self.retire_all();
                        Ok(None)
                    }
                }
            }
            Plan::Copy { fourcc, layout, .. } => Ok(Some(Storage::Own(own_buffer(*fourcc, *layout, w, h)?))),
        }
    }

    /// Sends `buf` through `zwp_linux_buffer_params_v1` and waits for `created` or `failed`.
    fn wrap(&mut self, buf: &DmaBuf, bad_stride: bool) -> Result<Option<wl_buffer::WlBuffer>, SinkError> {
        let dmabuf = self.client.state.dmabuf.clone().ok_or(WaylandError::MissingGlobal("zwp_linux_dmabuf_v1"))?;
        let params = dmabuf.create_params(&self.client.qh, ());
        // INVALID on the wire for an implicit layout, the modifier otherwise.
        let (hi, lo) = modifier_to_hi_lo(buf.layout().to_wire());
        for (i, p) in buf.planes().enumerate() {
            let offset = u32::try_from(p.offset).map_err(|_| SinkError::LayoutTooLarge(buf.plane_count()))?;
            let mut stride = u32::try_from(p.stride).map_err(|_| SinkError::LayoutTooLarge(buf.plane_count()))?;
            if bad_stride && i == 0 {
                stride = 0;
            }
            params.add(p.fd, i as u32, offset, stride, hi, lo);
        }
        let (w, h) = (buf.width() as i32, buf.height() as i32);
        params.create(w, h, buf.fourcc().code(), zwp_linux_buffer_params_v1::Flags::empty());
        let key = params.id();
        let result = loop {
            if let Some(r) = self.client.state.params.remove(&key) {
                break r;
            }
            self.client.wait()?;
        };
        params.destroy();
        Ok(match result {
            ParamsResult::Created(b) => Some(b),
            ParamsResult::Failed => None,
        })
    }
}

/// The copy path's own buffer: a memfd with every plane's rows at a 256-byte aligned pitch.
fn own_buffer(fourcc: Fourcc, layout: Layout, width: u32, height: u32) -> Result<DmaBuf, SinkError> {
    let info = format_info(fourcc).ok_or(UploadError::UnknownFourcc(fourcc))?;
    let mut planes = Vec::with_capacity(info.plane_count());
    let mut offset = 0u64;
    for i in 0..info.plane_count() {
        let stride = info.min_stride(i, width).div_ceil(COPY_ALIGN) * COPY_ALIGN;
        planes.push(PlaneLayout::linear(offset, stride, info.plane_height(i, height)));
        offset += (stride * u64::from(info.plane_height(i, height))).div_ceil(COPY_ALIGN) * COPY_ALIGN;
    }
    // Sealed: the compositor maps it, and must not be exposed to a shrinking file.
    let fd = dmabridge_interop::dmabuf::sealed_memfd_of_size("dmabridge-wayland", offset)?;
    Ok(DmaBuf::in_one_file(fourcc, layout, width, height, fd, &planes)?)
}

impl Drop for WaylandSink {
    fn drop(&mut self) {
        for s in self.slots.drain(..) {
            s.buffer.destroy();
        }
        self.toplevel.destroy();
        self.xdg_surface.destroy();
        self.surface.destroy();
        // Let the compositor see it all before the buffers' memory goes away.
        if let Err(e) = self.client.roundtrip() {
            debug!(error = %e, "closing the Wayland connection");
        }
    }
}
