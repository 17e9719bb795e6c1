//! What each fuzz target checks, shared with the corpus regression test
//! (`interop/tests/fuzz_corpus.rs` includes this file), so that a corpus replay checks
//! exactly what fuzzing checked. Every function takes arbitrary bytes; it may only panic
//! when the code under test breaks a promise (a panic inside it, a failed round trip, an
//! accepted input that breaks an invariant). Each returns whether its main parser or check
//! accepted the input, so the corpus test can check that a corpus holds both valid and
//! malformed inputs.

#![allow(dead_code)]

use dmabridge_interop::peers::{gst, kms, v4l2, wayland};
use dmabridge_interop::FormatSet;

/// Same pairs, whatever the order (an IN_FORMATS blob has one modifier order for all
/// formats, so a write/parse round trip may reorder a format's modifiers).
fn same_pairs(a: &FormatSet, b: &FormatSet) -> bool {
    a.len() == b.len() && a.iter().all(|f| b.contains(f))
}

/// Every spelling of each modifier a peer's list gave (the name path of the probe table,
/// `--json` and the negotiation report): no panic whatever the value, the name wherever
/// `drm_fourcc.h` defines the value, and the hex wherever it does not.
fn modifier_names(set: &FormatSet) {
    for m in set.iter().filter_map(|f| f.layout.modifier()) {
        let hex = m.to_hex();
        let display = m.display_name();
        assert!(m.kernel_label().contains(&hex), "{}", m.kernel_label());
        match m.name() {
            Some(name) => {
                assert_eq!(display, name);
                assert!(m.macro_name().is_some(), "{display}");
            }
            None => assert!(display.ends_with(&hex), "{display}"),
        }
    }
}

/// `Caps::parse`; what parses prints (both spellings) to text that parses back to the same
/// caps, and intersects with itself to itself.
pub fn gst_caps(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(caps) = gst::Caps::parse(text) else { return false };
    let printed = caps.to_string();
    let again = gst::Caps::parse(&printed).unwrap_or_else(|e| panic!("{printed:?} does not parse back: {e}"));
    assert_eq!(again, caps, "{printed:?}");
    assert_eq!(again.to_string(), printed);
    let inspect = caps.to_inspect_string();
    let from_inspect = gst::Caps::parse(&inspect).unwrap_or_else(|e| panic!("{inspect:?} does not parse back: {e}"));
    assert_eq!(from_inspect, caps, "{inspect:?}");
    let _ = (caps.drm_formats(), caps.width(), caps.height());
    // Bounded by MAX_INTERSECT_STEPS whatever the input; an error is fine, a panic is not.
    let _ = caps.intersect(&again);
    true
}

/// `parse_drm_format_list` and `parse_drm_format`; what parses prints back to itself.
pub fn drm_format_list(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let list = gst::parse_drm_format_list(text);
    if let Ok(set) = &list {
        modifier_names(set);
        let printed = gst::print_drm_format_list(set);
        assert_eq!(gst::parse_drm_format_list(&printed).as_ref(), Ok(set), "{printed:?}");
    }
    if let Ok(f) = gst::parse_drm_format(text) {
        assert_eq!(gst::parse_drm_format(&gst::print_drm_format(f)), Ok(f));
    }
    let _ = gst::parse_drm_format_value(text);
    list.is_ok()
}

/// `parse_in_formats`; what parses writes to a blob that parses to the same pairs.
pub fn kms_in_formats(data: &[u8]) -> bool {
    // The same bytes as a drm_info -j document: a list or a typed error, never a panic.
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = dmabridge_interop::peers::drm_info::in_formats(text, None);
        let _ = dmabridge_interop::peers::drm_info::in_formats(text, Some(1));
    }
    let Ok(set) = kms::parse_in_formats(data) else { return false };
    modifier_names(&set);
    let blob = kms::write_in_formats(&set);
    let again = kms::parse_in_formats(&blob).unwrap_or_else(|e| panic!("written blob does not parse: {e}"));
    assert!(same_pairs(&set, &again), "{set:?} != {again:?}");
    true
}

/// The first byte says how many of the next bytes are a tranche index array; the rest is
/// a format table.
pub fn wayland_table(data: &[u8]) -> bool {
    let Some((&n, rest)) = data.split_first() else { return false };
    let split = usize::from(n).min(rest.len());
    let (indices, table) = rest.split_at(split);
    let Ok(formats) = wayland::parse_format_table(table) else { return false };
    assert_eq!(wayland::parse_format_table(&wayland::write_format_table(&formats)).as_ref(), Ok(&formats));
    match wayland::tranche_formats(&formats, indices) {
        Ok(set) => {
            modifier_names(&set);
            assert!(set.len() <= indices.len() / 2);
            true
        }
        Err(_) => false,
    }
}

/// Bytes as a `v4l2_format` (width, height, a table index or raw code, then bytesperline
/// and sizeimage pairs) for `plane_layouts`, and as text for `formats_of_list`; either
/// accepting counts.
pub fn v4l2_format(data: &[u8]) -> bool {
    let listed = std::str::from_utf8(data).is_ok_and(|text| v4l2::formats_of_list(text).is_ok());
    let word = |i: usize| -> u32 {
        let mut w = [0u8; 4];
        for (k, b) in w.iter_mut().enumerate() {
            *b = data.get(i * 4 + k).copied().unwrap_or(0);
        }
        u32::from_le_bytes(w)
    };
    let selector = word(2);
    let pixelformat = match v4l2::V4L2_FORMATS.get(selector as usize % 64) {
        Some(e) if selector & 0x8000_0000 == 0 => e.pixfmt.code(),
        _ => selector,
    };
    let count = (word(3) % 5) as usize;
    let planes =
        (0..count).map(|p| v4l2::V4l2Plane { bytesperline: word(4 + 2 * p), sizeimage: word(5 + 2 * p) }).collect();
    let fmt = v4l2::V4l2PlaneFormat { width: word(0), height: word(1), pixelformat, planes };
    let Ok(layouts) = v4l2::plane_layouts(&fmt) else { return listed };
    for l in &layouts {
        assert!(l.object < fmt.planes.len());
        let buffer_size = fmt.planes.get(l.object).map_or(0, |p| u64::from(p.sizeimage));
        assert!(l.offset.checked_add(l.size).is_some_and(|end| end <= buffer_size), "{l:?} in {fmt:?}");
    }
    true
}

/// Reads fuzzer bytes as numbers, zeros once they run out, so that every input is some
/// descriptor (the fuzzer finds its way to the interesting ones).
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        for b in a.iter_mut() {
            *b = self.data.get(self.pos).copied().unwrap_or(0);
            self.pos += 1;
        }
        a
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    /// Mostly small, sometimes anything: a selector byte, then 1, 2 or 4 bytes.
    fn extent(&mut self) -> u32 {
        match self.u8() % 4 {
            0 | 1 => u32::from(self.u8()),
            2 => u32::from(self.u16()),
            _ => self.u32(),
        }
    }
    /// Offsets and strides: small, or anything.
    fn size(&mut self) -> u64 {
        match self.u8() % 4 {
            0 | 1 => u64::from(self.u16()),
            2 => u64::from(self.u32()),
            _ => self.u64(),
        }
    }
    fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }
}

/// A fourcc dmabridge knows (most of the time) or any code.
fn pick_fourcc(r: &mut Bytes<'_>) -> dmabridge_interop::Fourcc {
    use dmabridge_interop::{Fourcc, FORMAT_INFO};
    let sel = usize::from(r.u8());
    match FORMAT_INFO.get(sel % (FORMAT_INFO.len() + 2)) {
        Some(i) => i.fourcc,
        None => Fourcc::from_code(r.u32()),
    }
}

/// What a plane's fd is, in [`import_checks`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum FileSort {
    Memfd,
    SealedMemfd,
    Pipe,
    Directory,
    Socket,
    DevNull,
}

fn open_file(sort: FileSort, size: u64) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
    Some(match sort {
        FileSort::Memfd => {
            let fd = memfd_create("fuzz", MemfdFlags::CLOEXEC).ok()?;
            ftruncate(&fd, size).ok()?;
            fd
        }
        FileSort::SealedMemfd => dmabridge_interop::dmabuf::sealed_memfd_of_size("fuzz", size).ok()?,
        FileSort::Pipe => rustix::pipe::pipe().ok()?.0,
        FileSort::Directory => std::fs::File::open("/").ok()?.into(),
        FileSort::Socket => std::os::unix::net::UnixStream::pair().ok()?.0.into(),
        FileSort::DevNull => std::fs::File::open("/dev/null").ok()?.into(),
    })
}

/// `check_import_with` on a descriptor made of fuzzed numbers and real fds: memfds (sealed or
/// not) of fuzzed sizes, and now and then a pipe, a directory, a socket or /dev/null. What it
/// accepts must hold: every plane inside its file, the extent within the device's and a whole
/// number of chroma blocks, the class of every fd what it is, and `read_plane` reading
/// exactly the plane. Returns whether the checks passed.
pub fn import_checks(data: &[u8]) -> bool {
    use dmabridge_interop::dmabuf::{
        check_import_with, DmaBuf, FdClass, FdTrust, ImportFacts, ImportOptions, NotFixedReason, PlaneDesc,
    };
    use dmabridge_interop::{format_info, Format, Layout, Modifier};

    let mut r = Bytes::new(data);
    let fourcc = pick_fourcc(&mut r);
    let layout = match r.u8() % 4 {
        0 | 1 => Layout::Explicit(Modifier::LINEAR),
        2 => Layout::Implicit,
        _ => Layout::Explicit(Modifier::from_raw(r.u64())),
    };
    let (width, height) = (r.extent(), r.extent());
    let planes = 1 + usize::from(r.u8() % 4);
    let files: Vec<(FileSort, u64)> = (0..planes)
        .map(|_| {
            let sort = match r.u8() % 16 {
                0..=6 => FileSort::Memfd,
                7..=11 => FileSort::SealedMemfd,
                12 => FileSort::Pipe,
                13 => FileSort::Directory,
                14 => FileSort::Socket,
                _ => FileSort::DevNull,
            };
            // Sparse memfds: the size costs no memory.
            (sort, u64::from(r.u32() % (1 << 24)))
        })
        .collect();
    let Some(fds) = files.iter().map(|&(sort, size)| open_file(sort, size)).collect::<Option<Vec<_>>>() else {
        return false;
    };
    let mut descs = Vec::with_capacity(planes);
    let mut plane_files = Vec::with_capacity(planes);
    for _ in 0..planes {
        let f = usize::from(r.u8()) % fds.len();
        let Ok(fd) = fds[f].try_clone() else { return false };
        descs.push(PlaneDesc { fd, offset: r.size(), stride: r.size() });
        plane_files.push(f);
    }
    let facts = ImportFacts {
        memory_plane_count: usize::from(r.u8() % 5),
        max_width: r.extent(),
        max_height: r.extent(),
        disjoint: r.u8() & 1 != 0,
    };
    let allowed = r.u8() % 8 != 0;
    let flags = r.u8();
    let options = ImportOptions {
        trust: if flags & 1 != 0 { FdTrust::TrustRegularFiles } else { FdTrust::Untrusted },
        require_zero_copy: flags & 2 != 0,
    };
    let Ok(buf) = DmaBuf::new(fourcc, layout, width, height, descs) else { return false };
    let device = |_: Format| allowed.then_some(facts);
    let checked = match check_import_with(&buf, &device, options) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.to_string();
            return false;
        }
    };
    let info = format_info(fourcc).expect("check 1 passed, so the format is known");
    assert!(width <= facts.max_width && height <= facts.max_height);
    assert!(info.extent_fits_subsampling(width, height), "{fourcc} {width}x{height}");
    assert_eq!(checked.planes().len(), facts.memory_plane_count);
    for (i, p) in checked.planes().iter().enumerate() {
        let (sort, size) = files[plane_files[i]];
        assert!(p.offset <= p.end && p.end <= p.file.size, "plane {i}: {p:?}");
        assert_eq!(p.file.size, size, "plane {i}");
        assert_eq!(Some(p.end), p.stride.checked_mul(u64::from(p.rows)).and_then(|b| b.checked_add(p.offset)));
        let class = match (sort, options.trust) {
            (FileSort::SealedMemfd, _) => FdClass::SealedMemfd,
            (FileSort::Memfd, FdTrust::TrustRegularFiles) => FdClass::TrustedFile,
            (FileSort::Memfd, FdTrust::Untrusted) => FdClass::Shrinkable(NotFixedReason::MissingSealShrink),
            _ => panic!("plane {i}: a special file passed the checks"),
        };
        assert_eq!(p.file.class, class, "plane {i}");
        if p.size() <= 1 << 16 {
            let bytes = checked.read_plane(i, 1 << 16).expect("plane exists").expect("a plane inside its file reads");
            assert_eq!(bytes.len() as u64, p.size());
        }
    }
    assert!(!options.require_zero_copy || checked.zero_copy_safe());
    assert!(checked.read_plane(planes, u64::MAX).is_none());
    true
}

/// `tiled_size`, `packed_planes`, the address functions, the GPU parameters and, for small
/// frames, the CPU tile/detile round trip and colour conversions, for a fuzzed layout,
/// fourcc and extent. Everything consistent, nothing panics. Returns whether the geometry
/// exists.
pub fn tiling_geometry(data: &[u8]) -> bool {
    use dmabridge_interop::tiling::{
        detile, detile_fast, detile_to_vec, gpu, packed_planes, rgb_to_nv12_vec, tile, tile_fast, tile_to_vec, tiled_size,
        tiled_yuv_to_rgb_fast, yuv_to_rgb_vec, AddressKind, ColourMatrix, ColourRange, PlaneAddress, TiledFrame, RGB8_FORMATS,
    };
    use dmabridge_interop::dmabuf::{plane_rows, PlaneLayout};
    use dmabridge_interop::{format_info, Fourcc, TileLayout};

    let mut r = Bytes::new(data);
    let layout = match usize::from(r.u8()) % (TileLayout::ALL.len() + 1) {
        i if i < TileLayout::ALL.len() => TileLayout::ALL[i],
        _ => TileLayout::NvidiaBlockLinear(r.u8()),
    };
    let fourcc = pick_fourcc(&mut r);
    let (width, height) = (r.extent(), r.extent());
    let g = match tiled_size(layout, fourcc, width, height) {
        Ok(g) => g,
        Err(e) => {
            let _ = e.to_string();
            let _ = packed_planes(fourcc, width, height);
            return false;
        }
    };
    let info = format_info(fourcc).expect("a geometry exists only for known formats");
    assert_eq!(g.planes.len(), info.plane_count());
    let mut offset = 0u64;
    for (i, p) in g.planes.iter().enumerate() {
        assert_eq!(p.offset, offset, "planes are back to back");
        assert_eq!(u64::from(p.width_bytes), info.min_stride(i, width));
        assert_eq!(p.rows, info.plane_height(i, height));
        assert!(p.padded_width_bytes >= p.width_bytes && p.padded_rows >= p.rows);
        assert_eq!(u64::from(p.tiles_x) * u64::from(p.tile_width), u64::from(p.padded_width_bytes));
        assert_eq!(u64::from(p.tiles_y) * u64::from(p.tile_height), u64::from(p.padded_rows));
        assert_eq!(p.size, u64::from(p.padded_width_bytes) * u64::from(p.padded_rows));
        let a = PlaneAddress::of(p);
        for (x, y) in [(0, 0), (p.width_bytes - 1, p.rows - 1), (p.padded_width_bytes - 1, p.padded_rows - 1)] {
            let o = a.checked_offset(x, y).unwrap_or_else(|| panic!("({x}, {y}) is inside plane {i}"));
            assert_eq!(o, a.offset(x, y));
            assert!(o < p.size, "({x}, {y}) -> {o} outside the {}-byte plane {i}", p.size);
        }
        assert_eq!(a.checked_offset(p.padded_width_bytes, 0), None);
        if a.kind != AddressKind::Linear {
            assert_eq!(a.checked_offset(0, p.padded_rows), None);
        }
        offset += p.size;
    }
    assert_eq!(g.size, offset);
    let packed = packed_planes(fourcc, width, height).expect("the linear geometry exists when a tiled one does");
    let frame = TiledFrame { layout, fourcc, extent: (width, height) };
    for to_tiled in [false, true] {
        let _ = gpu::plane_dispatches(frame, u64::from(r.u16()), &packed, to_tiled);
    }
    let linear_size = tiled_size(TileLayout::Linear, fourcc, width, height).map(|l| l.size).unwrap_or(u64::MAX);
    if g.size <= 1 << 16 && linear_size <= 1 << 16 {
        let linear: Vec<u8> = r.rest().iter().copied().cycle().take(linear_size as usize).collect();
        if linear.len() as u64 == linear_size {
            let tiled = tile_to_vec(layout, fourcc, width, height, &linear).expect("tiling a whole frame works");
            assert_eq!(tiled.len() as u64, g.size);
            let back = detile_to_vec(layout, fourcc, width, height, &tiled).expect("detiling a whole frame works");
            assert_eq!(back, linear, "{layout} {fourcc} {width}x{height} does not round-trip");
            // The fast paths write exactly what the reference writes.
            let threads = usize::from(r.u8() % 4);
            let mut fast = vec![0u8; linear.len()];
            detile_fast(frame, &tiled, (&mut fast, &packed), threads).expect("fast detile");
            assert_eq!(fast, linear, "fast detile of {layout} {fourcc} {width}x{height}");
            let mut fast_tiled = vec![0xffu8; tiled.len()];
            tile_fast(frame, (&linear, &packed), &mut fast_tiled, threads).expect("fast tile");
            assert_eq!(fast_tiled, tiled, "fast tile of {layout} {fourcc} {width}x{height}");
            let (m, rg) = (ColourMatrix::ALL[usize::from(r.u8()) % 3], ColourRange::Limited);
            let to = RGB8_FORMATS[usize::from(r.u8()) % RGB8_FORMATS.len()];
            if fourcc == Fourcc::NV12 || fourcc == Fourcc::P010 {
                let want = yuv_to_rgb_vec((fourcc, to), (m, rg), (width, height), &linear).expect("whole NV12/P010 frames convert");
                let mut got = vec![0u8; want.len()];
                let plane = PlaneLayout::linear(0, u64::from(width) * 4, height);
                tiled_yuv_to_rgb_fast(frame, to, (m, rg), &tiled, (&mut got, plane), threads).expect("fused");
                assert_eq!(got, want, "fused {layout} {fourcc} -> {to} {width}x{height}");
            }
            if RGB8_FORMATS.contains(&fourcc) {
                rgb_to_nv12_vec(fourcc, (m, rg), (width, height), &linear).expect("whole RGB frames convert");
            }
        }
        // Caller-chosen plane placements and buffer lengths: an error or a conversion,
        // never a panic or an out-of-bounds write.
        let planes: Vec<PlaneLayout> = (0..info.plane_count())
            .map(|i| PlaneLayout::linear(u64::from(r.u16()), u64::from(r.u16()), plane_rows(fourcc, i, height)))
            .collect();
        let (a, b) = (usize::from(r.u16()), usize::from(r.u16()));
        let mut dst = vec![0u8; b];
        let _ = tile(frame, (&vec![0u8; a], &planes), &mut dst);
        let _ = detile(frame, &vec![0u8; a], (&mut dst, &planes));
        let _ = tile_fast(frame, (&vec![0u8; a], &planes), &mut dst, 2);
        let _ = detile_fast(frame, &vec![0u8; a], (&mut dst, &planes), 2);
    }
    true
}

/// The handoff wire decoder: any bytes give a message or a typed error, and whatever decodes
/// re-encodes to exactly the bytes it came from (one encoding per message, so nothing a peer
/// sends is silently reinterpreted), with the header's fd count and fence flag matching the
/// message's.
pub fn handoff_wire(data: &[u8]) -> bool {
    use dmabridge_interop::dmabuf::wire;
    let header = wire::decode_header(data);
    let Ok(msg) = wire::decode(data) else { return false };
    assert_eq!(wire::encode(&msg).ok().as_deref(), Some(data));
    let h = header.expect("a message that decodes has a header that does");
    assert_eq!(usize::from(h.fd_count), msg.fd_count());
    assert_eq!(wire::has_fence(&h), msg.has_fence());
    assert!(msg.fd_count() <= wire::MAX_FDS);
    true
}

/// The collection wire decoder: any bytes give a message or a typed error, never a panic;
/// every message that decodes re-encodes to exactly the bytes it came from, within the cap,
/// with at most one fd (a token's socket).
pub fn collection_wire(data: &[u8]) -> bool {
    use dmabridge_interop::collection::wire;
    let Ok(msg) = wire::decode(data) else { return false };
    assert_eq!(wire::encode(&msg).ok().as_deref(), Some(data));
    assert!(data.len() <= wire::MAX_MESSAGE_LEN);
    assert!(msg.fd_count() <= 1);
    true
}

/// A forged collection server: `data` is what the server side of a token's socket sends in
/// answer to a bind, as packets of `[length u16 LE][fds u8][bytes]` (at most 16), each
/// packet sent with the fds its byte picks (low 3 bits: none, a sealed 12288-byte memfd, a
/// sealed 4096-byte memfd, a memfd that can shrink, a pipe, a read-only sealed memfd; bits
/// 3-4: one to four of them). The server then stops sending. The token's bind must return
/// buffers or a typed error, never panic or hang, and every buffer it does return passes
/// the client's checks (`collection::check_received`). (The fuzz target also counts the
/// process's fds around each input: every fd sent that is not returned is closed.)
pub fn forged_server(data: &[u8]) -> bool {
    use std::os::fd::{AsFd, OwnedFd};
    use std::time::Duration;
    use dmabridge_interop::collection::{check_received, transport, Token};
    use dmabridge_interop::dmabuf::{sealed_memfd_of_size, socketpair};
    use dmabridge_interop::negotiate::{Constraints, ExtentRange, Participant};
    use dmabridge_interop::{Format, Fourcc};

    fn fd(kind: u8) -> Option<OwnedFd> {
        Some(match kind {
            1 => sealed_memfd_of_size("forged", 12288).ok()?,
            2 => sealed_memfd_of_size("forged", 4096).ok()?,
            3 => {
                let fd = rustix::fs::memfd_create("forged", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
                rustix::fs::ftruncate(&fd, 12288).ok()?;
                fd
            }
            4 => rustix::pipe::pipe().ok()?.0,
            5 => {
                let fd = sealed_memfd_of_size("forged", 12288).ok()?;
                let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
                rustix::fs::open(path.as_str(), rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty()).ok()?
            }
            _ => return None,
        })
    }

    let read_only = data.first().is_some_and(|b| b & 1 == 1);
    let accepted = {
        let (ours, theirs) = socketpair().expect("socketpair");
        let mut rest = data.get(1..).unwrap_or_default();
        for _ in 0..16 {
            let [lo, hi, pick, tail @ ..] = rest else { break };
            let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
            let fds: Vec<OwnedFd> = (0..=((pick >> 3) & 3)).filter_map(|_| fd(pick & 7)).collect();
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            // A packet the socket refuses (too long, the buffer full) is simply not sent.
            let _ = transport::send_raw(theirs.as_fd(), &tail[..len], &borrowed);
            rest = &tail[len..];
        }
        // The server stops sending: the bind ends at the end of what was sent.
        let _ = rustix::net::shutdown(&theirs, rustix::net::Shutdown::Write);
        let holder = Participant::new("holder", [Format::linear(Fourcc::XRGB8888)].into_iter().collect()).with_constraints(Constraints {
            width: ExtentRange::exactly(64),
            height: ExtentRange::exactly(48),
            min_buffers: 1,
            read_only,
            ..Default::default()
        });
        let mut token = Token::from_fd(ours);
        let got = token.bind(&holder, Duration::from_secs(2));
        let accepted = match &got {
            Ok(b) => {
                for (i, buf) in b.buffers.iter().enumerate() {
                    check_received(i as u32, buf, &b.reconciled, read_only).expect("a returned buffer passes the client's checks");
                }
                true
            }
            Err(_) => false,
        };
        drop(got);
        drop(token);
        drop(theirs);
        accepted
    };
    accepted
}

/// A buffer of its own anonymous mapping, between two pages that cannot be touched: its
/// last byte just before the one after (or, `at_start`, its first just after the one
/// before), so that a read or write one byte outside it faults at once, with or without
/// ASan (which does not see into mappings).
struct Guarded {
    map: *mut std::ffi::c_void,
    map_len: usize,
    at: usize,
    len: usize,
}

impl Guarded {
    /// `len` bytes of `fill`, or `None` when the mapping cannot be made.
    fn new(len: usize, at_start: bool, fill: impl Fn(usize) -> u8) -> Option<Guarded> {
        use rustix::mm::{mmap_anonymous, mprotect, MapFlags, MprotectFlags, ProtFlags};
        let page = rustix::param::page_size();
        let body = len.div_ceil(page).max(1) * page;
        let map_len = body + 2 * page;
        // SAFETY: a new private anonymous mapping at an address the kernel picks: it aliases
        // nothing of this process.
        let map = unsafe { mmap_anonymous(std::ptr::null_mut(), map_len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE) }.ok()?;
        let g = Guarded { map, map_len, at: if at_start { page } else { page + body - len }, len };
        // SAFETY: the first and the last page of the mapping just made, which nothing refers to
        // (the buffer lies between them).
        unsafe {
            mprotect(map, page, MprotectFlags::empty()).ok()?;
            mprotect(map.cast::<u8>().add(page + body).cast(), page, MprotectFlags::empty()).ok()?;
        }
        let mut g = g;
        for (i, b) in g.bytes_mut().iter_mut().enumerate() {
            *b = fill(i);
        }
        Some(g)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `at..at + len` lies in the readable and writable pages of the mapping this
        // value owns until it is dropped; the borrow of `self` keeps it alive and unshared.
        unsafe { std::slice::from_raw_parts(self.map.cast::<u8>().add(self.at), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and the mutable borrow of `self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.map.cast::<u8>().add(self.at), self.len) }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, whose bytes no slice borrows any more (they
        // borrowed `self`).
        let _ = unsafe { rustix::mm::munmap(self.map, self.map_len) };
    }
}

/// The most bytes one buffer of [`cpu_differential`] may take.
const DIFFERENTIAL_MAX_BUFFER: u64 = 8 << 20;

/// A small extent, odd or tiny most of the time.
fn small_extent(r: &mut Bytes<'_>) -> u32 {
    match r.u8() % 4 {
        0 => 1 + u32::from(r.u8() % 4),
        1 => 1 + u32::from(r.u8() % 64),
        2 => 1 + u32::from(r.u16() % 384),
        _ => 1 + u32::from(r.u8()),
    }
}

/// Linear planes for `fourcc` at `width` x `height`, placed as the input says: strides the
/// minimum or padded (by a few bytes, or to 64 or 256), planes back to back, with gaps, in
/// reverse order, or anywhere (overlapping, or past the buffer: the conversions must refuse
/// those, or agree); and the buffer length that holds them, less a few bytes now and then.
fn linear_planes(r: &mut Bytes<'_>, fourcc: dmabridge_interop::Fourcc, width: u32, height: u32) -> Option<(Vec<dmabridge_interop::dmabuf::PlaneLayout>, u64)> {
    use dmabridge_interop::dmabuf::{plane_rows, PlaneLayout};
    let info = dmabridge_interop::format_info(fourcc)?;
    let n = info.plane_count();
    let strides: Vec<u64> = (0..n)
        .map(|i| {
            let min = info.min_stride(i, width);
            match r.u8() % 4 {
                0 | 1 => min,
                2 => min + u64::from(r.u8() % 32),
                _ => min.next_multiple_of(if r.u8() & 1 == 0 { 64 } else { 256 }),
            }
        })
        .collect();
    let rows: Vec<u32> = (0..n).map(|i| plane_rows(fourcc, i, height)).collect();
    let sizes: Vec<u64> = (0..n).map(|i| strides[i].saturating_mul(u64::from(rows[i]))).collect();
    let mut offsets = vec![0u64; n];
    match r.u8() % 4 {
        // Back to back, from 0.
        0 => (1..n).for_each(|i| offsets[i] = offsets[i - 1] + sizes[i - 1]),
        // A first offset and gaps.
        1 => {
            offsets[0] = u64::from(r.u8());
            (1..n).for_each(|i| offsets[i] = offsets[i - 1] + sizes[i - 1] + u64::from(r.u8()));
        }
        // The last plane first.
        2 => {
            let mut at = 0;
            for i in (0..n).rev() {
                offsets[i] = at;
                at += sizes[i];
            }
        }
        // Anywhere.
        _ => offsets.iter_mut().for_each(|o| *o = u64::from(r.u16())),
    }
    let planes: Vec<PlaneLayout> = (0..n).map(|i| PlaneLayout::linear(offsets[i], strides[i], rows[i])).collect();
    let end = planes.iter().map(|p| p.offset.saturating_add(p.size)).max().unwrap_or(0);
    let short = if r.u8() % 8 == 0 { u64::from(r.u8() % 8) + 1 } else { 0 };
    Some((planes, end.saturating_sub(short)))
}

/// The CPU fast paths against the scalar references, on buffers that end (or start) at a
/// page that faults: for a layout of `TILE_LAYOUTS`, a fourcc, a small extent (odd and tiny
/// ones too), linear planes with minimum or padded strides at fuzzed offsets, a thread count
/// and one of detile, tile, tiled NV12/P010 -> RGB fused, RGB -> NV12, or a whole
/// `FrameConversion::run_cpu_into` (against the references step by step). Both sides must
/// refuse, or both write the same bytes (every byte of the destination compared, so a
/// write outside the planes shows too). Returns whether the conversion ran.
pub fn cpu_differential(data: &[u8]) -> bool {
    use dmabridge_interop::dmabuf::PlaneLayout;
    use dmabridge_interop::tile_layout::TILE_LAYOUTS;
    use dmabridge_interop::tiling::{
        detile, detile_fast, detile_to_vec, packed_planes, rgb_to_nv12, rgb_to_nv12_fast, rgb_to_nv12_vec, test_pattern, tile,
        tile_fast, tile_to_vec, tiled_size, tiled_yuv_to_rgb_fast, yuv_to_rgb, yuv_to_rgb_vec, ColourMatrix, ColourRange,
        FrameConversion, Step, TiledFrame, RGB10_FORMATS, RGB8_FORMATS,
    };
    use dmabridge_interop::Fourcc;

    let mut r = Bytes::new(data);
    let kind = r.u8() % 5;
    let layout = TILE_LAYOUTS[usize::from(r.u8()) % TILE_LAYOUTS.len()].layout;
    let yuv = |r: &mut Bytes<'_>| match r.u8() % 8 {
        0..=4 => Fourcc::NV12,
        5 | 6 => Fourcc::P010,
        _ => pick_fourcc(r),
    };
    let rgb = |r: &mut Bytes<'_>| match r.u8() {
        b if b < 240 => RGB8_FORMATS.into_iter().chain(RGB10_FORMATS).nth(usize::from(b) % 10).unwrap_or(Fourcc::XRGB8888),
        _ => pick_fourcc(r),
    };
    let (width, height) = (small_extent(&mut r), small_extent(&mut r));
    let threads = usize::from(r.u8() % 5);
    let matrix = ColourMatrix::ALL[usize::from(r.u8()) % ColourMatrix::ALL.len()];
    let range = if r.u8() & 1 == 0 { ColourRange::Limited } else { ColourRange::Full };
    let placement = r.u8();
    let seed = r.u32();
    // A source of `len` bytes: the input's bytes from `rest` on, repeated, or a pattern when
    // none are left.
    let source = |len: u64, rest: &[u8]| -> Option<Guarded> {
        if len > DIFFERENTIAL_MAX_BUFFER {
            return None;
        }
        let pattern = if rest.is_empty() { test_pattern(len as usize, seed) } else { Vec::new() };
        Guarded::new(len as usize, placement & 1 != 0, |i| if rest.is_empty() { pattern[i] } else { rest[i % rest.len()] })
    };
    // A destination the two sides each get a copy of, prefilled the same.
    let dest = |len: u64| -> Option<(Guarded, Guarded)> {
        if len > DIFFERENTIAL_MAX_BUFFER {
            return None;
        }
        let fill = |i: usize| (i as u8).wrapping_mul(31) ^ 0x5a;
        Some((Guarded::new(len as usize, placement & 2 != 0, fill)?, Guarded::new(len as usize, placement & 2 != 0, fill)?))
    };
    /// Both refuse, or both succeed with the same bytes.
    fn agree<E: std::fmt::Display, F: std::fmt::Display>(what: &str, fast: Result<(), E>, reference: Result<(), F>, got: &Guarded, want: &Guarded) -> bool {
        match (fast, reference) {
            (Ok(()), Ok(())) => {
                if let Some(at) = got.bytes().iter().zip(want.bytes()).position(|(a, b)| a != b) {
                    panic!("{what}: the fast path writes {:#04x} at byte {at} of {}, the reference {:#04x}", got.bytes()[at], got.len, want.bytes()[at]);
                }
                true
            }
            (Err(f), Err(e)) => {
                let _ = (f.to_string(), e.to_string());
                false
            }
            (Ok(()), Err(e)) => panic!("{what}: the fast path converts what the reference refuses ({e})"),
            (Err(f), Ok(())) => panic!("{what}: the fast path refuses ({f}) what the reference converts"),
        }
    }

    match kind {
        // Tiled -> linear, and linear -> tiled, into linear planes placed as the input says.
        0 | 1 => {
            let fourcc = pick_fourcc(&mut r);
            let Ok(g) = tiled_size(layout, fourcc, width, height) else { return false };
            let Some((planes, linear_len)) = linear_planes(&mut r, fourcc, width, height) else { return false };
            let short = if r.u8() % 8 == 0 { u64::from(r.u8() % 8) + 1 } else { 0 };
            let tiled_len = g.size.saturating_sub(short);
            let what = format!("{} {layout} {fourcc} {width}x{height} on {threads} threads, planes {planes:?}", if kind == 0 { "detile" } else { "tile" });
            let frame = TiledFrame { layout, fourcc, extent: (width, height) };
            if kind == 0 {
                let Some(src) = source(tiled_len, r.rest()) else { return false };
                let Some((mut got, mut want)) = dest(linear_len) else { return false };
                let fast = detile_fast(frame, src.bytes(), (got.bytes_mut(), &planes), threads).map(drop);
                let reference = detile(frame, src.bytes(), (want.bytes_mut(), &planes)).map(drop);
                agree(&what, fast, reference, &got, &want)
            } else {
                let Some(src) = source(linear_len, r.rest()) else { return false };
                let Some((mut got, mut want)) = dest(tiled_len) else { return false };
                let fast = tile_fast(frame, (src.bytes(), &planes), got.bytes_mut(), threads).map(drop);
                let reference = tile(frame, (src.bytes(), &planes), want.bytes_mut()).map(drop);
                agree(&what, fast, reference, &got, &want)
            }
        }
        // Tiled NV12/P010 -> RGB in one pass, against detile then the colour reference.
        2 => {
            let (from, to) = (yuv(&mut r), rgb(&mut r));
            let Ok(g) = tiled_size(layout, from, width, height) else { return false };
            let short = if r.u8() % 8 == 0 { u64::from(r.u8() % 8) + 1 } else { 0 };
            let bpp = if to == Fourcc::XRGB8888 || RGB8_FORMATS.contains(&to) || RGB10_FORMATS.contains(&to) { 4 } else { 1 };
            let min = u64::from(width) * bpp;
            let stride = match r.u8() % 4 {
                0 | 1 => min,
                2 => min + u64::from(r.u8() % 64),
                _ => min.next_multiple_of(64),
            };
            let offset = if r.u8() % 2 == 0 { 0 } else { u64::from(r.u8()) };
            let plane = PlaneLayout::linear(offset, stride, height);
            let dst_len = (offset + stride * u64::from(height)).saturating_sub(if r.u8() % 8 == 0 { u64::from(r.u8() % 8) + 1 } else { 0 });
            let Some(src) = source(g.size.saturating_sub(short), r.rest()) else { return false };
            let Some((mut got, mut want)) = dest(dst_len) else { return false };
            let what = format!("fused {layout} {from} -> {to} {width}x{height} {matrix:?} {range:?} on {threads} threads, {plane:?}");
            let fast = tiled_yuv_to_rgb_fast(TiledFrame { layout, fourcc: from, extent: (width, height) }, to, (matrix, range), src.bytes(), (got.bytes_mut(), plane), threads);
            let reference = detile_to_vec(layout, from, width, height, src.bytes()).map_err(|e| e.to_string()).and_then(|linear| {
                let packed = packed_planes(from, width, height).map_err(|e| e.to_string())?;
                yuv_to_rgb((from, to), (matrix, range), (width, height), (&linear, &packed), (want.bytes_mut(), plane)).map_err(|e| e.to_string())
            });
            agree(&what, fast, reference, &got, &want)
        }
        // 8-bit RGB -> NV12.
        3 => {
            let from = rgb(&mut r);
            let (Some((src_planes, src_len)), Some((dst_planes, dst_len))) = (
                linear_planes(&mut r, from, width, height),
                linear_planes(&mut r, Fourcc::NV12, width, height),
            ) else {
                return false;
            };
            let Some(src) = source(src_len, r.rest()) else { return false };
            let Some((mut got, mut want)) = dest(dst_len) else { return false };
            let what = format!("rgb->nv12 {from} {width}x{height} {matrix:?} {range:?} on {threads} threads, {src_planes:?} -> {dst_planes:?}");
            let fast = rgb_to_nv12_fast(from, (matrix, range), (width, height), (src.bytes(), src_planes[0]), (got.bytes_mut(), &dst_planes), threads);
            let reference = rgb_to_nv12(from, (matrix, range), (width, height), (src.bytes(), src_planes[0]), (want.bytes_mut(), &dst_planes));
            agree(&what, fast, reference, &got, &want)
        }
        // A whole frame, against the references step by step.
        _ => {
            let (from, to) = match r.u8() % 4 {
                0 => (yuv(&mut r), rgb(&mut r)),
                1 => (rgb(&mut r), Fourcc::NV12),
                2 => {
                    let f = pick_fourcc(&mut r);
                    (f, f)
                }
                _ => (pick_fourcc(&mut r), pick_fourcc(&mut r)),
            };
            let to_layout = TILE_LAYOUTS[usize::from(r.u8()) % TILE_LAYOUTS.len()].layout;
            let c = FrameConversion { matrix, range, ..FrameConversion::new((layout, from), (to_layout, to), width, height) };
            let Ok((in_size, out_size)) = c.sizes() else {
                assert!(c.run_cpu_into(&[], &mut [], threads).is_err(), "{c}: no sizes, yet it runs");
                return false;
            };
            let short = if r.u8() % 8 == 0 { u64::from(r.u8() % 8) + 1 } else { 0 };
            let extra = if r.u8() % 4 == 0 { u64::from(r.u8() % 64) } else { 0 };
            let Some(input) = source(in_size.saturating_sub(short), r.rest()) else { return false };
            let Some((mut got, mut want)) = dest(out_size + extra) else { return false };
            let what = format!("{c} {matrix:?} {range:?} on {threads} threads, input {} bytes", input.len);
            let fast = c.run_cpu_into(input.bytes(), got.bytes_mut(), threads);
            let reference = (|| -> Result<(), String> {
                let steps = c.steps().map_err(|e| e.to_string())?;
                let e = |e: &dyn std::fmt::Display| e.to_string();
                let mut frame = input.bytes().get(..in_size as usize).ok_or("the input is short")?.to_vec();
                for step in steps {
                    frame = match step {
                        Step::Copy => frame,
                        Step::Detile(l) => detile_to_vec(l, from, width, height, &frame).map_err(|x| e(&x))?,
                        Step::Tile(l) => tile_to_vec(l, to, width, height, &frame).map_err(|x| e(&x))?,
                        Step::YuvToRgb { layout: l, from: f, to: t } => {
                            let linear = detile_to_vec(l, f, width, height, &frame).map_err(|x| e(&x))?;
                            yuv_to_rgb_vec((f, t), (matrix, range), (width, height), &linear).map_err(|x| e(&x))?
                        }
                        Step::RgbToNv12 { from: f } => rgb_to_nv12_vec(f, (matrix, range), (width, height), &frame).map_err(|x| e(&x))?,
                    };
                }
                want.bytes_mut().get_mut(..frame.len()).ok_or("the output is short")?.copy_from_slice(&frame);
                Ok(())
            })();
            agree(&what, fast, reference, &got, &want)
        }
    }
}
