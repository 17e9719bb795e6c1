//! NV12 and P010 dma-bufs, one fd for both planes or one fd per plane, imported through
//! dmabridge as wgpu textures and read by a wgpu compute pass through wgpu's plane views
//! (`TextureAspect::Plane0` as R8/R16, `Plane1` as RG8/RG16): every sample read back must be
//! the producer's. A device whose wgpu adapter lacks the format's feature is asserted to
//! refuse the import, naming the feature. The validation layer is on; any message fails.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::os::fd::OwnedFd;

use dmabridge::interop::dmabuf::{DmaBuf, PlaneDesc};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::SubmitOptions;
use dmabridge_wgpu::{wgpu, ImportTextureError, ImportedTexture, SharedDevice};
use support::{adapter, assert_clean, run_pass, shared, Pass};

/// Each luma sample as a word, then each chroma pair as `u | v << 16`, in the plane's
/// own range: `MAX` is 255 (NV12, 8-bit views) or 65535 (P010, 16-bit views).
const SHADER: &str = r#"
@group(0) @binding(0) var luma: texture_2d<f32>;
@group(0) @binding(1) var chroma: texture_2d<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
override MAX: f32;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let size = textureDimensions(luma);
    if (id.x >= size.x || id.y >= size.y) {
        return;
    }
    out[id.y * size.x + id.x] = u32(round(textureLoad(luma, vec2<i32>(id.xy), 0).r * MAX));
    if (id.x % 2u == 0u && id.y % 2u == 0u) {
        let c = textureLoad(chroma, vec2<i32>(id.xy / 2u), 0);
        let at = size.x * size.y + (id.y / 2u) * (size.x / 2u) + id.x / 2u;
        out[at] = u32(round(c.r * MAX)) | (u32(round(c.g * MAX)) << 16u);
    }
}
"#;

/// A 4:2:0 frame's samples: luma `w * h`, then chroma pairs `(w / 2) * (h / 2)`.
struct Samples {
    luma: Vec<u16>,
    chroma: Vec<(u16, u16)>,
}

impl Samples {
    /// Samples that differ from their neighbours; P010's keep their 6 low bits zero, as
    /// the format says.
    fn pattern(fourcc: Fourcc, w: u32, h: u32) -> Samples {
        let p010 = fourcc == Fourcc::P010;
        let value = |i: u32, seed: u32| -> u16 {
            let v = i.wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(40_503)) >> 7;
            if p010 {
                (v as u16) & 0xffc0
            } else {
                (v & 0xff) as u16
            }
        };
        let luma = (0..w * h).map(|i| value(i, 1)).collect();
        let chroma = (0..(w / 2) * (h / 2)).map(|i| (value(i, 2), value(i, 3))).collect();
        Samples { luma, chroma }
    }

    /// The words the shader writes.
    fn words(&self) -> Vec<u32> {
        self.luma.iter().map(|&y| u32::from(y)).chain(self.chroma.iter().map(|&(u, v)| u32::from(u) | (u32::from(v) << 16))).collect()
    }

    /// Plane 0's and plane 1's rows, packed, as the format keeps them in memory.
    fn planes(&self, fourcc: Fourcc) -> (Vec<u8>, Vec<u8>) {
        if fourcc == Fourcc::P010 {
            (self.luma.iter().flat_map(|y| y.to_le_bytes()).collect(), self.chroma.iter().flat_map(|(u, v)| [u.to_le_bytes(), v.to_le_bytes()].concat()).collect())
        } else {
            (self.luma.iter().map(|&y| y as u8).collect(), self.chroma.iter().flat_map(|&(u, v)| [u as u8, v as u8]).collect())
        }
    }
}

/// How the producer's planes lie in its files.
#[derive(Clone, Copy, Debug)]
enum Files {
    /// Both planes in one fd, the chroma plane after the luma plane, both rows padded.
    One,
    /// One fd per plane, each at an offset of its own.
    PerPlane,
}

/// The frame as a producer's descriptor: rows padded, planes at offsets, the filler bytes
/// unlike any sample.
fn descriptor(fourcc: Fourcc, (w, h): (u32, u32), samples: &Samples, files: Files) -> DmaBuf {
    let bytes = if fourcc == Fourcc::P010 { 2 } else { 1 };
    let (y, uv) = samples.planes(fourcc);
    let (row_y, row_uv) = (w as usize * bytes, w as usize * bytes);
    let (stride_y, stride_uv) = (row_y + 64, row_uv + 128);
    let (h, ch) = (h as usize, h as usize / 2);
    let placed = |offset: usize, packed: &[u8], row: usize, stride: usize, rows: usize, file: &mut Vec<u8>| {
        file.resize(file.len().max(offset + stride * rows), 0xa5);
        common::place_rows(file, packed, row, rows, offset, stride);
    };
    let planes = match files {
        Files::One => {
            let (off_y, off_uv) = (256, 256 + stride_y * h + 4096);
            let mut file = Vec::new();
            placed(off_y, &y, row_y, stride_y, h, &mut file);
            placed(off_uv, &uv, row_uv, stride_uv, ch, &mut file);
            let fd = common::dmabuf_with(&file);
            let second: OwnedFd = fd.try_clone().expect("dup the fd");
            vec![
                PlaneDesc { fd, offset: off_y as u64, stride: stride_y as u64 },
                PlaneDesc { fd: second, offset: off_uv as u64, stride: stride_uv as u64 },
            ]
        }
        Files::PerPlane => {
            let (mut file_y, mut file_uv) = (Vec::new(), Vec::new());
            placed(64, &y, row_y, stride_y, h, &mut file_y);
            placed(4096, &uv, row_uv, stride_uv, ch, &mut file_uv);
            vec![
                PlaneDesc { fd: common::dmabuf_with(&file_y), offset: 64, stride: stride_y as u64 },
                PlaneDesc { fd: common::dmabuf_with(&file_uv), offset: 4096, stride: stride_uv as u64 },
            ]
        }
    };
    DmaBuf::new(fourcc, Layout::Explicit(Modifier::LINEAR), w, h as u32, planes).expect("descriptor")
}

/// Runs the compute pass over `frame`'s plane views inside `submit_frame`; the words it wrote.
fn read_planes(shared: &SharedDevice, frame: &ImportedTexture, max: f64) -> Vec<u32> {
    let (w, h) = frame.image().extent();
    let words = u64::from(w) * u64::from(h) + u64::from(w / 2) * u64::from(h / 2);
    let plane = |aspect| frame.texture().create_view(&wgpu::TextureViewDescriptor { aspect, ..Default::default() });
    let (luma, chroma) = (plane(wgpu::TextureAspect::Plane0), plane(wgpu::TextureAspect::Plane1));
    let pass = Pass { shader: SHADER, constants: &[("MAX", max)], views: &[&luma, &chroma], out_bytes: words * 4 };
    let (bytes, _) = run_pass(shared, frame, &pass, SubmitOptions::default(), || ());
    bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// The wgpu features a 4:2:0 format's import and its plane views need.
fn features_for(fourcc: Fourcc) -> wgpu::Features {
    match fourcc {
        Fourcc::P010 => wgpu::Features::TEXTURE_FORMAT_P010 | wgpu::Features::TEXTURE_FORMAT_16BIT_NORM,
        _ => wgpu::Features::TEXTURE_FORMAT_NV12,
    }
}

fn imports_exactly(fourcc: Fourcc, files: Files) {
    let (w, h) = (66u32, 38u32);
    let needed = features_for(fourcc);
    let offered = adapter().features();
    let samples = Samples::pattern(fourcc, w, h);
    let buf = descriptor(fourcc, (w, h), &samples, files);
    if !offered.contains(needed) {
        // What the device reports: without the feature, wgpu has no such texture, and
        // the import says which feature is missing.
        let shared = shared(offered & needed);
        match shared.import(&buf) {
            Err(e @ ImportTextureError::MissingFeature { .. }) => eprintln!("{fourcc}: the adapter offers {offered:?} only: {e}"),
            other => panic!("{fourcc} without {needed:?} must be refused by name, got {other:?}"),
        }
        assert_clean(Some(&shared));
        return;
    }
    let shared = shared(needed);
    let frame = shared.import(&buf).unwrap_or_else(|e| panic!("{fourcc} ({files:?}) as a wgpu texture: {e}"));
    eprintln!("{fourcc} ({files:?}): import path {}", frame.path());
    let max = if fourcc == Fourcc::P010 { 65535.0 } else { 255.0 };
    let read = read_planes(&shared, &frame, max);
    let expected = samples.words();
    assert_eq!(read.len(), expected.len());
    if let Some(i) = read.iter().zip(&expected).position(|(a, b)| a != b) {
        let luma = (w * h) as usize;
        let place = if i < luma { format!("luma ({}, {})", i % w as usize, i / w as usize) } else { format!("chroma ({}, {})", (i - luma) % (w / 2) as usize, (i - luma) / (w / 2) as usize) };
        panic!("{fourcc} ({files:?}) {place}: wgpu read {:#x}, the producer wrote {:#x}", read[i], expected[i]);
    }
    drop(frame);
    assert_clean(Some(&shared));
}

#[test]
fn nv12_in_one_fd_is_read_through_plane_views_exactly() {
    imports_exactly(Fourcc::NV12, Files::One);
}

#[test]
fn nv12_in_two_fds_is_read_through_plane_views_exactly() {
    imports_exactly(Fourcc::NV12, Files::PerPlane);
}

#[test]
fn p010_in_one_fd_is_read_through_plane_views_exactly() {
    imports_exactly(Fourcc::P010, Files::One);
}

#[test]
fn p010_in_two_fds_is_read_through_plane_views_exactly() {
    imports_exactly(Fourcc::P010, Files::PerPlane);
}
