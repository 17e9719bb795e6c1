//! Files a user names that are not files to read: a FIFO with no writer (whose `open` for
//! reading waits for one for ever), and a file over the command's limit. Every command that
//! reads a user's file (`negotiate`'s peer files, `convert`'s plan and frame, `view`'s frame,
//! `bench --compare`'s results) must refuse them at once, with a message that names the
//! path and what is wrong: for a FIFO that it is not a regular file, for a long file the
//! limit. Each command runs as its own process, killed (and the test failed) if it takes
//! more than a few seconds.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a refusal may take: the commands start lavapipe for nothing here, and a debug
/// build on a busy machine is slow, but a refusal reads nothing.
const PROMPT: Duration = Duration::from_secs(20);

/// A directory of this test's own (removed when dropped).
fn own_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("dmabridge-hostile-files.").tempdir().expect("a temporary directory")
}

/// A FIFO at `dir/name`, which nothing will ever open for writing.
fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    rustix::fs::mknodat(rustix::fs::CWD, &path, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).expect("mkfifo");
    assert!(std::fs::symlink_metadata(&path).expect("stat").file_type().is_fifo());
    path
}

/// A sparse file of `len` bytes at `dir/name` (no disk, no memory).
fn long_file(dir: &Path, name: &str, len: u64) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path).and_then(|f| f.set_len(len)).expect("a sparse file");
    path
}

/// `dmabridge ARGS`: its exit status and stderr, or a failed test naming the command when it
/// does not exit within [`PROMPT`] (it is killed).
fn dmabridge(args: &[&str]) -> (ExitStatus, String) {
    let mut child: Child = Command::new(env!("CARGO_BIN_EXE_dmabridge"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dmabridge");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for dmabridge") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (status, err);
        }
        if start.elapsed() > PROMPT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dmabridge {args:?} did not exit within {PROMPT:?}: it is waiting on a file");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `args`, which must fail with exit status 1 and a message holding every `needle`.
fn refused(args: &[&str], needles: &[&str]) {
    let (status, err) = dmabridge(args);
    assert_eq!(status.code(), Some(1), "dmabridge {args:?}: {err}");
    for needle in needles {
        assert!(err.contains(needle), "dmabridge {args:?}: expected {needle:?} in: {err}");
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

const NOT_REGULAR: &str = "is a pipe (FIFO), not a regular file";

#[test]
fn negotiate_refuses_a_fifo_as_any_peer_file() {
    let dir = own_dir();
    for (flag, name) in [("--kms-in-formats", "in_formats"), ("--wayland-table", "table"), ("--drm-info", "drm_info.json")] {
        let path = s(&fifo(dir.path(), name));
        refused(&["negotiate", flag, &format!("peer={path}"), "--drm-formats", "display=XR24"], &["\"peer\"", flag, &path, NOT_REGULAR]);
    }
    // --drm-info FILE:PLANE_ID.
    let path = s(&fifo(dir.path(), "drm_info_plane.json"));
    refused(&["negotiate", "--drm-info", &format!("peer={path}:31"), "--drm-formats", "display=XR24"], &[&path, NOT_REGULAR]);
}

#[test]
fn negotiate_refuses_a_peer_file_over_the_limit_naming_it() {
    let dir = own_dir();
    let limit = dmabridge_interop::spec::MAX_PEER_FILE;
    let path = s(&long_file(dir.path(), "in_formats", limit + 1));
    refused(&["negotiate", "--kms-in-formats", &format!("peer={path}"), "--drm-formats", "display=XR24"], &["\"peer\"", &path, &format!("the {limit}-byte limit")]);
}

#[test]
fn convert_refuses_a_fifo_as_plan_or_frame() {
    let dir = own_dir();
    let out = s(&dir.path().join("out"));
    let plan = s(&fifo(dir.path(), "plan.json"));
    let frame = s(&long_file(dir.path(), "frame", 64 * 64 * 4));
    refused(&["convert", "--plan", &plan, "--width", "64", "--height", "64", "--cpu", "--in", &frame, "--out", &out], &[&plan, NOT_REGULAR]);
    let input = s(&fifo(dir.path(), "frame.fifo"));
    refused(
        &["convert", "--format", "AB24", "--width", "64", "--height", "64", "--from", "linear", "--to", "linear", "--cpu", "--in", &input, "--out", &out],
        &[&input, NOT_REGULAR],
    );
    // A plan file over its megabyte.
    let long = s(&long_file(dir.path(), "long-plan.json", (1 << 20) + 1));
    refused(&["convert", "--plan", &long, "--width", "64", "--height", "64", "--cpu", "--in", &frame, "--out", &out], &[&long, "the 1048576-byte limit"]);
}

#[test]
fn outputs_that_are_fifos_are_refused_not_blocked_on() {
    // The write side of the same trap: opening a FIFO nobody reads for writing blocks.
    let dir = own_dir();
    let frame = s(&long_file(dir.path(), "frame", 64 * 64 * 4));
    let out = s(&fifo(dir.path(), "out.fifo"));
    refused(
        &["convert", "--format", "AB24", "--width", "64", "--height", "64", "--from", "linear", "--to", "linear", "--cpu", "--in", &frame, "--out", &out],
        &[&out, NOT_REGULAR],
    );
    let plan_out = s(&fifo(dir.path(), "plan.fifo"));
    refused(
        &["negotiate", "--v4l2", "decoder=NV12MT", "--drm-formats", "display=XR24,AR24", "--plan-out", &plan_out],
        &[&plan_out, NOT_REGULAR],
    );
}

#[test]
fn view_refuses_a_fifo_as_its_frame() {
    let dir = own_dir();
    let input = s(&fifo(dir.path(), "frame.fifo"));
    refused(&["view", "--in", &input, "--format", "AB24", "--width", "64", "--height", "64", "--seconds", "0"], &[&input, NOT_REGULAR]);
}

#[test]
fn bench_compare_refuses_a_fifo_or_an_over_long_result() {
    let dir = own_dir();
    let old = s(&fifo(dir.path(), "old.json"));
    let new = s(&fifo(dir.path(), "new.json"));
    // Two files: compared without measuring; one: checked before measuring.
    refused(&["bench", "--compare", &old, &new], &[NOT_REGULAR]);
    refused(&["bench", "--compare", &old], &[&old, NOT_REGULAR]);
    let limit = dmabridge_lab::bench::figures::MAX_REPORT_BYTES;
    let long = s(&long_file(dir.path(), "long.json", limit + 1));
    refused(&["bench", "--compare", &long], &[&long, &format!("the {limit}-byte limit")]);
}
