# An X server for the presenter tests (tests/present.rs): sourced by scripts/test.sh.
#
# Installs Xvfb, xwd (x11-apps), xdotool and the X client libraries that winit dlopens,
# idempotently (a dpkg query when they are there). Starts Xvfb on a free display only
# when $DISPLAY is unset, exports DISPLAY, and registers xvfb_stop in SERVICES_STOP.
# lavapipe presents to it through X11 in software.

XVFB_PKGS=(xvfb x11-apps xdotool libx11-6 libx11-xcb1 libxcursor1 libxrandr2 libxi6 libxkbcommon0 libxkbcommon-x11-0)

xvfb_install() {
    local missing=() p sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    for p in "${XVFB_PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "xvfb: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

XVFB_PID=""

xvfb_stop() {
    if [ -n "$XVFB_PID" ] && kill -0 "$XVFB_PID" 2>/dev/null; then
        kill "$XVFB_PID" 2>/dev/null || true
        wait "$XVFB_PID" 2>/dev/null || true
    fi
    XVFB_PID=""
}

xvfb_start() {
    local n log
    if [ -n "${DISPLAY:-}" ]; then
        echo "xvfb: using the existing display $DISPLAY" >&2
        return 0
    fi
    # The first display number with neither a lock file nor a socket.
    n=99
    while [ -e "/tmp/.X$n-lock" ] || [ -e "/tmp/.X11-unix/X$n" ]; do n=$((n + 1)); done
    log=$(mktemp -t xvfb.XXXXXX.log)
    # 24-bit TrueColor, black root (-br) so that letterboxing reads as black; no TCP.
    Xvfb ":$n" -screen 0 1280x800x24 -nolisten tcp -br -noreset >"$log" 2>&1 &
    XVFB_PID=$!
    SERVICES_STOP+=(xvfb_stop)
    local i
    for i in $(seq 1 100); do
        if [ -S "/tmp/.X11-unix/X$n" ]; then
            export DISPLAY=":$n"
            echo "xvfb: started on $DISPLAY (pid $XVFB_PID)" >&2
            return 0
        fi
        kill -0 "$XVFB_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "xvfb: Xvfb did not start on :$n:" >&2
    cat "$log" >&2
    xvfb_stop
    return 1
}

xvfb_install
xvfb_start
