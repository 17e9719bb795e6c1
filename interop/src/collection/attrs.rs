//! Attribute lists, NvSciBuf style (seed 003): each holder's [`Participant`] is its
//! unreconciled list; [`reconcile`] merges them (through [`crate::negotiate`], the one merge
//! dmabridge has) into a [`Reconciled`] list, or a conflict list naming who and which
//! attribute is in the way; [`validate`] checks a reconciled list (with the computed outputs
//! once buffers exist) against unreconciled ones, which is also how a late joiner is judged.

use std::fmt;
use std::os::fd::AsFd;

use crate::dmabuf::{classify, file_size, place, DmaBuf, FdTrust, PlacementError, PlacementRequest, PlaneLayout};
use crate::negotiate::{
    negotiate_with, BufferConstraints, Candidates, Conflict, ConstraintKind, CpuAccess, Domain, Member,
    NegotiateOptions, Outcome, Participant,
};
use crate::{Format, Layout};

use super::limits::{MAX_BUFFERS, MAX_BUFFER_BYTES, MAX_EXTENT, MAX_TOKENS};

/// Joins conflicts into one line, for a failure reason.
pub fn describe(conflicts: &[Conflict]) -> String {
    conflicts.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// NvSciBuf's output attributes: what the allocator actually made, read back from the
/// buffers (every buffer of a collection has the same layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outputs {
    /// Bytes of each memory object (fd) of one buffer: one for a non-disjoint buffer.
    pub object_sizes: Vec<u64>,
    /// Where each plane lies: `object` indexes `object_sizes`.
    pub planes: Vec<PlaneLayout>,
}

impl Outputs {
    /// Bytes of one buffer, all its objects together.
    pub fn size(&self) -> u64 {
        self.object_sizes.iter().fold(0u64, |a, s| a.saturating_add(*s))
    }
}

/// A reconciled attribute list: what to allocate so that every bound list is satisfied, and
/// once allocated, the computed outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// Fourcc and the one layout chosen (the first participant's most preferred among the
    /// common ones).
    pub format: Format,
    /// The extent allocated: the smallest every list accepts (some list must bound it).
    pub width: u32,
    pub height: u32,
    /// What every buffer honours: count (at most [`MAX_BUFFERS`]), alignments, min size,
    /// CPU access, domain.
    pub constraints: BufferConstraints,
    /// One memory object per plane.
    pub disjoint: bool,
    /// The lists it was reconciled from, by participant name, in bind order.
    pub participants: Vec<String>,
    /// The computed outputs; `None` until buffers are allocated.
    pub outputs: Option<Outputs>,
}

/// Collection-wide choices that are not any participant's constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileOptions {
    /// Put each plane in its own memory object (ignored for single-plane formats).
    pub disjoint: bool,
    /// The most bytes one buffer may take, all its files together (default
    /// [`MAX_BUFFER_BYTES`]).
    pub max_buffer_bytes: u64,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        ReconcileOptions { disjoint: false, max_buffer_bytes: MAX_BUFFER_BYTES }
    }
}

/// Reconciles `lists`. Every constraint (formats, extents, buffer counts and their maximum,
/// alignments, min size, CPU access, domain, read-only) is merged by [`negotiate_with`] (no
/// copies, no groups); only the collection's own caps ([`MAX_BUFFERS`], [`MAX_EXTENT`],
/// [`MAX_TOKENS`] lists) are checked here. Every conflict is returned, not just the first.
pub fn reconcile(lists: &[Participant], opts: ReconcileOptions) -> Result<Reconciled, Vec<Conflict>> {
    match reconcile_as(lists, opts, Need::Complete)? {
        Some(r) => Ok(r),
        // Only a partial reconcile stops short of a list; a complete one has a format or a
        // conflict saying nobody named one.
        None => Err(vec![Conflict::new(Vec::<String>::new(), ConstraintKind::Format, "no list names a format", "")]),
    }
}

/// Whether `lists` conflict among themselves, leaving aside the three things a list still
/// to come could give them: a named format (when no list names one), a bound on the width
/// or height (when no list bounds it), and a writer (when every list is read-only). Every
/// other check of [`reconcile`] only gets harder as lists are added (formats and extents
/// are intersected, min-buffers summed, alignments, min sizes and the buffer's size only
/// grow), so lists that fail here fail with any lists added: the conflict is theirs.
/// Lists that pass may still need another list's help to reconcile; a collection judging
/// its dispensable sub-trees asks this, so that a non-dispensable holder whose list needs
/// a dispensable one's help is not taken for the one in the way.
pub(crate) fn conflicts_among(lists: &[Participant], opts: ReconcileOptions) -> Result<(), Vec<Conflict>> {
    reconcile_as(lists, opts, Need::Consistent).map(|_| ())
}

/// How much a reconcile asks of the lists.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Everything needed to allocate: [`reconcile`].
    Complete,
    /// No conflict among them: [`conflicts_among`].
    Consistent,
}

/// The name of the writer a consistency check adds when every list is read-only. A NUL
/// is in no holder's name (`check_name`), so it never meets a real one.
const STAND_IN_WRITER: &str = "\0stand-in writer";

/// [`reconcile`], or with [`Need::Consistent`] [`conflicts_among`], which gives `Ok(None)`
/// where no list names a format (nothing to size, nothing in the way).
fn reconcile_as(lists: &[Participant], opts: ReconcileOptions, need: Need) -> Result<Option<Reconciled>, Vec<Conflict>> {
    let names: Vec<String> = lists.iter().map(|p| p.name.clone()).collect();
    if lists.len() > MAX_TOKENS {
        return Err(vec![Conflict::new(
            Vec::<String>::new(),
            ConstraintKind::Other,
            format!("{} lists are more than the {MAX_TOKENS} a collection reconciles", lists.len()),
            "",
        )]);
    }
    let partial = need == Need::Consistent;
    let mut members: Vec<Member> = lists.iter().cloned().map(Member::Participant).collect();
    // A writer that asks for nothing (any format, extent and sync method, no buffers, no
    // alignment), so that "nobody writes" is not counted, and nothing else changes.
    if partial && lists.iter().all(|p| p.constraints.read_only) {
        let mut writer = Participant::any_format(STAND_IN_WRITER);
        writer.sync = crate::sync::SyncMethods::ALL;
        members.push(Member::Participant(writer));
    }
    let opts_n = NegotiateOptions { allow_copy: false, ..NegotiateOptions::default() };
    let (alloc, mut conflicts) = match negotiate_with(&members, opts_n) {
        Ok(n) => match n.outcome {
            Outcome::Shared(a) => (Some(a), Vec::new()),
            Outcome::Impossible(c) | Outcome::Copy { conflicts: c, .. } => {
                (None, c.into_iter().map(Conflict::of_list).collect::<Vec<_>>())
            }
        },
        Err(e) => (None, vec![Conflict::new(names.clone(), ConstraintKind::Other, e.to_string(), "")]),
    };
    if partial {
        for c in &mut conflicts {
            c.participants.retain(|n| n != STAND_IN_WRITER);
        }
        // With no format named, every format conflict is that absence (the others come only
        // from comparing named lists).
        if lists.iter().all(|p| p.formats.as_set().is_none()) {
            conflicts.retain(|c| c.constraint != ConstraintKind::Format);
        }
    }
    let limit = opts.max_buffer_bytes;
    // Each holder's own min size, naming the holder: over the limit whatever the others say.
    let over_limit = |conflicts: &mut Vec<Conflict>| {
        for p in lists.iter().filter(|p| p.constraints.min_size > limit) {
            conflicts.push(Conflict::new(
                [p.name.clone()],
                ConstraintKind::MinSize,
                format!("min size {} is more than the {limit}-byte limit of one buffer", p.constraints.min_size),
                format!("ask for at most {limit} bytes, or raise the collection's max_buffer_bytes"),
            ));
        }
    };
    let seen = |c: &[Conflict], a: ConstraintKind| c.iter().any(|x| x.constraint == a);
    let Some(alloc) = alloc else {
        if !partial {
            return Err(conflicts);
        }
        // No format to size a buffer by (none named yet): only what is over the limit alone.
        over_limit(&mut conflicts);
        return if conflicts.is_empty() { Ok(None) } else { Err(conflicts) };
    };

    let buffers = alloc.constraints.buffers.max(1);
    if buffers > MAX_BUFFERS && !seen(&conflicts, ConstraintKind::MinBuffers) {
        conflicts.push(Conflict::new(
            names.clone(),
            ConstraintKind::MinBuffers,
            format!("the lists ask for {buffers} buffers, more than the {MAX_BUFFERS} a collection holds"),
            "",
        ));
    }
    for (attr, range) in [(ConstraintKind::Width, alloc.width), (ConstraintKind::Height, alloc.height)] {
        // Unbounded on both sides: nobody said, and a 1-pixel buffer helps no one.
        if range == crate::negotiate::ExtentRange::ANY && !partial {
            conflicts.push(Conflict::new(names.clone(), attr, format!("no list bounds the {attr}; the producer should give one"), ""));
        }
        let v = range.min;
        if v > MAX_EXTENT {
            conflicts.push(Conflict::new(
                names.clone(),
                attr,
                format!("the smallest common {attr} is {v}, more than the {MAX_EXTENT} a collection allocates"),
                "",
            ));
        }
    }
    // Size: each holder's own min size first (naming the holder), then the layout the
    // merged alignments give.
    over_limit(&mut conflicts);
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let format = Format { fourcc: alloc.fourcc, layout: choose_layout(lists, &alloc) };
    let planes = crate::format_info(alloc.fourcc).map_or(1, |i| i.plane_count());
    let disjoint = opts.disjoint && planes > 1;
    // A layout place() cannot compute (an implicit or opaque modifier) is the allocator's
    // to size; only a computed one is judged here.
    let placed = place(&PlacementRequest {
        fourcc: alloc.fourcc,
        layout: format.layout,
        width: alloc.width.min,
        height: alloc.height.min,
        stride_align: alloc.constraints.stride_align,
        offset_align: alloc.constraints.offset_align,
        min_size: alloc.constraints.min_size,
        disjoint,
    });
    let bytes = match placed {
        Ok(p) => Some(p.object_sizes.iter().fold(0u64, |a, s| a.saturating_add(*s))),
        Err(PlacementError::Overflow) => Some(u64::MAX),
        Err(_) => None,
    };
    if let Some(bytes) = bytes.filter(|&b| b > limit) {
        return Err(vec![Conflict::new(
            names,
            ConstraintKind::Other,
            format!("one {} buffer of {}x{} with stride-align {} and offset-align {} takes {bytes} bytes, more than the {limit}-byte limit of one buffer", alloc.fourcc, alloc.width.min, alloc.height.min, alloc.constraints.stride_align, alloc.constraints.offset_align),
            "lower the alignments or the extent, or raise the collection's max_buffer_bytes",
        )]);
    }
    Ok(Some(Reconciled {
        format,
        width: alloc.width.min,
        height: alloc.height.min,
        constraints: BufferConstraints { buffers, ..alloc.constraints },
        disjoint,
        participants: names,
        outputs: None,
    }))
}

/// The first participant's most preferred layout among the common ones (a list's order is
/// its preference; the reconciled modifier list itself is sorted only for determinism).
fn choose_layout(lists: &[Participant], alloc: &crate::negotiate::Allocation) -> Layout {
    let common = alloc.layout.modifiers();
    if alloc.layout.is_implicit() || common.is_empty() {
        return Layout::Implicit;
    }
    let preferred = lists.iter().filter_map(|p| p.formats.as_set()).flat_map(|s| s.iter()).find_map(|f| {
        (f.fourcc == alloc.fourcc).then_some(f.layout.modifier()).flatten().filter(|m| common.contains(m))
    });
    Layout::Explicit(preferred.unwrap_or(common[0]))
}

/// One way a reconciled list fails an unreconciled one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidateFailure {
    /// Index of the list in the slice given to [`validate`].
    pub list: usize,
    pub participant: String,
    pub attribute: ConstraintKind,
    pub detail: String,
}

impl fmt::Display for ValidateFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (list {}): {}: {}", self.participant, self.list, self.attribute, self.detail)
    }
}

impl From<&ValidateFailure> for Conflict {
    fn from(v: &ValidateFailure) -> Self {
        Conflict::new([v.participant.clone()], v.attribute, v.detail.clone(), "")
    }
}

/// Whether `r` satisfies every list of `lists` (NvSciBuf `ValidateReconciled`); if not,
/// every failing attribute of every failing list. With computed outputs, the actual plane
/// offsets, pitches and size are checked; without, the reconciled requirements are.
pub fn validate(r: &Reconciled, lists: &[Participant]) -> Result<(), Vec<ValidateFailure>> {
    let mut out = Vec::new();
    for (i, p) in lists.iter().enumerate() {
        validate_one(r, p, false, |attribute, detail| {
            out.push(ValidateFailure { list: i, participant: p.name.clone(), attribute, detail })
        });
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

/// [`validate`] for one list held through a token with `read_only_rights`.
pub(crate) fn validate_holder(r: &Reconciled, p: &Participant, read_only_rights: bool) -> Vec<Conflict> {
    let mut out = Vec::new();
    validate_one(r, p, read_only_rights, |attribute, detail| {
        out.push(Conflict::new([p.name.clone()], attribute, detail, ""))
    });
    out
}

fn validate_one(r: &Reconciled, p: &Participant, read_only_rights: bool, mut fail: impl FnMut(ConstraintKind, String)) {
    let c = &p.constraints;
    let rc = &r.constraints;
    if !p.formats.accepts(&r.format) {
        let fourcc_ok = match &p.formats {
            Candidates::Any => true,
            Candidates::Only(s) => s.iter().any(|f| f.fourcc == r.format.fourcc),
        };
        if fourcc_ok {
            fail(ConstraintKind::Modifier, format!("{} does not list layout {} for {}", p.name, r.format.layout, r.format.fourcc.trimmed()));
        } else {
            fail(ConstraintKind::Format, format!("{} does not list {}", p.name, r.format.fourcc.trimmed()));
        }
    }
    for (attr, v, range) in [(ConstraintKind::Width, r.width, c.width), (ConstraintKind::Height, r.height, c.height)] {
        if v < range.min || v > range.max {
            fail(attr, format!("the buffers are {v} in {attr}, {} accepts {range}", p.name));
        }
    }
    if rc.buffers < c.min_buffers {
        fail(ConstraintKind::MinBuffers, format!("the collection has {} buffers, {} needs {}", rc.buffers, p.name, c.min_buffers));
    }
    if let Some(max) = c.max_buffers.filter(|m| rc.buffers > *m) {
        fail(ConstraintKind::MaxBuffers, format!("the collection has {} buffers, {} takes at most {max}", rc.buffers, p.name));
    }
    let divides = |need: u64, have: u64| need != 0 && need.is_power_of_two() && have % need == 0;
    if !divides(c.align, rc.align) {
        fail(ConstraintKind::Align, format!("base alignment {} does not satisfy {}'s {}", rc.align, p.name, c.align));
    }
    match &r.outputs {
        Some(o) => {
            for (k, pl) in o.planes.iter().enumerate() {
                if !divides(c.stride_align, pl.stride) {
                    fail(ConstraintKind::StrideAlign, format!("plane {k} pitch {} is not a multiple of {}'s stride-align {}", pl.stride, p.name, c.stride_align));
                }
                if !divides(c.offset_align, pl.offset) {
                    fail(ConstraintKind::OffsetAlign, format!("plane {k} offset {} is not a multiple of {}'s offset-align {}", pl.offset, p.name, c.offset_align));
                }
            }
            if let Some(small) = o.object_sizes.iter().find(|s| **s < c.min_size) {
                fail(ConstraintKind::MinSize, format!("a buffer's file is {small} bytes, {} needs {}", p.name, c.min_size));
            }
        }
        None => {
            if !divides(c.stride_align, rc.stride_align) {
                fail(ConstraintKind::StrideAlign, format!("stride alignment {} does not satisfy {}'s {}", rc.stride_align, p.name, c.stride_align));
            }
            if !divides(c.offset_align, rc.offset_align) {
                fail(ConstraintKind::OffsetAlign, format!("offset alignment {} does not satisfy {}'s {}", rc.offset_align, p.name, c.offset_align));
            }
            if rc.min_size < c.min_size {
                fail(ConstraintKind::MinSize, format!("min size {} is below {}'s {}", rc.min_size, p.name, c.min_size));
            }
        }
    }
    if c.domain != Domain::Any && c.domain != rc.domain {
        fail(ConstraintKind::Domain, format!("the buffers are in {} memory, {} needs {}", rc.domain.name(), p.name, c.domain.name()));
    }
    let cpu = &c.cpu_access;
    if (cpu.reads() && !rc.cpu_access.reads()) || (cpu.writes() && !rc.cpu_access.writes()) {
        fail(ConstraintKind::CpuAccess, format!("the buffers allow CPU {} access, {} needs {}", rc.cpu_access.name(), p.name, cpu.name()));
    }
    if *cpu != CpuAccess::None && rc.domain == Domain::DeviceLocal {
        fail(ConstraintKind::CpuAccess, format!("the buffers are device-local (not CPU-mappable), {} needs CPU {} access", p.name, cpu.name()));
    }
    if read_only_rights && !c.read_only {
        fail(ConstraintKind::ReadOnly, format!("{} holds a read-only token but asks to write", p.name));
    }
}

/// Why buffers from an allocator do not fit the list they were made for.
#[derive(Debug, thiserror::Error)]
pub enum OutputsError {
    #[error("the allocator made {got} buffers, the list asks for {want}")]
    Count { want: u32, got: usize },
    #[error("buffer {index} is {got}, the list says {want}")]
    Shape { index: usize, want: String, got: String },
    #[error("buffer {index} is laid out differently from buffer 0 (plane offsets, pitches or objects)")]
    Inconsistent { index: usize },
    #[error("buffer {index} plane {plane}: finding its memory object's size failed: {source}")]
    Size { index: usize, plane: usize, source: std::io::Error },
}

/// The computed outputs of `buffers`, after checking that they are what `r` describes: the
/// count, the format, the extent, and one layout shared by all.
pub fn outputs_of(r: &Reconciled, buffers: &[DmaBuf]) -> Result<Outputs, OutputsError> {
    if buffers.len() != r.constraints.buffers as usize {
        return Err(OutputsError::Count { want: r.constraints.buffers, got: buffers.len() });
    }
    let mut first: Option<Outputs> = None;
    for (index, b) in buffers.iter().enumerate() {
        let want = (r.format, r.width, r.height);
        let got = (b.format(), b.width(), b.height());
        if want != got {
            return Err(OutputsError::Shape { index, want: format!("{want:?}"), got: format!("{got:?}") });
        }
        let o = outputs_of_one(b, index)?;
        match &first {
            None => first = Some(o),
            Some(f) if *f != o => return Err(OutputsError::Inconsistent { index }),
            Some(_) => {}
        }
    }
    first.ok_or(OutputsError::Count { want: r.constraints.buffers, got: 0 })
}

/// One buffer's outputs as its files say: its planes ([`DmaBuf::plane_layouts`]) and each
/// memory object's real size. `index` only names the buffer in an error.
pub(crate) fn outputs_of_one(b: &DmaBuf, index: usize) -> Result<Outputs, OutputsError> {
    let planes = b.plane_layouts();
    let mut object_sizes = Vec::new();
    // Objects are numbered in order of first appearance, so object k's first plane is the
    // first plane whose object is k.
    for (plane, (p, layout)) in b.planes().zip(&planes).enumerate() {
        if layout.object == object_sizes.len() {
            let size = classify(p.fd.as_fd(), FdTrust::Untrusted)
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|class| file_size(p.fd, class))
                .map_err(|source| OutputsError::Size { index, plane, source })?;
            object_sizes.push(size);
        }
    }
    Ok(Outputs { object_sizes, planes })
}
