//! Fuzzes the buffer-collection wire decoder behind `checks::collection_wire`: any bytes give
//! a message or a typed error, never a panic, and every message that decodes re-encodes to
//! exactly the bytes it came from.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::collection_wire(data);
});
