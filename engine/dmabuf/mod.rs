//! dma-buf images out of the device and between its parties: reading an import back,
//! export, the device copy from an import into an export, allocation for a collection, the
//! device as a negotiation participant, and the fences between producer and consumer.
//! (Everything that comes in is the import room's: [`crate::import`].)

pub mod allocate;
pub mod device_copy;
pub mod export;
pub mod participant;
pub mod read_back;
pub mod sync;
