//! What the dmabridge-wgpu tests share: a wgpu instance with the validation layer on, whose
//! every message fails the test; a device shared with dmabridge; a blocking executor.
// Each test binary uses some of it.
#![allow(dead_code)]

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use dmabridge::SubmitOptions;
use dmabridge_wgpu::{wgpu, FrameSubmission, ImportedTexture, SharedDevice};

pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Every message wgpu-hal's debug messenger (the validation layer) logs at warning level
/// or above.
pub struct Messages(Mutex<Vec<String>>);

impl log::Log for Messages {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }

    fn log(&self, r: &log::Record<'_>) {
        if r.level() <= log::Level::Warn && r.target().starts_with("wgpu_hal::vulkan") {
            let text = r.args().to_string();
            let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
            // wgpu-hal logs a message's queues, command buffers and objects as records of
            // their own, each starting with a tab: they belong to the message before.
            match all.last_mut() {
                Some(last) if text.starts_with('\t') => {
                    last.push('\n');
                    last.push_str(&text);
                }
                _ => all.push(format!("{}: {text}", r.level())),
            }
        }
    }

    fn flush(&self) {}
}

static MESSAGES: OnceLock<&'static Messages> = OnceLock::new();

pub fn messages() -> &'static Messages {
    MESSAGES.get_or_init(|| {
        let m: &'static Messages = Box::leak(Box::new(Messages(Mutex::new(Vec::new()))));
        log::set_logger(m).expect("the test's logger is the only one");
        log::set_max_level(log::LevelFilter::Warn);
        m
    })
}

/// Fails the test if the validation layer said anything (dmabridge's known false positives
/// of this layer version aside).
pub fn assert_clean(shared: Option<&SharedDevice>) {
    let all = std::mem::take(&mut *messages().0.lock().unwrap_or_else(|e| e.into_inner()));
    let known = |m: &String| match shared {
        Some(s) => s.is_known_false_positive(m),
        None => dmabridge_wgpu::wgsl_debug_source_report(m),
    };
    let problems: Vec<String> = all.into_iter().filter(|m| !known(m)).collect();
    assert!(problems.is_empty(), "the validation layer reported {} message(s):\n{}", problems.len(), problems.join("\n"));
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

pub fn adapter() -> wgpu::Adapter {
    messages();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        // DEBUG too: without it wgpu-hal registers no debug messenger, and the layer prints to
        // stdout instead of to the log this test reads.
        flags: wgpu::InstanceFlags::VALIDATION | wgpu::InstanceFlags::DEBUG,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default())).expect("a Vulkan adapter (lavapipe)")
}

pub fn shared(features: wgpu::Features) -> SharedDevice {
    let desc = wgpu::DeviceDescriptor { required_features: features, ..wgpu::DeviceDescriptor::default() };
    SharedDevice::open(&adapter(), &desc).expect("a device shared by wgpu and dmabridge")
}

const AR24_SHADER: &str = r#"
@group(0) @binding(0) var src: texture_2d<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

// Each texel back as the four bytes AR24 keeps in memory: B, G, R, A.
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let size = textureDimensions(src);
    if (id.x >= size.x || id.y >= size.y) {
        return;
    }
    let c = textureLoad(src, vec2<i32>(id.xy), 0);
    out[id.y * size.x + id.x] = pack4x8unorm(vec4<f32>(c.b, c.g, c.r, c.a));
}
"#;

/// Runs a compute pass over the AR24 `frame` inside `shared.submit_frame(.., options)` and
/// returns what it wrote (`width * height` texels of 4 bytes, as AR24 keeps them) and the
/// frame's submissions, done.
pub fn read_ar24(shared: &SharedDevice, frame: &ImportedTexture, options: SubmitOptions) -> (Vec<u8>, FrameSubmission) {
    read_ar24_with(shared, frame, options, || ())
}

/// [`read_ar24`], calling `submitted` once `submit_frame` has returned (the pass is on the
/// queue, behind the fences of `options`), before waiting for it.
pub fn read_ar24_with(shared: &SharedDevice, frame: &ImportedTexture, options: SubmitOptions, submitted: impl FnOnce()) -> (Vec<u8>, FrameSubmission) {
    let device = shared.device();
    let (w, h) = frame.image().extent();
    let bytes = u64::from(w) * u64::from(h) * 4;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(AR24_SHADER.into()) });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let out = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC, mapped_at_creation: false });
    let read = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST, mapped_at_creation: false });
    let view = frame.texture().create_view(&wgpu::TextureViewDescriptor::default());
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::TextureView(&view) },
            wgpu::BindGroupEntry { binding: 1, resource: out.as_entire_binding() },
        ],
    });
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(w.div_ceil(8), h.div_ceil(8), 1);
    }
    encoder.copy_buffer_to_buffer(&out, 0, &read, 0, bytes);
    let on_queue = submitted;
    let submitted = shared.submit_frame(&[frame], [encoder.finish()], options).expect("frame submitted");
    on_queue();
    submitted.wait(TIMEOUT).expect("frame done");
    let slice = read.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.expect("mapping the read-back"));
    device.poll(wgpu::PollType::Wait { submission_index: Some(submitted.wgpu.clone()), timeout: Some(TIMEOUT) }).expect("wgpu done");
    let data = slice.get_mapped_range().expect("the mapped read-back").to_vec();
    read.unmap();
    (data, submitted)
}
