//! Compiles the demo's compute shaders (`lab/shaders/`) with the library's build rules.

#[path = "../build.rs"]
#[allow(dead_code)]
mod library_build;

fn main() {
    println!("cargo:rerun-if-changed=../build.rs");
    library_build::compile_dir("shaders");
}
