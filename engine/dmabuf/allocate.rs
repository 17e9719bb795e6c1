//! Allocation that honours a collection's merged constraints: buffer count, stride and
//! offset alignment, minimum size, memory domain, one fd per plane where the driver allows.
//!
//! Two ways to get a buffer, chosen by the domain and the layout:
//! - **Imposed** (system memory, or "any" with a layout dmabridge can compute: LINEAR and
//!   the tiled layouts of [`interop::tiling`](crate::interop::tiling)): dmabridge places the
//!   planes itself ([`place`]), allocates system memory (dma-bufs from the system dma-heap
//!   where the kernel has one, sealed memfds elsewhere: [`SystemMemory`]), and imports one buffer into the
//!   device with that explicit layout to prove the device takes it. Every constraint holds
//!   by construction. This is the way whenever the driver would not let us choose the
//!   layout: `VK_EXT_image_drm_format_modifier` lets an *importer* state offsets and
//!   pitches, but an exporter only gets to pick from a modifier list.
//! - **Driver-chosen** (device-local memory, or a vendor modifier only the driver can lay
//!   out): the device exports an image with one of the acceptable modifiers, and the layout
//!   it reports is checked against every constraint. On a miss, where an acceptable
//!   modifier is one dmabridge can lay out, the image is exported again with that layout
//!   imposed (`VkImageDrmFormatModifierExplicitCreateInfoEXT`,
//!   [`Engine::export_image_with_layout`]) and the driver's report must match it; otherwise
//!   the miss is [`AllocateError::DriverLayout`], naming the constraint.
//!
//! A multi-planar format gets one fd per plane (disjoint) when the device can import that
//! layout disjoint (`VK_FORMAT_FEATURE_2_DISJOINT_BIT` on its modifier), and one fd
//! otherwise; [`Allocated::disjoint_reason`] says which and why.

use dmabridge_interop::dmabuf::{classify, file_size, place, DmaBuf, FdTrust, PlacementError, PlacementRequest, SystemMemory, BASE_ALIGN};
use dmabridge_interop::collection::{Allocator, AllocatorError, Holders, Reconciled};
use dmabridge_interop::negotiate::{Allocation, BufferConstraints, ChainLayout, ConstraintKind, Domain};
use dmabridge_interop::{format_info, Fourcc, Layout, Modifier};

use ash::vk;

use crate::device::format_support::{FormatSupportError, SupportQuery};
use crate::dmabuf::export::{ExportError, ExportRequest, ExportedImage};
use crate::import::ImportError;
use crate::device::usage::ImageUse;
use crate::Engine;

/// The most buffers one allocation makes: a decoder's DPB plus a deep pipeline fits, and a
/// hostile constraint cannot make dmabridge open thousands of fds.
pub const MAX_BUFFERS: u32 = 64;

/// What to allocate: a negotiated format at one extent, and the merged constraints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationSpec {
    pub fourcc: Fourcc,
    /// The acceptable layouts, in preference order (a negotiated chain's modifiers, or
    /// `[Layout::Implicit]`).
    pub layouts: Vec<Layout>,
    pub width: u32,
    pub height: u32,
    /// What every buffer honours: `buffers` is how many are made; the alignments, min size
    /// and domain are imposed or checked.
    pub constraints: BufferConstraints,
    /// The use every buffer is imported or exported for.
    pub image_use: ImageUse,
    /// Some holder gets read-only fds: system memory must then be one that can be reopened
    /// read-only (memfds; a dma-heap buffer cannot).
    pub read_only_holders: bool,
}

impl AllocationSpec {
    /// The spec for a negotiated collection at `width`x`height`: its buffer count, its
    /// alignments, its domain. Fails when the extent is outside what every participant
    /// accepts, or the count is above the smallest `max-buffers` (or [`MAX_BUFFERS`]).
    pub fn from_allocation(a: &Allocation, width: u32, height: u32, image_use: impl Into<ImageUse>) -> Result<Self, AllocateError> {
        for (kind, v, r) in [(ConstraintKind::Width, width, a.width), (ConstraintKind::Height, height, a.height)] {
            if v < r.min || v > r.max {
                return Err(AllocateError::Extent { constraint: kind, value: v, min: r.min, max: r.max });
            }
        }
        let layouts = match &a.layout {
            ChainLayout::Explicit(m) => m.iter().map(|m| Layout::Explicit(*m)).collect(),
            ChainLayout::Implicit => vec![Layout::Implicit],
        };
        let spec = AllocationSpec {
            fourcc: a.fourcc,
            layouts,
            width,
            height,
            constraints: a.constraints,
            image_use: image_use.into(),
            read_only_holders: a.participants.iter().any(|p| !a.writers.contains(p)),
        };
        if let Some(max) = a.constraints.max_buffers.filter(|&m| m < a.constraints.buffers) {
            return Err(AllocateError::TooManyBuffers { count: a.constraints.buffers, max, constraint: ConstraintKind::MaxBuffers });
        }
        Ok(spec)
    }
}

impl AllocationSpec {
    /// The spec for a collection's reconciled attribute list (its one chosen layout, count,
    /// alignments, min size and domain), for `image_use`.
    pub fn from_reconciled(r: &Reconciled, image_use: impl Into<ImageUse>, holders: Holders) -> Self {
        AllocationSpec {
            fourcc: r.format.fourcc,
            layouts: vec![r.format.layout],
            width: r.width,
            height: r.height,
            constraints: r.constraints,
            image_use: image_use.into(),
            read_only_holders: holders.read_only,
        }
    }
}

/// A buffer collection's allocator on the live device ([`Engine::allocate`]): plug it into a
/// [`collection::Server`](dmabridge_interop::collection::Server) so that the reconciled
/// constraints reach the device. Device-local buffers keep their exported images alive
/// here, for as long as the allocator lives (the server's lifetime); the fds handed out keep
/// the memory itself alive after that.
pub struct DeviceAllocator {
    engine: Engine,
    image_use: ImageUse,
    exported: Vec<ExportedImage>,
}

impl DeviceAllocator {
    /// Buffers for `image_use` on `engine`'s device.
    pub fn new(engine: &Engine, image_use: impl Into<ImageUse>) -> Self {
        DeviceAllocator { engine: engine.clone(), image_use: image_use.into(), exported: Vec::new() }
    }
}

impl Allocator for DeviceAllocator {
    fn allocate(&mut self, r: &Reconciled, holders: Holders) -> Result<Vec<DmaBuf>, AllocatorError> {
        let spec = AllocationSpec::from_reconciled(r, self.image_use, holders);
        let allocated = self.engine.allocate(&spec).map_err(|e| AllocatorError::Other(e.to_string()))?;
        tracing::debug!(source = allocated.source.name(), disjoint = allocated.disjoint, reason = %allocated.disjoint_reason, "collection allocated on the device");
        let mut out = Vec::with_capacity(allocated.buffers.len());
        for b in allocated.buffers {
            out.push(b.dmabuf);
            self.exported.extend(b.exported);
        }
        Ok(out)
    }
}

/// How a buffer's layout came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutSource {
    /// dmabridge placed the planes (memfds), and the device imported that layout.
    Imposed,
    /// The driver chose the layout on export, and it was checked against the constraints.
    DriverChosen,
    /// The driver's choice missed a constraint, so the device exported an image with the
    /// layout dmabridge placed (`VkImageDrmFormatModifierExplicitCreateInfoEXT`), and
    /// reported exactly that layout back.
    ImposedOnExport,
}

impl LayoutSource {
    pub const fn name(self) -> &'static str {
        match self {
            LayoutSource::Imposed => "imposed",
            LayoutSource::DriverChosen => "driver-chosen",
            LayoutSource::ImposedOnExport => "imposed-on-export",
        }
    }
}

/// One allocated buffer. Its descriptor owns the fds; an exported one also keeps the
/// device image (and so the memory) alive for as long as it lives.
#[derive(Debug)]
pub struct AllocatedBuffer {
    pub dmabuf: DmaBuf,
    /// The device's own image of a driver-chosen buffer; `None` for an imposed one.
    pub exported: Option<ExportedImage>,
}

/// The buffers of one allocation.
#[derive(Debug)]
pub struct Allocated {
    pub buffers: Vec<AllocatedBuffer>,
    pub source: LayoutSource,
    /// One fd per plane.
    pub disjoint: bool,
    /// Why the buffers are, or are not, disjoint.
    pub disjoint_reason: String,
    /// Where the memory came from: `dma-heap:system` or `memfd` (imposed layouts, system
    /// memory), `device` (the device's exports).
    pub memory: String,
    /// Why system memory is not the dma-heap's, where there is one.
    pub memory_reason: Option<String>,
}

/// Why an allocation failed.
#[derive(Debug, thiserror::Error)]
pub enum AllocateError {
    /// The extent is outside the range every participant accepts.
    #[error("{constraint} {value} is outside the negotiated range {min}-{max}")]
    Extent { constraint: ConstraintKind, value: u32, min: u32, max: u32 },
    /// More buffers than a participant's `max-buffers`, or than dmabridge makes at once.
    #[error("{count} buffers are needed, but {constraint} allows at most {max}")]
    TooManyBuffers { count: u32, max: u32, constraint: ConstraintKind },
    /// The spec lists no layout.
    #[error("no acceptable layout was given")]
    NoLayout,
    /// A base alignment beyond the page every memfd and dma-buf starts on.
    #[error("{constraint} {align} is more than the {guaranteed} bytes a buffer's start is aligned to")]
    Align { constraint: ConstraintKind, align: u64, guaranteed: u64 },
    /// The fourcc is not in dmabridge's format table.
    #[error("{0} is not a format dmabridge knows")]
    UnknownFourcc(Fourcc),
    /// The driver's layout misses a constraint (driver-chosen buffers only).
    #[error("the driver laid out plane {plane} with {what} {value}, which breaks {constraint} {required}")]
    DriverLayout { constraint: ConstraintKind, plane: usize, what: &'static str, value: u64, required: u64 },
    /// Placing or making the memfds failed.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// The device would not import the imposed layout.
    #[error("the device refused the imposed layout: {0}")]
    Import(#[from] ImportError),
    /// The device could not export a buffer.
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error(transparent)]
    Caps(#[from] FormatSupportError),
}

impl Engine {
    /// Allocates `spec.constraints.buffers` buffers honouring `spec`'s constraints (see the module docs).
    /// The caller owns the returned descriptors' fds.
    pub fn allocate(&self, spec: &AllocationSpec) -> Result<Allocated, AllocateError> {
        if spec.constraints.buffers > MAX_BUFFERS {
            return Err(AllocateError::TooManyBuffers { count: spec.constraints.buffers, max: MAX_BUFFERS, constraint: ConstraintKind::MinBuffers });
        }
        // Every buffer starts a page, imposed or exported; more than that nobody can promise.
        if spec.constraints.align > BASE_ALIGN {
            return Err(AllocateError::Align { constraint: ConstraintKind::Align, align: spec.constraints.align, guaranteed: BASE_ALIGN });
        }
        let info = format_info(spec.fourcc).ok_or(AllocateError::UnknownFourcc(spec.fourcc))?;
        let placeable = spec.layouts.iter().copied().find(|l| match l {
            Layout::Implicit => true,
            Layout::Explicit(m) => dmabridge_interop::TileLayout::from_modifier(*m).is_some(),
        });
        match (spec.constraints.domain, placeable) {
            (Domain::System | Domain::Any, Some(layout)) => self.allocate_imposed(spec, layout, info.plane_count()),
            (Domain::System, None) => Err(PlacementError::OpaqueLayout(spec.layouts.first().copied().ok_or(AllocateError::NoLayout)?).into()),
            _ => self.allocate_exported(spec),
        }
    }

    fn disjoint_for(&self, spec: &AllocationSpec, layout: Layout, planes: usize) -> Result<(bool, String), AllocateError> {
        if planes < 2 {
            return Ok((false, "single-plane format".into()));
        }
        let m = layout.modifier().unwrap_or(Modifier::LINEAR);
        let caps = self.format_support(&SupportQuery::new(spec.fourcc, spec.image_use))?;
        Ok(match caps.get(m) {
            Some(c) if c.can_import() && self.has_modifiers() && c.tiling_features.contains(vk::FormatFeatureFlags2::DISJOINT) => {
                (true, format!("the device imports {} {m} disjoint", spec.fourcc.trimmed()))
            }
            Some(c) if c.can_import() && self.has_modifiers() => (false, format!("the device lacks DISJOINT for {} {m}", spec.fourcc.trimmed())),
            _ => (false, format!("the device has no explicit import of {} {m} (it copies), so one fd keeps the planes together", spec.fourcc.trimmed())),
        })
    }

    fn allocate_imposed(&self, spec: &AllocationSpec, layout: Layout, planes: usize) -> Result<Allocated, AllocateError> {
        let (disjoint, disjoint_reason) = self.disjoint_for(spec, layout, planes)?;
        let (memory, memory_reason) = SystemMemory::detect().for_holders(spec.read_only_holders);
        let mut min_size = spec.constraints.min_size;
        let mut placed_again = false;
        // One import proves the device takes this exact layout; the rest are identical. The
        // driver sizes the image's memory by its own rules, which may ask for more than the
        // placement's last row (lavapipe, at a pitch wider than its own): the collection is
        // then placed once more with files of the size the driver named.
        let (placement, first) = loop {
            let placement = place(&PlacementRequest {
                fourcc: spec.fourcc,
                layout,
                width: spec.width,
                height: spec.height,
                stride_align: spec.constraints.stride_align,
                offset_align: spec.constraints.offset_align,
                min_size,
                disjoint,
            })?;
            let dmabuf = placement.allocate(&memory, "dmabridge-collection", spec.fourcc, layout, spec.width, spec.height)?;
            match self.import_dmabuf(&dmabuf, spec.image_use) {
                Ok(image) => drop(image),
                // A tiled layout no driver samples is read through the detile
                // conversion, after the same layout checks: that is how the device takes it.
                Err(ImportError::NeedsConversion(_)) => {}
                // Once: a driver asking for more again would be asking for a size of its own
                // choosing, which no placement can follow.
                Err(ImportError::ImageLargerThanFd { needed, .. }) if needed > min_size && !placed_again => {
                    tracing::debug!(needed, placed = min_size, "the driver needs larger files than the placement: placing again");
                    min_size = needed;
                    placed_again = true;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            break (placement, dmabuf);
        };
        let mut buffers = Vec::with_capacity(spec.constraints.buffers as usize);
        buffers.push(AllocatedBuffer { dmabuf: first, exported: None });
        for _ in 1..spec.constraints.buffers {
            let dmabuf = placement.allocate(&memory, "dmabridge-collection", spec.fourcc, layout, spec.width, spec.height)?;
            buffers.push(AllocatedBuffer { dmabuf, exported: None });
        }
        tracing::debug!(fourcc = %spec.fourcc, %layout, count = spec.constraints.buffers, disjoint, "allocated with an imposed layout");
        tracing::debug!(memory = %memory, "system memory");
        Ok(Allocated {
            buffers,
            source: LayoutSource::Imposed,
            disjoint,
            disjoint_reason,
            memory: memory.name(),
            memory_reason: memory_reason.map(str::to_owned),
        })
    }

    fn allocate_exported(&self, spec: &AllocationSpec) -> Result<Allocated, AllocateError> {
        let req = ExportRequest::new(spec.fourcc, spec.width, spec.height, spec.image_use).with_acceptable(spec.layouts.iter().copied());
        let mut buffers = Vec::with_capacity(spec.constraints.buffers as usize);
        for _ in 0..spec.constraints.buffers {
            let exported = self.export_image(&req)?;
            let dmabuf = exported
                .dmabuf()
                .ok_or(ExportError::DmaBufExportUnsupported { fourcc: spec.fourcc })?
                .try_clone()
                .map_err(ExportError::from)?;
            if let Err(missed) = check_driver_layout(spec, &dmabuf) {
                // The driver's own choice misses a constraint: impose the layout, where the
                // driver takes an explicit one for an image it allocates.
                drop((dmabuf, exported));
                return self.allocate_exported_explicit(spec, missed);
            }
            buffers.push(AllocatedBuffer { dmabuf, exported: Some(exported) });
        }
        let disjoint = buffers.first().is_some_and(|b| b.dmabuf.disjoint());
        Ok(Allocated {
            buffers,
            source: LayoutSource::DriverChosen,
            disjoint,
            disjoint_reason: "an export is one allocation, so its planes share one fd".into(),
            memory: "device".into(),
            memory_reason: None,
        })
    }

    /// Exports every buffer with the layout [`place`] computes for the first placeable
    /// acceptable modifier. `missed` is the driver-chosen layout's miss, returned when no
    /// explicit layout can be imposed either.
    fn allocate_exported_explicit(&self, spec: &AllocationSpec, missed: AllocateError) -> Result<Allocated, AllocateError> {
        let Some(modifier) = spec.layouts.iter().filter_map(|l| l.modifier()).find(|m| dmabridge_interop::TileLayout::from_modifier(*m).is_some()) else {
            return Err(missed);
        };
        let placement = place(&PlacementRequest {
            fourcc: spec.fourcc,
            layout: Layout::Explicit(modifier),
            width: spec.width,
            height: spec.height,
            stride_align: spec.constraints.stride_align,
            offset_align: spec.constraints.offset_align,
            min_size: spec.constraints.min_size,
            disjoint: false,
        })?;
        let req = ExportRequest::new(spec.fourcc, spec.width, spec.height, spec.image_use);
        let mut buffers = Vec::with_capacity(spec.constraints.buffers as usize);
        for _ in 0..spec.constraints.buffers {
            let exported = match self.export_image_with_layout(&req, modifier, &placement.planes) {
                Ok(e) => e,
                Err(e) => {
                    tracing::info!(error = %e, "the driver does not take the imposed layout for export");
                    return Err(missed);
                }
            };
            let dmabuf = exported
                .dmabuf()
                .ok_or(ExportError::DmaBufExportUnsupported { fourcc: spec.fourcc })?
                .try_clone()
                .map_err(ExportError::from)?;
            check_driver_layout(spec, &dmabuf)?;
            buffers.push(AllocatedBuffer { dmabuf, exported: Some(exported) });
        }
        Ok(Allocated {
            buffers,
            source: LayoutSource::ImposedOnExport,
            disjoint: false,
            disjoint_reason: "an export is one allocation, so its planes share one fd".into(),
            memory: "device".into(),
            memory_reason: None,
        })
    }
}

fn check_driver_layout(spec: &AllocationSpec, buf: &DmaBuf) -> Result<(), AllocateError> {
    for (i, p) in buf.planes().enumerate() {
        if p.stride % spec.constraints.stride_align.max(1) != 0 {
            return Err(AllocateError::DriverLayout { constraint: ConstraintKind::StrideAlign, plane: i, what: "stride", value: p.stride, required: spec.constraints.stride_align });
        }
        if p.offset % spec.constraints.offset_align.max(1) != 0 {
            return Err(AllocateError::DriverLayout { constraint: ConstraintKind::OffsetAlign, plane: i, what: "offset", value: p.offset, required: spec.constraints.offset_align });
        }
        // A file whose size cannot be read counts as too small: refusing is the safe side.
        let size = classify(p.fd, FdTrust::Untrusted).ok().and_then(|c| file_size(p.fd, c).ok()).unwrap_or(0);
        if size < spec.constraints.min_size {
            return Err(AllocateError::DriverLayout { constraint: ConstraintKind::MinSize, plane: i, what: "file size", value: size, required: spec.constraints.min_size });
        }
    }
    Ok(())
}
