//! A dma-buf dmabridge allocates from a negotiated layout, rendered into by a wgpu render
//! pass on the shared device, released, and handed to a second process (this test binary
//! run again as `consumer_process`, with its own dmabridge engine) that imports it, reads it
//! back and checks every byte against the pattern the shader drew. Several frames go round,
//! so that the image also comes back from the consumer's side (an ownership transfer back)
//! before wgpu renders the next. The validation layer is on in both processes.
//!
//! Where the device cannot export a dma-buf (lavapipe without udmabuf), the export is the
//! engine's typed refusal, and the device says why: no modifier extension, and LINEAR images
//! for the use that it can make but not export.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, Stdio};

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{fd_count, recv, send_buffer, socketpair, Received};
use dmabridge::interop::negotiate::{reconcile, ChainLayout};
use dmabridge::interop::{Fourcc, Layout, Modifier};
use dmabridge::{Direction, ExportError, ExportRequest, ImageUse, ParticipantRequest, SubmitOptions, SupportQuery};
use dmabridge_wgpu::{wgpu, Contents, ExportTextureError, ExportedTexture, SharedDevice};
use support::TIMEOUT;

/// Set in the consumer process; its socket is its stdin.
const CHILD: &str = "DMABRIDGE_WGPU_EXPORT_CONSUMER";
const FOURCC: Fourcc = Fourcc::ABGR8888;
/// Odd, so that a row pitch padded by the driver is not the width's.
const W: u32 = 61;
const H: u32 = 37;
const FRAMES: u32 = 3;

/// The consumer's use: what cross-process readers ask for, sampling and dmabridge's read-back.
fn consumer_use() -> ImageUse {
    ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC)
}

fn renderer() -> ParticipantRequest {
    ParticipantRequest::new("wgpu renderer", vk::ImageUsageFlags::COLOR_ATTACHMENT, Direction::Export).with_fourccs(&[FOURCC])
}

fn consumer() -> ParticipantRequest {
    ParticipantRequest::new("consumer", consumer_use(), Direction::Import).with_fourccs(&[FOURCC])
}

/// Frame `frame`'s pixel at (`x`, `y`), as AB24 keeps it in memory (R, G, B, A): every
/// channel differs along rows, columns and frames, alpha too. [`SHADER`] computes the same.
fn pixel(x: u32, y: u32, frame: u32) -> [u8; 4] {
    let c = |v: u32| (v & 255) as u8;
    [
        c(x.wrapping_mul(7).wrapping_add(y.wrapping_mul(3)).wrapping_add(frame.wrapping_mul(31))),
        c((x ^ y.wrapping_mul(5)).wrapping_add(frame.wrapping_mul(17))),
        c(x.wrapping_mul(y).wrapping_add(frame.wrapping_mul(101))),
        c(x.wrapping_mul(3).wrapping_add(y.wrapping_mul(11)).wrapping_add(200).wrapping_add(frame.wrapping_mul(13))),
    ]
}

/// A triangle over the whole target; each fragment's colour from its integer pixel
/// coordinates, as [`pixel`]. n / 255 is stored back as n by the UNORM conversion (round to
/// nearest), so every byte is exact.
const SHADER: &str = r#"
override frame: u32 = 0u;

@vertex
fn vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let uv = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return vec4<f32>(uv * 2.0 - 1.0, 0.0, 1.0);
}

@fragment
fn fs(@builtin(position) p: vec4<f32>) -> @location(0) vec4<f32> {
    let x = u32(p.x);
    let y = u32(p.y);
    let c = vec4<u32>(
        (x * 7u + y * 3u + frame * 31u) & 255u,
        ((x ^ (y * 5u)) + frame * 17u) & 255u,
        (x * y + frame * 101u) & 255u,
        (x * 3u + y * 11u + 200u + frame * 13u) & 255u,
    );
    return vec4<f32>(c) / 255.0;
}
"#;

/// wgpu's render pass drawing frame `frame`'s pattern into `target`, cleared first.
fn draw(shared: &SharedDevice, target: &ExportedTexture, frame: u32) -> wgpu::CommandBuffer {
    let device = shared.device();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(SHADER.into()) });
    let constants = [("frame", f64::from(frame))];
    let compilation_options = wgpu::PipelineCompilationOptions { constants: &constants, ..Default::default() };
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: None,
        layout: None,
        vertex: wgpu::VertexState { module: &module, entry_point: Some("vs"), compilation_options: compilation_options.clone(), buffers: &[] },
        primitive: wgpu::PrimitiveState::default(),
        depth_stencil: None,
        multisample: wgpu::MultisampleState::default(),
        fragment: Some(wgpu::FragmentState {
            module: &module,
            entry_point: Some("fs"),
            compilation_options,
            targets: &[Some(wgpu::ColorTargetState { format: target.texture().format(), blend: None, write_mask: wgpu::ColorWrites::ALL })],
        }),
        multiview_mask: None,
        cache: None,
    });
    let view = target.texture().create_view(&wgpu::TextureViewDescriptor::default());
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    {
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Clear(wgpu::Color::TRANSPARENT), store: wgpu::StoreOp::Store },
            })],
            ..Default::default()
        });
        pass.set_pipeline(&pipeline);
        pass.draw(0..3, 0..1);
    }
    encoder.finish()
}

/// The layouts a renderer and a consumer on this device agree on for AB24: the export's
/// acceptable list. Where the device exports no dma-buf, the renderer lists nothing and
/// negotiation says so, naming it; the export is then asked for the consumer's layouts, for
/// the engine's own refusal.
fn negotiated(shared: &SharedDevice) -> Vec<Layout> {
    let engine = shared.engine();
    let parts = [engine.participant(&renderer()).expect("the renderer's list"), engine.participant(&consumer()).expect("the consumer's list")];
    let layouts = |i: usize| -> Vec<Layout> { parts[i].formats.as_set().map_or_else(Vec::new, |s| s.layouts(FOURCC).collect()) };
    match reconcile(&parts) {
        Ok(allocation) => match allocation.layout {
            ChainLayout::Explicit(modifiers) => modifiers.into_iter().map(Layout::Explicit).collect(),
            ChainLayout::Implicit => vec![Layout::Implicit],
        },
        Err(e) => {
            assert!(!common::expect_modifiers(), "a renderer and a consumer on one device share AB24: {e}");
            assert!(layouts(0).is_empty(), "a device that exports no dma-buf lists nothing to render into: {:?}", layouts(0));
            assert!(e.to_string().contains("wgpu renderer accepts no format"), "{e}");
            let consumer = layouts(1);
            assert!(!consumer.is_empty(), "the consumer imports AB24 in every configuration");
            consumer
        }
    }
}

/// Plain lavapipe: the export is the engine's typed refusal, and the device says why.
fn assert_no_dma_buf_export(shared: &SharedDevice, refused: ExportTextureError) {
    assert!(!common::expect_modifiers(), "this configuration exports dma-bufs, yet: {refused}");
    match refused {
        ExportTextureError::Export(ExportError::DmaBufExportUnsupported { fourcc }) => assert_eq!(fourcc, FOURCC),
        other => panic!("expected the engine's DmaBufExportUnsupported, got {other:?}"),
    }
    let engine = shared.engine();
    assert!(!engine.has_modifiers(), "no VK_EXT_image_drm_format_modifier without udmabuf");
    let caps = engine.format_support(&SupportQuery::new(FOURCC, renderer().image_use)).expect("format support");
    let linear = caps.get(Modifier::LINEAR).expect("LINEAR is asked of the driver");
    assert!(linear.supported() && !linear.exportable, "LINEAR renderable but not exportable as a dma-buf: {linear:?}");
}

#[test]
fn a_wgpu_render_pass_reaches_another_process_through_an_exported_dma_buf() {
    let shared = support::shared(wgpu::Features::empty());
    let acceptable = negotiated(&shared);
    let req = renderer().export_request(FOURCC, W, H, acceptable.iter().copied());
    let target = match shared.export_texture(&req) {
        Err(e) => {
            assert_no_dma_buf_export(&shared, e);
            support::assert_clean(Some(&shared));
            return;
        }
        Ok(t) => t,
    };
    assert!(common::expect_modifiers(), "plain lavapipe exported a dma-buf?");
    assert!(acceptable.contains(&target.layout()), "{} is not among the negotiated {acceptable:?}", target.layout());
    let buf = target.dmabuf();
    assert_eq!((buf.fourcc(), buf.width(), buf.height(), buf.layout()), (FOURCC, W, H, target.layout()));
    assert_eq!(target.texture().format(), wgpu::TextureFormat::Rgba8Unorm);
    assert_eq!(target.texture().usage(), wgpu::TextureUsages::RENDER_ATTACHMENT);
    eprintln!("exported {FOURCC} {W}x{H}, {}: {:?}", target.layout(), buf.plane_layouts());
    // A copy out of the texture would move it to another layout behind dmabridge's back:
    // wgpu refuses it, since RENDER_ATTACHMENT is the texture's only usage.
    let scope = shared.device().push_error_scope(wgpu::ErrorFilter::Validation);
    let read = shared.device().create_buffer(&wgpu::BufferDescriptor { label: None, size: 256 * u64::from(H), usage: wgpu::BufferUsages::COPY_DST, mapped_at_creation: false });
    let mut encoder = shared.device().create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    encoder.copy_texture_to_buffer(
        target.texture().as_image_copy(),
        wgpu::TexelCopyBufferInfo { buffer: &read, layout: wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(256), rows_per_image: None } },
        target.texture().size(),
    );
    drop(encoder.finish());
    let refused = support::block_on(scope.pop()).expect("wgpu refuses a copy from a render-only texture");
    assert!(refused.to_string().contains("COPY_SRC"), "{refused}");

    let (ours, theirs) = socketpair().expect("socketpair");
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--ignored", "--exact", "consumer_process", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdin(Stdio::from(theirs))
        // Its libtest summary would count as a test of this configuration's; its panic
        // (on stderr, --nocapture) and its exit status say what went wrong.
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the consumer process");

    for frame in 0..FRAMES {
        // The first frame has nothing to keep; the later ones take the image back from the
        // consumer's side as it was (an ownership transfer back), then clear it anyway.
        let contents = if frame == 0 { Contents::Discard } else { Contents::Keep };
        let done = shared.submit_render(&target, contents, [draw(&shared, &target, frame)], SubmitOptions::default()).expect("render submitted");
        done.wait(TIMEOUT).expect("rendered and released");
        send_buffer(&ours, u64::from(frame), target.dmabuf()).expect("send the frame");
        // The image is not rendered into again before the consumer hands it back.
        match recv(&ours) {
            Ok(Received::Release { id }) => assert_eq!(id, u64::from(frame)),
            Ok(Received::Buffer { .. }) => panic!("the consumer sent a buffer"),
            // Its own panic (the first wrong pixel) is on stderr above.
            Err(e) => panic!("the consumer stopped on frame {frame} ({}): {e}", child.wait().map_or_else(|e| e.to_string(), |s| s.to_string())),
        }
    }
    drop(ours);
    let status = child.wait().expect("wait for the consumer");
    assert!(status.success(), "the consumer process failed: {status}");
    drop(target);
    support::assert_clean(Some(&shared));
}

/// The consumer side, run only as the child of the test above: its socket is its stdin.
#[test]
#[ignore = "runs as the child process of a_wgpu_render_pass_reaches_another_process_through_an_exported_dma_buf"]
fn consumer_process() {
    assert!(std::env::var_os(CHILD).is_some(), "run by the parent test");
    let socket: OwnedFd = std::io::stdin().as_fd().try_clone_to_owned().expect("the socket on stdin");
    let engine = common::engine();
    let before = fd_count().expect("fd count");
    let frames = common::consume_frames(&engine, &socket, consumer_use(), |id, buf, back, image| {
        let frame = u32::try_from(id).expect("a frame number");
        assert_eq!((buf.fourcc(), buf.width(), buf.height()), (FOURCC, W, H), "frame {frame}");
        assert_eq!(back.len(), (W * H * 4) as usize, "frame {frame}");
        for (i, px) in back.chunks_exact(4).enumerate() {
            let (x, y) = (i as u32 % W, i as u32 / W);
            let want = pixel(x, y, frame);
            assert_eq!(px, want, "frame {frame}: pixel ({x}, {y}) is {px:?}, the shader wrote {want:?} ({}, path {})", buf.layout(), image.path());
        }
    });
    assert_eq!(frames, FRAMES);
    assert_eq!(fd_count().expect("fd count"), before, "the consumer leaked fds");
    common::assert_clean(&engine);
}

#[test]
fn the_export_takes_only_a_negotiated_modifier() {
    let shared = support::shared(wgpu::Features::empty());
    // A consumer that takes only a layout the device cannot export (Intel Y-tiling): refused,
    // not allocated in some other layout the consumer cannot read.
    let y_tiled = Layout::Explicit(Modifier::from_raw(0x0100_0000_0000_0002));
    match shared.export_texture(&renderer().export_request(FOURCC, W, H, [y_tiled])) {
        Err(ExportTextureError::Export(ExportError::NoAcceptableModifier { acceptable, exportable, .. })) => {
            assert!(common::expect_modifiers());
            assert_eq!(acceptable, [y_tiled]);
            assert!(!exportable.is_empty(), "the device exports AB24 for rendering in some layout");
        }
        Err(e) => assert_no_dma_buf_export(&shared, e),
        Ok(t) => panic!("exported in {} although only Y-tiling was acceptable", t.layout()),
    }
    // Every layout the consumer lists for AB24 on its own, one at a time: the export is in
    // exactly that one (LINEAR where lavapipe exports).
    let consumer = shared.engine().participant(&consumer()).expect("the consumer's list");
    let set = consumer.formats.as_set().expect("a device's list is a set");
    let offered: Vec<Layout> = set.layouts(FOURCC).collect();
    assert!(!offered.is_empty(), "the consumer takes AB24");
    for layout in offered {
        match shared.export_texture(&renderer().export_request(FOURCC, W, H, [layout])) {
            Ok(t) => {
                assert!(common::expect_modifiers());
                assert_eq!(t.layout(), layout);
                if let Layout::Explicit(m) = layout {
                    assert_eq!(t.modifier(), Some(m));
                    assert_eq!(t.dmabuf().layout(), layout);
                }
            }
            Err(ExportTextureError::Export(ExportError::NoAcceptableModifier { exportable, .. })) if common::expect_modifiers() => {
                assert!(layout.modifier().is_some_and(|m| !exportable.contains(&m)), "{layout}: refused, yet the device exports {exportable:?}");
            }
            Err(e) => assert_no_dma_buf_export(&shared, e),
        }
    }
    support::assert_clean(Some(&shared));
}

#[test]
fn an_export_wgpu_cannot_render_into_is_refused_before_the_driver_sees_it() {
    let shared = support::shared(wgpu::Features::empty());
    let sampled_only = ExportRequest::new(FOURCC, W, H, vk::ImageUsageFlags::SAMPLED);
    match shared.export_texture(&sampled_only) {
        Err(ExportTextureError::NotRenderable(u)) => assert_eq!(u, sampled_only.image_use),
        other => panic!("expected NotRenderable, got {other:?}"),
    }
    // wgpu has no format that writes XR24 as it is (no swizzle), nor renders into NV12 whole.
    for (fourcc, ok) in [(Fourcc::XRGB8888, false), (Fourcc::NV12, true)] {
        let req = ExportRequest::new(fourcc, W + 1, H + 1, vk::ImageUsageFlags::COLOR_ATTACHMENT);
        match shared.export_texture(&req) {
            Err(ExportTextureError::NoWgpuFormat(f)) if !ok => assert_eq!(f, fourcc),
            Err(ExportTextureError::MultiPlanar { fourcc: f, format }) if ok => assert_eq!((f, format), (fourcc, wgpu::TextureFormat::NV12)),
            other => panic!("{fourcc}: {other:?}"),
        }
    }
    // The image may not be made for more than the renderer negotiated for.
    let mut wider = renderer().export_request(FOURCC, W, H, [Layout::Explicit(Modifier::LINEAR)]);
    wider.image_use.usage |= vk::ImageUsageFlags::STORAGE;
    match shared.export_texture(&wider) {
        Err(ExportTextureError::Export(ExportError::WiderThanNegotiated(e))) => assert_eq!(e.extra, "storage"),
        other => panic!("expected WiderThanNegotiated, got {other:?}"),
    }
    support::assert_clean(Some(&shared));
}
