//! The demo's compute shaders (`lab/shaders/`): their SPIR-V, push constants, dispatch, and
//! the checksum they leave in a readback buffer.

use dmabridge::ash::vk;
use dmabridge::{Completion, ComputePipeline, GpuBuffer};
use dmabridge_interop::dmabuf::PlaneLayout;
use dmabridge_interop::Fourcc;

use crate::error::DemoError;

/// SPIR-V of `lab/shaders/demo_pattern.comp`: the producer's animated pattern into a linear
/// AR24 frame, plus its checksum.
pub static PATTERN_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_pattern.spv"));
/// SPIR-V of `lab/shaders/demo_pattern_nv12.comp`: the same for an NV12 frame.
pub static PATTERN_NV12_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_pattern_nv12.spv"));
/// SPIR-V of `lab/shaders/demo_composite.comp`: the consumer's sampler-based composite and checksum.
pub static COMPOSITE_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_composite.spv"));

/// The push constants of the demo's shaders: seven 32-bit words.
pub type Push = [u32; 7];

/// The pattern shader's push constants and dispatch extent for a frame whose planes lie at
/// `planes` (offset, stride) in the bound buffer.
pub fn pattern_push(fourcc: Fourcc, (w, h): (u32, u32), planes: &[PlaneLayout], index: u32) -> Result<(Push, (u32, u32)), DemoError> {
    let words = |v: u64| u32::try_from(v / 4).map_err(|_| DemoError::Unavailable(format!("a plane offset or stride of {v} bytes is too large")));
    let (o0, s0) = planes.first().map(|p| (p.offset, p.stride)).ok_or_else(|| DemoError::Protocol("a frame without planes".into()))?;
    if fourcc == Fourcc::NV12 {
        let (o1, s1) = planes.get(1).map(|p| (p.offset, p.stride)).ok_or_else(|| DemoError::Protocol("an NV12 frame without its chroma plane".into()))?;
        Ok(([w, h, words(o0)?, words(s0)?, index, words(o1)?, words(s1)?], (w / 4, h / 2)))
    } else {
        Ok(([w, h, words(o0)?, words(s0)?, index, 0, 0], (w, h)))
    }
}

/// Records the demo shader `pipeline` over a `width` x `height` grid of 16x16 groups.
pub fn dispatch(
    pipeline: &ComputePipeline,
    cmd: vk::CommandBuffer,
    set: vk::DescriptorSet,
    push: &Push,
    (width, height): (u32, u32),
    until: Completion,
) -> Result<(), DemoError> {
    let groups = [width.div_ceil(16), height.div_ceil(16), 1];
    // SAFETY: `cmd` is the command buffer a submission's closure was handed, signalling
    // `until`, which the caller tracks on every resource the set points at.
    unsafe { pipeline.record_dispatch(cmd, set, bytemuck::bytes_of(push), groups, until)? };
    Ok(())
}

/// The first checksum slot of a mapped buffer, once the GPU is done with it.
pub fn read_u32(buffer: &GpuBuffer, index: usize) -> Result<u32, DemoError> {
    let b = buffer.bytes()?;
    Ok(b.get(index * 4..index * 4 + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]])))
}
