//! Merging every constraint except the format, NvSciBuf-style: sums, maxima of powers of
//! two, range intersections, unions of access, and one memory domain.

use super::conflict::{dedup, set_of, Conflict, ConstraintKind};
use super::participant::{CpuAccess, Domain, ExtentRange, Participant, Usage};
use crate::sync::{SyncMethod, SyncMethods};

/// What every buffer of one collection must honour, merged from its participants'
/// [`Constraints`](super::Constraints): the one constraint set that negotiation gives
/// ([`Allocation`](super::Allocation)), a collection reconciles
/// ([`Reconciled`](crate::collection::Reconciled)) and the engine allocates by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferConstraints {
    /// Buffers in the collection: the sum of everyone's `min_buffers`, at least 1.
    pub buffers: u32,
    /// The smallest of everyone's `max_buffers` (`None`: nobody set one). Never less than
    /// `buffers` when there is no conflict.
    pub max_buffers: Option<u32>,
    /// The least size of each buffer's file in bytes: the maximum of everyone's `min_size`.
    pub min_size: u64,
    /// Alignment of every plane's offset in its file: the maximum of everyone's (powers of
    /// two, so it satisfies each).
    pub offset_align: u64,
    /// Base address alignment in bytes (a power of two).
    pub align: u64,
    /// Row pitch alignment in bytes (a power of two).
    pub stride_align: u64,
    /// The union of everyone's CPU access.
    pub cpu_access: CpuAccess,
    /// The one memory domain.
    pub domain: Domain,
}

impl Default for BufferConstraints {
    /// One buffer, no alignment beyond a byte, no minimum size, no CPU access, any memory.
    fn default() -> Self {
        BufferConstraints {
            buffers: 1,
            max_buffers: None,
            min_size: 0,
            offset_align: 1,
            align: 1,
            stride_align: 1,
            cpu_access: CpuAccess::None,
            domain: Domain::Any,
        }
    }
}

/// The constraints of several participants, merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// What every buffer honours.
    pub constraints: BufferConstraints,
    /// Extents every participant accepts.
    pub width: ExtentRange,
    pub height: ExtentRange,
    /// Participants that are not read-only, in input order.
    pub writers: Vec<String>,
    /// The best sync method every participant supports (cpu-wait at worst, which all do).
    pub sync: SyncMethod,
}

/// Which merge rules apply. A buffer that a conversion fills needs no writer among its
/// participants; every other buffer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergeRules {
    pub fed_by_copy: bool,
}

pub(crate) fn merge(parts: &[&Participant], rules: MergeRules) -> (Merged, Vec<Conflict>) {
    let mut conflicts = Vec::new();
    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();

    let buffers = parts
        .iter()
        .try_fold(0u32, |sum, p| sum.checked_add(p.constraints.min_buffers))
        .unwrap_or_else(|| {
            conflicts.push(Conflict::new(
                names.iter().copied(),
                ConstraintKind::MinBuffers,
                "the sum of min-buffers does not fit in 32 bits",
                "ask for fewer buffers",
            ));
            u32::MAX
        })
        .max(1);

    let max_buffers = parts.iter().filter_map(|p| p.constraints.max_buffers.map(|m| (p, m))).min_by_key(|&(_, m)| m);
    if let Some((limiter, max)) = max_buffers {
        if max < buffers {
            let campers = parts.iter().filter(|p| p.constraints.min_buffers > 0).map(|p| p.name.as_str());
            conflicts.push(Conflict::new(
                dedup(std::iter::once(limiter.name.as_str()).chain(campers)),
                ConstraintKind::MaxBuffers,
                format!(
                    "{} allows at most {max} buffers, but the participants' min-buffers sum to {buffers}",
                    limiter.name
                ),
                format!("raise {}'s max-buffers to {buffers}, or lower min-buffers", limiter.name),
            ));
        }
    }
    let max_buffers = max_buffers.map(|(_, m)| m);
    let min_size = parts.iter().map(|p| p.constraints.min_size).max().unwrap_or(0);
    let offset_align = merge_pow2(parts, |p| p.constraints.offset_align, ConstraintKind::OffsetAlign, &mut conflicts);

    let align = merge_pow2(parts, |p| p.constraints.align, ConstraintKind::Align, &mut conflicts);
    let stride_align = merge_pow2(parts, |p| p.constraints.stride_align, ConstraintKind::StrideAlign, &mut conflicts);
    let width = merge_extent(parts, |p| p.constraints.width, ConstraintKind::Width, &mut conflicts);
    let height = merge_extent(parts, |p| p.constraints.height, ConstraintKind::Height, &mut conflicts);

    let cpu_access = parts
        .iter()
        .fold(CpuAccess::None, |a, p| a.union(p.constraints.cpu_access));
    for p in parts.iter().filter(|p| p.constraints.read_only) {
        if p.constraints.cpu_access.writes() {
            conflicts.push(Conflict::new(
                [p.name.as_str()],
                ConstraintKind::ReadOnly,
                format!(
                    "{} is read-only but asks for CPU {} access",
                    p.name,
                    p.constraints.cpu_access.name()
                ),
                format!("set {}'s cpu-access to read, or read-only=false", p.name),
            ));
        }
        let writes = p.usage.intersection(Usage::WRITES);
        if !writes.is_empty() {
            conflicts.push(Conflict::new(
                [p.name.as_str()],
                ConstraintKind::ReadOnly,
                format!(
                    "{} is read-only but its usage {} writes",
                    p.name,
                    writes.names().join("+")
                ),
                format!("set {} read-only=false, or drop that usage", p.name),
            ));
        }
    }

    let domain = merge_domain(parts, cpu_access, &mut conflicts);

    let writers: Vec<String> = parts
        .iter()
        .filter(|p| !p.constraints.read_only)
        .map(|p| p.name.clone())
        .collect();
    if writers.is_empty() && !rules.fed_by_copy && !parts.is_empty() {
        conflicts.push(Conflict::new(
            names.iter().copied(),
            ConstraintKind::ReadOnly,
            "every participant is read-only, so nobody produces the content",
            format!(
                "set read-only=false on the producer (e.g. {})",
                names.first().copied().unwrap_or("?")
            ),
        ));
    }

    let sync = SyncMethods::best_common(parts.iter().map(|p| &p.sync));

    (
        Merged {
            constraints: BufferConstraints { buffers, max_buffers, min_size, offset_align, align, stride_align, cpu_access, domain },
            width,
            height,
            writers,
            sync,
        },
        conflicts,
    )
}

/// Maximum of powers of two; a value that is not one (zero included) is its owner's conflict.
fn merge_pow2(
    parts: &[&Participant],
    get: impl Fn(&Participant) -> u64,
    kind: ConstraintKind,
    conflicts: &mut Vec<Conflict>,
) -> u64 {
    let mut merged = 1u64;
    for p in parts {
        let v = get(p);
        if v.is_power_of_two() {
            merged = merged.max(v);
        } else {
            let nearest = v
                .checked_next_power_of_two()
                .filter(|n| *n > 0)
                .unwrap_or(1 << 63);
            conflicts.push(Conflict::new(
                [p.name.as_str()],
                kind,
                format!("{v} is not a power of two"),
                format!("set {}'s {} to {}", p.name, kind, nearest.max(1)),
            ));
        }
    }
    merged
}

/// Intersection of ranges. When it is empty, the participant with the largest minimum and
/// the one with the smallest maximum are the pair in the way (no conversion scales, so a
/// copy does not help).
fn merge_extent(
    parts: &[&Participant],
    get: impl Fn(&Participant) -> ExtentRange,
    kind: ConstraintKind,
    conflicts: &mut Vec<Conflict>,
) -> ExtentRange {
    let mut merged = ExtentRange::ANY;
    let mut own_conflict = false;
    for p in parts {
        let r = get(p);
        if r.is_empty() {
            own_conflict = true;
            conflicts.push(Conflict::new(
                [p.name.as_str()],
                kind,
                format!("{}'s {} range {}-{} is empty", p.name, kind, r.min, r.max),
                format!("give {} a {} range with min <= max", p.name, kind),
            ));
        } else {
            merged = merged.intersect(r);
        }
    }
    if let (true, false, Some(&first)) = (merged.is_empty(), own_conflict, parts.first()) {
        let (mut hi_min, mut lo_max) = (first, first);
        for p in parts {
            if get(p).min > get(hi_min).min {
                hi_min = p;
            }
            if get(p).max < get(lo_max).max {
                lo_max = p;
            }
        }
        let (a, b) = (get(hi_min), get(lo_max));
        conflicts.push(Conflict::new(
            [hi_min.name.as_str(), lo_max.name.as_str()],
            kind,
            format!(
                "{} needs {} >= {}, {} needs {} <= {}",
                hi_min.name, kind, a.min, lo_max.name, kind, b.max
            ),
            format!(
                "lower {}'s minimum {} to {}, or raise {}'s maximum to {}",
                hi_min.name, kind, b.max, lo_max.name, a.min
            ),
        ));
    }
    merged
}

/// One memory domain for everyone. Device-local memory is not assumed CPU-mappable.
fn merge_domain(parts: &[&Participant], cpu: CpuAccess, conflicts: &mut Vec<Conflict>) -> Domain {
    let on = |d: Domain| -> Vec<&str> {
        parts
            .iter()
            .filter(|p| p.constraints.domain == d)
            .map(|p| p.name.as_str())
            .collect()
    };
    let (device, system) = (on(Domain::DeviceLocal), on(Domain::System));
    match (device.is_empty(), system.is_empty()) {
        (true, true) => Domain::Any,
        (true, false) => Domain::System,
        (false, false) => {
            conflicts.push(Conflict::new(
                device.iter().chain(&system).copied(),
                ConstraintKind::Domain,
                format!(
                    "{} need device-local memory, {} need system memory",
                    set_of(&device),
                    set_of(&system)
                ),
                format!("copy between {} and {}", set_of(&device), set_of(&system)),
            ));
            Domain::DeviceLocal
        }
        (false, true) => {
            if cpu != CpuAccess::None {
                let cpu_users: Vec<&str> = parts
                    .iter()
                    .filter(|p| p.constraints.cpu_access != CpuAccess::None)
                    .map(|p| p.name.as_str())
                    .collect();
                conflicts.push(Conflict::new(
                    dedup(device.iter().chain(&cpu_users).copied()),
                    ConstraintKind::CpuAccess,
                    format!(
                        "{} need CPU access, but {} need device-local memory, which is not CPU-mappable",
                        set_of(&cpu_users),
                        set_of(&device)
                    ),
                    format!("let {} use domain any, or copy between {} and {}", set_of(&device), set_of(&device), set_of(&cpu_users)),
                ));
            }
            Domain::DeviceLocal
        }
    }
}
