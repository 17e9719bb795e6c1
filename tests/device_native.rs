//! Device-native conversion: whatever tiling an image has on the device (OPTIMAL here, the
//! driver's private layout), the engine copies it to a linear buffer laid out exactly as
//! the consumer asks (offset and stride per plane), and back.

mod common;

use dmabridge::ash::vk;
use dmabridge::interop::format_info;
use dmabridge::interop::dmabuf::PlaneLayout;
use dmabridge::interop::Fourcc;
use dmabridge::{BufferLocation, DeviceImage, GpuBuffer, TransferError, READBACK_TIMEOUT};

fn layout_with(fourcc: Fourcc, (w, h): (u32, u32), base: u64, pad: u64) -> (Vec<PlaneLayout>, u64) {
    let info = format_info(fourcc).expect("format");
    let mut planes = Vec::new();
    let mut at = base;
    for i in 0..info.plane_count() {
        let stride = info.min_stride(i, w) + pad;
        planes.push(PlaneLayout::linear(at, stride, info.plane_height(i, h)));
        at += stride * info.plane_height(i, h) as u64 + 4096;
    }
    (planes, at)
}

fn visible(bytes: &[u8], fourcc: Fourcc, (w, h): (u32, u32), planes: &[PlaneLayout]) -> Vec<u8> {
    let info = format_info(fourcc).expect("format");
    let mut out = Vec::new();
    for (i, p) in planes.iter().enumerate() {
        let row = info.min_stride(i, w) as usize;
        for r in 0..info.plane_height(i, h) as usize {
            let s = p.offset as usize + r * p.stride as usize;
            out.extend_from_slice(&bytes[s..s + row]);
        }
    }
    out
}

#[test]
fn any_image_to_the_layout_the_consumer_wants_and_back() {
    let engine = common::engine();
    for (fourcc, format) in [(Fourcc::ARGB8888, vk::Format::B8G8R8A8_UNORM), (Fourcc::NV12, vk::Format::G8_B8R8_2PLANE_420_UNORM)] {
        let extent = (70, 46);
        // An OPTIMAL-tiled image: the driver's private layout.
        let image = DeviceImage::new(&engine, format, extent, vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST)
            .expect("image");
        // The producer's layout: offset 256, rows padded by 64 bytes.
        let (in_planes, in_len) = layout_with(fourcc, extent, 256, 64);
        let mut src = GpuBuffer::new(&engine, in_len, BufferLocation::Upload).expect("buffer");
        src.bytes_mut().expect("mapped").copy_from_slice(&common::pattern(in_len as usize, 60));
        let up = engine.copy_linear_to_image(&src, &in_planes, &image, fourcc, Default::default()).expect("linear -> image");
        // The consumer's layout: different offset and padding; the copy waits for the upload.
        let (out_planes, out_len) = layout_with(fourcc, extent, 4096, 128);
        let dst = GpuBuffer::new(&engine, out_len, BufferLocation::Readback).expect("buffer");
        let down = engine
            .copy_image_to_linear(&image, fourcc, &dst, &out_planes, dmabridge::SubmitOptions::after(&[up.completion()]))
            .expect("image -> linear");
        assert!(matches!(dst.bytes(), Err(dmabridge::BufferError::Busy)) || down.is_done(), "CPU access waits for the GPU");
        down.wait(READBACK_TIMEOUT).expect("done");
        assert_eq!(
            visible(dst.bytes().expect("idle"), fourcc, extent, &out_planes),
            visible(src.bytes().expect("idle"), fourcc, extent, &in_planes),
            "{fourcc}"
        );
        // A stride that is not whole texels, a buffer too small, an image of another format:
        // typed errors, nothing submitted.
        let odd = [PlaneLayout::linear(0, 70 * 4 + 2, 46)];
        if fourcc == Fourcc::ARGB8888 {
            let r = engine.copy_image_to_linear(&image, fourcc, &dst, &odd, Default::default());
            assert!(matches!(r, Err(TransferError::PlaneLayout { .. })), "{r:?}");
            let tiny = GpuBuffer::new(&engine, 64, BufferLocation::Readback).expect("buffer");
            let r = engine.copy_image_to_linear(&image, fourcc, &tiny, &out_planes, Default::default());
            assert!(matches!(r, Err(TransferError::PastEndOfBuffer { .. })), "{r:?}");
            let r = engine.copy_image_to_linear(&image, Fourcc::NV12, &dst, &out_planes, Default::default());
            assert!(matches!(r, Err(TransferError::ImageMismatch { .. })), "{r:?}");
        }
    }
    common::assert_clean(&engine);
}
