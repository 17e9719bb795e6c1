//! EGL and GLES on Mesa (llvmpipe), for the cross-API tests: a surfaceless display, a GLES 3
//! context current on the calling thread, dma-buf import (`EGL_EXT_image_dma_buf_import` with
//! `_modifiers`), dma-buf export (`EGL_MESA_image_dma_buf_export`), textures, framebuffers and
//! `glReadPixels`.
//!
//! libEGL.so.1 is loaded at run time (`khronos-egl`'s `dynamic` feature) and every GL entry
//! point comes from `eglGetProcAddress`, so nothing links against EGL or GLES at build time.
//!
//! fd ownership: EGL's dma-buf import *borrows* the fds (the driver dups what it keeps), so
//! the [`DmaBuf`] keeps its fds; `eglExportDMABUFImageMESA` hands out new fds, which are
//! wrapped in [`OwnedFd`] at once.
//!
//! Threading: a [`Gles`] makes its context current on the thread that created it and is not
//! `Send`. Mesa hands every caller the same surfaceless `EGLDisplay`, and [`Gles`]'s drop
//! terminates it, so callers must not hold two [`Gles`] at once (the tests serialise on a lock).
#![allow(dead_code)]

use std::ffi::{c_void, CStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use dmabridge::interop::dmabuf::{DmaBuf, PlaneDesc};
use dmabridge::interop::{Fourcc, Modifier};
use khronos_egl as egl;

pub type Egl = egl::DynamicInstance<egl::EGL1_5>;

// EGL enums that khronos-egl does not define (from eglext.h).
const PLATFORM_SURFACELESS_MESA: egl::Enum = 0x31DD;
const PLATFORM_DEVICE_EXT: egl::Enum = 0x313F;
/// `EGLDeviceEXT` entry points (EGL_EXT_device_enumeration, EGL_EXT_device_query).
type QueryDevicesExt = unsafe extern "system" fn(max: egl::Int, devices: *mut *mut c_void, count: *mut egl::Int) -> egl::Boolean;
type QueryDeviceStringExt = unsafe extern "system" fn(device: *mut c_void, name: egl::Int) -> *const std::ffi::c_char;
const LINUX_DMA_BUF_EXT: egl::Enum = 0x3270;
const LINUX_DRM_FOURCC_EXT: egl::Attrib = 0x3271;
/// Per plane: FD, OFFSET, PITCH, MODIFIER_LO, MODIFIER_HI.
const PLANE_ATTRIBS: [[egl::Attrib; 5]; 4] = [
    [0x3272, 0x3273, 0x3274, 0x3443, 0x3444],
    [0x3275, 0x3276, 0x3277, 0x3445, 0x3446],
    [0x3278, 0x3279, 0x327A, 0x3447, 0x3448],
    [0x3440, 0x3441, 0x3442, 0x3449, 0x344A],
];

// GL types and enums (from gl2.h / gl2ext.h).
pub type GLenum = u32;
pub type GLuint = u32;
pub type GLint = i32;
pub type GLsizei = i32;
pub const GL_NO_ERROR: GLenum = 0;
pub const GL_EXTENSIONS: GLenum = 0x1F03;
pub const GL_TEXTURE_2D: GLenum = 0x0DE1;
pub const GL_TEXTURE_MIN_FILTER: GLenum = 0x2801;
pub const GL_TEXTURE_MAG_FILTER: GLenum = 0x2800;
pub const GL_NEAREST: GLint = 0x2600;
pub const GL_RGBA: GLenum = 0x1908;
pub const GL_BGRA_EXT: GLenum = 0x80E1;
pub const GL_UNSIGNED_BYTE: GLenum = 0x1401;
pub const GL_FRAMEBUFFER: GLenum = 0x8D40;
pub const GL_COLOR_ATTACHMENT0: GLenum = 0x8CE0;
pub const GL_FRAMEBUFFER_COMPLETE: GLenum = 0x8CD5;
pub const GL_COLOR_BUFFER_BIT: u32 = 0x4000;
pub const GL_SCISSOR_TEST: GLenum = 0x0C11;
pub const GL_PACK_ALIGNMENT: GLenum = 0x0D05;
pub const GL_UNPACK_ALIGNMENT: GLenum = 0x0CF5;

/// The GL entry points the tests use, from `eglGetProcAddress`.
struct Gl {
    get_error: unsafe extern "system" fn() -> GLenum,
    get_string: unsafe extern "system" fn(GLenum) -> *const u8,
    gen_textures: unsafe extern "system" fn(GLsizei, *mut GLuint),
    delete_textures: unsafe extern "system" fn(GLsizei, *const GLuint),
    bind_texture: unsafe extern "system" fn(GLenum, GLuint),
    tex_parameter_i: unsafe extern "system" fn(GLenum, GLenum, GLint),
    tex_image_2d:
        unsafe extern "system" fn(GLenum, GLint, GLint, GLsizei, GLsizei, GLint, GLenum, GLenum, *const c_void),
    tex_sub_image_2d:
        unsafe extern "system" fn(GLenum, GLint, GLint, GLint, GLsizei, GLsizei, GLenum, GLenum, *const c_void),
    pixel_store_i: unsafe extern "system" fn(GLenum, GLint),
    gen_framebuffers: unsafe extern "system" fn(GLsizei, *mut GLuint),
    delete_framebuffers: unsafe extern "system" fn(GLsizei, *const GLuint),
    bind_framebuffer: unsafe extern "system" fn(GLenum, GLuint),
    framebuffer_texture_2d: unsafe extern "system" fn(GLenum, GLenum, GLenum, GLuint, GLint),
    check_framebuffer_status: unsafe extern "system" fn(GLenum) -> GLenum,
    clear_color: unsafe extern "system" fn(f32, f32, f32, f32),
    clear: unsafe extern "system" fn(u32),
    enable: unsafe extern "system" fn(GLenum),
    disable: unsafe extern "system" fn(GLenum),
    scissor: unsafe extern "system" fn(GLint, GLint, GLsizei, GLsizei),
    finish: unsafe extern "system" fn(),
    read_pixels: unsafe extern "system" fn(GLint, GLint, GLsizei, GLsizei, GLenum, GLenum, *mut c_void),
    egl_image_target_texture_2d_oes: unsafe extern "system" fn(GLenum, *mut c_void),
}

type QueryDmaBufFormats =
    unsafe extern "system" fn(*mut c_void, egl::Int, *mut egl::Int, *mut egl::Int) -> egl::Boolean;
type QueryDmaBufModifiers = unsafe extern "system" fn(
    *mut c_void,
    egl::Int,
    egl::Int,
    *mut u64,
    *mut egl::Boolean,
    *mut egl::Int,
) -> egl::Boolean;
type ExportQuery = unsafe extern "system" fn(*mut c_void, *mut c_void, *mut i32, *mut i32, *mut u64) -> egl::Boolean;
type Export =
    unsafe extern "system" fn(*mut c_void, *mut c_void, *mut i32, *mut egl::Int, *mut egl::Int) -> egl::Boolean;

/// Loads one entry point as the function type the context asks for (`load_fn` with `?`).
macro_rules! proc_addr {
    ($egl:expr, $name:literal) => {
        load_fn(&$egl, $name)?
    };
}

/// `eglGetProcAddress(name)` as `T`, which must be `name`'s C function-pointer type (every
/// caller passes one of the signatures above, from gl2.h, gl2ext.h and eglext.h).
fn load_fn<T: Copy>(egl: &Egl, name: &str) -> Result<T, String> {
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<extern "system" fn()>(), "{name}: not a function pointer");
    let f = egl.get_proc_address(name).ok_or_else(|| format!("eglGetProcAddress(\"{name}\") returned NULL"))?;
    // SAFETY: `f` is the address Mesa returned for `name`, and T is that function's C
    // signature with the platform calling convention ("system" is the C ABI on Linux), a
    // function pointer of the same size (asserted above).
    Ok(unsafe { std::mem::transmute_copy::<extern "system" fn(), T>(&f) })
}

/// A surfaceless EGL display with a GLES 3 context current on this thread.
pub struct Gles {
    egl: Egl,
    display: egl::Display,
    context: egl::Context,
    extensions: String,
    gl_extensions: String,
    gl: Gl,
    export_query: Option<ExportQuery>,
    export: Option<Export>,
}

/// What `eglExportDMABUFImageMESA` gave: new fds, owned here.
#[derive(Debug)]
pub struct EglExport {
    pub fourcc: Fourcc,
    pub modifier: Modifier,
    pub planes: Vec<PlaneDesc>,
}

/// The EGL device that is Mesa's software rasterizer (`EGL_MESA_device_software`), where
/// the client has `EGL_EXT_device_enumeration` and `EGL_EXT_platform_device`.
fn software_device(egl: &Egl, client: &str) -> Result<Option<*mut c_void>, String> {
    if !has_ext(client, "EGL_EXT_device_enumeration") || !has_ext(client, "EGL_EXT_platform_device") {
        return Ok(None);
    }
    let query_devices: QueryDevicesExt = load_fn(egl, "eglQueryDevicesEXT")?;
    let query_string: QueryDeviceStringExt = load_fn(egl, "eglQueryDeviceStringEXT")?;
    let mut devices = [std::ptr::null_mut::<c_void>(); 16];
    let mut count: egl::Int = 0;
    // SAFETY: `devices` has room for the 16 handles asked for and `count` is writable
    // (EGL_EXT_device_enumeration).
    if unsafe { query_devices(devices.len() as egl::Int, devices.as_mut_ptr(), &mut count) } != egl::TRUE {
        return Err("eglQueryDevicesEXT failed".into());
    }
    for &device in devices.iter().take(usize::try_from(count).unwrap_or(0)) {
        // SAFETY: a device eglQueryDevicesEXT returned; EGL_EXTENSIONS is a string query
        // every device answers (EGL_EXT_device_query), with a NUL-terminated string or NULL.
        let ext = unsafe { query_string(device, egl::EXTENSIONS) };
        if ext.is_null() {
            continue;
        }
        // SAFETY: non-null, NUL-terminated, owned by EGL for the device's lifetime.
        let ext = unsafe { CStr::from_ptr(ext) }.to_string_lossy();
        if has_ext(&ext, "EGL_MESA_device_software") {
            return Ok(Some(device));
        }
    }
    Ok(None)
}

/// Why an EGL export could not be made.
#[derive(Debug)]
pub enum ExportFailure {
    /// The display does not advertise `EGL_MESA_image_dma_buf_export`; the entry points were
    /// not called (Mesa only asserts the extension in debug builds, so calling them anyway
    /// is undefined).
    NotAdvertised,
    Query(Option<egl::Error>),
    Export(Option<egl::Error>),
    /// The export reported a plane without an fd.
    NoFd {
        plane: usize,
    },
}

impl Gles {
    /// Loads libEGL.so.1, opens Mesa's surfaceless platform and makes a GLES 3 context current.
    /// The error says what is missing; callers fail the test with it.
    pub fn new() -> Result<Gles, String> {
        // SAFETY: loads the system's libEGL.so.1 (libglvnd), a conforming EGL 1.5
        // implementation on a machine provisioned by scripts/setup.sh; no other code in the
        // process relies on it being absent.
        let egl = unsafe { Egl::load_required() }.map_err(|e| format!("cannot load libEGL.so.1 with EGL 1.5: {e}"))?;
        let client = egl
            .query_string(None, egl::EXTENSIONS)
            .map_err(|e| format!("eglQueryString(EGL_NO_DISPLAY, EGL_EXTENSIONS): {e}"))?
            .to_string_lossy()
            .into_owned();
        if !has_ext(&client, "EGL_MESA_platform_surfaceless") {
            return Err(format!(
                "EGL has no EGL_MESA_platform_surfaceless (is libegl-mesa0 installed?); client extensions: {client}"
            ));
        }
        // The software device (llvmpipe) by name where EGL enumerates devices: the
        // surfaceless platform takes the first render node instead, and a DRM device Mesa
        // has no driver for (vgem, in the kernel lab) makes it fail.
        let display = match software_device(&egl, &client)? {
            // SAFETY: EGL_EXT_platform_device takes an EGLDeviceEXT from eglQueryDevicesEXT
            // as its native display; the attribute list is terminated.
            Some(device) => unsafe { egl.get_platform_display(PLATFORM_DEVICE_EXT, device, &[egl::ATTRIB_NONE]) }
                .map_err(|e| format!("eglGetPlatformDisplay(DEVICE_EXT, the software device): {e}"))?,
            // SAFETY: the surfaceless platform takes EGL_DEFAULT_DISPLAY (NULL) as its native
            // display (EGL_MESA_platform_surfaceless); the attribute list is terminated.
            None => unsafe { egl.get_platform_display(PLATFORM_SURFACELESS_MESA, egl::DEFAULT_DISPLAY, &[egl::ATTRIB_NONE]) }
                .map_err(|e| format!("eglGetPlatformDisplay(SURFACELESS_MESA): {e}"))?,
        };
        egl.initialize(display).map_err(|e| format!("eglInitialize: {e}"))?;
        let extensions = egl
            .query_string(Some(display), egl::EXTENSIONS)
            .map_err(|e| format!("eglQueryString(EGL_EXTENSIONS): {e}"))?
            .to_string_lossy()
            .into_owned();
        for needed in [
            "EGL_KHR_no_config_context",
            "EGL_KHR_surfaceless_context",
            "EGL_KHR_gl_texture_2D_image",
            "EGL_EXT_image_dma_buf_import",
            "EGL_EXT_image_dma_buf_import_modifiers",
        ] {
            if !has_ext(&extensions, needed) {
                return Err(format!("the EGL display lacks {needed}; it has: {extensions}"));
            }
        }
        egl.bind_api(egl::OPENGL_ES_API).map_err(|e| format!("eglBindAPI(OPENGL_ES): {e}"))?;
        // SAFETY: EGL_NO_CONFIG_KHR (NULL) is a valid config argument to eglCreateContext
        // when the display has EGL_KHR_no_config_context, checked above.
        let no_config = unsafe { egl::Config::from_ptr(std::ptr::null_mut()) };
        let context = egl
            .create_context(display, no_config, None, &[egl::CONTEXT_MAJOR_VERSION, 3, egl::NONE])
            .map_err(|e| format!("eglCreateContext(GLES 3, no config): {e}"))?;
        if let Err(e) = egl.make_current(display, None, None, Some(context)) {
            let _ = egl.destroy_context(display, context);
            return Err(format!("eglMakeCurrent(surfaceless): {e}"));
        }
        let gl = Gl {
            get_error: proc_addr!(egl, "glGetError"),
            get_string: proc_addr!(egl, "glGetString"),
            gen_textures: proc_addr!(egl, "glGenTextures"),
            delete_textures: proc_addr!(egl, "glDeleteTextures"),
            bind_texture: proc_addr!(egl, "glBindTexture"),
            tex_parameter_i: proc_addr!(egl, "glTexParameteri"),
            tex_image_2d: proc_addr!(egl, "glTexImage2D"),
            tex_sub_image_2d: proc_addr!(egl, "glTexSubImage2D"),
            pixel_store_i: proc_addr!(egl, "glPixelStorei"),
            gen_framebuffers: proc_addr!(egl, "glGenFramebuffers"),
            delete_framebuffers: proc_addr!(egl, "glDeleteFramebuffers"),
            bind_framebuffer: proc_addr!(egl, "glBindFramebuffer"),
            framebuffer_texture_2d: proc_addr!(egl, "glFramebufferTexture2D"),
            check_framebuffer_status: proc_addr!(egl, "glCheckFramebufferStatus"),
            clear_color: proc_addr!(egl, "glClearColor"),
            clear: proc_addr!(egl, "glClear"),
            enable: proc_addr!(egl, "glEnable"),
            disable: proc_addr!(egl, "glDisable"),
            scissor: proc_addr!(egl, "glScissor"),
            finish: proc_addr!(egl, "glFinish"),
            read_pixels: proc_addr!(egl, "glReadPixels"),
            egl_image_target_texture_2d_oes: proc_addr!(egl, "glEGLImageTargetTexture2DOES"),
        };
        // Only resolved where advertised: see ExportFailure::NotAdvertised.
        let (export_query, export): (Option<ExportQuery>, Option<Export>) =
            if has_ext(&extensions, "EGL_MESA_image_dma_buf_export") {
                (
                    Some(proc_addr!(egl, "eglExportDMABUFImageQueryMESA")),
                    Some(proc_addr!(egl, "eglExportDMABUFImageMESA")),
                )
            } else {
                (None, None)
            };
        // SAFETY: a context is current on this thread; GL_EXTENSIONS is a valid glGetString
        // name in GLES 3, which returns a static NUL-terminated string (or NULL on error).
        let ptr = unsafe { (gl.get_string)(GL_EXTENSIONS) };
        if ptr.is_null() {
            return Err("glGetString(GL_EXTENSIONS) returned NULL".into());
        }
        // SAFETY: non-NULL, NUL-terminated, owned by the GL implementation for the context's life.
        let gl_extensions = unsafe { CStr::from_ptr(ptr.cast()) }.to_string_lossy().into_owned();
        let gles = Gles { egl, display, context, extensions, gl_extensions, gl, export_query, export };
        for needed in ["GL_OES_EGL_image", "GL_EXT_texture_format_BGRA8888"] {
            if !gles.has_gl_ext(needed) {
                return Err(format!("the GLES context lacks {needed}"));
            }
        }
        Ok(gles)
    }

    pub fn has_ext(&self, name: &str) -> bool {
        has_ext(&self.extensions, name)
    }

    pub fn has_gl_ext(&self, name: &str) -> bool {
        has_ext(&self.gl_extensions, name)
    }

    /// Fails the test if GL recorded an error (glGetError drains one flag per call).
    pub fn check_gl(&self, step: &str) {
        // SAFETY: a context is current on this thread (made so in new()).
        let err = unsafe { (self.gl.get_error)() };
        assert_eq!(err, GL_NO_ERROR, "GL error 0x{err:04x} after {step}");
    }

    /// Fails the test if EGL recorded an error on this thread.
    pub fn check_egl(&self, step: &str) {
        let err = self.egl.get_error();
        assert!(err.is_none(), "EGL error {err:?} after {step}");
    }

    /// `eglQueryDmaBufModifiersEXT` for one format: (modifier, external_only) pairs.
    pub fn dmabuf_modifiers(&self, fourcc: Fourcc) -> Vec<(Modifier, bool)> {
        let query_formats: QueryDmaBufFormats = proc_addr_or_panic(&self.egl, "eglQueryDmaBufFormatsEXT");
        let query_modifiers: QueryDmaBufModifiers = proc_addr_or_panic(&self.egl, "eglQueryDmaBufModifiersEXT");
        let mut n = 0;
        // SAFETY: EGL_EXT_image_dma_buf_import_modifiers is advertised (checked in new());
        // max 0 with NULL asks for the count only.
        let ok = unsafe { query_formats(self.display.as_ptr(), 0, std::ptr::null_mut(), &mut n) };
        assert_eq!(ok, egl::TRUE, "eglQueryDmaBufFormatsEXT(count): {:?}", self.egl.get_error());
        let mut formats = vec![0; n as usize];
        // SAFETY: `formats` has room for `n` entries, the count passed as max.
        let ok = unsafe { query_formats(self.display.as_ptr(), n, formats.as_mut_ptr(), &mut n) };
        assert_eq!(ok, egl::TRUE, "eglQueryDmaBufFormatsEXT: {:?}", self.egl.get_error());
        if !formats[..n as usize].contains(&(fourcc.code() as egl::Int)) {
            return Vec::new();
        }
        let code = fourcc.code() as egl::Int;
        let mut m = 0;
        // SAFETY: as above, count only.
        let ok = unsafe {
            query_modifiers(self.display.as_ptr(), code, 0, std::ptr::null_mut(), std::ptr::null_mut(), &mut m)
        };
        assert_eq!(ok, egl::TRUE, "eglQueryDmaBufModifiersEXT(count): {:?}", self.egl.get_error());
        let mut mods = vec![0u64; m as usize];
        let mut ext_only = vec![0 as egl::Boolean; m as usize];
        // SAFETY: both arrays hold `m` entries, the count passed as max.
        let ok = unsafe {
            query_modifiers(self.display.as_ptr(), code, m, mods.as_mut_ptr(), ext_only.as_mut_ptr(), &mut m)
        };
        assert_eq!(ok, egl::TRUE, "eglQueryDmaBufModifiersEXT: {:?}", self.egl.get_error());
        mods.iter().zip(&ext_only).take(m as usize).map(|(&m, &e)| (Modifier::from_raw(m), e == egl::TRUE)).collect()
    }

    /// Imports a dma-buf descriptor as an EGLImage, with every plane's fd, offset and pitch,
    /// and the modifier where the layout is explicit. The descriptor keeps its fds.
    pub fn import_dmabuf(&self, buf: &DmaBuf) -> Result<EglImage<'_>, egl::Error> {
        let mut attribs: Vec<egl::Attrib> = vec![
            egl::WIDTH as egl::Attrib,
            buf.width() as egl::Attrib,
            egl::HEIGHT as egl::Attrib,
            buf.height() as egl::Attrib,
            LINUX_DRM_FOURCC_EXT,
            buf.fourcc().code() as egl::Attrib,
        ];
        for (i, plane) in buf.planes().enumerate() {
            let [fd, offset, pitch, mod_lo, mod_hi] = PLANE_ATTRIBS[i];
            attribs.extend([fd, plane.fd.as_raw_fd() as egl::Attrib]);
            attribs.extend([offset, plane.offset as egl::Attrib, pitch, plane.stride as egl::Attrib]);
            if let Some(m) = buf.layout().modifier() {
                attribs.extend([
                    mod_lo,
                    (m.raw() & 0xFFFF_FFFF) as egl::Attrib,
                    mod_hi,
                    (m.raw() >> 32) as egl::Attrib,
                ]);
            }
        }
        attribs.push(egl::ATTRIB_NONE);
        // SAFETY: EGL_NO_CONTEXT and a NULL client buffer are what EGL_LINUX_DMA_BUF_EXT
        // requires (EGL_EXT_image_dma_buf_import); the fds in the list stay open (borrowed
        // from `buf`) for the duration of the call, and EGL dups what it keeps.
        let (no_ctx, no_buffer) =
            unsafe { (egl::Context::from_ptr(egl::NO_CONTEXT), egl::ClientBuffer::from_ptr(std::ptr::null_mut())) };
        let image = self.egl.create_image(self.display, no_ctx, LINUX_DMA_BUF_EXT, no_buffer, &attribs)?;
        Ok(EglImage { gles: self, image })
    }

    /// A new RGBA8 (or BGRA8 with `GL_BGRA_EXT`) texture, filled with `pixels` (tightly
    /// packed rows, row 0 first) or left undefined.
    pub fn texture(&self, format: GLenum, width: u32, height: u32, pixels: Option<&[u8]>) -> Texture<'_> {
        let tex = self.new_texture();
        if let Some(p) = pixels {
            assert_eq!(p.len(), width as usize * height as usize * 4, "pixel data size");
        }
        // SAFETY: a context is current; `tex` is bound to TEXTURE_2D; `pixels` (when given)
        // holds width*height*4 bytes, read with UNPACK_ALIGNMENT 1. RGBA/RGBA and
        // BGRA_EXT/BGRA_EXT (GL_EXT_texture_format_BGRA8888, checked in new()) are valid
        // unsized internalformat/format pairs in GLES.
        unsafe {
            (self.gl.pixel_store_i)(GL_UNPACK_ALIGNMENT, 1);
            (self.gl.tex_image_2d)(
                GL_TEXTURE_2D,
                0,
                format as GLint,
                width as GLsizei,
                height as GLsizei,
                0,
                format,
                GL_UNSIGNED_BYTE,
                pixels.map_or(std::ptr::null(), |p| p.as_ptr().cast()),
            );
        }
        self.check_gl("glTexImage2D");
        tex
    }

    fn new_texture(&self) -> Texture<'_> {
        let mut id = 0;
        // SAFETY: a context is current; `id` receives one name.
        unsafe {
            (self.gl.gen_textures)(1, &mut id);
            (self.gl.bind_texture)(GL_TEXTURE_2D, id);
            (self.gl.tex_parameter_i)(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
            (self.gl.tex_parameter_i)(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
        }
        self.check_gl("glGenTextures/glTexParameteri");
        Texture { gles: self, id }
    }

    /// A texture whose storage is the EGLImage (`glEGLImageTargetTexture2DOES`).
    pub fn texture_from_image(&self, image: &EglImage<'_>) -> Texture<'_> {
        let tex = self.new_texture();
        // SAFETY: a context is current, `tex` is bound to TEXTURE_2D and the image is a live
        // EGLImage of this display (GL_OES_EGL_image, checked in new()).
        unsafe { (self.gl.egl_image_target_texture_2d_oes)(GL_TEXTURE_2D, image.image.as_ptr()) };
        self.check_gl("glEGLImageTargetTexture2DOES");
        tex
    }

    /// An EGLImage sharing the texture's storage (EGL_KHR_gl_texture_2D_image).
    pub fn image_from_texture(&self, tex: &Texture<'_>) -> Result<EglImage<'_>, egl::Error> {
        // SAFETY: for EGL_GL_TEXTURE_2D_KHR the client buffer is the texture name cast to a
        // pointer, of a texture of the current context `self.context`.
        let buffer = unsafe { egl::ClientBuffer::from_ptr(tex.id as usize as *mut c_void) };
        let image = self.egl.create_image(
            self.display,
            self.context,
            egl::GL_TEXTURE_2D as egl::Enum,
            buffer,
            &[egl::ATTRIB_NONE],
        )?;
        Ok(EglImage { gles: self, image })
    }

    /// Runs `f` with the texture attached to a complete framebuffer bound, then unbinds it.
    fn with_framebuffer<R>(&self, tex: &Texture<'_>, f: impl FnOnce() -> R) -> R {
        let mut fb = 0;
        // SAFETY: a context is current; `fb` receives one name; `tex` is a live 2D texture.
        let status = unsafe {
            (self.gl.gen_framebuffers)(1, &mut fb);
            (self.gl.bind_framebuffer)(GL_FRAMEBUFFER, fb);
            (self.gl.framebuffer_texture_2d)(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, tex.id, 0);
            (self.gl.check_framebuffer_status)(GL_FRAMEBUFFER)
        };
        self.check_gl("glFramebufferTexture2D");
        assert_eq!(status, GL_FRAMEBUFFER_COMPLETE, "framebuffer over texture {} incomplete: 0x{status:04x}", tex.id);
        let out = f();
        // SAFETY: a context is current; `fb` is the name generated above.
        unsafe {
            (self.gl.bind_framebuffer)(GL_FRAMEBUFFER, 0);
            (self.gl.delete_framebuffers)(1, &fb);
        }
        self.check_gl("glDeleteFramebuffers");
        out
    }

    /// Clears the texture, or the rectangle (x, y, w, h) of it (GL window coordinates: y = 0
    /// is the texture's row 0), to `rgba`, and waits for it (glFinish).
    pub fn clear(&self, tex: &Texture<'_>, rect: Option<(i32, i32, i32, i32)>, rgba: [f32; 4]) {
        self.with_framebuffer(tex, || {
            // SAFETY: a context is current with a complete framebuffer bound.
            unsafe {
                if let Some((x, y, w, h)) = rect {
                    (self.gl.enable)(GL_SCISSOR_TEST);
                    (self.gl.scissor)(x, y, w, h);
                }
                (self.gl.clear_color)(rgba[0], rgba[1], rgba[2], rgba[3]);
                (self.gl.clear)(GL_COLOR_BUFFER_BIT);
                (self.gl.disable)(GL_SCISSOR_TEST);
                (self.gl.finish)();
            }
        });
        self.check_gl("glClear");
    }

    /// Uploads tightly packed `pixels` (in `format`'s byte order) over the whole texture.
    pub fn upload(&self, tex: &Texture<'_>, format: GLenum, width: u32, height: u32, pixels: &[u8]) {
        assert_eq!(pixels.len(), width as usize * height as usize * 4, "pixel data size");
        // SAFETY: a context is current; `pixels` holds width*height*4 bytes read with
        // UNPACK_ALIGNMENT 1, within the texture's level 0.
        unsafe {
            (self.gl.bind_texture)(GL_TEXTURE_2D, tex.id);
            (self.gl.pixel_store_i)(GL_UNPACK_ALIGNMENT, 1);
            (self.gl.tex_sub_image_2d)(
                GL_TEXTURE_2D,
                0,
                0,
                0,
                width as GLsizei,
                height as GLsizei,
                format,
                GL_UNSIGNED_BYTE,
                pixels.as_ptr().cast(),
            );
            (self.gl.finish)();
        }
        self.check_gl("glTexSubImage2D");
    }

    /// `glReadPixels(RGBA, UNSIGNED_BYTE)` of the whole texture through a framebuffer: R, G,
    /// B, A bytes per pixel, row 0 (the texture's, i.e. the dma-buf's first row) first.
    pub fn read_pixels(&self, tex: &Texture<'_>, width: u32, height: u32) -> Vec<u8> {
        let mut out = vec![0u8; width as usize * height as usize * 4];
        self.with_framebuffer(tex, || {
            // SAFETY: a complete framebuffer of at least width x height is bound; `out` has
            // room for width*height RGBA8 pixels written with PACK_ALIGNMENT 1.
            unsafe {
                (self.gl.pixel_store_i)(GL_PACK_ALIGNMENT, 1);
                (self.gl.read_pixels)(
                    0,
                    0,
                    width as GLsizei,
                    height as GLsizei,
                    GL_RGBA,
                    GL_UNSIGNED_BYTE,
                    out.as_mut_ptr().cast(),
                );
            }
        });
        self.check_gl("glReadPixels");
        out
    }

    /// `eglExportDMABUFImageQueryMESA` + `eglExportDMABUFImageMESA`: the image's fourcc,
    /// modifier and planes, with new fds owned by the result.
    pub fn export_dmabuf(&self, image: &EglImage<'_>) -> Result<EglExport, ExportFailure> {
        let (Some(query), Some(export)) = (self.export_query, self.export) else {
            return Err(ExportFailure::NotAdvertised);
        };
        let (mut fourcc, mut planes) = (0i32, 0i32);
        let mut modifiers = [0u64; 4];
        // SAFETY: the extension is advertised; `image` is a live EGLImage of this display;
        // `modifiers` has room for the maximum of 4 planes.
        let ok = unsafe {
            query(self.display.as_ptr(), image.image.as_ptr(), &mut fourcc, &mut planes, modifiers.as_mut_ptr())
        };
        if ok != egl::TRUE || !(1..=4).contains(&planes) {
            return Err(ExportFailure::Query(self.egl.get_error()));
        }
        let mut fds = [-1i32; 4];
        let mut strides = [0 as egl::Int; 4];
        let mut offsets = [0 as egl::Int; 4];
        // SAFETY: as above; each array has room for 4 planes.
        let ok = unsafe {
            export(
                self.display.as_ptr(),
                image.image.as_ptr(),
                fds.as_mut_ptr(),
                strides.as_mut_ptr(),
                offsets.as_mut_ptr(),
            )
        };
        // Take ownership of whatever fds came back before looking at anything else.
        let owned: Vec<Option<OwnedFd>> = fds
            .iter()
            .take(planes as usize)
            // SAFETY: eglExportDMABUFImageMESA returns new fds that the caller owns.
            .map(|&fd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }))
            .collect();
        if ok != egl::TRUE {
            return Err(ExportFailure::Export(self.egl.get_error()));
        }
        let mut out = Vec::with_capacity(owned.len());
        for (i, fd) in owned.into_iter().enumerate() {
            let fd = fd.ok_or(ExportFailure::NoFd { plane: i })?;
            out.push(PlaneDesc { fd, offset: offsets[i] as u64, stride: strides[i] as u64 });
        }
        Ok(EglExport {
            fourcc: Fourcc::from_code(fourcc as u32),
            modifier: Modifier::from_raw(modifiers[0]),
            planes: out,
        })
    }
}

impl Drop for Gles {
    fn drop(&mut self) {
        // Errors here cannot be acted on; the display is torn down regardless.
        let _ = self.egl.make_current(self.display, None, None, None);
        let _ = self.egl.destroy_context(self.display, self.context);
        let _ = self.egl.terminate(self.display);
        let _ = self.egl.release_thread();
    }
}

fn has_ext(list: &str, name: &str) -> bool {
    list.split_ascii_whitespace().any(|e| e == name)
}

fn proc_addr_or_panic<T: Copy>(egl: &Egl, name: &str) -> T {
    load_fn(egl, name).unwrap_or_else(|e| panic!("{e}"))
}

/// A GL texture, deleted on drop.
pub struct Texture<'g> {
    gles: &'g Gles,
    id: GLuint,
}

impl Drop for Texture<'_> {
    fn drop(&mut self) {
        // SAFETY: the context that made the name is still current (Gles outlives this).
        unsafe { (self.gles.gl.delete_textures)(1, &self.id) };
    }
}

/// An EGLImage, destroyed on drop.
pub struct EglImage<'g> {
    gles: &'g Gles,
    image: egl::Image,
}

impl Drop for EglImage<'_> {
    fn drop(&mut self) {
        let r = self.gles.egl.destroy_image(self.gles.display, self.image);
        if !std::thread::panicking() {
            assert!(r.is_ok(), "eglDestroyImage: {r:?}");
        }
    }
}
