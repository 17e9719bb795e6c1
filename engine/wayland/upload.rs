//! Putting a packed frame into a buffer: the Vulkan producer's transfer into an exported
//! image (zero-copy path), or a copy into the sink's own memfd (copy path).

use std::os::fd::OwnedFd;

use ash::vk;
use dmabridge_interop::dmabuf::DmaBuf;
use dmabridge_interop::{format_info, Fourcc};

use crate::commands::{image_barrier, plane_aspect};
use crate::export::ExportedImage;
use crate::vk_format;
use crate::Engine;

/// Why a frame could not be written.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("{0} has no plane layout or Vulkan format in dmabridge's tables")]
    UnknownFourcc(Fourcc),
    #[error("the frame has {got} bytes; a packed {fourcc} {width}x{height} has {want}")]
    FrameSize { fourcc: Fourcc, width: u32, height: u32, got: usize, want: u64 },
    #[error("no host-visible memory type for the staging buffer")]
    NoMemoryType,
    #[error("{call} failed: {result}")]
    Vk { call: &'static str, result: vk::Result },
    #[error(transparent)]
    Submit(#[from] crate::commands::SubmitError),
    #[error("writing plane {plane} of the buffer failed: {source}")]
    Write { plane: usize, source: std::io::Error },
    #[error("the buffer's layout does not fit u64 arithmetic")]
    Overflow,
}

fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> UploadError {
    move |result| UploadError::Vk { call, result }
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

/// A persistently mapped host-visible buffer the producer copies frames from.
pub(crate) struct Staging<'e> {
    engine: &'e Engine,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    ptr: *mut u8,
    size: usize,
}

impl<'e> Staging<'e> {
    pub fn new(engine: &'e Engine, size: u64) -> Result<Staging<'e>, UploadError> {
        let device = engine.device();
        let len = usize::try_from(size).map_err(|_| UploadError::Overflow)?;
        let info = vk::BufferCreateInfo::default()
            .size(size.max(1))
            .usage(vk::BufferUsageFlags::TRANSFER_SRC)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create info with a non-zero size (VUID-VkBufferCreateInfo-size-00912).
        let buffer = unsafe { device.create_buffer(&info, None) }.map_err(vk_err("vkCreateBuffer"))?;
        let mut s = Staging { engine, buffer, memory: vk::DeviceMemory::null(), ptr: std::ptr::null_mut(), size: len };
        // SAFETY: a buffer of this device.
        let reqs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let type_index = engine
            .memory_type(
                reqs.memory_type_bits,
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
            )
            .ok_or(UploadError::NoMemoryType)?;
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(type_index);
        // SAFETY: a plain allocation in a type the buffer allows (VUID-vkBindBufferMemory-memory-01035).
        s.memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // SAFETY: unbound buffer, memory at least its size, offset 0 (VUID-vkBindBufferMemory-size-01037).
        unsafe { device.bind_buffer_memory(buffer, s.memory, 0) }.map_err(vk_err("vkBindBufferMemory"))?;
        // SAFETY: HOST_VISIBLE memory, not mapped yet (VUID-vkMapMemory-memory-00678, -00682).
        let ptr = unsafe { device.map_memory(s.memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
            .map_err(vk_err("vkMapMemory"))?;
        s.ptr = ptr.cast();
        Ok(s)
    }

    /// Copies `frame` (packed planes) into `image` on the GPU and releases the image to the
    /// foreign queue family in GENERAL layout, for the compositor to sample. Every pixel is
    /// overwritten, so the previous contents are discarded (old layout UNDEFINED).
    pub fn upload(
        &mut self,
        image: &ExportedImage<'_>,
        width: u32,
        height: u32,
        fourcc: Fourcc,
        frame: &[u8],
    ) -> Result<(), UploadError> {
        let info = check_size(fourcc, width, height, frame)?;
        let entry = vk_format::to_vk(fourcc).ok_or(UploadError::UnknownFourcc(fourcc))?;
        if frame.len() > self.size {
            return Err(UploadError::FrameSize { fourcc, width, height, got: frame.len(), want: self.size as u64 });
        }
        // SAFETY: the mapping is `self.size` >= frame.len() bytes, host-coherent, and no GPU
        // work uses the buffer now (every submission is waited for).
        unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), self.ptr, frame.len()) };
        let mut regions = Vec::with_capacity(info.plane_count());
        let mut offset = 0u64;
        for i in 0..info.plane_count() {
            regions.push(vk::BufferImageCopy {
                buffer_offset: offset,
                buffer_row_length: 0,
                buffer_image_height: 0,
                image_subresource: vk::ImageSubresourceLayers {
                    aspect_mask: plane_aspect(entry.vk_planes, i),
                    mip_level: 0,
                    base_array_layer: 0,
                    layer_count: 1,
                },
                image_offset: vk::Offset3D::default(),
                image_extent: vk::Extent3D {
                    width: info.plane_width(i, width),
                    height: info.plane_height(i, height),
                    depth: 1,
                },
            });
            offset += info.packed_plane_size(i, width, height);
        }
        let aspect = if entry.vk_planes > 1 {
            (0..entry.vk_planes as usize)
                .fold(vk::ImageAspectFlags::empty(), |a, i| a | plane_aspect(entry.vk_planes, i))
        } else {
            vk::ImageAspectFlags::COLOR
        };
        let engine = self.engine;
        let to_dst = image_barrier(
            image.image(),
            aspect,
            vk::ImageLayout::UNDEFINED,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            vk::AccessFlags::empty(),
            vk::AccessFlags::TRANSFER_WRITE,
        );
        let release = image_barrier(
            image.image(),
            aspect,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
            vk::ImageLayout::GENERAL,
            vk::AccessFlags::TRANSFER_WRITE,
            vk::AccessFlags::empty(),
        )
        .src_queue_family_index(engine.queue_family())
        .dst_queue_family_index(engine.foreign_queue_family());
        let buffer = self.buffer;
        engine.submit_and_wait(|device, cmd| {
            // SAFETY: recording state; the image was exported with TRANSFER_DST usage
            // (VUID-vkCmdCopyBufferToImage-dstImage-00177) and the regions cover its planes
            // exactly, read from a buffer sized from the same plane table
            // (VUID-vkCmdCopyBufferToImage-pRegions-00171).
            unsafe {
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &[to_dst],
                );
                device.cmd_copy_buffer_to_image(
                    cmd,
                    buffer,
                    image.image(),
                    vk::ImageLayout::TRANSFER_DST_OPTIMAL,
                    &regions,
                );
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    vk::DependencyFlags::empty(),
                    &[],
                    &[],
                    &[release],
                );
            }
        })?;
        Ok(())
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: objects of this device; every submission that read the buffer was waited
        // for (VUID-vkDestroyBuffer-buffer-00922, VUID-vkFreeMemory-memory-00677); freeing
        // mapped memory unmaps it.
        unsafe {
            device.destroy_buffer(self.buffer, None);
            if self.memory != vk::DeviceMemory::null() {
                device.free_memory(self.memory, None);
            }
        }
    }
}

/// Writes `frame` (packed planes) into `buf`'s planes at their offsets and strides, with
/// `pwrite` (no mapping): the copy path's CPU copy into the sink's own memfd.
pub(crate) fn write_planes(buf: &DmaBuf, frame: &[u8]) -> Result<(), UploadError> {
    let (fourcc, width, height) = (buf.fourcc(), buf.width(), buf.height());
    let info = check_size(fourcc, width, height, frame)?;
    let mut src = 0usize;
    for (i, plane) in buf.planes().enumerate() {
        let row = usize::try_from(info.min_stride(i, width)).map_err(|_| UploadError::Overflow)?;
        for r in 0..u64::from(info.plane_height(i, height)) {
            let at =
                plane.stride.checked_mul(r).and_then(|o| o.checked_add(plane.offset)).ok_or(UploadError::Overflow)?;
            let bytes = frame.get(src..src + row).ok_or(UploadError::Overflow)?;
            let mut done = 0usize;
            while done < bytes.len() {
                let n = rustix::io::pwrite(plane.fd, &bytes[done..], at + done as u64)
                    .map_err(|e| UploadError::Write { plane: i, source: e.into() })?;
                done += n;
            }
            src += row;
        }
    }
    Ok(())
}

/// A memfd of `size` bytes for the copy path (a dma-buf stand-in every importer here takes).
pub(crate) fn memfd(size: u64) -> std::io::Result<OwnedFd> {
    use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
    let fd = memfd_create("dmabridge-wayland", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    ftruncate(&fd, size)?;
    Ok(fd)
}
