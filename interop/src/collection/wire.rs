//! The collection wire format: what travels in the bytes of one `SOCK_SEQPACKET` record
//! between a token's holder and the collection's server (fds, where a message has one, in
//! its `SCM_RIGHTS`). Pure bytes, so that a fuzzer can drive [`decode`]; attribute lists
//! export and import through it (NvSciBuf `IpcExport`/`IpcImport`).
//!
//! Every field is little-endian. A message is a 16-byte header and a body:
//!
//! ```text
//! header  0 magic "DMBC" | 4 version u16 = 1 | 6 kind u16 | 8 body_len u32 (exact)
//!        12 fd_count u16 (1 for new-token, else 0) | 14 reserved u16 = 0
//! kinds   1 bind        attribute list                       client -> server
//!         2 duplicate   flags u32 (bit0 read-only, bit1 dispensable), name
//!         3 attach      name
//!         4 close       (empty)
//!         5 new-token   name; the token's socket is the one fd   server -> client, or
//!                                                                 holder -> holder
//!         6 allocated   reconciled list, buffers u32; that many DMBF buffer messages follow
//!         7 refused     conflicts (a late join refused)
//!         8 failed      participant text, reason text
//!         9 reconciled  reconciled list (an export, not part of the token protocol)
//! string  len u16, UTF-8 bytes; names <= MAX_NAME_LEN, texts <= MAX_TEXT_LEN
//! attribute list:
//!         name, flags u32 (bit0 any-format, bit1 read-only, bit2 has max-buffers),
//!         usage u32 (bits 0..=6), sync u32 (bits 0..=2, bit 2 cpu-wait always set),
//!         cpu u8 (0 none 1 read 2 write 3 read-write), domain u8 (0 any 1 device 2 system),
//!         reserved u16 = 0, width min/max u32, height min/max u32, min_buffers u32,
//!         max_buffers u32 (0 without flag bit2), align u64, stride_align u64,
//!         offset_align u64, min_size u64, format count u32 (0 with any-format, else
//!         <= MAX_FORMATS, no duplicates), per format: fourcc u32, modifier u64
//! reconciled list:
//!         fourcc u32, modifier u64 (INVALID = implicit), width u32, height u32,
//!         buffers u32 (1..=MAX_BUFFERS), max_buffers u32, flags u32 (bit0 has max-buffers,
//!         bit1 disjoint, bit2 has outputs), align u64, stride_align u64, offset_align u64,
//!         min_size u64, cpu u8, domain u8, reserved u16 = 0, participant count u16
//!         (<= MAX_TOKENS) and names; with outputs: object count u8 (1..=4), sizes u64 each,
//!         plane count u8 (1..=4), per plane: object u8 (< object count), reserved u8[3]=0,
//!         offset u64, stride u64 (each plane's size is not sent: the receiver computes
//!         stride x rows, as `DmaBuf::plane_layouts` does)
//! conflict list: count u16 (1..=MAX_CONFLICTS), each: attribute u8, name count u8
//!         (<= 16) and names, detail text
//! ```
//!
//! The header is [`crate::framing`]'s. Any other version is refused
//! ([`FrameError::Version`]); both ends run the same one.

use crate::negotiate::{Candidates, Constraints, CpuAccess, Domain, ExtentRange, Participant, Usage};
use crate::sync::{SyncMethod, SyncMethods};
use crate::{Format, FormatSet, Fourcc, Layout, Modifier};

use crate::framing::{clean as clean_bits, Cursor, FrameError, Protocol, Writer as FrameWriter};

use super::attrs::{validate, Outputs, Reconciled, ValidateFailure};
use crate::dmabuf::{plane_rows, PlaneLayout};
use crate::negotiate::{BufferConstraints, Conflict, ConstraintKind};
use super::limits::{MAX_BUFFERS, MAX_CONFLICTS, MAX_FORMATS, MAX_NAME_LEN, MAX_TEXT_LEN, MAX_TOKENS};
use super::state::Failure;

pub use crate::framing::HEADER_LEN;
pub const MAGIC: [u8; 4] = *b"DMBC";
pub const VERSION: u16 = 1;
/// The longest message either end accepts. Every valid message fits: the largest, an
/// attribute list with [`MAX_FORMATS`] formats or a refusal of [`MAX_CONFLICTS`]
/// conflicts, is about half of it.
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;
/// The collection protocol's framing.
pub const PROTOCOL: Protocol = Protocol { name: "collection", magic: MAGIC, version: VERSION, max_len: MAX_MESSAGE_LEN };
/// Most names one conflict carries on the wire.
pub const MAX_CONFLICT_NAMES: usize = 16;

pub const KIND_BIND: u16 = 1;
pub const KIND_DUPLICATE: u16 = 2;
pub const KIND_ATTACH: u16 = 3;
pub const KIND_CLOSE: u16 = 4;
pub const KIND_NEW_TOKEN: u16 = 5;
pub const KIND_ALLOCATED: u16 = 6;
pub const KIND_REFUSED: u16 = 7;
pub const KIND_FAILED: u16 = 8;
pub const KIND_RECONCILED: u16 = 9;

const DUP_READ_ONLY: u32 = 1;
const DUP_DISPENSABLE: u32 = 2;
const LIST_ANY_FORMAT: u32 = 1;
const LIST_READ_ONLY: u32 = 2;
const LIST_HAS_MAX: u32 = 4;
const REC_HAS_MAX: u32 = 1;
const REC_DISJOINT: u32 = 2;
const REC_OUTPUTS: u32 = 4;

/// Usage bits on the wire, in order.
const USAGE_BITS: [Usage; 7] =
    [Usage::SAMPLE, Usage::RENDER, Usage::SCANOUT, Usage::ENCODE, Usage::DECODE, Usage::CPU_READ, Usage::CPU_WRITE];
const CPU: [CpuAccess; 4] = [CpuAccess::None, CpuAccess::Read, CpuAccess::Write, CpuAccess::ReadWrite];
const DOMAIN: [Domain; 3] = [Domain::Any, Domain::DeviceLocal, Domain::System];

/// Why bytes are not a valid collection message, or a message cannot be encoded: framing
/// ([`FrameError`]: magic, version, lengths, fd counts, reserved bits) or the body's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("{field}: {len} bytes, at most {max}")]
    StringTooLong { field: &'static str, len: usize, max: usize },
    #[error("{field}: not UTF-8")]
    Utf8 { field: &'static str },
    #[error("{field}: {count} entries, allowed {min} to {max}")]
    Count { field: &'static str, count: usize, min: usize, max: usize },
    #[error("{field}: {value} is not a valid value")]
    Value { field: &'static str, value: u64 },
    #[error("format {0} is listed twice")]
    DuplicateFormat(String),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    #[error("expected a {want} message, got {got}")]
    Unexpected { want: &'static str, got: &'static str },
}

/// Why an exported reconciled list was not imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Wire(#[from] WireError),
    /// It does not satisfy the importer's own lists (NvSciBuf validates on import too).
    #[error("the reconciled list does not satisfy: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<ValidateFailure>),
}

/// An attribute list as bytes, for another process (NvSciBuf
/// `AttrListIpcExportUnreconciled`): the same bytes a bind sends.
pub fn export_unreconciled(p: &Participant) -> Result<Vec<u8>, WireError> {
    encode(&Message::Bind(p.clone()))
}

/// The list [`export_unreconciled`] wrote.
pub fn import_unreconciled(bytes: &[u8]) -> Result<Participant, WireError> {
    match decode(bytes)? {
        Message::Bind(p) => Ok(p),
        other => Err(WireError::Unexpected { want: "bind", got: other.kind_name() }),
    }
}

/// A reconciled list (with its outputs, if any) as bytes (NvSciBuf
/// `AttrListIpcExportReconciled`).
pub fn export_reconciled(r: &Reconciled) -> Result<Vec<u8>, WireError> {
    encode(&Message::Reconciled(r.clone()))
}

/// The list [`export_reconciled`] wrote, validated against the importer's own unreconciled
/// `lists` (NvSciBuf `AttrListIpcImportReconciled`); with no lists, only decoded.
pub fn import_reconciled(bytes: &[u8], lists: &[Participant]) -> Result<Reconciled, ImportError> {
    let r = match decode(bytes)? {
        Message::Reconciled(r) => r,
        other => return Err(WireError::Unexpected { want: "reconciled", got: other.kind_name() }.into()),
    };
    validate(&r, lists).map_err(ImportError::Invalid)?;
    Ok(r)
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Bind this token to an attribute list.
    Bind(Participant),
    /// Duplicate this token; the reply is [`Message::NewToken`].
    Duplicate { read_only: bool, dispensable: bool, name: String },
    /// Attach a late joiner's token; the reply is [`Message::NewToken`].
    AttachToken { name: String },
    /// The holder is done with this token.
    Close,
    /// A token: its socket is the message's one fd.
    NewToken { name: String },
    /// The buffers are allocated; `buffers` DMBF buffer messages (with their fds) follow.
    Allocated { reconciled: Reconciled, buffers: u32 },
    /// A late join was refused for these reasons.
    LateJoinRefused(Vec<Conflict>),
    /// This token is gone: the collection (or its dispensable sub-tree) failed.
    Failed(Failure),
    /// A reconciled list on its own ([`export_reconciled`]).
    Reconciled(Reconciled),
}

impl Message {
    /// The kind's name, for messages.
    pub fn kind_name(&self) -> &'static str {
        self.kind().1
    }

    fn kind(&self) -> (u16, &'static str) {
        match self {
            Message::Bind(_) => (KIND_BIND, "bind"),
            Message::Duplicate { .. } => (KIND_DUPLICATE, "duplicate"),
            Message::AttachToken { .. } => (KIND_ATTACH, "attach"),
            Message::Close => (KIND_CLOSE, "close"),
            Message::NewToken { .. } => (KIND_NEW_TOKEN, "new-token"),
            Message::Allocated { .. } => (KIND_ALLOCATED, "allocated"),
            Message::LateJoinRefused(_) => (KIND_REFUSED, "refused"),
            Message::Failed(_) => (KIND_FAILED, "failed"),
            Message::Reconciled(_) => (KIND_RECONCILED, "reconciled"),
        }
    }

    /// fds that travel with the message.
    pub fn fd_count(&self) -> usize {
        usize::from(matches!(self, Message::NewToken { .. }))
    }
}

/// Between a conflict's detail and its fix in the one text the wire carries.
const FIX_SEPARATOR: &str = "; fix: ";

/// A conflict's detail and fix as the wire's one text: `detail; fix: fix`, or the detail
/// alone where there is no fix. The decoder splits it at the first separator that has a
/// fix after it, so that every text decodes to a conflict that encodes to it again.
pub fn conflict_text(c: &Conflict) -> std::borrow::Cow<'_, str> {
    if c.fix.is_empty() {
        std::borrow::Cow::Borrowed(&c.detail)
    } else {
        std::borrow::Cow::Owned(format!("{}{FIX_SEPARATOR}{}", c.detail, c.fix))
    }
}

/// Encodes `msg`; fails where a field is past its bound (a name, a list length), so that
/// whatever encodes also decodes.
pub fn encode(msg: &Message) -> Result<Vec<u8>, WireError> {
    let mut w = Writer(FrameWriter::with_capacity(256));
    match msg {
        Message::Bind(p) => w.attr_list(p)?,
        Message::Duplicate { read_only, dispensable, name } => {
            let flags = if *read_only { DUP_READ_ONLY } else { 0 } | if *dispensable { DUP_DISPENSABLE } else { 0 };
            w.u32(flags);
            w.str("name", name, MAX_NAME_LEN)?;
        }
        Message::AttachToken { name } | Message::NewToken { name } => w.str("name", name, MAX_NAME_LEN)?,
        Message::Close => {}
        Message::Allocated { reconciled, buffers } => {
            w.reconciled(reconciled)?;
            if *buffers != reconciled.constraints.buffers {
                return Err(WireError::Value { field: "allocated buffers", value: u64::from(*buffers) });
            }
            w.u32(*buffers);
        }
        Message::LateJoinRefused(c) => w.conflicts(c)?,
        Message::Reconciled(r) => w.reconciled(r)?,
        Message::Failed(f) => {
            w.str("failed participant", &f.participant, MAX_TEXT_LEN)?;
            w.str("failed reason", &f.reason, MAX_TEXT_LEN)?;
        }
    }
    // At most one fd.
    Ok(PROTOCOL.frame(msg.kind().0, msg.fd_count() as u16, 0, &w.0.into_bytes())?)
}

/// Decodes one whole message and checks every field: lengths exact, counts within their
/// caps, flags and reserved fields clean, enumerations in range, strings UTF-8 and bounded,
/// no duplicate formats. Whether the fds that arrived match `fd_count` is the transport's
/// check.
pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
    PROTOCOL.check_len(bytes.len())?;
    let h = PROTOCOL.header(bytes)?;
    clean_bits("header reserved", u64::from(h.flags), 0)?;
    let body = PROTOCOL.body(bytes, &h)?;
    let mut r = Reader(Cursor::new(body));
    let (kind, fd_count) = (h.kind, h.fd_count);
    let msg = match kind {
        KIND_BIND => Message::Bind(r.attr_list()?),
        KIND_DUPLICATE => {
            let flags = r.u32()?;
            clean("duplicate flags", flags, DUP_READ_ONLY | DUP_DISPENSABLE)?;
            Message::Duplicate {
                read_only: flags & DUP_READ_ONLY != 0,
                dispensable: flags & DUP_DISPENSABLE != 0,
                name: r.name("name")?,
            }
        }
        KIND_ATTACH => Message::AttachToken { name: r.name("name")? },
        KIND_CLOSE => Message::Close,
        KIND_NEW_TOKEN => Message::NewToken { name: r.name("name")? },
        KIND_ALLOCATED => {
            let reconciled = r.reconciled()?;
            let buffers = r.u32()?;
            if buffers != reconciled.constraints.buffers {
                return Err(WireError::Value { field: "allocated buffers", value: u64::from(buffers) });
            }
            Message::Allocated { reconciled, buffers }
        }
        KIND_REFUSED => Message::LateJoinRefused(r.conflicts()?),
        KIND_RECONCILED => Message::Reconciled(r.reconciled()?),
        KIND_FAILED => Message::Failed(Failure {
            participant: r.str("failed participant", MAX_TEXT_LEN)?,
            reason: r.str("failed reason", MAX_TEXT_LEN)?,
        }),
        other => return Err(FrameError::Kind(other).into()),
    };
    if r.0.remaining() != 0 {
        return Err(WireError::Trailing(r.0.remaining()));
    }
    let (_, name) = msg.kind();
    let expected = msg.fd_count() as u16;
    if fd_count != expected {
        return Err(FrameError::FdCount { kind: name, declared: fd_count, expected }.into());
    }
    Ok(msg)
}

fn clean(field: &'static str, value: u32, known: u32) -> Result<(), WireError> {
    Ok(clean_bits(field, u64::from(value), u64::from(known))?)
}

/// `max-buffers` as the wire carries it: a value and a flag saying it is set. A value without
/// the flag is refused, so that one message has one meaning.
fn optional_max(flagged: bool, raw: u32) -> Result<Option<u32>, WireError> {
    match (flagged, raw) {
        (true, v) => Ok(Some(v)),
        (false, 0) => Ok(None),
        (false, v) => Err(FrameError::Reserved { field: "max-buffers without its flag", value: u64::from(v) }.into()),
    }
}

fn count_ok(field: &'static str, count: usize, min: usize, max: usize) -> Result<(), WireError> {
    if count < min || count > max {
        return Err(WireError::Count { field, count, min, max });
    }
    Ok(())
}

/// The framing's writer, with this protocol's strings and lists.
struct Writer(FrameWriter);

impl std::ops::Deref for Writer {
    type Target = FrameWriter;
    fn deref(&self) -> &FrameWriter {
        &self.0
    }
}

impl std::ops::DerefMut for Writer {
    fn deref_mut(&mut self) -> &mut FrameWriter {
        &mut self.0
    }
}

impl Writer {
    fn str(&mut self, field: &'static str, s: &str, max: usize) -> Result<(), WireError> {
        if s.len() > max {
            return Err(WireError::StringTooLong { field, len: s.len(), max });
        }
        // max <= MAX_TEXT_LEN < 2^16.
        self.u16(s.len() as u16);
        self.bytes(s.as_bytes());
        Ok(())
    }

    fn attr_list(&mut self, p: &Participant) -> Result<(), WireError> {
        let c = &p.constraints;
        self.str("participant name", &p.name, MAX_NAME_LEN)?;
        let flags = if matches!(p.formats, Candidates::Any) { LIST_ANY_FORMAT } else { 0 }
            | if c.read_only { LIST_READ_ONLY } else { 0 }
            | if c.max_buffers.is_some() { LIST_HAS_MAX } else { 0 };
        self.u32(flags);
        let usage = USAGE_BITS.iter().enumerate().filter(|(_, u)| p.usage.contains(**u)).fold(0u32, |a, (i, _)| a | 1 << i);
        self.u32(usage);
        let sync = SyncMethod::ALL.iter().enumerate().filter(|(_, m)| p.sync.contains(**m)).fold(0u32, |a, (i, _)| a | 1 << i);
        self.u32(sync);
        self.u8(CPU.iter().position(|x| *x == c.cpu_access).unwrap_or(0) as u8);
        self.u8(DOMAIN.iter().position(|x| *x == c.domain).unwrap_or(0) as u8);
        self.u16(0);
        for v in [c.width.min, c.width.max, c.height.min, c.height.max, c.min_buffers, c.max_buffers.unwrap_or(0)] {
            self.u32(v);
        }
        for v in [c.align, c.stride_align, c.offset_align, c.min_size] {
            self.u64(v);
        }
        match &p.formats {
            Candidates::Any => self.u32(0),
            Candidates::Only(set) => {
                count_ok("formats", set.len(), 0, MAX_FORMATS)?;
                self.u32(set.len() as u32);
                for f in set.iter() {
                    self.u32(f.fourcc.code());
                    self.u64(f.layout.to_wire().raw());
                }
            }
        }
        Ok(())
    }

    fn reconciled(&mut self, r: &Reconciled) -> Result<(), WireError> {
        let c = &r.constraints;
        count_ok("buffers", c.buffers as usize, 1, MAX_BUFFERS as usize)?;
        self.u32(r.format.fourcc.code());
        self.u64(r.format.layout.to_wire().raw());
        self.u32(r.width);
        self.u32(r.height);
        self.u32(c.buffers);
        self.u32(c.max_buffers.unwrap_or(0));
        let flags = if c.max_buffers.is_some() { REC_HAS_MAX } else { 0 }
            | if r.disjoint { REC_DISJOINT } else { 0 }
            | if r.outputs.is_some() { REC_OUTPUTS } else { 0 };
        self.u32(flags);
        for v in [c.align, c.stride_align, c.offset_align, c.min_size] {
            self.u64(v);
        }
        self.u8(CPU.iter().position(|x| *x == c.cpu_access).unwrap_or(0) as u8);
        self.u8(DOMAIN.iter().position(|x| *x == c.domain).unwrap_or(0) as u8);
        self.u16(0);
        count_ok("participants", r.participants.len(), 0, MAX_TOKENS)?;
        self.u16(r.participants.len() as u16);
        for n in &r.participants {
            self.str("participant name", n, MAX_NAME_LEN)?;
        }
        if let Some(o) = &r.outputs {
            count_ok("objects", o.object_sizes.len(), 1, crate::dmabuf::MAX_PLANES)?;
            self.u8(o.object_sizes.len() as u8);
            for s in &o.object_sizes {
                self.u64(*s);
            }
            count_ok("planes", o.planes.len(), 1, crate::dmabuf::MAX_PLANES)?;
            self.u8(o.planes.len() as u8);
            for p in &o.planes {
                if p.object >= o.object_sizes.len() {
                    return Err(WireError::Value { field: "plane object", value: p.object as u64 });
                }
                self.u8(p.object as u8);
                self.bytes(&[0, 0, 0]);
                self.u64(p.offset);
                self.u64(p.stride);
            }
        }
        Ok(())
    }

    fn conflicts(&mut self, cs: &[Conflict]) -> Result<(), WireError> {
        count_ok("conflicts", cs.len(), 1, MAX_CONFLICTS)?;
        self.u16(cs.len() as u16);
        for c in cs {
            let attribute = c.constraint.list_attribute();
            let table = &ConstraintKind::LIST_ATTRIBUTES;
            self.u8(table.iter().position(|a| *a == attribute).unwrap_or(table.len() - 1) as u8);
            count_ok("conflict names", c.participants.len(), 0, MAX_CONFLICT_NAMES)?;
            self.u8(c.participants.len() as u8);
            for n in &c.participants {
                self.str("conflict name", n, MAX_NAME_LEN)?;
            }
            self.str("conflict detail", &conflict_text(c), MAX_TEXT_LEN)?;
        }
        Ok(())
    }
}

/// The framing's cursor, with this protocol's strings, tables and lists.
struct Reader<'a>(Cursor<'a>);

impl<'a> std::ops::Deref for Reader<'a> {
    type Target = Cursor<'a>;
    fn deref(&self) -> &Cursor<'a> {
        &self.0
    }
}

impl std::ops::DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Reader<'_> {
    fn str(&mut self, field: &'static str, max: usize) -> Result<String, WireError> {
        let len = usize::from(self.u16()?);
        if len > max {
            return Err(WireError::StringTooLong { field, len, max });
        }
        let b = self.take(len)?;
        std::str::from_utf8(b).map(str::to_owned).map_err(|_| WireError::Utf8 { field })
    }
    fn name(&mut self, field: &'static str) -> Result<String, WireError> {
        self.str(field, MAX_NAME_LEN)
    }
    fn pick<T: Copy>(&mut self, field: &'static str, table: &[T]) -> Result<T, WireError> {
        let v = self.u8()?;
        table.get(usize::from(v)).copied().ok_or(WireError::Value { field, value: u64::from(v) })
    }

    // `..Constraints::default()` with every field named today: fields added later then get
    // their defaults here instead of breaking the build.
    #[allow(clippy::needless_update)]
    fn attr_list(&mut self) -> Result<Participant, WireError> {
        let name = self.name("participant name")?;
        let flags = self.u32()?;
        clean("list flags", flags, LIST_ANY_FORMAT | LIST_READ_ONLY | LIST_HAS_MAX)?;
        let usage_bits = self.u32()?;
        clean("usage", usage_bits, (1 << USAGE_BITS.len()) - 1)?;
        let usage = USAGE_BITS.iter().enumerate().filter(|(i, _)| usage_bits & 1 << i != 0).fold(Usage::NONE, |a, (_, u)| a | *u);
        let sync_bits = self.u32()?;
        clean("sync", sync_bits, 0b111)?;
        // The type always holds the CPU wait; a list without it could not round-trip.
        if sync_bits & 0b100 == 0 {
            return Err(WireError::Value { field: "sync (cpu-wait must be set)", value: u64::from(sync_bits) });
        }
        let sync = SyncMethods::of(SyncMethod::ALL.iter().enumerate().filter(|(i, _)| sync_bits & 1 << i != 0).map(|(_, m)| *m));
        let cpu_access = self.pick("cpu-access", &CPU)?;
        let domain = self.pick("domain", &DOMAIN)?;
        let reserved = self.u16()?;
        if reserved != 0 {
            return Err(FrameError::Reserved { field: "list reserved", value: u64::from(reserved) }.into());
        }
        let (wmin, wmax, hmin, hmax) = (self.u32()?, self.u32()?, self.u32()?, self.u32()?);
        let min_buffers = self.u32()?;
        let max_raw = self.u32()?;
        let max_buffers = optional_max(flags & LIST_HAS_MAX != 0, max_raw)?;
        let (align, stride_align, offset_align, min_size) = (self.u64()?, self.u64()?, self.u64()?, self.u64()?);
        let n = self.u32()? as usize;
        let formats = if flags & LIST_ANY_FORMAT != 0 {
            count_ok("formats of an any-format list", n, 0, 0)?;
            Candidates::Any
        } else {
            count_ok("formats", n, 0, MAX_FORMATS)?;
            let mut set = FormatSet::new();
            for _ in 0..n {
                let fourcc = Fourcc::from_code(self.u32()?);
                let m = Modifier::from_raw(self.u64()?);
                let f = Format::new(fourcc, m);
                if !set.insert(f) {
                    return Err(WireError::DuplicateFormat(f.to_string()));
                }
            }
            Candidates::Only(set)
        };
        let constraints = Constraints {
            width: ExtentRange::new(wmin, wmax),
            height: ExtentRange::new(hmin, hmax),
            min_buffers,
            max_buffers,
            min_size,
            offset_align,
            align,
            stride_align,
            cpu_access,
            domain,
            read_only: flags & LIST_READ_ONLY != 0,
            ..Constraints::default()
        };
        Ok(Participant { name, formats, usage, constraints, sync, device: None, copy: None })
    }

    fn reconciled(&mut self) -> Result<Reconciled, WireError> {
        let fourcc = Fourcc::from_code(self.u32()?);
        let layout = Layout::from_wire(Modifier::from_raw(self.u64()?));
        let (width, height, buffers, max_raw, flags) = (self.u32()?, self.u32()?, self.u32()?, self.u32()?, self.u32()?);
        count_ok("buffers", buffers as usize, 1, MAX_BUFFERS as usize)?;
        clean("reconciled flags", flags, REC_HAS_MAX | REC_DISJOINT | REC_OUTPUTS)?;
        let max_buffers = optional_max(flags & REC_HAS_MAX != 0, max_raw)?;
        let (align, stride_align, offset_align, min_size) = (self.u64()?, self.u64()?, self.u64()?, self.u64()?);
        let cpu_access = self.pick("cpu-access", &CPU)?;
        let domain = self.pick("domain", &DOMAIN)?;
        let reserved = self.u16()?;
        if reserved != 0 {
            return Err(FrameError::Reserved { field: "reconciled reserved", value: u64::from(reserved) }.into());
        }
        let n = usize::from(self.u16()?);
        count_ok("participants", n, 0, MAX_TOKENS)?;
        let mut participants = Vec::with_capacity(n);
        for _ in 0..n {
            participants.push(self.name("participant name")?);
        }
        let outputs = if flags & REC_OUTPUTS != 0 {
            let objects = usize::from(self.u8()?);
            count_ok("objects", objects, 1, crate::dmabuf::MAX_PLANES)?;
            let mut object_sizes = Vec::with_capacity(objects);
            for _ in 0..objects {
                object_sizes.push(self.u64()?);
            }
            let np = usize::from(self.u8()?);
            count_ok("planes", np, 1, crate::dmabuf::MAX_PLANES)?;
            let mut planes = Vec::with_capacity(np);
            for i in 0..np {
                let object = self.u8()?;
                if usize::from(object) >= objects {
                    return Err(WireError::Value { field: "plane object", value: u64::from(object) });
                }
                let pad = self.array::<3>()?;
                if pad != [0; 3] {
                    return Err(FrameError::Reserved { field: "plane reserved", value: u64::from(u32::from_le_bytes([pad[0], pad[1], pad[2], 0])) }.into());
                }
                // The size is not on the wire: it is the descriptor's `stride x rows`, as
                // DmaBuf::plane_layouts computes it on the sending side.
                let mut plane = PlaneLayout::linear(self.u64()?, self.u64()?, plane_rows(fourcc, i, height));
                plane.object = usize::from(object);
                planes.push(plane);
            }
            Some(Outputs { object_sizes, planes })
        } else {
            None
        };
        Ok(Reconciled {
            format: Format { fourcc, layout },
            width,
            height,
            constraints: BufferConstraints { buffers, max_buffers, min_size, offset_align, align, stride_align, cpu_access, domain },
            disjoint: flags & REC_DISJOINT != 0,
            participants,
            outputs,
        })
    }

    fn conflicts(&mut self) -> Result<Vec<Conflict>, WireError> {
        let n = usize::from(self.u16()?);
        count_ok("conflicts", n, 1, MAX_CONFLICTS)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let attribute = self.pick("attribute", &ConstraintKind::LIST_ATTRIBUTES)?;
            let names = usize::from(self.u8()?);
            count_ok("conflict names", names, 0, MAX_CONFLICT_NAMES)?;
            let mut participants = Vec::with_capacity(names);
            for _ in 0..names {
                participants.push(self.name("conflict name")?);
            }
            let text = self.str("conflict detail", MAX_TEXT_LEN)?;
            let (detail, fix) = match text.split_once(FIX_SEPARATOR) {
                Some((detail, fix)) if !fix.is_empty() => (detail.to_owned(), fix.to_owned()),
                _ => (text, String::new()),
            };
            out.push(Conflict::new(participants, attribute, detail, fix));
        }
        Ok(out)
    }
}
