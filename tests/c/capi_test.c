/* The C ABI against the real library: a padded NV12 frame in a memfd imported and read back,
 * a tiled frame converted and back, hostile frames refused, 1,000 import/free cycles without
 * a leaked fd, a DCC frame (three memory planes, as radv lays one out) carried to the import
 * path, a negotiation's JSON from arguments and from the participant builder (with
 * each of its errors), and nothing from the validation layer.
 * Built and run by scripts/test.sh in every configuration, with pkg-config's flags only:
 *   gcc -Wall -Wextra -Werror tests/c/capi_test.c $(pkg-config --cflags --libs dmabridge)
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
    {
        /* A memfd of the frame's size, reopened write-only: nothing can read a frame
         * through it. (Its own memfd: the frame's fd is a dma-buf in the kernel lab, and a
         * dma-buf cannot be reopened.) */
        int mem = memfd_create("capi-write-only", MFD_CLOEXEC);
        CHECK(mem >= 0 && ftruncate(mem, (off_t)len) == 0, "a memfd");
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", mem);
        int wronly = open(path, O_WRONLY | O_CLOEXEC);
        CHECK(wronly >= 0, "reopen the memfd write-only");
        bad = f;
        bad.objects[0].fd = wronly;
        CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID && strstr(dmb_last_error(), "write-only") != NULL, "a write-only fd: %s", dmb_last_error());
        close(wronly);
        close(mem);
    }
    bad = f;
    bad.planes[1].object_index = 3;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "an object index out of range");
    bad = f;
    bad.planes[1].offset = len;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "a plane past the end of the fd");
    bad = f;
    bad.planes[0].pitch = 10;
    CHECK(dmb_import(e, &bad, &img) == DMB_ERR_INVALID, "a pitch shorter than a row");

    /* A DCC layout as radv lays it out (navi31 on Mesa's drm-shim, AR24 256x64 with
     * AMD_FMT_MOD GFX11 64K_R_X + DCC + DCC_RETILE): three memory planes for a one-plane
     * format, the pixels, the displayable DCC and the pipe-aligned DCC. The frame carries all
     * three past the descriptor's checks to the import path, which finds that the device
     * (lavapipe) does not list the modifier and that no copy reads it as rows: the refusal
     * names the layout, not a plane count. */
    {
        const uint64_t dcc = 0x0200000028a67b04ull;
        size_t size = 0;
        uint8_t *zeros = calloc(163840, 1);
        dmb_frame d = {.drm_format = 0x34325241u /* AR24 */, .width = 256, .height = 64, .nb_objects = 1, .nb_planes = 3};
        d.objects[0] = (dmb_object){.fd = frame_buffer(zeros, 163840, &size), .size = 0, .format_modifier = dcc};
        d.objects[0].size = size;
        d.planes[0] = (dmb_plane){.object_index = 0, .offset = 0, .pitch = 1024};
        d.planes[1] = (dmb_plane){.object_index = 0, .offset = 131072, .pitch = 512};
        d.planes[2] = (dmb_plane){.object_index = 0, .offset = 147456, .pitch = 1024};
        free(zeros);
        CHECK(d.objects[0].fd >= 0, "the DCC frame's buffer");
        img = NULL;
        int s = dmb_import(e, &d, &img);
        CHECK(s == DMB_ERR_INVALID && img == NULL && strstr(dmb_last_error(), "DCC_RETILE") != NULL && strstr(dmb_last_error(), "needs a detiling conversion") != NULL,
              "a DCC frame reaches the import path's refusal: %d %s", s, dmb_last_error());
        /* One plane too many for the modifier's memory planes on any device is the
         * descriptor's refusal, before the device. */
        d.nb_planes = 4;
        d.planes[3] = d.planes[2];
        CHECK(dmb_import(e, &d, &img) == DMB_ERR_INVALID && img == NULL, "four planes that overlap: %s", dmb_last_error());
        close(d.objects[0].fd);
    }

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

    /* The same negotiation through the participant builder, and every error it types. */
    dmb_participants *p = NULL;
    CHECK(dmb_participants_new(NULL, NULL) == DMB_ERR_INVALID, "a builder into NULL");
    CHECK(dmb_participants_new(NULL, &p) == DMB_OK && p, "a builder without an engine");
    CHECK(dmb_participants_add(p, DMB_PEER_V4L2, "dec", "NV12MT") == DMB_OK, "a V4L2 decoder");
    CHECK(dmb_participants_add(p, DMB_PEER_DRM_FORMATS, "display", "XR24,AR24") == DMB_OK, "a display");
    CHECK(dmb_participants_add(p, DMB_PEER_DRM_FORMATS, "display", "NV12") == DMB_ERR_INVALID && strstr(dmb_last_error(), "more than once"), "a repeated name");
    CHECK(dmb_participants_add(p, DMB_PEER_DRM_FORMATS, "", "NV12") == DMB_ERR_INVALID, "an empty name");
    CHECK(dmb_participants_add(p, 99, "x", "NV12") == DMB_ERR_INVALID && strstr(dmb_last_error(), "99"), "an unknown kind");
    CHECK(dmb_participants_add(p, DMB_PEER_DRM_FORMATS, NULL, "NV12") == DMB_ERR_INVALID, "a null name");
    CHECK(dmb_participants_add(NULL, DMB_PEER_DRM_FORMATS, "x", "NV12") == DMB_ERR_INVALID, "a null builder");
    CHECK(dmb_participants_constrain(p, "display", "min-buffers", "2") == DMB_OK, "a constraint");
    CHECK(dmb_participants_constrain(p, "nobody", "align", "4") == DMB_ERR_INVALID && strstr(dmb_last_error(), "nobody"), "an unknown participant");
    CHECK(dmb_participants_constrain(p, "display", "colour", "red") == DMB_ERR_INVALID && strstr(dmb_last_error(), "colour"), "an unknown key");
    CHECK(dmb_participants_constrain(p, "display", "align", "big") == DMB_ERR_INVALID && strstr(dmb_last_error(), "align"), "a value that does not parse");
    json = NULL;
    CHECK(dmb_participants_negotiate_json(p, &json) == DMB_OK && json && strstr(json, "\"outcome\":\"copy\""), "builder: %s", json ? json : "(none)");
    dmb_string_free(json);
    json = NULL;
    CHECK(dmb_participants_negotiate_json(p, &json) == DMB_OK && json, "a builder negotiates again");
    dmb_string_free(json);
    CHECK(dmb_participants_negotiate_json(p, NULL) == DMB_ERR_INVALID, "json_out NULL");
    /* A constraint no buffer meets: impossible, with the document naming it. */
    CHECK(dmb_participants_constrain(p, "display", "max-buffers", "1") == DMB_OK, "max-buffers below min-buffers");
    json = NULL;
    CHECK(dmb_participants_negotiate_json(p, &json) == DMB_ERR_IMPOSSIBLE && json && strstr(json, "max-buffers"), "impossible: %s", json ? json : "(none)");
    dmb_string_free(json);
    dmb_participants_free(p);
    /* The live kinds: Wayland never (no Wayland client in the library), Vulkan with an engine. */
    p = NULL;
    CHECK(dmb_participants_new(NULL, &p) == DMB_OK, "a builder without an engine");
    CHECK(dmb_participants_add(p, DMB_PEER_VULKAN, "gpu", "sample") == DMB_OK, "a device participant");
    json = NULL;
    CHECK(dmb_participants_negotiate_json(p, &json) == DMB_ERR_UNSUPPORTED && !json && strstr(dmb_last_error(), "\"gpu\""), "Vulkan without an engine");
    dmb_participants_free(p);
    p = NULL;
    CHECK(dmb_participants_new(NULL, &p) == DMB_OK && dmb_participants_add(p, DMB_PEER_WAYLAND, "weston", NULL) == DMB_OK, "a compositor participant");
    CHECK(dmb_participants_negotiate_json(p, &json) == DMB_ERR_UNSUPPORTED, "Wayland is not in the library");
    dmb_participants_free(p);
    /* The live V4L2 and KMS devices: read from their drivers; a missing one is named. */
    p = NULL;
    CHECK(dmb_participants_new(NULL, &p) == DMB_OK && dmb_participants_add(p, DMB_PEER_V4L2_DEVICE, "cam", "/dev/video-none") == DMB_OK, "a V4L2 device participant");
    CHECK(dmb_participants_negotiate_json(p, &json) == DMB_ERR_INVALID && strstr(dmb_last_error(), "/dev/video-none"), "a missing V4L2 device is named: %s", dmb_last_error());
    dmb_participants_free(p);
    p = NULL;
    CHECK(dmb_participants_new(NULL, &p) == DMB_OK && dmb_participants_add(p, DMB_PEER_KMS_DEVICE, "disp", "/dev/dri/card-none:31") == DMB_OK, "a KMS device participant");
    CHECK(dmb_participants_negotiate_json(p, &json) == DMB_ERR_INVALID && strstr(dmb_last_error(), "/dev/dri/card-none"), "a missing KMS device is named: %s", dmb_last_error());
    dmb_participants_free(p);
    p = NULL;
    CHECK(dmb_participants_new(e, &p) == DMB_OK, "a builder on the engine");
    CHECK(dmb_participants_add(p, DMB_PEER_VULKAN, "gpu", "sample") == DMB_OK && dmb_participants_add(p, DMB_PEER_DRM_FORMATS, "display", "XR24,AR24") == DMB_OK, "the device and a display");
    json = NULL;
    dmb_status s = dmb_participants_negotiate_json(p, &json);
    CHECK((s == DMB_OK || s == DMB_ERR_IMPOSSIBLE) && json && strstr(json, "\"gpu\""), "the engine's device negotiates: %d %s", s, json ? json : "(none)");
    dmb_string_free(json);
    CHECK(dmb_participants_add(p, DMB_PEER_VULKAN, "gpu2", "sample+teleport") == DMB_OK, "a use that does not parse is read at negotiation");
    json = NULL;
    CHECK(dmb_participants_negotiate_json(p, &json) == DMB_ERR_INVALID && !json && strstr(dmb_last_error(), "gpu2"), "a bad use names its participant");
    dmb_participants_free(p);
    dmb_participants_free(NULL);

    CHECK(dmb_engine_validation_problems(e) == 0, "the validation layer reported %d problem(s)", dmb_engine_validation_problems(e));
    dmb_engine_free(e);
    close(fd);
    free(expected), free(got), free(tiled), free(back);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("capi: import, read, convert, hostile frames, 1000 cycles (fds %d -> %d), negotiate (arguments and builder): ok\n", before, fd_count());
    return 0;
}
