//! `include/dmabridge.h` is generated from this crate's declarations by cbindgen
//! (`capi/cbindgen.toml`) and checked in. This test generates it again and fails when the
//! checked-in copy differs. To regenerate it:
//!
//!     DMABRIDGE_BLESS_HEADER=1 cargo test -p dmabridge-capi --test header

use std::path::Path;

#[test]
fn the_checked_in_header_is_cbindgens() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checked_in = crate_dir.join("../include/dmabridge.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("capi/cbindgen.toml");
    let bindings = cbindgen::Builder::new().with_config(config).with_src(crate_dir.join("src/lib.rs")).generate().expect("cbindgen reads capi/src");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    if std::env::var_os("DMABRIDGE_BLESS_HEADER").is_some() {
        std::fs::write(&checked_in, &generated).expect("write include/dmabridge.h");
        return;
    }
    let current = std::fs::read(&checked_in).unwrap_or_default();
    if current != generated {
        let fresh = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dmabridge.h");
        std::fs::write(&fresh, &generated).expect("write the generated header");
        panic!(
            "include/dmabridge.h is stale: it is not what cbindgen makes of capi/src.\n  see: diff -u include/dmabridge.h {}\n  regenerate: DMABRIDGE_BLESS_HEADER=1 cargo test -p dmabridge-capi --test header",
            fresh.display()
        );
    }
}
