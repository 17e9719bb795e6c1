#!/usr/bin/env bash
# The main job: provision (idempotent), then run dmabridge's `probe` on this machine's
# Vulkan device, with the udmabuf emulation where the kernel lacks udmabuf (see
# scripts/emulation.sh) so that lavapipe shows its modifier support.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet --bin dmabridge
source scripts/emulation.sh
with_udmabuf target/release/dmabridge probe "$@"
