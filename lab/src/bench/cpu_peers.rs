//! The CPU libraries an engine would use instead of dmabridge for a copy-path conversion,
//! measured by `dmabridge bench` on the same frames in the same run: libyuv
//! (`NV12ToARGBMatrix` with BT.709, `NV12ToARGB`, `MM21ToNV12`, `ARGBToNV12`,
//! `P010ToAR30Matrix` with BT.709) and FFmpeg's swscale
//! (NV12 -> BGRA, BT.709 limited range). They are loaded at run time (libloading) from
//! Debian's `libyuv-dev`/`libswscale-dev` (or their runtime packages), so the lab builds and
//! runs without them; a library that is not there is a peer reported missing, never a
//! zero. The FFI is here, in the lab, and nowhere in the library.
//!
//! Both are single-threaded as called (libyuv has no threads; swscale's context is made
//! without any), so their figures are per thread.

use std::ffi::{c_int, c_void};

use dmabridge_interop::tiling::{tiled_size, FrameConversion};
use dmabridge_interop::{Fourcc, TileLayout};
use libloading::Library;

use crate::stats::{gbps_samples, median};

/// A peer's conversion, and the dmabridge conversion it stands beside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerCase {
    /// libyuv `NV12ToARGBMatrix` with `kYuvH709Constants`: NV12 -> XR24, BT.709 limited.
    LibyuvNv12ToArgbBt709,
    /// libyuv `NV12ToARGB` (its default, BT.601 limited): NV12 -> XR24.
    LibyuvNv12ToArgb,
    /// libyuv `MM21ToNV12`: MediaTek's nv12-16l32s -> linear NV12.
    LibyuvMm21ToNv12,
    /// swscale NV12 -> BGRA (XR24's bytes), BT.709 limited, `SWS_BILINEAR` at the same size.
    SwscaleNv12ToBgra,
    /// libyuv `ARGBToNV12` (its only matrix, BT.601 limited): XR24 -> NV12.
    LibyuvArgbToNv12,
    /// libyuv `P010ToAR30Matrix` with `kYuvH709Constants`: P010 -> AR30, BT.709 limited.
    LibyuvP010ToAr30Bt709,
}

impl PeerCase {
    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            PeerCase::LibyuvNv12ToArgbBt709 => "libyuv NV12ToARGBMatrix (BT.709)",
            PeerCase::LibyuvNv12ToArgb => "libyuv NV12ToARGB (BT.601)",
            PeerCase::LibyuvMm21ToNv12 => "libyuv MM21ToNV12",
            PeerCase::SwscaleNv12ToBgra => "swscale NV12 -> BGRA (BT.709)",
            PeerCase::LibyuvArgbToNv12 => "libyuv ARGBToNV12 (BT.601)",
            PeerCase::LibyuvP010ToAr30Bt709 => "libyuv P010ToAR30Matrix (BT.709)",
        }
    }

    /// The peers that do what `c` does.
    pub fn of(c: &FrameConversion) -> Vec<PeerCase> {
        match (c.from_layout, c.from, c.to_layout, c.to) {
            (TileLayout::Linear, Fourcc::NV12, TileLayout::Linear, Fourcc::XRGB8888) => {
                vec![PeerCase::LibyuvNv12ToArgbBt709, PeerCase::LibyuvNv12ToArgb, PeerCase::SwscaleNv12ToBgra]
            }
            (TileLayout::Nv12_16L32S, Fourcc::NV12, TileLayout::Linear, Fourcc::NV12) => vec![PeerCase::LibyuvMm21ToNv12],
            (TileLayout::Linear, Fourcc::XRGB8888, TileLayout::Linear, Fourcc::NV12) => vec![PeerCase::LibyuvArgbToNv12],
            (TileLayout::Linear, Fourcc::P010, TileLayout::Linear, Fourcc::ARGB2101010) => vec![PeerCase::LibyuvP010ToAr30Bt709],
            _ => Vec::new(),
        }
    }
}

/// Why a peer was not measured.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The shared library (or a symbol in it) is not there.
    #[error("{library} is not installed ({detail}; scripts/setup.sh installs it)")]
    Missing { library: &'static str, detail: String },
    /// The library refused the frame.
    #[error("{peer} refused the frame: {detail}")]
    Refused { peer: &'static str, detail: String },
    /// The frame is not one dmabridge lays out.
    #[error(transparent)]
    Tiling(#[from] dmabridge_interop::tiling::TilingError),
}

/// The first of `names` that loads.
fn open(library: &'static str, names: &[&str]) -> Result<Library, PeerError> {
    let mut last = String::new();
    for name in names {
        // SAFETY: loading runs the library's initialisers; libyuv and swscale are plain C
        // libraries whose initialisers set up CPU feature tables only.
        match unsafe { Library::new(name) } {
            Ok(l) => return Ok(l),
            Err(e) => last = e.to_string(),
        }
    }
    Err(PeerError::Missing { library, detail: last })
}

type Nv12ToArgbMatrix = unsafe extern "C" fn(*const u8, c_int, *const u8, c_int, *mut u8, c_int, *const c_void, c_int, c_int) -> c_int;
type P010ToAr30Matrix = unsafe extern "C" fn(*const u16, c_int, *const u16, c_int, *mut u8, c_int, *const c_void, c_int, c_int) -> c_int;
type Nv12ToArgb = unsafe extern "C" fn(*const u8, c_int, *const u8, c_int, *mut u8, c_int, c_int, c_int) -> c_int;
type ArgbToNv12 = unsafe extern "C" fn(*const u8, c_int, *mut u8, c_int, *mut u8, c_int, c_int, c_int) -> c_int;
type Mm21ToNv12 = unsafe extern "C" fn(*const u8, c_int, *const u8, c_int, *mut u8, c_int, *mut u8, c_int, c_int, c_int) -> c_int;
type SwsGetContext = unsafe extern "C" fn(c_int, c_int, c_int, c_int, c_int, c_int, c_int, *mut c_void, *mut c_void, *const f64) -> *mut c_void;
type SwsScale = unsafe extern "C" fn(*mut c_void, *const *const u8, *const c_int, c_int, c_int, *const *mut u8, *const c_int) -> c_int;
type SwsFreeContext = unsafe extern "C" fn(*mut c_void);
type SwsGetCoefficients = unsafe extern "C" fn(c_int) -> *const c_int;
type SwsSetColorspaceDetails = unsafe extern "C" fn(*mut c_void, *const c_int, c_int, *const c_int, c_int, c_int, c_int, c_int) -> c_int;

/// FFmpeg's `AV_PIX_FMT_NV12` and `AV_PIX_FMT_BGRA` (libavutil's pixfmt.h; stable since 2012).
const AV_PIX_FMT_NV12: c_int = 23;
const AV_PIX_FMT_BGRA: c_int = 28;
/// `SWS_BILINEAR`, and swscale's `SWS_CS_ITU709`.
const SWS_BILINEAR: c_int = 2;
const SWS_CS_ITU709: c_int = 1;

fn symbol<T: Copy>(lib: &Library, library: &'static str, name: &str) -> Result<T, PeerError> {
    // SAFETY: every `T` here is the C prototype of `name` in the library's public header
    // (libyuv's convert_argb.h / convert.h, swscale.h), so calling through it is sound.
    unsafe { lib.get::<T>(name.as_bytes()) }.map(|s| *s).map_err(|e| PeerError::Missing { library, detail: e.to_string() })
}

/// One call of a peer into the output frame; its C return value.
type Run = dyn FnMut(&mut [u8]) -> c_int;

/// `c`'s input frame converted by `peer` into `out`, `reps` times after `warmups` untimed
/// calls (`runs` = (`warmups`, `reps`)); the median output GB/s. `input` is laid out as
/// dmabridge lays `c`'s input out.
pub fn measure(peer: PeerCase, c: &FrameConversion, input: &[u8], out: &mut [u8], runs: (usize, usize)) -> Result<f64, PeerError> {
    let (w, h) = (c.width, c.height);
    let g = tiled_size(c.from_layout, c.from, w, h)?;
    // The input's first plane, and its second (the first again for one-plane RGB).
    let (y, uv) = (&g.planes[0], g.planes.get(1).unwrap_or(&g.planes[0]));
    if (input.len() as u64) < g.size {
        return Err(PeerError::Refused { peer: peer.name(), detail: format!("input of {} bytes, frame of {}", input.len(), g.size) });
    }
    let out_size = tiled_size(c.to_layout, c.to, w, h)?.size;
    if (out.len() as u64) < out_size {
        return Err(PeerError::Refused { peer: peer.name(), detail: format!("output of {} bytes, frame of {out_size}", out.len()) });
    }
    let int = |v: u64| c_int::try_from(v).map_err(|_| PeerError::Refused { peer: peer.name(), detail: format!("{v} does not fit a C int") });
    let (wi, hi) = (int(u64::from(w))?, int(u64::from(h))?);
    let (ys, uvs) = (int(u64::from(y.padded_width_bytes))?, int(u64::from(uv.padded_width_bytes))?);
    let src_y = input[y.offset as usize..].as_ptr();
    let src_uv = input[uv.offset as usize..].as_ptr();
    let run: Box<Run> = match peer {
        PeerCase::LibyuvNv12ToArgbBt709 | PeerCase::LibyuvNv12ToArgb | PeerCase::LibyuvMm21ToNv12 | PeerCase::LibyuvArgbToNv12 | PeerCase::LibyuvP010ToAr30Bt709 => {
            let lib = open("libyuv", &["libyuv.so", "libyuv.so.0"])?;
            // SAFETY: a data symbol: its address is the constants' struct, which the library
            // owns for as long as it is loaded (kept by the closures).
            let bt709 = || unsafe { lib.get::<*const c_void>(b"kYuvH709Constants") }.map(|k| *k).map_err(|e| PeerError::Missing { library: "libyuv", detail: e.to_string() });
            match peer {
                PeerCase::LibyuvP010ToAr30Bt709 => {
                    let f: P010ToAr30Matrix = symbol(&lib, "libyuv", "P010ToAR30Matrix")?;
                    let k = bt709()?;
                    // libyuv counts a 16-bit plane's stride in samples.
                    let (ys, uvs) = (ys / 2, uvs / 2);
                    if src_y as usize % 2 != 0 || src_uv as usize % 2 != 0 {
                        return Err(PeerError::Refused { peer: peer.name(), detail: "its 16-bit planes must be 2-byte aligned".into() });
                    }
                    Box::new(move |dst: &mut [u8]| {
                        let _keep = &lib;
                        // SAFETY: the planes hold `h` rows of 16-bit samples at their strides
                        // (checked against the geometry above) and are 2-byte aligned (checked);
                        // `dst` holds `h` rows of `w * 4` bytes.
                        unsafe { f(src_y.cast(), ys, src_uv.cast(), uvs, dst.as_mut_ptr(), wi * 4, k, wi, hi) }
                    })
                }
                PeerCase::LibyuvArgbToNv12 => {
                    let f: ArgbToNv12 = symbol(&lib, "libyuv", "ARGBToNV12")?;
                    let uv_at = int(u64::from(w) * u64::from(h))? as usize;
                    let uv_stride = int(u64::from(w.div_ceil(2)) * 2)?;
                    Box::new(move |dst: &mut [u8]| {
                        let _keep = &lib;
                        let (dy, duv) = dst.split_at_mut(uv_at);
                        // SAFETY: the input holds `h` rows of `w * 4` bytes at its stride (the
                        // geometry, checked above); `dst` the packed NV12 frame.
                        unsafe { f(src_y, ys, dy.as_mut_ptr(), wi, duv.as_mut_ptr(), uv_stride, wi, hi) }
                    })
                }
                PeerCase::LibyuvNv12ToArgbBt709 => {
                    let f: Nv12ToArgbMatrix = symbol(&lib, "libyuv", "NV12ToARGBMatrix")?;
                    let k = bt709()?;
                    Box::new(move |dst: &mut [u8]| {
                        let _keep = &lib;
                        // SAFETY: the planes hold `h` rows at their strides (checked against the
                        // geometry above) and `dst` holds `h` rows of `w * 4` bytes.
                        unsafe { f(src_y, ys, src_uv, uvs, dst.as_mut_ptr(), wi * 4, k, wi, hi) }
                    })
                }
                PeerCase::LibyuvNv12ToArgb => {
                    let f: Nv12ToArgb = symbol(&lib, "libyuv", "NV12ToARGB")?;
                    Box::new(move |dst: &mut [u8]| {
                        let _keep = &lib;
                        // SAFETY: as for NV12ToARGBMatrix.
                        unsafe { f(src_y, ys, src_uv, uvs, dst.as_mut_ptr(), wi * 4, wi, hi) }
                    })
                }
                _ => {
                    let f: Mm21ToNv12 = symbol(&lib, "libyuv", "MM21ToNV12")?;
                    let uv_at = int(u64::from(w) * u64::from(h))? as usize;
                    Box::new(move |dst: &mut [u8]| {
                        let _keep = &lib;
                        let (dy, duv) = dst.split_at_mut(uv_at);
                        // SAFETY: the tiled planes are padded to whole 16x32 (luma) and 16x16
                        // (chroma) tiles at their strides, as libyuv's DetilePlane reads them;
                        // `dst` holds the packed NV12 frame (checked above).
                        unsafe { f(src_y, ys, src_uv, uvs, dy.as_mut_ptr(), wi, duv.as_mut_ptr(), wi, wi, hi) }
                    })
                }
            }
        }
        PeerCase::SwscaleNv12ToBgra => {
            let lib = open("libswscale", &["libswscale.so", "libswscale.so.6", "libswscale.so.7", "libswscale.so.8"])?;
            let get_context: SwsGetContext = symbol(&lib, "libswscale", "sws_getContext")?;
            let scale: SwsScale = symbol(&lib, "libswscale", "sws_scale")?;
            let free: SwsFreeContext = symbol(&lib, "libswscale", "sws_freeContext")?;
            let coefficients: SwsGetCoefficients = symbol(&lib, "libswscale", "sws_getCoefficients")?;
            let details: SwsSetColorspaceDetails = symbol(&lib, "libswscale", "sws_setColorspaceDetails")?;
            // SAFETY: swscale's documented calls; null filters and parameters are its defaults.
            let ctx = unsafe { get_context(wi, hi, AV_PIX_FMT_NV12, wi, hi, AV_PIX_FMT_BGRA, SWS_BILINEAR, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null()) };
            if ctx.is_null() {
                return Err(PeerError::Refused { peer: peer.name(), detail: "sws_getContext returned no context".into() });
            }
            let context = SwsContext { ctx, free, _lib: lib };
            // SAFETY: `ctx` is live; the coefficient table is swscale's static one; limited
            // range in (0), full range out (1), neutral brightness, contrast and saturation.
            unsafe {
                let table = coefficients(SWS_CS_ITU709);
                details(context.ctx, table, 0, table, 1, 0, 1 << 16, 1 << 16);
            }
            Box::new(move |dst: &mut [u8]| {
                // The whole context (and so the library) lives in the closure, not just its
                // pointer: a closure captures only the fields it names.
                let context = &context;
                let src = [src_y, src_uv, std::ptr::null(), std::ptr::null()];
                let strides = [ys, uvs, 0, 0];
                let out = [dst.as_mut_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut()];
                let out_strides = [wi * 4, 0, 0, 0];
                // SAFETY: the context was made for exactly these sizes and formats; the planes
                // and `dst` hold them (checked above).
                unsafe { scale(context.ctx, src.as_ptr(), strides.as_ptr(), 0, hi, out.as_ptr(), out_strides.as_ptr()) }
            })
        }
    };
    let mut run = run;
    let once = || {
        let r = run(out);
        // libyuv answers 0 on success; sws_scale the number of rows written.
        let ok = if peer == PeerCase::SwscaleNv12ToBgra { r == hi } else { r == 0 };
        if ok {
            Ok(())
        } else {
            Err(PeerError::Refused { peer: peer.name(), detail: format!("it returned {r}") })
        }
    };
    Ok(median(&mut gbps_samples(out_size, runs, once)?))
}

/// A swscale context, freed (with the library kept loaded until then) when dropped.
struct SwsContext {
    ctx: *mut c_void,
    free: SwsFreeContext,
    _lib: Library,
}

impl Drop for SwsContext {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from sws_getContext and is freed once, here.
        unsafe { (self.free)(self.ctx) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmabridge_interop::tiling::{detile_to_vec, rgb_to_nv12_vec, test_pattern, yuv_to_rgb_vec, ColourMatrix, ColourRange};

    /// The peers are called right (strides, plane offsets, constants), so their figures are
    /// of the same work: libyuv's detile is byte-exact with dmabridge's, and the colour
    /// conversions land near dmabridge's BT.709 (or BT.601) reference. `scripts/setup.sh`
    /// installs both libraries, so a missing one fails here.
    #[test]
    fn the_peers_do_what_dmabridge_does() {
        let (w, h) = (256u32, 96u32);
        let mm21 = FrameConversion::new((TileLayout::Nv12_16L32S, Fourcc::NV12), (TileLayout::Linear, Fourcc::NV12), w, h);
        let tiled = test_pattern(tiled_size(TileLayout::Nv12_16L32S, Fourcc::NV12, w, h).expect("size").size as usize, 3);
        let mut out = vec![0u8; (w * h * 3 / 2) as usize];
        measure(PeerCase::LibyuvMm21ToNv12, &mm21, &tiled, &mut out, (1, 1)).expect("libyuv MM21ToNV12");
        assert!(out == detile_to_vec(TileLayout::Nv12_16L32S, Fourcc::NV12, w, h, &tiled).expect("detile"), "MM21ToNV12 detiles as dmabridge does");

        let colour = FrameConversion::new((TileLayout::Linear, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), w, h);
        // A picture rather than noise: luma ramps over the whole range, chroma ramps within
        // what cameras give. Noise's extreme chroma saturates libyuv's 16-bit intermediates,
        // and its edges meet swscale's interpolated chroma (dmabridge and libyuv take the
        // nearest sample), both differences of method rather than of work.
        let luma = (0..w * h).map(|i| (16 + (i % w + i / w) % 220) as u8);
        let chroma = (0..w * h / 2).map(|i| {
            let (x, y) = (i % w / 2, i / w);
            (80 + if i % 2 == 0 { x * 96 / (w / 2) } else { y * 96 / (h / 2) }) as u8
        });
        let nv12: Vec<u8> = luma.chain(chroma).collect();
        // How far each lands from the float formula, as measured here: libyuv's 6-bit
        // coefficients up to 6 code values (its BT.601 matrix 1), swscale's up to 4.
        // The other matrix would be 15 and more off.
        for (peer, matrix, within) in [
            (PeerCase::LibyuvNv12ToArgbBt709, ColourMatrix::Bt709, 6),
            (PeerCase::LibyuvNv12ToArgb, ColourMatrix::Bt601, 8),
            (PeerCase::SwscaleNv12ToBgra, ColourMatrix::Bt709, 4),
        ] {
            let want = yuv_to_rgb_vec((Fourcc::NV12, Fourcc::XRGB8888), (matrix, ColourRange::Limited), (w, h), &nv12).expect("reference");
            let mut got = vec![0u8; want.len()];
            measure(peer, &colour, &nv12, &mut got, (1, 1)).unwrap_or_else(|e| panic!("{}: {e}", peer.name()));
            // Pixels inside the RGB gamut only: where the formula clamps, libraries clamp
            // their fixed-point intermediates at other points, and differ by more.
            let inside = |px: &[u8]| px[..3].iter().all(|&v| v > 0 && v < 255);
            let worst = got.chunks(4).zip(want.chunks(4)).filter(|(_, w)| inside(w)).flat_map(|(g, w)| (0..3).map(move |i| (i32::from(g[i]) - i32::from(w[i])).abs())).max();
            eprintln!("{}: at most {worst:?} code values from the reference", peer.name());
            assert!(worst.is_some_and(|d| d <= within), "{}: {worst:?} code values from the reference", peer.name());
        }
    }

    /// libyuv's RGB -> NV12 is called right: near dmabridge's BT.601 reference on the same
    /// picture.
    #[test]
    fn libyuv_rgb_to_nv12_does_what_dmabridge_does() {
        let (w, h) = (256u32, 96u32);
        let c = FrameConversion::new((TileLayout::Linear, Fourcc::XRGB8888), (TileLayout::Linear, Fourcc::NV12), w, h);
        // Smooth ramps (noise would make 2x2 averages of unlike pixels, where rounding
        // methods differ most).
        let rgb: Vec<u8> = (0..w * h).flat_map(|i| {
            let (x, y) = (i % w, i / w);
            [(x * 255 / w) as u8, (y * 255 / h) as u8, ((x + y) * 255 / (w + h)) as u8, 255]
        }).collect();
        let want = rgb_to_nv12_vec(Fourcc::XRGB8888, (ColourMatrix::Bt601, ColourRange::Limited), (w, h), &rgb).expect("reference");
        let mut got = vec![0u8; want.len()];
        measure(PeerCase::LibyuvArgbToNv12, &c, &rgb, &mut got, (1, 1)).expect("libyuv ARGBToNV12");
        let worst = got.iter().zip(&want).map(|(g, w)| (i32::from(*g) - i32::from(*w)).abs()).max();
        eprintln!("libyuv ARGBToNV12: at most {worst:?} code values from the reference");
        // 1 measured with its AVX2 loops; 2 leaves room for its other SIMD paths' rounding.
        assert!(worst.is_some_and(|d| d <= 2), "{worst:?} code values from the reference");
    }

    /// libyuv's P010 -> AR30 is called right (16-bit strides in samples, its AR30 word
    /// order): near dmabridge's BT.709 reference, 10 bits a channel, on the same picture.
    #[test]
    fn libyuv_p010_to_ar30_does_what_dmabridge_does() {
        let (w, h) = (256u32, 96u32);
        let c = FrameConversion::new((TileLayout::Linear, Fourcc::P010), (TileLayout::Linear, Fourcc::ARGB2101010), w, h);
        // Ramps inside the limited range, 10-bit samples in the top bits of each word.
        let word = |v: u32| ((v << 6) as u16).to_le_bytes();
        let luma = (0..w * h).flat_map(|i| word(64 + (i % w + i / w) * 876 / (w + h)));
        let chroma = (0..w * h / 2).flat_map(|i| {
            let (x, y) = (i % w / 2, i / w);
            word(320 + if i % 2 == 0 { x * 384 / (w / 2) } else { y * 384 / (h / 2) })
        });
        let p010: Vec<u8> = luma.chain(chroma).collect();
        let want = yuv_to_rgb_vec((Fourcc::P010, Fourcc::ARGB2101010), (ColourMatrix::Bt709, ColourRange::Limited), (w, h), &p010).expect("reference");
        let mut got = vec![0u8; want.len()];
        measure(PeerCase::LibyuvP010ToAr30Bt709, &c, &p010, &mut got, (1, 1)).expect("libyuv P010ToAR30Matrix");
        let channels = |px: &[u8]| {
            let v = u32::from_le_bytes([px[0], px[1], px[2], px[3]]);
            [(v >> 20) & 1023, (v >> 10) & 1023, v & 1023].map(|c| c as i32)
        };
        let inside = |c: &[i32; 3]| c.iter().all(|&v| v > 0 && v < 1023);
        let worst = got.chunks(4).zip(want.chunks(4)).map(|(g, w)| (channels(g), channels(w))).filter(|(_, w)| inside(w)).flat_map(|(g, w)| (0..3).map(move |i| (g[i] - w[i]).abs())).max();
        eprintln!("libyuv P010ToAR30Matrix: at most {worst:?} 10-bit code values from the reference");
        // libyuv's 6-bit coefficients: 29 measured here, about its 8-bit conversions' 6 code
        // values scaled to 10 bits (a wrong stride or word order is hundreds off).
        assert!(worst.is_some_and(|d| d <= 32), "{worst:?} code values from the reference");
    }

    #[test]
    fn a_frame_shorter_than_its_conversion_is_refused() {
        let c = FrameConversion::new((TileLayout::Linear, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), 64, 64);
        let mut out = vec![0u8; 64 * 64 * 4];
        assert!(matches!(measure(PeerCase::LibyuvNv12ToArgb, &c, &[0u8; 100], &mut out, (1, 1)), Err(PeerError::Refused { .. })));
        assert!(matches!(measure(PeerCase::SwscaleNv12ToBgra, &c, &vec![0u8; 64 * 96], &mut out[..10], (1, 1)), Err(PeerError::Refused { .. })));
    }
}
