/* dmb_engine_from_host against the real library: a C host engine creates its own Vulkan
 * instance and device (through the loader, dlopen'd, with the validation layer and a debug
 * messenger of its own when DMABRIDGE_VALIDATION=1), hands them to dmabridge, imports a
 * padded NV12 memfd frame and reads it back, and destroys its device only after dmabridge's
 * on_drop callback, which must come once, after the last engine and image are freed.
 * Hostile host descriptions are refused. No Vulkan headers are installed here, so the few
 * structs the host needs are declared below, as the Vulkan 1.3 registry lays them out.
 * Built and run by scripts/test.sh in every configuration, with pkg-config's flags only
 * (dlopen is in glibc's libc since 2.34):
 *   gcc -Wall -Wextra -Werror tests/c/capi_host_test.c $(pkg-config --cflags --libs dmabridge)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dmabridge.h"
#include "check.h"

/* --- the slice of vulkan_core.h this host uses --- */
typedef uint32_t VkFlags;
typedef uint32_t VkBool32;
typedef int32_t VkResult;
typedef void *VkInstance;
typedef void *VkPhysicalDevice;
typedef void *VkDevice;
typedef uint64_t VkDebugUtilsMessengerEXT;
typedef void (*PFN_vkVoidFunction)(void);
typedef PFN_vkVoidFunction (*PFN_vkGetInstanceProcAddr)(VkInstance, const char *);

typedef struct {
    int sType; const void *pNext; const char *pApplicationName; uint32_t applicationVersion;
    const char *pEngineName; uint32_t engineVersion; uint32_t apiVersion;
} VkApplicationInfo;
typedef struct {
    int sType; const void *pNext; VkFlags flags; const VkApplicationInfo *pApplicationInfo;
    uint32_t enabledLayerCount; const char *const *ppEnabledLayerNames;
    uint32_t enabledExtensionCount; const char *const *ppEnabledExtensionNames;
} VkInstanceCreateInfo;
typedef struct {
    int sType; const void *pNext; VkFlags flags; uint32_t queueFamilyIndex; uint32_t queueCount;
    const float *pQueuePriorities;
} VkDeviceQueueCreateInfo;
typedef struct {
    int sType; const void *pNext; VkFlags flags; uint32_t queueCreateInfoCount;
    const VkDeviceQueueCreateInfo *pQueueCreateInfos; uint32_t enabledLayerCount;
    const char *const *ppEnabledLayerNames; uint32_t enabledExtensionCount;
    const char *const *ppEnabledExtensionNames; const void *pEnabledFeatures;
} VkDeviceCreateInfo;
typedef struct { int sType; void *pNext; VkBool32 timelineSemaphore; } VkPhysicalDeviceTimelineSemaphoreFeatures;
typedef struct { int sType; void *pNext; VkBool32 samplerYcbcrConversion; } VkPhysicalDeviceSamplerYcbcrConversionFeatures;
typedef struct { char extensionName[256]; uint32_t specVersion; } VkExtensionProperties;
typedef struct {
    int sType; const void *pNext; VkFlags flags; const char *pMessageIdName; int32_t messageIdNumber;
    const char *pMessage; /* more fields follow; the callback reads only these */
} VkDebugUtilsMessengerCallbackDataEXT;
typedef VkBool32 (*PFN_vkDebugUtilsMessengerCallbackEXT)(uint32_t, VkFlags, const VkDebugUtilsMessengerCallbackDataEXT *, void *);
typedef struct {
    int sType; const void *pNext; VkFlags flags; VkFlags messageSeverity; VkFlags messageType;
    PFN_vkDebugUtilsMessengerCallbackEXT pfnUserCallback; void *pUserData;
} VkDebugUtilsMessengerCreateInfoEXT;

#define VK_STRUCTURE_TYPE_APPLICATION_INFO 0
#define VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO 1
#define VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO 2
#define VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO 3
#define VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT 1000128004
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SAMPLER_YCBCR_CONVERSION_FEATURES 1000156004
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES 1000207000
#define VK_API_VERSION_1_3 ((1u << 22) | (3u << 12))
#define SEVERITY_WARNING 0x100
#define SEVERITY_ERROR 0x1000

typedef VkResult (*PFN_vkCreateInstance)(const VkInstanceCreateInfo *, const void *, VkInstance *);
typedef void (*PFN_vkDestroyInstance)(VkInstance, const void *);
typedef VkResult (*PFN_vkEnumeratePhysicalDevices)(VkInstance, uint32_t *, VkPhysicalDevice *);
typedef VkResult (*PFN_vkEnumerateDeviceExtensionProperties)(VkPhysicalDevice, const char *, uint32_t *, VkExtensionProperties *);
typedef VkResult (*PFN_vkCreateDevice)(VkPhysicalDevice, const VkDeviceCreateInfo *, const void *, VkDevice *);
typedef void (*PFN_vkDestroyDevice)(VkDevice, const void *);
typedef VkResult (*PFN_vkCreateDebugUtilsMessengerEXT)(VkInstance, const VkDebugUtilsMessengerCreateInfoEXT *, const void *, VkDebugUtilsMessengerEXT *);
typedef void (*PFN_vkDestroyDebugUtilsMessengerEXT)(VkInstance, VkDebugUtilsMessengerEXT, const void *);
/* --- end of the Vulkan slice --- */

#define NV12 DMB_TEST_NV12
#define W 64
#define H 32

static int validation_problems = 0;
static int drops = 0;

static VkBool32 on_message(uint32_t severity, VkFlags types, const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)types; (void)user;
    if (severity & (SEVERITY_WARNING | SEVERITY_ERROR)) {
        validation_problems++;
        fprintf(stderr, "validation: %s\n", data && data->pMessage ? data->pMessage : "(no message)");
    }
    return 0;
}

static void on_drop(void *user) {
    drops++;
    CHECK(user == &drops, "on_drop gets the host's user pointer");
}

static int want(const char *name) {
    static const char *const wanted[] = {
        "VK_KHR_external_memory_fd", "VK_EXT_external_memory_dma_buf", "VK_EXT_image_drm_format_modifier",
        "VK_KHR_image_format_list", "VK_EXT_queue_family_foreign", "VK_KHR_external_semaphore_fd",
        "VK_KHR_format_feature_flags2",
    };
    for (size_t i = 0; i < sizeof wanted / sizeof *wanted; i++)
        if (!strcmp(name, wanted[i])) return 1;
    return 0;
}

int main(void) {
    void *loader = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!loader) {
        fprintf(stderr, "no Vulkan loader: %s\n", dlerror());
        return 1;
    }
    PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(loader, "vkGetInstanceProcAddr");
    const char *v = getenv("DMABRIDGE_VALIDATION");
    int validation = v && (!strcmp(v, "1") || !strcmp(v, "true"));

    /* The host's instance: Vulkan 1.3, its own validation layer and messenger. */
    const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
    const char *instance_exts[] = {"VK_EXT_debug_utils"};
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "capi_host_test", .apiVersion = VK_API_VERSION_1_3};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                                .enabledLayerCount = validation, .ppEnabledLayerNames = layers,
                                .enabledExtensionCount = validation, .ppEnabledExtensionNames = instance_exts};
    VkInstance instance = NULL;
    if (((PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance"))(&ici, NULL, &instance) != 0) {
        fprintf(stderr, "vkCreateInstance failed\n");
        return 1;
    }
    VkDebugUtilsMessengerEXT messenger = 0;
    if (validation) {
        VkDebugUtilsMessengerCreateInfoEXT mci = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                                                  .messageSeverity = SEVERITY_WARNING | SEVERITY_ERROR,
                                                  .messageType = 1 | 2 | 4, .pfnUserCallback = on_message};
        CHECK(((PFN_vkCreateDebugUtilsMessengerEXT)gipa(instance, "vkCreateDebugUtilsMessengerEXT"))(instance, &mci, NULL, &messenger) == 0, "messenger");
    }
    uint32_t n = 1;
    VkPhysicalDevice pd = NULL;
    VkResult r = ((PFN_vkEnumeratePhysicalDevices)gipa(instance, "vkEnumeratePhysicalDevices"))(instance, &n, &pd);
    if ((r != 0 && r != 5 /* VK_INCOMPLETE */) || !pd) {
        fprintf(stderr, "no physical device\n");
        return 1;
    }

    /* The device: every extension dmabridge can use that this one offers, and both features. */
    PFN_vkEnumerateDeviceExtensionProperties enum_exts = (PFN_vkEnumerateDeviceExtensionProperties)gipa(instance, "vkEnumerateDeviceExtensionProperties");
    uint32_t count = 0;
    enum_exts(pd, NULL, &count, NULL);
    VkExtensionProperties *props = calloc(count, sizeof *props);
    enum_exts(pd, NULL, &count, props);
    const char **exts = calloc(count, sizeof *exts);
    uint32_t n_exts = 0;
    for (uint32_t i = 0; i < count; i++)
        if (want(props[i].extensionName)) exts[n_exts++] = props[i].extensionName;
    VkPhysicalDeviceSamplerYcbcrConversionFeatures ycbcr = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SAMPLER_YCBCR_CONVERSION_FEATURES, .samplerYcbcrConversion = 1};
    VkPhysicalDeviceTimelineSemaphoreFeatures timeline = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES, .pNext = &ycbcr, .timelineSemaphore = 1};
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = 0, .queueCount = 1, .pQueuePriorities = &priority};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &timeline, .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci, .enabledExtensionCount = n_exts, .ppEnabledExtensionNames = exts};
    VkDevice device = NULL;
    if (((PFN_vkCreateDevice)gipa(instance, "vkCreateDevice"))(pd, &dci, NULL, &device) != 0) {
        fprintf(stderr, "vkCreateDevice failed\n");
        return 1;
    }

    dmb_host_vulkan host = {
        .instance = instance, .physical_device = pd, .device = device, .instance_api_version = VK_API_VERSION_1_3,
        .queue_family_index = 0, .queue_index = 0, .get_instance_proc_addr = (dmb_get_instance_proc_addr)gipa,
        .enabled_device_extensions = exts, .enabled_device_extension_count = n_exts,
        .timeline_semaphore = 1, .sampler_ycbcr_conversion = 1, .on_drop = on_drop, .user = &drops,
    };

    /* Hostile or incomplete descriptions are refused, and none of them calls on_drop. */
    dmb_engine *e = NULL;
    CHECK(dmb_engine_from_host(NULL, &e) == DMB_ERR_INVALID && !e, "a null host");
    dmb_host_vulkan bad = host;
    bad.device = NULL;
    CHECK(dmb_engine_from_host(&bad, &e) == DMB_ERR_INVALID && !e, "a null device");
    bad = host;
    bad.get_instance_proc_addr = NULL;
    CHECK(dmb_engine_from_host(&bad, &e) == DMB_ERR_INVALID && !e, "no vkGetInstanceProcAddr");
    bad = host;
    bad.enabled_device_extensions = NULL;
    CHECK(n_exts == 0 || (dmb_engine_from_host(&bad, &e) == DMB_ERR_INVALID && !e), "extensions at NULL");
    bad = host;
    bad.timeline_semaphore = 0;
    CHECK(dmb_engine_from_host(&bad, &e) == DMB_ERR_UNSUPPORTED && !e, "without timeline semaphores");
    CHECK(strstr(dmb_last_error(), "timeline") != NULL, "the message names the missing feature: %s", dmb_last_error());
    bad = host;
    bad.queue_family_index = 99;
    CHECK(dmb_engine_from_host(&bad, &e) == DMB_ERR_UNSUPPORTED && !e, "a queue family the device lacks");
    CHECK(drops == 0, "refused descriptions never call on_drop (%d calls)", drops);

    /* The real thing: import a padded NV12 frame on the host's device and read it back. */
    CHECK(dmb_engine_from_host(&host, &e) == DMB_OK && e, "the host's device");
    uint8_t *expected = malloc(W * H * 3 / 2), *got = malloc(W * H * 3 / 2);
    dmb_frame f = padded_nv12(W, H, 5, expected);
    int fd = f.objects[0].fd;
    CHECK(fd >= 0, "memfd");
    dmb_image *img = NULL;
    if (e) {
        CHECK(dmb_import(e, &f, &img) == DMB_OK && img, "import on the host's device");
        if (img) {
            CHECK(dmb_image_read(img, got, W * H * 3 / 2) == DMB_OK, "read back");
            CHECK(memcmp(got, expected, W * H * 3 / 2) == 0, "the bytes read back are the frame's");
        }
        /* The image keeps the device in use: freeing the engine first must not call on_drop. */
        dmb_engine_free(e);
        CHECK(drops == 0, "on_drop ran while an image still used the device");
        dmb_image_free(img);
    }
    CHECK(drops == 1, "on_drop ran once after the last handle was freed (%d calls)", drops);

    /* Only now may the host destroy its device. */
    ((PFN_vkDestroyDevice)gipa(instance, "vkDestroyDevice"))(device, NULL);
    if (messenger)
        ((PFN_vkDestroyDebugUtilsMessengerEXT)gipa(instance, "vkDestroyDebugUtilsMessengerEXT"))(instance, messenger, NULL);
    ((PFN_vkDestroyInstance)gipa(instance, "vkDestroyInstance"))(instance, NULL);
    CHECK(validation_problems == 0, "%d validation messages", validation_problems);
    close(fd);
    free(expected); free(got); free(exts); free(props);
    dlclose(loader);
    if (failures) {
        fprintf(stderr, "capi_host_test: %d failures\n", failures);
        return 1;
    }
    printf("capi_host_test: ok (the host's device, validation %s)\n", validation ? "on" : "off");
    return 0;
}
