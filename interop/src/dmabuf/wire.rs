//! The handoff wire format: what travels in the bytes of one socket message, next to the fds
//! in its `SCM_RIGHTS` control message. Pure encoding and decoding, no fds, so that a fuzzer
//! can drive [`decode`] with arbitrary bytes.
//!
//! Every field is little-endian. A message is a 16-byte header and a body:
//!
//! ```text
//! header   0  magic      4 bytes  "DMBF"
//!          4  version    u16      2
//!          6  kind       u16      1 = buffer, 2 = release
//!          8  body_len   u32      bytes after the header; must match the kind exactly
//!         12  fd_count   u16      fds sent with the message: the planes, plus 1 with a fence
//!         14  fd_flags   u16      bit 0: the LAST fd is a fence (a sync_file): the acquire
//!                                 fence of a buffer, the release fence of a release; other
//!                                 bits must be 0
//! buffer   0  id         u64      the sender's name for the buffer (release uses it)
//!          8  fourcc     u32      kept opaque here; the import checks judge it
//!         12  flags      u32      bit 0 read-only, bit 1 disjoint; other bits must be 0
//!         16  modifier   u64      DRM_FORMAT_MOD_INVALID = implicit layout
//!         24  width      u32
//!         28  height     u32
//!         32  planes     u32      1..=4
//!         36  reserved   u32      must be 0
//!         40  per plane: offset u64, stride u64
//! release  0  id         u64      "I am done with buffer id"; fd_count is 1 with a release
//!                                 fence, else 0
//! ```
//!
//! A fence tells the receiver when the buffer's contents (acquire) or the buffer itself
//! (release) may be used: it signals when the sender's GPU work on it is done. Without one,
//! the sender finished before sending (see [`crate::sync::SyncMethod`]).
//!
//! Version 1 had no fences and a 32-bit `fd_count` where version 2 has `fd_count` and
//! `fd_flags`. A decoder that meets another version refuses it rather than guessing
//! (`FrameError::Version`, inside [`WireError::Frame`]); both ends must run the same wire version.

use crate::framing::{clean, Cursor, FrameError, Header, Protocol, Writer};
use crate::{Fourcc, Layout, Modifier};

use super::descriptor::MAX_PLANES;

pub use crate::framing::HEADER_LEN;
pub const MAGIC: [u8; 4] = *b"DMBF";
pub const VERSION: u16 = 2;
pub const KIND_BUFFER: u16 = 1;
pub const KIND_RELEASE: u16 = 2;
pub const BUFFER_FIXED_LEN: usize = 40;
pub const PLANE_LEN: usize = 16;
pub const RELEASE_LEN: usize = 8;
/// The longest valid message: a buffer with [`MAX_PLANES`] planes.
pub const MAX_MESSAGE_LEN: usize = HEADER_LEN + BUFFER_FIXED_LEN + MAX_PLANES * PLANE_LEN;
/// The most fds a valid message carries: [`MAX_PLANES`] planes and a fence.
pub const MAX_FDS: usize = MAX_PLANES + 1;
/// The handoff protocol's framing.
pub const PROTOCOL: Protocol = Protocol { name: "handoff", magic: MAGIC, version: VERSION, max_len: MAX_MESSAGE_LEN };

pub const FLAG_READ_ONLY: u32 = 1 << 0;
pub const FLAG_DISJOINT: u32 = 1 << 1;
const KNOWN_FLAGS: u32 = FLAG_READ_ONLY | FLAG_DISJOINT;

/// Header `flags` bit: the last fd of the message is a fence.
pub const FD_FLAG_FENCE: u16 = 1 << 0;
const KNOWN_FD_FLAGS: u16 = FD_FLAG_FENCE;

/// Why bytes are not a valid handoff message: framing ([`FrameError`]: magic, version,
/// lengths, fd counts, reserved bits) or the buffer body's own rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("no {kind} message has a {declared}-byte body")]
    BodyLengthForKind { kind: &'static str, declared: u32 },
    #[error("a buffer with {planes} planes has a {expected}-byte body, header says {declared}")]
    BodyLengthForPlanes { planes: u32, expected: usize, declared: u32 },
    #[error("a buffer has 1 to {MAX_PLANES} planes, message says {0}")]
    PlaneCount(u32),
    #[error("message declares {declared} fds; no message carries more than {MAX_FDS}")]
    TooManyFds { declared: u16 },
}

/// One buffer as described on the wire, without its fds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferMsg {
    pub id: u64,
    pub fourcc: Fourcc,
    pub layout: Layout,
    pub width: u32,
    pub height: u32,
    pub read_only: bool,
    pub disjoint: bool,
    /// Where each plane lies in its fd; 1..=4 entries, one fd each. Which file each fd is
    /// and how far each plane reaches are the receiver's to find out from the fds
    /// ([`DmaBuf::new`](super::DmaBuf::new), then [`check_import`](super::check_import)),
    /// not the sender's to claim.
    pub planes: Vec<WirePlane>,
    /// Whether an acquire fence follows the planes' fds.
    pub acquire_fence: bool,
}

impl BufferMsg {
    /// `buf` as buffer `id`, its fds to follow (and an acquire fence, with `acquire_fence`).
    pub fn describe(id: u64, buf: &super::DmaBuf, acquire_fence: bool) -> BufferMsg {
        BufferMsg {
            id,
            fourcc: buf.fourcc(),
            layout: buf.layout(),
            width: buf.width(),
            height: buf.height(),
            read_only: buf.read_only(),
            disjoint: buf.disjoint(),
            planes: buf.planes().map(|p| WirePlane { offset: p.offset, stride: p.stride }).collect(),
            acquire_fence,
        }
    }
}

/// One plane as it travels: its place in its fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WirePlane {
    pub offset: u64,
    pub stride: u64,
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A buffer; `planes.len()` fds come with it, one per plane, in plane order, then the
    /// acquire fence if `acquire_fence`.
    Buffer(BufferMsg),
    /// The peer is done with the buffer it was sent as `id`; with `release_fence`, one fd
    /// comes with it, which signals when the peer's last GPU access to it is done.
    Release { id: u64, release_fence: bool },
}

impl Message {
    /// Whether the last fd of the message is a fence.
    pub fn has_fence(&self) -> bool {
        match self {
            Message::Buffer(b) => b.acquire_fence,
            Message::Release { release_fence, .. } => *release_fence,
        }
    }

    /// How many fds must accompany this message.
    pub fn fd_count(&self) -> usize {
        let fence = usize::from(self.has_fence());
        match self {
            Message::Buffer(b) => b.planes.len() + fence,
            Message::Release { .. } => fence,
        }
    }
}

fn kind_name(kind: u16) -> &'static str {
    match kind {
        KIND_BUFFER => "buffer",
        KIND_RELEASE => "release",
        _ => "unknown",
    }
}

/// Encodes a message. Fails only for a buffer with no planes or more than [`MAX_PLANES`].
pub fn encode(msg: &Message) -> Result<Vec<u8>, WireError> {
    let mut w = Writer::with_capacity(MAX_MESSAGE_LEN);
    let kind = match msg {
        Message::Buffer(b) => {
            let n = b.planes.len();
            if n == 0 || n > MAX_PLANES {
                return Err(WireError::PlaneCount(u32::try_from(n).unwrap_or(u32::MAX)));
            }
            w.u64(b.id);
            w.u32(b.fourcc.code());
            let flags = if b.read_only { FLAG_READ_ONLY } else { 0 } | if b.disjoint { FLAG_DISJOINT } else { 0 };
            w.u32(flags);
            w.u64(b.layout.to_wire().raw());
            w.u32(b.width);
            w.u32(b.height);
            // n <= 4, so this cast is exact.
            w.u32(n as u32);
            w.u32(0);
            for p in &b.planes {
                w.u64(p.offset);
                w.u64(p.stride);
            }
            KIND_BUFFER
        }
        Message::Release { id, .. } => {
            w.u64(*id);
            KIND_RELEASE
        }
    };
    let fd_flags = if msg.has_fence() { FD_FLAG_FENCE } else { 0 };
    // At most MAX_FDS (5): the plane count was checked.
    Ok(PROTOCOL.frame(kind, msg.fd_count() as u16, fd_flags, &w.into_bytes())?)
}

/// Whether a header says its message's last fd is a fence.
pub fn has_fence(h: &Header) -> bool {
    h.flags & FD_FLAG_FENCE != 0
}

/// Parses and checks the header: magic, version, kind, a body length that is one this kind
/// can have (so a reader of a byte stream knows how much more to read, at most
/// [`MAX_MESSAGE_LEN`] in all), clean fd flags, and an fd count of at most [`MAX_FDS`].
pub fn decode_header(bytes: &[u8]) -> Result<Header, WireError> {
    let h = PROTOCOL.header(bytes)?;
    clean("header fd flags", u64::from(h.flags), u64::from(KNOWN_FD_FLAGS))?;
    // The bounds the header alone allows; decode then matches the count to the body.
    if usize::from(h.fd_count) > MAX_FDS {
        return Err(WireError::TooManyFds { declared: h.fd_count });
    }
    if has_fence(&h) && h.fd_count == 0 {
        return Err(FrameError::FdCount { kind: kind_name(h.kind), declared: 0, expected: 1 }.into());
    }
    match h.kind {
        KIND_BUFFER => {
            if !(1..=MAX_PLANES).any(|n| h.body_len as usize == BUFFER_FIXED_LEN + n * PLANE_LEN) {
                return Err(WireError::BodyLengthForKind { kind: "buffer", declared: h.body_len });
            }
        }
        KIND_RELEASE => {
            if h.body_len as usize != RELEASE_LEN {
                return Err(WireError::BodyLengthForKind { kind: "release", declared: h.body_len });
            }
        }
        other => return Err(FrameError::Kind(other).into()),
    }
    Ok(h)
}

/// Decodes one whole message (header and body, nothing after it) and checks every field:
/// lengths agree with each other and with `bytes`, the plane count is 1..=4, the declared fd
/// count equals the plane count plus the fence (for a release: the fence), flags and
/// reserved fields are clean.
/// Whether the declared fd count matches the fds that actually arrived is the transport's
/// check; whether offsets and strides fit the files is [`check_import`](super::check_import)'s.
pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
    let h = decode_header(bytes)?;
    let fence = has_fence(&h);
    let mut r = Cursor::new(PROTOCOL.body(bytes, &h)?);
    let fds = |expected: u16| -> Result<(), WireError> {
        if h.fd_count != expected {
            return Err(FrameError::FdCount { kind: kind_name(h.kind), declared: h.fd_count, expected }.into());
        }
        Ok(())
    };
    match h.kind {
        KIND_RELEASE => {
            fds(u16::from(fence))?;
            Ok(Message::Release { id: r.u64()?, release_fence: fence })
        }
        _ => {
            let id = r.u64()?;
            let fourcc = Fourcc::from_code(r.u32()?);
            let flags = r.u32()?;
            let modifier = Modifier::from_raw(r.u64()?);
            let width = r.u32()?;
            let height = r.u32()?;
            let n = r.u32()?;
            let reserved = r.u32()?;
            if n == 0 || n as usize > MAX_PLANES {
                return Err(WireError::PlaneCount(n));
            }
            let expected = BUFFER_FIXED_LEN + n as usize * PLANE_LEN;
            if h.body_len as usize != expected {
                return Err(WireError::BodyLengthForPlanes { planes: n, expected, declared: h.body_len });
            }
            // n <= 4, so this cannot overflow.
            fds(n as u16 + u16::from(fence))?;
            clean("buffer flags", u64::from(flags), u64::from(KNOWN_FLAGS))?;
            clean("buffer reserved", u64::from(reserved), 0)?;
            let disjoint = flags & FLAG_DISJOINT != 0;
            let mut planes = Vec::with_capacity(n as usize);
            for _ in 0..n {
                planes.push(WirePlane { offset: r.u64()?, stride: r.u64()? });
            }
            Ok(Message::Buffer(BufferMsg {
                id,
                fourcc,
                layout: Layout::from_wire(modifier),
                width,
                height,
                read_only: flags & FLAG_READ_ONLY != 0,
                disjoint,
                planes,
                acquire_fence: fence,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Message {
        Message::Buffer(BufferMsg {
            id: 7,
            fourcc: Fourcc::NV12,
            layout: Layout::Explicit(Modifier::LINEAR),
            width: 64,
            height: 48,
            read_only: true,
            disjoint: false,
            planes: vec![WirePlane { offset: 0, stride: 64 }, WirePlane { offset: 4096, stride: 64 }],
            acquire_fence: false,
        })
    }

    #[test]
    fn round_trips() {
        let m = sample();
        let bytes = encode(&m).unwrap();
        assert_eq!(bytes.len(), HEADER_LEN + BUFFER_FIXED_LEN + 2 * PLANE_LEN);
        assert_eq!(decode(&bytes).unwrap(), m);
        for release_fence in [false, true] {
            let r = Message::Release { id: 99, release_fence };
            assert_eq!(decode(&encode(&r).unwrap()).unwrap(), r);
        }
    }

    #[test]
    fn fences_are_counted_and_flagged_in_the_header() {
        let Message::Buffer(mut b) = sample() else {
            unreachable!()
        };
        b.acquire_fence = true;
        let m = Message::Buffer(b);
        assert_eq!(m.fd_count(), 3);
        let bytes = encode(&m).unwrap();
        assert_eq!(&bytes[12..16], &[3, 0, 1, 0]);
        assert_eq!(decode(&bytes).unwrap(), m);
        let h = decode_header(&bytes).unwrap();
        assert_eq!((h.fd_count, has_fence(&h)), (3, true));
        // The fence flag without the fd it announces, and an fd too many, are refused.
        let mut short = bytes.clone();
        short[12] = 2;
        assert_eq!(decode(&short), Err(FrameError::FdCount { kind: "buffer", declared: 2, expected: 3 }.into()));
        let mut release = encode(&Message::Release { id: 1, release_fence: true }).unwrap();
        release[12] = 0;
        assert!(matches!(decode(&release), Err(WireError::Frame(FrameError::FdCount { declared: 0, .. }))));
        let mut unknown = bytes.clone();
        unknown[14] = 0b11;
        assert_eq!(decode(&unknown), Err(FrameError::Reserved { field: "header fd flags", value: 0b10 }.into()));
        let mut many = bytes;
        many[12] = 200;
        assert_eq!(decode_header(&many), Err(WireError::TooManyFds { declared: 200 }));
    }

    #[test]
    fn another_wire_version_is_refused_by_name() {
        let mut bytes = encode(&sample()).unwrap();
        bytes[4..6].copy_from_slice(&1u16.to_le_bytes());
        assert!(matches!(decode(&bytes), Err(WireError::Frame(FrameError::Version { got: 1, supported: 2, .. }))));
        let msg = decode(&bytes).unwrap_err().to_string();
        assert!(msg.contains("version 1") && msg.contains("speaks 2"), "{msg}");
    }

    #[test]
    fn implicit_travels_as_invalid() {
        let Message::Buffer(mut b) = sample() else {
            unreachable!()
        };
        b.layout = Layout::Implicit;
        let bytes = encode(&Message::Buffer(b.clone())).unwrap();
        assert_eq!(
            &bytes[HEADER_LEN + 16..HEADER_LEN + 24],
            &Modifier::INVALID.raw().to_le_bytes()
        );
        assert_eq!(decode(&bytes).unwrap(), Message::Buffer(b));
    }

    #[test]
    fn every_prefix_is_rejected() {
        let bytes = encode(&sample()).unwrap();
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "prefix {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(decode(&longer), Err(WireError::Frame(FrameError::BodyLength { .. }))));
    }
}
