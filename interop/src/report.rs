//! The JSON model of `dmabridge negotiate --json`, a contract other tools depend on, and
//! its human-readable form.
//!
//! Field values per outcome:
//! - `shared`: `format`, `modifiers` (sorted numerically; the order means nothing, as in
//!   the kernel's lists), `implicit`, `buffers`, `alignment` describe the one collection;
//!   `groups` holds that one collection with every participant; `conversions` and
//!   `conflicts` are empty. An implicit chain has `"modifiers": []` and `"implicit": true`.
//! - `copy`: the top-level fields describe group 0, the producer's collection; `groups`
//!   lists every collection (each pinned to one modifier), `conversions` joins group 0 to
//!   each other group, and `conflicts` says why one collection was not enough.
//! - `impossible`: `format`, `buffers` and `alignment` are `null`, `modifiers`, `groups`
//!   and `conversions` are empty, `implicit` is false, and `conflicts` is not empty.
//! - `sync` (last): how the participants synchronise, `"sync-file"`, `"implicit-bridge"` or
//!   `"cpu-wait"`: the best method all of them support (for `copy`, group 0's; each group
//!   has its own `sync`); `null` when `impossible`.
//!
//! The document grows linearly with the number of participants: each is named in its own
//! group or conflict, and a conflict names at most
//! [`MAX_NAMES_SHOWN`](crate::negotiate::MAX_NAMES_SHOWN) of the others.

use std::fmt::Write as _;

use crate::negotiate::conflict::Conflict;
use crate::negotiate::outcome::{Negotiation, Outcome};
use crate::negotiate::reconcile::Allocation;
use crate::negotiate::copy_plan::ConversionKind;
use crate::sync::SyncMethod;
use crate::Modifier;

/// The three outcomes, as the JSON names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutcomeName {
    Shared,
    Copy,
    Impossible,
}

/// `dmabridge negotiate --json`'s document. Field order is the contract's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    pub outcome: OutcomeName,
    /// The fourcc without padding (`"NV12"`, `"R8"`).
    pub format: Option<String>,
    /// `0x` + 16 hex digits each.
    pub modifiers: Vec<Modifier>,
    pub implicit: bool,
    pub buffers: Option<u32>,
    pub alignment: Option<u64>,
    pub groups: Vec<ReportGroup>,
    pub conversions: Vec<ReportConversion>,
    pub conflicts: Vec<Conflict>,
    /// `"sync-file"`, `"implicit-bridge"` or `"cpu-wait"`; `null` when impossible.
    pub sync: Option<SyncMethod>,
    /// The collection's (group 0's) format as caps to paste into a GStreamer pipeline (see
    /// [`crate::peers::gst::paste_caps`]); empty when impossible or implicit.
    pub gst_caps: Vec<String>,
    /// The modifiers as the kernel names them, `drm_info` style:
    /// `I915_FORMAT_MOD_X_TILED (0x0100000000000001)`.
    pub modifier_names: Vec<String>,
    /// Each participant as the negotiation saw it, in preference order: the list its device
    /// or file gave, with the `--constraint`s given for it applied. Filled by
    /// [`Report::with_participants`]; absent from the JSON when not filled.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub participants: Vec<ReportParticipant>,
    /// Where the one layout all share is LINEAR: what each participant listed for the
    /// format besides LINEAR, and so gives up (a GPU's tiled and compressed layouts).
    /// Filled by [`Report::with_participants`]; absent from the JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gives_up: Vec<GivenUp>,
}

/// What one participant gives up for a shared LINEAR buffer ([`Report::gives_up`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GivenUp {
    pub participant: String,
    /// The device its list describes, where it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The layouts it listed for the shared format besides LINEAR (`0x` + 16 hex digits).
    pub modifiers: Vec<Modifier>,
    /// The same, named as [`Modifier::display_name`] names them.
    pub names: Vec<String>,
}

/// One participant's list as read (`participants` of [`Report`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReportParticipant {
    pub name: String,
    /// Where the list came from, as given (`--v4l2-device /dev/video0`); `null` if unsaid.
    pub from: Option<String>,
    /// The device its list describes, where it is one (a GPU: its name and driver, live or
    /// from a saved probe); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Its formats as values, for what the report works out from them.
    #[serde(skip)]
    list: Option<Vec<crate::Format>>,
    /// Its formats in preference order, as `drm-format` strings (`NV12`,
    /// `NV12:0x0100000000000002`, `NV12:0x00ffffffffffffff` for an implicit modifier);
    /// `null` for a participant that accepts any format.
    pub formats: Option<Vec<String>>,
    /// Its constraints' extents as read: `[min, max]` pixels.
    pub width: [u32; 2],
    pub height: [u32; 2],
    /// The buffers it may hold at once.
    pub min_buffers: u32,
    /// Its row pitch alignment in bytes.
    pub stride_align: u64,
}

impl ReportParticipant {
    /// `p` as read; `from` says where its list came from.
    pub fn of(p: &crate::negotiate::Participant, from: Option<String>) -> Self {
        let formats = match &p.formats {
            crate::negotiate::Candidates::Any => None,
            crate::negotiate::Candidates::Only(set) => Some(set.iter().map(|f| crate::peers::gst::print_drm_format(*f).trim_end().to_owned()).collect()),
        };
        let c = &p.constraints;
        ReportParticipant {
            name: p.name.clone(),
            from,
            device: p.device.clone(),
            list: match &p.formats {
                crate::negotiate::Candidates::Any => None,
                crate::negotiate::Candidates::Only(set) => Some(set.iter().copied().collect()),
            },
            formats,
            width: [c.width.min, c.width.max],
            height: [c.height.min, c.height.max],
            min_buffers: c.min_buffers,
            stride_align: c.stride_align,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReportGroup {
    pub participants: Vec<String>,
    pub format: String,
    pub modifiers: Vec<Modifier>,
    pub sync: SyncMethod,
    /// As [`Report::gst_caps`], for this group.
    pub gst_caps: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReportConversion {
    pub from_group: usize,
    pub to_group: usize,
    pub kind: String,
    /// Each step, in order (a fused step is one).
    pub steps: Vec<String>,
    /// The `dmabridge convert` arguments that run it on a frame (add `--width`, `--height`,
    /// `--in`, `--out`); absent for a device copy (the driver's, between dma-bufs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub convert: Option<String>,
    /// Where it runs: for a device copy, the participant whose GPU copies and that GPU
    /// (always); otherwise as the engine's cost model says (`cpu`, `gpu`, `copy-commands`),
    /// when the caller asked (`negotiate --paths`), and absent if not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_on: Option<String>,
}

impl ReportConversion {
    fn of(c: &crate::negotiate::copy_plan::Conversion, from: crate::Fourcc) -> Self {
        let convert = c.kind.endpoints(from).map(|((fl, f), (tl, t))| format!("--format {} --from {fl} --to {tl} --to-format {}", f.trimmed(), t.trimmed()));
        let steps = match c.copier {
            Some(_) => c.plan.steps.iter().map(|s| s.to_string()).collect(),
            None => c.kind.steps(from).iter().map(|s| s.to_string()).collect(),
        };
        ReportConversion {
            from_group: c.from_group,
            to_group: c.to_group,
            kind: c.kind.to_string(),
            steps,
            convert,
            runs_on: c.copier.as_ref().map(|who| format!("{who} with {}", c.kind.device_command().unwrap_or("its copy"))),
        }
    }
}

fn group_of(a: &Allocation) -> ReportGroup {
    ReportGroup {
        participants: a.participants.clone(),
        format: a.fourcc.trimmed(),
        modifiers: a.layout.modifiers().to_vec(),
        sync: a.sync,
        gst_caps: caps_of(a),
    }
}

fn caps_of(a: &Allocation) -> Vec<String> {
    let formats: Vec<crate::Format> = a.layout.modifiers().iter().map(|m| crate::Format::explicit(a.fourcc, *m)).collect();
    crate::peers::gst::paste_caps(&formats)
}

impl Report {
    pub fn new(n: &Negotiation) -> Self {
        let empty = Report {
            outcome: OutcomeName::Impossible,
            format: None,
            modifiers: vec![],
            implicit: false,
            buffers: None,
            alignment: None,
            groups: vec![],
            conversions: vec![],
            conflicts: vec![],
            sync: None,
            gst_caps: vec![],
            modifier_names: vec![],
            participants: vec![],
            gives_up: vec![],
        };
        let top = |a: &Allocation| Report {
            format: Some(a.fourcc.trimmed()),
            modifiers: a.layout.modifiers().to_vec(),
            implicit: a.layout.is_implicit(),
            buffers: Some(a.constraints.buffers),
            alignment: Some(a.constraints.align),
            sync: Some(a.sync),
            gst_caps: caps_of(a),
            modifier_names: a.layout.modifiers().iter().map(|m| m.kernel_label()).collect(),
            ..empty.clone()
        };
        match &n.outcome {
            Outcome::Shared(a) => Report {
                outcome: OutcomeName::Shared,
                groups: vec![group_of(a)],
                ..top(a)
            },
            Outcome::Copy { plan, conflicts } => {
                let base = plan
                    .groups
                    .first()
                    .map_or_else(|| empty.clone(), |g| top(&g.allocation));
                Report {
                    outcome: OutcomeName::Copy,
                    groups: plan
                        .groups
                        .iter()
                        .map(|g| group_of(&g.allocation))
                        .collect(),
                    conversions: plan
                        .conversions
                        .iter()
                        .map(|c| {
                            let from = plan.groups.get(c.from_group).map_or(crate::Fourcc::NV12, |g| g.format.fourcc);
                            ReportConversion::of(c, from)
                        })
                        .collect(),
                    conflicts: conflicts.clone(),
                    ..base
                }
            }
            Outcome::Impossible(c) => Report {
                conflicts: c.clone(),
                ..empty
            },
        }
    }

    /// The report with each participant's list as read ([`Report::participants`]), and what
    /// each gives up where the one shared layout is LINEAR ([`Report::gives_up`]).
    pub fn with_participants(mut self, participants: Vec<ReportParticipant>) -> Self {
        let linear_only = self.outcome == OutcomeName::Shared && self.modifiers == [Modifier::LINEAR];
        let shared = self.format.as_deref().and_then(|f| crate::peers::gst::parse_drm_format(f).ok()).map(|f| f.fourcc);
        if let (true, Some(fourcc)) = (linear_only, shared) {
            self.gives_up = participants
                .iter()
                .filter_map(|p| {
                    let others: Vec<Modifier> = p
                        .list
                        .iter()
                        .flatten()
                        .filter(|f| f.fourcc == fourcc)
                        .filter_map(|f| f.layout.modifier())
                        .filter(|m| *m != Modifier::LINEAR)
                        .collect();
                    (!others.is_empty()).then(|| GivenUp {
                        participant: p.name.clone(),
                        device: p.device.clone(),
                        names: others.iter().map(|m| m.display_name()).collect(),
                        modifiers: others,
                    })
                })
                .collect();
        }
        self.participants = participants;
        self
    }

    /// What the report adds to [`human`]'s summary: the devices the participants are, and
    /// what each gives up for a shared LINEAR buffer. Empty when there is neither.
    pub fn notes(&self) -> String {
        let mut s = String::new();
        for p in &self.participants {
            if let Some(d) = &p.device {
                let _ = writeln!(s, "device {}: {d}", p.name);
            }
        }
        if !self.gives_up.is_empty() {
            let _ = writeln!(s, "LINEAR is the only layout every participant shares; each gives up the rest of its list for {}:", self.format.as_deref().unwrap_or("the format"));
            for g in &self.gives_up {
                let _ = writeln!(s, "  {} gives up {}", g.participant, g.names.join(", "));
            }
        }
        s
    }

    /// The CLI's exit status: 0 when there is a way (shared or copy), 2 when there is none.
    pub fn exit_code(&self) -> u8 {
        match self.outcome {
            OutcomeName::Shared | OutcomeName::Copy => 0,
            OutcomeName::Impossible => 2,
        }
    }

    pub fn to_json(&self) -> String {
        // Serializing these plain structs cannot fail; fall back to a valid document anyway.
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"outcome\":\"impossible\",\"error\":{:?}}}",
                e.to_string()
            )
        })
    }
}

fn mods(m: &[Modifier]) -> String {
    if m.is_empty() {
        return "implicit modifier".to_owned();
    }
    m.iter().map(|m| m.kernel_label()).collect::<Vec<_>>().join(", ")
}

/// A short summary for people.
pub fn human(n: &Negotiation) -> String {
    let mut s = String::new();
    let conflicts = |s: &mut String, title: &str, c: &[Conflict]| {
        if !c.is_empty() {
            let _ = writeln!(s, "{title}");
            for c in c {
                let _ = writeln!(
                    s,
                    "  {} [{}]: {}",
                    c.constraint,
                    c.participants.join(", "),
                    c.detail
                );
                let _ = writeln!(s, "    fix: {}", c.fix);
            }
        }
    };
    match &n.outcome {
        Outcome::Shared(a) => {
            let _ = writeln!(
                s,
                "shared: {} with {}",
                a.fourcc.trimmed(),
                mods(a.layout.modifiers())
            );
            let _ = writeln!(
                s,
                "  buffers {}, alignment {}, stride alignment {}, width {}, height {}, cpu-access {}, domain {}",
                a.constraints.buffers,
                a.constraints.align,
                a.constraints.stride_align,
                a.width,
                a.height,
                a.constraints.cpu_access.name(),
                a.constraints.domain.name()
            );
            let _ = writeln!(
                s,
                "  participants: {}; writers: {}",
                a.participants.join(", "),
                a.writers.join(", ")
            );
            if a.constraints.max_buffers.is_some() || a.constraints.min_size > 0 || a.constraints.offset_align > 1 {
                let _ = writeln!(
                    s,
                    "  max buffers {}, min size {}, offset alignment {}",
                    a.constraints.max_buffers.map_or_else(|| "none".to_owned(), |m| m.to_string()),
                    a.constraints.min_size,
                    a.constraints.offset_align
                );
            }
            let _ = writeln!(s, "  sync: {}", a.sync);
            for caps in caps_of(a) {
                let _ = writeln!(s, "  caps: {caps}");
            }
        }
        Outcome::Copy { plan, conflicts: c } => {
            let (w, h) = plan.cost_extent;
            let _ = writeln!(
                s,
                "copy: {} groups, {} bytes converted per {w}x{h} frame",
                plan.groups.len(),
                plan.bytes_per_frame
            );
            for (i, g) in plan.groups.iter().enumerate() {
                let a = &g.allocation;
                let _ = writeln!(
                    s,
                    "  group {i} [{}]: {} with {}, buffers {}, alignment {}, sync {}",
                    a.participants.join(", "),
                    a.fourcc.trimmed(),
                    mods(a.layout.modifiers()),
                    a.constraints.buffers,
                    a.constraints.align,
                    a.sync
                );
            }
            for cv in &plan.conversions {
                let _ = writeln!(
                    s,
                    "  group {} -> group {}: {}",
                    cv.from_group, cv.to_group, cv.kind
                );
                if let Some(g) = plan.groups.get(cv.from_group) {
                    let r = ReportConversion::of(cv, g.format.fourcc);
                    if let Some(args) = &r.convert {
                        let _ = writeln!(s, "    run it: dmabridge convert {args} --width W --height H --in FRAME --out OUT");
                    }
                    if let Some(copier) = &cv.copier {
                        let how = match cv.kind {
                            ConversionKind::DeviceCopy { to, .. } if to.is_invalid() => "vkCmdCopyBufferToImage from the buffer it imports into an image of its own (its copy import)",
                            _ => "vkCmdCopyImage from the buffer it imports into one it exports",
                        };
                        let _ = writeln!(s, "    copied by {copier}: {how}");
                    }
                }
            }
            conflicts(&mut s, "no single buffer, because:", c);
        }
        Outcome::Impossible(c) => conflicts(&mut s, "impossible:", c),
    }
    if n.cap_hit {
        let _ = writeln!(
            s,
            "(stopped after {} fallback combinations: the cap)",
            n.combinations_tried
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::negotiate::{negotiate, Member, Participant};
    use crate::{Format, Fourcc};

    const AR24: Fourcc = Fourcc::from_bytes(*b"AR24");

    fn member(name: &str, formats: &[Format]) -> Member {
        Member::from(Participant::new(name, formats.iter().copied().collect()))
    }

    /// A radv device and an amdgpu plane sharing navi31's DCC modifier: the report names it
    /// decoded, in `modifier_names` and in the summary, with its hex.
    #[test]
    fn amd_modifiers_are_named_decoded() {
        let dcc = Modifier::from_raw(0x0200_0000_28a6_bf04);
        let plain = Modifier::from_raw(0x0200_0000_0000_1b04);
        let n = negotiate(&[
            member("radv", &[Format::explicit(AR24, dcc), Format::explicit(AR24, plain), Format::linear(AR24)]),
            member("plane", &[Format::explicit(AR24, dcc)]),
        ])
        .expect("negotiates");
        let want = "AMD(GFX11, GFX11_256K_R_X, DCC, DCC_PIPE_ALIGN, DCC_INDEPENDENT_128B, DCC_MAX_COMPRESSED_BLOCK=128B, \
                    PIPE_XOR_BITS=5, PACKERS=5) (0x0200000028a6bf04)";
        let r = Report::new(&n);
        assert_eq!(r.modifiers, [dcc], "{r:?}");
        assert_eq!(r.modifier_names, [want]);
        let h = human(&n);
        assert!(h.starts_with(&format!("shared: AR24 with {want}")), "{h}");
    }

    /// A modifier drm_fourcc.h does not define is shown as what decodes of it and its hex,
    /// in the report and in a conflict's detail.
    #[test]
    fn undefined_modifiers_are_shown_raw() {
        let odd = Modifier::from_raw(0x0200_0000_0000_0009);
        let n = negotiate(&[member("a", &[Format::explicit(AR24, odd)]), member("b", &[Format::explicit(AR24, odd)])]).expect("negotiates");
        let r = Report::new(&n);
        assert_eq!(r.modifier_names, ["AMD(unknown tile version 9) (0x0200000000000009)"]);
        let n = negotiate(&[member("a", &[Format::explicit(AR24, odd)]), member("b", &[Format::linear(AR24)])]).expect("negotiates");
        let text = human(&n);
        assert!(text.contains("AMD(unknown tile version 9) 0x0200000000000009"), "{text}");
    }
}
