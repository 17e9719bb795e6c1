//! `dmabridge negotiate [--json] [--paths] [--plan-out FILE] PARTICIPANT... [--constraint NAME:KEY=VALUE]...`
//!
//! `--plan-out FILE` writes a copy plan's conversions as data
//! ([`dmabridge_interop::negotiate::PlanFile`]: each conversion's steps, with the formats
//! each reads and writes), which `dmabridge convert --plan FILE` runs; with `--paths` each
//! conversion also says where it runs. Without a copy plan nothing is written (a line on
//! stderr says so).
//!
//! Participants are read in command-line order, which is preference order: the first
//! participant's preference picks the format. clap keeps values per flag, so the order
//! across different flags is recovered from `ArgMatches::indices_of`; that is why
//! [`NegotiateArgs`] implements `clap::Args` by hand instead of deriving it (it plugs into a
//! derived `Subcommand` all the same).
//!
//! Exit status: 0 shared or copy, 2 impossible or conflicting constraints, 1 bad input
//! (one line on stderr naming the participant). The JSON document is
//! [`dmabridge_interop::report::Report`].

use std::io::Write;
use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use dmabridge_interop::spec::{build_participants_with, ConstraintSpec, ParticipantSpec, PeerKind, SpecError};
use dmabridge_interop::negotiate::{negotiate, Member, Negotiation, Outcome, Participant, PlanFile};
use dmabridge_interop::report::{human, Report, ReportParticipant};
use dmabridge_interop::tiling::FrameConversion;
use dmabridge_interop::Fourcc;

/// The arguments of `dmabridge negotiate`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NegotiateArgs {
    /// Print the JSON document instead of a summary.
    pub json: bool,
    /// Say where each conversion of a copy plan runs (the engine's cost model, measuring on
    /// first use).
    pub paths: bool,
    /// Where to write the copy plan's conversions ([`PlanFile`] JSON), if anywhere.
    pub plan_out: Option<std::path::PathBuf>,
    /// Participants as given, in command-line order: (kind, `NAME=VALUE`).
    pub participants: Vec<(PeerKind, String)>,
    /// `NAME:KEY=VALUE`, in command-line order.
    pub constraints: Vec<String>,
}

/// clap id, value name and help of each participant flag.
const PEER_ARGS: [(PeerKind, &str, &str, &str); 11] = [
    (
        PeerKind::GstCaps,
        "gst-caps",
        "NAME=CAPS",
        "a GStreamer caps string (no drm-format: any format)",
    ),
    (
        PeerKind::KmsInFormats,
        "kms-in-formats",
        "NAME=FILE",
        "a raw KMS IN_FORMATS blob",
    ),
    (
        PeerKind::DrmInfo,
        "drm-info",
        "NAME=FILE[:PLANE_ID]",
        "drm_info -j output: a plane's IN_FORMATS (default: the first node's primary plane)",
    ),
    (
        PeerKind::Wayland,
        "wayland",
        "NAME",
        "the compositor WAYLAND_DISPLAY names, asked for its linux-dmabuf formats",
    ),
    (
        PeerKind::WaylandTable,
        "wayland-table",
        "NAME=FILE",
        "a raw linux-dmabuf v4 format table",
    ),
    (
        PeerKind::DrmFormats,
        "drm-formats",
        "NAME=LIST",
        "drm-format list, e.g. NV12:0x0100000000000002,AR24",
    ),
    (
        PeerKind::V4l2,
        "v4l2",
        "NAME=PIXFMT[,PIXFMT]",
        "V4L2 pixel formats, e.g. NV12MT,NV12",
    ),
    (
        PeerKind::Vulkan,
        "vulkan",
        "NAME=USAGE[+USAGE][:create=FLAG,...][:srgb-view][:device=INDEX|NAME]",
        "a live Vulkan device (the best, DMABRIDGE_DEVICE's, or :device='s: an index, or part of its name) for exactly this use, e.g. gpu=sampled+color-attachment:create=mutable-format:srgb-view; queried only, never opened",
    ),
    (
        PeerKind::V4l2Device,
        "v4l2-device",
        "NAME=/dev/videoN[:capture|:output]",
        "a live V4L2 device, asked for its formats, frame sizes and buffer count (default direction: capture if it has one)",
    ),
    (
        PeerKind::KmsDevice,
        "kms-device",
        "NAME=/dev/dri/cardN[:PLANE_ID]",
        "a live KMS device's plane, asked for its IN_FORMATS (default: the first primary plane)",
    ),
    (
        PeerKind::ProbeReport,
        "probe-report",
        "NAME=FILE:USAGE[+USAGE]",
        "a GPU as a saved 'dmabridge probe --json' report (another machine's, another driver's), for one use it probed, e.g. dgpu=navi21.json:color-attachment",
    ),
];

impl Args for NegotiateArgs {
    fn augment_args(cmd: Command) -> Command {
        let mut cmd = cmd
            .about("Reconcile participants' formats and constraints onto one buffer, or plan copies")
            .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("print the JSON document"))
            .arg(
                Arg::new("paths")
                    .long("paths")
                    .action(ArgAction::SetTrue)
                    .help("say where each conversion of a copy plan runs (cpu, gpu, copy-commands), as the cost model measures"),
            )
            .arg(
                Arg::new("plan-out")
                    .long("plan-out")
                    .value_name("FILE")
                    .value_parser(clap::value_parser!(std::path::PathBuf))
                    .help("write the copy plan's steps as JSON to FILE, for 'dmabridge convert --plan FILE'"),
            )
            .arg(
                Arg::new("constraint")
                    .long("constraint")
                    .value_name("NAME:KEY=VALUE")
                    .action(ArgAction::Append)
                    .help("KEY: min-buffers, max-buffers, min-size, align, stride-align, offset-align, width, height (N or A-B), cpu-access, domain, read-only"),
            );
        for (_, id, value_name, help) in PEER_ARGS {
            cmd = cmd.arg(
                Arg::new(id)
                    .long(id)
                    .value_name(value_name)
                    .action(ArgAction::Append)
                    .help(help)
                    .help_heading("Participants (in preference order)"),
            );
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for NegotiateArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut indexed: Vec<(usize, PeerKind, String)> = Vec::new();
        for (kind, id, _, _) in PEER_ARGS {
            if let (Some(values), Some(indices)) = (m.get_many::<String>(id), m.indices_of(id)) {
                indexed.extend(indices.zip(values).map(|(i, v)| (i, kind, v.clone())));
            }
        }
        indexed.sort_by_key(|(i, _, _)| *i);
        Ok(NegotiateArgs {
            json: m.get_flag("json"),
            paths: m.get_flag("paths"),
            plan_out: m.get_one::<std::path::PathBuf>("plan-out").cloned(),
            participants: indexed.into_iter().map(|(_, k, v)| (k, v)).collect(),
            constraints: m
                .get_many::<String>("constraint")
                .map_or_else(Vec::new, |v| v.cloned().collect()),
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// Runs `dmabridge negotiate` with the library's peer parsers (the live kinds, `--vulkan`
/// and `--wayland`, are refused as not available). See [`run_with`] to supply them.
#[cfg_attr(not(test), allow(dead_code))]
pub fn run(args: &NegotiateArgs) -> ExitCode {
    run_with(args, &ParticipantSpec::load, &|_| Err("no Vulkan device".into()))
}

/// Runs `dmabridge negotiate`, loading each participant through `load` (which can answer
/// `--vulkan` from the engine and defer everything else to [`ParticipantSpec::load`]).
/// With `--paths`, `path` names where a conversion runs (or why it cannot say).
pub fn run_with(
    args: &NegotiateArgs,
    load: &dyn Fn(&ParticipantSpec) -> Result<Participant, SpecError>,
    path: &dyn Fn(&FrameConversion) -> Result<String, String>,
) -> ExitCode {
    let (negotiation, read) = match negotiation_and_lists(args, load) {
        Ok(n) => n,
        Err(e) => {
            // Ignore a closed stderr: there is no one left to tell.
            let _ = writeln!(std::io::stderr().lock(), "dmabridge negotiate: {e}");
            return ExitCode::from(1);
        }
    };
    let mut report = Report::new(&negotiation).with_participants(read);
    let mut text = String::new();
    let mut plan_file = match &negotiation.outcome {
        Outcome::Copy { plan, .. } => Some(PlanFile::of(plan)),
        _ => None,
    };
    if args.paths {
        if let Outcome::Copy { plan, .. } = &negotiation.outcome {
            let (w, h) = plan.cost_extent;
            for (i, (r, c)) in report.conversions.iter_mut().zip(&plan.conversions).enumerate() {
                let from = plan.groups.get(c.from_group).map_or(Fourcc::NV12, |g| g.format.fourcc);
                // A device copy runs where the report already says (its copier's GPU).
                let Some((f, t)) = c.kind.endpoints(from) else {
                    continue;
                };
                let runs_on = path(&FrameConversion::new(f, t, w, h)).unwrap_or_else(|e| format!("unknown ({e})"));
                text += &format!("group {} -> group {} runs on: {runs_on}\n", r.from_group, r.to_group);
                if let Some(p) = plan_file.as_mut().and_then(|f| f.conversions.get_mut(i)) {
                    p.runs_on = Some(runs_on.clone());
                }
                r.runs_on = Some(runs_on);
            }
        }
    }
    if let Some(out) = &args.plan_out {
        match &plan_file {
            Some(file) => {
                if let Err(e) = dmabridge::interop::user_file::write_regular(out, (file.to_json() + "\n").as_bytes()) {
                    let _ = writeln!(std::io::stderr().lock(), "dmabridge negotiate: {e}");
                    return ExitCode::from(1);
                }
                if let Outcome::Copy { plan, .. } = &negotiation.outcome {
                    for c in &plan.conversions {
                        text += &format!("group {} -> group {} plan: {}\n", c.from_group, c.to_group, c.plan);
                    }
                }
            }
            None => {
                let _ = writeln!(std::io::stderr().lock(), "dmabridge negotiate: no copy plan, so nothing is written to {}", out.display());
            }
        }
    }
    let text = if args.json {
        report.to_json() + "\n"
    } else {
        human(&negotiation) + &report.notes() + &text
    };
    // A closed stdout (`| head`) must not panic, as println! would.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    ExitCode::from(report.exit_code())
}

/// Loads the participants in order, applies the constraints and negotiates; an error is bad
/// input (exit status 1), an impossible outcome is not an error.
pub fn negotiation_of(
    args: &NegotiateArgs,
    load: &dyn Fn(&ParticipantSpec) -> Result<Participant, SpecError>,
) -> Result<Negotiation, String> {
    negotiation_and_lists(args, load).map(|(n, _)| n)
}

/// [`negotiation_of`], with each participant's list as it was read (for the report).
fn negotiation_and_lists(
    args: &NegotiateArgs,
    load: &dyn Fn(&ParticipantSpec) -> Result<Participant, SpecError>,
) -> Result<(Negotiation, Vec<ReportParticipant>), String> {
    let (specs, cons) = parse(args).map_err(|e| e.to_string())?;
    let parts = build_participants_with(&specs, &cons, load).map_err(|e| e.to_string())?;
    // build_participants_with keeps the specs' order.
    let read = specs
        .iter()
        .zip(&parts)
        .map(|(s, p)| ReportParticipant::of(p, Some(format!("{} {}", s.kind.flag(), s.value))))
        .collect();
    let members: Vec<Member> = parts.into_iter().map(Member::from).collect();
    let n = negotiate(&members).map_err(|e| e.to_string())?;
    Ok((n, read))
}

fn parse(args: &NegotiateArgs) -> Result<(Vec<ParticipantSpec>, Vec<ConstraintSpec>), SpecError> {
    let specs = args
        .participants
        .iter()
        .map(|(kind, arg)| ParticipantSpec::parse(*kind, arg))
        .collect::<Result<Vec<_>, _>>()?;
    let cons = args
        .constraints
        .iter()
        .map(|c| ConstraintSpec::parse(c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((specs, cons))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(argv: &[&str]) -> NegotiateArgs {
        let cmd = NegotiateArgs::augment_args(Command::new("negotiate"));
        let m = cmd.try_get_matches_from(argv).unwrap();
        NegotiateArgs::from_arg_matches(&m).unwrap()
    }

    #[test]
    fn participant_order_survives_across_flags() {
        let a = parse_args(&[
            "negotiate",
            "--drm-formats",
            "b=NV12",
            "--constraint",
            "b:align=64",
            "--gst-caps=a=video/x-raw",
            "--drm-formats",
            "c=AR24",
            "--vulkan",
            "gpu=sample",
            "--json",
        ]);
        assert!(a.json);
        let names: Vec<(PeerKind, &str)> = a
            .participants
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                (PeerKind::DrmFormats, "b=NV12"),
                (PeerKind::GstCaps, "a=video/x-raw"),
                (PeerKind::DrmFormats, "c=AR24"),
                (PeerKind::Vulkan, "gpu=sample"),
            ]
        );
        assert_eq!(a.constraints, vec!["b:align=64"]);
    }

    #[test]
    fn bad_input_is_exit_1_and_vulkan_is_not_wired_yet() {
        let a = parse_args(&["negotiate", "--vulkan", "gpu=sample"]);
        assert_eq!(run(&a), ExitCode::from(1));
        let a = parse_args(&["negotiate", "--drm-formats", "noname"]);
        assert_eq!(run(&a), ExitCode::from(1));
        assert_eq!(run(&NegotiateArgs::default()), ExitCode::from(1));
    }
}
