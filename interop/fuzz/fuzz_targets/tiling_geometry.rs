//! Fuzzes `checks::tiling_geometry` (see there for what it asserts): any input gives a value or a typed
//! error, never a panic, and what is accepted is consistent.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::tiling_geometry(data);
});
