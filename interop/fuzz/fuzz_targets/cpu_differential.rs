//! Fuzzes `checks::cpu_differential` (see there for what it asserts): the CPU fast paths
//! (band-wise detile and tile on threads, the fused tiled NV12/P010 -> RGB conversion with
//! its vector kernels, RGB -> NV12, a whole `FrameConversion`) against the scalar references,
//! on buffers that end (or start) at a page that faults, for every layout, odd and tiny
//! extents, padded strides and fuzzed plane offsets. Under `scripts/fuzz.sh` (ASan) an
//! out-of-bounds read or write is a crash as well as a wrong byte.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::cpu_differential(data);
});
