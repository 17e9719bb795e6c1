//! Gives libdmabridge.so its SONAME, `libdmabridge.so.0`: a C program linked against it
//! records that name, and `scripts/install-capi.sh` installs the library under it (with the
//! `libdmabridge.so` link the linker looks for). The 0 changes when the ABI breaks.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdmabridge.so.0");
    }
}
