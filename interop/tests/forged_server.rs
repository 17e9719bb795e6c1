//! The client trusts no server: a forged collection server (a thread on the other end of the
//! token's socket, speaking the real wire protocol) answers a bind with buffers that lie, and
//! the token refuses each with [`CollectionError::BadBuffer`] naming the field; the honest
//! answer beside them is taken.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use dmabridge_interop::collection::transport;
use dmabridge_interop::collection::wire::Message;
use dmabridge_interop::collection::{reconcile, BufferField, CollectionError, Outputs, ReconcileOptions, Reconciled, Token};
use dmabridge_interop::dmabuf::{fd_count, send_buffer, socketpair, sealed_memfd_of_size, DmaBuf, PlaneDesc, PlaneLayout};
use dmabridge_interop::negotiate::{Constraints, ExtentRange, Participant};
use dmabridge_interop::{Format, Fourcc, Layout, Modifier};

const T: Duration = Duration::from_secs(10);
const SIZE: u64 = 64 * 4 * 48;

fn participant(read_only: bool) -> Participant {
    Participant::new("holder", [Format::linear(Fourcc::XRGB8888)].into_iter().collect()).with_constraints(Constraints {
        width: ExtentRange::exactly(64),
        height: ExtentRange::exactly(48),
        min_buffers: 1,
        read_only,
        ..Default::default()
    })
}

/// The list an honest server would send: one 64x48 XRGB buffer in one 12288-byte file.
fn reconciled() -> Reconciled {
    let mut r = reconcile(&[participant(false)], ReconcileOptions::default()).expect("reconciles");
    r.outputs = Some(Outputs { object_sizes: vec![SIZE], planes: vec![PlaneLayout::linear(0, 256, 48)] });
    r
}

fn buffer(fd: OwnedFd, offset: u64) -> DmaBuf {
    DmaBuf::new(Fourcc::XRGB8888, Layout::Explicit(Modifier::LINEAR), 64, 48, vec![PlaneDesc { fd, offset, stride: 256 }]).expect("descriptor")
}

/// Binds a token whose server answers with `r` and `buf`; what the bind returns.
fn bind_against(r: Reconciled, buf: DmaBuf, read_only: bool) -> Result<(), CollectionError> {
    let (ours, theirs) = socketpair().expect("socketpair");
    let server = std::thread::spawn(move || {
        let (msg, _) = transport::recv_timeout(theirs.as_fd(), T).expect("the bind");
        assert!(matches!(msg, Message::Bind(_)), "{msg:?}");
        transport::send(theirs.as_fd(), &Message::Allocated { reconciled: r, buffers: 1 }, None).expect("allocated");
        send_buffer(theirs.as_fd(), 0, &buf).expect("buffer");
        // Keep the socket open until the client is done reading.
        let _ = transport::recv_timeout(theirs.as_fd(), T);
    });
    let mut token = Token::from_fd(ours);
    let got = token.bind(&participant(read_only), T).map(|b| assert_eq!(b.buffers.len(), 1));
    drop(token);
    server.join().expect("the forged server");
    got
}

fn refused(field: BufferField, got: Result<(), CollectionError>) {
    match got {
        Err(CollectionError::BadBuffer { buffer: 0, field: f, detail }) => assert_eq!(f, field, "{detail}"),
        other => panic!("expected BadBuffer {{ field: {field} }}, got {other:?}"),
    }
}

#[test]
fn a_forged_servers_buffers_are_refused_field_by_field() {
    let before = fd_count().unwrap();
    let memfd = || sealed_memfd_of_size("forged", SIZE).expect("memfd");

    // The honest answer.
    bind_against(reconciled(), buffer(memfd(), 0), false).expect("an honest server's buffer");

    // A plane far past the end of its file.
    refused(BufferField::PlaneExtent, bind_against(reconciled(), buffer(memfd(), 1 << 30), false));

    // A file of another size than the outputs say (still large enough for the plane).
    let big = sealed_memfd_of_size("forged", SIZE * 2).unwrap();
    refused(BufferField::Size, bind_against(reconciled(), buffer(big, 0), false));

    // A plane elsewhere than the outputs say.
    let mut moved = reconciled();
    moved.outputs.as_mut().unwrap().planes[0].offset = 0;
    moved.outputs.as_mut().unwrap().object_sizes[0] = SIZE * 2;
    let big = sealed_memfd_of_size("forged", SIZE * 2).unwrap();
    refused(BufferField::Layout, bind_against(moved, buffer(big, 256), false));

    // A pipe, and a memfd that can shrink, instead of a dma-buf or a sealed memfd.
    let (pipe, _w) = rustix::pipe::pipe().unwrap();
    refused(BufferField::FdKind, bind_against(reconciled(), buffer(pipe, 0), false));
    let unsealed = rustix::fs::memfd_create("forged", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&unsealed, SIZE).unwrap();
    refused(BufferField::FdKind, bind_against(reconciled(), buffer(unsealed, 0), false));

    // A writable fd for a holder that bound read-only.
    refused(BufferField::AccessMode, bind_against(reconciled(), buffer(memfd(), 0), true));

    drop(_w);
    assert_eq!(fd_count().unwrap(), before, "fds leaked");
}
