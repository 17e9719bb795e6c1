//! A read-only right, tried from the hostile side: a holder granted read-only access to a
//! collection's buffers runs `tests/support/hostile_reader.py`, which tries every way it has
//! to write the bytes the others see (reopening its fd through `/proc/self/fd` read-write, a
//! shared writable mapping, `mprotect` of a read-only mapping, `write(2)`, `fcntl` and then
//! `write(2)`), as another user where this machine lets the test switch users, and as the
//! same user. The buffer's first byte is checked from the writer's side afterwards.
//!
//! What holds, and by what (the README's "Access rights"): the fd's access mode refuses
//! the mapping, `mprotect` and `write(2)` routes for everyone; the memfd's mode (0600, see
//! `dmabuf::memfd`) refuses the reopen to every other user. A process of the same user can
//! reopen it: the same uid is one trust domain on Linux (it can ptrace the writer too), and
//! this test pins that down so the README's statement changes if the kernel's does.

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use dmabridge_interop::collection::{Collection, Progress, Rights, SystemAllocator};
use dmabridge_interop::dmabuf::{read_exact_at, write_all_at};
use dmabridge_interop::negotiate::{Constraints, ExtentRange, Participant, Usage};
use dmabridge_interop::{Format, Fourcc};

/// The unprivileged user the hostile holder runs as, when the test may switch users.
const NOBODY: u32 = 65534;
const ROUTES: [&str; 5] = ["reopen", "mmap", "mprotect", "write", "fcntl"];

fn participant(name: &str, read_only: bool) -> Participant {
    Participant::new(name, [Format::linear(Fourcc::XRGB8888)].into_iter().collect())
        .with_constraints(Constraints {
            width: ExtentRange::exactly(64),
            height: ExtentRange::exactly(48),
            min_buffers: 1,
            read_only,
            ..Default::default()
        })
        .with_usage(if read_only { Usage::SAMPLE } else { Usage::RENDER })
}

/// What the hostile reader reports per route, run with `fd` inherited, as `uid` if given.
fn hostile(fd: std::os::fd::BorrowedFd<'_>, size: u64, uid: Option<u32>) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/support/hostile_reader.py");
    // dup() leaves FD_CLOEXEC clear: the child inherits this copy, under this number.
    let inheritable = rustix::io::dup(fd).expect("dup");
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(script).arg(inheritable.as_raw_fd().to_string()).arg(size.to_string()).current_dir("/");
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output().expect("run the hostile reader");
    drop(inheritable);
    assert!(out.status.success(), "hostile reader: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn a_read_only_holder_cannot_change_what_others_see() {
    let (mut c, root) = Collection::new("rights").unwrap();
    let viewer = c.duplicate(root, Rights { read_only: true }, false, "viewer").unwrap();
    c.bind(root, participant("writer", false)).unwrap();
    assert!(matches!(c.bind(viewer, participant("viewer", true)).unwrap(), Progress::Allocate(_)));
    assert_eq!(c.allocate_with(&mut SystemAllocator::new("rights")), Progress::Allocated);
    let mine = c.buffers_for(root).unwrap().into_iter().next().expect("a buffer");
    let theirs = c.buffers_for(viewer).unwrap().into_iter().next().expect("a buffer");
    assert!(theirs.read_only() && !mine.read_only());
    let size = 64 * 4 * 48;
    let first = |b: &dmabridge_interop::dmabuf::DmaBuf| {
        let mut byte = [0u8];
        read_exact_at(b.plane(0).unwrap().fd, 0, &mut byte).expect("read");
        byte[0]
    };
    write_all_at(mine.plane(0).unwrap().fd, 0, &[0x11]).expect("the writer writes");

    if rustix::process::geteuid().is_root() {
        let report = hostile(theirs.plane(0).unwrap().fd.as_fd(), size, Some(NOBODY));
        for route in ROUTES {
            assert!(report.contains(&format!("\"{route}\": \"refused")), "another user, route {route}: {report}");
        }
        assert_eq!(first(&mine), 0x11, "another user's writes landed: {report}");
        println!("another user (uid {NOBODY}): {report}");
    } else {
        println!("not root: the other-user routes are not run here (the test cannot switch users)");
    }

    let report = hostile(theirs.plane(0).unwrap().fd.as_fd(), size, None);
    for route in ["mmap", "mprotect", "write", "fcntl"] {
        assert!(report.contains(&format!("\"{route}\": \"refused")), "same user, route {route}: {report}");
    }
    assert!(report.contains("\"reopen\": \"WROTE\""), "same user: the reopen route was expected to go through (the README says so): {report}");
    assert_eq!(first(&mine), 0xEE);
    println!("same user: {report}");
}
