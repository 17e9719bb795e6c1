//! The CPU paths' threads and streaming stores, shared by the detile (`fast`) and colour
//! conversion (`colour_fast`, `colour_simd`): how many threads, how work is split between
//! them, and when and how frames are written around the caches.

/// Threads the fast path uses by default: the machine's parallelism, at most 8 (more
/// threads than memory channels only contend).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8)
}

/// Runs `work` on each share, the last on the calling thread and the others on scoped
/// threads: one share costs no thread (a spawn is tens of microseconds, as long as a
/// whole 720p row conversion), and the caller works instead of waiting.
pub(super) fn run_shares<T: Send>(shares: Vec<T>, work: impl Fn(T) + Sync) {
    let work = &work;
    std::thread::scope(|scope| {
        let mut shares = shares.into_iter().peekable();
        while let Some(share) = shares.next() {
            if shares.peek().is_none() {
                work(share);
            } else {
                scope.spawn(move || work(share));
            }
        }
    });
}

/// Frames (or planes) of at least this many linear bytes are written around the caches,
/// with non-temporal stores, by the detile (`fast::Gather`) and by colour conversion
/// (`colour_simd::Kernel::streaming`). 4K (8 MB of luma, 33 MB of XR24) is, 720p (3.7 MB
/// of XR24) is not: a frame that fits in a few MiB of cache may well be read next from
/// there, while a larger one goes to a GPU, display or encoder. Ordinary stores read every
/// line they fill first; these do not, and leave the caches to the input. Measured on this
/// project's 2-core EPYC VM at 4K, one thread: NV12 -> XR24 went from 0.9-1.0x libyuv's
/// `NV12ToARGBMatrix` to 1.13-1.26x, and the fused samsung-64x32 conversion (two threads)
/// from 15-20 to 25-29 GB/s.
pub(super) const STREAM_BYTES: usize = 4 << 20;

/// `sfence` where `streamed`: orders a thread's non-temporal stores ([`STREAM_BYTES`]) before
/// what it does next (a thread that ends, a frame handed on), which ordinary stores need
/// no fence for.
pub(super) fn fence_streamed(streamed: bool) {
    #[cfg(target_arch = "x86_64")]
    if streamed {
        // SAFETY: `sfence` is SSE, part of every x86_64; it only orders stores.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = streamed;
}
