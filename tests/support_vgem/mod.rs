//! vgem, the kernel's virtual GEM driver, as the tests use it: dumb buffers exported as
//! dma-bufs through PRIME, other devices' dma-bufs imported through PRIME (a second DRM
//! device beside the Vulkan one), mappings of its objects through the card, and fences the
//! test attaches to them and signals itself (`VGEM_FENCE_ATTACH` / `VGEM_FENCE_SIGNAL`,
//! `include/uapi/drm/vgem_drm.h`). It is the way the tests put an unsignalled fence on a
//! dma-buf itself (sw_sync's fences, `interop/tests/support_swsync`, are sync_files of their
//! own, which the tests hand over as such). The kernel signals a vgem fence by itself
//! after 10 s, so a test's unsignalled phase must be shorter.
//!
//! Loaded in the kernel lab by `scripts/lab.sh --modules vgem`.

#![allow(dead_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use rustix::ioctl::{ioctl, opcode, Opcode, Setter, Updater};

/// `DRM_COMMAND_BASE`: driver-private ioctls start here.
const DRM_COMMAND_BASE: u8 = 0x40;

/// `struct drm_mode_create_dumb`.
#[repr(C)]
#[derive(Debug, Default)]
struct CreateDumb {
    height: u32,
    width: u32,
    bpp: u32,
    flags: u32,
    handle: u32,
    pitch: u32,
    size: u64,
}

/// `struct drm_prime_handle`.
#[repr(C)]
#[derive(Debug, Default)]
struct PrimeHandle {
    handle: u32,
    flags: u32,
    fd: i32,
}

/// `struct drm_mode_map_dumb`.
#[repr(C)]
#[derive(Debug, Default)]
struct MapDumb {
    handle: u32,
    pad: u32,
    offset: u64,
}

/// `struct drm_gem_close`.
#[repr(C)]
#[derive(Debug)]
struct GemClose {
    handle: u32,
    pad: u32,
}

/// `struct drm_vgem_fence_attach`.
#[repr(C)]
#[derive(Debug, Default)]
struct FenceAttach {
    handle: u32,
    flags: u32,
    out_fence: u32,
    pad: u32,
}

/// `struct drm_vgem_fence_signal`.
#[repr(C)]
#[derive(Debug)]
struct FenceSignal {
    fence: u32,
    flags: u32,
}

/// `DRM_IOWR(0xB2, struct drm_mode_create_dumb)`.
const DRM_IOCTL_MODE_CREATE_DUMB: Opcode = opcode::read_write::<CreateDumb>(b'd', 0xB2);
/// `DRM_IOWR(0x2d, struct drm_prime_handle)`.
const DRM_IOCTL_PRIME_HANDLE_TO_FD: Opcode = opcode::read_write::<PrimeHandle>(b'd', 0x2d);
/// `DRM_IOWR(0x2e, struct drm_prime_handle)`.
const DRM_IOCTL_PRIME_FD_TO_HANDLE: Opcode = opcode::read_write::<PrimeHandle>(b'd', 0x2e);
/// `DRM_IOWR(0xB3, struct drm_mode_map_dumb)`.
const DRM_IOCTL_MODE_MAP_DUMB: Opcode = opcode::read_write::<MapDumb>(b'd', 0xB3);
/// `DRM_IOW(0x09, struct drm_gem_close)`.
const DRM_IOCTL_GEM_CLOSE: Opcode = opcode::write::<GemClose>(b'd', 0x09);
/// `DRM_IOWR(DRM_COMMAND_BASE + 1, struct drm_vgem_fence_attach)`.
const DRM_IOCTL_VGEM_FENCE_ATTACH: Opcode = opcode::read_write::<FenceAttach>(b'd', DRM_COMMAND_BASE + 1);
/// `DRM_IOW(DRM_COMMAND_BASE + 2, struct drm_vgem_fence_signal)`.
const DRM_IOCTL_VGEM_FENCE_SIGNAL: Opcode = opcode::write::<FenceSignal>(b'd', DRM_COMMAND_BASE + 2);
/// `VGEM_FENCE_WRITE`: the fence is an exclusive (write) fence.
const VGEM_FENCE_WRITE: u32 = 1;
/// `DRM_CLOEXEC | DRM_RDWR` (`O_CLOEXEC | O_RDWR`).
const PRIME_FLAGS: u32 = 0o2_000_000 | 0o2;
/// `DRM_CLOEXEC` alone: the dma-buf's file is `O_RDONLY`.
const PRIME_FLAGS_READ_ONLY: u32 = 0o2_000_000;

/// The vgem device's primary node (dumb buffers are not allowed on render nodes).
pub struct Vgem {
    card: OwnedFd,
    pub path: PathBuf,
}

/// A dumb buffer of the device: its GEM handle and layout.
#[derive(Debug, Clone, Copy)]
pub struct DumbBuffer {
    pub handle: u32,
    pub pitch: u32,
    pub size: u64,
}

/// A fence the test attached to a buffer; it signals when the test says (or after 10 s).
#[derive(Debug, Clone, Copy)]
pub struct Fence(u32);

impl Vgem {
    /// The `/dev/dri/card*` whose sysfs device is vgem's platform device.
    pub fn open() -> io::Result<Vgem> {
        for entry in std::fs::read_dir("/sys/class/drm")? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("card") || name.contains('-') {
                continue;
            }
            let target = std::fs::read_link(entry.path())?;
            if !target.to_string_lossy().contains("/vgem/") {
                continue;
            }
            let path = PathBuf::from("/dev/dri").join(&name);
            let card = rustix::fs::open(&path, rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())?;
            return Ok(Vgem { card, path });
        }
        Err(io::Error::new(io::ErrorKind::NotFound, "no vgem device in /sys/class/drm (is the vgem module loaded?)"))
    }

    /// Another handle on the same open device (a dup), for a producer thread.
    pub fn try_clone(&self) -> io::Result<Vgem> {
        Ok(Vgem { card: self.card.try_clone()?, path: self.path.clone() })
    }

    /// A new zeroed dumb buffer of `width` x `height` pixels of `bpp` bits.
    pub fn dumb(&self, width: u32, height: u32, bpp: u32) -> io::Result<DumbBuffer> {
        let mut arg = CreateDumb { height, width, bpp, ..CreateDumb::default() };
        // SAFETY: the opcode is the kernel's DRM_IOWR(0xB2, struct drm_mode_create_dumb) and `arg`
        // is that struct (#[repr(C)], 32 bytes), borrowed mutably for the call only.
        unsafe { ioctl(&self.card, Updater::<DRM_IOCTL_MODE_CREATE_DUMB, _>::new(&mut arg)) }?;
        Ok(DumbBuffer { handle: arg.handle, pitch: arg.pitch, size: arg.size })
    }

    /// The buffer as a dma-buf (PRIME), read-write, close-on-exec; the caller owns it.
    pub fn export(&self, buffer: &DumbBuffer) -> io::Result<OwnedFd> {
        self.export_handle(buffer.handle)
    }

    /// The GEM object `handle` names as a dma-buf (PRIME), read-write, close-on-exec; the
    /// caller owns it. For an object imported from a dma-buf the kernel hands back that
    /// dma-buf itself (a new fd of the same file), not a new one.
    pub fn export_handle(&self, handle: u32) -> io::Result<OwnedFd> {
        self.export_with(handle, PRIME_FLAGS)
    }

    /// The buffer as a read-only dma-buf (PRIME without `DRM_RDWR`: an `O_RDONLY` file, which
    /// nobody holding it can map writable), close-on-exec; the caller owns it. The first
    /// export of an object makes its dma-buf, and later exports hand back the same file, so
    /// this must come first; the test writes the buffer through the card
    /// ([`Vgem::map_offset`]).
    pub fn export_read_only(&self, buffer: &DumbBuffer) -> io::Result<OwnedFd> {
        self.export_with(buffer.handle, PRIME_FLAGS_READ_ONLY)
    }

    fn export_with(&self, handle: u32, flags: u32) -> io::Result<OwnedFd> {
        let mut arg = PrimeHandle { handle, flags, fd: -1 };
        // SAFETY: the opcode is DRM_IOWR(0x2d, struct drm_prime_handle) and `arg` is that
        // struct (#[repr(C)], 12 bytes), borrowed mutably for the call only.
        unsafe { ioctl(&self.card, Updater::<DRM_IOCTL_PRIME_HANDLE_TO_FD, _>::new(&mut arg)) }?;
        if arg.fd < 0 {
            return Err(io::Error::other(format!("PRIME export returned fd {}", arg.fd)));
        }
        // SAFETY: on success the kernel installed a new fd for the caller in `arg.fd`; nothing
        // else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(arg.fd) })
    }

    /// A GEM handle for the dma-buf `fd` (borrowed; PRIME import). The same dma-buf imported
    /// twice, or one this device exported, gives the handle it already has; a handle is not
    /// counted, so one [`Vgem::close_handle`] closes it whatever the number of imports.
    pub fn import(&self, fd: BorrowedFd<'_>) -> io::Result<u32> {
        let mut arg = PrimeHandle { handle: 0, flags: 0, fd: fd.as_raw_fd() };
        // SAFETY: the opcode is DRM_IOWR(0x2e, struct drm_prime_handle) and `arg` is that
        // struct (#[repr(C)], 12 bytes), borrowed mutably for the call only; `fd` is borrowed,
        // so it stays open during the call, and the kernel takes its own reference.
        unsafe { ioctl(&self.card, Updater::<DRM_IOCTL_PRIME_FD_TO_HANDLE, _>::new(&mut arg)) }?;
        Ok(arg.handle)
    }

    /// The fake offset at which the card fd maps the object `handle` (`MODE_MAP_DUMB`), for
    /// [`RawMapping::at`]. `EINVAL` for an imported object: the kernel maps only its own.
    pub fn map_offset(&self, handle: u32) -> io::Result<u64> {
        let mut arg = MapDumb { handle, ..MapDumb::default() };
        // SAFETY: the opcode is DRM_IOWR(0xB3, struct drm_mode_map_dumb) and `arg` is that
        // struct (#[repr(C)], 16 bytes, pad zero), borrowed mutably for the call only.
        unsafe { ioctl(&self.card, Updater::<DRM_IOCTL_MODE_MAP_DUMB, _>::new(&mut arg)) }?;
        Ok(arg.offset)
    }

    /// The card fd, which maps objects at their [`Vgem::map_offset`].
    pub fn card(&self) -> BorrowedFd<'_> {
        self.card.as_fd()
    }

    /// Attaches a new unsignalled write fence to the buffer's reservation object.
    pub fn attach_write_fence(&self, buffer: &DumbBuffer) -> io::Result<Fence> {
        self.attach_write_fence_to(buffer.handle)
    }

    /// Attaches a new unsignalled write fence to the reservation object of the GEM object
    /// `handle`: for an imported object, the dma-buf's own.
    pub fn attach_write_fence_to(&self, handle: u32) -> io::Result<Fence> {
        let mut arg = FenceAttach { handle, flags: VGEM_FENCE_WRITE, ..FenceAttach::default() };
        // SAFETY: the opcode is DRM_IOWR(DRM_COMMAND_BASE + 1, struct drm_vgem_fence_attach) and
        // `arg` is that struct (#[repr(C)], 16 bytes, pad zero as the kernel requires),
        // borrowed mutably for the call only.
        unsafe { ioctl(&self.card, Updater::<DRM_IOCTL_VGEM_FENCE_ATTACH, _>::new(&mut arg)) }?;
        Ok(Fence(arg.out_fence))
    }

    /// Signals `fence`. An error if it was signalled already (`ETIMEDOUT` once the kernel's
    /// 10 s ran out).
    pub fn signal(&self, fence: Fence) -> io::Result<()> {
        let arg = FenceSignal { fence: fence.0, flags: 0 };
        // SAFETY: the opcode is DRM_IOW(DRM_COMMAND_BASE + 2, struct drm_vgem_fence_signal) and
        // `arg` is that struct, read by the kernel during the call only.
        unsafe { ioctl(&self.card, Setter::<DRM_IOCTL_VGEM_FENCE_SIGNAL, _>::new(arg)) }?;
        Ok(())
    }

    /// Closes the GEM handle (an exported dma-buf keeps the memory alive).
    pub fn close(&self, buffer: DumbBuffer) -> io::Result<()> {
        self.close_handle(buffer.handle)
    }

    /// Closes a GEM handle; `EINVAL` if it is not open.
    pub fn close_handle(&self, handle: u32) -> io::Result<()> {
        let arg = GemClose { handle, pad: 0 };
        // SAFETY: the opcode is DRM_IOW(0x09, struct drm_gem_close) and `arg` is that struct,
        // read by the kernel during the call only.
        unsafe { ioctl(&self.card, Setter::<DRM_IOCTL_GEM_CLOSE, _>::new(arg)) }?;
        Ok(())
    }
}

/// A shared mapping of a whole dma-buf with no CPU-access bracket: what a consumer that
/// skips the wait would read, and how the producer writes while its own fence is pending
/// (the guard would wait for that fence).
pub struct RawMapping {
    ptr: *mut std::ffi::c_void,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; the tests synchronise their accesses by the
// fences under test, and the worst a race can do is read stale bytes, which is what they check.
unsafe impl Send for RawMapping {}

impl RawMapping {
    pub fn new(fd: impl AsFd, len: usize) -> io::Result<RawMapping> {
        Self::at(fd, 0, len)
    }

    /// `len` bytes of `fd` from `offset` (a GEM object's fake offset on a card fd).
    pub fn at(fd: impl AsFd, offset: u64, len: usize) -> io::Result<RawMapping> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        // SAFETY: a new shared mapping chosen by the kernel (null hint), of a file the caller
        // keeps open; it is unmapped in Drop and never aliased as a Rust reference across a write.
        let ptr = unsafe { mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, fd.as_fd(), offset) }?;
        Ok(RawMapping { ptr, len })
    }

    /// Copies `bytes` to the start of the mapping.
    pub fn write(&self, bytes: &[u8]) {
        assert!(bytes.len() <= self.len, "{} bytes into a {}-byte mapping", bytes.len(), self.len);
        // SAFETY: `ptr` maps `len` writable bytes until Drop, and `bytes` (checked to fit) is
        // Rust memory, which cannot overlap a mapping the kernel made.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.cast::<u8>(), bytes.len()) };
    }

    pub fn read(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: `ptr` maps `len` readable bytes until Drop; volatile-free copy of shared memory
        // that another thread may write is what this test helper is for (bytes, no invariants).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.cast::<u8>(), out.as_mut_ptr(), self.len) };
        out
    }

    pub fn fill(&self, byte: u8) {
        // SAFETY: `ptr` maps `len` writable bytes until Drop.
        unsafe { std::ptr::write_bytes(self.ptr.cast::<u8>(), byte, self.len) };
    }
}

impl Drop for RawMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.ptr, self.len) };
    }
}
