//! Cross-process handoff over Unix sockets with real fds: a child process (this test binary,
//! re-executed) receives buffers, reads and writes them, gets a read-only buffer it cannot map
//! writable, and rejects hostile messages; in one process, 1000 handoffs (some hostile) leave
//! the fd count unchanged.

use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use dmabridge_interop::dmabuf::handoff::send_raw;
use dmabridge_interop::dmabuf::wire::{
    self, BufferMsg, Message, WireError, WirePlane, HEADER_LEN, MAX_MESSAGE_LEN,
};
use dmabridge_interop::framing::{FrameError, SocketError};
use dmabridge_interop::dmabuf::{
    PlaneLayout,
    check_import, fd_count, recv, send_buffer, send_buffer_read_only, send_release, socketpair,
    DescriptorError, DmaBuf, HandoffError, ImportLimits, PlaneDesc, Received,
};
use dmabridge_interop::{Fourcc, Layout, Modifier};
use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};

static FD_LOCK: Mutex<()> = Mutex::new(());

/// fd counts are per process and tests run on parallel threads: every test here holds this.
fn lock() -> MutexGuard<'static, ()> {
    FD_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);
const CHILD_ENV: &str = "DMABRIDGE_HANDOFF_CHILD_FD";
const W: u32 = 64;
const H: u32 = 48;

fn memfd(size: u64) -> OwnedFd {
    dmabridge_interop::dmabuf::sealed_memfd_of_size("handoff", size).unwrap()
}

fn pattern(plane: usize, seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| {
            (k as u8)
                .wrapping_mul(7)
                .wrapping_add(plane as u8 * 31)
                .wrapping_add(seed)
        })
        .collect()
}

fn read_at(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let n = rustix::io::pread(fd, &mut v, offset).unwrap();
    assert_eq!(n, len);
    v
}

/// NV12 64x48, one memfd per plane (disjoint), each plane filled with `pattern(plane, seed)`.
fn nv12_disjoint(seed: u8) -> DmaBuf {
    let sizes = [(W * H) as usize, (W * H / 2) as usize];
    let planes = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let fd = memfd(len as u64);
            rustix::io::pwrite(&fd, &pattern(i, seed, len), 0).unwrap();
            PlaneDesc {
                fd,
                offset: 0,
                stride: u64::from(W),
            }
        })
        .collect();
    DmaBuf::new(Fourcc::NV12, LINEAR, W, H, planes).unwrap()
}

fn ar24(size: u64) -> DmaBuf {
    DmaBuf::new(
        Fourcc::ARGB8888,
        LINEAR,
        16,
        16,
        vec![PlaneDesc {
            fd: memfd(size),
            offset: 0,
            stride: 64,
        }],
    )
    .unwrap()
}

/// A shared mapping, unmapped on drop.
struct Mapping {
    ptr: *mut c_void,
    len: usize,
}

impl Mapping {
    fn new(fd: BorrowedFd<'_>, len: usize, prot: ProtFlags) -> Result<Mapping, Errno> {
        // SAFETY: a null hint lets the kernel pick unused address space, so no existing memory
        // is replaced; the region is only read through `bytes` while `self` lives and is
        // unmapped exactly once, in Drop.
        let ptr =
            unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0)? };
        Ok(Mapping { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is a live readable mapping owned by `self`; the tests never
        // shrink the file under it.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region `new` mapped, once; no reference from `bytes`
        // outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.ptr, self.len) };
    }
}

/// The read-only property, seen from the holder of the fds: a shared writable mapping is
/// refused with EACCES, a read-only one works, and writes through the fd fail.
fn assert_read_only(buf: &DmaBuf) {
    assert!(buf.read_only());
    for p in buf.planes() {
        let len = read_len(p.fd);
        assert_eq!(
            Mapping::new(p.fd, len, ProtFlags::READ | ProtFlags::WRITE).err(),
            Some(Errno::ACCESS)
        );
        let m = Mapping::new(p.fd, len, ProtFlags::READ).unwrap();
        assert_eq!(m.bytes(), &read_at(p.fd, 0, len)[..]);
        assert_eq!(rustix::io::pwrite(p.fd, b"x", 0).err(), Some(Errno::BADF));
    }
}

fn read_len(fd: BorrowedFd<'_>) -> usize {
    rustix::fs::fstat(fd).unwrap().st_size as usize
}

// ---- two processes -----------------------------------------------------------------------

/// Only does something in the child that `buffers_cross_a_process_boundary` spawns.
#[test]
fn child_process_entry() {
    let Ok(fd) = std::env::var(CHILD_ENV) else {
        return;
    };
    let raw: RawFd = fd.parse().unwrap();
    // SAFETY: the parent passed this fd to us open and inheritable, named it in CHILD_ENV, and
    // nothing else in this process owns or closes it.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    child_main(sock);
}

fn child_main(sock: OwnedFd) {
    let cpu = ImportLimits::linear_cpu(4096);
    let before = fd_count().unwrap();

    // 1: a writable disjoint NV12 buffer: check it, verify the parent's bytes, write ours.
    let Received::Buffer { id, buf } = recv(&sock).unwrap() else {
        panic!("expected a buffer")
    };
    assert_eq!(id, 1);
    assert!(buf.disjoint() && !buf.read_only());
    assert_eq!(
        (buf.fourcc(), buf.layout(), buf.width(), buf.height()),
        (Fourcc::NV12, LINEAR, W, H)
    );
    let checked = check_import(&buf, &cpu).unwrap();
    for (i, p) in buf.planes().enumerate() {
        let len = checked.planes()[i].size() as usize;
        assert_eq!(
            read_at(p.fd, p.offset, len),
            pattern(i, 0x11, len),
            "plane {i} as the parent wrote it"
        );
        rustix::io::pwrite(p.fd, &pattern(i, 0x22, len), p.offset).unwrap();
    }
    drop(checked);
    drop(buf);
    send_release(&sock, 1).unwrap();

    // 2: the same memory, read-only: no writable shared mapping, but it reads what we wrote.
    let Received::Buffer { id, buf } = recv(&sock).unwrap() else {
        panic!("expected a buffer")
    };
    assert_eq!(id, 2);
    assert_read_only(&buf);
    for (i, p) in buf.planes().enumerate() {
        let len = read_len(p.fd);
        let m = Mapping::new(p.fd, len, ProtFlags::READ).unwrap();
        assert_eq!(m.bytes(), &pattern(i, 0x22, len)[..]);
    }
    drop(buf);
    send_release(&sock, 2).unwrap();

    // 3: hostile messages, each with its own error and no fd left behind.
    let mid = fd_count().unwrap();
    assert!(matches!(
        recv(&sock),
        Err(HandoffError::Socket(SocketError::FdCount {
            declared: 2,
            received: 1
        }))
    ));
    assert!(matches!(
        recv(&sock),
        Err(HandoffError::Wire(WireError::Frame(FrameError::BodyLength { .. })))
    ));
    assert!(matches!(
        recv(&sock),
        Err(HandoffError::Wire(WireError::Frame(FrameError::Version { got: 1, supported: 2, .. })))
    ));
    assert!(matches!(
        recv(&sock),
        Err(HandoffError::DisjointMismatch {
            claimed: true,
            actual: false
        })
    ));
    assert_eq!(fd_count().unwrap(), mid);
    send_release(&sock, 3).unwrap();

    // 4: the parent hangs up.
    assert!(matches!(recv(&sock), Err(HandoffError::Socket(SocketError::Closed))));
    let after = fd_count().unwrap();
    println!("CHILD fd_count before={before} after={after}");
    assert_eq!(before, after);
}

#[test]
fn buffers_cross_a_process_boundary() {
    let _g = lock();
    let (ours, theirs) = socketpair().unwrap();
    // dup() leaves FD_CLOEXEC clear, so the child inherits this copy; ours keeps CLOEXEC.
    let inheritable = rustix::io::dup(&theirs).unwrap();
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--exact",
            "child_process_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, inheritable.as_raw_fd().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Only the child may hold the other end, or it would never see us hang up.
    drop(inheritable);
    drop(theirs);

    let buf = nv12_disjoint(0x11);
    send_buffer(&ours, 1, &buf).unwrap();
    assert!(matches!(recv(&ours).unwrap(), Received::Release { id: 1 }));
    // The child's writes landed in our memory: the same pages, two processes.
    for (i, p) in buf.planes().enumerate() {
        let len = read_len(p.fd);
        assert_eq!(
            read_at(p.fd, 0, len),
            pattern(i, 0x22, len),
            "plane {i} as the child wrote it"
        );
    }

    send_buffer_read_only(&ours, 2, &buf).unwrap();
    assert!(matches!(recv(&ours).unwrap(), Received::Release { id: 2 }));
    assert!(!buf.read_only(), "our own fds stay writable");

    for (bytes, fds) in [
        hostile(Hostile::MissingFd),
        hostile(Hostile::TruncatedBody),
        hostile(Hostile::BadVersion),
        hostile(Hostile::DisjointClaim),
    ] {
        let fds: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        send_raw(ours.as_fd(), &bytes, &fds).unwrap();
    }
    assert!(matches!(recv(&ours).unwrap(), Received::Release { id: 3 }));
    drop(ours);

    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "the child did not run its test:\n{stdout}"
    );
    // With --nocapture the harness prints "test child_process_entry ... " before the output.
    let line = stdout
        .lines()
        .find_map(|l| l.find("CHILD fd_count").map(|at| &l[at..]));
    println!("{}", line.unwrap_or("no fd_count line"));
    assert!(line.is_some(), "the child did not reach its end:\n{stdout}");
}

// ---- hostile messages --------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Hostile {
    ExtraFd,
    MissingFd,
    NoFds,
    ShortHeader,
    TruncatedBody,
    BadMagic,
    BadVersion,
    UnknownKind,
    TooLong,
    DeclaredFdCount,
    PlaneCount,
    UnknownFlags,
    Reserved,
    DisjointClaim,
    ReadOnlyClaim,
    ZeroExtent,
    TooManyFds,
    ReleaseWithFd,
    NewerVersion,
    FenceFlagWithoutFenceFd,
    UnknownFdFlags,
    FenceNotSyncFile,
    ReleaseFenceFlagWithoutFd,
}

const ALL_HOSTILE: [Hostile; 23] = [
    Hostile::ExtraFd,
    Hostile::MissingFd,
    Hostile::NoFds,
    Hostile::ShortHeader,
    Hostile::TruncatedBody,
    Hostile::BadMagic,
    Hostile::BadVersion,
    Hostile::UnknownKind,
    Hostile::TooLong,
    Hostile::DeclaredFdCount,
    Hostile::PlaneCount,
    Hostile::UnknownFlags,
    Hostile::Reserved,
    Hostile::DisjointClaim,
    Hostile::ReadOnlyClaim,
    Hostile::ZeroExtent,
    Hostile::TooManyFds,
    Hostile::ReleaseWithFd,
    Hostile::NewerVersion,
    Hostile::FenceFlagWithoutFenceFd,
    Hostile::UnknownFdFlags,
    Hostile::FenceNotSyncFile,
    Hostile::ReleaseFenceFlagWithoutFd,
];

fn buffer_msg(planes: usize) -> BufferMsg {
    BufferMsg {
        id: 42,
        fourcc: Fourcc::NV12,
        layout: LINEAR,
        width: W,
        height: H,
        read_only: false,
        disjoint: false,
        planes: vec![WirePlane { offset: 0, stride: u64::from(W) }, WirePlane { offset: 4096, stride: u64::from(W) }][..planes].to_vec(),
        acquire_fence: false,
    }
}

fn encode(m: BufferMsg) -> Vec<u8> {
    wire::encode(&Message::Buffer(m)).unwrap()
}

/// The bytes and fds of one hostile message. Offsets into the body are `HEADER_LEN + n`.
fn hostile(kind: Hostile) -> (Vec<u8>, Vec<OwnedFd>) {
    let file = memfd(8192);
    let fds = |n: usize| {
        (0..n)
            .map(|_| file.try_clone().unwrap())
            .collect::<Vec<_>>()
    };
    let two = encode(buffer_msg(2));
    let set_u32 = |mut b: Vec<u8>, at: usize, v: u32| {
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        b
    };
    match kind {
        Hostile::ExtraFd => (encode(buffer_msg(1)), fds(2)),
        Hostile::MissingFd => (two, fds(1)),
        Hostile::NoFds => (encode(buffer_msg(1)), fds(0)),
        Hostile::ShortHeader => (two[..10].to_vec(), fds(2)),
        Hostile::TruncatedBody => (two[..two.len() - 5].to_vec(), fds(2)),
        Hostile::BadMagic => (set_u32(two, 0, u32::from_le_bytes(*b"GBM!")), fds(2)),
        // A peer still on wire version 1, and one from the future.
        Hostile::BadVersion => {
            let mut b = two;
            b[4..6].copy_from_slice(&1u16.to_le_bytes());
            (b, fds(2))
        }
        Hostile::NewerVersion => {
            let mut b = two;
            b[4..6].copy_from_slice(&3u16.to_le_bytes());
            (b, fds(2))
        }
        // The header announces a fence, but the count covers only the planes.
        Hostile::FenceFlagWithoutFenceFd => {
            let mut b = two;
            b[14..16].copy_from_slice(&1u16.to_le_bytes());
            (b, fds(2))
        }
        Hostile::UnknownFdFlags => {
            let mut b = two;
            b[14..16].copy_from_slice(&0x8001u16.to_le_bytes());
            (b, fds(3))
        }
        // A well-formed fenced message whose "fence" is a memfd.
        Hostile::FenceNotSyncFile => (
            encode(BufferMsg {
                acquire_fence: true,
                ..buffer_msg(2)
            }),
            fds(3),
        ),
        Hostile::ReleaseFenceFlagWithoutFd => {
            let mut b = wire::encode(&Message::Release { id: 1, release_fence: true }).unwrap();
            b[12..14].copy_from_slice(&0u16.to_le_bytes());
            (b, fds(0))
        }
        Hostile::UnknownKind => {
            let mut b = two;
            b[6..8].copy_from_slice(&9u16.to_le_bytes());
            (b, fds(2))
        }
        Hostile::TooLong => {
            let mut b = two;
            b.resize(MAX_MESSAGE_LEN + 64, 0);
            (b, fds(2))
        }
        Hostile::DeclaredFdCount => (set_u32(two, 12, 3), fds(3)),
        Hostile::PlaneCount => (set_u32(two, HEADER_LEN + 32, 5), fds(2)),
        Hostile::UnknownFlags => (set_u32(two, HEADER_LEN + 12, 0x80), fds(2)),
        Hostile::Reserved => (set_u32(two, HEADER_LEN + 36, 1), fds(2)),
        // Claims disjoint, sends two fds to one file.
        Hostile::DisjointClaim => (
            encode(BufferMsg {
                disjoint: true,
                ..buffer_msg(2)
            }),
            fds(2),
        ),
        // Claims read-only, sends writable fds.
        Hostile::ReadOnlyClaim => (
            encode(BufferMsg {
                read_only: true,
                ..buffer_msg(2)
            }),
            fds(2),
        ),
        Hostile::ZeroExtent => (
            encode(BufferMsg {
                height: 0,
                ..buffer_msg(2)
            }),
            fds(2),
        ),
        Hostile::TooManyFds => (two, fds(40)),
        Hostile::ReleaseWithFd => (
            wire::encode(&Message::Release {
                id: 1,
                release_fence: false,
            })
            .unwrap(),
            fds(1),
        ),
    }
}

fn expected(kind: Hostile, e: &HandoffError) -> bool {
    use HandoffError as E;
    use FrameError as F;
    use SocketError as S;
    use WireError as Wi;
    match kind {
        Hostile::ExtraFd => matches!(
            e,
            E::Socket(S::FdCount {
                declared: 1,
                received: 2
            })
        ),
        Hostile::MissingFd => matches!(
            e,
            E::Socket(S::FdCount {
                declared: 2,
                received: 1
            })
        ),
        Hostile::NoFds => matches!(
            e,
            E::Socket(S::FdCount {
                declared: 1,
                received: 0
            })
        ),
        Hostile::ShortHeader => matches!(e, E::Wire(Wi::Frame(F::Truncated { need: 16, got: 10 }))),
        Hostile::TruncatedBody => matches!(e, E::Wire(Wi::Frame(F::BodyLength { .. }))),
        Hostile::BadMagic => matches!(e, E::Wire(Wi::Frame(F::Magic { got, .. })) if got == b"GBM!"),
        Hostile::BadVersion => matches!(e, E::Wire(Wi::Frame(F::Version { got: 1, supported: 2, .. }))),
        Hostile::NewerVersion => matches!(e, E::Wire(Wi::Frame(F::Version { got: 3, supported: 2, .. }))),
        Hostile::FenceFlagWithoutFenceFd => matches!(
            e,
            E::Wire(Wi::Frame(F::FdCount {
                declared: 2,
                expected: 3,
                ..
            }))
        ),
        Hostile::UnknownFdFlags => matches!(e, E::Wire(Wi::Frame(F::Reserved { field: "header fd flags", value: 0x8000 }))),
        Hostile::FenceNotSyncFile => matches!(e, E::NotAFence(dmabridge_interop::sync::SyncFileError::NotASyncFile)),
        Hostile::ReleaseFenceFlagWithoutFd => matches!(
            e,
            E::Wire(Wi::Frame(F::FdCount {
                declared: 0,
                expected: 1,
                ..
            }))
        ),
        Hostile::UnknownKind => matches!(e, E::Wire(Wi::Frame(F::Kind(9)))),
        Hostile::TooLong => matches!(e, E::Socket(S::TooLong { .. })),
        Hostile::DeclaredFdCount => matches!(
            e,
            E::Wire(Wi::Frame(F::FdCount {
                declared: 3,
                expected: 2,
                ..
            }))
        ),
        Hostile::PlaneCount => matches!(e, E::Wire(Wi::PlaneCount(5))),
        Hostile::UnknownFlags => matches!(e, E::Wire(Wi::Frame(F::Reserved { field: "buffer flags", value: 0x80 }))),
        Hostile::Reserved => matches!(e, E::Wire(Wi::Frame(F::Reserved { field: "buffer reserved", value: 1 }))),
        Hostile::DisjointClaim => matches!(
            e,
            E::DisjointMismatch {
                claimed: true,
                actual: false
            }
        ),
        Hostile::ReadOnlyClaim => matches!(
            e,
            E::ReadOnlyMismatch {
                claimed: true,
                actual: false
            }
        ),
        Hostile::ZeroExtent => matches!(e, E::Descriptor(DescriptorError::ZeroExtent { .. })),
        Hostile::TooManyFds => matches!(e, E::Socket(S::ControlTruncated)),
        Hostile::ReleaseWithFd => matches!(
            e,
            E::Socket(S::FdCount {
                declared: 0,
                received: 1
            })
        ),
    }
}

fn send_hostile(sock: BorrowedFd<'_>, kind: Hostile) {
    let (bytes, fds) = hostile(kind);
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
    send_raw(sock, &bytes, &borrowed).unwrap();
}

#[test]
fn each_hostile_message_has_its_own_error_and_leaks_nothing() {
    let _g = lock();
    let (a, b) = socketpair().unwrap();
    for kind in ALL_HOSTILE {
        let before = fd_count().unwrap();
        send_hostile(a.as_fd(), kind);
        let e = recv(&b).unwrap_err();
        assert!(expected(kind, &e), "{kind:?} gave {e:?}");
        assert_eq!(fd_count().unwrap(), before, "{kind:?} leaked an fd");
        // The socket is still usable: the bad record was consumed whole.
        send_release(&a, 5).unwrap();
        assert!(matches!(recv(&b).unwrap(), Received::Release { id: 5 }));
    }
}

#[test]
fn a_read_only_handoff_cannot_be_mapped_writable() {
    let _g = lock();
    let (a, b) = socketpair().unwrap();
    let buf = nv12_disjoint(0x33);
    send_buffer_read_only(&a, 9, &buf).unwrap();
    let Received::Buffer { id: 9, buf: got } = recv(&b).unwrap() else {
        panic!("expected buffer 9")
    };
    assert_read_only(&got);
    assert_eq!(got.identity(), buf.identity(), "same files, same layout");
    // The sender's own fds are still writable.
    let p = buf.plane(0).unwrap();
    let m = Mapping::new(p.fd, 4096, ProtFlags::READ | ProtFlags::WRITE).unwrap();
    assert_eq!(&m.bytes()[..16], &pattern(0, 0x33, 16)[..]);
}

#[test]
fn a_stream_socket_frames_messages_by_their_header() {
    let _g = lock();
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let nv12 = nv12_disjoint(1);
    let one = ar24(4096);
    send_buffer(&a, 1, &nv12).unwrap();
    send_release(&a, 7).unwrap();
    send_buffer(&a, 2, &one).unwrap();
    let Received::Buffer { id: 1, buf } = recv(&b).unwrap() else {
        panic!("expected buffer 1")
    };
    assert_eq!(buf.identity(), nv12.identity());
    assert!(matches!(recv(&b).unwrap(), Received::Release { id: 7 }));
    let Received::Buffer { id: 2, buf } = recv(&b).unwrap() else {
        panic!("expected buffer 2")
    };
    assert_eq!(buf.identity(), one.identity());
    // A peer that hangs up half way through a message.
    let two = encode(buffer_msg(2));
    send_raw(
        a.as_fd(),
        &two[..HEADER_LEN + 3],
        &[nv12.plane(0).unwrap().fd],
    )
    .unwrap();
    drop(a);
    let before = fd_count().unwrap();
    assert!(matches!(
        recv(&b),
        Err(HandoffError::Socket(SocketError::ClosedMidMessage { got: 19, .. }))
    ));
    assert_eq!(
        fd_count().unwrap(),
        before,
        "the fd that came with the partial message is closed"
    );
    assert!(matches!(recv(&b), Err(HandoffError::Socket(SocketError::Closed))));
}

#[test]
fn fd_count_is_unchanged_after_1000_handoffs() {
    let _g = lock();
    let cpu = ImportLimits::linear_cpu(4096);
    let (a, b) = socketpair().unwrap();
    let before = fd_count().unwrap();
    let (mut good, mut bad, mut releases) = (0, 0, 0);
    for i in 0..1000u64 {
        match i % 10 {
            9 => {
                let kind = ALL_HOSTILE[(i / 10) as usize % ALL_HOSTILE.len()];
                send_hostile(a.as_fd(), kind);
                let e = recv(&b).unwrap_err();
                assert!(expected(kind, &e), "{kind:?} gave {e:?}");
                bad += 1;
            }
            8 => {
                send_release(&b, i).unwrap();
                assert!(matches!(recv(&a).unwrap(), Received::Release { id } if id == i));
                releases += 1;
            }
            n => {
                let buf = match n % 3 {
                    0 => ar24(4096),
                    1 => nv12_disjoint(n as u8),
                    _ => DmaBuf::in_one_file(
                        Fourcc::NV12,
                        LINEAR,
                        W,
                        H,
                        memfd(8192),
                        &[PlaneLayout::linear(0, 64, H), PlaneLayout::linear(4096, 64, H / 2)],
                    )
                    .unwrap(),
                };
                if n % 2 == 0 {
                    send_buffer_read_only(&a, i, &buf).unwrap();
                } else {
                    send_buffer(&a, i, &buf).unwrap();
                }
                let Received::Buffer { id, buf: got } = recv(&b).unwrap() else {
                    panic!("expected a buffer")
                };
                assert_eq!(id, i);
                assert_eq!(got.identity(), buf.identity());
                assert_eq!(got.read_only(), n % 2 == 0);
                check_import(&got, &cpu).unwrap();
                good += 1;
            }
        }
    }
    let after = fd_count().unwrap();
    println!("fd_count before={before} after={after} over 1000 handoffs ({good} buffers, {releases} releases, {bad} hostile)");
    assert_eq!(before, after);
}
