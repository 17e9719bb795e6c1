//! `dmb_negotiate_json` with participant files that are not files to read: a FIFO with no
//! writer (whose `open` for reading once waited for one for ever, holding the caller's
//! thread) and a file over the limit. The call must return `DMB_ERR_INVALID` at once, and
//! `dmb_last_error()` name the path and what is wrong with it.
//!
//! The library is a cdylib, so the test loads `libdmabridge.so` as a C program would, from
//! the target directory this test was built into, and calls it on a thread of its own: a
//! call that does not return within [`PROMPT`] fails the test instead of hanging it.

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// How long a refusal may take (it reads nothing).
const PROMPT: Duration = Duration::from_secs(10);
/// `DMB_ERR_INVALID`.
const DMB_ERR_INVALID: c_int = 1;

type NegotiateJson = unsafe extern "C" fn(*const *const c_char, usize, *mut *mut c_char) -> c_int;
type LastError = unsafe extern "C" fn() -> *const c_char;

/// `target/<profile>/libdmabridge.so`: this test runs from `target/<profile>/deps`. `cargo
/// test` does not build a cdylib (the test command does, before the tests run): a library
/// older than the sources it is built from fails the test rather than testing old code.
fn library_path() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let lib = dir.join("libdmabridge.so");
    let built = std::fs::metadata(&lib)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build -p dmabridge-capi)", lib.display()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in ["capi/src", "interop/src/spec"] {
        let sources = std::fs::read_dir(root.join(dir)).expect("the sources").map(|e| e.expect("an entry").path());
        for source in sources.chain([root.join("interop/src/user_file.rs")]) {
            let changed = std::fs::metadata(&source).and_then(|m| m.modified()).expect("the source's time");
            assert!(changed <= built, "{} is older than {}: cargo build -p dmabridge-capi", lib.display(), source.display());
        }
    }
    lib
}

/// `dmb_negotiate_json(args)` on a thread of its own: its status, the JSON it returned (if
/// any) and `dmb_last_error()` (kept per thread, so read on the same one); the test fails
/// when it does not return within [`PROMPT`].
fn negotiate_json(args: &[String]) -> (c_int, Option<String>, String) {
    let path = library_path();
    let args: Vec<CString> = args.iter().map(|a| CString::new(a.as_str()).expect("no NUL")).collect();
    let (tx, rx) = mpsc::channel();
    let shown = format!("{args:?}");
    std::thread::spawn(move || {
        // SAFETY: libdmabridge.so runs no code on load that has preconditions (Rust statics
        // only); the symbols are taken with the types include/dmabridge.h gives them.
        let lib = unsafe { libloading::Library::new(&path) }.unwrap_or_else(|e| panic!("load {}: {e}", path.display()));
        // SAFETY: as above: `dmb_negotiate_json` and `dmb_last_error` have these signatures.
        let (negotiate, last_error) = unsafe {
            (
                lib.get::<NegotiateJson>(b"dmb_negotiate_json\0").expect("dmb_negotiate_json"),
                lib.get::<LastError>(b"dmb_last_error\0").expect("dmb_last_error"),
            )
        };
        let ptrs: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
        let mut json: *mut c_char = std::ptr::null_mut();
        // SAFETY: `ptrs` holds ptrs.len() NUL-terminated strings that outlive the call, and
        // `json` is writable.
        let status = unsafe { negotiate(ptrs.as_ptr(), ptrs.len(), &mut json) };
        // SAFETY: a NUL-terminated string the library owns until its next call on this thread.
        let message = unsafe { CStr::from_ptr(last_error()) }.to_string_lossy().into_owned();
        let json = (!json.is_null()).then(|| {
            // SAFETY: a string the call returned, freed with dmb_string_free below.
            let s = unsafe { CStr::from_ptr(json) }.to_string_lossy().into_owned();
            // SAFETY: the library's own symbol; `json` came from it and is freed once.
            unsafe {
                let free = lib.get::<unsafe extern "C" fn(*mut c_char)>(b"dmb_string_free\0").expect("dmb_string_free");
                free(json);
            }
            s
        });
        let _ = tx.send((status, json, message));
    });
    rx.recv_timeout(PROMPT).unwrap_or_else(|_| panic!("dmb_negotiate_json({shown}) did not return within {PROMPT:?}: it is waiting on a file"))
}

/// A directory of this test's own under the temporary directory.
struct OwnDir(PathBuf);

impl OwnDir {
    fn new(name: &str) -> OwnDir {
        let d = std::env::temp_dir().join(format!("dmabridge-capi-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create the test's directory");
        OwnDir(d)
    }

    fn fifo(&self, name: &str) -> String {
        let path = self.0.join(name);
        rustix::fs::mknodat(rustix::fs::CWD, &path, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).expect("mkfifo");
        path.display().to_string()
    }
}

impl Drop for OwnDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_fifo_as_any_peer_file_is_refused_at_once() {
    let dir = OwnDir::new("fifo");
    for flag in ["--kms-in-formats", "--wayland-table", "--drm-info"] {
        let path = dir.fifo(&flag[2..]);
        let (status, json, message) = negotiate_json(&[flag.into(), format!("peer={path}"), "--drm-formats=display=XR24".into()]);
        assert_eq!(status, DMB_ERR_INVALID, "{flag}: {message}");
        assert_eq!(json, None, "{flag}: no document for a participant that cannot be read");
        assert!(message.contains(&path) && message.contains("is a pipe (FIFO), not a regular file") && message.contains("\"peer\""), "{flag}: {message}");
    }
}

#[test]
fn a_peer_file_over_the_limit_is_refused_naming_it() {
    let dir = OwnDir::new("long");
    let path = dir.0.join("in_formats");
    // Sparse: the size costs no disk. (MAX_PEER_FILE, 16 MiB, and one byte.)
    std::fs::File::create(&path).and_then(|f| f.set_len((16 << 20) + 1)).expect("a sparse file");
    let path = path.display().to_string();
    let (status, _, message) = negotiate_json(&["--kms-in-formats".into(), format!("peer={path}"), "--drm-formats=display=XR24".into()]);
    assert_eq!(status, DMB_ERR_INVALID, "{message}");
    assert!(message.contains(&path) && message.contains("the 16777216-byte limit"), "{message}");
}
