//! A host engine that embeds dmabridge in its own frame loop.
//!
//! The host creates its own instance, device and queue, enabling what
//! `dmabridge::requirements` lists, and hands them to `Engine::from_host`. A producer thread
//! (a decoder, another process's compositor: anything that hands over dma-bufs) renders 300
//! frames into a pool of dma-buf stand-ins (sealed memfds) and sends each over a Unix
//! socket. For every frame the host receives the descriptor, imports it through the cache
//! (a hit after the first round), and records into *its own* command buffer the acquisition
//! of the frame, its own sampling pass (a compute shader reading a grid of texels), and the
//! release. It submits the command buffer itself, signalling a point of a dmabridge
//! `HostTimeline`, waits only with its own `vkWaitSemaphores` on those points, and never
//! calls a dmabridge function that waits. A frame goes back to the producer once the host
//! knows the GPU is done with it.
//!
//! At the end every frame's sampled texels are checked against what the producer wrote,
//! and the process's fd count must be what it was before the engine existed.
//!
//! `cargo run --release --example embed_host_device` (with `DMABRIDGE_VALIDATION=1` the
//! host's instance runs the validation layer, and any message fails the run with exit 3).

use std::collections::VecDeque;
use std::ffi::{c_void, CString};
use std::os::fd::OwnedFd;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use dmabridge::ash::{self, vk};
use dmabridge::interop::dmabuf::{plane_rows, PlaneLayout, fd_count, recv, send_buffer, send_release, socketpair, DmaBuf, Received};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{
    Binding, BufferLocation, Capability, ComputePipeline, Engine, GpuBuffer, HostVulkan, ImageAccess, ImportCache, SampledView, Sampler,
    YcbcrOutput,
};

const FRAMES: u32 = 300;
const POOL: usize = 4;
const IN_FLIGHT: usize = 2;
const WIDTH: u32 = 640;
const HEIGHT: u32 = 360;
const GRID: (u32, u32) = (32, 18);
static SAMPLE_SPV: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sample_grid.spv"));

type Error = Box<dyn std::error::Error>;

/// The producer's pixel at (x, y) of frame `f`, as AR24 bytes in memory: B, G, R, A.
fn pixel(f: u32, x: u32, y: u32) -> [u8; 4] {
    [(x + f) as u8, (y * 2 + f) as u8, (x ^ y ^ f) as u8, 255]
}

static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _: *mut c_void,
) -> vk::Bool32 {
    if severity.intersects(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        // SAFETY: the loader passes valid callback data for the duration of the call.
        let text = unsafe { data.as_ref().and_then(|d| d.message_as_c_str()) }.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        MESSAGES.lock().unwrap_or_else(|e| e.into_inner()).push(text);
    }
    vk::FALSE
}

/// The producer: renders frames into a pool of sealed memfds and hands them over, reusing a
/// buffer only after the host released it.
fn produce(socket: OwnedFd) -> Result<(), String> {
    let size = (WIDTH * HEIGHT * 4) as usize;
    let mut pool = Vec::with_capacity(POOL);
    for _ in 0..POOL {
        pool.push(dmabridge::interop::dmabuf::sealed_memfd_of_size("embed-host-frame", size as u64).map_err(|e| e.to_string())?);
    }
    let mut free: VecDeque<usize> = (0..POOL).collect();
    let mut frame = vec![0u8; size];
    for f in 0..FRAMES {
        while free.is_empty() {
            match recv(&socket).map_err(|e| e.to_string())? {
                Received::Release { id } => free.push_back(id as usize),
                Received::Buffer { .. } => return Err("the host sent a buffer".into()),
            }
        }
        let slot = free.pop_front().ok_or("no free buffer")?;
        for y in 0..HEIGHT {
            for x in 0..WIDTH {
                let i = ((y * WIDTH + x) * 4) as usize;
                frame[i..i + 4].copy_from_slice(&pixel(f, x, y));
            }
        }
        // The frame is written before its descriptor leaves: the cpu-wait sync method.
        rustix::io::pwrite(&pool[slot], &frame, 0).map_err(|e| e.to_string())?;
        let fd = pool[slot].try_clone().map_err(|e| e.to_string())?;
        let buf = DmaBuf::in_one_file(Fourcc::ARGB8888, Layout::Explicit(Modifier::LINEAR), WIDTH, HEIGHT, fd, &[PlaneLayout::linear(0, u64::from(WIDTH) * 4, plane_rows(Fourcc::ARGB8888, 0, HEIGHT))])
            .map_err(|e| e.to_string())?;
        send_buffer(&socket, slot as u64 | (u64::from(f) << 8), &buf).map_err(|e| e.to_string())?;
    }
    // Every buffer comes back before the producer goes.
    while free.len() < POOL {
        match recv(&socket).map_err(|e| e.to_string())? {
            Received::Release { id } => free.push_back(id as usize),
            Received::Buffer { .. } => return Err("the host sent a buffer".into()),
        }
    }
    Ok(())
}

/// What the host keeps per frame in flight.
struct FrameSlot {
    cmd: vk::CommandBuffer,
    samples: GpuBuffer,
    set: vk::DescriptorSet,
    /// The frame this slot last carried: (frame index, producer's buffer id, the timeline
    /// point its submission signals).
    carrying: Option<(u32, u64, dmabridge::Completion)>,
}

/// The host's own wait for one of its frames: `vkWaitSemaphores` on the timeline point its
/// submission signals.
fn wait_point(device: &ash::Device, point: dmabridge::Completion) -> Result<(), Error> {
    let semaphores = [point.semaphore()];
    let values = [point.value()];
    let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
    // SAFETY: a timeline semaphore of this device, signalled by a submitted batch.
    unsafe { device.wait_semaphores(&info, Duration::from_secs(30).as_nanos() as u64) }?;
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("embed_host_device: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<ExitCode, Error> {
    let validation = std::env::var("DMABRIDGE_VALIDATION").is_ok_and(|v| v == "1");
    let fds_before = fd_count()?;

    // The host's own instance and device, with what dmabridge says it needs.
    // SAFETY: loads the system Vulkan loader.
    let entry = unsafe { ash::Entry::load() }?;
    let layers = [c"VK_LAYER_KHRONOS_validation".as_ptr()];
    let instance_exts = [ash::ext::debug_utils::NAME.as_ptr()];
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
    let mut info = vk::InstanceCreateInfo::default().application_info(&app);
    if validation {
        info = info.enabled_layer_names(&layers).enabled_extension_names(&instance_exts);
    }
    // SAFETY: a valid create info; the layer and extension are installed by scripts/setup.sh.
    let instance = unsafe { entry.create_instance(&info, None) }?;
    let debug = ash::ext::debug_utils::Instance::new(&entry, &instance);
    let messenger = if validation {
        let m = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING)
            .message_type(vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL)
            .pfn_user_callback(Some(on_message));
        // SAFETY: debug utils is enabled on this instance.
        Some(unsafe { debug.create_debug_utils_messenger(&m, None) }?)
    } else {
        None
    };
    // SAFETY: a valid instance.
    let physical = *unsafe { instance.enumerate_physical_devices() }?.first().ok_or("no Vulkan device")?;
    // SAFETY: the physical device comes from this instance.
    let reqs = unsafe { dmabridge::requirements(&instance, physical) };
    let wanted: Vec<Capability> = Capability::ALL.into_iter().filter(|c| *c != Capability::Present).collect();
    let extensions: Vec<CString> = reqs.device_extensions(&wanted).iter().map(|e| e.name().to_owned()).collect();
    let features = reqs.features(&wanted);
    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    let family = families.iter().position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE)).ok_or("no compute queue")? as u32;
    let ptrs: Vec<_> = extensions.iter().map(|c| c.as_ptr()).collect();
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
    let (mut timeline, mut ycbcr) = features.create_info_structs();
    let dinfo = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&ptrs).push_next(&mut timeline).push_next(&mut ycbcr);
    // SAFETY: extensions and features the requirements found on this device, dependencies first.
    let device = unsafe { instance.create_device(physical, &dinfo, None) }?;
    let host = HostVulkan {
        entry: entry.clone(),
        instance: instance.clone(),
        instance_api_version: vk::API_VERSION_1_3,
        physical_device: physical,
        device: device.clone(),
        queue_family_index: family,
        queue_index: 0,
        enabled_device_extensions: extensions,
        enabled_features: features,
        on_drop: None,
    };
    // SAFETY: the handles are valid and made from each other as stated; the host submits
    // to the queue only under `lock_queue`, and destroys the device after the engine and
    // every handle made from it are dropped (the block below), with all its work complete.
    let engine = unsafe { Engine::from_host(host) }?;
    let false_positives = {
        let outcome = frame_loop(&engine, &device, family);
        // The host's own teardown wait: its last fences.
        // SAFETY: a valid device.
        unsafe { device.device_wait_idle() }?;
        let fp = MESSAGES.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|m| engine.is_known_false_positive(m)).count();
        drop(engine);
        outcome?;
        fp
    };
    // SAFETY: the engine and everything made from it are gone; the host destroys its own.
    unsafe {
        device.destroy_device(None);
        if let Some(m) = messenger {
            debug.destroy_debug_utils_messenger(m, None);
        }
        instance.destroy_instance(None);
    }
    let fds_after = fd_count()?;
    println!("fds before {fds_before}, after {fds_after}");
    if fds_after != fds_before {
        return Err(format!("{} fds leaked", fds_after as i64 - fds_before as i64).into());
    }
    let messages = MESSAGES.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let problems = messages.len() - false_positives;
    if problems > 0 {
        for m in &messages {
            eprintln!("validation: {m}");
        }
        return Ok(ExitCode::from(3));
    }
    if validation {
        println!("validation layer: no messages ({false_positives} known driver false positives set aside)");
    }
    Ok(ExitCode::SUCCESS)
}

/// The frame loop: the host's command buffers, fences and sampling pipeline, and 300 frames.
fn frame_loop(engine: &Engine, device: &ash::Device, family: u32) -> Result<(), Error> {
    let (ours, theirs) = socketpair()?;
    let producer = std::thread::spawn(move || produce(theirs));
    let sampler = Sampler::new(engine, vk::Format::B8G8R8A8_UNORM, false, YcbcrOutput::Raw)?;
    let pipeline = ComputePipeline::new(engine, SAMPLE_SPV, &[Binding::Sampler(sampler.sampler()), Binding::StorageBuffer], 16, IN_FLIGHT as u32)?;
    let timeline = engine.host_timeline()?;
    let mut cache = ImportCache::new(engine, POOL);
    let mut views: Vec<(vk::Image, SampledView)> = Vec::new();
    let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(family).flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
    // SAFETY: the family exists on the host's device.
    let cmd_pool = unsafe { device.create_command_pool(&pool_info, None) }?;
    let result = (|| -> Result<(), Error> {
        let alloc = vk::CommandBufferAllocateInfo::default().command_pool(cmd_pool).level(vk::CommandBufferLevel::PRIMARY).command_buffer_count(IN_FLIGHT as u32);
        // SAFETY: the pool was just made.
        let cmds = unsafe { device.allocate_command_buffers(&alloc) }?;
        let mut slots = Vec::with_capacity(IN_FLIGHT);
        for cmd in cmds {
            let samples = GpuBuffer::new(engine, u64::from(GRID.0 * GRID.1) * 4, BufferLocation::Readback)?;
            let set = pipeline.allocate_set()?;
            slots.push(FrameSlot { cmd, samples, set, carrying: None });
        }
        let mut checked = 0u32;
        for f in 0..FRAMES {
            let slot = &mut slots[f as usize % IN_FLIGHT];
            // The host's frames-in-flight wait: its own, on the slot's last frame.
            if let Some((done, id, point)) = slot.carrying.take() {
                wait_point(device, point)?;
                check(slot.samples.bytes()?, done)?;
                checked += 1;
                send_release(&ours, id & 0xff)?;
            }
            let (id, buf) = match recv(&ours)? {
                Received::Buffer { id, buf } => (id, buf),
                Received::Release { .. } => return Err("the producer sent a release".into()),
            };
            if (id >> 8) as u32 != f {
                return Err(format!("frame {} arrived where {f} was due", id >> 8).into());
            }
            let image = cache.import(buf, vk::ImageUsageFlags::SAMPLED)?;
            let view = match views.iter().find(|(i, _)| *i == image.image()) {
                Some((_, v)) => v,
                None => {
                    // SAFETY: the cache keeps the image (SAMPLED, this format) alive as long as
                    // the view: both live until the end of the loop (the cache holds POOL entries).
                    let v = unsafe { sampler.view(image.image(), image.vk_format())? };
                    views.push((image.image(), v));
                    &views[views.len() - 1].1
                }
            };
            // SAFETY: the slot's last frame was waited for, so no pending work uses its set; the view is of
            // a SAMPLED image in SHADER_READ_ONLY_OPTIMAL when used; the buffer has STORAGE usage.
            unsafe {
                pipeline.write_image(slot.set, 0, view.view());
                pipeline.write_buffer(slot.set, 1, slot.samples.buffer());
            }
            let point = timeline.next();
            let cmd = slot.cmd;
            // SAFETY: the host's command buffer is not pending (its last frame was waited for).
            unsafe { device.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT)) }?;
            // SAFETY: `cmd` is recording, will be submitted on the engine's queue family
            // signalling `point`, and the producer wrote the frame before sending it.
            unsafe { image.record_acquire(cmd, ImageAccess::SAMPLED_COMPUTE, point) }?;
            let push: [u32; 4] = [WIDTH, HEIGHT, GRID.0, GRID.1];
            // SAFETY: as above; the set's image and buffer outlive the submission (tracked
            // below and by the view).
            unsafe { pipeline.record_dispatch(cmd, slot.set, bytemuck::bytes_of(&push), [GRID.0.div_ceil(8), GRID.1.div_ceil(8), 1], point) }?;
            let host_read = dmabridge::resources::image::buffer_barrier(slot.samples.buffer(), vk::AccessFlags::SHADER_WRITE, vk::AccessFlags::HOST_READ, vk::QUEUE_FAMILY_IGNORED, vk::QUEUE_FAMILY_IGNORED);
            // SAFETY: recording; the barrier names the host's readback buffer.
            unsafe { device.cmd_pipeline_barrier(cmd, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[], &[host_read], &[]) };
            // SAFETY: as for the acquire: the frame goes back to the producer once read.
            unsafe { image.record_release(cmd, ImageAccess::SAMPLED_COMPUTE, point) };
            slot.samples.track(point);
            sampler.track(point);
            view.track(point);
            // SAFETY: recording.
            unsafe { device.end_command_buffer(cmd) }?;
            let cmds = [cmd];
            let signals = [point.semaphore()];
            let values = [point.value()];
            let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
            let submit = vk::SubmitInfo::default().command_buffers(&cmds).signal_semaphores(&signals).push_next(&mut timeline_info);
            {
                let queue = engine.lock_queue();
                // SAFETY: the queue is held under the engine's lock; the timeline's points are
                // signalled in the order they were taken.
                unsafe { device.queue_submit(queue.queue(), &[submit], vk::Fence::null()) }?;
            }
            slot.carrying = Some((f, id, point));
        }
        for slot in &mut slots {
            if let Some((done, id, point)) = slot.carrying.take() {
                wait_point(device, point)?;
                check(slot.samples.bytes()?, done)?;
                checked += 1;
                send_release(&ours, id & 0xff)?;
            }
        }
        let stats = cache.stats();
        println!("{checked}/{FRAMES} frames sampled and checked; import cache: {} hits, {} misses", stats.hits, stats.misses);
        if checked != FRAMES {
            return Err(format!("only {checked} frames were checked").into());
        }
        Ok(())
    })();
    // Closing our end stops a producer still waiting for releases (after a failure).
    drop(ours);
    let produced = producer.join().map_err(|_| "the producer panicked")?;
    // SAFETY: every submission of the pool's buffers completed (waited above, or never made).
    unsafe {
        let _ = device.device_wait_idle();
        device.destroy_command_pool(cmd_pool, None);
    }
    result?;
    produced?;
    Ok(())
}

/// Frame `f`'s grid of sampled texels against what the producer wrote.
fn check(samples: &[u8], f: u32) -> Result<(), Error> {
    for gy in 0..GRID.1 {
        for gx in 0..GRID.0 {
            let (x, y) = (gx * WIDTH / GRID.0, gy * HEIGHT / GRID.1);
            let [b, g, r, a] = pixel(f, x, y);
            let i = ((gy * GRID.0 + gx) * 4) as usize;
            let got = &samples[i..i + 4];
            // The sampler returns R, G, B, A (B8G8R8A8 read as colour); packUnorm4x8 puts r low.
            if got != [r, g, b, a] {
                return Err(format!("frame {f}: texel ({x}, {y}) sampled {got:?}, expected {:?}", [r, g, b, a]).into());
            }
        }
    }
    Ok(())
}
