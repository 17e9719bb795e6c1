//! What an EGL display imports, from the answers of `eglQueryDmaBufFormatsEXT` and, per
//! format, `eglQueryDmaBufModifiersEXT` (`EGL_EXT_image_dma_buf_import_modifiers`). The live
//! queries belong to the engine; this module only holds the answers.
//!
//! How the answers read:
//! - Each modifier comes with `external_only`: that format+modifier can only be sampled
//!   through `GL_TEXTURE_EXTERNAL_OES` (a `samplerExternalOES`); it cannot be bound as a
//!   normal texture or rendered to.
//! - Any listed format can be imported without modifier attributes, and then the driver
//!   picks the layout (revision 5 of the extension: with no modifier given, the
//!   implementation determines the layout), which is [`Layout::Implicit`]. So every format
//!   gets an implicit entry, at the lowest preference.
//! - The spec does not say what an answer with **zero** modifiers means; by the point above
//!   such a format can only be imported without a modifier, so it is implicit-only.
//!   (wlroots also assumes LINEAR then; dmabridge does not guess a layout the driver did not
//!   list.)
//! - The implicit entry is external-only exactly when every explicit modifier of the format
//!   is (wlroots assumes the same); with no explicit modifiers there is nothing to go on and
//!   it is taken as not external-only.
//! - A driver listing `DRM_FORMAT_MOD_INVALID` itself gets the same implicit entry.
//!
//! Bounds: at most [`MAX_EGL_MODIFIERS`] modifiers per format and [`MAX_EGL_ENTRIES`]
//! entries in all; Mesa's drivers answer with tens of formats and modifiers.

use std::collections::HashMap;

use crate::sync::{SyncMethod, SyncMethods};
use crate::{Format, FormatSet, Fourcc, Layout, Modifier};

/// Most modifiers one `eglQueryDmaBufModifiersEXT` answer may hold.
pub const MAX_EGL_MODIFIERS: usize = 4096;
/// Most format+layout entries an [`EglFormats`] holds.
pub const MAX_EGL_ENTRIES: usize = 1 << 16;

/// How an EGL display synchronises: `EGL_ANDROID_native_fence_sync` turns its work into a
/// sync_file and waits for one, and its drivers honour a dma-buf's implicit fences.
pub const SYNC_METHODS: SyncMethods =
    SyncMethods::CPU_WAIT.with(SyncMethod::SyncFile).with(SyncMethod::ImplicitBridge);

/// Why an answer was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EglError {
    #[error("EGL format {format}: {modifiers} modifiers but {external_only} external_only flags")]
    ExternalOnlyLength { format: Fourcc, modifiers: usize, external_only: usize },
    #[error("EGL listed format 0 (DRM_FORMAT_INVALID)")]
    ZeroFormat,
    #[error("EGL format {format}: {count} modifiers, more than the {max} dmabridge reads")]
    TooManyModifiers { format: Fourcc, count: usize, max: usize },
    #[error("EGL answers add up to more than {max} format+modifier entries")]
    TooManyEntries { max: usize },
}

/// One modifier of an `eglQueryDmaBufModifiersEXT` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EglModifier {
    pub modifier: Modifier,
    pub external_only: bool,
}

/// One importable format+layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EglEntry {
    pub format: Format,
    /// Sampling only through `GL_TEXTURE_EXTERNAL_OES`; no `GL_TEXTURE_2D`, no rendering.
    pub external_only: bool,
}

/// What a consumer wants to do with an imported image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EglUsage {
    /// Sample through `samplerExternalOES`: every entry qualifies.
    SampleExternal,
    /// Sample as a `GL_TEXTURE_2D`.
    Sample,
    /// Render to it (as a framebuffer attachment).
    Render,
}

/// The display's dma-buf import capabilities, in query order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EglFormats {
    entries: Vec<EglEntry>,
    index: HashMap<Format, usize>,
}

impl EglFormats {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes every answer at once: `(format, modifiers, external_only)` per format, as the
    /// two queries return them.
    pub fn from_answers<'a>(answers: impl IntoIterator<Item = (i32, &'a [u64], &'a [u32])>) -> Result<Self, EglError> {
        let mut formats = EglFormats::new();
        for (format, modifiers, external_only) in answers {
            formats.add_query_answer(format, modifiers, external_only)?;
        }
        Ok(formats)
    }

    /// One format's raw answer: the `EGLint` format, the `EGLuint64KHR` modifiers and the
    /// `EGLBoolean` external-only flags (any non-zero value is true).
    pub fn add_query_answer(&mut self, format: i32, modifiers: &[u64], external_only: &[u32]) -> Result<(), EglError> {
        // EGL passes fourccs as EGLint; the bits are the fourcc's.
        let fourcc = Fourcc::from_code(format as u32);
        if fourcc.code() == 0 {
            return Err(EglError::ZeroFormat);
        }
        if modifiers.len() > MAX_EGL_MODIFIERS {
            return Err(EglError::TooManyModifiers { format: fourcc, count: modifiers.len(), max: MAX_EGL_MODIFIERS });
        }
        if modifiers.len() != external_only.len() {
            return Err(EglError::ExternalOnlyLength {
                format: fourcc,
                modifiers: modifiers.len(),
                external_only: external_only.len(),
            });
        }
        let mods: Vec<EglModifier> = modifiers
            .iter()
            .zip(external_only)
            .map(|(&m, &e)| EglModifier { modifier: Modifier::from_raw(m), external_only: e != 0 })
            .collect();
        self.add_format(fourcc, &mods)
    }

    /// One format with its modifiers (see the module docs for the implicit entry). Nothing is
    /// added when the bounds would be passed.
    pub fn add_format(&mut self, fourcc: Fourcc, modifiers: &[EglModifier]) -> Result<(), EglError> {
        if modifiers.len() > MAX_EGL_MODIFIERS {
            return Err(EglError::TooManyModifiers { format: fourcc, count: modifiers.len(), max: MAX_EGL_MODIFIERS });
        }
        // The format's entries plus its implicit one, if all are new.
        if self.entries.len() + modifiers.len() + 1 > MAX_EGL_ENTRIES {
            return Err(EglError::TooManyEntries { max: MAX_EGL_ENTRIES });
        }
        let explicit: Vec<&EglModifier> = modifiers.iter().filter(|m| !m.modifier.is_invalid()).collect();
        for m in &explicit {
            self.add(Format::new(fourcc, m.modifier), m.external_only);
        }
        let implicit_external = !explicit.is_empty() && explicit.iter().all(|m| m.external_only);
        self.add(Format { fourcc, layout: Layout::Implicit }, implicit_external);
        Ok(())
    }

    /// Repeated pairs keep their first place; external-only wins if any answer said so.
    fn add(&mut self, format: Format, external_only: bool) {
        match self.index.get(&format).and_then(|&i| self.entries.get_mut(i)) {
            Some(e) => e.external_only |= external_only,
            None => {
                self.index.insert(format, self.entries.len());
                self.entries.push(EglEntry { format, external_only });
            }
        }
    }

    pub fn entries(&self) -> &[EglEntry] {
        &self.entries
    }

    pub fn external_only(&self, f: &Format) -> Option<bool> {
        self.index.get(f).and_then(|&i| self.entries.get(i)).map(|e| e.external_only)
    }

    /// The formats usable for `usage`. EGL's answer does not tell sampling and rendering
    /// apart beyond `external_only`, so [`EglUsage::Sample`] and [`EglUsage::Render`] get
    /// the same set.
    pub fn formats_for(&self, usage: EglUsage) -> FormatSet {
        self.entries
            .iter()
            .filter(|e| usage == EglUsage::SampleExternal || !e.external_only)
            .map(|e| e.format)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Y: u64 = 0x0100_0000_0000_0002;
    const CCS: u64 = 0x0100_0000_0000_0004;

    fn display() -> EglFormats {
        EglFormats::from_answers([
            (Fourcc::ARGB8888.code() as i32, &[Y, 0][..], &[0, 0][..]),
            (Fourcc::NV12.code() as i32, &[Y, 0][..], &[1, 1][..]),
            (Fourcc::P010.code() as i32, &[][..], &[][..]),
            (Fourcc::XRGB8888.code() as i32, &[CCS, 0][..], &[1, 0][..]),
        ])
        .unwrap()
    }

    #[test]
    fn external_only_formats_are_sampled_externally_only() {
        let egl = display();
        let nv12_y = Format::new(Fourcc::NV12, Modifier::from_raw(Y));
        assert_eq!(egl.external_only(&nv12_y), Some(true));
        assert!(egl.formats_for(EglUsage::SampleExternal).contains(&nv12_y));
        assert!(!egl.formats_for(EglUsage::Sample).contains(&nv12_y));
        assert!(!egl.formats_for(EglUsage::Render).contains(&nv12_y));
        // Every NV12 modifier is external-only, so its implicit import is too.
        assert_eq!(egl.external_only(&Format::implicit(Fourcc::NV12)), Some(true));
        // XR24 has one renderable modifier, so its implicit import is renderable.
        assert_eq!(egl.external_only(&Format::implicit(Fourcc::XRGB8888)), Some(false));
        assert_eq!(egl.external_only(&Format::new(Fourcc::XRGB8888, Modifier::from_raw(CCS))), Some(true));
    }

    #[test]
    fn zero_modifiers_means_implicit_only() {
        let egl = display();
        let p010: Vec<Layout> = egl.formats_for(EglUsage::SampleExternal).layouts(Fourcc::P010).collect();
        assert_eq!(p010, vec![Layout::Implicit]);
        assert_eq!(egl.external_only(&Format::implicit(Fourcc::P010)), Some(false));
    }

    #[test]
    fn order_is_query_order_with_implicit_last_per_format() {
        let set = display().formats_for(EglUsage::Render);
        assert_eq!(
            set.iter().take(3).copied().collect::<Vec<_>>(),
            vec![
                Format::new(Fourcc::ARGB8888, Modifier::from_raw(Y)),
                Format::linear(Fourcc::ARGB8888),
                Format::implicit(Fourcc::ARGB8888),
            ]
        );
    }

    #[test]
    fn invalid_from_the_driver_is_the_implicit_entry() {
        let mut egl = EglFormats::new();
        egl.add_query_answer(Fourcc::NV12.code() as i32, &[Modifier::INVALID.raw()], &[0]).unwrap();
        assert_eq!(egl.entries(), &[EglEntry { format: Format::implicit(Fourcc::NV12), external_only: false }]);
    }

    #[test]
    fn bounds() {
        let mods: Vec<u64> = (1..=MAX_EGL_MODIFIERS as u64 + 1).collect();
        let ext = vec![0u32; mods.len()];
        let mut egl = EglFormats::new();
        assert!(matches!(
            egl.add_query_answer(Fourcc::NV12.code() as i32, &mods, &ext),
            Err(EglError::TooManyModifiers { count, .. }) if count == MAX_EGL_MODIFIERS + 1
        ));
        let (mods, ext) = (&mods[..MAX_EGL_MODIFIERS], &ext[..MAX_EGL_MODIFIERS]);
        let mut code = 1i32;
        while egl.entries().len() + MAX_EGL_MODIFIERS < MAX_EGL_ENTRIES {
            egl.add_query_answer(code, mods, ext).unwrap();
            code += 1;
        }
        let before = egl.entries().len();
        assert_eq!(egl.add_query_answer(code, mods, ext), Err(EglError::TooManyEntries { max: MAX_EGL_ENTRIES }));
        assert_eq!(egl.entries().len(), before, "nothing half-added");
    }

    #[test]
    fn malformed_answers() {
        let mut egl = EglFormats::new();
        assert_eq!(egl.add_query_answer(0, &[], &[]), Err(EglError::ZeroFormat));
        assert_eq!(
            egl.add_query_answer(Fourcc::NV12.code() as i32, &[Y], &[]),
            Err(EglError::ExternalOnlyLength { format: Fourcc::NV12, modifiers: 1, external_only: 0 })
        );
    }
}
