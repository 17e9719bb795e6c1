//! Fuzzes the demo's control-message decoding behind `checks::demo_control`: any input gives
//! a message within range or a typed error, never a panic.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::demo_control(data);
});
