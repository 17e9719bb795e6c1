//! The presenter's pipelines compiled with no window, for the tests of the root package
//! (where the `present` feature is on in the workspace build): `#[path]`-included, since
//! `common` is shared with crates that have no such feature.

use dmabridge::Engine;

/// Compiles the presenter's drawing pipelines (no window) for AR24, NV12 and P010 frames,
/// each in the driver's own tiling and in every modifier the device samples: every kind is
/// either compiled or refused typed as one the device cannot sample (a compiler's refusal of
/// a shader fails the test). Returns (compiled, not sampleable).
pub fn present_pipelines_compile(engine: &Engine) -> (usize, usize) {
    use dmabridge::ash::vk;
    use dmabridge::interop::{Fourcc, Layout};
    use dmabridge::present::{compile_pipelines, FrameKind, FrameOptions, PresentError, YcbcrMatrix, YcbcrRange};
    let image_use = dmabridge::ImageUse::new(vk::ImageUsageFlags::SAMPLED);
    let (mut compiled, mut refused) = (0, 0);
    for fourcc in [Fourcc::ARGB8888, Fourcc::NV12, Fourcc::P010] {
        let listed = engine.format_support(&dmabridge::SupportQuery::new(fourcc, image_use)).expect("the capability query");
        let layouts: Vec<Layout> = std::iter::once(Layout::Implicit).chain(listed.modifiers.iter().filter(|m| m.can_import()).map(|m| Layout::Explicit(m.modifier))).collect();
        for layout in layouts {
            for (matrix, range) in [(YcbcrMatrix::Bt709, YcbcrRange::Limited), (YcbcrMatrix::Bt2020, YcbcrRange::Full)] {
                let kind = FrameKind { fourcc, layout, image_use, options: FrameOptions { matrix, range } };
                match compile_pipelines(engine, vk::Format::B8G8R8A8_UNORM, &[kind]) {
                    Ok(()) => compiled += 1,
                    Err(PresentError::NotSampleable { .. } | PresentError::NoYcbcrConversion(..)) => refused += 1,
                    Err(e) => panic!("{fourcc} {layout}: {e}"),
                }
            }
        }
    }
    (compiled, refused)
}
