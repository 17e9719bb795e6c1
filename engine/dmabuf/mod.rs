//! dma-buf images in and out of the device: import (and its cache), reading an import back,
//! export, the device copy from an import into an export, allocation for a collection, the
//! device as a negotiation participant, and the fences between producer and consumer.

pub mod allocate;
pub mod device_copy;
pub mod export;
pub mod import;
pub mod import_cache;
pub mod participant;
pub mod read_back;
pub mod sync;
