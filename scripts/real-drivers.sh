#!/usr/bin/env bash
# Real GPU drivers on a machine with no GPU: Mesa's radv (AMD) or anv (Intel) on Mesa's
# drm-shim.
#
#   scripts/real-drivers.sh [--driver amd|intel]            build once (cached), then print where it is
#   scripts/real-drivers.sh [--driver D] --built            exit 0 if the build is cached, 1 if not (builds nothing)
#   scripts/real-drivers.sh [--driver D] --chips            print the shim's chips, one a line
#   scripts/real-drivers.sh [--driver D] --env CHIP         print `export` lines for CHIP (for `eval`)
#   scripts/real-drivers.sh [--driver D] [--chip C[,C...]] [--quiet] -- CMD [ARG]...
#                                                           run CMD once per chip (default: every chip)
#
# The shim (`lib<vendor>_noop_drm_shim.so`, loaded by LD_PRELOAD) fakes /dev/dri/renderD128
# and answers the kernel driver's ioctls for a real chip (amdgpu: register dumps named by
# AMDGPU_GPU_ID; i915: the device table, INTEL_STUB_GPU_PLATFORM): the Vulkan driver's real
# winsys and compiler run on it; GEM objects are shared memory; submissions are ignored, and
# there is no PRIME (no dma-buf enters or leaves). Each chip is a process of its own because
# the shim reads its chip once. CMD runs with LD_PRELOAD (the shim, in front of any preload
# the caller set), the chip's variable, VK_ICD_FILENAMES (this build's driver only),
# XDG_RUNTIME_DIR (set if unset: Mesa's shader cache wants one),
# DMABRIDGE_DRM_SHIM_CHIP=CHIP (tests read it to know which chip they are on) and
# MESA_SHADER_CACHE_DISABLE (so the compiler compiles every shader each run). Each chip's
# verdict is a line of its own ("drm-shim CHIP: ok" or "drm-shim CHIP: FAILED (exit N)"),
# and a failure does not stop the others.
#
# Exit status: 0 when CMD succeeded for every chip; 1 when it failed for any; 125 when the
# build could not be made (packages, source download or build failed; the log's tail on
# stderr).
#
# Builds once, from the orig tarball of the Mesa version installed (mesa-vulkan-drivers, from
# bookworm-backports; `apt-get source --download-only`, with a deb-src line for the suite
# added the way setup.sh adds the suite), the one driver and its shim only, and keeps the
# two libraries and an ICD file under
# ${DMABRIDGE_MESA_CACHE:-${XDG_CACHE_HOME:-~/.cache}/dmabridge-mesa}/VERSION[-intel] (ready
# marker; built in a .tmp directory and renamed into place). Installs the build's packages
# idempotently. Measured on 2 cores: amd about 3 minutes of ninja (684 steps; 8.7 min
# all-in on a fresh machine); intel 7.5 minutes of ninja (904 steps), and it needs LLVM 15,
# clang and libclc for Mesa's OpenCL-C kernels (mesa-clc), so scripts/test.sh runs it only
# where it is already built.
set -euo pipefail

die() { echo "real-drivers: $*" >&2; exit 125; }
say() { [ -n "${QUIET:-}" ] || echo "real-drivers: $*" >&2; }

DRIVER=amd
CHIPS=()
QUIET=""
MODE=build
ENV_CHIP=""
while [ $# -gt 0 ]; do
    case "$1" in
        --driver) DRIVER="${2:?--driver needs amd or intel}"; shift 2 ;;
        --driver=*) DRIVER="${1#*=}"; shift ;;
        --chip) IFS=, read -r -a more <<<"${2:?--chip needs a chip}"; CHIPS+=("${more[@]}"); shift 2 ;;
        --chip=*) IFS=, read -r -a more <<<"${1#*=}"; CHIPS+=("${more[@]}"); shift ;;
        --chips) MODE=chips; shift ;;
        --built) MODE=built; shift ;;
        --env) MODE=env; ENV_CHIP="${2:?--env needs a chip}"; shift 2 ;;
        --quiet) QUIET=1; shift ;;
        --) shift; MODE=run; break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (the command comes after --)" ;;
    esac
done
case "$DRIVER" in
    # The chips whose register dumps the amdgpu shim carries (src/amd/drm-shim/amdgpu_devices.c).
    amd) ALL_CHIPS=(renoir raven raven2 stoney vangogh raphael_mendocino polaris10 polaris12 vega10
                    navi10 navi21 navi31 pitcairn bonaire gfx1150) ;;
    # Platforms of the i915 device table anv supports with modifiers: Gen9 (skl), Gen12 with
    # CCS (tgl, adl), DG2's Tile4 and CCS (dg2), Meteor Lake's (mtl).
    intel) ALL_CHIPS=(skl tgl adl dg2 mtl) ;;
    *) die "no driver '$DRIVER' (amd or intel)" ;;
esac
[ "$MODE" != chips ] || { printf '%s\n' "${ALL_CHIPS[@]}"; exit 0; }
[ "$MODE" != run ] || [ $# -gt 0 ] || die "no command after --"
[ ${#CHIPS[@]} -gt 0 ] || CHIPS=("${ALL_CHIPS[@]}")
[ "$MODE" != env ] || CHIPS=("$ENV_CHIP")
for c in "${CHIPS[@]}"; do
    [[ " ${ALL_CHIPS[*]} " == *" $c "* ]] || die "no chip '$c' in the $DRIVER shim (--chips lists them)"
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

MESA_DEB=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null) \
    || die "mesa-vulkan-drivers is not installed (scripts/setup.sh installs it)"
MESA_VER="${MESA_DEB%%-*}"  # 25.0.7-2~bpo12+1 -> 25.0.7
CACHE="${DMABRIDGE_MESA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dmabridge-mesa}"
case "$DRIVER" in
    amd) DIR="$CACHE/$MESA_VER"; LIB=libvulkan_radeon.so; SHIM_LIB=libamdgpu_noop_drm_shim.so; ICD_NAME=radeon_icd.json
         TARGETS=(src/amd/vulkan/libvulkan_radeon.so src/amd/drm-shim/libamdgpu_noop_drm_shim.so)
         MESON_DRIVER=(-Dvulkan-drivers=amd -Dllvm=disabled -Dtools=drm-shim)
         EXTRA_PKGS=() ;;
    intel) DIR="$CACHE/$MESA_VER-intel"; LIB=libvulkan_intel.so; SHIM_LIB=libintel_noop_drm_shim.so; ICD_NAME=intel_icd.json
         TARGETS=(src/intel/vulkan/libvulkan_intel.so src/intel/tools/libintel_noop_drm_shim.so)
         MESON_DRIVER=(-Dvulkan-drivers=intel -Dllvm=enabled -Dtools=drm-shim,intel)
         EXTRA_PKGS=(libclc-15 llvm-15-dev libclang-15-dev libllvmspirvlib-15-dev libclang-cpp15-dev) ;;
esac
mkdir -p "$CACHE"

pkg_ok() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

build() {
    local t0 tmp log
    t0=$(date +%s)
    tmp="$DIR.tmp"
    log="$CACHE/build-$DRIVER.log"
    : >"$log"
    # --- Packages. meson >= 1.4 (Mesa 25.0's floor) is only in bookworm-backports.
    local pkgs=(ninja-build python3-mako python3-yaml python3-ply glslang-tools libelf-dev zlib1g-dev
                libexpat1-dev bison flex libzstd-dev libdrm-dev pkgconf xz-utils "${EXTRA_PKGS[@]}")
    local missing=()
    for p in "${pkgs[@]}"; do pkg_ok "$p" || missing+=("$p"); done
    local meson_ok=""
    if pkg_ok meson && dpkg --compare-versions "$(dpkg-query -W -f='${Version}' meson)" ge 1.4; then meson_ok=1; fi
    local need_src=1 f
    # A deb-src entry for the suite, one-line or deb822 (grep's -s and the loop keep a
    # missing sources.list from failing the test under pipefail).
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do
        [ -f "$f" ] || continue
        if grep -qE '^(Types:.*deb-src|deb-src )' "$f" && grep -q "bookworm-backports" "$f"; then need_src=""; fi
    done
    if [ -n "$need_src" ]; then
        say "adding the bookworm-backports source suite (deb-src)"
        $SUDO tee /etc/apt/sources.list.d/bookworm-backports-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
    if [ -n "$need_src" ] || [ ${#missing[@]} -gt 0 ] || [ -z "$meson_ok" ]; then
        say "installing the build's packages: ${missing[*]:-} ${meson_ok:+}${meson_ok:-meson (backports)}"
        $SUDO apt-get update -qq >>"$log" 2>&1 || { tail -20 "$log" >&2; die "apt-get update failed (log above)"; }
        if [ ${#missing[@]} -gt 0 ]; then
            $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
                || { tail -20 "$log" >&2; die "installing ${missing[*]} failed (log above)"; }
        fi
        if [ -z "$meson_ok" ]; then
            $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports meson >>"$log" 2>&1 \
                || { tail -20 "$log" >&2; die "installing meson from bookworm-backports failed (log above)"; }
        fi
    fi

    # --- Source: the orig tarball of the installed version. apt-get source also wants the
    # Debian packaging tarball, which the backports pool may lack; only the orig is needed.
    rm -rf "$tmp" && mkdir -p "$tmp/src"
    local tarball="$CACHE/mesa_$MESA_VER.orig.tar.xz"
    if [ ! -s "$tarball" ]; then
        say "downloading mesa_$MESA_VER.orig.tar.xz (47 MB, once)"
        (cd "$tmp/src" && apt-get source --download-only -qq "mesa=$MESA_DEB") >>"$log" 2>&1 || true
        [ -s "$tmp/src/mesa_$MESA_VER.orig.tar.xz" ] \
            || { tail -20 "$log" >&2; die "apt-get source --download-only mesa=$MESA_DEB gave no orig tarball (log above)"; }
        mv "$tmp/src/mesa_$MESA_VER.orig.tar.xz" "$tarball"
    fi
    tar -xJf "$tarball" -C "$tmp/src" --strip-components=1

    # --- The one driver and its drm-shim only: no gallium, no window systems.
    say "building $DRIVER's Vulkan driver + drm-shim of Mesa $MESA_VER (log: $log)"
    (
        # meson must run on Debian's python3 (it has mako), not a pyenv or venv one.
        export PATH="/usr/bin:$PATH"
        cd "$tmp/src" && meson setup "$tmp/build" "${MESON_DRIVER[@]}" \
            -Dgallium-drivers= -Dplatforms= -Dglx=disabled -Degl=disabled \
            -Dgbm=disabled -Dopengl=false -Dgles1=disabled -Dgles2=disabled \
            -Dbuildtype=release -Dvideo-codecs= -Dvalgrind=disabled -Dlibunwind=disabled \
        && ninja -C "$tmp/build" -j"$(nproc)" "${TARGETS[@]}"
    ) >>"$log" 2>&1 || { tail -30 "$log" >&2; die "the Mesa build failed (log above)"; }

    # --- Keep the products only (the build tree is ~1 GB), with an ICD file naming them.
    mkdir -p "$tmp/lib"
    for t in "${TARGETS[@]}"; do cp "$tmp/build/$t" "$tmp/lib/"; done
    cat >"$tmp/$ICD_NAME" <<JSON
{
    "ICD": {
        "api_version": "1.4.305",
        "library_path": "$DIR/lib/$LIB"
    },
    "file_format_version": "1.0.0"
}
JSON
    rm -rf "$tmp/src" "$tmp/build"
    echo "$(( $(date +%s) - t0 ))" >"$tmp/build-seconds"
    rm -rf "$DIR" && mv "$tmp" "$DIR" && touch "$DIR/ready"
    say "built in $(( ($(date +%s) - t0) / 60 )) min $(( ($(date +%s) - t0) % 60 )) s"
}

if [ "$MODE" = built ]; then
    [ -f "$DIR/ready" ]; exit
fi
[ -f "$DIR/ready" ] || build

SHIM="$DIR/lib/$SHIM_LIB"
ICD="$DIR/$ICD_NAME"
chip_env() { # the environment for one chip, as `export` lines
    printf 'export LD_PRELOAD=%q\n' "$SHIM${LD_PRELOAD:+:$LD_PRELOAD}"
    case "$DRIVER" in
        amd) printf 'export AMDGPU_GPU_ID=%q\n' "$1" ;;
        intel) printf 'export INTEL_STUB_GPU_PLATFORM=%q\n' "$1" ;;
    esac
    printf 'export VK_ICD_FILENAMES=%q\n' "$ICD"
    printf 'export DMABRIDGE_DRM_SHIM_CHIP=%q\n' "$1"
    printf 'export XDG_RUNTIME_DIR=%q\n' "${XDG_RUNTIME_DIR:-/tmp}"
    # Every run compiles its shaders, not from Mesa's disk cache of an earlier one.
    printf 'export MESA_SHADER_CACHE_DISABLE=true\n'
}

case "$MODE" in
    build)
        echo "mesa:  $MESA_VER, $DRIVER (built in $(cat "$DIR/build-seconds" 2>/dev/null || echo '?') s)"
        echo "icd:   $ICD"
        echo "shim:  $SHIM"
        echo "chips: ${ALL_CHIPS[*]}"
        ;;
    env) chip_env "$ENV_CHIP" ;;
    run)
        rc=0
        for c in "${CHIPS[@]}"; do
            say "--- chip $c"
            # The shim names every ioctl it does not implement (PRIME's among them) on stderr,
            # once per call: noise, not the command's output.
            if ( eval "$(chip_env "$c")"; "$@" ) 2> >(grep -v -e '^DRM_SHIM: unhandled' -e '^DRM_IOCTL_GET_CAP: unhandled' \
                    -e '^Unknown drm_i915_query_item' -e '^Unknown DRM_IOCTL_I915_GET_PARAM' >&2); then
                echo "drm-shim $c: ok"
            else
                r=$?
                echo "drm-shim $c: FAILED (exit $r)"
                rc=1
            fi
        done
        exit $rc
        ;;
esac
