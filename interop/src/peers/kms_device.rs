//! A live KMS device (`/dev/dri/cardN`) as a participant: its planes' format lists, read
//! through the kernel's own ioctls, and the two things a display does with a dma-buf:
//! import it as a framebuffer and scan it out; and, where the device has a writeback
//! connector (vkms), the frame its CRTC composed, written back to memory
//! ([`KmsDevice::write_back`]): what the display really showed.
//!
//! The ioctls are Smithay's drm-rs (`drm::Device`, `drm::control::Device`), so this module's
//! only `unsafe` is taking ownership of the writeback out-fence the kernel returns. The `IN_FORMATS` blob goes through [`kms::parse_in_formats`],
//! the one reader of it, with its bounds.
//!
//! # fd ownership
//! [`KmsDevice`] opens the card itself (`O_RDWR | O_CLOEXEC`) and never lends the fd out:
//! GEM handles are per open file and the kernel hands back the *same* handle each time one
//! dma-buf is imported into one file, so a second user of the fd could close a handle from
//! under [`KmsDevice::add_framebuffer`] (or the other way round). The fd is shared, behind
//! an `Arc`, with the [`Framebuffer`]s made on it, since removing a framebuffer needs the
//! file that added it; it is closed when the device and all its framebuffers are dropped.
//! Closing it also ends whatever it committed: the kernel then restores the previous
//! master's (fbcon's) configuration.
//!
//! # Bounds
//! Every list the kernel hands back is checked against a `MAX_KMS_...` constant before
//! anything is done per entry (each entry costs further ioctls): real devices have a few
//! dozen planes and connectors and a few dozen properties per object.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drm::buffer::{self, DrmFourcc, DrmModifier, PlanarBuffer};
use drm::control::{
    atomic::AtomicModeReq, connector, crtc, framebuffer, plane, property, AtomicCommitFlags, Device as ControlDevice,
    FbCmd2Flags, Mode, ModeTypeFlags, PlaneType, ResourceHandle, ResourceHandles,
};
use drm::{ClientCapability, Device as DrmDevice, DriverCapability};
use rustix::fs::{Mode as FileMode, OFlags, SeekFrom};

use crate::dmabuf::{take_returned_fd, DmaBuf, FdTrust, MapError, PlaneMap};
use crate::sync::{poll_readable, wait_sync_file, SyncAccess, WaitError};
use crate::negotiate::Participant;
use crate::peers::kms;
use crate::{Format, FormatSet, Fourcc};

/// Most planes a device may list.
pub const MAX_KMS_PLANES: usize = 256;
/// Most connectors a device may list.
pub const MAX_KMS_CONNECTORS: usize = 256;
/// Most properties one KMS object may have.
pub const MAX_KMS_PROPERTIES: usize = 1024;
/// Most formats a plane without `IN_FORMATS` may list (the blob's own bound).
pub const MAX_KMS_PLANE_FORMATS: usize = kms::MAX_IN_FORMATS_FORMATS as usize;

/// Why a KMS operation failed. Every message names the device's path and the operation, and
/// the errno where the kernel gave one ([`KmsDeviceError::errno`]).
#[derive(Debug, thiserror::Error)]
pub enum KmsDeviceError {
    /// `open(2)` of the path failed (missing, no permission).
    #[error("{path}: opening the DRM device (O_RDWR|O_CLOEXEC) failed: {source}")]
    Open { path: String, source: io::Error },
    /// The file opened but is no DRM device: `DRM_IOCTL_VERSION` failed on it.
    #[error("{path}: not a DRM device: {op} failed: {source}")]
    NotDrm { path: String, op: &'static str, source: io::Error },
    /// A DRM device without mode setting (a render-only driver such as vgem): the kernel
    /// refuses the KMS client caps or the mode resources on it.
    #[error("{path}: not a KMS device (driver {driver:?}): {op} failed: {source}")]
    NotKms { path: String, driver: String, op: &'static str, source: io::Error },
    /// A query the device should answer failed.
    #[error("{path}: {op} failed: {source}")]
    Ioctl { path: String, op: &'static str, source: io::Error },
    /// The kernel listed more of something than dmabridge reads (`MAX_KMS_...`).
    #[error("{path}: {op} listed {count} {what}, more than the {max} dmabridge reads")]
    TooMany { path: String, op: &'static str, what: &'static str, count: usize, max: usize },
    /// A plane's `IN_FORMATS` blob did not parse.
    #[error("{path}: plane {plane}: reading its IN_FORMATS blob (DRM_IOCTL_MODE_GETPROPBLOB): {source}")]
    InFormats { path: String, plane: u32, source: kms::KmsError },
    /// A KMS object lacks a property that every atomic driver has.
    #[error("{path}: {object} {id} has no {name:?} property (DRM_IOCTL_MODE_OBJ_GETPROPERTIES)")]
    MissingProperty { path: String, object: &'static str, id: u32, name: &'static str },
    /// A plane's `type` property holds a value the kernel does not define.
    #[error("{path}: plane {plane}: unknown plane type {value} (DRM_IOCTL_MODE_OBJ_GETPROPERTIES)")]
    UnknownPlaneType { path: String, plane: u32, value: u64 },
    /// No plane has the id asked for.
    #[error("{path}: no plane {plane} (DRM_IOCTL_MODE_GETPLANERESOURCES lists {available:?})")]
    NoSuchPlane { path: String, plane: u32, available: Vec<u32> },
    /// The device has no primary plane, so there is no default plane.
    #[error("{path}: no primary plane (DRM_IOCTL_MODE_GETPLANERESOURCES lists {available:?})")]
    NoPrimaryPlane { path: String, available: Vec<u32> },
    /// The dma-buf's fourcc is one drm-rs (drm-fourcc) cannot pass to ADDFB2.
    #[error("{path}: DRM_IOCTL_MODE_ADDFB2: fourcc {fourcc} is unknown to the DRM bindings")]
    UnsupportedFourcc { path: String, fourcc: Fourcc },
    /// A plane's offset or stride does not fit ADDFB2's 32-bit fields.
    #[error("{path}: DRM_IOCTL_MODE_ADDFB2: plane {plane}'s {what} {value} does not fit a u32")]
    PlaneOutOfRange { path: String, plane: usize, what: &'static str, value: u64 },
    /// The driver refused to import the dma-buf (`DRM_IOCTL_PRIME_FD_TO_HANDLE`): typically
    /// a foreign dma-buf the driver cannot scan out from (`ENODEV`, `EINVAL`, `EOPNOTSUPP`).
    #[error(
        "{path}: the driver refused to import the dma-buf of plane {plane} (DRM_IOCTL_PRIME_FD_TO_HANDLE): {source}"
    )]
    ImportRefused { path: String, plane: usize, source: io::Error },
    /// The driver refused the framebuffer (`DRM_IOCTL_MODE_ADDFB2`): format, modifier,
    /// pitch, offset or size not supported, or modifiers not supported at all.
    #[error("{path}: the driver refused the framebuffer {format} {width}x{height} (DRM_IOCTL_MODE_ADDFB2, {}): {source}", if *.with_modifier { "with DRM_MODE_FB_MODIFIERS" } else { "without modifiers" })]
    FramebufferRefused { path: String, format: Format, width: u32, height: u32, with_modifier: bool, source: io::Error },
    /// The kernel refused `DRM_CLIENT_CAP_ATOMIC` at open, so nothing can be shown through
    /// an atomic commit.
    #[error("{path}: atomic commit: the driver refused DRM_CLIENT_CAP_ATOMIC at open: {source}")]
    NoAtomic { path: String, source: Arc<io::Error> },
    /// No connected connector reaches a CRTC that the plane can use.
    #[error("{path}: plane {plane}: no connected connector on a CRTC the plane can use (DRM_IOCTL_MODE_GETCONNECTOR, GETENCODER)")]
    NoOutput { path: String, plane: u32 },
    /// The driver refused the atomic commit, at its `TEST_ONLY` check or for real.
    #[error("{path}: the driver refused the atomic commit{} (DRM_IOCTL_MODE_ATOMIC, plane {plane}, CRTC {crtc}, connector {connector}, mode {mode}): {source}", if *.test_only { " at its TEST_ONLY check" } else { "" })]
    CommitRefused {
        path: String,
        test_only: bool,
        plane: u32,
        crtc: u32,
        connector: u32,
        mode: String,
        source: io::Error,
    },
    /// The driver refused a flip ([`KmsDevice::flip`]): an atomic commit of the plane's
    /// `FB_ID` alone, with no modeset allowed (a framebuffer smaller than the area shown,
    /// or one whose format would need a modeset).
    #[error("{path}: the driver refused to flip plane {plane} to framebuffer {framebuffer} {width}x{height} (DRM_IOCTL_MODE_ATOMIC, FB_ID only, no modeset; {shown_width}x{shown_height} shown): {source}")]
    FlipRefused {
        path: String,
        plane: u32,
        framebuffer: u32,
        width: u32,
        height: u32,
        shown_width: u32,
        shown_height: u32,
        source: io::Error,
    },
    /// A flip queued by [`KmsDevice::queue_flip`] sent no page-flip event in time.
    #[error("{path}: CRTC {crtc}: no page-flip event for framebuffer {framebuffer} within {timeout:?} (poll and read of the card for DRM_EVENT_FLIP_COMPLETE)")]
    FlipTimeout { path: String, crtc: u32, framebuffer: u32, timeout: Duration },
    /// The device lists no writeback connector: the kernel refused
    /// `DRM_CLIENT_CAP_WRITEBACK_CONNECTORS` (it needs `DRM_CLIENT_CAP_ATOMIC`), or took it
    /// and lists none (a driver without writeback, or vkms with `enable_writeback=0`).
    #[error("{path}: no writeback connector: {reason}")]
    NoWriteback { path: String, reason: String },
    /// The writeback connector's `WRITEBACK_PIXEL_FORMATS` does not hold the format of the
    /// buffer it was to write into.
    #[error("{path}: writeback connector {connector}: format {fourcc} not offered (WRITEBACK_PIXEL_FORMATS lists {})", offered.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(","))]
    WritebackFormatNotOffered { path: String, connector: u32, fourcc: Fourcc, offered: Vec<Fourcc> },
    /// The driver refused the writeback commit (`WRITEBACK_FB_ID` with an out-fence): a
    /// buffer whose size is not the mode's (vkms), a CRTC that is off.
    #[error("{path}: the driver refused the writeback commit (DRM_IOCTL_MODE_ATOMIC: connector {connector} on CRTC {crtc}, WRITEBACK_FB_ID {framebuffer} {width}x{height}, mode {mode_width}x{mode_height}): {source}")]
    WritebackRefused {
        path: String,
        connector: u32,
        crtc: u32,
        framebuffer: u32,
        width: u32,
        height: u32,
        mode_width: u32,
        mode_height: u32,
        source: io::Error,
    },
    /// The writeback commit succeeded but its out-fence is no fence this process owns.
    #[error("{path}: writeback connector {connector}: WRITEBACK_OUT_FENCE_PTR came back as {raw}: {reason}")]
    WritebackNoFence { path: String, connector: u32, raw: i32, reason: String },
    /// The writeback's out-fence did not signal within the limit: the composer never wrote
    /// the frame.
    #[error("{path}: writeback connector {connector}: the out-fence did not signal within {timeout:?}")]
    WritebackTimeout { path: String, connector: u32, timeout: Duration },
    /// Waiting on the writeback's out-fence failed otherwise.
    #[error("{path}: writeback connector {connector}: waiting on the out-fence: {source}")]
    WritebackFence { path: String, connector: u32, source: WaitError },
    /// Reading the written-back frame through a mapping of its dma-buf (inside
    /// `DMA_BUF_IOCTL_SYNC`) failed.
    #[error("{path}: reading the written-back frame from its dma-buf: {source}")]
    WritebackRead { path: String, source: MapError },
}

impl KmsDeviceError {
    /// The errno the kernel answered with, where it did.
    pub fn errno(&self) -> Option<i32> {
        use KmsDeviceError as E;
        match self {
            E::Open { source, .. }
            | E::NotDrm { source, .. }
            | E::NotKms { source, .. }
            | E::Ioctl { source, .. }
            | E::ImportRefused { source, .. }
            | E::FramebufferRefused { source, .. }
            | E::CommitRefused { source, .. }
            | E::FlipRefused { source, .. }
            | E::WritebackRefused { source, .. } => source.raw_os_error(),
            E::NoAtomic { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// The open card. Private so that nobody else makes GEM handles on it (see the module doc).
#[derive(Debug)]
struct Card(OwnedFd);

impl AsFd for Card {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl DrmDevice for Card {}
impl ControlDevice for Card {}

/// What a plane is for, from its `type` property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlaneKind {
    Primary,
    Overlay,
    Cursor,
}

/// One plane and what it can scan out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsPlane {
    /// The plane's KMS object id.
    pub id: u32,
    pub kind: PlaneKind,
    /// Object ids of the CRTCs the plane can be attached to.
    pub possible_crtcs: Vec<u32>,
    /// Whether the plane has an `IN_FORMATS` blob (else `formats` is its plain list, implicit).
    pub in_formats: bool,
    pub formats: FormatSet,
}

/// A display mode, as far as a caller sizing a buffer for it needs to know.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KmsMode {
    pub name: String,
    pub width: u32,
    pub height: u32,
    /// Vertical refresh in Hz.
    pub refresh: u32,
    /// Whether the connector marks it preferred.
    pub preferred: bool,
}

/// A connected connector, a CRTC that it and the plane can both use, and the connector's
/// preferred mode: where [`KmsDevice::show`] lights a plane up.
#[derive(Debug, Clone)]
pub struct KmsOutput {
    pub connector: u32,
    /// The connector's name as the kernel forms it (`Virtual-1`, `HDMI-A-2`).
    pub connector_name: String,
    pub crtc: u32,
    pub mode: KmsMode,
    raw_mode: Mode,
}

/// What [`KmsDevice::show`] committed, and what [`KmsDevice::flip`] needs to put the next
/// framebuffer on the same plane without resolving anything again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Shown {
    pub plane: u32,
    pub crtc: u32,
    pub connector: u32,
    pub connector_name: String,
    pub mode: KmsMode,
    pub framebuffer: u32,
    /// The part of the framebuffer scanned out, from its top left, and the CRTC area it
    /// fills (the same: no scaling).
    pub width: u32,
    pub height: u32,
    /// The plane's `FB_ID` property, resolved once by `show`.
    #[serde(skip)]
    fb_id_property: property::Handle,
}

/// A dumb buffer exported as a dma-buf ([`KmsDevice::dumb_buffer`]).
#[derive(Debug)]
pub struct DumbExport {
    /// The dma-buf, read-write, `O_CLOEXEC`, owned by the caller.
    pub fd: OwnedFd,
    /// Bytes per row, as the driver chose it.
    pub pitch: u32,
    /// The dma-buf's size in bytes (the driver rounds up, usually to pages).
    pub size: u64,
}

/// The page-flip event of a flip queued by [`KmsDevice::queue_flip`], as the kernel sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FlipEvent {
    /// The CRTC's vblank count when the flip completed.
    pub sequence: u32,
    /// When it completed (`CLOCK_MONOTONIC`).
    pub time: Duration,
}

/// A writeback connector: where a CRTC's composed frame can be written to memory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KmsWriteback {
    pub connector: u32,
    /// `Writeback-1`.
    pub name: String,
    /// Its `WRITEBACK_PIXEL_FORMATS`, in the kernel's order (always written LINEAR).
    pub formats: Vec<Fourcc>,
}

/// A buffer a writeback connector writes into ([`KmsDevice::writeback_target`]): the
/// caller's dma-buf and the framebuffer made of it.
#[derive(Debug)]
pub struct WritebackTarget {
    buf: DmaBuf,
    fb: Framebuffer,
    connector: u32,
    crtc_id_property: property::Handle,
    fb_id_property: property::Handle,
    fence_property: property::Handle,
}

impl WritebackTarget {
    pub fn buffer(&self) -> &DmaBuf {
        &self.buf
    }

    pub fn framebuffer(&self) -> &Framebuffer {
        &self.fb
    }

    /// The writeback connector's id.
    pub fn connector(&self) -> u32 {
        self.connector
    }
}

/// A frame a writeback connector returned ([`KmsDevice::write_back`]).
#[derive(Debug, Clone)]
pub struct WrittenBack {
    pub fourcc: Fourcc,
    pub width: u32,
    pub height: u32,
    /// The frame's rows, packed (`width` times the format's bytes per pixel each), as read
    /// from the target's dma-buf.
    pub bytes: Vec<u8>,
    /// The atomic commit (the ioctl, blocking until the commit is applied).
    pub commit: Duration,
    /// The wait on the out-fence after the commit returned (the composer's run).
    pub fence_wait: Duration,
    /// Mapping and copying the rows out, inside `DMA_BUF_IOCTL_SYNC`.
    pub read: Duration,
    /// Whether this writeback unbound the display's connector from the CRTC: the kernel
    /// refused the writeback connector beside it (EINVAL), and took it alone (see
    /// [`KmsDevice::write_back`]).
    pub display_unbound: bool,
}

/// The summary of a device and plane that `negotiate --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KmsSummary {
    pub path: String,
    pub driver: String,
    pub atomic: bool,
    /// `DRM_CAP_ADDFB2_MODIFIERS`.
    pub addfb2_modifiers: bool,
    pub plane: u32,
    pub kind: PlaneKind,
    pub in_formats: bool,
    /// GStreamer `drm-format` strings (`XR24`, `NV12:0x0100000000000002`), in the plane's order.
    pub formats: Vec<String>,
}

/// A framebuffer added by [`KmsDevice::add_framebuffer`]; removed (`DRM_IOCTL_MODE_RMFB`)
/// when dropped. It keeps the card open (see the module doc).
#[derive(Debug)]
pub struct Framebuffer {
    card: Arc<Card>,
    path: Arc<str>,
    id: framebuffer::Handle,
    format: Format,
    width: u32,
    height: u32,
    with_modifier: bool,
}

impl Framebuffer {
    /// The framebuffer's KMS object id.
    pub fn id(&self) -> u32 {
        self.id.into()
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    /// Whether it was added with `DRM_MODE_FB_MODIFIERS` (an explicit layout).
    pub fn with_modifier(&self) -> bool {
        self.with_modifier
    }
}

impl Drop for Framebuffer {
    fn drop(&mut self) {
        if let Err(e) = self.card.destroy_framebuffer(self.id) {
            tracing::warn!(path = %self.path, fb = self.id(), error = %e, "DRM_IOCTL_MODE_RMFB failed");
        }
    }
}

/// ADDFB2's view of a dma-buf once its planes are GEM handles.
struct Planar {
    size: (u32, u32),
    format: DrmFourcc,
    modifier: Option<DrmModifier>,
    pitches: [u32; 4],
    handles: [Option<buffer::Handle>; 4],
    offsets: [u32; 4],
}

impl PlanarBuffer for Planar {
    fn size(&self) -> (u32, u32) {
        self.size
    }
    fn format(&self) -> DrmFourcc {
        self.format
    }
    fn modifier(&self) -> Option<DrmModifier> {
        self.modifier
    }
    fn pitches(&self) -> [u32; 4] {
        self.pitches
    }
    fn handles(&self) -> [Option<buffer::Handle>; 4] {
        self.handles
    }
    fn offsets(&self) -> [u32; 4] {
        self.offsets
    }
}

/// GEM handles made by PRIME import, closed when it goes out of scope: the framebuffer (if
/// one was made) holds its own references to the objects, and on any failure nothing else
/// would close them.
struct GemHandles<'a> {
    card: &'a Card,
    path: &'a str,
    handles: Vec<buffer::Handle>,
}

impl Drop for GemHandles<'_> {
    fn drop(&mut self) {
        for h in self.handles.drain(..) {
            if let Err(e) = self.card.close_buffer(h) {
                tracing::warn!(path = %self.path, handle = u32::from(h), error = %e, "DRM_IOCTL_GEM_CLOSE failed");
            }
        }
    }
}

/// An object's properties by name: handle and current value.
type Props = HashMap<String, (property::Handle, property::RawValue)>;

/// An open KMS device. See the module doc for who owns its fd.
#[derive(Debug)]
pub struct KmsDevice {
    card: Arc<Card>,
    path: Arc<str>,
    driver: String,
    atomic: Result<(), Arc<io::Error>>,
    /// `DRM_CLIENT_CAP_WRITEBACK_CONNECTORS`, or why the kernel refused it.
    writeback_cap: Result<(), String>,
    addfb2_modifiers: bool,
}

impl KmsDevice {
    /// Opens a card node, turns on the universal-planes and atomic client caps and checks that
    /// it is a KMS device. A refusal of the atomic cap is recorded ([`KmsDevice::atomic`]),
    /// not fatal: the formats can still be read; only [`KmsDevice::show`] needs it.
    pub fn open(path: &Path) -> Result<KmsDevice, KmsDeviceError> {
        let shown = path.display().to_string();
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, FileMode::empty())
            .map_err(|e| KmsDeviceError::Open { path: shown.clone(), source: e.into() })?;
        let card = Card(fd);
        let driver = card
            .get_driver()
            .map_err(|source| KmsDeviceError::NotDrm { path: shown.clone(), op: "DRM_IOCTL_VERSION", source })?
            .name()
            .to_string_lossy()
            .into_owned();
        let not_kms = |op, source| KmsDeviceError::NotKms { path: shown.clone(), driver: driver.clone(), op, source };
        // Without this cap the kernel hides primary and cursor planes, and the primary plane
        // is the default participant.
        card.set_client_capability(ClientCapability::UniversalPlanes, true)
            .map_err(|e| not_kms("DRM_IOCTL_SET_CLIENT_CAP(DRM_CLIENT_CAP_UNIVERSAL_PLANES)", e))?;
        let atomic = card.set_client_capability(ClientCapability::Atomic, true).map_err(Arc::new);
        // Writeback connectors are listed only to clients that ask (and only atomic ones may):
        // [`KmsDevice::output`] skips them, [`KmsDevice::writeback`] finds them.
        let writeback_cap = match &atomic {
            Ok(()) => card.set_client_capability(ClientCapability::WritebackConnectors, true).map_err(|e| e.to_string()),
            Err(e) => Err(format!("DRM_CLIENT_CAP_WRITEBACK_CONNECTORS needs DRM_CLIENT_CAP_ATOMIC, which was refused: {e}")),
        };
        card.resource_handles().map_err(|e| not_kms("DRM_IOCTL_MODE_GETRESOURCES", e))?;
        // A query error means no: the cap predates every kernel with ADDFB2 modifiers.
        let addfb2_modifiers = card.get_driver_capability(DriverCapability::AddFB2Modifiers).is_ok_and(|v| v != 0);
        Ok(KmsDevice { card: Arc::new(card), path: Arc::from(shown), driver, atomic, writeback_cap, addfb2_modifiers })
    }

    /// The path it was opened from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The kernel driver's name (`virtio_gpu`, `i915`, `amdgpu`).
    pub fn driver_name(&self) -> &str {
        &self.driver
    }

    /// Whether the kernel accepted `DRM_CLIENT_CAP_ATOMIC`.
    pub fn atomic(&self) -> bool {
        self.atomic.is_ok()
    }

    /// Whether the driver takes ADDFB2 with modifiers (`DRM_CAP_ADDFB2_MODIFIERS`).
    pub fn addfb2_modifiers(&self) -> bool {
        self.addfb2_modifiers
    }

    fn ioctl(&self, op: &'static str) -> impl FnOnce(io::Error) -> KmsDeviceError + '_ {
        move |source| KmsDeviceError::Ioctl { path: self.path.to_string(), op, source }
    }

    fn bound(&self, op: &'static str, what: &'static str, count: usize, max: usize) -> Result<(), KmsDeviceError> {
        if count > max {
            return Err(KmsDeviceError::TooMany { path: self.path.to_string(), op, what, count, max });
        }
        Ok(())
    }

    fn resources(&self) -> Result<ResourceHandles, KmsDeviceError> {
        self.card.resource_handles().map_err(self.ioctl("DRM_IOCTL_MODE_GETRESOURCES"))
    }

    fn props<H: ResourceHandle>(&self, handle: H) -> Result<Props, KmsDeviceError> {
        let set = self.card.get_properties(handle).map_err(self.ioctl("DRM_IOCTL_MODE_OBJ_GETPROPERTIES"))?;
        let (ids, values) = set.as_props_and_values();
        self.bound("DRM_IOCTL_MODE_OBJ_GETPROPERTIES", "properties", ids.len(), MAX_KMS_PROPERTIES)?;
        let mut out = HashMap::with_capacity(ids.len());
        for (&id, &value) in ids.iter().zip(values) {
            let info = self.card.get_property(id).map_err(self.ioctl("DRM_IOCTL_MODE_GETPROPERTY"))?;
            out.insert(info.name().to_string_lossy().into_owned(), (id, value));
        }
        Ok(out)
    }

    /// Property `name` of KMS object `object` `id`: its handle and value, or the error
    /// naming what is missing.
    fn prop_entry(
        &self,
        props: &Props,
        object: &'static str,
        id: u32,
        name: &'static str,
    ) -> Result<(property::Handle, property::RawValue), KmsDeviceError> {
        props.get(name).copied().ok_or_else(|| KmsDeviceError::MissingProperty {
            path: self.path.to_string(),
            object,
            id,
            name,
        })
    }

    /// The handle of property `name` (see [`KmsDevice::prop_entry`]).
    fn prop(
        &self,
        props: &Props,
        object: &'static str,
        id: u32,
        name: &'static str,
    ) -> Result<property::Handle, KmsDeviceError> {
        self.prop_entry(props, object, id, name).map(|(h, _)| h)
    }

    /// Every plane, in the kernel's order, with its kind, CRTCs and formats.
    ///
    /// Since Linux 6.8 the kernel hides the cursor plane of a virtualised driver (virtio-gpu,
    /// vmwgfx, qxl, vboxvideo) from clients without `DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT`;
    /// dmabridge does not set that cap, since it would then owe the cursor's hotspot
    /// properties, so such a device lists no cursor plane here.
    pub fn planes(&self) -> Result<Vec<KmsPlane>, KmsDeviceError> {
        let handles = self.card.plane_handles().map_err(self.ioctl("DRM_IOCTL_MODE_GETPLANERESOURCES"))?;
        self.bound("DRM_IOCTL_MODE_GETPLANERESOURCES", "planes", handles.len(), MAX_KMS_PLANES)?;
        let res = self.resources()?;
        handles.into_iter().map(|h| self.plane(&res, h)).collect()
    }

    fn plane(&self, res: &ResourceHandles, handle: plane::Handle) -> Result<KmsPlane, KmsDeviceError> {
        let id: u32 = handle.into();
        let info = self.card.get_plane(handle).map_err(self.ioctl("DRM_IOCTL_MODE_GETPLANE"))?;
        self.bound("DRM_IOCTL_MODE_GETPLANE", "formats", info.formats().len(), MAX_KMS_PLANE_FORMATS)?;
        let props = self.props(handle)?;
        let (_, kind) = self.prop_entry(&props, "plane", id, "type")?;
        let kind = match kind {
            k if k == PlaneType::Primary as u64 => PlaneKind::Primary,
            k if k == PlaneType::Overlay as u64 => PlaneKind::Overlay,
            k if k == PlaneType::Cursor as u64 => PlaneKind::Cursor,
            value => return Err(KmsDeviceError::UnknownPlaneType { path: self.path.to_string(), plane: id, value }),
        };
        let blob = props.get("IN_FORMATS").map(|(_, v)| *v).filter(|v| *v != 0);
        let formats = match blob {
            Some(blob) => {
                let bytes = self.card.get_property_blob(blob).map_err(self.ioctl("DRM_IOCTL_MODE_GETPROPBLOB"))?;
                kms::parse_in_formats(&bytes).map_err(|source| KmsDeviceError::InFormats {
                    path: self.path.to_string(),
                    plane: id,
                    source,
                })?
            }
            // The kernel gives every plane an IN_FORMATS blob (a LINEAR-only default when the
            // driver names no modifiers) unless the driver sets `fb_modifiers_not_supported`;
            // then ADDFB2 refuses DRM_MODE_FB_MODIFIERS outright and the plane takes only
            // framebuffers whose layout is the driver's own choice: implicit.
            None => info.formats().iter().map(|&code| Format::implicit(Fourcc::from_code(code))).collect(),
        };
        let possible_crtcs = res.filter_crtcs(info.possible_crtcs()).into_iter().map(u32::from).collect();
        Ok(KmsPlane { id, kind, possible_crtcs, in_formats: blob.is_some(), formats })
    }

    /// Plane `plane`, or by default the first primary plane.
    pub fn plane_formats(&self, plane: Option<u32>) -> Result<KmsPlane, KmsDeviceError> {
        let planes = self.planes()?;
        let available = || planes.iter().map(|p| p.id).collect::<Vec<_>>();
        let found = match plane {
            Some(id) => planes.iter().position(|p| p.id == id).ok_or_else(|| KmsDeviceError::NoSuchPlane {
                path: self.path.to_string(),
                plane: id,
                available: available(),
            })?,
            None => planes.iter().position(|p| p.kind == PlaneKind::Primary).ok_or_else(|| {
                KmsDeviceError::NoPrimaryPlane { path: self.path.to_string(), available: available() }
            })?,
        };
        let mut planes = planes;
        Ok(planes.swap_remove(found))
    }

    /// The plane (as [`KmsDevice::plane_formats`] picks it) as a negotiation participant,
    /// with a KMS plane's sync methods.
    pub fn participant(&self, name: &str, plane: Option<u32>) -> Result<Participant, KmsDeviceError> {
        let plane = self.plane_formats(plane)?;
        Ok(Participant::new(name, plane.formats).with_sync(kms::SYNC_METHODS))
    }

    /// What `negotiate --json` prints of the device and the plane.
    pub fn summary(&self, plane: Option<u32>) -> Result<KmsSummary, KmsDeviceError> {
        let p = self.plane_formats(plane)?;
        Ok(KmsSummary {
            path: self.path.to_string(),
            driver: self.driver.clone(),
            atomic: self.atomic(),
            addfb2_modifiers: self.addfb2_modifiers,
            plane: p.id,
            kind: p.kind,
            in_formats: p.in_formats,
            formats: p.formats.iter().map(|f| crate::peers::gst::print_drm_format(*f)).collect(),
        })
    }

    /// Imports `buf` as a framebuffer: each plane's fd through PRIME, then ADDFB2, with
    /// `DRM_MODE_FB_MODIFIERS` and the modifier when the layout is explicit, without when it
    /// is implicit (the driver then picks the layout it would have allocated). `buf` keeps its
    /// fds; the GEM handles made here are closed whatever happens, the framebuffer holding
    /// its own references.
    pub fn add_framebuffer(&self, buf: &DmaBuf) -> Result<Framebuffer, KmsDeviceError> {
        let path = || self.path.to_string();
        let fourcc = buf.fourcc();
        let format = DrmFourcc::try_from(fourcc.code())
            .map_err(|_| KmsDeviceError::UnsupportedFourcc { path: path(), fourcc })?;
        // The same rule drm-rs asserts: the flag exactly when a real modifier is given.
        let modifier =
            buf.layout().modifier().map(|m| DrmModifier::from(m.raw())).filter(|m| *m != DrmModifier::Invalid);
        let with_modifier = modifier.is_some();
        let mut pitches = [0u32; 4];
        let mut offsets = [0u32; 4];
        for (i, p) in buf.planes().enumerate().take(4) {
            let fit = |what, value: u64| {
                u32::try_from(value).map_err(|_| KmsDeviceError::PlaneOutOfRange {
                    path: path(),
                    plane: i,
                    what,
                    value,
                })
            };
            pitches[i] = fit("stride", p.stride)?;
            offsets[i] = fit("offset", p.offset)?;
        }
        let mut gem = GemHandles { card: &self.card, path: &self.path, handles: Vec::with_capacity(4) };
        let mut handles = [None; 4];
        for (i, p) in buf.planes().enumerate().take(4) {
            let h = self.card.prime_fd_to_buffer(p.fd).map_err(|source| KmsDeviceError::ImportRefused {
                path: path(),
                plane: i,
                source,
            })?;
            // Planes in one dma-buf come back as one handle, which must be closed once.
            if !gem.handles.contains(&h) {
                gem.handles.push(h);
            }
            handles[i] = Some(h);
        }
        let planar = Planar { size: (buf.width(), buf.height()), format, modifier, pitches, handles, offsets };
        let flags = if with_modifier { FbCmd2Flags::MODIFIERS } else { FbCmd2Flags::empty() };
        let id =
            self.card.add_planar_framebuffer(&planar, flags).map_err(|source| KmsDeviceError::FramebufferRefused {
                path: path(),
                format: buf.format(),
                width: buf.width(),
                height: buf.height(),
                with_modifier,
                source,
            })?;
        drop(gem);
        tracing::debug!(path = %self.path, fb = u32::from(id), format = %buf.format(), "added framebuffer");
        Ok(Framebuffer {
            card: self.card.clone(),
            path: self.path.clone(),
            id,
            format: buf.format(),
            width: buf.width(),
            height: buf.height(),
            with_modifier,
        })
    }

    /// Where [`KmsDevice::show`] would put the plane (as [`KmsDevice::plane_formats`] picks
    /// it): the first connected connector with a CRTC the plane can use, and its preferred
    /// mode (else its first). Size a buffer for `mode` to fill the screen.
    pub fn output(&self, plane: Option<u32>) -> Result<KmsOutput, KmsDeviceError> {
        let plane = self.plane_formats(plane)?;
        self.output_for(&plane, (0, 0))
    }

    /// [`KmsDevice::output`] for a `width` x `height` frame: the preferred mode where it
    /// holds the frame, else the smallest mode the connector lists that does (vkms prefers
    /// 1024x768 and lists 1280x720 and up), else the preferred one. [`KmsDevice::show`] picks
    /// the same mode for a framebuffer of that size.
    pub fn output_fitting(&self, plane: Option<u32>, (width, height): (u32, u32)) -> Result<KmsOutput, KmsDeviceError> {
        let plane = self.plane_formats(plane)?;
        self.output_for(&plane, (width, height))
    }

    fn output_for(&self, plane: &KmsPlane, (fit_w, fit_h): (u32, u32)) -> Result<KmsOutput, KmsDeviceError> {
        let res = self.resources()?;
        self.bound("DRM_IOCTL_MODE_GETRESOURCES", "connectors", res.connectors().len(), MAX_KMS_CONNECTORS)?;
        for &conn in res.connectors() {
            let mut info = self.card.get_connector(conn, false).map_err(self.ioctl("DRM_IOCTL_MODE_GETCONNECTOR"))?;
            // A writeback connector (listed under DRM_CLIENT_CAP_WRITEBACK_CONNECTORS) shows
            // nothing: it is where a CRTC's composed frame is written to memory.
            if info.state() != connector::State::Connected || info.interface() == connector::Interface::Writeback {
                continue;
            }
            // Nobody has probed it yet (no fbcon): ask for a probe, which the kernel does
            // only for the DRM master and otherwise answers from what it has.
            if info.modes().is_empty() {
                info = self.card.get_connector(conn, true).map_err(self.ioctl("DRM_IOCTL_MODE_GETCONNECTOR"))?;
            }
            let holds = |m: &&drm::control::Mode| {
                let (w, h) = m.size();
                u32::from(w) >= fit_w && u32::from(h) >= fit_h
            };
            let preferred = info.modes().iter().find(|m| m.mode_type().contains(ModeTypeFlags::PREFERRED)).or_else(|| info.modes().first());
            let fitting = || {
                info.modes().iter().filter(holds).min_by_key(|m| {
                    let (w, h) = m.size();
                    u32::from(w) * u32::from(h)
                })
            };
            let Some(mode) = preferred.filter(holds).or_else(fitting).or(preferred).copied() else {
                continue;
            };
            let mut crtc = None;
            for &enc in info.encoders() {
                let e = self.card.get_encoder(enc).map_err(self.ioctl("DRM_IOCTL_MODE_GETENCODER"))?;
                crtc = res
                    .filter_crtcs(e.possible_crtcs())
                    .into_iter()
                    .find(|c| plane.possible_crtcs.contains(&u32::from(*c)));
                if crtc.is_some() {
                    break;
                }
            }
            let Some(crtc) = crtc else { continue };
            let (w, h) = mode.size();
            return Ok(KmsOutput {
                connector: conn.into(),
                connector_name: format!("{}-{}", info.interface().as_str(), info.interface_id()),
                crtc: crtc.into(),
                mode: KmsMode {
                    name: mode.name().to_string_lossy().into_owned(),
                    width: w.into(),
                    height: h.into(),
                    refresh: mode.vrefresh(),
                    preferred: mode.mode_type().contains(ModeTypeFlags::PREFERRED),
                },
                raw_mode: mode,
            });
        }
        Err(KmsDeviceError::NoOutput { path: self.path.to_string(), plane: plane.id })
    }

    /// Scans `fb` out on the plane (as [`KmsDevice::plane_formats`] picks it), lighting up
    /// [`KmsDevice::output_fitting`]'s connector, CRTC and mode for `fb`'s size in one atomic
    /// commit (a modeset),
    /// after a `TEST_ONLY` commit of the same request. The framebuffer's top left
    /// `min(fb, mode)` pixels fill the CRTC from its top left, unscaled; a primary plane that
    /// must cover the whole CRTC needs a framebuffer at least the mode's size. It stays
    /// on screen until another commit, the framebuffer's removal or the device's closing.
    pub fn show(&self, fb: &Framebuffer, plane: Option<u32>) -> Result<Shown, KmsDeviceError> {
        if let Err(source) = &self.atomic {
            return Err(KmsDeviceError::NoAtomic { path: self.path.to_string(), source: source.clone() });
        }
        let plane = self.plane_formats(plane)?;
        let out = self.output_for(&plane, (fb.width, fb.height))?;
        let plane_h: plane::Handle = handle(plane.id).ok_or_else(|| self.no_such_plane(plane.id))?;
        let crtc_h: crtc::Handle = handle(out.crtc).ok_or_else(|| self.no_output(plane.id))?;
        let conn_h: connector::Handle = handle(out.connector).ok_or_else(|| self.no_output(plane.id))?;
        let (pp, cp, np) = (self.props(plane_h)?, self.props(crtc_h)?, self.props(conn_h)?);
        let (w, h) = (fb.width.min(out.mode.width), fb.height.min(out.mode.height));

        let mut req = AtomicModeReq::new();
        req.add_property(
            conn_h,
            self.prop(&np, "connector", out.connector, "CRTC_ID")?,
            property::Value::CRTC(Some(crtc_h)),
        );
        let mode_id = self.prop(&cp, "CRTC", out.crtc, "MODE_ID")?;
        let active = self.prop(&cp, "CRTC", out.crtc, "ACTIVE")?;
        let plane_prop = |name| self.prop(&pp, "plane", plane.id, name);
        let unsigned = |v: u32| property::Value::UnsignedRange(v.into());
        let signed = |v: u32| property::Value::SignedRange(v.into());
        let fb_id_property = plane_prop("FB_ID")?;
        req.add_property(plane_h, fb_id_property, property::Value::Framebuffer(Some(fb.id)));
        req.add_property(plane_h, plane_prop("CRTC_ID")?, property::Value::CRTC(Some(crtc_h)));
        // SRC_* are 16.16 fixed point; CRTC_X/Y are signed.
        req.add_property(plane_h, plane_prop("SRC_X")?, unsigned(0));
        req.add_property(plane_h, plane_prop("SRC_Y")?, unsigned(0));
        req.add_property(plane_h, plane_prop("SRC_W")?, property::Value::UnsignedRange(u64::from(w) << 16));
        req.add_property(plane_h, plane_prop("SRC_H")?, property::Value::UnsignedRange(u64::from(h) << 16));
        req.add_property(plane_h, plane_prop("CRTC_X")?, signed(0));
        req.add_property(plane_h, plane_prop("CRTC_Y")?, signed(0));
        req.add_property(plane_h, plane_prop("CRTC_W")?, unsigned(w));
        req.add_property(plane_h, plane_prop("CRTC_H")?, unsigned(h));

        let blob =
            self.card.create_property_blob(&out.raw_mode).map_err(self.ioctl("DRM_IOCTL_MODE_CREATEPROPBLOB"))?;
        req.add_property(crtc_h, mode_id, blob);
        req.add_property(crtc_h, active, property::Value::Boolean(true));
        let refused = |test_only| {
            let mode = format!("{}x{}@{}", out.mode.width, out.mode.height, out.mode.refresh);
            move |source| KmsDeviceError::CommitRefused {
                path: self.path.to_string(),
                test_only,
                plane: plane.id,
                crtc: out.crtc,
                connector: out.connector,
                mode,
                source,
            }
        };
        let committed = self
            .card
            .atomic_commit(AtomicCommitFlags::ALLOW_MODESET | AtomicCommitFlags::TEST_ONLY, req.clone())
            .map_err(refused(true))
            .and_then(|()| self.card.atomic_commit(AtomicCommitFlags::ALLOW_MODESET, req).map_err(refused(false)));
        // The committed state holds its own reference to the mode blob; ours goes either way.
        if let property::Value::Blob(id) = blob {
            if let Err(e) = self.card.destroy_property_blob(id) {
                tracing::warn!(path = %self.path, blob = id, error = %e, "DRM_IOCTL_MODE_DESTROYPROPBLOB failed");
            }
        }
        committed?;
        Ok(Shown {
            plane: plane.id,
            crtc: out.crtc,
            connector: out.connector,
            connector_name: out.connector_name,
            mode: out.mode,
            framebuffer: fb.id(),
            width: w,
            height: h,
            fb_id_property,
        })
    }

    /// Puts `fb` on the plane that [`KmsDevice::show`] lit up, in its place: one blocking
    /// atomic commit of the plane's `FB_ID` alone, with no `TEST_ONLY` check and no modeset
    /// allowed, which is how a frame loop replaces each frame (`show` resolves the plane,
    /// connector, mode and properties and does a modeset, each time). `fb` needs at least
    /// `shown`'s width and height (the plane's source rectangle stays as `show` set it); the
    /// kernel checks that, and the format, and a refusal leaves the plane on the last
    /// framebuffer. On success `shown.framebuffer` is `fb`'s id.
    pub fn flip(&self, shown: &mut Shown, fb: &Framebuffer) -> Result<(), KmsDeviceError> {
        self.commit_flip(shown, fb, AtomicCommitFlags::empty())
    }

    fn commit_flip(&self, shown: &mut Shown, fb: &Framebuffer, flags: AtomicCommitFlags) -> Result<(), KmsDeviceError> {
        if let Err(source) = &self.atomic {
            return Err(KmsDeviceError::NoAtomic { path: self.path.to_string(), source: source.clone() });
        }
        let plane_h: plane::Handle = handle(shown.plane).ok_or_else(|| self.no_such_plane(shown.plane))?;
        let mut req = AtomicModeReq::new();
        req.add_property(plane_h, shown.fb_id_property, property::Value::Framebuffer(Some(fb.id)));
        self.card.atomic_commit(flags, req).map_err(|source| KmsDeviceError::FlipRefused {
            path: self.path.to_string(),
            plane: shown.plane,
            framebuffer: fb.id(),
            width: fb.width,
            height: fb.height,
            shown_width: shown.width,
            shown_height: shown.height,
            source,
        })?;
        shown.framebuffer = fb.id();
        Ok(())
    }

    /// The framebuffer `plane` scans out now, as the kernel reports it (its `FB_ID`
    /// property); `None` for a plane that is off.
    pub fn scanout(&self, plane: u32) -> Result<Option<u32>, KmsDeviceError> {
        let plane_h: plane::Handle = handle(plane).ok_or_else(|| self.no_such_plane(plane))?;
        let (_, value) = self.prop_entry(&self.props(plane_h)?, "plane", plane, "FB_ID")?;
        Ok(u32::try_from(value).ok().filter(|&id| id != 0))
    }

    /// How a dumb buffer of this device is described as a [`DmaBuf`]: LINEAR where ADDFB2
    /// takes modifiers, else the driver's implicit layout (a dumb buffer is linear, but a
    /// driver without modifiers takes none in ADDFB2).
    pub fn dumb_layout(&self) -> crate::Layout {
        match self.addfb2_modifiers {
            true => crate::Layout::Explicit(crate::Modifier::LINEAR),
            false => crate::Layout::Implicit,
        }
    }

    /// A zeroed dumb buffer of the driver's own memory, exported as a dma-buf
    /// (`DRM_IOCTL_MODE_CREATE_DUMB`, `DRM_IOCTL_PRIME_HANDLE_TO_FD`). The dumb buffer's
    /// handle is destroyed at once: the dma-buf keeps the memory alive.
    pub fn dumb_buffer(&self, width: u32, height: u32, bpp: u32) -> Result<DumbExport, KmsDeviceError> {
        // The kernel reads only the bpp; drm-rs wants a fourcc to keep alongside.
        let dumb = self
            .card
            .create_dumb_buffer((width, height), DrmFourcc::Xrgb8888, bpp)
            .map_err(self.ioctl("DRM_IOCTL_MODE_CREATE_DUMB"))?;
        let pitch = buffer::Buffer::pitch(&dumb);
        let exported = self
            .card
            .buffer_to_prime_fd(buffer::Buffer::handle(&dumb), drm::CLOEXEC | drm::RDWR)
            .map_err(self.ioctl("DRM_IOCTL_PRIME_HANDLE_TO_FD"));
        if let Err(e) = self.card.destroy_dumb_buffer(dumb) {
            tracing::warn!(path = %self.path, error = %e, "DRM_IOCTL_MODE_DESTROY_DUMB failed");
        }
        let fd = exported?;
        // A dma-buf answers SEEK_END with its size, and nothing else of lseek.
        let size = rustix::fs::seek(&fd, SeekFrom::End(0)).map_err(|e| KmsDeviceError::Ioctl {
            path: self.path.to_string(),
            op: "lseek(SEEK_END) of the exported dma-buf",
            source: e.into(),
        })?;
        Ok(DumbExport { fd, pitch, size })
    }

    /// Puts `fb` on the plane that [`KmsDevice::show`] lit up, as [`KmsDevice::flip`] does,
    /// but non-blocking: one atomic commit of `FB_ID` with `DRM_MODE_ATOMIC_NONBLOCK` and
    /// `DRM_MODE_PAGE_FLIP_EVENT`, which returns once the kernel has queued it. The flip is
    /// done when [`KmsDevice::wait_flip`] reads its event; until then the kernel refuses
    /// another commit on the CRTC (`EBUSY`). On success `shown.framebuffer` is `fb`'s id.
    pub fn queue_flip(&self, shown: &mut Shown, fb: &Framebuffer) -> Result<(), KmsDeviceError> {
        self.commit_flip(shown, fb, AtomicCommitFlags::NONBLOCK | AtomicCommitFlags::PAGE_FLIP_EVENT)
    }

    /// Waits up to `timeout` for the page-flip event of the flip [`KmsDevice::queue_flip`]
    /// queued on `shown`'s CRTC, reading the card's events (others are dropped).
    pub fn wait_flip(&self, shown: &Shown, timeout: Duration) -> Result<FlipEvent, KmsDeviceError> {
        let deadline = Instant::now() + timeout;
        let timed_out = || KmsDeviceError::FlipTimeout {
            path: self.path.to_string(),
            crtc: shown.crtc,
            framebuffer: shown.framebuffer,
            timeout,
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match poll_readable(self.card.as_fd(), left) {
                Ok(()) => {}
                Err(WaitError::Timeout { .. }) => return Err(timed_out()),
                Err(e) => {
                    return Err(KmsDeviceError::Ioctl {
                        path: self.path.to_string(),
                        op: "poll of the card for events",
                        source: io::Error::other(e.to_string()),
                    })
                }
            }
            let events = self.card.receive_events().map_err(self.ioctl("read of the card's events"))?;
            for event in events {
                if let drm::control::Event::PageFlip(e) = event {
                    if u32::from(e.crtc) == shown.crtc {
                        return Ok(FlipEvent { sequence: e.frame, time: e.duration });
                    }
                }
            }
        }
    }

    /// The device's writeback connector (the first it lists) and its formats.
    pub fn writeback(&self) -> Result<KmsWriteback, KmsDeviceError> {
        let no = |reason: String| KmsDeviceError::NoWriteback { path: self.path.to_string(), reason };
        if let Err(e) = &self.writeback_cap {
            return Err(no(format!("the kernel refused DRM_CLIENT_CAP_WRITEBACK_CONNECTORS: {e}")));
        }
        let res = self.resources()?;
        self.bound("DRM_IOCTL_MODE_GETRESOURCES", "connectors", res.connectors().len(), MAX_KMS_CONNECTORS)?;
        for &conn in res.connectors() {
            let info = self.card.get_connector(conn, false).map_err(self.ioctl("DRM_IOCTL_MODE_GETCONNECTOR"))?;
            if info.interface() != connector::Interface::Writeback {
                continue;
            }
            let id = u32::from(conn);
            let props = self.props(conn)?;
            let (_, blob) = self.prop_entry(&props, "connector", id, "WRITEBACK_PIXEL_FORMATS")?;
            let bytes = self.card.get_property_blob(blob).map_err(self.ioctl("DRM_IOCTL_MODE_GETPROPBLOB"))?;
            let formats: Vec<Fourcc> = bytes
                .chunks_exact(4)
                .map(|c| Fourcc::from_code(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
                .collect();
            self.bound("WRITEBACK_PIXEL_FORMATS", "formats", formats.len(), MAX_KMS_PLANE_FORMATS)?;
            return Ok(KmsWriteback {
                connector: id,
                name: format!("{}-{}", info.interface().as_str(), info.interface_id()),
                formats,
            });
        }
        Err(no(format!(
            "DRM_CLIENT_CAP_WRITEBACK_CONNECTORS taken, but none of the {} connectors is one",
            res.connectors().len()
        )))
    }

    /// Makes `buf` (single-plane, in a format [`KmsDevice::writeback`] lists; the caller's
    /// dumb buffer, dma-heap or udmabuf dma-buf) a framebuffer the writeback connector can
    /// write into. `buf` is kept in the target, and read back by [`KmsDevice::write_back`].
    pub fn writeback_target(&self, buf: DmaBuf) -> Result<WritebackTarget, KmsDeviceError> {
        let wb = self.writeback()?;
        if !wb.formats.contains(&buf.fourcc()) {
            return Err(KmsDeviceError::WritebackFormatNotOffered {
                path: self.path.to_string(),
                connector: wb.connector,
                fourcc: buf.fourcc(),
                offered: wb.formats,
            });
        }
        let conn_h: connector::Handle =
            handle(wb.connector).ok_or_else(|| self.ioctl("DRM_IOCTL_MODE_GETCONNECTOR")(io::Error::other("connector id 0")))?;
        let props = self.props(conn_h)?;
        let crtc_id_property = self.prop(&props, "connector", wb.connector, "CRTC_ID")?;
        let fb_id_property = self.prop(&props, "connector", wb.connector, "WRITEBACK_FB_ID")?;
        let fence_property = self.prop(&props, "connector", wb.connector, "WRITEBACK_OUT_FENCE_PTR")?;
        let fb = self.add_framebuffer(&buf)?;
        Ok(WritebackTarget { buf, fb, connector: wb.connector, crtc_id_property, fb_id_property, fence_property })
    }

    /// The frame `shown`'s CRTC composes, written into `target` by the writeback connector
    /// and read back: one blocking atomic commit that binds the connector to the CRTC and
    /// sets `WRITEBACK_FB_ID` and `WRITEBACK_OUT_FENCE_PTR` (modeset allowed: the first
    /// binding changes the CRTC's connectors), a wait of at most `timeout` on the out-fence
    /// (a sync_file), then the rows read through a mapping inside `DMA_BUF_IOCTL_SYNC`. The
    /// connector stays bound to the CRTC (with no buffer it writes nothing), so that later
    /// writebacks and flips need no modeset. The target must have the mode's size.
    ///
    /// Where the kernel refuses the writeback connector beside the display's (`EINVAL`:
    /// Linux 6.12.95's encoder clone check, which vkms's encoders fail), the commit is made
    /// again with the display's connector unbound: the CRTC, its mode and planes go on
    /// composing into the writeback alone ([`WrittenBack::display_unbound`]). The next
    /// [`KmsDevice::show`] binds the display again.
    pub fn write_back(&self, shown: &Shown, target: &WritebackTarget, timeout: Duration) -> Result<WrittenBack, KmsDeviceError> {
        if let Err(source) = &self.atomic {
            return Err(KmsDeviceError::NoAtomic { path: self.path.to_string(), source: source.clone() });
        }
        let conn_h: connector::Handle = handle(target.connector).ok_or_else(|| self.no_output(shown.plane))?;
        let crtc_h: crtc::Handle = handle(shown.crtc).ok_or_else(|| self.no_output(shown.plane))?;
        // The kernel writes the out-fence's number here during the ioctl (-1 first): an
        // atomic, so that the write from outside Rust's view is read back without `unsafe`.
        let fence = AtomicI32::new(-1);
        let mut req = AtomicModeReq::new();
        req.add_property(conn_h, target.crtc_id_property, property::Value::CRTC(Some(crtc_h)));
        req.add_property(conn_h, target.fb_id_property, property::Value::Framebuffer(Some(target.fb.id)));
        req.add_property(conn_h, target.fence_property, property::Value::UnsignedRange(fence.as_ptr() as u64));
        let started = Instant::now();
        let mut committed = self.card.atomic_commit(AtomicCommitFlags::ALLOW_MODESET, req.clone());
        // A kernel with drm's encoder clone check (6.12.95 has the stable backport) refuses a
        // CRTC that drives two encoders which do not list each other as possible clones, as
        // vkms's display and writeback encoders do not: EINVAL. The CRTC then writes back
        // alone, its display connector unbound (the planes and the mode stay).
        let mut display_unbound = false;
        if committed.as_ref().is_err_and(|e| e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())) {
            let display: connector::Handle = handle(shown.connector).ok_or_else(|| self.no_output(shown.plane))?;
            let crtc_id = self.prop(&self.props(display)?, "connector", shown.connector, "CRTC_ID")?;
            req.add_property(display, crtc_id, property::Value::CRTC(None));
            committed = self.card.atomic_commit(AtomicCommitFlags::ALLOW_MODESET, req);
            display_unbound = committed.is_ok();
        }
        committed.map_err(|source| KmsDeviceError::WritebackRefused {
            path: self.path.to_string(),
            connector: target.connector,
            crtc: shown.crtc,
            framebuffer: target.fb.id(),
            width: target.fb.width,
            height: target.fb.height,
            mode_width: shown.mode.width,
            mode_height: shown.mode.height,
            source,
        })?;
        let commit = started.elapsed();
        let raw = fence.load(Ordering::SeqCst);
        let no_fence = |reason: String| KmsDeviceError::WritebackNoFence {
            path: self.path.to_string(),
            connector: target.connector,
            raw,
            reason,
        };
        // SAFETY: `raw`, if open, is the sync_file the kernel installed for this process in
        // the commit just made, and nothing else holds it (take_returned_fd's contract).
        let fence = unsafe { take_returned_fd(raw) }.map_err(|e| no_fence(e.to_string()))?;
        let started = Instant::now();
        wait_sync_file(fence.as_fd(), timeout).map_err(|source| match source {
            WaitError::Timeout { timeout } => {
                KmsDeviceError::WritebackTimeout { path: self.path.to_string(), connector: target.connector, timeout }
            }
            source => KmsDeviceError::WritebackFence { path: self.path.to_string(), connector: target.connector, source },
        })?;
        let fence_wait = started.elapsed();
        drop(fence);

        let started = Instant::now();
        let read = |source| KmsDeviceError::WritebackRead { path: self.path.to_string(), source };
        let (width, height) = (target.buf.width(), target.buf.height());
        let plane = target.buf.planes().next().ok_or_else(|| read(MapError::Shrinkable(0)))?;
        let row = crate::format_info::format_info(target.buf.fourcc()).map_or(plane.stride, |i| i.min_stride(0, width));
        let len = plane.stride * u64::from(height.saturating_sub(1)) + row;
        let map = PlaneMap::of_file(plane.fd, plane.offset, len, SyncAccess::Read, FdTrust::Untrusted, timeout).map_err(read)?;
        let mapped = map.bytes();
        let mut bytes = Vec::with_capacity(usize::try_from(row * u64::from(height)).unwrap_or(0));
        for y in 0..u64::from(height) {
            let at = usize::try_from(y * plane.stride).unwrap_or(usize::MAX);
            let end = at.saturating_add(usize::try_from(row).unwrap_or(usize::MAX));
            bytes.extend_from_slice(mapped.get(at..end).unwrap_or_default());
        }
        drop(map);
        Ok(WrittenBack { fourcc: target.buf.fourcc(), width, height, bytes, commit, fence_wait, read: started.elapsed(), display_unbound })
    }

    fn no_such_plane(&self, plane: u32) -> KmsDeviceError {
        KmsDeviceError::NoSuchPlane { path: self.path.to_string(), plane, available: Vec::new() }
    }

    fn no_output(&self, plane: u32) -> KmsDeviceError {
        KmsDeviceError::NoOutput { path: self.path.to_string(), plane }
    }
}

/// A handle from an id the kernel gave: `None` only for 0, which no object has.
fn handle<H: ResourceHandle>(id: u32) -> Option<H> {
    drm::control::from_u32(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path_the_operation_and_the_errno() {
        let e = KmsDeviceError::ImportRefused {
            path: "/dev/dri/card1".into(),
            plane: 0,
            source: io::Error::from_raw_os_error(19),
        };
        let msg = e.to_string();
        assert!(
            msg.contains("/dev/dri/card1") && msg.contains("PRIME_FD_TO_HANDLE") && msg.contains("os error 19"),
            "{msg}"
        );
        assert!(msg.contains("the driver refused"), "{msg}");
        assert_eq!(e.errno(), Some(19));
        let e = KmsDeviceError::FramebufferRefused {
            path: "/dev/dri/card1".into(),
            format: Format::linear(Fourcc::XRGB8888),
            width: 64,
            height: 32,
            with_modifier: true,
            source: io::Error::from_raw_os_error(22),
        };
        let msg = e.to_string();
        assert!(
            msg.contains("the driver refused the framebuffer XR24") && msg.contains("with DRM_MODE_FB_MODIFIERS"),
            "{msg}"
        );
        assert!(msg.contains("ADDFB2") && msg.contains("os error 22"), "{msg}");
    }
}
