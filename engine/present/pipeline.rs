//! The render pass and the drawing pipelines, one per kind of frame.
//!
//! A YCbCr frame is sampled through an immutable sampler that carries a
//! `VkSamplerYcbcrConversion`; the conversion (matrix, range, chroma siting, filter) is baked
//! into the sampler, the descriptor set layout and so the pipeline, so each combination gets
//! its own [`Pipeline`], made on first use and kept until the presenter is dropped. RGB
//! frames use the same layout with a plain immutable sampler.

use std::collections::HashMap;

use ash::vk;

use super::{shaders, PresentError, YcbcrMatrix, YcbcrRange};
use crate::error::{VkError, VkResultExt};
use crate::device::submit::Completion;
use crate::Engine;

/// Draws of one pipeline that may be in flight at once; a present finding every set busy
/// skips its frame rather than wait (`SkipReason::GpuBusy`).
pub(crate) const SETS_PER_PIPELINE: u32 = 3;

/// The YCbCr half of a pipeline's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct YcbcrKey {
    pub matrix: YcbcrMatrix,
    pub range: YcbcrRange,
    /// NV21/YV12: Cb and Cr are in the other order; swapped in the conversion's mapping.
    pub swap_chroma: bool,
    pub x_offset: vk::ChromaLocation,
    pub y_offset: vk::ChromaLocation,
}

/// What a pipeline depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub format: vk::Format,
    pub ycbcr: Option<YcbcrKey>,
    /// LINEAR filtering (scaled frames look smooth) where the format features allow it.
    pub linear: bool,
}

/// One pipeline and everything it owns.
pub(crate) struct Pipeline {
    pub conversion: vk::SamplerYcbcrConversion,
    sampler: vk::Sampler,
    set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pub pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
    /// Descriptor sets, each with the point its last draw completes at: a set is rewritten
    /// only once that point is reached (VUID-vkUpdateDescriptorSets-None-03047).
    sets: Vec<(vk::DescriptorSet, Option<Completion>)>,
}

impl Pipeline {
    /// A set whose last draw is complete: its index and handle.
    pub fn free_set(&self, engine: &Engine) -> Option<(usize, vk::DescriptorSet)> {
        self.sets.iter().enumerate().find(|(_, (_, used))| used.map_or(true, |u| engine.is_reached(&u))).map(|(i, (s, _))| (i, *s))
    }

    /// Marks set `i` in use until `until`.
    pub fn mark_used(&mut self, i: usize, until: Completion) {
        if let Some(slot) = self.sets.get_mut(i) {
            slot.1 = Some(until);
        }
    }

    /// # Safety
    /// Nothing that uses these objects may be pending on the GPU.
    unsafe fn destroy(&self, device: &ash::Device) {
        // SAFETY: the caller guarantees no pending use (VUID-vkDestroyPipeline-pipeline-00765,
        // VUID-vkDestroyDescriptorPool-descriptorPool-00303, VUID-vkDestroySampler-sampler-01082);
        // null handles are ignored by the destroy calls.
        unsafe {
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_pool(self.pool, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
            device.destroy_sampler(self.sampler, None);
            if self.conversion != vk::SamplerYcbcrConversion::null() {
                device.destroy_sampler_ycbcr_conversion(self.conversion, None);
            }
        }
    }
}

/// The render pass: clear (the letterbox colour), draw, hand the image to presentation.
pub(crate) fn create_render_pass(device: &ash::Device, format: vk::Format) -> Result<vk::RenderPass, PresentError> {
    let attachments = [vk::AttachmentDescription::default()
        .format(format)
        .samples(vk::SampleCountFlags::TYPE_1)
        .load_op(vk::AttachmentLoadOp::CLEAR)
        .store_op(vk::AttachmentStoreOp::STORE)
        .stencil_load_op(vk::AttachmentLoadOp::DONT_CARE)
        .stencil_store_op(vk::AttachmentStoreOp::DONT_CARE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
        .final_layout(vk::ImageLayout::PRESENT_SRC_KHR)];
    let colour_refs = [vk::AttachmentReference { attachment: 0, layout: vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL }];
    let subpasses = [vk::SubpassDescription::default()
        .pipeline_bind_point(vk::PipelineBindPoint::GRAPHICS)
        .color_attachments(&colour_refs)];
    // The layout transition at the start of the pass waits for the acquire semaphore, which
    // the submission waits for at COLOR_ATTACHMENT_OUTPUT.
    let dependencies = [vk::SubpassDependency::default()
        .src_subpass(vk::SUBPASS_EXTERNAL)
        .dst_subpass(0)
        .src_stage_mask(vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT)
        .dst_stage_mask(vk::PipelineStageFlags::COLOR_ATTACHMENT_OUTPUT)
        .src_access_mask(vk::AccessFlags::empty())
        .dst_access_mask(vk::AccessFlags::COLOR_ATTACHMENT_WRITE)];
    let info = vk::RenderPassCreateInfo::default()
        .attachments(&attachments)
        .subpasses(&subpasses)
        .dependencies(&dependencies);
    // SAFETY: one colour attachment referenced by the only subpass in a valid layout
    // (VUID-VkAttachmentReference-layout-03077); the dependency names existing subpasses.
    Ok(unsafe { device.create_render_pass(&info, None) }.vk("vkCreateRenderPass")?)
}

/// The shader modules and every pipeline made so far, for one render pass.
pub(crate) struct Pipelines {
    vertex: vk::ShaderModule,
    fragment: vk::ShaderModule,
    cache: HashMap<Key, Pipeline>,
}

impl Pipelines {
    pub fn new(device: &ash::Device) -> Result<Self, PresentError> {
        let vert = shaders::vertex().map_err(PresentError::Shader)?;
        let frag = shaders::fragment().map_err(PresentError::Shader)?;
        // SAFETY: SPIR-V compiled and validated for Vulkan 1.1 by build.rs
        // (VUID-VkShaderModuleCreateInfo-pCode-08737).
        let vertex = unsafe { device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&vert), None) }
            .vk("vkCreateShaderModule")?;
        // SAFETY: as above.
        let fragment = match unsafe { device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&frag), None) } {
            Ok(m) => m,
            Err(result) => {
                // SAFETY: unused module of this device.
                unsafe { device.destroy_shader_module(vertex, None) };
                return Err(VkError { call: "vkCreateShaderModule", result }.into());
            }
        };
        Ok(Pipelines { vertex, fragment, cache: HashMap::new() })
    }

    /// The pipeline for `key`, made on first use.
    pub fn get(&mut self, device: &ash::Device, render_pass: vk::RenderPass, key: Key) -> Result<&Pipeline, PresentError> {
        if !self.cache.contains_key(&key) {
            let p = self.build(device, render_pass, key)?;
            tracing::debug!(?key, "presenter pipeline created");
            self.cache.insert(key, p);
        }
        self.cache.get(&key).ok_or(PresentError::Internal("pipeline cache lost an entry"))
    }

    /// The pipeline for `key`, if it was made.
    pub fn get_existing_mut(&mut self, key: &Key) -> Option<&mut Pipeline> {
        self.cache.get_mut(key)
    }

    /// # Safety
    /// Nothing that uses these objects may be pending on the GPU.
    pub unsafe fn destroy(&mut self, device: &ash::Device) {
        for (_, p) in self.cache.drain() {
            // SAFETY: forwarded from the caller.
            unsafe { p.destroy(device) };
        }
        // SAFETY: the pipelines made from them are gone, and nothing is pending.
        unsafe {
            device.destroy_shader_module(self.vertex, None);
            device.destroy_shader_module(self.fragment, None);
        }
    }

    fn build(&self, device: &ash::Device, render_pass: vk::RenderPass, key: Key) -> Result<Pipeline, PresentError> {
        let mut p = Pipeline {
            conversion: vk::SamplerYcbcrConversion::null(),
            sampler: vk::Sampler::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pool: vk::DescriptorPool::null(),
            sets: Vec::new(),
        };
        match self.fill(device, render_pass, key, &mut p) {
            Ok(()) => Ok(p),
            Err(e) => {
                // SAFETY: nothing was submitted with the half-made objects.
                unsafe { p.destroy(device) };
                Err(e)
            }
        }
    }

    fn fill(&self, device: &ash::Device, render_pass: vk::RenderPass, key: Key, p: &mut Pipeline) -> Result<(), PresentError> {
        let filter = if key.linear { vk::Filter::LINEAR } else { vk::Filter::NEAREST };
        let mut conversion_info = vk::SamplerYcbcrConversionInfo::default();
        if let Some(y) = key.ycbcr {
            let components = if y.swap_chroma {
                vk::ComponentMapping {
                    r: vk::ComponentSwizzle::B,
                    g: vk::ComponentSwizzle::IDENTITY,
                    b: vk::ComponentSwizzle::R,
                    a: vk::ComponentSwizzle::IDENTITY,
                }
            } else {
                vk::ComponentMapping::default()
            };
            let info = vk::SamplerYcbcrConversionCreateInfo::default()
                .format(key.format)
                .ycbcr_model(match y.matrix {
                    YcbcrMatrix::Bt709 => vk::SamplerYcbcrModelConversion::YCBCR_709,
                    YcbcrMatrix::Bt601 => vk::SamplerYcbcrModelConversion::YCBCR_601,
                    YcbcrMatrix::Bt2020 => vk::SamplerYcbcrModelConversion::YCBCR_2020,
                })
                .ycbcr_range(match y.range {
                    YcbcrRange::Limited => vk::SamplerYcbcrRange::ITU_NARROW,
                    YcbcrRange::Full => vk::SamplerYcbcrRange::ITU_FULL,
                })
                .components(components)
                .x_chroma_offset(y.x_offset)
                .y_chroma_offset(y.y_offset)
                .chroma_filter(filter)
                .force_explicit_reconstruction(false);
            // SAFETY: the format is a YCbCr format whose features the caller checked: the
            // chroma offsets are ones the format supports (VUID-VkSamplerYcbcrConversionCreateInfo-xChromaOffset-01651),
            // LINEAR chroma filtering only where SAMPLED_IMAGE_YCBCR_CONVERSION_LINEAR_FILTER is
            // set (VUID-VkSamplerYcbcrConversionCreateInfo-chromaFilter-01657), and the
            // samplerYcbcrConversion feature is on (VUID-vkCreateSamplerYcbcrConversion-None-01648).
            p.conversion = unsafe { device.create_sampler_ycbcr_conversion(&info, None) }
                .vk("vkCreateSamplerYcbcrConversion")?;
            conversion_info = conversion_info.conversion(p.conversion);
        }
        let mut sampler_info = vk::SamplerCreateInfo::default()
            .mag_filter(filter)
            .min_filter(filter)
            .mipmap_mode(vk::SamplerMipmapMode::NEAREST)
            .address_mode_u(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .address_mode_v(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .address_mode_w(vk::SamplerAddressMode::CLAMP_TO_EDGE)
            .max_lod(0.0)
            .unnormalized_coordinates(false);
        if key.ycbcr.is_some() {
            sampler_info = sampler_info.push_next(&mut conversion_info);
        }
        // SAFETY: with a conversion, min/mag filters equal its chromaFilter
        // (VUID-VkSamplerCreateInfo-minFilter-01645), addressing is CLAMP_TO_EDGE, anisotropy
        // and unnormalized coordinates are off (VUID-VkSamplerCreateInfo-addressModeU-01646).
        p.sampler = unsafe { device.create_sampler(&sampler_info, None) }.vk("vkCreateSampler")?;

        let samplers = [p.sampler];
        let bindings = [vk::DescriptorSetLayoutBinding::default()
            .binding(0)
            .descriptor_type(vk::DescriptorType::COMBINED_IMAGE_SAMPLER)
            .descriptor_count(1)
            .stage_flags(vk::ShaderStageFlags::FRAGMENT)
            .immutable_samplers(&samplers)];
        let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        // SAFETY: a YCbCr sampler may only be used as an immutable sampler, which it is
        // (VUID-VkDescriptorSetLayoutBinding-descriptorType-00282 and the YCbCr rule in
        // VUID-VkWriteDescriptorSet-descriptorType-01946).
        p.set_layout =
            unsafe { device.create_descriptor_set_layout(&set_info, None) }.vk("vkCreateDescriptorSetLayout")?;

        // A multi-planar format may take up to 3 descriptors per combined image sampler
        // (combinedImageSamplerDescriptorCount); 4 covers every format in the table.
        let sizes = [vk::DescriptorPoolSize { ty: vk::DescriptorType::COMBINED_IMAGE_SAMPLER, descriptor_count: 4 * SETS_PER_PIPELINE }];
        let pool_info = vk::DescriptorPoolCreateInfo::default().max_sets(SETS_PER_PIPELINE).pool_sizes(&sizes);
        // SAFETY: valid create info (VUID-VkDescriptorPoolCreateInfo-maxSets-00301: maxSets > 0).
        p.pool = unsafe { device.create_descriptor_pool(&pool_info, None) }.vk("vkCreateDescriptorPool")?;
        let layouts = [p.set_layout; SETS_PER_PIPELINE as usize];
        let alloc = vk::DescriptorSetAllocateInfo::default().descriptor_pool(p.pool).set_layouts(&layouts);
        // SAFETY: the pool has room for SETS_PER_PIPELINE sets of this layout.
        p.sets = unsafe { device.allocate_descriptor_sets(&alloc) }.vk("vkAllocateDescriptorSets")?.into_iter().map(|s| (s, None)).collect();
        let layouts = [p.set_layout];

        let push = [vk::PushConstantRange { stage_flags: vk::ShaderStageFlags::FRAGMENT, offset: 0, size: 4 }];
        let layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts).push_constant_ranges(&push);
        // SAFETY: one set layout and a 4-byte push range within maxPushConstantsSize (>= 128).
        p.layout = unsafe { device.create_pipeline_layout(&layout_info, None) }.vk("vkCreatePipelineLayout")?;

        let stages = [
            vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::VERTEX)
                .module(self.vertex)
                .name(c"main"),
            vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::FRAGMENT)
                .module(self.fragment)
                .name(c"main"),
        ];
        let vertex_input = vk::PipelineVertexInputStateCreateInfo::default();
        let input_assembly =
            vk::PipelineInputAssemblyStateCreateInfo::default().topology(vk::PrimitiveTopology::TRIANGLE_LIST);
        let viewport = vk::PipelineViewportStateCreateInfo::default().viewport_count(1).scissor_count(1);
        let raster = vk::PipelineRasterizationStateCreateInfo::default()
            .polygon_mode(vk::PolygonMode::FILL)
            .cull_mode(vk::CullModeFlags::NONE)
            .front_face(vk::FrontFace::COUNTER_CLOCKWISE)
            .line_width(1.0);
        let multisample =
            vk::PipelineMultisampleStateCreateInfo::default().rasterization_samples(vk::SampleCountFlags::TYPE_1);
        let blend_attachments = [vk::PipelineColorBlendAttachmentState::default()
            .blend_enable(false)
            .color_write_mask(vk::ColorComponentFlags::RGBA)];
        let blend = vk::PipelineColorBlendStateCreateInfo::default().attachments(&blend_attachments);
        let dynamic_states = [vk::DynamicState::VIEWPORT, vk::DynamicState::SCISSOR];
        let dynamic = vk::PipelineDynamicStateCreateInfo::default().dynamic_states(&dynamic_states);
        let info = vk::GraphicsPipelineCreateInfo::default()
            .stages(&stages)
            .vertex_input_state(&vertex_input)
            .input_assembly_state(&input_assembly)
            .viewport_state(&viewport)
            .rasterization_state(&raster)
            .multisample_state(&multisample)
            .color_blend_state(&blend)
            .dynamic_state(&dynamic)
            .layout(p.layout)
            .render_pass(render_pass)
            .subpass(0);
        // SAFETY: the shader interfaces match (location 0 vec2 between the stages, binding
        // 0 combined image sampler and a 4-byte push constant in the layout:
        // VUID-VkGraphicsPipelineCreateInfo-layout-07988, -07990); viewport and scissor are
        // dynamic with count 1; the render pass has subpass 0 with one colour attachment.
        let pipelines = unsafe { device.create_graphics_pipelines(vk::PipelineCache::null(), &[info], None) }
            .vk("vkCreateGraphicsPipelines")?;
        p.pipeline = pipelines.first().copied().ok_or(PresentError::Internal("vkCreateGraphicsPipelines returned nothing"))?;
        Ok(())
    }
}
