#!/bin/bash
# The device check: dmabridge on a real NVIDIA driver (its modifiers, dma-buf export and
# import between processes, sync_file), and the wgpu example beside the raw-Vulkan consumer.
# Prepared here and run on a lent device machine (`run` with carry [".gl", "devcarry"]):
# devcarry/ holds stripped release binaries (strip -o devcarry/dmabridge target/release/dmabridge;
# likewise target/release/examples/wgpu_frames), .gl/ the loader packages the device README names.
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
{
  nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  uname -r; ls -la /dev/dri /dev/dma_heap /dev/udmabuf 2>&1
  ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d 2>&1
} > "$OUT/env.txt" 2>&1
if ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-}" >> "$OUT/env.txt"
D=${D:-devcarry/dmabridge}
{ timeout 60 $D probe; echo "rc=$?"; timeout 60 $D probe --usage sampled+color-attachment --usage transfer-src+transfer-dst; echo "rc=$?"; } > "$OUT/probe.txt" 2>&1
timeout 60 $D probe --json --usage sampled+storage+color-attachment > "$OUT/probe.json" 2>>"$OUT/probe.txt"
{ time timeout 200 $D demo --frames 60 --out /tmp/demo; echo "rc=$?"; } > "$OUT/demo.txt" 2>&1
cp /tmp/demo/summary.json "$OUT/demo-summary.json" 2>/dev/null; cp /tmp/demo/contact_sheet.png "$OUT/demo-contact-sheet.png" 2>/dev/null
{ time timeout 200 devcarry/wgpu_frames --frames 60 --width 1280 --height 720 --beside-vulkan --out /tmp/wf; echo "rc=$?"; } > "$OUT/wgpu.txt" 2>&1
ls /tmp/wf >> "$OUT/wgpu.txt" 2>&1
exit 0
