//! The negotiation between dmabridge's Vulkan producer and the compositor, through
//! `dmabridge_interop::negotiate`, and what the sink does with its outcome.
//!
//! The producer lists what the device can *export* for the sink's usage (transfer writes):
//! with `VK_EXT_image_drm_format_modifier` those are explicit modifiers only, because the
//! image is created from an explicit list (seed 001: such a buffer must not be imported with
//! INVALID); without the extension, LINEAR tiling is the implicit world, listed as both
//! LINEAR and implicit. The compositor lists what linux-dmabuf announced (INVALID becomes
//! `Layout::Implicit`). Then:
//!
//! - `Outcome::Shared` -> [`Plan::ZeroCopy`]: export with the allocation's layouts and send
//!   the very buffer. An implicit allocation is checked with the implicit rules (an upgrade
//!   to explicit is legal, and importing it with INVALID stays legal).
//! - `Outcome::Copy` / `Outcome::Impossible` (no common modifier, the chain rule, or a
//!   device that cannot export at all) -> [`Plan::Copy`]: the sink allocates a buffer in a
//!   layout the compositor accepts (the copy plan's compositor group where there is one,
//!   else LINEAR where offered, as the kernel's docs recommend, else implicit) and the
//!   producer's frame is copied into it.

use ash::vk;
use dmabridge_interop::negotiate::{negotiate, Allocation, Candidates, ChainLayout, Conflict, Member, Outcome, Participant};
use dmabridge_interop::{Format, FormatSet, Fourcc, Layout, Modifier};
use tracing::{debug, info};

use crate::dmabuf::participant::{Direction, ParticipantRequest};
use crate::device::usage::negotiation_usage;
use crate::Engine;

/// What the sink will allocate and send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// One buffer shared by producer and compositor: export with these layouts.
    ZeroCopy { allocation: Allocation },
    /// The sink allocates `fourcc` with `layout` (one the compositor accepts) and copies the
    /// producer's frames into it.
    Copy { fourcc: Fourcc, layout: Layout, reason: PlanReason },
}

impl Plan {
    pub fn fourcc(&self) -> Fourcc {
        match self {
            Plan::ZeroCopy { allocation } => allocation.fourcc,
            Plan::Copy { fourcc, .. } => *fourcc,
        }
    }

    pub fn is_zero_copy(&self) -> bool {
        matches!(self, Plan::ZeroCopy { .. })
    }

    /// The acceptable layouts of the export request (zero-copy only).
    pub fn acceptable(&self) -> Vec<Layout> {
        match self {
            Plan::ZeroCopy { allocation } => match &allocation.layout {
                ChainLayout::Explicit(m) => m.iter().map(|m| Layout::Explicit(*m)).collect(),
                ChainLayout::Implicit => vec![Layout::Implicit],
            },
            Plan::Copy { layout, .. } => vec![*layout],
        }
    }
}

impl std::fmt::Display for Plan {
    /// One line: `zero-copy AR24 [LINEAR]`, or `copy path: NV12 LINEAR (vulkan: ...)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Plan::ZeroCopy { allocation } => {
                write!(f, "zero-copy {} ", allocation.fourcc.trimmed())?;
                match &allocation.layout {
                    ChainLayout::Implicit => f.write_str("implicit"),
                    ChainLayout::Explicit(m) => {
                        write!(f, "[{}]", m.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "))
                    }
                }
            }
            Plan::Copy { fourcc, layout, reason } => {
                write!(f, "copy path: {} {layout}", fourcc.trimmed())?;
                match reason {
                    PlanReason::CompositorFailed(fmt) => write!(f, " (the compositor failed {fmt})"),
                    PlanReason::CopyPlan { conflicts } | PlanReason::Conflicts(conflicts) => match conflicts.first() {
                        Some(c) => write!(f, " ({}: {})", c.participants.join(", "), c.detail),
                        None => Ok(()),
                    },
                }
            }
        }
    }
}

/// Why the sink copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanReason {
    /// The negotiator found a copy plan (groups joined by a conversion).
    CopyPlan { conflicts: Vec<Conflict> },
    /// No shared buffer and no copy plan; these conflicts stand in the way (a producer that
    /// cannot export at all shows up here as a format conflict).
    Conflicts(Vec<Conflict>),
    /// The compositor failed buffers of the shared layout; it is excluded.
    CompositorFailed(Format),
}

/// Why no plan exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the compositor offers none of [{}]", .0.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", "))]
    NoFourcc(Vec<Fourcc>),
    #[error(transparent)]
    Negotiation(#[from] dmabridge_interop::negotiate::NegotiateError),
}

/// The Vulkan producer: what `engine` can export for `usage`, for each of `fourccs` in
/// order ([`Engine::participant`], exporting). It writes the buffers. A device whose
/// capability query fails offers nothing, and the negotiation says so.
pub fn producer_participant(engine: &Engine, fourccs: &[Fourcc], usage: vk::ImageUsageFlags) -> Participant {
    let req = ParticipantRequest::new("vulkan", usage, Direction::Export).with_fourccs(fourccs);
    engine.participant(&req).unwrap_or_else(|e| {
        debug!(error = %e, "no export capability");
        Participant::new("vulkan", FormatSet::new()).with_usage(negotiation_usage(usage))
    })
}

/// Negotiates between `producer` and `compositor` for one of `fourccs` (in order).
///
/// The compositor's list is cut down to `fourccs` first (the sink draws nothing else), so
/// that conflicts name formats that matter.
pub fn plan(producer: &Participant, compositor: &Participant, fourccs: &[Fourcc]) -> Result<Plan, PlanError> {
    let mut compositor = compositor.clone();
    if let Candidates::Only(set) = &mut compositor.formats {
        set.retain(|f| fourccs.contains(&f.fourcc));
    }
    let offered = compositor.formats.as_set().cloned().unwrap_or_default();
    let members: Vec<Member> = vec![producer.clone().into(), compositor.clone().into()];
    // Two participants are within every bound of the negotiation.
    let n = negotiate(&members).map_err(PlanError::Negotiation)?;
    match n.outcome {
        Outcome::Shared(allocation) if fourccs.contains(&allocation.fourcc) => {
            info!(fourcc = %allocation.fourcc, layout = ?allocation.layout, "zero-copy");
            Ok(Plan::ZeroCopy { allocation })
        }
        Outcome::Shared(allocation) => copy_plan(
            &offered,
            fourccs,
            PlanReason::Conflicts(vec![Conflict::new(
                ["vulkan", "compositor"],
                dmabridge_interop::negotiate::ConstraintKind::Format,
                format!("the shared format {} is not one the sink draws", allocation.fourcc),
                "list only the sink's formats",
            )]),
        ),
        Outcome::Copy { plan, conflicts } => {
            // The compositor's group of the copy plan says what to allocate for it.
            let group = plan
                .groups
                .iter()
                .find(|g| g.allocation.participants.iter().any(|p| p == &compositor.name))
                .filter(|g| fourccs.contains(&g.format.fourcc));
            match group {
                Some(g) => {
                    info!(format = %g.format, "copy plan");
                    Ok(Plan::Copy {
                        fourcc: g.format.fourcc,
                        layout: g.format.layout,
                        reason: PlanReason::CopyPlan { conflicts },
                    })
                }
                None => copy_plan(&offered, fourccs, PlanReason::CopyPlan { conflicts }),
            }
        }
        Outcome::Impossible(conflicts) => copy_plan(&offered, fourccs, PlanReason::Conflicts(conflicts)),
    }
}

/// The sink's own buffer for the compositor: the first fourcc it offers, LINEAR if offered
/// (the universal baseline, seed 001), else implicit.
pub(crate) fn copy_plan(offered: &FormatSet, fourccs: &[Fourcc], reason: PlanReason) -> Result<Plan, PlanError> {
    for &fourcc in fourccs {
        let layouts: Vec<Layout> = offered.layouts(fourcc).collect();
        let layout = if layouts.contains(&Layout::Explicit(Modifier::LINEAR)) {
            Layout::Explicit(Modifier::LINEAR)
        } else if layouts.contains(&Layout::Implicit) {
            Layout::Implicit
        } else {
            continue;
        };
        info!(fourcc = %fourcc, layout = %layout, ?reason, "copy path");
        return Ok(Plan::Copy { fourcc, layout, reason });
    }
    Err(PlanError::NoFourcc(fourccs.to_vec()))
}
