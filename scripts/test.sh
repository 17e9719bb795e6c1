#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: provisions (idempotent), then runs
# the tests in four configurations:
#   1. plain lavapipe: no udmabuf, so no modifier extension and no DMA_BUF export (radv's
#      null device answers the real-driver queries here: cli/tests/real_drivers.rs);
#   2. lavapipe with the udmabuf emulation preloaded (or the real /dev/udmabuf where there is one);
#   3. drm-shim: radv, a real GPU driver, on Mesa's amdgpu drm-shim (scripts/real-drivers.sh
#      builds it once, about 3 minutes, cached under ~/.cache/dmabridge-mesa), once per chip
#      the shim carries: tests/drm_shim.rs, and `dmabridge probe` on each chip; and anv on
#      the i915 drm-shim the same way, where it is already built;
#   4. kernel: lavapipe inside Linux itself (scripts/lab.sh: Debian's 6.12 under QEMU), with a real
#      udmabuf, the system dma-heap, sync_file, vgem, vivid and virtio-gpu, and no emulation
#      (scripts/kernel-tests.sh says which test binaries run there, and why the rest do not).
# DMABRIDGE_TEST_CONFIG tells the tests which configuration they are in, so they can
# assert what the device must report there. Every Vulkan test enables the validation layer.
# The last line counts each configuration's tests separately.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/emulation.sh

# Display servers some tests need (each script installs, starts and registers its own
# cleanup; see scripts/services/*.sh). They are stopped however this script exits.
SERVICES_STOP=()
stop_services() { for f in "${SERVICES_STOP[@]}"; do "$f" || true; done; }
trap stop_services EXIT
for svc in scripts/services/*.sh; do
    [ -e "$svc" ] && source "$svc"
done

# Lints first: every warning, in every target of every crate, fails the run.
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The made-up tiled layout (feature test-layout: one table row plus its address function,
# see DEVELOPERS.md "Adding a tiled layout") is linted too, in the CLI and the element.
cargo clippy -p dmabridge-cli --features test-layout --all-targets --quiet -- -D warnings
cargo clippy -p gst-plugin-dmabridge --features test-layout --all-targets --quiet -- -D warnings
# The API docs too: a broken or private intra-doc link, or two targets' docs on one path
# (the C ABI's and the CLI's `dmabridge` beside the engine's), fails the run.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

# Build once (tests, benches and the examples), without the preload, so that cargo and
# rustc never run under it.
cargo test --workspace --all-targets --no-run --quiet

# The C ABI (libdmabridge.so, include/dmabridge.h), installed under target/capi with its
# pkg-config file, and the C programs that test it, built with pkg-config's flags only; the
# GStreamer plugin (libgstdmabridge.so), whose tests run gst-launch-1.0 pipelines with it.
cargo build -p gst-plugin-dmabridge --quiet
scripts/install-capi.sh target/capi >/dev/null
mkdir -p target/c
# (PKG_CONFIG_PATH only for these commands: the gstreamer-sys build scripts rebuild when it
# changes.)
dmb_pc() { PKG_CONFIG_PATH="$PWD/target/capi/lib/pkgconfig" pkg-config "$@" dmabridge; }
for prog in capi_test capi_host_test capi_threads_test; do
    gcc -Wall -Wextra -Werror -pthread tests/c/$prog.c $(dmb_pc --cflags --libs) -o target/c/$prog
done
# The thread test once more under ThreadSanitizer: the library built with nightly's
# -Zsanitizer=thread (std rebuilt with it, in its own target dir), the program linked with
# the toolchain's TSan runtime (gcc 12's libtsan lacks the __tsan_memcpy family that LLVM
# now emits) and a DT_RPATH, so that it loads that library whatever LD_LIBRARY_PATH says.
# (Not helgrind: it cannot see Rust's futex-based Mutex and reports every access it guards.)
TSAN_LIB=target/tsan/x86_64-unknown-linux-gnu/debug
RUSTFLAGS=-Zsanitizer=thread cargo +nightly build --locked --quiet -Zbuild-std --target x86_64-unknown-linux-gnu -p dmabridge-capi --target-dir target/tsan
ln -sf libdmabridge.so "$TSAN_LIB/libdmabridge.so.0"
gcc -Wall -Wextra -Werror -pthread tests/c/capi_threads_test.c $(dmb_pc --cflags) -L"$TSAN_LIB" -ldmabridge -Wl,--disable-new-dtags,-rpath,"$PWD/$TSAN_LIB" \
    -Wl,--whole-archive "$(rustc +nightly --print sysroot)"/lib/rustlib/x86_64-unknown-linux-gnu/lib/librustc-*_rt.tsan.a -Wl,--no-whole-archive -Wl,--export-dynamic -lstdc++ -lm -ldl -lrt \
    -o target/c/capi_threads_test_tsan

# The examples embedders copy from, run as they are documented, with validation on; and
# the C program, under the validation layer too.
# Each program runs with the validation layer (and the C ABI's library) in a subshell, so
# that CMD may be a function (with_udmabuf). Its verdict is a line of its own ("program
# ok: ..." or "program FAILED: ..."); a failure does not stop the others.
run_examples() {
    local rc=0
    program() {
        local name="$1"; shift
        echo "--- $name"
        if (export DMABRIDGE_VALIDATION=1 LD_LIBRARY_PATH="$PWD/target/capi/lib:$PWD/target/debug"; "$@"); then
            echo "program ok: $name"
        else
            echo "program FAILED: $name"; rc=1
        fi
    }
    for example in embed_host_device video_pipeline wgpu_frames; do
        program "example $example" "$@" "target/debug/examples/$example"
    done
    program "C ABI (tests/c/capi_test.c)" "$@" target/c/capi_test
    program "C ABI on the host's own device (tests/c/capi_host_test.c)" "$@" target/c/capi_host_test
    program "C ABI, two threads on one engine (tests/c/capi_threads_test.c)" "$@" target/c/capi_threads_test
    program "C ABI, two threads on one engine, under ThreadSanitizer" "$@" env TSAN_OPTIONS="suppressions=$PWD/tests/c/tsan.supp" target/c/capi_threads_test_tsan
    return $rc
}

LOGS=target/test-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
FAILED=()
# Runs one configuration's step, its output also kept in $LOGS/NAME.log for the summary.
step() {
    local name="$1"; shift
    if ! "$@" 2>&1 | tee -a "$LOGS/$name.log"; then
        FAILED+=("$name")
    fi
}
# "N passed, M failed, K ignored" over every libtest summary line of a log, plus the
# programs (examples, C tests) that ran.
count() {
    awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1); if ($(i) ~ /^ignored/) g += $(i-1) } }
         /^program ok: / { programs++ }
         /^drm-shim [a-z0-9_]+: ok$/ { programs++ }
         END { printf "%d passed, %d failed, %d ignored, %d programs", p, f, g, programs }' "$LOGS/$1.log" 2>/dev/null
}

echo "=== configuration 1/4: plain lavapipe (no udmabuf) ==="
step plain env DMABRIDGE_TEST_CONFIG=plain cargo test --workspace --quiet -- --test-threads=2
step plain env DMABRIDGE_TEST_CONFIG=plain cargo test -p dmabridge-cli --features test-layout --test test_layout --quiet -- --test-threads=2
# The made-up layout in the element: the plugin the test loads is built with the feature for
# this test only, and built again without it for everything after.
made_up_layout_in_the_element() {
    local rc=0
    cargo build -p gst-plugin-dmabridge --features test-layout --quiet
    DMABRIDGE_TEST_CONFIG=plain cargo test -p gst-plugin-dmabridge --features test-layout --test test_layout --quiet -- --test-threads=2 || rc=$?
    cargo build -p gst-plugin-dmabridge --quiet
    return $rc
}
step plain made_up_layout_in_the_element
step plain run_examples env DMABRIDGE_TEST_CONFIG=plain

echo "=== configuration 2/4: udmabuf ($( [ -e /dev/udmabuf ] && echo real || echo emulation )) ==="
step udmabuf with_udmabuf cargo test --workspace --quiet -- --test-threads=2
step udmabuf run_examples with_udmabuf

# The test binaries cargo built above, with the directory each runs in.
cargo test --workspace --no-run --message-format=json 2>/dev/null | /usr/bin/python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["target"]["kind"][0], m["executable"], os.path.dirname(m["manifest_path"]))
' >target/lab-tests.list

echo "=== configuration 3/4: drm-shim (radv on Mesa's amdgpu drm-shim, scripts/real-drivers.sh) ==="
# Each chip is a process of its own; its verdict is a line "drm-shim CHIP: ok" or "FAILED".
# radv (amd) always: its build fits the time budget. anv (intel) where it is already built
# (`scripts/real-drivers.sh --driver intel`, 7.5 more minutes and LLVM 15): a fresh machine
# would pass 60 minutes with both.
drm_shim_tests() {
    local bin driver="$1"
    bin=$(awk '$1 == "drm_shim" && $2 == "test" { print $3 }' target/lab-tests.list)
    [ -n "$bin" ] || { echo "drm_shim: the test binary was not built"; return 1; }
    DMABRIDGE_TEST_CONFIG=drm-shim scripts/real-drivers.sh --driver "$driver" -- "$bin" --test-threads=2 -q
}
# The probe a user runs, per chip: exits 0, the JSON kept beside the logs.
drm_shim_probe() {
    scripts/real-drivers.sh --driver "$1" -- sh -c 'target/debug/dmabridge probe --json --usage sampled+storage+color-attachment >"$0/probe-$DMABRIDGE_DRM_SHIM_CHIP.json"' "$LOGS"
}
drm_shim_drivers=(amd)
if scripts/real-drivers.sh --driver intel --built; then
    drm_shim_drivers+=(intel)
else
    echo "drm-shim: anv not built here (scripts/real-drivers.sh --driver intel builds it); radv only"
fi
for driver in "${drm_shim_drivers[@]}"; do
    step drm-shim drm_shim_tests "$driver"
    step drm-shim drm_shim_probe "$driver"
done

echo "=== configuration 4/4: kernel (Linux in the lab, scripts/lab.sh) ==="
# The live peers: vgem (a second DRM device, fences on dma-bufs), sw_sync (timelines whose
# fences the tests alone signal, or fail: interop/tests/hostile_fences.rs, tests/kernel_fences.rs),
# two vivid instances (V4L2 capture and output: 000 single-planar, 001 multi-planar) and
# virtio-gpu (a KMS device).
step kernel scripts/lab.sh --modules vgem,sw_sync,vivid,virtio_gpu --param vivid.n_devs=2 --param vivid.multiplanar=1,2 \
    --timeout "${DMABRIDGE_LAB_TIMEOUT:-2700}" -- scripts/kernel-tests.sh target/lab-tests.list
# The drivers Debian does not build (vicodec, visl, vkms, sw_sync; scripts/lab-modules.sh
# builds them once and caches them beside the kernel): there, and doing what tests rely on.
step kernel scripts/lab.sh --modules vivid,vicodec,visl,vkms,sw_sync --param vkms.enable_overlay=1 --timeout 900 -- scripts/lab-drivers-check.sh target/debug/dmabridge

kernel_line=$(grep -E '^kernel configuration:' "$LOGS/kernel.log" | tail -1 | sed 's/^kernel configuration: //')
echo "summary: plain: $(count plain) | udmabuf: $(count udmabuf) | drm-shim: $(count drm-shim) | kernel: ${kernel_line:-did not finish (see above)}"
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "FAILED: ${FAILED[*]}" >&2
    exit 1
fi
