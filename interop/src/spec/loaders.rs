//! One participant's format list, through the parser of its kind ([`crate::peers`]), with
//! the sync methods that kind of peer has (`SYNC_METHODS` of each; a bare drm-format list
//! says nothing, so cpu-wait only).

use crate::negotiate::{Candidates, Direction, ExtentRange, Participant};
use crate::peers::{drm_info, gst, kms, kms_device, probe_report, v4l2, v4l2_device, wayland};
use crate::FormatSet;

use super::{one_line, ParticipantSpec, PeerKind, SpecError};

pub(crate) fn load(spec: &ParticipantSpec) -> Result<Participant, SpecError> {
    let err = |e: &dyn std::fmt::Display| spec.peer_error(e);
    match spec.kind {
        PeerKind::GstCaps => {
            let caps = gst::Caps::parse(&spec.value).map_err(|e| err(&e))?;
            let mut p = match caps.drm_formats() {
                // No drm-format (or ANY caps): the seed's "superset of all formats".
                None => Participant::any_format(&spec.name),
                Some(set) => Participant::new(&spec.name, set),
            };
            // The caps' extents are the participant's own constraints; --constraint may
            // override them.
            if let Some(w) = caps.width() {
                p.constraints.width = extent(w);
            }
            if let Some(h) = caps.height() {
                p.constraints.height = extent(h);
            }
            Ok(p.with_sync(gst::SYNC_METHODS))
        }
        PeerKind::KmsInFormats => {
            let bytes = spec.read_file()?;
            let set = kms::parse_in_formats(&bytes).map_err(|e| err(&e))?;
            Ok(Participant::new(&spec.name, set).with_sync(kms::SYNC_METHODS))
        }
        PeerKind::DrmInfo => {
            let (path, plane) = spec.drm_info_target();
            let bytes = spec.read_path(path)?;
            let text = String::from_utf8(bytes).map_err(|_| spec.peer_error(format_args!("{} is not UTF-8 JSON", path)))?;
            let set = drm_info::in_formats(&text, plane).map_err(|e| err(&e))?;
            Ok(Participant::new(&spec.name, set).with_sync(kms::SYNC_METHODS))
        }
        PeerKind::ProbeReport => {
            let (path, usage) = spec.probe_report_target()?;
            let bytes = spec.read_path(path)?;
            let text = String::from_utf8(bytes).map_err(|_| spec.peer_error(format_args!("{} is not UTF-8 JSON", path)))?;
            let d = probe_report::probed_device(&text, usage, Direction::Both).map_err(|e| err(&e))?;
            let device = format!("{}, saved probe {path}", d.device);
            Ok(Participant::new(&spec.name, d.formats).with_usage(d.usage).with_sync(d.sync).with_device(device).with_copy(d.copy))
        }
        // The live kinds need the engine: the caller answers them with its own loader
        // (`build_participants_with`).
        PeerKind::Wayland => Err(SpecError::NotAvailable {
            participant: one_line(&spec.name),
            kind: spec.kind,
            what: "the live Wayland compositor",
        }),
        PeerKind::WaylandTable => {
            let bytes = spec.read_file()?;
            let table = wayland::parse_format_table(&bytes).map_err(|e| err(&e))?;
            Ok(Participant::new(&spec.name, table.into_iter().collect::<FormatSet>()).with_sync(wayland::SYNC_METHODS))
        }
        PeerKind::DrmFormats => {
            let set = gst::parse_drm_format_list(&spec.value).map_err(|e| err(&e))?;
            Ok(Participant::new(&spec.name, set))
        }
        PeerKind::V4l2 => {
            // Layouts without a DRM modifier (NV12_4L4, MM21, NV12_8L128) cannot be named in a
            // format+modifier pair, so they take no part here.
            let formats = v4l2::formats_of_list(&spec.value).map_err(|e| err(&e))?;
            Ok(Participant { formats: Candidates::Only(formats.drm), ..Participant::any_format(&spec.name) }.with_sync(v4l2::SYNC_METHODS))
        }
        PeerKind::Vulkan => Err(SpecError::NotAvailable {
            participant: one_line(&spec.name),
            kind: spec.kind,
            what: "the live Vulkan device",
        }),
        PeerKind::V4l2Device => {
            let (path, direction) = spec.v4l2_device_target()?;
            let device = v4l2_device::V4l2Device::open(std::path::Path::new(path), direction).map_err(|e| err(&e))?;
            device.participant(&spec.name).map_err(|e| err(&e))
        }
        PeerKind::KmsDevice => {
            let (path, plane) = spec.kms_device_target()?;
            let device = kms_device::KmsDevice::open(std::path::Path::new(path)).map_err(|e| err(&e))?;
            device.participant(&spec.name, plane).map_err(|e| err(&e))
        }
    }
}

/// A caps integer range as pixels: clamped into 1..=u32::MAX, an empty range kept empty.
fn extent(r: gst::IntRange) -> ExtentRange {
    let clamp = |v: i64| u32::try_from(v.max(1)).unwrap_or(u32::MAX);
    ExtentRange::new(clamp(r.min), clamp(r.max))
}
