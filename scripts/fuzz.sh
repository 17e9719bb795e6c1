#!/usr/bin/env bash
# Fuzzes every target of dmabridge's fuzz crates (interop/fuzz: the parsers, the import
# checks, the tiling geometry, the handoff wire, the CPU fast paths against the scalar
# references on buffers between guard pages (cpu_differential); lab/fuzz: the demo's control
# messages), one at a time, for FUZZ_SECONDS each (default 600), under AddressSanitizer
# (cargo fuzz's default), and keeps what the fuzzer learns:
#   - inputs that reach new code are merged (libFuzzer -merge=1, so only those that add
#     coverage) into <crate>/fuzz/corpus/<target>/, which <crate>/tests/fuzz_corpus.rs replays;
#   - a crash (panic, abort, allocation over the RSS limit, timeout) is minimised and copied
#     into the corpus as crash-<target>-<hash>, so the test suite fails until it is fixed; the
#     raw and minimised files stay in <crate>/fuzz/artifacts/<target>/.
# Prints one summary line per target: seconds, executions, corpus size before/after, crashes.
#
# Usage: scripts/fuzz.sh [TARGET...]   (no argument: every target)
# Environment: FUZZ_SECONDS (600), FUZZ_RSS_LIMIT_MB (2048), FUZZ_TIMEOUT (seconds per input,
# 10), FUZZ_TOOLCHAIN (nightly). Installs cargo-fuzz if it is missing. Exit status 1 when a
# target crashed. Run it under `nice -n 19` on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-600}
RSS_LIMIT_MB=${FUZZ_RSS_LIMIT_MB:-2048}
TIMEOUT=${FUZZ_TIMEOUT:-10}
TOOLCHAIN=${FUZZ_TOOLCHAIN:-nightly}
FUZZ_DIRS=(interop/fuzz lab/fuzz)

if ! cargo "+$TOOLCHAIN" fuzz --version >/dev/null 2>&1; then
    cargo "+$TOOLCHAIN" install cargo-fuzz --locked
fi
fuzz() { cargo "+$TOOLCHAIN" fuzz "$1" --fuzz-dir "$FUZZ_DIR" "${@:2}"; }

# (fuzz dir, target) pairs: every target, or the ones named.
pairs=()
for FUZZ_DIR in "${FUZZ_DIRS[@]}"; do
    while read -r t; do
        if [ $# -eq 0 ] || printf '%s\n' "$@" | grep -qx "$t"; then
            pairs+=("$FUZZ_DIR:$t")
        fi
    done < <(fuzz list)
done

work=$(mktemp -d "${TMPDIR:-/tmp}/dmabridge-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# One build of each crate with a target to run first, so that a build failure stops
# everything before any time is spent.
for FUZZ_DIR in "${FUZZ_DIRS[@]}"; do
    if printf '%s\n' "${pairs[@]}" | grep -q "^$FUZZ_DIR:"; then
        fuzz build
    fi
done

count() { find "$1" -maxdepth 1 -type f | wc -l; }
summary=()
crashed=0
for pair in "${pairs[@]}"; do
    FUZZ_DIR=${pair%%:*}
    t=${pair#*:}
    corpus="$FUZZ_DIR/corpus/$t"
    artifacts="$FUZZ_DIR/artifacts/$t"
    fresh="$work/$t"
    log="$work/$t.log"
    mkdir -p "$corpus" "$artifacts" "$fresh"
    before=$(count "$corpus")
    start=$(date +%s)
    echo "== $t: $FUZZ_SECONDS s from $before inputs"
    # New inputs go to the first directory ($fresh); the corpus is read, not written.
    status=0
    fuzz run "$t" "$fresh" "$corpus" -- \
        -max_total_time="$FUZZ_SECONDS" -rss_limit_mb="$RSS_LIMIT_MB" -timeout="$TIMEOUT" \
        -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1 || status=$?
    seconds=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    # Keep only what adds coverage to the committed corpus.
    fuzz run "$t" "$corpus" "$fresh" -- -merge=1 -rss_limit_mb="$RSS_LIMIT_MB" -timeout="$TIMEOUT" \
        >>"$log" 2>&1 || true
    crashes=0
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$log"
        for raw in "$artifacts"/crash-* "$artifacts"/oom-* "$artifacts"/timeout-* "$artifacts"/leak-*; do
            [ -f "$raw" ] || continue
            [ "$(find "$raw" -newermt "@$start" | wc -l)" -gt 0 ] || continue
            crashes=$((crashes + 1))
            name=$(basename "$raw")
            fuzz tmin "$t" "$raw" -- -rss_limit_mb="$RSS_LIMIT_MB" -timeout="$TIMEOUT" >>"$log" 2>&1 || true
            small=$(ls -t "$artifacts"/minimized-from-* 2>/dev/null | head -n 1 || true)
            cp "${small:-$raw}" "$corpus/crash-$t-${name#*-}"
            echo "   crash: $raw -> $corpus/crash-$t-${name#*-}"
        done
        [ "$crashes" -gt 0 ] || crashes="exit $status"
        crashed=1
    fi
    after=$(count "$corpus")
    line="$t: ${seconds}s, ${execs:-?} execs, corpus $before -> $after, crashes $crashes"
    echo "   $line"
    summary+=("$line")
done

echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$crashed"
