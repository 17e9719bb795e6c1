//! Why a GPU conversion failed: one error for the converter's operations.

use dmabridge_interop::dmabuf::{ImportCheckError, ReadError};
use dmabridge_interop::tiling::gpu::GpuParamError;
use dmabridge_interop::tiling::{FrameConversionError, TilingError};
use dmabridge_interop::{Layout, TileLayout};

use crate::resources::buffer::BufferError;
use super::compute::ComputeError;
use crate::error::VkError;
use crate::device::memory::MemoryError;
use crate::device::submit::SubmitError;
use crate::import::ImportError;

/// Why a GPU conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The shaders cannot address the conversion (sizes, alignment).
    #[error(transparent)]
    Params(#[from] GpuParamError),
    /// The layout or extent has no geometry.
    #[error(transparent)]
    Tiling(#[from] TilingError),
    /// The input is smaller than the frame.
    #[error("input is {got} bytes, but a {what} needs {expected}")]
    InputSize { what: String, expected: u64, got: u64 },
    /// A pipeline could not be made or used.
    #[error(transparent)]
    Compute(#[from] ComputeError),
    /// A buffer could not be made or read.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// Scratch memory could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// Submitting or waiting failed.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The dma-buf's modifier names no layout dmabridge converts.
    #[error("layout {0} is not a tiled layout dmabridge converts")]
    NotTiled(Layout),
    /// A layout check failed (before any driver call).
    #[error(transparent)]
    Check(#[from] ImportCheckError),
    /// A tiled plane's stride must be its padded row.
    #[error("plane {plane}: a {layout} plane's stride is its padded row of {expected} bytes, not {stride}")]
    TiledStride { plane: usize, layout: TileLayout, stride: u64, expected: u64 },
    /// The padded tiles run past the fd.
    #[error("plane {plane}: the padded tiles reach byte {end}, past the {fd_size}-byte fd")]
    TilesPastEndOfFd { plane: usize, end: u64, fd_size: u64 },
    /// A plane's file could not be read (it can shrink, so it is read, not mapped).
    #[error("plane {plane}: {source}")]
    Read { plane: usize, source: ReadError },
    /// The conversion has no steps (no colour conversion between those formats), or the
    /// CPU path refused it.
    #[error(transparent)]
    Frame(#[from] FrameConversionError),
    /// A plane could not be mapped for the CPU path.
    #[error("plane {plane}: {source}")]
    Map { plane: usize, source: dmabridge_interop::dmabuf::MapError },
    /// The path asked for cannot do this conversion (copy commands need a layout with wide
    /// row-major tiles).
    #[error("the {path} path cannot convert {conversion}")]
    PathUnavailable { path: crate::ConvertPath, conversion: String },
    /// A copy plan does not hold together, or asks for a step the converter does not have
    /// (the error names it).
    #[error(transparent)]
    Plan(#[from] dmabridge_interop::negotiate::PlanError),
    /// A step of a copy plan that this device cannot do.
    #[error("plan step {index} ('{step}'): {source}")]
    PlanStep { index: usize, step: String, source: Box<ConvertError> },
    /// The caller required zero-copy ([`crate::ImportOptions::require_zero_copy`]) and the
    /// dma-buf's planes must be read into dmabridge's memory before the detile (the reason
    /// is the import path's: a file that can shrink, or a read-only fd the driver would map
    /// writable).
    #[error("zero-copy detile is not possible: {0}")]
    NotZeroCopy(String),
    /// The dma-buf's files could not be imported for the GPU to read them in place, or read
    /// into dmabridge's memory (the import room's error).
    #[error(transparent)]
    Import(ImportError),
    /// A storage buffer the shaders would address past the device's
    /// `maxStorageBufferRange` (a frame too large for the compute path on this device; the
    /// CPU path has no such limit).
    #[error("the {what} spans {bytes} bytes, more than the {max} bytes a storage buffer binding may span on this device (maxStorageBufferRange)")]
    BindingTooLarge { what: String, bytes: u64, max: u64 },
}

impl From<ImportError> for ConvertError {
    /// The import room's errors, in the converter's words where it has them.
    fn from(e: ImportError) -> Self {
        match e {
            ImportError::TooLarge { what, bytes, max } => ConvertError::BindingTooLarge { what, bytes, max },
            ImportError::NotZeroCopy(why) => ConvertError::NotZeroCopy(why),
            ImportError::Read { plane, source } => ConvertError::Read { plane, source },
            ImportError::Check(e) => ConvertError::Check(e),
            ImportError::Buffer(e) => ConvertError::Buffer(e),
            other => ConvertError::Import(other),
        }
    }
}

impl ConvertError {
    /// Whether the error is the path's own (the device cannot run the conversion that way:
    /// its limits, its memory, its driver), not the input's or the caller's: what the cost
    /// model sets a path aside for ([`Converter::convert_frame`]).
    pub(crate) fn is_path_failure(&self) -> bool {
        match self {
            ConvertError::Params(_)
            | ConvertError::Compute(_)
            | ConvertError::Buffer(_)
            | ConvertError::Memory(_)
            | ConvertError::Vk(_)
            | ConvertError::Submit(_)
            | ConvertError::PathUnavailable { .. }
            | ConvertError::BindingTooLarge { .. } => true,
            ConvertError::PlanStep { source, .. } => source.is_path_failure(),
            ConvertError::Tiling(_)
            | ConvertError::InputSize { .. }
            | ConvertError::NotTiled(_)
            | ConvertError::Check(_)
            | ConvertError::TiledStride { .. }
            | ConvertError::TilesPastEndOfFd { .. }
            | ConvertError::Read { .. }
            | ConvertError::Frame(_)
            | ConvertError::Map { .. }
            | ConvertError::Plan(_)
            | ConvertError::NotZeroCopy(_)
            | ConvertError::Import { .. } => false,
        }
    }
}
