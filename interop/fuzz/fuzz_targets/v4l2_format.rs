//! Fuzzes the peers' parser behind `checks::v4l2_format`: any input gives a value or a typed error,
//! never a panic, and whatever parses survives the round trip that function checks.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::v4l2_format(data);
});
