#!/usr/bin/env bash
# Installs dmabridge's C ABI under PREFIX, as cargo-c would: the library with its SONAME
# (PREFIX/lib/libdmabridge.so.VERSION, the libdmabridge.so.0 link the loader looks for and
# the libdmabridge.so link the linker does), include/dmabridge.h and
# PREFIX/lib/pkgconfig/dmabridge.pc. A C program then builds with
#   PKG_CONFIG_PATH=PREFIX/lib/pkgconfig gcc prog.c $(pkg-config --cflags --libs dmabridge)
#
# usage: scripts/install-capi.sh PREFIX [--release]
# It builds the library first (`cargo build -p dmabridge-capi`, alone, so that no other
# crate's features are unified into it). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 PREFIX [--release]" >&2
    exit 2
fi
prefix="$1"
profile=debug
cargo_flags=(--quiet)
if [ "${2:-}" = "--release" ]; then
    profile=release
    cargo_flags+=(--release)
elif [ -n "${2:-}" ]; then
    echo "usage: $0 PREFIX [--release]" >&2
    exit 2
fi
cargo build -p dmabridge-capi "${cargo_flags[@]}"

mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
soname="$(readelf -d "target/$profile/libdmabridge.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
[ -n "$version" ] && [ -n "$soname" ] || { echo "$0: no version in Cargo.toml or no SONAME in libdmabridge.so" >&2; exit 1; }

install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "target/$profile/libdmabridge.so" "$prefix/lib/libdmabridge.so.$version"
ln -sfn "libdmabridge.so.$version" "$prefix/lib/$soname"
ln -sfn "$soname" "$prefix/lib/libdmabridge.so"
install -m 0644 include/dmabridge.h "$prefix/include/dmabridge.h"
cat >"$prefix/lib/pkgconfig/dmabridge.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: dmabridge
Description: Share images between GPUs, codecs, displays and compositors as dma-bufs; convert when they cannot (C ABI)
Version: $version
Libs: -L\${libdir} -ldmabridge
Cflags: -I\${includedir}
PC
echo "installed libdmabridge ($soname, $profile) under $prefix"
