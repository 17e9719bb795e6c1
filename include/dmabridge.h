/* dmabridge's C ABI (libdmabridge.so): import dma-buf frames into Vulkan, convert tiled and
 * colour layouts, negotiate formats. Written by hand and checked against the library by
 * tests/c/capi_test.c, which the test command compiles with gcc and runs in both
 * configurations.
 *
 * The frame descriptor is FFmpeg's AVDRMFrameDescriptor field for field: objects are fds
 * (with a size and the format modifier), planes are an object index, an offset and a pitch.
 *
 * Every function catches Rust panics (DMB_ERR_DEVICE), refuses null pointers, negative or
 * closed fds and out-of-range counts (DMB_ERR_INVALID), and leaves its message in
 * dmb_last_error(), per thread. fds in a dmb_frame are borrowed: dmabridge dups what it keeps.
 */
#ifndef DMABRIDGE_H
#define DMABRIDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dmb_engine dmb_engine;
typedef struct dmb_image dmb_image;

typedef struct { int fd; uint64_t size; uint64_t format_modifier; } dmb_object;   /* AVDRMObjectDescriptor */
typedef struct { int object_index; uint64_t offset; uint64_t pitch; } dmb_plane;  /* AVDRMPlaneDescriptor */
typedef struct {
    uint32_t drm_format, width, height;
    int nb_objects;
    dmb_object objects[4];
    int nb_planes;
    dmb_plane planes[4];
} dmb_frame;

typedef enum {
    DMB_OK = 0,
    DMB_ERR_INVALID = 1,     /* a null pointer, a bad fd, a layout the checks refuse */
    DMB_ERR_IMPOSSIBLE = 2,  /* valid, but no way exists (negotiation, conversion) */
    DMB_ERR_UNSUPPORTED = 3, /* this device cannot do it */
    DMB_ERR_DEVICE = 4,      /* the device failed, or dmabridge did (a caught panic) */
} dmb_status;

/* A new engine on the best Vulkan device ($DMABRIDGE_DEVICE, $DMABRIDGE_VALIDATION=1). */
dmb_status dmb_engine_new(dmb_engine **out);

/* The host engine's own Vulkan objects (dispatchable handles are pointers: pass the host's
 * VkInstance, VkPhysicalDevice and VkDevice as they are). */
typedef void (*dmb_void_fn)(void);
typedef dmb_void_fn (*dmb_get_instance_proc_addr)(void *instance, const char *name);
typedef struct {
    void *instance;                 /* VkInstance */
    void *physical_device;          /* VkPhysicalDevice */
    void *device;                   /* VkDevice, created from physical_device */
    uint32_t instance_api_version;  /* the instance's apiVersion, at least Vulkan 1.2 */
    uint32_t queue_family_index;    /* a queue with compute support dmabridge submits to */
    uint32_t queue_index;
    dmb_get_instance_proc_addr get_instance_proc_addr;
    const char *const *enabled_device_extensions; /* what the host enabled; dmabridge uses only these */
    size_t enabled_device_extension_count;
    int timeline_semaphore;         /* non-zero: the feature is enabled (required) */
    int sampler_ycbcr_conversion;   /* non-zero: enabled (NV12 sampling) */
    void (*on_drop)(void *user);    /* called once, on any thread, when dmabridge is done with the
                                       device (the engine and all its images freed); may be NULL */
    void *user;
} dmb_host_vulkan;

/* An engine on the host's device: dmabridge uses the host's extensions and features and
 * nothing more, and the host destroys its device only after on_drop. DMB_ERR_UNSUPPORTED
 * names what the core needs and the device lacks; DMB_ERR_INVALID for null handles. The
 * host submits to that queue only while dmabridge is not using it. */
dmb_status dmb_engine_from_host(const dmb_host_vulkan *host, dmb_engine **out);
/* Frees an engine; its images keep the device in use until they are freed too. */
void dmb_engine_free(dmb_engine *e);
/* Warnings and errors the validation layer reported on the engine's device; -1 for NULL. */
int dmb_engine_validation_problems(const dmb_engine *e);

/* This thread's last error message ("" after a success); valid until its next call. */
const char *dmb_last_error(void);

/* `dmabridge negotiate`'s arguments ("--drm-formats", "display=XR24", ...); the JSON
 * document in *json_out (free with dmb_string_free), also on DMB_ERR_IMPOSSIBLE. */
dmb_status dmb_negotiate_json(const char *const *args, size_t nargs, char **json_out);
void dmb_string_free(char *s);

/* Checks and imports a frame (fds borrowed); reads it back as tightly packed planes, one
 * after another. */
dmb_status dmb_import(dmb_engine *e, const dmb_frame *f, dmb_image **out);
dmb_status dmb_image_read(dmb_image *img, uint8_t *dst, uint64_t dst_size);
void dmb_image_free(dmb_image *img);

/* One frame from one layout to another ("linear", "samsung-64x32", "0x0400000000000001",
 * ...) in drm_format, on the path the cost model picks. */
dmb_status dmb_convert(dmb_engine *e, const char *from_layout, const char *to_layout, uint32_t drm_format,
                       uint32_t width, uint32_t height, const uint8_t *src, uint64_t src_size, uint8_t *dst,
                       uint64_t dst_size);

#ifdef __cplusplus
}
#endif

#endif
