//! What the decoder demo's three processes agree on: the stream (sizes, reference
//! structure, frame contents) and the control messages.
//!
//! The stream is a V4L2 stateless decoder's output as the seed describes it (seed 002):
//! NV12 frames, each referencing the frames 1, 2 and 4 before it in its resolution segment,
//! so a decoded picture buffer of [`DPB`] frames must stay intact while later frames decode.
//! Every frame's content is a function of its index and size, so any process can check a
//! buffer; its first 16 bytes are a header (frame index, width, height, and whether the
//! decoder found every reference frame intact when it decoded this one).

use serde::{Deserialize, Serialize};

use dmabridge::interop::dmabuf::{read_exact_at, DmaBuf};

use crate::demo::control::{ControlMessage, EXTENTS, MAX_FRAMES, MAX_TEXT};
use crate::error::DemoError;

/// The stream's two resolutions: before and after `--resolution-change-at`.
pub const SIZES: [(u32, u32); 2] = [(1280, 720), (1920, 1080)];
/// Reference frames a frame may use: the decoded picture buffer.
pub const DPB: u32 = 4;
/// Distances (in frames) of each frame's references.
pub const REFERENCES: [u32; 3] = [1, 2, 4];
/// Buffers the consumer (a display queue) holds at once.
pub const CONSUMER_DEPTH: u32 = 2;
/// Bytes of the frame header at the start of the luma plane.
pub const HEADER_LEN: usize = 16;

/// The period of the row pattern: a prime, so rows of any width differ.
const PERIOD: usize = 251;

/// The frame header: what the decoder wrote before the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub frame: u32,
    pub width: u32,
    pub height: u32,
    /// 1 when every reference frame was intact in its buffer at decode time.
    pub refs_ok: u32,
}

impl Header {
    pub fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        for (i, v) in [self.frame, self.width, self.height, self.refs_ok].into_iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    pub fn from_bytes(b: &[u8; HEADER_LEN]) -> Header {
        let w = |i: usize| u32::from_le_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]]);
        Header { frame: w(0), width: w(1), height: w(2), refs_ok: w(3) }
    }
}

/// The NV12 planes of a `width` x `height` frame: (visible bytes per row, rows).
pub fn planes(width: u32, height: u32) -> [(usize, usize); 2] {
    [(width as usize, height as usize), (width as usize, height.div_ceil(2) as usize)]
}

/// Fills `row` with row `y` of plane `plane` of frame `frame` (without the header). Rows are
/// windows onto one periodic sequence, so a frame is made and compared at memcpy speed.
pub fn pattern_row(frame: u32, plane: usize, y: usize, row: &mut [u8]) {
    thread_local! {
        static BASE: Vec<u8> = (0..PERIOD + 8192).map(|i| ((i % PERIOD) * 37 % PERIOD) as u8).collect();
    }
    let start = (y * 7 + frame as usize * 13 + plane * 29) % PERIOD;
    BASE.with(|b| {
        let mut at = 0;
        while at < row.len() {
            let n = (row.len() - at).min(8192);
            row[at..at + n].copy_from_slice(&b[start..start + n]);
            at += n;
        }
    });
}

/// The whole frame as tightly packed NV12 (luma rows, then chroma rows), header included:
/// what a read-back of a correctly decoded frame gives.
pub fn packed_frame(frame: u32, width: u32, height: u32) -> Vec<u8> {
    frame_bytes(frame, width, height, 1)
}

/// [`packed_frame`] as the decoder writes it, saying in its header whether the frame's
/// references were intact (`refs_ok` 1) when it was decoded.
pub fn frame_bytes(frame: u32, width: u32, height: u32, refs_ok: u32) -> Vec<u8> {
    let [(w0, h0), (w1, h1)] = planes(width, height);
    let mut out = vec![0u8; w0 * h0 + w1 * h1];
    let (luma, chroma) = out.split_at_mut(w0 * h0);
    for (y, row) in luma.chunks_exact_mut(w0).enumerate() {
        pattern_row(frame, 0, y, row);
    }
    for (y, row) in chroma.chunks_exact_mut(w1).enumerate() {
        pattern_row(frame, 1, y, row);
    }
    let header = Header { frame, width, height, refs_ok }.to_bytes();
    out[..HEADER_LEN].copy_from_slice(&header);
    out
}

/// The header of the frame a buffer holds now, read with `pread`.
pub fn header_of(buf: &DmaBuf) -> Result<Header, DemoError> {
    let p = buf.plane(0).ok_or_else(|| DemoError::Protocol("a buffer without planes".into()))?;
    let mut h = [0u8; HEADER_LEN];
    read_exact_at(p.fd, p.offset, &mut h).map_err(|e| DemoError::Protocol(format!("reading a frame header: {e}")))?;
    Ok(Header::from_bytes(&h))
}

/// Decoder to consumer or recorder.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ToPeer {
    /// A collection token follows on the socket: bind it for frames of this size.
    /// `late` tokens were attached to a collection that already has its buffers.
    Collection { index: u32, width: u32, height: u32, late: bool },
    /// Frame `frame` is in buffer `buffer` of collection `collection`.
    Frame { collection: u32, buffer: u32, frame: u32 },
    /// End of stream: release everything, close every token, report.
    End,
}

/// Consumer or recorder to decoder.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum FromPeer {
    Bound { collection: u32, buffers: u32 },
    /// The peer is done with the buffer (it re-checked that it still held `frame`).
    Release { collection: u32, buffer: u32, frame: u32 },
    /// The peer closed its token of this collection.
    Closed { collection: u32 },
    Final(PeerReport),
    Failed { error: String },
}

/// What a consumer or recorder saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeerReport {
    pub frames: u32,
    pub verified: u32,
    /// Frames that never arrived (gaps in the frame numbers).
    pub dropped: u32,
    /// Frames whose size or content was wrong, or whose buffer changed while held.
    pub mismatches: Vec<String>,
    /// Whether a write through the peer's fds failed, as read-only fds must (recorder).
    pub writes_refused: Option<bool>,
    pub leaked_fds: i64,
    pub import_path: String,
}

impl ControlMessage for ToPeer {
    fn check(&self) -> Result<(), String> {
        match self {
            ToPeer::Collection { index, width, height, .. } => {
                if *index > 64 || !EXTENTS.contains(width) || !EXTENTS.contains(height) {
                    return Err(format!("collection {index} of {width}x{height}"));
                }
                Ok(())
            }
            ToPeer::Frame { collection, buffer, frame } => {
                if *collection > 64 || *buffer >= dmabridge::interop::collection::MAX_BUFFERS || *frame >= MAX_FRAMES {
                    return Err(format!("frame {frame} in buffer {buffer} of collection {collection}"));
                }
                Ok(())
            }
            ToPeer::End => Ok(()),
        }
    }
}

impl ControlMessage for FromPeer {
    fn check(&self) -> Result<(), String> {
        match self {
            FromPeer::Bound { collection, buffers } => {
                if *collection > 64 || *buffers > dmabridge::interop::collection::MAX_BUFFERS {
                    return Err(format!("{buffers} buffers in collection {collection}"));
                }
                Ok(())
            }
            FromPeer::Release { collection, buffer, frame } => {
                if *collection > 64 || *buffer >= dmabridge::interop::collection::MAX_BUFFERS || *frame >= MAX_FRAMES {
                    return Err(format!("release of buffer {buffer} of collection {collection}"));
                }
                Ok(())
            }
            FromPeer::Closed { collection } => {
                if *collection > 64 {
                    return Err(format!("collection {collection}"));
                }
                Ok(())
            }
            FromPeer::Final(r) => {
                if r.mismatches.len() > 64 || r.mismatches.iter().any(|m| m.len() > MAX_TEXT) || r.import_path.len() > MAX_TEXT {
                    return Err("an oversized report".into());
                }
                Ok(())
            }
            FromPeer::Failed { error } => {
                if error.len() > MAX_TEXT {
                    return Err("an oversized error".into());
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_differ_and_carry_their_header() {
        let a = packed_frame(3, 64, 32);
        let b = packed_frame(4, 64, 32);
        assert_eq!(a.len(), 64 * 32 * 3 / 2);
        assert_ne!(a[HEADER_LEN..], b[HEADER_LEN..]);
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&a[..HEADER_LEN]);
        assert_eq!(Header::from_bytes(&h), Header { frame: 3, width: 64, height: 32, refs_ok: 1 });
        // Consecutive rows of a plane differ too.
        assert_ne!(a[HEADER_LEN..64], a[64 + HEADER_LEN..128]);
    }
}
