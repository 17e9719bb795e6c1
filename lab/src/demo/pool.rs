//! The producer's pool of frames: the shared memory of each (an exported image or a
//! system-memory file), a buffer over it that the producer writes, and which frames the
//! consumer holds.

use std::collections::BTreeSet;
use std::os::fd::BorrowedFd;

use dmabridge::ash::vk;
use dmabridge::{ComputePipeline, Engine, ExportedImage, GpuBuffer, ImportedBuffer};
use dmabridge_interop::dmabuf::{recv_fenced, DmaBuf, FencedReceived, PlaneDesc, PlaneLayout, SystemMemory};
use dmabridge_interop::sync::{SyncFile, SyncMethod};
use dmabridge_interop::tiling::packed_planes;
use dmabridge_interop::{Layout, Modifier};

use crate::error::DemoError;

use super::config::Mode;
use super::control::Peer;
use super::negotiation::{producer_request, Plan};

/// One frame of the pool: the shared memory (an exported image, or a memfd) and a buffer
/// over it that the producer writes.
pub(super) struct Slot {
    // Field order: the buffer over the memory goes before the export that owns it.
    pub(super) alias: ImportedBuffer,
    _exported: Option<ExportedImage>,
    pub(super) dmabuf: DmaBuf,
    pub(super) set: vk::DescriptorSet,
    /// Where each plane lies in the file.
    pub(super) planes: Vec<PlaneLayout>,
    pub(super) used: bool,
    /// sync-file: the consumer's release fence, which the next frame's submission waits for
    /// before it writes the buffer again.
    pub(super) release_fence: Option<SyncFile>,
}

/// The per-mode producer state.
pub(super) struct Pool {
    pub(super) slots: Vec<Slot>,
    free: Vec<usize>,
    pub(super) held: BTreeSet<usize>,
    pub(super) max_held: usize,
    /// Release fences that came back with the consumer's releases.
    pub(super) release_fences: u64,
}

impl Pool {
    pub(super) fn new(
        engine: &Engine,
        pipeline: &ComputePipeline,
        sum: &GpuBuffer,
        plan: &Plan,
        memory: &SystemMemory,
        (w, h): (u32, u32),
    ) -> Result<Self, DemoError> {
        let mut slots = Vec::new();
        for _ in 0..plan.pool {
            let (exported, dmabuf) = match plan.mode {
                Mode::ZeroCopy => {
                    let req = producer_request(plan.fourcc).export_request(plan.fourcc, w, h, plan.acceptable.iter().copied());
                    let img = engine.export_image(&req)?;
                    let buf = img.dmabuf().ok_or_else(|| DemoError::Unavailable("the export is not a dma-buf".into()))?.try_clone()?;
                    (Some(img), buf)
                }
                Mode::Copy => {
                    let layout = packed_planes(plan.fourcc, w, h).map_err(dmabridge::ConvertError::from)?;
                    let total = layout.iter().filter_map(PlaneLayout::end).max().unwrap_or(0);
                    let fd = memory.alloc("dmabridge-demo-frame", total)?;
                    let mut planes = Vec::new();
                    for p in &layout {
                        planes.push(PlaneDesc { fd: fd.try_clone()?, offset: p.offset, stride: p.stride });
                    }
                    drop(fd);
                    (None, DmaBuf::new(plan.fourcc, Layout::Explicit(Modifier::LINEAR), w, h, planes)?)
                }
            };
            if dmabuf.disjoint() {
                return Err(DemoError::Unavailable("the demo writes frames whose planes share one file".into()));
            }
            let planes = dmabuf.plane_layouts();
            if planes.iter().any(|p| p.offset % 4 != 0 || p.stride % 4 != 0) {
                return Err(DemoError::Unavailable(format!("plane layouts {planes:?} are not word-aligned")));
            }
            let size = planes.iter().map(|p| p.end().ok_or_else(|| DemoError::Unavailable(format!("plane {p:?} ends past 2^64")))).try_fold(0, |a, e| e.map(|e| a.max(e)))?;
            let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST | vk::BufferUsageFlags::TRANSFER_SRC;
            let fd = dmabuf.plane(0).map(|p| p.fd).ok_or_else(|| DemoError::Protocol("a frame without planes".into()))?;
            let alias = ImportedBuffer::import(engine, fd, size, usage)?;
            let set = pipeline.allocate_set()?;
            // SAFETY: a fresh set of this pipeline; both buffers have STORAGE_BUFFER usage and
            // live as long as the pool, which outlives every frame's submission (each is waited for).
            unsafe {
                pipeline.write_buffer(set, 0, alias.buffer());
                pipeline.write_buffer(set, 1, sum.buffer());
            }
            slots.push(Slot { _exported: exported, dmabuf, alias, set, planes, used: false, release_fence: None });
        }
        let free = (0..slots.len()).rev().collect();
        Ok(Pool { slots, free, held: BTreeSet::new(), max_held: 0, release_fences: 0 })
    }

    /// A slot the consumer does not hold, waiting for releases when there is none.
    pub(super) fn take(&mut self, buffers: BorrowedFd<'_>, peer: &Peer, sync: SyncMethod) -> Result<usize, DemoError> {
        while self.free.is_empty() {
            self.wait_release(buffers, peer, sync)?;
        }
        self.free.pop().ok_or_else(|| DemoError::Protocol("no free buffer".into()))
    }

    /// Takes the consumer's next release; under sync-file it may carry a release fence,
    /// which the buffer's next submission waits for.
    pub(super) fn wait_release(&mut self, buffers: BorrowedFd<'_>, peer: &Peer, sync: SyncMethod) -> Result<(), DemoError> {
        match recv_fenced(buffers).map_err(|e| peer.handoff_error(e))? {
            FencedReceived::Release { id, release_fence } => {
                let i = usize::try_from(id).map_err(|_| DemoError::Protocol(format!("release of unknown buffer {id}")))?;
                if !self.held.remove(&i) {
                    return Err(DemoError::Protocol(format!("the consumer released buffer {id}, which it does not hold")));
                }
                if release_fence.is_some() && sync != SyncMethod::SyncFile {
                    return Err(DemoError::Protocol(format!("buffer {id} came back with a fence, but the mode synchronises by {sync}")));
                }
                self.release_fences += u64::from(release_fence.is_some());
                self.slots[i].release_fence = release_fence;
                self.free.push(i);
                Ok(())
            }
            FencedReceived::Buffer { id, .. } => Err(DemoError::Protocol(format!("the consumer sent buffer {id}"))),
        }
    }
}
