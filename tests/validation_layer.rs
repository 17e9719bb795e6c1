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
