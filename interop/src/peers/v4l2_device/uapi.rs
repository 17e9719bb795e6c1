//! The V4L2 uAPI this module uses (`include/uapi/linux/videodev2.h`), by hand: the
//! constants, the structs with their 64-bit sizes asserted, the request numbers, and the one
//! ioctl helper every call goes through.

use std::os::fd::BorrowedFd;

use rustix::io::Errno;
use rustix::ioctl::{ioctl, opcode, Opcode, Updater};

pub(super) const CAP_VIDEO_CAPTURE: u32 = 0x0000_0001;
pub(super) const CAP_VIDEO_OUTPUT: u32 = 0x0000_0002;
pub(super) const CAP_VIDEO_CAPTURE_MPLANE: u32 = 0x0000_1000;
pub(super) const CAP_VIDEO_OUTPUT_MPLANE: u32 = 0x0000_2000;
pub(super) const CAP_VIDEO_M2M_MPLANE: u32 = 0x0000_4000;
pub(super) const CAP_VIDEO_M2M: u32 = 0x0000_8000;
pub(super) const CAP_STREAMING: u32 = 0x0400_0000;
pub(super) const CAP_DEVICE_CAPS: u32 = 0x8000_0000;

pub(super) const BUF_TYPE_VIDEO_CAPTURE: u32 = 1;
pub(super) const BUF_TYPE_VIDEO_OUTPUT: u32 = 2;
pub(super) const BUF_TYPE_VIDEO_CAPTURE_MPLANE: u32 = 9;
pub(super) const BUF_TYPE_VIDEO_OUTPUT_MPLANE: u32 = 10;

pub(super) const MEMORY_MMAP: u32 = 1;
pub(super) const MEMORY_DMABUF: u32 = 4;

pub(super) const FRMSIZE_TYPE_DISCRETE: u32 = 1;
pub(super) const FRMSIZE_TYPE_CONTINUOUS: u32 = 2;
pub(super) const FRMSIZE_TYPE_STEPWISE: u32 = 3;

/// `V4L2_FIELD_ANY`: the driver picks (progressive, for every device dmabridge serves).
pub(super) const FIELD_ANY: u32 = 0;
/// `V4L2_BUF_FLAG_ERROR`: the frame was dequeued, but its data may be corrupt.
pub(super) const BUF_FLAG_ERROR: u32 = 0x0000_0040;
/// `V4L2_BUF_FLAG_KEYFRAME`: a codec's frame that references no other.
pub(super) const BUF_FLAG_KEYFRAME: u32 = 0x0000_0008;
/// `V4L2_BUF_FLAG_LAST`: the last buffer of a drained (or resolution-changing) stream.
pub(super) const BUF_FLAG_LAST: u32 = 0x0010_0000;
/// `V4L2_BUF_FLAG_REQUEST_FD`: the buffer belongs to the request `request_fd`.
pub(super) const BUF_FLAG_REQUEST_FD: u32 = 0x0080_0000;
/// `V4L2_CTRL_WHICH_CUR_VAL`: controls set now.
pub(super) const CTRL_WHICH_CUR_VAL: u32 = 0;
/// `V4L2_CTRL_WHICH_REQUEST_VAL`: controls set in the request `request_fd`.
pub(super) const CTRL_WHICH_REQUEST_VAL: u32 = 0x0f01_0000;

/// `struct v4l2_capability`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Capability {
    pub(super) driver: [u8; 16],
    pub(super) card: [u8; 32],
    pub(super) bus_info: [u8; 32],
    pub(super) version: u32,
    pub(super) capabilities: u32,
    pub(super) device_caps: u32,
    pub(super) reserved: [u32; 3],
}

/// `struct v4l2_fmtdesc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FmtDesc {
    pub(super) index: u32,
    pub(super) type_: u32,
    pub(super) flags: u32,
    pub(super) description: [u8; 32],
    pub(super) pixelformat: u32,
    pub(super) mbus_code: u32,
    pub(super) reserved: [u32; 3],
}

/// `struct v4l2_frmsizeenum`; `size` is the union of `v4l2_frmsize_discrete` (width,
/// height) and `v4l2_frmsize_stepwise` (min, max, step of the width, then of the height).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FrmSizeEnum {
    pub(super) index: u32,
    pub(super) pixel_format: u32,
    pub(super) type_: u32,
    pub(super) size: [u32; 6],
    pub(super) reserved: [u32; 2],
}

/// The 200-byte, 8-aligned union `fmt` of `struct v4l2_format`, as bytes.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy)]
pub(super) struct FormatUnion(pub(super) [u8; 200]);

/// `struct v4l2_format`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct RawFormat {
    pub(super) type_: u32,
    pub(super) fmt: FormatUnion,
}

/// `struct v4l2_requestbuffers`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RequestBuffers {
    pub(super) count: u32,
    pub(super) type_: u32,
    pub(super) memory: u32,
    pub(super) capabilities: u32,
    pub(super) flags: u8,
    pub(super) reserved: [u8; 3],
}

/// `struct v4l2_timecode`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Timecode {
    pub(super) type_: u32,
    pub(super) flags: u32,
    pub(super) frames: u8,
    pub(super) seconds: u8,
    pub(super) minutes: u8,
    pub(super) hours: u8,
    pub(super) userbits: [u8; 4],
}

/// The 8-byte union `m` of `v4l2_buffer` and `v4l2_plane` (`offset`/`mem_offset`, `userptr`,
/// `planes`, `fd`), as bytes.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MemUnion(pub(super) [u8; 8]);

impl MemUnion {
    pub(super) fn u32(self) -> u32 {
        let [a, b, c, d, ..] = self.0;
        u32::from_ne_bytes([a, b, c, d])
    }

    pub(super) fn of_u32(v: u32) -> MemUnion {
        let [a, b, c, d] = v.to_ne_bytes();
        MemUnion([a, b, c, d, 0, 0, 0, 0])
    }

    pub(super) fn of_ptr<T>(p: *mut T) -> MemUnion {
        MemUnion((p as usize as u64).to_ne_bytes())
    }
}

/// `struct v4l2_buffer` (64-bit: `timestamp` is a 16-byte `timeval`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Buffer {
    pub(super) index: u32,
    pub(super) type_: u32,
    pub(super) bytesused: u32,
    pub(super) flags: u32,
    pub(super) field: u32,
    pub(super) timestamp: [i64; 2],
    pub(super) timecode: Timecode,
    pub(super) sequence: u32,
    pub(super) memory: u32,
    pub(super) m: MemUnion,
    pub(super) length: u32,
    pub(super) reserved2: u32,
    pub(super) request_fd: i32,
}

/// `struct v4l2_plane`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RawPlane {
    pub(super) bytesused: u32,
    pub(super) length: u32,
    pub(super) m: MemUnion,
    pub(super) data_offset: u32,
    pub(super) reserved: [u32; 11],
}

/// `struct v4l2_exportbuffer`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ExportBuffer {
    pub(super) type_: u32,
    pub(super) index: u32,
    pub(super) plane: u32,
    pub(super) flags: u32,
    pub(super) fd: i32,
    pub(super) reserved: [u32; 11],
}

/// `struct v4l2_queryctrl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct QueryCtrl {
    pub(super) id: u32,
    pub(super) type_: u32,
    pub(super) name: [u8; 32],
    pub(super) minimum: i32,
    pub(super) maximum: i32,
    pub(super) step: i32,
    pub(super) default_value: i32,
    pub(super) flags: u32,
    pub(super) reserved: [u32; 2],
}

/// `struct v4l2_control`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Control {
    pub(super) id: u32,
    pub(super) value: i32,
}

/// `struct v4l2_ext_control` (packed: 20 bytes), for a compound control: `ptr` points at
/// `size` bytes of the control's payload.
#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ExtControl {
    pub(super) id: u32,
    pub(super) size: u32,
    pub(super) reserved2: u32,
    pub(super) ptr: u64,
}

/// `struct v4l2_ext_controls`; `controls` points at `count` [`ExtControl`]s.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ExtControls {
    pub(super) which: u32,
    pub(super) count: u32,
    pub(super) error_idx: u32,
    pub(super) request_fd: i32,
    pub(super) reserved: u32,
    pub(super) controls: u64,
}

/// `struct media_device_info` (`include/uapi/linux/media.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct MediaDeviceInfo {
    pub(super) driver: [u8; 16],
    pub(super) model: [u8; 32],
    pub(super) serial: [u8; 40],
    pub(super) bus_info: [u8; 32],
    pub(super) media_version: u32,
    pub(super) hw_revision: u32,
    pub(super) driver_version: u32,
    pub(super) reserved: [u32; 31],
}

impl Default for MediaDeviceInfo {
    fn default() -> Self {
        MediaDeviceInfo {
            driver: [0; 16],
            model: [0; 32],
            serial: [0; 40],
            bus_info: [0; 32],
            media_version: 0,
            hw_revision: 0,
            driver_version: 0,
            reserved: [0; 31],
        }
    }
}

/// `V4L2_CTRL_FLAG_NEXT_CTRL`: `QUERYCTRL` answers the first control after the id.
pub(super) const CTRL_FLAG_NEXT_CTRL: u32 = 0x8000_0000;

// The kernel's 64-bit sizes (videodev2.h, checked with gcc on x86_64).
const _: () = assert!(size_of::<Capability>() == 104);
const _: () = assert!(size_of::<FmtDesc>() == 64);
const _: () = assert!(size_of::<FrmSizeEnum>() == 44);
const _: () = assert!(size_of::<RawFormat>() == 208 && align_of::<RawFormat>() == 8);
const _: () = assert!(size_of::<FormatUnion>() == 200);
const _: () = assert!(size_of::<RequestBuffers>() == 20);
const _: () = assert!(size_of::<Timecode>() == 16);
const _: () = assert!(size_of::<Buffer>() == 88 && std::mem::offset_of!(Buffer, m) == 64);
const _: () = assert!(size_of::<RawPlane>() == 64 && std::mem::offset_of!(RawPlane, data_offset) == 16);
const _: () = assert!(size_of::<ExportBuffer>() == 64);
const _: () = assert!(size_of::<QueryCtrl>() == 68 && size_of::<Control>() == 8);
const _: () = assert!(size_of::<ExtControl>() == 20 && size_of::<ExtControls>() == 32);
const _: () = assert!(std::mem::offset_of!(ExtControls, controls) == 24);
const _: () = assert!(size_of::<MediaDeviceInfo>() == 256);

pub(super) const VIDIOC_QUERYCAP: Opcode = opcode::read::<Capability>(b'V', 0);
pub(super) const VIDIOC_ENUM_FMT: Opcode = opcode::read_write::<FmtDesc>(b'V', 2);
pub(super) const VIDIOC_G_FMT: Opcode = opcode::read_write::<RawFormat>(b'V', 4);
pub(super) const VIDIOC_S_FMT: Opcode = opcode::read_write::<RawFormat>(b'V', 5);
pub(super) const VIDIOC_REQBUFS: Opcode = opcode::read_write::<RequestBuffers>(b'V', 8);
pub(super) const VIDIOC_QUERYBUF: Opcode = opcode::read_write::<Buffer>(b'V', 9);
pub(super) const VIDIOC_QBUF: Opcode = opcode::read_write::<Buffer>(b'V', 15);
pub(super) const VIDIOC_EXPBUF: Opcode = opcode::read_write::<ExportBuffer>(b'V', 16);
pub(super) const VIDIOC_DQBUF: Opcode = opcode::read_write::<Buffer>(b'V', 17);
pub(super) const VIDIOC_STREAMON: Opcode = opcode::write::<i32>(b'V', 18);
pub(super) const VIDIOC_STREAMOFF: Opcode = opcode::write::<i32>(b'V', 19);
pub(super) const VIDIOC_S_CTRL: Opcode = opcode::read_write::<Control>(b'V', 28);
pub(super) const VIDIOC_QUERYCTRL: Opcode = opcode::read_write::<QueryCtrl>(b'V', 36);
pub(super) const VIDIOC_TRY_FMT: Opcode = opcode::read_write::<RawFormat>(b'V', 64);
pub(super) const VIDIOC_S_EXT_CTRLS: Opcode = opcode::read_write::<ExtControls>(b'V', 72);
pub(super) const MEDIA_IOC_DEVICE_INFO: Opcode = opcode::read_write::<MediaDeviceInfo>(b'|', 0x00);
pub(super) const MEDIA_IOC_REQUEST_ALLOC: Opcode = opcode::read::<i32>(b'|', 0x05);
pub(super) const MEDIA_REQUEST_IOC_QUEUE: Opcode = opcode::none(b'|', 0x80);
pub(super) const MEDIA_REQUEST_IOC_REINIT: Opcode = opcode::none(b'|', 0x81);
pub(super) const VIDIOC_ENUM_FRAMESIZES: Opcode = opcode::read_write::<FrmSizeEnum>(b'V', 74);

/// Offsets in `v4l2_format.fmt`: `v4l2_pix_format` (single-planar) and the packed
/// `v4l2_pix_format_mplane` with its `v4l2_plane_pix_format plane_fmt[8]` (20 bytes each).
pub(super) mod fmt_off {
    pub const WIDTH: usize = 0;
    pub const HEIGHT: usize = 4;
    pub const PIXELFORMAT: usize = 8;
    pub const FIELD: usize = 12;
    pub const PIX_BYTESPERLINE: usize = 16;
    pub const PIX_SIZEIMAGE: usize = 20;
    pub const MP_PLANE_FMT: usize = 20;
    pub const MP_PLANE_FMT_SIZE: usize = 20;
    pub const MP_PLANE_SIZEIMAGE: usize = 0;
    pub const MP_PLANE_BYTESPERLINE: usize = 4;
    pub const MP_NUM_PLANES: usize = 180;
    // Colorimetry: u32s in `v4l2_pix_format`, bytes in the packed `v4l2_pix_format_mplane`.
    pub const PIX_COLORSPACE: usize = 24;
    pub const PIX_YCBCR_ENC: usize = 36;
    pub const PIX_QUANTIZATION: usize = 40;
    pub const MP_COLORSPACE: usize = 16;
    pub const MP_YCBCR_ENC: usize = 182;
    pub const MP_QUANTIZATION: usize = 183;
}

impl RawFormat {
    pub(super) fn new(type_: u32) -> RawFormat {
        RawFormat { type_, fmt: FormatUnion([0; 200]) }
    }

    pub(super) fn get(&self, at: usize) -> u32 {
        self.fmt.0.get(at..at + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_ne_bytes)
    }

    pub(super) fn set(&mut self, at: usize, v: u32) {
        if let Some(b) = self.fmt.0.get_mut(at..at + 4) {
            b.copy_from_slice(&v.to_ne_bytes());
        }
    }

    pub(super) fn byte(&self, at: usize) -> u8 {
        self.fmt.0.get(at).copied().unwrap_or(0)
    }
}

/// The one requirement on each ioctl helper's caller: `OP` is the kernel's request whose
/// argument is a `T` (and which reads and writes no more than `size_of::<T>()` bytes of it,
/// nor memory it points to beyond what the caller set up).
///
/// # Safety
/// As above: a wrong pairing lets the kernel write past `arg`.
pub(super) unsafe fn update<const OP: Opcode, T>(fd: BorrowedFd<'_>, arg: &mut T) -> rustix::io::Result<()> {
    loop {
        // SAFETY: the caller vouches that OP's argument is a T; `arg` is one, borrowed
        // mutably for the call.
        match unsafe { ioctl(fd, Updater::<OP, T>::new(arg)) } {
            Err(Errno::INTR) => continue,
            r => return r,
        }
    }
}
