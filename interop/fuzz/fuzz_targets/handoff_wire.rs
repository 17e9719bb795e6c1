//! Fuzzes the handoff wire decoder: any bytes give a message or a typed error, never a panic,
//! and every message that decodes re-encodes to exactly the bytes it came from (one encoding
//! per message, so nothing a peer sends is silently reinterpreted).
#![no_main]

use dmabridge_interop::dmabuf::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wire::decode_header(data);
    if let Ok(msg) = wire::decode(data) {
        assert_eq!(wire::encode(&msg).ok().as_deref(), Some(data));
    }
});
