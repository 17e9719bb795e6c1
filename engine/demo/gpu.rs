//! The small amount of Vulkan the demo and the benchmark need beyond the engine's own:
//! buffers (device-local, host-visible, or over an imported fd), and compute pipelines for
//! the demo's shaders (`shaders/demo_*.comp`, embedded here).

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};

use ash::vk;

use super::DemoError;
use crate::Engine;

/// SPIR-V of `shaders/demo_pattern.comp`: the producer's animated pattern into a linear
/// AR24 frame, plus its checksum.
pub static PATTERN_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_pattern.spv"));
/// SPIR-V of `shaders/demo_pattern_nv12.comp`: the same for an NV12 frame.
pub static PATTERN_NV12_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_pattern_nv12.spv"));
/// SPIR-V of `shaders/demo_composite.comp`: the consumer's sampler-based composite and checksum.
pub static COMPOSITE_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo_composite.spv"));

pub(crate) fn vk_err(call: &'static str) -> impl FnOnce(vk::Result) -> DemoError {
    move |result| DemoError::Vk { call, result }
}

/// Where a [`GpuBuffer`]'s memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferKind {
    /// Device-local memory the GPU works in.
    DeviceLocal,
    /// Host-visible, coherent and mapped for its whole life.
    HostMapped,
}

/// A buffer and its memory, destroyed on drop.
pub struct GpuBuffer<'e> {
    engine: &'e Engine,
    pub buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    pub size: u64,
    mapped: *mut u8,
}

impl<'e> GpuBuffer<'e> {
    /// A new buffer of `size` bytes for `usage`.
    pub fn new(engine: &'e Engine, size: u64, usage: vk::BufferUsageFlags, kind: BufferKind) -> Result<Self, DemoError> {
        let device = engine.device();
        let info = vk::BufferCreateInfo::default().size(size.max(4)).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create info with a non-zero size (VUID-VkBufferCreateInfo-size-00912).
        let buffer = unsafe { device.create_buffer(&info, None) }.map_err(vk_err("vkCreateBuffer"))?;
        let mut out = GpuBuffer { engine, buffer, memory: vk::DeviceMemory::null(), size, mapped: std::ptr::null_mut() };
        // SAFETY: buffer of this device.
        let reqs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let flags = match kind {
            BufferKind::DeviceLocal => vk::MemoryPropertyFlags::DEVICE_LOCAL,
            BufferKind::HostMapped => vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
        };
        let type_index = engine
            .memory_type(reqs.memory_type_bits, flags)
            .or_else(|| (kind == BufferKind::DeviceLocal).then(|| engine.memory_type(reqs.memory_type_bits, vk::MemoryPropertyFlags::empty())).flatten())
            .ok_or(DemoError::NoMemoryType)?;
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(reqs.size).memory_type_index(type_index);
        // SAFETY: a plain allocation in a memory type the buffer allows.
        out.memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // SAFETY: unbound buffer, memory of at least reqs.size, offset 0 (VUID-vkBindBufferMemory-size-01037).
        unsafe { device.bind_buffer_memory(buffer, out.memory, 0) }.map_err(vk_err("vkBindBufferMemory"))?;
        if kind == BufferKind::HostMapped {
            // SAFETY: host-visible memory, not mapped yet (VUID-vkMapMemory-memory-00678).
            let ptr = unsafe { device.map_memory(out.memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                .map_err(vk_err("vkMapMemory"))?;
            out.mapped = ptr.cast();
        }
        Ok(out)
    }

    /// A buffer over the first `size` bytes of the file behind `fd` (a dma-buf, or a memfd
    /// standing in for one), imported as `DMA_BUF` memory. Takes ownership of `fd`: Vulkan
    /// keeps it on success, it is closed on failure. The caller checked `size` against the
    /// file's size.
    pub fn import_fd(engine: &'e Engine, fd: OwnedFd, size: u64, usage: vk::BufferUsageFlags) -> Result<Self, DemoError> {
        let device = engine.device();
        let fd_fn = engine.external_memory_fd().ok_or(DemoError::NoFdImport)?;
        let handle = vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT;
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
        let info = vk::BufferCreateInfo::default()
            .size(size.max(4))
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        // SAFETY: a valid create info with the DMA_BUF handle type, which the engine enabled
        // (VUID-VkExternalMemoryBufferCreateInfo-handleTypes-parameter).
        let buffer = unsafe { device.create_buffer(&info, None) }.map_err(vk_err("vkCreateBuffer"))?;
        let mut out = GpuBuffer { engine, buffer, memory: vk::DeviceMemory::null(), size, mapped: std::ptr::null_mut() };
        // SAFETY: buffer of this device.
        let reqs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let file_size = rustix::fs::fstat(&fd).map_err(|e| DemoError::Io(e.into()))?.st_size as u64;
        if reqs.size > file_size {
            return Err(DemoError::FileTooSmall { needed: reqs.size, have: file_size });
        }
        let mut fd_props = vk::MemoryFdPropertiesKHR::default();
        // SAFETY: a valid, mmap-able fd (VUID-vkGetMemoryFdPropertiesKHR-fd-00673).
        unsafe { fd_fn.get_memory_fd_properties(handle, fd.as_raw_fd(), &mut fd_props) }
            .map_err(vk_err("vkGetMemoryFdPropertiesKHR"))?;
        let type_index = engine
            .memory_type(reqs.memory_type_bits & fd_props.memory_type_bits, vk::MemoryPropertyFlags::empty())
            .ok_or(DemoError::NoMemoryType)?;
        let mut import = vk::ImportMemoryFdInfoKHR::default().handle_type(handle).fd(fd.as_raw_fd());
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(reqs.size)
            .memory_type_index(type_index)
            .push_next(&mut import);
        // SAFETY: the file holds at least reqs.size bytes (checked above) and the memory type
        // is one the fd allows (VUID-VkImportMemoryFdInfoKHR-handleType-00667).
        out.memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // A successful import transfers the fd's ownership to Vulkan.
        let _ = fd.into_raw_fd();
        // SAFETY: unbound buffer, memory of reqs.size, offset 0 (VUID-vkBindBufferMemory-size-01037).
        unsafe { device.bind_buffer_memory(buffer, out.memory, 0) }.map_err(vk_err("vkBindBufferMemory"))?;
        Ok(out)
    }

    /// The mapped bytes of a [`BufferKind::HostMapped`] buffer; empty otherwise. Only read
    /// or write it while no GPU work on the buffer is pending.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.mapped.is_null() {
            return &mut [];
        }
        let Ok(len) = usize::try_from(self.size) else { return &mut [] };
        // SAFETY: the mapping covers the whole allocation (>= size bytes), lives as long as
        // self, and &mut self makes this the only slice over it.
        unsafe { std::slice::from_raw_parts_mut(self.mapped, len) }
    }

    /// Reads the first two u32 of a mapped buffer (the checksum slots).
    pub fn read_u32(&mut self, index: usize) -> u32 {
        let b = self.bytes_mut();
        b.get(index * 4..index * 4 + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
}

impl Drop for GpuBuffer<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: objects of this device; every submission that used them was waited for
        // (VUID-vkDestroyBuffer-buffer-00922, VUID-vkFreeMemory-memory-00677). Freeing mapped
        // memory unmaps it.
        unsafe {
            device.destroy_buffer(self.buffer, None);
            if self.memory != vk::DeviceMemory::null() {
                device.free_memory(self.memory, None);
            }
        }
    }
}

/// One descriptor of a compute pipeline's single set.
#[derive(Debug, Clone, Copy)]
pub enum Binding {
    StorageBuffer,
    /// A combined image sampler with this immutable sampler.
    Sampler(vk::Sampler),
}

/// A compute pipeline with one descriptor set layout and a pool for a few sets.
pub struct Compute<'e> {
    engine: &'e Engine,
    set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pub pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
}

impl<'e> Compute<'e> {
    pub fn new(engine: &'e Engine, spv: &[u8], bindings: &[Binding], push_size: u32, max_sets: u32) -> Result<Self, DemoError> {
        let device = engine.device();
        let words = ash::util::read_spv(&mut std::io::Cursor::new(spv)).map_err(DemoError::Io)?;
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
                let base = vk::DescriptorSetLayoutBinding::default()
                    .binding(i as u32)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE);
                match b {
                    Binding::StorageBuffer => base.descriptor_type(vk::DescriptorType::STORAGE_BUFFER),
                    Binding::Sampler(_) => {
                        base.descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER).immutable_samplers(&samplers[i])
                    }
                }
            })
            .collect();
        let mut out = Compute {
            engine,
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pool: vk::DescriptorPool::null(),
        };
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&vk_bindings);
        // SAFETY: bindings numbered uniquely (VUID-VkDescriptorSetLayoutCreateInfo-binding-00279);
        // immutable samplers are valid samplers of this device.
        out.set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }.map_err(vk_err("vkCreateDescriptorSetLayout"))?;
        let ranges = [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).offset(0).size(push_size)];
        let set_layouts = [out.set_layout];
        let info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts).push_constant_ranges(&ranges);
        // SAFETY: push_size is a non-zero multiple of 4 below maxPushConstantsSize (128 guaranteed)
        // (VUID-VkPushConstantRange-size-00296).
        out.layout = unsafe { device.create_pipeline_layout(&info, None) }.map_err(vk_err("vkCreatePipelineLayout"))?;
        let module_info = vk::ShaderModuleCreateInfo::default().code(&words);
        // SAFETY: SPIR-V validated by spirv-val at build time (VUID-VkShaderModuleCreateInfo-pCode-08737).
        let module = unsafe { device.create_shader_module(&module_info, None) }.map_err(vk_err("vkCreateShaderModule"))?;
        let stage = vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(c"main");
        let info = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(out.layout)];
        // SAFETY: the module's interface matches the layout: the bindings and push-constant
        // block declared above are the shader's (VUID-VkComputePipelineCreateInfo-layout-07988).
        let created = unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        // SAFETY: the module is no longer needed once the pipeline exists (or failed).
        unsafe { device.destroy_shader_module(module, None) };
        out.pipeline = created.map_err(|(_, r)| DemoError::Vk { call: "vkCreateComputePipelines", result: r })?[0];
        let mut sizes = Vec::new();
        let storage = bindings.iter().filter(|b| matches!(b, Binding::StorageBuffer)).count() as u32;
        let sampled = bindings.len() as u32 - storage;
        if storage > 0 {
            sizes.push(vk::DescriptorPoolSize { ty: vk::DescriptorType::STORAGE_BUFFER, descriptor_count: storage * max_sets });
        }
        if sampled > 0 {
            // A YCbCr sampler may take several descriptors; be generous.
            sizes.push(vk::DescriptorPoolSize { ty: vk::DescriptorType::COMBINED_IMAGE_SAMPLER, descriptor_count: sampled * max_sets * 3 });
        }
        let info = vk::DescriptorPoolCreateInfo::default()
            .flags(vk::DescriptorPoolCreateFlags::FREE_DESCRIPTOR_SET)
            .max_sets(max_sets)
            .pool_sizes(&sizes);
        // SAFETY: non-empty pool sizes with non-zero counts (VUID-VkDescriptorPoolSize-descriptorCount-00302).
        out.pool = unsafe { device.create_descriptor_pool(&info, None) }.map_err(vk_err("vkCreateDescriptorPool"))?;
        Ok(out)
    }

    /// A new descriptor set of this pipeline's layout, freed with [`Compute::free_set`] or with the pipeline.
    pub fn allocate_set(&self) -> Result<vk::DescriptorSet, DemoError> {
        let layouts = [self.set_layout];
        let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(self.pool).set_layouts(&layouts);
        // SAFETY: pool and layout of this device; the pool was sized for max_sets sets.
        let sets = unsafe { self.engine.device().allocate_descriptor_sets(&info) }.map_err(vk_err("vkAllocateDescriptorSets"))?;
        sets.first().copied().ok_or(DemoError::Vk { call: "vkAllocateDescriptorSets", result: vk::Result::ERROR_UNKNOWN })
    }

    pub fn free_set(&self, set: vk::DescriptorSet) {
        // SAFETY: the set came from this pool, which allows freeing, and no pending
        // submission uses it (every submission is waited for).
        let _ = unsafe { self.engine.device().free_descriptor_sets(self.pool, &[set]) };
    }

    /// Points storage-buffer binding `binding` of `set` at the whole of `buffer`.
    pub fn write_buffer(&self, set: vk::DescriptorSet, binding: u32, buffer: vk::Buffer) {
        let infos = [vk::DescriptorBufferInfo { buffer, offset: 0, range: vk::WHOLE_SIZE }];
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(binding)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&infos);
        // SAFETY: the binding is a storage buffer of the set's layout and the buffer was
        // created with STORAGE_BUFFER usage (VUID-VkWriteDescriptorSet-descriptorType-00331).
        unsafe { self.engine.device().update_descriptor_sets(&[write], &[]) };
    }

    /// Points sampler binding `binding` of `set` at `view` (immutable sampler, so only the view).
    pub fn write_image(&self, set: vk::DescriptorSet, binding: u32, view: vk::ImageView) {
        let infos = [vk::DescriptorImageInfo {
            sampler: vk::Sampler::null(),
            image_view: view,
            image_layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
        }];
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(binding)
            .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
            .image_info(&infos);
        // SAFETY: the binding is a combined image sampler with an immutable sampler, so the
        // sampler field is ignored; the view is of a SAMPLED image that will be in
        // SHADER_READ_ONLY_OPTIMAL when used (VUID-VkWriteDescriptorSet-descriptorType-00337).
        unsafe { self.engine.device().update_descriptor_sets(&[write], &[]) };
    }

    /// Records bind + push + dispatch over a `width` x `height` grid of 16x16 groups.
    pub fn record(&self, cmd: vk::CommandBuffer, set: vk::DescriptorSet, push: &[u32], width: u32, height: u32) {
        let device = self.engine.device();
        let bytes: Vec<u8> = push.iter().flat_map(|w| w.to_le_bytes()).collect();
        // SAFETY: recording state; pipeline, layout and set are of this device and
        // compatible; the push range covers `bytes` (VUID-vkCmdPushConstants-offset-01796).
        unsafe {
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            device.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, self.layout, 0, &[set], &[]);
            device.cmd_push_constants(cmd, self.layout, vk::ShaderStageFlags::COMPUTE, 0, &bytes);
            device.cmd_dispatch(cmd, width.div_ceil(16), height.div_ceil(16), 1);
        }
    }
}

impl Drop for Compute<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: objects of this device that no pending submission uses
        // (VUID-vkDestroyPipeline-pipeline-00765, VUID-vkDestroyDescriptorPool-descriptorPool-00303).
        unsafe {
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_pool(self.pool, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

/// A nearest-filtering sampler (with a YCbCr conversion for multi-planar formats), and the
/// conversion object it needs. Image views of such formats must chain the same conversion.
pub struct Sampler<'e> {
    engine: &'e Engine,
    pub sampler: vk::Sampler,
    pub conversion: Option<vk::SamplerYcbcrConversion>,
}

impl<'e> Sampler<'e> {
    /// `raw`: the conversion only reconstructs the planes (RGB_IDENTITY model, so sampling
    /// returns Cr, Y, Cb as r, g, b, exactly); otherwise BT.709 narrow range to RGB.
    pub fn new(engine: &'e Engine, format: vk::Format, multi_planar: bool, raw: bool) -> Result<Self, DemoError> {
        let device = engine.device();
        let conversion = if multi_planar {
            let (model, range) = if raw {
                (vk::SamplerYcbcrModelConversion::RGB_IDENTITY, vk::SamplerYcbcrRange::ITU_FULL)
            } else {
                (vk::SamplerYcbcrModelConversion::YCBCR_709, vk::SamplerYcbcrRange::ITU_NARROW)
            };
            let info = vk::SamplerYcbcrConversionCreateInfo::default()
                .format(format)
                .ycbcr_model(model)
                .ycbcr_range(range)
                .chroma_filter(vk::Filter::NEAREST)
                // Cosited-even (every device supports it; MIDPOINT is optional and lavapipe
                // lacks it). demo_composite.comp samples so that nearest reconstruction gives
                // each pixel its own 2x2 block's chroma.
                .x_chroma_offset(vk::ChromaLocation::COSITED_EVEN)
                .y_chroma_offset(vk::ChromaLocation::COSITED_EVEN);
            // SAFETY: samplerYcbcrConversion is enabled where the device offers it (the
            // engine enables it) and the format is a YCbCr format (VUID-vkCreateSamplerYcbcrConversion-None-01648).
            Some(unsafe { device.create_sampler_ycbcr_conversion(&info, None) }.map_err(vk_err("vkCreateSamplerYcbcrConversion"))?)
        } else {
            None
        };
        let mut conv_info = conversion.map(|c| vk::SamplerYcbcrConversionInfo::default().conversion(c));
        let mut info = vk::SamplerCreateInfo::default()
            .mag_filter(vk::Filter::NEAREST)
            .min_filter(vk::Filter::NEAREST)
            .mipmap_mode(vk::SamplerMipmapMode::NEAREST)
            .address_mode_u(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .address_mode_v(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .address_mode_w(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .unnormalized_coordinates(false);
        if let Some(c) = conv_info.as_mut() {
            info = info.push_next(c);
        }
        // SAFETY: a valid sampler description; with a conversion, filters match the
        // conversion's chroma filter and addressing is clamp-to-edge (VUID-VkSamplerCreateInfo-addressModeU-01646).
        let sampler = match unsafe { device.create_sampler(&info, None) } {
            Ok(s) => s,
            Err(result) => {
                if let Some(c) = conversion {
                    // SAFETY: unused conversion of this device.
                    unsafe { device.destroy_sampler_ycbcr_conversion(c, None) };
                }
                return Err(DemoError::Vk { call: "vkCreateSampler", result });
            }
        };
        Ok(Sampler { engine, sampler, conversion })
    }

    /// A 2D view of `image` (all planes), with the YCbCr conversion when there is one.
    pub fn view(&self, image: vk::Image, format: vk::Format) -> Result<vk::ImageView, DemoError> {
        let mut conv_info = self.conversion.map(|c| vk::SamplerYcbcrConversionInfo::default().conversion(c));
        let mut info = vk::ImageViewCreateInfo::default()
            .image(image)
            .view_type(vk::ImageViewType::TYPE_2D)
            .format(format)
            .subresource_range(vk::ImageSubresourceRange {
                aspect_mask: vk::ImageAspectFlags::COLOR,
                base_mip_level: 0,
                level_count: 1,
                base_array_layer: 0,
                layer_count: 1,
            });
        if let Some(c) = conv_info.as_mut() {
            info = info.push_next(c);
        }
        // SAFETY: the image has SAMPLED usage and this format; a YCbCr format's view chains
        // the conversion (VUID-VkImageViewCreateInfo-format-06415).
        unsafe { self.engine.device().create_image_view(&info, None) }.map_err(vk_err("vkCreateImageView"))
    }

    pub fn destroy_view(&self, view: vk::ImageView) {
        // SAFETY: a view of this device that no pending submission uses.
        unsafe { self.engine.device().destroy_image_view(view, None) };
    }
}

impl Drop for Sampler<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: objects of this device; pipelines that hold the sampler immutably are
        // dropped first by their owners (declared after the sampler).
        unsafe {
            device.destroy_sampler(self.sampler, None);
            if let Some(c) = self.conversion {
                device.destroy_sampler_ycbcr_conversion(c, None);
            }
        }
    }
}

/// A buffer memory barrier over the whole buffer.
pub fn buffer_barrier(
    buffer: vk::Buffer,
    src: vk::AccessFlags,
    dst: vk::AccessFlags,
    src_family: u32,
    dst_family: u32,
) -> vk::BufferMemoryBarrier<'static> {
    vk::BufferMemoryBarrier::default()
        .buffer(buffer)
        .offset(0)
        .size(vk::WHOLE_SIZE)
        .src_access_mask(src)
        .dst_access_mask(dst)
        .src_queue_family_index(src_family)
        .dst_queue_family_index(dst_family)
}

/// A command buffer and fence kept for repeated submissions: what a real per-frame loop
/// does instead of creating a pool and a fence for every frame
/// ([`Engine::submit_and_wait`] is for one-shot work).
pub struct Submitter<'e> {
    engine: &'e Engine,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
}

impl<'e> Submitter<'e> {
    pub fn new(engine: &'e Engine) -> Result<Self, DemoError> {
        let device = engine.device();
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(engine.queue_family())
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid create info for a queue family of this device.
        let pool = unsafe { device.create_command_pool(&info, None) }.map_err(vk_err("vkCreateCommandPool"))?;
        let mut out = Submitter { engine, pool, cmd: vk::CommandBuffer::null(), fence: vk::Fence::null() };
        let alloc = vk::CommandBufferAllocateInfo::default().command_pool(pool).level(vk::CommandBufferLevel::PRIMARY).command_buffer_count(1);
        // SAFETY: the pool belongs to this device.
        let cmds = unsafe { device.allocate_command_buffers(&alloc) }.map_err(vk_err("vkAllocateCommandBuffers"))?;
        out.cmd = cmds.first().copied().ok_or(DemoError::Vk { call: "vkAllocateCommandBuffers", result: vk::Result::ERROR_UNKNOWN })?;
        // SAFETY: valid device.
        out.fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.map_err(vk_err("vkCreateFence"))?;
        Ok(out)
    }

    /// Records into the (reset) command buffer; [`Submitter::submit`] runs it, as often as wanted.
    pub fn record(&self, record: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> Result<(), DemoError> {
        let device = self.engine.device();
        // SAFETY: the buffer is not pending (every submit waits for its fence) and its pool
        // allows resetting single buffers (VUID-vkBeginCommandBuffer-commandBuffer-00050).
        unsafe { device.begin_command_buffer(self.cmd, &vk::CommandBufferBeginInfo::default()) }.map_err(vk_err("vkBeginCommandBuffer"))?;
        record(device, self.cmd);
        // SAFETY: recording state (VUID-vkEndCommandBuffer-commandBuffer-00059).
        unsafe { device.end_command_buffer(self.cmd) }.map_err(vk_err("vkEndCommandBuffer"))
    }

    /// Submits the recorded commands and waits for them.
    pub fn submit(&self) -> Result<(), DemoError> {
        let device = self.engine.device();
        let cmds = [self.cmd];
        let submit = vk::SubmitInfo::default().command_buffers(&cmds);
        {
            let queue = self.engine.queue();
            // SAFETY: the queue is externally synchronised by the engine's lock
            // (VUID-vkQueueSubmit-queue-parameter); the fence is unsignalled (reset after each
            // wait) and the buffer is executable and not pending (VUID-vkQueueSubmit-pCommandBuffers-00071).
            unsafe { device.queue_submit(*queue, &[submit], self.fence) }.map_err(vk_err("vkQueueSubmit"))?;
        }
        // SAFETY: the fence belongs to this device; after the wait nothing is pending on it.
        unsafe {
            device.wait_for_fences(&[self.fence], true, u64::MAX).map_err(vk_err("vkWaitForFences"))?;
            device.reset_fences(&[self.fence]).map_err(vk_err("vkResetFences"))
        }
    }
}

impl Drop for Submitter<'_> {
    fn drop(&mut self) {
        let device = self.engine.device();
        // SAFETY: every submission was waited for, so neither the fence nor the pool's buffer
        // is in use (VUID-vkDestroyFence-fence-01120, VUID-vkDestroyCommandPool-commandPool-00041).
        unsafe {
            if self.fence != vk::Fence::null() {
                device.destroy_fence(self.fence, None);
            }
            device.destroy_command_pool(self.pool, None);
        }
    }
}
