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
//!
//! The use is exact ([`ImageUse`]: usage, create flags, view formats), and the layouts it
//! yields hold for that use only. [`ParticipantRequest::export_request`] and
//! [`ParticipantRequest::import_options`] carry it on, so the image made from the
//! negotiated layout is refused, typed, if it asks for more.

pub use dmabridge_interop::negotiate::Direction;
use dmabridge_interop::negotiate::{device_formats, DeviceFormat, Participant};
use dmabridge_interop::{Format, FormatSet, Fourcc, Layout};

use crate::device::format_support::{FormatSupportError, SupportQuery};
use crate::dmabuf::export::ExportRequest;
use crate::dmabuf::import::ImportOptions;
use crate::device::usage::{negotiation_usage, ImageUse};
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

    /// Import options bound to this participant's use ([`ImportOptions::negotiated`]).
    pub fn import_options(&self) -> ImportOptions {
        ImportOptions { negotiated: Some(self.image_use), ..ImportOptions::default() }
    }
}

impl Engine {
    /// [`Adapter::participant`].
    pub fn participant(&self, req: &ParticipantRequest) -> Result<Participant, FormatSupportError> {
        self.adapter().participant(req)
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
        for &fourcc in fourccs {
            let caps = self.format_support(&SupportQuery::new(fourcc, req.image_use))?;
            let answers = caps.modifiers.iter().map(|m| DeviceFormat { fourcc, modifier: m.modifier, import: m.can_import(), export: m.can_export() });
            formats.extend(device_formats(self.has_modifiers(), req.direction, answers).iter().copied());
            if req.copy_import && self.copy_import_possible(fourcc, &req.image_use) {
                formats.insert(Format::linear(fourcc));
            }
        }
        tracing::debug!(name = req.name.as_str(), image_use = %req.image_use, ?formats, "the device as a participant");
        let info = self.info();
        Ok(Participant::new(req.name.as_str(), formats)
            .with_usage(negotiation_usage(req.image_use.usage))
            .with_sync(self.sync_methods())
            .with_device(format!("{} ({}, {})", info.name, info.driver_name, info.driver_info)))
    }

    /// Whether the buffer-copy import takes `fourcc` for `usage` (an optimal image of it).
    fn copy_import_possible(&self, fourcc: Fourcc, usage: &ImageUse) -> bool {
        crate::device::vk_format::to_vk(fourcc).is_some_and(|entry| self.copy_target_properties(entry.vk_format, usage).is_some())
    }
}
