//! A pixel format as shared between parties: fourcc plus layout, and ordered sets of them.

use std::collections::HashMap;
use std::fmt;

use crate::{Fourcc, Modifier};

/// How a buffer's memory layout is described: by an explicit modifier, or not at all.
///
/// This replaces the `DRM_FORMAT_MOD_INVALID` magic value (seed 001, "Implicit modifiers"):
/// - `Implicit`: the layout is implementation-defined; the producer's driver and every
///   consumer's driver must agree on it by other means. A chain of parties that shares a
///   buffer is either fully implicit or fully explicit.
/// - `Explicit(m)`: the layout is exactly `m`, which is never `INVALID` (constructors
///   normalise it). `Explicit(Modifier::LINEAR)` is a guarantee of a linear layout, and is
///   *not* the same as `Implicit`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layout {
    Implicit,
    Explicit(Modifier),
}

impl Layout {
    /// Reads a modifier as it appears on the wire: `INVALID` means `Implicit`.
    pub const fn from_wire(m: Modifier) -> Self {
        if m.is_invalid() {
            Layout::Implicit
        } else {
            Layout::Explicit(m)
        }
    }

    /// The wire form: `Implicit` becomes `INVALID`.
    pub const fn to_wire(self) -> Modifier {
        match self {
            Layout::Implicit => Modifier::INVALID,
            Layout::Explicit(m) => m,
        }
    }

    pub const fn modifier(self) -> Option<Modifier> {
        match self {
            Layout::Implicit => None,
            Layout::Explicit(m) => Some(m),
        }
    }

    pub const fn is_implicit(self) -> bool {
        matches!(self, Layout::Implicit)
    }
}

impl fmt::Debug for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::Implicit => f.write_str("Implicit"),
            Layout::Explicit(m) => write!(f, "Explicit({m})"),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::Implicit => f.write_str("implicit"),
            Layout::Explicit(m) => write!(f, "{m}"),
        }
    }
}

/// One format+layout pair: what a party can read or write.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Format {
    pub fourcc: Fourcc,
    pub layout: Layout,
}

impl Format {
    /// From a fourcc and a wire modifier (`INVALID` becomes [`Layout::Implicit`]).
    pub const fn new(fourcc: Fourcc, modifier: Modifier) -> Self {
        Format { fourcc, layout: Layout::from_wire(modifier) }
    }

    pub const fn explicit(fourcc: Fourcc, modifier: Modifier) -> Self {
        Format::new(fourcc, modifier)
    }

    pub const fn implicit(fourcc: Fourcc) -> Self {
        Format { fourcc, layout: Layout::Implicit }
    }

    pub const fn linear(fourcc: Fourcc) -> Self {
        Format { fourcc, layout: Layout::Explicit(Modifier::LINEAR) }
    }
}

impl fmt::Debug for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{:?}", self.fourcc.trimmed(), self.layout)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.fourcc.trimmed(), self.layout)
    }
}

/// An ordered set of formats. Order is preference, first is best; duplicates are dropped
/// on insertion, keeping the earlier (preferred) position.
///
/// Membership is a hash lookup, so intersecting two sets costs O(len(self)).
#[derive(Clone, Default)]
pub struct FormatSet {
    order: Vec<Format>,
    index: HashMap<Format, usize>,
}

impl FormatSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `f` at the lowest preference, unless it is already present.
    /// Returns whether it was added.
    pub fn insert(&mut self, f: Format) -> bool {
        if self.index.contains_key(&f) {
            return false;
        }
        self.index.insert(f, self.order.len());
        self.order.push(f);
        true
    }

    pub fn contains(&self, f: &Format) -> bool {
        self.index.contains_key(f)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// In preference order.
    pub fn iter(&self) -> std::slice::Iter<'_, Format> {
        self.order.iter()
    }

    /// Preference rank of `f` (0 = most preferred).
    pub fn rank(&self, f: &Format) -> Option<usize> {
        self.index.get(f).copied()
    }

    /// The formats present in both, in `self`'s order of preference.
    pub fn intersection(&self, other: &FormatSet) -> FormatSet {
        let (small, large, keep_self_order) = if self.len() <= other.len() {
            (self, other, true)
        } else {
            (other, self, false)
        };
        if keep_self_order {
            small.iter().filter(|f| large.contains(f)).copied().collect()
        } else {
            self.iter().filter(|f| small.contains(f)).copied().collect()
        }
    }

    /// Keeps the formats for which `keep` is true, preserving order.
    pub fn retain(&mut self, mut keep: impl FnMut(&Format) -> bool) {
        self.order.retain(|f| keep(f));
        self.reindex();
    }

    /// Distinct fourccs, in order of their first appearance.
    pub fn fourccs(&self) -> Vec<Fourcc> {
        let mut seen = std::collections::HashSet::new();
        self.order.iter().map(|f| f.fourcc).filter(|f| seen.insert(*f)).collect()
    }

    /// The layouts listed for `fourcc`, in preference order.
    pub fn layouts(&self, fourcc: Fourcc) -> impl Iterator<Item = Layout> + '_ {
        self.order.iter().filter(move |f| f.fourcc == fourcc).map(|f| f.layout)
    }

    /// The explicit modifiers listed for `fourcc`, in preference order.
    pub fn modifiers(&self, fourcc: Fourcc) -> impl Iterator<Item = Modifier> + '_ {
        self.layouts(fourcc).filter_map(Layout::modifier)
    }

    fn reindex(&mut self) {
        self.index = self.order.iter().enumerate().map(|(i, f)| (*f, i)).collect();
    }
}

impl FromIterator<Format> for FormatSet {
    fn from_iter<I: IntoIterator<Item = Format>>(iter: I) -> Self {
        let mut s = FormatSet::new();
        s.extend(iter);
        s
    }
}

impl Extend<Format> for FormatSet {
    fn extend<I: IntoIterator<Item = Format>>(&mut self, iter: I) {
        for f in iter {
            self.insert(f);
        }
    }
}

impl<'a> IntoIterator for &'a FormatSet {
    type Item = &'a Format;
    type IntoIter = std::slice::Iter<'a, Format>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for FormatSet {
    /// Equal when they hold the same formats in the same preference order.
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order
    }
}

impl Eq for FormatSet {}

impl fmt::Debug for FormatSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.order.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Y_TILED: Modifier = Modifier::from_raw(0x0100_0000_0000_0002);

    #[test]
    fn invalid_on_the_wire_is_implicit() {
        assert_eq!(Format::new(Fourcc::NV12, Modifier::INVALID).layout, Layout::Implicit);
        assert_eq!(Layout::Implicit.to_wire(), Modifier::INVALID);
        assert_ne!(Format::linear(Fourcc::NV12), Format::implicit(Fourcc::NV12));
    }

    #[test]
    fn order_is_preference_and_duplicates_keep_first_place() {
        let mut s = FormatSet::new();
        assert!(s.insert(Format::new(Fourcc::NV12, Y_TILED)));
        assert!(s.insert(Format::linear(Fourcc::NV12)));
        assert!(!s.insert(Format::new(Fourcc::NV12, Y_TILED)));
        assert_eq!(s.rank(&Format::linear(Fourcc::NV12)), Some(1));
        assert_eq!(s.modifiers(Fourcc::NV12).collect::<Vec<_>>(), vec![Y_TILED, Modifier::LINEAR]);
    }

    #[test]
    fn intersection_keeps_left_order_whichever_side_is_smaller() {
        let a: FormatSet = [
            Format::linear(Fourcc::ARGB8888),
            Format::new(Fourcc::NV12, Y_TILED),
            Format::linear(Fourcc::NV12),
            Format::implicit(Fourcc::NV12),
        ]
        .into_iter()
        .collect();
        let b: FormatSet = [Format::linear(Fourcc::NV12), Format::new(Fourcc::NV12, Y_TILED)]
            .into_iter()
            .collect();
        let ab = a.intersection(&b);
        assert_eq!(ab.iter().copied().collect::<Vec<_>>(), vec![
            Format::new(Fourcc::NV12, Y_TILED),
            Format::linear(Fourcc::NV12)
        ]);
        let ba = b.intersection(&a);
        assert_eq!(ba.iter().copied().collect::<Vec<_>>(), vec![
            Format::linear(Fourcc::NV12),
            Format::new(Fourcc::NV12, Y_TILED)
        ]);
    }

    #[test]
    fn retain_reindexes() {
        let mut s: FormatSet =
            [Format::linear(Fourcc::R8), Format::linear(Fourcc::GR88)].into_iter().collect();
        s.retain(|f| f.fourcc == Fourcc::GR88);
        assert_eq!(s.rank(&Format::linear(Fourcc::GR88)), Some(0));
        assert!(!s.contains(&Format::linear(Fourcc::R8)));
    }
}
