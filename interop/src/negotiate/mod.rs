//! Negotiation: reconcile every participant's formats and constraints onto one buffer
//! collection, the way Fuchsia sysmem and NvSciBuf do, following the kernel's rules for
//! implicit modifiers; failing that, plan copies; failing that, say who is in the way.
//!
//! - [`participant`]: who takes part and what each asks for ([`Participant`], [`Constraints`]).
//! - [`implicit`]: the four uses of `DRM_FORMAT_MOD_INVALID`, as types.
//! - [`reconcile()`]: one shared allocation, or [`Conflicts`].
//! - [`groups`]: fallback groups of ordered alternatives, capped at [`MAX_COMBINATIONS`].
//! - [`copy_plan`]: groups joined by the conversions #5 provides.
//! - [`negotiate()`]: all of the above, giving an [`Outcome`].
//! - [`limits`]: how many participants and how deep a nesting of groups it takes on.
//!
//! The algorithm only: what a command line names as participants is [`crate::spec`], the
//! JSON and words an outcome is told in are [`crate::report`] (both above the peers, whose
//! lists and live devices become participants here).
//!
//! Every allocation also names how its participants synchronise ([`crate::sync`]): the best
//! method all of them support, sync-file > implicit-bridge > cpu-wait.
//!
//! Modifiers: `LINEAR` (zero) is an explicit layout like any other; INVALID never appears
//! as a value here, it is [`crate::Layout::Implicit`] in a participant's list and
//! [`ChainLayout::Implicit`] in a result. Modifier lists in results are sorted numerically
//! for determinism only: as in the kernel, their order carries no meaning.

pub mod conflict;
pub mod constraints;
pub mod copy_plan;
pub mod device;
pub mod groups;
pub mod implicit;
pub mod limits;
pub mod outcome;
pub mod participant;
pub mod reconcile;

pub use conflict::{Conflict, ConstraintKind, MAX_NAMES_SHOWN};
pub use constraints::{BufferConstraints, Merged};
pub use copy_plan::{
    Conversion, ConversionKind, ConversionPlan, Copier, CopyGroup, CopyPlan, CopyPlanError, PlanError, PlanFile, PlanFileError, PlanFormat,
    PlanStep, PlannedConversion, StepOp, MAX_COPY_PARTICIPANTS, MAX_PLAN_STEPS, PLAN_FILE_VERSION,
};
pub use device::{device_formats, DeviceCopy, DeviceFormat, Direction};
pub use groups::{combinations, FallbackGroup, Member, MAX_COMBINATIONS};
pub use implicit::{
    upgrade_or_validate, AllocatedAs, AllocationRequest, AllocationResult, ImplicitRuleError,
    ModifierSupport,
};
pub use limits::{MAX_GROUP_DEPTH, MAX_PARTICIPANTS};
pub use outcome::{negotiate, negotiate_with, NegotiateError, NegotiateOptions, Negotiation, Outcome};
pub use participant::{
    Candidates, ConstraintParseError, Constraints, CpuAccess, Domain, ExtentRange, Participant,
    Usage,
};
pub use reconcile::{reconcile, Allocation, ChainLayout, Conflicts, ReconcileError};
