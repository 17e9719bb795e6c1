//! The parts of the `dmabridge` command that benchmarks and tests share with it: the
//! two-process demo and the path benchmark. Built only on `dmabridge`'s public API. (The
//! participant grammar is `dmabridge_interop::negotiate::spec`.)

pub mod demo;
