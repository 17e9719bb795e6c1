/* The C ABI against the real library: a padded NV12 frame in a memfd imported and read back,
 * a tiled frame converted and back, hostile frames refused, 1,000 import/free cycles without
 * a leaked fd, a negotiation's JSON, and nothing from the validation layer.
 * Built and run by scripts/test.sh in both configurations:
 *   gcc -Wall -Wextra -Werror -Iinclude tests/c/capi_test.c -Ltarget/debug -ldmabridge
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dmabridge.h"
#include "check.h"

#define NV12 DMB_TEST_NV12
#define W 64
#define H 32


static int fd_count(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

int main(void) {
    dmb_engine *e = NULL;
    if (dmb_engine_new(&e) != DMB_OK) {
        fprintf(stderr, "no engine: %s\n", dmb_last_error());
        return 1;
    }

    /* NV12 64x32: Y rows 128 bytes apart, the UV plane 4 KiB further on. */
    uint8_t *expected = malloc(W * H * 3 / 2), *got = malloc(W * H * 3 / 2);
    dmb_frame f = padded_nv12(W, H, 0, expected);
    int fd = f.objects[0].fd;
    const size_t len = f.objects[0].size;
    CHECK(fd >= 0, "memfd");
    dmb_image *img = NULL;
    CHECK(dmb_import(e, &f, &img) == DMB_OK, "import the padded NV12 frame");
    if (img) {
        CHECK(dmb_image_read(img, got, W * H * 3 / 2) == DMB_OK, "read back");
        CHECK(memcmp(got, expected, W * H * 3 / 2) == 0, "the bytes read back are the frame's");
        CHECK(dmb_image_read(img, got, 10) == DMB_ERR_INVALID, "a short destination is refused");
        dmb_image_free(img);
    }

    /* A tiled frame: linear -> samsung-64x32 -> linear is the identity. */
    /* 64x32 tiles, rows padded to 128 bytes: one row of two tiles per plane. */
    const size_t tiled_len = 128 * 32 + 128 * 32;
    uint8_t *tiled = calloc(tiled_len, 1), *back = calloc(W * H * 3 / 2, 1);
    CHECK(dmb_convert(e, "linear", "samsung-64x32", NV12, W, H, expected, W * H * 3 / 2, tiled, tiled_len) == DMB_OK, "tile");
    CHECK(memcmp(tiled + 2048, expected + 2048, 64) != 0, "the tiled frame is not the linear one (its second tile is padding)");
    CHECK(dmb_convert(e, "0x0400000000000001", "linear", NV12, W, H, tiled, tiled_len, back, W * H * 3 / 2) == DMB_OK, "detile by modifier");
    CHECK(memcmp(back, expected, W * H * 3 / 2) == 0, "detile(tile(x)) == x");
    CHECK(dmb_convert(e, "zigzag", "linear", NV12, W, H, tiled, tiled_len, back, W * H * 3 / 2) == DMB_ERR_INVALID, "unknown layout");
    CHECK(dmb_convert(e, "linear", "samsung-64x32", NV12, W, H, expected, 10, tiled, tiled_len) == DMB_ERR_INVALID, "short source");

    /* Hostile frames: refused with a message, never a crash. */
    dmb_frame bad = f;
    CHECK(dmb_import(e, NULL, &img) == DMB_ERR_INVALID && strlen(dmb_last_error()) > 0, "null frame");
    bad.nb_planes = 5;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "five planes");
    bad = f;
    bad.objects[0].fd = -3;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "a negative fd");
    bad = f;
    bad.objects[0].fd = 987;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "a closed fd");
    bad = f;
    bad.planes[1].object_index = 3;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "an object index out of range");
    bad = f;
    bad.planes[1].offset = len;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "a plane past the end of the fd");
    bad = f;
    bad.planes[0].pitch = 10;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "a pitch shorter than a row");

    /* 1,000 import/free cycles leave no fd behind. */
    int before = fd_count();
    for (int i = 0; i < 1000; i++) {
        img = NULL;
        if (dmb_import(e, &f, &img) != DMB_OK) {
            CHECK(0, "import %d", i);
            break;
        }
        dmb_image_free(img);
    }
    CHECK(fd_count() == before, "fds before %d, after %d", before, fd_count());

    /* A negotiation: a tiled decoder and an RGB-only display get a copy plan. */
    const char *args[] = {"--v4l2", "dec=NV12MT", "--drm-formats=display=XR24,AR24"};
    char *json = NULL;
    CHECK(dmb_negotiate_json(args, 3, &json) == DMB_OK && json && strstr(json, "\"outcome\":\"copy\""), "negotiate: %s", json ? json : "(none)");
    dmb_string_free(json);
    const char *nobody[] = {"--teleport", "x"};
    json = NULL;
    CHECK(dmb_negotiate_json(nobody, 2, &json) == DMB_ERR_INVALID && json == NULL, "an unknown flag");

    CHECK(dmb_engine_validation_problems(e) == 0, "the validation layer reported %d problem(s)", dmb_engine_validation_problems(e));
    dmb_engine_free(e);
    close(fd);
    free(expected), free(got), free(tiled), free(back);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("capi: import, read, convert, hostile frames, 1000 cycles (fds %d -> %d), negotiate: ok\n", before, fd_count());
    return 0;
}
