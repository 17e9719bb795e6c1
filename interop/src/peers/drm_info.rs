//! `drm_info -j`: the KMS state as JSON, the form people already have at hand (it runs
//! without privileges, and bug reports carry its output). A plane's `IN_FORMATS` is there as
//! `<node> -> planes[] -> properties.IN_FORMATS.data = [{modifier, formats[]}]`, with integers
//! (drm_info's `json.c`), which says exactly what the raw blob says ([`super::kms`]).
//!
//! The plane is chosen by id (`FILE:PLANE_ID`), or else the primary plane (its `type`
//! property's value is 1) of the first node. The pairs count against the same bound as the
//! blob's ([`super::kms::MAX_IN_FORMATS_PAIRS`]), checked before anything is collected.

use serde_json::Value;

use super::kms::MAX_IN_FORMATS_PAIRS;
use crate::{Format, FormatSet, Fourcc, Layout, Modifier};

/// The `type` property value of a primary plane (`DRM_PLANE_TYPE_PRIMARY`).
const PRIMARY: u64 = 1;

/// Why a `drm_info -j` document gave no format list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrmInfoError {
    /// Not JSON.
    #[error("not JSON: {0}")]
    Json(String),
    /// JSON, but not drm_info's shape (no node object with a `planes` array).
    #[error("not a drm_info -j document: {0}")]
    Shape(&'static str),
    /// No plane with that id in any node.
    #[error("no plane with id {0}")]
    NoPlane(u64),
    /// No plane id was given and the first node has no primary plane.
    #[error("the first node has no primary plane (give FILE:PLANE_ID)")]
    NoPrimaryPlane,
    /// The plane has no `IN_FORMATS` data (an old kernel, or a driver without modifiers).
    #[error("plane {0} has no IN_FORMATS data")]
    NoInFormats(u64),
    /// An entry is not `{modifier: integer, formats: [integers]}`.
    #[error("plane {plane}: IN_FORMATS entry {entry} is not {{modifier, formats[]}} with integers")]
    BadEntry { plane: u64, entry: usize },
    /// More format+modifier pairs than a blob may hold.
    #[error("plane {plane}: {pairs} format+modifier pairs, more than the {max} allowed")]
    TooManyPairs { plane: u64, pairs: u64, max: u64 },
}

/// The planes of every node, in document order of the nodes (a node is any top-level value
/// with a `planes` array).
fn planes(doc: &Value) -> Result<Vec<&Value>, DrmInfoError> {
    let nodes = doc.as_object().ok_or(DrmInfoError::Shape("the top level is not an object of nodes"))?;
    let mut out = Vec::new();
    let mut any = false;
    for node in nodes.values() {
        if let Some(p) = node.get("planes").and_then(Value::as_array) {
            any = true;
            out.extend(p.iter());
        }
    }
    if !any {
        return Err(DrmInfoError::Shape("no node has a planes array"));
    }
    Ok(out)
}

fn first_node_planes(doc: &Value) -> Option<&Vec<Value>> {
    doc.as_object()?.values().find_map(|n| n.get("planes").and_then(Value::as_array))
}

/// The `IN_FORMATS` of plane `plane_id` (else the first node's primary plane) in a
/// `drm_info -j` document.
pub fn in_formats(json: &str, plane_id: Option<u64>) -> Result<FormatSet, DrmInfoError> {
    let doc: Value = serde_json::from_str(json).map_err(|e| DrmInfoError::Json(e.to_string()))?;
    let all = planes(&doc)?;
    let plane = match plane_id {
        Some(id) => all.into_iter().find(|p| p.get("id").and_then(Value::as_u64) == Some(id)).ok_or(DrmInfoError::NoPlane(id))?,
        None => first_node_planes(&doc)
            .into_iter()
            .flatten()
            .find(|p| p.pointer("/properties/type/value").and_then(Value::as_u64) == Some(PRIMARY))
            .ok_or(DrmInfoError::NoPrimaryPlane)?,
    };
    let id = plane.get("id").and_then(Value::as_u64).unwrap_or(0);
    let entries = plane.pointer("/properties/IN_FORMATS/data").and_then(Value::as_array).ok_or(DrmInfoError::NoInFormats(id))?;
    // First pass: shape and bound, before collecting anything.
    let mut pairs = 0u64;
    for (i, e) in entries.iter().enumerate() {
        let ok = e.get("modifier").and_then(Value::as_u64).is_some()
            && e.get("formats").and_then(Value::as_array).is_some_and(|f| f.iter().all(|v| v.as_u64().is_some_and(|c| c <= u64::from(u32::MAX))));
        if !ok {
            return Err(DrmInfoError::BadEntry { plane: id, entry: i });
        }
        pairs += e.get("formats").and_then(Value::as_array).map_or(0, |f| f.len() as u64);
        if pairs > MAX_IN_FORMATS_PAIRS {
            return Err(DrmInfoError::TooManyPairs { plane: id, pairs, max: MAX_IN_FORMATS_PAIRS });
        }
    }
    // The blob's order: formats as first listed, each with its modifiers in entry order
    // (drm_info writes the blob's entries in order, each with its formats in blob order).
    let mut by_format: Vec<(Fourcc, Vec<Layout>)> = Vec::new();
    let mut index: std::collections::HashMap<Fourcc, usize> = std::collections::HashMap::new();
    for e in entries {
        let modifier = Modifier::from_raw(e.get("modifier").and_then(Value::as_u64).unwrap_or(0));
        for f in e.get("formats").and_then(Value::as_array).into_iter().flatten() {
            let fourcc = Fourcc::from_code(f.as_u64().and_then(|c| u32::try_from(c).ok()).unwrap_or(0));
            let i = *index.entry(fourcc).or_insert_with(|| {
                by_format.push((fourcc, Vec::new()));
                by_format.len() - 1
            });
            by_format[i].1.push(Layout::from_wire(modifier));
        }
    }
    Ok(by_format.into_iter().flat_map(|(fourcc, ls)| ls.into_iter().map(move |layout| Format { fourcc, layout })).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::kms::{parse_in_formats, write_in_formats};

    /// A document in drm_info's shape: two planes on card0 (an overlay, then the primary).
    fn doc(entries: &str) -> String {
        format!(
            r#"{{"/dev/dri/card0": {{"driver": {{"name": "i915"}}, "planes": [
                {{"id": 31, "properties": {{"type": {{"value": 0}}, "IN_FORMATS": {{"value": 40, "data": [{{"modifier": 0, "formats": [875713112]}}]}}}}}},
                {{"id": 32, "properties": {{"type": {{"value": 1}}, "IN_FORMATS": {{"value": 41, "data": {entries}}}}}}}
            ]}}}}"#
        )
    }

    #[test]
    fn the_primary_plane_reads_like_the_blob() {
        let x_tiled = Modifier::from_raw(0x0100_0000_0000_0001);
        let blob_set: FormatSet = [
            Format::new(Fourcc::XRGB8888, Modifier::LINEAR),
            Format::new(Fourcc::XRGB8888, x_tiled),
            Format::new(Fourcc::NV12, Modifier::LINEAR),
        ]
        .into_iter()
        .collect();
        let blob = parse_in_formats(&write_in_formats(&blob_set)).unwrap();
        let json = doc(r#"[{"modifier": 0, "formats": [875713112, 842094158]}, {"modifier": 72057594037927937, "formats": [875713112]}]"#);
        assert_eq!(in_formats(&json, None).unwrap(), blob);
        assert_eq!(in_formats(&json, Some(32)).unwrap(), blob);
        assert_eq!(in_formats(&json, Some(31)).unwrap().len(), 1);
        assert_eq!(in_formats(&json, Some(99)), Err(DrmInfoError::NoPlane(99)));
    }

    #[test]
    fn hostile_documents_are_typed_errors() {
        assert!(matches!(in_formats("{", None), Err(DrmInfoError::Json(_))));
        assert!(matches!(in_formats("[]", None), Err(DrmInfoError::Shape(_))));
        assert!(matches!(in_formats(r#"{"a": {"x": 1}}"#, None), Err(DrmInfoError::Shape(_))));
        assert_eq!(in_formats(&doc(r#"[{"modifier": -1, "formats": [1]}]"#), None), Err(DrmInfoError::BadEntry { plane: 32, entry: 0 }));
        assert_eq!(in_formats(&doc(r#"[{"modifier": 0, "formats": [4294967296]}]"#), None), Err(DrmInfoError::BadEntry { plane: 32, entry: 0 }));
        assert_eq!(in_formats(&doc(r#""nothing""#), None), Err(DrmInfoError::NoInFormats(32)));
        let many = format!(r#"[{{"modifier": 0, "formats": [{}]}}]"#, vec!["1"; 65537].join(","));
        assert!(matches!(in_formats(&doc(&many), None), Err(DrmInfoError::TooManyPairs { .. })));
        let no_primary = r#"{"/dev/dri/card0": {"planes": [{"id": 1, "properties": {"type": {"value": 2}}}]}}"#;
        assert_eq!(in_formats(no_primary, None), Err(DrmInfoError::NoPrimaryPlane));
    }
}
