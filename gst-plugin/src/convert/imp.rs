//! The element's implementation (its `ObjectSubclass`): caps, properties, and the
//! per-buffer conversion.
//!
//! Every element of a process shares one engine and converter ([`shared`]), opened at
//! the first element's `start`. Nothing is measured in `set_caps`: when the cost model
//! knows the conversion (measured before, in this process or the disk cache) its choice is
//! taken; otherwise the element converts on the CPU and calibrates the conversion on a
//! worker thread, switching to the measured path at the first frame after it is done
//! (`stop` waits for the worker). A tiled dma-buf whose conversion runs on the GPU (a
//! detile, or a detile fused with YUV -> RGB) is read by the GPU straight from its fd
//! (imported as a storage buffer after the layout checks) into a readback buffer the element
//! keeps from frame to frame.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError};

use dmabridge::interop::dmabuf::MapCache;
use dmabridge::interop::tiling::{ColourMatrix, ColourRange, FrameConversion};
use dmabridge::interop::{Fourcc, TileLayout};
use dmabridge::{BufferImportCache, BufferLocation, ConvertPath, Converter, Engine, EngineOptions, GpuBuffer, SubmitOptions, TiledFrame};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::prelude::*;
use gst_video::VideoFormat;

use super::dma_drm;
use super::formats::{SINK_FORMATS, SRC_FORMATS};
use super::planes::{check_within, gather_rows, linear_planes, read_rows, tiled_planes, PlaneBoundsError, PlaneSpan};

static CAT: LazyLock<gst::DebugCategory> =
    LazyLock::new(|| gst::DebugCategory::new("dmabridgeconvert", gst::DebugColorFlags::empty(), Some("dmabridge conversions")));

/// The dma-bufs of an upstream pool each element keeps imported.
const IMPORTS: usize = 8;

/// The output dma-buf memories each element recycles (a downstream pool's worth).
const OUT_MEMORIES: usize = 8;
/// The alignment (GStreamer's mask: bytes - 1) of the system-memory output pool the
/// element makes: whole cache lines, so that the CPU path can write large frames with
/// non-temporal stores (which need 16-byte alignment at least). GStreamer's default
/// is 8 bytes, which left the element at 0.6-0.7x the engine on 4K detiles.
const OUT_ALIGN: usize = 63;
/// Input dma-bufs kept mapped for the CPU path: a decoder's pool, typically 4 to 16.
const MAPS: usize = 8;

/// Vulkan devices opened by this process's elements: at most one, shared by all.
static ENGINES_OPENED: AtomicU64 = AtomicU64::new(0);

/// The process's one converter (and its engine), shared by every element; `None`: no
/// Vulkan device, every element converts on the CPU. Opened once, at the first
/// element's `start` (never in `set_caps`); `EngineOptions::from_env` configures it.
fn shared() -> Option<&'static Converter> {
    static SHARED: OnceLock<Option<Converter>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let opened = Engine::new(&EngineOptions::from_env()).map_err(|e| e.to_string()).and_then(|e| {
                ENGINES_OPENED.fetch_add(1, Ordering::Relaxed);
                Converter::new(&e).map_err(|e| e.to_string())
            });
            match opened {
                Ok(c) => Some(c),
                Err(e) => {
                    gst::info!(CAT, "no Vulkan device ({e}): dmabridgeconvert converts on the CPU");
                    None
                }
            }
        })
        .as_ref()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settings {
    /// None: the cost model's choice.
    path: Option<ConvertPath>,
    /// None: the caps' colorimetry.
    matrix: Option<ColourMatrix>,
}

struct State {
    conversion: FrameConversion,
    in_info: gst_video::VideoInfo,
    out_info: gst_video::VideoInfo,
    /// The process's converter ([`shared`]), or None: no Vulkan device, the CPU path.
    converter: Option<&'static Converter>,
    path: ConvertPath,
    /// The path a calibration worker measured, once it has (the element converts on
    /// `path` until then).
    calibrated: Option<Arc<OnceLock<ConvertPath>>>,
    /// The GPU's detiled frame, read back; kept from frame to frame (GPU dma-buf input).
    readback: Option<GpuBuffer>,
    /// The upstream pool's dma-bufs as storage buffers, each imported once.
    imports: Option<BufferImportCache>,
    /// Downstream takes dma-bufs: output buffers are sealed memfds wrapped as dma-buf memory.
    out_dmabuf: bool,
    /// The dma-buf memories output so far (at most [`OUT_MEMORIES`]): one no buffer holds
    /// any more is written again rather than a new memfd made.
    out_memories: Vec<gst::Memory>,
    /// The upstream pool's dma-bufs, each mapped once for the CPU path (an mmap, its
    /// page faults and a munmap every frame halved the element's speed on dma-bufs).
    maps: std::cell::RefCell<MapCache>,
}

pub struct DmabridgeConvert {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Frames read straight from their dma-buf (after the checks), for `dmabuf-imports`.
    dmabuf_imports: AtomicU64,
    /// Of those, the frames the GPU read from the dma-buf itself, for `gpu-dmabuf-frames`.
    gpu_dmabuf_frames: AtomicU64,
    /// Calibration workers this element started; `stop` waits for them.
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Default for DmabridgeConvert {
    fn default() -> Self {
        DmabridgeConvert {
            settings: Mutex::new(Settings { path: None, matrix: None }),
            state: Mutex::new(None),
            dmabuf_imports: Default::default(),
            gpu_dmabuf_frames: Default::default(),
            workers: Mutex::new(Vec::new()),
        }
    }
}

#[glib::object_subclass]
impl ObjectSubclass for DmabridgeConvert {
    const NAME: &'static str = "GstDmabridgeConvert";
    type Type = super::DmabridgeConvert;
    type ParentType = gst_base::BaseTransform;
}

impl ObjectImpl for DmabridgeConvert {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecString::builder("path")
                    .nick("Path")
                    .blurb("Where conversions run: auto (the cost model's measured choice), cpu, gpu")
                    .default_value(Some("auto"))
                    .build(),
                glib::ParamSpecString::builder("matrix")
                    .nick("Matrix")
                    .blurb("YCbCr matrix: auto (the caps' colorimetry), bt601, bt709, bt2020")
                    .default_value(Some("auto"))
                    .build(),
                glib::ParamSpecUInt64::builder("dmabuf-imports")
                    .nick("dma-buf imports")
                    .blurb("Frames read straight from their dma-buf, after dmabridge's layout checks, without GStreamer's mapping")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("gpu-dmabuf-frames")
                    .nick("GPU dma-buf frames")
                    .blurb("Frames the GPU read straight from their dma-buf (imported, not mapped or uploaded)")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("gpu-dmabuf-imports")
                    .nick("GPU dma-buf imports")
                    .blurb("Dma-bufs imported for the GPU since the caps were set (each once: a recycled buffer is a cache hit)")
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("engines-opened")
                    .nick("Engines opened")
                    .blurb("Vulkan devices this process's dmabridgeconvert elements opened: one, shared by all")
                    .read_only()
                    .build(),
                glib::ParamSpecString::builder("current-path")
                    .nick("Current path")
                    .blurb("Where frames are converted now: cpu, gpu or copy-commands (none before caps)")
                    .read_only()
                    .build(),
            ]
        });
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let text: String = value.get::<Option<String>>().ok().flatten().unwrap_or_else(|| "auto".into());
        let mut s = self.settings.lock().unwrap_or_else(PoisonError::into_inner);
        match pspec.name() {
            "path" => match text.as_str() {
                "auto" => s.path = None,
                "cpu" | "gpu" => s.path = text.parse().ok(),
                other => gst::warning!(CAT, imp = self, "path {other:?}: expected auto, cpu or gpu; keeping {:?}", s.path),
            },
            "matrix" => match text.as_str() {
                "auto" => s.matrix = None,
                m => match m.parse::<ColourMatrix>() {
                    Ok(m) => s.matrix = Some(m),
                    Err(e) => gst::warning!(CAT, imp = self, "matrix {e}; keeping {:?}", s.matrix),
                },
            },
            _ => {}
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let s = self.settings.lock().unwrap_or_else(PoisonError::into_inner);
        match pspec.name() {
            "path" => s.path.map_or("auto", |p| p.name()).to_value(),
            "dmabuf-imports" => self.dmabuf_imports.load(Ordering::Relaxed).to_value(),
            "gpu-dmabuf-frames" => self.gpu_dmabuf_frames.load(Ordering::Relaxed).to_value(),
            "engines-opened" => ENGINES_OPENED.load(Ordering::Relaxed).to_value(),
            "gpu-dmabuf-imports" => {
                drop(s);
                let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.as_ref().and_then(|st| st.imports.as_ref()).map_or(0, |c| c.stats().misses).to_value()
            }
            "current-path" => {
                drop(s);
                let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.as_ref().map(|st| st.calibrated.as_ref().and_then(|c| c.get().copied()).unwrap_or(st.path).name()).to_value()
            }
            _ => s.matrix.map_or("auto", |m| m.name()).to_value(),
        }
    }
}

impl GstObjectImpl for DmabridgeConvert {}

impl ElementImpl for DmabridgeConvert {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "dmabridge converter",
                "Filter/Converter/Video",
                "Tiled -> linear and YUV <-> RGB with dmabridge: the fastest path the device measures (CPU or GPU), detile and colour fused",
                "dmabridge",
            )
        });
        Some(&META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            let caps = |formats: &[VideoFormat]| gst_video::VideoCapsBuilder::new().format_list(formats.iter().copied()).build();
            // The sink also takes dma-bufs (GStreamer 1.22's form: memory:DMABuf with a
            // plain format), read through the layout checks without a copy.
            let mut sink = caps(&SINK_FORMATS);
            sink.merge(gst_video::VideoCapsBuilder::new().features([gst_allocators::CAPS_FEATURE_MEMORY_DMABUF]).format_list(SINK_FORMATS.iter().copied()).build());
            // The source writes system memory, or dma-bufs where downstream takes them.
            let mut src = caps(&SRC_FORMATS);
            src.merge(gst_video::VideoCapsBuilder::new().features([gst_allocators::CAPS_FEATURE_MEMORY_DMABUF]).format_list(SRC_FORMATS).build());
            // GStreamer 1.24's form: format=DMA_DRM with the DRM formats read and written.
            if dma_drm::enabled() {
                sink.merge(dma_drm::caps(&dma_drm::sink_drm_formats()));
                src.merge(dma_drm::caps(&dma_drm::src_drm_formats()));
            }
            let mut out = Vec::new();
            for (name, dir, c) in [("sink", gst::PadDirection::Sink, sink), ("src", gst::PadDirection::Src, src)] {
                if let Ok(t) = gst::PadTemplate::new(name, dir, gst::PadPresence::Always, &c) {
                    out.push(t);
                }
            }
            out
        });
        TEMPLATES.as_ref()
    }
}

impl BaseTransformImpl for DmabridgeConvert {
    const MODE: gst_base::subclass::BaseTransformMode = gst_base::subclass::BaseTransformMode::NeverInPlace;
    const PASSTHROUGH_ON_SAME_CAPS: bool = true;
    const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

    fn transform_caps(&self, direction: gst::PadDirection, caps: &gst::Caps, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let formats: &[VideoFormat] = if direction == gst::PadDirection::Src { &SINK_FORMATS } else { &SRC_FORMATS };
        let drm_formats = if direction == gst::PadDirection::Src { dma_drm::sink_drm_formats() } else { dma_drm::src_drm_formats() };
        let mut other = gst::Caps::new_empty();
        for (s, _) in caps.iter_with_features() {
            let mut s = s.to_owned();
            s.remove_fields(["format", "drm-format", "colorimetry", "chroma-site"]);
            if dma_drm::enabled() {
                let mut d = s.clone();
                d.set("format", dma_drm::DMA_DRM);
                d.set("drm-format", gst::List::new(drm_formats.iter().map(String::as_str)));
                if let Some(c) = other.get_mut() {
                    c.append_structure_full(d, Some(gst::CapsFeatures::new([gst_allocators::CAPS_FEATURE_MEMORY_DMABUF])));
                }
            }
            s.set("format", gst::List::new(formats.iter().map(|f| f.to_str())));
            // Either side may be system memory or dma-bufs.
            for f in [None, Some(gst_allocators::CAPS_FEATURE_MEMORY_DMABUF)] {
                let features = match f {
                    Some(f) => gst::CapsFeatures::new([f]),
                    None => gst::CapsFeatures::new_empty(),
                };
                if let Some(c) = other.get_mut() {
                    c.append_structure_full(s.clone(), Some(features));
                }
            }
        }
        // The same caps first: passthrough when the other side takes them.
        let mut result = caps.clone();
        result.merge(other);
        Some(match filter {
            Some(f) => f.intersect_with_mode(&result, gst::CapsIntersectMode::First),
            None => result,
        })
    }

    /// One frame in, one frame out, whatever the input buffer's size (a tiled frame may be
    /// shorter than GStreamer's padded estimate of it; its own size is checked per buffer).
    fn transform_size(&self, _direction: gst::PadDirection, _caps: &gst::Caps, _size: usize, othercaps: &gst::Caps) -> Option<usize> {
        dma_drm::frame_of(othercaps).ok().map(|f| f.info.size())
    }

    fn set_caps(&self, incaps: &gst::Caps, outcaps: &gst::Caps) -> Result<(), gst::LoggableError> {
        // DMA_DRM caps name their layout by modifier, through dmabridge's layout table.
        let input = dma_drm::frame_of(incaps).map_err(|e| gst::loggable_error!(CAT, "input caps: {e}"))?;
        let output = dma_drm::frame_of(outcaps).map_err(|e| gst::loggable_error!(CAT, "output caps: {e}"))?;
        let (from, to) = ((input.layout, input.fourcc), (output.layout, output.fourcc));
        let (in_info, out_info) = (input.info, output.info);
        let settings = *self.settings.lock().unwrap_or_else(PoisonError::into_inner);
        // The YUV side's colorimetry decides the colour arithmetic.
        let yuv = if from.1 == Fourcc::NV12 || from.1 == Fourcc::P010 { &in_info } else { &out_info };
        let c = yuv.colorimetry();
        let matrix = settings.matrix.unwrap_or(match c.matrix() {
            gst_video::VideoColorMatrix::Bt601 => ColourMatrix::Bt601,
            gst_video::VideoColorMatrix::Bt2020 => ColourMatrix::Bt2020,
            _ => ColourMatrix::Bt709,
        });
        let range = if c.range() == gst_video::VideoColorRange::Range0_255 { ColourRange::Full } else { ColourRange::Limited };
        let conversion = FrameConversion { matrix, range, ..FrameConversion::new(from, to, in_info.width(), in_info.height()) };
        conversion.steps().map_err(|e| gst::loggable_error!(CAT, "{e}"))?;
        // The process's converter, opened in `start`; without a device, the CPU path.
        // Nothing is measured here: an unknown conversion starts on the CPU and is
        // calibrated on a worker.
        let previous = self.state.lock().unwrap_or_else(PoisonError::into_inner).take();
        let (readback, imports) = previous.map_or((None, None), |s| (s.readback, s.imports));
        let converter = shared();
        let mut calibrated = None;
        let path = match (converter, settings.path) {
            (None, _) => ConvertPath::Cpu,
            (Some(conv), Some(p)) => conv.choose(&conversion, Some(p)).map_err(|e| gst::loggable_error!(CAT, "{e}"))?.path,
            (Some(conv), None) => match conv.known(&conversion).map_err(|e| gst::loggable_error!(CAT, "{e}"))? {
                Some(choice) => choice.path,
                None => {
                    calibrated = Some(self.calibrate_on_worker(conv, conversion));
                    ConvertPath::Cpu
                }
            },
        };
        gst::info!(CAT, imp = self, "{conversion} on {path}{}", if calibrated.is_some() { " while it is calibrated" } else { "" });
        let out_dmabuf = outcaps.features(0).is_some_and(|f| f.contains(gst_allocators::CAPS_FEATURE_MEMORY_DMABUF));
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(State { conversion, in_info, out_info, converter, path, calibrated, readback, imports, out_dmabuf, out_memories: Vec::new(), maps: std::cell::RefCell::new(MapCache::new(MAPS)) });
        Ok(())
    }

    /// Downstream takes dma-bufs: each output frame is a memfd (sealed against shrinking
    /// and growing, so a consumer may map it safely) as dma-buf memory; one that no
    /// buffer holds any more (downstream is done with it) is written again, else a new
    /// one is made (and kept, up to [`OUT_MEMORIES`]).
    fn prepare_output_buffer(&self, inbuf: gst_base::subclass::base_transform::InputBuffer) -> Result<gst_base::subclass::base_transform::PrepareOutputBufferSuccess, gst::FlowError> {
        let mem = {
            let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let s = match guard.as_mut() {
                Some(s) if s.out_dmabuf => s,
                _ => return self.parent_prepare_output_buffer(inbuf),
            };
            // Only the element holds it: no buffer (so no mapping) refers to it.
            match s.out_memories.iter().find(|m| refcount(m) == 1) {
                Some(m) => m.clone(),
                None => {
                    let size = s.out_info.size();
                    let fd = dmabridge::interop::dmabuf::sealed_memfd_of_size("dmabridgeconvert", size as u64).map_err(|e| {
                        gst::element_imp_error!(self, gst::ResourceError::NoSpaceLeft, ["cannot make a {size}-byte dma-buf: {e}"]);
                        gst::FlowError::Error
                    })?;
                    // SAFETY: the memory takes ownership of the fd, which holds `size` bytes.
                    let mem = unsafe { gst_allocators::DmaBufAllocator::new().alloc(fd, size) }.map_err(|_| gst::FlowError::Error)?;
                    if s.out_memories.len() < OUT_MEMORIES {
                        s.out_memories.push(mem.clone());
                    }
                    mem
                }
            }
        };
        let mut out = gst::Buffer::new();
        {
            let out = out.get_mut().ok_or(gst::FlowError::Error)?;
            out.append_memory(mem);
            // Where each plane lies: what a DMA_DRM consumer must read (seed 000).
            let info = self.state.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|s| s.out_info.clone());
            if let Some(info) = info {
                gst_video::VideoMeta::add_full(out, gst_video::VideoFrameFlags::empty(), info.format(), info.width(), info.height(), info.offset(), info.stride())
                    .map_err(|_| gst::FlowError::Error)?;
            }
            let src: &gst::BufferRef = match &inbuf {
                gst_base::subclass::base_transform::InputBuffer::Readable(b) => b,
                gst_base::subclass::base_transform::InputBuffer::Writable(b) => b,
            };
            out.set_pts(src.pts());
            out.set_dts(src.dts());
            out.set_duration(src.duration());
        }
        Ok(gst_base::subclass::base_transform::PrepareOutputBufferSuccess::Buffer(out))
    }

    /// Without a pool from downstream, GStreamer would allocate (and the kernel zero) a
    /// new output buffer for every frame: an empty pool entry makes the base class make a
    /// pool of its own, whose buffers are reused. Its memory is aligned to 64 bytes
    /// ([`OUT_ALIGN`]). Dma-buf output makes its own memory.
    fn decide_allocation(&self, query: &mut gst::query::Allocation) -> Result<(), gst::LoggableError> {
        if query.allocation_pools().is_empty() {
            let (caps, _) = query.get();
            let system = caps.is_some_and(|c| c.features(0).map_or(true, |f| !f.contains(gst_allocators::CAPS_FEATURE_MEMORY_DMABUF)));
            if let (true, Some(info)) = (system, caps.and_then(|c| dma_drm::frame_of(c).ok()).map(|f| f.info)) {
                query.add_allocation_pool(None::<&gst::BufferPool>, info.size() as u32, 2, 0);
                match query.allocation_params().into_iter().next() {
                    Some((allocator, p)) if p.align() < OUT_ALIGN => {
                        query.set_nth_allocation_param(0, allocator.as_ref(), gst::AllocationParams::new(p.flags(), OUT_ALIGN, p.prefix(), p.padding()))
                    }
                    Some(_) => {}
                    None => query.add_allocation_param(None::<&gst::Allocator>, gst::AllocationParams::new(gst::MemoryFlags::empty(), OUT_ALIGN, 0, 0)),
                }
            }
        }
        self.parent_decide_allocation(query)
    }

    /// Opens the process's engine (once, for every element), so that `set_caps` never does.
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        shared();
        Ok(())
    }

    /// Waits for this element's calibration workers (a process must not exit while one
    /// is inside the driver).
    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        for w in workers {
            let _ = w.join();
        }
        Ok(())
    }

    fn transform(&self, inbuf: &gst::Buffer, outbuf: &mut gst::BufferRef) -> Result<gst::FlowSuccess, gst::FlowError> {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = guard.as_mut().ok_or(gst::FlowError::NotNegotiated)?;
        if let Some(path) = state.calibrated.as_ref().and_then(|c| c.get().copied()) {
            gst::info!(CAT, imp = self, "{} calibrated: on {path} from here on", state.conversion);
            state.path = path;
            state.calibrated = None;
        }
        if state.path != ConvertPath::Cpu {
            match self.gpu_dmabuf_convert(state, inbuf, outbuf) {
                Some(Ok(())) => {
                    self.dmabuf_imports.fetch_add(1, Ordering::Relaxed);
                    self.gpu_dmabuf_frames.fetch_add(1, Ordering::Relaxed);
                    return Ok(gst::FlowSuccess::Ok);
                }
                Some(Err(e)) => gst::warning!(CAT, imp = self, "the GPU could not read the dma-buf ({e}); reading it on the CPU"),
                None => {}
            }
        }
        let state = &*state;
        let from_dmabuf = dmabuf_input(state, inbuf).transpose().map_err(|e| {
            gst::element_imp_error!(self, gst::StreamError::Format, ["the dma-buf: {e}"]);
            gst::FlowError::Error
        })?;
        if from_dmabuf.is_some() {
            self.dmabuf_imports.fetch_add(1, Ordering::Relaxed);
        }
        let input = from_dmabuf.map_or_else(|| packed_input(state, inbuf), Ok).map_err(|e| {
            gst::element_imp_error!(self, gst::StreamError::Format, ["{e}"]);
            gst::FlowError::Error
        })?;
        let (_, out_size) = state.conversion.sizes().map_err(|_| gst::FlowError::Error)?;
        let convert = |dst: &mut [u8]| -> Result<(), gst::FlowError> {
            let done = match &state.converter {
                Some(conv) => conv.convert_frame_into(&state.conversion, state.path, input.bytes(), dst).map_err(|e| e.to_string()),
                None => state.conversion.run_cpu_into(input.bytes(), dst, 0).map_err(|e| e.to_string()),
            };
            done.map_err(|e| {
                gst::element_imp_error!(self, gst::StreamError::Failed, ["{}: {e}", state.conversion]);
                gst::FlowError::Error
            })
        };
        // Where GStreamer's layout of the output is dmabridge's packed one (planes back to
        // back, rows unpadded), the conversion writes the output buffer itself.
        if packed_layout(&state.out_info, state.conversion.to) {
            let mut map = outbuf.map_writable().map_err(|_| gst::FlowError::Error)?;
            let dst = map.as_mut_slice().get_mut(..out_size as usize).ok_or(gst::FlowError::Error)?;
            convert(dst)?;
            return Ok(gst::FlowSuccess::Ok);
        }
        let mut packed = vec![0u8; out_size as usize];
        convert(&mut packed)?;
        write_output(state, &packed, outbuf).map_err(|e| {
            gst::element_imp_error!(self, gst::StreamError::Failed, ["{e}"]);
            gst::FlowError::Error
        })?;
        Ok(gst::FlowSuccess::Ok)
    }
}

impl DmabridgeConvert {
    /// Measures `conversion` on a worker thread; the cell holds the path once it has.
    fn calibrate_on_worker(&self, conv: &'static Converter, conversion: FrameConversion) -> Arc<OnceLock<ConvertPath>> {
        let cell = Arc::new(OnceLock::new());
        let done = cell.clone();
        let worker = std::thread::Builder::new().name("dmabridge-calibrate".into()).spawn(move || match conv.calibrate(&[conversion]) {
            Ok(choices) => {
                if let Some(c) = choices.first() {
                    gst::info!(CAT, "{conversion}: {}", c.explain());
                    let _ = done.set(c.path);
                }
            }
            Err(e) => gst::warning!(CAT, "{conversion}: calibration failed ({e}); staying on the CPU"),
        });
        match worker {
            Ok(w) => self.workers.lock().unwrap_or_else(PoisonError::into_inner).push(w),
            Err(e) => gst::warning!(CAT, imp = self, "no calibration worker ({e}): {conversion} stays on the CPU"),
        }
        cell
    }

    /// A tiled dma-buf converted by the GPU straight from its fd, into the element's
    /// readback buffer, then into `outbuf`. A frame at the start of its fd (planes where
    /// the tiled geometry puts them, which the element describes itself) goes through the
    /// import cache: the fd, checked as fixed-size and long enough, imported once as a
    /// storage buffer, then detiled, or detiled and converted to RGB in the one fused
    /// shader ([`Converter::run_conversion`]). A detile elsewhere in its fd goes through
    /// the converter's own dma-buf detile (the full layout checks, an import per frame).
    /// `None`: not a tiled frame in one dma-buf memory, or a colour conversion whose frame
    /// does not start its fd (read on the CPU, converted where `path` says).
    fn gpu_dmabuf_convert(&self, state: &mut State, inbuf: &gst::Buffer, outbuf: &mut gst::BufferRef) -> Option<Result<(), String>> {
        let c = state.conversion;
        let conv = state.converter?;
        let detile = c.to_layout == TileLayout::Linear && c.from == c.to;
        if c.from_layout == TileLayout::Linear || c.to_layout != TileLayout::Linear {
            return None;
        }
        let described = describe_dmabuf(state, inbuf)?;
        if !detile && described.as_ref().is_ok_and(|d| d.buf.plane(0).is_some_and(|p| p.offset != 0)) {
            return None;
        }
        Some((|| {
            // Its planes end inside the memory, so the `geometry.size` bytes imported from
            // the fd's start (a memory at offset 0) are the memory's.
            let Described { buf, geometry, .. } = described?;
            let planes = dmabridge::interop::tiling::packed_planes(c.to, c.width, c.height).map_err(|e| e.to_string())?;
            let (_, out_size) = c.sizes().map_err(|e| e.to_string())?;
            let mut readback = match state.readback.take() {
                Some(b) if b.len() == out_size => b,
                _ => GpuBuffer::new(conv.engine(), out_size, BufferLocation::Readback).map_err(|e| e.to_string())?,
            };
            let result = (|| {
                let plane0 = buf.plane(0).ok_or("a dma-buf with no plane")?;
                let done = if plane0.offset == 0 {
                    let cache = state.imports.get_or_insert_with(|| BufferImportCache::new(conv.engine(), IMPORTS));
                    let src = cache.import(plane0.fd, geometry.size, dmabridge::ash::vk::BufferUsageFlags::STORAGE_BUFFER).map_err(|e| e.to_string())?;
                    if detile {
                        let frame = TiledFrame { layout: c.from_layout, fourcc: c.from, extent: (c.width, c.height) };
                        conv.detile(frame, &*src, &readback, &planes, SubmitOptions::default()).map_err(|e| e.to_string())?
                    } else {
                        conv.run_conversion(&c, &*src, &readback, SubmitOptions::default()).map_err(|e| e.to_string())?
                    }
                } else {
                    conv.detile_dmabuf_into(&buf, &readback, &planes, dmabridge::ImportOptions::default(), SubmitOptions::default()).map_err(|e| e.to_string())?.1
                };
                done.wait(dmabridge::READBACK_TIMEOUT).map_err(|e| e.to_string())?;
                let packed = readback.bytes_mut().map_err(|e| e.to_string())?;
                if packed_layout(&state.out_info, c.to) {
                    let mut map = outbuf.map_writable().map_err(|_| "the output buffer cannot be mapped")?;
                    let dst = map.as_mut_slice().get_mut(..out_size as usize).ok_or("the output buffer is shorter than the frame")?;
                    dst.copy_from_slice(&packed[..out_size as usize]);
                    Ok(())
                } else {
                    write_output(state, packed, outbuf)
                }
            })();
            state.readback = Some(readback);
            result
        })())
    }
}

/// `mem`'s reference count (gstreamer-rs exposes none for memories; its lock state
/// cannot tell one buffer holding it from none).
fn refcount(mem: &gst::Memory) -> i32 {
    let ptr = mem.as_ptr() as *mut gst::ffi::GstMemory;
    // SAFETY: `mem` is a live reference, so `ptr` points to a GstMemory whose mini
    // object's refcount GStreamer only changes atomically (g_atomic_int_*); an aligned
    // gint read as an AtomicI32 for this load only.
    unsafe { std::sync::atomic::AtomicI32::from_ptr(std::ptr::addr_of_mut!((*ptr).mini_object.refcount)) }.load(Ordering::Acquire)
}

/// The input frame as dmabridge's packed buffer: a tiled frame as GStreamer lays it out
/// (which is dmabridge's layout), a linear one with its rows gathered plane by plane
/// where the buffer's `GstVideoMeta` puts them (padded strides, planes at any offset),
/// or where the caps' standard layout does without one. Each plane is checked against the
/// buffer's size (all its memories' bytes) before anything maps it ([`super::planes`]),
/// then read from the memory (or the run of memories) holding it, visible rows only.
/// GStreamer's frame mapping is not used: it checks only that a plane's first byte is in
/// the buffer, and its planes are `stride × rows` views whatever the memory holds.
fn packed_input<'a>(state: &State, inbuf: &'a gst::Buffer) -> Result<Input<'a>, String> {
    let (in_size, _) = state.conversion.sizes().map_err(|e| e.to_string())?;
    check_fd_memories(inbuf)?;
    // A tiled frame, or a linear one in the packed layout with no meta saying otherwise,
    // is read where it lies: a copy into fresh memory every frame cost a third of the
    // element's time (the copy, and the page faults of memory the kernel must zero).
    let packed = state.conversion.from_layout != TileLayout::Linear
        || (inbuf.meta::<gst_video::VideoMeta>().is_none() && packed_layout(&state.in_info, state.conversion.from));
    if packed {
        if (inbuf.size() as u64) < in_size {
            return Err(format!("the input buffer holds {} bytes, the frame {in_size}", inbuf.size()));
        }
        let map = inbuf.map_readable().map_err(|_| "the input buffer cannot be mapped".to_owned())?;
        if (map.size() as u64) < in_size {
            return Err(format!("the input buffer holds {} bytes, the frame {in_size}", map.size()));
        }
        return Ok(Input::Gst(map, in_size as usize));
    }
    let planes = linear_input_planes(state, inbuf).map_err(|e| e.to_string())?;
    check_within(&planes, inbuf.size() as u64, "the buffer's memory").map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(in_size as usize);
    for p in &planes {
        // Inside the buffer (checked above), so these fit a usize.
        let (memories, skip) =
            inbuf.find_memory(p.offset as usize..p.end as usize).ok_or_else(|| format!("plane {}: no memory of the buffer holds bytes {}..{}", p.plane, p.offset, p.end))?;
        if memories.len() == 1 {
            let map = inbuf.map_range_readable(memories).map_err(|_| format!("plane {}: its memory cannot be mapped", p.plane))?;
            gather_rows(p, map.as_slice().get(skip..).unwrap_or_default(), &mut out).map_err(|e| e.to_string())?;
        } else {
            extract_rows(inbuf, p, &mut out)?;
        }
    }
    Ok(Input::Owned(out))
}

/// Appends the visible rows of a plane that spans several memories, each row copied out
/// of the memories that hold it (`gst_buffer_extract`): mapping them together would merge
/// them, a copy of all their bytes every frame, however far apart the rows are.
fn extract_rows(inbuf: &gst::Buffer, p: &PlaneSpan, out: &mut Vec<u8>) -> Result<(), String> {
    let row = p.row as usize;
    for y in 0..u64::from(p.rows) {
        // At most p.end, which the caller checked against the buffer's size.
        let at = p.offset + y * p.stride;
        if at + p.row > inbuf.size() as u64 {
            return Err(format!("plane {}: row {y} runs past the buffer", p.plane));
        }
        let from = out.len();
        out.resize(from + row, 0);
        inbuf.copy_to_slice(at as usize, &mut out[from..]).map_err(|n| format!("plane {}: row {y}: {n} of its {row} bytes could be read", p.plane))?;
    }
    Ok(())
}

/// A linear frame's planes: at the buffer's video meta's offsets and strides where it has
/// one (which must describe every plane of the format), else at the caps' standard ones.
fn linear_input_planes(state: &State, inbuf: &gst::Buffer) -> Result<Vec<PlaneSpan>, PlaneBoundsError> {
    let c = &state.conversion;
    match inbuf.meta::<gst_video::VideoMeta>() {
        Some(m) => linear_planes(c.from, c.width, c.height, m.offset(), m.stride()),
        None => linear_planes(c.from, c.width, c.height, state.in_info.offset(), state.in_info.stride()),
    }
}

/// Checks that each fd memory of `inbuf` read through GStreamer's mapping lies inside its
/// fd: GStreamer maps such a memory from its fd, and bytes a memory claims past the end
/// of a memfd would fault (SIGBUS) when read.
fn check_fd_memories(inbuf: &gst::Buffer) -> Result<(), String> {
    use dmabridge::interop::dmabuf::{classify, file_size, FdTrust};
    for (i, mem) in inbuf.iter_memories().enumerate() {
        let Some(fd_mem) = mem.downcast_memory_ref::<gst_allocators::FdMemory>() else { continue };
        // SAFETY: the fd belongs to the memory, which the buffer holds for this call.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd_mem.fd()) };
        let size = classify(fd, FdTrust::Untrusted).map_err(|e| e.to_string()).and_then(|class| file_size(fd, class).map_err(|e| e.to_string()));
        let size = size.map_err(|e| format!("memory {i}: its fd: {e}"))?;
        let end = (mem.offset() as u64).saturating_add(mem.size() as u64);
        if end > size {
            return Err(format!("memory {i}: bytes {}..{end} of its fd run past the fd's {size} bytes", mem.offset()));
        }
    }
    Ok(())
}

/// The input frame: the dma-buf's own mapping (a tiled frame is read by the conversion
/// straight from it: zero copies), GStreamer's, or bytes gathered into dmabridge's
/// packed layout.
enum Input<'a> {
    /// The dma-buf, through the element's [`MapCache`].
    Mapped(dmabridge::interop::dmabuf::CachedView),
    /// GStreamer's own mapping of the input buffer, and the frame's length in it.
    Gst(gst::BufferMap<'a, gst::buffer::Readable>, usize),
    Owned(Vec<u8>),
}

impl Input<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Input::Mapped(m) => m.bytes(),
            Input::Gst(m, len) => &m.as_slice()[..*len],
            Input::Owned(v) => v,
        }
    }
}

/// A frame in one dma-buf memory, described to dmabridge.
struct Described {
    /// The descriptor: the fd (dups), the layout's modifier, the planes' offsets in the
    /// fd and their strides.
    buf: dmabridge::interop::dmabuf::DmaBuf,
    /// The frame's tiled geometry (for a linear frame, its packed one).
    geometry: dmabridge::interop::tiling::TiledGeometry,
    /// The planes, from the memory's first byte, checked to end inside the memory.
    planes: Vec<PlaneSpan>,
    /// The memory's first byte in its fd.
    base: u64,
}

/// The buffer as dmabridge's descriptor, when it is one dma-buf memory, with the frame's
/// tiled geometry and its planes. Every plane is checked to end inside the memory (its
/// offset and size in the fd: a memory may be a window of a larger fd, whose other bytes
/// are not upstream's to give); the fd's own checks come later ([`check_import_with`],
/// the GPU import). `None`: not a dma-buf, or a layout with no DRM modifier.
///
/// [`check_import_with`]: dmabridge::interop::dmabuf::check_import_with
fn describe_dmabuf(state: &State, inbuf: &gst::Buffer) -> Option<Result<Described, String>> {
    use dmabridge::interop::dmabuf::{DmaBuf, PlaneDesc};
    use dmabridge::interop::{Layout, Modifier};
    if inbuf.n_memory() != 1 {
        return None;
    }
    let mem = inbuf.peek_memory(0);
    let dm = mem.downcast_memory_ref::<gst_allocators::DmaBufMemory>()?;
    let c = &state.conversion;
    let modifier = if c.from_layout == TileLayout::Linear { Some(Modifier::LINEAR) } else { c.from_layout.modifier() }?;
    Some((|| {
        let geometry = dmabridge::interop::tiling::tiled_size(c.from_layout, c.from, c.width, c.height).map_err(|e| e.to_string())?;
        // Tiled planes lie as dmabridge's geometry places them; linear ones at the
        // buffer's video meta's offsets and strides (DMA_DRM producers put their real
        // offsets and pitches there), or the caps' standard layout without one.
        let planes = if c.from_layout == TileLayout::Linear { linear_input_planes(state, inbuf) } else { tiled_planes(&geometry) };
        let planes = planes.map_err(|e| e.to_string())?;
        let size = mem.size() as u64;
        check_within(&planes, size, "its dma-buf memory").map_err(|e| e.to_string())?;
        if c.from_layout != TileLayout::Linear && geometry.size > size {
            // The GPU imports the whole frame; its planes' ends above say the same.
            return Err(format!("the {}-byte tiled frame is longer than its {size}-byte dma-buf memory", geometry.size));
        }
        // SAFETY: the fd belongs to the memory, which the buffer holds for this call.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(dm.fd()) };
        let base = mem.offset() as u64;
        let mut descs = Vec::with_capacity(planes.len());
        for p in &planes {
            let offset = base.checked_add(p.offset).ok_or_else(|| format!("plane {}: its offset in the fd overflows", p.plane))?;
            descs.push(PlaneDesc { fd: fd.try_clone_to_owned().map_err(|e| e.to_string())?, offset, stride: p.stride });
        }
        let buf = DmaBuf::new(c.from, Layout::Explicit(modifier), c.width, c.height, descs).map_err(|e| e.to_string())?;
        Ok(Described { buf, geometry, planes, base })
    })())
}

/// The frame read from its dma-buf, when the buffer is one dma-buf memory: described to
/// dmabridge (fd, the layout's modifier, the planes' offsets and strides; each plane
/// checked against the memory), put through the layout checks, and read: where the fd
/// cannot shrink, through one read-only mapping per file (kept in `state.maps`), else with
/// pread. A linear frame's visible rows alone are read (a row at a time where rows lie
/// far apart): the work and memory are the frame's, whatever its strides. `None`: not a
/// dma-buf, or a layout with no DRM modifier (it is read through GStreamer's mapping
/// instead).
fn dmabuf_input(state: &State, inbuf: &gst::Buffer) -> Option<Result<Input<'static>, String>> {
    use dmabridge::interop::dmabuf::{check_import_with, ImportFacts, ImportOptions};
    let described = describe_dmabuf(state, inbuf)?;
    let c = &state.conversion;
    Some((|| {
        let Described { buf, geometry, planes, base } = described?;
        let fd = buf.plane(0).ok_or("a dma-buf with no plane")?.fd;
        let facts = |f: dmabridge::interop::Format| {
            (f == buf.format()).then_some(ImportFacts { memory_plane_count: geometry.planes.len(), max_width: 16384, max_height: 16384, disjoint: true })
        };
        let checked = check_import_with(&buf, &facts, ImportOptions::default()).map_err(|e| e.to_string())?;
        // The whole frame, from the first plane: planes lie back to back in the fd.
        let end_of_frame = geometry.size;
        if c.from_layout == TileLayout::Linear {
            // The packed frame's bytes: its visible rows.
            let mut out = Vec::with_capacity(end_of_frame as usize);
            if checked.zero_copy_safe() {
                // One view from the first plane's first byte to the last plane's end;
                // only the visible rows' pages are touched.
                let first = planes.iter().min_by_key(|p| p.offset).ok_or("a dma-buf with no plane")?;
                let end = planes.iter().map(|p| p.end).max().unwrap_or(first.end);
                let view = state.maps.borrow_mut().map_plane(&checked, first.plane, end - first.offset).map_err(|e| e.to_string())?;
                for p in &planes {
                    // Inside the view: p.offset >= first.offset and p.end <= end.
                    let from = usize::try_from(p.offset - first.offset).map_err(|e| e.to_string())?;
                    gather_rows(p, view.bytes().get(from..).unwrap_or_default(), &mut out).map_err(|e| e.to_string())?;
                }
            } else {
                for p in &planes {
                    read_rows(fd, base, p, &mut out).map_err(|e| format!("plane {}: {e}", p.plane))?;
                }
            }
            return Ok(Input::Owned(out));
        }
        if checked.zero_copy_safe() {
            Ok(Input::Mapped(state.maps.borrow_mut().map_plane(&checked, 0, end_of_frame).map_err(|e| e.to_string())?))
        } else {
            dmabridge::interop::dmabuf::read_at(fd, base, end_of_frame, 1 << 30).map(Input::Owned).map_err(|e| e.to_string())
        }
    })())
}

/// Whether `info`'s planes are dmabridge's packed layout of `fourcc`: back to back, each
/// row exactly the visible bytes.
fn packed_layout(info: &gst_video::VideoInfo, fourcc: Fourcc) -> bool {
    let Some(fi) = dmabridge::interop::format_info(fourcc) else { return false };
    let mut at = 0usize;
    for p in 0..fi.plane_count() {
        let row = fi.min_stride(p, info.width()) as usize;
        if info.offset().get(p) != Some(&at) || info.stride().get(p).map(|s| *s as usize) != Some(row) {
            return false;
        }
        at += row * fi.plane_height(p, info.height()) as usize;
    }
    true
}

/// The packed output into GStreamer's planes, at its offsets and strides.
fn write_output(state: &State, packed: &[u8], outbuf: &mut gst::BufferRef) -> Result<(), String> {
    let info = &state.out_info;
    let fi = dmabridge::interop::format_info(state.conversion.to).ok_or("no plane table")?;
    let mut map = outbuf.map_writable().map_err(|_| "the output buffer cannot be mapped")?;
    let out = map.as_mut_slice();
    let mut at = 0usize;
    for p in 0..fi.plane_count() {
        let (offset, stride) = (info.offset()[p], info.stride()[p] as usize);
        let row = fi.min_stride(p, info.width()) as usize;
        for y in 0..fi.plane_height(p, info.height()) as usize {
            let dst = out.get_mut(offset + y * stride..offset + y * stride + row).ok_or("the output buffer is shorter than its caps say")?;
            dst.copy_from_slice(packed.get(at..at + row).ok_or("short conversion output")?);
            at += row;
        }
    }
    Ok(())
}
