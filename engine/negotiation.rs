//! The live Vulkan device as a negotiation participant (`dmabridge negotiate --vulkan`).
//!
//! What it lists is what it can share without a copy, for the usage given:
//! - with `VK_EXT_image_drm_format_modifier`: every explicit modifier the driver accepts
//!   for that usage and can import or export as a DMA_BUF;
//! - without it: the implicit layout only. Such a device cannot describe or accept an
//!   explicit layout for an image (seed 001: a party without modifier support is
//!   implicit-only), even though its LINEAR tiling may in practice be linear; buffers it
//!   receives with an explicit layout go through the copy path instead.

use ash::vk;
use dmabridge_interop::negotiate::{Participant, Usage as NegotiationUsage};
use dmabridge_interop::{Format, FormatSet, Layout};

use crate::caps::{CapsError, CapsQuery, Usage};
use crate::vk_format::{Mapping, VK_FORMAT_TABLE};
use crate::Engine;

/// Why the device could not be described as a participant.
#[derive(Debug, thiserror::Error)]
pub enum VulkanParticipantError {
    #[error("unknown usage {0:?}: expected sampled, storage, color-attachment, transfer-src, transfer-dst (or sample, render)")]
    UnknownUsage(String),
    #[error(transparent)]
    Caps(#[from] CapsError),
}

/// Vulkan image usage and the negotiation's usage for `sampled+color-attachment`-style text.
fn parse_usage(text: &str) -> Result<(vk::ImageUsageFlags, NegotiationUsage), VulkanParticipantError> {
    let mut flags = vk::ImageUsageFlags::empty();
    let mut usage = NegotiationUsage::NONE;
    for word in text.split('+').filter(|w| !w.is_empty()) {
        let (f, u) = match word {
            "sample" | "sampled" => (Usage::Sampled.flags(), NegotiationUsage::SAMPLE),
            "render" | "color-attachment" => (Usage::ColorAttachment.flags(), NegotiationUsage::RENDER),
            "storage" => (Usage::Storage.flags(), NegotiationUsage::RENDER),
            "transfer-src" => (Usage::TransferSrc.flags(), NegotiationUsage::NONE),
            "transfer-dst" => (Usage::TransferDst.flags(), NegotiationUsage::NONE),
            other => return Err(VulkanParticipantError::UnknownUsage(other.to_owned())),
        };
        flags |= f;
        usage = usage.union(u);
    }
    if flags.is_empty() {
        return Err(VulkanParticipantError::UnknownUsage(text.to_owned()));
    }
    Ok((flags, usage))
}

impl Engine {
    /// This device as participant `name`, for the `+`-separated `usage`.
    pub fn participant(&self, name: &str, usage: &str) -> Result<Participant, VulkanParticipantError> {
        let (flags, negotiation_usage) = parse_usage(usage)?;
        let mut formats = FormatSet::new();
        // Only formats whose memory is the fourcc's own (not a swizzled alias) are offered:
        // a peer reading the buffer must see the bytes the fourcc promises.
        for entry in VK_FORMAT_TABLE.iter().filter(|e| e.mapping != Mapping::ChromaSwapped) {
            let caps = self.query_caps(&CapsQuery::new(entry.fourcc, flags))?;
            if !self.has_modifiers() {
                if caps.modifiers.iter().any(|m| m.supported() && (m.importable || m.exportable)) {
                    formats.insert(Format { fourcc: entry.fourcc, layout: Layout::Implicit });
                }
                continue;
            }
            for m in caps.modifiers.iter().filter(|m| m.can_import() || m.can_export()) {
                formats.insert(Format::explicit(entry.fourcc, m.modifier));
            }
        }
        Ok(Participant::new(name, formats).with_usage(negotiation_usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_words() {
        let (f, _) = parse_usage("sampled+color-attachment").unwrap();
        assert_eq!(f, vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::COLOR_ATTACHMENT);
        assert_eq!(parse_usage("render").unwrap().0, vk::ImageUsageFlags::COLOR_ATTACHMENT);
        assert!(parse_usage("scanout").is_err());
        assert!(parse_usage("").is_err());
    }
}
