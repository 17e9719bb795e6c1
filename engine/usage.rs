//! The one usage vocabulary on the Vulkan side: `vk::ImageUsageFlags`, their names as
//! `probe` and `negotiate --vulkan` spell them, and what each means to negotiation
//! ([`dmabridge_interop::negotiate::Usage`]).

use ash::vk;
use dmabridge_interop::negotiate::Usage;

/// The single usages `probe` reports, with their names, in column order.
pub const IMAGE_USAGES: [(&str, vk::ImageUsageFlags); 5] = [
    ("sampled", vk::ImageUsageFlags::SAMPLED),
    ("storage", vk::ImageUsageFlags::STORAGE),
    ("color-attachment", vk::ImageUsageFlags::COLOR_ATTACHMENT),
    ("transfer-src", vk::ImageUsageFlags::TRANSFER_SRC),
    ("transfer-dst", vk::ImageUsageFlags::TRANSFER_DST),
];

/// Other spellings accepted on input (the negotiation's words).
const ALIASES: [(&str, vk::ImageUsageFlags); 2] = [("sample", vk::ImageUsageFlags::SAMPLED), ("render", vk::ImageUsageFlags::COLOR_ATTACHMENT)];

/// Why a usage text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// A word that names no usage.
    #[error("unknown usage {0:?}: expected sampled, storage, color-attachment, transfer-src, transfer-dst (or sample, render), joined with '+'")]
    Unknown(String),
    /// Nothing at all.
    #[error("no usage given")]
    Empty,
}

/// `sampled+color-attachment` -> the flags.
pub fn parse_image_usage(text: &str) -> Result<vk::ImageUsageFlags, UsageError> {
    let mut flags = vk::ImageUsageFlags::empty();
    for word in text.split('+').filter(|w| !w.is_empty()) {
        let (_, f) = IMAGE_USAGES
            .iter()
            .chain(&ALIASES)
            .find(|(n, _)| *n == word)
            .ok_or_else(|| UsageError::Unknown(word.chars().take(40).collect()))?;
        flags |= *f;
    }
    if flags.is_empty() {
        return Err(UsageError::Empty);
    }
    Ok(flags)
}

/// The flags as `+`-joined names, in [`IMAGE_USAGES`] order (flags without a name are
/// written as hex).
pub fn image_usage_name(flags: vk::ImageUsageFlags) -> String {
    let mut words: Vec<String> = IMAGE_USAGES.iter().filter(|(_, f)| flags.contains(*f)).map(|(n, _)| (*n).to_owned()).collect();
    let named = IMAGE_USAGES.iter().fold(vk::ImageUsageFlags::empty(), |acc, (_, f)| acc | *f);
    let rest = flags & !named;
    if !rest.is_empty() {
        words.push(format!("{:#x}", rest.as_raw()));
    }
    words.join("+")
}

/// What a Vulkan usage means to the other parties of a negotiation: sampling reads,
/// rendering and storage write; transfers say nothing about layout.
pub fn negotiation_usage(flags: vk::ImageUsageFlags) -> Usage {
    let mut u = Usage::NONE;
    if flags.intersects(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::INPUT_ATTACHMENT) {
        u = u.union(Usage::SAMPLE);
    }
    if flags.intersects(vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::STORAGE) {
        u = u.union(Usage::RENDER);
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (name, flags) in IMAGE_USAGES {
            assert_eq!(parse_image_usage(name), Ok(flags));
            assert_eq!(image_usage_name(flags), name);
        }
        let both = parse_image_usage("sampled+color-attachment").unwrap();
        assert_eq!(both, vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::COLOR_ATTACHMENT);
        assert_eq!(image_usage_name(both), "sampled+color-attachment");
        assert_eq!(parse_image_usage("render"), Ok(vk::ImageUsageFlags::COLOR_ATTACHMENT));
        assert_eq!(parse_image_usage("scanout"), Err(UsageError::Unknown("scanout".into())));
        assert_eq!(parse_image_usage(""), Err(UsageError::Empty));
        assert_eq!(image_usage_name(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT), "sampled+0x20");
    }

    #[test]
    fn negotiation_meaning() {
        assert_eq!(negotiation_usage(vk::ImageUsageFlags::SAMPLED), Usage::SAMPLE);
        assert_eq!(negotiation_usage(vk::ImageUsageFlags::STORAGE), Usage::RENDER);
        assert_eq!(negotiation_usage(vk::ImageUsageFlags::TRANSFER_SRC), Usage::NONE);
    }
}
