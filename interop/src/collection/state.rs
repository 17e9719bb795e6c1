//! The buffer collection as a pure state machine (sysmem, seed 004): tokens, duplication,
//! binding, allocation once everyone has bound, failure domains, late joiners and
//! asynchronous release. No I/O: the caller runs the [`Allocator`] (or lets
//! [`Collection::allocate_with`] do it) and delivers the [`Event`]s it queues.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Weak};

use tracing::{debug, info, warn};

use crate::dmabuf::{DescriptorError, DmaBuf};
use crate::negotiate::Participant;

use super::alloc::{Allocator, Holders};
use super::attrs::{conflicts_among, describe, outputs_of, reconcile, validate_holder, ReconcileOptions, Reconciled};
use crate::negotiate::{Conflict, ConstraintKind};
use super::limits::{MAX_NAME_LEN, MAX_TOKENS, MAX_TOKENS_PER_SUBTREE};

/// A token's number within its collection. Numbers are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenId(u64);

impl TokenId {
    pub const fn raw(self) -> u64 {
        self.0
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "token {}", self.0)
    }
}

/// What a token's holder may do with the buffers. A duplicate never has more rights than
/// the token it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rights {
    /// The holder gets read-only fds and may only bind read-only constraints.
    pub read_only: bool,
}

/// Why the collection failed: who, and what happened. Every live holder receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The participant (or token) whose failure it was; several names for a conflict.
    pub participant: String,
    pub reason: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.participant, self.reason)
    }
}

/// What a holder must be told. Drained with [`Collection::take_events`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The buffers are ready for this token ([`Collection::buffers_for`]).
    Allocated,
    /// This late joiner's constraints do not fit the existing buffers; the collection goes on.
    LateJoinRefused(Vec<Conflict>),
    /// This token is gone: the whole collection failed, or (with the token's own name)
    /// only its dispensable sub-tree was dropped.
    Failed(Failure),
}

/// Where a collection stands after an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Allocation waits for these tokens (by name) to bind or close.
    Waiting { unbound: Vec<String> },
    /// Everyone has bound: allocate this list and hand the buffers to
    /// [`Collection::set_buffers`] (or call [`Collection::allocate_with`]).
    Allocate(Reconciled),
    /// The buffers exist (and, after a late join, the joiner was accepted).
    Allocated,
    /// A late joiner was refused; the collection is unchanged.
    Refused(Vec<Conflict>),
    /// The collection failed.
    Failed(Failure),
    /// Every holder has closed; the collection's buffers are released.
    Released,
}

/// Why an operation on a collection was refused. The collection is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{0} does not belong to this collection")]
    UnknownToken(TokenId),
    #[error("{0} was closed or dropped")]
    TokenGone(TokenId),
    #[error("{0} is already bound")]
    AlreadyBound(TokenId),
    #[error("a bound token cannot be duplicated; duplicate before binding, or attach a token")]
    DuplicateAfterBind,
    #[error("the buffers are allocated: new participants join with attach_token")]
    AlreadyAllocated,
    #[error("the collection failed: {0}")]
    Failed(Failure),
    #[error("the collection holds at most {max} live tokens")]
    TooManyTokens { max: usize },
    /// The requesting token's isolated sub-tree (under dispensable or late token `holder`)
    /// already holds [`MAX_TOKENS_PER_SUBTREE`] tokens.
    #[error("{holder}'s sub-tree holds at most {max} tokens")]
    SubtreeQuota { holder: String, max: usize },
    #[error("token name {0:?} must be 1 to {MAX_NAME_LEN} bytes without NUL")]
    BadName(String),
    #[error("no allocation is due")]
    NotAllocating,
    #[error("{0} has no buffers (not allocated, or a refused late joiner)")]
    NoBuffers(TokenId),
    /// Copying buffer `buffer`'s fds for `token`'s holder failed: the server's side (its fd
    /// table full, the system's file table full, memory), not the holder's.
    #[error("giving {token} buffer {buffer} failed: {source}")]
    Descriptor { token: TokenId, buffer: usize, source: DescriptorError },
}

/// Observes a collection's buffers without keeping them: [`WeakBuffers::alive`] stays true
/// until the last holder has closed (and nobody keeps a [`BufferSet`]), sysmem's
/// asynchronous destruction.
#[derive(Debug, Clone)]
pub struct WeakBuffers(Weak<BufferSet>);

impl WeakBuffers {
    pub fn alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// The allocated buffers and the list (with computed outputs) they were made from.
#[derive(Debug)]
pub struct BufferSet {
    pub reconciled: Reconciled,
    pub buffers: Vec<DmaBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Bind {
    Unbound,
    Bound(Participant),
    /// A late joiner judged against the buffers.
    Accepted,
    Refused,
}

#[derive(Debug)]
struct Node {
    name: String,
    parent: Option<TokenId>,
    rights: Rights,
    /// Its failure drops its sub-tree only (sysmem SetDispensable).
    dispensable: bool,
    /// Attached with attach_token: judged against existing buffers, failure-isolated.
    late: bool,
    bind: Bind,
}

impl Node {
    /// Where a failure below stops: a dispensable or late-attached node.
    fn isolates(&self) -> bool {
        self.dispensable || self.late
    }

    fn label(&self) -> String {
        match &self.bind {
            Bind::Bound(p) => p.name.clone(),
            _ => self.name.clone(),
        }
    }
}

enum Phase {
    Open,
    Allocating(Reconciled),
    Allocated(Arc<BufferSet>),
    Failed(Failure),
    Released,
}

/// One buffer collection. See the module docs of [`crate::collection`].
pub struct Collection {
    name: String,
    /// Live tokens only: closed and failed ones are removed.
    nodes: BTreeMap<TokenId, Node>,
    next: u64,
    phase: Phase,
    options: ReconcileOptions,
    /// The bound initial lists, in bind order (kept after the nodes go, for the record).
    bound_order: Vec<TokenId>,
    events: VecDeque<(TokenId, Event)>,
    weak: Option<WeakBuffers>,
}

impl fmt::Debug for Collection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collection").field("name", &self.name).field("tokens", &self.nodes.len()).finish()
    }
}

fn check_name(name: &str) -> Result<(), StateError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.contains('\0') {
        return Err(StateError::BadName(crate::text::quoted(name)));
    }
    Ok(())
}

impl Collection {
    /// A new collection and its root token (named `name`, not dispensable, full rights).
    pub fn new(name: &str) -> Result<(Collection, TokenId), StateError> {
        Collection::with_options(name, ReconcileOptions::default())
    }

    /// [`Collection::new`] with collection-wide choices (disjoint planes).
    pub fn with_options(name: &str, options: ReconcileOptions) -> Result<(Collection, TokenId), StateError> {
        check_name(name)?;
        let mut c = Collection {
            name: name.to_owned(),
            nodes: BTreeMap::new(),
            next: 0,
            phase: Phase::Open,
            options,
            bound_order: Vec::new(),
            events: VecDeque::new(),
            weak: None,
        };
        let root = c.insert(Node {
            name: name.to_owned(),
            parent: None,
            rights: Rights::default(),
            dispensable: false,
            late: false,
            bind: Bind::Unbound,
        });
        Ok((c, root))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn insert(&mut self, node: Node) -> TokenId {
        let id = TokenId(self.next);
        self.next += 1;
        self.nodes.insert(id, node);
        id
    }

    fn live(&self, t: TokenId) -> Result<&Node, StateError> {
        if let Phase::Failed(f) = &self.phase {
            return Err(StateError::Failed(f.clone()));
        }
        match self.nodes.get(&t) {
            Some(n) => Ok(n),
            None if t.0 < self.next => Err(StateError::TokenGone(t)),
            None => Err(StateError::UnknownToken(t)),
        }
    }

    /// Whether a token made from `parent` fits: within [`MAX_TOKENS`], and within
    /// [`MAX_TOKENS_PER_SUBTREE`] of the isolated sub-tree `parent` is in, if any.
    fn room(&self, parent: TokenId) -> Result<(), StateError> {
        if self.nodes.len() >= MAX_TOKENS {
            return Err(StateError::TooManyTokens { max: MAX_TOKENS });
        }
        if let Some(stop) = self.isolating_ancestor(parent) {
            if self.subtree(stop).len() >= MAX_TOKENS_PER_SUBTREE {
                let holder = self.nodes.get(&stop).map_or_else(String::new, Node::label);
                return Err(StateError::SubtreeQuota { holder, max: MAX_TOKENS_PER_SUBTREE });
            }
        }
        Ok(())
    }

    /// The nearest token at or above `token` whose failure stays its own sub-tree's.
    fn isolating_ancestor(&self, token: TokenId) -> Option<TokenId> {
        let mut at = token;
        loop {
            let n = self.nodes.get(&at)?;
            if n.isolates() {
                return Some(at);
            }
            at = n.parent?;
        }
    }

    /// A new token from `token` (sysmem Duplicate), before `token` binds and before
    /// allocation. Its rights are at most `token`'s; `dispensable` makes its failure drop
    /// only its own sub-tree. Allocation now also waits for it.
    pub fn duplicate(&mut self, token: TokenId, rights: Rights, dispensable: bool, name: &str) -> Result<TokenId, StateError> {
        check_name(name)?;
        let parent = self.live(token)?;
        if parent.bind != Bind::Unbound {
            return Err(StateError::DuplicateAfterBind);
        }
        if !parent.late && !matches!(self.phase, Phase::Open) {
            return Err(StateError::AlreadyAllocated);
        }
        let node = Node {
            name: name.to_owned(),
            parent: Some(token),
            rights: Rights { read_only: rights.read_only || parent.rights.read_only },
            dispensable,
            late: parent.late,
            bind: Bind::Unbound,
        };
        self.room(token)?;
        let id = self.insert(node);
        debug!(collection = %self.name, %id, name, dispensable, "duplicated a token");
        Ok(id)
    }

    /// A late joiner's token (sysmem AttachToken), from any live token: it never holds up
    /// or changes the allocation; its bind is judged against the buffers (once they exist)
    /// and accepted or refused, and its failure never fails the collection.
    pub fn attach_token(&mut self, parent: TokenId, name: &str) -> Result<TokenId, StateError> {
        check_name(name)?;
        let p = self.live(parent)?;
        let node = Node {
            name: name.to_owned(),
            parent: Some(parent),
            rights: p.rights,
            dispensable: false,
            late: true,
            bind: Bind::Unbound,
        };
        self.room(parent)?;
        let id = self.insert(node);
        debug!(collection = %self.name, %id, name, "attached a late token");
        Ok(id)
    }

    /// Binds `token` to the attribute list `p`.
    ///
    /// An initial read-only token whose list asks to write fails that token (as
    /// [`Collection::fail`] would); a late joiner doing so is refused. An initial token's bind may complete the set ([`Progress::Allocate`]) or make
    /// the lists conflict (the collection fails, naming who and which attribute, unless the
    /// conflict is only a dispensable sub-tree's: that sub-tree fails alone). A late
    /// joiner's bind is judged against the buffers once they exist.
    pub fn bind(&mut self, token: TokenId, p: Participant) -> Result<Progress, StateError> {
        let node = self.live(token)?;
        if node.bind != Bind::Unbound {
            return Err(StateError::AlreadyBound(token));
        }
        // The name travels in every holder's reconciled list and in failures.
        check_name(&p.name)?;
        let late = node.late;
        // A late joiner's rights are judged with the rest of its list (a refusal naming
        // read-only); an initial holder that overreaches has failed.
        if !late && node.rights.read_only && !p.constraints.read_only {
            let reason = format!("{} holds a read-only token but bound writable constraints", p.name);
            return self.fail(token, &reason);
        }
        debug!(collection = %self.name, %token, participant = %p.name, late, "bound");
        if let Some(n) = self.nodes.get_mut(&token) {
            // A holder that says it never writes gets fds it cannot write through, whatever
            // its token allowed: it asked for no more (an attached late joiner included).
            if p.constraints.read_only {
                n.rights.read_only = true;
            }
            n.bind = Bind::Bound(p);
        }
        if late {
            if let Phase::Allocated(_) = self.phase {
                return Ok(self.judge_late(token));
            }
            return Ok(self.progress());
        }
        self.bound_order.push(token);
        Ok(self.check_ready())
    }

    fn judge_late(&mut self, token: TokenId) -> Progress {
        let Phase::Allocated(set) = &self.phase else {
            return self.progress();
        };
        let Some(node) = self.nodes.get(&token) else {
            return self.progress();
        };
        let Bind::Bound(p) = &node.bind else {
            return self.progress();
        };
        let mut conflicts = validate_holder(&set.reconciled, p, node.rights.read_only);
        // A dma-buf cannot be reopened read-only: a read-only late joiner of dma-heap
        // buffers would get fds it could write through, so it is refused instead.
        let dma_bufs = set.buffers.iter().flat_map(|b| b.planes()).any(|pl| crate::sync::is_dma_buf(pl.fd).unwrap_or(false));
        if node.rights.read_only && dma_bufs {
            conflicts.push(Conflict::new(
                [p.name.clone()],
                ConstraintKind::ReadOnly,
                "the buffers are dma-bufs, which have no read-only reopen (their access mode is fixed at export)",
                "join with write rights, or allocate the collection with the read-only holder bound from the start (it then gets memfds)",
            ));
        }
        let name = p.name.clone();
        if let Some(n) = self.nodes.get_mut(&token) {
            if conflicts.is_empty() {
                n.bind = Bind::Accepted;
                self.events.push_back((token, Event::Allocated));
                info!(collection = %self.name, participant = %name, "late joiner accepted");
                return Progress::Allocated;
            }
            n.bind = Bind::Refused;
        }
        warn!(collection = %self.name, participant = %name, conflicts = %describe(&conflicts), "late joiner refused");
        self.events.push_back((token, Event::LateJoinRefused(conflicts.clone())));
        Progress::Refused(conflicts)
    }

    fn unbound(&self) -> Vec<String> {
        self.nodes.values().filter(|n| !n.late && n.bind == Bind::Unbound).map(|n| n.name.clone()).collect()
    }

    /// Allocation is due once no initial live token is unbound.
    fn check_ready(&mut self) -> Progress {
        if !matches!(self.phase, Phase::Open) {
            return self.progress();
        }
        let unbound = self.unbound();
        if !unbound.is_empty() {
            return Progress::Waiting { unbound };
        }
        let lists = self.lists_of(|_| true);
        if lists.is_empty() {
            if self.nodes.is_empty() {
                return self.progress();
            }
            // Only late joiners are left, and they never start an allocation.
            let f = Failure {
                participant: self.name.clone(),
                reason: "every initial participant closed before allocation".into(),
            };
            return self.fail_all(f);
        }
        let reconciled = match reconcile(&lists, self.options) {
            Ok(r) => Ok(r),
            Err(conflicts) => self.reconcile_without_breakers(conflicts),
        };
        match reconciled {
            Ok(r) => {
                info!(collection = %self.name, format = %r.format, buffers = r.constraints.buffers, "allocation due");
                self.phase = Phase::Allocating(r.clone());
                Progress::Allocate(r)
            }
            Err(conflicts) => {
                let mut who: Vec<String> = conflicts.iter().flat_map(|c| c.participants.iter().cloned()).collect();
                let mut seen = std::collections::HashSet::new();
                who.retain(|n| seen.insert(n.clone()));
                let f = Failure { participant: who.join(", "), reason: format!("constraints conflict: {}", describe(&conflicts)) };
                self.fail_all(f)
            }
        }
    }

    /// The bound initial lists, in bind order, of the live tokens `keep` accepts.
    fn lists_of(&self, keep: impl Fn(TokenId) -> bool) -> Vec<Participant> {
        self.bound_order
            .iter()
            .filter(|t| keep(**t))
            .filter_map(|t| match self.nodes.get(t).map(|n| &n.bind) {
                Some(Bind::Bound(p)) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// The bound lists conflict (`conflicts`): sysmem's rule for failure domains. If the
    /// lists outside every isolated (dispensable) sub-tree do not conflict among themselves
    /// ([`conflicts_among`]), each isolated sub-tree is added in turn (outer ones first, by
    /// token number) and one whose lists bring a conflict fails alone, told the conflicts
    /// its lists cause (a size over the limit names the limit). So a dispensable holder
    /// cannot sink the others by what it binds, whatever its name or its place in the bind
    /// order. If the others conflict among themselves, the conflict is theirs and
    /// `conflicts` fail the whole collection.
    ///
    /// The others need not reconcile alone: as in sysmem, a live dispensable holder's list
    /// counts in the allocation like any other, so one may give what the rest leave
    /// unsaid (the only writer, the only bound on the extent, the only named format) and
    /// stays in. Only if the lists left after the breakers are dropped still lack it does
    /// the whole collection fail, with that conflict: the non-dispensable holders cannot
    /// allocate without a list that is not there. At most two reconciles more than there
    /// are isolated sub-trees.
    fn reconcile_without_breakers(&mut self, conflicts: Vec<Conflict>) -> Result<Reconciled, Vec<Conflict>> {
        let mut groups: BTreeMap<TokenId, Vec<TokenId>> = BTreeMap::new();
        for t in &self.bound_order {
            if let Some(stop) = self.isolating_ancestor(*t) {
                groups.entry(stop).or_default().push(*t);
            }
        }
        if groups.is_empty() {
            return Err(conflicts);
        }
        let isolated: Vec<TokenId> = groups.values().flatten().copied().collect();
        let mut accepted: Vec<TokenId> = self.bound_order.iter().copied().filter(|t| !isolated.contains(t)).collect();
        let base = self.lists_of(|t| accepted.contains(&t));
        if base.is_empty() || conflicts_among(&base, self.options).is_err() {
            return Err(conflicts);
        }
        for (stop, members) in groups {
            // An outer sub-tree that failed took this one with it.
            if !self.nodes.contains_key(&stop) {
                continue;
            }
            // Its lists last: where a choice names who is in the way (a format only some
            // have), the lists that reconcile without it go first.
            let mut trial = self.lists_of(|t| accepted.contains(&t));
            trial.extend(self.lists_of(|t| members.contains(&t)));
            match conflicts_among(&trial, self.options) {
                Ok(()) => accepted.extend(members),
                Err(theirs) => {
                    // Named from the sub-tree's root down (token numbers follow creation).
                    let mut named = members.clone();
                    named.sort();
                    let names: Vec<String> = named.iter().filter_map(|t| self.token_name(*t)).collect();
                    let f = Failure { participant: names.join(", "), reason: format!("constraints conflict: {}", describe(&theirs)) };
                    warn!(collection = %self.name, participant = %f.participant, reason = %f.reason, "a dispensable sub-tree's constraints conflict: dropped");
                    self.drop_subtree(stop, &f);
                }
            }
        }
        // The survivors in bind order (whose first list's preferences choose the format);
        // what they still leave unsaid fails them all.
        reconcile(&self.lists_of(|t| accepted.contains(&t)), self.options)
    }

    /// Where the collection stands, without changing it.
    pub fn progress(&self) -> Progress {
        match &self.phase {
            Phase::Open => Progress::Waiting { unbound: self.unbound() },
            Phase::Allocating(r) => Progress::Allocate(r.clone()),
            Phase::Allocated(_) => Progress::Allocated,
            Phase::Failed(f) => Progress::Failed(f.clone()),
            Phase::Released => Progress::Released,
        }
    }

    /// The list being allocated, or allocated (with outputs).
    pub fn reconciled(&self) -> Option<&Reconciled> {
        match &self.phase {
            Phase::Allocating(r) => Some(r),
            Phase::Allocated(s) => Some(&s.reconciled),
            _ => None,
        }
    }

    /// Hands over the buffers an allocator made for [`Progress::Allocate`]'s list. They are
    /// checked against it and its computed outputs filled in; a mismatch fails the collection.
    /// Every bound initial token gets [`Event::Allocated`]; late joiners that already bound
    /// are judged.
    pub fn set_buffers(&mut self, buffers: Vec<DmaBuf>) -> Result<Progress, StateError> {
        let Phase::Allocating(r) = &self.phase else {
            return Err(StateError::NotAllocating);
        };
        let mut r = r.clone();
        match outputs_of(&r, &buffers) {
            Ok(o) => r.outputs = Some(o),
            Err(e) => return Ok(self.allocation_failed(&format!("the allocator's buffers do not fit the list: {e}"))),
        }
        let set = Arc::new(BufferSet { reconciled: r, buffers });
        self.weak = Some(WeakBuffers(Arc::downgrade(&set)));
        self.phase = Phase::Allocated(set);
        info!(collection = %self.name, "allocated");
        let mut late = Vec::new();
        for (id, n) in &self.nodes {
            match (&n.bind, n.late) {
                (Bind::Bound(_), false) => self.events.push_back((*id, Event::Allocated)),
                (Bind::Bound(_), true) => late.push(*id),
                _ => {}
            }
        }
        for t in late {
            self.judge_late(t);
        }
        Ok(Progress::Allocated)
    }

    /// The allocator failed: the collection fails, naming the allocator.
    pub fn allocation_failed(&mut self, reason: &str) -> Progress {
        let f = Failure { participant: format!("{} (allocator)", self.name), reason: reason.to_owned() };
        self.fail_all(f)
    }

    /// Runs `allocator` if an allocation is due, and hands over its buffers (or its failure).
    pub fn allocate_with(&mut self, allocator: &mut dyn Allocator) -> Progress {
        let Phase::Allocating(r) = &self.phase else {
            return self.progress();
        };
        // Holders that get read-only fds (by their rights, which a read-only list implies).
        let read_only = self.nodes.values().any(|n| n.rights.read_only);
        match allocator.allocate(r, Holders { read_only }) {
            Ok(b) => self.set_buffers(b).unwrap_or_else(|e| self.allocation_failed(&e.to_string())),
            Err(e) => self.allocation_failed(&e.to_string()),
        }
    }

    /// `token`'s holder failed (its process died, it sent garbage, it gave up). A failure
    /// inside a dispensable or late-attached sub-tree drops that sub-tree only; any other
    /// fails the whole collection, and every live holder gets [`Event::Failed`].
    pub fn fail(&mut self, token: TokenId, reason: &str) -> Result<Progress, StateError> {
        let node = self.live(token)?;
        let who = node.label();
        // The node where the failure stops, if any.
        let stop = self.isolating_ancestor(token);
        let f = Failure { participant: who, reason: reason.to_owned() };
        let Some(stop) = stop else {
            return Ok(self.fail_all(f));
        };
        warn!(collection = %self.name, participant = %f.participant, reason, "dispensable sub-tree dropped");
        self.drop_subtree(stop, &f);
        Ok(self.after_removal())
    }

    /// Removes the isolated sub-tree under `stop`, telling each of its tokens `f`.
    fn drop_subtree(&mut self, stop: TokenId, f: &Failure) {
        for t in self.subtree(stop) {
            self.nodes.remove(&t);
            self.events.push_back((t, Event::Failed(f.clone())));
        }
    }

    fn subtree(&self, root: TokenId) -> Vec<TokenId> {
        let mut out = vec![root];
        let mut i = 0;
        while i < out.len() {
            let at = out[i];
            out.extend(self.nodes.iter().filter(|(_, n)| n.parent == Some(at)).map(|(t, _)| *t));
            i += 1;
        }
        out
    }

    fn fail_all(&mut self, f: Failure) -> Progress {
        warn!(collection = %self.name, participant = %f.participant, reason = %f.reason, "collection failed");
        for t in self.nodes.keys() {
            self.events.push_back((*t, Event::Failed(f.clone())));
        }
        // Sysmem closes every channel on failure; the holders keep whatever fds they have.
        self.nodes.clear();
        self.phase = Phase::Failed(f.clone());
        Progress::Failed(f)
    }

    /// The holder of `token` is done with it (sysmem Release then close). An unbound token
    /// closing just stops being waited for; the buffers are released when the last token
    /// closes. Never a failure.
    pub fn close(&mut self, token: TokenId) -> Result<Progress, StateError> {
        self.live(token)?;
        // Its children keep their own place in the tree, under its parent.
        let parent = self.nodes.get(&token).and_then(|n| n.parent);
        for n in self.nodes.values_mut().filter(|n| n.parent == Some(token)) {
            n.parent = parent;
        }
        self.nodes.remove(&token);
        self.bound_order.retain(|t| *t != token);
        debug!(collection = %self.name, %token, "closed");
        Ok(self.after_removal())
    }

    fn after_removal(&mut self) -> Progress {
        if self.nodes.is_empty() && !matches!(self.phase, Phase::Failed(_)) {
            info!(collection = %self.name, "last holder closed: buffers released");
            self.phase = Phase::Released;
            return Progress::Released;
        }
        self.check_ready()
    }

    /// The events queued for holders since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<(TokenId, Event)> {
        self.events.drain(..).collect()
    }

    /// Whether events wait to be taken.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// A weak handle on the buffers, once allocated.
    pub fn weak(&self) -> Option<WeakBuffers> {
        self.weak.clone()
    }

    /// Copies of the buffers for `token`'s holder, who owns them: dups of the fds, or
    /// read-only re-opens for a read-only token (or one bound with read-only constraints). Only for an initial bound token or an
    /// accepted late joiner.
    pub fn buffers_for(&self, token: TokenId) -> Result<Vec<DmaBuf>, StateError> {
        let node = self.live(token)?;
        let Phase::Allocated(set) = &self.phase else {
            return Err(StateError::NoBuffers(token));
        };
        let ok = matches!((&node.bind, node.late), (Bind::Bound(_), false) | (Bind::Accepted, true));
        if !ok {
            return Err(StateError::NoBuffers(token));
        }
        let copy = |b: &DmaBuf| if node.rights.read_only { b.reopen_read_only() } else { b.try_clone() };
        set.buffers
            .iter()
            .enumerate()
            .map(|(buffer, b)| copy(b).map_err(|source| StateError::Descriptor { token, buffer, source }))
            .collect()
    }

    /// Whether `token` is a live token of this collection.
    pub fn is_live(&self, token: TokenId) -> bool {
        self.nodes.contains_key(&token)
    }

    /// The rights of a live token.
    pub fn rights(&self, token: TokenId) -> Option<Rights> {
        self.nodes.get(&token).map(|n| n.rights)
    }

    /// A live token's name (its participant's, once bound).
    pub fn token_name(&self, token: TokenId) -> Option<String> {
        self.nodes.get(&token).map(Node::label)
    }

    /// The failure, once failed.
    pub fn failure(&self) -> Option<&Failure> {
        match &self.phase {
            Phase::Failed(f) => Some(f),
            _ => None,
        }
    }
}
