//! Replays every fuzz corpus (`interop/fuzz/corpus/<target>/`) and any crash files
//! `cargo fuzz` left (`interop/fuzz/artifacts/<target>/`) through the very checks the fuzz
//! targets run (`interop/fuzz/checks.rs`): every input must give a value or a typed error
//! without a panic, and whatever parses must survive its round trip.
//!
//! The test fails when a target has no corpus, when a corpus lacks either a valid or a
//! malformed input, or when a corpus or fuzz target exists that nothing here replays.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::{Path, PathBuf};

type Check = fn(&[u8]) -> bool;

const TARGETS: &[(&str, Check)] = &[
    ("gst_caps", checks::gst_caps),
    ("drm_format_list", checks::drm_format_list),
    ("kms_in_formats", checks::kms_in_formats),
    ("wayland_table", checks::wayland_table),
    ("v4l2_format", checks::v4l2_format),
    ("handoff_wire", checks::handoff_wire),
    ("import_checks", checks::import_checks),
    ("tiling_geometry", checks::tiling_geometry),
    ("collection_wire", checks::collection_wire),
    ("forged_server", checks::forged_server),
    ("cpu_differential", checks::cpu_differential),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn replay(check: Check, path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let outcome = std::panic::catch_unwind(|| check(&bytes));
    outcome.unwrap_or_else(|_| panic!("{} made its parser panic or break a round trip", path.display()))
}

#[test]
fn every_corpus_input_parses_or_errs_without_panicking() {
    for (target, check) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(target);
        let inputs = files(&dir);
        assert!(!inputs.is_empty(), "corpus {} is empty", dir.display());
        let accepted = inputs.iter().filter(|p| replay(*check, p)).count();
        assert!(accepted > 0, "{target}: no valid input in {}", dir.display());
        assert!(accepted < inputs.len(), "{target}: no malformed input in {}", dir.display());
    }
}

#[test]
fn crash_artifacts_are_replayed() {
    for (target, check) in TARGETS {
        let dir = fuzz_dir().join("artifacts").join(target);
        if dir.is_dir() {
            for path in files(&dir) {
                replay(*check, &path);
            }
        }
    }
}

#[test]
fn every_corpus_and_fuzz_target_is_replayed_somewhere() {
    let known = |name: &str| TARGETS.iter().any(|(t, _)| *t == name);
    for entry in std::fs::read_dir(fuzz_dir().join("corpus")).expect("interop/fuzz/corpus exists") {
        let name = entry.expect("corpus entry").file_name().to_string_lossy().into_owned();
        assert!(known(&name), "corpus {name} is replayed by no test");
    }
    for path in files(&fuzz_dir().join("fuzz_targets")) {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        assert!(known(&stem), "fuzz target {stem} has no corpus replay");
    }
}
