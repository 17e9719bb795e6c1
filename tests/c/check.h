/* What the C test programs share: CHECK, which counts a failure and goes on (so one run
 * reports every broken promise), the one C memfd helper, and the one way a C producer here
 * makes a frame's buffer (a dma-heap dma-buf where the kernel has one, else a memfd).
 * Include after dmabridge.h, in a file that defines _GNU_SOURCE before its first include
 * (memfd_create needs it). */
#ifndef DMABRIDGE_TEST_CHECK_H
#define DMABRIDGE_TEST_CHECK_H

#include <fcntl.h>
#include <linux/dma-buf.h>
#include <linux/dma-heap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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

/* A buffer holding `len` bytes, as a C producer (a decoder, a camera) hands one over: a
 * dma-buf from the system dma-heap where the kernel has one (the kernel lab; there it must),
 * written through a mapping bracketed by DMA_BUF_IOCTL_SYNC, else a sealed memfd. Its real
 * size (a heap rounds up to whole pages) goes to `*size`. -1 on failure; the caller owns
 * the fd. */
static int frame_buffer(const uint8_t *bytes, size_t len, size_t *size) {
    const char *config = getenv("DMABRIDGE_TEST_CONFIG");
    int heap = open("/dev/dma_heap/system", O_RDWR | O_CLOEXEC);
    if (heap < 0) {
        if (config && strcmp(config, "kernel") == 0) {
            fprintf(stderr, "the kernel lab has no /dev/dma_heap/system\n");
            return -1;
        }
        *size = len;
        return sealed_memfd(bytes, len);
    }
    struct dma_heap_allocation_data alloc = {.len = len, .fd_flags = O_RDWR | O_CLOEXEC};
    int ok = ioctl(heap, DMA_HEAP_IOCTL_ALLOC, &alloc) == 0;
    close(heap);
    if (!ok) return -1;
    int fd = (int)alloc.fd;
    off_t end = lseek(fd, 0, SEEK_END); /* a dma-buf's size: SEEK_END, then back to 0 */
    lseek(fd, 0, SEEK_SET);
    void *map = end > 0 ? mmap(NULL, (size_t)end, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (map == MAP_FAILED) {
        close(fd);
        return -1;
    }
    struct dma_buf_sync sync = {.flags = DMA_BUF_SYNC_START | DMA_BUF_SYNC_WRITE};
    ok = ioctl(fd, DMA_BUF_IOCTL_SYNC, &sync) == 0;
    memcpy(map, bytes, len);
    sync.flags = DMA_BUF_SYNC_END | DMA_BUF_SYNC_WRITE;
    ok = ok && ioctl(fd, DMA_BUF_IOCTL_SYNC, &sync) == 0;
    munmap(map, (size_t)end);
    if (!ok) {
        close(fd);
        return -1;
    }
    *size = (size_t)end;
    return fd;
}

#define DMB_TEST_NV12 0x3231564eu /* 'N' 'V' '1' '2' */

/* A padded NV12 `w` x `h` frame (w <= 128, h even) in a frame_buffer (a dma-buf in the
 * kernel lab, a sealed memfd here), as a decoder would hand it over: luma rows 128 bytes
 * apart, the chroma plane 4 KiB past the luma; the object's size is the buffer's. `expected`
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
    size_t size = 0;
    int fd = frame_buffer(file, len, &size);
    f.objects[0] = (dmb_object){.fd = fd, .size = size, .format_modifier = 0};
    f.planes[0] = (dmb_plane){.object_index = 0, .offset = 0, .pitch = stride};
    f.planes[1] = (dmb_plane){.object_index = 0, .offset = uv_offset, .pitch = stride};
    free(file);
    return f;
}

#endif
