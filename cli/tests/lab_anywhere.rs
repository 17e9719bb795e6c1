//! The kernel lab (`scripts/lab.sh`) runs from any work tree: a clone under `/tmp`, where a
//! new user clones, under `/run`, and under `/dev/shm` (a mount of its own). The guest
//! mounts tmpfs on `/tmp`, `/run` and `/dev/shm`, which once hid the mount point of a work
//! tree there ("the guest stopped without the command's exit status").
//!
//! Each tree is a fresh `git clone` of this work tree's HEAD with the current `scripts/`
//! copied over it, so that the scripts under test are the ones in the work tree, committed
//! or not. The command writes a file into the tree: the host must see it, so the tree was
//! the shared one, writable, not a directory of the guest's tmpfs.
//!
//! It boots the lab, so it runs on the host only (`scripts/kernel-tests.sh` skips it), and
//! once per run of the suite: the udmabuf configuration, which changes nothing here, skips it.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository root")
}

/// Copies the directory `from` into `to` (files and directories; links as the files they
/// name), over what is there.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display())) {
        let entry = entry.expect("directory entry");
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {} to {}: {e}", src.display(), dst.display()));
        }
    }
}

/// A clone of the work tree in a new directory `prefix`XXXXXX under `base`, with the current
/// scripts; `None` (said on stderr) where `base` is not writable here.
fn clone_under(base: &str, prefix: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let dir = match tempfile::Builder::new().prefix(prefix).tempdir_in(base) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipping {base}: cannot make a directory there: {e}");
            return None;
        }
    };
    let tree = dir.path().join("tree");
    let root = repo_root();
    let cloned = Command::new("git")
        .args(["clone", "--quiet", "--no-hardlinks"])
        .arg(&root)
        .arg(&tree)
        .status()
        .is_ok_and(|s| s.success());
    if !cloned {
        // Not a git checkout (an unpacked archive): the tree is the scripts alone.
        eprintln!("{} is not a git checkout: {} holds the scripts only", root.display(), tree.display());
    }
    copy_tree(&root.join("scripts"), &tree.join("scripts"));
    Some((dir, tree))
}

#[test]
fn the_lab_runs_from_a_clone_under_tmp_run_and_dev_shm() {
    match common::config() {
        common::Config::Kernel => return eprintln!("skipped: the lab does not boot inside itself"),
        common::Config::UdmabufEmulation => return eprintln!("skipped: the plain configuration runs it (the preload changes nothing here)"),
        common::Config::Plain | common::Config::RealUdmabuf => {}
    }
    // Names with a space and a comma too (QEMU's option syntax takes a comma as a separator).
    for (base, prefix) in [("/tmp", "dmabridge-lab-anywhere."), ("/run", "dmabridge lab anywhere."), ("/dev/shm", "dmabridge-lab,anywhere.")] {
        let Some((dir, tree)) = clone_under(base, prefix) else {
            assert_ne!(base, "/tmp", "a clone under /tmp is the case this test is for");
            continue;
        };
        let out = Command::new(tree.join("scripts/lab.sh"))
            .args(["--quiet", "--timeout", "600", "--", "sh", "-c", "test -w . && pwd -P > lab-wrote"])
            .current_dir(&tree)
            .output()
            .expect("run scripts/lab.sh");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "scripts/lab.sh -- ... from {}: {}\n{stderr}", tree.display(), out.status);
        let wrote = std::fs::read_to_string(tree.join("lab-wrote"))
            .unwrap_or_else(|e| panic!("the guest's file is not in {} on the host: {e}", tree.display()));
        let host = tree.canonicalize().expect("the tree's path");
        assert_eq!(wrote.trim_end(), host.to_string_lossy(), "the guest ran in the shared tree, at the host's path");
        drop(dir);
    }
}
