//! Fences from outside kept off the queue until they signal.
//!
//! Vulkan cannot take back a wait once it is submitted. A semaphore wait on a fence that
//! never signals holds the queue, and with it every later submission of the engine, for
//! good; and lavapipe's sync_file export blocks the submitting thread until the batch has
//! run. A fence from another process is that process's promise, so the engine never hands
//! one to the queue. A fence in [`SubmitOptions::wait_sync_files`] that is still pending at
//! submit time gets a *gate* instead: a timeline semaphore of the engine's own that the
//! submission waits for (value 1), and that the engine's fence thread signals from the host
//! when the fence signals, or when [`SubmitOptions::fence_limit`] has passed. In that case the
//! fence *expired*: the work runs without it, and the submission says so
//! ([`SubmitError::FenceExpired`] from [`Submission::wait`] and
//! [`Submission::check_fences`]). A fence already signalled at submit time costs nothing.
//!
//! A fence can signal with an error (its sender's work failed or was abandoned). At submit
//! time that refuses the work ([`SubmitError::FenceFailed`]); a gated fence that fails later
//! opens its gate (the batch is on the queue and cannot be taken back) and its verdict says
//! *failed*, which the submission reports as [`SubmitError::FenceFailed`]: the frame is lost.
//!
//! Compositors treat their clients' fences the same way (wlroots, Mutter and KWin wait for
//! a client buffer's fence in their event loop before they latch the buffer), for the same
//! reason. The cost is one wake-up of the fence thread per pending fence.
//!
//! [`SubmitOptions::wait_sync_files`]: super::submit::SubmitOptions::wait_sync_files
//! [`SubmitOptions::fence_limit`]: super::submit::SubmitOptions::fence_limit
//! [`SubmitError::FenceExpired`]: super::submit::SubmitError::FenceExpired
//! [`SubmitError::FenceFailed`]: super::submit::SubmitError::FenceFailed
//! [`Submission::wait`]: super::submit::Submission::wait
//! [`Submission::check_fences`]: super::submit::Submission::check_fences

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ash::vk;
use dmabridge_interop::sync::{FenceStatus, SyncFile};
use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};

/// What became of one gated fence, shared by the fence thread and the [`Submission`].
///
/// [`Submission`]: super::submit::Submission
#[derive(Debug)]
pub(crate) struct Verdict {
    state: AtomicU8,
    /// The fence's error (positive errno) when it signalled with one (state FAILED).
    errno: AtomicI32,
    /// The fence's place in the submission's `wait_sync_files`.
    pub(crate) index: usize,
    pub(crate) limit: Duration,
}

const PENDING: u8 = 0;
const SIGNALLED: u8 = 1;
const EXPIRED: u8 = 2;
const FAILED: u8 = 3;

impl Verdict {
    /// Whether the gate was opened because the fence's time ran out (or the engine went away)
    /// rather than because it signalled.
    pub(crate) fn expired(&self) -> bool {
        self.state.load(Ordering::Acquire) == EXPIRED
    }

    /// The fence's error (a positive errno) when it signalled with one.
    pub(crate) fn failed(&self) -> Option<i32> {
        (self.state.load(Ordering::Acquire) == FAILED).then(|| self.errno.load(Ordering::Acquire))
    }
}

/// A pending fence and the semaphore that stands in for it on the queue.
pub(crate) struct Gate {
    fence: SyncFile,
    semaphore: vk::Semaphore,
    deadline: Instant,
    verdict: Arc<Verdict>,
}

impl Gate {
    /// A gate for `fence`, the `index`th of a submission's fences, that opens at the latest
    /// `limit` from now; `semaphore` is a new timeline semaphore (value 0) of the device.
    pub(crate) fn new(fence: SyncFile, semaphore: vk::Semaphore, index: usize, limit: Duration) -> Gate {
        let now = Instant::now();
        Gate {
            fence,
            semaphore,
            // A limit too far to represent is no limit the thread could ever reach.
            deadline: now.checked_add(limit).unwrap_or(now + Duration::from_secs(u32::MAX.into())),
            verdict: Arc::new(Verdict { state: AtomicU8::new(PENDING), errno: AtomicI32::new(0), index, limit }),
        }
    }

    pub(crate) fn verdict(&self) -> Arc<Verdict> {
        self.verdict.clone()
    }

    pub(crate) fn semaphore(&self) -> vk::Semaphore {
        self.semaphore
    }
}

/// What the submitting threads hand the fence thread.
#[derive(Default)]
struct Inbox {
    gates: Vec<Gate>,
    stop: bool,
}

struct Shared {
    inbox: Mutex<Inbox>,
    /// An eventfd that wakes the thread for new gates and for the stop.
    wake: OwnedFd,
}

/// The engine's fence thread, started with the first pending fence.
#[derive(Default)]
pub(crate) struct FenceGates {
    running: Mutex<Option<(Arc<Shared>, JoinHandle<()>)>>,
}

impl FenceGates {
    /// Hands `gates` (whose semaphores a submitted batch waits for) to the fence thread,
    /// starting it if needed. Where no thread can be started, the gates open at once,
    /// expired: a queue that waits for nobody is better than one that waits for ever.
    pub(crate) fn watch(&self, device: &ash::Device, gates: Vec<Gate>) {
        if gates.is_empty() {
            return;
        }
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running.is_none() {
            match start(device) {
                Ok(r) => *running = Some(r),
                Err(e) => {
                    tracing::error!(error = %e, "no fence thread: the fences' gates open now, as if they had expired");
                    for g in gates {
                        open(device, g, EXPIRED);
                    }
                    return;
                }
            }
        }
        if let Some((shared, _)) = running.as_ref() {
            shared.inbox.lock().unwrap_or_else(PoisonError::into_inner).gates.extend(gates);
            wake(&shared.wake);
        }
    }

    /// Opens every gate still closed (as expired) and stops the thread: the engine is going
    /// away, and its last submissions must be able to complete.
    pub(crate) fn shutdown(&self) {
        let Some((shared, thread)) = self.running.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        shared.inbox.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        wake(&shared.wake);
        if thread.join().is_err() {
            tracing::error!("the fence thread panicked");
        }
    }
}

fn start(device: &ash::Device) -> std::io::Result<(Arc<Shared>, JoinHandle<()>)> {
    let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
    let shared = Arc::new(Shared { inbox: Mutex::new(Inbox::default()), wake });
    let device = device.clone();
    let theirs = shared.clone();
    let thread = std::thread::Builder::new().name("dmabridge-fences".into()).spawn(move || run(&device, &theirs))?;
    Ok((shared, thread))
}

fn wake(fd: &OwnedFd) {
    // An eventfd counter cannot overflow from these few writes; EAGAIN would only mean it is
    // already non-zero, which wakes the thread just the same.
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

fn run(device: &ash::Device, shared: &Shared) {
    let mut gates: Vec<Gate> = Vec::new();
    loop {
        let stop = {
            let mut inbox = shared.inbox.lock().unwrap_or_else(PoisonError::into_inner);
            gates.append(&mut inbox.gates);
            inbox.stop
        };
        let now = Instant::now();
        for g in std::mem::take(&mut gates) {
            match g.fence.status() {
                Ok(FenceStatus::Signalled) => open(device, g, SIGNALLED),
                Ok(FenceStatus::Failed { errno }) => {
                    tracing::warn!(fence = g.verdict.index, errno, "a sync_file fence signalled with an error: the work that waited for it runs, and reports its frame lost");
                    // Before `open` publishes the state (Release), so a reader that sees
                    // FAILED sees the errno.
                    g.verdict.errno.store(errno, Ordering::Relaxed);
                    open(device, g, FAILED);
                }
                Ok(FenceStatus::Pending) if !stop && now < g.deadline => gates.push(g),
                Ok(FenceStatus::Pending) => {
                    tracing::warn!(
                        fence = g.verdict.index,
                        limit = ?g.verdict.limit,
                        "a sync_file fence did not signal in time: the work that waited for it runs without it"
                    );
                    open(device, g, EXPIRED);
                }
                Err(e) => {
                    tracing::warn!(fence = g.verdict.index, error = %e, "a sync_file fence cannot be polled: the work that waited for it runs without it");
                    open(device, g, EXPIRED);
                }
            }
        }
        if stop {
            return;
        }
        let next = gates.iter().map(|g| g.deadline).min();
        let timeout = next.map(|d| {
            let left = d.saturating_duration_since(now);
            Timespec { tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX), tv_nsec: left.subsec_nanos().into() }
        });
        let mut fds: Vec<PollFd<'_>> = std::iter::once(PollFd::new(&shared.wake, PollFlags::IN))
            .chain(gates.iter().map(|g| PollFd::new(&g.fence, PollFlags::IN)))
            .collect();
        // EINTR and the like: the loop looks at every fence again.
        let _ = poll(&mut fds, timeout.as_ref());
        drop(fds);
        let mut counter = [0u8; 8];
        let _ = rustix::io::read(shared.wake.as_fd(), &mut counter);
    }
}

/// Signals the gate's semaphore, so that the work waiting for it can run.
fn open(device: &ash::Device, gate: Gate, verdict: u8) {
    gate.verdict.state.store(verdict, Ordering::Release);
    let info = vk::SemaphoreSignalInfo::default().semaphore(gate.semaphore).value(1);
    // SAFETY: a timeline semaphore of this device at value 0 with no signal operation
    // pending (gates are only ever signalled here, once), so 1 is greater than its value
    // and less than any pending signal (VUID-VkSemaphoreSignalInfo-value-03258, -03259);
    // the submission that destroys it retires it only after its own completion, which
    // needs this signal first.
    if let Err(result) = unsafe { device.signal_semaphore(&info) } {
        tracing::error!(%result, "vkSignalSemaphore of a fence gate failed: the work waiting for it may never run");
    }
}
