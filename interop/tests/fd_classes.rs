//! What kind of file each plane is (issue #12), with real fds: sealed and unsealed memfds,
//! regular files with and without the caller's trust, and the fds that are no buffer at
//! all; and the pread reader, which sees a file that shrinks under it as a short read,
//! never as SIGBUS. (This kernel has no dma-bufs, so `FdClass::DmaBuf` is not exercised.)

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dmabridge_interop::dmabuf::{
    check_import, check_import_with, classify, read_at, read_exact_at, sealed_memfd, sealed_memfd_of_size, DmaBuf,
    FdClass, FdClassError, FdTrust, FileKind, ImportCheckError, ImportLimits, ImportOptions, NotFixedReason,
    PlaneDesc, ReadError,
};
use dmabridge_interop::{Fourcc, Layout, Modifier};
use rustix::fs::{ftruncate, memfd_create, MemfdFlags};

const W: u32 = 64;
const H: u32 = 32;
const SIZE: u64 = (W * H * 4) as u64;

fn unsealed_memfd(size: u64) -> OwnedFd {
    let fd = memfd_create("unsealed", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    ftruncate(&fd, size).unwrap();
    fd
}

/// A regular file of `size` bytes in `dir`, removed from the directory at once (the fd keeps
/// it alive).
/// A regular file of `size` bytes in `dir`, and the guard that removes it. It stays linked
/// while the test uses it: over 9p (the kernel lab's work tree) `fstatfs` of an unlinked
/// file fails with `ENOENT`, which `classify` reports as a typed error, not a class.
fn regular_file(dir: &std::path::Path, size: u64) -> (OwnedFd, Unlink) {
    let path = dir.join(format!("dmabridge-fd-classes-{}-{size}", std::process::id()));
    let mut f = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    f.write_all(&vec![7u8; size as usize]).unwrap();
    (f.into(), Unlink(path))
}

struct Unlink(std::path::PathBuf);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn ar24(fd: OwnedFd) -> DmaBuf {
    DmaBuf::new(
        Fourcc::ARGB8888,
        Layout::Explicit(Modifier::LINEAR),
        W,
        H,
        vec![PlaneDesc { fd, offset: 0, stride: u64::from(W) * 4 }],
    )
    .unwrap()
}

fn device() -> ImportLimits {
    ImportLimits::linear_cpu(4096)
}

const REQUIRE: ImportOptions = ImportOptions { trust: FdTrust::Untrusted, require_zero_copy: true };
const TRUST: ImportOptions = ImportOptions { trust: FdTrust::TrustRegularFiles, require_zero_copy: true };

#[test]
fn a_sealed_memfd_is_fixed_size() {
    let buf = ar24(sealed_memfd_of_size("sealed", SIZE).unwrap());
    let checked = check_import_with(&buf, &device(), REQUIRE).unwrap();
    assert_eq!(checked.planes()[0].file.class, FdClass::SealedMemfd);
    assert!(checked.zero_copy_safe());
}

#[test]
fn an_unsealed_memfd_is_shrinkable_and_the_error_names_the_missing_seal() {
    let buf = ar24(unsealed_memfd(SIZE));
    // Allowed by default (to be copied), and marked.
    let checked = check_import(&buf, &device()).unwrap();
    assert_eq!(checked.planes()[0].file.class, FdClass::Shrinkable(NotFixedReason::MissingSealShrink));
    assert!(!checked.zero_copy_safe());
    // Refused when the caller needs to map it.
    let e = check_import_with(&buf, &device(), REQUIRE).unwrap_err();
    assert!(
        matches!(e, ImportCheckError::NotFixedSize { plane: 0, reason: NotFixedReason::MissingSealShrink }),
        "{e:?}"
    );
    assert!(e.to_string().contains("F_SEAL_SHRINK"), "{e}");
    // F_SEAL_SHRINK alone is enough.
    let fd = unsealed_memfd(SIZE);
    rustix::fs::fcntl_add_seals(&fd, rustix::fs::SealFlags::SHRINK).unwrap();
    assert_eq!(classify(fd.as_fd(), FdTrust::Untrusted).unwrap(), FdClass::SealedMemfd);
}

#[test]
fn a_regular_file_is_fixed_size_only_when_trusted() {
    // On a disk file system files have no seals at all; on tmpfs they have F_SEAL_SEAL only.
    let disk = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mut dirs = vec![(disk, None)];
    if std::path::Path::new("/dev/shm").is_dir() {
        dirs.push(("/dev/shm".into(), Some(NotFixedReason::MissingSealShrink)));
    }
    for (dir, reason) in dirs {
        let (fd, _unlink) = regular_file(&dir, SIZE);
        let buf = ar24(fd);
        let class = check_import(&buf, &device()).unwrap().planes()[0].file.class;
        let FdClass::Shrinkable(why) = class else { panic!("{}: {class:?}", dir.display()) };
        if let Some(r) = reason {
            assert_eq!(why, r, "{}", dir.display());
        }
        assert!(matches!(check_import_with(&buf, &device(), REQUIRE), Err(ImportCheckError::NotFixedSize { .. })));
        let trusted = check_import_with(&buf, &device(), TRUST).unwrap();
        assert_eq!(trusted.planes()[0].file.class, FdClass::TrustedFile);
        assert!(trusted.zero_copy_safe());
    }
    // The disk file's reason is that it cannot be sealed at all.
    let (fd, _unlink) = regular_file(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), 16);
    let class = classify(fd.as_fd(), FdTrust::Untrusted).unwrap();
    assert!(matches!(class, FdClass::Shrinkable(_)), "{class:?}");
}

#[test]
fn fds_that_are_no_buffer_are_refused_up_front() {
    let (pipe_r, _pipe_w) = rustix::pipe::pipe().unwrap();
    let (sock, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    let dir: OwnedFd = std::fs::File::open("/").unwrap().into();
    let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let event = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
    let cases: Vec<(OwnedFd, FileKind)> = vec![
        (pipe_r, FileKind::Fifo),
        (sock.into(), FileKind::Socket),
        (dir, FileKind::Directory),
        (null, FileKind::CharacterDevice),
        (event, FileKind::Other),
    ];
    for (fd, kind) in cases {
        let buf = ar24(fd);
        // Even trusting regular files, and even with a layout the size check would pass on
        // a directory (lseek says 2^63 - 1).
        let e = check_import_with(&buf, &device(), ImportOptions { trust: FdTrust::TrustRegularFiles, require_zero_copy: false })
            .unwrap_err();
        assert!(
            matches!(&e, ImportCheckError::FdKind { plane: 0, source: FdClassError::NotAFile { kind: k } } if *k == kind),
            "{kind}: {e:?}"
        );
        assert!(e.to_string().contains(&kind.to_string()), "{e}");
    }
}

#[test]
fn the_pread_reader_is_bounded_and_typed() {
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 241) as u8).collect();
    let fd = sealed_memfd("data", &data).unwrap();
    assert_eq!(read_at(fd.as_fd(), 100, 50, 1000).unwrap(), &data[100..150]);
    assert!(matches!(read_at(fd.as_fd(), 0, 2000, 1000), Err(ReadError::TooLarge { len: 2000, max: 1000 })));
    assert!(matches!(read_at(fd.as_fd(), u64::MAX - 4, 10, 100), Err(ReadError::Overflow { .. })));
    assert!(matches!(
        read_at(fd.as_fd(), 9_990, 20, 100),
        Err(ReadError::ShortRead { wanted_end: 10_010, end_of_file: 10_000 })
    ));
    let mut small = [0u8; 4];
    read_exact_at(fd.as_fd(), 9_996, &mut small).unwrap();
    assert_eq!(small, data[9_996..]);
    let dir: OwnedFd = std::fs::File::open("/").unwrap().into();
    assert!(matches!(read_at(dir.as_fd(), 0, 1, 1), Err(ReadError::Io { at: 0, .. })));
    // The checked plane of a file that shrank after the check reads short, not SIGBUS.
    let fd = unsealed_memfd(SIZE);
    let buf = ar24(fd.try_clone().unwrap());
    let checked = check_import(&buf, &device()).unwrap();
    assert_eq!(checked.read_plane(0, SIZE).unwrap().unwrap().len() as u64, SIZE);
    ftruncate(&fd, SIZE / 2).unwrap();
    assert!(matches!(checked.read_plane(0, SIZE), Some(Err(ReadError::ShortRead { .. }))));
    assert!(matches!(checked.read_plane(0, SIZE - 1), Some(Err(ReadError::TooLarge { .. }))));
}

#[test]
fn a_file_shrinking_while_it_is_read_gives_short_reads_or_the_right_bytes() {
    const LEN: usize = 1 << 18;
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 31 % 251) as u8).collect();
    let fd = Arc::new(unsealed_memfd(LEN as u64));
    rustix::io::pwrite(&*fd, &pattern, 0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // The sender's side: shrink to half, grow back, restore the second half, forever.
    let shrinker = {
        let (fd, stop, pattern) = (Arc::clone(&fd), Arc::clone(&stop), pattern.clone());
        std::thread::spawn(move || {
            let mut cycles = 0u64;
            while !stop.load(Ordering::Relaxed) {
                ftruncate(&*fd, (LEN / 2) as u64).unwrap();
                ftruncate(&*fd, LEN as u64).unwrap();
                rustix::io::pwrite(&*fd, &pattern[LEN / 2..], (LEN / 2) as u64).unwrap();
                cycles += 1;
            }
            cycles
        })
    };
    let (mut whole, mut short) = (0usize, 0usize);
    let mut reads = 0usize;
    // At least 1000 reads, and on until a shrink has been caught mid-read (bounded).
    while reads < 1000 || (short == 0 && reads < 200_000) {
        match read_at(fd.as_fd(), 0, LEN as u64, LEN as u64) {
            Ok(bytes) => {
                // The first half never shrinks; the second is the pattern or the zeros of a
                // regrown file, never anything else.
                assert_eq!(bytes[..LEN / 2], pattern[..LEN / 2]);
                assert!(bytes[LEN / 2..].iter().zip(&pattern[LEN / 2..]).all(|(b, p)| b == p || *b == 0));
                whole += 1;
            }
            Err(ReadError::ShortRead { wanted_end, end_of_file }) => {
                assert_eq!(wanted_end, LEN as u64);
                assert!(end_of_file < LEN as u64);
                short += 1;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let cycles = shrinker.join().unwrap();
    println!("{reads} reads: {whole} whole, {short} short, while the file shrank {cycles} times");
    assert!(short > 0, "no read overlapped a shrink in {reads} reads");
}
