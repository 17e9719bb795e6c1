//! Fallback groups (sysmem `BufferCollectionTokenGroup`): a member may be a group of
//! ordered alternatives, of which exactly one is selected. The first child is preferred.

use std::ops::ControlFlow;

use super::participant::Participant;

/// Most combinations of group children tried before giving up (sysmem caps it too).
pub const MAX_COMBINATIONS: usize = 256;

/// One member of a negotiation: a participant, or a group of alternatives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    Participant(Participant),
    Group(FallbackGroup),
}

/// Ordered alternatives; exactly one child takes part. Children may themselves be groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FallbackGroup {
    pub name: String,
    pub children: Vec<Member>,
}

impl FallbackGroup {
    pub fn new(name: impl Into<String>, children: impl IntoIterator<Item = Member>) -> Self {
        FallbackGroup {
            name: name.into(),
            children: children.into_iter().collect(),
        }
    }
}

impl From<Participant> for Member {
    fn from(p: Participant) -> Self {
        Member::Participant(p)
    }
}

impl From<FallbackGroup> for Member {
    fn from(g: FallbackGroup) -> Self {
        Member::Group(g)
    }
}

impl Member {
    /// How many selections this member can produce (saturating).
    pub fn combinations(&self) -> u64 {
        match self {
            Member::Participant(_) => 1,
            Member::Group(g) => g
                .children
                .iter()
                .fold(0u64, |n, c| n.saturating_add(c.combinations())),
        }
    }
}

/// How many selections `members` can produce in all (saturating).
pub fn combinations(members: &[Member]) -> u64 {
    members
        .iter()
        .fold(1u64, |n, m| n.saturating_mul(m.combinations()))
}

/// Calls `f` with each selection of participants, in preference order: lexicographic in
/// the members' order, so an earlier group's first child outranks any later group's choice.
/// Within a selection, participants keep the members' order (preference order).
pub(crate) fn for_each_selection<'a>(
    members: &'a [Member],
    f: &mut dyn FnMut(&[&'a Participant]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let pending: Vec<&'a Member> = members.iter().collect();
    let mut chosen = Vec::with_capacity(members.len());
    walk(&pending, &mut chosen, f)
}

fn walk<'a>(
    pending: &[&'a Member],
    chosen: &mut Vec<&'a Participant>,
    f: &mut dyn FnMut(&[&'a Participant]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let Some((head, tail)) = pending.split_first() else {
        return f(chosen);
    };
    match head {
        Member::Participant(p) => {
            chosen.push(p);
            let flow = walk(tail, chosen, f);
            chosen.pop();
            flow
        }
        Member::Group(g) => {
            for child in &g.children {
                let mut next = Vec::with_capacity(pending.len());
                next.push(child);
                next.extend_from_slice(tail);
                walk(&next, chosen, f)?;
            }
            ControlFlow::Continue(())
        }
    }
}
