//! Reconciliation of one buffer: one format every participant accepts, and the merged
//! constraints. On failure, a conflict list that names who is in the way.

use std::collections::HashMap;
use std::fmt;

use tracing::debug;

use super::conflict::{dedup, set_of, Conflict, ConstraintKind};
use super::constraints::{merge, BufferConstraints, MergeRules, Merged};
use super::implicit::{AllocationRequest, ModifierSupport};
use super::limits::MAX_PARTICIPANTS;
use super::participant::{ExtentRange, Participant};
use crate::sync::SyncMethod;
use crate::{Format, FormatSet, Fourcc, Layout, Modifier};

/// The layouts an allocation may use: a chain is fully explicit or fully implicit, so
/// this is one or the other, never a mix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainLayout {
    /// Allocate with any of these modifiers; the allocator picks one and reports it.
    /// Sorted numerically for determinism: like the kernel's list, the order means nothing.
    /// May contain `LINEAR`, which is an explicit layout like any other.
    Explicit(Vec<Modifier>),
    /// Allocate without a modifier (INVALID on the wire): every participant only has, or
    /// also accepts, an implicit layout and no explicit modifier is common to all.
    Implicit,
}

impl ChainLayout {
    pub fn modifiers(&self) -> &[Modifier] {
        match self {
            ChainLayout::Explicit(m) => m,
            ChainLayout::Implicit => &[],
        }
    }

    pub fn is_implicit(&self) -> bool {
        matches!(self, ChainLayout::Implicit)
    }
}

/// A reconciled allocation: what to ask the allocator for so that every participant can
/// use every buffer of the collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub fourcc: Fourcc,
    pub layout: ChainLayout,
    /// What every buffer honours: count, alignments, size, CPU access, domain.
    pub constraints: BufferConstraints,
    /// Extents every participant accepts.
    pub width: ExtentRange,
    pub height: ExtentRange,
    /// The participants sharing it, in input order.
    pub participants: Vec<String>,
    /// The participants that may write it (not read-only).
    pub writers: Vec<String>,
    /// How the participants synchronise access: the best method all of them support
    /// ([`crate::sync::SyncMethods::best_common`]).
    pub sync: SyncMethod,
}

impl Allocation {
    pub(crate) fn from_merged(
        fourcc: Fourcc,
        layout: ChainLayout,
        m: Merged,
        participants: Vec<String>,
    ) -> Self {
        Allocation {
            fourcc,
            layout,
            constraints: m.constraints,
            width: m.width,
            height: m.height,
            participants,
            writers: m.writers,
            sync: m.sync,
        }
    }

    /// The allocation request for one buffer of `width` x `height` (rule 2 of
    /// [`super::implicit`]): the explicit modifier list, or no list at all.
    pub fn request(&self, width: u32, height: u32) -> AllocationRequest {
        match &self.layout {
            ChainLayout::Explicit(m) => AllocationRequest::explicit(self.fourcc, width, height, m),
            ChainLayout::Implicit => AllocationRequest::implicit(self.fourcc, width, height),
        }
    }
}

/// Why no buffer suits everyone: every conflict found, not just the first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} conflict(s): {}", .0.len(), .0.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("; "))]
pub struct Conflicts(pub Vec<Conflict>);

/// Why [`reconcile`] gave no allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// More than [`MAX_PARTICIPANTS`] participants: refused before any work.
    #[error("{count} participants are more than the {max} dmabridge reconciles")]
    TooManyParticipants { count: usize, max: usize },
    /// The participants cannot share one buffer, for these reasons.
    #[error(transparent)]
    Conflicts(#[from] Conflicts),
}

impl ReconcileError {
    /// The conflicts, when that is why.
    pub fn conflicts(&self) -> Option<&[Conflict]> {
        match self {
            ReconcileError::Conflicts(Conflicts(c)) => Some(c),
            ReconcileError::TooManyParticipants { .. } => None,
        }
    }
}

impl Conflicts {
    /// Whether a copy between separate buffers could resolve every one of them.
    pub fn copy_can_help(&self) -> bool {
        self.0.iter().all(|c| c.constraint.copy_can_help())
    }
}

/// Reconciles `parts` onto one buffer collection.
///
/// The fourcc is the first one, in the first participant's order of preference (the first
/// that names formats), that every participant accepts with some common layout. The
/// layouts are then every common layout of that fourcc: explicit modifiers if any is
/// common (an implicit allocation would then be legal too, but explicit tells every
/// importer the exact layout), else implicit.
///
/// Time and the size of the conflicts are linear in the participants' lists; more than
/// [`MAX_PARTICIPANTS`] participants are refused.
pub fn reconcile(parts: &[Participant]) -> Result<Allocation, ReconcileError> {
    if parts.len() > MAX_PARTICIPANTS {
        return Err(ReconcileError::TooManyParticipants { count: parts.len(), max: MAX_PARTICIPANTS });
    }
    let refs: Vec<&Participant> = parts.iter().collect();
    Ok(reconcile_refs(&refs, MergeRules { fed_by_copy: false })?)
}

pub(crate) fn reconcile_refs(
    parts: &[&Participant],
    rules: MergeRules,
) -> Result<Allocation, Conflicts> {
    if parts.is_empty() {
        return Err(Conflicts(vec![Conflict::new(
            Vec::<String>::new(),
            ConstraintKind::Format,
            "there are no participants",
            "add a participant",
        )]));
    }
    let (merged, mut conflicts) = merge(parts, rules);
    let format = choose_format(parts);
    match format {
        Ok(_) if !conflicts.is_empty() => Err(Conflicts(conflicts)),
        Ok((fourcc, layout)) => {
            debug!(fourcc = %fourcc.trimmed(), ?layout, buffers = merged.constraints.buffers, "reconciled");
            let names = parts.iter().map(|p| p.name.clone()).collect();
            Ok(Allocation::from_merged(fourcc, layout, merged, names))
        }
        Err(mut fc) => {
            // Format conflicts first: they are usually the ones people came for.
            fc.append(&mut conflicts);
            Err(Conflicts(fc))
        }
    }
}

/// The format sets of the participants that named any, with their index in `parts`.
fn listed<'a>(parts: &[&'a Participant]) -> Vec<(usize, &'a FormatSet)> {
    parts
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.formats.as_set().map(|s| (i, s)))
        .collect()
}

fn choose_format(parts: &[&Participant]) -> Result<(Fourcc, ChainLayout), Vec<Conflict>> {
    let lists = listed(parts);
    let Some(((_, leader), others)) = lists.split_first() else {
        let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
        return Err(vec![Conflict::new(
            names.iter().copied(),
            ConstraintKind::Format,
            "no participant names a format (all accept anything)",
            format!(
                "give {} a format list",
                names.first().copied().unwrap_or("a participant")
            ),
        )]);
    };
    // Most of the work on success: walk the leader's preferences and stop at the first
    // format everyone has. Lists come grouped by fourcc, so the party that lacked the last
    // candidate probably lacks the next one too: ask it first.
    let mut hint = 0usize;
    let mut everyone_has = |f: &Format| -> bool {
        if others.get(hint).is_some_and(|(_, s)| !s.contains(f)) {
            return false;
        }
        match others
            .iter()
            .enumerate()
            .position(|(i, (_, s))| i != hint && !s.contains(f))
        {
            Some(i) => {
                hint = i;
                false
            }
            None => true,
        }
    };
    let Some(first) = leader.iter().find(|f| everyone_has(f)) else {
        return Err(explain(parts, &lists));
    };
    let all_have = |f: &Format| others.iter().all(|(_, s)| s.contains(f));
    let fourcc = first.fourcc;
    let mut implicit = false;
    let mut modifiers: Vec<Modifier> = Vec::new();
    for layout in leader.layouts(fourcc) {
        if all_have(&Format { fourcc, layout }) {
            match layout {
                Layout::Implicit => implicit = true,
                Layout::Explicit(m) => modifiers.push(m),
            }
        }
    }
    modifiers.sort_unstable();
    let layout = if modifiers.is_empty() {
        debug_assert!(implicit);
        ChainLayout::Implicit
    } else {
        ChainLayout::Explicit(modifiers)
    };
    Ok((fourcc, layout))
}

/// Finds the format that the fewest participants block (the first, in preference order,
/// among equals): those participants are the smallest set whose removal leaves a common
/// format. Each of them gets a conflict saying what it lacks, except that the blockers on
/// the wrong side of the implicit/explicit divide share one conflict.
///
/// Linear in the lists: formats are counted in one pass, each participant's support for the
/// target fourcc is computed once, and a conflict names at most a few of the others
/// ([`set_of`]), so neither the work nor the report grows with the square of the number of
/// participants.
fn explain(parts: &[&Participant], lists: &[(usize, &FormatSet)]) -> Vec<Conflict> {
    // Sets hold no repeats, so this counts each list once per format.
    let mut held: HashMap<Format, usize> = HashMap::new();
    for (_, set) in lists {
        for f in set.iter() {
            *held.entry(*f).or_default() += 1;
        }
    }
    let mut best: Option<(Format, usize)> = None;
    'outer: for (_, set) in lists {
        for f in set.iter() {
            let n = held.get(f).copied().unwrap_or(0);
            if best.map_or(true, |(_, most)| n > most) {
                best = Some((*f, n));
                // No format is held by every list (or there would be no conflict): one
                // blocker is the fewest there can be.
                if n + 1 >= lists.len() {
                    break 'outer;
                }
            }
        }
    }
    let Some((target, _)) = best else {
        // Every list is empty.
        let empty: Vec<&str> = lists.iter().map(|(i, _)| parts[*i].name.as_str()).collect();
        return vec![Conflict::new(
            empty.iter().copied(),
            ConstraintKind::Format,
            format!("{} accept no format at all", set_of(&empty)),
            format!("give {} at least one format", set_of(&empty)),
        )];
    };
    let mut blocks = vec![false; parts.len()];
    for (i, set) in lists {
        if !set.contains(&target) {
            blocks[*i] = true;
        }
    }
    let others: Vec<&str> =
        parts.iter().zip(&blocks).filter(|(_, b)| !**b).map(|(p, _)| p.name.as_str()).collect();
    let fourcc = target.fourcc;
    let support: Vec<Option<ModifierSupport>> = parts.iter().map(|p| support_of(p, fourcc)).collect();
    // The others that cannot change side of the implicit/explicit divide.
    let stuck = |implicit_only: bool| -> Vec<&str> {
        parts
            .iter()
            .zip(&blocks)
            .zip(&support)
            .filter(|((_, b), s)| {
                !**b && match s {
                    Some(ModifierSupport::ImplicitOnly) => implicit_only,
                    Some(ModifierSupport::ExplicitOnly(_)) => !implicit_only,
                    _ => false,
                }
            })
            .map(|((p, _), _)| p.name.as_str())
            .collect()
    };
    let (stuck_implicit, stuck_explicit) = (stuck(true), stuck(false));
    debug!(%target, blockers = blocks.iter().filter(|b| **b).count(), "no common format");
    let mut conflicts = Vec::new();
    // Blockers on the wrong side of the divide: (implicit-only side, explicit-only side).
    let (mut divide_imp, mut divide_exp): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    for (b, p) in parts.iter().enumerate().filter(|(b, _)| blocks[*b]) {
        let name = p.name.as_str();
        match (&support[b], target.layout) {
            (Some(ModifierSupport::ExplicitOnly(_)), Layout::Implicit) if !stuck_implicit.is_empty() => {
                divide_exp.push(name);
            }
            (Some(ModifierSupport::ImplicitOnly), Layout::Explicit(_)) if !stuck_explicit.is_empty() => {
                divide_imp.push(name);
            }
            _ => conflicts.push(blocker_conflict(p, support[b].as_ref(), target, &others)),
        }
    }
    if !divide_exp.is_empty() {
        conflicts.push(implicit_conflict(&stuck_implicit, &divide_exp, &fourcc.trimmed()));
    }
    if !divide_imp.is_empty() {
        conflicts.push(implicit_conflict(&divide_imp, &stuck_explicit, &fourcc.trimmed()));
    }
    conflicts
}

fn support_of(p: &Participant, fourcc: Fourcc) -> Option<ModifierSupport> {
    p.formats
        .as_set()
        .and_then(|s| ModifierSupport::from_layouts(s.layouts(fourcc)))
}

/// What participant `p`, with `support` for the target's fourcc, lacks for `target`, which
/// all of `others` accept.
fn blocker_conflict(p: &Participant, support: Option<&ModifierSupport>, target: Format, others: &[&str]) -> Conflict {
    let name = p.name.as_str();
    let f = target.fourcc.trimmed();
    let copy = format!("copy between {{{name}}} and {}", set_of(others));
    let Some(support) = support else {
        let own: Vec<String> = p.formats.as_set().map_or_else(Vec::new, |s| {
            s.fourccs().into_iter().take(5).map(|c| c.trimmed()).collect()
        });
        let shown = own.iter().take(4).cloned().collect::<Vec<_>>().join("/");
        let detail = if own.is_empty() {
            format!("{name} accepts no format at all, and the others share {target}")
        } else {
            format!(
                "{name} accepts only {shown}{}, not {f}, which the others share ({target})",
                if own.len() > 4 { "/..." } else { "" }
            )
        };
        let fix = if own.is_empty() {
            format!("let {name} accept {target}, or {copy}")
        } else {
            format!("drop {name}'s {shown} requirement (let it accept {target}), or {copy}")
        };
        return Conflict::new([name], ConstraintKind::Format, detail, fix);
    };
    let mods: Vec<String> = match support {
        ModifierSupport::ImplicitOnly => vec!["implicit".to_owned()],
        ModifierSupport::ExplicitOnly(m) | ModifierSupport::Either(m) => {
            m.iter().take(4).map(|m| m.display_name()).collect()
        }
    };
    Conflict::new(
        [name],
        ConstraintKind::Modifier,
        format!("{name} accepts {f} only as {}, and the others share {target}", mods.join("/")),
        format!("let {name} accept {target}, or {copy}"),
    )
}

fn implicit_conflict(implicit_only: &[&str], explicit_only: &[&str], f: &str) -> Conflict {
    let (imp, exp) = (set_of(implicit_only), set_of(explicit_only));
    Conflict::new(
        dedup(implicit_only.iter().chain(explicit_only).copied()),
        ConstraintKind::Implicit,
        format!(
            "{imp} support {f} only with implicit modifiers (INVALID) and {exp} only with explicit ones; \
             one buffer's chain must be fully implicit or fully explicit"
        ),
        format!("allocate implicitly (let {exp} accept {f} without a modifier), or copy between {imp} and {exp}"),
    )
}

impl fmt::Display for ChainLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainLayout::Implicit => f.write_str("implicit"),
            ChainLayout::Explicit(m) => {
                let hex: Vec<String> = m.iter().map(|m| m.to_hex()).collect();
                f.write_str(&hex.join(","))
            }
        }
    }
}
