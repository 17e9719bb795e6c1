//! A live V4L2 device (`/dev/videoN`) as a participant, and the streaming calls that move
//! dma-bufs in and out of it: its formats and frame sizes, what `TRY_FMT`/`S_FMT` choose,
//! `MMAP` buffers exported as dma-bufs (`VIDIOC_EXPBUF`) and imported ones
//! (`V4L2_MEMORY_DMABUF`).
//!
//! The uAPI (`include/uapi/linux/videodev2.h`) is written here by hand with
//! `rustix::ioctl`, and only the structs this module uses: the maintained crates (`v4l2r`,
//! `v4l`) generate their bindings with bindgen at build time, which needs libclang on every
//! machine that builds dmabridge. Each struct's size is asserted at compile time against the
//! kernel's on 64-bit Linux, which is also the reason a 32-bit build stops here: the layout
//! of `v4l2_buffer` (a `timeval`, a pointer union) differs there, and an ioctl with the wrong
//! size is a different request number. Unions are kept as bytes and read or written at the
//! header's offsets, so no Rust union (and no `unsafe` read of one) is needed.
//!
//! Pixel formats are named through [`super::v4l2`]'s table ([`lookup_code`],
//! [`formats_of`], [`plane_layouts`](super::v4l2::plane_layouts)), never here.
//!
//! Every count the driver controls is bounded ([`MAX_V4L2_FORMATS`], [`MAX_FRAME_SIZES`],
//! [`VIDEO_MAX_PLANES`], [`MAX_BUFFERS`]); every failure is a [`V4l2DeviceError`] that names
//! the device, the ioctl and the errno.

mod codec;
mod uapi;

pub use codec::{MediaDevice, MediaError, MediaRequest, QueueParams};

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::str::FromStr;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::ioctl::{ioctl, Opcode, Setter};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};

use super::v4l2::{
    formats_of, lookup_code, V4l2Entry, V4l2Formats, V4l2Mapping, V4l2Plane, V4l2PlaneFormat, MAX_V4L2_FORMATS,
    SYNC_METHODS,
};
use crate::negotiate::{Constraints, ExtentRange, Participant};
use crate::tiling::{ColourMatrix, ColourRange};
use crate::{format_info, Fourcc};
use uapi::*;

/// Most frame sizes one format's discrete list may have; a webcam lists a handful.
pub const MAX_FRAME_SIZES: usize = 64;
/// `VIDEO_MAX_PLANES`: most planes one buffer has.
pub const VIDEO_MAX_PLANES: usize = 8;
/// Most controls [`V4l2Device::find_control`] walks; vivid has about a hundred.
pub const MAX_CONTROLS: usize = 1024;
/// `VIDEO_MAX_FRAME`: most buffers one queue has (vb2's limit before Linux 6.8; newer
/// kernels allow more, but no stream here needs them).
pub const MAX_BUFFERS: u32 = 32;

// ---- The public side ---------------------------------------------------------------------

/// Which way frames flow through the device's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// The device fills buffers (a camera, a decoder's `CAPTURE` queue).
    Capture,
    /// The device reads buffers (a display, an encoder's `OUTPUT` queue).
    Output,
}

impl Direction {
    pub const fn name(self) -> &'static str {
        match self {
            Direction::Capture => "capture",
            Direction::Output => "output",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Direction {
    type Err = V4l2DeviceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "capture" => Ok(Direction::Capture),
            "output" => Ok(Direction::Output),
            _ => Err(V4l2DeviceError::UnknownDirection(crate::text::quoted(s))),
        }
    }
}

/// Which memory a queue's buffers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// The driver allocates them (`V4L2_MEMORY_MMAP`); they can be mapped and exported.
    Mmap,
    /// The caller brings dma-bufs at each `QBUF` (`V4L2_MEMORY_DMABUF`).
    DmaBuf,
}

impl Memory {
    const fn raw(self) -> u32 {
        match self {
            Memory::Mmap => MEMORY_MMAP,
            Memory::DmaBuf => MEMORY_DMABUF,
        }
    }
}

/// Why a V4L2 device could not be used. Every message names the device node.
#[derive(Debug, thiserror::Error)]
pub enum V4l2DeviceError {
    /// The node could not be opened (absent, no permission).
    #[error("opening V4L2 device {path} failed: {source}")]
    Open { path: PathBuf, source: io::Error },
    /// An ioctl failed; `source` carries the errno.
    #[error("V4L2 device {path}: {ioctl} failed: {source}")]
    Ioctl { path: PathBuf, ioctl: &'static str, source: io::Error },
    /// The node is not a video capture or output device (a metadata, VBI, radio, or
    /// sub-device node); `caps` is what `VIDIOC_QUERYCAP` reported.
    #[error("{path} is not a video capture or output device (capabilities {caps:#010x})")]
    NotVideo { path: PathBuf, caps: u32 },
    /// The device cannot move frames in the direction asked for.
    #[error("{path} has no video {direction} queue (capabilities {caps:#010x})")]
    NoSuchDirection { path: PathBuf, direction: Direction, caps: u32 },
    /// The device has no streaming I/O (`V4L2_CAP_STREAMING`), so no buffers to share.
    #[error("{path} has no streaming I/O (V4L2_CAP_STREAMING), so it cannot share buffers")]
    NoStreaming { path: PathBuf },
    /// A direction was neither `capture` nor `output`.
    #[error("unknown V4L2 direction {0:?} (expected capture or output)")]
    UnknownDirection(String),
    /// The driver listed more than dmabridge reads.
    #[error("V4L2 device {path}: {ioctl} listed more than {max} entries")]
    TooMany { path: PathBuf, ioctl: &'static str, max: usize },
    /// The caller's arguments cannot be a request (an index past the queue, fds and lengths
    /// that do not pair up, more planes than V4L2 has).
    #[error("V4L2 device {path}: {what}")]
    BadRequest { path: PathBuf, what: String },
    /// The driver answered something no driver should (more than 8 planes, a negative fd).
    #[error("V4L2 device {path}: {ioctl} answered {what}")]
    BadAnswer { path: PathBuf, ioctl: &'static str, what: String },
    /// No buffer became ready within the timeout.
    #[error("V4L2 device {path}: no buffer was ready to dequeue within {timeout:?}")]
    Timeout { path: PathBuf, timeout: Duration },
    /// `poll` reported an error on the streaming queue: nothing was queued since
    /// `STREAMON`, or the driver marked the queue failed; waiting would never end.
    #[error("V4L2 device {path}: the queue cannot deliver a buffer (nothing queued since STREAMON, or a driver error: poll gave POLLERR)")]
    QueueNotReady { path: PathBuf },
    /// `poll` itself failed.
    #[error("V4L2 device {path}: poll failed: {source}")]
    Poll { path: PathBuf, source: io::Error },
    /// A buffer plane could not be mapped.
    #[error("V4L2 device {path}: mmap of buffer {index} plane {plane} failed: {source}")]
    Map { path: PathBuf, index: u32, plane: usize, source: io::Error },
}

/// The frame sizes a device takes for one format (`VIDIOC_ENUM_FRAMESIZES`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum FrameSizes {
    /// A list of `(width, height)`.
    Discrete { sizes: Vec<(u32, u32)> },
    /// Any size in the range, in steps.
    Stepwise(SizeRange),
    /// Any size in the range (steps of 1).
    Continuous(SizeRange),
    /// The driver does not enumerate frame sizes (many codecs do not).
    Unknown,
}

/// `struct v4l2_frmsize_stepwise`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SizeRange {
    pub min_width: u32,
    pub max_width: u32,
    pub step_width: u32,
    pub min_height: u32,
    pub max_height: u32,
    pub step_height: u32,
}

/// `320x180,640x360`, `16x16-1920x1080 (steps 2x2)`, `16x16-1920x1080`, or `unknown`.
impl fmt::Display for FrameSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let range = |f: &mut fmt::Formatter<'_>, r: &SizeRange| write!(f, "{}x{}-{}x{}", r.min_width, r.min_height, r.max_width, r.max_height);
        match self {
            FrameSizes::Discrete { sizes } => {
                for (i, (w, h)) in sizes.iter().enumerate() {
                    write!(f, "{}{w}x{h}", if i == 0 { "" } else { "," })?;
                }
                Ok(())
            }
            FrameSizes::Stepwise(r) => {
                range(f, r)?;
                write!(f, " (steps {}x{})", r.step_width, r.step_height)
            }
            FrameSizes::Continuous(r) => range(f, r),
            FrameSizes::Unknown => f.write_str("unknown"),
        }
    }
}

impl FrameSizes {
    /// The widths and heights it spans, `None` if it says nothing (or nothing valid).
    pub fn extents(&self) -> Option<(ExtentRange, ExtentRange)> {
        let r = match self {
            FrameSizes::Discrete { sizes } => {
                let (w, h) = sizes.iter().fold(
                    (ExtentRange::new(u32::MAX, 0), ExtentRange::new(u32::MAX, 0)),
                    |(w, h), &(sw, sh)| {
                        (ExtentRange::new(w.min.min(sw), w.max.max(sw)), ExtentRange::new(h.min.min(sh), h.max.max(sh)))
                    },
                );
                (w, h)
            }
            FrameSizes::Stepwise(s) | FrameSizes::Continuous(s) => {
                (ExtentRange::new(s.min_width, s.max_width), ExtentRange::new(s.min_height, s.max_height))
            }
            FrameSizes::Unknown => return None,
        };
        let valid = |e: ExtentRange| e.min >= 1 && e.min <= e.max;
        (valid(r.0) && valid(r.1)).then_some(r)
    }

    /// The smallest size it names, to probe the driver with.
    fn smallest(&self) -> Option<(u32, u32)> {
        match self {
            FrameSizes::Discrete { sizes } => sizes.iter().copied().min_by_key(|&(w, h)| u64::from(w) * u64::from(h)),
            FrameSizes::Stepwise(s) | FrameSizes::Continuous(s) => Some((s.min_width, s.min_height)),
            FrameSizes::Unknown => None,
        }
    }
}

/// One pixel format the device offers on its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFormat {
    /// The V4L2 pixel format code.
    pub pixelformat: u32,
    /// The driver's description (`"Y/UV 4:2:0"`).
    pub description: String,
    /// `v4l2_fmtdesc.flags` (`V4L2_FMT_FLAG_COMPRESSED`, ...).
    pub flags: u32,
    /// dmabridge's row for it, if it has one.
    pub entry: Option<&'static V4l2Entry>,
    pub sizes: FrameSizes,
}

impl DeviceFormat {
    /// The code as text (`NM12`).
    pub fn fourcc_text(&self) -> String {
        Fourcc::from_code(self.pixelformat).trimmed()
    }
}

/// What `S_FMT`/`TRY_FMT` chose and `plane_layouts` needs, plus how many planes the driver
/// gave (`v4l2_pix_format_mplane.num_planes`; 1 for the single-planar API).
fn plane_format_of(raw: &RawFormat, multiplanar: bool) -> Result<V4l2PlaneFormat, String> {
    use fmt_off::*;
    let planes = if multiplanar {
        let n = usize::from(raw.byte(MP_NUM_PLANES));
        if n == 0 || n > VIDEO_MAX_PLANES {
            return Err(format!("num_planes {n}"));
        }
        (0..n)
            .map(|i| {
                let at = MP_PLANE_FMT + i * MP_PLANE_FMT_SIZE;
                V4l2Plane {
                    bytesperline: raw.get(at + MP_PLANE_BYTESPERLINE),
                    sizeimage: raw.get(at + MP_PLANE_SIZEIMAGE),
                }
            })
            .collect()
    } else {
        vec![V4l2Plane { bytesperline: raw.get(PIX_BYTESPERLINE), sizeimage: raw.get(PIX_SIZEIMAGE) }]
    };
    Ok(V4l2PlaneFormat { width: raw.get(WIDTH), height: raw.get(HEIGHT), pixelformat: raw.get(PIXELFORMAT), planes })
}

/// How a V4L2 format's Y'CbCr values encode colour: `v4l2_pix_format`'s `colorspace`,
/// `ycbcr_enc` and `quantization` as the driver set them (0 meaning "the colorspace's
/// default", which [`Colorimetry::encoding`] and [`Colorimetry::range`] resolve as
/// `V4L2_MAP_YCBCR_ENC_DEFAULT` and `V4L2_MAP_QUANTIZATION_DEFAULT` do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Colorimetry {
    /// `V4L2_COLORSPACE_*` (8: sRGB, 3: Rec. 709, 10: BT.2020, 7: JPEG, ...).
    pub colorspace: u32,
    /// `V4L2_YCBCR_ENC_*` as set (0: the default).
    pub ycbcr_enc: u32,
    /// `V4L2_QUANTIZATION_*` as set (0: the default, 1: full, 2: limited).
    pub quantization: u32,
}

impl Colorimetry {
    const COLORSPACE_SMPTE240M: u32 = 2;
    const COLORSPACE_REC709: u32 = 3;
    const COLORSPACE_JPEG: u32 = 7;
    const COLORSPACE_BT2020: u32 = 10;
    const COLORSPACE_DCI_P3: u32 = 12;
    const ENC_601: u32 = 1;
    const ENC_709: u32 = 2;
    const ENC_XV601: u32 = 3;
    const ENC_XV709: u32 = 4;
    const ENC_SYCC: u32 = 5;
    const ENC_BT2020: u32 = 6;
    const ENC_BT2020_CONST_LUM: u32 = 7;
    const ENC_SMPTE240M: u32 = 8;

    fn of(raw: &RawFormat, multiplanar: bool) -> Colorimetry {
        use fmt_off::*;
        if multiplanar {
            Colorimetry {
                colorspace: raw.get(MP_COLORSPACE),
                ycbcr_enc: u32::from(raw.byte(MP_YCBCR_ENC)),
                quantization: u32::from(raw.byte(MP_QUANTIZATION)),
            }
        } else {
            Colorimetry { colorspace: raw.get(PIX_COLORSPACE), ycbcr_enc: raw.get(PIX_YCBCR_ENC), quantization: raw.get(PIX_QUANTIZATION) }
        }
    }

    /// The Y'CbCr encoding, the colorspace's default resolved.
    pub fn encoding(&self) -> u32 {
        match (self.ycbcr_enc, self.colorspace) {
            (0, Self::COLORSPACE_REC709 | Self::COLORSPACE_DCI_P3) => Self::ENC_709,
            (0, Self::COLORSPACE_BT2020) => Self::ENC_BT2020,
            (0, Self::COLORSPACE_SMPTE240M) => Self::ENC_SMPTE240M,
            (0, _) => Self::ENC_601,
            (enc, _) => enc,
        }
    }

    /// The matrix dmabridge converts with; `None` for an encoding it has none for
    /// (SMPTE 240M). BT.2020's constant-luminance encoding is not a matrix either.
    pub fn matrix(&self) -> Option<ColourMatrix> {
        match self.encoding() {
            Self::ENC_601 | Self::ENC_XV601 | Self::ENC_SYCC => Some(ColourMatrix::Bt601),
            Self::ENC_709 | Self::ENC_XV709 => Some(ColourMatrix::Bt709),
            Self::ENC_BT2020 => Some(ColourMatrix::Bt2020),
            Self::ENC_BT2020_CONST_LUM | Self::ENC_SMPTE240M => None,
            _ => None,
        }
    }

    /// The quantisation of the Y'CbCr values, the default resolved (full for JPEG, limited
    /// otherwise).
    pub fn range(&self) -> ColourRange {
        match (self.quantization, self.colorspace) {
            (1, _) | (0, Self::COLORSPACE_JPEG) => ColourRange::Full,
            _ => ColourRange::Limited,
        }
    }
}

/// One buffer of the queue as `VIDIOC_QUERYBUF` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferInfo {
    pub index: u32,
    /// Per plane: its length in bytes and (for `MMAP`) the offset to `mmap` it at.
    pub planes: Vec<BufferPlane>,
    /// `v4l2_buffer.flags`.
    pub flags: u32,
}

/// One plane of a [`BufferInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferPlane {
    pub length: u32,
    pub mem_offset: u32,
}

/// A buffer `VIDIOC_DQBUF` returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dequeued {
    pub index: u32,
    pub sequence: u32,
    /// Bytes of data in each plane.
    pub bytesused: Vec<u32>,
    /// `V4L2_BUF_FLAG_ERROR`: the frame came back but its data may be corrupt.
    pub error: bool,
    /// The buffer's timestamp: a capture queue's is the time of capture, or (a codec's,
    /// `V4L2_BUF_FLAG_TIMESTAMP_COPY`) the one its `OUTPUT` buffer was queued with.
    pub timestamp: Duration,
    /// `V4L2_BUF_FLAG_KEYFRAME`: a codec's frame that references no other.
    pub keyframe: bool,
    /// `V4L2_BUF_FLAG_LAST`: the stream's last buffer (after a drain or before a
    /// resolution change).
    pub last: bool,
}

/// A mapping of every plane of one `MMAP` buffer, unmapped on drop: read-only for a capture
/// queue, readable and writable for an output queue (whose frames the caller fills).
#[derive(Debug)]
pub struct MappedBuffer {
    planes: Vec<(NonNull<u8>, usize)>,
    writable: bool,
}

impl MappedBuffer {
    /// How many planes.
    pub fn len(&self) -> usize {
        self.planes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.planes.is_empty()
    }

    /// The bytes of plane `i`, if there is one.
    pub fn plane(&self, i: usize) -> Option<&[u8]> {
        let &(ptr, len) = self.planes.get(i)?;
        // SAFETY: `ptr` is a live PROT_READ mapping of `len` bytes made by map_buffer and
        // unmapped only by drop, which needs `&mut self`; the driver's writes to it happen only
        // while the buffer is queued, which the caller controls (as with any V4L2 mapping).
        Some(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) })
    }

    /// Whether the planes are mapped writable (an output queue's buffer).
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The bytes of plane `i` to fill, where the mapping is writable (an output queue's
    /// buffer); `None` for a capture queue's read-only mapping or a plane that is not there.
    pub fn plane_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        if !self.writable {
            return None;
        }
        let &(ptr, len) = self.planes.get(i)?;
        // SAFETY: `ptr` is a live PROT_READ|PROT_WRITE mapping of `len` bytes (writable is
        // set only for those) made by map_buffer and unmapped only by drop; `&mut self`
        // makes this the only slice of the mapping. The driver reads it only while the
        // buffer is queued, which the caller controls.
        Some(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) })
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        for &(ptr, len) in &self.planes {
            // SAFETY: each (ptr, len) is a mapping map_buffer made and nothing else unmaps;
            // no slice of it outlives `self` (plane() borrows self).
            let _ = unsafe { munmap(ptr.as_ptr().cast(), len) };
        }
    }
}

/// A plain description of the device for the command line (`--json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceSummary {
    pub path: String,
    pub driver: String,
    pub card: String,
    pub bus_info: String,
    pub direction: Direction,
    pub multiplanar: bool,
    pub formats: Vec<FormatSummary>,
}

/// One format of a [`DeviceSummary`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FormatSummary {
    /// The V4L2 code (`NM12`).
    pub v4l2: String,
    /// dmabridge's name for it (`NV12M`), if it knows it.
    pub name: Option<&'static str>,
    pub description: String,
    /// The DRM format+modifier (`NV12:LINEAR`), when DRM can name it.
    pub drm: Option<String>,
    /// `drm`, `dmabridge-only`, `unmapped` or `unknown`.
    pub mapping: &'static str,
    pub sizes: FrameSizes,
}

/// An open V4L2 video node. It owns the fd (closed on drop), and with it the node's buffer
/// queue once it requests buffers: the queue's buffers are freed when the fd closes, while
/// dma-bufs exported from them stay valid for whoever holds those fds.
#[derive(Debug)]
pub struct V4l2Device {
    fd: OwnedFd,
    path: PathBuf,
    driver: String,
    card: String,
    bus_info: String,
    direction: Direction,
    multiplanar: bool,
    buf_type: u32,
    /// The node's capabilities (`device_caps`), kept for [`V4l2Device::other_queue`].
    caps: u32,
}

/// A NUL-terminated fixed-size field as text.
fn c_text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(b.get(..end).unwrap_or_default()).into_owned()
}

/// The buffer type for the capabilities and direction: multi-planar where the device has
/// that API (a device with both speaks the multi-planar one natively), else single-planar.
fn pick_type(caps: u32, direction: Option<Direction>) -> Result<(Direction, bool, u32), Option<Direction>> {
    let capture = caps & (CAP_VIDEO_CAPTURE | CAP_VIDEO_CAPTURE_MPLANE | CAP_VIDEO_M2M | CAP_VIDEO_M2M_MPLANE) != 0;
    let output = caps & (CAP_VIDEO_OUTPUT | CAP_VIDEO_OUTPUT_MPLANE | CAP_VIDEO_M2M | CAP_VIDEO_M2M_MPLANE) != 0;
    let dir = match direction {
        Some(d) => d,
        None if capture => Direction::Capture,
        None if output => Direction::Output,
        None => return Err(None),
    };
    let mp = caps & CAP_VIDEO_M2M_MPLANE != 0;
    let sp = caps & CAP_VIDEO_M2M != 0;
    let (mp, sp, mp_type, sp_type) = match dir {
        Direction::Capture => (
            mp || caps & CAP_VIDEO_CAPTURE_MPLANE != 0,
            sp || caps & CAP_VIDEO_CAPTURE != 0,
            BUF_TYPE_VIDEO_CAPTURE_MPLANE,
            BUF_TYPE_VIDEO_CAPTURE,
        ),
        Direction::Output => (
            mp || caps & CAP_VIDEO_OUTPUT_MPLANE != 0,
            sp || caps & CAP_VIDEO_OUTPUT != 0,
            BUF_TYPE_VIDEO_OUTPUT_MPLANE,
            BUF_TYPE_VIDEO_OUTPUT,
        ),
    };
    if mp {
        Ok((dir, true, mp_type))
    } else if sp {
        Ok((dir, false, sp_type))
    } else {
        Err(Some(dir))
    }
}

impl V4l2Device {
    /// Opens `path` (`O_RDWR | O_CLOEXEC | O_NONBLOCK`: `DQBUF` never blocks; [`dequeue`]
    /// waits with `poll`) and picks its queue: `direction`, or capture where the device can
    /// capture and output otherwise.
    ///
    /// [`dequeue`]: V4l2Device::dequeue
    pub fn open(path: &Path, direction: Option<Direction>) -> Result<V4l2Device, V4l2DeviceError> {
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty())
            .map_err(|e| V4l2DeviceError::Open { path: path.to_owned(), source: e.into() })?;
        let mut cap = Capability::default();
        // SAFETY: VIDIOC_QUERYCAP is _IOR('V', 0, struct v4l2_capability) and `cap` is that
        // struct (#[repr(C)], 104 bytes, asserted).
        unsafe { update::<VIDIOC_QUERYCAP, _>(fd.as_fd(), &mut cap) }.map_err(|e| V4l2DeviceError::Ioctl {
            path: path.to_owned(),
            ioctl: "VIDIOC_QUERYCAP",
            source: e.into(),
        })?;
        // The node's own capabilities; `capabilities` is the whole physical device's.
        let caps = if cap.capabilities & CAP_DEVICE_CAPS != 0 { cap.device_caps } else { cap.capabilities };
        let (direction, multiplanar, buf_type) = pick_type(caps, direction).map_err(|dir| match dir {
            None => V4l2DeviceError::NotVideo { path: path.to_owned(), caps },
            Some(direction) => V4l2DeviceError::NoSuchDirection { path: path.to_owned(), direction, caps },
        })?;
        if caps & CAP_STREAMING == 0 {
            return Err(V4l2DeviceError::NoStreaming { path: path.to_owned() });
        }
        Ok(V4l2Device {
            fd,
            path: path.to_owned(),
            driver: c_text(&cap.driver),
            card: c_text(&cap.card),
            bus_info: c_text(&cap.bus_info),
            direction,
            multiplanar,
            buf_type,
            caps,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The driver's name (`vivid`).
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The device's name (`vivid`).
    pub fn card(&self) -> &str {
        &self.card
    }

    pub fn bus_info(&self) -> &str {
        &self.bus_info
    }

    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// Whether the queue is driven through the multi-planar API.
    pub fn is_multiplanar(&self) -> bool {
        self.multiplanar
    }

    /// The `enum v4l2_buf_type` of the queue.
    pub fn buf_type(&self) -> u32 {
        self.buf_type
    }

    fn ioctl_err(&self, ioctl: &'static str) -> impl FnOnce(Errno) -> V4l2DeviceError + '_ {
        move |e| V4l2DeviceError::Ioctl { path: self.path.clone(), ioctl, source: e.into() }
    }

    fn bad_request(&self, what: String) -> V4l2DeviceError {
        V4l2DeviceError::BadRequest { path: self.path.clone(), what }
    }

    fn bad_answer(&self, ioctl: &'static str, what: String) -> V4l2DeviceError {
        V4l2DeviceError::BadAnswer { path: self.path.clone(), ioctl, what }
    }

    /// Every pixel format of the queue, with its frame sizes.
    pub fn enum_formats(&self) -> Result<Vec<DeviceFormat>, V4l2DeviceError> {
        let mut out = Vec::new();
        for index in 0..=MAX_V4L2_FORMATS as u32 {
            let mut d = FmtDesc { index, type_: self.buf_type, ..FmtDesc::default() };
            // SAFETY: VIDIOC_ENUM_FMT is _IOWR('V', 2, struct v4l2_fmtdesc) and `d` is that
            // struct (64 bytes, asserted).
            match unsafe { update::<VIDIOC_ENUM_FMT, _>(self.fd.as_fd(), &mut d) } {
                Ok(()) => {}
                // The end of the list.
                Err(Errno::INVAL) => return Ok(out),
                Err(e) => return Err(self.ioctl_err("VIDIOC_ENUM_FMT")(e)),
            }
            if out.len() == MAX_V4L2_FORMATS {
                break;
            }
            out.push(DeviceFormat {
                pixelformat: d.pixelformat,
                description: c_text(&d.description),
                flags: d.flags,
                entry: lookup_code(d.pixelformat),
                sizes: self.frame_sizes(d.pixelformat)?,
            });
        }
        Err(V4l2DeviceError::TooMany { path: self.path.clone(), ioctl: "VIDIOC_ENUM_FMT", max: MAX_V4L2_FORMATS })
    }

    fn enum_frame_size(&self, pixelformat: u32, index: u32) -> Result<Option<FrmSizeEnum>, V4l2DeviceError> {
        let mut f = FrmSizeEnum { index, pixel_format: pixelformat, ..FrmSizeEnum::default() };
        // SAFETY: VIDIOC_ENUM_FRAMESIZES is _IOWR('V', 74, struct v4l2_frmsizeenum) and `f`
        // is that struct (44 bytes, asserted).
        match unsafe { update::<VIDIOC_ENUM_FRAMESIZES, _>(self.fd.as_fd(), &mut f) } {
            Ok(()) => Ok(Some(f)),
            // The end of the list; or (at index 0, ENOTTY) a driver that does not enumerate.
            Err(Errno::INVAL | Errno::NOTTY) => Ok(None),
            Err(e) => Err(self.ioctl_err("VIDIOC_ENUM_FRAMESIZES")(e)),
        }
    }

    /// The frame sizes of one pixel format (`VIDIOC_ENUM_FRAMESIZES`).
    pub fn frame_sizes(&self, pixelformat: u32) -> Result<FrameSizes, V4l2DeviceError> {
        let Some(first) = self.enum_frame_size(pixelformat, 0)? else {
            return Ok(FrameSizes::Unknown);
        };
        let [a, b, c, d, e, f] = first.size;
        let range =
            SizeRange { min_width: a, max_width: b, step_width: c, min_height: d, max_height: e, step_height: f };
        match first.type_ {
            FRMSIZE_TYPE_CONTINUOUS => return Ok(FrameSizes::Continuous(range)),
            FRMSIZE_TYPE_STEPWISE => return Ok(FrameSizes::Stepwise(range)),
            FRMSIZE_TYPE_DISCRETE => {}
            other => return Err(self.bad_answer("VIDIOC_ENUM_FRAMESIZES", format!("frame size type {other}"))),
        }
        let mut sizes = vec![(a, b)];
        for index in 1..=MAX_FRAME_SIZES as u32 {
            let Some(next) = self.enum_frame_size(pixelformat, index)? else {
                return Ok(FrameSizes::Discrete { sizes });
            };
            if sizes.len() == MAX_FRAME_SIZES {
                break;
            }
            sizes.push((next.size[0], next.size[1]));
        }
        Err(V4l2DeviceError::TooMany { path: self.path.clone(), ioctl: "VIDIOC_ENUM_FRAMESIZES", max: MAX_FRAME_SIZES })
    }

    fn format_request(&self, pixelformat: u32, width: u32, height: u32) -> RawFormat {
        let mut raw = RawFormat::new(self.buf_type);
        raw.set(fmt_off::WIDTH, width);
        raw.set(fmt_off::HEIGHT, height);
        raw.set(fmt_off::PIXELFORMAT, pixelformat);
        raw.set(fmt_off::FIELD, FIELD_ANY);
        raw
    }

    fn format_call<const OP: Opcode>(
        &self,
        name: &'static str,
        pixelformat: u32,
        width: u32,
        height: u32,
    ) -> Result<V4l2PlaneFormat, V4l2DeviceError> {
        let mut raw = self.format_request(pixelformat, width, height);
        // SAFETY: OP is VIDIOC_TRY_FMT or VIDIOC_S_FMT (the two callers), both
        // _IOWR('V', n, struct v4l2_format), and `raw` is that struct (208 bytes, asserted).
        unsafe { update::<OP, _>(self.fd.as_fd(), &mut raw) }.map_err(self.ioctl_err(name))?;
        plane_format_of(&raw, self.multiplanar).map_err(|what| self.bad_answer(name, what))
    }

    /// What the driver would choose for this request (`VIDIOC_TRY_FMT`), changing nothing.
    pub fn try_format(&self, pixelformat: u32, width: u32, height: u32) -> Result<V4l2PlaneFormat, V4l2DeviceError> {
        self.format_call::<VIDIOC_TRY_FMT>("VIDIOC_TRY_FMT", pixelformat, width, height)
    }

    /// How the queue's current format encodes colour (`VIDIOC_G_FMT`'s colorspace,
    /// `ycbcr_enc` and quantization), for converting its frames with the right matrix.
    pub fn colorimetry(&self) -> Result<Colorimetry, V4l2DeviceError> {
        let mut raw = RawFormat::new(self.buf_type);
        // SAFETY: VIDIOC_G_FMT is _IOWR('V', 4, struct v4l2_format) and `raw` is that struct
        // (208 bytes, asserted), its type set to this queue's.
        unsafe { update::<VIDIOC_G_FMT, _>(self.fd.as_fd(), &mut raw) }.map_err(self.ioctl_err("VIDIOC_G_FMT"))?;
        Ok(Colorimetry::of(&raw, self.multiplanar))
    }

    /// Sets the queue's format (`VIDIOC_S_FMT`; `EBUSY` while buffers are allocated) and
    /// returns what the driver chose, which may differ from the request in every field.
    pub fn set_format(&self, pixelformat: u32, width: u32, height: u32) -> Result<V4l2PlaneFormat, V4l2DeviceError> {
        self.format_call::<VIDIOC_S_FMT>("VIDIOC_S_FMT", pixelformat, width, height)
    }

    /// The formats split by what can name them ([`formats_of`]); formats dmabridge does not
    /// know (compressed ones, Bayer) are left out.
    pub fn v4l2_formats(formats: &[DeviceFormat]) -> V4l2Formats {
        let codes: Vec<String> =
            formats.iter().filter(|f| f.entry.is_some()).map(|f| format!("0x{:08x}", f.pixelformat)).collect();
        // Every code is one lookup_code found and there are at most MAX_V4L2_FORMATS of them
        // (enum_formats' bound), so formats_of cannot fail; an empty split is the safe answer.
        formats_of(&codes).unwrap_or_default()
    }

    /// The device as a participant: its DRM-nameable formats, the widths and heights any of
    /// them takes, the buffers its queue needs and its stride alignment.
    pub fn participant(&self, name: &str) -> Result<Participant, V4l2DeviceError> {
        let formats = self.enum_formats()?;
        self.participant_of(name, &formats)
    }

    /// [`V4l2Device::participant`] from formats already enumerated.
    ///
    /// `stride_align` is a probe, not a promise: for each DRM-nameable format, `TRY_FMT` at
    /// its smallest frame size; where the driver pads the luma row (its `bytesperline` is
    /// more than the row's bytes), the largest power of two (at most 4096) dividing that
    /// `bytesperline` is the alignment it pads to, and the participant asks for the largest
    /// over the formats. A driver that packs rows tightly asks for 1. V4L2 has no query for
    /// this, and the driver's `bytesperline` from `S_FMT` stays the authority for a stream.
    ///
    /// `min_buffers` is the count `VIDIOC_REQBUFS` grants for a request of one `MMAP` buffer
    /// (the driver's minimum), freed again at once; 1 where the queue is busy (`EBUSY`,
    /// another user streams) or the driver has no `MMAP`. An output device never writes the
    /// buffer, so it is `read_only`.
    pub fn participant_of(&self, name: &str, formats: &[DeviceFormat]) -> Result<Participant, V4l2DeviceError> {
        let split = Self::v4l2_formats(formats);
        let nameable: Vec<&DeviceFormat> =
            formats.iter().filter(|f| matches!(f.entry.map(|e| e.mapping), Some(V4l2Mapping::Drm(_)))).collect();
        let extents = nameable.iter().filter_map(|f| f.sizes.extents()).reduce(|(w0, h0), (w1, h1)| {
            (
                ExtentRange::new(w0.min.min(w1.min), w0.max.max(w1.max)),
                ExtentRange::new(h0.min.min(h1.min), h0.max.max(h1.max)),
            )
        });
        let stride_align = nameable.iter().filter_map(|f| self.probe_stride_align(f)).max().unwrap_or(1);
        let min_buffers = self.min_buffers()?;
        let (width, height) = extents.unwrap_or((ExtentRange::ANY, ExtentRange::ANY));
        let read_only = self.direction == Direction::Output;
        Ok(Participant::new(name, split.drm).with_sync(SYNC_METHODS).with_constraints(Constraints {
            width,
            height,
            min_buffers,
            stride_align,
            read_only,
            ..Constraints::default()
        }))
    }

    fn probe_stride_align(&self, f: &DeviceFormat) -> Option<u64> {
        let (w, h) = f.sizes.smallest()?;
        let chosen = self.try_format(f.pixelformat, w, h).ok()?;
        let info = format_info(f.entry?.fourcc())?;
        let bpl = u64::from(chosen.planes.first()?.bytesperline);
        if bpl == 0 || bpl <= info.min_stride(0, chosen.width) {
            return Some(1);
        }
        Some((1u64 << bpl.trailing_zeros()).min(4096))
    }

    /// The driver's minimum buffer count, see [`V4l2Device::participant_of`].
    fn min_buffers(&self) -> Result<u32, V4l2DeviceError> {
        match self.reqbufs(1, Memory::Mmap) {
            Ok(n) => {
                self.request_buffers(0, Memory::Mmap)?;
                Ok(n.max(1))
            }
            // Busy: someone else owns the queue. INVAL: no MMAP on this queue.
            Err(Errno::BUSY | Errno::INVAL) => Ok(1),
            Err(e) => Err(self.ioctl_err("VIDIOC_REQBUFS")(e)),
        }
    }

    /// The id of the control named `name` (`"OSD Text Mode"`), walking `VIDIOC_QUERYCTRL`
    /// with `V4L2_CTRL_FLAG_NEXT_CTRL`; `None` if the device has none of that name.
    pub fn find_control(&self, name: &str) -> Result<Option<u32>, V4l2DeviceError> {
        let mut id = 0u32;
        for _ in 0..MAX_CONTROLS {
            let mut q = QueryCtrl { id: id | CTRL_FLAG_NEXT_CTRL, ..QueryCtrl::default() };
            // SAFETY: VIDIOC_QUERYCTRL is _IOWR('V', 36, struct v4l2_queryctrl) and `q` is
            // that struct (68 bytes, asserted).
            match unsafe { update::<VIDIOC_QUERYCTRL, _>(self.fd.as_fd(), &mut q) } {
                Ok(()) => {}
                // Past the last control.
                Err(Errno::INVAL) => return Ok(None),
                Err(e) => return Err(self.ioctl_err("VIDIOC_QUERYCTRL")(e)),
            }
            if c_text(&q.name) == name {
                return Ok(Some(q.id));
            }
            // A driver that does not move forward would loop until the bound; stop early.
            if q.id <= id {
                return Err(self.bad_answer("VIDIOC_QUERYCTRL", format!("control {:#x} after {id:#x}", q.id)));
            }
            id = q.id;
        }
        Err(V4l2DeviceError::TooMany { path: self.path.clone(), ioctl: "VIDIOC_QUERYCTRL", max: MAX_CONTROLS })
    }

    /// Sets control `id` (`VIDIOC_S_CTRL`).
    pub fn set_control(&self, id: u32, value: i32) -> Result<(), V4l2DeviceError> {
        let mut c = Control { id, value };
        // SAFETY: VIDIOC_S_CTRL is _IOWR('V', 28, struct v4l2_control) and `c` is that
        // struct (8 bytes, asserted).
        unsafe { update::<VIDIOC_S_CTRL, _>(self.fd.as_fd(), &mut c) }.map_err(self.ioctl_err("VIDIOC_S_CTRL"))
    }

    /// A plain description for the command line.
    pub fn summary(&self, formats: &[DeviceFormat]) -> DeviceSummary {
        DeviceSummary {
            path: self.path.display().to_string(),
            driver: self.driver.clone(),
            card: self.card.clone(),
            bus_info: self.bus_info.clone(),
            direction: self.direction,
            multiplanar: self.multiplanar,
            formats: formats.iter().map(format_summary).collect(),
        }
    }

    /// Allocates (or, with 0, frees) the queue's buffers (`VIDIOC_REQBUFS`) and returns how
    /// many the driver granted, which may be more (its minimum) or fewer than asked.
    pub fn request_buffers(&self, count: u32, memory: Memory) -> Result<u32, V4l2DeviceError> {
        if count > MAX_BUFFERS {
            return Err(
                self.bad_request(format!("{count} buffers requested, dmabridge asks for at most {MAX_BUFFERS}"))
            );
        }
        self.reqbufs(count, memory).map_err(self.ioctl_err("VIDIOC_REQBUFS"))
    }

    fn reqbufs(&self, count: u32, memory: Memory) -> rustix::io::Result<u32> {
        let mut r = RequestBuffers { count, type_: self.buf_type, memory: memory.raw(), ..RequestBuffers::default() };
        // SAFETY: VIDIOC_REQBUFS is _IOWR('V', 8, struct v4l2_requestbuffers) and `r` is
        // that struct (20 bytes, asserted).
        unsafe { update::<VIDIOC_REQBUFS, _>(self.fd.as_fd(), &mut r) }?;
        Ok(r.count)
    }

    /// Runs a `v4l2_buffer` ioctl (`QUERYBUF`, `QBUF`, `DQBUF`) with the first `count` of
    /// `planes` as the plane array of the multi-planar API (vb2 takes any count from the
    /// format's planes up to 8: the maximum where the caller does not know it, exactly the
    /// caller's planes for an import), and returns the planes' answer (one entry, from the
    /// buffer itself, for the single-planar API).
    fn buffer_call<const OP: Opcode>(
        &self,
        buf: &mut Buffer,
        planes: &mut [RawPlane; VIDEO_MAX_PLANES],
        count: usize,
    ) -> rustix::io::Result<Vec<RawPlane>> {
        buf.type_ = self.buf_type;
        if self.multiplanar {
            buf.m = MemUnion::of_ptr(planes.as_mut_ptr());
            buf.length = count.min(VIDEO_MAX_PLANES) as u32;
        }
        // SAFETY: OP is VIDIOC_QUERYBUF, VIDIOC_QBUF or VIDIOC_DQBUF (the callers), each
        // _IOWR('V', n, struct v4l2_buffer), and `buf` is that struct (88 bytes, asserted).
        // For the multi-planar API `buf.m.planes` points at `planes`, VIDEO_MAX_PLANES
        // v4l2_plane structs (64 bytes each, asserted) that outlive the call, and
        // `buf.length` (at most VIDEO_MAX_PLANES) says how many; the kernel reads and writes
        // no more than that.
        unsafe { update::<OP, _>(self.fd.as_fd(), buf) }?;
        if !self.multiplanar {
            let p = RawPlane { bytesused: buf.bytesused, length: buf.length, m: buf.m, ..RawPlane::default() };
            return Ok(vec![p]);
        }
        let n = usize::try_from(buf.length).unwrap_or(usize::MAX);
        planes.get(..n).map(<[RawPlane]>::to_vec).ok_or(Errno::RANGE)
    }

    fn planes_answer(
        &self,
        ioctl: &'static str,
        r: rustix::io::Result<Vec<RawPlane>>,
    ) -> Result<Vec<RawPlane>, V4l2DeviceError> {
        match r {
            Err(Errno::RANGE) => Err(self.bad_answer(ioctl, format!("more than {VIDEO_MAX_PLANES} planes"))),
            Err(e) => Err(self.ioctl_err(ioctl)(e)),
            Ok(p) => Ok(p),
        }
    }

    /// Buffer `index`'s planes (`VIDIOC_QUERYBUF`): their lengths and `mmap` offsets.
    pub fn query_buffer(&self, index: u32) -> Result<BufferInfo, V4l2DeviceError> {
        let mut buf = Buffer { index, memory: MEMORY_MMAP, ..Buffer::default() };
        let mut planes = [RawPlane::default(); VIDEO_MAX_PLANES];
        let r = self.buffer_call::<VIDIOC_QUERYBUF>(&mut buf, &mut planes, VIDEO_MAX_PLANES);
        let planes = self.planes_answer("VIDIOC_QUERYBUF", r)?;
        let planes = planes.iter().map(|p| BufferPlane { length: p.length, mem_offset: p.m.u32() }).collect();
        Ok(BufferInfo { index, planes, flags: buf.flags })
    }

    /// Exports each plane of `MMAP` buffer `index` as a dma-buf (`VIDIOC_EXPBUF`,
    /// `O_CLOEXEC | O_RDWR`); the caller owns the fds.
    pub fn export_buffer(&self, index: u32) -> Result<Vec<OwnedFd>, V4l2DeviceError> {
        let n = self.query_buffer(index)?.planes.len();
        (0..n as u32).map(|plane| self.export_plane(index, plane)).collect()
    }

    fn export_plane(&self, index: u32, plane: u32) -> Result<OwnedFd, V4l2DeviceError> {
        let flags = (OFlags::CLOEXEC | OFlags::RDWR).bits();
        let mut e = ExportBuffer { type_: self.buf_type, index, plane, flags, ..ExportBuffer::default() };
        // SAFETY: VIDIOC_EXPBUF is _IOWR('V', 16, struct v4l2_exportbuffer) and `e` is that
        // struct (64 bytes, asserted).
        unsafe { update::<VIDIOC_EXPBUF, _>(self.fd.as_fd(), &mut e) }.map_err(self.ioctl_err("VIDIOC_EXPBUF"))?;
        if e.fd < 0 {
            return Err(self.bad_answer("VIDIOC_EXPBUF", format!("fd {}", e.fd)));
        }
        // SAFETY: on success the kernel installed a new fd for this process in `e.fd`, which
        // nothing else refers to, so this OwnedFd is its only owner.
        Ok(unsafe { OwnedFd::from_raw_fd(e.fd) })
    }

    /// Maps every plane of `MMAP` buffer `index`: read-only on a capture queue, readable and
    /// writable on an output queue, whose driver (vb2) refuses a mapping without `PROT_WRITE`
    /// and whose frames the caller writes ([`MappedBuffer::plane_mut`]).
    pub fn map_buffer(&self, index: u32) -> Result<MappedBuffer, V4l2DeviceError> {
        let info = self.query_buffer(index)?;
        let writable = self.direction == Direction::Output;
        let prot = if writable { ProtFlags::READ | ProtFlags::WRITE } else { ProtFlags::READ };
        let mut mapped = MappedBuffer { planes: Vec::with_capacity(info.planes.len()), writable };
        for (plane, p) in info.planes.iter().enumerate() {
            let len = p.length as usize;
            let map_err = |source: io::Error| V4l2DeviceError::Map { path: self.path.clone(), index, plane, source };
            if len == 0 {
                return Err(map_err(io::Error::from(io::ErrorKind::InvalidData)));
            }
            // SAFETY: a new shared mapping at an address the kernel picks, so no existing
            // memory is affected; `len` and the offset are what QUERYBUF gave.
            let ptr = unsafe {
                mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    MapFlags::SHARED,
                    self.fd.as_fd(),
                    u64::from(p.mem_offset),
                )
            }
            .map_err(|e| map_err(e.into()))?;
            let ptr =
                NonNull::new(ptr.cast::<u8>()).ok_or_else(|| map_err(io::Error::from(io::ErrorKind::InvalidData)))?;
            // Pushed at once, so an error on a later plane unmaps this one (drop).
            mapped.planes.push((ptr, len));
        }
        Ok(mapped)
    }

    /// Queues `MMAP` buffer `index` (`VIDIOC_QBUF`).
    pub fn queue_mmap(&self, index: u32) -> Result<(), V4l2DeviceError> {
        self.queue_mmap_with(index, &QueueParams::default())
    }

    /// [`V4l2Device::queue_mmap`] with a payload size, timestamp or request.
    pub fn queue_mmap_with(&self, index: u32, params: &QueueParams<'_>) -> Result<(), V4l2DeviceError> {
        let mut buf = Buffer { index, memory: MEMORY_MMAP, ..Buffer::default() };
        let mut planes = [RawPlane::default(); VIDEO_MAX_PLANES];
        params.apply(&mut buf, &mut planes, self.multiplanar);
        let r = self.buffer_call::<VIDIOC_QBUF>(&mut buf, &mut planes, VIDEO_MAX_PLANES);
        self.planes_answer("VIDIOC_QBUF", r).map(drop)
    }

    /// Queues dma-bufs as buffer `index` of a `DMABUF` queue (`VIDIOC_QBUF`): one fd and
    /// its length per plane the format has. The fds are borrowed: the driver takes its own
    /// reference.
    pub fn queue_dmabuf(&self, index: u32, fds: &[BorrowedFd<'_>], lengths: &[u32]) -> Result<(), V4l2DeviceError> {
        self.queue_dmabuf_with(index, fds, lengths, &QueueParams::default())
    }

    /// [`V4l2Device::queue_dmabuf`] with a payload size, timestamp or request.
    pub fn queue_dmabuf_with(
        &self,
        index: u32,
        fds: &[BorrowedFd<'_>],
        lengths: &[u32],
        params: &QueueParams<'_>,
    ) -> Result<(), V4l2DeviceError> {
        if fds.is_empty() || fds.len() != lengths.len() || fds.len() > VIDEO_MAX_PLANES {
            return Err(self.bad_request(format!(
                "QBUF of {} fds with {} lengths (1 to {VIDEO_MAX_PLANES} planes, one length each)",
                fds.len(),
                lengths.len()
            )));
        }
        if !self.multiplanar && fds.len() != 1 {
            return Err(self.bad_request(format!("QBUF of {} fds on a single-planar queue", fds.len())));
        }
        let raw_fd = |fd: &BorrowedFd<'_>| MemUnion::of_u32(std::os::fd::AsRawFd::as_raw_fd(fd) as u32);
        let mut buf = Buffer { index, memory: MEMORY_DMABUF, ..Buffer::default() };
        let mut planes = [RawPlane::default(); VIDEO_MAX_PLANES];
        for ((p, fd), &len) in planes.iter_mut().zip(fds).zip(lengths) {
            *p = RawPlane { m: raw_fd(fd), length: len, ..RawPlane::default() };
        }
        if let (false, Some(fd), Some(&len)) = (self.multiplanar, fds.first(), lengths.first()) {
            buf.m = raw_fd(fd);
            buf.length = len;
        }
        params.apply(&mut buf, &mut planes, self.multiplanar);
        let r = self.buffer_call::<VIDIOC_QBUF>(&mut buf, &mut planes, fds.len());
        self.planes_answer("VIDIOC_QBUF", r).map(drop)
    }

    fn stream<const OP: Opcode>(&self, name: &'static str) -> Result<(), V4l2DeviceError> {
        let t = self.buf_type as i32;
        loop {
            // SAFETY: OP is VIDIOC_STREAMON or VIDIOC_STREAMOFF (the callers), both
            // _IOW('V', n, int), and the argument is an int (the buffer type).
            match unsafe { ioctl(self.fd.as_fd(), Setter::<OP, i32>::new(t)) } {
                Err(Errno::INTR) => continue,
                r => return r.map_err(self.ioctl_err(name)),
            }
        }
    }

    /// Starts the queue (`VIDIOC_STREAMON`).
    pub fn stream_on(&self) -> Result<(), V4l2DeviceError> {
        self.stream::<VIDIOC_STREAMON>("VIDIOC_STREAMON")
    }

    /// Stops the queue (`VIDIOC_STREAMOFF`); every queued buffer comes back to the caller.
    pub fn stream_off(&self) -> Result<(), V4l2DeviceError> {
        self.stream::<VIDIOC_STREAMOFF>("VIDIOC_STREAMOFF")
    }

    /// Waits at most `timeout` for a buffer the device is done with, and dequeues it.
    ///
    /// `DQBUF` comes first and `poll` only once it says `EAGAIN` (streaming, nothing done
    /// yet): a `poll` on a capture node that has no buffers starts vb2's `read()` emulation,
    /// after which the queue answers `EBUSY` to this fd's `REQBUFS` and `DQBUF`. So a queue
    /// that is not streaming is `VIDIOC_DQBUF` failing with `EINVAL` at once, not a wait.
    pub fn dequeue(&self, timeout: Duration) -> Result<Dequeued, V4l2DeviceError> {
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            if let Some(d) = self.try_dequeue()? {
                return Ok(d);
            }
            let left = deadline.map_or(timeout, |d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_zero() {
                return Err(V4l2DeviceError::Timeout { path: self.path.clone(), timeout });
            }
            self.wait_ready(left).map_err(|e| match e {
                V4l2DeviceError::Timeout { path, .. } => V4l2DeviceError::Timeout { path, timeout },
                e => e,
            })?;
        }
    }

    /// One non-blocking `DQBUF`: `None` when nothing is done yet.
    fn try_dequeue(&self) -> Result<Option<Dequeued>, V4l2DeviceError> {
        let mut buf = Buffer { memory: MEMORY_MMAP, ..Buffer::default() };
        let mut planes = [RawPlane::default(); VIDEO_MAX_PLANES];
        let planes = match self.buffer_call::<VIDIOC_DQBUF>(&mut buf, &mut planes, VIDEO_MAX_PLANES) {
            Err(Errno::AGAIN) => return Ok(None),
            r => self.planes_answer("VIDIOC_DQBUF", r)?,
        };
        Ok(Some(Dequeued {
            index: buf.index,
            sequence: buf.sequence,
            bytesused: planes.iter().map(|p| p.bytesused).collect(),
            error: buf.flags & BUF_FLAG_ERROR != 0,
            timestamp: timestamp_of(buf.timestamp),
            keyframe: buf.flags & BUF_FLAG_KEYFRAME != 0,
            last: buf.flags & BUF_FLAG_LAST != 0,
        }))
    }

    fn wait_ready(&self, timeout: Duration) -> Result<(), V4l2DeviceError> {
        let ready = match self.direction {
            Direction::Capture => PollFlags::IN | PollFlags::RDNORM,
            Direction::Output => PollFlags::OUT | PollFlags::WRNORM,
        };
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(timeout, |d| d.saturating_duration_since(std::time::Instant::now()));
            let ts = Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: left.subsec_nanos().into(),
            };
            let mut fds = [PollFd::new(&self.fd, ready)];
            match poll(&mut fds, Some(&ts)) {
                Ok(0) => return Err(V4l2DeviceError::Timeout { path: self.path.clone(), timeout }),
                Ok(_) => {
                    let r = fds[0].revents();
                    if r.intersects(ready) {
                        return Ok(());
                    }
                    return Err(V4l2DeviceError::QueueNotReady { path: self.path.clone() });
                }
                Err(Errno::INTR) => continue,
                Err(e) => return Err(V4l2DeviceError::Poll { path: self.path.clone(), source: e.into() }),
            }
        }
    }
}

impl AsFd for V4l2Device {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A `timeval` as a duration; a negative one (no driver sets it) as zero.
fn timestamp_of([sec, usec]: [i64; 2]) -> Duration {
    let sec = u64::try_from(sec).unwrap_or(0);
    let usec = u64::try_from(usec).unwrap_or(0).min(999_999);
    Duration::from_secs(sec) + Duration::from_micros(usec)
}

fn format_summary(f: &DeviceFormat) -> FormatSummary {
    let (drm, mapping) = match f.entry.map(|e| e.mapping) {
        Some(V4l2Mapping::Drm(d)) => (Some(d.to_string()), "drm"),
        Some(V4l2Mapping::DmabridgeOnly { .. }) => (None, "dmabridge-only"),
        Some(V4l2Mapping::Unmapped { .. }) => (None, "unmapped"),
        None => (None, "unknown"),
    };
    FormatSummary {
        v4l2: f.fourcc_text(),
        name: f.entry.map(|e| e.name),
        description: f.description.clone(),
        drm,
        mapping,
        sizes: f.sizes.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colorimetry_defaults_resolve_as_the_kernels_macros_do() {
        let c = |colorspace, ycbcr_enc, quantization| Colorimetry { colorspace, ycbcr_enc, quantization };
        // sRGB (vivid's webcam), SMPTE 170M: BT.601, limited.
        assert_eq!((c(8, 0, 0).matrix(), c(8, 0, 0).range()), (Some(ColourMatrix::Bt601), ColourRange::Limited));
        assert_eq!(c(1, 0, 0).matrix(), Some(ColourMatrix::Bt601));
        assert_eq!(c(3, 0, 0).matrix(), Some(ColourMatrix::Bt709), "Rec. 709's default is 709");
        assert_eq!(c(10, 0, 0).matrix(), Some(ColourMatrix::Bt2020));
        assert_eq!(c(2, 0, 0).matrix(), None, "SMPTE 240M: no matrix here");
        assert_eq!(c(7, 0, 0).range(), ColourRange::Full, "JPEG is full range by default");
        assert_eq!(c(8, 2, 1).matrix(), Some(ColourMatrix::Bt709), "an explicit encoding wins");
        assert_eq!(c(3, 0, 1).range(), ColourRange::Full);
        assert_eq!(c(7, 0, 2).range(), ColourRange::Limited);
        assert_eq!(c(10, 7, 0).matrix(), None, "constant luminance is no matrix");
    }

    #[test]
    fn frame_sizes_print_as_people_write_them() {
        let r = SizeRange { min_width: 16, max_width: 1920, step_width: 2, min_height: 16, max_height: 1080, step_height: 2 };
        assert_eq!(FrameSizes::Discrete { sizes: vec![(320, 180), (640, 360)] }.to_string(), "320x180,640x360");
        assert_eq!(FrameSizes::Stepwise(r).to_string(), "16x16-1920x1080 (steps 2x2)");
        assert_eq!(FrameSizes::Continuous(r).to_string(), "16x16-1920x1080");
        assert_eq!(FrameSizes::Unknown.to_string(), "unknown");
    }

    #[test]
    fn request_numbers_match_the_kernel_header() {
        let expected: [(Opcode, u64); 14] = [
            (VIDIOC_QUERYCTRL, 0xc044_5624),
            (VIDIOC_S_CTRL, 0xc008_561c),
            (VIDIOC_QUERYCAP, 0x8068_5600),
            (VIDIOC_ENUM_FMT, 0xc040_5602),
            (VIDIOC_ENUM_FRAMESIZES, 0xc02c_564a),
            (VIDIOC_TRY_FMT, 0xc0d0_5640),
            (VIDIOC_S_FMT, 0xc0d0_5605),
            (VIDIOC_REQBUFS, 0xc014_5608),
            (VIDIOC_QUERYBUF, 0xc058_5609),
            (VIDIOC_QBUF, 0xc058_560f),
            (VIDIOC_DQBUF, 0xc058_5611),
            (VIDIOC_EXPBUF, 0xc040_5610),
            (VIDIOC_STREAMON, 0x4004_5612),
            (VIDIOC_STREAMOFF, 0x4004_5613),
        ];
        for (op, want) in expected {
            assert_eq!(op as u64, want);
        }
    }

    #[test]
    fn buffer_types_follow_caps_and_direction() {
        let mp_cap = CAP_VIDEO_CAPTURE_MPLANE | CAP_STREAMING;
        assert_eq!(pick_type(mp_cap, None), Ok((Direction::Capture, true, BUF_TYPE_VIDEO_CAPTURE_MPLANE)));
        assert_eq!(pick_type(mp_cap, Some(Direction::Output)), Err(Some(Direction::Output)));
        assert_eq!(pick_type(CAP_VIDEO_OUTPUT, None), Ok((Direction::Output, false, BUF_TYPE_VIDEO_OUTPUT)));
        assert_eq!(
            pick_type(CAP_VIDEO_M2M, Some(Direction::Output)),
            Ok((Direction::Output, false, BUF_TYPE_VIDEO_OUTPUT))
        );
        assert_eq!(pick_type(CAP_STREAMING, None), Err(None));
        assert_eq!("output".parse::<Direction>().unwrap(), Direction::Output);
        assert!("sideways".parse::<Direction>().is_err());
    }

    #[test]
    fn format_answers_are_read_at_the_headers_offsets() {
        let mut raw = RawFormat::new(BUF_TYPE_VIDEO_CAPTURE_MPLANE);
        raw.set(fmt_off::WIDTH, 320);
        raw.set(fmt_off::HEIGHT, 240);
        raw.set(fmt_off::MP_PLANE_FMT + fmt_off::MP_PLANE_BYTESPERLINE, 320);
        raw.set(fmt_off::MP_PLANE_FMT + fmt_off::MP_PLANE_SIZEIMAGE, 76800);
        raw.set(fmt_off::MP_PLANE_FMT + 20 + fmt_off::MP_PLANE_BYTESPERLINE, 320);
        raw.set(fmt_off::MP_PLANE_FMT + 20 + fmt_off::MP_PLANE_SIZEIMAGE, 38400);
        raw.fmt.0[fmt_off::MP_NUM_PLANES] = 2;
        let f = plane_format_of(&raw, true).unwrap();
        assert_eq!(
            f.planes,
            vec![V4l2Plane { bytesperline: 320, sizeimage: 76800 }, V4l2Plane { bytesperline: 320, sizeimage: 38400 }]
        );
        raw.fmt.0[fmt_off::MP_NUM_PLANES] = 9;
        assert!(plane_format_of(&raw, true).is_err(), "more planes than V4L2 has");
        assert_eq!(plane_format_of(&raw, false).unwrap().planes.len(), 1);
    }

    #[test]
    fn discrete_sizes_span_their_extremes() {
        let s = FrameSizes::Discrete { sizes: vec![(640, 360), (320, 180), (1920, 1080)] };
        assert_eq!(s.extents(), Some((ExtentRange::new(320, 1920), ExtentRange::new(180, 1080))));
        assert_eq!(s.smallest(), Some((320, 180)));
        assert_eq!(FrameSizes::Discrete { sizes: vec![] }.extents(), None);
        assert_eq!(FrameSizes::Discrete { sizes: vec![(0, 0)] }.extents(), None);
    }
}
