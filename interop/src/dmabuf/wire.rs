//! The handoff wire format: what travels in the bytes of one socket message, next to the fds
//! in its `SCM_RIGHTS` control message. Pure encoding and decoding, no fds, so that a fuzzer
//! can drive [`decode`] with arbitrary bytes.
//!
//! Every field is little-endian. A message is a 16-byte header and a body:
//!
//! ```text
//! header   0  magic      4 bytes  "DMBF"
//!          4  version    u16      1
//!          6  kind       u16      1 = buffer, 2 = release
//!          8  body_len   u32      bytes after the header; must match the kind exactly
//!         12  fd_count   u32      fds sent with the message; must match the planes
//! buffer   0  id         u64      the sender's name for the buffer (release uses it)
//!          8  fourcc     u32      kept opaque here; the import checks judge it
//!         12  flags      u32      bit 0 read-only, bit 1 disjoint; other bits must be 0
//!         16  modifier   u64      DRM_FORMAT_MOD_INVALID = implicit layout
//!         24  width      u32
//!         28  height     u32
//!         32  planes     u32      1..=4
//!         36  reserved   u32      must be 0
//!         40  per plane: offset u64, stride u64
//! release  0  id         u64      "I am done with buffer id": fd_count must be 0
//! ```
//!
//! A decoder that meets a newer version refuses it rather than guessing ([`WireError::Version`]).

use crate::{Fourcc, Layout, Modifier};

use super::descriptor::MAX_PLANES;

pub const MAGIC: [u8; 4] = *b"DMBF";
pub const VERSION: u16 = 1;
pub const HEADER_LEN: usize = 16;
pub const KIND_BUFFER: u16 = 1;
pub const KIND_RELEASE: u16 = 2;
pub const BUFFER_FIXED_LEN: usize = 40;
pub const PLANE_LEN: usize = 16;
pub const RELEASE_LEN: usize = 8;
/// The longest valid message: a buffer with [`MAX_PLANES`] planes.
pub const MAX_MESSAGE_LEN: usize = HEADER_LEN + BUFFER_FIXED_LEN + MAX_PLANES * PLANE_LEN;

pub const FLAG_READ_ONLY: u32 = 1 << 0;
pub const FLAG_DISJOINT: u32 = 1 << 1;
const KNOWN_FLAGS: u32 = FLAG_READ_ONLY | FLAG_DISJOINT;

/// Why bytes are not a valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message truncated: {got} bytes, at least {need} needed")]
    Truncated { need: usize, got: usize },
    #[error("bad magic {0:02x?}: not a dmabridge handoff message")]
    Magic([u8; 4]),
    #[error("wire version {0} is not supported (this side speaks {VERSION})")]
    Version(u16),
    #[error("unknown message kind {0}")]
    Kind(u16),
    #[error("header says the body is {declared} bytes, but {actual} arrived")]
    BodyLength { declared: u32, actual: usize },
    #[error("no {kind} message has a {declared}-byte body")]
    BodyLengthForKind { kind: &'static str, declared: u32 },
    #[error("a buffer with {planes} planes has a {expected}-byte body, header says {declared}")]
    BodyLengthForPlanes {
        planes: u32,
        expected: usize,
        declared: u32,
    },
    #[error("a buffer has 1 to {MAX_PLANES} planes, message says {0}")]
    PlaneCount(u32),
    #[error("message declares {declared} fds but {expected} are required")]
    FdCount { declared: u32, expected: u32 },
    #[error("unknown flag bits {0:#x}")]
    Flags(u32),
    #[error("reserved field is {0:#x}, must be 0")]
    Reserved(u32),
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
    /// (offset, stride) per plane; 1..=4 entries.
    pub planes: Vec<(u64, u64)>,
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A buffer; `planes.len()` fds come with it, one per plane, in plane order.
    Buffer(BufferMsg),
    /// The peer is done with the buffer it was sent as `id`.
    Release { id: u64 },
}

impl Message {
    /// How many fds must accompany this message.
    pub fn fd_count(&self) -> usize {
        match self {
            Message::Buffer(b) => b.planes.len(),
            Message::Release { .. } => 0,
        }
    }
}

/// Encodes a message. Fails only for a buffer with no planes or more than [`MAX_PLANES`].
pub fn encode(msg: &Message) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(MAX_MESSAGE_LEN);
    match msg {
        Message::Buffer(b) => {
            let n = b.planes.len();
            if n == 0 || n > MAX_PLANES {
                return Err(WireError::PlaneCount(u32::try_from(n).unwrap_or(u32::MAX)));
            }
            // n <= 4, so these casts are exact.
            let body = BUFFER_FIXED_LEN + n * PLANE_LEN;
            header(&mut out, KIND_BUFFER, body as u32, n as u32);
            out.extend_from_slice(&b.id.to_le_bytes());
            out.extend_from_slice(&b.fourcc.code().to_le_bytes());
            let flags = if b.read_only { FLAG_READ_ONLY } else { 0 }
                | if b.disjoint { FLAG_DISJOINT } else { 0 };
            out.extend_from_slice(&flags.to_le_bytes());
            out.extend_from_slice(&b.layout.to_wire().raw().to_le_bytes());
            out.extend_from_slice(&b.width.to_le_bytes());
            out.extend_from_slice(&b.height.to_le_bytes());
            out.extend_from_slice(&(n as u32).to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            for &(offset, stride) in &b.planes {
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&stride.to_le_bytes());
            }
        }
        Message::Release { id } => {
            header(&mut out, KIND_RELEASE, RELEASE_LEN as u32, 0);
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    Ok(out)
}

fn header(out: &mut Vec<u8>, kind: u16, body_len: u32, fd_count: u32) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&fd_count.to_le_bytes());
}

/// A parsed header, before the body is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: u16,
    pub body_len: u32,
    pub fd_count: u32,
}

/// Parses and checks the header: magic, version, kind, and a body length that is one this
/// kind can have (so a reader of a byte stream knows how much more to read, at most
/// [`MAX_MESSAGE_LEN`] in all).
pub fn decode_header(bytes: &[u8]) -> Result<Header, WireError> {
    let mut r = Reader { bytes, pos: 0 };
    let magic = r.array::<4>()?;
    if magic != MAGIC {
        return Err(WireError::Magic(magic));
    }
    let version = r.u16()?;
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let kind = r.u16()?;
    let body_len = r.u32()?;
    let fd_count = r.u32()?;
    match kind {
        KIND_BUFFER => {
            let ok =
                (1..=MAX_PLANES).any(|n| body_len as usize == BUFFER_FIXED_LEN + n * PLANE_LEN);
            if !ok {
                return Err(WireError::BodyLengthForKind {
                    kind: "buffer",
                    declared: body_len,
                });
            }
        }
        KIND_RELEASE => {
            if body_len as usize != RELEASE_LEN {
                return Err(WireError::BodyLengthForKind {
                    kind: "release",
                    declared: body_len,
                });
            }
        }
        other => return Err(WireError::Kind(other)),
    }
    Ok(Header {
        kind,
        body_len,
        fd_count,
    })
}

/// Decodes one whole message (header and body, nothing after it) and checks every field:
/// lengths agree with each other and with `bytes`, the plane count is 1..=4, the declared fd
/// count equals the plane count (0 for a release), flags and reserved fields are clean.
/// Whether the declared fd count matches the fds that actually arrived is the transport's
/// check; whether offsets and strides fit the files is [`check_import`](super::check_import)'s.
pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
    if bytes.len() < HEADER_LEN {
        return Err(WireError::Truncated {
            need: HEADER_LEN,
            got: bytes.len(),
        });
    }
    let h = decode_header(&bytes[..HEADER_LEN])?;
    let body = &bytes[HEADER_LEN..];
    if body.len() != h.body_len as usize {
        return Err(WireError::BodyLength {
            declared: h.body_len,
            actual: body.len(),
        });
    }
    let mut r = Reader {
        bytes: body,
        pos: 0,
    };
    match h.kind {
        KIND_RELEASE => {
            if h.fd_count != 0 {
                return Err(WireError::FdCount {
                    declared: h.fd_count,
                    expected: 0,
                });
            }
            Ok(Message::Release { id: r.u64()? })
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
                return Err(WireError::BodyLengthForPlanes {
                    planes: n,
                    expected,
                    declared: h.body_len,
                });
            }
            if h.fd_count != n {
                return Err(WireError::FdCount {
                    declared: h.fd_count,
                    expected: n,
                });
            }
            if flags & !KNOWN_FLAGS != 0 {
                return Err(WireError::Flags(flags & !KNOWN_FLAGS));
            }
            if reserved != 0 {
                return Err(WireError::Reserved(reserved));
            }
            let mut planes = Vec::with_capacity(n as usize);
            for _ in 0..n {
                planes.push((r.u64()?, r.u64()?));
            }
            Ok(Message::Buffer(BufferMsg {
                id,
                fourcc,
                layout: Layout::from_wire(modifier),
                width,
                height,
                read_only: flags & FLAG_READ_ONLY != 0,
                disjoint: flags & FLAG_DISJOINT != 0,
                planes,
            }))
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let end = self.pos + N;
        let got = self.bytes.get(self.pos..end).ok_or(WireError::Truncated {
            need: end,
            got: self.bytes.len(),
        })?;
        let mut a = [0u8; N];
        a.copy_from_slice(got);
        self.pos = end;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        self.array().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        self.array().map(u64::from_le_bytes)
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
            planes: vec![(0, 64), (4096, 64)],
        })
    }

    #[test]
    fn round_trips() {
        let m = sample();
        let bytes = encode(&m).unwrap();
        assert_eq!(bytes.len(), HEADER_LEN + BUFFER_FIXED_LEN + 2 * PLANE_LEN);
        assert_eq!(decode(&bytes).unwrap(), m);
        let r = Message::Release { id: 99 };
        assert_eq!(decode(&encode(&r).unwrap()).unwrap(), r);
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
        assert!(matches!(decode(&longer), Err(WireError::BodyLength { .. })));
    }
}
