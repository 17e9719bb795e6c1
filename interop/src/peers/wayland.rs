//! Wayland `linux-dmabuf-v1`: what a compositor says it can import.
//!
//! Version 4 sends *feedback*: a format table (a memory-mapped file of 16-byte entries:
//! `u32 format`, 4 bytes of padding, `u64 modifier`, native byte order), a main device, and
//! preference tranches, each with a target device, flags (`scanout`) and a `wl_array` of
//! `u16` indices into the table. Versions 3 and below send one `modifier(format, hi, lo)`
//! event per pair instead (and, before 3, bare `format` events).
//!
//! `DRM_FORMAT_MOD_INVALID` in either form means the compositor accepts the format with an
//! implicit modifier; it becomes [`Layout::Implicit`]. The table may repeat pairs; the sets
//! built from it drop repeats and keep first (preferred) positions.
//!
//! ## Bounds
//! The table is a file the compositor maps for us, of any size it likes, and the events
//! keep coming as long as it sends them. Tranche indices are `u16`, so a table of more than
//! [`MAX_FORMAT_TABLE_ENTRIES`] entries has entries no tranche can name and is refused;
//! tranches are at most [`MAX_TRANCHES`] per feedback and [`MAX_TRANCHE_INDICES`] indices
//! each, and v3 events at most [`MAX_V3_PAIRS`] distinct pairs. Real compositors send a few
//! hundred pairs in two or three tranches.

use std::collections::HashMap;

use crate::sync::{SyncMethod, SyncMethods};
use crate::{Format, FormatSet, Fourcc, Layout, Modifier};

/// Bytes per format-table entry.
pub const TABLE_ENTRY_LEN: usize = 16;
/// Most entries of a format table: every one a `u16` index can name.
pub const MAX_FORMAT_TABLE_ENTRIES: usize = 1 << 16;
/// Most tranches in one feedback.
pub const MAX_TRANCHES: usize = 64;
/// Most indices in one tranche (over all its `tranche_formats` events).
pub const MAX_TRANCHE_INDICES: usize = 1 << 16;
/// Most distinct format+modifier pairs (and bare formats) v1-v3 events may announce.
pub const MAX_V3_PAIRS: usize = 1 << 16;

/// How a compositor synchronises through linux-dmabuf alone: it waits for a client buffer's
/// implicit fences (and attaches its own while it reads). Explicit sync needs the separate
/// `linux-drm-syncobj-v1` protocol, whose timeline syncobjs are not sync_files, so it is not
/// counted here.
pub const SYNC_METHODS: SyncMethods = SyncMethods::CPU_WAIT.with(SyncMethod::ImplicitBridge);

/// Why a table, index array or event sequence was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaylandError {
    #[error("format table is {len} bytes, not a multiple of the 16-byte entry size")]
    TableLength { len: usize },
    #[error("tranche index array is {len} bytes, not a whole number of u16 indices")]
    OddIndexArray { len: usize },
    #[error("tranche index {index} is past the {table_len}-entry format table")]
    IndexOutOfRange { index: u16, table_len: usize },
    #[error("device array is {len} bytes; a dev_t is 8")]
    DevTLength { len: usize },
    #[error("feedback ended without a format_table event")]
    MissingFormatTable,
    #[error("feedback ended without a main_device event")]
    MissingMainDevice,
    #[error("tranche {tranche} ended without a tranche_target_device event")]
    MissingTargetDevice { tranche: usize },
    #[error("format table has {entries} entries; a tranche's u16 indices reach only {max}")]
    TableTooLarge { entries: usize, max: usize },
    #[error("tranche {tranche} has more than {max} format indices")]
    TooManyIndices { tranche: usize, max: usize },
    #[error("feedback has more than {max} tranches")]
    TooManyTranches { max: usize },
    #[error("v3 events announce more than {max} distinct formats and modifiers")]
    TooManyV3Pairs { max: usize },
}

/// Reads a v4 format table, keeping repeats so that tranche indices still line up.
pub fn parse_format_table(table: &[u8]) -> Result<Vec<Format>, WaylandError> {
    if table.len() % TABLE_ENTRY_LEN != 0 {
        return Err(WaylandError::TableLength { len: table.len() });
    }
    let entries = table.len() / TABLE_ENTRY_LEN;
    if entries > MAX_FORMAT_TABLE_ENTRIES {
        return Err(WaylandError::TableTooLarge { entries, max: MAX_FORMAT_TABLE_ENTRIES });
    }
    Ok(table
        .chunks_exact(TABLE_ENTRY_LEN)
        .map(|e| {
            let (format, rest) = e.split_at(4);
            let modifier = rest.get(4..12).unwrap_or_default();
            Format::new(Fourcc::from_code(ne_u32(format)), Modifier::from_raw(ne_u64(modifier)))
        })
        .collect())
}

/// Writes `formats` as a v4 format table (what a compositor would mmap).
pub fn write_format_table(formats: &[Format]) -> Vec<u8> {
    let mut out = Vec::with_capacity(formats.len() * TABLE_ENTRY_LEN);
    for f in formats {
        out.extend_from_slice(&f.fourcc.code().to_ne_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&f.layout.to_wire().raw().to_ne_bytes());
    }
    out
}

// Callers pass exactly 2, 4 or 8 bytes; a short slice reads zero-extended rather than panic.
fn ne_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.iter_mut().zip(b).for_each(|(d, s)| *d = *s);
    u32::from_ne_bytes(a)
}

fn ne_u16(b: &[u8]) -> u16 {
    let mut a = [0u8; 2];
    a.iter_mut().zip(b).for_each(|(d, s)| *d = *s);
    u16::from_ne_bytes(a)
}

fn ne_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.iter_mut().zip(b).for_each(|(d, s)| *d = *s);
    u64::from_ne_bytes(a)
}

/// Reads a tranche's `formats` array (native-endian `u16` indices), at most
/// [`MAX_TRANCHE_INDICES`] of them.
pub fn tranche_indices(array: &[u8]) -> Result<Vec<u16>, WaylandError> {
    if array.len() % 2 != 0 {
        return Err(WaylandError::OddIndexArray { len: array.len() });
    }
    if array.len() / 2 > MAX_TRANCHE_INDICES {
        return Err(WaylandError::TooManyIndices { tranche: 0, max: MAX_TRANCHE_INDICES });
    }
    Ok(array.chunks_exact(2).map(ne_u16).collect())
}

/// The formats a tranche's index array selects from `table`, in the tranche's order.
pub fn tranche_formats(table: &[Format], indices: &[u8]) -> Result<FormatSet, WaylandError> {
    select(table, &tranche_indices(indices)?)
}

fn select(table: &[Format], indices: &[u16]) -> Result<FormatSet, WaylandError> {
    indices
        .iter()
        .map(|&index| {
            table
                .get(usize::from(index))
                .copied()
                .ok_or(WaylandError::IndexOutOfRange { index, table_len: table.len() })
        })
        .collect()
}

/// Reads a `main_device` / `tranche_target_device` array: one `dev_t`, 8 bytes on Linux.
pub fn parse_dev_t(array: &[u8]) -> Result<u64, WaylandError> {
    if array.len() != 8 {
        return Err(WaylandError::DevTLength { len: array.len() });
    }
    Ok(ne_u64(array))
}

/// Tranche flags (`zwp_linux_dmabuf_feedback_v1.tranche_flags`); unknown bits are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrancheFlags(pub u32);

impl TrancheFlags {
    pub const SCANOUT: u32 = 1;

    /// The compositor may scan buffers from this tranche out directly.
    pub fn scanout(self) -> bool {
        self.0 & Self::SCANOUT != 0
    }
}

/// One preference tranche.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tranche {
    pub target_device: u64,
    pub flags: TrancheFlags,
    pub indices: Vec<u16>,
}

/// A complete feedback: table, main device, and tranches from most to least preferred.
/// Built by [`FeedbackBuilder`], which checks every index against the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feedback {
    pub main_device: u64,
    pub table: Vec<Format>,
    pub tranches: Vec<Tranche>,
}

impl Feedback {
    /// The formats of tranche `i`.
    pub fn tranche_formats(&self, i: usize) -> Option<FormatSet> {
        let t = self.tranches.get(i)?;
        select(&self.table, &t.indices).ok()
    }

    /// Every format of every tranche, most preferred first.
    pub fn formats(&self) -> FormatSet {
        self.formats_where(|_| true)
    }

    /// The formats of the tranches flagged for scan-out.
    pub fn scanout_formats(&self) -> FormatSet {
        self.formats_where(|t| t.flags.scanout())
    }

    fn formats_where(&self, keep: impl Fn(&Tranche) -> bool) -> FormatSet {
        self.tranches
            .iter()
            .filter(|t| keep(t))
            .flat_map(|t| t.indices.iter().filter_map(|&i| self.table.get(usize::from(i)).copied()))
            .collect()
    }
}

/// Collects v4 feedback events in the order the compositor sends them. `done` checks the
/// whole and starts over, since the compositor resends everything on every change.
#[derive(Debug, Default)]
pub struct FeedbackBuilder {
    table: Option<Vec<Format>>,
    main_device: Option<u64>,
    tranches: Vec<Tranche>,
    target: Option<u64>,
    flags: TrancheFlags,
    indices: Vec<u16>,
}

impl FeedbackBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// `format_table`: the mapped table's bytes.
    pub fn format_table(&mut self, table: &[u8]) -> Result<(), WaylandError> {
        self.table = Some(parse_format_table(table)?);
        Ok(())
    }

    pub fn main_device(&mut self, array: &[u8]) -> Result<(), WaylandError> {
        self.main_device = Some(parse_dev_t(array)?);
        Ok(())
    }

    pub fn tranche_target_device(&mut self, array: &[u8]) -> Result<(), WaylandError> {
        self.target = Some(parse_dev_t(array)?);
        Ok(())
    }

    /// `tranche_formats`; several events for one tranche add up (to at most
    /// [`MAX_TRANCHE_INDICES`]).
    pub fn tranche_formats(&mut self, array: &[u8]) -> Result<(), WaylandError> {
        let tranche = self.tranches.len();
        let too_many = WaylandError::TooManyIndices { tranche, max: MAX_TRANCHE_INDICES };
        let indices = tranche_indices(array).map_err(|e| match e {
            WaylandError::TooManyIndices { .. } => too_many.clone(),
            other => other,
        })?;
        if self.indices.len() + indices.len() > MAX_TRANCHE_INDICES {
            return Err(too_many);
        }
        self.indices.extend(indices);
        Ok(())
    }

    pub fn tranche_flags(&mut self, flags: u32) {
        self.flags = TrancheFlags(flags);
    }

    pub fn tranche_done(&mut self) -> Result<(), WaylandError> {
        if self.tranches.len() >= MAX_TRANCHES {
            return Err(WaylandError::TooManyTranches { max: MAX_TRANCHES });
        }
        let target_device =
            self.target.take().ok_or(WaylandError::MissingTargetDevice { tranche: self.tranches.len() })?;
        self.tranches.push(Tranche {
            target_device,
            flags: std::mem::take(&mut self.flags),
            indices: std::mem::take(&mut self.indices),
        });
        Ok(())
    }

    pub fn done(&mut self) -> Result<Feedback, WaylandError> {
        let state = std::mem::take(self);
        let table = state.table.ok_or(WaylandError::MissingFormatTable)?;
        let main_device = state.main_device.ok_or(WaylandError::MissingMainDevice)?;
        for t in &state.tranches {
            select(&table, &t.indices)?;
        }
        Ok(Feedback { main_device, table, tranches: state.tranches })
    }
}

/// The 64-bit modifier of a v3 `modifier` event (or a `params.add` request).
pub fn modifier_from_hi_lo(hi: u32, lo: u32) -> Modifier {
    Modifier::from_raw((u64::from(hi) << 32) | u64::from(lo))
}

/// Splits a modifier into the `(hi, lo)` pair the protocol sends.
pub fn modifier_to_hi_lo(m: Modifier) -> (u32, u32) {
    ((m.raw() >> 32) as u32, m.raw() as u32)
}

/// Collects v1-v3 `format` and `modifier` events.
///
/// A format that got `modifier` events supports exactly those layouts. A format that got
/// only a `format` event (v1/v2, which have no modifiers) is usable with an implicit
/// modifier only. v3 compositors send `modifier` events for every format they announce.
#[derive(Debug, Default, Clone)]
pub struct V3Formats {
    order: Vec<Fourcc>,
    layouts: HashMap<Fourcc, FormatSet>,
    /// Distinct formats plus distinct pairs so far, for [`MAX_V3_PAIRS`].
    pairs: usize,
}

impl V3Formats {
    pub fn new() -> Self {
        Self::default()
    }

    /// A `format` event. Fails once [`MAX_V3_PAIRS`] formats and pairs are known.
    pub fn format(&mut self, format: u32) -> Result<(), WaylandError> {
        self.entry(Fourcc::from_code(format)).map(|_| ())
    }

    /// A `modifier` event. Fails once [`MAX_V3_PAIRS`] formats and pairs are known.
    pub fn modifier(&mut self, format: u32, hi: u32, lo: u32) -> Result<(), WaylandError> {
        let fourcc = Fourcc::from_code(format);
        let pair = Format::new(fourcc, modifier_from_hi_lo(hi, lo));
        let known = self.layouts.get(&fourcc).is_some_and(|s| s.contains(&pair));
        if !known && self.pairs >= MAX_V3_PAIRS {
            return Err(WaylandError::TooManyV3Pairs { max: MAX_V3_PAIRS });
        }
        if self.entry(fourcc)?.insert(pair) {
            self.pairs += 1;
        }
        Ok(())
    }

    fn entry(&mut self, fourcc: Fourcc) -> Result<&mut FormatSet, WaylandError> {
        if !self.layouts.contains_key(&fourcc) {
            if self.pairs >= MAX_V3_PAIRS {
                return Err(WaylandError::TooManyV3Pairs { max: MAX_V3_PAIRS });
            }
            self.pairs += 1;
            self.order.push(fourcc);
        }
        Ok(self.layouts.entry(fourcc).or_default())
    }

    /// Formats in order of first announcement.
    pub fn formats(&self) -> FormatSet {
        let mut out = FormatSet::new();
        for fourcc in &self.order {
            match self.layouts.get(fourcc) {
                Some(set) if !set.is_empty() => out.extend(set.iter().copied()),
                _ => {
                    out.insert(Format { fourcc: *fourcc, layout: Layout::Implicit });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Y: Modifier = Modifier::from_raw(0x0100_0000_0000_0002);

    fn table() -> Vec<Format> {
        vec![
            Format::new(Fourcc::ARGB8888, Y),
            Format::linear(Fourcc::ARGB8888),
            Format::implicit(Fourcc::NV12),
            Format::linear(Fourcc::ARGB8888), // repeats are allowed
        ]
    }

    fn indices(i: &[u16]) -> Vec<u8> {
        i.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    #[test]
    fn table_round_trips_and_keeps_invalid_as_implicit() {
        let bytes = write_format_table(&table());
        assert_eq!(bytes.len(), 64);
        assert_eq!(&bytes[32 + 8..48], &Modifier::INVALID.raw().to_ne_bytes());
        assert_eq!(parse_format_table(&bytes).unwrap(), table());
    }

    #[test]
    fn table_length_must_be_a_multiple_of_16() {
        let bytes = write_format_table(&table());
        for len in [1, 15, 17, 63] {
            assert_eq!(parse_format_table(&bytes[..len]), Err(WaylandError::TableLength { len }));
        }
        assert_eq!(parse_format_table(&[]), Ok(vec![]));
    }

    #[test]
    fn tranche_indices_select_in_order() {
        let set = tranche_formats(&table(), &indices(&[2, 1, 3])).unwrap();
        assert_eq!(
            set.iter().copied().collect::<Vec<_>>(),
            vec![Format::implicit(Fourcc::NV12), Format::linear(Fourcc::ARGB8888)]
        );
    }

    #[test]
    fn bad_tranche_arrays() {
        assert_eq!(tranche_formats(&table(), &[0, 0, 1]), Err(WaylandError::OddIndexArray { len: 3 }));
        assert_eq!(
            tranche_formats(&table(), &indices(&[0, 4])),
            Err(WaylandError::IndexOutOfRange { index: 4, table_len: 4 })
        );
    }

    #[test]
    fn feedback_events() {
        let mut b = FeedbackBuilder::new();
        b.format_table(&write_format_table(&table())).unwrap();
        b.main_device(&0xe200u64.to_ne_bytes()).unwrap();
        b.tranche_target_device(&0xe280u64.to_ne_bytes()).unwrap();
        b.tranche_flags(TrancheFlags::SCANOUT);
        b.tranche_formats(&indices(&[0])).unwrap();
        b.tranche_formats(&indices(&[1])).unwrap();
        b.tranche_done().unwrap();
        b.tranche_target_device(&0xe200u64.to_ne_bytes()).unwrap();
        b.tranche_formats(&indices(&[2, 0])).unwrap();
        b.tranche_done().unwrap();
        let fb = b.done().unwrap();
        assert_eq!(fb.main_device, 0xe200);
        assert_eq!(fb.tranches[0].target_device, 0xe280);
        assert!(fb.tranches[0].flags.scanout() && !fb.tranches[1].flags.scanout());
        assert_eq!(fb.scanout_formats().len(), 2);
        assert_eq!(
            fb.formats().iter().copied().collect::<Vec<_>>(),
            vec![Format::new(Fourcc::ARGB8888, Y), Format::linear(Fourcc::ARGB8888), Format::implicit(Fourcc::NV12),]
        );
        assert_eq!(b.done(), Err(WaylandError::MissingFormatTable), "done starts over");
    }

    #[test]
    fn feedback_errors() {
        let mut b = FeedbackBuilder::new();
        assert_eq!(b.main_device(&[0; 4]), Err(WaylandError::DevTLength { len: 4 }));
        assert_eq!(b.tranche_done(), Err(WaylandError::MissingTargetDevice { tranche: 0 }));
        b.format_table(&write_format_table(&table())).unwrap();
        assert_eq!(b.clone_done(), Err(WaylandError::MissingMainDevice));
        b.main_device(&1u64.to_ne_bytes()).unwrap();
        b.tranche_target_device(&1u64.to_ne_bytes()).unwrap();
        b.tranche_formats(&indices(&[9])).unwrap();
        b.tranche_done().unwrap();
        assert_eq!(b.done(), Err(WaylandError::IndexOutOfRange { index: 9, table_len: 4 }));
    }

    impl FeedbackBuilder {
        fn clone_done(&self) -> Result<Feedback, WaylandError> {
            let mut copy = FeedbackBuilder {
                table: self.table.clone(),
                main_device: self.main_device,
                tranches: self.tranches.clone(),
                target: self.target,
                flags: self.flags,
                indices: self.indices.clone(),
            };
            copy.done()
        }
    }

    #[test]
    fn bounds() {
        let big = vec![0u8; (MAX_FORMAT_TABLE_ENTRIES + 1) * TABLE_ENTRY_LEN];
        assert_eq!(
            parse_format_table(&big),
            Err(WaylandError::TableTooLarge { entries: MAX_FORMAT_TABLE_ENTRIES + 1, max: MAX_FORMAT_TABLE_ENTRIES })
        );
        assert_eq!(parse_format_table(&big[TABLE_ENTRY_LEN..]).map(|t| t.len()), Ok(MAX_FORMAT_TABLE_ENTRIES));

        let mut b = FeedbackBuilder::new();
        let half = indices(&vec![0u16; MAX_TRANCHE_INDICES / 2]);
        b.tranche_formats(&half).unwrap();
        b.tranche_formats(&half).unwrap();
        assert_eq!(b.tranche_formats(&indices(&[0])), Err(WaylandError::TooManyIndices { tranche: 0, max: MAX_TRANCHE_INDICES }));
        for _ in 0..MAX_TRANCHES {
            b.tranche_target_device(&1u64.to_ne_bytes()).unwrap();
            b.tranche_done().unwrap();
        }
        b.tranche_target_device(&1u64.to_ne_bytes()).unwrap();
        assert_eq!(b.tranche_done(), Err(WaylandError::TooManyTranches { max: MAX_TRANCHES }));

        let mut v3 = V3Formats::new();
        for i in 0..MAX_V3_PAIRS as u32 - 1 {
            v3.modifier(1, 0, i).unwrap();
        }
        // A repeat is not a new pair; the one that would be is refused.
        v3.modifier(1, 0, 0).unwrap();
        assert_eq!(v3.modifier(1, 0, u32::MAX), Err(WaylandError::TooManyV3Pairs { max: MAX_V3_PAIRS }));
        assert_eq!(v3.format(2), Err(WaylandError::TooManyV3Pairs { max: MAX_V3_PAIRS }));
        v3.format(1).unwrap();
        assert_eq!(v3.formats().len(), MAX_V3_PAIRS - 1);
    }

    #[test]
    fn v3_events() {
        assert_eq!(modifier_from_hi_lo(0x0100_0000, 2), Y);
        assert_eq!(modifier_to_hi_lo(Modifier::INVALID), (0x00ff_ffff, 0xffff_ffff));
        let mut v3 = V3Formats::new();
        v3.format(Fourcc::ARGB8888.code()).unwrap();
        v3.format(Fourcc::NV12.code()).unwrap();
        v3.modifier(Fourcc::ARGB8888.code(), 0x0100_0000, 2).unwrap();
        v3.modifier(Fourcc::ARGB8888.code(), 0x00ff_ffff, 0xffff_ffff).unwrap();
        v3.format(Fourcc::XRGB8888.code()).unwrap();
        assert_eq!(
            v3.formats().iter().copied().collect::<Vec<_>>(),
            vec![
                Format::new(Fourcc::ARGB8888, Y),
                Format::implicit(Fourcc::ARGB8888),
                Format::implicit(Fourcc::NV12),
                Format::implicit(Fourcc::XRGB8888),
            ]
        );
    }
}
