//! A live KMS device as a participant (filled in by the KMS work).
#![allow(missing_docs, dead_code)]
use std::path::Path;
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KmsDeviceError(String);
pub struct KmsDevice;
impl KmsDevice {
    pub fn open(path: &Path) -> Result<KmsDevice, KmsDeviceError> { Err(KmsDeviceError(format!("{}: stub", path.display()))) }
    pub fn participant(&self, name: &str, _plane: Option<u32>) -> Result<crate::negotiate::Participant, KmsDeviceError> { Err(KmsDeviceError(name.into())) }
}
