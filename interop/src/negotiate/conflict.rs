//! Conflicts: why no allocation satisfies everyone, who is in the way, and what would help;
//! the one vocabulary of attributes and conflicts for negotiation and buffer collections
//! alike.

use std::fmt;

/// The constraint (a collection's attribute) a conflict or a failed validation is about.
/// The JSON names are part of the CLI contract.
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
    MaxBuffers,
    MinSize,
    Align,
    OffsetAlign,
    StrideAlign,
    CpuAccess,
    Domain,
    ReadOnly,
    /// No split into groups can be joined by the conversions dmabridge provides.
    Copy,
    /// The fallback-group combinations ran out (or hit the cap).
    FallbackGroups,
    /// About no single attribute: a collection's own caps (too many lists), or a
    /// negotiation that failed outright.
    Other,
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
            ConstraintKind::MaxBuffers => "max-buffers",
            ConstraintKind::MinSize => "min-size",
            ConstraintKind::OffsetAlign => "offset-align",
            ConstraintKind::Align => "align",
            ConstraintKind::StrideAlign => "stride-align",
            ConstraintKind::CpuAccess => "cpu-access",
            ConstraintKind::Domain => "domain",
            ConstraintKind::ReadOnly => "read-only",
            ConstraintKind::Copy => "copy",
            ConstraintKind::FallbackGroups => "fallback-groups",
            ConstraintKind::Other => "other",
        }
    }

    /// The attributes an attribute list has, in collection wire order (the wire carries
    /// the index; [`ConstraintKind::Other`] last).
    pub const LIST_ATTRIBUTES: [ConstraintKind; 14] = [
        ConstraintKind::Format,
        ConstraintKind::Modifier,
        ConstraintKind::Width,
        ConstraintKind::Height,
        ConstraintKind::MinBuffers,
        ConstraintKind::MaxBuffers,
        ConstraintKind::Align,
        ConstraintKind::StrideAlign,
        ConstraintKind::OffsetAlign,
        ConstraintKind::MinSize,
        ConstraintKind::CpuAccess,
        ConstraintKind::Domain,
        ConstraintKind::ReadOnly,
        ConstraintKind::Other,
    ];

    /// The attribute of an attribute list this constraint is about: an implicit/explicit
    /// clash is a modifier matter, and what a list cannot express (copies, fallback
    /// groups) is [`ConstraintKind::Other`].
    pub const fn list_attribute(self) -> ConstraintKind {
        match self {
            ConstraintKind::Implicit => ConstraintKind::Modifier,
            ConstraintKind::Copy | ConstraintKind::FallbackGroups => ConstraintKind::Other,
            other => other,
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

/// One reason the participants cannot share a buffer, or a collection's list is refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Conflict {
    /// The participants in the way, by name.
    pub participants: Vec<String>,
    pub constraint: ConstraintKind,
    /// What exactly clashes, for people.
    pub detail: String,
    /// The nearest change that would make the constraint satisfiable; empty where there is
    /// no change to suggest (a collection's validation says only what fails).
    pub fix: String,
}

impl Conflict {
    /// A conflict about `constraint`, naming `participants`.
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

    /// This conflict as an attribute list's: its constraint as
    /// [`ConstraintKind::list_attribute`] names it.
    pub fn of_list(self) -> Conflict {
        Conflict { constraint: self.constraint.list_attribute(), ..self }
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]: {}", self.constraint, self.participants.join(", "), self.detail)?;
        if !self.fix.is_empty() {
            write!(f, "; fix: {}", self.fix)?;
        }
        Ok(())
    }
}

/// Most participants a detail or fix text names in one set before it says how many more:
/// with thousands of participants, one conflict per blocker each naming every other
/// participant made the report grow with the square of their number.
pub const MAX_NAMES_SHOWN: usize = 8;

/// `{a, b}` as the fixes write a set of participants; `{a, ..., h, and 12 more}` past
/// [`MAX_NAMES_SHOWN`].
pub(crate) fn set_of(names: &[&str]) -> String {
    let shown = names.iter().take(MAX_NAMES_SHOWN).copied().collect::<Vec<_>>().join(", ");
    match names.len().saturating_sub(MAX_NAMES_SHOWN) {
        0 => format!("{{{shown}}}"),
        more => format!("{{{shown}, and {more} more}}"),
    }
}

/// Names in first-seen order, each once (in linear time).
pub(crate) fn dedup<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = std::collections::HashSet::new();
    names.into_iter().filter(|n| seen.insert(*n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_of_names_are_capped() {
        assert_eq!(set_of(&[]), "{}");
        assert_eq!(set_of(&["a", "b"]), "{a, b}");
        let many: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(set_of(&refs), "{p0, p1, p2, p3, p4, p5, p6, p7, and 12 more}");
        assert_eq!(dedup(["a", "b", "a", "c", "b"]), ["a", "b", "c"]);
    }
}
