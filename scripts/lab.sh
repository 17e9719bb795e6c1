#!/usr/bin/env bash
# The kernel lab: runs a command inside a real Linux kernel (Debian's 6.12 from
# bookworm-backports) under QEMU, on a machine that has no DRM, no udmabuf and no dma-heaps
# of its own, and returns the command's exit status.
#
#   scripts/lab.sh [OPTIONS] -- CMD [ARG]...
#
# The guest sees the host's root read-only (9p), so it runs the binaries built here with the
# host's libraries; the working tree (the git top level of the current directory, or the
# directory itself) is shared writable at the same path, wherever it is (under /tmp, /run or
# /dev/shm too, or on a mount of its own); the guest's /tmp, /run and /dev/shm are tmpfs and
# TMPDIR=/tmp (and XDG_CACHE_HOME=/tmp/cache unless the caller set it). CMD runs in the
# current directory with the caller's environment, as root. The
# kernel has a real /dev/udmabuf, /dev/dma_heap/system, sync_file, and the modules asked for.
#
# Options:
#   --modules M[,M...]   load these kernel modules (and what they depend on) before CMD
#                        (vicodec, visl, vkms and sw_sync, which Debian does not build, are
#                        built once by scripts/lab-modules.sh and cached beside the kernel):
#                        vgem, vivid, virtio_gpu (adds a virtio-gpu device), or any other
#   --param MOD.KEY=VALUE  a parameter for a module --modules loads, in the kernel command
#                        line's syntax (repeatable): --param vivid.multiplanar=1,2
#   --timeout SECONDS    stop the guest after this long (default 1800; DMABRIDGE_LAB_TIMEOUT)
#   --memory MB          guest memory (default 6144; DMABRIDGE_LAB_MEMORY)
#   --cpus N             guest CPUs (default: the host's; DMABRIDGE_LAB_CPUS)
#   --rw DIR             share DIR writable too (repeatable)
#   --quiet              say nothing of the lab's own progress
#
# Exit status: CMD's own. The lab's failures are told apart from it on stderr, with the tail
# of the guest's console, and exit with:
#   124  the time limit ran out
#   125  the lab could not run (no qemu and it cannot be installed, kernel download failed,
#        bad options) or the guest died before CMD finished (kernel panic, QEMU error)
#
# Installs what it needs (qemu-system-x86 from bookworm-backports, the kernel and busybox
# packages, downloaded, never installed) idempotently, and caches the kernel, its modules
# and the initramfs under ${DMABRIDGE_LAB_CACHE:-${XDG_CACHE_HOME:-~/.cache}/dmabridge-lab}.
# /dev/kvm is used only when DMABRIDGE_LAB_ACCEL=kvm says so: on machines whose /dev/kvm is
# PVM (kvm_pvm) a stock kernel does not boot under it, so TCG (multi-threaded) is the default.
set -euo pipefail

die() { echo "lab: $*" >&2; exit 125; }
say() { [ -n "${LAB_QUIET:-}" ] || echo "lab: $*" >&2; }

MODULES=""
TIMEOUT="${DMABRIDGE_LAB_TIMEOUT:-1800}"
MEMORY="${DMABRIDGE_LAB_MEMORY:-6144}"
CPUS="${DMABRIDGE_LAB_CPUS:-$(nproc)}"
RW_DIRS=()
LAB_QUIET=""
declare -A PARAMS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --modules) MODULES="${2:?--modules needs a list}"; shift 2 ;;
        --modules=*) MODULES="${1#*=}"; shift ;;
        --param) [[ "${2:-}" =~ ^[A-Za-z0-9_-]+\.[A-Za-z0-9_]+=[^[:space:]]*$ ]] || die "--param takes MODULE.KEY=VALUE"
            m="${2%%.*}"; m="${m//-/_}"; PARAMS[$m]="${PARAMS[$m]:-} ${2#*.}"; shift 2 ;;
        --timeout) TIMEOUT="${2:?--timeout needs seconds}"; shift 2 ;;
        --memory) MEMORY="${2:?--memory needs MB}"; shift 2 ;;
        --cpus) CPUS="${2:?--cpus needs a count}"; shift 2 ;;
        --rw) RW_DIRS+=("$(realpath "${2:?--rw needs a directory}")"); shift 2 ;;
        --quiet) LAB_QUIET=1; shift ;;
        --) shift; break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (the command comes after --)" ;;
    esac
done
[ $# -gt 0 ] || die "no command: scripts/lab.sh [OPTIONS] -- CMD [ARG]..."
[[ "$TIMEOUT" =~ ^[0-9]+$ && "$MEMORY" =~ ^[0-9]+$ && "$CPUS" =~ ^[0-9]+$ ]] || die "--timeout, --memory and --cpus take whole numbers"

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# shellcheck source=lib/backports.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/backports.sh"
CACHE="${DMABRIDGE_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dmabridge-lab}"
mkdir -p "$CACHE"

# --- QEMU: Debian 12's own 7.2 conflicts with the backports qemu-utils, so backports it is.
if ! command -v qemu-system-x86_64 >/dev/null; then
    say "installing qemu-system-x86 from bookworm-backports"
    ensure_backports
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
        -t bookworm-backports --no-install-recommends qemu-system-x86; } >"$CACHE/apt.log" 2>&1 \
        || { tail -20 "$CACHE/apt.log" >&2; die "no qemu: installing qemu-system-x86 failed (log above)"; }
fi

# --- The kernel: the newest 6.12 that bookworm-backports' linux-image-amd64 points at, or
# DMABRIDGE_LAB_KERNEL (a package name such as linux-image-6.12.95+deb12-amd64-unsigned).
fetch_debs() { # downloads packages into $1 (apt-get download writes to the current dir)
    local dir="$1"; shift
    mkdir -p "$dir"
    (cd "$dir" && apt-get download -qq "$@") >"$CACHE/download.log" 2>&1
}
KPKG="${DMABRIDGE_LAB_KERNEL:-}"
if [ -z "$KPKG" ]; then
    if [ -f "$CACHE/kernel-package" ] && [ -n "$(find "$CACHE/kernel-package" -mtime -7 2>/dev/null)" ]; then
        KPKG=$(cat "$CACHE/kernel-package")
    else
        dep=$(apt-cache depends -t bookworm-backports linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-6\.12[^ ]*\)$/\1/p' | head -1)
        if [ -z "$dep" ]; then
            $SUDO apt-get update -qq >/dev/null 2>&1 || true
            dep=$(apt-cache depends -t bookworm-backports linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-6\.12[^ ]*\)$/\1/p' | head -1)
        fi
        if [ -n "$dep" ]; then
            KPKG="${dep}-unsigned"
            echo "$KPKG" >"$CACHE/kernel-package"
        elif [ -f "$CACHE/kernel-package" ]; then
            KPKG=$(cat "$CACHE/kernel-package")
        else
            die "kernel download failed: bookworm-backports names no linux-image-6.12 (is the suite in apt's sources?)"
        fi
    fi
fi
KVER="${KPKG#linux-image-}"; KVER="${KVER%-unsigned}"
KDIR="$CACHE/$KVER"
if [ ! -f "$KDIR/ready" ]; then
    say "fetching $KPKG and busybox-static (once; cached in $KDIR)"
    rm -rf "$KDIR.tmp" && mkdir -p "$KDIR.tmp/debs"
    fetch_debs "$KDIR.tmp/debs" "$KPKG" busybox-static \
        || { tail -20 "$CACHE/download.log" >&2; die "kernel download failed: apt-get download $KPKG busybox-static (log above)"; }
    for deb in "$KDIR.tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$KDIR.tmp/root"; done
    cp "$KDIR.tmp/root/boot/vmlinuz-$KVER" "$KDIR.tmp/vmlinuz" || die "the package has no vmlinuz-$KVER"
    mv "$KDIR.tmp/root/lib/modules/$KVER" "$KDIR.tmp/modules"
    # busybox insmod takes plain .ko files; decompressing them all once keeps the guest
    # simple (about 400 MB; the guest reads only what it loads).
    find "$KDIR.tmp/modules" -name '*.ko.xz' -print0 | xargs -0 -r -P "$(nproc)" -n 64 xz -d
    # An initramfs with busybox and the 9p stack, which the guest needs to reach the host.
    ird="$KDIR.tmp/initramfs"
    mkdir -p "$ird"/{bin,dev,proc,sys,host,lib/modules}
    cp "$KDIR.tmp/root/bin/busybox" "$ird/bin/busybox"
    for m in fs/netfs/netfs net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p; do
        cp "$KDIR.tmp/modules/kernel/$m.ko" "$ird/lib/modules/"
    done
    cp "$(dirname "$0")/lab-init.sh" "$ird/init" && chmod +x "$ird/init"
    cp "$ird/bin/busybox" "$KDIR.tmp/busybox" # the host may have no cpio; busybox has one
    (cd "$ird" && find . | "$KDIR.tmp/busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$KDIR.tmp/initramfs.gz"
    rm -rf "$KDIR.tmp/root" "$KDIR.tmp/debs" "$ird"
    sha256sum "$(dirname "$0")/lab-init.sh" | cut -d' ' -f1 >"$KDIR.tmp/init.sha256"
    rm -rf "$KDIR" && mv "$KDIR.tmp" "$KDIR" && touch "$KDIR/ready"
fi
# A changed init script rebuilds only the initramfs.
want_init=$(sha256sum "$(dirname "$0")/lab-init.sh" | cut -d' ' -f1)
if [ "$(cat "$KDIR/init.sha256" 2>/dev/null)" != "$want_init" ]; then
    ird=$(mktemp -d)
    (cd "$ird" && gzip -dc "$KDIR/initramfs.gz" | "$KDIR/busybox" cpio -id 2>/dev/null)
    cp "$(dirname "$0")/lab-init.sh" "$ird/init" && chmod +x "$ird/init"
    (cd "$ird" && find . | "$KDIR/busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$KDIR/initramfs.gz.tmp"
    mv "$KDIR/initramfs.gz.tmp" "$KDIR/initramfs.gz" && echo "$want_init" >"$KDIR/init.sha256"
    rm -rf "$ird"
fi

# --- The modules to load, in dependency order (each .ko's modinfo names what it needs).
declare -A MODPATH=()
while read -r p; do
    n=${p##*/}; n=${n%.ko}; MODPATH[${n//-/_}]="$p"
done < <(sed 's/\.ko\(\.xz\)\{0,1\}$/.ko/' "$KDIR/modules/modules.order")
# Drivers Debian does not build (scripts/lab-modules.sh), built once into the cache when asked for.
EXTRA_MODULES=(v4l2_mem2mem vicodec visl vkms sw_sync)
for m in "${EXTRA_MODULES[@]}"; do
    if [[ ",${MODULES//-/_}," == *",$m,"* ]]; then
        "$(dirname "${BASH_SOURCE[0]}")/lab-modules.sh" "$KVER" "$KDIR/modules/extra" || die "building the lab's extra drivers failed (above)"
        for e in "$KDIR/modules/extra"/*.ko; do n=${e##*/}; n=${n%.ko}; MODPATH[${n//-/_}]="extra/${e##*/}"; done
        break
    fi
done
declare -A SEEN=()
LOAD=()
add_module() {
    local name="${1//-/_}" dep
    [ -n "${SEEN[$name]:-}" ] && return 0
    SEEN[$name]=1
    local rel="${MODPATH[$name]:-}"
    if [ -z "$rel" ]; then
        grep -qE "/${name//_/[-_]}\.ko" "$KDIR/modules/modules.builtin" && return 0
        die "no module '$1' in $KPKG"
    fi
    for dep in $(grep -a -o 'depends=[^[:cntrl:]]*' "$KDIR/modules/$rel" | head -1 | cut -d= -f2 | tr ',' ' '); do
        add_module "$dep"
    done
    LOAD+=("$KDIR/modules/$rel${PARAMS[$name]:-}")
}
EXTRA_DEVICES=()
for m in "${!PARAMS[@]}"; do
    [[ ",${MODULES//-/_}," == *",$m,"* ]] || die "--param for $m, which --modules does not load"
done
for m in ${MODULES//,/ }; do
    add_module "$m"
    case "${m//-/_}" in virtio_gpu) EXTRA_DEVICES+=(-device virtio-gpu-pci) ;; esac
done

# --- The job: the command, its environment and directory, and where its results go.
# Physical paths: the guest has the host's directories, not the links the caller went through.
WORK=$(git rev-parse --show-toplevel 2>/dev/null || pwd -P)
# Each share is mounted over the guest's own /, /dev, /proc, /sys and /run (where the job's
# directory is): a share that is one of them, or holds the job's directory, would hide it.
for d in "$WORK" "${RW_DIRS[@]}"; do
    case "$d" in
        /|/dev|/proc|/sys|/run|/run/lab) die "cannot share $d writable: it would hide the guest's own $d (run from a directory below it)" ;;
        *$'\n'*) die "cannot share a directory whose name holds a newline" ;;
    esac
done
JOB=$(mktemp -d "${TMPDIR:-/tmp}/dmabridge-lab.XXXXXX")
QEMU_PID=""
TAIL_PIDS=()
cleanup() {
    [ -n "$QEMU_PID" ] && kill "$QEMU_PID" 2>/dev/null || true
    for p in "${TAIL_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$JOB"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
{
    echo '#!/bin/bash'
    echo 'for v in $(compgen -e); do unset "$v"; done'
    export -p
    echo 'export TMPDIR=/tmp'
    # The root is read-only: a cache the caller did not place goes to the tmpfs.
    [ -n "${XDG_CACHE_HOME:-}" ] || echo 'export XDG_CACHE_HOME=/tmp/cache'
    printf 'cd %q || exit 125\n' "$(pwd -P)"
    printf 'exec'; printf ' %q' "$@"; echo
} >"$JOB/run.sh"
printf '%s\n' "${LOAD[@]}" >"$JOB/modules"
: >"$JOB/stdout"; : >"$JOB/stderr"

# (QEMU's option syntax: a comma in a path is written twice.)
SHARES=(-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
        -virtfs "local,path=${JOB//,/,,},mount_tag=labjob,security_model=none,multidevs=remap")
# The writable shares, "TAG DIR" a line for the guest's init, parents before children so
# that the guest mounts none over another it mounted before (a prefix sorts first).
i=0
RW_LINES=""
for d in "$WORK" "${RW_DIRS[@]}"; do
    SHARES+=(-virtfs "local,path=${d//,/,,},mount_tag=labrw$i,security_model=none,multidevs=remap")
    RW_LINES+="labrw$i $d"$'\n'
    i=$((i + 1))
done
printf '%s' "$RW_LINES" | LC_ALL=C sort -k2 >"$JOB/rw"
ACCEL=(-accel tcg,thread=multi -cpu max)
[ "${DMABRIDGE_LAB_ACCEL:-tcg}" = kvm ] && ACCEL=(-accel kvm -cpu host)

# The command's output reaches the caller as it is written; the console is kept for errors.
tail -n +1 -F -q "$JOB/stdout" 2>/dev/null & TAIL_PIDS+=($!)
tail -n +1 -F -q "$JOB/stderr" >&2 2>/dev/null & TAIL_PIDS+=($!)
say "booting $KVER ($CPUS CPUs, ${MEMORY} MB, limit ${TIMEOUT}s): $*"
start=$(date +%s)
qemu-system-x86_64 "${ACCEL[@]}" -smp "$CPUS" -m "$MEMORY" -nodefaults -no-reboot \
    -display none -vga none -monitor none -serial "file:$JOB/console" \
    -device virtio-rng-pci "${EXTRA_DEVICES[@]}" "${SHARES[@]}" \
    -kernel "$KDIR/vmlinuz" -initrd "$KDIR/initramfs.gz" \
    -append "console=ttyS0 panic=-1 oops=panic quiet loglevel=4 rdinit=/init" \
    </dev/null >"$JOB/qemu.log" 2>&1 &
QEMU_PID=$!
timed_out=""
while kill -0 "$QEMU_PID" 2>/dev/null; do
    if [ $(( $(date +%s) - start )) -ge "$TIMEOUT" ]; then
        timed_out=1
        kill "$QEMU_PID" 2>/dev/null || true
        break
    fi
    sleep 0.2
done
wait "$QEMU_PID" 2>/dev/null || true
QEMU_PID=""
sleep 0.3 # let the tails print the last lines
for p in "${TAIL_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
TAIL_PIDS=()
elapsed=$(( $(date +%s) - start ))

console_tail() {
    echo "lab: --- the guest's console (last 40 lines) ---" >&2
    tail -n 40 "$JOB/console" >&2 || true
    if [ -s "$JOB/qemu.log" ]; then echo "lab: --- qemu ---" >&2; tail -n 20 "$JOB/qemu.log" >&2; fi
}
if [ -n "$timed_out" ]; then
    console_tail
    echo "lab: timed out after ${TIMEOUT}s (--timeout): the guest was stopped" >&2
    exit 124
fi
if [ ! -s "$JOB/rc" ]; then
    console_tail
    if grep -q "Kernel panic" "$JOB/console" 2>/dev/null; then
        echo "lab: the guest panicked before the command finished (console above)" >&2
    else
        echo "lab: the guest stopped without the command's exit status (console above)" >&2
    fi
    exit 125
fi
rc=$(cat "$JOB/rc")
if [ "$rc" = "setup" ]; then
    console_tail
    echo "lab: the guest could not set up: $(cat "$JOB/setup-error" 2>/dev/null)" >&2
    exit 125
fi
say "done in ${elapsed}s: exit status $rc"
exit "$rc"
