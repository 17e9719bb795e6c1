//! A live V4L2 device as a participant (filled in by the V4L2 work).
#![allow(missing_docs, dead_code)]
use std::path::Path;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction { Capture, Output }
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct V4l2DeviceError(String);
pub struct V4l2Device;
impl V4l2Device {
    pub fn open(path: &Path, _d: Option<Direction>) -> Result<V4l2Device, V4l2DeviceError> { Err(V4l2DeviceError(format!("{}: stub", path.display()))) }
    pub fn participant(&self, name: &str) -> Result<crate::negotiate::Participant, V4l2DeviceError> { Err(V4l2DeviceError(name.into())) }
}
