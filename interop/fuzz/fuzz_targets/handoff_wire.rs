//! Fuzzes the handoff wire decoder behind `checks::handoff_wire`: any bytes give a message or
//! a typed error, never a panic, and every message that decodes re-encodes to exactly the
//! bytes it came from, its header agreeing with it on fds and fences.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::handoff_wire(data);
});
