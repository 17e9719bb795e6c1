//! The one place a `vk::Result` becomes an error.
//!
//! Every Vulkan call whose result dmabridge checks goes through [`VkResultExt::vk`], which
//! names the call. Each operation's own error enum (`ImportError`, `ExportError`, ...) holds a
//! [`VkError`] in a `Vk` variant, so a failure always says which call failed and how.

use ash::vk;

/// A Vulkan call that returned an error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {result}")]
pub struct VkError {
    /// The Vulkan entry point, e.g. `"vkAllocateMemory"`.
    pub call: &'static str,
    /// What it returned.
    pub result: vk::Result,
}

impl VkError {
    /// Whether the device was lost: every later call on it fails too.
    pub fn is_device_lost(&self) -> bool {
        self.result == vk::Result::ERROR_DEVICE_LOST
    }

    /// Whether the call ran out of host or device memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self.result, vk::Result::ERROR_OUT_OF_HOST_MEMORY | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY)
    }
}

/// Names the Vulkan call behind a `VkResult`.
pub trait VkResultExt<T> {
    /// `Err(result)` becomes `Err(VkError { call, result })`.
    fn vk(self, call: &'static str) -> Result<T, VkError>;
}

impl<T> VkResultExt<T> for Result<T, vk::Result> {
    fn vk(self, call: &'static str) -> Result<T, VkError> {
        self.map_err(|result| VkError { call, result })
    }
}

impl<T> VkResultExt<T> for Result<T, (T, vk::Result)> {
    fn vk(self, call: &'static str) -> Result<T, VkError> {
        self.map_err(|(_, result)| VkError { call, result })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_call() {
        let e = Err::<(), _>(vk::Result::ERROR_DEVICE_LOST).vk("vkQueueSubmit").unwrap_err();
        assert!(e.to_string().starts_with("vkQueueSubmit failed: "), "{e}");
        assert_eq!(e.result, vk::Result::ERROR_DEVICE_LOST);
        assert!(e.is_device_lost());
        assert!(!e.is_out_of_memory());
    }
}
