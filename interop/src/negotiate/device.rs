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
    fn without_the_extension_only_an_exporter_states_linear() {
        let answers = [answer(0, true, true)];
        let layouts = |d| device_formats(false, d, answers).iter().map(|f| f.layout).collect::<Vec<_>>();
        assert_eq!(layouts(Direction::Export), [Layout::Explicit(Modifier::LINEAR), Layout::Implicit]);
        assert_eq!(layouts(Direction::Import), [Layout::Implicit]);
        // A tiled answer cannot exist without the extension; it is ignored, not trusted.
        assert!(device_formats(false, Direction::Both, [answer(0x0200000000000a04, true, true)]).is_empty());
    }
}
