//! What the demo's producer and consumer state as negotiation participants, how they cross
//! the control socket, and what negotiation decides for each mode.

use dmabridge::ash::vk;
use dmabridge::{Direction, Engine, ParticipantRequest};
use dmabridge_interop::negotiate::{negotiate_with, ConversionKind, ConversionPlan, Domain, Member, NegotiateOptions, Outcome, Participant, Usage};
use dmabridge_interop::report::Report;
use dmabridge_interop::sync::{SyncMethod, SyncMethods};
use dmabridge_interop::{Format, FormatSet, Fourcc, Layout, Modifier, TileLayout};
use serde_json::Value;

use crate::error::DemoError;

use super::config::{Mode, DEMO_FORMATS};
use super::control::{WireFormat, WireParticipant};

/// How the producer's exported images are used (it writes them through a buffer alias; a
/// consumer on the same device could also copy from or sample them).
const EXPORT_USAGE: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(
    vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw() | vk::ImageUsageFlags::TRANSFER_DST.as_raw(),
);

/// Buffers the producer may hold at once (one being rendered, one queued).
pub const PRODUCER_MIN_BUFFERS: u32 = 2;

/// What the producer's GPU renders natively in copy mode: X-tiled AR24, as GPUs render into
/// tiled targets. The copy plan from it to the consumer's linear `--format` is one step for
/// AR24 (detile) and two for NV12 (detile, then RGB -> NV12), which the engine runs
/// ([`dmabridge::Converter::record_plan`]) in the frame's own submission.
pub const RENDER_LAYOUT: TileLayout = TileLayout::I915X;

/// Buffers the consumer may hold at once (the one it composites, one queued).
pub const CONSUMER_MIN_BUFFERS: u32 = 2;
/// The format of the producer's copy-mode render target ([`RENDER_LAYOUT`] AR24).
pub fn render_format() -> Result<Format, DemoError> {
    let m = RENDER_LAYOUT.modifier().ok_or_else(|| DemoError::Unavailable(format!("{RENDER_LAYOUT} has no modifier")))?;
    Ok(Format::explicit(Fourcc::ARGB8888, m))
}

/// What the producer states in zero-copy mode; its exports are bound to it.
pub fn producer_request(fourcc: Fourcc) -> ParticipantRequest {
    ParticipantRequest::new("producer", EXPORT_USAGE, Direction::Export).with_fourccs(&[fourcc])
}

/// The producer's own participant for `mode`.
pub fn producer_participant(engine: &Engine, mode: Mode, fourcc: Fourcc) -> Result<Participant, DemoError> {
    let participant = match mode {
        Mode::ZeroCopy => {
            engine.participant(&producer_request(fourcc))?
        }
        // The render target is the producer's own device-local buffer, in the tiled layout
        // its GPU renders (whatever the consumer's format).
        Mode::Copy => Participant::new("producer", [render_format()?].into_iter().collect::<FormatSet>()).with_sync(engine.sync_methods()),
    };
    Ok(participant.with_usage(Usage::RENDER).constrain(|c| {
        c.min_buffers = PRODUCER_MIN_BUFFERS;
        if mode == Mode::Copy {
            c.domain = Domain::DeviceLocal;
        }
    }))
}

/// What negotiation decided for one mode.
#[derive(Debug, Clone)]
pub struct Plan {
    pub mode: Mode,
    pub fourcc: Fourcc,
    pub pool: u32,
    pub acceptable: Vec<Layout>,
    pub conversion: Option<ConversionKind>,
    /// Copy mode: the conversion's steps, which the engine runs on every frame (at the
    /// negotiation's cost extent; the frame's own size is set when the mode runs).
    pub steps: Option<ConversionPlan>,
    pub report: Value,
    /// How producer and consumer synchronise each frame: the best method both support.
    pub sync: SyncMethod,
}

/// Negotiates `mode` between the producer and the consumer. Zero-copy needs a shared
/// outcome (copies are not allowed); copy mode forces a copy plan: the producer keeps its
/// render target device-local and the consumer takes frames in system memory.
pub fn plan_mode(producer: &Participant, consumer: &Participant, mode: Mode, fourcc: Fourcc) -> Result<Plan, String> {
    let mut consumer = consumer.clone();
    if mode == Mode::Copy {
        consumer.constraints.domain = Domain::System;
        // The consumer displays the demo's format: the plan must end there.
        if let Some(set) = consumer.formats.as_set() {
            let only: FormatSet = set.iter().filter(|f| f.fourcc == fourcc).copied().collect();
            consumer.formats = dmabridge_interop::negotiate::Candidates::Only(only);
        }
    }
    // The frames pass between these two whether they are shared or copied into.
    let sync = SyncMethods::best_common([&producer.sync, &consumer.sync]);
    let members = [Member::from(producer.clone()), Member::from(consumer)];
    let opts = NegotiateOptions { allow_copy: mode == Mode::Copy, ..NegotiateOptions::default() };
    let n = negotiate_with(&members, opts).map_err(|e| e.to_string())?;
    let report: Value = serde_json::from_str(&Report::new(&n).to_json()).unwrap_or(Value::Null);
    let conflicts = |c: &[dmabridge_interop::negotiate::Conflict]| c.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("; ");
    match (mode, n.outcome) {
        (Mode::ZeroCopy, Outcome::Shared(a)) => {
            let acceptable = a.layout.modifiers().iter().map(|m| Layout::Explicit(*m)).collect();
            if a.fourcc != fourcc {
                return Err(format!("negotiation chose {}, the producer renders {}", a.fourcc.trimmed(), fourcc.trimmed()));
            }
            Ok(Plan { mode, fourcc, pool: a.constraints.buffers.max(1), acceptable, conversion: None, steps: None, report, sync: a.sync })
        }
        (Mode::Copy, Outcome::Copy { plan, .. }) => {
            let conv = plan.conversions.first();
            let group = conv.and_then(|c| plan.groups.get(c.to_group));
            let (Some(conv), Some(group)) = (conv, group) else {
                return Err("the copy plan has no conversion".into());
            };
            if group.format.fourcc != fourcc || group.format.layout != Layout::Explicit(Modifier::LINEAR) {
                return Err(format!("the copy plan's consumer group wants {}, the demo writes linear {}", group.format, fourcc.trimmed()));
            }
            // The consumer's group, plus the frame the conversion is writing.
            Ok(Plan {
                mode,
                fourcc,
                pool: group.allocation.constraints.buffers.max(1) + 1,
                acceptable: vec![],
                conversion: Some(conv.kind),
                steps: Some(conv.plan.clone()),
                report,
                sync,
            })
        }
        (_, Outcome::Impossible(c)) => Err(format!("negotiation: {}", conflicts(&c))),
        (_, Outcome::Shared(_)) => Err("negotiation shared a buffer where a copy was forced".into()),
        (_, Outcome::Copy { conflicts: c, .. }) => Err(format!("no shared buffer: {}", conflicts(&c))),
    }
}

/// The consumer's participant: the AR24 and NV12 layouts its device imports for sampling,
/// and LINEAR through the engine's buffer-copy import wherever that takes them.
pub fn consumer_formats(engine: &Engine) -> Result<FormatSet, DemoError> {
    let req = ParticipantRequest {
        copy_import: true,
        ..ParticipantRequest::new("consumer", vk::ImageUsageFlags::SAMPLED, Direction::Import).with_fourccs(&DEMO_FORMATS)
    };
    let p = engine.participant(&req)?;
    Ok(p.formats.as_set().cloned().unwrap_or_default())
}

/// What the consumer says, as a negotiation participant.
pub fn participant_from_wire(w: &WireParticipant) -> Result<Participant, DemoError> {
    let mut set = FormatSet::new();
    for f in &w.formats {
        let fourcc: Fourcc = f.fourcc.parse().map_err(|e| DemoError::Protocol(format!("consumer format {}: {e}", f.fourcc)))?;
        let layout = match &f.modifier {
            None => Layout::Implicit,
            Some(m) => Layout::Explicit(Modifier::parse_hex(m).map_err(|e| DemoError::Protocol(format!("consumer modifier {m}: {e}")))?),
        };
        set.insert(Format { fourcc, layout });
    }
    Ok(Participant::new(w.name.clone(), set).with_usage(Usage::SAMPLE).with_sync(SyncMethods::of(w.sync.iter().copied())).constrain(|c| {
        c.min_buffers = w.min_buffers;
        c.read_only = w.read_only;
    }))
}

pub fn wire_formats(set: &FormatSet) -> Vec<WireFormat> {
    set.iter()
        .map(|f| WireFormat {
            fourcc: f.fourcc.trimmed(),
            modifier: f.layout.modifier().map(|m| format!("0x{:016x}", m.raw())),
        })
        .collect()
}
