//! A live KMS device, asserted from what the kernel reports. Everywhere: the typed errors of
//! opening what is no KMS device. In the kernel lab (`DMABRIDGE_TEST_CONFIG=kernel`,
//! `scripts/lab.sh --modules vgem,virtio_gpu`) virtio-gpu and vgem must be there: virtio-gpu's
//! planes, a framebuffer of its own memory shown through an atomic commit, and what it does
//! with foreign dma-bufs (the system heap's, vgem's), printed for the record.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use dmabridge_interop::dmabuf::{DmaBuf, DmaHeap, PlaneLayout};
use dmabridge_interop::peers::{kms, KmsDevice, KmsDeviceError, PlaneKind};
use dmabridge_interop::{Format, Fourcc, Layout, Modifier};

fn in_kernel_lab() -> bool {
    std::env::var("DMABRIDGE_TEST_CONFIG").as_deref() == Ok("kernel")
}

/// Open fds of this process: compared before and after, within one test (tests run on one
/// thread in the lab, `--test-threads=1`, so no other test opens fds meanwhile).
fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn cards() -> Vec<PathBuf> {
    let mut cards: Vec<PathBuf> = std::fs::read_dir("/dev/dri")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("card")))
                .collect()
        })
        .unwrap_or_default();
    cards.sort();
    cards
}

/// The sysfs driver of a card's device (`virtio_gpu` for virtio-gpu's virtio device).
fn sysfs_driver(card: &Path) -> Option<String> {
    let name = card.file_name()?.to_str()?;
    let link = std::fs::read_link(format!("/sys/class/drm/{name}/device/driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// virtio-gpu's card, which the lab must have.
fn virtio_gpu() -> Option<KmsDevice> {
    if !in_kernel_lab() {
        return None;
    }
    for card in cards() {
        if let Ok(dev) = KmsDevice::open(&card) {
            if dev.driver_name() == "virtio_gpu" {
                // The card's device is the virtio-gpu PCI function (driver virtio-pci) or,
                // on other transports, the virtio device itself (driver virtio_gpu).
                let sysfs = sysfs_driver(&card);
                assert!(
                    matches!(sysfs.as_deref(), Some("virtio-pci" | "virtio_gpu")),
                    "{}'s sysfs driver is {sysfs:?}",
                    card.display()
                );
                return Some(dev);
            }
        }
    }
    panic!("the kernel lab loads virtio_gpu, but no card in {:?} has the DRM driver virtio_gpu", cards());
}

/// vgem's card: a DRM device whose open as a KMS device fails, naming the driver.
fn vgem_card() -> PathBuf {
    for card in cards() {
        if let Err(KmsDeviceError::NotKms { driver, .. }) = KmsDevice::open(&card) {
            if driver == "vgem" {
                return card;
            }
        }
    }
    panic!("the kernel lab loads vgem, but no card in {:?} is vgem refused as a KMS device", cards());
}

/// A single-plane XR24 image in `fd`.
fn xr24(fd: OwnedFd, layout: Layout, width: u32, height: u32, pitch: u32) -> DmaBuf {
    DmaBuf::in_one_file(Fourcc::XRGB8888, layout, width, height, fd, &[PlaneLayout::linear(0, pitch.into(), height)])
        .unwrap()
}

/// The XR24 layout the plane lists, LINEAR first.
fn xr24_layout(dev: &KmsDevice) -> Layout {
    let plane = dev.plane_formats(None).unwrap();
    if plane.formats.contains(&Format::linear(Fourcc::XRGB8888)) {
        Layout::Explicit(Modifier::LINEAR)
    } else {
        assert!(plane.formats.contains(&Format::implicit(Fourcc::XRGB8888)), "{:?}", plane.formats);
        Layout::Implicit
    }
}

#[test]
fn opening_a_missing_path_is_a_typed_error_naming_it() {
    let path = Path::new("/dev/dri/card-that-does-not-exist");
    let e = KmsDevice::open(path).unwrap_err();
    assert!(matches!(e, KmsDeviceError::Open { .. }), "{e:?}");
    assert_eq!(e.errno(), Some(libc_enoent()));
    assert!(e.to_string().contains("/dev/dri/card-that-does-not-exist"), "{e}");
}

#[test]
fn opening_a_file_that_is_no_drm_device_is_a_typed_error_naming_it() {
    let e = KmsDevice::open(Path::new("/dev/null")).unwrap_err();
    assert!(matches!(e, KmsDeviceError::NotDrm { op: "DRM_IOCTL_VERSION", .. }), "{e:?}");
    assert_eq!(e.errno(), Some(rustix::io::Errno::NOTTY.raw_os_error()), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("/dev/null") && msg.contains("not a DRM device"), "{msg}");
}

fn libc_enoent() -> i32 {
    rustix::io::Errno::NOENT.raw_os_error()
}

#[test]
fn the_lab_has_vgem_which_is_no_kms_device() {
    if !in_kernel_lab() {
        return;
    }
    let card = vgem_card();
    let e = KmsDevice::open(&card).unwrap_err();
    println!("vgem ({}): {e}", card.display());
    let KmsDeviceError::NotKms { op, .. } = &e else { panic!("{e:?}") };
    // A render-only driver: the kernel refuses the KMS client caps (EOPNOTSUPP) before any
    // mode resources are asked for.
    assert_eq!(*op, "DRM_IOCTL_SET_CLIENT_CAP(DRM_CLIENT_CAP_UNIVERSAL_PLANES)", "{e}");
    assert_eq!(e.errno(), Some(rustix::io::Errno::OPNOTSUPP.raw_os_error()), "{e}");
    assert!(e.to_string().contains(&card.display().to_string()), "{e}");
}

#[test]
fn virtio_gpu_has_a_primary_plane_that_scans_out_xr24() {
    let Some(dev) = virtio_gpu() else { return };
    println!(
        "{}: driver {}, atomic {}, ADDFB2 modifiers {}",
        dev.path(),
        dev.driver_name(),
        dev.atomic(),
        dev.addfb2_modifiers()
    );
    assert!(dev.atomic(), "virtio-gpu is an atomic driver");
    let planes = dev.planes().unwrap();
    for p in &planes {
        println!(
            "plane {} {:?}: CRTCs {:?}, IN_FORMATS {}, {} formats: {:?}",
            p.id,
            p.kind,
            p.possible_crtcs,
            p.in_formats,
            p.formats.len(),
            p.formats
        );
    }
    let primary = dev.plane_formats(None).unwrap();
    assert_eq!(primary.kind, PlaneKind::Primary);
    assert_eq!(Some(&primary), planes.iter().find(|p| p.kind == PlaneKind::Primary));
    assert!(primary.formats.layouts(Fourcc::XRGB8888).next().is_some(), "no XR24 in {:?}", primary.formats);
    assert!(!primary.possible_crtcs.is_empty());
    // The kernel's rule: a plane has no IN_FORMATS exactly when its driver takes no
    // modifiers at all, and then every format it lists is implicit.
    for p in &planes {
        assert_eq!(p.in_formats, dev.addfb2_modifiers(), "plane {}", p.id);
        if !p.in_formats {
            assert!(p.formats.iter().all(|f| f.layout.is_implicit()), "{:?}", p.formats);
        }
    }

    let named = dev.plane_formats(Some(primary.id)).unwrap();
    assert_eq!(named, primary);
    let e = dev.plane_formats(Some(0xdead)).unwrap_err();
    assert!(matches!(e, KmsDeviceError::NoSuchPlane { plane: 0xdead, .. }), "{e:?}");

    let p = dev.participant("display", None).unwrap();
    assert_eq!(p.formats.as_set(), Some(&primary.formats));
    assert_eq!(p.sync, kms::SYNC_METHODS);
    let summary = dev.summary(None).unwrap();
    assert_eq!(summary.plane, primary.id);
    assert_eq!(summary.formats.len(), primary.formats.len());
    println!("summary: {}", serde_json::to_string(&summary).unwrap());

    let out = dev.output(None).unwrap();
    println!("output: connector {} ({}), CRTC {}, mode {:?}", out.connector, out.connector_name, out.crtc, out.mode);
    assert!(primary.possible_crtcs.contains(&out.crtc));
    assert!(out.mode.width > 0 && out.mode.height > 0);
}

#[test]
fn a_virtio_gpu_dumb_buffer_goes_through_prime_addfb2_and_an_atomic_commit() {
    let before = fd_count();
    {
        let Some(dev) = virtio_gpu() else { return };
        let out = dev.output(None).unwrap();
        let (w, h) = (out.mode.width, out.mode.height);
        let listed = xr24_layout(&dev);
        for layout in [Layout::Explicit(Modifier::LINEAR), Layout::Implicit] {
            let dumb = dev.dumb_buffer(w, h, 32).unwrap();
            println!("dumb buffer {w}x{h}: pitch {}, size {}", dumb.pitch, dumb.size);
            assert!(dumb.pitch >= w * 4 && dumb.size >= u64::from(dumb.pitch) * u64::from(h));
            assert!(dmabridge_interop::sync::is_dma_buf(dumb.fd.as_fd()).unwrap());
            let buf = xr24(dumb.fd, layout, w, h, dumb.pitch);
            match dev.add_framebuffer(&buf) {
                Ok(fb) => {
                    println!("ADDFB2 XR24 {layout:?}: accepted, fb {}", fb.id());
                    assert!(
                        layout.is_implicit() || dev.addfb2_modifiers(),
                        "a modifier taken without DRM_CAP_ADDFB2_MODIFIERS"
                    );
                    assert_eq!(fb.with_modifier(), !layout.is_implicit());
                    if layout == listed {
                        let shown = dev.show(&fb, None).unwrap();
                        println!("atomic commit (TEST_ONLY, then real) of {layout:?}: accepted: {shown:?}");
                        assert_eq!((shown.width, shown.height), (w, h));
                    }
                }
                Err(e) => {
                    println!("ADDFB2 XR24 {layout:?}: {e}");
                    assert!(matches!(e, KmsDeviceError::FramebufferRefused { .. }), "{e:?}");
                    assert_ne!(layout, listed, "the plane lists XR24 {listed:?} but ADDFB2 refused it: {e}");
                    assert_eq!(e.errno(), Some(rustix::io::Errno::INVAL.raw_os_error()), "{e}");
                }
            }
        }
        // A buffer smaller than the mode on a primary plane: the driver's verdict, typed.
        let (sw, sh) = (64, 64);
        let dumb = dev.dumb_buffer(sw, sh, 32).unwrap();
        let fb = dev.add_framebuffer(&xr24(dumb.fd, listed, sw, sh, dumb.pitch)).unwrap();
        match dev.show(&fb, None) {
            Ok(shown) => {
                println!("a {sw}x{sh} framebuffer on the primary plane: accepted: {shown:?}")
            }
            Err(e) => {
                println!("a {sw}x{sh} framebuffer on the primary plane: {e}");
                assert!(matches!(e, KmsDeviceError::CommitRefused { test_only: true, .. }), "{e:?}");
                assert!(e.to_string().contains("the driver refused the atomic commit at its TEST_ONLY check"), "{e}");
            }
        }
    }
    if in_kernel_lab() {
        assert_eq!(fd_count(), before, "fds leaked");
    }
}

/// The typed outcome of importing a foreign dma-buf into virtio-gpu, shown if accepted.
fn foreign_into_virtio_gpu(dev: &KmsDevice, what: &str, buf: DmaBuf) {
    match dev.add_framebuffer(&buf) {
        Ok(fb) => {
            println!("{what} into virtio-gpu: ADDFB2 accepted, fb {}", fb.id());
            match dev.show(&fb, None) {
                Ok(shown) => println!("{what}: shown: {shown:?}"),
                Err(e) => {
                    println!("{what}: {e}");
                    assert!(matches!(e, KmsDeviceError::CommitRefused { .. }), "{e:?}");
                }
            }
        }
        Err(e) => {
            println!("{what} into virtio-gpu: {e}");
            assert!(
                matches!(e, KmsDeviceError::ImportRefused { .. } | KmsDeviceError::FramebufferRefused { .. }),
                "{e:?}"
            );
            assert!(e.to_string().contains("the driver refused"), "{e}");
            assert!(e.errno().is_some(), "{e:?}");
        }
    }
}

#[test]
fn a_foreign_dma_buf_from_the_system_heap_is_imported_or_refused_typed() {
    let before = fd_count();
    {
        let Some(dev) = virtio_gpu() else { return };
        let out = dev.output(None).unwrap();
        let (w, h) = (out.mode.width, out.mode.height);
        let pitch = (w * 4).next_multiple_of(64);
        let heap = DmaHeap::open("system").unwrap();
        let fd = heap.alloc(u64::from(pitch) * u64::from(h)).unwrap();
        foreign_into_virtio_gpu(
            &dev,
            "system-heap dma-buf XR24 LINEAR",
            xr24(fd, Layout::Explicit(Modifier::LINEAR), w, h, pitch),
        );
    }
    if in_kernel_lab() {
        assert_eq!(fd_count(), before, "fds leaked");
    }
}

/// vgem's fd, for a dumb buffer of vgem's own (drm-rs's ioctls on a plain DRM fd).
struct Vgem(std::fs::File);

impl AsFd for Vgem {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl drm::Device for Vgem {}
impl drm::control::Device for Vgem {}

#[test]
fn a_vgem_dma_buf_is_imported_or_refused_typed() {
    let before = fd_count();
    {
        let Some(dev) = virtio_gpu() else { return };
        use drm::buffer::Buffer as _;
        use drm::control::Device as _;
        let out = dev.output(None).unwrap();
        let (w, h) = (out.mode.width, out.mode.height);
        let vgem = Vgem(std::fs::OpenOptions::new().read(true).write(true).open(vgem_card()).unwrap());
        let dumb = vgem.create_dumb_buffer((w, h), drm::buffer::DrmFourcc::Xrgb8888, 32).unwrap();
        let fd = vgem.buffer_to_prime_fd(dumb.handle(), drm::CLOEXEC | drm::RDWR).unwrap();
        let pitch = dumb.pitch();
        vgem.destroy_dumb_buffer(dumb).unwrap();
        println!("vgem dumb buffer {w}x{h}: pitch {pitch}");
        foreign_into_virtio_gpu(
            &dev,
            "vgem dma-buf XR24 LINEAR",
            xr24(fd, Layout::Explicit(Modifier::LINEAR), w, h, pitch),
        );
    }
    if in_kernel_lab() {
        assert_eq!(fd_count(), before, "fds leaked");
    }
}

#[test]
fn a_shown_plane_flips_to_other_framebuffers_without_a_modeset() {
    let before = fd_count();
    {
        let Some(dev) = virtio_gpu() else { return };
        let out = dev.output(None).unwrap();
        let (w, h) = (out.mode.width, out.mode.height);
        let listed = xr24_layout(&dev);
        let full = || {
            let dumb = dev.dumb_buffer(w, h, 32).unwrap();
            let pitch = dumb.pitch;
            dev.add_framebuffer(&xr24(dumb.fd, listed, w, h, pitch)).unwrap()
        };
        let fbs = [full(), full()];
        let started = std::time::Instant::now();
        const SHOWS: u32 = 4;
        let mut shown = None;
        for i in 0..SHOWS {
            shown = Some(dev.show(&fbs[i as usize % 2], None).unwrap());
        }
        let per_show = started.elapsed() / SHOWS;
        let mut shown = shown.unwrap();
        assert_eq!(dev.scanout(shown.plane).unwrap(), Some(fbs[1].id()), "the kernel's FB_ID after show");
        let started = std::time::Instant::now();
        const FLIPS: u32 = 20;
        for i in 0..FLIPS {
            let fb = &fbs[i as usize % 2];
            dev.flip(&mut shown, fb).unwrap();
            assert_eq!(shown.framebuffer, fb.id());
        }
        let per_flip = started.elapsed() / FLIPS;
        assert_eq!(dev.scanout(shown.plane).unwrap(), Some(fbs[1].id()), "the kernel's FB_ID after {FLIPS} flips");
        println!("{} {}x{}: show (resolve, TEST_ONLY, modeset) {per_show:?} each; flip (FB_ID alone) {per_flip:?} each", dev.driver_name(), w, h);

        // A framebuffer smaller than the area shown: the kernel refuses the flip, typed, and
        // the plane stays on the last framebuffer.
        let dumb = dev.dumb_buffer(64, 64, 32).unwrap();
        let pitch = dumb.pitch;
        let small = dev.add_framebuffer(&xr24(dumb.fd, listed, 64, 64, pitch)).unwrap();
        let e = dev.flip(&mut shown, &small).unwrap_err();
        println!("flip to a 64x64 framebuffer: {e}");
        assert!(matches!(e, KmsDeviceError::FlipRefused { width: 64, height: 64, .. }), "{e:?}");
        assert!(e.errno().is_some(), "{e}");
        assert_eq!(shown.framebuffer, fbs[1].id());
        assert_eq!(dev.scanout(shown.plane).unwrap(), Some(fbs[1].id()), "the refused flip changed the plane");
    }
    if in_kernel_lab() {
        assert_eq!(fd_count(), before, "fds leaked");
    }
}
