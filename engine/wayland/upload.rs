//! Putting a packed frame into a buffer: the Vulkan producer's transfer into an exported
//! image (zero-copy path), or a copy into the sink's own memfd (copy path).

use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::{format_info, Fourcc};

use crate::resources::buffer::{BufferLocation, GpuBuffer};
use crate::dmabuf::export::{ExportError, ExportedImage};
use crate::device::submit::{SubmitOptions, Submission};
use crate::Engine;

/// Why a frame could not be written.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("{0} has no plane layout or Vulkan format in dmabridge's tables")]
    UnknownFourcc(Fourcc),
    #[error("the frame has {got} bytes; a packed {fourcc} {width}x{height} has {want}")]
    FrameSize { fourcc: Fourcc, width: u32, height: u32, got: usize, want: u64 },
    #[error(transparent)]
    Buffer(#[from] crate::resources::buffer::BufferError),
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The copy into the sink's own memfd ([`dmabridge_interop::dmabuf::write_planes`]).
    #[error(transparent)]
    Write(#[from] dmabridge_interop::dmabuf::WriteError),
}

fn check_size(
    fourcc: Fourcc,
    width: u32,
    height: u32,
    frame: &[u8],
) -> Result<&'static dmabridge_interop::FormatInfo, UploadError> {
    let info = format_info(fourcc).ok_or(UploadError::UnknownFourcc(fourcc))?;
    let want = info.packed_size(width, height);
    if frame.len() as u64 != want {
        return Err(UploadError::FrameSize { fourcc, width, height, got: frame.len(), want });
    }
    Ok(info)
}

/// The buffer the producer copies frames from into its exported images.
pub(crate) struct Staging {
    buffer: GpuBuffer,
}

impl Staging {
    pub fn new(engine: &Engine, size: u64) -> Result<Staging, UploadError> {
        Ok(Staging { buffer: GpuBuffer::new(engine, size, BufferLocation::Upload)? })
    }

    /// Copies `frame` (packed planes) into `image` on the GPU and releases the image to the
    /// foreign queue family in GENERAL layout, for the compositor to sample. Every pixel is
    /// overwritten, so the previous contents are discarded. The staging buffer must be idle
    /// (the slot's previous upload done).
    pub fn upload(
        &mut self,
        image: &ExportedImage,
        width: u32,
        height: u32,
        fourcc: Fourcc,
        frame: &[u8],
    ) -> Result<Submission, UploadError> {
        let info = check_size(fourcc, width, height, frame)?;
        let want = self.buffer.len();
        let Some(staged) = self.buffer.bytes_mut()?.get_mut(..frame.len()) else {
            return Err(UploadError::FrameSize { fourcc, width, height, got: frame.len(), want });
        };
        staged.copy_from_slice(frame);
        let mut planes = Vec::with_capacity(info.plane_count());
        let mut offset = 0u64;
        for i in 0..info.plane_count() {
            planes.push(PlaneLayout::linear(offset, info.min_stride(i, width), info.plane_height(i, height)));
            offset += info.packed_plane_size(i, width, height);
        }
        Ok(image.upload_and_release(&self.buffer, &planes, SubmitOptions::default())?)
    }
}

