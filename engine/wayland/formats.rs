//! What the compositor can import, as an interop participant.

use dmabridge_interop::negotiate::{Participant, Usage};
use dmabridge_interop::peers::wayland::Feedback;
use dmabridge_interop::{FormatSet, Fourcc, Layout};

use super::client::Client;
use super::{Display, WaylandError};

/// Where the formats came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatSource {
    /// linux-dmabuf v3 (or older): `format` and `modifier` events.
    Events { version: u32, events: usize },
    /// linux-dmabuf v4 default feedback: table, main device, tranches.
    Feedback(Feedback),
}

/// The compositor's linux-dmabuf formats, most preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompositorFormats {
    /// The bound version (`min(advertised, 4)`).
    pub version: u32,
    pub source: FormatSource,
    pub formats: FormatSet,
}

impl CompositorFormats {
    pub(crate) fn from_client(client: &Client) -> Result<CompositorFormats, WaylandError> {
        let version = client.state.dmabuf_version;
        let (source, formats) = match &client.state.feedback {
            Some(fb) => (FormatSource::Feedback(fb.clone()), fb.formats()),
            None => (FormatSource::Events { version, events: client.state.v3_events }, client.state.v3.formats()),
        };
        if formats.is_empty() {
            return Err(WaylandError::NoFormats);
        }
        Ok(CompositorFormats { version, source, formats })
    }

    /// The layouts offered for `fourcc` (`Layout::Implicit` for INVALID).
    pub fn layouts(&self, fourcc: Fourcc) -> Vec<Layout> {
        self.formats.layouts(fourcc).collect()
    }

    /// The compositor as a negotiation participant: it samples the buffer (GL texturing or
    /// scan-out) and never writes it.
    pub fn participant(&self) -> Participant {
        compositor_participant(self.formats.clone())
    }
}

/// A compositor participant offering `formats` (also used to model other compositors' lists).
pub fn compositor_participant(formats: FormatSet) -> Participant {
    Participant::new("compositor", formats).with_usage(Usage::SAMPLE).constrain(|c| {
        c.read_only = true;
        // It holds the buffer on screen until it releases it.
        c.min_buffers = 1;
    })
}

/// Connects to `display`, reads its linux-dmabuf formats and disconnects.
pub fn query_formats(display: &Display) -> Result<CompositorFormats, WaylandError> {
    let client = Client::connect(display)?;
    CompositorFormats::from_client(&client)
}
