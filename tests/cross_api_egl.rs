//! Cross-API: dma-bufs between dmabridge's Vulkan engine (lavapipe) and EGL/GLES (llvmpipe),
//! pixel-exact, in both configurations of the suite.
//!
//! - Vulkan export -> EGL import -> `glReadPixels` (udmabuf configurations; plain lavapipe
//!   cannot export DMA_BUF, which must be the typed `DmaBufExportUnsupported`).
//! - A memfd laid out by the test (non-zero offset, padded stride), read through EGL/GLES and
//!   through the Vulkan import: both give the same pixels (both configurations).
//! - EGL export (`EGL_MESA_image_dma_buf_export`) -> Vulkan import. llvmpipe advertises the
//!   extension only when it has a udmabuf (emulated or real); in the plain configuration the
//!   test asserts that it is not advertised.
//! - fd accounting over hundreds of EGL import/export cycles.
//!
//! Byte order: DRM fourccs name a little-endian word, so AB24 (ABGR8888) is R, G, B, A in
//! memory and AR24 (ARGB8888) is B, G, R, A. `glReadPixels(RGBA, UNSIGNED_BYTE)` always returns
//! R, G, B, A, so an AR24 image reads back with bytes 0 and 2 of each pixel swapped relative to
//! memory. GL's row 0 (window y = 0) is the dma-buf's first row.
//!
//! Every test takes one lock: some count the process's fds, and the EGL display is shared by
//! the whole process (each test initialises and terminates it).

mod common;
mod support_egl;

use std::sync::{Mutex, MutexGuard};

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{fd_count, DmaBuf, PlaneDesc};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{ExportError, ExportRequest, ImportPath};
use support_egl::{ExportFailure, Gles, GL_BGRA_EXT, GL_RGBA};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);
const SAMPLE_AND_READ: vk::ImageUsageFlags =
    vk::ImageUsageFlags::from_raw(vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw());
const EXPORT_EXT: &str = "EGL_MESA_image_dma_buf_export";
/// An odd size, so that row padding and row order both show.
const W: u32 = 61;
const H: u32 = 37;

fn gles() -> Gles {
    Gles::new().unwrap_or_else(|e| {
        panic!(
            "EGL/GLES (Mesa llvmpipe, surfaceless) is unavailable: {e}. \
             Run scripts/setup.sh: it installs libegl1, libgles2 and libegl-mesa0 (bookworm-backports)."
        )
    })
}

/// Memory byte order -> `glReadPixels(RGBA)` byte order.
fn memory_to_gl_rgba(fourcc: Fourcc, memory: &[u8]) -> Vec<u8> {
    let mut out = memory.to_vec();
    match fourcc {
        f if f == Fourcc::ABGR8888 => {}
        f if f == Fourcc::ARGB8888 => out.chunks_exact_mut(4).for_each(|px| px.swap(0, 2)),
        f => panic!("no GL byte order for {f} in this test"),
    }
    out
}

/// A colour's bytes in `fourcc`'s memory order, from R, G, B, A bytes.
fn memory_pixel(fourcc: Fourcc, [r, g, b, a]: [u8; 4]) -> [u8; 4] {
    if fourcc == Fourcc::ARGB8888 {
        [b, g, r, a]
    } else {
        assert_eq!(fourcc, Fourcc::ABGR8888);
        [r, g, b, a]
    }
}

/// Fails with the first differing pixel's coordinates and the number of differing pixels.
fn assert_pixels_eq(what: &str, actual: &[u8], expected: &[u8], width: u32) {
    assert_eq!(actual.len(), expected.len(), "{what}: {} bytes, expected {}", actual.len(), expected.len());
    let bad: Vec<usize> = actual
        .chunks_exact(4)
        .zip(expected.chunks_exact(4))
        .enumerate()
        .filter(|(_, (a, e))| a != e)
        .map(|(i, _)| i)
        .collect();
    if let Some(&i) = bad.first() {
        let w = width as usize;
        panic!(
            "{what}: {} of {} pixels differ; first at (x {}, y {}): got {:?}, expected {:?}",
            bad.len(),
            actual.len() / 4,
            i % w,
            i / w,
            &actual[i * 4..i * 4 + 4],
            &expected[i * 4..i * 4 + 4]
        );
    }
}

/// Plane 0's visible rows (width*4 bytes each), tightly packed, read through a mapping.
fn read_plane0(buf: &DmaBuf) -> Vec<u8> {
    let p = buf.plane(0).expect("plane 0");
    let (row, h) = (buf.width() as usize * 4, buf.height() as usize);
    let len = p.offset as usize + p.stride as usize * (h - 1) + row;
    // SAFETY: a fresh shared read-only mapping of `len` bytes, which the import checks (or
    // the exporter's layout) keep within the file; nothing else aliases it as Rust memory.
    let ptr = unsafe {
        rustix::mm::mmap(std::ptr::null_mut(), len, rustix::mm::ProtFlags::READ, rustix::mm::MapFlags::SHARED, p.fd, 0)
    }
    .expect("mmap the dma-buf");
    // SAFETY: the mapping is `len` readable bytes until the munmap below.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    let mut out = Vec::with_capacity(row * h);
    for r in 0..h {
        let start = p.offset as usize + r * p.stride as usize;
        out.extend_from_slice(&bytes[start..start + row]);
    }
    // SAFETY: unmaps exactly the mapping made above; `bytes` is not used after this.
    unsafe { rustix::mm::munmap(ptr, len) }.expect("munmap");
    out
}

/// Writes tightly packed rows into plane 0 through a shared mapping.
fn write_plane0(buf: &DmaBuf, packed: &[u8]) {
    let p = buf.plane(0).expect("plane 0");
    let (row, h) = (buf.width() as usize * 4, buf.height() as usize);
    assert_eq!(packed.len(), row * h);
    let len = p.offset as usize + p.stride as usize * (h - 1) + row;
    // SAFETY: as in read_plane0, writable this time; the fd is open read-write (exported).
    let ptr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            p.fd,
            0,
        )
    }
    .expect("mmap the dma-buf writable");
    // SAFETY: the mapping is `len` writable bytes, aliased by nothing else in Rust, until munmap.
    let bytes = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) };
    common::place_rows(bytes, packed, row, h, p.offset as usize, p.stride as usize);
    // SAFETY: unmaps exactly the mapping made above; `bytes` is not used after this.
    unsafe { rustix::mm::munmap(ptr, len) }.expect("munmap");
}

#[test]
fn egl_lists_linear_ab24_and_ar24_as_importable_textures() {
    let _guard = lock();
    let gles = gles();
    for fourcc in [Fourcc::ABGR8888, Fourcc::ARGB8888] {
        let mods = gles.dmabuf_modifiers(fourcc);
        assert!(
            mods.contains(&(Modifier::LINEAR, false)),
            "EGL should import {fourcc} LINEAR as a plain (not external-only) texture; it lists {mods:?}"
        );
    }
    // llvmpipe exports dma-bufs exactly when it has a udmabuf to make them with.
    assert_eq!(
        gles.has_ext(EXPORT_EXT),
        common::expect_modifiers(),
        "{EXPORT_EXT} advertised in configuration {:?}?",
        common::config()
    );
    gles.check_egl("the format queries");
}

/// Vulkan allocates, exports and clears on the GPU; GLES imports the dma-buf with the
/// exported offset, stride and modifier and reads it back. Then the test writes a pattern
/// into the shared memory and GLES reads that through the same layout, which would show any
/// disagreement about stride or row order.
#[test]
fn vulkan_export_reads_back_through_gles_pixel_exact() {
    let _guard = lock();
    let engine = common::engine();
    let gles = gles();
    // (fourcc, clear colour, the clear colour as R, G, B, A bytes)
    let cases = [
        (Fourcc::ABGR8888, [1.0, 0.0, 0.6, 1.0], [255u8, 0, 153, 255]),
        (Fourcc::ARGB8888, [0.2, 0.4, 0.6, 0.8], [51u8, 102, 153, 204]),
    ];
    for (seed, (fourcc, clear, rgba)) in cases.into_iter().enumerate() {
        let req = ExportRequest {
            fourcc,
            width: W,
            height: H,
            image_use: (vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::SAMPLED).into(),
            acceptable: vec![LINEAR],
            negotiated: None,
        };
        let exported = match engine.export_image(&req) {
            Err(ExportError::DmaBufExportUnsupported { fourcc: refused }) if !common::expect_modifiers() => {
                // Plain lavapipe: no modifier extension and no DMA_BUF export. The refusal is
                // typed and names the format; the EGL side is covered by
                // test_written_layout_reads_the_same_through_gles_and_vulkan.
                assert_eq!(refused, fourcc);
                continue;
            }
            Err(e) => panic!("exporting {fourcc} in configuration {:?}: {e}", common::config()),
            Ok(exported) => exported,
        };
        assert!(common::expect_modifiers(), "plain lavapipe exported a dma-buf?");
        let buf = exported.dmabuf().expect("a dma-buf export, not OPAQUE_FD");
        assert_eq!(buf.fourcc(), fourcc);
        assert_eq!(buf.layout(), LINEAR, "the engine reports the modifier it chose, from the list");
        assert_eq!(buf.plane_count(), 1);
        let plane = buf.plane(0).expect("plane 0");
        assert!(plane.stride >= u64::from(W) * 4, "stride {} < {}", plane.stride, W * 4);

        eprintln!("Vulkan export of {fourcc} {W}x{H}: offset {}, stride {}", plane.offset, plane.stride);
        exported.clear_and_release(clear, Default::default()).expect("clear on the Vulkan device").wait(dmabridge::READBACK_TIMEOUT).expect("clear on the Vulkan device");
        // The bytes in memory are in the fourcc's order...
        let memory = read_plane0(buf);
        let px = memory_pixel(fourcc, rgba);
        assert_pixels_eq(&format!("{fourcc} memory after the Vulkan clear"), &memory, &px.repeat((W * H) as usize), W);

        // ...and GLES reads them as R, G, B, A.
        let image = gles.import_dmabuf(buf).unwrap_or_else(|e| panic!("EGL import of the Vulkan {fourcc} export: {e}"));
        gles.check_egl("eglCreateImage(EGL_LINUX_DMA_BUF_EXT)");
        let tex = gles.texture_from_image(&image);
        let back = gles.read_pixels(&tex, W, H);
        assert_pixels_eq(
            &format!("{fourcc}: Vulkan clear -> GLES glReadPixels"),
            &back,
            &rgba.repeat((W * H) as usize),
            W,
        );
        drop(tex);
        drop(image);

        // A pattern in the same memory, read through the layout Vulkan reported.
        let pattern = common::pattern((W * H * 4) as usize, 100 + seed as u32);
        write_plane0(buf, &pattern);
        let image = gles.import_dmabuf(buf).expect("EGL import of the patterned export");
        let tex = gles.texture_from_image(&image);
        let back = gles.read_pixels(&tex, W, H);
        assert_pixels_eq(
            &format!("{fourcc}: pattern in the Vulkan export (stride {}) -> GLES", plane.stride),
            &back,
            &memory_to_gl_rgba(fourcc, &pattern),
            W,
        );
        drop(tex);
        drop(image);
        drop(exported);
    }
    gles.check_egl("the Vulkan -> EGL round");
    common::assert_clean(&engine);
}

/// The same bytes, laid out by the test (non-zero offset, padded stride), imported into EGL
/// and into Vulkan: GLES's glReadPixels and the engine's read-back agree, pixel for pixel,
/// once the fourcc's byte order is accounted for. Both configurations (plain: the engine's
/// copy path; udmabuf: its explicit-modifier path).
#[test]
fn test_written_layout_reads_the_same_through_gles_and_vulkan() {
    let _guard = lock();
    let engine = common::engine();
    let gles = gles();
    let (offset, stride) = (4096usize, W as usize * 4 + 76);
    for (seed, fourcc) in [Fourcc::ABGR8888, Fourcc::ARGB8888].into_iter().enumerate() {
        let packed = common::pattern((W * H * 4) as usize, 7 + seed as u32);
        let mut file = vec![0xEEu8; offset + stride * H as usize];
        common::place_rows(&mut file, &packed, W as usize * 4, H as usize, offset, stride);
        let buf = DmaBuf::new(
            fourcc,
            LINEAR,
            W,
            H,
            vec![PlaneDesc { fd: common::dmabuf_with(&file), offset: offset as u64, stride: stride as u64 }],
        )
        .expect("descriptor");

        let image = gles.import_dmabuf(&buf).unwrap_or_else(|e| panic!("EGL import of {fourcc}: {e}"));
        let tex = gles.texture_from_image(&image);
        let gl_back = gles.read_pixels(&tex, W, H);
        drop(tex);
        drop(image);
        gles.check_egl("EGL import/destroy");

        let vk_image = engine.import_dmabuf(&buf, SAMPLE_AND_READ).expect("Vulkan import");
        let expected_path = if common::expect_modifiers() { ImportPath::Explicit } else { ImportPath::BufferCopy };
        assert_eq!(vk_image.path(), expected_path);
        let vk_back = vk_image.read_back().expect("Vulkan read-back");
        drop(vk_image);

        assert_pixels_eq(&format!("{fourcc}: Vulkan read-back vs the file"), &vk_back, &packed, W);
        assert_pixels_eq(
            &format!("{fourcc}: GLES glReadPixels vs the file"),
            &gl_back,
            &memory_to_gl_rgba(fourcc, &packed),
            W,
        );
        assert_pixels_eq(&format!("{fourcc}: GLES vs Vulkan"), &gl_back, &memory_to_gl_rgba(fourcc, &vk_back), W);
        // EGL borrowed the fd: the descriptor's is still open and is the same file.
        assert!(buf.plane(0).is_some_and(|p| rustix::fs::fstat(p.fd).is_ok()));
    }
    common::assert_clean(&engine);
}

/// GLES uploads a pattern and renders a rectangle over it; EGL exports the texture
/// (`EGL_MESA_image_dma_buf_export`); Vulkan imports the fds with the exported fourcc,
/// modifier, offset and stride and reads back exactly what GLES drew.
#[test]
fn gles_export_reads_back_through_vulkan_pixel_exact() {
    let _guard = lock();
    let engine = common::engine();
    let gles = gles();
    let advertised = gles.has_ext(EXPORT_EXT);
    assert_eq!(
        advertised,
        common::expect_modifiers(),
        "llvmpipe advertises {EXPORT_EXT} exactly when it has a udmabuf (configuration {:?})",
        common::config()
    );
    let (rx, ry, rw, rh) = (5usize, 7usize, 20usize, 11usize);
    let rect_rgba = [51u8, 102, 153, 204];
    for (seed, (gl_format, fourcc)) in
        [(GL_RGBA, Fourcc::ABGR8888), (GL_BGRA_EXT, Fourcc::ARGB8888)].into_iter().enumerate()
    {
        // GL_RGBA bytes are AB24's memory order and GL_BGRA_EXT bytes AR24's.
        let upload = common::pattern((W * H * 4) as usize, 200 + seed as u32);
        let tex = gles.texture(gl_format, W, H, Some(&upload));
        gles.clear(&tex, Some((rx as i32, ry as i32, rw as i32, rh as i32)), [0.2, 0.4, 0.6, 0.8]);
        let mut expected = upload.clone();
        let px = memory_pixel(fourcc, rect_rgba);
        for y in ry..ry + rh {
            for x in rx..rx + rw {
                let i = (y * W as usize + x) * 4;
                expected[i..i + 4].copy_from_slice(&px);
            }
        }
        // GLES itself sees what it drew.
        assert_pixels_eq(
            &format!("{fourcc}: GLES's own read-back"),
            &gles.read_pixels(&tex, W, H),
            &memory_to_gl_rgba(fourcc, &expected),
            W,
        );

        let image = gles.image_from_texture(&tex).expect("eglCreateImage(EGL_GL_TEXTURE_2D)");
        gles.check_egl("eglCreateImage(EGL_GL_TEXTURE_2D)");
        let export = match gles.export_dmabuf(&image) {
            Err(ExportFailure::NotAdvertised) if !advertised => {
                // Plain configuration: llvmpipe has no udmabuf, so no dma-buf export.
                continue;
            }
            Err(e) => panic!("EGL export of a {fourcc} texture in configuration {:?}: {e:?}", common::config()),
            Ok(x) => x,
        };
        gles.check_egl("eglExportDMABUFImageMESA");
        assert_eq!(export.fourcc, fourcc, "the fourcc llvmpipe reports for a GL texture of format 0x{gl_format:04x}");
        assert_eq!(export.modifier, Modifier::LINEAR);
        assert_eq!(export.planes.len(), 1);
        let stride = export.planes[0].stride;
        assert!(stride >= u64::from(W) * 4, "stride {stride}");
        eprintln!(
            "EGL export of a {W}x{H} GL texture (format 0x{gl_format:04x}): {fourcc} {}, offset {}, stride {stride}",
            export.modifier, export.planes[0].offset
        );
        let buf =
            DmaBuf::new(export.fourcc, Layout::Explicit(export.modifier), W, H, export.planes).expect("descriptor");
        // The bytes in the exported memory are GLES's pixels in the fourcc's order.
        assert_pixels_eq(&format!("{fourcc}: exported memory (stride {stride})"), &read_plane0(&buf), &expected, W);

        let vk_image = engine
            .import_dmabuf(&buf, SAMPLE_AND_READ)
            .unwrap_or_else(|e| panic!("Vulkan import of the EGL {fourcc} export: {e}"));
        assert_eq!(vk_image.path(), ImportPath::Explicit, "LINEAR single-plane imports as an image");
        let back = vk_image.read_back().expect("Vulkan read-back");
        assert_pixels_eq(&format!("{fourcc}: GLES render -> EGL export -> Vulkan read-back"), &back, &expected, W);
        drop(vk_image);
        drop(buf);
        drop(image);
        drop(tex);
    }
    gles.check_egl("the EGL -> Vulkan round");
    common::assert_clean(&engine);
}

/// EGL's import borrows the fd (the descriptor keeps it, and no dup survives the image);
/// each export hands out fds that the descriptor then owns and closes. Hundreds of cycles
/// leave the process's fd count unchanged.
#[test]
fn egl_import_and_export_cycles_leak_no_fds() {
    let _guard = lock();
    let engine = common::engine();
    let gles = gles();
    let (w, h) = (32u32, 16u32);
    let packed = common::pattern((w * h * 4) as usize, 300);
    let buf = DmaBuf::new(
        Fourcc::ABGR8888,
        LINEAR,
        w,
        h,
        vec![PlaneDesc { fd: common::dmabuf_with(&packed), offset: 0, stride: u64::from(w) * 4 }],
    )
    .expect("descriptor");
    let source = gles.texture(GL_RGBA, w, h, Some(&packed));

    let import_cycle = || {
        let image = gles.import_dmabuf(&buf).expect("EGL import");
        let tex = gles.texture_from_image(&image);
        drop(tex);
        drop(image);
    };
    let export_cycle = |into_vulkan: bool| {
        let image = gles.image_from_texture(&source).expect("EGLImage from texture");
        let x = gles.export_dmabuf(&image).expect("EGL export");
        let exported = DmaBuf::new(x.fourcc, Layout::Explicit(x.modifier), w, h, x.planes).expect("descriptor");
        if into_vulkan {
            let vk_image = engine.import_dmabuf(&exported, SAMPLE_AND_READ).expect("Vulkan import");
            drop(vk_image);
        }
        drop(exported);
        drop(image);
    };
    let exports = gles.has_ext(EXPORT_EXT);
    assert_eq!(exports, common::expect_modifiers());

    // Warm up: the first use of each path may open fds for good (driver state).
    import_cycle();
    if exports {
        export_cycle(true);
    }
    let before = fd_count().expect("fd count");
    for _ in 0..300 {
        import_cycle();
    }
    gles.check_egl("300 EGL import/destroy cycles");
    assert_eq!(fd_count().expect("fd count"), before, "fds leaked by 300 EGL dma-buf import/destroy cycles");
    if exports {
        for _ in 0..300 {
            export_cycle(false);
        }
        assert_eq!(fd_count().expect("fd count"), before, "fds leaked by 300 EGL export cycles");
        for _ in 0..50 {
            export_cycle(true);
        }
        assert_eq!(fd_count().expect("fd count"), before, "fds leaked by 50 EGL export -> Vulkan import cycles");
    }
    // The descriptor's own fd was only borrowed by EGL.
    assert!(buf.plane(0).is_some_and(|p| rustix::fs::fstat(p.fd).is_ok()));
    drop(source);
    common::assert_clean(&engine);
}
