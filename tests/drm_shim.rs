//! Real drivers' rules, on a machine with no GPU: Mesa's radv on Mesa's amdgpu drm-shim, or
//! anv on its i915 drm-shim (`scripts/real-drivers.sh [--driver intel]`, which builds the
//! driver once and runs a command per chip with `DMABRIDGE_DRM_SHIM_CHIP` set). Without
//! that variable every test here returns at once: the shim is a separate configuration
//! (`drm-shim` in scripts/test.sh), run per chip.
//!
//! What the shim gives: the driver's real winsys and compiler, fed with a real chip's
//! registers or device table; GEM objects are shared memory; submissions are ignored; there
//! is no PRIME, so no memory leaves the driver as an fd (radv fails `vkGetMemoryFdKHR`;
//! anv reports success with an fd that is not open) and none enters as one.
//!
//! Every assertion is about what the driver answers (its lists, its layouts, its memory
//! requirements, its refusals), never about what dmabridge believes a chip does.

mod common;
#[cfg(feature = "present")]
#[path = "common/present.rs"]
mod present_check;

use ash::vk;
use dmabridge::interop::dmabuf::handoff::{recv, send_buffer, socketpair, Received};
use dmabridge::interop::dmabuf::{check_import, place, PlacementRequest, sealed_memfd_of_size, DmaBuf, ImportFacts, LayoutRuleError};
use dmabridge::interop::{Format, Fourcc, Layout, Modifier};
use dmabridge::{ash, BufferError, Converter, DeviceExtension, Engine, ExportError, ExportRequest, ImageUse, ImportError, SupportQuery, SupportSource};

/// The chip the shim pretends to be, or `None` outside the drm-shim configuration.
fn chip() -> Option<String> {
    std::env::var("DMABRIDGE_DRM_SHIM_CHIP").ok().filter(|c| !c.is_empty())
}

/// The validated engine on the shim's radv device, one for the whole binary, or `None`
/// outside the configuration. One, and never dropped: on the shim the validation layer's
/// `vkGetSemaphoreCounterValue` at an engine's teardown waits out its 10-second timeout for
/// queue work the shim never runs, so each engine dropped would cost 10 s.
fn shim_engine() -> Option<(String, &'static Engine)> {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    let chip = chip()?;
    let engine = ENGINE.get_or_init(common::engine);
    let info = engine.info();
    // The shim's driver, not another one the loader found (lavapipe).
    assert!(!info.driver_name.contains("llvmpipe") && !info.name.contains("llvmpipe"), "the drm-shim configuration runs the shim's driver, got {info:?}");
    Some((chip, engine))
}

/// The formats dmabridge uses most: the RGB a compositor and a GPU trade, and NV12.
const FOURCCS: [Fourcc; 6] = [Fourcc::ARGB8888, Fourcc::XRGB8888, Fourcc::ABGR8888, Fourcc::XBGR8888, Fourcc::NV12, Fourcc::P010];

/// The uses an export is made for: read (sample, copy) and render.
fn uses() -> [(&'static str, ImageUse); 2] {
    [
        ("sampled", ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST)),
        ("render", ImageUse::new(vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::SAMPLED)),
    ]
}

/// The round trip, for every exportable modifier the driver lists for each format and use:
/// created from a one-modifier list, the driver reports that modifier and one layout per
/// memory plane within the memory it asks for; created again from those layouts
/// (`VkImageDrmFormatModifierExplicitCreateInfoEXT`) it reports the same layouts; its memory
/// is exactly the size it asked for; and the export of that memory is the shim's typed
/// refusal (no PRIME) or a dma-buf with those planes.
#[test]
fn every_listed_modifier_round_trips_through_its_explicit_layout() {
    let Some((chip, engine)) = shim_engine() else { return };
    for (w, h) in [(1920u32, 1080u32), (130, 66)] {
        for fourcc in FOURCCS {
            for (use_name, image_use) in uses() {
                let support = engine.format_support(&SupportQuery::new(fourcc, image_use)).expect("the capability query");
                let exportable: Vec<Modifier> = support.exportable().collect();
                let mut multi = 0;
                let mut sizes_differ = 0;
                let mut from_table = 0;
                for &m in &exportable {
                    let c = support.get(m).expect("listed");
                    let req = ExportRequest::new(fourcc, w, h, image_use).with_acceptable([Layout::Explicit(m)]);
                    let first = engine.allocate_exportable(&req).unwrap_or_else(|e| panic!("{chip} {fourcc} {use_name} {m} {w}x{h}: {e}"));
                    assert_eq!(first.modifier(), Some(m), "{chip} {fourcc} {m}: a one-modifier list");
                    assert_eq!(first.planes().len(), c.plane_count as usize, "{chip} {fourcc} {m}: one layout per memory plane");
                    let size = first.memory_requirements().size;
                    for (i, p) in first.planes().iter().enumerate() {
                        let end = p.end().expect("no overflow");
                        assert!(end <= size, "{chip} {fourcc} {m} plane {i}: {p:?} runs past the {size} bytes the driver asked for");
                    }
                    if first.planes().len() > dmabridge::interop::format_info(fourcc).map_or(1, |i| i.plane_count()) {
                        multi += 1;
                    }
                    let again = engine
                        .allocate_exportable_with_layout(&ExportRequest::new(fourcc, w, h, image_use), m, first.planes())
                        .unwrap_or_else(|e| panic!("{chip} {fourcc} {use_name} {m} {w}x{h}: its own layout {:?}: {e}", first.planes()));
                    assert_eq!(again.planes(), first.planes(), "{chip} {fourcc} {m}: the explicit layout as returned");
                    // The layout fits the memory the driver asks for the explicit image too. The
                    // size itself may differ: radv on GFX9 adds 64 KiB of its own (a CMASK
                    // described by no memory plane) to an image it lays out from a list.
                    let again_size = again.memory_requirements().size;
                    assert!(again.planes().iter().all(|p| p.end().is_some_and(|e| e <= again_size)), "{chip} {fourcc} {m}: {:?} in {again_size} bytes", again.planes());
                    if again_size != size {
                        sizes_differ += 1;
                    }
                    // Where dmabridge has its own table for the modifier (LINEAR, i915-x,
                    // i915-y), what its placement would give beside what the driver chose:
                    // counted and shown, not asserted (a driver may pad as it likes).
                    if let Some(tile) = dmabridge::interop::TileLayout::from_modifier(m) {
                        let ours = place(&PlacementRequest { fourcc, layout: Layout::Explicit(m), width: w, height: h, stride_align: 1, offset_align: 1, min_size: 0, disjoint: false });
                        let ours: Vec<(u64, u64)> = ours.map(|p| p.planes.iter().map(|p| (p.offset, p.stride)).collect()).unwrap_or_default();
                        let theirs: Vec<(u64, u64)> = first.planes().iter().map(|p| (p.offset, p.stride)).collect();
                        if ours != theirs {
                            from_table += 1;
                            eprintln!("drm-shim {chip} {fourcc} {w}x{h} {tile}: the driver lays planes (offset, pitch) {theirs:?}, dmabridge's table {ours:?}");
                        }
                    }
                    if std::env::var_os("DRM_SHIM_DUMP").is_some() && first.planes().len() > 1 {
                        eprintln!("LAYOUT {chip} {fourcc} {w}x{h} {:#018x} {:?} mem {size}/{again_size} align {}", m.raw(), first.planes().iter().map(|p| (p.offset, p.stride, p.size)).collect::<Vec<_>>(), first.memory_requirements().alignment);
                    }
                    match first.export() {
                        Ok(exported) => assert_eq!(exported.dmabuf().expect("a dma-buf").plane_count(), c.plane_count as usize),
                        Err(ExportError::MemoryFd { .. } | ExportError::MemoryFdNotOpen { .. }) => {}
                        Err(e) => panic!("{chip} {fourcc} {m}: the export failed untyped: {e}"),
                    }
                }
                eprintln!("drm-shim {chip} {fourcc} {use_name} {w}x{h}: {} modifiers listed, {} exportable ({multi} with more memory planes than format planes; {sizes_differ} whose explicit image asks for other memory; {from_table} laid out otherwise than dmabridge's table): round trip ok", support.modifiers.len(), exportable.len());
            }
        }
    }
    common::assert_clean(engine);
}

/// The driver's own answer to one image-format query, asked here without dmabridge: `None`
/// for `VK_ERROR_FORMAT_NOT_SUPPORTED`, else whether DMA_BUF memory of it imports and
/// exports. `modifier` is `None` for LINEAR tiling (a device without the modifier
/// extension: GFX6-8), and the DMA_BUF handle type is asked about only where the device
/// enabled its extension (as dmabridge does).
fn driver_answer(engine: &Engine, format: vk::Format, image_use: ImageUse, modifier: Option<Modifier>) -> Option<(bool, bool)> {
    let create = image_use.create_flags(format);
    let views = image_use.view_formats(format);
    let dma_buf = engine.extensions().has(DeviceExtension::ExternalMemoryDmaBuf);
    let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&views);
    let mut drm = vk::PhysicalDeviceImageDrmFormatModifierInfoEXT::default().drm_format_modifier(modifier.map_or(0, Modifier::raw)).sharing_mode(vk::SharingMode::EXCLUSIVE);
    let mut ext = vk::PhysicalDeviceExternalImageFormatInfo::default().handle_type(vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT);
    let mut info = vk::PhysicalDeviceImageFormatInfo2::default()
        .format(format)
        .ty(vk::ImageType::TYPE_2D)
        .usage(image_use.usage)
        .flags(create)
        .tiling(if modifier.is_some() { vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT } else { vk::ImageTiling::LINEAR });
    if modifier.is_some() {
        info = info.push_next(&mut drm);
    }
    if dma_buf {
        info = info.push_next(&mut ext);
    }
    if !views.is_empty() {
        info = info.push_next(&mut list);
    }
    let mut ext_props = vk::ExternalImageFormatProperties::default();
    let mut props = vk::ImageFormatProperties2::default().push_next(&mut ext_props);
    // SAFETY: every chained struct is allowed in the query (VUID-VkPhysicalDeviceImageFormatInfo2-pNext-pNext)
    // and DRM tiling carries its modifier info (VUID-VkPhysicalDeviceImageFormatInfo2-tiling-02249).
    let r = unsafe { engine.instance().get_physical_device_image_format_properties2(engine.physical_device(), &info, &mut props) };
    match r {
        Ok(()) => {
            let f = ext_props.external_memory_properties.external_memory_features;
            Some((f.contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE), f.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE)))
        }
        Err(vk::Result::ERROR_FORMAT_NOT_SUPPORTED) => None,
        Err(e) => panic!("vkGetPhysicalDeviceImageFormatProperties2 {format:?} {modifier:?}: {e}"),
    }
}

/// Per usage and create flag, dmabridge's capability answer is the driver's: every modifier
/// of the format-level list is asked about, and the supported, importable and exportable
/// verdicts are what `vkGetPhysicalDeviceImageFormatProperties2` returns when asked directly.
/// The counts where the answer narrows the list (DCC refused for storage or a mutable
/// format, on the chips whose driver refuses it) are printed, not asserted: they are the
/// driver's to decide.
#[test]
fn per_usage_answers_are_the_drivers() {
    let Some((chip, engine)) = shim_engine() else { return };
    let usages: [(&str, ImageUse); 4] = [
        ("sampled", ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC)),
        ("color-attachment", ImageUse::new(vk::ImageUsageFlags::COLOR_ATTACHMENT)),
        ("storage", ImageUse::new(vk::ImageUsageFlags::STORAGE)),
        ("sampled+srgb-view", ImageUse::new(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::COLOR_ATTACHMENT).with_srgb_view()),
    ];
    for fourcc in FOURCCS {
        for (name, image_use) in usages {
            let support = engine.format_support(&SupportQuery::new(fourcc, image_use)).expect("the capability query");
            let mut narrowed = 0;
            for m in &support.modifiers {
                let tiling = match support.source {
                    SupportSource::DrmModifier => Some(m.modifier),
                    SupportSource::LinearTiling => None,
                };
                let direct = driver_answer(engine, support.vk_format, image_use, tiling);
                assert_eq!(m.limits.is_some(), direct.is_some(), "{chip} {fourcc} {name} {}: supported as the driver says", m.modifier);
                if let Some((import, export)) = direct {
                    assert_eq!((m.importable, m.exportable), (import, export), "{chip} {fourcc} {name} {}: import/export as the driver says", m.modifier);
                }
                if !m.supported() {
                    narrowed += 1;
                }
            }
            eprintln!("drm-shim {chip} {fourcc} {name}: {} listed, {narrowed} refused for this use", support.modifiers.len());
        }
    }
    common::assert_clean(engine);
}

/// A layout that breaks a rule dmabridge knows is refused before the driver sees it, naming
/// the plane and the rule; one that keeps those rules but not the driver's own (radv wants
/// its own pitch for a swizzled layout) comes back as the driver's typed refusal, or is
/// honoured exactly. Tried on every exportable modifier with more than the LINEAR rules.
#[test]
fn layouts_are_refused_first_or_typed() {
    let Some((chip, engine)) = shim_engine() else { return };
    let (w, h) = (1920u32, 1080u32);
    let mut refused_by_us = 0;
    let mut refused_by_driver = 0;
    let mut honoured = 0;
    for fourcc in [Fourcc::ARGB8888, Fourcc::NV12] {
        let image_use = uses()[0].1;
        let support = engine.format_support(&SupportQuery::new(fourcc, image_use)).expect("the capability query");
        for m in support.exportable().collect::<Vec<_>>() {
            let req = ExportRequest::new(fourcc, w, h, image_use);
            let first = engine.allocate_exportable(&req.clone().with_acceptable([Layout::Explicit(m)])).expect("a one-modifier list");
            let own = first.planes().to_vec();
            drop(first);
            // A pitch shorter than one row of samples: no driver can honour it, and none is asked.
            let mut short = own.clone();
            short[0].stride = dmabridge::interop::format_info(fourcc).map_or(4, |i| i.min_stride(0, w)) - 1;
            match engine.allocate_exportable_with_layout(&req, m, &short) {
                Err(ExportError::LayoutRule { modifier, rule: LayoutRuleError::StrideTooSmall { plane: 0, .. } }) if modifier == m => refused_by_us += 1,
                other => panic!("{chip} {fourcc} {m}: pitch {} refused by dmabridge first, got {:?}", short[0].stride, other.map(|i| i.planes().to_vec())),
            }
            // A swizzled pitch that is not whole blocks: refused first, naming the block.
            if m.as_amd().is_some_and(|a| a.tile != 0) {
                let mut split = own.clone();
                split[0].stride += u64::from(dmabridge::interop::format_info(fourcc).map_or(4, |i| i.planes[0].cpp.max(1)));
                match engine.allocate_exportable_with_layout(&req, m, &split) {
                    Err(ExportError::LayoutRule { modifier, rule: LayoutRuleError::SwizzlePitch { plane: 0, .. } }) if modifier == m => refused_by_us += 1,
                    other => panic!("{chip} {fourcc} {m}: pitch {} refused by dmabridge first, got {:?}", split[0].stride, other.map(|i| i.planes().to_vec())),
                }
            }
            // A plane that runs into the next: refused first, naming both.
            if own.len() > 1 && own[1].offset > 0 {
                let mut overlap = own.clone();
                overlap[0].size = overlap[1].offset + 1 - overlap[0].offset;
                match engine.allocate_exportable_with_layout(&req, m, &overlap) {
                    Err(ExportError::LayoutRule { rule: LayoutRuleError::Overlap { a: 0, b: 1, .. }, .. }) => refused_by_us += 1,
                    other => panic!("{chip} {fourcc} {m}: overlapping planes refused first, got {:?}", other.map(|i| i.planes().to_vec())),
                }
            }
            // Keeps dmabridge's rules (one more swizzle-block row, or 256 bytes for LINEAR),
            // but may break the driver's: typed either way.
            let mut wider = own.clone();
            let texel = u64::from(dmabridge::interop::format_info(fourcc).map_or(4, |i| i.planes[0].cpp.max(1)));
            wider[0].stride += if m == Modifier::LINEAR { 256 } else { 512 * texel };
            for p in &mut wider {
                p.size = 0;
            }
            match engine.allocate_exportable_with_layout(&req, m, &wider) {
                Ok(img) => {
                    assert_eq!(img.planes()[0].stride, wider[0].stride, "{chip} {fourcc} {m}: honoured as asked");
                    honoured += 1;
                }
                Err(ExportError::LayoutRefused { modifier, .. }) if modifier == m => refused_by_driver += 1,
                // The pitch is honoured but the driver places the next plane its own way.
                Err(ExportError::LayoutNotHonoured { .. }) => refused_by_driver += 1,
                Err(ExportError::LayoutRule { rule, .. }) => panic!("{chip} {fourcc} {m}: {rule} (the wider pitch keeps dmabridge's rules)"),
                Err(e) => panic!("{chip} {fourcc} {m}: a layout the driver refuses comes back typed, got {e}"),
            }
        }
    }
    eprintln!("drm-shim {chip}: {refused_by_us} layouts refused by dmabridge before the driver; wider pitches: {honoured} honoured, {refused_by_driver} refused by the driver");
    common::assert_clean(engine);
}

/// The row pitch the driver needs of a LINEAR layout it is given is measured into the
/// opened device's participant, and a buffer dmabridge places with it is the driver's
/// (`common::linear_pitch_is_measured_and_placed_for`). radv's is 256 bytes on every chip: a
/// LINEAR buffer placed at its packed pitch would reach radv and be refused there.
#[test]
fn the_linear_pitch_the_driver_needs_is_measured_and_placed_for() {
    let Some((chip, engine)) = shim_engine() else { return };
    let aligns = common::linear_pitch_is_measured_and_placed_for(engine, uses()[0].1, &FOURCCS);
    eprintln!("drm-shim {chip}: LINEAR pitch alignment measured: {}", aligns.join(", "));
    common::assert_clean(engine);
}

/// Every multi-memory-plane layout the driver gives (DCC/CCS metadata beside the pixels)
/// survives the descriptor, the import checks and the handoff wire unchanged, and the
/// engine's import path up to the driver: a memfd of the size the driver asked for stands
/// in for the memory (the shim has no PRIME, so no fd of the driver's own leaves it, and the
/// driver refuses any fd given to it: `VK_ERROR_INVALID_EXTERNAL_HANDLE`).
#[test]
fn metadata_planes_are_carried_end_to_end() {
    let Some((chip, engine)) = shim_engine() else { return };
    let (w, h) = (1920u32, 1080u32);
    let mut carried = 0;
    for fourcc in FOURCCS {
        for (use_name, image_use) in uses() {
            let support = engine.format_support(&SupportQuery::new(fourcc, image_use)).expect("the capability query");
            let format_planes = dmabridge::interop::format_info(fourcc).map_or(1, |i| i.plane_count());
            for m in support.exportable().collect::<Vec<_>>() {
                let img = engine.allocate_exportable(&ExportRequest::new(fourcc, w, h, image_use).with_acceptable([Layout::Explicit(m)])).expect("a one-modifier list");
                if img.planes().len() <= format_planes {
                    continue;
                }
                let planes = img.planes().to_vec();
                let size = img.memory_requirements().size;
                let fd = sealed_memfd_of_size("drm-shim-layout", size).expect("a memfd");
                let buf = DmaBuf::in_one_file(fourcc, Layout::Explicit(m), w, h, fd, &planes).unwrap_or_else(|e| panic!("{chip} {fourcc} {m}: {} planes: {e}", planes.len()));
                let facts = |f: Format| (f == buf.format()).then_some(ImportFacts { memory_plane_count: planes.len(), max_width: 16384, max_height: 16384, disjoint: false });
                check_import(&buf, &facts).unwrap_or_else(|e| panic!("{chip} {fourcc} {use_name} {m}: the driver's own layout {planes:?} in {size} bytes: {e}"));
                let (a, b) = socketpair().expect("a socket pair");
                send_buffer(&a, 7, &buf).expect("send");
                let Received::Buffer { id: 7, buf: got } = recv(&b).expect("recv") else { panic!("{chip}: not the buffer") };
                assert_eq!(got.layout(), Layout::Explicit(m));
                let sent: Vec<(u64, u64)> = buf.planes().map(|p| (p.offset, p.stride)).collect();
                let came: Vec<(u64, u64)> = got.planes().map(|p| (p.offset, p.stride)).collect();
                assert_eq!(came, sent, "{chip} {fourcc} {m}: the wire keeps every memory plane");
                check_import(&got, &facts).unwrap_or_else(|e| panic!("{chip} {fourcc} {m}: received: {e}"));
                // The engine's own import path: every check of its own passes too, and the
                // driver, which cannot take a memfd without PRIME, answers typed.
                match engine.import_dmabuf(&got, image_use) {
                    Ok(_) => {}
                    // radv refuses it in vkGetMemoryFdPropertiesKHR, anv in vkAllocateMemory.
                    Err(ImportError::Vk(e) | ImportError::Buffer(BufferError::Vk(e))) if e.result == vk::Result::ERROR_INVALID_EXTERNAL_HANDLE => {}
                    Err(e) => panic!("{chip} {fourcc} {use_name} {m}: the import of the driver's own layout {planes:?}: {e} ({e:?})"),
                }
                carried += 1;
            }
        }
    }
    eprintln!("drm-shim {chip}: {carried} multi-memory-plane layouts carried through descriptor, checks and wire");
    common::assert_clean(engine);
}

/// The project's compute shaders (tile: detile and tile; colour: YUV<->RGB, fused with the
/// detile) compile into pipelines on the driver's own compiler (radv's ACO, anv's brw or
/// elk), for the chip.
#[test]
fn compute_shaders_compile_on_the_drivers_compiler() {
    let Some((chip, engine)) = shim_engine() else { return };
    let started = std::time::Instant::now();
    Converter::new(engine).unwrap_or_else(|e| panic!("{chip}: the compiler refused a compute shader: {e}"));
    eprintln!("drm-shim {chip}: tile.comp and colour.comp compiled by {} in {} ms", engine.info().driver_name, started.elapsed().as_millis());
    common::assert_clean(engine);
}

/// The presenter's graphics pipelines (vertex and fragment shaders, the YCbCr samplers baked
/// in) compile on the driver's compiler for every frame kind it samples, with no window.
#[cfg(feature = "present")] // on in the workspace build the test command runs (the CLI enables it)
#[test]
fn present_pipelines_compile_on_the_drivers_compiler() {
    let Some((chip, engine)) = shim_engine() else { return };
    let started = std::time::Instant::now();
    let (compiled, refused) = present_check::present_pipelines_compile(engine);
    assert!(compiled > 0, "{chip}: no present pipeline compiled");
    eprintln!("drm-shim {chip}: {compiled} frame kinds drawn by present pipelines compiled by {} in {} ms ({refused} kinds not sampleable)", engine.info().driver_name, started.elapsed().as_millis());
    common::assert_clean(engine);
}
