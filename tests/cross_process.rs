//! The zero-copy path across two processes: the producer sends a descriptor and its fds
//! over a Unix socket (SCM_RIGHTS), the consumer, a separate process with its own Vulkan
//! device, imports it, reads it back pixel-exact and hands the buffer back.
//!
//! The consumer is this test binary run again with `--ignored --exact consumer_process`,
//! so it is real code in a real second process, not a thread.

mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{fd_count, recv, send_buffer, socketpair, DmaBuf, PlaneDesc, Received};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::ExportRequest;

const CHILD_SOCKET: &str = "DMABRIDGE_TEST_CHILD_SOCKET";
/// AB24 bytes (R, G, B, A) of every pixel the producer makes: clear colour [1.0, 0.0, 0.6, 1.0].
const PIXEL: [u8; 4] = [255, 0, 153, 255];
const FRAMES: u64 = 5;

#[test]
fn a_descriptor_crosses_a_process_boundary_and_comes_back() {
    let engine = common::engine();
    let (w, h) = (64u32, 32u32);
    // The producer: a real Vulkan export where the device can export dma-bufs, else a
    // buffer laid out by the test (padded stride, non-zero offset), as a decoder would.
    let exported;
    let written;
    let buf: &DmaBuf = if common::expect_modifiers() {
        let req = ExportRequest {
            fourcc: Fourcc::ABGR8888,
            width: w,
            height: h,
            image_use: (vk::ImageUsageFlags::TRANSFER_DST).into(),
            acceptable: vec![Layout::Explicit(Modifier::LINEAR)],
            negotiated: None,
        };
        exported = engine.export_image(&req).expect("export");
        exported.clear_and_release([1.0, 0.0, 0.6, 1.0], Default::default()).expect("render").wait(dmabridge::READBACK_TIMEOUT).expect("render");
        exported.dmabuf().expect("dma-buf export")
    } else {
        let (offset, stride) = (256usize, (w * 4 + 32) as usize);
        let mut file = vec![0u8; offset + stride * h as usize];
        for r in 0..h as usize {
            for px in file[offset + r * stride..offset + r * stride + (w * 4) as usize].chunks_exact_mut(4) {
                px.copy_from_slice(&PIXEL);
            }
        }
        written = DmaBuf::new(Fourcc::ABGR8888, Layout::Explicit(Modifier::LINEAR), w, h, vec![PlaneDesc {
            fd: common::dmabuf_with(&file),
            offset: offset as u64,
            stride: stride as u64,
        }])
        .expect("descriptor");
        &written
    };

    let (ours, theirs) = socketpair().expect("socketpair");
    // The child inherits a dup without CLOEXEC; our copy of its end closes after spawn.
    let inherited = rustix::io::dup(&theirs).expect("dup");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--ignored", "--exact", "consumer_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_SOCKET, inherited.as_raw_fd().to_string())
        .spawn()
        .expect("spawn the consumer process");
    drop(inherited);
    drop(theirs);

    for id in 0..FRAMES {
        send_buffer(&ours, id, buf).expect("send");
        // The buffer must not be reused until the consumer hands it back.
        match recv(&ours).expect("the consumer answers") {
            Received::Release { id: back } => assert_eq!(back, id),
            Received::Buffer { .. } => panic!("the consumer sent a buffer"),
        }
    }
    drop(ours);
    let status = child.wait().expect("wait for the consumer");
    assert!(status.success(), "the consumer process failed: {status}");
    common::assert_clean(&engine);
}

/// The consumer side, run only as a child of the test above.
#[test]
#[ignore = "runs as the child process of a_descriptor_crosses_a_process_boundary_and_comes_back"]
fn consumer_process() {
    let raw: i32 = std::env::var(CHILD_SOCKET).expect("run by the parent test").parse().expect("fd number");
    // SAFETY: the parent passed this fd, open and without CLOEXEC, for this process to own.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    let engine = common::engine();
    let before = fd_count().expect("fd count");
    let usage = dmabridge::ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC);
    let frames = common::consume_frames(&engine, &socket, usage, |id, buf, back, _| {
        assert_eq!(back.len(), (buf.width() * buf.height() * 4) as usize);
        assert!(back.chunks_exact(4).all(|p| p == PIXEL), "frame {id}: wrong pixels");
    });
    assert_eq!(u64::from(frames), FRAMES);
    assert_eq!(fd_count().expect("fd count"), before, "the consumer leaked fds");
    common::assert_clean(&engine);
}
