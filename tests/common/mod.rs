//! Shared by the Vulkan tests: which configuration the suite runs in, and an engine with
//! the validation layer on whose messages fail the test.
#![allow(dead_code)]

use dmabridge::{Engine, EngineOptions};

/// The configuration `scripts/test.sh` runs the suite in (`DMABRIDGE_TEST_CONFIG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// No udmabuf: lavapipe has no modifier extension and cannot export DMA_BUF.
    Plain,
    /// tests/support/udmabuf_emulation.c is preloaded.
    UdmabufEmulation,
    /// The kernel has a real /dev/udmabuf.
    RealUdmabuf,
    /// Inside the kernel lab (scripts/lab.sh): Linux itself, with a real udmabuf, the system
    /// dma-heap, sync_file and vgem, and lavapipe with no emulation.
    Kernel,
}

pub fn config() -> Config {
    match std::env::var("DMABRIDGE_TEST_CONFIG").as_deref() {
        Ok("kernel") => Config::Kernel,
        Ok("udmabuf-emulation") => Config::UdmabufEmulation,
        Ok("real-udmabuf") => Config::RealUdmabuf,
        Ok("plain") => Config::Plain,
        // Plain `cargo test`: tell from the environment.
        _ if std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("udmabuf_emulation")) => Config::UdmabufEmulation,
        _ if std::path::Path::new("/dev/udmabuf").exists() => Config::RealUdmabuf,
        _ => Config::Plain,
    }
}

/// lavapipe with a udmabuf (emulated or real) exposes the modifier extension.
pub fn expect_modifiers() -> bool {
    config() != Config::Plain
}

/// Whether the kernel gives real dma-bufs (udmabuf, the dma-heap): the lab, or a machine
/// with a real /dev/udmabuf.
pub fn real_dmabufs() -> bool {
    matches!(config(), Config::Kernel | Config::RealUdmabuf)
}

/// Whether this configuration is the kernel lab, where the test asserts what Linux itself
/// offers (sync_file, the dma-heap, vgem) rather than skipping without it.
pub fn in_kernel_lab() -> bool {
    config() == Config::Kernel
}

/// An engine of its own with the validation layer on.
pub fn engine() -> Engine {
    Engine::new(&EngineOptions { validation: true, ..EngineOptions::default() })
        .unwrap_or_else(|e| panic!("cannot create a validated engine (run scripts/setup.sh): {e}"))
}

/// Fails the test if the validation layer said anything at warning level or above.
pub fn assert_clean(engine: &Engine) {
    let log = engine.validation().expect("the test engine has validation on");
    let problems = log.problems();
    assert!(
        problems.is_empty(),
        "validation layer reported {} problem(s):\n{}",
        problems.len(),
        problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n")
    );
}

use std::os::fd::OwnedFd;

/// A memfd (a dma-buf stand-in: lavapipe imports any mmap-able fd) holding `bytes`,
/// sealed against shrinking so its size cannot change after the layout checks.
pub fn memfd_with(bytes: &[u8]) -> OwnedFd {
    dmabridge::interop::dmabuf::sealed_memfd("dmabridge-test", bytes).expect("sealed memfd")
}

/// A buffer holding `bytes` for a test that shares it as a dma-buf: in the kernel lab a
/// real dma-buf from the system dma-heap (its size rounded up to whole pages, the rest
/// zero), elsewhere a sealed memfd ([`memfd_with`]). Written through dmabridge's guarded
/// mapping, as any CPU producer's frame would be.
pub fn dmabuf_with(bytes: &[u8]) -> OwnedFd {
    use dmabridge::interop::dmabuf::SystemMemory;
    match SystemMemory::detect() {
        SystemMemory::Memfd => {
            assert!(!in_kernel_lab(), "the kernel lab has a system dma-heap; SystemMemory::detect() found none");
            memfd_with(bytes)
        }
        heap => {
            let fd = heap.alloc("dmabridge-test", bytes.len().max(1) as u64).expect("dma-heap allocation");
            dmabridge::interop::dmabuf::write_all_at(std::os::fd::AsFd::as_fd(&fd), 0, bytes).expect("writing the dma-buf");
            assert!(dmabridge::interop::sync::is_dma_buf(std::os::fd::AsFd::as_fd(&fd)).expect("fstatfs"), "a dma-heap buffer is a dma-buf");
            fd
        }
    }
}

/// Deterministic bytes that differ from row to row and plane to plane.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    dmabridge::interop::tiling::test_pattern(len, seed)
}

/// Lays `packed` (tightly packed rows of `row_bytes`) out at `offset` with `stride`, into `buf`.
pub fn place_rows(buf: &mut [u8], packed: &[u8], row_bytes: usize, rows: usize, offset: usize, stride: usize) {
    for r in 0..rows {
        buf[offset + r * stride..offset + r * stride + row_bytes].copy_from_slice(&packed[r * row_bytes..(r + 1) * row_bytes]);
    }
}

/// For each of `fourccs` the opened device lists LINEAR for: its participant's `stride_align`
/// (the LINEAR pitch alignment the engine measured) is a power of two, a buffer placed with
/// it is one the driver takes as an explicit layout, and one placed with half of it (where
/// that is another pitch) is the driver's typed refusal. Returns "FOURCC ALIGN" per format.
pub fn linear_pitch_is_measured_and_placed_for(engine: &Engine, image_use: dmabridge::ImageUse, fourccs: &[dmabridge::interop::Fourcc]) -> Vec<String> {
    use dmabridge::interop::dmabuf::{place, PlaneLayout, PlacementRequest};
    use dmabridge::interop::{Format, Layout, Modifier};
    let (w, h) = (130u32, 66u32);
    let mut aligns = Vec::new();
    for &fourcc in fourccs {
        let req = dmabridge::ParticipantRequest::new("gpu", image_use, dmabridge::Direction::Both).with_fourccs(&[fourcc]);
        let p = engine.participant(&req).expect("participant");
        if !engine.has_modifiers() || !p.formats.accepts(&Format::linear(fourcc)) {
            continue;
        }
        let align = p.constraints.stride_align;
        assert!(align.is_power_of_two(), "{fourcc}: {align}");
        let placed = |stride_align: u64| {
            let at = place(&PlacementRequest { fourcc, layout: Layout::Explicit(Modifier::LINEAR), width: w, height: h, stride_align, offset_align: 1, min_size: 0, disjoint: false }).expect("placement");
            let planes: Vec<PlaneLayout> = at.planes.iter().map(|p| PlaneLayout { size: 0, ..*p }).collect();
            let taken = engine.allocate_exportable_with_layout(&dmabridge::ExportRequest::new(fourcc, w, h, image_use), Modifier::LINEAR, &planes).map(drop);
            (planes, taken)
        };
        let (planes, taken) = placed(align);
        if let Err(e) = taken {
            panic!("{fourcc}: the placement at stride-align {align} ({planes:?}) is refused: {e}");
        }
        let (half, refused) = placed((align / 2).max(1));
        if half != planes {
            assert!(matches!(refused, Err(dmabridge::ExportError::LayoutRefused { .. })), "{fourcc}: pitch {} (half the alignment) is the driver's refusal, got {refused:?}", half[0].stride);
        }
        aligns.push(format!("{fourcc} {align}"));
    }
    aligns
}

/// A consumer process's loop, as the cross-process tests run it: each frame the producer
/// sends on `socket` is imported on `engine` for `usage`, read back, given to `check` (the
/// frame's id, its descriptor, the bytes, the import) and handed back, until the producer
/// closes the socket. Returns how many frames came; any other message or error fails the test.
pub fn consume_frames(
    engine: &Engine,
    socket: impl std::os::fd::AsFd,
    usage: dmabridge::ImageUse,
    mut check: impl FnMut(u64, &dmabridge::interop::dmabuf::DmaBuf, &[u8], &dmabridge::ImportedImage),
) -> u32 {
    use dmabridge::interop::dmabuf::{recv, send_release, HandoffError, Received};
    use dmabridge::interop::framing::SocketError;
    let socket = socket.as_fd();
    let mut frames = 0;
    loop {
        match recv(socket) {
            Ok(Received::Buffer { id, buf }) => {
                let image = engine.import_dmabuf(&buf, usage).expect("import in the consumer");
                let back = image.read_back().expect("read back");
                check(id, &buf, &back, &image);
                drop(image);
                drop(buf);
                send_release(socket, id).expect("hand the frame back");
                frames += 1;
            }
            Ok(Received::Release { .. }) => panic!("the producer released a buffer it owns"),
            Err(HandoffError::Socket(SocketError::Closed)) => return frames,
            Err(e) => panic!("receive: {e}"),
        }
    }
}
