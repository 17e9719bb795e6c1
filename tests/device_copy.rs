//! The device copy (`vkCmdCopyImage` from an imported frame into an exported image), which
//! runs a copy plan's `device-copy` conversion, against the real lavapipe: byte-exact from a
//! frame pitched another driver's way (radv pitches LINEAR rows to 256 bytes), single- and
//! multi-planar, refused typed before anything is recorded when the images do not fit; and
//! the device as a participant offers exactly the copies its driver answers for. Every test
//! runs with the validation layer on and fails on any message.

mod common;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{DmaBuf, PlaneDesc};
use dmabridge::interop::format_info::format_info;
use dmabridge::interop::{Format, Fourcc, Layout, Modifier};
use dmabridge::interop::negotiate::DeviceCopy;
use dmabridge::{DeviceCopyError, Engine, ExportError, ExportRequest, ExportedImage, ImportedImage, ParticipantRequest, SupportQuery};

const LINEAR: Layout = Layout::Explicit(Modifier::LINEAR);

/// radv's LINEAR row pitch alignment, as its drm-shim round trip measured it.
const PITCH: usize = 256;

/// `fourcc` at `w` x `h` in a memfd (or udmabuf) with every plane's rows `PITCH`-aligned and
/// the planes `PITCH` bytes apart, imported for `usage`; and the packed pixels.
fn pitched_frame(engine: &Engine, fourcc: Fourcc, (w, h): (u32, u32), usage: vk::ImageUsageFlags) -> (ImportedImage, Vec<u8>) {
    let info = format_info(fourcc).expect("a known fourcc");
    let mut file = Vec::new();
    let mut packed = Vec::new();
    let mut planes = Vec::new();
    for plane in 0..info.plane_count() {
        let row = info.min_stride(plane, w) as usize;
        let rows = info.plane_height(plane, h) as usize;
        let stride = row.next_multiple_of(PITCH);
        let offset = file.len().next_multiple_of(PITCH) + PITCH;
        let pixels = common::pattern(row * rows, 7 + plane as u32);
        file.resize(offset + stride * rows, 0xEE);
        common::place_rows(&mut file, &pixels, row, rows, offset, stride);
        packed.extend_from_slice(&pixels);
        planes.push((offset as u64, stride as u64));
    }
    // Room after the last plane: a driver sizes an image by its own rules (lavapipe asks
    // for more than the last row's end), and the import checks the fd holds that much.
    file.resize(file.len() + 4 * PITCH * PITCH, 0xEE);
    let fd = common::dmabuf_with(&file);
    let descs = planes.iter().map(|&(offset, stride)| PlaneDesc { fd: fd.try_clone().expect("dup"), offset, stride }).collect();
    let buf = DmaBuf::new(fourcc, LINEAR, w, h, descs).expect("descriptor");
    (engine.import_dmabuf(&buf, usage).expect("import"), packed)
}

/// An image to copy into: a LINEAR dma-buf where lavapipe exports one of `fourcc`, else an
/// OPAQUE_FD export (plain lavapipe has no DMA_BUF export); either way one the driver lays
/// out. `None` where the driver exports `fourcc` neither way (lavapipe with udmabuf and NV12).
fn destination(engine: &Engine, fourcc: Fourcc, (w, h): (u32, u32), usage: vk::ImageUsageFlags) -> Option<ExportedImage> {
    let req = ExportRequest::new(fourcc, w, h, usage).with_acceptable([LINEAR]);
    let opaque = || match engine.export_opaque(fourcc, w, h, usage) {
        Ok(image) => Some(image),
        Err(ExportError::OpaqueExportUnsupported { .. }) => None,
        Err(e) => panic!("opaque export: {e}"),
    };
    match engine.export_image(&req) {
        Ok(image) => Some(image),
        Err(ExportError::DmaBufExportUnsupported { .. }) if !common::expect_modifiers() => opaque(),
        Err(ExportError::NoAcceptableModifier { exportable, .. }) if exportable.is_empty() => opaque(),
        Err(e) => panic!("export: {e}"),
    }
}

/// The destination's pixels, read on another engine through what it exported.
fn read_destination(dst: &ExportedImage) -> Vec<u8> {
    let reader = common::engine();
    let image = match dst.dmabuf() {
        Some(buf) => reader.import_dmabuf(buf, vk::ImageUsageFlags::TRANSFER_SRC).expect("import the copy"),
        None => reader.import_opaque(dst.opaque_fd().expect("an opaque share")).expect("import the copy"),
    };
    let back = image.read_back().expect("read back");
    drop(image);
    common::assert_clean(&reader);
    back
}

fn copies_byte_exact(fourcc: Fourcc, extent: (u32, u32)) {
    let engine = common::engine();
    let (src, packed) = pitched_frame(&engine, fourcc, extent, vk::ImageUsageFlags::TRANSFER_SRC);
    let Some(dst) = destination(&engine, fourcc, extent, vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC) else {
        // Then the device offers no copy into it either: negotiation never plans one.
        let req = ParticipantRequest::new("gpu", vk::ImageUsageFlags::SAMPLED, dmabridge::Direction::Import).with_fourccs(&[fourcc]);
        let copy = engine.participant(&req).expect("participant").copy;
        assert!(copy.map_or(true, |c| c.writes.iter().all(|f| f.fourcc != fourcc)), "{fourcc}");
        eprintln!("{fourcc}: the driver exports no image of it, so nothing can be copied into one");
        common::assert_clean(&engine);
        return;
    };
    dst.copy_from_and_release(&src, Default::default()).expect("copy").wait(dmabridge::READBACK_TIMEOUT).expect("copy done");
    assert_eq!(read_destination(&dst), packed, "{fourcc} {extent:?}");
    drop((src, dst));
    common::assert_clean(&engine);
}

#[test]
fn a_frame_pitched_another_drivers_way_is_copied_byte_exact() {
    copies_byte_exact(Fourcc::ARGB8888, (61, 37));
}

#[test]
fn a_two_plane_frame_is_copied_plane_by_plane() {
    copies_byte_exact(Fourcc::NV12, (130, 66));
    copies_byte_exact(Fourcc::P010, (64, 34));
}

#[test]
fn images_that_do_not_fit_a_copy_are_refused_before_anything_is_recorded() {
    let engine = common::engine();
    let both = vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC;
    let (src, _) = pitched_frame(&engine, Fourcc::ARGB8888, (32, 16), vk::ImageUsageFlags::TRANSFER_SRC);
    let larger = destination(&engine, Fourcc::ARGB8888, (32, 17), both).expect("lavapipe exports AR24");
    let err = larger.copy_from_and_release(&src, Default::default()).expect_err("another size");
    assert!(matches!(err, DeviceCopyError::Mismatch { from_h: 16, to_h: 17, .. }), "{err}");
    let other = destination(&engine, Fourcc::ABGR8888, (32, 16), both).expect("lavapipe exports AB24");
    assert!(matches!(other.copy_from_and_release(&src, Default::default()), Err(DeviceCopyError::Mismatch { .. })));
    // The source must be readable by a copy, the destination writable.
    let (sampled, _) = pitched_frame(&engine, Fourcc::ARGB8888, (32, 16), vk::ImageUsageFlags::SAMPLED);
    let dst = destination(&engine, Fourcc::ARGB8888, (32, 16), both).expect("lavapipe exports AR24");
    assert!(matches!(dst.copy_from_and_release(&sampled, Default::default()), Err(DeviceCopyError::Usage { side: "source", .. })));
    let read_only = destination(&engine, Fourcc::ARGB8888, (32, 16), vk::ImageUsageFlags::TRANSFER_SRC).expect("lavapipe exports AR24");
    assert!(matches!(read_only.copy_from_and_release(&src, Default::default()), Err(DeviceCopyError::Usage { side: "destination", .. })));
    // An image of another device.
    let other_engine = common::engine();
    let (foreign, _) = pitched_frame(&other_engine, Fourcc::ARGB8888, (32, 16), vk::ImageUsageFlags::TRANSFER_SRC);
    assert!(matches!(dst.copy_from_and_release(&foreign, Default::default()), Err(DeviceCopyError::OtherDevice)));
    drop((src, larger, other, sampled, dst, read_only, foreign));
    common::assert_clean(&engine);
    common::assert_clean(&other_engine);
}

#[test]
fn the_device_offers_the_copies_its_driver_answers_for() {
    let engine = common::engine();
    let fourccs = [Fourcc::ARGB8888, Fourcc::NV12];
    let req = ParticipantRequest::new("gpu", vk::ImageUsageFlags::SAMPLED, dmabridge::Direction::Import).with_fourccs(&fourccs);
    let p = engine.participant(&req).expect("participant");
    if !engine.adapter().has_modifiers() {
        // No stated layout to copy between without the modifier extension: the copy its
        // buffer-copy import makes, from LINEAR into an image of its own, for each format it
        // takes that way (the LINEAR a consumer that accepts copying lists), and none as a
        // producer.
        let by_copy = engine.participant(&ParticipantRequest { copy_import: true, ..req.clone() }).expect("participant");
        let linear: Vec<Fourcc> = by_copy.formats.as_set().expect("a list").iter().filter(|f| f.layout == Layout::Explicit(Modifier::LINEAR)).map(|f| f.fourcc).collect();
        assert!(!linear.is_empty(), "{by_copy:?}");
        assert_eq!(p.copy.as_deref(), DeviceCopy::into_own_images(linear).as_ref());
        let producer = engine.participant(&ParticipantRequest::new("gpu", vk::ImageUsageFlags::COLOR_ATTACHMENT, dmabridge::Direction::Export).with_fourccs(&fourccs)).expect("participant");
        assert_eq!(producer.copy, None);
        common::assert_clean(&engine);
        return;
    }
    let copy = p.copy.expect("a device with the modifier extension offers its copies");
    let answered = |usage: vk::ImageUsageFlags, import: bool| -> Vec<Format> {
        let mut out = Vec::new();
        for fourcc in fourccs {
            let caps = engine.format_support(&SupportQuery::new(fourcc, usage)).expect("query");
            out.extend(caps.modifiers.iter().filter(|m| if import { m.can_import() } else { m.can_export() }).map(|m| Format::explicit(fourcc, m.modifier)));
        }
        out
    };
    assert_eq!(copy.reads.iter().copied().collect::<Vec<_>>(), answered(vk::ImageUsageFlags::TRANSFER_SRC, true));
    assert_eq!(copy.writes.iter().copied().collect::<Vec<_>>(), answered(vk::ImageUsageFlags::TRANSFER_DST, false));
    common::assert_clean(&engine);
}
