#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: provisions (idempotent), then runs
# every test twice against the real lavapipe:
#   1. plain: no udmabuf, so no modifier extension and no DMA_BUF export;
#   2. with the udmabuf emulation preloaded (or the real /dev/udmabuf where there is one).
# DMABRIDGE_TEST_CONFIG tells the tests which configuration they are in, so they can
# assert what the device must report there. Every Vulkan test enables the validation layer.
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

# Build once (tests, benches and the examples), without the preload, so that cargo and
# rustc never run under it.
cargo test --workspace --all-targets --no-run --quiet

# The C ABI (libdmabridge.so, include/dmabridge.h) and the C program that tests it; the
# GStreamer plugin (libgstdmabridge.so), whose tests run gst-launch-1.0 pipelines with it.
cargo build -p dmabridge-capi -p gst-plugin-dmabridge --quiet
mkdir -p target/c
gcc -Wall -Wextra -Werror -Iinclude tests/c/capi_test.c -Ltarget/debug -ldmabridge -o target/c/capi_test
gcc -Wall -Wextra -Werror -Iinclude tests/c/capi_host_test.c -Ltarget/debug -ldmabridge -ldl -o target/c/capi_host_test

# The examples embedders copy from, run as they are documented, with validation on; and
# the C program, under the validation layer too.
run_examples() {
    for example in embed_host_device video_pipeline; do
        echo "--- example $example"
        DMABRIDGE_VALIDATION=1 "$@" "target/debug/examples/$example"
    done
    echo "--- C ABI (tests/c/capi_test.c)"
    DMABRIDGE_VALIDATION=1 LD_LIBRARY_PATH="$PWD/target/debug" "$@" target/c/capi_test
    echo "--- C ABI on the host's own device (tests/c/capi_host_test.c)"
    DMABRIDGE_VALIDATION=1 LD_LIBRARY_PATH="$PWD/target/debug" "$@" target/c/capi_host_test
}

echo "=== configuration 1/2: plain lavapipe (no udmabuf) ==="
DMABRIDGE_TEST_CONFIG=plain cargo test --workspace --quiet -- --test-threads=2
DMABRIDGE_TEST_CONFIG=plain run_examples env

echo "=== configuration 2/2: udmabuf ($( [ -e /dev/udmabuf ] && echo real || echo emulation )) ==="
with_udmabuf cargo test --workspace --quiet -- --test-threads=2
run_examples with_udmabuf
