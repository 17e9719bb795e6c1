//! Conflicts: why no allocation satisfies everyone, who is in the way, and what would help.

use std::fmt;

/// The constraint a conflict is about. The JSON names are part of the CLI contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConstraintKind {
    /// No fourcc is accepted by everyone.
    Format,
    /// A fourcc is common, but no explicit modifier for it is.
    Modifier,
    /// An implicit-only and an explicit-only party would share one buffer.
    Implicit,
    Width,
    Height,
    MinBuffers,
    Align,
    StrideAlign,
    CpuAccess,
    Domain,
    ReadOnly,
    /// No split into groups can be joined by the conversions dmabridge provides.
    Copy,
    /// The fallback-group combinations ran out (or hit the cap).
    FallbackGroups,
}

impl ConstraintKind {
    pub const fn name(self) -> &'static str {
        match self {
            ConstraintKind::Format => "format",
            ConstraintKind::Modifier => "modifier",
            ConstraintKind::Implicit => "implicit",
            ConstraintKind::Width => "width",
            ConstraintKind::Height => "height",
            ConstraintKind::MinBuffers => "min-buffers",
            ConstraintKind::Align => "align",
            ConstraintKind::StrideAlign => "stride-align",
            ConstraintKind::CpuAccess => "cpu-access",
            ConstraintKind::Domain => "domain",
            ConstraintKind::ReadOnly => "read-only",
            ConstraintKind::Copy => "copy",
            ConstraintKind::FallbackGroups => "fallback-groups",
        }
    }

    /// Whether putting the participants on separate buffers joined by a conversion can
    /// resolve a conflict of this kind. Bad values, extents (conversions do not scale) and
    /// a missing writer stay conflicts on any split.
    pub const fn copy_can_help(self) -> bool {
        matches!(
            self,
            ConstraintKind::Format
                | ConstraintKind::Modifier
                | ConstraintKind::Implicit
                | ConstraintKind::Domain
                | ConstraintKind::CpuAccess
        )
    }
}

impl fmt::Display for ConstraintKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for ConstraintKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One reason the participants cannot share a buffer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Conflict {
    /// The participants in the way, by name.
    pub participants: Vec<String>,
    pub constraint: ConstraintKind,
    /// What exactly clashes, for people.
    pub detail: String,
    /// The nearest change that would make the constraint satisfiable.
    pub fix: String,
}

impl Conflict {
    pub fn new(
        participants: impl IntoIterator<Item = impl Into<String>>,
        constraint: ConstraintKind,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Conflict {
            participants: participants.into_iter().map(Into::into).collect(),
            constraint,
            detail: detail.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}]: {}; fix: {}",
            self.constraint,
            self.participants.join(", "),
            self.detail,
            self.fix
        )
    }
}

/// `{a, b}` as the fixes write a set of participants.
pub(crate) fn set_of(names: &[&str]) -> String {
    format!("{{{}}}", names.join(", "))
}

/// Names in first-seen order, each once.
pub(crate) fn dedup<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}
