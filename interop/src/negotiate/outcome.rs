//! The whole negotiation: fallback-group selections, one shared buffer if possible, else a
//! copy plan, else the conflicts that stand in the way.

use std::ops::ControlFlow;

use tracing::{debug, info};

use super::conflict::{Conflict, ConstraintKind};
use super::constraints::MergeRules;
use super::copy_plan::{plan_copy, CopyPlan, CopyPlanError};
use super::groups::{combinations, for_each_selection, Member, MAX_COMBINATIONS};
use super::reconcile::{reconcile_refs, Allocation, Conflicts};

/// What the negotiation decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Everyone shares one buffer collection.
    Shared(Allocation),
    /// Separate collections joined by conversions. `conflicts` says why one was not enough.
    Copy {
        plan: CopyPlan,
        conflicts: Vec<Conflict>,
    },
    /// Neither works; the conflicts say who is in the way and what would help.
    Impossible(Vec<Conflict>),
}

/// An [`Outcome`] and how much of the fallback-group space it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiation {
    pub outcome: Outcome,
    /// Selections of group children tried for a shared buffer (1 without groups).
    pub combinations_tried: usize,
    /// Whether [`NegotiateOptions::max_combinations`] stopped the search early.
    pub cap_hit: bool,
    /// The names of the participants of the selection the outcome is about.
    pub participants: Vec<String>,
}

/// Tuning of [`negotiate_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegotiateOptions {
    /// Most selections of group children tried, for sharing and again for copying.
    pub max_combinations: usize,
    /// Whether to look for a copy plan when no buffer can be shared.
    pub allow_copy: bool,
}

impl Default for NegotiateOptions {
    fn default() -> Self {
        NegotiateOptions {
            max_combinations: MAX_COMBINATIONS,
            allow_copy: true,
        }
    }
}

/// [`negotiate_with`] with the default options.
pub fn negotiate(members: &[Member]) -> Negotiation {
    negotiate_with(members, NegotiateOptions::default())
}

/// Negotiates among `members`, in preference order.
///
/// Selections of fallback-group children are tried in order (first child preferred); the
/// first that reconciles onto one buffer wins. If none does, the selections whose
/// conflicts a copy could resolve are tried, in the same order, for a copy plan. The
/// reported conflicts are those of the most preferred selection.
pub fn negotiate_with(members: &[Member], opts: NegotiateOptions) -> Negotiation {
    let total = combinations(members);
    let mut tried = 0usize;
    let mut cap_hit = false;
    let mut shared: Option<(Allocation, Vec<String>)> = None;
    let mut first: Option<(Conflicts, Vec<String>)> = None;
    let mut copyable: Vec<usize> = Vec::new();
    let _ = for_each_selection(members, &mut |sel| {
        if tried >= opts.max_combinations {
            cap_hit = true;
            return ControlFlow::Break(());
        }
        let index = tried;
        tried += 1;
        match reconcile_refs(sel, MergeRules { fed_by_copy: false }) {
            Ok(a) => {
                shared = Some((a, names(sel)));
                ControlFlow::Break(())
            }
            Err(c) => {
                if c.copy_can_help() {
                    copyable.push(index);
                }
                if first.is_none() {
                    first = Some((c, names(sel)));
                }
                ControlFlow::Continue(())
            }
        }
    });
    debug!(tried, total, cap_hit, "selections tried for sharing");
    if let Some((alloc, participants)) = shared {
        info!(fourcc = %alloc.fourcc.trimmed(), layout = %alloc.layout, "shared buffer");
        return Negotiation {
            outcome: Outcome::Shared(alloc),
            combinations_tried: tried,
            cap_hit,
            participants,
        };
    }
    let Some((Conflicts(mut conflicts), participants)) = first else {
        let c = Conflict::new(
            Vec::<String>::new(),
            ConstraintKind::FallbackGroups,
            "a fallback group has no children, so no selection of participants exists",
            "give every group at least one child",
        );
        return Negotiation {
            outcome: Outcome::Impossible(vec![c]),
            combinations_tried: 0,
            cap_hit,
            participants: vec![],
        };
    };
    if cap_hit {
        conflicts.push(Conflict::new(
            participants.iter().map(String::as_str),
            ConstraintKind::FallbackGroups,
            format!(
                "tried {tried} of {total} combinations of fallback-group children; the cap is {}",
                opts.max_combinations
            ),
            "put the likeliest alternatives first in each group, or use fewer alternatives",
        ));
    }
    if opts.allow_copy && !copyable.is_empty() {
        match find_copy(members, &copyable) {
            Ok((plan, sel_names, index)) => {
                info!(groups = plan.groups.len(), bytes = plan.bytes_per_frame, "copy plan");
                let why = if index == 0 { conflicts } else { reconcile_why(members, index) };
                return Negotiation {
                    outcome: Outcome::Copy { plan, conflicts: why },
                    combinations_tried: tried,
                    cap_hit,
                    participants: sel_names,
                };
            }
            Err(e) => conflicts.push(Conflict::new(
                participants.iter().map(String::as_str),
                ConstraintKind::Copy,
                e.to_string(),
                "let the groups share a linear format, or give one side a format a conversion can reach",
            )),
        }
    }
    info!(conflicts = conflicts.len(), "no allocation");
    Negotiation {
        outcome: Outcome::Impossible(conflicts),
        combinations_tried: tried,
        cap_hit,
        participants,
    }
}

fn names(sel: &[&super::participant::Participant]) -> Vec<String> {
    sel.iter().map(|p| p.name.clone()).collect()
}

/// The first copy plan among the selections numbered in `copyable` (ascending), with the
/// selection's names and number; else the error for the most preferred of them.
fn find_copy(
    members: &[Member],
    copyable: &[usize],
) -> Result<(CopyPlan, Vec<String>, usize), CopyPlanError> {
    let mut index = 0usize;
    let mut found = None;
    let mut first_err = None;
    let _ = for_each_selection(members, &mut |sel| {
        let i = index;
        index += 1;
        if copyable.binary_search(&i).is_err() {
            return if copyable.last().is_some_and(|l| i > *l) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            };
        }
        match plan_copy(sel) {
            Ok(plan) => {
                found = Some((plan, names(sel), i));
                ControlFlow::Break(())
            }
            Err(e) => {
                first_err.get_or_insert(e);
                ControlFlow::Continue(())
            }
        }
    });
    found.ok_or(first_err.unwrap_or(CopyPlanError::NoSplit))
}

/// The sharing conflicts of selection number `index`.
fn reconcile_why(members: &[Member], index: usize) -> Vec<Conflict> {
    let mut i = 0usize;
    let mut out = Vec::new();
    let _ = for_each_selection(members, &mut |sel| {
        if i == index {
            if let Err(Conflicts(c)) = reconcile_refs(sel, MergeRules { fed_by_copy: false }) {
                out = c;
            }
            return ControlFlow::Break(());
        }
        i += 1;
        ControlFlow::Continue(())
    });
    out
}
