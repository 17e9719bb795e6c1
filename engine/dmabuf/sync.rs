//! Synchronisation with other processes and devices: which fence mechanism this device can
//! use, and the three methods of [`SyncMethod`] as operations.
//!
//! - **sync-file**: the producer's submission exports a sync_file
//!   ([`crate::SubmitOptions::export_sync_file`], [`crate::Submission::take_sync_file`]) that
//!   travels with the descriptor (`send_buffer_with_fence`); the consumer's submission waits
//!   for it ([`crate::SubmitOptions::wait_sync_files`]). Needs [`Capability::SyncFile`].
//! - **implicit-bridge**: the same sync_files, attached to and taken from the dma-buf's
//!   implicit fences with `DMA_BUF_IOCTL_IMPORT_SYNC_FILE` / `EXPORT_SYNC_FILE`
//!   ([`publish_to_dmabuf`], [`fences_of_dmabuf`]), for peers that only know implicit sync.
//!   Needs the capability and Linux 6.0 or later.
//! - **cpu-wait**: the producer waits for its submission before it sends the descriptor;
//!   the consumer's release message is the release. Always possible.
//!
//! On this project's CI host (lavapipe on a kernel without sync_file) only cpu-wait exists.
//! In the kernel lab (`scripts/lab.sh`: Linux 6.12, where lavapipe has SYNC_FD semaphores)
//! all three do, and the tests run them there: `tests/sync.rs` (a sync_file across
//! submissions and processes, the implicit bridge on real dma-bufs), `tests/kernel_fences.rs`
//! (a vgem fence the CPU and the GPU consumer must wait for), and `dmabridge demo`.

use dmabridge_interop::dmabuf::DmaBuf;
use dmabridge_interop::sync::{export_sync_file, import_sync_file, SyncAccess, SyncError, SyncFile, SyncMethod, SyncMethods};

use crate::device::requirements::Capability;
use crate::device::submit::Submission;
use crate::{Adapter, Engine};

/// The first kernel with `DMA_BUF_IOCTL_EXPORT_SYNC_FILE` and `IMPORT_SYNC_FILE` (5.20, released as 6.0).
const IMPLICIT_BRIDGE_KERNEL: (u32, u32) = (6, 0);

/// The running kernel's (major, minor) version, from `uname`.
fn kernel_version() -> Option<(u32, u32)> {
    let uname = rustix::system::uname();
    let release = uname.release().to_str().ok()?;
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

impl Engine {
    /// [`Adapter::sync_methods`].
    pub fn sync_methods(&self) -> SyncMethods {
        self.adapter().sync_methods()
    }
}

impl Adapter {
    /// The sync methods this device (and kernel) can take part in; cpu-wait always.
    pub fn sync_methods(&self) -> SyncMethods {
        let mut m = SyncMethods::CPU_WAIT;
        if self.has_capability(Capability::SyncFile) {
            m = m.with(SyncMethod::SyncFile);
            if kernel_version().is_some_and(|v| v >= IMPLICIT_BRIDGE_KERNEL) {
                m = m.with(SyncMethod::ImplicitBridge);
            }
        }
        m
    }
}

/// Implicit bridge, producer side: attaches `submission`'s sync_file to every plane's
/// dma-buf as a write fence, so that an implicitly synchronised consumer waits for it.
/// The submission must have been made with `export_sync_file`.
pub fn publish_to_dmabuf(submission: &mut Submission, buf: &DmaBuf) -> Result<(), SyncError> {
    let Some(fence) = submission.take_sync_file() else {
        // Already signalled when it was exported: nothing to wait for.
        return Ok(());
    };
    for plane in buf.planes() {
        import_sync_file(plane.fd, &fence, SyncAccess::Write)?;
    }
    Ok(())
}

/// Implicit bridge, consumer side: the dma-buf's pending write fences, one sync_file per
/// plane, for [`crate::SubmitOptions::wait_sync_files`] (which bounds how long they may
/// hold the work back: whoever else writes the buffer may never finish).
pub fn fences_of_dmabuf(buf: &DmaBuf) -> Result<Vec<SyncFile>, SyncError> {
    buf.planes().map(|plane| export_sync_file(plane.fd, SyncAccess::Read)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_version_parses() {
        let v = kernel_version().expect("uname gives a version");
        assert!(v.0 >= 3, "{v:?}");
    }
}
