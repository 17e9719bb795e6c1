//! A GPU as a participant: the one rule that turns what a device answered (which modifiers
//! of a format it can import and export for a use) into a format list. The live device
//! (`dmabridge::Adapter::participant`) and a saved probe report of one
//! ([`crate::peers::probe_report`]) both go through [`device_formats`], so a device reads the
//! same whether it is asked now or was asked on another machine.
//!
//! The rule, for one format:
//! - with `VK_EXT_image_drm_format_modifier`: the explicit modifiers the driver accepts and
//!   can export (a producer), import (a consumer), or either;
//! - without it there are no explicit modifiers. A producer's LINEAR tiling *is* the DRM
//!   LINEAR layout (the image is allocated first and its row pitch read back), so a device
//!   that can export LINEAR-tiled memory lists LINEAR and implicit. A consumer cannot state
//!   a row pitch for an import, so it is implicit-only (seed 001: a party without modifier
//!   support).
//!
//! A GPU can also copy between layouts it holds ([`DeviceCopy`]): `vkCmdCopyImage` from an
//! image it imported for transfer reads into one it exports for transfer writes, with the
//! driver addressing both tilings. That is how a copy plan joins layouts dmabridge's own
//! converter does not know (an AMD or NVIDIA tiling), the way PRIME copies a discrete GPU's
//! frame into the integrated GPU's scanout layout.

use crate::{Format, FormatSet, Fourcc, Layout, Modifier};

/// Which way buffers go between the device and the other parties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The device writes the buffers and exports them.
    Export,
    /// The device imports buffers others wrote.
    Import,
    /// Either (a report of what the device shares at all).
    Both,
}

/// One answer of the driver: for `fourcc` with `modifier` (LINEAR where the device has no
/// modifier extension: its LINEAR tiling), whether the use can import and export it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFormat {
    pub fourcc: Fourcc,
    pub modifier: Modifier,
    pub import: bool,
    pub export: bool,
}

impl DeviceFormat {
    fn wanted(&self, direction: Direction) -> bool {
        match direction {
            Direction::Export => self.export,
            Direction::Import => self.import,
            Direction::Both => self.import || self.export,
        }
    }
}

/// The formats a device with (`explicit_modifiers`) or without the modifier extension lists
/// for `direction`, from its answers, in their order (see the module docs for the rule).
pub fn device_formats(explicit_modifiers: bool, direction: Direction, answers: impl IntoIterator<Item = DeviceFormat>) -> FormatSet {
    let mut formats = FormatSet::new();
    for a in answers.into_iter().filter(|a| a.wanted(direction)) {
        if explicit_modifiers {
            formats.insert(Format::explicit(a.fourcc, a.modifier));
        } else if a.modifier == Modifier::LINEAR {
            // Only memory the device allocated has a known row pitch.
            if direction != Direction::Import && a.export {
                formats.insert(Format::linear(a.fourcc));
            }
            formats.insert(Format { fourcc: a.fourcc, layout: Layout::Implicit });
        }
    }
    formats
}

/// What a GPU participant can copy between, with `vkCmdCopyImage` (same fourcc; the driver
/// reads one modifier's layout and writes the other's). Only explicit layouts: a copy must
/// state the layout of the buffer it imports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCopy {
    /// The layouts it imports as a copy's source (its `transfer-src` use).
    pub reads: FormatSet,
    /// The layouts it exports as a copy's destination (its `transfer-dst` use).
    pub writes: FormatSet,
}

impl DeviceCopy {
    /// The copies a device with the modifier extension can make between dma-bufs, from its
    /// answers for the `transfer-src` and `transfer-dst` uses; `None` where it can make none
    /// (nothing both ways). A device without the extension has no such answers: its copy is
    /// [`DeviceCopy::into_own_images`].
    pub fn of_answers(transfer_src: impl IntoIterator<Item = DeviceFormat>, transfer_dst: impl IntoIterator<Item = DeviceFormat>) -> Option<DeviceCopy> {
        let reads = device_formats(true, Direction::Import, transfer_src);
        let writes = device_formats(true, Direction::Export, transfer_dst);
        let copies = DeviceCopy { reads, writes };
        copies.reads.iter().any(|r| copies.writes.iter().any(|w| w.fourcc == r.fourcc)).then_some(copies)
    }

    /// The copies a device without the modifier extension makes when it imports by copy:
    /// from a LINEAR dma-buf of each of `fourccs` (read as a buffer) into an image of its
    /// own, in the layout its driver chooses (`writes` are implicit). `None` for no fourcc.
    pub fn into_own_images(fourccs: impl IntoIterator<Item = Fourcc>) -> Option<DeviceCopy> {
        let (mut reads, mut writes) = (FormatSet::new(), FormatSet::new());
        for fourcc in fourccs {
            reads.insert(Format::linear(fourcc));
            writes.insert(Format::implicit(fourcc));
        }
        (!reads.is_empty()).then_some(DeviceCopy { reads, writes })
    }

    /// Whether it copies `from` into `to`: the same fourcc, `from` among its reads and `to`
    /// among its writes.
    pub fn copies(&self, from: Format, to: Format) -> bool {
        from.fourcc == to.fourcc && from.layout.modifier().is_some() && self.reads.contains(&from) && self.writes.contains(&to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(modifier: u64, import: bool, export: bool) -> DeviceFormat {
        DeviceFormat { fourcc: Fourcc::XRGB8888, modifier: Modifier::from_raw(modifier), import, export }
    }

    #[test]
    fn explicit_modifiers_follow_the_direction() {
        let answers = [answer(0x0200000000001b04, true, false), answer(0x0200000000000a04, false, true), answer(0, true, true)];
        let only = |d| device_formats(true, d, answers).iter().map(|f| f.layout).collect::<Vec<_>>();
        let m = |raw| Layout::Explicit(Modifier::from_raw(raw));
        assert_eq!(only(Direction::Import), [m(0x0200000000001b04), m(0)]);
        assert_eq!(only(Direction::Export), [m(0x0200000000000a04), m(0)]);
        assert_eq!(only(Direction::Both), [m(0x0200000000001b04), m(0x0200000000000a04), m(0)]);
    }

    #[test]
    fn a_device_copies_from_what_it_imports_into_what_it_exports() {
        let src = [answer(0x0200000000001b04, true, false), answer(0, true, true)];
        let dst = [answer(0x0200000000000a04, false, true), answer(0x0200000000001b04, true, false)];
        let copy = DeviceCopy::of_answers(src, dst).unwrap();
        let f = |raw| Format::explicit(Fourcc::XRGB8888, Modifier::from_raw(raw));
        assert!(copy.copies(f(0), f(0x0200000000000a04)) && copy.copies(f(0x0200000000001b04), f(0x0200000000000a04)));
        // Not into a layout it only imports, nor across fourccs.
        assert!(!copy.copies(f(0), f(0x0200000000001b04)));
        assert!(!copy.copies(f(0), Format::explicit(Fourcc::ARGB8888, Modifier::from_raw(0x0200000000000a04))));
        // Nothing written, no copy.
        assert_eq!(DeviceCopy::of_answers(src, []), None);
    }

    #[test]
    fn without_the_extension_only_an_exporter_states_linear() {
        let answers = [answer(0, true, true)];
        let layouts = |d| device_formats(false, d, answers).iter().map(|f| f.layout).collect::<Vec<_>>();
        assert_eq!(layouts(Direction::Export), [Layout::Explicit(Modifier::LINEAR), Layout::Implicit]);
        assert_eq!(layouts(Direction::Import), [Layout::Implicit]);
        // A tiled answer cannot exist without the extension; it is ignored, not trusted.
        assert!(device_formats(false, Direction::Both, [answer(0x0200000000000a04, true, true)]).is_empty());
    }
}
