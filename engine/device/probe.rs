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
use crate::Engine;

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
    pub name: String,
    /// The kernel's macro name and the hex, as `drm_info` prints them
    /// (`I915_FORMAT_MOD_X_TILED (0x0100000000000001)`).
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
pub fn probe(engine: &Engine, options: &ProbeOptions) -> Result<ProbeReport, FormatSupportError> {
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
    /// A table per format: modifiers against usages, `I` import, `E` export.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "device: {} ({}, {}), Vulkan {}", self.device.name, self.device.driver_name, self.device.driver, self.device.api_version);
        let _ = writeln!(
            out,
            "explicit modifiers: {}",
            if self.modifier_extension {
                "yes (VK_EXT_image_drm_format_modifier)"
            } else {
                "no: implicit world only, LINEAR rows below come from LINEAR tiling"
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
        let name_w = self
            .formats
            .iter()
            .flat_map(|f| f.modifiers.iter().map(|m| m.name.len()))
            .chain(std::iter::once("modifier".len()))
            .max()
            .unwrap_or(8);
        for f in &self.formats {
            let _ = writeln!(out, "{}  {}", f.fourcc, f.vk_format);
            if f.modifiers.is_empty() {
                let _ = writeln!(out, "  (the driver lists no modifier for this format)\n");
                continue;
            }
            let _ = write!(out, "  {:<name_w$}  planes", "modifier");
            for u in &self.usage_keys {
                let _ = write!(out, "  {u}");
            }
            let _ = writeln!(out);
            for m in &f.modifiers {
                let _ = write!(out, "  {:<name_w$}  {:<6}", m.name, m.plane_count);
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
                let _ = writeln!(out, "  {}", m.kernel_name);
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
