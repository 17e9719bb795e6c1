//! The benchmark lab behind the `dmabridge` command (`dmabridge-cli`), which parses the
//! arguments and calls in here: the demos, the path benchmark and its report, and the
//! peers and baselines they are measured against. Built only on `dmabridge`'s public API.
//! (Not the kernel lab of `scripts/lab.sh`, the Linux under QEMU some tests run in.)
//!
//! - [`demo`]: the two-process demo (`dmabridge demo`), a producer and a consumer passing
//!   frames zero-copy and by GPU copy; the consumer is this crate's
//!   [`demo::consumer::run`] in a second process the command starts.
//! - [`decoder`]: the three-process decoder demo (`dmabridge demo --producer decoder`), its
//!   peers in processes of their own ([`decoder::peer::run`]).
//! - [`live`]: a live V4L2 camera and KMS display (`dmabridge demo --producer v4l2`).
//! - [`kernel_codecs`]: the kernel's stateless decoders (vicodec, visl) through the request
//!   API into collection buffers (`dmabridge demo --producer vicodec|visl`, kernel lab).
//! - [`writeback`]: `dmabridge display-check`: frames shown on a KMS device and read back
//!   through its writeback connector, compared byte for byte with their sources.
//! - [`bench`](mod@bench): `dmabridge bench`: the paths' cost per frame, the conversions beside
//!   GStreamer and the CPU libraries, the report and the comparison of two runs.
//!
//! Each module imports only modules that do not import it back: what several need lives in
//! a module of its own ([`error`], [`stats`], [`picture`], [`demo::config`]), and the
//! report reads the results' types ([`bench::results`]), never the runner.

pub mod bench;
pub mod decoder;
pub mod demo;
pub mod error;
pub mod live;
pub mod local_collection;
pub mod picture;
pub mod stats;
pub mod kernel_codecs;
pub mod writeback;
