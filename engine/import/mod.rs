//! The import room: every way a caller's dma-buf comes into the device goes through here.
//!
//! # The one path
//! A described dma-buf ([`DmaBuf`]: fds, modifier, per-plane offsets and strides) goes
//! through the same steps whatever it is to become:
//!
//! 1. **checked**, under the caller's one [`ImportOptions`] (trust, zero-copy required):
//!    [`check_import_with`] gives a
//!    [`CheckedImport`], whose
//!    [`CheckedPlane`](dmabridge_interop::dmabuf::CheckedPlane)s say where each plane lies and
//!    what its [`CheckedFile`](dmabridge_interop::dmabuf::CheckedFile) is. Nothing reaches the
//!    driver before this: lavapipe mmaps the fd, so a layout that overruns the file would crash
//!    inside Mesa;
//! 2. **given to the driver or read** (the rule of `source.rs`): files that cannot shrink are
//!    imported in place, one [`ImportedBuffer`] per distinct file (planes that share a file
//!    share its buffer); a file that can shrink, or a read-only fd the driver would map
//!    writable, is never handed to Vulkan but read into dmabridge's memory on every use (the
//!    read-copy fallback), or refused where the caller requires zero-copy;
//! 3. **imported**: an [`ImportedImage`] (explicitly, zero-copy, where the device imports the
//!    format+modifier for the use; otherwise through a copy from the step-2 source into an
//!    image of its own), an [`ImportedBuffer`], or a detile's source
//!    ([`crate::Converter::detile_dmabuf_into`]).
//!
//! The caches ([`ImportCache`], [`BufferImportCache`]) key on file identity, keep what they
//! imported, and recheck the files on every hit with the same check
//! ([`CheckedFile::recheck`](dmabridge_interop::dmabuf::CheckedFile::recheck)).
//!
//! # How to use
//! ```no_run
//! # use dmabridge::{Engine, ImportCache, ImportOptions, ImportPath};
//! # use dmabridge::ash::vk;
//! # use dmabridge::interop::dmabuf::DmaBuf;
//! # fn f(engine: &Engine, frame: DmaBuf, other: DmaBuf) -> Result<(), dmabridge::ImportError> {
//! // A frame a producer recycles: imported once, its files rechecked on every hit. The cache
//! // keeps the descriptor (its fds keep the files' identities valid).
//! let mut cache = ImportCache::new(engine, 4);
//! let image = cache.import(frame, vk::ImageUsageFlags::SAMPLED)?;
//! // One frame, refusing every copy: the error names what stands in the way.
//! let strict = ImportOptions { require_zero_copy: true, ..ImportOptions::default() };
//! match engine.import_dmabuf_with(&other, vk::ImageUsageFlags::SAMPLED, strict) {
//!     Ok(direct) => assert_eq!(direct.path(), ImportPath::Explicit),
//!     Err(why) => eprintln!("not zero-copy: {why}"),
//! }
//! # let _ = image; Ok(()) }
//! ```
//!
//! # Handing frames over
//! A dma-buf's memory belongs to its producer between frames. Before each use the consumer
//! *acquires* it ([`ImportedImage::record_acquire`]: a queue family ownership transfer from
//! `VK_QUEUE_FAMILY_FOREIGN_EXT`, from the `GENERAL` layout the producer released it in; on
//! the copy paths, the copy itself), and after its last use *releases* it
//! ([`ImportedImage::record_release`]) so that the producer may write the next frame.
//!
//! # fd ownership
//! Every entry point borrows the caller's fds. Vulkan gets dups (and owns them once an
//! import succeeds); the read-copy fallback and the caches keep dups of their own.

pub mod buffer;
pub mod cache;
mod error;
mod explicit;
pub mod image;
mod opaque;
pub(crate) mod source;

pub use dmabridge_interop::dmabuf::ImportOptions;
pub use buffer::ImportedBuffer;
pub use cache::{BufferImportCache, CacheStats, ImportCache};
pub use error::ImportError;
pub use image::ImportedImage;

use ash::vk;
use dmabridge_interop::dmabuf::{check_import_with, CheckedImport, DmaBuf, ImportCheckError, ImportFacts};
use dmabridge_interop::{format_info, Format, Layout, Modifier};

use crate::device::format_support::SupportQuery;
use crate::device::requirements::Capability;
use crate::device::usage::ImageUse;
use crate::device::vk_format::{self, VkFormatEntry};
use crate::Engine;

/// What the two ways of making an image (explicit and by copy) are given: the checked
/// buffer, its Vulkan format, the use and the caller's options.
#[derive(Clone, Copy)]
pub(crate) struct ImageImport<'a, 'b> {
    pub(crate) checked: &'a CheckedImport<'b>,
    pub(crate) entry: &'static VkFormatEntry,
    pub(crate) usage: ImageUse,
    pub(crate) options: ImportOptions,
}

/// Which way a buffer came into Vulkan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImportPath {
    /// The image aliases the dma-buf's memory: zero copies.
    Explicit,
    /// The dma-buf was imported as buffers and is copied into a device image on acquire.
    BufferCopy,
    /// The file can shrink, or its fd is read-only and the driver would map it writable,
    /// so it is read into dmabridge's memory on every acquire (`pread`; a dma-buf through a
    /// guarded read-only mapping) and copied into a device image; Vulkan never sees it.
    ReadCopy,
    /// `OPAQUE_FD` memory of another instance of the same driver: zero copies.
    OpaqueFd,
}

impl std::fmt::Display for ImportPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ImportPath::Explicit => "explicit (zero-copy)",
            ImportPath::BufferCopy => "buffer-copy (fallback)",
            ImportPath::ReadCopy => "read-copy (read into dmabridge's memory, never given to the driver: the fd can shrink, or is read-only)",
            ImportPath::OpaqueFd => "opaque-fd (zero-copy, same driver)",
        })
    }
}

impl Engine {
    /// [`Engine::import_dmabuf_with`] with the default options: nothing trusted, copy
    /// paths allowed.
    pub fn import_dmabuf(&self, buf: &DmaBuf, image_use: impl Into<ImageUse>) -> Result<ImportedImage, ImportError> {
        self.import_dmabuf_with(buf, image_use, ImportOptions::default())
    }

    /// Checks `buf`'s layout and its fds, then imports it for `image_use`: explicitly where
    /// the device can and the files may be given to the driver, else through a copy path
    /// (see the module docs). The descriptor's fds are only borrowed.
    ///
    /// The image is created for exactly `image_use` (create flags and view formats too),
    /// except `DISJOINT`, which the buffer decides: one fd per plane or not. A use bound by
    /// negotiation comes from [`crate::ParticipantRequest::import_use`], which refuses one
    /// wider than what was negotiated.
    pub fn import_dmabuf_with(
        &self,
        buf: &DmaBuf,
        image_use: impl Into<ImageUse>,
        options: ImportOptions,
    ) -> Result<ImportedImage, ImportError> {
        let mut usage = image_use.into();
        usage.create &= !vk::ImageCreateFlags::DISJOINT;
        let entry = vk_format::to_vk(buf.fourcc()).ok_or(ImportError::UnknownFourcc(buf.fourcc()))?;
        if !self.has_capability(Capability::DmaBufImport) || self.external_memory_fd().is_none() {
            return Err(ImportError::Unsupported(Capability::DmaBufImport));
        }
        let caps = self.format_support(&SupportQuery::new(buf.fourcc(), usage))?;
        let explicit_facts = |m: Modifier| -> Option<ImportFacts> {
            let c = caps.get(m).filter(|c| c.can_import() && self.has_modifiers())?;
            let limits = c.limits?;
            Some(ImportFacts {
                memory_plane_count: c.plane_count as usize,
                max_width: limits.max_extent.width,
                max_height: limits.max_extent.height,
                disjoint: c.tiling_features.contains(vk::FormatFeatureFlags2::DISJOINT),
            })
        };
        let explicit = match buf.layout() {
            Layout::Explicit(m) => explicit_facts(m).is_some(),
            Layout::Implicit => false,
        };
        if explicit {
            let checked = check_import_with(
                buf,
                &|f: Format| match f.layout {
                    Layout::Explicit(m) if f.fourcc == buf.fourcc() => explicit_facts(m),
                    _ => None,
                },
                options,
            )?;
            let import = ImageImport { checked: &checked, entry, usage, options };
            match source::not_mappable(self, &checked) {
                None => explicit::import_explicit(self, import),
                Some(why) if options.require_zero_copy => Err(ImportError::NotZeroCopy(why)),
                Some(_) if buf.layout() == Layout::Explicit(Modifier::LINEAR) => image::import_by_copy(self, import),
                // Tiled bytes read into memory are still tiled: no copy makes them an image.
                Some(why) => Err(ImportError::NotZeroCopy(why)),
            }
        } else {
            if options.require_zero_copy {
                let why = if self.has_modifiers() {
                    format!("the device does not import {} explicitly for this usage", buf.format())
                } else {
                    "the device has no VK_EXT_image_drm_format_modifier: it imports dma-bufs only by copying".to_owned()
                };
                return Err(ImportError::NotZeroCopy(why));
            }
            let copy_facts = self.copy_path_facts(buf, entry, &usage);
            let checked = check_import_with(
                buf,
                &|f: Format| {
                    if f.fourcc != buf.fourcc() {
                        return None;
                    }
                    match f.layout {
                        Layout::Explicit(Modifier::LINEAR) => copy_facts,
                        // The implicit world: a device without modifiers shares LINEAR memory.
                        Layout::Implicit if !self.has_modifiers() => copy_facts,
                        _ => None,
                    }
                },
                options,
            );
            match checked {
                Err(ImportCheckError::LayoutNotAllowed { .. }) if copy_facts.is_some() => Err(ImportError::NeedsConversion(buf.layout())),
                Err(e) => Err(e.into()),
                Ok(checked) => image::import_by_copy(self, ImageImport { checked: &checked, entry, usage, options }),
            }
        }
    }

    /// Imports another engine's `OPAQUE_FD` export. The UUIDs are checked first: opaque
    /// memory means nothing to a different device or driver build
    /// (VUID-VkImportMemoryFdInfoKHR-fd-00668), so it is refused before Vulkan sees it.
    /// Takes ownership of a dup of `share.fd`; the share keeps its own fd.
    pub fn import_opaque(&self, share: &crate::dmabuf::export::OpaqueFd) -> Result<ImportedImage, ImportError> {
        opaque::import_opaque(self, share)
    }

    /// Limits of the copy path: a device-local optimal image of the format with `usage`
    /// plus TRANSFER_DST; planes may live in any files.
    fn copy_path_facts(&self, buf: &DmaBuf, entry: &VkFormatEntry, usage: &ImageUse) -> Option<ImportFacts> {
        let planes = format_info(buf.fourcc())?.plane_count();
        let props = self.adapter().copy_target_properties(entry.vk_format, usage)?;
        Some(ImportFacts { memory_plane_count: planes, max_width: props.max_extent.width, max_height: props.max_extent.height, disjoint: true })
    }
}
