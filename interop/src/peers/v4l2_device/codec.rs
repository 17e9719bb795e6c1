//! What a memory-to-memory codec needs beyond a camera's queue: both queues of one open
//! node ([`V4l2Device::other_queue`]), an `OUTPUT` buffer's payload size and timestamp, and
//! the request API of stateless decoders (`Documentation/userspace-api/media/mediactl/
//! request-api.rst`): a request is allocated on the driver's media device
//! ([`MediaDevice::alloc_request`]), its controls set ([`V4l2Device::set_compound_control`])
//! and its `OUTPUT` buffer queued into it ([`QueueParams::request`]), then it is queued as
//! one ([`MediaRequest::queue`]) and completes as one ([`MediaRequest::wait`]).
//!
//! Timestamps are how a stateless decoder names its reference frames: the driver copies an
//! `OUTPUT` buffer's timestamp to the `CAPTURE` buffer it decodes into, and a later frame's
//! controls name that timestamp (in nanoseconds) to reference it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::event::PollFlags;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::ioctl::{ioctl, Getter, NoArg};

use super::uapi::*;
use crate::sync::{poll_for, WaitError};
use super::{c_text, Direction, V4l2Device, V4l2DeviceError, VIDEO_MAX_PLANES};

/// Most `/dev/mediaN` nodes [`MediaDevice::find`] looks at.
pub const MAX_MEDIA_NODES: u32 = 64;
/// The largest compound control payload [`V4l2Device::set_compound_control`] sends (the
/// stateless codecs' biggest, AV1's sequence/frame controls, are a few KiB).
pub const MAX_CONTROL_PAYLOAD: usize = 64 * 1024;

/// What a `QBUF` carries beyond the buffer itself; the default is what a camera's queue
/// needs (nothing).
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueParams<'a> {
    /// Bytes of data in the first plane (an `OUTPUT` buffer's compressed frame); `None`: the
    /// driver's default, the whole plane.
    pub bytesused: Option<u32>,
    /// The buffer's timestamp (`OUTPUT`; a decoder copies it to the frame it decodes, and
    /// later frames reference that frame by it). Microsecond resolution: `timeval`.
    pub timestamp: Option<Duration>,
    /// The request this buffer belongs to (`V4L2_BUF_FLAG_REQUEST_FD`): it is queued to the
    /// driver when the request is.
    pub request: Option<BorrowedFd<'a>>,
}

impl QueueParams<'_> {
    pub(super) fn apply(&self, buf: &mut Buffer, planes: &mut [RawPlane; VIDEO_MAX_PLANES], multiplanar: bool) {
        if let Some(n) = self.bytesused {
            match multiplanar {
                true => planes[0].bytesused = n,
                false => buf.bytesused = n,
            }
        }
        if let Some(t) = self.timestamp {
            buf.timestamp = [i64::try_from(t.as_secs()).unwrap_or(i64::MAX), i64::from(t.subsec_micros())];
        }
        if let Some(r) = self.request {
            buf.flags |= BUF_FLAG_REQUEST_FD;
            buf.request_fd = std::os::fd::AsRawFd::as_raw_fd(&r);
        }
    }
}

impl V4l2Device {
    /// The other queue of this memory-to-memory node (a codec's `CAPTURE` for its `OUTPUT`,
    /// or the reverse), on the same open file: a duplicate of the fd, so both queues are one
    /// codec context, as the driver requires. Refused for a node that is not memory-to-memory
    /// (a camera's other "queue" would be another context, or none).
    pub fn other_queue(&self) -> Result<V4l2Device, V4l2DeviceError> {
        if self.caps & (CAP_VIDEO_M2M | CAP_VIDEO_M2M_MPLANE) == 0 {
            return Err(self.bad_request(format!(
                "not a memory-to-memory device (capabilities {:#010x}): it has no other queue on the same file",
                self.caps
            )));
        }
        let fd = self.fd.try_clone().map_err(|source| V4l2DeviceError::Open { path: self.path.clone(), source })?;
        let (direction, buf_type) = match (self.direction, self.multiplanar) {
            (Direction::Output, true) => (Direction::Capture, BUF_TYPE_VIDEO_CAPTURE_MPLANE),
            (Direction::Output, false) => (Direction::Capture, BUF_TYPE_VIDEO_CAPTURE),
            (Direction::Capture, true) => (Direction::Output, BUF_TYPE_VIDEO_OUTPUT_MPLANE),
            (Direction::Capture, false) => (Direction::Output, BUF_TYPE_VIDEO_OUTPUT),
        };
        Ok(V4l2Device {
            fd,
            path: self.path.clone(),
            driver: self.driver.clone(),
            card: self.card.clone(),
            bus_info: self.bus_info.clone(),
            direction,
            multiplanar: self.multiplanar,
            buf_type,
            caps: self.caps,
        })
    }

    /// Sets compound control `id` to `payload` (`VIDIOC_S_EXT_CTRLS`): now, or, with
    /// `request`, in that request (`V4L2_CTRL_WHICH_REQUEST_VAL`), where it applies to the
    /// request's buffers alone. The payload is the control's struct as the uAPI lays it out
    /// (`struct v4l2_ctrl_fwht_params`, 40 bytes); the driver checks its size.
    pub fn set_compound_control(
        &self,
        id: u32,
        payload: &[u8],
        request: Option<BorrowedFd<'_>>,
    ) -> Result<(), V4l2DeviceError> {
        if payload.is_empty() || payload.len() > MAX_CONTROL_PAYLOAD {
            return Err(self.bad_request(format!(
                "control {id:#x} with {} bytes (1 to {MAX_CONTROL_PAYLOAD})",
                payload.len()
            )));
        }
        let mut control = ExtControl {
            id,
            size: payload.len() as u32,
            reserved2: 0,
            ptr: payload.as_ptr() as usize as u64,
        };
        let mut controls = ExtControls {
            which: if request.is_some() { CTRL_WHICH_REQUEST_VAL } else { CTRL_WHICH_CUR_VAL },
            count: 1,
            request_fd: request.map_or(-1, |r| std::os::fd::AsRawFd::as_raw_fd(&r)),
            controls: std::ptr::addr_of_mut!(control) as usize as u64,
            ..ExtControls::default()
        };
        // SAFETY: VIDIOC_S_EXT_CTRLS is _IOWR('V', 72, struct v4l2_ext_controls) and
        // `controls` is that struct (32 bytes, asserted). Its `controls` points at one
        // v4l2_ext_control (20 bytes, packed, asserted) that outlives the call, whose `ptr`
        // points at `payload`, `size` bytes that outlive the call; the kernel copies both in
        // and writes back only the control (and `error_idx`).
        unsafe { update::<VIDIOC_S_EXT_CTRLS, _>(self.fd.as_fd(), &mut controls) }
            .map_err(self.ioctl_err("VIDIOC_S_EXT_CTRLS"))
    }
}

/// Why a media device or one of its requests failed. Every message names the node.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The node could not be opened.
    #[error("opening media device {path} failed: {source}")]
    Open { path: PathBuf, source: io::Error },
    /// An ioctl failed; `source` carries the errno (`MEDIA_REQUEST_IOC_QUEUE` says `ENOENT`
    /// for a request with no buffer, `EBUSY` for one already queued, `EINVAL`/`EACCES` for
    /// controls the driver refused).
    #[error("media device {path}: {ioctl} failed: {source}")]
    Ioctl { path: PathBuf, ioctl: &'static str, source: io::Error },
    /// No media device of that driver and bus (the driver registers none, or it is not
    /// loaded).
    #[error("no media device of driver {driver:?} on bus {bus_info:?} among /dev/media0..{max}")]
    NotFound { driver: String, bus_info: String, max: u32 },
    /// The request did not complete within the timeout.
    #[error("media request on {path} did not complete within {timeout:?}")]
    Timeout { path: PathBuf, timeout: Duration },
    /// Waiting on the request failed (`POLLERR`: it was never queued).
    #[error("media request on {path}: {source}")]
    Wait { path: PathBuf, source: WaitError },
}

/// A media controller node (`/dev/mediaN`), owning its fd; a stateless codec's requests are
/// allocated here.
#[derive(Debug)]
pub struct MediaDevice {
    fd: OwnedFd,
    path: PathBuf,
    driver: String,
    bus_info: String,
}

/// One request (`MEDIA_IOC_REQUEST_ALLOC`), owning its fd; the kernel frees it once the fd
/// is closed and it has completed. Reusable after [`MediaRequest::reinit`].
#[derive(Debug)]
pub struct MediaRequest {
    fd: OwnedFd,
    path: PathBuf,
}

impl MediaDevice {
    /// Opens `path` and reads its driver and bus.
    pub fn open(path: &Path) -> Result<MediaDevice, MediaError> {
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| MediaError::Open { path: path.to_owned(), source: e.into() })?;
        let mut info = MediaDeviceInfo::default();
        // SAFETY: MEDIA_IOC_DEVICE_INFO is _IOWR('|', 0, struct media_device_info) and
        // `info` is that struct (256 bytes, asserted).
        unsafe { update::<MEDIA_IOC_DEVICE_INFO, _>(fd.as_fd(), &mut info) }.map_err(|e| MediaError::Ioctl {
            path: path.to_owned(),
            ioctl: "MEDIA_IOC_DEVICE_INFO",
            source: e.into(),
        })?;
        Ok(MediaDevice { fd, path: path.to_owned(), driver: c_text(&info.driver), bus_info: c_text(&info.bus_info) })
    }

    /// The media device of a video node's driver: the first `/dev/mediaN` whose driver and
    /// bus are the node's (`VIDIOC_QUERYCAP`'s, which the media device reports too).
    pub fn find(video: &V4l2Device) -> Result<MediaDevice, MediaError> {
        for n in 0..MAX_MEDIA_NODES {
            let path = PathBuf::from(format!("/dev/media{n}"));
            if !path.exists() {
                continue;
            }
            match MediaDevice::open(&path) {
                Ok(m) if m.driver == video.driver() && m.bus_info == video.bus_info() => return Ok(m),
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "skipping a media node"),
            }
        }
        Err(MediaError::NotFound {
            driver: video.driver().to_owned(),
            bus_info: video.bus_info().to_owned(),
            max: MAX_MEDIA_NODES - 1,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// A new request (`MEDIA_IOC_REQUEST_ALLOC`).
    pub fn alloc_request(&self) -> Result<MediaRequest, MediaError> {
        // SAFETY: MEDIA_IOC_REQUEST_ALLOC is _IOR('|', 5, int) and the Getter reads an int.
        let fd = unsafe { ioctl(self.fd.as_fd(), Getter::<MEDIA_IOC_REQUEST_ALLOC, i32>::new()) }.map_err(|e| {
            MediaError::Ioctl { path: self.path.clone(), ioctl: "MEDIA_IOC_REQUEST_ALLOC", source: e.into() }
        })?;
        if fd < 0 {
            return Err(MediaError::Ioctl {
                path: self.path.clone(),
                ioctl: "MEDIA_IOC_REQUEST_ALLOC",
                source: io::Error::from(io::ErrorKind::InvalidData),
            });
        }
        // SAFETY: on success the kernel installed a new fd for this process, which nothing
        // else refers to, so this OwnedFd is its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(MediaRequest { fd, path: self.path.clone() })
    }
}

impl MediaRequest {
    fn call<const OP: rustix::ioctl::Opcode>(&self, name: &'static str) -> Result<(), MediaError> {
        loop {
            // SAFETY: OP is MEDIA_REQUEST_IOC_QUEUE or MEDIA_REQUEST_IOC_REINIT (the callers),
            // both _IO('|', n): no argument.
            match unsafe { ioctl(self.fd.as_fd(), NoArg::<OP>::new()) } {
                Err(Errno::INTR) => continue,
                r => return r.map_err(|e| MediaError::Ioctl { path: self.path.clone(), ioctl: name, source: e.into() }),
            }
        }
    }

    /// Queues the request: its controls apply and its buffers go to the driver, as one.
    pub fn queue(&self) -> Result<(), MediaError> {
        self.call::<MEDIA_REQUEST_IOC_QUEUE>("MEDIA_REQUEST_IOC_QUEUE")
    }

    /// Makes a completed request reusable (its buffers and controls forgotten).
    pub fn reinit(&self) -> Result<(), MediaError> {
        self.call::<MEDIA_REQUEST_IOC_REINIT>("MEDIA_REQUEST_IOC_REINIT")
    }

    /// Waits at most `timeout` for the queued request to complete (`POLLPRI`).
    pub fn wait(&self, timeout: Duration) -> Result<(), MediaError> {
        poll_for(self.fd.as_fd(), PollFlags::PRI, timeout).map_err(|e| match e {
            WaitError::Timeout { .. } => MediaError::Timeout { path: self.path.clone(), timeout },
            // POLLERR: the request was never queued; waiting would never end.
            e => MediaError::Wait { path: self.path.clone(), source: e },
        })
    }
}

impl AsFd for MediaRequest {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_the_kernel_headers() {
        assert_eq!(VIDIOC_S_EXT_CTRLS as u64, 0xc020_5648);
        assert_eq!(MEDIA_IOC_DEVICE_INFO as u64, 0xc100_7c00);
        assert_eq!(MEDIA_IOC_REQUEST_ALLOC as u64, 0x8004_7c05);
        assert_eq!(MEDIA_REQUEST_IOC_QUEUE as u64, 0x7c80);
        assert_eq!(MEDIA_REQUEST_IOC_REINIT as u64, 0x7c81);
    }

    #[test]
    fn queue_params_land_where_the_api_reads_them() {
        let fd = rustix::fs::open("/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let p = QueueParams { bytesused: Some(77), timestamp: Some(Duration::from_micros(3_000_042)), request: Some(fd.as_fd()) };
        let (mut buf, mut planes) = (Buffer::default(), [RawPlane::default(); VIDEO_MAX_PLANES]);
        p.apply(&mut buf, &mut planes, true);
        assert_eq!((planes[0].bytesused, buf.bytesused), (77, 0), "multi-planar: the plane's bytesused");
        assert_eq!(buf.timestamp, [3, 42]);
        assert_eq!(buf.flags & BUF_FLAG_REQUEST_FD, BUF_FLAG_REQUEST_FD);
        assert_eq!(buf.request_fd, std::os::fd::AsRawFd::as_raw_fd(&fd));
        let (mut buf, mut planes) = (Buffer::default(), [RawPlane::default(); VIDEO_MAX_PLANES]);
        QueueParams { bytesused: Some(5), ..QueueParams::default() }.apply(&mut buf, &mut planes, false);
        assert_eq!((buf.bytesused, planes[0].bytesused, buf.flags), (5, 0, 0));
    }
}
