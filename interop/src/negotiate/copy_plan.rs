//! Copy plans: when no single buffer serves everyone, split the participants into groups
//! that each share a buffer, and feed every group from the producer's group through one
//! conversion that #5 (the copy fallback) provides.
//!
//! Search: every partition of the participants (restricted growth strings, Bell(8) = 4140
//! for the 8-participant limit), with each subset's feasibility computed once (at most
//! 2^8 subsets). Data flows from the group holding the first writer (the producer) to
//! each other group, a star: one conversion per other group. A conversion may be a chain
//! of steps (tiled YUV -> RGB, RGB -> tiled YUV, tiled -> tiled through linear), fused where
//! the copy fallback has a fused path; [`ConversionKind::steps`] names them. The cost of a
//! conversion is the bytes it reads plus the bytes it writes per frame, with tile padding
//! (`tiling::tiled_size`, which is `format_info`'s packed size for linear), at the largest
//! extent everyone accepts (capped at 16384 per side, so that sizes cannot overflow). A
//! group is fed without a colour conversion wherever one that keeps the pixels exists. The cheapest plan wins; ties go
//! to fewer groups, then to the first found (participants stay with earlier ones).
//!
//! Each group is pinned to one explicit format: a conversion must know the layout it
//! reads or writes, so implicit layouts and modifiers without a [`TileLayout`] cannot take
//! part, and the kernel's choice among several modifiers is not left open.

use std::collections::HashMap;
use std::fmt;

use tracing::debug;

use super::constraints::{merge, MergeRules};
use super::participant::{ExtentRange, Participant};
use super::reconcile::{Allocation, ChainLayout};
use crate::tiling::{tiled_size, FrameConversion, Step};
use crate::{Format, Fourcc, Layout, TileLayout};

/// The most participants a copy plan is searched for (Bell(8) = 4140 partitions).
pub const MAX_COPY_PARTICIPANTS: usize = 8;

/// Extents are capped at this for costs, so that `u64` byte counts cannot overflow.
const COST_EXTENT_CAP: u32 = 16384;

/// A conversion #5 (the copy fallback) provides, from one explicit format to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConversionKind {
    /// Tiled layout to linear, same fourcc.
    Detile(TileLayout),
    /// Linear to a tiled layout, same fourcc.
    Tile(TileLayout),
    /// Linear to linear, same fourcc (a move between memory domains or CPU visibility).
    CopyLinear,
    /// NV12 or P010 (linear) to an RGB format (linear): AR24, XR24, AB24, XB24, RA24,
    /// RX24, BA24, BX24, AR30, XR30.
    YuvToRgb { from: Fourcc, to: Fourcc },
    /// An 8-bit RGB format (linear) to NV12 (linear).
    RgbToYuv { from: Fourcc, to: Fourcc },
    /// Anything else a chain of those steps does, fused where a fused path exists: tiled
    /// YUV -> RGB (one pass), RGB -> tiled YUV, tiled -> tiled through linear.
    Chain { from_layout: TileLayout, from: Fourcc, to_layout: TileLayout, to: Fourcc },
}

impl ConversionKind {
    /// The conversion from `from` to `to`, if #5 provides one, in one step or a chain.
    pub fn between(from: Format, to: Format) -> Option<ConversionKind> {
        let (Layout::Explicit(fm), Layout::Explicit(tm)) = (from.layout, to.layout) else {
            return None;
        };
        let (src, dst) = (TileLayout::from_modifier(fm)?, TileLayout::from_modifier(tm)?);
        // #5 defines each layout for some fourccs only (the decoder layouts for NV12), and
        // colour conversion for some pairs: the frame conversion's steps are the judge,
        // asked at a small valid size.
        let steps = FrameConversion::new((src, from.fourcc), (dst, to.fourcc), 64, 64).steps().ok()?;
        let one = match steps.as_slice() {
            [Step::Copy] => ConversionKind::CopyLinear,
            [Step::Detile(t)] => ConversionKind::Detile(*t),
            [Step::Tile(t)] => ConversionKind::Tile(*t),
            [Step::YuvToRgb { layout: TileLayout::Linear, from, to }] => ConversionKind::YuvToRgb { from: *from, to: *to },
            [Step::RgbToNv12 { from }] => ConversionKind::RgbToYuv { from: *from, to: Fourcc::NV12 },
            _ => ConversionKind::Chain { from_layout: src, from: from.fourcc, to_layout: dst, to: to.fourcc },
        };
        Some(one)
    }

    /// (layout, fourcc) read and written, for a conversion whose source group holds `from`.
    pub fn endpoints(&self, from: Fourcc) -> ((TileLayout, Fourcc), (TileLayout, Fourcc)) {
        let linear = TileLayout::Linear;
        match *self {
            ConversionKind::Detile(t) => ((t, from), (linear, from)),
            ConversionKind::Tile(t) => ((linear, from), (t, from)),
            ConversionKind::CopyLinear => ((linear, from), (linear, from)),
            ConversionKind::YuvToRgb { from, to } | ConversionKind::RgbToYuv { from, to } => ((linear, from), (linear, to)),
            ConversionKind::Chain { from_layout, from, to_layout, to } => ((from_layout, from), (to_layout, to)),
        }
    }

    /// The steps, in order (what `dmabridge convert` runs for it).
    pub fn steps(&self, from: Fourcc) -> Vec<Step> {
        let ((fl, f), (tl, t)) = self.endpoints(from);
        FrameConversion::new((fl, f), (tl, t), 64, 64).steps().unwrap_or_default()
    }
}

impl fmt::Display for ConversionKind {
    /// The JSON `kind`: `detile samsung-64x32 -> linear`, `yuv->rgb NV12 -> AB24`, `copy
    /// linear`; a chain as its steps joined with `, then `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConversionKind::Detile(t) => write!(f, "detile {t} -> linear"),
            ConversionKind::Tile(t) => write!(f, "tile linear -> {t}"),
            ConversionKind::CopyLinear => f.write_str("copy linear"),
            ConversionKind::YuvToRgb { from, to } => {
                write!(f, "yuv->rgb {} -> {}", from.trimmed(), to.trimmed())
            }
            ConversionKind::RgbToYuv { from, to } => {
                write!(f, "rgb->yuv {} -> {}", from.trimmed(), to.trimmed())
            }
            ConversionKind::Chain { from, .. } => {
                let steps: Vec<String> = self.steps(*from).iter().map(|s| s.to_string()).collect();
                f.write_str(&steps.join(", then "))
            }
        }
    }
}

/// One buffer collection of a copy plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyGroup {
    /// The format the group's buffers are allocated with (always explicit).
    pub format: Format,
    /// Its allocation; `layout` holds exactly `format`'s modifier.
    pub allocation: Allocation,
}

/// One conversion per frame, from one group's buffer to another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversion {
    pub from_group: usize,
    pub to_group: usize,
    pub kind: ConversionKind,
    /// Bytes read plus bytes written per frame (see the module docs).
    pub bytes_per_frame: u64,
}

/// Groups and the conversions between them. Group 0 holds the producer (the first writer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    pub groups: Vec<CopyGroup>,
    pub conversions: Vec<Conversion>,
    pub bytes_per_frame: u64,
    /// The frame size (width, height) the byte counts are for.
    pub cost_extent: (u32, u32),
}

/// Why no copy plan exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyPlanError {
    #[error(
        "{0} participants are more than the {MAX_COPY_PARTICIPANTS} a copy plan is searched for"
    )]
    TooManyParticipants(usize),
    #[error("no participant writes the buffer, so there is nothing to copy from")]
    NoWriter,
    #[error("no split into groups is joined by conversions dmabridge provides (detile, tile, tiled NV12/P010 -> RGB, RGB -> tiled NV12, linear copy)")]
    NoSplit,
}

/// What a subset of participants can share, if anything.
struct GroupInfo {
    /// Convertible common formats in preference order, one per (fourcc, layout).
    candidates: Vec<(Format, u64)>,
}

/// Plans copies for `parts`, which already failed to share one buffer.
pub(crate) fn plan_copy(parts: &[&Participant]) -> Result<CopyPlan, CopyPlanError> {
    let n = parts.len();
    if n > MAX_COPY_PARTICIPANTS {
        return Err(CopyPlanError::TooManyParticipants(n));
    }
    let producer = parts
        .iter()
        .position(|p| !p.constraints.read_only)
        .ok_or(CopyPlanError::NoWriter)?;
    let (w, h) = cost_extent(parts);
    let mut memo: HashMap<u32, Option<GroupInfo>> = HashMap::new();
    let mut edges_memo: EdgeMemo = HashMap::new();
    let mut best: Option<Candidate> = None;
    let mut rgs = vec![0usize; n];
    partitions(&mut rgs, 1, 0, &mut |assign| {
        let count = assign.iter().max().map_or(0, |m| m + 1);
        if count < 2 {
            return;
        }
        let masks: Vec<u32> = (0..count)
            .map(|g| {
                assign
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| **a == g)
                    .fold(0u32, |m, (i, _)| m | 1 << i)
            })
            .collect();
        for &mask in &masks {
            memo.entry(mask)
                .or_insert_with(|| group_info(parts, mask, w, h));
        }
        let source = assign[producer];
        if let Some(c) = evaluate(&masks, source, &memo, &mut edges_memo) {
            let better = best.as_ref().map_or(true, |b| {
                (c.bytes, c.masks.len()) < (b.bytes, b.masks.len())
            });
            if better {
                best = Some(c);
            }
        }
    });
    let best = best.ok_or(CopyPlanError::NoSplit)?;
    debug!(bytes = best.bytes, groups = best.masks.len(), "copy plan");
    Ok(build(parts, best, (w, h)))
}

/// The extent costs are computed at: the largest everyone accepts, capped.
fn cost_extent(parts: &[&Participant]) -> (u32, u32) {
    let mut wr = ExtentRange::ANY;
    let mut hr = ExtentRange::ANY;
    for p in parts {
        wr = wr.intersect(p.constraints.width);
        hr = hr.intersect(p.constraints.height);
    }
    (
        wr.max.clamp(1, COST_EXTENT_CAP),
        hr.max.clamp(1, COST_EXTENT_CAP),
    )
}

/// Calls `f` with every set partition of `assign.len()` items as a restricted growth
/// string: item 0 in group 0, each next item in an existing group or the next new one.
fn partitions(assign: &mut [usize], i: usize, max: usize, f: &mut dyn FnMut(&[usize])) {
    if i >= assign.len() {
        f(assign);
        return;
    }
    for g in 0..=max + 1 {
        assign[i] = g;
        partitions(assign, i + 1, max.max(g), f);
    }
}

fn members(parts: &[&Participant], mask: u32) -> Vec<usize> {
    (0..parts.len()).filter(|i| mask & (1 << i) != 0).collect()
}

fn group_info(parts: &[&Participant], mask: u32, w: u32, h: u32) -> Option<GroupInfo> {
    let idx = members(parts, mask);
    let group: Vec<&Participant> = idx.iter().map(|&i| parts[i]).collect();
    // A group fed by a conversion needs no writer; every other rule still holds.
    let (_, conflicts) = merge(&group, MergeRules { fed_by_copy: true });
    if !conflicts.is_empty() {
        return None;
    }
    let leader = group.iter().find_map(|p| p.formats.as_set())?;
    let mut candidates: Vec<(Format, u64)> = Vec::new();
    for f in leader.iter() {
        let Layout::Explicit(m) = f.layout else {
            continue;
        };
        let Some(layout) = TileLayout::from_modifier(m) else {
            continue;
        };
        if !group.iter().all(|p| p.formats.accepts(f)) {
            continue;
        }
        // The buffer's real size, tile padding included; layouts #5 does not define for
        // this fourcc are not candidates.
        let Ok(bytes) = tiled_size(layout, f.fourcc, w, h).map(|g| g.size) else {
            continue;
        };
        candidates.push((*f, bytes));
    }
    (!candidates.is_empty()).then_some(GroupInfo { candidates })
}

struct Candidate {
    masks: Vec<u32>,
    formats: Vec<Format>,
    /// (to_group, kind, bytes), with group indices into `masks`.
    edges: Vec<(usize, ConversionKind, u64)>,
    source: usize,
    bytes: u64,
}

type EdgeMemo = HashMap<(Format, u32), Option<(Format, ConversionKind, u64)>>;

/// The cheapest way to feed the group `mask` from `src` (first in its preference on ties).
fn cheapest_edge(
    src: Format,
    src_bytes: u64,
    mask: u32,
    info: &GroupInfo,
    memo: &mut EdgeMemo,
) -> Option<(Format, ConversionKind, u64)> {
    *memo.entry((src, mask)).or_insert_with(|| {
        // Every format the group can take that #5 reaches from `src`, in one step or a chain.
        info.candidates
            .iter()
            .enumerate()
            .filter_map(|(rank, &(t, bytes))| {
                let kind = ConversionKind::between(src, t)?;
                Some((t, kind, src_bytes.saturating_add(bytes), rank))
            })
            // A colour conversion changes the pixels (subsampling, rounding): it is taken
            // only where no conversion that keeps them can feed the group, however few bytes
            // it would move.
            .min_by_key(|(t, _, cost, rank)| (t.fourcc != src.fourcc, *cost, *rank))
            .map(|(t, k, c, _)| (t, k, c))
    })
}

/// The cheapest choice of formats for one partition, if every group can be fed.
fn evaluate(
    masks: &[u32],
    source: usize,
    groups: &HashMap<u32, Option<GroupInfo>>,
    edges_memo: &mut EdgeMemo,
) -> Option<Candidate> {
    let infos: Vec<&GroupInfo> = masks
        .iter()
        .map(|m| groups.get(m).and_then(Option::as_ref))
        .collect::<Option<_>>()?;
    let mut best: Option<Candidate> = None;
    for &(src_format, src_bytes) in &infos[source].candidates {
        let mut formats = vec![src_format; masks.len()];
        let mut edges = Vec::new();
        let mut total = 0u64;
        let mut feasible = true;
        for (g, info) in infos.iter().enumerate().filter(|(g, _)| *g != source) {
            let Some((f, kind, cost)) =
                cheapest_edge(src_format, src_bytes, masks[g], info, edges_memo)
            else {
                feasible = false;
                break;
            };
            formats[g] = f;
            edges.push((g, kind, cost));
            total = total.saturating_add(cost);
        }
        if feasible && best.as_ref().map_or(true, |b| total < b.bytes) {
            best = Some(Candidate {
                masks: masks.to_vec(),
                formats,
                edges,
                source,
                bytes: total,
            });
        }
    }
    best
}

fn build(parts: &[&Participant], c: Candidate, cost_extent: (u32, u32)) -> CopyPlan {
    // Group 0 is the producer's; the rest keep their order (by first participant).
    let mut order: Vec<usize> = vec![c.source];
    order.extend((0..c.masks.len()).filter(|g| *g != c.source));
    let new_index = |g: usize| order.iter().position(|o| *o == g).unwrap_or(0);
    let groups = order
        .iter()
        .map(|&g| {
            let group: Vec<&Participant> = members(parts, c.masks[g])
                .into_iter()
                .map(|i| parts[i])
                .collect();
            let (merged, _) = merge(
                &group,
                MergeRules {
                    fed_by_copy: g != c.source,
                },
            );
            let format = c.formats[g];
            let layout = ChainLayout::Explicit(format.layout.modifier().into_iter().collect());
            let names = group.iter().map(|p| p.name.clone()).collect();
            CopyGroup {
                format,
                allocation: Allocation::from_merged(format.fourcc, layout, merged, names),
            }
        })
        .collect();
    let mut conversions: Vec<Conversion> = c
        .edges
        .iter()
        .map(|&(g, kind, bytes)| Conversion {
            from_group: 0,
            to_group: new_index(g),
            kind,
            bytes_per_frame: bytes,
        })
        .collect();
    conversions.sort_by_key(|cv| cv.to_group);
    CopyPlan {
        groups,
        conversions,
        bytes_per_frame: c.bytes,
        cost_extent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FormatSet;

    #[test]
    fn partitions_are_all_set_partitions_once() {
        // Bell numbers: 1, 2, 5, 15, 52, ..., 4140 for 8.
        for (n, bell) in [(1, 1), (2, 2), (3, 5), (4, 15), (5, 52), (8, 4140)] {
            let mut seen = std::collections::HashSet::new();
            let mut assign = vec![0usize; n];
            partitions(&mut assign, 1, 0, &mut |a| {
                assert!(seen.insert(a.to_vec()), "{a:?} twice");
            });
            assert_eq!(seen.len(), bell, "n = {n}");
        }
    }

    #[test]
    fn more_than_eight_participants_are_not_searched() {
        let set: FormatSet = [Format::linear(Fourcc::NV12)].into_iter().collect();
        let parts: Vec<Participant> = (0..9)
            .map(|i| Participant::new(format!("p{i}"), set.clone()))
            .collect();
        let refs: Vec<&Participant> = parts.iter().collect();
        assert_eq!(plan_copy(&refs), Err(CopyPlanError::TooManyParticipants(9)));
    }

    #[test]
    fn costs_use_the_common_extent_capped() {
        let p = Participant::new("a", FormatSet::new())
            .constrain(|c| c.width = ExtentRange::new(16, 1920));
        assert_eq!(cost_extent(&[&p]), (1920, COST_EXTENT_CAP));
    }
}
