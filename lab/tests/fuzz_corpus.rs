//! Replays the lab's fuzz corpora (`lab/fuzz/corpus/<target>/`) and any crash files
//! `cargo fuzz` left (`lab/fuzz/artifacts/<target>/`) through the checks the fuzz targets
//! run (`lab/fuzz/checks.rs`): every input gives a value or a typed error without a panic.
//! Fails when a corpus is empty, lacks a valid or a malformed input, or when a corpus or
//! target exists that nothing here replays.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::{Path, PathBuf};

type Check = fn(&[u8]) -> bool;

const TARGETS: &[(&str, Check)] = &[("demo_control", checks::demo_control)];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

fn replay(check: Check, path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::panic::catch_unwind(|| check(&bytes)).unwrap_or_else(|_| panic!("{} made a check panic", path.display()))
}

#[test]
fn every_corpus_input_decodes_or_errs_without_panicking() {
    for (target, check) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(target);
        let inputs = files(&dir);
        assert!(!inputs.is_empty(), "corpus {} is empty", dir.display());
        let accepted = inputs.iter().filter(|p| replay(*check, p)).count();
        assert!(accepted > 0 && accepted < inputs.len(), "{target}: {accepted} of {} accepted", inputs.len());
        for path in files(&fuzz_dir().join("artifacts").join(target)) {
            replay(*check, &path);
        }
    }
}

#[test]
fn every_corpus_and_fuzz_target_is_replayed_somewhere() {
    let known = |name: &str| TARGETS.iter().any(|(t, _)| *t == name);
    for entry in std::fs::read_dir(fuzz_dir().join("corpus")).expect("lab/fuzz/corpus exists") {
        let name = entry.expect("corpus entry").file_name().to_string_lossy().into_owned();
        assert!(known(&name), "corpus {name} is replayed by no test");
    }
    for path in files(&fuzz_dir().join("fuzz_targets")) {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        assert!(known(&stem), "fuzz target {stem} has no corpus replay");
    }
}
