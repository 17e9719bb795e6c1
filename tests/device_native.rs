//! Device-native conversion: whatever tiling an image has on the device (OPTIMAL here, the
//! driver's private layout), the engine copies it to a linear buffer laid out exactly as
//! the consumer asks (offset and stride per plane), and back.

mod common;

use dmabridge::ash::vk;
use dmabridge::interop::format_info;
use dmabridge::interop::tiling::LinearPlane;
use dmabridge::interop::Fourcc;
use dmabridge::{Engine, GpuBuffer, ReadbackError};

/// An OPTIMAL-tiled image of `format` with its memory; the caller destroys both.
fn optimal_image(engine: &Engine, format: vk::Format, (w, h): (u32, u32)) -> (vk::Image, vk::DeviceMemory) {
    let device = engine.device();
    let info = vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(format)
        .extent(vk::Extent3D { width: w, height: h, depth: 1 })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED);
    // SAFETY: valid create info for a format lavapipe supports with OPTIMAL tiling.
    unsafe {
        let image = device.create_image(&info, None).expect("image");
        let reqs = device.get_image_memory_requirements(image);
        let ti = engine.memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty()).expect("memory type");
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(ti);
        let memory = device.allocate_memory(&alloc, None).expect("memory");
        device.bind_image_memory(image, memory, 0).expect("bind");
        (image, memory)
    }
}

fn layout_with(fourcc: Fourcc, (w, h): (u32, u32), base: u64, pad: u64) -> (Vec<LinearPlane>, u64) {
    let info = format_info(fourcc).expect("format");
    let mut planes = Vec::new();
    let mut at = base;
    for i in 0..info.plane_count() {
        let stride = info.min_stride(i, w) + pad;
        planes.push(LinearPlane { offset: at, stride });
        at += stride * info.plane_height(i, h) as u64 + 4096;
    }
    (planes, at)
}

fn visible(bytes: &[u8], fourcc: Fourcc, (w, h): (u32, u32), planes: &[LinearPlane]) -> Vec<u8> {
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
        let (image, memory) = optimal_image(&engine, format, extent);
        // The producer's layout: offset 256, rows padded by 64 bytes.
        let (in_planes, in_len) = layout_with(fourcc, extent, 256, 64);
        let mut src = GpuBuffer::new(&engine, in_len as usize).expect("buffer");
        src.bytes_mut().copy_from_slice(&common::pattern(in_len as usize, 60));
        engine
            .copy_linear_to_image(&src, &in_planes, image, fourcc, extent, vk::ImageLayout::UNDEFINED)
            .expect("linear -> image");
        // The consumer's layout: different offset and padding.
        let (out_planes, out_len) = layout_with(fourcc, extent, 4096, 128);
        let dst = GpuBuffer::new(&engine, out_len as usize).expect("buffer");
        engine
            .copy_image_to_linear(image, fourcc, extent, vk::ImageLayout::TRANSFER_DST_OPTIMAL, &dst, &out_planes)
            .expect("image -> linear");
        assert_eq!(
            visible(dst.bytes(), fourcc, extent, &out_planes),
            visible(src.bytes(), fourcc, extent, &in_planes),
            "{fourcc}"
        );
        // A stride that is not whole texels, and a buffer too small: typed errors, no copy.
        let odd = [LinearPlane { offset: 0, stride: 70 * 4 + 2 }];
        if fourcc == Fourcc::ARGB8888 {
            let r = engine.copy_image_to_linear(image, fourcc, extent, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &dst, &odd);
            assert!(matches!(r, Err(ReadbackError::PlaneLayout { .. })), "{r:?}");
            let tiny = GpuBuffer::new(&engine, 64).expect("buffer");
            let r = engine.copy_image_to_linear(image, fourcc, extent, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &tiny, &out_planes);
            assert!(matches!(r, Err(ReadbackError::PastEndOfBuffer { .. })), "{r:?}");
        }
        // SAFETY: the copies were waited for; nothing else uses these objects.
        unsafe {
            engine.device().destroy_image(image, None);
            engine.device().free_memory(memory, None);
        }
    }
    common::assert_clean(&engine);
}
