//! Fuzzes the peers' parser behind `checks::kms_in_formats`: any input gives a value or a typed error,
//! never a panic, and whatever parses survives the round trip that function checks.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::kms_in_formats(data);
});
