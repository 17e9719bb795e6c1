//! A live V4L2 device's frames in the Vulkan device, without a copy of the memory: vivid
//! (`scripts/lab.sh --modules vivid`, two instances: 000 single-planar, 001 multi-planar)
//! captures, each buffer goes out through `VIDIOC_EXPBUF` and comes into the engine with the
//! explicit layout `VIDIOC_S_FMT` reported, and what the engine reads back must be the bytes
//! of the buffer's own V4L2 mapping. The other way round too: buffers a collection allocated
//! (dma-heap) are queued to vivid with `V4L2_MEMORY_DMABUF`, vivid fills them, and the
//! engine imports the same fds.
//!
//! Runs in the kernel lab; elsewhere it says why it is skipped (there is no V4L2 device on
//! the project's CI host). In the lab vivid must be there: nothing is skipped.

mod common;

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use dmabridge::ash::vk;
use dmabridge::interop::collection::{Collection, Progress, Rights, SystemAllocator};
use dmabridge::interop::dmabuf::{pack_planes, read_exact_at, DmaBuf};
use dmabridge::interop::negotiate::{Constraints, ExtentRange, Participant, Usage};
use dmabridge::interop::peers::v4l2::{lookup, plane_layouts};
use dmabridge::interop::peers::v4l2_device::{Memory, V4l2Device};
use dmabridge::interop::sync::is_dma_buf;
use dmabridge::interop::{Format, FormatSet, Fourcc, Layout, Modifier};
use dmabridge::interop::dmabuf::ImportCheckError;
use dmabridge::{ImportError, ImportOptions, ImportPath, SupportQuery};

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);
const SAMPLE_AND_READ: vk::ImageUsageFlags =
    vk::ImageUsageFlags::from_raw(vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw());
/// vivid makes a frame every 1/30 s; under TCG the first can take a while.
const FRAME_TIMEOUT: Duration = Duration::from_secs(20);

/// One test at a time: a V4L2 queue has one owner (a second S_FMT or REQBUFS while the
/// first streams is EBUSY), and each test counts the process's fds.
static DEVICE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// vivid instance `instance`'s capture node, opened, with the lock that makes it this test's;
/// `None` (with the reason) outside the lab.
fn vivid(instance: u32) -> Option<(V4l2Device, std::sync::MutexGuard<'static, ()>)> {
    if !common::in_kernel_lab() {
        eprintln!("skipped: a live V4L2 device needs the kernel lab (scripts/lab.sh --modules vivid)");
        return None;
    }
    let name = format!("vivid-{instance:03}-vid-cap");
    let node = std::fs::read_dir("/sys/class/video4linux")
        .expect("the lab has /sys/class/video4linux")
        .filter_map(Result::ok)
        .find(|e| std::fs::read_to_string(e.path().join("name")).is_ok_and(|n| n.trim() == name))
        .unwrap_or_else(|| panic!("the kernel lab loads vivid with two instances; no {name}"));
    let path = PathBuf::from("/dev").join(node.file_name());
    let lock = DEVICE_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    Some((V4l2Device::open(&path, None).unwrap_or_else(|e| panic!("open {name}: {e}")), lock))
}

fn code(v4l2: &str) -> u32 {
    lookup(v4l2).unwrap_or_else(|| panic!("{v4l2} is in the V4L2 table")).pixfmt.code()
}

/// Streams `memory` buffers of `device` until one comes back full.
fn one_frame(device: &V4l2Device) -> dmabridge::interop::peers::v4l2_device::Dequeued {
    device.stream_on().expect("STREAMON");
    let frame = device.dequeue(FRAME_TIMEOUT).expect("vivid fills a buffer");
    assert!(!frame.error, "vivid marked the frame bad");
    frame
}

/// One captured frame of `v4l2` format, exported and imported: the engine's read-back equals
/// the V4L2 mapping. Returns the import path the engine took.
fn capture_and_import(device: &V4l2Device, v4l2: &str, width: u32, height: u32) -> Result<ImportPath, ImportError> {
    capture_and_import_with(device, v4l2, (width, height), ImportOptions::default())
}

/// [`capture_and_import`] with the import's options.
fn capture_and_import_with(device: &V4l2Device, v4l2: &str, (width, height): (u32, u32), options: ImportOptions) -> Result<ImportPath, ImportError> {
    let engine = common::engine();
    let fmt = device.set_format(code(v4l2), width, height).expect("S_FMT");
    let entry = lookup(v4l2).unwrap();
    let fourcc = entry.fourcc();
    let layouts = plane_layouts(&fmt).expect("the driver's format has a dmabridge layout");
    let count = device.request_buffers(2, Memory::Mmap).expect("REQBUFS");
    assert!(count >= 1);
    for i in 0..count {
        device.queue_mmap(i).expect("QBUF");
    }
    let frame = one_frame(device);
    let fds = device.export_buffer(frame.index).expect("EXPBUF");
    assert_eq!(fds.len(), usize::from(entry.mem_planes), "one dma-buf per V4L2 memory plane");
    for fd in &fds {
        assert!(is_dma_buf(fd.as_fd()).expect("fstatfs"), "VIDIOC_EXPBUF gives dma-bufs");
    }
    let map = device.map_buffer(frame.index).expect("mmap the buffer");
    let planes: Vec<&[u8]> = (0..map.len()).map(|i| map.plane(i).unwrap()).collect();
    let expected = pack_planes(fourcc, fmt.width, fmt.height, &layouts, &planes).expect("the layout fits the buffer");
    let buf = DmaBuf::of_objects(fourcc, LINEAR, fmt.width, fmt.height, &fds, &layouts).expect("descriptor");
    assert_eq!(buf.disjoint(), entry.mem_planes > 1);
    let image = engine.import_dmabuf_with(&buf, SAMPLE_AND_READ, options);
    let result = image.map(|image| {
        assert_eq!(image.read_back().expect("read back"), expected, "the device reads what V4L2 mapped");
        image.path()
    });
    drop(map);
    device.stream_off().expect("STREAMOFF");
    device.request_buffers(0, Memory::Mmap).expect("free the buffers");
    common::assert_clean(&engine);
    result
}

/// The device's own answer for NV12 LINEAR in this use: whether it imports it as an image
/// over the memory, and whether its tiling offers `DISJOINT` (one binding per plane).
fn nv12_linear_import() -> (bool, bool) {
    let engine = common::engine();
    let support = engine.format_support(&SupportQuery::new(Fourcc::NV12, SAMPLE_AND_READ)).expect("format support");
    let linear = support.get(Modifier::LINEAR).filter(|_| engine.has_modifiers());
    let image = linear.is_some_and(|m| m.can_import());
    let disjoint = linear.is_some_and(|m| m.tiling_features.contains(vk::FormatFeatureFlags2::DISJOINT));
    println!("{}: NV12 LINEAR imported as an image: {image}; disjoint: {disjoint}", engine.info().name);
    common::assert_clean(&engine);
    (image, disjoint)
}

#[test]
fn nv12_in_one_dma_buf_reads_back_exactly() {
    let Some((device, _lock)) = vivid(0) else { return };
    assert!(!device.is_multiplanar());
    let path = capture_and_import(&device, "NV12", 320, 180).expect("import NV12");
    // An image over the memory where the device imports NV12 LINEAR as one, else the copy
    // (lavapipe makes no multi-planar image from a dma-buf).
    let (image, _) = nv12_linear_import();
    assert_eq!(path, if image { ImportPath::Explicit } else { ImportPath::BufferCopy });
}

#[test]
fn an_rgb_frame_is_an_image_on_the_same_memory() {
    let Some((device, _lock)) = vivid(0) else { return };
    // V4L2 XR24 (XBGR32) is DRM XR24: the one single-plane format both name the same.
    let path = capture_and_import(&device, "XR24", 320, 180).expect("import XR24");
    assert_eq!(path, ImportPath::Explicit, "a LINEAR single-plane dma-buf is an image with the modifier extension");
}

#[test]
fn nv12m_is_two_dma_bufs_bound_disjoint_or_refused_with_the_reason() {
    let Some((device, _lock)) = vivid(1) else { return };
    assert!(device.is_multiplanar());
    let (image, disjoint) = nv12_linear_import();
    // Zero-copy or nothing: bound disjoint where the device says it can, else refused with
    // the reason (and nothing imported).
    let zero_copy = capture_and_import_with(&device, "NM12", (320, 180), ImportOptions { require_zero_copy: true, ..Default::default() });
    match (&zero_copy, image && disjoint) {
        (Ok(path), true) => assert_eq!(*path, ImportPath::Explicit, "a disjoint image on the two fds"),
        (Err(ImportError::NotZeroCopy(why)), false) => println!("NV12M zero-copy refused: {why}"),
        (Err(e @ ImportError::Check(ImportCheckError::DisjointUnsupported { .. })), false) if image => println!("NV12M zero-copy refused: {e}"),
        (other, _) => panic!("NV12M zero-copy, where the device imports NV12 LINEAR as an image: {image}, disjoint: {disjoint}: {other:?}"),
    }
    // Otherwise the copy path takes the two files, plane by plane, and reads back exactly.
    if zero_copy.is_err() {
        let path = capture_and_import(&device, "NM12", 320, 180).expect("NV12M from two fds by copy");
        assert_eq!(path, ImportPath::BufferCopy, "two planes in two files, copied plane by plane");
    }
}

/// Buffers a collection allocated (system memory: the dma-heap in the lab) for vivid and
/// the device go to vivid as `V4L2_MEMORY_DMABUF`; what vivid writes into them the engine
/// reads through the same fds, and it equals what the CPU reads through them.
#[test]
fn collection_buffers_go_through_vivid_and_back_to_the_device() {
    let Some((device, _lock)) = vivid(0) else { return };
    let engine = common::engine();
    let fmt = device.set_format(code("NV12"), 320, 180).expect("S_FMT");
    let layouts = plane_layouts(&fmt).expect("layout");
    let sizeimage = fmt.planes[0].sizeimage;
    // vivid as the producer, with what S_FMT said it writes (its pitch, its whole image).
    let nv12 = || [Format::linear(Fourcc::NV12)].into_iter().collect::<FormatSet>();
    let camera = device.participant("vivid").expect("vivid as a participant");
    let camera = Participant::new("vivid", nv12()).with_constraints(Constraints {
        width: ExtentRange::exactly(fmt.width),
        height: ExtentRange::exactly(fmt.height),
        min_buffers: camera.constraints.min_buffers.max(2),
        min_size: u64::from(sizeimage),
        // A power of two that vivid's pitch is a multiple of: the collection's pitch is then
        // the tight row, which is vivid's.
        stride_align: 1 << layouts[0].stride.trailing_zeros().min(12),
        ..Constraints::default()
    });
    let gpu = Participant::new("gpu", nv12()).with_usage(Usage::SAMPLE).with_constraints(Constraints { min_buffers: 1, ..Constraints::default() });
    let (mut collection, root) = Collection::new("vivid-to-gpu").expect("collection");
    let gpu_token = collection.duplicate(root, Rights::default(), false, "gpu").expect("token");
    collection.bind(root, camera).expect("bind vivid");
    let progress = collection.bind(gpu_token, gpu).expect("bind gpu");
    assert!(matches!(progress, Progress::Allocate(_)), "{progress:?}");
    assert_eq!(collection.allocate_with(&mut SystemAllocator::new("vivid-to-gpu")), Progress::Allocated);
    let buffers = collection.buffers_for(root).expect("vivid's buffers");
    for b in &buffers {
        let p = b.plane(0).unwrap();
        assert!(is_dma_buf(p.fd).expect("fstatfs"), "the lab's system memory is the dma-heap");
        let got: Vec<(u64, u64)> = b.planes().map(|p| (p.offset, p.stride)).collect();
        let want: Vec<(u64, u64)> = layouts.iter().map(|l| (l.offset, l.stride)).collect();
        assert_eq!(got, want, "the collection laid the buffer out as vivid writes it");
    }
    let count = device.request_buffers(buffers.len() as u32, Memory::DmaBuf).expect("REQBUFS DMABUF");
    assert!(count >= 1 && count as usize <= buffers.len(), "{count} of {}", buffers.len());
    for (i, b) in buffers.iter().take(count as usize).enumerate() {
        device.queue_dmabuf(i as u32, &[b.plane(0).unwrap().fd], &[sizeimage]).expect("QBUF DMABUF");
    }
    let frame = one_frame(&device);
    let mine = &buffers[frame.index as usize];
    let fd = mine.plane(0).unwrap().fd;
    let mut cpu = vec![0u8; sizeimage as usize];
    read_exact_at(fd, 0, &mut cpu).expect("the guarded CPU read");
    assert!(cpu.iter().any(|&b| b != 0), "vivid wrote its pattern into the collection's buffer");
    let expected = pack_planes(Fourcc::NV12, fmt.width, fmt.height, &layouts, &[&cpu]).expect("the layout fits the buffer");
    let image = engine.import_dmabuf(mine, SAMPLE_AND_READ).expect("import the collection's buffer");
    assert_eq!(image.read_back().expect("read back"), expected);
    drop(image);
    device.stream_off().expect("STREAMOFF");
    device.request_buffers(0, Memory::DmaBuf).expect("free the queue");
    common::assert_clean(&engine);
}
