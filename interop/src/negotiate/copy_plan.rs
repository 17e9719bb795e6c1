//! Copy plans: when no single buffer serves everyone, split the participants into groups
//! that each share a buffer, and feed every group from the producer's group through one
//! conversion that #5 (the copy fallback) provides.
//!
//! Search: every partition of the participants (restricted growth strings, Bell(8) = 4140
//! for the 8-participant limit), with each subset's feasibility computed once (at most
//! 2^8 subsets). Data flows from the group holding the first writer (the producer) to
//! each other group, a star: one conversion per other group. A conversion may be a chain
//! of steps (tiled YUV -> RGB, RGB -> tiled YUV, tiled -> tiled through linear), fused where
//! the copy fallback has a fused path. Each conversion carries its steps as data
//! ([`ConversionPlan`]: every step with the format and modifier it reads and writes, and the
//! extent), derived once from the two formats by [`Step::chain`], the table the converter
//! runs; the engine executes them (`Converter::record_plan`), and [`PlanFile`] is their
//! JSON file (`negotiate --plan-out`, `convert --plan`). The cost of a
//! conversion is the bytes it reads plus the bytes it writes per frame, with tile padding
//! (`tiling::tiled_size`, which is `format_info`'s packed size for linear), at the largest
//! extent everyone accepts (capped at 16384 per side, so that sizes cannot overflow). A
//! group is fed without a colour conversion wherever one that keeps the pixels exists. The cheapest plan wins; ties go
//! to fewer groups, then to the first found (participants stay with earlier ones).
//!
//! Each group is pinned to one explicit format: a conversion must know the layout it
//! reads or writes, so implicit layouts cannot take part, and the kernel's choice among
//! several modifiers is not left open. dmabridge's converter addresses the layouts of
//! [`TileLayout`]; a modifier outside it (an AMD, NVIDIA or Intel CCS tiling) joins a plan only
//! through a participant's GPU that copies it ([`ConversionKind::DeviceCopy`], from the
//! participant's [`DeviceCopy`]: `vkCmdCopyImage`, the driver addressing both layouts). Such a
//! layout's bytes are costed as its packed linear size (its tile padding and metadata are
//! the driver's, unknown here). Where both a converter step and a device copy feed a group
//! at the same cost, the converter's is taken (it runs wherever dmabridge does).

use std::collections::HashMap;
use std::fmt;

use tracing::debug;

use super::constraints::{merge, MergeRules};
use super::device::DeviceCopy;
use super::participant::{ExtentRange, Participant};
use super::reconcile::{Allocation, ChainLayout};
use crate::tiling::{tiled_size, FrameConversion, Step};
use crate::tiling::FrameConversionError;
use crate::Modifier;
use crate::{Format, Fourcc, Layout, TileLayout};

/// The most participants a copy plan is searched for (Bell(8) = 4140 partitions).
pub const MAX_COPY_PARTICIPANTS: usize = 8;

/// Extents are capped at this for costs, so that `u64` byte counts cannot overflow.
const COST_EXTENT_CAP: u32 = 16384;

/// A conversion #5 (the copy fallback) provides, from one explicit format to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConversionKind {
    /// Tiled layout to linear, same fourcc.
    Detile(TileLayout),
    /// Linear to a tiled layout, same fourcc.
    Tile(TileLayout),
    /// Linear to linear, same fourcc (a move between memory domains or CPU visibility).
    CopyLinear,
    /// NV12 or P010 (linear) to an RGB format (linear): AR24, XR24, AB24, XB24, RA24,
    /// RX24, BA24, BX24, AR30, XR30.
    YuvToRgb { from: Fourcc, to: Fourcc },
    /// An 8-bit RGB format (linear) to NV12 (linear).
    RgbToYuv { from: Fourcc, to: Fourcc },
    /// Anything else a chain of those steps does, fused where a fused path exists: tiled
    /// YUV -> RGB (one pass), RGB -> tiled YUV, tiled -> tiled through linear.
    Chain { from_layout: TileLayout, from: Fourcc, to_layout: TileLayout, to: Fourcc },
    /// A participant's GPU copies one layout of `fourcc` into another with `vkCmdCopyImage`
    /// (its driver addresses both; the [`Conversion`] names the participant). The engine
    /// runs it on that GPU: `dmabridge::ExportedImage::copy_from_and_release`.
    ///
    /// `to` is [`Modifier::INVALID`] where the copy is into the GPU's own image, in the
    /// layout its driver chooses (a device without the modifier extension, reading a LINEAR
    /// dma-buf through its buffer-copy import: `vkCmdCopyBufferToImage`; the engine runs it
    /// as `dmabridge::Engine::import_dmabuf`, whose import is then a copy).
    DeviceCopy { fourcc: Fourcc, from: Modifier, to: Modifier },
}

impl ConversionKind {
    /// The conversion from `from` to `to`, if #5 provides one, in one step or a chain: the
    /// steps come from [`Step::chain`], the table the converter runs.
    pub fn between(from: Format, to: Format) -> Option<ConversionKind> {
        let (src, dst) = (tile_layout(from)?, tile_layout(to)?);
        let steps = Step::chain((src, from.fourcc), (dst, to.fourcc)).ok()?;
        Some(ConversionKind::of_steps(&steps, (src, from.fourcc), (dst, to.fourcc)))
    }

    /// The kind a chain of steps from `from` to `to` is.
    fn of_steps(steps: &[Step], from: (TileLayout, Fourcc), to: (TileLayout, Fourcc)) -> ConversionKind {
        match steps {
            [Step::Copy] => ConversionKind::CopyLinear,
            [Step::Detile(t)] => ConversionKind::Detile(*t),
            [Step::Tile(t)] => ConversionKind::Tile(*t),
            [Step::YuvToRgb { layout: TileLayout::Linear, from, to }] => ConversionKind::YuvToRgb { from: *from, to: *to },
            [Step::RgbToNv12 { from }] => ConversionKind::RgbToYuv { from: *from, to: Fourcc::NV12 },
            _ => ConversionKind::Chain { from_layout: from.0, from: from.1, to_layout: to.0, to: to.1 },
        }
    }

    /// (layout, fourcc) read and written by dmabridge's converter, for a conversion whose
    /// source group holds `from`; `None` for a [`ConversionKind::DeviceCopy`] (a driver's, in
    /// layouts the converter need not know).
    pub fn endpoints(&self, from: Fourcc) -> Option<((TileLayout, Fourcc), (TileLayout, Fourcc))> {
        let linear = TileLayout::Linear;
        Some(match *self {
            ConversionKind::Detile(t) => ((t, from), (linear, from)),
            ConversionKind::Tile(t) => ((linear, from), (t, from)),
            ConversionKind::CopyLinear => ((linear, from), (linear, from)),
            ConversionKind::YuvToRgb { from, to } | ConversionKind::RgbToYuv { from, to } => ((linear, from), (linear, to)),
            ConversionKind::Chain { from_layout, from, to_layout, to } => ((from_layout, from), (to_layout, to)),
            ConversionKind::DeviceCopy { .. } => return None,
        })
    }

    /// The Vulkan command a device copy is: `vkCmdCopyImage` between dma-bufs, or
    /// `vkCmdCopyBufferToImage` into the GPU's own image; `None` for the converter's kinds.
    pub fn device_command(&self) -> Option<&'static str> {
        match *self {
            ConversionKind::DeviceCopy { to, .. } if to.is_invalid() => Some("vkCmdCopyBufferToImage"),
            ConversionKind::DeviceCopy { .. } => Some("vkCmdCopyImage"),
            _ => None,
        }
    }

    /// The converter's steps, in order ([`Step::chain`] of the endpoints; what `dmabridge
    /// convert` runs); none for a device copy.
    pub fn steps(&self, from: Fourcc) -> Vec<Step> {
        self.endpoints(from).and_then(|(f, t)| Step::chain(f, t).ok()).unwrap_or_default()
    }
}

/// The tiled layout of an explicit format, if dmabridge converts it.
fn tile_layout(f: Format) -> Option<TileLayout> {
    match f.layout {
        Layout::Explicit(m) => TileLayout::from_modifier(m),
        Layout::Implicit => None,
    }
}

impl fmt::Display for ConversionKind {
    /// The JSON `kind`: `detile samsung-64x32 -> linear`, `yuv->rgb NV12 -> AB24`, `copy
    /// linear`; a chain as its steps joined with `, then `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConversionKind::Detile(t) => write!(f, "detile {t} -> linear"),
            ConversionKind::Tile(t) => write!(f, "tile linear -> {t}"),
            ConversionKind::CopyLinear => f.write_str("copy linear"),
            ConversionKind::YuvToRgb { from, to } => {
                write!(f, "yuv->rgb {} -> {}", from.trimmed(), to.trimmed())
            }
            ConversionKind::RgbToYuv { from, to } => {
                write!(f, "rgb->yuv {} -> {}", from.trimmed(), to.trimmed())
            }
            ConversionKind::Chain { from, .. } => {
                let steps: Vec<String> = self.steps(*from).iter().map(|s| s.to_string()).collect();
                f.write_str(&steps.join(", then "))
            }
            ConversionKind::DeviceCopy { fourcc, from, to } if to.is_invalid() => write!(f, "device copy {} {from} -> its own image (implicit layout)", fourcc.trimmed()),
            ConversionKind::DeviceCopy { fourcc, from, to } => write!(f, "device copy {} {from} -> {to}", fourcc.trimmed()),
        }
    }
}

/// What a [`PlanStep`] does: the serialised name of a [`Step`], whose layouts are the
/// modifiers of the step's formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepOp {
    /// Tiled -> linear, same fourcc.
    Detile,
    /// Linear -> tiled, same fourcc.
    Tile,
    /// NV12/P010 -> linear RGB; from a tiled layout, detile and colour in one pass.
    YuvToRgb,
    /// Linear 8-bit RGB -> linear NV12.
    RgbToYuv,
    /// Linear -> linear, same fourcc.
    Copy,
    /// A GPU's `vkCmdCopyImage` between two layouts of one fourcc (the plan's only step; it
    /// runs where the conversion's `runs_on` says, not in the converter).
    DeviceCopy,
}

impl StepOp {
    fn of(step: &Step) -> StepOp {
        match step {
            Step::Detile(_) => StepOp::Detile,
            Step::Tile(_) => StepOp::Tile,
            Step::YuvToRgb { .. } => StepOp::YuvToRgb,
            Step::RgbToNv12 { .. } => StepOp::RgbToYuv,
            Step::Copy => StepOp::Copy,
        }
    }
}

/// A format a plan step reads or writes: explicit (a step must know the layout it
/// addresses), but for a device copy's destination, which may be [`Modifier::INVALID`]: the
/// copier's own image, laid out by its driver ([`ConversionKind::DeviceCopy`]). JSON:
/// `{"fourcc": "NV12", "modifier": "0x0100000000000001"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PlanFormat {
    pub fourcc: Fourcc,
    pub modifier: Modifier,
}

impl PlanFormat {
    /// The format, as the rest of dmabridge speaks it.
    pub fn format(&self) -> Format {
        Format::explicit(self.fourcc, self.modifier)
    }

    /// Its tiled layout, if dmabridge converts that modifier.
    pub fn layout(&self) -> Result<TileLayout, PlanError> {
        TileLayout::from_modifier(self.modifier).ok_or(PlanError::NoLayout(self.format()))
    }

    fn of(layout: TileLayout, fourcc: Fourcc) -> Result<PlanFormat, PlanError> {
        let modifier = layout.modifier().ok_or(PlanError::NoModifier(layout))?;
        Ok(PlanFormat { fourcc, modifier })
    }
}

impl fmt::Display for PlanFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match TileLayout::from_modifier(self.modifier) {
            Some(l) => write!(f, "{} {l}", self.fourcc.trimmed()),
            None => write!(f, "{}", self.format()),
        }
    }
}

/// One step of a [`ConversionPlan`]: what it does, what it reads and writes, and the frame
/// size. JSON: `{"op": "detile", "from": {...}, "to": {...}, "width": 1920, "height": 1080}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PlanStep {
    pub op: StepOp,
    pub from: PlanFormat,
    pub to: PlanFormat,
    pub width: u32,
    pub height: u32,
}

impl PlanStep {
    /// The [`Step`] this is, if it is exactly what [`Step::chain`] does between its formats
    /// in one step (a plan from a file is checked here, so it can only ask for steps the
    /// converter has).
    pub fn step(&self) -> Result<Step, PlanError> {
        let refuse = |why: String| PlanError::Step { step: self.to_string(), why };
        if self.op == StepOp::DeviceCopy {
            return Err(PlanError::OnDevice(self.to_string()));
        }
        let (from, to) = (self.from.layout()?, self.to.layout()?);
        let chain = Step::chain((from, self.from.fourcc), (to, self.to.fourcc)).map_err(|e| refuse(e.to_string()))?;
        match chain.as_slice() {
            [one] if StepOp::of(one) == self.op => Ok(*one),
            _ => {
                let names: Vec<String> = chain.iter().map(|s| s.to_string()).collect();
                Err(refuse(format!("from {} to {} the converter runs {}", self.from, self.to, names.join(", then "))))
            }
        }
    }
}

impl fmt::Display for PlanStep {
    /// `detile NV12 samsung-64x32 -> NV12 linear 1920x1080`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            StepOp::Detile => "detile",
            StepOp::Tile => "tile",
            StepOp::YuvToRgb => "yuv-to-rgb",
            StepOp::RgbToYuv => "rgb-to-yuv",
            StepOp::Copy => "copy",
            StepOp::DeviceCopy => "device-copy",
        };
        write!(f, "{op} {} -> {} {}x{}", self.from, self.to, self.width, self.height)
    }
}

/// The most steps a conversion plan may have ([`Step::chain`] makes at most three).
pub const MAX_PLAN_STEPS: usize = 8;

/// One conversion as data the engine runs (`Converter::run_plan`): its steps in order, each
/// reading what the one before wrote, derived once from the formats by [`Step::chain`]. JSON:
/// `{"from": {...}, "to": {...}, "width": W, "height": H, "steps": [PlanStep, ...]}`.
/// Colour steps use BT.709, limited range (what a video pipeline assumes when nothing says
/// otherwise). Buffers follow the tiled-buffer conventions (linear: tightly packed planes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ConversionPlan {
    pub from: PlanFormat,
    pub to: PlanFormat,
    pub width: u32,
    pub height: u32,
    pub steps: Vec<PlanStep>,
}

/// Why a conversion plan cannot be made or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The format is implicit or its modifier names no layout dmabridge converts.
    #[error("{0} has no layout dmabridge converts")]
    NoLayout(Format),
    /// The layout has no modifier to write into a plan.
    #[error("layout {0} has no modifier")]
    NoModifier(TileLayout),
    /// No conversion joins the two formats.
    #[error(transparent)]
    Frame(#[from] FrameConversionError),
    /// A step the converter does not have (its formats call for other steps, or none).
    #[error("step '{step}' cannot run: {why}")]
    Step { step: String, why: String },
    /// The steps do not join up: a step does not read what the one before wrote, or the
    /// first does not read the plan's input, or the last does not write its output.
    #[error("step {index} ('{step}') does not read what came before it ({expected})")]
    Broken { index: usize, step: String, expected: String },
    /// Steps at another extent than the plan's.
    #[error("step {index} ('{step}') is not at the plan's {width}x{height}")]
    Extent { index: usize, step: String, width: u32, height: u32 },
    /// A GPU's copy (`vkCmdCopyImage` between dma-bufs it imports and exports): the
    /// converter does not run it.
    #[error("step '{0}' is a GPU's copy between dma-bufs (vkCmdCopyImage), not a converter step")]
    OnDevice(String),
    /// A device copy that is not one step between two layouts of one fourcc.
    #[error("a device copy is one step between two layouts of one fourcc: {0}")]
    DeviceCopy(String),
    /// No steps, or more than [`MAX_PLAN_STEPS`].
    #[error("a plan has 1 to {MAX_PLAN_STEPS} steps, not {0}")]
    StepCount(usize),
}

impl ConversionPlan {
    /// The plan from `from` to `to` at `width` x `height`: [`Step::chain`] of the formats,
    /// each step with what it reads and writes. The extent must be valid for both formats.
    pub fn derive(from: Format, to: Format, (width, height): (u32, u32)) -> Result<ConversionPlan, PlanError> {
        let layout = |f: Format| tile_layout(f).ok_or(PlanError::NoLayout(f));
        let (fl, tl) = (layout(from)?, layout(to)?);
        FrameConversion::new((fl, from.fourcc), (tl, to.fourcc), width, height).steps()?;
        let chain = Step::chain((fl, from.fourcc), (tl, to.fourcc))?;
        let mut at = (fl, from.fourcc);
        let mut steps = Vec::with_capacity(chain.len());
        for step in &chain {
            let next = step.output(at);
            steps.push(PlanStep { op: StepOp::of(step), from: PlanFormat::of(at.0, at.1)?, to: PlanFormat::of(next.0, next.1)?, width, height });
            at = next;
        }
        Ok(ConversionPlan { from: PlanFormat::of(fl, from.fourcc)?, to: PlanFormat::of(tl, to.fourcc)?, width, height, steps })
    }

    /// The plan of a device copy from `from` (an explicit layout) to `to` (one of the same
    /// fourcc, or implicit: the copier's own image) at `width` x `height`: one
    /// [`StepOp::DeviceCopy`] step.
    pub fn device_copy(from: Format, to: Format, (width, height): (u32, u32)) -> Result<ConversionPlan, PlanError> {
        let f = from.layout.modifier().map(|modifier| PlanFormat { fourcc: from.fourcc, modifier }).ok_or(PlanError::NoLayout(from))?;
        let t = PlanFormat { fourcc: to.fourcc, modifier: to.layout.to_wire() };
        let step = PlanStep { op: StepOp::DeviceCopy, from: f, to: t, width, height };
        let plan = ConversionPlan { from: f, to: t, width, height, steps: vec![step] };
        plan.check_device_copy()?;
        Ok(plan)
    }

    /// Whether this is a device copy (its steps are not the converter's).
    pub fn is_device_copy(&self) -> bool {
        self.steps.iter().any(|s| s.op == StepOp::DeviceCopy)
    }

    /// Checks a plan as [`ConversionPlan::check`] does, or, for a device copy, that it is one
    /// step between two layouts of one fourcc at an extent that fourcc allows: what a plan
    /// file may hold.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.is_device_copy() {
            self.check_device_copy()
        } else {
            self.check().map(drop)
        }
    }

    fn check_device_copy(&self) -> Result<(), PlanError> {
        let refuse = |why: &str| PlanError::DeviceCopy(format!("{why} ({self})"));
        let [s] = self.steps.as_slice() else {
            return Err(refuse("more than one step"));
        };
        if s.op != StepOp::DeviceCopy || s.from != self.from || s.to != self.to {
            return Err(refuse("the step is not the plan's copy"));
        }
        if self.from.fourcc != self.to.fourcc {
            return Err(refuse("the fourcc changes"));
        }
        if self.from.modifier.is_invalid() {
            return Err(refuse("it reads an implicit layout, which no copy can address"));
        }
        if (s.width, s.height) != (self.width, self.height) {
            return Err(PlanError::Extent { index: 0, step: s.to_string(), width: self.width, height: self.height });
        }
        // The extent must be one the fourcc has: not zero, not overflowing, and whole
        // macropixels (an image of a subsampled format has an even width, and height for
        // 4:2:0: VUID-VkImageCreateInfo-format-04712/04713).
        tiled_size(TileLayout::Linear, self.from.fourcc, self.width, self.height).map_err(|e| refuse(&e.to_string()))?;
        let sub = crate::format_info::format_info(self.from.fourcc).map_or(crate::format_info::Subsampling::NONE, |i| i.subsampling);
        if self.width % u32::from(sub.h) != 0 || self.height % u32::from(sub.v) != 0 {
            return Err(refuse(&format!("{}x{} is not whole {} macropixels", self.width, self.height, sub.name())));
        }
        Ok(())
    }

    /// The same steps at another extent (a plan is made at the negotiation's cost extent
    /// and run on frames of their own size).
    pub fn at_extent(&self, width: u32, height: u32) -> ConversionPlan {
        let steps = self.steps.iter().map(|s| PlanStep { width, height, ..*s }).collect();
        ConversionPlan { width, height, steps, ..*self }
    }

    /// The steps as the converter runs them, after checking that each is one
    /// [`Step::chain`] has, that they join up from the plan's input to its output, and that
    /// both formats are defined at the plan's extent.
    pub fn check(&self) -> Result<Vec<Step>, PlanError> {
        if self.steps.is_empty() || self.steps.len() > MAX_PLAN_STEPS {
            return Err(PlanError::StepCount(self.steps.len()));
        }
        let mut at = self.from;
        let mut out = Vec::with_capacity(self.steps.len());
        for (index, s) in self.steps.iter().enumerate() {
            if s.from != at {
                return Err(PlanError::Broken { index, step: s.to_string(), expected: at.to_string() });
            }
            if (s.width, s.height) != (self.width, self.height) {
                return Err(PlanError::Extent { index, step: s.to_string(), width: self.width, height: self.height });
            }
            out.push(s.step()?);
            at = s.to;
        }
        if at != self.to {
            let index = self.steps.len() - 1;
            return Err(PlanError::Broken { index, step: self.steps[index].to_string(), expected: format!("a step that writes {}", self.to) });
        }
        // Every frame of the chain has a geometry at this extent (the ends' decide: the
        // middle frames are linear).
        self.direct()?.sizes()?;
        Ok(out)
    }

    /// The whole conversion in one, as `dmabridge convert` runs it without a plan (for
    /// sizes, and to compare with).
    pub fn direct(&self) -> Result<FrameConversion, PlanError> {
        Ok(FrameConversion::new((self.from.layout()?, self.from.fourcc), (self.to.layout()?, self.to.fourcc), self.width, self.height))
    }

    /// The frame conversion one step is, on its own.
    pub fn step_conversion(step: &PlanStep) -> Result<FrameConversion, PlanError> {
        Ok(FrameConversion::new((step.from.layout()?, step.from.fourcc), (step.to.layout()?, step.to.fourcc), step.width, step.height))
    }

    /// Runs the steps one after the other on the CPU fast path (`threads`: 0 for the
    /// default), into a new buffer.
    pub fn run_cpu(&self, input: &[u8], threads: usize) -> Result<Vec<u8>, PlanError> {
        self.check()?;
        let mut data: Option<Vec<u8>> = None;
        for s in &self.steps {
            let src = data.as_deref().unwrap_or(input);
            data = Some(Self::step_conversion(s)?.run_cpu(src, threads)?);
        }
        data.ok_or(PlanError::StepCount(0))
    }
}

impl fmt::Display for ConversionPlan {
    /// The steps joined with `, then `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let steps: Vec<String> = self.steps.iter().map(|s| s.to_string()).collect();
        f.write_str(&steps.join(", then "))
    }
}

/// The version [`PlanFile`] writes, and the only one it reads.
pub const PLAN_FILE_VERSION: u32 = 1;

/// The most conversions a [`PlanFile`] may hold (one per group but the producer's).
pub const MAX_PLAN_CONVERSIONS: usize = MAX_COPY_PARTICIPANTS;

/// A copy plan's conversions as a file: what `dmabridge negotiate --plan-out FILE` writes
/// and `dmabridge convert --plan FILE` runs. JSON:
/// `{"dmabridge_plan": 1, "conversions": [{"from_group": 0, "to_group": 1, "runs_on": "...",
/// "plan": ConversionPlan}]}` (`runs_on` with `--paths` only).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlanFile {
    /// [`PLAN_FILE_VERSION`].
    pub dmabridge_plan: u32,
    pub conversions: Vec<PlannedConversion>,
}

/// One conversion of a [`PlanFile`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlannedConversion {
    pub from_group: usize,
    pub to_group: usize,
    /// Where it runs, as the engine's cost model said (`negotiate --paths`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_on: Option<String>,
    pub plan: ConversionPlan,
}

/// Why a plan file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanFileError {
    #[error("not a dmabridge plan file: {0}")]
    Json(String),
    #[error("plan file version {0}; this dmabridge reads version {PLAN_FILE_VERSION}")]
    Version(u32),
    #[error("a plan file holds 1 to {MAX_PLAN_CONVERSIONS} conversions, not {0}")]
    Conversions(usize),
    #[error("conversion {index}: {source}")]
    Plan { index: usize, source: PlanError },
}

impl PlanFile {
    /// The file of `plan`'s conversions.
    pub fn of(plan: &CopyPlan) -> PlanFile {
        let conversions = plan
            .conversions
            .iter()
            .map(|c| PlannedConversion {
                from_group: c.from_group,
                to_group: c.to_group,
                runs_on: c.copier.as_ref().map(|c| c.to_string()),
                plan: c.plan.clone(),
            })
            .collect();
        PlanFile { dmabridge_plan: PLAN_FILE_VERSION, conversions }
    }

    /// Parses and checks a plan file (every conversion's steps: [`ConversionPlan::check`]).
    /// Its size is the caller's to cap before it is read.
    pub fn parse(text: &str) -> Result<PlanFile, PlanFileError> {
        let file: PlanFile = serde_json::from_str(text).map_err(|e| PlanFileError::Json(e.to_string()))?;
        if file.dmabridge_plan != PLAN_FILE_VERSION {
            return Err(PlanFileError::Version(file.dmabridge_plan));
        }
        if file.conversions.is_empty() || file.conversions.len() > MAX_PLAN_CONVERSIONS {
            return Err(PlanFileError::Conversions(file.conversions.len()));
        }
        for (index, c) in file.conversions.iter().enumerate() {
            c.plan.validate().map_err(|source| PlanFileError::Plan { index, source })?;
        }
        Ok(file)
    }

    /// The JSON document, pretty-printed.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// One buffer collection of a copy plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyGroup {
    /// The format the group's buffers are allocated with (always explicit).
    pub format: Format,
    /// Its allocation; `layout` holds exactly `format`'s modifier.
    pub allocation: Allocation,
}

/// One conversion per frame, from one group's buffer to another's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    pub from_group: usize,
    pub to_group: usize,
    pub kind: ConversionKind,
    /// Bytes read plus bytes written per frame (see the module docs).
    pub bytes_per_frame: u64,
    /// Its steps, at the plan's cost extent: what the engine runs
    /// ([`ConversionPlan::at_extent`] for frames of another size).
    pub plan: ConversionPlan,
    /// For a [`ConversionKind::DeviceCopy`]: the participant whose GPU copies.
    pub copier: Option<Copier>,
}

/// The participant whose GPU makes a device copy, and that GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copier {
    pub participant: String,
    /// [`Participant::device`], where it said.
    pub device: Option<String>,
}

impl fmt::Display for Copier {
    /// `igpu (AMD Radeon 780M (radv, Mesa 25.0.7))`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.device {
            Some(d) => write!(f, "{} ({d})", self.participant),
            None => f.write_str(&self.participant),
        }
    }
}

/// Groups and the conversions between them. Group 0 holds the producer (the first writer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    pub groups: Vec<CopyGroup>,
    pub conversions: Vec<Conversion>,
    pub bytes_per_frame: u64,
    /// The frame size (width, height) the byte counts are for.
    pub cost_extent: (u32, u32),
}

/// Why no copy plan exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyPlanError {
    #[error(
        "{0} participants are more than the {MAX_COPY_PARTICIPANTS} a copy plan is searched for"
    )]
    TooManyParticipants(usize),
    #[error("no participant writes the buffer, so there is nothing to copy from")]
    NoWriter,
    #[error("no split into groups is joined by conversions dmabridge provides (detile, tile, tiled NV12/P010 -> RGB, RGB -> tiled NV12, linear copy) or a participant's GPU copies (between layouts it imports and exports)")]
    NoSplit,
}

/// What a subset of participants can share, if anything, indexed so that feeding it from one
/// format looks only at the candidates a conversion can reach (a driver lists hundreds of
/// layouts; comparing every pair would make the search quadratic in them).
struct GroupInfo {
    /// Convertible common formats in preference order, one per (fourcc, layout).
    candidates: Vec<(Format, u64)>,
    /// The candidates in a layout the converter knows, by fourcc (indices, in preference
    /// order): at most one per [`TileLayout`] for each fourcc.
    known: HashMap<Fourcc, Vec<usize>>,
    /// For each copier (an index into the planner's copiers) and fourcc, the candidate it
    /// writes at the lowest cost (the first in preference at one cost).
    copy_target: HashMap<(usize, Fourcc), usize>,
}

/// Plans copies for `parts`, which already failed to share one buffer.
pub(crate) fn plan_copy(parts: &[&Participant]) -> Result<CopyPlan, CopyPlanError> {
    let n = parts.len();
    if n > MAX_COPY_PARTICIPANTS {
        return Err(CopyPlanError::TooManyParticipants(n));
    }
    let producer = parts
        .iter()
        .position(|p| !p.constraints.read_only)
        .ok_or(CopyPlanError::NoWriter)?;
    let (w, h) = cost_extent(parts);
    let copiers: Vec<(usize, &DeviceCopy)> = parts.iter().enumerate().filter_map(|(i, p)| Some((i, p.copy.as_deref()?))).collect();
    let mut memo: HashMap<u32, Option<GroupInfo>> = HashMap::new();
    let mut edges_memo: EdgeMemo = HashMap::new();
    let mut best: Option<Candidate> = None;
    let mut rgs = vec![0usize; n];
    partitions(&mut rgs, 1, 0, &mut |assign| {
        let count = assign.iter().max().map_or(0, |m| m + 1);
        if count < 2 {
            return;
        }
        let masks: Vec<u32> = (0..count)
            .map(|g| {
                assign
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| **a == g)
                    .fold(0u32, |m, (i, _)| m | 1 << i)
            })
            .collect();
        for &mask in &masks {
            memo.entry(mask)
                .or_insert_with(|| group_info(parts, mask, w, h, &copiers));
        }
        let source = assign[producer];
        if let Some(c) = evaluate(&masks, source, &memo, (w, h), &copiers, &mut edges_memo) {
            let better = best.as_ref().map_or(true, |b| {
                (c.bytes, c.masks.len()) < (b.bytes, b.masks.len())
            });
            if better {
                best = Some(c);
            }
        }
    });
    let best = best.ok_or(CopyPlanError::NoSplit)?;
    debug!(bytes = best.bytes, groups = best.masks.len(), "copy plan");
    Ok(build(parts, best, (w, h)))
}

/// The extent costs are computed at: the largest everyone accepts, capped.
fn cost_extent(parts: &[&Participant]) -> (u32, u32) {
    let mut wr = ExtentRange::ANY;
    let mut hr = ExtentRange::ANY;
    for p in parts {
        wr = wr.intersect(p.constraints.width);
        hr = hr.intersect(p.constraints.height);
    }
    (
        wr.max.clamp(1, COST_EXTENT_CAP),
        hr.max.clamp(1, COST_EXTENT_CAP),
    )
}

/// Calls `f` with every set partition of `assign.len()` items as a restricted growth
/// string: item 0 in group 0, each next item in an existing group or the next new one.
fn partitions(assign: &mut [usize], i: usize, max: usize, f: &mut dyn FnMut(&[usize])) {
    if i >= assign.len() {
        f(assign);
        return;
    }
    for g in 0..=max + 1 {
        assign[i] = g;
        partitions(assign, i + 1, max.max(g), f);
    }
}

fn members(parts: &[&Participant], mask: u32) -> Vec<usize> {
    (0..parts.len()).filter(|i| mask & (1 << i) != 0).collect()
}

fn group_info(parts: &[&Participant], mask: u32, w: u32, h: u32, copiers: &[(usize, &DeviceCopy)]) -> Option<GroupInfo> {
    let idx = members(parts, mask);
    let group: Vec<&Participant> = idx.iter().map(|&i| parts[i]).collect();
    // A group fed by a conversion needs no writer; every other rule still holds.
    let (_, conflicts) = merge(&group, MergeRules { fed_by_copy: true });
    if !conflicts.is_empty() {
        return None;
    }
    let leader = group.iter().find_map(|p| p.formats.as_set())?;
    let mut candidates: Vec<(Format, u64)> = Vec::new();
    let copied = |f: &Format| copiers.iter().any(|(_, c)| c.reads.contains(f) || c.writes.contains(f));
    // A copier's own image: the one participant of its group, whose copy writes it.
    let own_image = |c: usize, f: &Format| idx == [c] && parts[c].copy.as_ref().is_some_and(|copy| copy.writes.contains(f));
    for f in leader.iter() {
        // An implicit format is a candidate only as a copier's own image (its buffer-copy
        // import writes it, and no one else can address it).
        let m = match f.layout {
            Layout::Explicit(m) => m,
            Layout::Implicit if idx.len() == 1 && own_image(idx[0], f) => Modifier::INVALID,
            Layout::Implicit => continue,
        };
        if !group.iter().all(|p| p.formats.accepts(f)) {
            continue;
        }
        // The buffer's real size, tile padding included, where dmabridge knows the layout
        // (one it does not define for this fourcc is no candidate). A driver's layout only
        // a copier's GPU can read or write, costed as its packed linear size (module docs);
        // with no copier for it, it joins nothing, and is left out before the search
        // compares every pair of candidates.
        let costed = match TileLayout::from_modifier(m) {
            Some(layout) => layout,
            None if copied(f) => TileLayout::Linear,
            None => continue,
        };
        let Ok(bytes) = tiled_size(costed, f.fourcc, w, h).map(|g| g.size) else {
            continue;
        };
        candidates.push((*f, bytes));
    }
    if candidates.is_empty() {
        return None;
    }
    let mut known: HashMap<Fourcc, Vec<usize>> = HashMap::new();
    let mut copy_target: HashMap<(usize, Fourcc), usize> = HashMap::new();
    for (i, &(f, bytes)) in candidates.iter().enumerate() {
        if tile_layout(f).is_some() {
            known.entry(f.fourcc).or_default().push(i);
        }
        let writes = |(who, copy): &(usize, &DeviceCopy)| match f.layout {
            Layout::Implicit => own_image(*who, &f),
            Layout::Explicit(_) => copy.writes.contains(&f),
        };
        for (c, _) in copiers.iter().enumerate().filter(|(_, w)| writes(w)) {
            copy_target
                .entry((c, f.fourcc))
                .and_modify(|best| {
                    if bytes < candidates[*best].1 {
                        *best = i;
                    }
                })
                .or_insert(i);
        }
    }
    Some(GroupInfo { candidates, known, copy_target })
}

struct Candidate {
    masks: Vec<u32>,
    formats: Vec<Format>,
    /// (to_group, edge), with group indices into `masks`.
    edges: Vec<(usize, Edge)>,
    source: usize,
    bytes: u64,
}

/// One way to feed a group: the format it gets, the conversion, its bytes per frame, its
/// steps, and the participant (an index into the plan's) whose GPU copies, for a device copy.
#[derive(Clone)]
struct Edge {
    to: Format,
    kind: ConversionKind,
    bytes: u64,
    plan: ConversionPlan,
    copier: Option<usize>,
}

type EdgeMemo = HashMap<(Format, u32), Option<Edge>>;

/// One way `src` reaches a candidate: the candidate's index and, for a GPU's copy, the
/// copier's index (into the planner's copiers).
#[derive(Clone, Copy)]
struct Route {
    to: usize,
    copier: Option<usize>,
}

/// The cheapest way to feed the group `mask` from `src` (first in its preference on ties).
fn cheapest_edge(
    src: Format,
    src_bytes: u64,
    mask: u32,
    info: &GroupInfo,
    extent: (u32, u32),
    copiers: &[(usize, &DeviceCopy)],
    memo: &mut EdgeMemo,
) -> Option<Edge> {
    memo.entry((src, mask)).or_insert_with(|| {
        // The converter reaches only layouts it knows, in the fourccs its chain reaches; a
        // copier only its own writes of src's fourcc, of which its cheapest is enough.
        let converted = Step::targets(src.fourcc)
            .into_iter()
            .flat_map(|fourcc| info.known.get(&fourcc).into_iter().flatten())
            .filter(|&&to| ConversionKind::between(src, info.candidates[to].0).is_some())
            .map(|&to| Route { to, copier: None });
        let copied = copiers.iter().enumerate().filter_map(|(c, (_, copy))| {
            let to = *info.copy_target.get(&(c, src.fourcc))?;
            copy.copies(src, info.candidates[to].0).then_some(Route { to, copier: Some(c) })
        });
        let mut routes: Vec<Route> = converted.chain(copied).collect();
        // A colour conversion changes the pixels (subsampling, rounding): it is taken only
        // where no conversion that keeps them can feed the group, however few bytes it would
        // move. At one cost, the converter's step before a GPU's copy; then preference.
        routes.sort_by_key(|r| {
            let (to, bytes) = info.candidates[r.to];
            (to.fourcc != src.fourcc, bytes, r.copier.is_some(), r.to)
        });
        routes.into_iter().find_map(|r| edge(src, src_bytes, info.candidates[r.to], r.copier.map(|c| copiers[c].0), extent))
    })
    .clone()
}

/// The edge from `src` to `to`, with its steps: the converter's chain, or the GPU copy of the
/// participant `copier` (an index into the plan's participants).
fn edge(src: Format, src_bytes: u64, (to, bytes): (Format, u64), copier: Option<usize>, extent: (u32, u32)) -> Option<Edge> {
    let (kind, plan) = match copier {
        None => (ConversionKind::between(src, to)?, ConversionPlan::derive(src, to, extent).ok()?),
        Some(_) => {
            let plan = ConversionPlan::device_copy(src, to, extent).ok()?;
            (ConversionKind::DeviceCopy { fourcc: src.fourcc, from: plan.from.modifier, to: plan.to.modifier }, plan)
        }
    };
    Some(Edge { to, kind, bytes: src_bytes.saturating_add(bytes), plan, copier })
}

/// The cheapest choice of formats for one partition, if every group can be fed.
fn evaluate(
    masks: &[u32],
    source: usize,
    groups: &HashMap<u32, Option<GroupInfo>>,
    extent: (u32, u32),
    copiers: &[(usize, &DeviceCopy)],
    edges_memo: &mut EdgeMemo,
) -> Option<Candidate> {
    let infos: Vec<&GroupInfo> = masks
        .iter()
        .map(|m| groups.get(m).and_then(Option::as_ref))
        .collect::<Option<_>>()?;
    let mut best: Option<Candidate> = None;
    for &(src_format, src_bytes) in &infos[source].candidates {
        let mut formats = vec![src_format; masks.len()];
        let mut edges = Vec::new();
        let mut total = 0u64;
        let mut feasible = true;
        for (g, info) in infos.iter().enumerate().filter(|(g, _)| *g != source) {
            let Some(edge) = cheapest_edge(src_format, src_bytes, masks[g], info, extent, copiers, edges_memo) else {
                feasible = false;
                break;
            };
            formats[g] = edge.to;
            total = total.saturating_add(edge.bytes);
            edges.push((g, edge));
        }
        if feasible && best.as_ref().map_or(true, |b| total < b.bytes) {
            best = Some(Candidate {
                masks: masks.to_vec(),
                formats,
                edges,
                source,
                bytes: total,
            });
        }
    }
    best
}

fn build(parts: &[&Participant], c: Candidate, cost_extent: (u32, u32)) -> CopyPlan {
    // Group 0 is the producer's; the rest keep their order (by first participant).
    let mut order: Vec<usize> = vec![c.source];
    order.extend((0..c.masks.len()).filter(|g| *g != c.source));
    let new_index = |g: usize| order.iter().position(|o| *o == g).unwrap_or(0);
    let groups = order
        .iter()
        .map(|&g| {
            let group: Vec<&Participant> = members(parts, c.masks[g])
                .into_iter()
                .map(|i| parts[i])
                .collect();
            let (merged, _) = merge(
                &group,
                MergeRules {
                    fed_by_copy: g != c.source,
                },
            );
            let format = c.formats[g];
            let layout = ChainLayout::Explicit(format.layout.modifier().into_iter().collect());
            let names = group.iter().map(|p| p.name.clone()).collect();
            CopyGroup {
                format,
                allocation: Allocation::from_merged(format.fourcc, layout, merged, names),
            }
        })
        .collect();
    let mut conversions: Vec<Conversion> = c
        .edges
        .iter()
        .map(|(g, e)| Conversion {
            from_group: 0,
            to_group: new_index(*g),
            kind: e.kind,
            bytes_per_frame: e.bytes,
            plan: e.plan.clone(),
            copier: e.copier.map(|i| Copier { participant: parts[i].name.clone(), device: parts[i].device.clone() }),
        })
        .collect();
    conversions.sort_by_key(|cv| cv.to_group);
    CopyPlan {
        groups,
        conversions,
        bytes_per_frame: c.bytes,
        cost_extent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FormatSet;

    #[test]
    fn partitions_are_all_set_partitions_once() {
        // Bell numbers: 1, 2, 5, 15, 52, ..., 4140 for 8.
        for (n, bell) in [(1, 1), (2, 2), (3, 5), (4, 15), (5, 52), (8, 4140)] {
            let mut seen = std::collections::HashSet::new();
            let mut assign = vec![0usize; n];
            partitions(&mut assign, 1, 0, &mut |a| {
                assert!(seen.insert(a.to_vec()), "{a:?} twice");
            });
            assert_eq!(seen.len(), bell, "n = {n}");
        }
    }

    #[test]
    fn more_than_eight_participants_are_not_searched() {
        let set: FormatSet = [Format::linear(Fourcc::NV12)].into_iter().collect();
        let parts: Vec<Participant> = (0..9)
            .map(|i| Participant::new(format!("p{i}"), set.clone()))
            .collect();
        let refs: Vec<&Participant> = parts.iter().collect();
        assert_eq!(plan_copy(&refs), Err(CopyPlanError::TooManyParticipants(9)));
    }

    fn x_tiled() -> Modifier {
        TileLayout::I915X.modifier().unwrap()
    }

    #[test]
    fn a_plan_carries_its_steps_and_each_step_its_formats() {
        let from = Format::explicit(Fourcc::ARGB8888, x_tiled());
        let plan = ConversionPlan::derive(from, Format::linear(Fourcc::NV12), (64, 32)).unwrap();
        let linear = |fourcc| PlanFormat { fourcc, modifier: Modifier::LINEAR };
        let tiled = PlanFormat { fourcc: Fourcc::ARGB8888, modifier: x_tiled() };
        assert_eq!(
            plan.steps,
            vec![
                PlanStep { op: StepOp::Detile, from: tiled, to: linear(Fourcc::ARGB8888), width: 64, height: 32 },
                PlanStep { op: StepOp::RgbToYuv, from: linear(Fourcc::ARGB8888), to: linear(Fourcc::NV12), width: 64, height: 32 },
            ]
        );
        assert_eq!(plan.check().unwrap(), vec![Step::Detile(TileLayout::I915X), Step::RgbToNv12 { from: Fourcc::ARGB8888 }]);
        // The same steps the converter's frame conversion runs, at any extent.
        assert_eq!(plan.check().unwrap(), plan.direct().unwrap().steps().unwrap());
        let big = plan.at_extent(1920, 1080);
        assert!(big.steps.iter().all(|s| (s.width, s.height) == (1920, 1080)) && big.check().is_ok());
        // The JSON form round-trips.
        let json = serde_json::to_string(&plan).unwrap();
        assert!(json.contains(r#""op":"detile""#) && json.contains(r#""modifier":"0x0100000000000001""#), "{json}");
        assert_eq!(serde_json::from_str::<ConversionPlan>(&json).unwrap(), plan);
    }

    #[test]
    fn a_plan_with_a_step_the_converter_lacks_is_refused_naming_it() {
        let plan = ConversionPlan::derive(Format::linear(Fourcc::NV12), Format::linear(Fourcc::ABGR8888), (64, 32)).unwrap();
        // R8 -> NV12 is no colour conversion dmabridge has.
        let mut bad = plan.clone();
        bad.from.fourcc = Fourcc::R8;
        bad.steps[0].from.fourcc = Fourcc::R8;
        match bad.check() {
            Err(PlanError::Step { step, .. }) => assert!(step.starts_with("yuv-to-rgb R8 linear -> AB24 linear"), "{step}"),
            other => panic!("{other:?}"),
        }
        // A step named for what its formats do not call for.
        let mut wrong = plan.clone();
        wrong.steps[0].op = StepOp::Detile;
        assert!(matches!(wrong.check(), Err(PlanError::Step { .. })));
        // Steps that do not join up, or none.
        let mut broken = plan.clone();
        broken.to.fourcc = Fourcc::XRGB8888;
        assert!(matches!(broken.check(), Err(PlanError::Broken { .. })));
        let empty = ConversionPlan { steps: vec![], ..plan.clone() };
        assert_eq!(empty.check(), Err(PlanError::StepCount(0)));
        let odd = plan.at_extent(0, 32);
        assert!(matches!(odd.check(), Err(PlanError::Frame(_))));
    }

    #[test]
    fn plan_files_are_checked_when_read() {
        let plan = ConversionPlan::derive(Format::explicit(Fourcc::NV12, TileLayout::Samsung64x32.modifier().unwrap()), Format::linear(Fourcc::XRGB8888), (64, 64)).unwrap();
        let file = PlanFile { dmabridge_plan: PLAN_FILE_VERSION, conversions: vec![PlannedConversion { from_group: 0, to_group: 1, runs_on: None, plan }] };
        assert_eq!(PlanFile::parse(&file.to_json()).unwrap(), file);
        assert!(matches!(PlanFile::parse("{}"), Err(PlanFileError::Json(_))));
        let v2 = file.to_json().replacen("\"dmabridge_plan\": 1", "\"dmabridge_plan\": 2", 1);
        assert_eq!(PlanFile::parse(&v2), Err(PlanFileError::Version(2)));
        let bad = file.to_json().replace("yuv-to-rgb", "copy");
        assert!(matches!(PlanFile::parse(&bad), Err(PlanFileError::Plan { index: 0, .. })));
    }

    #[test]
    fn costs_use_the_common_extent_capped() {
        let p = Participant::new("a", FormatSet::new())
            .constrain(|c| c.width = ExtentRange::new(16, 1920));
        assert_eq!(cost_extent(&[&p]), (1920, COST_EXTENT_CAP));
    }
}
