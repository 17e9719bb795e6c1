//! The exact use ([`ImageUse`]: usage, create flags, view formats) from the capability
//! query through negotiation to the images export and import create, against the real
//! lavapipe with the validation layer on. A `MUTABLE_FORMAT` image with DRM tiling that did
//! not list its view formats would be reported by the layer
//! (VUID-VkImageCreateInfo-tiling-02353), and so would an image created for a use the
//! driver never agreed to; both fail these tests.

mod common;

use std::sync::Arc;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{DmaBuf, PlaneDesc, PlaneLayout};
use dmabridge::interop::negotiate::reconcile;
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{
    SupportQuery, Direction, Engine, ExportError, ExportRequest, ImageUse, ImportPath, ParticipantRequest,
};

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);

/// A compositor's render target that is also sampled, and viewed as sRGB for blending.
fn compositor_use() -> ImageUse {
    ImageUse::parse("sampled+color-attachment+transfer-src+transfer-dst:create=mutable-format:srgb-view").expect("a valid use")
}

/// Views `image` (of `R8G8B8A8_UNORM` memory) as `R8G8B8A8_SRGB`, which only an image created
/// `MUTABLE_FORMAT` with the sRGB twin in its format list may be
/// (VUID-VkImageViewCreateInfo-image-01762, VUID-VkImageViewCreateInfo-pNext-01585).
fn srgb_view(engine: &Engine, image: vk::Image) {
    let info = vk::ImageViewCreateInfo::default()
        .image(image)
        .view_type(vk::ImageViewType::TYPE_2D)
        .format(vk::Format::R8G8B8A8_SRGB)
        .subresource_range(vk::ImageSubresourceRange {
            aspect_mask: vk::ImageAspectFlags::COLOR,
            base_mip_level: 0,
            level_count: 1,
            base_array_layer: 0,
            layer_count: 1,
        });
    // SAFETY: `image` is a live image of this engine's device; the view is destroyed at once.
    let view = unsafe { engine.device().create_image_view(&info, None) }.expect("an sRGB view");
    // SAFETY: the view was made above and nothing uses it.
    unsafe { engine.device().destroy_image_view(view, None) };
}

#[test]
fn the_capability_query_is_keyed_by_the_whole_use() {
    let engine = common::engine();
    let plain = engine.format_support(&SupportQuery::new(Fourcc::ABGR8888, vk::ImageUsageFlags::SAMPLED)).expect("query");
    let srgb = engine.format_support(&SupportQuery::new(Fourcc::ABGR8888, ImageUse::new(vk::ImageUsageFlags::SAMPLED).with_srgb_view())).expect("query");
    assert!(!Arc::ptr_eq(&plain, &srgb), "an sRGB view is a different question");
    assert_eq!(srgb.query.image_use.create_flags(srgb.vk_format), vk::ImageCreateFlags::MUTABLE_FORMAT);
    assert!(srgb.get(Modifier::LINEAR).is_some_and(|c| c.can_import()), "lavapipe imports AB24 LINEAR for an sRGB view");
    // A combination the driver refuses: NV12 with storage, through the explicit modifiers.
    let nv12 = engine
        .format_support(&SupportQuery::new(Fourcc::NV12, vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::STORAGE))
        .expect("query");
    if common::expect_modifiers() {
        assert!(nv12.modifiers.iter().all(|m| !m.can_import() && !m.can_export()), "{nv12:?}");
    }
    // The 64-bit features: every supported row's features cover the use.
    for m in srgb.modifiers.iter().filter(|m| m.supported()) {
        assert!(m.tiling_features.contains(vk::FormatFeatureFlags2::SAMPLED_IMAGE), "{m:?}");
    }
    common::assert_clean(&engine);
}

#[test]
fn a_mutable_export_with_an_srgb_view_imports_back_clean() {
    let a = common::engine();
    let b = common::engine();
    let use_ = compositor_use();
    let (w, h) = (40u32, 24u32);
    let req = ExportRequest::new(Fourcc::ABGR8888, w, h, use_).with_acceptable([LINEAR]);
    match a.export_image(&req) {
        Err(ExportError::DmaBufExportUnsupported { .. }) if !common::expect_modifiers() => {
            // Plain lavapipe exports no DMA_BUF; a buffer it imports for the same use goes
            // through the copy path, whose device image has the use too.
            let bytes = common::pattern((w * h * 4) as usize, 7);
            let buf = DmaBuf::new(Fourcc::ABGR8888, LINEAR, w, h, vec![PlaneDesc { fd: common::dmabuf_with(&bytes), offset: 0, stride: u64::from(w) * 4 }])
                .expect("descriptor");
            let image = b.import_dmabuf(&buf, use_).expect("import for the use");
            assert_eq!(image.path(), ImportPath::BufferCopy);
            assert!(image.image_use().covers(&use_));
            srgb_view(&b, image.image());
            assert_eq!(image.read_back().expect("read back"), bytes);
        }
        Err(e) => panic!("export failed: {e}"),
        Ok(exported) => {
            assert!(common::expect_modifiers());
            assert_eq!(exported.image_use(), use_);
            srgb_view(&a, exported.image());
            exported.clear_and_release([1.0, 0.5, 0.0, 1.0], Default::default()).expect("clear").wait(dmabridge::READBACK_TIMEOUT).expect("clear");
            let image = b.import_dmabuf(exported.dmabuf().expect("a dma-buf"), use_).expect("import for the same use");
            assert_eq!(image.path(), ImportPath::Explicit, "zero-copy, with the view-format list");
            assert_eq!(image.image_use(), use_);
            srgb_view(&b, image.image());
            let back = image.read_back().expect("read back");
            // The clear wrote UNORM values (0.5 * 255 rounds to 128): the sRGB view changes
            // how the bytes read, not the bytes.
            assert!(back.chunks_exact(4).all(|px| px == [255, 128, 0, 255]), "{:?}", &back[..8]);
        }
    }
    common::assert_clean(&a);
    common::assert_clean(&b);
}

#[test]
fn a_use_wider_than_the_negotiated_one_is_a_typed_error() {
    let engine = common::engine();
    let (w, h) = (32u32, 16u32);
    let renderer = ParticipantRequest::new("renderer", vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::TRANSFER_DST, Direction::Export)
        .with_fourccs(&[Fourcc::ABGR8888]);
    let compositor = ParticipantRequest::new("compositor", vk::ImageUsageFlags::SAMPLED, Direction::Import).with_fourccs(&[Fourcc::ABGR8888]);
    let parts = [engine.participant(&renderer).expect("renderer"), engine.participant(&compositor).expect("compositor")];

    // The producer's image may not be made for more than it negotiated for: refused before
    // the driver sees it, in either configuration.
    let mut wider = renderer.export_request(Fourcc::ABGR8888, w, h, [LINEAR]);
    wider.image_use.usage |= vk::ImageUsageFlags::STORAGE;
    match engine.export_image(&wider) {
        Err(ExportError::WiderThanNegotiated(e)) => {
            assert_eq!(e.extra, "storage");
            assert!(e.to_string().contains("negotiated for color-attachment+transfer-dst"), "{e}");
        }
        other => panic!("expected WiderThanNegotiated, got {other:?}"),
    }

    // The buffer the compositor is handed: the renderer's export where the device has one
    // (what negotiation chose), else a LINEAR memfd.
    let exported;
    let buf = if common::expect_modifiers() {
        let allocation = reconcile(&parts).expect("both share AB24 LINEAR");
        assert_eq!(allocation.layout.modifiers(), &[Modifier::LINEAR]);
        let layouts = allocation.layout.modifiers().iter().map(|m| Layout::Explicit(*m));
        exported = engine.export_image(&renderer.export_request(Fourcc::ABGR8888, w, h, layouts)).expect("export for the negotiated use");
        exported.clear_and_release([0.0, 0.0, 1.0, 1.0], Default::default()).expect("clear").wait(dmabridge::READBACK_TIMEOUT).expect("clear");
        exported.dmabuf().expect("a dma-buf").try_clone().expect("dup")
    } else {
        let bytes = vec![0u8; (w * h * 4) as usize];
        DmaBuf::new(Fourcc::ABGR8888, LINEAR, w, h, vec![PlaneDesc { fd: common::dmabuf_with(&bytes), offset: 0, stride: u64::from(w) * 4 }]).expect("descriptor")
    };

    // A compositor negotiated for sampling cannot import it for storage, or as mutable.
    let storage = vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::STORAGE;
    match compositor.import_use(storage) {
        Err(e) => {
            assert_eq!(e.negotiated, ImageUse::new(vk::ImageUsageFlags::SAMPLED));
            assert_eq!(e.extra, "storage");
        }
        other => panic!("expected WiderUse, got {other:?}"),
    }
    let mutable = ImageUse::new(vk::ImageUsageFlags::SAMPLED).with_srgb_view();
    assert!(compositor.import_use(mutable).is_err());
    // The use it negotiated for (or a narrower one) is fine.
    let sampled = compositor.import_use(vk::ImageUsageFlags::SAMPLED).expect("the negotiated use");
    let image = engine.import_dmabuf(&buf, sampled).expect("the negotiated use");
    assert_eq!(image.usage(), vk::ImageUsageFlags::SAMPLED | if image.path() == ImportPath::Explicit { vk::ImageUsageFlags::empty() } else { vk::ImageUsageFlags::TRANSFER_DST });
    drop(image);
    common::assert_clean(&engine);
}

#[test]
fn disjoint_is_the_layouts_on_import_and_refused_on_export() {
    let engine = common::engine();
    let use_ = ImageUse::new(vk::ImageUsageFlags::TRANSFER_DST).with_create(vk::ImageCreateFlags::DISJOINT);
    match engine.export_image(&ExportRequest::new(Fourcc::ABGR8888, 16, 16, use_)) {
        Err(ExportError::DisjointExport(u)) => assert_eq!(u, use_),
        other => panic!("expected DisjointExport, got {other:?}"),
    }
    // One fd: the import is not disjoint whatever the use says.
    let bytes = common::pattern(16 * 16 * 4, 9);
    let buf = DmaBuf::new(Fourcc::ABGR8888, LINEAR, 16, 16, vec![PlaneDesc { fd: common::dmabuf_with(&bytes), offset: 0, stride: 64 }]).expect("descriptor");
    let image = engine
        .import_dmabuf(&buf, ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC).with_create(vk::ImageCreateFlags::DISJOINT))
        .expect("import");
    assert!(!image.image_use().create.contains(vk::ImageCreateFlags::DISJOINT));
    assert_eq!(image.read_back().expect("read back"), bytes);
    drop(image);
    common::assert_clean(&engine);
}

/// An imposed explicit layout (offset, pitch and the bytes each plane may span) is what the
/// exported dma-buf describes, or the export is refused naming both layouts: a plane the
/// driver makes larger than its place would run into the next one.
#[test]
fn an_imposed_layout_is_honoured_whole_or_refused() {
    let engine = common::engine();
    let use_ = ImageUse::new(vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST);
    let req = ExportRequest::new(Fourcc::ABGR8888, 64, 16, use_);
    // A padded pitch: 512 bytes for 256 bytes of pixels.
    let asked = PlaneLayout::linear(0, 512, 16);
    let exported = engine.export_image_with_layout(&req, Modifier::LINEAR, &[asked]);
    if !common::expect_modifiers() {
        assert!(matches!(exported, Err(ExportError::NoAcceptableModifier { .. })), "{exported:?}");
        return;
    }
    let exported = exported.expect("an imposed LINEAR layout");
    let buf = exported.dmabuf().expect("a dma-buf");
    assert_eq!(buf.plane_layouts(), vec![asked]);
    drop(exported);
    let short = PlaneLayout { size: asked.size - 1, ..asked };
    match engine.export_image_with_layout(&req, Modifier::LINEAR, &[short]) {
        Err(ExportError::LayoutNotHonoured { plane: 0, asked, got }) => {
            assert_eq!(asked, short);
            assert_eq!((got.offset, got.stride), (0, 512));
            assert!(got.size > short.size, "{got:?}");
        }
        other => panic!("expected LayoutNotHonoured, got {other:?}"),
    }
    common::assert_clean(&engine);
}
