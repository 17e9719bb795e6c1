//! The validation check itself must be able to fail: provoke a real validation error and
//! see it collected.

mod common;

use dmabridge::ash::vk;

#[test]
fn a_real_validation_error_is_caught() {
    let engine = common::engine();
    let device = engine.device();
    // usage 0 violates VUID-VkBufferCreateInfo-usage-requiredbitmask; the driver itself
    // copes with it, so only the layer notices.
    let info = vk::BufferCreateInfo::default().size(64).usage(vk::BufferUsageFlags::empty());
    // SAFETY: deliberately invalid usage flags (see above); the buffer, if created, is
    // destroyed right away and never bound or used.
    unsafe {
        if let Ok(buffer) = device.create_buffer(&info, None) {
            device.destroy_buffer(buffer, None);
        }
    }
    let problems = engine.validation().expect("validation on").problems();
    assert!(
        problems.iter().any(|p| p.is_error() && p.id_name.contains("VUID-VkBufferCreateInfo-usage")),
        "expected the layer to report the bad usage, got {problems:?}"
    );
}

#[test]
fn only_the_list2_false_positive_is_ever_set_aside() {
    let engine = common::engine();
    let log = engine.validation().expect("validation on");
    let msg = |text: &str| dmabridge::ValidationMessage {
        severity: vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        id_name: "VUID-test".into(),
        text: text.into(),
    };
    let list2_shape = msg(
        "In vkCmdCopyImageToBuffer, VkFormatFeatureFlags (0x0) does not support required feature \
         VK_FORMAT_FEATURE_2_TRANSFER_SRC_BIT for format 44 used by VkImage with tiling VK_IMAGE_TILING_DRM_FORMAT_MODIFIER_EXT.",
    );
    let other = msg("VkFormatFeatureFlags (0x0) does not support required feature X with tiling VK_IMAGE_TILING_OPTIMAL");
    // lavapipe leaves List2 empty exactly when it has modifiers (the udmabuf configurations).
    assert_eq!(engine.drm_modifier_list2_is_empty(), common::expect_modifiers());
    assert_eq!(log.is_known_false_positive(&list2_shape), engine.drm_modifier_list2_is_empty());
    assert!(!log.is_known_false_positive(&other));
    common::assert_clean(&engine);
}
