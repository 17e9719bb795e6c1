//! The kernel's rules for implicit modifiers (seed 001, "Implicit modifiers"), as types.
//!
//! `DRM_FORMAT_MOD_INVALID` is not a layout; it says "no explicit modifier". It has four
//! uses, each modelled here so that none of them needs the magic value:
//!
//! 1. **Enumeration**: INVALID as the sole member of a party's list means explicit modifiers
//!    are not supported; as part of a longer list it means implicit is also fine.
//!    → [`ModifierSupport::from_layouts`].
//! 2. **Allocation**: INVALID alone (or no list) asks for an implicit allocation; in a longer
//!    list it says an implicit allocation is acceptable. → [`AllocationRequest`].
//! 3. **Post-allocation query**: the allocator may report INVALID only if the request allowed
//!    implicit; a valid modifier reported for an implicit request *upgrades* the buffer to
//!    explicit (`gbm_bo_create` + `gbm_bo_get_modifier`). → [`upgrade_or_validate`].
//! 4. **Import** with INVALID is acceptable only if the buffer was not allocated with an
//!    explicit modifier. → [`AllocationResult::check_import`].
//!
//! From these follows the chain rule: the producer and all consumers of one buffer are
//! either all implicit or all explicit. The negotiator enforces it by never putting an
//! implicit-only party and an explicit-only party on one buffer (see `reconcile`).
//! `LINEAR` (zero) is an explicit modifier like any other and is never the same as implicit.

use crate::{Fourcc, Layout, Modifier};

/// How one party supports modifiers for one fourcc, read from its enumeration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModifierSupport {
    /// INVALID was the only entry: explicit modifiers are not supported.
    ImplicitOnly,
    /// Only explicit modifiers were listed: the party must be told the layout.
    ExplicitOnly(Vec<Modifier>),
    /// Explicit modifiers and INVALID: implicit also works.
    Either(Vec<Modifier>),
}

impl ModifierSupport {
    /// Classifies the layouts a party lists for one fourcc. `None` if it lists none.
    pub fn from_layouts(layouts: impl IntoIterator<Item = Layout>) -> Option<Self> {
        let mut implicit = false;
        let mut explicit = Vec::new();
        for l in layouts {
            match l {
                Layout::Implicit => implicit = true,
                Layout::Explicit(m) => explicit.push(m),
            }
        }
        match (implicit, explicit.is_empty()) {
            (false, true) => None,
            (true, true) => Some(ModifierSupport::ImplicitOnly),
            (false, false) => Some(ModifierSupport::ExplicitOnly(explicit)),
            (true, false) => Some(ModifierSupport::Either(explicit)),
        }
    }

    /// Classifies a list of modifiers as they come off the wire (INVALID included).
    pub fn from_wire(modifiers: &[Modifier]) -> Option<Self> {
        Self::from_layouts(modifiers.iter().map(|m| Layout::from_wire(*m)))
    }

    pub fn allows_implicit(&self) -> bool {
        !matches!(self, ModifierSupport::ExplicitOnly(_))
    }

    pub fn allows_explicit(&self) -> bool {
        !matches!(self, ModifierSupport::ImplicitOnly)
    }
}

/// A violation of the implicit-modifier rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImplicitRuleError {
    #[error("the allocator reported no modifier (INVALID), but the request listed only explicit modifiers")]
    ImplicitNotRequested,
    #[error("the allocator chose {0}, which the explicit-only request did not list")]
    NotInList(Modifier),
    #[error("the buffer was allocated with explicit modifier {0}; importing it without a modifier is not allowed")]
    ImplicitImportOfExplicitBuffer(Modifier),
    #[error("the buffer's layout is implicit (unknown); it cannot be imported with explicit modifier {0}")]
    ExplicitImportOfImplicitBuffer(Modifier),
    #[error("the buffer has modifier {allocated}; it cannot be imported as {import}")]
    ModifierMismatch {
        allocated: Modifier,
        import: Modifier,
    },
}

/// What to ask an allocator for (rule 2). An empty layout list means "no list", which is
/// the same as asking for implicit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationRequest {
    pub fourcc: Fourcc,
    pub width: u32,
    pub height: u32,
    pub layouts: Vec<Layout>,
}

impl AllocationRequest {
    /// An implicit allocation: the driver picks the layout and need not tell.
    pub fn implicit(fourcc: Fourcc, width: u32, height: u32) -> Self {
        AllocationRequest {
            fourcc,
            width,
            height,
            layouts: vec![Layout::Implicit],
        }
    }

    /// An explicit allocation from `modifiers`, none of which may be INVALID (they are
    /// dropped if they are: INVALID in an explicit chain would break the chain rule).
    pub fn explicit(fourcc: Fourcc, width: u32, height: u32, modifiers: &[Modifier]) -> Self {
        let layouts = modifiers
            .iter()
            .filter(|m| !m.is_invalid())
            .map(|m| Layout::Explicit(*m))
            .collect();
        AllocationRequest {
            fourcc,
            width,
            height,
            layouts,
        }
    }

    pub fn allows_implicit(&self) -> bool {
        self.layouts.is_empty() || self.layouts.contains(&Layout::Implicit)
    }

    /// The modifier list for the wire (`INVALID` stands for implicit).
    pub fn wire_modifiers(&self) -> Vec<Modifier> {
        self.layouts.iter().map(|l| l.to_wire()).collect()
    }

    /// Checks what the allocator reported against this request (rule 3).
    pub fn accept(&self, reported: Layout) -> Result<AllocationResult, ImplicitRuleError> {
        let layout = upgrade_or_validate(&self.layouts, reported)?;
        let how = match (reported, self.layouts.contains(&reported)) {
            (Layout::Implicit, _) => AllocatedAs::Implicit,
            (Layout::Explicit(_), true) => AllocatedAs::Explicit,
            (Layout::Explicit(_), false) => AllocatedAs::UpgradedFromImplicit,
        };
        Ok(AllocationResult {
            fourcc: self.fourcc,
            layout,
            how,
        })
    }
}

/// How a buffer came to have its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocatedAs {
    /// Allocated from an explicit list; the allocator chose one of its modifiers.
    Explicit,
    /// Allocated implicitly; the layout is not known.
    Implicit,
    /// Allocated implicitly, then the allocator reported a valid modifier (rule 3's upgrade).
    UpgradedFromImplicit,
}

/// An allocated buffer's format and layout, as checked against its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocationResult {
    pub fourcc: Fourcc,
    pub layout: Layout,
    pub how: AllocatedAs,
}

impl AllocationResult {
    /// Whether an importer may import this buffer with `import` as its modifier (rule 4).
    pub fn check_import(&self, import: Layout) -> Result<(), ImplicitRuleError> {
        match (self.how, self.layout, import) {
            // An upgraded buffer was still allocated implicitly, so implicit import stays legal.
            (AllocatedAs::Implicit | AllocatedAs::UpgradedFromImplicit, _, Layout::Implicit) => {
                Ok(())
            }
            (AllocatedAs::Explicit, Layout::Explicit(m), Layout::Implicit) => {
                Err(ImplicitRuleError::ImplicitImportOfExplicitBuffer(m))
            }
            (_, Layout::Implicit, Layout::Explicit(m)) => {
                Err(ImplicitRuleError::ExplicitImportOfImplicitBuffer(m))
            }
            (_, Layout::Explicit(allocated), Layout::Explicit(import)) if allocated != import => {
                Err(ImplicitRuleError::ModifierMismatch { allocated, import })
            }
            _ => Ok(()),
        }
    }
}

/// Validates the layout an allocator reported for a request listing `requested`, upgrading
/// implicit to explicit where the rules allow (rule 3 and its exception).
///
/// - `reported` implicit: fine only if the request allowed implicit (INVALID in the list, or
///   no list at all).
/// - `reported` explicit and listed: fine.
/// - `reported` explicit, not listed: an upgrade if the request allowed implicit (the driver
///   chose its own layout and told us), else the allocator broke the rules.
pub fn upgrade_or_validate(
    requested: &[Layout],
    reported: Layout,
) -> Result<Layout, ImplicitRuleError> {
    let allows_implicit = requested.is_empty() || requested.contains(&Layout::Implicit);
    match reported {
        Layout::Implicit if allows_implicit => Ok(Layout::Implicit),
        Layout::Implicit => Err(ImplicitRuleError::ImplicitNotRequested),
        Layout::Explicit(_) if requested.contains(&reported) || allows_implicit => Ok(reported),
        Layout::Explicit(m) => Err(ImplicitRuleError::NotInList(m)),
    }
}
