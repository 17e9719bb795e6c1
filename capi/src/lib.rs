//! dmabridge's C ABI: `libdmabridge.so` and `include/dmabridge.h`, for the C video engines
//! (FFmpeg, GStreamer elements, players) that cannot call Rust.
//!
//! The frame descriptor is shaped like FFmpeg's `AVDRMFrameDescriptor` (objects = fds with a
//! size and a modifier; planes = object index, offset, pitch), so an `AVFrame` of
//! `AV_PIX_FMT_DRM_PRIME` maps onto it field for field.
//!
//! Contract of every function:
//! - No Rust panic crosses the boundary: each body runs under `catch_unwind`; a panic
//!   returns `DMB_ERR_DEVICE` with the message in `dmb_last_error`.
//! - Null pointers, negative, closed or write-only fds, counts out of range and frames the layout checks
//!   refuse return `DMB_ERR_INVALID` with a message; nothing is read through a bad pointer.
//! - fds in a `dmb_frame` are borrowed: dmabridge dups what it keeps and never closes the
//!   caller's.
//! - `dmb_last_error` is per thread and stays valid until that thread's next call.
//!
//! Threads (the header's "Threads" section says the same to C): a `dmb_engine` is shared:
//! every function takes it as `const dmb_engine *`, its lazy state is a `OnceLock`, and the
//! engine serialises its own queue. A `dmb_image` and a `dmb_participants` are one thread's
//! at a time (they may move between threads).
//!
//! `include/dmabridge.h` is generated from this crate by cbindgen (`capi/cbindgen.toml`);
//! `tests/header.rs` fails when the checked-in copy is stale and says how to regenerate it.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock, PoisonError};

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{dup_foreign_fd, DmaBuf, PlaneDesc};
use dmabridge::interop::tiling::FrameConversion;
use dmabridge::interop::{Fourcc, Layout, Modifier, TileLayout};
use dmabridge::{Converter, Engine, EngineOptions, ImportError, ImportedImage};

mod participants;
pub use participants::*;

/// What every function returns; the message is in `dmb_last_error()`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum dmb_status {
    /// Success.
    DMB_OK = 0,
    /// Bad input: a null pointer, a bad fd, a layout the checks refuse.
    DMB_ERR_INVALID = 1,
    /// Valid, but no way exists (a negotiation with no outcome, a conversion with no path).
    DMB_ERR_IMPOSSIBLE = 2,
    /// This device cannot do it (no DMA_BUF import, a format without a Vulkan mapping).
    DMB_ERR_UNSUPPORTED = 3,
    /// The device failed, or dmabridge did (a caught panic).
    DMB_ERR_DEVICE = 4,
}

use dmb_status::*;

/// `AVDRMObjectDescriptor`: one fd.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dmb_object {
    /// The dma-buf (or sealed memfd), borrowed for the call.
    pub fd: c_int,
    /// Its size in bytes.
    pub size: u64,
    /// The DRM format modifier (the same in every object of a frame).
    pub format_modifier: u64,
}

/// `AVDRMPlaneDescriptor`: where a plane lies in an object.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dmb_plane {
    /// Which of the frame's `objects` holds it.
    pub object_index: c_int,
    /// Where it starts in that object, in bytes.
    pub offset: u64,
    /// Bytes from one row to the next.
    pub pitch: u64,
}

/// A frame: the format, the extent, its objects and its planes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dmb_frame {
    /// The DRM fourcc (`DRM_FORMAT_NV12`, ...).
    pub drm_format: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// How many of `objects` are used (1..4).
    pub nb_objects: c_int,
    /// The frame's fds.
    pub objects: [dmb_object; 4],
    /// How many of `planes` are used (1..4).
    pub nb_planes: c_int,
    /// The frame's planes, in the format's plane order.
    pub planes: [dmb_plane; 4],
}

/// An engine: a Vulkan device, and the conversion pipelines made on first use. Shared by
/// every thread that has it (see "Threads").
pub struct dmb_engine {
    engine: Engine,
    /// Made by the first `dmb_convert`, on whichever thread, then shared read-only
    /// (`Converter` is `Sync`: its per-call contexts are behind its own lock).
    converter: OnceLock<Converter>,
    /// Held while the converter is made, so that two first calls make one (a failure is not
    /// kept: the next call tries again).
    making_converter: Mutex<()>,
}

impl dmb_engine {
    fn new(engine: Engine) -> dmb_engine {
        dmb_engine { engine, converter: OnceLock::new(), making_converter: Mutex::new(()) }
    }

    /// The engine's converter, made on first use.
    fn converter(&self) -> Result<&Converter, (dmb_status, String)> {
        if let Some(c) = self.converter.get() {
            return Ok(c);
        }
        // Nothing is left half-done under this lock, so a poisoned one is as good as any.
        let _making = self.making_converter.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = self.converter.get() {
            return Ok(c);
        }
        let made = Converter::new(&self.engine).map_err(|err| (DMB_ERR_DEVICE, err.to_string()))?;
        Ok(self.converter.get_or_init(|| made))
    }
}

/// An imported frame.
pub struct dmb_image {
    image: ImportedImage,
}

// The thread rules rest on these: an engine is used from several threads at once, an image
// and a participant builder move between them.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    const fn movable<T: Send>() {}
    shared::<dmb_engine>();
    shared::<dmb_image>();
    movable::<dmb_participants>();
};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(message: &str) {
    // An interior NUL would truncate the message; keep what precedes it.
    let clean: String = message.chars().take_while(|c| *c != '\0').collect();
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(clean).unwrap_or_default());
}

/// Runs `body`, turning an `Err` into its status and message and a panic into
/// `DMB_ERR_DEVICE`.
fn guard(body: impl FnOnce() -> Result<(), (dmb_status, String)>) -> dmb_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            set_error("");
            DMB_OK
        }
        Ok(Err((status, message))) => {
            set_error(&message);
            status
        }
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| (*s).to_owned()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default();
            set_error(&format!("internal error (a panic, caught at the C boundary): {what}"));
            DMB_ERR_DEVICE
        }
    }
}

fn invalid(message: impl Into<String>) -> (dmb_status, String) {
    (DMB_ERR_INVALID, message.into())
}

/// The C string at `p` (which must not be null), as UTF-8 (lossily), or why not.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn string_arg(p: *const c_char, what: &str) -> Result<String, (dmb_status, String)> {
    if p.is_null() {
        return Err(invalid(format!("{what} is null")));
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// This thread's last error message ("" after a success). Valid until this thread's next
/// dmabridge call; never null.
#[no_mangle]
pub extern "C" fn dmb_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Gives the caller a new `dmb_engine` for `engine` in `*out`; `dmb_engine_free` frees it.
///
/// # Safety
/// `out` is non-null and writable for one pointer.
unsafe fn hand_out(engine: Engine, out: *mut *mut dmb_engine) {
    let boxed = Box::into_raw(Box::new(dmb_engine::new(engine)));
    // SAFETY: the caller's contract.
    unsafe { *out = boxed };
}

/// A new engine on the best Vulkan device (`DMABRIDGE_DEVICE` picks another,
/// `DMABRIDGE_VALIDATION=1` turns the validation layer on).
///
/// # Safety
/// `out` is null or points to writable storage for one pointer.
#[no_mangle]
pub unsafe extern "C" fn dmb_engine_new(out: *mut *mut dmb_engine) -> dmb_status {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        let engine = Engine::new(&EngineOptions::from_env()).map_err(|e| (DMB_ERR_DEVICE, e.to_string()))?;
        // SAFETY: `out` was checked non-null; writable is the caller's contract.
        unsafe { hand_out(engine, out) };
        Ok(())
    })
}

/// A Vulkan function, as `vkGetInstanceProcAddr` returns it (`PFN_vkVoidFunction`).
pub type dmb_void_fn = Option<unsafe extern "system" fn()>;

/// A host's `vkGetInstanceProcAddr`.
pub type dmb_get_instance_proc_addr = Option<unsafe extern "system" fn(instance: *mut std::ffi::c_void, name: *const c_char) -> dmb_void_fn>;

/// The host engine's Vulkan objects, for [`dmb_engine_from_host`]. Handles are the host's
/// `VkInstance`, `VkPhysicalDevice` and `VkDevice` (dispatchable handles: pointers).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dmb_host_vulkan {
    /// `VkInstance`.
    pub instance: *mut std::ffi::c_void,
    /// `VkPhysicalDevice`.
    pub physical_device: *mut std::ffi::c_void,
    /// `VkDevice`, created from `physical_device`.
    pub device: *mut std::ffi::c_void,
    /// The `apiVersion` the instance was created with (at least Vulkan 1.2).
    pub instance_api_version: u32,
    /// A queue family with compute support, which dmabridge submits to.
    pub queue_family_index: u32,
    /// The queue's index in that family.
    pub queue_index: u32,
    /// The host's loader entry point.
    pub get_instance_proc_addr: dmb_get_instance_proc_addr,
    /// The device extensions the host enabled; dmabridge uses only those.
    pub enabled_device_extensions: *const *const c_char,
    /// How many strings `enabled_device_extensions` holds.
    pub enabled_device_extension_count: usize,
    /// Non-zero when the host enabled `timelineSemaphore` (required).
    pub timeline_semaphore: c_int,
    /// Non-zero when the host enabled `samplerYcbcrConversion` (NV12 sampling).
    pub sampler_ycbcr_conversion: c_int,
    /// Called once, with `user`, on any thread, when dmabridge is done with the device
    /// (after the engine and every image made from it are freed): the host may destroy it
    /// from then on. May be NULL.
    pub on_drop: Option<unsafe extern "C" fn(user: *mut std::ffi::c_void)>,
    /// `on_drop`'s argument.
    pub user: *mut std::ffi::c_void,
}

/// The host's drop callback and its argument, called on whichever thread frees last.
struct HostDrop {
    callback: unsafe extern "C" fn(*mut std::ffi::c_void),
    user: *mut std::ffi::c_void,
}

// SAFETY: the header's contract: `on_drop` may be called from any thread with `user`.
unsafe impl Send for HostDrop {}
// SAFETY: as above; it is only ever called once, by value.
unsafe impl Sync for HostDrop {}

impl HostDrop {
    fn call(self) {
        // SAFETY: the host's callback, with the argument it gave, once (the header's contract).
        unsafe { (self.callback)(self.user) }
    }
}

/// An engine on the host's own instance, device and queue (see `dmb_host_vulkan`): the C
/// face of `Engine::from_host`. dmabridge uses the extensions and features the host
/// enabled and nothing more; a device without what the core needs (Vulkan 1.2, timeline
/// semaphores) is `DMB_ERR_UNSUPPORTED`, naming what is missing.
///
/// # Safety
/// `host` is null or points to a valid `dmb_host_vulkan` whose handles are valid, created as
/// it says, and outlive the engine and its images (until `on_drop` runs); its extension
/// array holds `enabled_device_extension_count` NUL-terminated strings; the host submits to
/// that queue only while dmabridge is not using it. `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn dmb_engine_from_host(host: *const dmb_host_vulkan, out: *mut *mut dmb_engine) -> dmb_status {
    use dmabridge::ash::vk::Handle;
    guard(|| {
        if host.is_null() || out.is_null() {
            return Err(invalid("host or out is null"));
        }
        // SAFETY: non-null and valid for reads (the caller's contract).
        let h = unsafe { *host };
        if h.instance.is_null() || h.physical_device.is_null() || h.device.is_null() {
            return Err(invalid("the instance, physical device and device must all be given"));
        }
        let gipa = h.get_instance_proc_addr.ok_or_else(|| invalid("get_instance_proc_addr is null"))?;
        if h.enabled_device_extension_count > 1024 || (h.enabled_device_extension_count > 0 && h.enabled_device_extensions.is_null()) {
            return Err(invalid(format!("{} device extensions at a null or oversized array", h.enabled_device_extension_count)));
        }
        let mut extensions = Vec::with_capacity(h.enabled_device_extension_count);
        for i in 0..h.enabled_device_extension_count {
            // SAFETY: the array has `enabled_device_extension_count` entries (the contract).
            let name = unsafe { *h.enabled_device_extensions.add(i) };
            if name.is_null() {
                return Err(invalid(format!("device extension {i} is null")));
            }
            // SAFETY: a NUL-terminated string (the contract).
            extensions.push(unsafe { CStr::from_ptr(name) }.to_owned());
        }
        // The C and the ash function types differ only in how the handle is spelled: a
        // dispatchable handle is a pointer either way.
        // SAFETY: same ABI ("system"), same argument and return layout (pointer, pointer -> fn pointer).
        let static_fn = dmabridge::ash::StaticFn { get_instance_proc_addr: unsafe { std::mem::transmute::<unsafe extern "system" fn(*mut std::ffi::c_void, *const c_char) -> Option<unsafe extern "system" fn()>, vk::PFN_vkGetInstanceProcAddr>(gipa) } };
        let instance = vk::Instance::from_raw(h.instance as u64);
        // SAFETY: the host's loader entry point (the contract).
        let entry = unsafe { dmabridge::ash::Entry::from_static_fn(static_fn.clone()) };
        // SAFETY: a valid instance from that loader (the contract).
        let ash_instance = unsafe { dmabridge::ash::Instance::load(&static_fn, instance) };
        // SAFETY: a valid device of that instance (the contract).
        let device = unsafe { dmabridge::ash::Device::load(ash_instance.fp_v1_0(), vk::Device::from_raw(h.device as u64)) };
        let on_drop = h.on_drop.map(|callback| HostDrop { callback, user: h.user });
        let host = dmabridge::HostVulkan {
            entry,
            instance: ash_instance,
            instance_api_version: h.instance_api_version,
            physical_device: vk::PhysicalDevice::from_raw(h.physical_device as u64),
            device,
            queue_family_index: h.queue_family_index,
            queue_index: h.queue_index,
            enabled_device_extensions: extensions,
            enabled_features: dmabridge::EnabledFeatures { timeline_semaphore: h.timeline_semaphore != 0, sampler_ycbcr_conversion: h.sampler_ycbcr_conversion != 0 },
            on_drop: on_drop.map(|d| Box::new(move || d.call()) as Box<dyn FnOnce() + Send + Sync>),
        };
        // SAFETY: forwarded from this function's contract, which is Engine::from_host's.
        let engine = unsafe { Engine::from_host(host) }.map_err(|e| {
            let status = if matches!(e, dmabridge::EngineError::MissingRequirement { .. } | dmabridge::EngineError::BadQueueFamily(_)) { DMB_ERR_UNSUPPORTED } else { DMB_ERR_DEVICE };
            (status, e.to_string())
        })?;
        // SAFETY: `out` was checked non-null; writable is the caller's contract.
        unsafe { hand_out(engine, out) };
        Ok(())
    })
}

/// Frees an engine (null is ignored). Images made from it keep the device alive until they
/// are freed too.
///
/// # Safety
/// `e` is null or came from `dmb_engine_new` or `dmb_engine_from_host`, no other thread is
/// using it, and it is not used again.
#[no_mangle]
pub unsafe extern "C" fn dmb_engine_free(e: *mut dmb_engine) {
    if !e.is_null() {
        // SAFETY: made by Box::into_raw in dmb_engine_new; the caller gives it up.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(e) })));
    }
}

/// The number of warnings and errors the validation layer reported on this engine's device
/// (0 when validation is off: `DMABRIDGE_VALIDATION=1` turns it on), or -1 for a null engine.
///
/// # Safety
/// `e` is null or came from `dmb_engine_new`.
#[no_mangle]
pub unsafe extern "C" fn dmb_engine_validation_problems(e: *const dmb_engine) -> c_int {
    if e.is_null() {
        return -1;
    }
    // SAFETY: non-null and valid (the caller's contract).
    let e = unsafe { &*e };
    catch_unwind(AssertUnwindSafe(|| e.engine.validation().map_or(0, |v| v.problems().len()))).map_or(-1, |n| c_int::try_from(n).unwrap_or(c_int::MAX))
}

/// Frees a string dmabridge returned (null is ignored).
///
/// # Safety
/// `s` is null or came from a dmabridge function and is not used again.
#[no_mangle]
pub unsafe extern "C" fn dmb_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: made by CString::into_raw in dmabridge; the caller gives it up.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// The frame as a dmabridge descriptor, every fd checked to be open and dup'd.
fn descriptor(f: &dmb_frame) -> Result<DmaBuf, (dmb_status, String)> {
    let nb_objects = usize::try_from(f.nb_objects).ok().filter(|n| (1..=4).contains(n)).ok_or_else(|| invalid(format!("nb_objects {} is not 1..4", f.nb_objects)))?;
    let nb_planes = usize::try_from(f.nb_planes).ok().filter(|n| (1..=4).contains(n)).ok_or_else(|| invalid(format!("nb_planes {} is not 1..4", f.nb_planes)))?;
    let modifier = f.objects[0].format_modifier;
    if f.objects[..nb_objects].iter().any(|o| o.format_modifier != modifier) {
        return Err(invalid("objects disagree on the format modifier"));
    }
    let mut planes = Vec::with_capacity(nb_planes);
    for (i, p) in f.planes[..nb_planes].iter().enumerate() {
        let o = usize::try_from(p.object_index).ok().filter(|o| *o < nb_objects).ok_or_else(|| invalid(format!("plane {i}: object_index {} is not below nb_objects {nb_objects}", p.object_index)))?;
        // The caller's for the duration of this call; we keep a dup.
        let fd = dup_foreign_fd(f.objects[o].fd).map_err(|e| invalid(format!("plane {i}: {e}")))?;
        planes.push(PlaneDesc { fd, offset: p.offset, stride: p.pitch });
    }
    DmaBuf::new(Fourcc::from_code(f.drm_format), Layout::from_wire(Modifier::from_raw(modifier)), f.width, f.height, planes).map_err(|e| invalid(e.to_string()))
}

/// Checks and imports a frame for sampling and reading back. The fds are borrowed.
///
/// # Safety
/// `e` came from `dmb_engine_new` or `dmb_engine_from_host`; `f` points to a `dmb_frame`;
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn dmb_import(e: *const dmb_engine, f: *const dmb_frame, out: *mut *mut dmb_image) -> dmb_status {
    guard(|| {
        if e.is_null() || f.is_null() || out.is_null() {
            return Err(invalid("engine, frame or out is null"));
        }
        // SAFETY: non-null and valid (the caller's contract).
        let (e, f) = unsafe { (&*e, &*f) };
        let buf = descriptor(f)?;
        let usage = vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC;
        let image = e.engine.import_dmabuf(&buf, usage).map_err(|err| {
            let status = match &err {
                ImportError::Check(_) | ImportError::NeedsConversion(_) | ImportError::Read { .. } | ImportError::Changed { .. } => DMB_ERR_INVALID,
                ImportError::UnknownFourcc(_) | ImportError::Unsupported(_) | ImportError::NotZeroCopy(_) => DMB_ERR_UNSUPPORTED,
                _ => DMB_ERR_DEVICE,
            };
            (status, err.to_string())
        })?;
        let boxed = Box::into_raw(Box::new(dmb_image { image }));
        // SAFETY: writable (the caller's contract).
        unsafe { *out = boxed };
        Ok(())
    })
}

/// Reads an imported frame back through the GPU: its planes' visible rows, tightly packed,
/// one plane after another, into `dst` (at least that many bytes).
///
/// # Safety
/// `img` came from `dmb_import`; `dst` points to `dst_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn dmb_image_read(img: *const dmb_image, dst: *mut u8, dst_size: u64) -> dmb_status {
    guard(|| {
        if img.is_null() || dst.is_null() {
            return Err(invalid("image or dst is null"));
        }
        // SAFETY: non-null and valid (the caller's contract).
        let img = unsafe { &*img };
        let bytes = img.image.read_back().map_err(|e| (DMB_ERR_DEVICE, e.to_string()))?;
        if (bytes.len() as u64) > dst_size {
            return Err(invalid(format!("dst holds {dst_size} bytes; the frame is {}", bytes.len())));
        }
        // SAFETY: dst holds dst_size >= bytes.len() writable bytes (the caller's contract)
        // and cannot overlap dmabridge's own buffer.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
        Ok(())
    })
}

/// Frees an image (null is ignored).
///
/// # Safety
/// `img` is null or came from `dmb_import` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn dmb_image_free(img: *mut dmb_image) {
    if !img.is_null() {
        // SAFETY: made by Box::into_raw in dmb_import; the caller gives it up.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(img) })));
    }
}

/// Converts one frame between layouts (names as `dmabridge convert` takes them:
/// `samsung-64x32`, `linear`, or a hex modifier) in `drm_format`, on the path the cost
/// model picks. `src` is the whole input frame, `dst` receives the whole output frame.
/// The first call makes the engine's conversion pipelines (once, whichever thread comes
/// first); calls on one engine may run at once from several threads.
///
/// # Safety
/// `e` came from `dmb_engine_new` or `dmb_engine_from_host`; the layouts are
/// NUL-terminated strings; `src` points to `src_size` readable bytes and `dst` to
/// `dst_size` writable ones.
#[no_mangle]
pub unsafe extern "C" fn dmb_convert(
    e: *const dmb_engine,
    from_layout: *const c_char,
    to_layout: *const c_char,
    drm_format: u32,
    width: u32,
    height: u32,
    src: *const u8,
    src_size: u64,
    dst: *mut u8,
    dst_size: u64,
) -> dmb_status {
    guard(|| {
        if e.is_null() || from_layout.is_null() || to_layout.is_null() || src.is_null() || dst.is_null() {
            return Err(invalid("engine, a layout, src or dst is null"));
        }
        // SAFETY: non-null, valid, NUL-terminated (the caller's contract).
        let (e, from, to) = unsafe { (&*e, CStr::from_ptr(from_layout), CStr::from_ptr(to_layout)) };
        let layout = |s: &CStr| s.to_str().ok().and_then(|s| s.parse::<TileLayout>().ok()).ok_or_else(|| invalid(format!("unknown layout {s:?}")));
        let fourcc = Fourcc::from_code(drm_format);
        let c = FrameConversion::new((layout(from)?, fourcc), (layout(to)?, fourcc), width, height);
        let (in_size, out_size) = c.sizes().map_err(|err| invalid(err.to_string()))?;
        if src_size < in_size || dst_size < out_size {
            return Err(invalid(format!("{c} reads {in_size} and writes {out_size} bytes; src holds {src_size}, dst {dst_size}")));
        }
        // SAFETY: src holds src_size >= in_size readable bytes, dst dst_size >= out_size
        // writable ones (the caller's contract), and the two do not overlap (the C caller's
        // buffers are distinct, as for memcpy).
        let (input, output) = unsafe { (std::slice::from_raw_parts(src, in_size as usize), std::slice::from_raw_parts_mut(dst, out_size as usize)) };
        let conv = e.converter()?;
        let choice = conv.choose(&c, None).map_err(|err| (DMB_ERR_IMPOSSIBLE, err.to_string()))?;
        conv.convert_frame_into(&c, choice.path, input, output).map_err(|err| (DMB_ERR_DEVICE, err.to_string()))
    })
}
