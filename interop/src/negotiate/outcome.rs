//! The whole negotiation: fallback-group selections, one shared buffer if possible, else a
//! copy plan, else the conflicts that stand in the way.

use std::ops::ControlFlow;

use tracing::{debug, info};

use super::conflict::{Conflict, ConstraintKind};
use super::constraints::MergeRules;
use super::copy_plan::{plan_copy, CopyPlan, CopyPlanError};
use super::groups::{for_each_selection, leaves, Member, MAX_COMBINATIONS};
use super::limits::{MAX_GROUP_DEPTH, MAX_PARTICIPANTS};
use super::participant::Participant;
use super::reconcile::{reconcile_refs, Allocation, Conflicts};

/// Why a negotiation was not attempted. (Once attempted, it always gives a [`Negotiation`]:
/// failing to agree is [`Outcome::Impossible`], not an error.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NegotiateError {
    /// More participants than [`MAX_PARTICIPANTS`], counting every fallback-group child.
    #[error("{count} participants (counting every fallback-group child) are more than the {max} dmabridge negotiates among")]
    TooManyParticipants { count: usize, max: usize },
    /// Fallback groups nested deeper than [`MAX_GROUP_DEPTH`].
    #[error("fallback groups nest deeper than {max} levels")]
    GroupsTooDeep { max: usize },
}

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
pub fn negotiate(members: &[Member]) -> Result<Negotiation, NegotiateError> {
    negotiate_with(members, NegotiateOptions::default())
}

/// Each member's choices ([`leaves`]), refused beyond [`MAX_PARTICIPANTS`] participants in
/// all or [`MAX_GROUP_DEPTH`] levels of groups.
fn choices(members: &[Member]) -> Result<Vec<Vec<&Participant>>, NegotiateError> {
    let mut count = 0usize;
    let mut out = Vec::with_capacity(members.len().min(MAX_PARTICIPANTS));
    for m in members {
        let l = leaves(m, MAX_GROUP_DEPTH).ok_or(NegotiateError::GroupsTooDeep { max: MAX_GROUP_DEPTH })?;
        count = count.saturating_add(l.len());
        if count > MAX_PARTICIPANTS {
            // Count the rest without keeping it, for an exact number in the error.
            let rest: u64 = members.iter().map(Member::combinations).fold(0, u64::saturating_add);
            let count = usize::try_from(rest).unwrap_or(usize::MAX);
            return Err(NegotiateError::TooManyParticipants { count, max: MAX_PARTICIPANTS });
        }
        out.push(l);
    }
    Ok(out)
}

/// Negotiates among `members`, in preference order.
///
/// Selections of fallback-group children are tried in order (first child preferred); the
/// first that reconciles onto one buffer wins. If none does, the selections whose
/// conflicts a copy could resolve are tried, in the same order, for a copy plan. The
/// reported conflicts are those of the most preferred selection.
///
/// The time taken and the size of the result are linear in the participants' lists times
/// [`NegotiateOptions::max_combinations`]; more than [`MAX_PARTICIPANTS`] participants or
/// groups nested deeper than [`MAX_GROUP_DEPTH`] are refused up front.
pub fn negotiate_with(members: &[Member], opts: NegotiateOptions) -> Result<Negotiation, NegotiateError> {
    let choices = choices(members)?;
    let total = choices.iter().fold(1u64, |n, c| n.saturating_mul(c.len() as u64));
    let mut tried = 0usize;
    let mut cap_hit = false;
    let mut shared: Option<(Allocation, Vec<String>)> = None;
    let mut first: Option<(Conflicts, Vec<String>)> = None;
    let mut copyable: Vec<usize> = Vec::new();
    let _ = for_each_selection(&choices, &mut |sel| {
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
        return Ok(Negotiation {
            outcome: Outcome::Shared(alloc),
            combinations_tried: tried,
            cap_hit,
            participants,
        });
    }
    let Some((Conflicts(mut conflicts), participants)) = first else {
        let c = Conflict::new(
            Vec::<String>::new(),
            ConstraintKind::FallbackGroups,
            "a fallback group has no children, so no selection of participants exists",
            "give every group at least one child",
        );
        return Ok(Negotiation {
            outcome: Outcome::Impossible(vec![c]),
            combinations_tried: 0,
            cap_hit,
            participants: vec![],
        });
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
        match find_copy(&choices, &copyable) {
            Ok((plan, sel_names, index)) => {
                info!(groups = plan.groups.len(), bytes = plan.bytes_per_frame, "copy plan");
                let why = if index == 0 { conflicts } else { reconcile_why(&choices, index) };
                return Ok(Negotiation {
                    outcome: Outcome::Copy { plan, conflicts: why },
                    combinations_tried: tried,
                    cap_hit,
                    participants: sel_names,
                });
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
    Ok(Negotiation {
        outcome: Outcome::Impossible(conflicts),
        combinations_tried: tried,
        cap_hit,
        participants,
    })
}

fn names(sel: &[&Participant]) -> Vec<String> {
    sel.iter().map(|p| p.name.clone()).collect()
}

/// The first copy plan among the selections numbered in `copyable` (ascending), with the
/// selection's names and number; else the error for the most preferred of them.
fn find_copy(
    choices: &[Vec<&Participant>],
    copyable: &[usize],
) -> Result<(CopyPlan, Vec<String>, usize), CopyPlanError> {
    let mut index = 0usize;
    let mut found = None;
    let mut first_err = None;
    let _ = for_each_selection(choices, &mut |sel| {
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
fn reconcile_why(choices: &[Vec<&Participant>], index: usize) -> Vec<Conflict> {
    let mut i = 0usize;
    let mut out = Vec::new();
    let _ = for_each_selection(choices, &mut |sel| {
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
