//! `dmabridge probe`: every format of the table against every usage, and against the usage
//! combinations asked for, as a report.
//!
//! The JSON shape is a contract other tools read (see the README). Every usage key (the
//! single usages, then each combination as `sampled+color-attachment`) is present for
//! every modifier, and `modifier` is always `0x` plus 16 hex digits. The create flags and
//! sRGB view of [`ProbeOptions`] apply to every query of the run, and the report says which.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ash::vk;
use dmabridge_interop::peers::gst::paste_caps;
use dmabridge_interop::{Format, Modifier};

use crate::device::format_support::{FormatSupportError, SupportQuery, SupportSource};
use crate::device::usage::{create_flags_name, image_usage_name, ImageUse, IMAGE_USAGES};
use crate::device::vk_format::{vk_format_name, VK_FORMAT_TABLE};
use crate::Adapter;

#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeReport {
    pub device: ProbeDevice,
    pub modifier_extension: bool,
    /// The create flags every query of the run used (`mutable-format,alias`; empty: none).
    pub create_flags: String,
    /// Whether every query also asked for a view in the format's sRGB twin.
    pub srgb_view: bool,
    /// The usage keys of every modifier's `usages` map, in column order: the single usages,
    /// then the combinations asked for.
    pub usage_keys: Vec<String>,
    /// The best way this device synchronises with other processes and devices
    /// (`sync-file`, `implicit-bridge`, `cpu-wait`), and all it supports.
    pub sync: dmabridge_interop::sync::SyncMethod,
    pub sync_methods: Vec<dmabridge_interop::sync::SyncMethod>,
    pub formats: Vec<ProbeFormat>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeDevice {
    pub name: String,
    /// The driver's own description (`driverInfo`), e.g. "Mesa 25.0.7 (LLVM 15.0.6)".
    pub driver: String,
    /// The driver's short name (`driverName`), e.g. "llvmpipe".
    pub driver_name: String,
    pub api_version: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeFormat {
    /// The DRM code, padded with spaces as the kernel pads it (`"R8  "`).
    pub fourcc: String,
    pub vk_format: String,
    /// `drm-format-modifier` or `linear-tiling` (no modifier extension: implicit world).
    pub source: SupportSource,
    pub modifiers: Vec<ProbeModifier>,
    /// Caps to paste into a GStreamer pipeline for the modifiers this device imports or
    /// exports for some use of the run: the `DMA_DRM` form (GStreamer 1.24) and, for LINEAR,
    /// the 1.22 form.
    pub gst_caps: Vec<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeModifier {
    pub modifier: String,
    /// The modifier decoded, whatever its vendor ([`Modifier::display_name`]): `LINEAR`,
    /// `AMD(GFX11, GFX9_64K_R_X, DCC, DCC_RETILE, DCC_MAX_COMPRESSED_BLOCK=64B,
    /// PIPE_XOR_BITS=3, PACKERS=3)`; a value `drm_fourcc.h` does not define is what decodes
    /// of it followed by the hex.
    pub name: String,
    /// The kernel's macro name and the hex, as `drm_info` prints them
    /// (`I915_FORMAT_MOD_X_TILED (0x0100000000000001)`; see [`Modifier::kernel_label`]).
    pub kernel_name: String,
    pub plane_count: u32,
    /// Per usage key (a name of [`IMAGE_USAGES`], or a `+`-joined combination): whether
    /// that use can import and export.
    pub usages: BTreeMap<String, Support>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Support {
    pub import: bool,
    pub export: bool,
    /// Largest width and height the driver accepts for this use, when it accepts it at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_extent: Option<[u32; 2]>,
}

/// What a probe asks besides the single usages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Usage combinations, each a column of its own (`SAMPLED | COLOR_ATTACHMENT`).
    pub combinations: Vec<vk::ImageUsageFlags>,
    /// Create flags for every query of the run.
    pub create: vk::ImageCreateFlags,
    /// A view in the format's sRGB twin, for every query of the run.
    pub srgb_view: bool,
}

impl ProbeOptions {
    /// The (key, use) of every column: the single usages, then the combinations (a
    /// combination equal to a single usage, or given twice, is one column).
    pub fn columns(&self) -> Vec<(String, ImageUse)> {
        let mut out: Vec<(String, ImageUse)> = Vec::new();
        for flags in IMAGE_USAGES.iter().map(|(_, f)| *f).chain(self.combinations.iter().copied()) {
            let key = image_usage_name(flags);
            if out.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let mut image_use = ImageUse::new(flags).with_create(self.create);
            image_use.srgb_view = self.srgb_view;
            out.push((key, image_use));
        }
        out
    }
}

/// Probes every format of the VkFormat table for every column of `options` (the single
/// usages of [`IMAGE_USAGES`] and the combinations), with its create flags and sRGB view,
/// and the DMA_BUF handle type.
pub fn probe(engine: &Adapter, options: &ProbeOptions) -> Result<ProbeReport, FormatSupportError> {
    let info = engine.info();
    let columns = options.columns();
    let mut formats = Vec::with_capacity(VK_FORMAT_TABLE.len());
    for entry in VK_FORMAT_TABLE {
        let mut modifiers: Vec<ProbeModifier> = Vec::new();
        let mut source = SupportSource::LinearTiling;
        for (key, image_use) in &columns {
            let caps = engine.format_support(&SupportQuery::new(entry.fourcc, *image_use))?;
            source = caps.source;
            for m in &caps.modifiers {
                let row = match modifiers.iter_mut().position(|p| p.modifier == m.modifier.to_hex()) {
                    Some(i) => &mut modifiers[i],
                    None => {
                        modifiers.push(ProbeModifier {
                            modifier: m.modifier.to_hex(),
                            name: m.modifier.display_name(),
                            kernel_name: m.modifier.kernel_label(),
                            plane_count: m.plane_count,
                            usages: columns.iter().map(|(k, _)| (k.clone(), Support::default())).collect(),
                        });
                        let last = modifiers.len() - 1;
                        &mut modifiers[last]
                    }
                };
                row.usages.insert(key.clone(), Support {
                    import: m.can_import(),
                    export: m.can_export(),
                    max_extent: m.supported().then(|| m.limits.map(|l| [l.max_extent.width, l.max_extent.height])).flatten(),
                });
            }
        }
        let shared: Vec<Format> = modifiers
            .iter()
            .filter(|m| m.usages.values().any(|s| s.import || s.export))
            .filter_map(row_modifier)
            .map(|m| Format::explicit(entry.fourcc, m))
            .collect();
        formats.push(ProbeFormat {
            fourcc: entry.fourcc.padded(),
            vk_format: vk_format_name(entry.vk_format),
            source,
            modifiers,
            gst_caps: paste_caps(&shared),
        });
    }
    Ok(ProbeReport {
        device: ProbeDevice {
            name: info.name.clone(),
            driver: info.driver_info.clone(),
            driver_name: info.driver_name.clone(),
            api_version: info.api_version.clone(),
        },
        modifier_extension: engine.has_modifiers(),
        create_flags: create_flags_name(options.create),
        srgb_view: options.srgb_view,
        usage_keys: columns.into_iter().map(|(k, _)| k).collect(),
        sync: engine.sync_methods().best(),
        sync_methods: engine.sync_methods().iter().collect(),
        formats,
    })
}

impl ProbeReport {
    /// A table per format: modifiers against usages, `I` import, `E` export. Each row starts
    /// with the modifier's hex and ends with its name: every column before the name has a
    /// fixed width, so a long decoded name (AMD's run past 100 characters) runs on at the end
    /// of its own row without pushing the usage columns of the others (the macro spelling is
    /// `kernel_name` in `--json`).
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "device: {} ({}, {}), Vulkan {}", self.device.name, self.device.driver_name, self.device.driver, self.device.api_version);
        let _ = writeln!(
            out,
            "explicit modifiers: {}",
            if self.modifier_extension {
                "yes (VK_EXT_image_drm_format_modifier)"
            } else {
                "no: the driver does not offer VK_EXT_image_drm_format_modifier on this device, so it lists no modifier; the LINEAR rows below come from LINEAR tiling (implicit world only)"
            }
        );
        let _ = writeln!(
            out,
            "sync with other processes: {} (supports {})",
            self.sync,
            self.sync_methods.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
        );
        if !self.create_flags.is_empty() || self.srgb_view {
            let _ = writeln!(
                out,
                "every query with: {}{}",
                if self.create_flags.is_empty() { "no create flags" } else { &self.create_flags },
                if self.srgb_view { ", an sRGB view" } else { "" }
            );
        }
        let _ = writeln!(out, "cells: I = importable, E = exportable, - = neither (DMA_BUF handle type)\n");
        // `0x` and 16 digits.
        let hex_w = Modifier::LINEAR.to_hex().len();
        for f in &self.formats {
            let _ = writeln!(out, "{}  {}", f.fourcc, f.vk_format);
            if f.modifiers.is_empty() {
                let _ = writeln!(out, "  (the driver lists no modifier for this format)\n");
                continue;
            }
            let _ = write!(out, "  {:<hex_w$}  planes", "modifier");
            for u in &self.usage_keys {
                let _ = write!(out, "  {u}");
            }
            // The names that end the rows go unlabelled, as the kernel names did before.
            let _ = writeln!(out);
            for m in &f.modifiers {
                let _ = write!(out, "  {:<hex_w$}  {:<6}", m.modifier, m.plane_count);
                for u in &self.usage_keys {
                    let s = m.usages.get(u).copied().unwrap_or_default();
                    let cell = match (s.import, s.export) {
                        (true, true) => "IE",
                        (true, false) => "I",
                        (false, true) => "E",
                        (false, false) => "-",
                    };
                    let _ = write!(out, "  {:<w$}", cell, w = u.len());
                }
                let _ = writeln!(out, "  {}", m.name);
            }
            for caps in &f.gst_caps {
                let _ = writeln!(out, "  caps: {caps}");
            }
            let _ = writeln!(out);
        }
        out
    }
}

/// The modifier of a probe row, parsed back (for tests and tools).
pub fn row_modifier(m: &ProbeModifier) -> Option<Modifier> {
    Modifier::parse_hex(&m.modifier).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmabridge_interop::sync::SyncMethod;

    fn row(m: Modifier, planes: u32, keys: &[&str], import: bool) -> ProbeModifier {
        ProbeModifier {
            modifier: m.to_hex(),
            name: m.display_name(),
            kernel_name: m.kernel_label(),
            plane_count: planes,
            usages: keys.iter().map(|k| (k.to_string(), Support { import, export: true, max_extent: None })).collect(),
        }
    }

    /// A device listing radv's navi31 modifiers (one with DCC, whose name is over 100
    /// characters), LINEAR and one the header does not define: every row's cells start in
    /// the same column, each row ends with its decoded name, and the JSON has both names.
    #[test]
    fn long_modifier_names_keep_the_table_aligned() {
        let keys = ["sampled", "color-attachment"];
        let dcc = Modifier::from_raw(0x0200_0000_28a6_bf04);
        let unknown = Modifier::from_raw(0x0200_0000_0000_0009);
        let report = ProbeReport {
            device: ProbeDevice {
                name: "AMD Radeon RX 7900 XTX (RADV NAVI31)".into(),
                driver: "Mesa".into(),
                driver_name: "radv".into(),
                api_version: "1.4.305".into(),
            },
            modifier_extension: true,
            create_flags: String::new(),
            srgb_view: false,
            usage_keys: keys.iter().map(|k| k.to_string()).collect(),
            sync: SyncMethod::SyncFile,
            sync_methods: vec![SyncMethod::SyncFile],
            formats: vec![ProbeFormat {
                fourcc: "AR24".into(),
                vk_format: "B8G8R8A8_UNORM".into(),
                source: SupportSource::DrmModifier,
                modifiers: vec![
                    row(dcc, 2, &keys, true),
                    row(Modifier::from_raw(0x0200_0000_0000_1b04), 1, &keys, false),
                    row(Modifier::LINEAR, 1, &keys, true),
                    row(unknown, 1, &keys, false),
                ],
                gst_caps: vec![],
            }],
        };
        let table = report.to_table();
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("  0x")).collect();
        assert_eq!(rows.len(), 4, "{table}");
        let header = table.lines().find(|l| l.starts_with("  modifier")).expect("header row");
        let column = |line: &str, what: &str| line.find(what).unwrap_or_else(|| panic!("{what:?} in {line:?}"));
        let cells = column(header, "sampled");
        for r in &rows {
            let cell = &r[cells..cells + 2];
            assert!(cell == "IE" || cell == "E ", "{r:?}: {cell:?}");
        }
        assert!(rows[0].ends_with(
            "AMD(GFX11, GFX11_256K_R_X, DCC, DCC_PIPE_ALIGN, DCC_INDEPENDENT_128B, DCC_MAX_COMPRESSED_BLOCK=128B, PIPE_XOR_BITS=5, PACKERS=5)"
        ));
        assert!(rows[1].ends_with("AMD(GFX11, GFX9_64K_R_X, PIPE_XOR_BITS=0, PACKERS=0)"), "{}", rows[1]);
        assert!(rows[2].starts_with("  0x0000000000000000  1") && rows[2].ends_with("  LINEAR"), "{}", rows[2]);
        assert!(rows[3].ends_with("  AMD(unknown tile version 9) 0x0200000000000009"), "{}", rows[3]);
        assert_eq!(header.len() + 2, column(rows[2], "LINEAR"), "{table}");

        let json = serde_json::to_value(&report).expect("json");
        let m = &json["formats"][0]["modifiers"];
        assert_eq!(m[0]["modifier"], "0x0200000028a6bf04");
        assert_eq!(m[0]["name"], dcc.display_name());
        assert_eq!(m[0]["kernel_name"], format!("{} (0x0200000028a6bf04)", dcc.display_name()));
        assert_eq!(m[3]["name"], "AMD(unknown tile version 9) 0x0200000000000009");
        assert_eq!(m[3]["kernel_name"], "AMD(unknown tile version 9) (0x0200000000000009)");
    }
}
