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
    /// How many selections this member can produce: the participants in it, however its
    /// groups nest (one of them is chosen). Counted without recursion.
    pub fn combinations(&self) -> u64 {
        let mut n = 0u64;
        let mut stack = vec![self];
        while let Some(m) = stack.pop() {
            match m {
                Member::Participant(_) => n = n.saturating_add(1),
                Member::Group(g) => stack.extend(&g.children),
            }
        }
        n
    }
}

/// How many selections `members` can produce in all (saturating).
pub fn combinations(members: &[Member]) -> u64 {
    members
        .iter()
        .fold(1u64, |n, m| n.saturating_mul(m.combinations()))
}

/// The participants `member` can contribute to a selection, in preference order: itself, or
/// the leaves of its group depth-first (a nested group's children are alternatives to its
/// siblings, so choosing one child of a nested group is choosing one of these leaves).
/// Iterative, so no nesting exhausts the stack; `None` when groups nest deeper than
/// `max_depth`.
pub(crate) fn leaves(member: &Member, max_depth: usize) -> Option<Vec<&Participant>> {
    let mut out = Vec::new();
    let mut stack: Vec<(&Member, usize)> = vec![(member, 0)];
    while let Some((m, depth)) = stack.pop() {
        match m {
            Member::Participant(p) => out.push(p),
            Member::Group(g) => {
                if depth >= max_depth {
                    return None;
                }
                // Reversed so that the first child is popped, and so expanded, first.
                stack.extend(g.children.iter().rev().map(|c| (c, depth + 1)));
            }
        }
    }
    Some(out)
}

/// Calls `f` with each selection of participants, in preference order: lexicographic in
/// the members' order, so an earlier group's first child outranks any later group's choice.
/// Within a selection, participants keep the members' order (preference order). `choices`
/// holds each member's [`leaves`]; a member with none (an empty group) means there is no
/// selection at all.
///
/// An odometer over the members' choices, the last member turning fastest: each step costs
/// O(1) amortised and nothing recurses, whatever the number of members.
pub(crate) fn for_each_selection<'a>(
    choices: &[Vec<&'a Participant>],
    f: &mut dyn FnMut(&[&'a Participant]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let Some(mut chosen) = choices.iter().map(|c| c.first().copied()).collect::<Option<Vec<_>>>() else {
        return ControlFlow::Continue(());
    };
    let mut index = vec![0usize; choices.len()];
    loop {
        f(&chosen)?;
        // Advance the last member that has another choice; reset the ones after it.
        let mut m = choices.len();
        loop {
            let Some(prev) = m.checked_sub(1) else {
                return ControlFlow::Continue(());
            };
            m = prev;
            index[m] += 1;
            match choices[m].get(index[m]) {
                Some(p) => {
                    chosen[m] = p;
                    break;
                }
                None => {
                    index[m] = 0;
                    chosen[m] = choices[m][0];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FormatSet;

    fn leaf(name: &str) -> Member {
        Member::Participant(Participant::new(name, FormatSet::new()))
    }

    fn selections(members: &[Member]) -> Vec<String> {
        let choices: Vec<Vec<&Participant>> = members.iter().map(|m| leaves(m, 64).unwrap()).collect();
        let mut out = Vec::new();
        let _ = for_each_selection(&choices, &mut |sel| {
            out.push(sel.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(""));
            ControlFlow::Continue(())
        });
        out
    }

    #[test]
    fn selections_are_lexicographic_with_nested_groups_flattened() {
        let g = |n: &str, c: Vec<Member>| Member::Group(FallbackGroup::new(n, c));
        let members = [
            g("x", vec![leaf("a"), g("inner", vec![leaf("b"), leaf("c")])]),
            leaf("p"),
            g("y", vec![leaf("1"), leaf("2")]),
        ];
        assert_eq!(selections(&members), ["ap1", "ap2", "bp1", "bp2", "cp1", "cp2"]);
        assert_eq!(combinations(&members), 6);
        assert!(selections(&[leaf("a"), g("empty", vec![])]).is_empty());
        assert_eq!(selections(&[]), [""], "no members: one empty selection");
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let mut m = leaf("deep");
        for i in 0..100_000 {
            m = Member::Group(FallbackGroup::new(format!("g{i}"), [m]));
        }
        assert!(leaves(&m, 64).is_none());
        // Dropping it must not recurse 100,000 deep either.
        drop_iteratively(m);
    }

    /// Takes a deep tree apart from the top, as a caller building one must.
    fn drop_iteratively(m: Member) {
        let mut stack = vec![m];
        while let Some(m) = stack.pop() {
            if let Member::Group(g) = m {
                stack.extend(g.children);
            }
        }
    }
}
