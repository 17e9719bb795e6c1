//! A live V4L2 device (`peers::v4l2_device`) against vivid, the kernel's virtual video test
//! driver: in the kernel lab (`DMABRIDGE_TEST_CONFIG=kernel`, started with
//! `scripts/lab.sh --modules vivid --param vivid.n_devs=2 --param vivid.multiplanar=1,2`)
//! vivid-000 is single-planar and vivid-001 multi-planar, and both must be there. Elsewhere
//! only the typed error of a missing node is checked; the live tests say why they skip.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dmabridge_interop::dmabuf::{fd_count, read_exact_at, DmaHeap};
use dmabridge_interop::peers::v4l2::{lookup, plane_layouts};
use dmabridge_interop::peers::{Memory, V4l2Device, V4l2DeviceError, V4l2PlaneFormat};
use dmabridge_interop::sync::is_dma_buf;
use dmabridge_interop::{Format, Fourcc};

/// Long enough for a first frame under QEMU TCG.
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

fn in_kernel_lab() -> bool {
    std::env::var("DMABRIDGE_TEST_CONFIG").as_deref() == Ok("kernel")
}

/// The `/dev/videoN` whose sysfs name is `name`.
fn find_node(name: &str) -> Option<PathBuf> {
    std::fs::read_dir("/sys/class/video4linux").ok()?.flatten().find_map(|e| {
        let n = std::fs::read_to_string(e.path().join("name")).ok()?;
        (n.trim() == name).then(|| Path::new("/dev").join(e.file_name()))
    })
}

/// vivid's capture node `name`, which the lab must have; `None` (after saying why) elsewhere.
fn vivid(name: &str, test: &str) -> Option<V4l2Device> {
    if !in_kernel_lab() {
        eprintln!("{test}: skipped: needs vivid, which only the kernel lab (DMABRIDGE_TEST_CONFIG=kernel) loads");
        return None;
    }
    let path = find_node(name)
        .unwrap_or_else(|| panic!("the lab has no {name} in /sys/class/video4linux (is vivid loaded with n_devs=2?)"));
    Some(V4l2Device::open(&path, None).unwrap_or_else(|e| panic!("{e}")))
}

fn code(s: &str) -> u32 {
    lookup(s).unwrap_or_else(|| panic!("{s} not in the V4L2 table")).pixfmt.code()
}

fn inode(fd: &OwnedFd) -> u64 {
    rustix::fs::fstat(fd).unwrap().st_ino
}

#[test]
fn opening_a_missing_node_is_a_typed_error_naming_it() {
    let path = Path::new("/dev/video-that-does-not-exist");
    let err = V4l2Device::open(path, None).unwrap_err();
    assert!(matches!(&err, V4l2DeviceError::Open { path: p, .. } if p == path), "{err:?}");
    assert!(err.to_string().contains("/dev/video-that-does-not-exist"), "{err}");
}

#[test]
fn vivid_lists_nv12_and_is_a_participant() {
    let Some(sp) = vivid("vivid-000-vid-cap", "formats") else {
        return;
    };
    let Some(mp) = vivid("vivid-001-vid-cap", "formats") else {
        return;
    };
    assert!(!sp.is_multiplanar() && mp.is_multiplanar());
    assert_eq!((sp.driver(), sp.direction().name()), ("vivid", "capture"));

    let sp_formats = sp.enum_formats().unwrap();
    let mp_formats = mp.enum_formats().unwrap();
    let codes = |f: &[dmabridge_interop::peers::DeviceFormat]| f.iter().map(|f| f.fourcc_text()).collect::<Vec<_>>();
    eprintln!("vivid-000: {:?}", codes(&sp_formats));
    eprintln!("vivid-001: {:?}", codes(&mp_formats));
    assert!(codes(&sp_formats).contains(&"NV12".to_owned()));
    assert!(codes(&mp_formats).contains(&"NM12".to_owned()) && codes(&mp_formats).contains(&"NV12".to_owned()));
    eprintln!("{}", serde_json::to_string(&sp.summary(&sp_formats)).unwrap());

    for dev in [&sp, &mp] {
        let p = dev.participant("camera").unwrap();
        eprintln!(
            "{}: {:?} {} x {} min_buffers {} stride_align {}",
            dev.path().display(),
            p.formats,
            p.constraints.width,
            p.constraints.height,
            p.constraints.min_buffers,
            p.constraints.stride_align
        );
        assert!(p.formats.accepts(&Format::linear(Fourcc::NV12)));
        let (w, h) = (p.constraints.width, p.constraints.height);
        assert!(w.min >= 1 && w.min <= w.max && w.max <= 16384, "{w}");
        assert!(h.min >= 1 && h.min <= h.max && h.max <= 16384, "{h}");
        assert!(p.constraints.min_buffers > 0);
        assert!(p.constraints.stride_align.is_power_of_two());
        assert!(!p.constraints.read_only);
    }
}

/// Streams `MMAP` buffers of one format, dequeues a frame, and checks that each plane's
/// exported dma-buf reads back (through the library's guarded read) as its V4L2 mapping.
fn capture_and_compare(dev: &V4l2Device, pixfmt: &str, planes: usize) -> Vec<OwnedFd> {
    let fmt = dev.set_format(code(pixfmt), 320, 240).unwrap();
    eprintln!("{} {pixfmt} S_FMT 320x240: {fmt:?}", dev.path().display());
    assert_eq!(fmt.planes.len(), planes);
    let n = dev.request_buffers(4, Memory::Mmap).unwrap();
    eprintln!("REQBUFS 4 MMAP: {n}");
    for i in 0..n {
        dev.queue_mmap(i).unwrap();
    }
    dev.stream_on().unwrap();
    let dq = dev.dequeue(FRAME_TIMEOUT).unwrap();
    eprintln!("dequeued {dq:?}");
    assert!(!dq.error && dq.index < n && dq.bytesused.len() == planes);

    let info = dev.query_buffer(dq.index).unwrap();
    let fds = dev.export_buffer(dq.index).unwrap();
    let map = dev.map_buffer(dq.index).unwrap();
    assert_eq!((info.planes.len(), fds.len(), map.len()), (planes, planes, planes));
    for (p, fd) in fds.iter().enumerate() {
        assert!(is_dma_buf(fd.as_fd()).unwrap(), "plane {p}");
        let mapped = map.plane(p).unwrap();
        let mut read = vec![0u8; mapped.len()];
        read_exact_at(fd.as_fd(), 0, &mut read).unwrap();
        assert!(read == mapped, "plane {p}: the dma-buf's bytes differ from the V4L2 mapping");
        assert!(read.iter().any(|&b| b != 0), "plane {p} is all zeros");
    }
    check_layouts_fit(&fmt, &info.planes.iter().map(|p| u64::from(p.length)).collect::<Vec<_>>());
    drop(map);
    dev.stream_off().unwrap();
    fds
}

fn check_layouts_fit(fmt: &V4l2PlaneFormat, lengths: &[u64]) {
    for l in plane_layouts(fmt).unwrap() {
        let len = lengths[l.object];
        assert!(l.offset + l.size <= len, "{l:?} past the buffer's {len} bytes");
    }
}

#[test]
fn nv12_mmap_capture_exports_a_dma_buf_equal_to_its_mapping() {
    let Some(dev) = vivid("vivid-000-vid-cap", "nv12 mmap") else {
        return;
    };
    let fds = capture_and_compare(&dev, "NV12", 1);
    drop(dev);
    // The exported dma-buf outlives the device's fd and queue.
    assert!(is_dma_buf(fds[0].as_fd()).unwrap());
}

#[test]
fn nv12m_exports_two_planes_as_two_dma_bufs() {
    let Some(dev) = vivid("vivid-001-vid-cap", "nv12m mmap") else {
        return;
    };
    let fds = capture_and_compare(&dev, "NM12", 2);
    assert_ne!(inode(&fds[0]), inode(&fds[1]), "each plane is its own dma-buf");
}

/// vivid's "OSD Text Mode" menu: 0 all, 1 counters only, 2 none.
const OSD_NONE: i32 = 2;

/// One NV12 frame captured into `MMAP` buffers, as bytes.
fn mmap_frame(dev: &V4l2Device) -> Vec<u8> {
    dev.set_format(code("NV12"), 320, 240).unwrap();
    let n = dev.request_buffers(2, Memory::Mmap).unwrap();
    for i in 0..n {
        dev.queue_mmap(i).unwrap();
    }
    dev.stream_on().unwrap();
    let dq = dev.dequeue(FRAME_TIMEOUT).unwrap();
    let frame = dev.map_buffer(dq.index).unwrap().plane(0).unwrap()[..dq.bytesused[0] as usize].to_vec();
    dev.stream_off().unwrap();
    dev.request_buffers(0, Memory::Mmap).unwrap();
    frame
}

#[test]
fn dmabuf_memory_captures_into_heap_buffers() {
    let Some(dev) = vivid("vivid-000-vid-cap", "dmabuf import") else { return };
    let heap = DmaHeap::open("system").expect("the lab has /dev/dma_heap/system");
    // Without the OSD (frame counters, time) vivid's colour bars are the same every frame,
    // so a frame captured into our memory must equal one captured into the driver's.
    let osd = dev.find_control("OSD Text Mode").unwrap().expect("vivid has an OSD Text Mode control");
    dev.set_control(osd, OSD_NONE).unwrap();
    let reference = mmap_frame(&dev);

    let fmt = dev.set_format(code("NV12"), 320, 240).unwrap();
    let size = fmt.planes[0].sizeimage;
    let n = dev.request_buffers(4, Memory::DmaBuf).unwrap();
    eprintln!("REQBUFS 4 DMABUF: {n}, sizeimage {size}");
    let bufs: Vec<OwnedFd> = (0..n).map(|_| heap.alloc(u64::from(size)).unwrap()).collect();
    for (i, fd) in bufs.iter().enumerate() {
        dev.queue_dmabuf(i as u32, &[fd.as_fd()], &[size]).unwrap();
    }
    dev.stream_on().unwrap();
    let dq = dev.dequeue(FRAME_TIMEOUT).unwrap();
    assert!(!dq.error && dq.bytesused[0] == size, "{dq:?}");
    let mut frame = vec![0u8; size as usize];
    read_exact_at(bufs[dq.index as usize].as_fd(), 0, &mut frame).unwrap();
    let luma = &frame[..(fmt.planes[0].bytesperline * fmt.height) as usize];
    let chroma = &frame[luma.len()..];
    assert!(luma.iter().any(|&b| b != 0) && chroma.iter().any(|&b| b != 0), "vivid wrote nothing into the heap buffer");
    // vivid's colour bars are limited-range YCbCr: luma stays in 16..=235.
    assert!(luma.iter().all(|y| (16..=235).contains(y)), "luma outside 16..=235");
    assert!(frame == reference, "the frame in the heap buffer differs from the MMAP frame");
    dev.stream_off().unwrap();
    dev.set_control(osd, 0).unwrap();
}

#[test]
fn dequeue_of_nothing_times_out_and_no_fd_leaks() {
    if !in_kernel_lab() {
        eprintln!("hostile dequeue: skipped: needs vivid, which only the kernel lab loads");
        return;
    }
    let before = fd_count().unwrap();
    {
        let dev = vivid("vivid-000-vid-cap", "hostile dequeue").unwrap();
        // Not streaming: DQBUF refuses at once (EINVAL), a typed error rather than a wait;
        // and no poll happened, which would have started vivid's read() emulation and made
        // the REQBUFS below EBUSY.
        let start = std::time::Instant::now();
        let err = dev.dequeue(Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(&err, V4l2DeviceError::Ioctl { ioctl: "VIDIOC_DQBUF", source, .. } if source.raw_os_error() == Some(22)),
            "{err:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
        dev.set_format(code("NV12"), 320, 240).unwrap();
        let n = dev.request_buffers(3, Memory::Mmap).unwrap();
        // Out of range and malformed requests are typed errors naming the device.
        let err = dev.export_buffer(n + 5).unwrap_err();
        assert!(err.to_string().contains("/dev/video"), "{err}");
        assert!(matches!(dev.queue_dmabuf(0, &[], &[]), Err(V4l2DeviceError::BadRequest { .. })));
        assert!(matches!(dev.request_buffers(1000, Memory::Mmap), Err(V4l2DeviceError::BadRequest { .. })));
        for i in 0..n {
            dev.queue_mmap(i).unwrap();
        }
        dev.stream_on().unwrap();
        for _ in 0..n {
            dev.dequeue(FRAME_TIMEOUT).unwrap();
        }
        let t = Duration::from_millis(300);
        let start = std::time::Instant::now();
        let err = dev.dequeue(t).unwrap_err();
        assert!(matches!(err, V4l2DeviceError::Timeout { timeout, .. } if timeout == t), "{err:?}");
        assert!(start.elapsed() >= t);
        let fds = dev.export_buffer(0).unwrap();
        let map = dev.map_buffer(0).unwrap();
        drop((fds, map));
        dev.stream_off().unwrap();
    }
    assert_eq!(fd_count().unwrap(), before, "an fd leaked");
}

/// vivid's output node is a participant that reads what it is given (read-only), and asking
/// a capture-only node for its output side is the typed error naming the direction.
#[test]
fn an_output_node_is_a_read_only_participant() {
    if !in_kernel_lab() {
        eprintln!("an_output_node_is_a_read_only_participant: skipped: needs vivid (the kernel lab)");
        return;
    }
    use dmabridge_interop::peers::v4l2_device::Direction;
    let out = find_node("vivid-000-vid-out").expect("vivid's output node");
    let dev = V4l2Device::open(&out, Some(Direction::Output)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dev.direction(), Direction::Output);
    let p = dev.participant("sink").expect("participant");
    assert!(p.constraints.read_only, "an output queue only reads the buffers");
    let dmabridge_interop::negotiate::Candidates::Only(formats) = &p.formats else { panic!("a list") };
    assert!(formats.iter().any(|f| *f == Format::linear(Fourcc::NV12)), "{formats:?}");
    let cap = find_node("vivid-000-vid-cap").expect("vivid's capture node");
    let err = V4l2Device::open(&cap, Some(Direction::Output)).unwrap_err();
    assert!(matches!(err, V4l2DeviceError::NoSuchDirection { direction: Direction::Output, .. }), "{err:?}");
    assert!(err.to_string().contains(&cap.display().to_string()), "{err}");
}

/// An output queue's `MMAP` buffer is mapped writable (vb2 refuses an output mapping
/// without `PROT_WRITE`), filled through that mapping and consumed by vivid; a capture
/// queue's mapping stays read-only and offers no writable slice.
#[test]
fn an_output_buffer_is_filled_through_its_writable_mapping_and_consumed() {
    if !in_kernel_lab() {
        eprintln!("an_output_buffer_is_filled_through_its_writable_mapping_and_consumed: skipped: needs vivid (the kernel lab)");
        return;
    }
    use dmabridge_interop::peers::v4l2_device::Direction;
    let before = fd_count().unwrap();
    {
        let out = find_node("vivid-000-vid-out").expect("vivid's output node");
        let dev = V4l2Device::open(&out, Some(Direction::Output)).unwrap_or_else(|e| panic!("{e}"));
        let fmt = dev.set_format(code("XR24"), 320, 180).expect("S_FMT on the output queue");
        let count = dev.request_buffers(2, Memory::Mmap).expect("REQBUFS");
        assert!(count >= 1);
        let mut written = Vec::new();
        for i in 0..count {
            let mut map = dev.map_buffer(i).expect("a writable mapping of an output buffer");
            assert!(map.writable());
            let plane = map.plane_mut(0).expect("plane 0, writable");
            assert!(plane.len() >= (fmt.planes[0].bytesperline * fmt.height) as usize, "{} bytes", plane.len());
            plane.iter_mut().enumerate().for_each(|(k, b)| *b = (k as u32 * 7 + i) as u8);
            written.push(plane.to_vec());
            drop(map);
            dev.queue_mmap(i).expect("QBUF an output buffer");
        }
        dev.stream_on().expect("STREAMON");
        let done = dev.dequeue(FRAME_TIMEOUT).expect("vivid hands back a consumed output buffer");
        assert!(done.index < count);
        // What the mapping holds after the driver read it: what was written (an output
        // queue's driver only reads).
        let map = dev.map_buffer(done.index).expect("map again");
        assert_eq!(map.plane(0).expect("plane 0"), &written[done.index as usize][..]);
        drop(map);
        dev.stream_off().expect("STREAMOFF");
        dev.request_buffers(0, Memory::Mmap).expect("free the buffers");

        let cap = vivid("vivid-000-vid-cap", "an_output_buffer_is_filled_through_its_writable_mapping_and_consumed").expect("vivid's capture node");
        cap.set_format(code("XR24"), 320, 180).expect("S_FMT");
        cap.request_buffers(1, Memory::Mmap).expect("REQBUFS");
        let mut map = cap.map_buffer(0).expect("a capture buffer's mapping");
        assert!(!map.writable() && map.plane_mut(0).is_none(), "a capture queue's mapping is read-only");
        drop(map);
        cap.request_buffers(0, Memory::Mmap).expect("free the buffers");
    }
    assert_eq!(fd_count().unwrap(), before, "an fd leaked");
}
