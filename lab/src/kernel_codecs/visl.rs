//! `dmabridge demo --producer visl`: a short MPEG-2 request sequence through the kernel's
//! `visl` (the stateless uAPI's test decoder) into buffers of a dmabridge buffer collection.
//!
//! visl checks the requests (the core validates each compound control) and draws a test
//! pattern with the request's controls and the references it found into each `CAPTURE`
//! buffer; it decodes nothing, so no decoder says what a frame must be. What runs is the
//! uAPI's whole sequence: per frame an `MPEG2_SEQUENCE`, `MPEG2_PICTURE` (naming its
//! forward and backward references by timestamp) and `MPEG2_QUANTISATION` control in the
//! request, the slice data on `OUTPUT`, and a collection buffer on `CAPTURE` that the
//! buffer rule keeps while a later frame references it. Each frame is read back through
//! the device and must be one visl wrote.

use std::time::{Duration, Instant};

use serde_json::json;

use super::stateless::{on_decoder, Accounted, RequestStream, Segment};
use super::{find_node, VicodecError, VicodecOutcome};

/// `V4L2_PIX_FMT_MPEG2_SLICE`.
pub const PIX_FMT_MPEG2_SLICE: u32 = u32::from_le_bytes(*b"MG2S");
const CID_STATELESS_MPEG2_SEQUENCE: u32 = 0x00a4_0900 + 220;
const CID_STATELESS_MPEG2_PICTURE: u32 = 0x00a4_0900 + 221;
const CID_STATELESS_MPEG2_QUANTISATION: u32 = 0x00a4_0900 + 222;
/// The sequence's size.
pub const SIZE: (u32, u32) = (640, 480);

/// An MPEG-2 picture's coding type (`V4L2_MPEG2_PIC_CODING_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    I = 1,
    P = 2,
    B = 3,
}

/// A sequence in decode order: `I P B P B P B B` (each B between the two anchors before
/// it), with made-up slice data (visl does not parse it).
pub struct Mpeg2Stream {
    width: u32,
    height: u32,
    pictures: Vec<Coding>,
    payloads: Vec<Vec<u8>>,
}

impl Mpeg2Stream {
    pub fn new(width: u32, height: u32, frames: usize) -> Mpeg2Stream {
        let pattern = [Coding::I, Coding::P, Coding::B, Coding::P, Coding::B, Coding::P, Coding::B, Coding::B];
        let pictures: Vec<Coding> = (0..frames).map(|i| if i % 8 == 0 { Coding::I } else { pattern[i % 8] }).collect();
        // A picture start code, then bytes that vary per frame.
        let payloads = (0..frames).map(|i| [0u8, 0, 1, 0].into_iter().chain((0..60u8).map(|b| b ^ i as u8)).collect()).collect();
        Mpeg2Stream { width, height, pictures, payloads }
    }

    /// The anchors (I and P pictures) before `i`, newest last.
    fn anchors_before(&self, i: usize) -> Vec<usize> {
        (0..i).filter(|&j| self.pictures[j] != Coding::B).collect()
    }
}

impl RequestStream for Mpeg2Stream {
    fn coded_format(&self) -> u32 {
        PIX_FMT_MPEG2_SLICE
    }

    fn frames(&self) -> usize {
        self.pictures.len()
    }

    fn payload(&self, i: usize) -> &[u8] {
        self.payloads.get(i).map_or(&[], Vec::as_slice)
    }

    /// P: the last anchor (forward). B: the two last anchors (forward, then backward).
    fn references(&self, i: usize) -> Vec<usize> {
        let anchors = self.anchors_before(i);
        let take = match self.pictures.get(i) {
            Some(Coding::P) => 1,
            Some(Coding::B) => 2,
            _ => 0,
        };
        anchors[anchors.len().saturating_sub(take)..].to_vec()
    }

    fn controls(&self, i: usize, ts: &dyn Fn(usize) -> Duration) -> Vec<(u32, Vec<u8>)> {
        let ns = |j: Option<&usize>| j.map_or(0u64, |&j| u64::try_from(ts(j).as_nanos()).unwrap_or(u64::MAX));
        let refs = self.references(i);
        let coding = self.pictures.get(i).copied().unwrap_or(Coding::I);
        // struct v4l2_ctrl_mpeg2_sequence: 4:2:0 (chroma_format 1), progressive.
        let mut seq = Vec::with_capacity(12);
        seq.extend_from_slice(&(self.width as u16).to_ne_bytes());
        seq.extend_from_slice(&(self.height as u16).to_ne_bytes());
        seq.extend_from_slice(&(112u32 * 16 * 1024).to_ne_bytes());
        seq.extend_from_slice(&0x48u16.to_ne_bytes()); // main profile, main level
        seq.extend_from_slice(&[1, 0x01]);
        // struct v4l2_ctrl_mpeg2_picture: backward_ref_ts, forward_ref_ts, flags
        // (progressive frame, frame-pred DCT), f_code (15: unused), coding type, a frame
        // picture (structure 3), intra DC precision 8 bits (0).
        let (forward, backward) = match coding {
            Coding::B => (refs.first(), refs.get(1)),
            _ => (refs.first(), None),
        };
        let f_code = match coding {
            Coding::I => [15, 15, 15, 15],
            Coding::P => [1, 1, 15, 15],
            Coding::B => [1, 1, 1, 1],
        };
        let mut pic = Vec::with_capacity(32);
        pic.extend_from_slice(&ns(backward).to_ne_bytes());
        pic.extend_from_slice(&ns(forward).to_ne_bytes());
        pic.extend_from_slice(&(0x0080u32 | 0x0002).to_ne_bytes());
        pic.extend_from_slice(&f_code);
        pic.extend_from_slice(&[coding as u8, 3, 0, 0, 0, 0, 0, 0]);
        // struct v4l2_ctrl_mpeg2_quantisation: four 64-entry matrices, flat 16.
        let quant = vec![16u8; 4 * 64];
        vec![(CID_STATELESS_MPEG2_SEQUENCE, seq), (CID_STATELESS_MPEG2_PICTURE, pic), (CID_STATELESS_MPEG2_QUANTISATION, quant)]
    }

    fn expected(&self, _: usize) -> Option<&[u8]> {
        None
    }
}

/// Runs the sequence (module docs): `frames` pictures at [`SIZE`].
pub fn run(frames: u32, validation: bool, timeout: Duration) -> Result<VicodecOutcome, VicodecError> {
    let node = find_node("visl")?;
    let (w, h) = SIZE;
    let stream = Mpeg2Stream::new(w, h, frames as usize);
    let started = Instant::now();
    let run = on_decoder(&node, validation, |engine, decoder| decoder.decode(engine, &Segment { width: w, height: h, first: 0, stream: &stream }, timeout))?;
    let elapsed = started.elapsed();
    let Accounted { value: report, media, validation, leaked } = run;
    let with_refs = (0..stream.frames()).filter(|&i| !stream.references(i).is_empty()).count() as u32;
    let ok = report.verified == frames && report.references_honoured == with_refs && validation.is_empty() && leaked == 0 && report.collection == "released";
    let pictures: String = stream.pictures.iter().map(|c| format!("{c:?}")).collect();
    let summary = json!({
        "device": format!("visl ({}, media {media})", node.display()),
        "codec": "MPEG-2",
        "pictures": pictures,
        "frames": frames,
        "segments": [report],
        "verified_frames": report.verified,
        "p_frames": with_refs,
        "references_honoured": report.references_honoured,
        "drained": report.frames == frames,
        "leaked_fds": leaked,
        "validation": validation,
        "ms_per_frame_stateless": elapsed.as_secs_f64() * 1e3 / f64::from(frames.max(1)),
        "ok": ok,
    });
    Ok(VicodecOutcome { summary, ok })
}
