//! The caps model: structures, fields and values as written, plus what dmabridge reads from
//! them (the `drm-format` list, width and height) and their intersection.
//!
//! Values keep their text and `(type)` tags exactly as parsed, so printing gives back the
//! input (modulo blanks); only `drm-format` is interpreted when parsing, because it is the
//! one field whose syntax the seed defines and whose errors we must report.

use std::fmt;

use super::{parse_drm_format, GstError, MAX_DRM_FORMATS, MAX_INTERSECT_STEPS};
use crate::{Format, FormatSet};

const DMABUF_FEATURE: &str = "memory:DMABuf";
const DRM_FORMAT: &str = "drm-format";

/// Parsed caps: `ANY`, or a list of structures (none = `EMPTY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    any: bool,
    structures: Vec<CapsStructure>,
}

/// One structure: `video/x-raw(memory:DMABuf), field=value, ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapsStructure {
    name: String,
    features: Option<Vec<String>>,
    fields: Vec<Field>,
    /// The `drm-format` field read as formats, validated at construction.
    drm: Option<FormatSet>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub value: Value,
}

/// A value with its optional `(type)` tag, e.g. `(string)NV12` or `(int)[ 1, 10 ]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub tag: Option<String>,
    pub body: ValueBody,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueBody {
    /// A bare token or (with `quoted`) a `"..."` string, unescaped.
    Scalar { text: String, quoted: bool },
    /// `{ a, b }`: any one of.
    List(Vec<Value>),
    /// `[ min, max ]` or `[ min, max, step ]`.
    Range(Vec<Value>),
    /// `< a, b >`: all of, in order.
    Array(Vec<Value>),
}

/// An inclusive integer range, as `width=(int)[ 1, 2147483647 ]` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntRange {
    pub min: i64,
    pub max: i64,
}

impl Caps {
    pub(super) fn from_parts(any: bool, structures: Vec<CapsStructure>) -> Caps {
        Caps { any, structures }
    }

    pub fn any() -> Caps {
        Caps { any: true, structures: Vec::new() }
    }

    pub fn is_empty(&self) -> bool {
        !self.any && self.structures.is_empty()
    }

    pub fn structures(&self) -> &[CapsStructure] {
        &self.structures
    }

    /// The `drm-format` formats of the `memory:DMABuf` structures, in order of preference.
    ///
    /// `None` means "anything": `ANY` caps, or a DMABuf structure without `drm-format` (the
    /// seed: an absent field is the superset of all formats). Structures without the DMABuf
    /// feature carry no dma-buf formats, so caps with none give an empty set.
    pub fn drm_formats(&self) -> Option<FormatSet> {
        if self.any {
            return None;
        }
        let mut all = FormatSet::new();
        for s in self.structures.iter().filter(|s| s.has_dmabuf()) {
            all.extend(s.drm_formats()?.iter().copied());
        }
        Some(all)
    }

    /// The width range over all structures (their hull); `None` when any structure leaves
    /// width open or gives something that is not an integer, a range or a list of integers.
    pub fn width(&self) -> Option<IntRange> {
        self.int_hull("width")
    }

    /// As [`Caps::width`], for height.
    pub fn height(&self) -> Option<IntRange> {
        self.int_hull("height")
    }

    fn int_hull(&self, field: &str) -> Option<IntRange> {
        if self.any {
            return None;
        }
        let mut hull: Option<IntRange> = None;
        for s in &self.structures {
            let r = s.int_range(field)?;
            hull = Some(match hull {
                None => r,
                Some(h) => IntRange { min: h.min.min(r.min), max: h.max.max(r.max) },
            });
        }
        hull
    }

    /// What both accept, as GStreamer negotiation computes it (seed 000: "the negotiation
    /// here in fact has no special operation except finding the intersection"): structures
    /// pairwise, fields present in both intersected, fields present in one kept. `drm-format`
    /// lists intersect as formats, in `self`'s order of preference. `Ok(None)` when nothing
    /// is left.
    ///
    /// Generic lists intersect pairwise (quadratic in their lengths, and a list against a
    /// list of lists multiplies); `drm-format` lists use a hash set. The work is bounded by
    /// [`MAX_INTERSECT_STEPS`](super::MAX_INTERSECT_STEPS), past which the result is
    /// [`GstError::IntersectionTooLarge`].
    pub fn intersect(&self, other: &Caps) -> Result<Option<Caps>, GstError> {
        if self.any {
            return Ok(Some(other.clone()));
        }
        if other.any {
            return Ok(Some(self.clone()));
        }
        let mut budget = Budget::new();
        let mut out: Vec<CapsStructure> = Vec::new();
        for a in &self.structures {
            for b in &other.structures {
                if let Some(s) = a.intersect(b, &mut budget) {
                    budget.spend(out.len());
                    if !out.contains(&s) {
                        out.push(s);
                    }
                }
                if budget.exhausted() {
                    return Err(GstError::IntersectionTooLarge { max: MAX_INTERSECT_STEPS });
                }
            }
        }
        Ok((!out.is_empty()).then_some(Caps { any: false, structures: out }))
    }

    /// The `gst-inspect-1.0` layout: the structure name on a line, then one field per line.
    pub fn to_inspect_string(&self) -> String {
        if self.any {
            return "ANY".into();
        }
        if self.structures.is_empty() {
            return "EMPTY".into();
        }
        let mut out = String::new();
        for s in &self.structures {
            out.push_str(&s.header());
            out.push('\n');
            for f in &s.fields {
                out.push_str(&format!("{:>20}: {}\n", f.name, f.value));
            }
        }
        out
    }
}

impl fmt::Display for Caps {
    /// The serialized form, `; `-separated, as `gst_caps_to_string` writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.any {
            return f.write_str("ANY");
        }
        if self.structures.is_empty() {
            return f.write_str("EMPTY");
        }
        for (i, s) in self.structures.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Caps {
    type Err = GstError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Caps::parse(s)
    }
}

impl CapsStructure {
    /// Builds a structure and validates its `drm-format` field.
    pub fn new(name: String, features: Option<Vec<String>>, fields: Vec<Field>) -> Result<Self, GstError> {
        let mut seen = std::collections::HashSet::with_capacity(fields.len());
        if let Some(dup) = fields.iter().find(|f| !seen.insert(f.name.as_str())) {
            return Err(GstError::DuplicateField { structure: crate::text::quoted(&name), name: crate::text::quoted(&dup.name) });
        }
        let mut s = CapsStructure { name, features, fields, drm: None };
        s.drm = s.read_drm_formats()?;
        Ok(s)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn features(&self) -> Option<&[String]> {
        self.features.as_deref()
    }

    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|f| f.name == name).map(|f| &f.value)
    }

    pub fn has_dmabuf(&self) -> bool {
        self.features.as_ref().is_some_and(|fs| fs.iter().any(|f| f == DMABUF_FEATURE))
    }

    /// The `drm-format` formats; `None` when the field is absent ("anything").
    pub fn drm_formats(&self) -> Option<&FormatSet> {
        self.drm.as_ref()
    }

    /// An integer field as a range: a single integer, `[ min, max ]`, or a list of integers
    /// (their hull). A stepped range counts as its bounds.
    pub fn int_range(&self, field: &str) -> Option<IntRange> {
        self.get(field)?.int_hull()
    }

    fn header(&self) -> String {
        match &self.features {
            Some(fs) => format!("{}({})", self.name, fs.join(", ")),
            None => self.name.clone(),
        }
    }

    fn read_drm_formats(&self) -> Result<Option<FormatSet>, GstError> {
        let Some(value) = self.get(DRM_FORMAT) else { return Ok(None) };
        if !self.has_dmabuf() {
            return Err(GstError::DrmFormatOutsideDmaBuf { structure: crate::text::quoted(&self.name) });
        }
        let not_string = |found: String| GstError::DrmFormatNotString { structure: crate::text::quoted(&self.name), found };
        let elements = drm_elements(value).map_err(not_string)?;
        if elements.len() > MAX_DRM_FORMATS {
            return Err(GstError::TooManyDrmFormats { structure: crate::text::quoted(&self.name), max: MAX_DRM_FORMATS });
        }
        let mut set = FormatSet::new();
        for element in elements {
            set.insert(parse_drm_format(element)?);
        }
        if set.is_empty() {
            return Err(GstError::EmptyDrmFormatList { structure: crate::text::quoted(&self.name) });
        }
        Ok(Some(set))
    }

    fn same_kind(&self, other: &CapsStructure) -> bool {
        let sorted = |f: &Option<Vec<String>>| {
            let mut v = f.clone().unwrap_or_default();
            v.sort();
            v
        };
        // No features means system memory; writing it out is the same thing.
        let norm = |f: &Option<Vec<String>>| {
            let v = sorted(f);
            if v == ["memory:SystemMemory"] {
                Vec::new()
            } else {
                v
            }
        };
        self.name == other.name && norm(&self.features) == norm(&other.features)
    }

    fn intersect(&self, other: &CapsStructure, budget: &mut Budget) -> Option<CapsStructure> {
        budget.spend(1 + self.fields.len() * other.fields.len());
        if budget.exhausted() || !self.same_kind(other) {
            return None;
        }
        let mut fields = Vec::with_capacity(self.fields.len() + other.fields.len());
        for f in &self.fields {
            let value = match other.get(&f.name) {
                None => f.value.clone(),
                Some(_) if f.name == DRM_FORMAT => intersect_drm(&f.value, other.drm.as_ref()?, budget)?,
                Some(theirs) => f.value.intersect(theirs, 0, budget)?,
            };
            fields.push(Field { name: f.name.clone(), value });
        }
        for f in &other.fields {
            if self.get(&f.name).is_none() {
                fields.push(f.clone());
            }
        }
        CapsStructure::new(self.name.clone(), self.features.clone(), fields).ok()
    }
}

impl fmt::Display for CapsStructure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.header())?;
        for field in &self.fields {
            write!(f, ", {}={}", field.name, field.value)?;
        }
        Ok(())
    }
}

/// The strings of a `drm-format` value, or a description of what it is instead.
pub(super) fn drm_elements(value: &Value) -> Result<Vec<&str>, String> {
    fn string_tag(t: &Option<String>) -> bool {
        matches!(t.as_deref(), None | Some("string") | Some("s"))
    }
    fn scalar(v: &Value) -> Result<&str, String> {
        match &v.body {
            ValueBody::Scalar { text, .. } if string_tag(&v.tag) => Ok(text.as_str()),
            ValueBody::Scalar { .. } => Err(format!("an element of type {:?}", v.tag.as_deref().unwrap_or(""))),
            ValueBody::List(_) => Err("a nested list".to_owned()),
            ValueBody::Range(_) => Err("a range".to_owned()),
            ValueBody::Array(_) => Err("an array".to_owned()),
        }
    }
    if !string_tag(&value.tag) {
        return Err(format!("a value of type {:?}", value.tag.as_deref().unwrap_or("")));
    }
    match &value.body {
        ValueBody::List(items) => items.iter().map(scalar).collect(),
        _ => Ok(vec![scalar(value)?]),
    }
}

/// The work counter of one [`Caps::intersect`]: once spent, every step gives up.
pub(super) struct Budget {
    steps: usize,
}

impl Budget {
    fn new() -> Self {
        Budget { steps: 0 }
    }

    fn spend(&mut self, n: usize) {
        self.steps = self.steps.saturating_add(n);
    }

    fn exhausted(&self) -> bool {
        self.steps > MAX_INTERSECT_STEPS
    }
}

/// Keeps the elements of `ours` (as written) whose format `theirs` lists.
fn intersect_drm(ours: &Value, theirs: &FormatSet, budget: &mut Budget) -> Option<Value> {
    if let ValueBody::List(items) = &ours.body {
        budget.spend(items.len());
    }
    let keep = |v: &Value| match &v.body {
        ValueBody::Scalar { text, .. } => parse_drm_format(text).is_ok_and(|f: Format| theirs.contains(&f)),
        _ => false,
    };
    match &ours.body {
        ValueBody::List(items) => {
            let kept: Vec<Value> = items.iter().filter(|v| keep(v)).cloned().collect();
            collapse(ours.tag.clone(), kept)
        }
        _ => keep(ours).then(|| ours.clone()),
    }
}

/// A list of what is left: nothing, one value (carrying the list's tag if it has none), or
/// a list. GStreamer also collapses one-element results to the value.
fn collapse(tag: Option<String>, mut items: Vec<Value>) -> Option<Value> {
    match items.len() {
        0 => None,
        1 => items.pop().map(|mut v| {
            if v.tag.is_none() {
                v.tag = tag;
            }
            v
        }),
        _ => Some(Value { tag, body: ValueBody::List(items) }),
    }
}

/// A scalar read as a number, where its tag allows it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Number {
    Int(i64),
    /// Numerator, denominator (> 0).
    Fraction(i64, i64),
}

impl Number {
    fn cmp(self, other: Number) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => Some(a.cmp(&b)),
            (Number::Fraction(an, ad), Number::Fraction(bn, bd)) => {
                // |n| < 2^63 and 0 < d < 2^63 would overflow i64; i128 cannot.
                Some((an as i128 * bd as i128).cmp(&(bn as i128 * ad as i128)))
            }
            _ => None,
        }
    }

    fn text(self) -> String {
        match self {
            Number::Int(v) => v.to_string(),
            Number::Fraction(n, d) => format!("{n}/{d}"),
        }
    }
}

fn tag_kind(tag: Option<&str>) -> Option<&str> {
    match tag {
        Some("i") => Some("int"),
        Some("s") => Some("string"),
        Some("f") => Some("float"),
        Some("d") => Some("double"),
        Some("b") => Some("boolean"),
        other => other,
    }
}

impl Value {
    fn number(&self, tag: Option<&str>) -> Option<Number> {
        let ValueBody::Scalar { text, quoted: false } = &self.body else { return None };
        let tag = tag_kind(self.tag.as_deref().or(tag));
        if matches!(tag, None | Some("int")) {
            if let Ok(v) = text.parse::<i64>() {
                return Some(Number::Int(v));
            }
        }
        if matches!(tag, None | Some("fraction")) {
            let (n, d) = text.split_once('/')?;
            let (n, d) = (n.parse::<i64>().ok()?, d.parse::<i64>().ok()?);
            if d > 0 {
                return Some(Number::Fraction(n, d));
            }
        }
        None
    }

    fn int_hull(&self) -> Option<IntRange> {
        match &self.body {
            ValueBody::Scalar { .. } => match self.number(None)? {
                Number::Int(v) => Some(IntRange { min: v, max: v }),
                Number::Fraction(..) => None,
            },
            ValueBody::Range(b) => {
                match (b.first()?.number(self.tag.as_deref())?, b.get(1)?.number(self.tag.as_deref())?) {
                    (Number::Int(min), Number::Int(max)) if min <= max => Some(IntRange { min, max }),
                    _ => None,
                }
            }
            ValueBody::List(items) => {
                let mut hull: Option<IntRange> = None;
                for v in items {
                    let mut v = v.clone();
                    if v.tag.is_none() {
                        v.tag = self.tag.clone();
                    }
                    let r = v.int_hull()?;
                    hull = Some(hull.map_or(r, |h| IntRange { min: h.min.min(r.min), max: h.max.max(r.max) }));
                }
                hull
            }
            ValueBody::Array(_) => None,
        }
    }

    /// The bounds of a two-bound numeric range.
    fn bounds(&self) -> Option<(Number, Number)> {
        let ValueBody::Range(b) = &self.body else { return None };
        if b.len() != 2 {
            return None;
        }
        let lo = b.first()?.number(self.tag.as_deref())?;
        let hi = b.get(1)?.number(self.tag.as_deref())?;
        Some((lo, hi))
    }

    fn same_type(&self, other: &Value) -> bool {
        match (tag_kind(self.tag.as_deref()), tag_kind(other.tag.as_deref())) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }

    fn merged_tag(&self, other: &Value) -> Option<String> {
        self.tag.clone().or_else(|| other.tag.clone())
    }

    /// What `self` and `other` both allow; `None` when nothing (or when `budget` ran out,
    /// which the caller checks).
    pub(super) fn intersect(&self, other: &Value, depth: usize, budget: &mut Budget) -> Option<Value> {
        budget.spend(1);
        if depth > super::MAX_NESTING || budget.exhausted() {
            return None;
        }
        if let ValueBody::List(items) = &self.body {
            let kept = items.iter().filter_map(|v| v.with_tag(&self.tag).intersect(other, depth + 1, budget)).collect();
            return collapse(self.tag.clone(), kept);
        }
        if let ValueBody::List(items) = &other.body {
            let kept =
                items.iter().filter_map(|v| self.intersect(&v.with_tag(&other.tag), depth + 1, budget)).collect();
            return collapse(self.tag.clone().or_else(|| other.tag.clone()), kept);
        }
        if !self.same_type(other) {
            return None;
        }
        let tag = self.merged_tag(other);
        match (&self.body, &other.body) {
            (ValueBody::Scalar { .. }, ValueBody::Scalar { .. }) => {
                let equal = match (self.number(None), other.number(None)) {
                    (Some(a), Some(b)) => a.cmp(b) == Some(std::cmp::Ordering::Equal),
                    _ => self.body == other.body,
                };
                equal.then(|| Value { tag, ..self.clone() })
            }
            (ValueBody::Scalar { .. }, ValueBody::Range(_)) => {
                self.in_range(other).then(|| Value { tag, ..self.clone() })
            }
            (ValueBody::Range(_), ValueBody::Scalar { .. }) => {
                other.in_range(self).then(|| Value { tag, ..other.clone() })
            }
            (ValueBody::Range(_), ValueBody::Range(_)) => match (self.bounds(), other.bounds()) {
                (Some((alo, ahi)), Some((blo, bhi))) => {
                    let lo = if alo.cmp(blo)? == std::cmp::Ordering::Less { blo } else { alo };
                    let hi = if ahi.cmp(bhi)? == std::cmp::Ordering::Greater { bhi } else { ahi };
                    match lo.cmp(hi)? {
                        std::cmp::Ordering::Greater => None,
                        std::cmp::Ordering::Equal => Some(Value { tag, body: scalar(lo.text()) }),
                        std::cmp::Ordering::Less => {
                            let bound = |n: Number| Value { tag: None, body: scalar(n.text()) };
                            Some(Value { tag, body: ValueBody::Range(vec![bound(lo), bound(hi)]) })
                        }
                    }
                }
                // Stepped or non-numeric ranges: only the very same range is known to match.
                _ => (self.body == other.body).then(|| Value { tag, ..self.clone() }),
            },
            _ => (self.body == other.body).then(|| Value { tag, ..self.clone() }),
        }
    }

    fn in_range(&self, range: &Value) -> bool {
        let (Some(v), Some((lo, hi))) = (self.number(range.tag.as_deref()), range.bounds()) else {
            return false;
        };
        v.cmp(lo).is_some_and(|o| o.is_ge()) && v.cmp(hi).is_some_and(|o| o.is_le())
    }

    fn with_tag(&self, tag: &Option<String>) -> Value {
        let mut v = self.clone();
        if v.tag.is_none() {
            v.tag = tag.clone();
        }
        v
    }
}

fn scalar(text: String) -> ValueBody {
    ValueBody::Scalar { text, quoted: false }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(tag) = &self.tag {
            write!(f, "({tag})")?;
        }
        let list = |f: &mut fmt::Formatter<'_>, open: &str, close: &str, items: &[Value]| {
            f.write_str(open)?;
            for (i, v) in items.iter().enumerate() {
                f.write_str(if i == 0 { " " } else { ", " })?;
                write!(f, "{v}")?;
            }
            f.write_str(" ")?;
            f.write_str(close)
        };
        match &self.body {
            ValueBody::Scalar { text, quoted: false } => f.write_str(text),
            ValueBody::Scalar { text, quoted: true } => {
                f.write_str("\"")?;
                for c in text.chars() {
                    if c == '"' || c == '\\' {
                        f.write_str("\\")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("\"")
            }
            ValueBody::List(items) => list(f, "{", "}", items),
            ValueBody::Range(items) => list(f, "[", "]", items),
            ValueBody::Array(items) => list(f, "<", ">", items),
        }
    }
}
