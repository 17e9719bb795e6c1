//! The import boundary against a hostile peer: files that shrink while they are used, odd
//! extents, and fds that are no buffer at all. Every case ends in a typed error or a correct
//! frame, never a signal, and the validation layer stays silent.

mod common;

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{DmaBuf, FdClassError, ImportCheckError, PlaneDesc};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{ImportCache, ImportError, ImportOptions, ImportPath, ReadBackError};

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);
/// Sampled, and read back to check the bytes.
const USAGE: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw());

/// A memfd nobody sealed: its sender can truncate it at any time.
fn unsealed(bytes: &[u8]) -> OwnedFd {
    use rustix::fs::{memfd_create, MemfdFlags};
    let fd = memfd_create("dmabridge-test-unsealed", MemfdFlags::CLOEXEC).expect("memfd");
    rustix::io::pwrite(&fd, bytes, 0).expect("fill");
    fd
}

fn ar24(fd: OwnedFd, w: u32, h: u32) -> DmaBuf {
    DmaBuf::new(Fourcc::ARGB8888, LINEAR, w, h, vec![PlaneDesc { fd, offset: 0, stride: u64::from(w) * 4 }]).expect("descriptor")
}

/// Whether an error is one a shrinking file may cause: the file was too short when it was
/// checked, or when it was read.
fn shrink_error(e: &ImportError) -> bool {
    matches!(
        e,
        ImportError::Check(ImportCheckError::PastEndOfFd { .. }) | ImportError::Read { .. } | ImportError::Changed { .. }
    )
}

#[test]
fn a_shrink_loop_of_1000_imports_gives_clean_errors_or_correct_frames() {
    let engine = common::engine();
    let (w, h) = (64u32, 32u32);
    let size = (w * h * 4) as usize;
    let fd = unsealed(&vec![0xAB; size]);
    let stop = Arc::new(AtomicBool::new(false));
    // The hostile sender: truncates the file to nothing and back, and rewrites it, in a loop.
    let shrinker = {
        let fd = fd.try_clone().expect("dup");
        let stop = stop.clone();
        std::thread::spawn(move || {
            let pattern = vec![0xABu8; size];
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = rustix::fs::ftruncate(&fd, 0);
                let _ = rustix::fs::ftruncate(&fd, size as u64 / 3);
                std::thread::sleep(std::time::Duration::from_micros(50));
                let _ = rustix::fs::ftruncate(&fd, size as u64);
                let _ = rustix::io::pwrite(&fd, &pattern, 0);
                // Whole for a while: imports that start now may still see it shrink mid-way.
                std::thread::sleep(std::time::Duration::from_micros(300));
                rounds += 1;
            }
            rounds
        })
    };
    let (mut frames, mut errors, mut during_read) = (0u32, 0u32, 0u32);
    let mut cache = ImportCache::new(&engine, 2);
    for i in 0..1000 {
        let buf = ar24(fd.try_clone().expect("dup"), w, h);
        // Half through the cache (its hits recheck the file), half imported afresh.
        let image = if i % 2 == 0 { cache.import(buf, USAGE) } else { engine.import_dmabuf(&buf, USAGE) };
        let image = match image {
            Ok(image) => image,
            Err(e) => {
                assert!(shrink_error(&e), "import {i}: {e}");
                errors += 1;
                continue;
            }
        };
        assert_eq!(image.path(), ImportPath::ReadCopy, "a file that can shrink is never mapped");
        match image.read_back() {
            Ok(bytes) => {
                // What the file held at some moment: the pattern, or the zeros a truncation left.
                assert!(bytes.iter().all(|b| *b == 0xAB || *b == 0), "import {i}: bytes the file never held");
                frames += 1;
            }
            Err(ReadBackError::Acquire(e)) => {
                assert!(shrink_error(&e), "read {i}: {e}");
                errors += 1;
                during_read += 1;
            }
            Err(e) => panic!("read {i}: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = shrinker.join().expect("the shrinker");
    eprintln!("1000 imports: {frames} frames, {errors} clean errors ({during_read} while reading the frame), {rounds} shrink rounds");
    assert_eq!(frames + errors, 1000);
    assert!(rounds > 0 && frames > 0, "both a shrinking file and whole frames were seen");
    drop(cache);
    common::assert_clean(&engine);
}

#[test]
fn a_sealed_memfd_is_imported_zero_copy_where_the_device_can_and_cannot_shrink() {
    let engine = common::engine();
    let fd = common::memfd_with(&[7u8; 64 * 32 * 4]);
    assert!(rustix::fs::ftruncate(&fd, 0).is_err(), "F_SEAL_SHRINK holds");
    let image = engine
        .import_dmabuf_with(&ar24(fd, 64, 32), USAGE, ImportOptions { require_zero_copy: common::expect_modifiers(), ..Default::default() })
        .expect("import");
    let expected = if common::expect_modifiers() { ImportPath::Explicit } else { ImportPath::BufferCopy };
    assert_eq!(image.path(), expected);
    assert!(image.read_back().expect("read").iter().all(|b| *b == 7));
    drop(image);
    common::assert_clean(&engine);
}

#[test]
fn a_read_only_fd_is_read_by_copy_and_never_given_to_the_driver() {
    // What a read-only collection holder gets: the same sealed memfd, re-opened O_RDONLY.
    // lavapipe maps an imported file writable; given this fd it fails and closes it, though
    // the spec says a failed import leaves the fd with the caller. Read-copy avoids both.
    let engine = common::engine();
    let bytes = common::pattern(64 * 32 * 4, 3);
    let buf = ar24(common::memfd_with(&bytes), 64, 32).reopen_read_only().expect("read-only");
    assert!(buf.read_only());
    for _ in 0..20 {
        let image = engine.import_dmabuf(&buf, USAGE).expect("import");
        assert_eq!(image.path(), ImportPath::ReadCopy);
        assert_eq!(image.read_back().expect("read"), bytes);
    }
    assert!(matches!(
        engine.import_dmabuf_with(&buf, USAGE, ImportOptions { require_zero_copy: true, ..Default::default() }),
        Err(ImportError::NotZeroCopy(_))
    ));
    common::assert_clean(&engine);
}

#[test]
fn requiring_zero_copy_names_the_missing_seal_or_the_device() {
    let engine = common::engine();
    let buf = ar24(unsealed(&[1u8; 32 * 8 * 4]), 32, 8);
    let options = ImportOptions { require_zero_copy: true, ..Default::default() };
    let e = engine.import_dmabuf_with(&buf, USAGE, options).expect_err("not zero-copy");
    let text = e.to_string();
    if common::expect_modifiers() {
        assert!(matches!(e, ImportError::Check(ImportCheckError::NotFixedSize { plane: 0, .. })), "{e}");
        assert!(text.contains("F_SEAL_SHRINK"), "{text}");
    } else {
        assert!(matches!(e, ImportError::NotZeroCopy(_)), "{e}");
        assert!(text.contains("VK_EXT_image_drm_format_modifier"), "{text}");
    }
    // Vouching for the file makes it fixed-size (where the device imports explicitly).
    let trusted = ImportOptions { trust: dmabridge::interop::dmabuf::FdTrust::TrustRegularFiles, ..Default::default() };
    let image = engine.import_dmabuf_with(&buf, USAGE, trusted).expect("trusted import");
    assert_ne!(image.path(), ImportPath::ReadCopy);
    drop(image);
    common::assert_clean(&engine);
}

#[test]
fn odd_extents_of_subsampled_formats_are_typed_errors_before_the_driver() {
    let engine = common::engine();
    let nv12 = |w: u32, h: u32| {
        let fd = common::memfd_with(&vec![0u8; 64 * 64 * 2]);
        let y = PlaneDesc { fd: fd.try_clone().expect("dup"), offset: 0, stride: 64 };
        let uv = PlaneDesc { fd, offset: 64 * 64, stride: 64 };
        DmaBuf::new(Fourcc::NV12, LINEAR, w, h, vec![y, uv]).expect("descriptor")
    };
    for (w, h, odd_width) in [(33, 16, true), (32, 17, false), (1, 1, true)] {
        let e = engine.import_dmabuf(&nv12(w, h), USAGE).expect_err("odd extent");
        match (odd_width, &e) {
            (true, ImportError::Check(ImportCheckError::OddWidth { width, .. })) => assert_eq!(*width, w),
            (false, ImportError::Check(ImportCheckError::OddHeight { height, .. })) => assert_eq!(*height, h),
            _ => panic!("{w}x{h}: {e}"),
        }
    }
    // YUYV subsamples horizontally only: an odd height is fine, an odd width is not.
    let yuyv = |w: u32, h: u32| {
        let fd = common::memfd_with(&vec![0u8; 64 * 64 * 2]);
        DmaBuf::new(Fourcc::YUYV, LINEAR, w, h, vec![PlaneDesc { fd, offset: 0, stride: 128 }]).expect("descriptor")
    };
    assert!(matches!(engine.import_dmabuf(&yuyv(33, 8), USAGE), Err(ImportError::Check(ImportCheckError::OddWidth { .. }))));
    let image = engine.import_dmabuf(&yuyv(32, 7), USAGE).expect("odd height is fine for 4:2:2");
    image.read_back().expect("read");
    drop(image);
    common::assert_clean(&engine);
}

#[test]
fn fds_that_hold_no_buffer_are_refused_up_front() {
    let engine = common::engine();
    let dir: OwnedFd = std::fs::File::open("/tmp").expect("a directory").into();
    let (sock, _peer) = dmabridge::interop::dmabuf::socketpair().expect("socketpair");
    let (pipe, _w) = rustix::pipe::pipe().expect("pipe");
    for (what, fd) in [("directory", dir), ("socket", sock), ("pipe", pipe)] {
        let buf = DmaBuf::new(Fourcc::ARGB8888, LINEAR, 4, 4, vec![PlaneDesc { fd, offset: 0, stride: 16 }]).expect("descriptor");
        let e = engine.import_dmabuf(&buf, USAGE).expect_err(what);
        assert!(matches!(e, ImportError::Check(ImportCheckError::FdKind { source: FdClassError::NotAFile { .. }, .. })), "{what}: {e}");
        // The buffer and conversion paths refuse it too.
        let r = dmabridge::ImportedBuffer::import(&engine, buf.plane(0).expect("plane").fd, 64, vk::BufferUsageFlags::TRANSFER_SRC);
        assert!(r.is_err(), "{what}: an ImportedBuffer over it");
    }
    common::assert_clean(&engine);
}
