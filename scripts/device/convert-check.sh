#!/bin/bash
# GPU conversions on the device against dmabridge's CPU reference: each layout tiled on the
# CPU, detiled on the GPU, compared with the original; NV12 to AR24 on both paths.
# Needs only a dmabridge binary: D=target/release/dmabridge scripts/device/convert-check.sh here;
# on a device machine, D=devcarry/dmabridge (see nvidia-check.sh).
set -u
D=${D:-devcarry/dmabridge}; W=1920; H=1080
head -c $((W*H*3/2)) /dev/urandom > /tmp/lin.nv12
for L in nvidia-block-linear-v4 nvidia-block-linear-v1 samsung-64x32 nv12-4l4 nv12-16l32s allwinner-32x32; do
  $D convert --format NV12 --width $W --height $H --from linear --to $L --in /tmp/lin.nv12 --out /tmp/t.$L --path cpu >/dev/null || { echo "$L: cpu tile failed"; continue; }
  for P in gpu copy-commands; do
    if out=$($D convert --format NV12 --width $W --height $H --from $L --to linear --in /tmp/t.$L --out /tmp/g.$L --path $P 2>&1); then
      cmp -s /tmp/g.$L /tmp/lin.nv12 && echo "$L -> linear, $P: identical to the original ($out)" || echo "$L -> linear, $P: DIFFERS ($out)"
    else echo "$L -> linear, $P: refused: $out"; fi
  done
  $D convert --format NV12 --width $W --height $H --from $L --to linear --in /tmp/t.$L --out /tmp/a.$L --explain 2>&1 | tail -4
done
for P in gpu cpu; do $D convert --format NV12 --width $W --height $H --from linear --to linear --to-format AR24 --in /tmp/lin.nv12 --out /tmp/rgb.$P --path $P; done
cmp -s /tmp/rgb.gpu /tmp/rgb.cpu && echo "NV12 -> AR24: gpu identical to cpu" || echo "NV12 -> AR24: gpu DIFFERS from cpu"
