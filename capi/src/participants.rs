//! Negotiation from C: `dmabridge negotiate`'s arguments (`dmb_negotiate_json`), or the
//! same participants and constraints one call at a time (`dmb_participants_*`). Both read
//! the grammar of `dmabridge_interop::spec`; the live Vulkan device is the
//! engine's, where the caller gives one.

use std::ffi::{c_char, CStr, CString};

use dmabridge::interop::spec::{build_participants_with, ConstraintKey, ConstraintSpec, ParticipantSpec, PeerKind, SpecError};
use dmabridge::interop::negotiate::{negotiate, Constraints, Member, Participant, MAX_PARTICIPANTS};
use dmabridge::interop::report::Report;
use dmabridge::{Direction, Engine, ImageUse, ParticipantRequest};

use crate::dmb_status::{self, *};
use crate::{dmb_engine, guard, invalid, string_arg};

/// Where a participant's format list comes from: the `value` of `dmb_participants_add`
/// is what follows `NAME=` after the `dmabridge negotiate` flag of the same name.
pub type dmb_peer_kind = u32;
/// `--gst-caps`: a GStreamer caps string (`video/x-raw(memory:DMABuf), drm-format=...`).
pub const DMB_PEER_GST_CAPS: dmb_peer_kind = 0;
/// `--kms-in-formats`: the path of a raw KMS `IN_FORMATS` blob.
pub const DMB_PEER_KMS_IN_FORMATS: dmb_peer_kind = 1;
/// `--drm-info`: the path of `drm_info -j` output, with an optional `:PLANE_ID`.
pub const DMB_PEER_DRM_INFO: dmb_peer_kind = 2;
/// `--wayland-table`: the path of a linux-dmabuf format table.
pub const DMB_PEER_WAYLAND_TABLE: dmb_peer_kind = 3;
/// `--wayland`: the live compositor. libdmabridge has no Wayland client, so this is
/// `DMB_ERR_UNSUPPORTED`: pass the compositor's format table as `DMB_PEER_WAYLAND_TABLE`.
pub const DMB_PEER_WAYLAND: dmb_peer_kind = 4;
/// `--drm-formats`: a list as GStreamer writes it (`NV12:0x0100000000000001,XR24`).
pub const DMB_PEER_DRM_FORMATS: dmb_peer_kind = 5;
/// `--v4l2`: V4L2 pixel formats (`NV12MT,NV12`).
pub const DMB_PEER_V4L2: dmb_peer_kind = 6;
/// `--vulkan`: the engine's own device for an exact use (`sample+render`); needs a builder
/// made with an engine (`DMB_ERR_UNSUPPORTED` without one).
pub const DMB_PEER_VULKAN: dmb_peer_kind = 7;
/// `--v4l2-device`: a live V4L2 node, `/dev/videoN[:capture|:output]`, asked for its formats,
/// frame sizes and buffer count.
pub const DMB_PEER_V4L2_DEVICE: dmb_peer_kind = 8;
/// `--kms-device`: a live KMS card's plane, `/dev/dri/cardN[:PLANE_ID]`, asked for its
/// `IN_FORMATS` (no plane: the first primary plane).
pub const DMB_PEER_KMS_DEVICE: dmb_peer_kind = 9;

/// Each C kind and its grammar's kind; a value outside this table is refused, never cast.
const PEER_KINDS: [(dmb_peer_kind, PeerKind); 10] = [
    (DMB_PEER_GST_CAPS, PeerKind::GstCaps),
    (DMB_PEER_KMS_IN_FORMATS, PeerKind::KmsInFormats),
    (DMB_PEER_DRM_INFO, PeerKind::DrmInfo),
    (DMB_PEER_WAYLAND_TABLE, PeerKind::WaylandTable),
    (DMB_PEER_WAYLAND, PeerKind::Wayland),
    (DMB_PEER_DRM_FORMATS, PeerKind::DrmFormats),
    (DMB_PEER_V4L2, PeerKind::V4l2),
    (DMB_PEER_VULKAN, PeerKind::Vulkan),
    (DMB_PEER_V4L2_DEVICE, PeerKind::V4l2Device),
    (DMB_PEER_KMS_DEVICE, PeerKind::KmsDevice),
];

/// Most constraints one builder or argument list takes (11 keys for each of many
/// participants is far fewer).
const MAX_CONSTRAINTS: usize = 4096;
/// Longest string a builder copies (a caps string or a path is far shorter).
const MAX_TEXT: usize = 1 << 20;

/// Participants and constraints for one negotiation, added one call at a time. Made by
/// `dmb_participants_new`, freed by `dmb_participants_free`; one thread's at a time.
pub struct dmb_participants {
    /// The device `DMB_PEER_VULKAN` asks, when the builder was made with an engine.
    engine: Option<Engine>,
    specs: Vec<ParticipantSpec>,
    constraints: Vec<ConstraintSpec>,
}

/// A grammar error as a status: a live kind this library cannot answer is unsupported,
/// everything else is bad input.
fn spec_error(e: SpecError) -> (dmb_status, String) {
    let status = if matches!(e, SpecError::NotAvailable { .. }) { DMB_ERR_UNSUPPORTED } else { DMB_ERR_INVALID };
    (status, e.to_string())
}

/// Loads one participant: `--vulkan` from `engine` where there is one, every other kind
/// (and `--vulkan` without an engine, `--wayland` always: `NotAvailable`) through the
/// grammar's loader.
fn load(engine: Option<&Engine>, spec: &ParticipantSpec) -> Result<Participant, SpecError> {
    match (spec.kind, engine) {
        (PeerKind::Vulkan, Some(engine)) => {
            let usage = ImageUse::parse(&spec.value).map_err(|e| spec.peer_error(e))?;
            let request = ParticipantRequest::new(spec.name.as_str(), usage, Direction::Both);
            engine.participant(&request).map_err(|e| spec.peer_error(e))
        }
        _ => spec.load(),
    }
}

/// Negotiates `specs` under `constraints` and hands the JSON report out in `*json_out`
/// (also when no way exists: `DMB_ERR_IMPOSSIBLE`).
///
/// # Safety
/// `json_out` is non-null and writable for one pointer.
unsafe fn negotiate_json(engine: Option<&Engine>, specs: &[ParticipantSpec], constraints: &[ConstraintSpec], json_out: *mut *mut c_char) -> Result<(), (dmb_status, String)> {
    let parts = build_participants_with(specs, constraints, &|s| load(engine, s)).map_err(spec_error)?;
    let members: Vec<Member> = parts.into_iter().map(Member::from).collect();
    let n = negotiate(&members).map_err(|e| invalid(e.to_string()))?;
    let report = Report::new(&n);
    let json = CString::new(report.to_json()).map_err(|e| (DMB_ERR_DEVICE, e.to_string()))?;
    // SAFETY: writable (the caller's contract).
    unsafe { *json_out = json.into_raw() };
    if report.exit_code() == 0 {
        Ok(())
    } else {
        Err((DMB_ERR_IMPOSSIBLE, "no buffer and no copy plan serves every participant (see the document's conflicts)".into()))
    }
}

/// A new, empty participant builder in `*out`. `engine` may be NULL; with one,
/// `DMB_PEER_VULKAN` participants are its device (the builder keeps the device alive, so
/// the engine may be freed first).
///
/// # Safety
/// `engine` is null or came from `dmb_engine_new` or `dmb_engine_from_host`; `out` is
/// null or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn dmb_participants_new(engine: *const dmb_engine, out: *mut *mut dmb_participants) -> dmb_status {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        // SAFETY: null or valid (the caller's contract).
        let engine = unsafe { engine.as_ref() }.map(|e| e.engine.clone());
        let boxed = Box::into_raw(Box::new(dmb_participants { engine, specs: Vec::new(), constraints: Vec::new() }));
        // SAFETY: checked non-null; writable is the caller's contract.
        unsafe { *out = boxed };
        Ok(())
    })
}

/// Adds a participant, after those already added (order is preference: the first
/// participant's preference picks the format). `name` is unique and not empty; `value` is
/// what `dmb_peer_kind` says (NULL is the empty string, as `DMB_PEER_WAYLAND` takes).
/// Lists are read, and files opened, by `dmb_participants_negotiate_json`.
/// `DMB_ERR_INVALID` for an unknown kind, an empty or repeated name, or too many
/// participants.
///
/// # Safety
/// `p` came from `dmb_participants_new`; `name` is a NUL-terminated string; `value` is null
/// or one.
#[no_mangle]
pub unsafe extern "C" fn dmb_participants_add(p: *mut dmb_participants, kind: dmb_peer_kind, name: *const c_char, value: *const c_char) -> dmb_status {
    guard(|| {
        if p.is_null() {
            return Err(invalid("participants is null"));
        }
        // SAFETY: non-null, valid and not used elsewhere during the call (the caller's contract).
        let p = unsafe { &mut *p };
        let kind = PEER_KINDS.iter().find(|(k, _)| *k == kind).map(|(_, k)| *k).ok_or_else(|| invalid(format!("unknown dmb_peer_kind {kind}")))?;
        // SAFETY: NUL-terminated strings (the caller's contract).
        let name = unsafe { string_arg(name, "name") }?;
        // SAFETY: as above; null is allowed here.
        let value = if value.is_null() { String::new() } else { unsafe { string_arg(value, "value") }? };
        if name.len() > MAX_TEXT || value.len() > MAX_TEXT {
            return Err(invalid(format!("a name or value longer than {MAX_TEXT} bytes")));
        }
        if name.is_empty() {
            return Err(spec_error(SpecError::ParticipantSyntax { kind, arg: format!("={value}") }));
        }
        if p.specs.iter().any(|s| s.name == name) {
            return Err(spec_error(SpecError::DuplicateName(name)));
        }
        if p.specs.len() >= MAX_PARTICIPANTS {
            return Err(invalid(format!("more than {MAX_PARTICIPANTS} participants")));
        }
        p.specs.push(ParticipantSpec { kind, name, value });
        Ok(())
    })
}

/// Constrains participant `name` (added before): `key` and `value` as
/// `dmabridge negotiate --constraint NAME:KEY=VALUE` takes them (`min-buffers`,
/// `max-buffers`, `min-size`, `align`, `stride-align`, `offset-align`, `width`, `height`,
/// `cpu-access`, `domain`, `read-only`). `DMB_ERR_INVALID` for an unknown participant or
/// key, or a value that does not parse; a well-formed value no allocation can meet is
/// the negotiation's conflict (`DMB_ERR_IMPOSSIBLE` there), not an error here.
///
/// # Safety
/// `p` came from `dmb_participants_new`; `name`, `key` and `value` are NUL-terminated
/// strings.
#[no_mangle]
pub unsafe extern "C" fn dmb_participants_constrain(p: *mut dmb_participants, name: *const c_char, key: *const c_char, value: *const c_char) -> dmb_status {
    guard(|| {
        if p.is_null() {
            return Err(invalid("participants is null"));
        }
        // SAFETY: non-null, valid and not used elsewhere during the call (the caller's contract).
        let p = unsafe { &mut *p };
        // SAFETY: NUL-terminated strings (the caller's contract).
        let (name, key, value) = unsafe { (string_arg(name, "name")?, string_arg(key, "key")?, string_arg(value, "value")?) };
        if value.len() > MAX_TEXT {
            return Err(invalid(format!("a value longer than {MAX_TEXT} bytes")));
        }
        if !p.specs.iter().any(|s| s.name == name) {
            return Err(spec_error(SpecError::UnknownParticipant(name)));
        }
        let key = ConstraintKey::from_name(&key).ok_or_else(|| spec_error(SpecError::UnknownKey { participant: name.clone(), key }))?;
        let constraint = ConstraintSpec { participant: name, key, value };
        // The value's syntax now, so that the error comes from the call that caused it.
        constraint.apply(&mut Constraints::default()).map_err(spec_error)?;
        if p.constraints.len() >= MAX_CONSTRAINTS {
            return Err(invalid(format!("more than {MAX_CONSTRAINTS} constraints")));
        }
        p.constraints.push(constraint);
        Ok(())
    })
}

/// Reads every participant's list (files, the engine's device), applies the constraints,
/// negotiates, and returns the JSON document (`dmabridge negotiate --json`'s) in
/// `*json_out` (free it with `dmb_string_free`). `DMB_ERR_IMPOSSIBLE` still returns the
/// document, which names the conflicts; a list that cannot be read is `DMB_ERR_INVALID`
/// naming the participant. The builder is unchanged and may be negotiated again.
///
/// # Safety
/// `p` came from `dmb_participants_new`; `json_out` is null or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn dmb_participants_negotiate_json(p: *const dmb_participants, json_out: *mut *mut c_char) -> dmb_status {
    guard(|| {
        if p.is_null() || json_out.is_null() {
            return Err(invalid("participants or json_out is null"));
        }
        // SAFETY: non-null and valid (the caller's contract).
        let p = unsafe { &*p };
        // SAFETY: checked non-null; writable is the caller's contract.
        unsafe { negotiate_json(p.engine.as_ref(), &p.specs, &p.constraints, json_out) }
    })
}

/// Frees a participant builder (null is ignored).
///
/// # Safety
/// `p` is null or came from `dmb_participants_new` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn dmb_participants_free(p: *mut dmb_participants) {
    if !p.is_null() {
        // SAFETY: made by Box::into_raw in dmb_participants_new; the caller gives it up.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(unsafe { Box::from_raw(p) })));
    }
}

/// The C strings `args[0..nargs]`, or why not.
///
/// # Safety
/// As [`dmb_negotiate_json`].
unsafe fn strings(args: *const *const c_char, nargs: usize) -> Result<Vec<String>, (dmb_status, String)> {
    if nargs > 4096 {
        return Err(invalid(format!("{nargs} arguments; at most 4096")));
    }
    if args.is_null() && nargs > 0 {
        return Err(invalid("args is null"));
    }
    (0..nargs)
        .map(|i| {
            // SAFETY: args holds nargs pointers (the caller's contract).
            let p = unsafe { *args.add(i) };
            if p.is_null() {
                return Err(invalid(format!("argument {i} is null")));
            }
            // SAFETY: a NUL-terminated string (the caller's contract).
            Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
        .collect()
}

/// Negotiates the participants given as `dmabridge negotiate`'s arguments (`--drm-formats`,
/// `display=XR24,AR24`, `--v4l2`, `dec=NV12MT`, `--constraint`, ...; `--flag=value` also
/// works) and returns its JSON document in `*json_out` (free it with `dmb_string_free`).
/// `DMB_ERR_IMPOSSIBLE` still returns the document, which names the conflicts. `--vulkan`
/// and `--wayland` need a device: `DMB_ERR_UNSUPPORTED` here (`dmb_participants_new` with
/// an engine answers `--vulkan`).
///
/// # Safety
/// `args` points to `nargs` NUL-terminated strings; `json_out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dmb_negotiate_json(args: *const *const c_char, nargs: usize, json_out: *mut *mut c_char) -> dmb_status {
    guard(|| {
        if json_out.is_null() {
            return Err(invalid("json_out is null"));
        }
        // SAFETY: the caller's contract.
        let args = unsafe { strings(args, nargs) }?;
        let mut specs = Vec::new();
        let mut constraints = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let (flag, inline) = match a.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
                _ => (a.as_str(), None),
            };
            let mut value = || inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| invalid(format!("{flag} needs a value")));
            if flag == "--constraint" {
                constraints.push(ConstraintSpec::parse(&value()?).map_err(|e| invalid(e.to_string()))?);
            } else if let Some(kind) = PeerKind::ALL.into_iter().find(|k| k.flag() == flag) {
                specs.push(ParticipantSpec::parse(kind, &value()?).map_err(|e| invalid(e.to_string()))?);
            } else {
                return Err(invalid(format!("unknown argument {:?}", a.chars().take(60).collect::<String>())));
            }
        }
        if constraints.len() > MAX_CONSTRAINTS {
            return Err(invalid(format!("more than {MAX_CONSTRAINTS} constraints")));
        }
        // SAFETY: json_out was checked non-null; writable is the caller's contract.
        unsafe { negotiate_json(None, &specs, &constraints, json_out) }
    })
}
