//! The presenter's SPIR-V, compiled from `shaders/present.{vert,frag}` by `build.rs`
//! (glslc, then spirv-val against Vulkan 1.1) and embedded here.

static VERTEX: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/present.vert.spv"));
static FRAGMENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/present.frag.spv"));

/// The full-viewport triangle.
pub(crate) fn vertex() -> std::io::Result<Vec<u32>> {
    ash::util::read_spv(&mut std::io::Cursor::new(VERTEX))
}

/// Samples the frame (directly, or through the YCbCr conversion of the immutable sampler).
pub(crate) fn fragment() -> std::io::Result<Vec<u32>> {
    ash::util::read_spv(&mut std::io::Cursor::new(FRAGMENT))
}

#[cfg(test)]
mod tests {
    #[test]
    fn spirv_words_are_well_formed() {
        for words in [super::vertex(), super::fragment()] {
            let words = words.expect("build.rs wrote whole SPIR-V words");
            assert_eq!(words.first(), Some(&0x0723_0203), "SPIR-V magic");
        }
    }
}
