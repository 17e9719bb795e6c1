//! The one way dmabridge opens a file a user names: reads a peer's list (`--kms-in-formats`,
//! `--wayland-table`, `--drm-info`, and the same through the C ABI), a copy plan, a bench
//! result, a frame, the cost model's cache ([`read_regular`]); writes a frame, a plan, a
//! report ([`create_regular`], [`write_regular`]).
//!
//! A path on a command line may name anything. A FIFO with no writer blocks `open(O_RDONLY)`
//! and then `read` for ever; a character device such as `/dev/zero` never ends; a directory
//! fails only at `read`. So the file is opened `O_NONBLOCK` (a FIFO opens at once, and
//! `O_NOCTTY` keeps a terminal from becoming ours), `fstat`ed, and refused unless it is a
//! regular file, naming what it is; then it is read up to a limit that the error names.
//! Device nodes that a flag names as a device (`--kms-device`, `--v4l2-device`) are not
//! files to read: their own open paths take them.
//!
//! Writing has the same trap the other way round: `open(O_WRONLY)` of a FIFO with no reader
//! blocks for ever. A file to write is opened `O_NONBLOCK` too (a FIFO then fails with
//! `ENXIO`, or opens where it has a reader) and refused unless it is a regular file; only
//! then is it truncated.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::dmabuf::FileKind;

/// Whether the path's last component may be a symbolic link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Links {
    /// Follow it, as any command-line tool does with a path it is given.
    #[default]
    Follow,
    /// Refuse it (`O_NOFOLLOW`: `open` fails with `ELOOP`): for a file dmabridge also
    /// replaces (the cost cache), where a link would send the write elsewhere.
    Refuse,
}

/// Why a file a user named was not read. Every message names the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadFileError {
    /// `open` failed (no such file, no permission, a link under [`Links::Refuse`]: `ELOOP`).
    #[error("cannot open {}: {errno}", shown(path))]
    Open { path: PathBuf, errno: Errno },
    /// `fstat` of the opened file failed.
    #[error("cannot stat {}: {errno}", shown(path))]
    Stat { path: PathBuf, errno: Errno },
    /// The path is not a regular file (a FIFO, a socket, a device, a directory...): reading
    /// it could block for ever or never end.
    #[error("{} is a {kind}, not a regular file", shown(path))]
    NotRegular { path: PathBuf, kind: FileKind },
    /// The file holds more than `limit` bytes (by its size, or by what a read returned).
    #[error("{} is larger than the {limit}-byte limit", shown(path))]
    TooLarge { path: PathBuf, limit: u64 },
    /// No memory for the `bytes` the file holds.
    #[error("cannot allocate {bytes} bytes to read {}", shown(path))]
    OutOfMemory { path: PathBuf, bytes: u64 },
    /// `read` failed.
    #[error("cannot read {}: {errno}", shown(path))]
    Read { path: PathBuf, errno: Errno },
}

impl ReadFileError {
    /// The path the error names.
    pub fn path(&self) -> &Path {
        match self {
            ReadFileError::Open { path, .. }
            | ReadFileError::Stat { path, .. }
            | ReadFileError::NotRegular { path, .. }
            | ReadFileError::TooLarge { path, .. }
            | ReadFileError::OutOfMemory { path, .. }
            | ReadFileError::Read { path, .. } => path,
        }
    }
}

/// `path` for a one-line message: control characters (a newline in a file name) shown as `?`.
fn shown(path: &Path) -> impl fmt::Display + '_ {
    struct Shown<'a>(&'a Path);
    impl fmt::Display for Shown<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            for c in self.0.to_string_lossy().chars() {
                fmt::Write::write_char(f, if c.is_control() { '?' } else { c })?;
            }
            Ok(())
        }
    }
    Shown(path)
}

/// The whole of the regular file at `path`, at most `limit` bytes, following a link at the
/// path ([`read_regular_with`]).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadFileError> {
    read_regular_with(path, limit, Links::Follow)
}

/// The whole of the regular file at `path`, at most `limit` bytes: opened non-blocking,
/// refused unless `fstat` says it is a regular file, and read to its end or to one byte
/// past `limit`, whichever comes first, so neither a FIFO nor an endless or growing file
/// can hold the caller. The fd is closed before this returns.
pub fn read_regular_with(path: &Path, limit: u64, links: Links) -> Result<Vec<u8>, ReadFileError> {
    let owned = || path.to_path_buf();
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    if links == Links::Refuse {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|errno| ReadFileError::Open { path: owned(), errno })?;
    let st = rustix::fs::fstat(&fd).map_err(|errno| ReadFileError::Stat { path: owned(), errno })?;
    if let Some(kind) = FileKind::of(FileType::from_raw_mode(st.st_mode)) {
        return Err(ReadFileError::NotRegular { path: owned(), kind });
    }
    // A regular file on a local file system ignores O_NONBLOCK, but a network or FUSE one
    // may pass it on and answer a read with EAGAIN: it has done its work.
    if let Ok(now) = rustix::fs::fcntl_getfl(&fd) {
        let _ = rustix::fs::fcntl_setfl(&fd, now - OFlags::NONBLOCK);
    }
    // st_size is what the file holds now; /proc and sysfs files say 0 or a page and hold
    // more or less, so it only refuses early and sizes the first allocation.
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size > limit {
        return Err(ReadFileError::TooLarge { path: owned(), limit });
    }
    let mut bytes = Vec::new();
    let first = size.saturating_add(1);
    bytes
        .try_reserve_exact(usize::try_from(first).unwrap_or(usize::MAX))
        .map_err(|_| ReadFileError::OutOfMemory { path: owned(), bytes: size })?;
    std::fs::File::from(fd)
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadFileError::Read { path: owned(), errno: Errno::from_io_error(&e).unwrap_or(Errno::IO) })?;
    if bytes.len() as u64 > limit {
        return Err(ReadFileError::TooLarge { path: owned(), limit });
    }
    Ok(bytes)
}

/// Why a file a user named was not written. Every message names the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteFileError {
    /// `open` failed (no such directory, no permission).
    #[error("cannot create {}: {errno}", shown(path))]
    Open { path: PathBuf, errno: Errno },
    /// `fstat` of the opened file failed.
    #[error("cannot stat {}: {errno}", shown(path))]
    Stat { path: PathBuf, errno: Errno },
    /// The path is not a regular file (a FIFO, with or without a reader, a device, a
    /// socket): writing it could block for ever, or go nowhere a user can read back.
    #[error("{} is a {kind}, not a regular file", shown(path))]
    NotRegular { path: PathBuf, kind: FileKind },
    /// Emptying the file first (`ftruncate`) failed.
    #[error("cannot truncate {}: {errno}", shown(path))]
    Truncate { path: PathBuf, errno: Errno },
    /// `write` failed (a full disk, say).
    #[error("cannot write {}: {errno}", shown(path))]
    Write { path: PathBuf, errno: Errno },
}

/// The regular file at `path`, created (mode 0666 less the umask) or emptied, open for
/// writing (blocking, close-on-exec); anything else that is there (a FIFO, a device) is
/// refused without blocking and left as it was.
pub fn create_regular(path: &Path) -> Result<std::fs::File, WriteFileError> {
    let owned = || path.to_path_buf();
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::open(path, flags, Mode::from_bits_truncate(0o666)) {
        Ok(fd) => fd,
        // O_NONBLOCK|O_WRONLY on a FIFO nobody reads.
        Err(Errno::NXIO) => {
            let kind = rustix::fs::stat(path).ok().and_then(|st| FileKind::of(FileType::from_raw_mode(st.st_mode))).unwrap_or(FileKind::Fifo);
            return Err(WriteFileError::NotRegular { path: owned(), kind });
        }
        Err(errno) => return Err(WriteFileError::Open { path: owned(), errno }),
    };
    let st = rustix::fs::fstat(&fd).map_err(|errno| WriteFileError::Stat { path: owned(), errno })?;
    if let Some(kind) = FileKind::of(FileType::from_raw_mode(st.st_mode)) {
        return Err(WriteFileError::NotRegular { path: owned(), kind });
    }
    rustix::fs::ftruncate(&fd, 0).map_err(|errno| WriteFileError::Truncate { path: owned(), errno })?;
    // As for reads: a network file system may pass O_NONBLOCK on.
    if let Ok(now) = rustix::fs::fcntl_getfl(&fd) {
        let _ = rustix::fs::fcntl_setfl(&fd, now - OFlags::NONBLOCK);
    }
    Ok(std::fs::File::from(fd))
}

/// Writes `bytes` as the whole of the regular file at `path` ([`create_regular`]).
pub fn write_regular(path: &Path, bytes: &[u8]) -> Result<(), WriteFileError> {
    use std::io::Write;
    create_regular(path)?
        .write_all(bytes)
        .map_err(|e| WriteFileError::Write { path: path.to_path_buf(), errno: Errno::from_io_error(&e).unwrap_or(Errno::IO) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of this test's own under the temporary directory.
    fn own_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dmabridge-file-read-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create the test's directory");
        d
    }

    #[test]
    fn a_regular_file_is_read_whole_and_bounded() {
        let d = own_dir("regular");
        let f = d.join("f");
        std::fs::write(&f, b"0123456789").expect("write");
        assert_eq!(read_regular(&f, 10).as_deref(), Ok(&b"0123456789"[..]));
        let e = read_regular(&f, 9).unwrap_err();
        assert_eq!(e, ReadFileError::TooLarge { path: f.clone(), limit: 9 });
        assert!(e.to_string().contains("9-byte limit") && e.to_string().contains(&*f.to_string_lossy()), "{e}");
        assert_eq!(read_regular(&f, 0), Err(ReadFileError::TooLarge { path: f.clone(), limit: 0 }));
        let empty = d.join("empty");
        std::fs::write(&empty, b"").expect("write");
        assert_eq!(read_regular(&empty, 0).as_deref(), Ok(&b""[..]));
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn what_is_not_a_regular_file_is_named() {
        let d = own_dir("special");
        let fifo = d.join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).expect("mkfifo");
        let t = std::time::Instant::now();
        let e = read_regular(&fifo, 1 << 20).unwrap_err();
        assert!(t.elapsed() < std::time::Duration::from_secs(2), "a FIFO with no writer held the read for {:?}", t.elapsed());
        assert_eq!(e, ReadFileError::NotRegular { path: fifo.clone(), kind: FileKind::Fifo });
        assert!(e.to_string().ends_with("is a pipe (FIFO), not a regular file"), "{e}");
        for (path, kind) in [(Path::new("/dev/zero"), FileKind::CharacterDevice), (d.as_path(), FileKind::Directory)] {
            assert_eq!(read_regular(path, 1 << 20), Err(ReadFileError::NotRegular { path: path.to_path_buf(), kind }));
        }
        let missing = d.join("missing");
        assert_eq!(read_regular(&missing, 1), Err(ReadFileError::Open { path: missing.clone(), errno: Errno::NOENT }));
        // A link: followed, or refused with ELOOP.
        let target = d.join("target");
        std::fs::write(&target, b"x").expect("write");
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        assert_eq!(read_regular(&link, 1).as_deref(), Ok(&b"x"[..]));
        assert_eq!(read_regular_with(&link, 1, Links::Refuse), Err(ReadFileError::Open { path: link.clone(), errno: Errno::LOOP }));
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_file_that_says_it_is_empty_is_still_bounded() {
        // /proc/self/maps says its size is 0 and holds more.
        let maps = Path::new("/proc/self/maps");
        assert!(read_regular(maps, 1 << 20).is_ok_and(|b| !b.is_empty()));
        assert_eq!(read_regular(maps, 16), Err(ReadFileError::TooLarge { path: maps.to_path_buf(), limit: 16 }));
    }

    #[test]
    fn messages_stay_on_one_line() {
        let e = read_regular(Path::new("/nonexistent/a\nb"), 1).unwrap_err();
        assert!(!e.to_string().contains('\n') && e.to_string().contains("a?b"), "{e}");
        assert_eq!(e.path(), Path::new("/nonexistent/a\nb"));
    }

    #[test]
    fn a_write_goes_to_regular_files_only_and_never_blocks() {
        let d = own_dir("write");
        let f = d.join("out");
        write_regular(&f, b"longer first").expect("create");
        write_regular(&f, b"short").expect("replace");
        assert_eq!(std::fs::read(&f).expect("read"), b"short", "an existing file is emptied first");
        // A FIFO with no reader: refused at once, not a write that never returns.
        let fifo = d.join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).expect("mkfifo");
        let t = std::time::Instant::now();
        let e = write_regular(&fifo, b"x").unwrap_err();
        assert!(t.elapsed() < std::time::Duration::from_secs(2), "a FIFO with no reader held the write for {:?}", t.elapsed());
        assert_eq!(e, WriteFileError::NotRegular { path: fifo.clone(), kind: FileKind::Fifo });
        assert!(e.to_string().ends_with("is a pipe (FIFO), not a regular file"), "{e}");
        // ...and with a reader, refused all the same (what it wrote would go nowhere a user
        // reads back).
        let reader = rustix::fs::open(&fifo, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()).expect("open the FIFO's reading end");
        assert_eq!(write_regular(&fifo, b"x"), Err(WriteFileError::NotRegular { path: fifo.clone(), kind: FileKind::Fifo }));
        drop(reader);
        let null = Path::new("/dev/null");
        assert_eq!(write_regular(null, b"x"), Err(WriteFileError::NotRegular { path: null.to_path_buf(), kind: FileKind::CharacterDevice }));
        assert!(matches!(write_regular(&d, b"x"), Err(WriteFileError::Open { errno: Errno::ISDIR, .. })));
        let _ = std::fs::remove_dir_all(d);
    }
}
