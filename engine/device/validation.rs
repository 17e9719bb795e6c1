//! The Khronos validation layer and a messenger that keeps what it says.
//!
//! Tests turn validation on and fail on any error it reports; the CLI turns it on with
//! `DMABRIDGE_VALIDATION=1` and exits non-zero when the layer complained.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;

use crate::device::vk_format::{plane_view_formats, VK_FORMAT_TABLE};

pub const LAYER_NAME: &CStr = c"VK_LAYER_KHRONOS_validation";

/// One message from the validation layer.
#[derive(Debug, Clone)]
pub struct ValidationMessage {
    pub severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    pub id_name: String,
    pub text: String,
}

impl ValidationMessage {
    pub fn is_error(&self) -> bool {
        self.severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR)
    }
}

impl std::fmt::Display for ValidationMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:?}] {}: {}", self.severity, self.id_name, self.text)
    }
}

/// Messages collected so far; shared with the messenger callback.
#[derive(Debug, Clone, Default)]
pub struct ValidationLog {
    messages: Arc<Mutex<Vec<ValidationMessage>>>,
    drm_features_unreliable: Arc<AtomicBool>,
}

impl ValidationLog {
    pub fn messages(&self) -> Vec<ValidationMessage> {
        self.messages.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The engine found that the driver leaves `VkDrmFormatModifierPropertiesList2EXT`
    /// empty (see `Engine::drm_modifier_list2_is_empty`): from now on the layer's reports
    /// that a DRM-tiled image has format features `0x0` are known to be wrong.
    pub(crate) fn set_drm_features_unreliable(&self) {
        self.drm_features_unreliable.store(true, Ordering::SeqCst);
    }

    /// Whether `m` is the layer's "format features (0x0) ... DRM_FORMAT_MODIFIER" report made
    /// wrong by the driver inconsistency above, or a Mesa driver's own report of an error
    /// code it is returning (`is_driver_error_report`), or an older layer's report of a
    /// multi-planar image's plane formats in its view-format list
    /// (`is_plane_format_list_report`). Nothing else is ever set aside.
    pub fn is_known_false_positive(&self, m: &ValidationMessage) -> bool {
        is_known_report(&m.text, self.drm_features_unreliable.load(Ordering::SeqCst)) || is_driver_error_report(m)
    }

    /// Errors and warnings: both mean dmabridge did something the spec does not allow or
    /// advise, so both fail a test.
    pub fn problems(&self) -> Vec<ValidationMessage> {
        self.messages()
            .into_iter()
            .filter(|m| {
                m.severity.intersects(
                    vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                ) && !self.is_known_false_positive(m)
            })
            .collect()
    }

    fn push(&self, m: ValidationMessage) {
        if let Ok(mut v) = self.messages.lock() {
            v.push(m);
        }
    }
}

/// Whether a message's text is a report known to be wrong here, whoever's messenger got it
/// (the engine's own log, or a host's through `Adapter::is_known_false_positive`): the
/// "format features (0x0)" report where the driver's List2 is empty
/// (`drm_features_unreliable`), or an older layer's report of plane formats in a
/// multi-planar image's view-format list.
pub(crate) fn is_known_report(text: &str, drm_features_unreliable: bool) -> bool {
    (drm_features_unreliable && is_empty_list2_report(text)) || is_plane_format_list_report(text)
}

/// Whether a validation message is the layer's "format features (0x0)" report for a
/// DRM-tiled image: what it says when the driver leaves `VkDrmFormatModifierPropertiesList2EXT`
/// empty (see `Engine::drm_modifier_list2_is_empty`).
pub(crate) fn is_empty_list2_report(text: &str) -> bool {
    text.contains("VkFormatFeatureFlags (0x0) does not support required feature") && text.contains("VK_IMAGE_TILING_DRM_FORMAT_MODIFIER_EXT")
}

/// Whether a validation message is the older layers' VUID-VkImageCreateInfo-pNext-06722
/// for a plane format in a multi-planar image's view-format list: layers before the spec
/// split the rule (06722 now covers single-plane formats only; VUID-10062 lets a
/// multi-planar `MUTABLE_FORMAT` image list the formats of its planes) compare every listed
/// format with the multi-planar format's own class. Set aside only for the formats
/// [`plane_view_formats`] lists for that image format.
pub(crate) fn is_plane_format_list_report(text: &str) -> bool {
    text.contains("VUID-VkImageCreateInfo-pNext-06722")
        && VK_FORMAT_TABLE.iter().any(|e| {
            text.contains(&format!("VkImageCreateInfo::format (VK_FORMAT_{:?})", e.vk_format))
                && plane_view_formats(e.vk_format).iter().any(|p| text.contains(&format!("] (VK_FORMAT_{p:?}) and VkImageCreateInfo::format")))
        })
}

/// Whether a message is a Mesa driver telling the messenger about an error code it returns
/// (`vk_error` in Mesa's runtime, vk_log.c): a WARNING, as Mesa chose ("not actually
/// application bugs or VU violations"), its id the driver's `file.c:line`, its text the
/// `VK_ERROR_*` name, alone or after a message in parentheses. The caller gets the same
/// code as the call's result and dmabridge returns it as a typed error (radv on Mesa's
/// drm-shim answers every `vkGetMemoryFdKHR` so: `ExportError::MemoryFd`), so it is no
/// finding of the layer's. A layer message's id is a `VUID-` or `UNASSIGNED-` name, never a
/// source line.
pub(crate) fn is_driver_error_report(m: &ValidationMessage) -> bool {
    let source_line = m.id_name.rsplit_once(':').is_some_and(|(file, line)| {
        [".c", ".cpp", ".h", ".hpp"].iter().any(|ext| file.ends_with(ext)) && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit())
    });
    let code = m.text.strip_suffix(')').and_then(|t| t.rsplit_once(" (")).map_or(m.text.as_str(), |(_, code)| code);
    let is_code = code.strip_prefix("VK_ERROR_").is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'));
    m.severity == vk::DebugUtilsMessageSeverityFlagsEXT::WARNING && source_line && is_code
}

/// The callback's user data is a leaked `Box<ValidationLog>`; see [`Messenger`].
unsafe extern "system" fn callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the loader passes a valid callback-data pointer for the duration of the call
    // (VUID-PFN_vkDebugUtilsMessengerCallbackEXT), and `user` is the `ValidationLog` box that
    // `Messenger` keeps alive until after vkDestroyDebugUtilsMessengerEXT.
    let (data, log) = unsafe {
        match (data.as_ref(), (user as *const ValidationLog).as_ref()) {
            (Some(d), Some(l)) => (d, l),
            _ => return vk::FALSE,
        }
    };
    // SAFETY: the strings are NUL-terminated and live for the call (same rule as above).
    let text = unsafe { data.message_as_c_str() }.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    // SAFETY: as above.
    let id_name =
        unsafe { data.message_id_name_as_c_str() }.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let m = ValidationMessage { severity, id_name, text };
    if is_driver_error_report(&m) {
        tracing::debug!(target: "dmabridge::validation", "set aside (the driver's report of the error code it returns): {m}");
    } else if log.is_known_false_positive(&m) {
        tracing::debug!(target: "dmabridge::validation", "set aside (driver leaves List2 empty): {m}");
    } else if m.is_error() {
        tracing::error!(target: "dmabridge::validation", "{m}");
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        tracing::warn!(target: "dmabridge::validation", "{m}");
    }
    log.push(m);
    vk::FALSE
}

/// A debug-utils messenger that owns the log box it hands to the callback.
pub(crate) struct Messenger {
    loader: ash::ext::debug_utils::Instance,
    handle: vk::DebugUtilsMessengerEXT,
    log: *mut ValidationLog,
}

// SAFETY: `log` points to a `ValidationLog` (an `Arc<Mutex<..>>` and an `Arc<AtomicBool>`,
// both thread-safe) that only the callback reads and only `drop` frees; the loader handle
// and messenger are plain Vulkan handles, which may be used from any thread.
unsafe impl Send for Messenger {}
// SAFETY: as above; `&Messenger` exposes nothing.
unsafe impl Sync for Messenger {}

impl Messenger {
    pub(crate) fn create_info(
        log: *mut ValidationLog,
    ) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
        vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(callback))
            .user_data(log.cast())
    }

    pub(crate) fn new(entry: &ash::Entry, instance: &ash::Instance, log: ValidationLog) -> Result<Self, vk::Result> {
        let loader = ash::ext::debug_utils::Instance::new(entry, instance);
        let log = Box::into_raw(Box::new(log));
        let info = Self::create_info(log);
        // SAFETY: the instance was created with VK_EXT_debug_utils enabled
        // (VUID-vkCreateDebugUtilsMessengerEXT-instance-parameter) and the info is valid.
        match unsafe { loader.create_debug_utils_messenger(&info, None) } {
            Ok(handle) => Ok(Messenger { loader, handle, log }),
            Err(e) => {
                // SAFETY: the box was leaked just above and no messenger holds it.
                drop(unsafe { Box::from_raw(log) });
                Err(e)
            }
        }
    }
}

impl Drop for Messenger {
    fn drop(&mut self) {
        // SAFETY: the messenger belongs to this instance and is destroyed once
        // (VUID-vkDestroyDebugUtilsMessengerEXT-messenger-parameter); only then is the log
        // box, which the callback may touch until that point, freed.
        unsafe {
            self.loader.destroy_debug_utils_messenger(self.handle, None);
            drop(Box::from_raw(self.log));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plane_format_in_a_multi_planar_list_is_set_aside_and_nothing_else() {
        // The text layer 1.3.239 sends for P010 imported for wgpu's plane views.
        let report = |view: &str, image: &str| {
            format!("Validation Error: [ VUID-VkImageCreateInfo-pNext-06722 ] | vkCreateImage(): VkImageFormatListCreateInfo::pViewFormats[3] ({view}) and VkImageCreateInfo::format ({image}) are not compatible.")
        };
        let p010 = "VK_FORMAT_G10X6_B10X6R10X6_2PLANE_420_UNORM_3PACK16";
        assert!(is_plane_format_list_report(&report("VK_FORMAT_R16_UNORM", p010)));
        assert!(is_plane_format_list_report(&report("VK_FORMAT_R10X6G10X6_UNORM_2PACK16", p010)));
        assert!(is_plane_format_list_report(&report("VK_FORMAT_R8G8_UNORM", "VK_FORMAT_G8_B8R8_2PLANE_420_UNORM")));
        // Not a plane's format, or not a multi-planar image: the layer is right.
        assert!(!is_plane_format_list_report(&report("VK_FORMAT_R8_UNORM", p010)));
        assert!(!is_plane_format_list_report(&report("VK_FORMAT_R16_UNORM", "VK_FORMAT_B8G8R8A8_UNORM")));
    }

    fn msg(severity: vk::DebugUtilsMessageSeverityFlagsEXT, id: &str, text: &str) -> ValidationMessage {
        ValidationMessage { severity, id_name: id.into(), text: text.into() }
    }

    #[test]
    fn only_a_drivers_report_of_its_own_error_code_is_set_aside() {
        let warn = vk::DebugUtilsMessageSeverityFlagsEXT::WARNING;
        // What radv on the drm-shim says when vkGetMemoryFdKHR fails (Mesa's vk_error).
        assert!(is_driver_error_report(&msg(warn, "../src/amd/vulkan/radv_device_memory.c:372", "VK_ERROR_OUT_OF_DEVICE_MEMORY")));
        assert!(is_driver_error_report(&msg(warn, "radv_image.c:12", "could not export (VK_ERROR_OUT_OF_HOST_MEMORY)")));
        // The layer's own findings, an error severity, or any other text are kept.
        assert!(!is_driver_error_report(&msg(warn, "VUID-vkGetMemoryFdKHR-handleType-00671", "VK_ERROR_OUT_OF_DEVICE_MEMORY")));
        assert!(!is_driver_error_report(&msg(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR, "radv_image.c:12", "VK_ERROR_OUT_OF_DEVICE_MEMORY")));
        assert!(!is_driver_error_report(&msg(warn, "radv_image.c:12", "VK_ERROR_ and then some words")));
        assert!(!is_driver_error_report(&msg(warn, "radv_image.c:", "VK_ERROR_OUT_OF_DEVICE_MEMORY")));
        assert!(!is_driver_error_report(&msg(warn, "UNASSIGNED-BestPractices", "VK_ERROR_DEVICE_LOST")));
    }
}
