//! Participants and constraints as text: `--drm-formats NAME=LIST` and friends, and
//! `--constraint NAME:KEY=VALUE`, the grammar of `dmabridge negotiate` and of the C ABI
//! (`dmb_negotiate_json`, `dmb_participants_*`). Kept beside the negotiation core, which
//! reads no files, and away from clap, so that every rule is unit-tested here.
//!
//! [`ParticipantSpec::load`] reads every kind whose list is text or a file. The two live
//! kinds ([`PeerKind::is_live`]: the Vulkan device, the Wayland compositor) need the engine,
//! which this crate does not have: the caller answers them with its own loader
//! ([`build_participants_with`]) and passes every other kind on to
//! [`ParticipantSpec::load`].
//!
//! Every error is one line that names the participant and what is wrong with it.

use std::fmt;

mod loaders;

use crate::negotiate::{ConstraintParseError, Constraints, CpuAccess, Domain, ExtentRange, Participant};

/// Largest peer file read (`--kms-in-formats`, `--wayland-table`, `--drm-info`): real ones
/// are kilobytes.
pub const MAX_PEER_FILE: u64 = 16 << 20;

/// Where a participant's format list comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerKind {
    /// A GStreamer caps string (`drm-format` list, extents).
    GstCaps,
    /// A raw KMS `IN_FORMATS` blob, read from a file.
    KmsInFormats,
    /// `drm_info -j` output: a plane's IN_FORMATS.
    DrmInfo,
    /// A linux-dmabuf format table, read from a file.
    WaylandTable,
    /// The live compositor of `WAYLAND_DISPLAY`, asked for its linux-dmabuf formats.
    Wayland,
    /// A `drm-format` list as GStreamer writes it (`NV12:0x...,XR24`).
    DrmFormats,
    /// V4L2 pixel formats (`NV12MT`, ...).
    V4l2,
    /// The Vulkan device, for an exact use (`sample+render`), asked at run time.
    Vulkan,
    /// A V4L2 device node, asked at run time for its formats, frame sizes and buffer count
    /// ([`crate::peers::v4l2_device`]).
    V4l2Device,
    /// A KMS device's plane, asked at run time for its `IN_FORMATS`
    /// ([`crate::peers::kms_device`]).
    KmsDevice,
    /// A GPU as a saved `dmabridge probe --json` report, for one use it answered
    /// ([`crate::peers::probe_report`]).
    ProbeReport,
}

impl PeerKind {
    /// Every kind, in the order the command line's help lists them.
    pub const ALL: [PeerKind; 11] = [
        PeerKind::GstCaps,
        PeerKind::KmsInFormats,
        PeerKind::DrmInfo,
        PeerKind::Wayland,
        PeerKind::WaylandTable,
        PeerKind::DrmFormats,
        PeerKind::V4l2,
        PeerKind::Vulkan,
        PeerKind::V4l2Device,
        PeerKind::KmsDevice,
        PeerKind::ProbeReport,
    ];

    /// The command-line flag.
    pub const fn flag(self) -> &'static str {
        match self {
            PeerKind::GstCaps => "--gst-caps",
            PeerKind::KmsInFormats => "--kms-in-formats",
            PeerKind::DrmInfo => "--drm-info",
            PeerKind::WaylandTable => "--wayland-table",
            PeerKind::Wayland => "--wayland",
            PeerKind::DrmFormats => "--drm-formats",
            PeerKind::V4l2 => "--v4l2",
            PeerKind::Vulkan => "--vulkan",
            PeerKind::V4l2Device => "--v4l2-device",
            PeerKind::KmsDevice => "--kms-device",
            PeerKind::ProbeReport => "--probe-report",
        }
    }

    /// Whether the list comes from the engine's Vulkan device or a Wayland compositor, which
    /// the caller's loader answers ([`ParticipantSpec::load`] cannot). The V4L2 and KMS
    /// devices are live too, but need no engine: [`ParticipantSpec::load`] asks them.
    pub const fn is_live(self) -> bool {
        matches!(self, PeerKind::Vulkan | PeerKind::Wayland)
    }

    /// What follows `NAME=`, for error messages and help.
    pub const fn value_name(self) -> &'static str {
        match self {
            PeerKind::GstCaps => "CAPS",
            PeerKind::KmsInFormats | PeerKind::WaylandTable => "FILE",
            PeerKind::DrmInfo => "FILE[:PLANE_ID]",
            PeerKind::Wayland => "",
            PeerKind::DrmFormats => "LIST",
            PeerKind::V4l2 => "PIXFMT[,PIXFMT]",
            PeerKind::Vulkan => "USAGE[+USAGE][:create=FLAG,...][:srgb-view][:device=INDEX|NAME]",
            PeerKind::V4l2Device => "/dev/videoN[:capture|:output]",
            PeerKind::KmsDevice => "/dev/dri/cardN[:PLANE_ID]",
            PeerKind::ProbeReport => "FILE:USAGE[+USAGE]",
        }
    }
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.flag())
    }
}

/// Bad command-line input. Each message is one line naming the participant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{kind} {arg:?}: expected NAME={}", kind.value_name())]
    ParticipantSyntax { kind: PeerKind, arg: String },
    #[error("participant {0:?} is given more than once")]
    DuplicateName(String),
    #[error("--constraint {0:?}: expected NAME:KEY=VALUE")]
    ConstraintSyntax(String),
    #[error("--constraint for {0:?}: there is no participant of that name")]
    UnknownParticipant(String),
    #[error("participant {participant:?}: unknown constraint {key:?} (expected min-buffers, align, stride-align, width, height, cpu-access, domain or read-only)")]
    UnknownKey { participant: String, key: String },
    #[error("participant {participant:?}: {key}={value:?}: {reason}")]
    BadValue {
        participant: String,
        key: &'static str,
        value: String,
        reason: String,
    },
    #[error("participant {participant:?} ({kind}): {reason}")]
    Peer {
        participant: String,
        kind: PeerKind,
        reason: String,
    },
    /// The participant's file could not be read: missing, not a regular file (a FIFO, a
    /// device...), or over [`MAX_PEER_FILE`].
    #[error("participant {participant:?} ({kind}): {source}")]
    File {
        participant: String,
        kind: PeerKind,
        source: crate::user_file::ReadFileError,
    },
    /// A live kind given to a loader that cannot answer it (see [`PeerKind::is_live`]).
    #[error("participant {participant:?} ({kind}): {what} is not available here")]
    NotAvailable {
        participant: String,
        kind: PeerKind,
        what: &'static str,
    },
    #[error("no participants: give at least one of --gst-caps, --kms-in-formats, --drm-info, --wayland, --wayland-table, --drm-formats, --v4l2, --vulkan, --v4l2-device, --kms-device")]
    NoParticipants,
}

/// Makes user text safe for a one-line message: no control characters, bounded length.
pub fn one_line(s: &str) -> String {
    const MAX: usize = 160;
    let mut out: String = s
        .chars()
        .take(MAX)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if s.chars().count() > MAX {
        out.push_str("...");
    }
    out
}

/// `--KIND NAME=VALUE`, not yet loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantSpec {
    /// Where its list comes from.
    pub kind: PeerKind,
    /// Its name: unique among the participants, named by constraints and conflicts.
    pub name: String,
    /// What follows `NAME=` ([`PeerKind::value_name`]).
    pub value: String,
}

impl ParticipantSpec {
    /// Splits `NAME=VALUE` at the first `=`. The name must not be empty. `--wayland` takes a
    /// name alone (the compositor is the one `WAYLAND_DISPLAY` names).
    pub fn parse(kind: PeerKind, arg: &str) -> Result<Self, SpecError> {
        if kind == PeerKind::Wayland && !arg.is_empty() && !arg.contains('=') {
            return Ok(ParticipantSpec { kind, name: arg.to_owned(), value: String::new() });
        }
        match arg.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok(ParticipantSpec {
                kind,
                name: name.to_owned(),
                value: value.to_owned(),
            }),
            _ => Err(SpecError::ParticipantSyntax {
                kind,
                arg: one_line(arg),
            }),
        }
    }

    /// Reads the participant's format list through the parser of its kind; a live kind
    /// ([`PeerKind::is_live`]) is [`SpecError::NotAvailable`].
    pub fn load(&self) -> Result<Participant, SpecError> {
        loaders::load(self)
    }

    /// A [`SpecError::Peer`] for this participant, the reason made one line (for the
    /// callers' loaders too).
    pub fn peer_error(&self, reason: impl fmt::Display) -> SpecError {
        SpecError::Peer {
            participant: one_line(&self.name),
            kind: self.kind,
            reason: one_line(&reason.to_string()),
        }
    }

    /// Reads the file a `--kms-in-formats` or `--wayland-table` value names, bounded.
    pub(crate) fn read_file(&self) -> Result<Vec<u8>, SpecError> {
        self.read_path(&self.value)
    }

    /// The file and plane id of a `--drm-info FILE[:PLANE_ID]` value (a trailing `:N` is
    /// the plane when N is a number, so paths with colons still work).
    pub(crate) fn drm_info_target(&self) -> (&str, Option<u64>) {
        match self.value.rsplit_once(':') {
            Some((path, id)) if !path.is_empty() => match id.parse::<u64>() {
                Ok(id) => (path, Some(id)),
                Err(_) => (&self.value, None),
            },
            _ => (&self.value, None),
        }
    }

    /// The file and the use of a `--probe-report FILE:USAGE` value (the use is one of the
    /// report's usage keys, which hold no `/`, so paths with colons still work).
    pub(crate) fn probe_report_target(&self) -> Result<(&str, &str), SpecError> {
        match self.value.rsplit_once(':') {
            Some((path, usage)) if !path.is_empty() && !usage.is_empty() && !usage.contains('/') => Ok((path, usage)),
            _ => Err(SpecError::ParticipantSyntax { kind: self.kind, arg: one_line(&format!("{}={}", self.name, self.value)) }),
        }
    }

    /// The node and direction of a `--v4l2-device /dev/videoN[:capture|:output]` value (no
    /// direction: the device's own, capture where it has both).
    pub fn v4l2_device_target(&self) -> Result<(&str, Option<crate::peers::v4l2_device::Direction>), SpecError> {
        use crate::peers::v4l2_device::Direction;
        match self.value.rsplit_once(':') {
            Some((path, "capture")) => Ok((path, Some(Direction::Capture))),
            Some((path, "output")) => Ok((path, Some(Direction::Output))),
            Some((_, other)) if !other.contains('/') => Err(self.peer_error(format_args!(
                "{:?} is not a direction (capture or output)",
                one_line(other)
            ))),
            _ => Ok((&self.value, None)),
        }
    }

    /// The card and plane of a `--kms-device /dev/dri/cardN[:PLANE_ID]` value (no plane: the
    /// first primary plane).
    pub fn kms_device_target(&self) -> Result<(&str, Option<u32>), SpecError> {
        match self.value.rsplit_once(':') {
            Some((path, id)) if !id.contains('/') => match id.parse::<u32>() {
                Ok(id) => Ok((path, Some(id))),
                Err(_) => Err(self.peer_error(format_args!("{:?} is not a plane id", one_line(id)))),
            },
            _ => Ok((&self.value, None)),
        }
    }

    /// Reads `path`, a regular file of at most [`MAX_PEER_FILE`] bytes
    /// ([`crate::user_file::read_regular`]: a FIFO, a device or a directory is refused at
    /// once, never waited on).
    pub(crate) fn read_path(&self, path: &str) -> Result<Vec<u8>, SpecError> {
        crate::user_file::read_regular(std::path::Path::new(path), MAX_PEER_FILE).map_err(|source| SpecError::File {
            participant: one_line(&self.name),
            kind: self.kind,
            source,
        })
    }
}

/// The keys of `--constraint NAME:KEY=VALUE` (each sets the [`Constraints`] field of its
/// name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ConstraintKey {
    MinBuffers,
    MaxBuffers,
    MinSize,
    Align,
    StrideAlign,
    OffsetAlign,
    Width,
    Height,
    CpuAccess,
    Domain,
    ReadOnly,
}

impl ConstraintKey {
    const ALL: [(&'static str, ConstraintKey); 11] = [
        ("min-buffers", ConstraintKey::MinBuffers),
        ("max-buffers", ConstraintKey::MaxBuffers),
        ("min-size", ConstraintKey::MinSize),
        ("align", ConstraintKey::Align),
        ("stride-align", ConstraintKey::StrideAlign),
        ("offset-align", ConstraintKey::OffsetAlign),
        ("width", ConstraintKey::Width),
        ("height", ConstraintKey::Height),
        ("cpu-access", ConstraintKey::CpuAccess),
        ("domain", ConstraintKey::Domain),
        ("read-only", ConstraintKey::ReadOnly),
    ];

    /// The key written `name`, if there is one.
    pub fn from_name(name: &str) -> Option<ConstraintKey> {
        ConstraintKey::ALL.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    /// The key as written (`min-buffers`).
    pub fn name(self) -> &'static str {
        ConstraintKey::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }
}

/// `--constraint NAME:KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstraintSpec {
    /// The participant's name.
    pub participant: String,
    /// What it constrains.
    pub key: ConstraintKey,
    /// The value, checked by [`ConstraintSpec::apply`].
    pub value: String,
}

impl ConstraintSpec {
    /// Splits at the first `=`, then the part before it at its last `:` (so a participant
    /// name may contain `:`, and a value may contain either).
    pub fn parse(arg: &str) -> Result<Self, SpecError> {
        let syntax = || SpecError::ConstraintSyntax(one_line(arg));
        let (lhs, value) = arg.split_once('=').ok_or_else(syntax)?;
        let (participant, key) = lhs.rsplit_once(':').ok_or_else(syntax)?;
        if participant.is_empty() {
            return Err(syntax());
        }
        let key = ConstraintKey::from_name(key)
            .ok_or_else(|| SpecError::UnknownKey {
                participant: one_line(participant),
                key: one_line(key),
            })?;
        Ok(ConstraintSpec {
            participant: participant.to_owned(),
            key,
            value: value.to_owned(),
        })
    }

    /// Sets the constraint. Values that are well-formed but unsatisfiable (an alignment
    /// that is not a power of two, a range with min > max) are accepted here: they are the
    /// participant's conflict, which the negotiator reports (exit status 2, not 1).
    pub fn apply(&self, c: &mut Constraints) -> Result<(), SpecError> {
        let bad = |reason: String| SpecError::BadValue {
            participant: one_line(&self.participant),
            key: self.key.name(),
            value: one_line(&self.value),
            reason,
        };
        let parsed = |e: ConstraintParseError| bad(e.to_string());
        let v = self.value.as_str();
        match self.key {
            ConstraintKey::MinBuffers => {
                c.min_buffers = v
                    .parse()
                    .map_err(|_| bad("expected a count from 0 to 4294967295".into()))?
            }
            ConstraintKey::MaxBuffers => {
                c.max_buffers = Some(
                    v.parse()
                        .map_err(|_| bad("expected a count from 0 to 4294967295".into()))?,
                )
            }
            ConstraintKey::MinSize => {
                c.min_size = parse_u64(v).ok_or_else(|| bad("expected a number of bytes".into()))?
            }
            ConstraintKey::OffsetAlign => {
                c.offset_align =
                    parse_u64(v).ok_or_else(|| bad("expected a number of bytes".into()))?
            }
            ConstraintKey::Align => {
                c.align = parse_u64(v).ok_or_else(|| bad("expected a number of bytes".into()))?
            }
            ConstraintKey::StrideAlign => {
                c.stride_align =
                    parse_u64(v).ok_or_else(|| bad("expected a number of bytes".into()))?
            }
            ConstraintKey::Width => c.width = v.parse::<ExtentRange>().map_err(parsed)?,
            ConstraintKey::Height => c.height = v.parse::<ExtentRange>().map_err(parsed)?,
            ConstraintKey::CpuAccess => c.cpu_access = v.parse::<CpuAccess>().map_err(parsed)?,
            ConstraintKey::Domain => c.domain = v.parse::<Domain>().map_err(parsed)?,
            ConstraintKey::ReadOnly => {
                c.read_only = match v {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("expected true or false".into())),
                }
            }
        }
        Ok(())
    }
}

/// Decimal, or hex with `0x`.
fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Loads every participant, in order (order = preference), and applies the constraints.
pub fn build_participants(
    specs: &[ParticipantSpec],
    constraints: &[ConstraintSpec],
) -> Result<Vec<Participant>, SpecError> {
    build_participants_with(specs, constraints, &ParticipantSpec::load)
}

/// [`build_participants`] with a custom loader, so that the engine can answer the live kinds
/// (`--vulkan`, `--wayland`) and pass every other kind on to [`ParticipantSpec::load`].
pub fn build_participants_with(
    specs: &[ParticipantSpec],
    constraints: &[ConstraintSpec],
    load: &dyn Fn(&ParticipantSpec) -> Result<Participant, SpecError>,
) -> Result<Vec<Participant>, SpecError> {
    if specs.is_empty() {
        return Err(SpecError::NoParticipants);
    }
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|t| t.name == s.name) {
            return Err(SpecError::DuplicateName(one_line(&s.name)));
        }
    }
    // Constraints first: a typo there is cheaper to report than a file error.
    for c in constraints {
        if !specs.iter().any(|s| s.name == c.participant) {
            return Err(SpecError::UnknownParticipant(one_line(&c.participant)));
        }
    }
    let mut parts = specs.iter().map(load).collect::<Result<Vec<_>, _>>()?;
    for c in constraints {
        if let Some(p) = parts.iter_mut().find(|p| p.name == c.participant) {
            c.apply(&mut p.constraints)?;
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: PeerKind, arg: &str) -> ParticipantSpec {
        ParticipantSpec::parse(kind, arg).unwrap()
    }

    #[test]
    fn participant_args_are_name_equals_value() {
        let s = spec(
            PeerKind::GstCaps,
            "cam=video/x-raw(memory:DMABuf), drm-format=(string)NV12",
        );
        assert_eq!(s.name, "cam");
        assert_eq!(
            s.value,
            "video/x-raw(memory:DMABuf), drm-format=(string)NV12"
        );
        for bad in ["cam", "=NV12", ""] {
            let e = ParticipantSpec::parse(PeerKind::DrmFormats, bad).unwrap_err();
            assert!(matches!(e, SpecError::ParticipantSyntax { .. }), "{bad}");
            assert!(e.to_string().contains("--drm-formats") && e.to_string().contains("NAME=LIST"));
        }
    }

    #[test]
    fn constraint_args_are_name_colon_key_equals_value() {
        let c = ConstraintSpec::parse("enc:align=4096").unwrap();
        assert_eq!(
            (c.participant.as_str(), c.key, c.value.as_str()),
            ("enc", ConstraintKey::Align, "4096")
        );
        let c = ConstraintSpec::parse("a:b:width=16-64").unwrap();
        assert_eq!(
            (c.participant.as_str(), c.key),
            ("a:b", ConstraintKey::Width)
        );
        assert!(matches!(
            ConstraintSpec::parse("enc=1"),
            Err(SpecError::ConstraintSyntax(_))
        ));
        assert!(matches!(
            ConstraintSpec::parse(":align=1"),
            Err(SpecError::ConstraintSyntax(_))
        ));
        let e = ConstraintSpec::parse("enc:colour=red").unwrap_err();
        assert_eq!(
            e,
            SpecError::UnknownKey {
                participant: "enc".into(),
                key: "colour".into()
            }
        );
        assert!(e.to_string().contains("\"enc\""));
    }

    #[test]
    fn every_key_applies() {
        let mut c = Constraints::default();
        for (arg, check) in [
            (
                "p:min-buffers=3",
                &(|c: &Constraints| c.min_buffers == 3) as &dyn Fn(&Constraints) -> bool,
            ),
            ("p:align=0x1000", &|c| c.align == 4096),
            ("p:stride-align=100", &|c| c.stride_align == 100),
            ("p:max-buffers=3", &|c| c.max_buffers == Some(3)),
            ("p:min-size=0x1000", &|c| c.min_size == 4096),
            ("p:offset-align=64", &|c| c.offset_align == 64),
            ("p:width=1920", &|c| c.width == ExtentRange::exactly(1920)),
            ("p:height=16-1088", &|c| {
                c.height == ExtentRange::new(16, 1088)
            }),
            ("p:cpu-access=read-write", &|c| {
                c.cpu_access == CpuAccess::ReadWrite
            }),
            ("p:domain=device-local", &|c| {
                c.domain == Domain::DeviceLocal
            }),
            ("p:read-only=true", &|c| c.read_only),
        ] {
            ConstraintSpec::parse(arg).unwrap().apply(&mut c).unwrap();
            assert!(check(&c), "{arg}");
        }
        for bad in [
            "p:min-buffers=-1",
            "p:align=big",
            "p:width=0",
            "p:read-only=yes",
            "p:domain=vram",
        ] {
            let e = ConstraintSpec::parse(bad)
                .unwrap()
                .apply(&mut c)
                .unwrap_err();
            assert!(matches!(e, SpecError::BadValue { .. }), "{bad}");
            assert!(e.to_string().starts_with("participant \"p\""), "{e}");
        }
    }

    #[test]
    fn building_checks_names_before_loading() {
        let specs = [
            spec(PeerKind::Vulkan, "gpu=sample"),
            spec(PeerKind::Vulkan, "gpu=render"),
        ];
        assert_eq!(
            build_participants(&specs, &[]),
            Err(SpecError::DuplicateName("gpu".into()))
        );
        let c = ConstraintSpec::parse("nobody:align=4").unwrap();
        assert_eq!(
            build_participants(&specs[..1], &[c]),
            Err(SpecError::UnknownParticipant("nobody".into()))
        );
        assert_eq!(build_participants(&[], &[]), Err(SpecError::NoParticipants));
    }

    #[test]
    fn live_kinds_are_the_callers_to_answer() {
        for (kind, arg) in [(PeerKind::Vulkan, "gpu=sample+render"), (PeerKind::Wayland, "gpu")] {
            assert!(kind.is_live());
            let e = spec(kind, arg).load().unwrap_err();
            assert!(matches!(e, SpecError::NotAvailable { .. }), "{e}");
            assert!(e.to_string().contains("\"gpu\"") && e.to_string().contains("not available"));
        }
        assert_eq!(PeerKind::ALL.iter().filter(|k| k.is_live()).count(), 2);
        // A custom loader answers the live kinds and passes the rest on.
        let specs = [spec(PeerKind::Vulkan, "gpu=sample"), spec(PeerKind::DrmFormats, "disp=XR24")];
        let load = |s: &ParticipantSpec| if s.kind.is_live() { Ok(Participant::any_format(&s.name)) } else { s.load() };
        let parts = build_participants_with(&specs, &[], &load).unwrap();
        assert_eq!(parts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["gpu", "disp"]);
    }

    #[test]
    fn missing_files_are_named_errors() {
        let e = spec(PeerKind::KmsInFormats, "plane=/nonexistent/blob")
            .load()
            .unwrap_err();
        assert!(matches!(e, SpecError::File { .. }), "{e}");
        assert!(e.to_string().contains("\"plane\"") && e.to_string().contains("/nonexistent/blob"), "{e}");
    }

    #[test]
    fn device_values_split_into_node_and_direction_or_plane() {
        use crate::peers::v4l2_device::Direction;
        let v = |arg: &str| spec(PeerKind::V4l2Device, arg);
        assert_eq!(v("cam=/dev/video0").v4l2_device_target().unwrap(), ("/dev/video0", None));
        assert_eq!(v("cam=/dev/video0:capture").v4l2_device_target().unwrap(), ("/dev/video0", Some(Direction::Capture)));
        assert_eq!(v("out=/dev/video1:output").v4l2_device_target().unwrap(), ("/dev/video1", Some(Direction::Output)));
        assert_eq!(v("cam=/run/a:b/video0").v4l2_device_target().unwrap(), ("/run/a:b/video0", None));
        assert!(matches!(v("cam=/dev/video0:sideways").v4l2_device_target(), Err(SpecError::Peer { .. })));
        let k = |arg: &str| spec(PeerKind::KmsDevice, arg);
        assert_eq!(k("disp=/dev/dri/card1").kms_device_target().unwrap(), ("/dev/dri/card1", None));
        assert_eq!(k("disp=/dev/dri/card1:31").kms_device_target().unwrap(), ("/dev/dri/card1", Some(31)));
        assert!(matches!(k("disp=/dev/dri/card1:primary").kms_device_target(), Err(SpecError::Peer { .. })));
    }

    #[test]
    fn a_missing_device_is_a_named_error() {
        for (kind, arg) in [(PeerKind::V4l2Device, "cam=/dev/video-none"), (PeerKind::KmsDevice, "disp=/dev/dri/card-none")] {
            let e = spec(kind, arg).load().unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, SpecError::Peer { .. }), "{text}");
            assert!(text.contains("-none"), "the message names the device: {text}");
        }
    }

    #[test]
    fn messages_stay_on_one_line() {
        let e = ParticipantSpec::parse(PeerKind::GstCaps, "a\nb").unwrap_err();
        assert!(!e.to_string().contains('\n'));
        let long = "x".repeat(500);
        assert!(ConstraintSpec::parse(&long).unwrap_err().to_string().len() < 250);
    }
}
