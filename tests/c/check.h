/* What the C test programs share: CHECK, which counts a failure and goes on (so one run
 * reports every broken promise), and the one C memfd helper. Include after dmabridge.h, in
 * a file that defines _GNU_SOURCE before its first include (memfd_create needs it). */
#ifndef DMABRIDGE_TEST_CHECK_H
#define DMABRIDGE_TEST_CHECK_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond, ...)                                                 \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                \
            fprintf(stderr, " (last error: %s)\n", dmb_last_error());    \
            failures++;                                                  \
        }                                                                \
    } while (0)

/* A memfd holding `len` bytes, sealed against shrinking and growing (a dma-buf's size is
 * fixed), or -1. The caller owns the fd. */
static int sealed_memfd(const uint8_t *bytes, size_t len) {
    int fd = memfd_create("dmabridge-c-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    if (write(fd, bytes, len) != (ssize_t)len || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

#define DMB_TEST_NV12 0x3231564eu /* 'N' 'V' '1' '2' */

/* A padded NV12 `w` x `h` frame (w <= 128, h even) in a sealed memfd, as a decoder would hand
 * it over: luma rows 128 bytes apart, the chroma plane 4 KiB past the luma. `expected`
 * (w * h * 3 / 2 bytes) receives the tightly packed planes; `seed` varies the bytes. The
 * frame's fd (-1 on failure) is the caller's to close. */
static dmb_frame padded_nv12(uint32_t w, uint32_t h, unsigned seed, uint8_t *expected) {
    const size_t stride = 128, uv_offset = stride * h + 4096, len = uv_offset + stride * (h / 2);
    uint8_t *file = calloc(len, 1);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) file[y * stride + x] = expected[y * w + x] = (uint8_t)(x * 7 + y * 13 + seed);
    for (uint32_t y = 0; y < h / 2; y++)
        for (uint32_t x = 0; x < w; x++)
            file[uv_offset + y * stride + x] = expected[w * h + y * w + x] = (uint8_t)(x * 3 + y * 29 + 1 + seed);
    dmb_frame f = {.drm_format = DMB_TEST_NV12, .width = w, .height = h, .nb_objects = 1, .nb_planes = 2};
    f.objects[0] = (dmb_object){.fd = sealed_memfd(file, len), .size = len, .format_modifier = 0};
    f.planes[0] = (dmb_plane){.object_index = 0, .offset = 0, .pitch = stride};
    f.planes[1] = (dmb_plane){.object_index = 0, .offset = uv_offset, .pitch = stride};
    free(file);
    return f;
}

#endif
