//! The header, the cursor and writer body codecs use, and the errors of framed bytes.

/// Bytes in every header.
pub const HEADER_LEN: usize = 16;

/// One wire protocol's framing: its name (for messages), magic, version and the longest
/// message it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocol {
    /// Named in errors: "handoff", "collection".
    pub name: &'static str,
    /// The first four bytes of every message.
    pub magic: [u8; 4],
    /// The one version this side speaks; any other is refused ([`FrameError::Version`]).
    pub version: u16,
    /// The longest valid message, header included.
    pub max_len: usize,
}

/// A header whose magic and version were checked; the protocol judges the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the body is; the protocol's numbers.
    pub kind: u16,
    /// Bytes after the header, as declared.
    pub body_len: u32,
    /// fds declared to travel with the message.
    pub fd_count: u16,
    /// The protocol's header flags (reserved, so 0, where it has none).
    pub flags: u16,
}

/// Why bytes are not a valid framed message; each protocol's `WireError` carries it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("message truncated: {got} bytes, at least {need} needed")]
    Truncated { need: usize, got: usize },
    #[error("bad magic {got:02x?}: not a dmabridge {protocol} message")]
    Magic { protocol: &'static str, got: [u8; 4] },
    #[error("the peer speaks {protocol} wire version {got}, this side speaks {supported}: both ends must run the same dmabridge wire version")]
    Version { protocol: &'static str, got: u16, supported: u16 },
    #[error("unknown message kind {0}")]
    Kind(u16),
    #[error("header says the body is {declared} bytes, but {actual} arrived")]
    BodyLength { declared: u32, actual: usize },
    #[error("message is {len} bytes, more than the {max} any valid one has")]
    TooLong { len: usize, max: usize },
    #[error("message declares {declared} fds, a {kind} message has {expected}")]
    FdCount { kind: &'static str, declared: u16, expected: u16 },
    #[error("{field}: {value:#x} has bits that must be 0")]
    Reserved { field: &'static str, value: u64 },
}

impl Protocol {
    /// Refuses a message longer than any valid one.
    pub fn check_len(&self, len: usize) -> Result<(), FrameError> {
        if len > self.max_len {
            return Err(FrameError::TooLong { len, max: self.max_len });
        }
        Ok(())
    }

    /// Parses the header at the start of `bytes` (which may be the header alone, as a
    /// stream reader has it): magic and version checked, the rest as declared.
    pub fn header(&self, bytes: &[u8]) -> Result<Header, FrameError> {
        if bytes.len() < HEADER_LEN {
            return Err(FrameError::Truncated { need: HEADER_LEN, got: bytes.len() });
        }
        let mut r = Cursor::new(&bytes[..HEADER_LEN]);
        let magic = r.array::<4>()?;
        if magic != self.magic {
            return Err(FrameError::Magic { protocol: self.name, got: magic });
        }
        let version = r.u16()?;
        if version != self.version {
            return Err(FrameError::Version { protocol: self.name, got: version, supported: self.version });
        }
        Ok(Header { kind: r.u16()?, body_len: r.u32()?, fd_count: r.u16()?, flags: r.u16()? })
    }

    /// The body of the whole message `bytes` whose header is `h`: exactly `h.body_len` bytes.
    pub fn body<'a>(&self, bytes: &'a [u8], h: &Header) -> Result<&'a [u8], FrameError> {
        let body = bytes.get(HEADER_LEN..).unwrap_or_default();
        if body.len() != h.body_len as usize {
            return Err(FrameError::BodyLength { declared: h.body_len, actual: body.len() });
        }
        Ok(body)
    }

    /// A whole message: the header (`kind`, `fd_count`, `flags`, the body's length) and
    /// `body`; refused if longer than [`Protocol::max_len`].
    pub fn frame(&self, kind: u16, fd_count: u16, flags: u16, body: &[u8]) -> Result<Vec<u8>, FrameError> {
        self.check_len(HEADER_LEN.saturating_add(body.len()))?;
        let mut w = Writer::with_capacity(HEADER_LEN + body.len());
        w.bytes(&self.magic);
        w.u16(self.version);
        w.u16(kind);
        // Bounded by max_len, far below 4 GiB.
        w.u32(body.len() as u32);
        w.u16(fd_count);
        w.u16(flags);
        w.bytes(body);
        Ok(w.into_bytes())
    }
}

/// Refuses `value` if it has bits outside `known` (flags) or, with `known == 0`, any bit
/// at all (reserved fields).
pub(crate) fn clean(field: &'static str, value: u64, known: u64) -> Result<(), FrameError> {
    if value & !known != 0 {
        return Err(FrameError::Reserved { field, value: value & !known });
    }
    Ok(())
}

/// Reads little-endian fields from a byte slice, refusing to run past its end.
#[derive(Debug)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    /// Bytes read so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(FrameError::Truncated { need: self.pos.saturating_add(n), got: self.bytes.len() });
        };
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    /// The next `u8`.
    pub fn u8(&mut self) -> Result<u8, FrameError> {
        self.array::<1>().map(|a| a[0])
    }
    /// The next `u16`.
    pub fn u16(&mut self) -> Result<u16, FrameError> {
        self.array().map(u16::from_le_bytes)
    }
    /// The next `u32`.
    pub fn u32(&mut self) -> Result<u32, FrameError> {
        self.array().map(u32::from_le_bytes)
    }
    /// The next `u64`.
    pub fn u64(&mut self) -> Result<u64, FrameError> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Writes little-endian fields.
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// An empty writer with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        Writer(Vec::with_capacity(n))
    }
    /// What was written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
    /// Appends `b` as it is.
    pub fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    /// Appends `v`.
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    /// Appends `v`.
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends `v`.
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends `v`.
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}
