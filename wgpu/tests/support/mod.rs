//! What the dmabridge-wgpu tests share: a wgpu instance with the validation layer on, whose
//! every message fails the test; a device shared with dmabridge; a blocking executor.
// Each test binary uses some of it.
#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use dmabridge::SubmitOptions;
use dmabridge_wgpu::{wgpu, FrameSubmission, ImportedTexture, SharedDevice, ValidationLog};

pub const TIMEOUT: Duration = Duration::from_secs(30);

static LOG: ValidationLog = ValidationLog::new();
static INSTALLED: OnceLock<()> = OnceLock::new();

/// The validation layer's messages, from the first call on (the log is the process's logger).
pub fn messages() -> &'static ValidationLog {
    INSTALLED.get_or_init(|| LOG.install().expect("the test's logger is the only one"));
    &LOG
}

/// Fails the test if the validation layer said anything (the known false positives of this
/// layer version aside).
pub fn assert_clean(shared: Option<&SharedDevice>) {
    let problems = messages().take_problems(shared);
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

/// [`read_ar24`], calling `submitting` once the pass is recorded, just before
/// `submit_frame` (which, on drivers that export a sync_file only once the batch is done,
/// returns only after the producer's fences: lavapipe).
pub fn read_ar24_with(shared: &SharedDevice, frame: &ImportedTexture, options: SubmitOptions, submitting: impl FnOnce()) -> (Vec<u8>, FrameSubmission) {
    let (w, h) = frame.image().extent();
    let view = frame.texture().create_view(&wgpu::TextureViewDescriptor::default());
    let pass = Pass { shader: AR24_SHADER, constants: &[], views: &[&view], out_bytes: u64::from(w) * u64::from(h) * 4 };
    run_pass(shared, frame, &pass, options, submitting)
}

/// A compute pass that reads a frame: `shader`'s `main`, in 8x8 workgroups over the frame,
/// with `views` bound at 0, 1, ... and a storage buffer of `out_bytes` after them.
pub struct Pass<'a> {
    pub shader: &'a str,
    pub constants: &'a [(&'a str, f64)],
    pub views: &'a [&'a wgpu::TextureView],
    pub out_bytes: u64,
}

/// Runs `pass` over `frame` inside `shared.submit_frame(.., options)`, calling `submitting`
/// just before that, and returns the storage buffer's bytes and the frame's submissions, done.
pub fn run_pass(shared: &SharedDevice, frame: &ImportedTexture, pass: &Pass<'_>, options: SubmitOptions, submitting: impl FnOnce()) -> (Vec<u8>, FrameSubmission) {
    let device = shared.device();
    let (w, h) = frame.image().extent();
    let bytes = pass.out_bytes;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(pass.shader.into()) });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions { constants: pass.constants, ..Default::default() },
        cache: None,
    });
    let out = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC, mapped_at_creation: false });
    let read = device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST, mapped_at_creation: false });
    let mut entries: Vec<wgpu::BindGroupEntry<'_>> =
        pass.views.iter().enumerate().map(|(i, v)| wgpu::BindGroupEntry { binding: i as u32, resource: wgpu::BindingResource::TextureView(v) }).collect();
    entries.push(wgpu::BindGroupEntry { binding: pass.views.len() as u32, resource: out.as_entire_binding() });
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &pipeline.get_bind_group_layout(0), entries: &entries });
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    {
        let mut compute = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        compute.set_pipeline(&pipeline);
        compute.set_bind_group(0, &bind, &[]);
        compute.dispatch_workgroups(w.div_ceil(8), h.div_ceil(8), 1);
    }
    encoder.copy_buffer_to_buffer(&out, 0, &read, 0, bytes);
    let commands = encoder.finish();
    submitting();
    let submitted = shared.submit_frame(&[frame], [commands], options).expect("frame submitted");
    submitted.wait(TIMEOUT).expect("frame done");
    let slice = read.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.expect("mapping the read-back"));
    device.poll(wgpu::PollType::Wait { submission_index: Some(submitted.wgpu.clone()), timeout: Some(TIMEOUT) }).expect("wgpu done");
    let data = slice.get_mapped_range().expect("the mapped read-back").to_vec();
    read.unmap();
    (data, submitted)
}
