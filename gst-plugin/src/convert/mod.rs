//! `dmabridgeconvert`, laid out as GStreamer's Rust plugins lay out an element: this module
//! holds the public type and its registration, [`imp`] the `ObjectSubclass` behind it. The
//! helpers the implementation uses are modules of their own ([`formats`], [`dma_drm`],
//! [`planes`]) and never reach into [`imp`], so each can be read and unit-tested without the
//! element's state.

use gst::glib;
use gst::prelude::*;

pub mod dma_drm;
mod formats;
mod imp;
mod planes;

glib::wrapper! {
    /// The `dmabridgeconvert` element.
    pub struct DmabridgeConvert(ObjectSubclass<imp::DmabridgeConvert>) @extends gst_base::BaseTransform, gst::Element, gst::Object;
}

/// Registers `dmabridgeconvert` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(Some(plugin), "dmabridgeconvert", gst::Rank::NONE, DmabridgeConvert::static_type())
}
