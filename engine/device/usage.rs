//! The one usage vocabulary on the Vulkan side: [`ImageUse`] (usage flags, create flags and
//! view formats, the exact use an image is made for), the names `probe`, `negotiate
//! --vulkan` and `import` spell them with, and what a use means to negotiation
//! ([`dmabridge_interop::negotiate::Usage`]).
//!
//! Drivers drop modifiers as a use asks for more (seed 001: query "with the usage and
//! create flags corresponding to the intended rendering use"), so one `ImageUse` is what a
//! participant states, what the capability query is keyed by, and what export and import
//! create the image with. An image is never created for a use wider than the one its
//! layout was negotiated for ([`ImageUse::check_within`]).

use std::fmt;

use ash::vk;
use dmabridge_interop::negotiate::Usage;

use crate::device::vk_format::{plane_view_formats, srgb_twin};

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

/// The create flags a use may state, with their names.
pub const CREATE_FLAGS: [(&str, vk::ImageCreateFlags); 4] = [
    ("mutable-format", vk::ImageCreateFlags::MUTABLE_FORMAT),
    ("extended-usage", vk::ImageCreateFlags::EXTENDED_USAGE),
    ("alias", vk::ImageCreateFlags::ALIAS),
    ("disjoint", vk::ImageCreateFlags::DISJOINT),
];

/// Why a usage text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// A word that names no usage.
    #[error("unknown usage {0:?}: expected sampled, storage, color-attachment, transfer-src, transfer-dst (or sample, render), joined with '+'")]
    Unknown(String),
    /// Nothing at all.
    #[error("no usage given")]
    Empty,
    /// A word that names no create flag.
    #[error("unknown create flag {0:?}: expected mutable-format, extended-usage, alias or disjoint, joined with ','")]
    UnknownCreateFlag(String),
    /// A `:`-separated part of an [`ImageUse`] text that is neither `create=...` nor `srgb-view`.
    #[error("unknown part {0:?} of an image use: expected USAGE[+USAGE...][:create=FLAG,...][:srgb-view]")]
    UnknownPart(String),
}

/// Why an image may not be made for a use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the layout was negotiated for {negotiated}, and an image for {requested} would need {extra} too, which the driver never agreed to for it")]
pub struct WiderUse {
    /// The use the layout was negotiated for.
    pub negotiated: ImageUse,
    /// The use the image was to be created with.
    pub requested: ImageUse,
    /// What `requested` adds (its own [`ImageUse`] text).
    pub extra: String,
}

/// The exact use an image is made for: its usage flags, its create flags, and whether it is
/// also viewed in its format's sRGB twin.
///
/// `srgb_view` adds the twin (`B8G8R8A8_SRGB` for `B8G8R8A8_UNORM`, ...) to the image's
/// view-format list and, where a twin exists, implies `MUTABLE_FORMAT`: a view in another
/// format needs it. Formats without a twin (YCbCr, 10-bit, float) are unaffected. Written
/// as text: `sampled+color-attachment:create=mutable-format,extended-usage:srgb-view`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ImageUse {
    pub usage: vk::ImageUsageFlags,
    pub create: vk::ImageCreateFlags,
    pub srgb_view: bool,
}

impl From<vk::ImageUsageFlags> for ImageUse {
    fn from(usage: vk::ImageUsageFlags) -> Self {
        ImageUse::new(usage)
    }
}

impl ImageUse {
    /// `usage`, no create flags, no sRGB view.
    pub const fn new(usage: vk::ImageUsageFlags) -> Self {
        ImageUse { usage, create: vk::ImageCreateFlags::empty(), srgb_view: false }
    }

    /// These create flags as well.
    pub fn with_create(mut self, create: vk::ImageCreateFlags) -> Self {
        self.create |= create;
        self
    }

    /// Also viewed in the format's sRGB twin.
    pub fn with_srgb_view(mut self) -> Self {
        self.srgb_view = true;
        self
    }

    /// The create flags an image of `format` is made with for this use: the stated ones,
    /// plus `MUTABLE_FORMAT` when an sRGB view of a format with a twin is asked for.
    pub fn create_flags(&self, format: vk::Format) -> vk::ImageCreateFlags {
        if self.srgb_view && srgb_twin(format).is_some() {
            self.create | vk::ImageCreateFlags::MUTABLE_FORMAT
        } else {
            self.create
        }
    }

    /// The formats views of an image of `format` may have (`VkImageFormatListCreateInfo`):
    /// the format itself; with `srgb_view`, its twin; for a multi-planar format, each
    /// plane's formats ([`plane_view_formats`]: a multi-planar image is `MUTABLE_FORMAT`
    /// to be viewed plane by plane). Empty for an image that is not `MUTABLE_FORMAT` (its
    /// views have its own format only, and no list is sent).
    pub fn view_formats(&self, format: vk::Format) -> Vec<vk::Format> {
        if !self.create_flags(format).contains(vk::ImageCreateFlags::MUTABLE_FORMAT) {
            return Vec::new();
        }
        let mut v = vec![format];
        if self.srgb_view {
            v.extend(srgb_twin(format));
        }
        v.extend_from_slice(plane_view_formats(format));
        v
    }

    /// Whether an image made for `self` may be created for `other` instead: `other` asks
    /// for nothing `self` lacks.
    pub fn covers(&self, other: &ImageUse) -> bool {
        self.usage.contains(other.usage) && self.create.contains(other.create) && (self.srgb_view || !other.srgb_view)
    }

    /// `Ok` when `requested` stays within `self` (the negotiated use), else what it adds.
    pub fn check_within(&self, requested: &ImageUse) -> Result<(), WiderUse> {
        if self.covers(requested) {
            return Ok(());
        }
        let extra = ImageUse {
            usage: requested.usage & !self.usage,
            create: requested.create & !self.create,
            srgb_view: requested.srgb_view && !self.srgb_view,
        };
        Err(WiderUse { negotiated: *self, requested: *requested, extra: extra.to_string() })
    }

    /// Parses `USAGE[+USAGE...][:create=FLAG,...][:srgb-view]`.
    pub fn parse(text: &str) -> Result<ImageUse, UsageError> {
        let mut parts = text.split(':');
        let usage = parse_image_usage(parts.next().unwrap_or(""))?;
        let mut out = ImageUse::new(usage);
        for part in parts {
            if let Some(flags) = part.strip_prefix("create=") {
                out.create |= parse_create_flags(flags.split(','))?;
            } else if part == "srgb-view" {
                out.srgb_view = true;
            } else {
                return Err(UsageError::UnknownPart(part.chars().take(40).collect()));
            }
        }
        Ok(out)
    }
}

impl fmt::Display for ImageUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let usage = image_usage_name(self.usage);
        f.write_str(if usage.is_empty() { "no usage" } else { &usage })?;
        if !self.create.is_empty() {
            write!(f, ":create={}", create_flags_name(self.create))?;
        }
        if self.srgb_view {
            f.write_str(":srgb-view")?;
        }
        Ok(())
    }
}

/// `mutable-format`, `alias`, ... -> the flags (empty words are skipped).
pub fn parse_create_flags<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<vk::ImageCreateFlags, UsageError> {
    let mut flags = vk::ImageCreateFlags::empty();
    for word in words.into_iter().filter(|w| !w.is_empty()) {
        let (_, f) = CREATE_FLAGS
            .iter()
            .find(|(n, _)| *n == word)
            .ok_or_else(|| UsageError::UnknownCreateFlag(word.chars().take(40).collect()))?;
        flags |= *f;
    }
    Ok(flags)
}

/// The create flags as `,`-joined names (flags without a name as hex).
pub fn create_flags_name(flags: vk::ImageCreateFlags) -> String {
    let mut words: Vec<String> = CREATE_FLAGS.iter().filter(|(_, f)| flags.contains(*f)).map(|(n, _)| (*n).to_owned()).collect();
    let named = CREATE_FLAGS.iter().fold(vk::ImageCreateFlags::empty(), |acc, (_, f)| acc | *f);
    let rest = flags & !named;
    if !rest.is_empty() {
        words.push(format!("{:#x}", rest.as_raw()));
    }
    words.join(",")
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

    #[test]
    fn image_use_text_round_trips() {
        let u = ImageUse::parse("sampled+color-attachment:create=mutable-format,extended-usage:srgb-view").unwrap();
        assert_eq!(u.usage, vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::COLOR_ATTACHMENT);
        assert_eq!(u.create, vk::ImageCreateFlags::MUTABLE_FORMAT | vk::ImageCreateFlags::EXTENDED_USAGE);
        assert!(u.srgb_view);
        assert_eq!(u.to_string(), "sampled+color-attachment:create=mutable-format,extended-usage:srgb-view");
        assert_eq!(ImageUse::parse(&u.to_string()), Ok(u));
        assert_eq!(ImageUse::parse("storage"), Ok(ImageUse::new(vk::ImageUsageFlags::STORAGE)));
        assert_eq!(ImageUse::parse("sampled:create=bogus"), Err(UsageError::UnknownCreateFlag("bogus".into())));
        assert_eq!(ImageUse::parse("sampled:linear"), Err(UsageError::UnknownPart("linear".into())));
        assert_eq!(ImageUse::parse(":srgb-view"), Err(UsageError::Empty));
    }

    #[test]
    fn srgb_view_implies_mutable_format_only_where_a_twin_exists() {
        let u = ImageUse::new(vk::ImageUsageFlags::SAMPLED).with_srgb_view();
        assert_eq!(u.create_flags(vk::Format::B8G8R8A8_UNORM), vk::ImageCreateFlags::MUTABLE_FORMAT);
        assert_eq!(u.view_formats(vk::Format::B8G8R8A8_UNORM), vec![vk::Format::B8G8R8A8_UNORM, vk::Format::B8G8R8A8_SRGB]);
        assert_eq!(u.create_flags(vk::Format::G8_B8R8_2PLANE_420_UNORM), vk::ImageCreateFlags::empty());
        assert!(u.view_formats(vk::Format::G8_B8R8_2PLANE_420_UNORM).is_empty());
        let mutable = ImageUse::new(vk::ImageUsageFlags::SAMPLED).with_create(vk::ImageCreateFlags::MUTABLE_FORMAT);
        assert_eq!(mutable.view_formats(vk::Format::R8G8B8A8_UNORM), vec![vk::Format::R8G8B8A8_UNORM]);
    }

    #[test]
    fn a_wider_use_is_refused_with_what_it_adds() {
        let sampled = ImageUse::new(vk::ImageUsageFlags::SAMPLED);
        let wider = ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::STORAGE).with_srgb_view();
        assert!(wider.covers(&sampled));
        assert_eq!(sampled.check_within(&sampled), Ok(()));
        let err = sampled.check_within(&wider).unwrap_err();
        assert_eq!(err.extra, "storage:srgb-view");
        let mutable = sampled.with_create(vk::ImageCreateFlags::MUTABLE_FORMAT);
        assert_eq!(sampled.check_within(&mutable).unwrap_err().extra, "no usage:create=mutable-format");
    }
}
