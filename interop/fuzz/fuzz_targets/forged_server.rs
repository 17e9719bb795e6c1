//! Fuzzes a token against a forged collection server behind `checks::forged_server`: any
//! packets and fds the server side sends give buffers that pass the client's checks or a
//! typed error, never a panic, a hang or a leaked fd.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // One thread: the count of open fds moves only with what the input does.
    let before = dmabridge_interop::dmabuf::fd_count().expect("fd count");
    checks::forged_server(data);
    assert_eq!(dmabridge_interop::dmabuf::fd_count().expect("fd count"), before, "fds leaked");
});
