//! How much a negotiation takes on: the bounds that keep its time and its report linear in
//! what it is given, whoever builds the participants (a command line, a compositor's lists,
//! a peer process).
//!
//! Real pipelines have a handful of participants (a decoder, a compositor, a display, an
//! encoder); sysmem tracks at most a few dozen per collection. 4096 leaves room for anything
//! generated (a test matrix, every output of a video wall) while a hostile list of millions
//! is refused before any work ([`NegotiateError`](super::NegotiateError),
//! [`ReconcileError`](super::ReconcileError)).

/// Most participants one negotiation or reconciliation takes, counting every child of every
/// fallback group.
pub const MAX_PARTICIPANTS: usize = 4096;

/// Deepest nesting of fallback groups (a group inside a group inside ...). Real ones nest
/// once or twice.
pub const MAX_GROUP_DEPTH: usize = 16;
