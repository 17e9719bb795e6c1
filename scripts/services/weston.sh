# Sourced by scripts/test.sh: a headless Weston for tests/wayland.rs (the Wayland sink).
#
# Installs Weston from bookworm-backports where it is missing (idempotent: a dpkg query
# when present), starts it headless with the GL renderer (llvmpipe EGL imports memfd
# dma-bufs) and the debug protocols (`weston_capture_v1`, which weston-screenshooter uses)
# in a private XDG_RUNTIME_DIR, waits for its socket, and exports where it is:
#   DMABRIDGE_TEST_WAYLAND_DISPLAY, DMABRIDGE_TEST_XDG_RUNTIME_DIR
# A user's own WAYLAND_DISPLAY / XDG_RUNTIME_DIR are left alone. Its stop function joins
# SERVICES_STOP, which test.sh runs however it exits. Where Weston cannot be had, the
# variables stay unset: the tests then fail under CI and skip with a message otherwise.

weston_service_install() {
    command -v weston >/dev/null && command -v weston-screenshooter >/dev/null && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "weston.sh: installing weston from bookworm-backports" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -t bookworm-backports weston >/dev/null 2>&1 || {
        $sudo apt-get update -qq >/dev/null 2>&1 &&
            DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -t bookworm-backports weston >/dev/null
    }
}

weston_service_stop() {
    if [ -n "${WESTON_SERVICE_PID:-}" ]; then
        kill "$WESTON_SERVICE_PID" 2>/dev/null || true
        wait "$WESTON_SERVICE_PID" 2>/dev/null || true
        WESTON_SERVICE_PID=""
    fi
    if [ -n "${WESTON_SERVICE_DIR:-}" ]; then
        rm -rf "$WESTON_SERVICE_DIR"
        WESTON_SERVICE_DIR=""
    fi
}

weston_service_start() {
    weston_service_install || { echo "weston.sh: weston is not installable; the Wayland tests cannot run" >&2; return 0; }
    WESTON_SERVICE_DIR=$(mktemp -d /tmp/dmabridge-weston.XXXXXX)
    chmod 0700 "$WESTON_SERVICE_DIR"
    local socket="dmabridge-test-$$"
    # No animations (the start-up fade and window effects would change the pixels the tests
    # check in screenshots) and no panel; a background colour none of the tests draws.
    cat >"$WESTON_SERVICE_DIR/weston.ini" <<'INI'
[core]
idle-time=0

[shell]
startup-animation=none
animation=none
close-animation=none
focus-animation=none
panel-position=none
background-color=0xff204060
INI
    SERVICES_STOP+=(weston_service_stop)
    XDG_RUNTIME_DIR="$WESTON_SERVICE_DIR" WAYLAND_DISPLAY= \
        weston --backend=headless --renderer=gl --socket="$socket" --debug \
        --config="$WESTON_SERVICE_DIR/weston.ini" --idle-time=0 \
        --width=1024 --height=768 --log="$WESTON_SERVICE_DIR/weston.log" </dev/null >/dev/null 2>&1 &
    WESTON_SERVICE_PID=$!
    local i
    for i in $(seq 1 100); do
        [ -S "$WESTON_SERVICE_DIR/$socket" ] && break
        kill -0 "$WESTON_SERVICE_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [ ! -S "$WESTON_SERVICE_DIR/$socket" ]; then
        echo "weston.sh: weston did not start; its log:" >&2
        cat "$WESTON_SERVICE_DIR/weston.log" >&2 2>/dev/null || true
        return 0
    fi
    export DMABRIDGE_TEST_WAYLAND_DISPLAY="$socket"
    export DMABRIDGE_TEST_XDG_RUNTIME_DIR="$WESTON_SERVICE_DIR"
    echo "weston.sh: headless weston on $DMABRIDGE_TEST_XDG_RUNTIME_DIR/$socket (pid $WESTON_SERVICE_PID)" >&2
}

weston_service_start
