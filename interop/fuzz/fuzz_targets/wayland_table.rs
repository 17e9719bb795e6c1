//! Fuzzes the peers' parser behind `checks::wayland_table`: any input gives a value or a typed error,
//! never a panic, and whatever parses survives the round trip that function checks.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::wayland_table(data);
});
