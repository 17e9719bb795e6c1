#!/usr/bin/env bash
# Run inside the kernel lab by test.sh (scripts/lab.sh --modules vicodec,visl,vkms,sw_sync):
# checks that the drivers scripts/lab-modules.sh builds are there and do what the tests
# will rely on, as the kernel reports them:
# - vicodec's three video nodes and visl's, by name;
# - a vkms DRM card with a writeback connector;
# - with DMABRIDGE: vkms's overlay planes (test.sh loads vkms.enable_overlay=1), one
#   negotiated as a participant of its own beside the primary plane and the device;
# - vicodec's stateless decoder, with DMABRIDGE: `dmabridge demo --producer vicodec` (16
#   frames, a resolution change at 8) verifies every frame against the stateful decoder, and
#   the same with every reference overwritten before use must fail; visl runs an MPEG-2
#   I/P/B request sequence into collection buffers (`dmabridge demo --producer visl`);
# - sw_sync: a fence made on a new timeline is pending until the timeline is advanced to
#   it, then signalled (SW_SYNC_IOC_CREATE_FENCE, SW_SYNC_IOC_INC, poll).
# - with DMABRIDGE (the CLI's path) given: visl's CAPTURE formats, read live, negotiated
#   with the Vulkan device and allocated, each buffer read back through the device; and,
#   with vivid loaded too, the live demo on vkms: a 1280x720 camera on a display whose
#   preferred mode is 1024x768 (a mode that holds the frame is picked), every frame shown,
#   verified and showing vivid's colour bars in the camera's own colorimetry (NV12, through
#   the copy plan to AR24), and zero-copy (AR24: the camera's buffers are vkms's
#   framebuffers, imported through PRIME); both runs with --writeback: every frame shown is
#   read back through vkms's writeback connector and compared with the frame;
# - with DMABRIDGE given: `dmabridge display-check` on vkms, XR24 and AR24: system dma-heap
#   buffers with a known pattern shown (a modeset, then non-blocking flips with page-flip
#   events), written back and compared byte for byte; any difference fails the check.
# Prints "program ok: lab drivers" and exits 0, or names what is missing and exits 1.
#
#   scripts/lab-drivers-check.sh [DMABRIDGE]
set -euo pipefail
DMABRIDGE="${1:-}"
fail() { echo "lab drivers: $*" >&2; exit 1; }
names=$(cat /sys/class/video4linux/*/name 2>/dev/null || true)
for want in stateful-encoder stateful-decoder stateless-decoder visl; do
    grep -qx "$want" <<<"$names" || fail "no V4L2 node named $want (nodes: $(tr '\n' ' ' <<<"$names"))"
done
vkms=""
for c in /sys/class/drm/card[0-9]; do
    [ "$(readlink -f "$c/device")" = /sys/devices/platform/vkms ] && vkms=$(basename "$c")
done
[ -n "$vkms" ] || fail "no DRM card of vkms"
ls -d /sys/class/drm/"$vkms"-Writeback-* >/dev/null 2>&1 || fail "$vkms (vkms) has no writeback connector"
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
[ -e /sys/kernel/debug/sync/sw_sync ] || fail "no /sys/kernel/debug/sync/sw_sync"
/usr/bin/python3 - <<'PY' || fail "sw_sync did not behave as a timeline"
import fcntl, os, select, struct
# include/uapi/linux/sync_file.h's sw_sync twin (drivers/dma-buf/sw_sync.c):
# struct sw_sync_create_fence_data { __u32 value; char name[32]; __s32 fence; }
CREATE = 0xC0000000 | (struct.calcsize("I32si") << 16) | (ord("W") << 8) | 0  # _IOWR('W', 0, ...)
INC = 0x40000000 | (4 << 16) | (ord("W") << 8) | 1                              # _IOW('W', 1, __u32)
tl = os.open("/sys/kernel/debug/sync/sw_sync", os.O_RDWR)
buf = bytearray(struct.pack("I32si", 1, b"dmabridge-lab", -1))
fcntl.ioctl(tl, CREATE, buf)
fence = struct.unpack("I32si", buf)[2]
p = select.poll(); p.register(fence, select.POLLIN)
assert p.poll(0) == [], "a fence at 1 on a timeline at 0 is already signalled"
fcntl.ioctl(tl, INC, struct.pack("I", 1))
assert p.poll(1000), "advancing the timeline to 1 did not signal the fence"
os.close(fence); os.close(tl)
PY
if [ -n "$DMABRIDGE" ]; then
    visl=""
    for d in /sys/class/video4linux/video*; do [ "$(cat "$d/name")" = visl ] && visl=/dev/$(basename "$d"); done
    out=$("$DMABRIDGE" allocate --width 320 --height 240 --v4l2-device "dec=$visl:capture" --vulkan gpu=sampled 2>&1) \
        || fail "dmabridge allocate with visl's CAPTURE formats failed: $out"
    grep -q "read back through the device" <<<"$out" || fail "allocate with visl read nothing back: $out"
    echo "visl: $(grep -m1 'group 0' <<<"$out" | sed 's/^ *//'); allocated and read back through the device"
fi
if [ -n "$DMABRIDGE" ]; then
    # vkms's overlay planes (vkms.enable_overlay=1), each a participant with its own list.
    planes=$("$DMABRIDGE" probe --kms-device "/dev/dri/$vkms" 2>&1) || fail "probe of vkms failed: $planes"
    primary=$(grep -m1 -oE 'plane [0-9]+ Primary' <<<"$planes" | grep -oE '[0-9]+')
    overlay=$(grep -m1 -oE 'plane [0-9]+ Overlay' <<<"$planes" | grep -oE '[0-9]+') \
        || fail "vkms offers no overlay plane (loaded without vkms.enable_overlay=1?): $planes"
    out=$("$DMABRIDGE" negotiate --json --kms-device "primary=/dev/dri/$vkms:$primary" --kms-device "overlay=/dev/dri/$vkms:$overlay" \
        --vulkan gpu=sampled 2>&1) || fail "negotiating vkms's primary and overlay planes with the device failed: $out"
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); names=[n for g in d["groups"] for n in g["participants"]]; assert d["outcome"]=="shared" and "overlay" in names, (d["outcome"], names); print("vkms overlay: plane", sys.argv[1], "a participant of its own; shared", d["format"], "with the primary plane and the device")' "$overlay" <<<"$out" \
        || fail "vkms's overlay plane did not negotiate as a participant: $(tail -3 <<<"$out")"
fi
if [ -n "$DMABRIDGE" ]; then
    # Seed 002 for real: vicodec's stateless decoder through the request API into collection
    # buffers, a resolution change and a drain, every frame against its stateful decoder.
    out=$("$DMABRIDGE" demo --producer vicodec --frames 16 --resolution-change-at 8 --gop 5 --validation \
        --out "${TMPDIR:-/tmp}/lab-drivers-vicodec" 2>&1) || fail "the vicodec stateless decode failed: $(tail -8 <<<"$out")"
    for want in "16/16 frames decoded statelessly" "references honoured: 12/12 frames with references" \
        "drained: every frame accounted for; leaked fds: 0"; do
        grep -qF "$want" <<<"$out" || fail "vicodec: no \"$want\": $(tail -8 <<<"$out")"
    done
    [ "$(grep -cE '^(640x480|1280x720) .* released$' <<<"$out")" -eq 2 ] || fail "vicodec: both collections were not released: $out"
    grep -E '^(vicodec|references|drained|ms/frame)' <<<"$out" | sed 's/^/vicodec: /'
    # The check can fail: a reference buffer handed to another writer before its P frame.
    if out=$("$DMABRIDGE" demo --producer vicodec --frames 6 --break-references --out "${TMPDIR:-/tmp}/lab-drivers-vicodec-broken" 2>&1); then
        fail "vicodec: overwritten reference frames went unnoticed: $out"
    fi
    grep -q "^mismatch: frame 1 differs" <<<"$out" || fail "vicodec: a broken reference was not caught as a mismatch: $(tail -5 <<<"$out")"
    echo "vicodec: with each reference overwritten before use, $(grep -c '^mismatch' <<<"$out") of 4 P frames caught as mismatches"
    # visl: an MPEG-2 request sequence (I, P and B pictures) into collection buffers.
    out=$("$DMABRIDGE" demo --producer visl --frames 8 --validation --out "${TMPDIR:-/tmp}/lab-drivers-visl" 2>&1) \
        || fail "the visl MPEG-2 sequence failed: $(tail -8 <<<"$out")"
    for want in "8/8 frames decoded statelessly" "references honoured: 7/7" "drained: every frame accounted for; leaked fds: 0"; do
        grep -qF "$want" <<<"$out" || fail "visl: no \"$want\": $(tail -8 <<<"$out")"
    done
    grep -E '^(visl|references)' <<<"$out" | sed 's/^/visl: /'
fi
cap=""
for d in /sys/class/video4linux/video*; do [ "$(cat "$d/name")" = vivid-000-vid-cap ] && cap=/dev/$(basename "$d"); done
if [ -n "$DMABRIDGE" ] && [ -n "$cap" ]; then
    out=$("$DMABRIDGE" demo --producer v4l2 --device "$cap" --kms-device "/dev/dri/$vkms" --format NV12 --width 1280 --height 720 \
        --frames 10 --validation --writeback --out "${TMPDIR:-/tmp}/lab-drivers-vkms" 2>&1) || fail "the live demo on vkms failed: $(tail -5 <<<"$out")"
    grep -q "10 frames shown" <<<"$out" || fail "the live demo showed no frames on vkms: $(tail -5 <<<"$out")"
    grep -q "picture: 10/10 frames show vivid's colour bars" <<<"$out" || fail "the live demo's frames on vkms: $(tail -5 <<<"$out")"
    grep -q "written back: 10/10 frames shown match" <<<"$out" || fail "the live demo's frames written back by vkms differ: $(tail -5 <<<"$out")"
    echo "vkms: $(grep -m1 '^written back' <<<"$out")"
    echo "vkms: $(grep -m1 'camera -> display' <<<"$out" | cut -c1-120)..."
    out=$("$DMABRIDGE" demo --producer v4l2 --device "$cap" --kms-device "/dev/dri/$vkms" --format AR24 --width 1280 --height 720 \
        --frames 10 --validation --writeback --out "${TMPDIR:-/tmp}/lab-drivers-vkms-ar24" 2>&1) || fail "the zero-copy live demo on vkms failed: $(tail -5 <<<"$out")"
    grep -q "negotiated: shared" <<<"$out" || fail "vivid, lavapipe and vkms share no AR24 buffer: $(tail -5 <<<"$out")"
    grep -q "10 frames shown.*zero-copy: the camera's buffers are the framebuffers" <<<"$out" || fail "vkms did not scan out the camera's buffers: $(tail -5 <<<"$out")"
    grep -q "leaked fds: 0" <<<"$out" || fail "the zero-copy live demo leaked fds: $(tail -5 <<<"$out")"
    grep -q "written back: 10/10 frames shown match" <<<"$out" || fail "the zero-copy frames written back by vkms differ: $(tail -5 <<<"$out")"
    grep -q "flips: non-blocking, 9 page-flip events received" <<<"$out" || fail "the zero-copy flips on vkms were not non-blocking with events: $(grep -m1 '^flips' <<<"$out")"
    echo "vkms zero-copy: $(grep -m1 '^written back' <<<"$out")"
    echo "vkms zero-copy: $(grep -m1 '^flips' <<<"$out")"
    echo "vkms: $(grep -m1 'camera -> display' <<<"$out")"
fi
if [ -n "$DMABRIDGE" ]; then
    for f in XR24 AR24; do
        # Every wait of display-check has a 10 s limit, yet one run of 3 (2026-11-28) stalled
        # here for over 10 minutes under TCG: a stall is named and bounded, not waited out.
        rc=0
        out=$(timeout -k 10 180 "$DMABRIDGE" display-check --kms-device "/dev/dri/$vkms" --format $f --frames 8 2>&1) || rc=$?
        [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "display-check $f on vkms stalled past 180 s and was killed: $(tail -5 <<<"$out")"
        [ "$rc" -eq 0 ] || fail "display-check $f on vkms: the writeback differs from the source, or the check could not run: $(tail -5 <<<"$out")"
        grep -q "program ok: display showed what dmabridge meant" <<<"$out" || fail "display-check $f on vkms: $(tail -5 <<<"$out")"
        grep -q "written back: 8/8 frames match" <<<"$out" || fail "display-check $f on vkms: not every frame matched: $(tail -5 <<<"$out")"
        echo "vkms display-check $f: $(grep -m1 '^written back' <<<"$out")"
        echo "vkms display-check $f: $(grep -m1 '^ms:' <<<"$out")"
    done
fi
echo "vicodec, visl: $(grep -E 'stateful|stateless|visl' <<<"$names" | tr '\n' ' ')"
echo "vkms: $vkms with $(cd /sys/class/drm && ls -d "$vkms"-* | tr '\n' ' ')"
echo "sw_sync: a fence pending until its timeline reached it, then signalled"
echo "program ok: lab drivers"
