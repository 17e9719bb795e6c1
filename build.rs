//! Compiles every shader in `shaders/` (GLSL 450: `.comp`, `.vert`, `.frag`) to SPIR-V with
//! Debian's `glslc` and validates the result with `spirv-val`, both installed by
//! `scripts/setup.sh`. The SPIR-V lands in `OUT_DIR`, where `engine/convert/shaders.rs` and
//! `engine/present/shaders.rs` embed it. Nothing is downloaded at build time. The lab's build
//! script includes this file to compile the demo's shaders (`lab/shaders/`) the same way.
//!
//! glslc rather than naga: it is the reference GLSL front end (shaderc/glslang), so the
//! integer semantics the shaders rely on (arithmetic `>>` on `int`, `uint` wrap-around) are
//! glslang's, and spirv-val checks its output against the Vulkan 1.1 environment.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every `DIR/NAME.{comp,vert,frag}` is compiled (so a shader is added by adding its
/// file; the stage comes from the extension): compute shaders to `OUT_DIR/NAME.spv`,
/// graphics stages to `OUT_DIR/NAME.vert.spv` / `NAME.frag.spv`, since a vertex and a
/// fragment shader of one pipeline share a name.
fn shaders(dir: &str) -> Vec<(String, &'static str)> {
    let mut found: Vec<(String, &'static str)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("the {dir}/ directory: {e}"))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let path = e.path();
            let stage = match path.extension()?.to_str()? {
                "comp" => "compute",
                "vert" => "vertex",
                "frag" => "fragment",
                _ => return None,
            };
            Some((path.file_name()?.to_str()?.to_owned(), stage))
        })
        .collect();
    found.sort();
    found
}

fn tool(name: &str) -> PathBuf {
    let path = Path::new("/usr/bin").join(name);
    if path.exists() {
        path
    } else {
        // Fall back to PATH (non-Debian layouts); the error below names the setup script.
        PathBuf::from(name)
    }
}

fn run(cmd: &mut Command, what: &str) {
    let output = cmd.output().unwrap_or_else(|e| {
        panic!(
            "{what}: cannot run {:?} ({e}); run scripts/setup.sh to install glslc and spirv-tools",
            cmd.get_program()
        )
    });
    if !output.status.success() {
        panic!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Compiles every shader in `dir` (relative to the package) into `OUT_DIR`.
pub fn compile_dir(dir: &str) {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let (glslc, spirv_val) = (tool("glslc"), tool("spirv-val"));
    // The `test-layout` feature's made-up layout has its address function in the shader
    // too (shaders/tiled_address.glsl), behind this define.
    let test_layout = std::env::var_os("CARGO_FEATURE_TEST_LAYOUT").is_some();
    println!("cargo:rerun-if-changed={dir}");
    // Included files (`#include "x.glsl"`) are not compiled on their own, but a change to
    // one must rebuild the shaders that include it.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "glsl")) {
            println!("cargo:rerun-if-changed={}", e.path().display());
        }
    }
    for (file, stage) in shaders(dir) {
        let src = format!("{dir}/{file}");
        println!("cargo:rerun-if-changed={src}");
        let stem = if stage == "compute" { file.trim_end_matches(".comp") } else { file.as_str() };
        let spv = out_dir.join(format!("{stem}.spv"));
        run(
            Command::new(&glslc)
                .args(["--target-env=vulkan1.1", "-O", "-Werror", &format!("-fshader-stage={stage}")])
                .args(test_layout.then_some("-DDMABRIDGE_TEST_LAYOUT"))
                .arg("-o")
                .arg(&spv)
                .arg(&src),
            &format!("compiling {src}"),
        );
        run(Command::new(&spirv_val).args(["--target-env", "vulkan1.1"]).arg(&spv), &format!("validating {stem}.spv"));
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    compile_dir("shaders");
    // The examples' own shaders (a host's sampling pass), for `cargo run --example`.
    compile_dir("examples/shaders");
}
