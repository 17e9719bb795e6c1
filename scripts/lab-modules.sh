#!/usr/bin/env bash
# Builds the kernel lab's drivers that Debian's kernel package does not ship, out of tree,
# once: v4l2-mem2mem (what vicodec and visl link against), vicodec (an FWHT encoder, a
# stateful and a stateless decoder), visl (the stateless uAPI's test decoder), vkms (a KMS
# device that imports dma-bufs, with a writeback connector) and sw_sync (sync_file timelines
# in debugfs). Used by lab.sh when --modules names one of them; runnable alone:
#
#   scripts/lab-modules.sh KVER OUTDIR
#
# writes OUTDIR/{v4l2-mem2mem,vicodec,visl,vkms,sw_sync}.ko for kernel KVER and exits 0, or
# says what is missing. Idempotent: an OUTDIR that has them all (and its `source` file) is
# left as it is.
#
# What it builds from: the kernel's headers (linux-headers-KVER from bookworm-backports,
# installed with apt: it brings Kbuild and Module.symvers) and the driver sources of the
# nearest source package Debian has (linux-source-6.12, downloaded, never installed; only
# the five drivers' files are unpacked). OUTDIR/source names the source it used. Three small
# edits, each said below where it is made, let them build outside the kernel tree.
set -euo pipefail
KVER="${1:?usage: lab-modules.sh KVER OUTDIR}"
OUT="${2:?usage: lab-modules.sh KVER OUTDIR}"
NAMES=(v4l2-mem2mem vicodec visl vkms sw_sync)
say() { echo "lab-modules: $*" >&2; }
die() { say "$*"; exit 1; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# shellcheck source=lib/backports.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/backports.sh"

have_all() { for n in "${NAMES[@]}"; do [ -f "$OUT/$n.ko" ] || return 1; done; [ -f "$OUT/source" ]; }
have_all && exit 0

BUILD="/lib/modules/$KVER/build"
if [ ! -f "$BUILD/Module.symvers" ]; then
    ensure_backports
    say "installing linux-headers-$KVER from bookworm-backports (once)"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
        -t bookworm-backports "linux-headers-$KVER"; } >"${TMPDIR:-/tmp}/lab-modules-apt.log" 2>&1 \
        || { tail -20 "${TMPDIR:-/tmp}/lab-modules-apt.log" >&2; die "no headers for $KVER (log above)"; }
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/lab-modules.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say "fetching linux-source-6.12 (the drivers' sources; once)"
(cd "$WORK" && apt-get download -qq linux-source-6.12) >"$WORK/download.log" 2>&1 \
    || { tail -20 "$WORK/download.log" >&2; die "apt-get download linux-source-6.12 failed (log above)"; }
DEB=$(ls "$WORK"/linux-source-6.12_*.deb)
SRCVER=$(dpkg-deb -f "$DEB" Version)
dpkg-deb --fsys-tarfile "$DEB" | tar -x -C "$WORK" ./usr/src/linux-source-6.12.tar.xz
K=linux-source-6.12
tar -xJf "$WORK/usr/src/linux-source-6.12.tar.xz" -C "$WORK" \
    "$K/drivers/media/v4l2-core/v4l2-mem2mem.c" \
    "$K/drivers/media/test-drivers/vicodec" "$K/drivers/media/test-drivers/visl" \
    "$K/drivers/gpu/drm/vkms" \
    "$K/drivers/dma-buf/sw_sync.c" "$K/drivers/dma-buf/sync_debug.c" "$K/drivers/dma-buf/sync_debug.h" \
    "$K/drivers/dma-buf/sync_trace.h"
S="$WORK/$K/drivers"

build() { # DIR [make args...]
    local dir="$1"; shift
    make -s -C "$BUILD" M="$dir" "$@" modules >"$dir/build.log" 2>&1 \
        || { tail -30 "$dir/build.log" >&2; die "building $(basename "$dir") failed (log above)"; }
}

# v4l2-mem2mem: Debian builds V4L2 without it; on its own, its symbols for the two below.
M2M="$WORK/m2m"; mkdir -p "$M2M"
cp "$S/media/v4l2-core/v4l2-mem2mem.c" "$M2M/"
echo 'obj-m += v4l2-mem2mem.o' >"$M2M/Kbuild"
build "$M2M"

build "$S/media/test-drivers/vicodec" CONFIG_VIDEO_VICODEC=m KBUILD_EXTRA_SYMBOLS="$M2M/Module.symvers"

# visl: its trace headers name their directory relative to the kernel tree (edit 1: relative
# to the module's own, which the include path then has).
V="$S/media/test-drivers/visl"
sed -i 's|^#define TRACE_INCLUDE_PATH .*|#define TRACE_INCLUDE_PATH .|' "$V"/visl-trace-*.h
echo 'ccflags-y += -I$(src)' >>"$V/Makefile"
build "$V" CONFIG_VIDEO_VISL=m KBUILD_EXTRA_SYMBOLS="$M2M/Module.symvers"

build "$S/gpu/drm/vkms" CONFIG_DRM_VKMS=m

# sw_sync: built into the kernel only (late_initcall), as one module of sw_sync.c and
# sync_debug.c (edit 2: a module_init, and a module_exit that removes its debugfs
# directory); sync_debug.c names each sync_file with sync_file_get_name, which the kernel
# does not export (edit 3: its pointer instead); the trace include path as for visl.
W="$WORK/sw_sync"; mkdir -p "$W"
cp "$S/dma-buf/sw_sync.c" "$W/sw_sync_core.c"
cp "$S/dma-buf/sync_debug.c" "$S/dma-buf/sync_debug.h" "$S/dma-buf/sync_trace.h" "$W/"
sed -i 's|^#define TRACE_INCLUDE_PATH .*|#define TRACE_INCLUDE_PATH .|' "$W/sync_trace.h"
sed -i 's|^#include <linux/debugfs.h>|#include <linux/debugfs.h>\n#include <linux/module.h>|' "$W/sync_debug.c"
sed -i 's|^late_initcall(sync_debugfs_init);|module_init(sync_debugfs_init);\nstatic void __exit sync_debugfs_exit(void) { debugfs_remove_recursive(dbgfs); }\nmodule_exit(sync_debugfs_exit);\nMODULE_LICENSE("GPL");\nMODULE_DESCRIPTION("sw_sync timelines in debugfs, built for the dmabridge lab");|' "$W/sync_debug.c"
sed -i 's|sync_file_get_name(sync_file, buf, sizeof(buf)),|(snprintf(buf, sizeof(buf), "sync_file %p", sync_file), buf),|' "$W/sync_debug.c"
grep -q '^module_init(sync_debugfs_init);' "$W/sync_debug.c" || die "sw_sync: sync_debug.c has no late_initcall to turn into module_init (source changed?)"
grep -q 'sync_file_get_name' "$W/sync_debug.c" && die "sw_sync: sync_debug.c still calls sync_file_get_name (source changed?)"
printf 'obj-m += sw_sync.o\nsw_sync-y := sw_sync_core.o sync_debug.o\nccflags-y += -I$(src)\n' >"$W/Kbuild"
build "$W"

mkdir -p "$OUT"
cp "$M2M/v4l2-mem2mem.ko" "$S/media/test-drivers/vicodec/vicodec.ko" "$V/visl.ko" "$S/gpu/drm/vkms/vkms.ko" "$W/sw_sync.ko" "$OUT/"
echo "linux-source-6.12 $SRCVER (Debian's nearest to $KVER; headers linux-headers-$KVER)" >"$OUT/source"
say "built ${NAMES[*]} for $KVER from linux-source-6.12 $SRCVER into $OUT"
