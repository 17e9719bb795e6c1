//! The detile of a caller's dma-buf: through the import room's checks and its one source
//! (the files imported in place, or read first), on the GPU, or on the CPU where the cost
//! model says, with a report of what ran ([`DetileRun`]).

use std::time::Duration;

use ash::vk;
use dmabridge_interop::dmabuf::{check_import_with, CheckedImport, DmaBuf, ImportFacts, ImportOptions};
use dmabridge_interop::tiling::{packed_planes, tiled_size, FrameConversion, PlaneGeometry, TiledFrame};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{format_info, Format, TileLayout};

use crate::resources::buffer::{BufferLocation, GpuBuffer};
use crate::device::submit::{SubmitOptions, Submission};
use crate::import::source::{PlaneSource, SourceRequest};
use crate::ConvertPath;
use super::converter::{linear_span, Converter, BINDING_SLACK};
use super::error::ConvertError;

/// Where a dma-buf detile ran and how it reached the tiled bytes: what
/// [`Converter::detile_dmabuf`] and [`Converter::detile_dmabuf_into`] report, so
/// that a tool says what happened, not what was meant to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetileRun {
    /// The buffer's tiled layout.
    pub layout: TileLayout,
    /// Where the detile ran: [`ConvertPath::Cpu`] or [`ConvertPath::Gpu`] (the compute
    /// shader: a dma-buf's tiles have no copy-command path).
    pub path: ConvertPath,
    /// How the tiled bytes were reached.
    pub source: DetileSource,
}

/// How a detile reached a dma-buf's tiled bytes, decided by the import path's rules
/// (`ImportOptions`, the fd classes, and whether the driver imports by mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetileSource {
    /// In place: on the GPU, every file imported as a storage buffer the shader reads
    /// (zero-copy); on the CPU, every plane mapped read-only.
    InPlace,
    /// Read into dmabridge's memory first (`pread`; a dma-buf through a guarded read-only
    /// mapping): a file that can shrink, or, on the GPU, a read-only fd that the driver would
    /// map writable. The import path's [`crate::ImportPath::ReadCopy`].
    Read,
}

impl std::fmt::Display for DetileRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match (self.path, self.source) {
            (ConvertPath::Cpu, DetileSource::InPlace) => "its planes mapped read-only",
            (ConvertPath::Cpu, DetileSource::Read) => "its planes read with pread (a file that can shrink)",
            (_, DetileSource::InPlace) => "its planes imported in place (zero-copy)",
            (_, DetileSource::Read) => "its planes read into dmabridge's memory first (a file that can shrink, or a read-only fd)",
        };
        let on = if self.path == ConvertPath::Cpu { "CPU" } else { "GPU" };
        write!(f, "detile {} on the {on}, {how}", self.layout)
    }
}

/// A dma-buf detiled into a new buffer ([`Converter::detile_dmabuf`]).
#[derive(Debug)]
pub struct Detiled {
    /// The frame, planes tightly packed and concatenated.
    pub buffer: GpuBuffer,
    /// What ran.
    pub run: DetileRun,
}

impl Converter {
    /// Detiles a dma-buf whose modifier names a layout dmabridge converts (samsung-64x32,
    /// NVIDIA block linear, ...) into `dst`, planes at `planes`, on the GPU: the copy
    /// fallback for a producer whose tiling no consumer samples. Returns at once; `dst` is
    /// the caller's to read once the submission is done.
    ///
    /// The buffer is reached as [`crate::Engine::import_dmabuf_with`] would reach it, under the
    /// same `import` options, through the import room's one source
    /// (`import::source`): files that cannot shrink (a dma-buf, a sealed memfd, a
    /// regular file `import.trust` vouches for) are imported in place, unless their fds are
    /// read-only and the driver imports by mapping (a read-only share); the rest are read
    /// into dmabridge's memory first, or refused with [`ConvertError::NotZeroCopy`] (or the
    /// check's `NotFixedSize`) when `import.require_zero_copy`. The returned [`DetileRun`]
    /// says which way it went.
    ///
    /// The descriptor's fds are borrowed (dups go to Vulkan). Nothing reaches the driver
    /// before the layout checks, plus two that tiling adds: each stride must be the plane's
    /// padded row of whole tiles, and the padded tiles must lie inside the fd.
    pub fn detile_dmabuf_into(
        &self,
        buf: &DmaBuf,
        dst: &GpuBuffer,
        planes: &[PlaneLayout],
        import: ImportOptions,
        submit: SubmitOptions,
    ) -> Result<(DetileRun, Submission), ConvertError> {
        let checked = self.check_tiled_dmabuf(buf, planes, import)?;
        self.detile_checked_on_gpu(&checked, dst, planes, import, submit)
    }

    /// The layout checks of a tiled dma-buf (see [`Converter::detile_dmabuf_into`]),
    /// under `import`'s trust and zero-copy requirement, and that `planes` fit a linear
    /// destination.
    fn check_tiled_dmabuf<'a>(&self, buf: &'a DmaBuf, planes: &[PlaneLayout], import: ImportOptions) -> Result<CheckedTiled<'a>, ConvertError> {
        let layout = buf.layout();
        let tile = layout.modifier().and_then(TileLayout::from_modifier).filter(|t| *t != TileLayout::Linear).ok_or(ConvertError::NotTiled(layout))?;
        let (fourcc, w, h) = (buf.fourcc(), buf.width(), buf.height());
        let g = tiled_size(tile, fourcc, w, h)?;
        let plane_count = format_info(fourcc).map_or(0, |i| i.plane_count());
        let max = self.engine.info().max_image_dimension_2d;
        let checked = check_import_with(
            buf,
            &|f: Format| (f == buf.format()).then_some(ImportFacts { memory_plane_count: plane_count, max_width: max, max_height: max, disjoint: true }),
            import,
        )?;
        for (i, (c, p)) in checked.planes().iter().zip(&g.planes).enumerate() {
            if c.stride != p.padded_width_bytes as u64 {
                return Err(ConvertError::TiledStride { plane: i, layout: tile, stride: c.stride, expected: p.padded_width_bytes as u64 });
            }
            let end = c.offset.saturating_add(p.size);
            if end > c.file.size {
                return Err(ConvertError::TilesPastEndOfFd { plane: i, end, fd_size: c.file.size });
            }
        }
        // Planes must fit where the caller wants them.
        dmabridge_interop::tiling::gpu::plane_dispatches(TiledFrame { layout: TileLayout::Linear, fourcc, extent: (w, h) }, 0, planes, false)?;
        Ok(CheckedTiled { tile, geometry: g, checked })
    }

    /// The GPU detile of a checked buffer: its files imported in place, or read first, as
    /// the import room's [`PlaneSource`] decides.
    fn detile_checked_on_gpu(
        &self,
        t: &CheckedTiled<'_>,
        dst: &GpuBuffer,
        planes: &[PlaneLayout],
        import: ImportOptions,
        submit: SubmitOptions,
    ) -> Result<(DetileRun, Submission), ConvertError> {
        let CheckedTiled { tile, geometry: g, checked } = t;
        let fourcc = checked.dmabuf().fourcc();
        let linear_end = g.planes.iter().zip(planes).map(|(p, l)| linear_span(p, l)).max().unwrap_or(0);
        self.check_binding(&format!("{fourcc} linear buffer"), linear_end)?;
        // The padded tiles, which run past the visible rows the checks measured.
        let spans: Vec<u64> = g.planes.iter().map(|p| p.size).collect();
        let max_len = self.max_storage_range.saturating_sub(BINDING_SLACK);
        let request = SourceRequest { spans: &spans, usage: vk::BufferUsageFlags::STORAGE_BUFFER, options: import, max_len };
        let source = PlaneSource::new(&self.engine, checked, request).map_err(ConvertError::from)?;
        let fetched = source.fetch(&self.engine).map_err(ConvertError::from)?;
        let from = if source.is_mapped() { DetileSource::InPlace } else { DetileSource::Read };
        let (_, s) = self.engine.submit(submit, |cmd, until| {
            let ctx = self.take_context()?;
            let result = (|| {
                for (i, p) in g.planes.iter().enumerate() {
                    // The plane's tiles start where the source puts them, wherever the
                    // concatenated convention would have put them.
                    let at_zero = PlaneGeometry { offset: 0, ..*p };
                    let d = dmabridge_interop::tiling::gpu::detile_plane(&at_zero, source.offset(i), planes[i])?;
                    let set = self.set(&ctx, &self.tile, &[fetched.buffer_of(i), dst.buffer()])?;
                    // SAFETY: the engine's own command buffer; the buffers are tracked below.
                    unsafe { self.record(cmd, &self.tile, set, &[d], until)? };
                }
                Ok::<(), ConvertError>(())
            })();
            self.return_context(ctx, until);
            // Nothing is submitted when recording failed: the buffers have no use to wait for
            // (and `dst` stays the caller's to write, for the CPU to detile into instead).
            if result.is_ok() {
                dst.track(until);
                fetched.track(until);
            }
            result
        })?;
        Ok((DetileRun { layout: *tile, path: ConvertPath::Gpu, source: from }, s))
    }

    /// The CPU detile of a checked buffer into `dst` (planes at `linear`): files that cannot
    /// shrink mapped read-only (a dma-buf inside its `DMA_BUF_IOCTL_SYNC` bracket; a
    /// read-only fd maps read-only as well as any), the rest read with `pread`.
    fn detile_checked_on_cpu(&self, t: &CheckedTiled<'_>, dst: &mut [u8], linear: &[PlaneLayout]) -> Result<DetileRun, ConvertError> {
        let CheckedTiled { tile, geometry: g, checked } = t;
        let mut source = DetileSource::InPlace;
        for (i, ((c, p), l)) in checked.planes().iter().zip(&g.planes).zip(linear).enumerate() {
            let at_zero = PlaneGeometry { offset: 0, ..*p };
            if c.file.class.is_fixed_size() {
                let map = checked.map_plane(i, p.size).map_err(|e| ConvertError::Map { plane: i, source: e })?;
                dmabridge_interop::tiling::detile_plane_fast(&at_zero, map.bytes(), dst, *l, 0)?;
            } else {
                // The padded tiles, which run past the visible rows the checks measured.
                let fd = checked.dmabuf().plane(i).ok_or(ConvertError::NotTiled(checked.dmabuf().layout()))?.fd;
                let bytes = dmabridge_interop::dmabuf::read_at(fd, c.offset, p.size, p.size).map_err(|e| ConvertError::Read { plane: i, source: e })?;
                dmabridge_interop::tiling::detile_plane_fast(&at_zero, &bytes, dst, *l, 0)?;
                source = DetileSource::Read;
            }
        }
        Ok(DetileRun { layout: *tile, path: ConvertPath::Cpu, source })
    }

    /// Detiles a tiled dma-buf into a new buffer, planes tightly packed and concatenated,
    /// where the cost model says ([`Converter::choose`]): on the GPU as
    /// [`Converter::detile_dmabuf_into`] does, waiting for it (at most `timeout`), or on
    /// the CPU, each plane mapped read-only where its file cannot shrink and read with
    /// `pread` where it can. Either way the buffer goes through the import path's checks and
    /// rules under `import` first. Where the GPU path the model chose fails for want of
    /// what the device can do, the model drops it and the CPU detiles the frame (see
    /// [`Converter::convert_frame`]). The result says what ran.
    pub fn detile_dmabuf(&self, buf: &DmaBuf, import: ImportOptions, timeout: Duration) -> Result<Detiled, ConvertError> {
        let (fourcc, w, h) = (buf.fourcc(), buf.width(), buf.height());
        let linear = packed_planes(fourcc, w, h)?;
        let mut out = GpuBuffer::new(&self.engine, tiled_size(TileLayout::Linear, fourcc, w, h)?.size, BufferLocation::Readback)?;
        let checked = self.check_tiled_dmabuf(buf, &linear, import)?;
        let c = FrameConversion::new((checked.tile, fourcc), (TileLayout::Linear, fourcc), w, h);
        let choice = self.choose(&c, None)?;
        if choice.path == ConvertPath::Cpu {
            let run = self.detile_checked_on_cpu(&checked, out.bytes_mut()?, &linear)?;
            return Ok(Detiled { buffer: out, run });
        }
        let run = match self.detile_checked_on_gpu(&checked, &out, &linear, import, SubmitOptions::default()) {
            Ok((run, s)) => {
                s.wait(timeout)?;
                run
            }
            Err(error) => self.fall_back(&c, &choice, error, |_| self.detile_checked_on_cpu(&checked, out.bytes_mut()?, &linear))?.0,
        };
        Ok(Detiled { buffer: out, run })
    }
}

/// A tiled dma-buf that passed [`Converter::check_tiled_dmabuf`]: its layout, its tiled
/// geometry, and the checks' proof.
struct CheckedTiled<'a> {
    tile: TileLayout,
    geometry: dmabridge_interop::tiling::TiledGeometry,
    checked: CheckedImport<'a>,
}
