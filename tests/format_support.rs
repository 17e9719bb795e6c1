//! The capability query against the real lavapipe, in whichever configuration the suite
//! runs (see scripts/test.sh): plain, or with udmabuf.

mod common;
#[cfg(feature = "present")]
#[path = "common/present.rs"]
mod present_check;

use dmabridge::ash::vk;
use dmabridge::interop::{Fourcc, Modifier};
use dmabridge::device::usage::IMAGE_USAGES;
use dmabridge::{SupportQuery, SupportSource, DeviceExtension};

#[test]
fn device_is_lavapipe_with_what_it_offers() {
    let engine = common::engine();
    let info = engine.info();
    assert!(!info.name.is_empty());
    assert!(!info.api_version.is_empty());
    assert!(engine.extensions().has(DeviceExtension::ExternalMemoryFd));
    assert!(engine.extensions().has(DeviceExtension::ExternalMemoryDmaBuf));
    assert_eq!(engine.has_modifiers(), common::expect_modifiers(), "config {:?}", common::config());
    assert_eq!(engine.extensions().has(DeviceExtension::ImageDrmFormatModifier), common::expect_modifiers());
    assert!(!engine.is_embedded());
    common::assert_clean(&engine);
}

#[test]
fn rgb8_linear_is_importable_for_every_usage_and_exportable_with_udmabuf() {
    let engine = common::engine();
    for fourcc in [Fourcc::ARGB8888, Fourcc::XRGB8888, Fourcc::ABGR8888, Fourcc::XBGR8888] {
        for (usage, flags) in IMAGE_USAGES {
            let caps = engine.format_support(&SupportQuery::new(fourcc, flags)).expect("query");
            let expected_source =
                if common::expect_modifiers() { SupportSource::DrmModifier } else { SupportSource::LinearTiling };
            assert_eq!(caps.source, expected_source);
            let linear = caps.get(Modifier::LINEAR).unwrap_or_else(|| panic!("{fourcc} {usage:?}: no LINEAR"));
            assert_eq!(linear.plane_count, 1);
            assert!(linear.can_import(), "{fourcc} {usage:?}: {linear:?}");
            // Export of DMA_BUF needs udmabuf on lavapipe: the driver says so itself.
            assert_eq!(linear.can_export(), common::expect_modifiers(), "{fourcc} {usage:?}: {linear:?}");
            let limits = linear.limits.expect("accepted combinations carry limits");
            assert!(limits.max_extent.width >= 4096 && limits.max_extent.height >= 4096);
        }
    }
    common::assert_clean(&engine);
}

#[test]
fn nv12_reports_two_planes_and_what_the_driver_answers() {
    let engine = common::engine();
    for (usage, flags) in IMAGE_USAGES {
        let caps = engine.format_support(&SupportQuery::new(Fourcc::NV12, flags)).expect("query");
        assert_eq!(caps.vk_format, vk::Format::G8_B8R8_2PLANE_420_UNORM);
        let linear = caps.get(Modifier::LINEAR).expect("LINEAR is listed for NV12");
        assert_eq!(linear.plane_count, 2);
        // Storage and colour attachment are never available for a multi-planar format
        // without view tricks; the engine must report the refusal, not assume support.
        if matches!(usage, "storage" | "color-attachment") {
            assert!(!linear.supported(), "{usage:?}");
        }
        // lavapipe's modifier support is single-plane only: with the extension it lists
        // LINEAR for NV12 but refuses every use of it.
        if common::expect_modifiers() {
            assert!(!linear.supported(), "{usage:?}: {linear:?}");
        }
    }
    common::assert_clean(&engine);
}

#[test]
fn a_rejected_combination_is_reported_unsupported() {
    let engine = common::engine();
    // Same format, accepted for sampling...
    let sampled = engine.format_support(&SupportQuery::new(Fourcc::ARGB8888, vk::ImageUsageFlags::SAMPLED)).expect("query");
    assert!(sampled.get(Modifier::LINEAR).is_some_and(|c| c.supported()));
    // ...refused by the driver itself (the image-format query fails) as a depth attachment.
    let depth = engine
        .format_support(&SupportQuery::new(Fourcc::ARGB8888, vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT))
        .expect("query");
    let linear = depth.get(Modifier::LINEAR).expect("the list does not depend on the usage");
    assert!(linear.limits.is_none(), "driver accepted it: {linear:?}");
    assert!(!linear.supported() && !linear.can_import() && !linear.can_export(), "{linear:?}");
    // A multi-planar format as a storage image: also the driver's refusal, not ours.
    let nv12 = engine
        .format_support(&SupportQuery::new(Fourcc::NV12, vk::ImageUsageFlags::STORAGE | vk::ImageUsageFlags::SAMPLED))
        .expect("query");
    assert!(nv12.get(Modifier::LINEAR).is_some_and(|c| c.limits.is_none()));
    // A usage the tiling features lack: RG16 has no storage.
    let rg16 = engine.format_support(&SupportQuery::new(Fourcc::RGB565, vk::ImageUsageFlags::STORAGE)).expect("query");
    assert!(rg16.get(Modifier::LINEAR).is_some_and(|c| !c.features_cover_usage && !c.supported()));
    common::assert_clean(&engine);
}

#[test]
fn every_table_entry_answers_and_results_are_cached() {
    let engine = common::engine();
    for entry in dmabridge::device::vk_format::VK_FORMAT_TABLE {
        let q = SupportQuery::new(entry.fourcc, vk::ImageUsageFlags::SAMPLED);
        let first = engine.format_support(&q).expect("query");
        let second = engine.format_support(&q).expect("query");
        assert!(std::sync::Arc::ptr_eq(&first, &second), "{} not cached", entry.fourcc);
        assert!(!first.modifiers.is_empty(), "{}: LINEAR at least is always listed", entry.fourcc);
    }
    let unknown = engine.format_support(&SupportQuery::new(Fourcc::from_bytes(*b"ZZZZ"), vk::ImageUsageFlags::SAMPLED));
    assert!(matches!(unknown, Err(dmabridge::FormatSupportError::UnknownFourcc(_))));
    common::assert_clean(&engine);
}

#[test]
fn opaque_fd_handle_type_is_queried_separately() {
    let engine = common::engine();
    let q = SupportQuery::new(Fourcc::ABGR8888, vk::ImageUsageFlags::SAMPLED)
        .with_handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
    let caps = engine.format_support(&q).expect("query");
    let linear = caps.get(Modifier::LINEAR).expect("LINEAR");
    // lavapipe shares OPAQUE_FD memory between its own instances in both configurations.
    assert!(linear.can_import() && linear.can_export(), "{linear:?}");
    common::assert_clean(&engine);
}

/// lavapipe's LINEAR pitch rule, measured into the opened device's participant and kept by
/// a buffer dmabridge places for it (the same check the drm-shim runs on radv and anv).
#[test]
fn the_opened_device_states_the_linear_pitch_its_driver_takes() {
    let engine = common::engine();
    let image_use = dmabridge::ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC);
    let aligns = common::linear_pitch_is_measured_and_placed_for(&engine, image_use, &[Fourcc::ARGB8888, Fourcc::NV12]);
    // Measured only where LINEAR is an explicit layout (the modifier extension).
    assert_eq!(aligns.is_empty(), !common::expect_modifiers(), "{aligns:?}");
    eprintln!("lavapipe: LINEAR pitch alignment measured: {}", aligns.join(", "));
    common::assert_clean(&engine);
}

/// The presenter's graphics pipelines compile on lavapipe for every frame kind it samples
/// (the same check the drm-shim runs on radv and anv), with no window.
#[cfg(feature = "present")] // on in the workspace build the test command runs (the CLI enables it)
#[test]
fn present_pipelines_compile_without_a_window() {
    let engine = common::engine();
    let (compiled, refused) = present_check::present_pipelines_compile(&engine);
    assert!(compiled > 0);
    eprintln!("lavapipe: {compiled} frame kinds drawn by present pipelines compiled ({refused} kinds not sampleable)");
    common::assert_clean(&engine);
}
