//! Compute pipelines with one descriptor set layout: the converters' shaders, and any
//! compute shader a host or the demo brings (storage buffers and immutable samplers).

use std::sync::{Mutex, PoisonError};

use ash::vk;

use crate::error::{VkError, VkResultExt};
use crate::device::submit::{Completion, Garbage, Uses};
use crate::Engine;

/// Why a pipeline could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    /// A Vulkan call failed.
    #[error(transparent)]
    Vk(#[from] VkError),
    /// The SPIR-V is not a SPIR-V module.
    #[error("malformed SPIR-V: {0}")]
    SpirV(std::io::Error),
    /// More descriptor sets were asked for than the pipeline was made with.
    #[error("the pipeline's {0} descriptor sets are all allocated")]
    OutOfSets(u32),
    /// A push-constant block larger than the range declared.
    #[error("{got} bytes of push constants, but the pipeline declares {declared}")]
    PushSize { got: usize, declared: u32 },
}

/// One binding of the pipeline's set, in binding order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    StorageBuffer,
    /// A combined image sampler with this immutable sampler (which must outlive the pipeline).
    Sampler(vk::Sampler),
}

/// The words of a SPIR-V module, for `vk::ShaderModuleCreateInfo::code`. `read_spv` copies
/// into an aligned `Vec<u32>` (an embedded `&[u8]` has no 4-byte alignment guarantee) and
/// checks the magic number and length.
pub fn spirv_words(spv: &[u8]) -> std::io::Result<Vec<u32>> {
    ash::util::read_spv(&mut std::io::Cursor::new(spv))
}

/// A compute pipeline, its layout, and a pool of descriptor sets for it.
///
/// `Send` and `Sync`: the pool is only touched behind a lock. Sets live as long as the
/// pipeline; dropped while the GPU still uses it, its destruction waits for that work.
pub struct ComputePipeline {
    engine: Engine,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
    max_sets: u32,
    allocated: Mutex<u32>,
    push_size: u32,
    bindings: Vec<Binding>,
    uses: Uses,
}

impl std::fmt::Debug for ComputePipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputePipeline").field("pipeline", &self.pipeline).field("bindings", &self.bindings).finish()
    }
}

impl ComputePipeline {
    /// A pipeline of the SPIR-V module `spv` (entry point `main`) with `bindings` at set 0,
    /// `push_size` bytes of push constants, and room for `max_sets` descriptor sets.
    pub fn new(engine: &Engine, spv: &[u8], bindings: &[Binding], push_size: u32, max_sets: u32) -> Result<ComputePipeline, ComputeError> {
        let device = engine.device();
        let words = spirv_words(spv).map_err(ComputeError::SpirV)?;
        let samplers: Vec<[vk::Sampler; 1]> = bindings
            .iter()
            .map(|b| match b {
                Binding::Sampler(s) => [*s],
                Binding::StorageBuffer => [vk::Sampler::null()],
            })
            .collect();
        let vk_bindings: Vec<vk::DescriptorSetLayoutBinding> = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let base =
                    vk::DescriptorSetLayoutBinding::default().binding(i as u32).descriptor_count(1).stage_flags(vk::ShaderStageFlags::COMPUTE);
                match b {
                    Binding::StorageBuffer => base.descriptor_type(vk::DescriptorType::STORAGE_BUFFER),
                    Binding::Sampler(_) => base.descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER).immutable_samplers(&samplers[i]),
                }
            })
            .collect();
        // Collected as they are made, so that an error part way destroys what exists.
        let mut out = ComputePipeline {
            engine: engine.clone(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pool: vk::DescriptorPool::null(),
            max_sets: max_sets.max(1),
            allocated: Mutex::new(0),
            push_size,
            bindings: bindings.to_vec(),
            uses: Uses::default(),
        };
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&vk_bindings);
        // SAFETY: bindings numbered uniquely (VUID-VkDescriptorSetLayoutCreateInfo-binding-00279);
        // immutable samplers are valid samplers of this device (the caller's contract).
        out.set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }.vk("vkCreateDescriptorSetLayout")?;
        let ranges = [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).offset(0).size(push_size)];
        let set_layouts = [out.set_layout];
        let info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
        let info = if push_size > 0 { info.push_constant_ranges(&ranges) } else { info };
        // SAFETY: push_size is a multiple of 4 within maxPushConstantsSize (128 guaranteed) for
        // dmabridge's shaders; a host's is its contract (VUID-VkPushConstantRange-size-00296).
        out.layout = unsafe { device.create_pipeline_layout(&info, None) }.vk("vkCreatePipelineLayout")?;
        let module_info = vk::ShaderModuleCreateInfo::default().code(&words);
        // SAFETY: dmabridge's modules were validated by spirv-val at build time
        // (VUID-VkShaderModuleCreateInfo-pCode-08737).
        let module = unsafe { device.create_shader_module(&module_info, None) }.vk("vkCreateShaderModule")?;
        let stage = vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(c"main");
        let info = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(out.layout)];
        // SAFETY: the module's interface matches the layout: the bindings and push-constant
        // block declared above are the shader's (VUID-VkComputePipelineCreateInfo-layout-07988).
        let created = unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        // SAFETY: the module is no longer needed once the pipeline exists (or failed).
        unsafe { device.destroy_shader_module(module, None) };
        out.pipeline = created.vk("vkCreateComputePipelines")?.first().copied().unwrap_or_default();
        let storage = bindings.iter().filter(|b| matches!(b, Binding::StorageBuffer)).count() as u32;
        let sampled = bindings.len() as u32 - storage;
        let mut sizes = Vec::new();
        if storage > 0 {
            sizes.push(vk::DescriptorPoolSize { ty: vk::DescriptorType::STORAGE_BUFFER, descriptor_count: storage * out.max_sets });
        }
        if sampled > 0 {
            // A YCbCr sampler may take several descriptors (combinedImageSamplerDescriptorCount).
            sizes.push(vk::DescriptorPoolSize { ty: vk::DescriptorType::COMBINED_IMAGE_SAMPLER, descriptor_count: sampled * out.max_sets * 3 });
        }
        if !sizes.is_empty() {
            let info = vk::DescriptorPoolCreateInfo::default().max_sets(out.max_sets).pool_sizes(&sizes);
            // SAFETY: non-empty pool sizes with non-zero counts (VUID-VkDescriptorPoolSize-descriptorCount-00302).
            out.pool = unsafe { device.create_descriptor_pool(&info, None) }.vk("vkCreateDescriptorPool")?;
        }
        Ok(out)
    }

    pub fn pipeline(&self) -> vk::Pipeline {
        self.pipeline
    }

    pub fn layout(&self) -> vk::PipelineLayout {
        self.layout
    }

    pub(crate) fn set_layout(&self) -> vk::DescriptorSetLayout {
        self.set_layout
    }

    /// Records that GPU work completing at `until` uses the pipeline (its dispatches do this).
    pub fn track(&self, until: Completion) {
        self.uses.add(until);
    }

    /// A new descriptor set of the pipeline's layout. Sets are freed with the pipeline.
    pub fn allocate_set(&self) -> Result<vk::DescriptorSet, ComputeError> {
        let mut allocated = self.allocated.lock().unwrap_or_else(PoisonError::into_inner);
        if *allocated >= self.max_sets || self.pool == vk::DescriptorPool::null() {
            return Err(ComputeError::OutOfSets(self.max_sets));
        }
        let layouts = [self.set_layout];
        let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(self.pool).set_layouts(&layouts);
        // SAFETY: pool and layout of this device; the pool was sized for max_sets sets, and
        // the lock serialises use of the pool (VUID-vkAllocateDescriptorSets-pAllocateInfo-parameter).
        let sets = unsafe { self.engine.device().allocate_descriptor_sets(&info) }.vk("vkAllocateDescriptorSets")?;
        *allocated += 1;
        sets.first().copied().ok_or(ComputeError::OutOfSets(self.max_sets))
    }

    /// Points storage-buffer binding `binding` of `set` at `buffer`.
    ///
    /// # Safety
    /// `set` came from this pipeline and no pending GPU work uses it
    /// (VUID-vkUpdateDescriptorSets-None-03047); `buffer` has STORAGE_BUFFER usage and
    /// outlives the set's uses.
    pub unsafe fn write_buffer(&self, set: vk::DescriptorSet, binding: u32, buffer: vk::Buffer) {
        let infos = [vk::DescriptorBufferInfo { buffer, offset: 0, range: vk::WHOLE_SIZE }];
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(binding)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&infos);
        // SAFETY: the caller's contract (VUID-VkWriteDescriptorSet-descriptorType-00331).
        unsafe { self.engine.device().update_descriptor_sets(&[write], &[]) };
    }

    /// Points sampler binding `binding` of `set` at `view` (the sampler is immutable).
    ///
    /// # Safety
    /// As [`ComputePipeline::write_buffer`]; `view` is of a SAMPLED image that is in
    /// SHADER_READ_ONLY_OPTIMAL whenever the set is used, and carries the sampler's YCbCr
    /// conversion if it has one (VUID-VkWriteDescriptorSet-descriptorType-01948).
    pub unsafe fn write_image(&self, set: vk::DescriptorSet, binding: u32, view: vk::ImageView) {
        let infos = [vk::DescriptorImageInfo { sampler: vk::Sampler::null(), image_view: view, image_layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL }];
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(binding)
            .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
            .image_info(&infos);
        // SAFETY: the caller's contract; the binding's sampler is immutable, so the sampler
        // field is ignored (VUID-VkWriteDescriptorSet-descriptorType-02752).
        unsafe { self.engine.device().update_descriptor_sets(&[write], &[]) };
    }

    /// Records bind + push + dispatch of `groups` workgroups, and tracks the pipeline's use.
    ///
    /// # Safety
    /// `cmd` is a command buffer of this engine's device, recording, to be submitted with a
    /// submission that signals `until`; `set` came from this pipeline and every resource it
    /// points at outlives that submission; `groups` is within maxComputeWorkGroupCount.
    pub unsafe fn record_dispatch(
        &self,
        cmd: vk::CommandBuffer,
        set: vk::DescriptorSet,
        push: &[u8],
        groups: [u32; 3],
        until: Completion,
    ) -> Result<(), ComputeError> {
        if push.len() != self.push_size as usize {
            return Err(ComputeError::PushSize { got: push.len(), declared: self.push_size });
        }
        let device = self.engine.device();
        // SAFETY: the caller's contract; pipeline, layout and set are of this device and
        // compatible; the push range covers `push` exactly (VUID-vkCmdPushConstants-offset-01796).
        unsafe {
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            device.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, self.layout, 0, &[set], &[]);
            if !push.is_empty() {
                device.cmd_push_constants(cmd, self.layout, vk::ShaderStageFlags::COMPUTE, 0, push);
            }
            device.cmd_dispatch(cmd, groups[0], groups[1], groups[2]);
        }
        self.uses.add(until);
        Ok(())
    }
}

impl Drop for ComputePipeline {
    fn drop(&mut self) {
        let garbage = vec![
            Garbage::Pipeline(self.pipeline),
            Garbage::PipelineLayout(self.layout),
            Garbage::DescriptorPool(self.pool),
            Garbage::DescriptorSetLayout(self.set_layout),
        ];
        // Null handles (a pipeline that failed half way) are ignored by the destroy calls.
        self.engine.shared().retire(self.uses.snapshot(), garbage);
    }
}
