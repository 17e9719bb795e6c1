//! sw_sync, the kernel's software timeline, as the tests use it: fences nobody but the test
//! signals, in any order, and fences that signal with an error (`drivers/dma-buf/sw_sync.c`).
//! Opening `/sys/kernel/debug/sync/sw_sync` makes a new timeline at 0;
//! `SW_SYNC_IOC_CREATE_FENCE` gives a sync_file fd that signals once the timeline reaches its
//! value; `SW_SYNC_IOC_INC` advances the timeline; closing the timeline signals every fence
//! still pending on it with `-ENOENT`. A debugfs interface, so test code only: the library
//! never depends on it.
//!
//! Loaded in the kernel lab by `scripts/lab.sh --modules sw_sync` (built out of tree by
//! `scripts/lab-modules.sh`); debugfs is mounted here when it is not yet.
//! Used by `interop/tests/hostile_fences.rs` and, by path, `tests/kernel_fences.rs`.

#![allow(dead_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use dmabridge_interop::sync::SyncFile;
use rustix::fs::{Mode, OFlags};
use rustix::ioctl::{ioctl, opcode, Opcode, Setter, Updater};

/// Where sw_sync makes timelines.
pub const SW_SYNC: &str = "/sys/kernel/debug/sync/sw_sync";

/// `struct sw_sync_create_fence_data` (sw_sync.c).
#[repr(C)]
#[derive(Debug)]
struct CreateFence {
    value: u32,
    name: [u8; 32],
    fence: i32,
}

/// `SW_SYNC_IOC_CREATE_FENCE` = `_IOWR('W', 0, struct sw_sync_create_fence_data)`.
const SW_SYNC_IOC_CREATE_FENCE: Opcode = opcode::read_write::<CreateFence>(b'W', 0);
/// `SW_SYNC_IOC_INC` = `_IOW('W', 1, __u32)`.
const SW_SYNC_IOC_INC: Opcode = opcode::write::<u32>(b'W', 1);

/// Whether the tests run in the kernel lab (`DMABRIDGE_TEST_CONFIG=kernel`).
pub fn in_kernel_lab() -> bool {
    std::env::var("DMABRIDGE_TEST_CONFIG").as_deref() == Ok("kernel")
}

/// A sw_sync timeline (owned). Dropping it closes it: every fence still pending on it
/// signals with `-ENOENT`.
#[derive(Debug)]
pub struct Timeline {
    fd: OwnedFd,
}

impl Timeline {
    /// A new timeline at 0, or `None` (with the reason printed) outside the kernel lab. In
    /// the lab it must open: the test command loads sw_sync.
    pub fn for_test() -> Option<Timeline> {
        if !in_kernel_lab() {
            eprintln!("skipped: sw_sync fences need the kernel lab (scripts/lab.sh --modules sw_sync)");
            return None;
        }
        Some(Timeline::open().expect("the kernel lab loads sw_sync (scripts/lab.sh --modules sw_sync)"))
    }

    /// A new timeline at 0 (mounting debugfs first if it is not).
    pub fn open() -> io::Result<Timeline> {
        if !Path::new(SW_SYNC).exists() {
            let status = std::process::Command::new("mount").args(["-t", "debugfs", "none", "/sys/kernel/debug"]).status()?;
            // A test beside this one may have mounted it first (mount exits 32 then).
            if !status.success() && !Path::new(SW_SYNC).exists() {
                return Err(io::Error::other(format!("mount -t debugfs: {status}")));
            }
        }
        let fd = rustix::fs::open(SW_SYNC, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Timeline { fd })
    }

    /// A fence that signals when the timeline reaches `value` (at once if it has).
    pub fn fence(&self, value: u32) -> io::Result<SyncFile> {
        let mut data = CreateFence { value, name: [0; 32], fence: -1 };
        data.name[..9].copy_from_slice(b"dmabridge");
        // SAFETY: the opcode is sw_sync's _IOWR('W', 0, struct sw_sync_create_fence_data) and
        // `data` is that struct (#[repr(C)], 40 bytes), borrowed mutably for the call.
        unsafe { ioctl(&self.fd, Updater::<SW_SYNC_IOC_CREATE_FENCE, _>::new(&mut data)) }?;
        if data.fence < 0 {
            return Err(io::Error::other(format!("SW_SYNC_IOC_CREATE_FENCE returned fd {}", data.fence)));
        }
        // SAFETY: on success the kernel installed a new fd (O_CLOEXEC) for the sync_file and
        // wrote its number to `data.fence`; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(data.fence) };
        SyncFile::new(fd).map_err(io::Error::other)
    }

    /// Advances the timeline by `n`: every fence at or below the new value signals.
    pub fn advance(&self, n: u32) -> io::Result<()> {
        // SAFETY: the opcode is sw_sync's _IOW('W', 1, __u32), and the argument is a u32 the
        // kernel copies in.
        unsafe { ioctl(&self.fd, Setter::<SW_SYNC_IOC_INC, u32>::new(n)) }?;
        Ok(())
    }
}

/// A process's memory as `/proc/self/status` says: (VmRSS, VmHWM) in KiB.
pub fn rss_kib() -> io::Result<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .ok_or_else(|| io::Error::other(format!("no {name} in /proc/self/status")))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}
