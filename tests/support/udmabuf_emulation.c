/*
 * udmabuf emulation: TEST SUPPORT ONLY, loaded with LD_PRELOAD.
 *
 * Why it exists: lavapipe (Mesa >= 24.1) only exposes VK_EXT_image_drm_format_modifier
 * and DMA_BUF export when, at start-up, open("/dev/udmabuf") succeeds and a
 * UDMABUF_CREATE ioctl on it works. CI's kernel has no udmabuf driver, so without help
 * the modifier path of the engine could never be exercised here. lavapipe imports any
 * mmap-able fd as DMA_BUF memory, so a memfd stands in for the dma-buf that udmabuf
 * would have wrapped around it.
 *
 * What it does: answers open("/dev/udmabuf") with a dummy fd (a memfd named
 * "udmabuf-emulation-dummy"), and UDMABUF_CREATE on that fd with a dup of the memfd
 * the caller passed, after the checks the kernel makes (F_SEAL_SHRINK set, F_SEAL_WRITE
 * not, the range inside the file). Everything else goes to libc untouched.
 *
 * When it steps aside: if a real /dev/udmabuf exists, every call is passed through, so
 * a machine with the real driver tests the real driver.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define UDMABUF_PATH "/dev/udmabuf"
#define UDMABUF_FLAGS_CLOEXEC 0x01

struct udmabuf_create {
    uint32_t memfd;
    uint32_t flags;
    uint64_t offset;
    uint64_t size;
};

#define UDMABUF_CREATE _IOW('u', 0x42, struct udmabuf_create)

#define DUMMY_NAME "udmabuf-emulation-dummy"

static int real_udmabuf_exists(void)
{
    struct stat st;
    return stat(UDMABUF_PATH, &st) == 0;
}

static int is_udmabuf_path(const char *path)
{
    return path != NULL && strcmp(path, UDMABUF_PATH) == 0 && !real_udmabuf_exists();
}

static int open_dummy(int flags)
{
    return memfd_create(DUMMY_NAME, (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
}

/* Several threads may open /dev/udmabuf at once (one per Vulkan instance), and fd numbers
 * are reused after close, so a dummy is recognised by what it is: our named memfd. */
static int is_dummy(int fd)
{
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    return strncmp(target, "/memfd:" DUMMY_NAME, strlen("/memfd:" DUMMY_NAME)) == 0;
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

#define DEFINE_OPEN(name)                                                          \
    int name(const char *path, int flags, ...)                                     \
    {                                                                              \
        va_list ap;                                                                \
        va_start(ap, flags);                                                       \
        mode_t mode = mode_arg(flags, ap);                                         \
        va_end(ap);                                                                \
        if (is_udmabuf_path(path))                                                 \
            return open_dummy(flags);                                              \
        int (*real)(const char *, int, ...) = dlsym(RTLD_NEXT, #name);             \
        return real(path, flags, mode);                                            \
    }

#define DEFINE_OPENAT(name)                                                        \
    int name(int dirfd, const char *path, int flags, ...)                          \
    {                                                                              \
        va_list ap;                                                                \
        va_start(ap, flags);                                                       \
        mode_t mode = mode_arg(flags, ap);                                         \
        va_end(ap);                                                                \
        if (is_udmabuf_path(path))                                                 \
            return open_dummy(flags);                                              \
        int (*real)(int, const char *, int, ...) = dlsym(RTLD_NEXT, #name);        \
        return real(dirfd, path, flags, mode);                                     \
    }

DEFINE_OPEN(open)
DEFINE_OPEN(open64)
DEFINE_OPENAT(openat)
DEFINE_OPENAT(openat64)

int __open_2(const char *path, int flags)
{
    return open(path, flags);
}

int __open64_2(const char *path, int flags)
{
    return open64(path, flags);
}

int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);

    if (request == UDMABUF_CREATE && fd >= 0 && is_dummy(fd)) {
        const struct udmabuf_create *create = arg;
        if (create == NULL || create->offset != 0) {
            errno = EINVAL;
            return -1;
        }
        /* As the kernel's udmabuf does: the memfd must be sealed against shrinking (so the
         * dma-buf can never lose pages under a mapping) and must not be sealed against
         * writes, and the range must lie inside it. */
        int seals = fcntl((int)create->memfd, F_GET_SEALS);
        struct stat st;
        if (seals < 0 || !(seals & F_SEAL_SHRINK) || (seals & F_SEAL_WRITE) ||
            fstat((int)create->memfd, &st) != 0 || create->size == 0 ||
            create->size > (uint64_t)st.st_size) {
            errno = EINVAL;
            return -1;
        }
        int cmd = (create->flags & UDMABUF_FLAGS_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD;
        return fcntl((int)create->memfd, cmd, 0);
    }

    int (*real)(int, unsigned long, ...) = dlsym(RTLD_NEXT, "ioctl");
    return real(fd, request, arg);
}
