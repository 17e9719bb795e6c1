//! A producer's dma-buf, imported through dmabridge on a device shared with wgpu, read by a
//! wgpu compute pass: the read-back must be exactly the producer's pixels. The validation
//! layer is on (wgpu's `InstanceFlags::VALIDATION`), and any message it sends fails the test.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use dmabridge::interop::dmabuf::{DmaBuf, PlaneDesc};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{Capability, EnabledFeatures, SubmitOptions};
use dmabridge_wgpu::{wgpu, OpenError, SharedDevice};
use support::{adapter, assert_clean, block_on, shared, TIMEOUT};

const SHADER: &str = r#"
@group(0) @binding(0) var src: texture_2d<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

// Each texel back as the four bytes AR24 keeps in memory: B, G, R, A.
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let size = textureDimensions(src);
    if (id.x >= size.x || id.y >= size.y) {
        return;
    }
    let c = textureLoad(src, vec2<i32>(id.xy), 0);
    out[id.y * size.x + id.x] = pack4x8unorm(vec4<f32>(c.b, c.g, c.r, c.a));
}
"#;

/// Runs the compute pass over `texture` inside `shared.submit_frame` and returns what it
/// wrote: `width * height` texels of 4 bytes.
fn read_through_wgpu(shared: &SharedDevice, frame: &dmabridge_wgpu::ImportedTexture) -> Vec<u8> {
    let device = shared.device();
    let (w, h) = frame.image().extent();
    let bytes = u64::from(w) * u64::from(h) * 4;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(SHADER.into()) });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let out = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC, mapped_at_creation: false });
    let read = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST, mapped_at_creation: false });
    let view = frame.texture().create_view(&wgpu::TextureViewDescriptor::default());
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::TextureView(&view) },
            wgpu::BindGroupEntry { binding: 1, resource: out.as_entire_binding() },
        ],
    });
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(w.div_ceil(8), h.div_ceil(8), 1);
    }
    encoder.copy_buffer_to_buffer(&out, 0, &read, 0, bytes);
    let submitted = shared.submit_frame(&[frame], [encoder.finish()], SubmitOptions::default()).expect("frame submitted");
    submitted.wait(TIMEOUT).expect("frame done");
    let slice = read.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.expect("mapping the read-back"));
    device.poll(wgpu::PollType::Wait { submission_index: Some(submitted.wgpu.clone()), timeout: Some(TIMEOUT) }).expect("wgpu done");
    let data = slice.get_mapped_range().expect("the mapped read-back").to_vec();
    read.unmap();
    data
}

#[test]
fn a_producers_ar24_dma_buf_is_read_by_a_wgpu_pass_exactly() {
    let shared = shared(wgpu::Features::empty());
    // An odd size, rows padded, the image at an offset: a wrong stride or offset reads
    // other bytes. Every texel differs from its neighbours, and alpha too.
    let (w, h) = (61u32, 37u32);
    let (offset, stride) = (4096usize, 61 * 4 + 20);
    let pixels = common::pattern((w * h * 4) as usize, 7);
    let mut file = vec![0xa5u8; offset + stride * h as usize];
    common::place_rows(&mut file, &pixels, (w * 4) as usize, h as usize, offset, stride);
    let buf = DmaBuf::new(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), w, h, vec![PlaneDesc {
        fd: common::dmabuf_with(&file),
        offset: offset as u64,
        stride: stride as u64,
    }])
    .expect("descriptor");

    let offered = SharedDevice::offered(&adapter()).expect("a Vulkan adapter");
    for c in offered {
        assert!(shared.engine().has_capability(c), "open enables {c}: {:?}", shared.engine().capabilities());
    }
    let frame = shared.import(&buf).expect("import as a wgpu texture");
    eprintln!("import path: {}", frame.path());
    let read = read_through_wgpu(&shared, &frame);
    assert_eq!(read.len(), pixels.len());
    if let Some(i) = read.iter().zip(&pixels).position(|(a, b)| a != b) {
        let t = i / 4;
        panic!("texel ({}, {}) byte {}: wgpu read {:#04x}, the producer wrote {:#04x}", t % w as usize, t / w as usize, i % 4, read[i], pixels[i]);
    }
    drop(frame);
    assert_clean(Some(&shared));
}

#[test]
fn a_wgpu_device_without_dmabridges_extensions_is_refused_by_name() {
    let adapter = adapter();
    let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).expect("a plain wgpu device");
    // What SharedDevice::open enables here; wgpu alone enables the dma-buf extensions but
    // not VK_EXT_queue_family_foreign or samplerYcbcrConversion, both of which lavapipe has.
    let offered = SharedDevice::offered(&adapter).expect("a Vulkan adapter");
    for c in [Capability::Core, Capability::DmaBufImport, Capability::ForeignQueue, Capability::YcbcrSampling] {
        assert!(offered.contains(&c), "lavapipe offers {c}: {offered:?}");
    }
    let features = EnabledFeatures { timeline_semaphore: true, sampler_ycbcr_conversion: false };
    // SAFETY: wgpu enables timelineSemaphore on lavapipe; nothing else submits to the queue.
    let refused = unsafe { SharedDevice::from_wgpu(device, queue, features, &offered) };
    // The first capability wgpu left out: foreign-queue in the plain configuration; with a
    // udmabuf, explicit-modifiers comes first (wgpu enables VK_EXT_image_drm_format_modifier
    // but not VK_KHR_image_format_list, which dmabridge names explicitly).
    match refused {
        Err(e @ OpenError::Missing { capability, .. }) => {
            let OpenError::Missing { missing, .. } = &e else { unreachable!() };
            assert!(
                matches!(capability, Capability::ForeignQueue | Capability::ExplicitModifiers),
                "wgpu enables the dma-buf extensions and timelines itself: {e}"
            );
            let text = e.to_string();
            assert!(text.contains(capability.name()), "the error names the capability: {text}");
            assert!(!missing.is_empty() && missing.iter().all(|m| text.contains(&m.to_string())), "the error names what is missing: {text}");
            if capability == Capability::ForeignQueue {
                assert!(text.contains("VK_EXT_queue_family_foreign"), "{text}");
            }
        }
        other => panic!("a device wgpu opened alone lacks VK_EXT_queue_family_foreign, got {other:?}"),
    }
    // The same device, asked for less, is taken: wgpu 30 enables the dma-buf extensions itself.
    let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).expect("a plain wgpu device");
    // SAFETY: as above.
    let taken = unsafe { SharedDevice::from_wgpu(device, queue, features, &[Capability::DmaBufImport]) }.expect("import needs no more");
    assert!(!taken.engine().has_capability(Capability::YcbcrSampling), "wgpu never enables samplerYcbcrConversion");
    drop(taken);
    assert_clean(None);
}
