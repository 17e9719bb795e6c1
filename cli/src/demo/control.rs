//! The demo's control channel: JSON messages, one per `SOCK_SEQPACKET` record, beside the
//! buffer socket that carries descriptors and fds in the interop wire format.

use std::os::fd::AsFd;

use rustix::io::Errno;
use rustix::net::{recv, send, RecvFlags, SendFlags};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{DemoError, Mode, Percentiles};

/// The largest control message (a mode report with 10 000 frame times fits).
pub const MAX_CONTROL_LEN: usize = 200 * 1024;

/// One format a participant accepts: fourcc and modifier (`None`: implicit).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WireFormat {
    pub fourcc: String,
    pub modifier: Option<String>,
}

/// A participant as it crosses the socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireParticipant {
    pub name: String,
    pub formats: Vec<WireFormat>,
    pub min_buffers: u32,
    pub read_only: bool,
    /// The device, for the report.
    pub device: String,
    /// Whether the device has `VK_EXT_image_drm_format_modifier`.
    pub modifiers_extension: bool,
}

/// Producer to consumer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ToConsumer {
    Start { mode: Mode, fourcc: String, width: u32, height: u32, frames: u32, pool: u32, sample_every: u32 },
    Frame { index: u32, id: u64, checksum: u32 },
    End,
    Bye { out_dir: String },
}

/// What the consumer measured in one mode.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConsumerReport {
    pub verified: u32,
    pub mismatches: Vec<Mismatch>,
    /// Per-frame time from receiving the descriptor to handing the buffer back, in µs.
    pub frame_us: Vec<f64>,
    pub import_path: String,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_evictions: u64,
    pub max_held: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Mismatch {
    pub frame: u32,
    pub expected: u32,
    pub got: u32,
}

/// Consumer to producer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ToProducer {
    Caps { participant: WireParticipant },
    ModeDone { report: ConsumerReport, timing: Percentiles },
    Final { leaked_fds: i64, fds_before: usize, fds_after: usize, contact_sheet: Option<String> },
    Failed { error: String },
}

pub fn send_msg<T: Serialize>(socket: impl AsFd, msg: &T) -> Result<(), DemoError> {
    let bytes = serde_json::to_vec(msg)?;
    if bytes.len() > MAX_CONTROL_LEN {
        return Err(DemoError::Protocol(format!("a {}-byte control message is too long", bytes.len())));
    }
    loop {
        match send(socket.as_fd(), &bytes, SendFlags::NOSIGNAL) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(n) => return Err(DemoError::Protocol(format!("short send: {n} of {} bytes", bytes.len()))),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(DemoError::Io(e.into())),
        }
    }
}

pub fn recv_msg<T: DeserializeOwned>(socket: impl AsFd) -> Result<T, DemoError> {
    let mut buf = vec![0u8; MAX_CONTROL_LEN + 1];
    let n = loop {
        match recv(socket.as_fd(), &mut buf, RecvFlags::empty()) {
            Ok((_, total)) => break total,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(DemoError::Io(e.into())),
        }
    };
    if n == 0 {
        return Err(DemoError::Protocol("the peer closed the control socket".into()));
    }
    if n > MAX_CONTROL_LEN {
        return Err(DemoError::Protocol("control message too long".into()));
    }
    Ok(serde_json::from_slice(&buf[..n])?)
}
