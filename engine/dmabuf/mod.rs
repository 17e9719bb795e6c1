//! dma-buf images in and out of the device: import (and its cache), reading an import back,
//! export, allocation for a collection, the device as a negotiation participant, and the
//! fences between producer and consumer.

pub mod allocate;
pub mod export;
pub mod import;
pub mod import_cache;
pub mod participant;
pub mod read_back;
pub mod sync;
