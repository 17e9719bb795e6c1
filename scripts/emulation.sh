# Sourced by run.sh and test.sh. Builds the udmabuf emulation (test support, see
# tests/support/udmabuf_emulation.c) and defines with_udmabuf CMD..., which runs CMD with
# the emulation preloaded, or as it is where the kernel has a real /dev/udmabuf.
EMULATION_SO=target/test-support/libudmabuf_emulation.so
EMULATION_SRC=tests/support/udmabuf_emulation.c
if [ ! -f "$EMULATION_SO" ] || [ "$EMULATION_SRC" -nt "$EMULATION_SO" ]; then
    mkdir -p "$(dirname "$EMULATION_SO")"
    cc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$EMULATION_SO" "$EMULATION_SRC" -ldl
fi
with_udmabuf() {
    if [ -e /dev/udmabuf ]; then
        DMABRIDGE_TEST_CONFIG=real-udmabuf "$@"
    else
        DMABRIDGE_TEST_CONFIG=udmabuf-emulation LD_PRELOAD="$PWD/$EMULATION_SO${LD_PRELOAD:+:$LD_PRELOAD}" "$@"
    fi
}
