//! What each fuzz target of the lab checks, shared with the corpus regression test
//! (`lab/tests/fuzz_corpus.rs` includes this file). Every function takes arbitrary bytes and
//! returns whether the input was accepted; it panics only when the code under test breaks a
//! promise.

#![allow(dead_code)]

use dmabridge_lab::demo::control::{decode, ControlMessage, ToConsumer, ToProducer, MAX_CONTROL_LEN};

/// The demo's control messages, both directions: `decode` (size cap, JSON, range checks)
/// gives a message or a typed error, never a panic, and an accepted message is within range
/// and survives its own round trip.
pub fn demo_control(data: &[u8]) -> bool {
    let to_consumer = check::<ToConsumer>(data);
    let to_producer = check::<ToProducer>(data);
    to_consumer || to_producer
}

fn check<T: ControlMessage + std::fmt::Debug>(data: &[u8]) -> bool {
    let Ok(msg) = decode::<T>(data) else { return false };
    assert!(data.len() <= MAX_CONTROL_LEN);
    assert!(msg.check().is_ok(), "decode accepted {msg:?}, which its own check refuses");
    // What is sent again decodes again: the peer can always parse what we accept.
    let bytes = serde_json_bytes(&msg);
    if bytes.len() <= MAX_CONTROL_LEN {
        decode::<T>(&bytes).unwrap_or_else(|e| panic!("{msg:?} does not decode after encoding: {e}"));
    }
    true
}

fn serde_json_bytes<T: ControlMessage>(msg: &T) -> Vec<u8> {
    dmabridge_lab::demo::control::encode(msg).unwrap_or_default()
}
