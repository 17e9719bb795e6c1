//! The live Vulkan device as a negotiation participant: the one place that turns what the
//! device can do into a format list. The CLI (`negotiate --vulkan`), the demo's producer and
//! consumer, and the Wayland sink all use [`Engine::participant`].
//!
//! The rule, for the usage given, is interop's [`device_formats`] (the one a saved probe
//! report of a device follows too): the explicit modifiers the driver accepts for that usage
//! and can export, import or either; without the modifier extension, LINEAR and implicit for
//! a producer and implicit alone for a consumer (buffers it receives go through the
//! buffer-copy path). Besides:
//! - A consumer that accepts copying (`copy_import`) also lists LINEAR for every format the
//!   buffer-copy import takes: a copy, not zero-copy, and said so by the import's path.
//! - With the modifier extension, the device offers a copy plan its copies
//!   ([`DeviceCopy`]: what it imports for `TRANSFER_SRC` into what it exports for
//!   `TRANSFER_DST`, asked of the driver for the same formats), so a plan can join layouts
//!   only the driver addresses. Without it, a consumer offers the copy its buffer-copy
//!   import makes ([`DeviceCopy::into_own_images`]: LINEAR into an image of its own), so a
//!   plan can feed its implicit-only list from a LINEAR buffer.
//! - An opened device ([`Engine::participant`]) also states the row pitch alignment its
//!   driver needs of a LINEAR layout it is given, as `stride_align`: measured, by asking the
//!   driver for LINEAR images of each listed format at pitches aligned to 1, 2, 4, ... 4096
//!   bytes (radv refuses any LINEAR pitch that is not a multiple of 256 bytes, so a buffer
//!   dmabridge places for it must be pitched that way). The queries alone cannot say it, so
//!   a device opened for queries only ([`Adapter::participant`]) leaves it at 1.
//!
//! The use is exact ([`ImageUse`]: usage, create flags, view formats), and the layouts it
//! yields hold for that use only. [`ParticipantRequest::export_request`] and
//! [`ParticipantRequest::import_use`] carry it on, so the image made from the
//! negotiated layout is refused, typed, if it asks for more.

pub use dmabridge_interop::negotiate::Direction;
use ash::vk;
use dmabridge_interop::negotiate::{device_formats, DeviceCopy, DeviceFormat, Participant};
use dmabridge_interop::dmabuf::{place, PlacementRequest};
use dmabridge_interop::{Format, FormatSet, Fourcc, Layout, Modifier};

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);

use crate::device::format_support::{FormatSupportError, SupportQuery};
use crate::dmabuf::export::{ExportError, ExportRequest};
use crate::device::usage::{negotiation_usage, ImageUse, WiderUse};
use crate::device::vk_format::{Mapping, VK_FORMAT_TABLE};
use crate::{Adapter, Engine};

/// What [`Engine::participant`] describes.
#[derive(Debug, Clone)]
pub struct ParticipantRequest {
    /// The participant's name in the negotiation report.
    pub name: String,
    /// Exactly how the device uses the images (usage, create flags, view formats).
    pub image_use: ImageUse,
    pub direction: Direction,
    /// The formats to consider, in order of preference; `None`: every format of the table
    /// whose memory is the fourcc's own (not a swizzled alias).
    pub fourccs: Option<Vec<Fourcc>>,
    /// A consumer that accepts the buffer-copy import also lists LINEAR.
    pub copy_import: bool,
}

impl ParticipantRequest {
    /// Every format, no copy import. `image_use`: an [`ImageUse`], or bare usage flags.
    pub fn new(name: impl Into<String>, image_use: impl Into<ImageUse>, direction: Direction) -> Self {
        ParticipantRequest { name: name.into(), image_use: image_use.into(), direction, fourccs: None, copy_import: false }
    }

    /// Only `fourccs`, in this order of preference.
    pub fn with_fourccs(mut self, fourccs: &[Fourcc]) -> Self {
        self.fourccs = Some(fourccs.to_vec());
        self
    }

    /// The export of a `width` x `height` `fourcc` image in one of the `acceptable` layouts
    /// negotiation chose, for this participant's use and bound to it
    /// ([`ExportRequest::negotiated`]).
    pub fn export_request(&self, fourcc: Fourcc, width: u32, height: u32, acceptable: impl IntoIterator<Item = Layout>) -> ExportRequest {
        ExportRequest { negotiated: Some(self.image_use), ..ExportRequest::new(fourcc, width, height, self.image_use).with_acceptable(acceptable) }
    }

    /// `requested`, the use to import a negotiated buffer for, where it is within the use its
    /// layout was negotiated for (this participant's): an import for anything wider is
    /// refused with [`WiderUse`] before the driver sees it, since the driver never agreed to
    /// the layout for that use.
    pub fn import_use(&self, requested: impl Into<ImageUse>) -> Result<ImageUse, WiderUse> {
        let requested = requested.into();
        self.image_use.check_within(&requested)?;
        Ok(requested)
    }
}

/// The widest LINEAR pitch alignment measured (and the alignment of each plane's offset
/// while measuring).
const MAX_MEASURED_PITCH_ALIGN: u64 = 4096;

impl Engine {
    /// [`Adapter::participant`], with the LINEAR pitch alignment the driver needs as the
    /// participant's `stride_align` (see the module docs).
    pub fn participant(&self, req: &ParticipantRequest) -> Result<Participant, FormatSupportError> {
        let p = self.adapter().participant(req)?;
        let linear: Vec<Fourcc> = p.formats.as_set().map_or_else(Vec::new, |set| set.iter().filter(|f| f.layout == LINEAR).map(|f| f.fourcc).collect());
        let align = linear.iter().filter_map(|&fourcc| self.linear_pitch_align(fourcc, req.image_use)).max().unwrap_or(1);
        tracing::debug!(name = req.name.as_str(), align, "the driver's LINEAR pitch alignment");
        Ok(p.constrain(|c| c.stride_align = c.stride_align.max(align)))
    }

    /// The smallest power of two `a` for which the driver takes an explicit LINEAR layout of
    /// `fourcc` for `image_use` pitched to a multiple of `a`, every plane; `None` where it
    /// cannot be measured (LINEAR not exportable for that use, or refused at every pitch).
    /// The image is one macropixel wide, so that each alignment is a pitch of its own (at a
    /// wider row, aligning to 128 and to 256 bytes can give the same pitch).
    fn linear_pitch_align(&self, fourcc: Fourcc, image_use: ImageUse) -> Option<u64> {
        let info = dmabridge_interop::format_info(fourcc)?;
        let (width, height) = (u32::from(info.subsampling.h), 64);
        let req = ExportRequest::new(fourcc, width, height, image_use);
        let mut tried = Vec::new();
        for shift in 0..=MAX_MEASURED_PITCH_ALIGN.trailing_zeros() {
            let align = 1u64 << shift;
            // The LINEAR layout dmabridge would place for a peer asking this alignment.
            let at = PlacementRequest { fourcc, layout: LINEAR, width, height, stride_align: align, offset_align: MAX_MEASURED_PITCH_ALIGN, min_size: 0, disjoint: false };
            let planes = place(&at).ok()?.planes;
            if tried.last() == Some(&planes) {
                continue;
            }
            match self.allocate_exportable_with_layout(&req, Modifier::LINEAR, &planes) {
                Ok(_) => return Some(align),
                Err(ExportError::LayoutRefused { .. } | ExportError::LayoutNotHonoured { .. } | ExportError::LayoutRule { .. }) => tried.push(planes),
                Err(e) => {
                    tracing::debug!(%fourcc, error = %e, "LINEAR pitch alignment not measured");
                    return None;
                }
            }
        }
        // Refused at every pitch: something else in the layout is not the driver's (its
        // offsets), so the pitch rule stays unknown rather than guessed.
        tracing::debug!(%fourcc, "no LINEAR pitch up to {MAX_MEASURED_PITCH_ALIGN}-byte alignment taken");
        None
    }
}

impl Adapter {
    /// This device as a negotiation participant: see the module docs for the rule. Queries
    /// only: works on any device that answers them.
    pub fn participant(&self, req: &ParticipantRequest) -> Result<Participant, FormatSupportError> {
        let all: Vec<Fourcc>;
        let fourccs = match &req.fourccs {
            Some(f) => f.as_slice(),
            None => {
                // A peer reading the buffer must see the bytes the fourcc promises.
                all = VK_FORMAT_TABLE.iter().filter(|e| e.mapping != Mapping::ChromaSwapped).map(|e| e.fourcc).collect();
                &all
            }
        };
        let mut formats = FormatSet::new();
        let (mut transfer_src, mut transfer_dst) = (Vec::new(), Vec::new());
        let mut copied_in = Vec::new();
        for &fourcc in fourccs {
            formats.extend(device_formats(self.has_modifiers(), req.direction, self.answers(fourcc, req.image_use)?).iter().copied());
            // Asked only where its answer is used: a LINEAR entry asked for, or the copy a
            // device without modifiers offers.
            let copy_import = (req.copy_import || !self.has_modifiers()) && req.direction != Direction::Export && self.copy_import_possible(fourcc, &req.image_use);
            if req.copy_import && copy_import {
                formats.insert(Format::linear(fourcc));
            }
            if copy_import && !self.has_modifiers() {
                copied_in.push(fourcc);
            }
            if self.has_modifiers() {
                transfer_src.extend(self.answers(fourcc, vk::ImageUsageFlags::TRANSFER_SRC.into())?);
                transfer_dst.extend(self.answers(fourcc, vk::ImageUsageFlags::TRANSFER_DST.into())?);
            }
        }
        tracing::debug!(name = req.name.as_str(), image_use = %req.image_use, ?formats, "the device as a participant");
        let info = self.info();
        Ok(Participant::new(req.name.as_str(), formats)
            .with_usage(negotiation_usage(req.image_use.usage))
            .with_sync(self.sync_methods())
            .with_device(format!("{} ({}, {})", info.name, info.driver_name, info.driver_info))
            .with_copy(match self.has_modifiers() {
                true => DeviceCopy::of_answers(transfer_src, transfer_dst),
                false => DeviceCopy::into_own_images(copied_in),
            }))
    }

    /// The driver's answers for `fourcc` and one use: each modifier, importable, exportable.
    fn answers(&self, fourcc: Fourcc, image_use: ImageUse) -> Result<Vec<DeviceFormat>, FormatSupportError> {
        let caps = self.format_support(&SupportQuery::new(fourcc, image_use))?;
        Ok(caps.modifiers.iter().map(|m| DeviceFormat { fourcc, modifier: m.modifier, import: m.can_import(), export: m.can_export() }).collect())
    }

    /// Whether the buffer-copy import takes `fourcc` for `usage` (an optimal image of it).
    fn copy_import_possible(&self, fourcc: Fourcc, usage: &ImageUse) -> bool {
        crate::device::vk_format::to_vk(fourcc).is_some_and(|entry| self.copy_target_properties(entry.vk_format, usage).is_some())
    }
}
