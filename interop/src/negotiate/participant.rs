//! A participant: one party to a buffer exchange, with what it can read or write and the
//! constraints it puts on the allocation (sysmem's "constraints", NvSciBuf's "attribute list").

use std::fmt;
use std::str::FromStr;

use super::device::DeviceCopy;
use crate::sync::SyncMethods;
use crate::{Format, FormatSet};

/// What a participant does with the buffer. Informational except where it contradicts
/// `read_only` (a read-only party cannot render, decode or write from the CPU).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Usage(u8);

impl Usage {
    pub const NONE: Usage = Usage(0);
    pub const SAMPLE: Usage = Usage(1 << 0);
    pub const RENDER: Usage = Usage(1 << 1);
    pub const SCANOUT: Usage = Usage(1 << 2);
    pub const ENCODE: Usage = Usage(1 << 3);
    pub const DECODE: Usage = Usage(1 << 4);
    pub const CPU_READ: Usage = Usage(1 << 5);
    pub const CPU_WRITE: Usage = Usage(1 << 6);

    /// Names as the command line spells them, in bit order.
    const NAMES: [(&'static str, Usage); 7] = [
        ("sample", Usage::SAMPLE),
        ("render", Usage::RENDER),
        ("scanout", Usage::SCANOUT),
        ("encode", Usage::ENCODE),
        ("decode", Usage::DECODE),
        ("cpu-read", Usage::CPU_READ),
        ("cpu-write", Usage::CPU_WRITE),
    ];

    pub const fn union(self, other: Usage) -> Usage {
        Usage(self.0 | other.0)
    }

    pub const fn intersection(self, other: Usage) -> Usage {
        Usage(self.0 & other.0)
    }

    pub const fn contains(self, other: Usage) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn intersects(self, other: Usage) -> bool {
        self.0 & other.0 != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Usages that put data into the buffer.
    pub const WRITES: Usage = Usage(Usage::RENDER.0 | Usage::DECODE.0 | Usage::CPU_WRITE.0);

    /// The names of the set bits, in bit order.
    pub fn names(self) -> Vec<&'static str> {
        Usage::NAMES
            .iter()
            .filter(|(_, u)| self.contains(*u))
            .map(|(n, _)| *n)
            .collect()
    }
}

impl std::ops::BitOr for Usage {
    type Output = Usage;
    fn bitor(self, rhs: Usage) -> Usage {
        self.union(rhs)
    }
}

impl fmt::Debug for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Usage({})", self.names().join("+"))
    }
}

/// Why a string is not a usage list, CPU access, domain or extent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintParseError {
    #[error("unknown usage {0:?} (expected sample, render, scanout, encode, decode, cpu-read or cpu-write, joined by +)")]
    Usage(String),
    #[error("unknown cpu-access {0:?} (expected none, read, write or read-write)")]
    CpuAccess(String),
    #[error("unknown domain {0:?} (expected device-local, system or any)")]
    Domain(String),
    #[error("bad extent {0:?} (expected N or A-B with 1 <= A <= B < 2^32)")]
    Extent(String),
}

impl FromStr for Usage {
    type Err = ConstraintParseError;

    /// `sample+render`; an empty string is no usage.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut u = Usage::NONE;
        for word in s.split('+').filter(|w| !w.is_empty()) {
            let (_, bit) = Usage::NAMES
                .iter()
                .find(|(n, _)| *n == word)
                .ok_or_else(|| ConstraintParseError::Usage(word.chars().take(32).collect()))?;
            u = u | *bit;
        }
        Ok(u)
    }
}

/// CPU access a participant needs (NvSciBuf `NeedCpuAccess` + `RequiredPerm`). Merged by union.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CpuAccess {
    #[default]
    None,
    Read,
    Write,
    ReadWrite,
}

impl CpuAccess {
    pub const fn reads(self) -> bool {
        matches!(self, CpuAccess::Read | CpuAccess::ReadWrite)
    }

    pub const fn writes(self) -> bool {
        matches!(self, CpuAccess::Write | CpuAccess::ReadWrite)
    }

    pub const fn union(self, other: CpuAccess) -> CpuAccess {
        match (
            self.reads() || other.reads(),
            self.writes() || other.writes(),
        ) {
            (false, false) => CpuAccess::None,
            (true, false) => CpuAccess::Read,
            (false, true) => CpuAccess::Write,
            (true, true) => CpuAccess::ReadWrite,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            CpuAccess::None => "none",
            CpuAccess::Read => "read",
            CpuAccess::Write => "write",
            CpuAccess::ReadWrite => "read-write",
        }
    }
}

impl FromStr for CpuAccess {
    type Err = ConstraintParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "none" => CpuAccess::None,
            "read" => CpuAccess::Read,
            "write" => CpuAccess::Write,
            "read-write" => CpuAccess::ReadWrite,
            _ => {
                return Err(ConstraintParseError::CpuAccess(
                    s.chars().take(32).collect(),
                ))
            }
        })
    }
}

/// Where the memory lives (sysmem "heaps"). `DeviceLocal` memory is not assumed to be
/// CPU-mappable, so it cannot serve a participant that needs CPU access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Domain {
    #[default]
    Any,
    DeviceLocal,
    System,
}

impl Domain {
    pub const fn name(self) -> &'static str {
        match self {
            Domain::Any => "any",
            Domain::DeviceLocal => "device-local",
            Domain::System => "system",
        }
    }
}

impl FromStr for Domain {
    type Err = ConstraintParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "any" => Domain::Any,
            "device-local" => Domain::DeviceLocal,
            "system" => Domain::System,
            _ => return Err(ConstraintParseError::Domain(s.chars().take(32).collect())),
        })
    }
}

/// An inclusive range of pixels along one axis. Ranges are merged by intersection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtentRange {
    pub min: u32,
    pub max: u32,
}

impl ExtentRange {
    /// Every extent a buffer can have.
    pub const ANY: ExtentRange = ExtentRange {
        min: 1,
        max: u32::MAX,
    };

    pub const fn new(min: u32, max: u32) -> Self {
        ExtentRange { min, max }
    }

    pub const fn exactly(n: u32) -> Self {
        ExtentRange { min: n, max: n }
    }

    pub const fn is_empty(self) -> bool {
        self.min > self.max
    }

    pub fn intersect(self, other: ExtentRange) -> ExtentRange {
        ExtentRange {
            min: self.min.max(other.min),
            max: self.max.min(other.max),
        }
    }
}

impl Default for ExtentRange {
    fn default() -> Self {
        ExtentRange::ANY
    }
}

impl fmt::Display for ExtentRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

impl FromStr for ExtentRange {
    type Err = ConstraintParseError;

    /// `N` or `A-B`. A range with A > B parses (it is the participant's own conflict, which
    /// the negotiator reports with its name); zero does not.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConstraintParseError::Extent(s.chars().take(40).collect());
        let num = |t: &str| t.trim().parse::<u32>().ok().filter(|n| *n > 0);
        match s.split_once('-') {
            None => num(s).map(ExtentRange::exactly).ok_or_else(bad),
            Some((a, b)) => match (num(a), num(b)) {
                (Some(a), Some(b)) => Ok(ExtentRange::new(a, b)),
                _ => Err(bad()),
            },
        }
    }
}

/// The allocation constraints of one participant. Defaults ask for nothing.
///
/// Alignments are kept as given (not as log2) so that a participant that asks for a value
/// that is not a power of two can be named in a conflict instead of being rejected here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraints {
    pub width: ExtentRange,
    pub height: ExtentRange,
    /// Buffers this participant may hold at once (sysmem "camping"). Summed over participants.
    pub min_buffers: u32,
    /// The most buffers this participant can use (a decoder's fixed slot table, a display's
    /// swapchain); `None` for no limit. Merged by minimum; less than the summed
    /// `min_buffers` is a `max-buffers` conflict.
    pub max_buffers: Option<u32>,
    /// The least size of each buffer's file in bytes (a decoder that reuses buffers across
    /// streams, or needs slack past the last row). Merged by maximum.
    pub min_size: u64,
    /// Alignment of every plane's offset in its file; a power of two. Merged by maximum.
    pub offset_align: u64,
    /// Base address alignment in bytes; a power of two. Merged by maximum.
    pub align: u64,
    /// Row pitch alignment in bytes; a power of two. Merged by maximum.
    pub stride_align: u64,
    pub cpu_access: CpuAccess,
    pub domain: Domain,
    /// True when the participant never writes the buffer.
    pub read_only: bool,
}

impl Default for Constraints {
    fn default() -> Self {
        Constraints {
            width: ExtentRange::ANY,
            height: ExtentRange::ANY,
            min_buffers: 0,
            max_buffers: None,
            min_size: 0,
            offset_align: 1,
            align: 1,
            stride_align: 1,
            cpu_access: CpuAccess::None,
            domain: Domain::Any,
            read_only: false,
        }
    }
}

/// The formats a participant accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidates {
    /// Anything: the participant has not said (a GStreamer caps without `drm-format`). It
    /// never blocks a format, and never picks one either.
    Any,
    /// Exactly these, in preference order. `Layout::Implicit` entries mean the participant
    /// can work without an explicit modifier for that fourcc (INVALID in its enumeration).
    Only(FormatSet),
}

impl Candidates {
    pub fn accepts(&self, f: &Format) -> bool {
        match self {
            Candidates::Any => true,
            Candidates::Only(s) => s.contains(f),
        }
    }

    pub fn as_set(&self) -> Option<&FormatSet> {
        match self {
            Candidates::Any => None,
            Candidates::Only(s) => Some(s),
        }
    }
}

/// One party to the exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    pub name: String,
    pub formats: Candidates,
    pub usage: Usage,
    pub constraints: Constraints,
    /// How it can synchronise access to a shared buffer. A participant that says nothing
    /// supports only the CPU wait ([`SyncMethods::CPU_WAIT`]), which every dmabridge
    /// exchange can do; a participant built from a peer's list gets that kind of peer's
    /// methods (`peers::*::SYNC_METHODS`, [`crate::peers::SYNC_DEFAULTS`]).
    pub sync: SyncMethods,
    /// The device its list describes, where it is one (a GPU, asked live or read from a
    /// saved probe): `"Null hardware (RADV NAVI21) (radv, Mesa 25.0.7)"`. Reports name it.
    pub device: Option<String>,
    /// The copies its device makes between layouts, where it offers them to a copy plan
    /// (a GPU: [`DeviceCopy`]; boxed, as few participants have one).
    pub copy: Option<Box<DeviceCopy>>,
}

impl Participant {
    /// A participant that accepts `formats` (in preference order) and asks for nothing else.
    pub fn new(name: impl Into<String>, formats: FormatSet) -> Self {
        Participant {
            name: name.into(),
            formats: Candidates::Only(formats),
            usage: Usage::NONE,
            constraints: Constraints::default(),
            sync: SyncMethods::CPU_WAIT,
            device: None,
            copy: None,
        }
    }

    /// A participant that accepts any format (it has not said which).
    pub fn any_format(name: impl Into<String>) -> Self {
        Participant {
            name: name.into(),
            formats: Candidates::Any,
            usage: Usage::NONE,
            constraints: Constraints::default(),
            sync: SyncMethods::CPU_WAIT,
            device: None,
            copy: None,
        }
    }

    /// The device its list describes ([`Participant::device`]).
    pub fn with_device(mut self, device: impl Into<String>) -> Self {
        self.device = Some(device.into());
        self
    }

    /// The copies its device makes ([`Participant::copy`]).
    pub fn with_copy(mut self, copy: Option<DeviceCopy>) -> Self {
        self.copy = copy.map(Box::new);
        self
    }

    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    pub fn with_constraints(mut self, constraints: Constraints) -> Self {
        self.constraints = constraints;
        self
    }

    /// The sync methods it supports (the CPU wait is always among them).
    pub fn with_sync(mut self, sync: SyncMethods) -> Self {
        self.sync = sync;
        self
    }

    /// Changes the constraints in place: `p.constrain(|c| c.min_buffers = 3)`.
    pub fn constrain(mut self, f: impl FnOnce(&mut Constraints)) -> Self {
        f(&mut self.constraints);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_parses_plus_separated_names() {
        let u: Usage = "sample+render".parse().unwrap();
        assert!(
            u.contains(Usage::SAMPLE) && u.contains(Usage::RENDER) && !u.contains(Usage::SCANOUT)
        );
        assert_eq!(u.names(), vec!["sample", "render"]);
        assert!("".parse::<Usage>().unwrap().is_empty());
        assert_eq!(
            "sample+blit".parse::<Usage>(),
            Err(ConstraintParseError::Usage("blit".into()))
        );
    }

    #[test]
    fn cpu_access_union_is_per_direction() {
        assert_eq!(
            CpuAccess::Read.union(CpuAccess::Write),
            CpuAccess::ReadWrite
        );
        assert_eq!(CpuAccess::None.union(CpuAccess::Read), CpuAccess::Read);
        assert_eq!(CpuAccess::Write.union(CpuAccess::None), CpuAccess::Write);
        for a in ["none", "read", "write", "read-write"] {
            assert_eq!(a.parse::<CpuAccess>().unwrap().name(), a);
        }
        assert!("rw".parse::<CpuAccess>().is_err());
    }

    #[test]
    fn domains_parse() {
        for d in ["any", "device-local", "system"] {
            assert_eq!(d.parse::<Domain>().unwrap().name(), d);
        }
        assert!("vram".parse::<Domain>().is_err());
    }

    #[test]
    fn extents_are_a_value_or_a_range() {
        assert_eq!(
            "1920".parse::<ExtentRange>(),
            Ok(ExtentRange::exactly(1920))
        );
        assert_eq!(
            "16-4096".parse::<ExtentRange>(),
            Ok(ExtentRange::new(16, 4096))
        );
        // Backwards parses: it is the participant's conflict, reported by name later.
        assert!("100-10".parse::<ExtentRange>().unwrap().is_empty());
        for bad in ["", "0", "-5", "1-", "a-b", "1-2-3", "4294967296"] {
            assert!(bad.parse::<ExtentRange>().is_err(), "{bad}");
        }
        assert!(ExtentRange::new(10, 20)
            .intersect(ExtentRange::new(30, 40))
            .is_empty());
    }
}
