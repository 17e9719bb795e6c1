#!/usr/bin/env bash
# The main job: provision (idempotent), then run `dmabridge demo` (a producer and a consumer
# process passing frames zero-copy and by GPU copy) on this machine's Vulkan device, with
# the udmabuf emulation where the kernel lacks udmabuf (see scripts/emulation.sh) so that
# lavapipe can export dma-bufs. Arguments go to the demo (e.g. --frames 60 --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet -p dmabridge-cli --bin dmabridge
source scripts/emulation.sh
with_udmabuf target/release/dmabridge demo "$@"
