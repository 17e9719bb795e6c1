/* Two C threads on one dmb_engine at once (the header's thread rules): each, released
 * together by a barrier, converts a frame (so both may be the first to make the engine's
 * converter), imports its own frame and reads it back, and negotiates a builder that asks
 * the engine's device, several times over; every result is checked. The test command runs
 * it in every configuration, and once more against a ThreadSanitizer build of the library,
 * which must report nothing (tests/c/tsan.supp sets aside Mesa's, LLVM's and the Vulkan
 * loader's own objects only; each entry says why). With dmb_convert's old lazy fill through
 * `&mut` of the shared engine, TSan reports the race on the converter in every run.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmabridge.h"
#include "check.h"

#define W 64
#define H 32
#define ROUNDS 2
#define THREADS 2

static const dmb_engine *engine;
static pthread_barrier_t start;

struct worker {
    unsigned seed;
    int failures; /* this thread's own: check.h's counter is not shared across threads */
};

/* Like check.h's CHECK, counting into the worker. */
#define TCHECK(w, cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "FAIL thread %u %s:%d: ", (w)->seed, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, " (last error: %s)\n", dmb_last_error());         \
            (w)->failures++;                                                  \
        }                                                                     \
    } while (0)

static void *work(void *arg) {
    struct worker *w = arg;
    const size_t frame_len = W * H * 3 / 2, tiled_len = 128 * 32 + 128 * 32;
    uint8_t *expected = malloc(frame_len), *got = malloc(frame_len), *tiled = calloc(tiled_len, 1), *back = calloc(frame_len, 1);
    dmb_frame f = padded_nv12(W, H, w->seed, expected);
    TCHECK(w, f.objects[0].fd >= 0, "a frame buffer");
    pthread_barrier_wait(&start);
    for (int round = 0; round < ROUNDS; round++) {
        TCHECK(w, dmb_convert(engine, "linear", "samsung-64x32", DMB_TEST_NV12, W, H, expected, frame_len, tiled, tiled_len) == DMB_OK, "tile, round %d", round);
        TCHECK(w, dmb_convert(engine, "samsung-64x32", "linear", DMB_TEST_NV12, W, H, tiled, tiled_len, back, frame_len) == DMB_OK, "detile, round %d", round);
        TCHECK(w, memcmp(back, expected, frame_len) == 0, "detile(tile(x)) == x, round %d", round);

        dmb_image *img = NULL;
        TCHECK(w, dmb_import(engine, &f, &img) == DMB_OK && img, "import, round %d", round);
        if (img) {
            memset(got, 0, frame_len);
            TCHECK(w, dmb_image_read(img, got, frame_len) == DMB_OK, "read back, round %d", round);
            TCHECK(w, memcmp(got, expected, frame_len) == 0, "the bytes read back are this thread's frame, round %d", round);
            dmb_image_free(img);
        }

        dmb_participants *p = NULL;
        char *json = NULL;
        TCHECK(w, dmb_participants_new(engine, &p) == DMB_OK, "a participant builder");
        TCHECK(w, dmb_participants_add(p, DMB_PEER_VULKAN, "gpu", "sample") == DMB_OK, "the engine's device");
        TCHECK(w, dmb_participants_add(p, DMB_PEER_DRM_FORMATS, "display", "XR24,AR24") == DMB_OK, "a display");
        dmb_status s = dmb_participants_negotiate_json(p, &json);
        TCHECK(w, (s == DMB_OK || s == DMB_ERR_IMPOSSIBLE) && json && strstr(json, "\"gpu\""), "negotiate on the engine's device: %d %s", s, json ? json : "(none)");
        dmb_string_free(json);
        dmb_participants_free(p);
    }
    close(f.objects[0].fd);
    free(expected), free(got), free(tiled), free(back);
    return NULL;
}

int main(void) {
    dmb_engine *e = NULL;
    if (dmb_engine_new(&e) != DMB_OK) {
        fprintf(stderr, "no engine: %s\n", dmb_last_error());
        return 1;
    }
    engine = e;
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        workers[i] = (struct worker){.seed = i + 1, .failures = 0};
        CHECK(pthread_create(&threads[i], NULL, work, &workers[i]) == 0, "start thread %u", i);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        failures += workers[i].failures;
    }
    pthread_barrier_destroy(&start);
    CHECK(dmb_engine_validation_problems(e) == 0, "the validation layer reported %d problem(s)", dmb_engine_validation_problems(e));
    dmb_engine_free(e);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("capi threads: %d threads x %d rounds of convert, import, read and negotiate on one engine: ok\n", THREADS, ROUNDS);
    return 0;
}
