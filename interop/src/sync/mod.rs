//! How the parties to a dma-buf exchange know that the other side's GPU work on a buffer is
//! done: the vocabulary ([`SyncMethod`], [`SyncMethods`]) that negotiation chooses from, and
//! the kernel side of it ([`export_sync_file`], [`import_sync_file`], [`wait_sync_file`]).
//!
//! The three methods, in order of preference:
//! - [`SyncMethod::SyncFile`] (`"sync-file"`): explicit fences. The producer exports its GPU
//!   work as a sync_file (Vulkan `VK_KHR_external_semaphore_fd` with
//!   `SYNC_FD`, EGL `EGL_ANDROID_native_fence_sync`, a KMS `OUT_FENCE_PTR`) and sends it with
//!   the buffer ([`crate::dmabuf::send_buffer_with_fence`]); the consumer waits on it on its
//!   GPU, and returns a release fence the same way. Nobody blocks a CPU. A fence from outside
//!   is a [`SyncFile`] only once the kernel has confirmed it is one.
//! - [`SyncMethod::ImplicitBridge`] (`"implicit-bridge"`): the dma-buf's own implicit fences
//!   (its reservation object), which drivers that sync implicitly attach and wait for. A party
//!   that speaks sync_files bridges to one that does not with
//!   `DMA_BUF_IOCTL_EXPORT_SYNC_FILE` (implicit -> explicit) and
//!   `DMA_BUF_IOCTL_IMPORT_SYNC_FILE` (explicit -> implicit), Linux 6.0 and later.
//! - [`SyncMethod::CpuWait`] (`"cpu-wait"`): the producer waits on the CPU for its GPU work
//!   before it sends the buffer, and the consumer's release message is the release. Always
//!   possible between two dmabridge processes, so every [`SyncMethods`] contains it.
//!
//! A CPU that touches a mapped dma-buf takes part too: [`CpuAccessGuard`] brackets the access
//! with `DMA_BUF_IOCTL_SYNC` (cache maintenance, and the wait for the buffer's fences, with a
//! timeout).

pub mod cpu_access;
mod dma_buf_ioctl;
mod sync_file;
mod wait;

use std::fmt;
use std::str::FromStr;

pub use dma_buf_ioctl::{
    export_sync_file, implicit_bridge_supported, import_sync_file, SyncAccess, SyncError,
    DMA_BUF_IOCTL_EXPORT_SYNC_FILE, DMA_BUF_IOCTL_IMPORT_SYNC_FILE, DMA_BUF_SYNC_READ,
    DMA_BUF_SYNC_WRITE,
};
pub use cpu_access::{is_dma_buf, CpuAccessError, CpuAccessGuard, CPU_ACCESS_TIMEOUT, DMA_BUF_IOCTL_SYNC};
pub use sync_file::{wait_sync_file, FenceStatus, SyncFile, SyncFileError, SYNC_IOC_FILE_INFO};
pub use wait::{poll_for, poll_readable, WaitError};

/// One way to synchronise access to a shared buffer (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMethod {
    SyncFile,
    ImplicitBridge,
    CpuWait,
}

impl SyncMethod {
    /// Every method, most preferred first.
    pub const ALL: [SyncMethod; 3] =
        [SyncMethod::SyncFile, SyncMethod::ImplicitBridge, SyncMethod::CpuWait];

    /// The name the JSON report and the command line use.
    pub const fn name(self) -> &'static str {
        match self {
            SyncMethod::SyncFile => "sync-file",
            SyncMethod::ImplicitBridge => "implicit-bridge",
            SyncMethod::CpuWait => "cpu-wait",
        }
    }

    const fn bit(self) -> u8 {
        match self {
            SyncMethod::SyncFile => 1,
            SyncMethod::ImplicitBridge => 2,
            SyncMethod::CpuWait => 4,
        }
    }
}

impl fmt::Display for SyncMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a string names no sync method.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncMethodParseError {
    #[error("unknown sync method {0:?} (expected sync-file, implicit-bridge or cpu-wait)")]
    Unknown(String),
}

impl FromStr for SyncMethod {
    type Err = SyncMethodParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SyncMethod::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| SyncMethodParseError::Unknown(crate::text::quoted(s)))
    }
}

/// The sync methods one party supports. [`SyncMethod::CpuWait`] is always among them: the
/// type cannot express a party that supports none.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncMethods(u8);

impl SyncMethods {
    /// Only the CPU wait: what a party that has said nothing supports.
    pub const CPU_WAIT: SyncMethods = SyncMethods(4);
    /// Everything.
    pub const ALL: SyncMethods = SyncMethods(7);

    /// `self` plus `m`.
    pub const fn with(self, m: SyncMethod) -> SyncMethods {
        SyncMethods(self.0 | m.bit())
    }

    /// The CPU wait plus `methods`.
    pub fn of(methods: impl IntoIterator<Item = SyncMethod>) -> SyncMethods {
        methods.into_iter().fold(SyncMethods::CPU_WAIT, SyncMethods::with)
    }

    pub const fn contains(self, m: SyncMethod) -> bool {
        self.0 & m.bit() != 0
    }

    /// What both support (never empty: both have the CPU wait).
    pub const fn intersection(self, other: SyncMethods) -> SyncMethods {
        SyncMethods(self.0 & other.0)
    }

    /// The most preferred method in the set: sync-file, then implicit-bridge, then cpu-wait.
    pub fn best(self) -> SyncMethod {
        SyncMethod::ALL.into_iter().find(|m| self.contains(*m)).unwrap_or(SyncMethod::CpuWait)
    }

    /// The most preferred method every one of `sets` supports; cpu-wait for none.
    pub fn best_common<'a>(sets: impl IntoIterator<Item = &'a SyncMethods>) -> SyncMethod {
        sets.into_iter().fold(SyncMethods::ALL, |acc, s| acc.intersection(*s)).best()
    }

    /// The methods, most preferred first.
    pub fn iter(self) -> impl Iterator<Item = SyncMethod> {
        SyncMethod::ALL.into_iter().filter(move |m| self.contains(*m))
    }
}

impl Default for SyncMethods {
    fn default() -> Self {
        SyncMethods::CPU_WAIT
    }
}

impl fmt::Debug for SyncMethods {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(SyncMethod::name)).finish()
    }
}

impl serde::Serialize for SyncMethods {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_serialize_kebab_case() {
        for m in SyncMethod::ALL {
            assert_eq!(m.name().parse::<SyncMethod>(), Ok(m));
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{}\"", m.name()));
        }
        assert!("sync_file".parse::<SyncMethod>().is_err());
    }

    #[test]
    fn cpu_wait_is_always_there_and_preference_is_fixed() {
        let every_subset = (0u8..8).map(|bits| SyncMethods::of(SyncMethod::ALL.into_iter().filter(move |m| bits & m.bit() != 0)));
        for s in every_subset {
            assert!(s.contains(SyncMethod::CpuWait), "{s:?}");
            let best = s.best();
            assert!(s.contains(best));
            assert!(s.iter().all(|m| m >= best), "{s:?}: {best} is not the most preferred");
        }
        assert_eq!(SyncMethods::default(), SyncMethods::CPU_WAIT);
        assert_eq!(SyncMethods::ALL.best(), SyncMethod::SyncFile);
        assert_eq!(SyncMethods::CPU_WAIT.best(), SyncMethod::CpuWait);
        assert_eq!(serde_json::to_string(&SyncMethods::ALL).unwrap(), r#"["sync-file","implicit-bridge","cpu-wait"]"#);
    }

    #[test]
    fn best_common_picks_the_best_method_everyone_has() {
        let sf = SyncMethods::CPU_WAIT.with(SyncMethod::SyncFile);
        let imp = SyncMethods::CPU_WAIT.with(SyncMethod::ImplicitBridge);
        assert_eq!(SyncMethods::best_common([&SyncMethods::ALL, &sf]), SyncMethod::SyncFile);
        assert_eq!(SyncMethods::best_common([&SyncMethods::ALL, &imp]), SyncMethod::ImplicitBridge);
        assert_eq!(SyncMethods::best_common([&sf, &imp]), SyncMethod::CpuWait);
        assert_eq!(SyncMethods::best_common([]), SyncMethod::SyncFile);
    }
}
