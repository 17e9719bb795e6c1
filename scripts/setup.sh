#!/usr/bin/env bash
# Installs what dmabridge needs on a fresh Debian 12 machine and nothing more.
# Idempotent: when everything is present it only checks versions (about a second).
#
# Needs: Mesa >= 24.1 lavapipe (bookworm-backports; Debian 12's own 22.3 has no dma-buf
# or modifier code), the Vulkan loader, the Khronos validation layer, a C compiler for the
# udmabuf emulation (tests/support/udmabuf_emulation.c), Mesa's EGL for cross-API tests, and
# glslc + spirv-val, which build.rs uses to compile and validate the compute shaders.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# shellcheck source=lib/backports.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/backports.sh"
export DEBIAN_FRONTEND=noninteractive

mesa_ok() {
    local v
    v=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null) || return 1
    dpkg --compare-versions "$v" ge 24.1
}

egl_ok() {
    local v
    v=$(dpkg-query -W -f='${Version}' libegl-mesa0 2>/dev/null) || return 1
    dpkg --compare-versions "$v" ge 24.1
}

pkg_ok() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

PKGS=(libvulkan1 vulkan-validationlayers strace gcc libc6-dev libegl1 libgles2 glslc spirv-tools gstreamer1.0-tools gstreamer1.0-plugins-base pkgconf)
# The bench report's text (DejaVu, for the PNGs) and its check (headless Chromium renders
# the page in the tests); the CPU libraries `bench` measures dmabridge's conversions beside
# (libyuv, FFmpeg's swscale: loaded at run time, see lab/src/bench/cpu_peers.rs); all without
# their recommends, which are a desktop's worth.
LEAN=(fonts-dejavu-core chromium libyuv-dev libswscale-dev)
missing=()
for p in "${PKGS[@]}"; do pkg_ok "$p" || missing+=("$p"); done
missing_lean=()
for p in "${LEAN[@]}"; do pkg_ok "$p" || missing_lean+=("$p"); done

# GStreamer's development files, for the dmabridgeconvert plugin (gst-plugin/): from
# bookworm-backports, because they pull libdrm/gbm/wayland -dev packages that must match the
# backports Mesa (plain apt-get refuses them as "held broken packages"). libdrm-dev by name
# too: the modifier tests read its drm_fourcc.h, the kernel's definition of every modifier.
BACKPORTS_DEV=(libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libdrm-dev)
missing_dev=()
for p in "${BACKPORTS_DEV[@]}"; do pkg_ok "$p" || missing_dev+=("$p"); done

# The C ABI's thread test runs under ThreadSanitizer: nightly's -Zsanitizer=thread, with std
# rebuilt from its source (rust-src). pkgconf (above): the C programs build with pkg-config.
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal --component rust-src
elif ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
    rustup component add rust-src --toolchain nightly
fi

if mesa_ok && egl_ok && [ ${#missing[@]} -eq 0 ] && [ ${#missing_lean[@]} -eq 0 ] && [ ${#missing_dev[@]} -eq 0 ]; then
    exit 0
fi

ensure_backports

echo "setup: installing Mesa lavapipe/EGL from bookworm-backports and ${missing[*]:-} ${missing_lean[*]:-}" >&2
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libegl-mesa0 libgl1-mesa-dri libgbm1 >/dev/null
if [ ${#missing[@]} -gt 0 ]; then
    $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ${#missing_dev[@]} -gt 0 ]; then
    $SUDO apt-get install -y -qq -t bookworm-backports "${missing_dev[@]}" >/dev/null
fi
if [ ${#missing_lean[@]} -gt 0 ]; then
    $SUDO apt-get install -y -qq --no-install-recommends "${missing_lean[@]}" >/dev/null
fi

mesa_ok || { echo "setup: mesa-vulkan-drivers is still older than 24.1" >&2; exit 1; }
echo "setup: done (mesa-vulkan-drivers $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers))" >&2
