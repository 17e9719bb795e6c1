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
use support::{adapter, assert_clean, block_on, read_ar24, shared};

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
    let (read, _) = read_ar24(&shared, &frame, SubmitOptions::default());
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
