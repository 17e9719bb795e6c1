//! Reading an imported frame back to the CPU: the end of every pixel-exact test, and the
//! CLI's `import`. It lives with the imports, not with the copies, so that the copies
//! (`resources::transfer`) know nothing of dma-bufs.

use ash::vk;

use crate::import::{ImportError, ImportedImage};
use crate::resources::buffer::{BufferError, BufferLocation, GpuBuffer};
use crate::resources::image::{buffer_barrier, record_barrier, ImageAccess};
use crate::device::submit::{SubmitError, SubmitOptions, Submission};
use crate::resources::transfer::{packed, plane_regions, TransferError, READBACK_TIMEOUT};

/// Why reading a frame back failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadBackError {
    /// The copy could not be made (no transfer usage, no readback buffer, a failed submission).
    #[error(transparent)]
    Transfer(#[from] TransferError),
    /// Acquiring the frame failed (a file that shrank, on the read-copy path).
    #[error(transparent)]
    Acquire(#[from] ImportError),
}

impl From<BufferError> for ReadBackError {
    fn from(e: BufferError) -> Self {
        Self::Transfer(e.into())
    }
}

impl From<SubmitError> for ReadBackError {
    fn from(e: SubmitError) -> Self {
        Self::Transfer(e.into())
    }
}

impl ImportedImage {
    /// Starts reading the frame back: acquires it, copies every plane's visible rows, tightly
    /// packed and concatenated, into a readback buffer, and releases it to its producer.
    /// The bytes are the buffer's once the submission is done.
    pub fn start_read_back(&self, options: SubmitOptions) -> Result<(GpuBuffer, Submission), ReadBackError> {
        let engine = self.engine();
        if !self.usage().contains(vk::ImageUsageFlags::TRANSFER_SRC) {
            return Err(ReadBackError::Transfer(TransferError::Usage(vk::ImageUsageFlags::TRANSFER_SRC)));
        }
        let (planes, total) = packed(self.fourcc(), self.extent())?;
        let regions = plane_regions(self.fourcc(), self.extent(), &planes, total)?;
        let buffer = GpuBuffer::new(engine, total, BufferLocation::Readback)?;
        let (_, s) = engine.submit(options, |cmd, until| {
            // SAFETY: the engine's own command buffer, recording, submitted with `until`.
            unsafe { self.record_acquire(cmd, ImageAccess::TRANSFER_SRC, until) }?;
            let host = buffer_barrier(
                buffer.buffer(),
                vk::AccessFlags::TRANSFER_WRITE,
                vk::AccessFlags::HOST_READ,
                vk::QUEUE_FAMILY_IGNORED,
                vk::QUEUE_FAMILY_IGNORED,
            );
            // SAFETY: recording state; the regions cover exactly the image's planes and fit the
            // buffer sized from the same plane table (VUID-vkCmdCopyImageToBuffer-pRegions-00183).
            unsafe {
                engine.device().cmd_copy_image_to_buffer(cmd, self.image(), vk::ImageLayout::TRANSFER_SRC_OPTIMAL, buffer.buffer(), &regions);
                record_barrier(engine.device(), cmd, (vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::HOST), &[], &[host], &[]);
                self.record_release(cmd, ImageAccess::TRANSFER_SRC, until);
            }
            buffer.track(until);
            Ok::<(), ReadBackError>(())
        })?;
        Ok((buffer, s))
    }

    /// The frame's pixels, each plane's visible rows tightly packed, planes concatenated.
    /// Blocks until the GPU has copied them (at most [`READBACK_TIMEOUT`]): a convenience for
    /// tests and tools, not for a frame loop (use [`ImportedImage::start_read_back`] there).
    pub fn read_back(&self) -> Result<Vec<u8>, ReadBackError> {
        let (buffer, s) = self.start_read_back(SubmitOptions::default())?;
        s.wait(READBACK_TIMEOUT)?;
        Ok(buffer.bytes()?.to_vec())
    }
}
