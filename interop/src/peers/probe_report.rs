//! A saved `dmabridge probe --json` report as a participant: a GPU asked on another machine
//! (or under another driver), kept as a file, and negotiated with as if it were here. Its
//! list follows the same rule as the live device's ([`crate::negotiate::device_formats`]),
//! for one use the report answered (a usage key of its `usage_keys`: `sampled`,
//! `color-attachment`, `sampled+color-attachment`, ...).
//!
//! The report is the JSON contract `dmabridge probe --json` writes (the engine's
//! `device::probe`): `device`, `modifier_extension`, `usage_keys`, `sync_methods` and
//! `formats[]`, each with `fourcc` and `modifiers[]` (`modifier` as `0x` and 16 hex digits,
//! `usages` per key with `import` and `export`). Fields it does not need are ignored.
//! Counts are bounded ([`MAX_FORMATS`], [`MAX_MODIFIERS`]) and every error names what is
//! wrong.

use std::collections::BTreeMap;

use crate::negotiate::{device_formats, DeviceCopy, DeviceFormat, Direction, Usage};
use crate::sync::{SyncMethod, SyncMethods};
use crate::{FormatSet, Fourcc, Modifier};

/// At most this many formats in a report (the engine's table has a few dozen).
pub const MAX_FORMATS: usize = 256;
/// At most this many modifiers per format (drivers list up to a few dozen).
pub const MAX_MODIFIERS: usize = 256;

/// Why a probe report cannot be a participant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeReportError {
    /// Not JSON of the report's shape.
    #[error("not a dmabridge probe --json report: {0}")]
    Json(String),
    /// More formats or modifiers than the bounds.
    #[error("the report lists {count} {what}, more than the {max} a report may")]
    TooMany { what: &'static str, count: usize, max: usize },
    /// A fourcc that is not four characters.
    #[error("format {0:?} is not a fourcc")]
    Fourcc(String),
    /// A modifier that is not `0x` and 16 hex digits.
    #[error("format {fourcc}: modifier {modifier:?} is not 0x and 16 hex digits")]
    Modifier { fourcc: String, modifier: String },
    /// The use asked for is not one the report answered.
    #[error("the report did not probe the use {asked:?}; it answered {}", .answered.join(", "))]
    UnknownUse { asked: String, answered: Vec<String> },
}

#[derive(serde::Deserialize)]
struct Report {
    device: Device,
    modifier_extension: bool,
    usage_keys: Vec<String>,
    #[serde(default)]
    sync_methods: Vec<SyncMethod>,
    formats: Vec<ReportFormat>,
}

#[derive(serde::Deserialize)]
struct Device {
    name: String,
    #[serde(default)]
    driver: String,
    #[serde(default)]
    driver_name: String,
}

#[derive(serde::Deserialize)]
struct ReportFormat {
    fourcc: String,
    modifiers: Vec<ReportModifier>,
}

#[derive(serde::Deserialize)]
struct ReportModifier {
    modifier: String,
    usages: BTreeMap<String, Answer>,
}

#[derive(serde::Deserialize)]
struct Answer {
    import: bool,
    export: bool,
}

/// What a report gives a participant: its formats for one use, its sync methods, and the
/// device it describes (`"Null hardware (RADV NAVI21) (radv, Mesa 25.0.7)"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbedDevice {
    pub formats: FormatSet,
    /// The use in negotiation's words: sampling (`sampled`) and rendering
    /// (`color-attachment`, `storage`).
    pub usage: Usage,
    pub sync: SyncMethods,
    pub device: String,
    /// The copies the device makes between layouts, from its `transfer-src` and
    /// `transfer-dst` answers (where the report has them).
    pub copy: Option<DeviceCopy>,
}

/// The device of the report `json` as a participant's list for the use `usage_key`, in
/// `direction`.
pub fn probed_device(json: &str, usage_key: &str, direction: Direction) -> Result<ProbedDevice, ProbeReportError> {
    let report: Report = serde_json::from_str(json).map_err(|e| ProbeReportError::Json(e.to_string()))?;
    if report.formats.len() > MAX_FORMATS {
        return Err(ProbeReportError::TooMany { what: "formats", count: report.formats.len(), max: MAX_FORMATS });
    }
    if !report.usage_keys.iter().any(|k| k == usage_key) {
        return Err(ProbeReportError::UnknownUse { asked: usage_key.to_owned(), answered: report.usage_keys });
    }
    let answers = answers_for(&report, usage_key)?;
    // Without the modifier extension a report has no copy answers (its import by copy is a
    // live device's to state: `dmabridge::Engine::participant`).
    let copy = match report.modifier_extension {
        true => DeviceCopy::of_answers(answers_for(&report, "transfer-src")?, answers_for(&report, "transfer-dst")?),
        false => None,
    };
    let d = &report.device;
    let driver = [d.driver_name.as_str(), d.driver.as_str()].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>().join(", ");
    let usage = usage_key.split('+').fold(Usage::NONE, |u, word| match word {
        "sampled" | "input-attachment" => u.union(Usage::SAMPLE),
        "color-attachment" | "storage" => u.union(Usage::RENDER),
        _ => u,
    });
    Ok(ProbedDevice {
        formats: device_formats(report.modifier_extension, direction, answers),
        usage,
        sync: SyncMethods::of(report.sync_methods),
        device: if driver.is_empty() { d.name.clone() } else { format!("{} ({driver})", d.name) },
        copy,
    })
}

/// The report's answers for the use `usage_key` (none where it did not answer it).
fn answers_for(report: &Report, usage_key: &str) -> Result<Vec<DeviceFormat>, ProbeReportError> {
    let mut answers = Vec::new();
    for f in &report.formats {
        if f.modifiers.len() > MAX_MODIFIERS {
            return Err(ProbeReportError::TooMany { what: "modifiers for one format", count: f.modifiers.len(), max: MAX_MODIFIERS });
        }
        let fourcc = fourcc_of(&f.fourcc)?;
        for m in &f.modifiers {
            let modifier =
                Modifier::parse_hex(&m.modifier).map_err(|_| ProbeReportError::Modifier { fourcc: f.fourcc.clone(), modifier: m.modifier.clone() })?;
            // A modifier the report says nothing about for this use is not usable for it.
            let (import, export) = m.usages.get(usage_key).map_or((false, false), |a| (a.import, a.export));
            answers.push(DeviceFormat { fourcc, modifier, import, export });
        }
    }
    Ok(answers)
}

/// `"AR24"`, `"R8  "` (the report pads as the kernel does) -> the fourcc.
fn fourcc_of(text: &str) -> Result<Fourcc, ProbeReportError> {
    let bytes: [u8; 4] = text.as_bytes().try_into().map_err(|_| ProbeReportError::Fourcc(text.chars().take(16).collect()))?;
    Ok(Fourcc::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{"device":{"name":"Null hardware (RADV NAVI21)","driver":"Mesa 25.0.7","driver_name":"radv","api_version":"1.4.305"},
        "modifier_extension":true,"create_flags":"","srgb_view":false,"usage_keys":["sampled","color-attachment"],
        "sync":"cpu-wait","sync_methods":["cpu-wait"],
        "formats":[{"fourcc":"AR24","vk_format":"B8G8R8A8_UNORM","source":"drm-modifier","modifiers":[
            {"modifier":"0x0200000000001b03","name":"","kernel_name":"","plane_count":1,
             "usages":{"sampled":{"import":true,"export":true},"color-attachment":{"import":false,"export":true}}},
            {"modifier":"0x0000000000000000","name":"LINEAR","kernel_name":"","plane_count":1,
             "usages":{"sampled":{"import":true,"export":true},"color-attachment":{"import":true,"export":true}}}],
          "gst_caps":[]}]}"#;

    #[test]
    fn a_report_is_the_device_for_the_use_asked() {
        let d = probed_device(REPORT, "color-attachment", Direction::Import).expect("a report");
        assert_eq!(d.device, "Null hardware (RADV NAVI21) (radv, Mesa 25.0.7)");
        let layouts: Vec<_> = d.formats.iter().map(|f| f.layout).collect();
        assert_eq!(layouts, [crate::Layout::Explicit(Modifier::LINEAR)], "the tiled modifier is not importable as a render target");
        let both = probed_device(REPORT, "sampled", Direction::Both).expect("a report");
        assert_eq!(both.formats.len(), 2);
        assert_eq!(both.sync, SyncMethods::CPU_WAIT);
    }

    #[test]
    fn what_a_report_cannot_say_is_named() {
        let e = probed_device(REPORT, "storage", Direction::Both).unwrap_err();
        assert_eq!(e.to_string(), "the report did not probe the use \"storage\"; it answered sampled, color-attachment");
        assert!(matches!(probed_device("{}", "sampled", Direction::Both), Err(ProbeReportError::Json(_))));
        let bad = REPORT.replace("0x0200000000001b03", "0x12");
        assert!(matches!(probed_device(&bad, "sampled", Direction::Both), Err(ProbeReportError::Modifier { .. })));
        let bad = REPORT.replace("\"AR24\"", "\"AR245\"");
        assert!(matches!(probed_device(&bad, "sampled", Direction::Both), Err(ProbeReportError::Fourcc(_))));
    }
}
