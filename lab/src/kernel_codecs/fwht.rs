//! vicodec's FWHT bitstream as the two decoders take it: the stateful decoder reads whole
//! compressed frames, each led by its header (`struct fwht_cframe_hdr`, big-endian, in
//! `drivers/media/test-drivers/vicodec/codec-fwht.h`); the stateless one reads the frame
//! without its header, whose fields travel in the request as
//! `struct v4l2_ctrl_fwht_params` (`include/uapi/linux/v4l2-controls.h`) instead, with the
//! reference frame named by its timestamp.


use std::time::Duration;

use super::stateless::RequestStream;

/// `V4L2_PIX_FMT_FWHT`: the stateful codecs' compressed format.
pub const PIX_FMT_FWHT: u32 = u32::from_le_bytes(*b"FWHT");
/// `V4L2_PIX_FMT_FWHT_STATELESS`.
pub const PIX_FMT_FWHT_STATELESS: u32 = u32::from_le_bytes(*b"SFWH");
/// `V4L2_CID_STATELESS_FWHT_PARAMS` (`V4L2_CID_CODEC_STATELESS_BASE + 100`).
pub const CID_STATELESS_FWHT_PARAMS: u32 = 0x00a4_0900 + 100;
/// `V4L2_CID_MPEG_VIDEO_GOP_SIZE` (`V4L2_CID_CODEC_BASE + 203`).
pub const CID_MPEG_VIDEO_GOP_SIZE: u32 = 0x0099_0900 + 203;
/// `V4L2_FWHT_FL_I_FRAME`.
const FL_I_FRAME: u32 = 1 << 10;
/// `sizeof(struct fwht_cframe_hdr)`: two magic words and nine big-endian fields.
pub const HEADER_LEN: usize = 44;
const MAGIC: [u8; 8] = [0x4f, 0x4f, 0x4f, 0x4f, 0xff, 0xff, 0xff, 0xff];

/// One compressed frame as the stateful encoder wrote it.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Header and payload: what the stateful decoder reads.
    pub bytes: Vec<u8>,
    pub header: Header,
}

/// The header's fields (`struct fwht_cframe_hdr` after the magic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub width: u32,
    pub height: u32,
    pub flags: u32,
    pub colorspace: u32,
    pub xfer_func: u32,
    pub ycbcr_enc: u32,
    pub quantization: u32,
    /// Bytes of payload after the header.
    pub size: u32,
}

impl Frame {
    /// The encoder's output (`bytesused` bytes of its buffer), checked: the magic, and a
    /// payload size that is what follows the header.
    pub fn parse(bytes: &[u8]) -> Result<Frame, String> {
        let head = bytes.get(..HEADER_LEN).ok_or_else(|| format!("{} bytes: shorter than the {HEADER_LEN}-byte header", bytes.len()))?;
        if head[..8] != MAGIC {
            return Err(format!("no FWHT magic: {:02x?}", &head[..8]));
        }
        let field = |i: usize| u32::from_be_bytes([head[8 + 4 * i], head[9 + 4 * i], head[10 + 4 * i], head[11 + 4 * i]]);
        let header = Header {
            version: field(0),
            width: field(1),
            height: field(2),
            flags: field(3),
            colorspace: field(4),
            xfer_func: field(5),
            ycbcr_enc: field(6),
            quantization: field(7),
            size: field(8),
        };
        let payload = bytes.len() - HEADER_LEN;
        if header.size as usize != payload {
            return Err(format!("the header says {} bytes of payload, {payload} follow it", header.size));
        }
        Ok(Frame { bytes: bytes.to_vec(), header })
    }

    /// The payload alone: what the stateless decoder's `OUTPUT` buffer holds.
    pub fn payload(&self) -> &[u8] {
        &self.bytes[HEADER_LEN..]
    }

    /// An I frame references nothing; a P frame the frame before it.
    pub fn is_intra(&self) -> bool {
        self.header.flags & FL_I_FRAME != 0
    }

    /// `struct v4l2_ctrl_fwht_params` for this frame (40 bytes, native-endian), naming
    /// `reference` (the timestamp its reference frame was queued with) as
    /// `backward_ref_ts`; an I frame names none.
    pub fn params(&self, reference: Option<Duration>) -> [u8; 40] {
        let h = &self.header;
        let ts = reference.filter(|_| !self.is_intra()).map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX));
        let mut out = [0u8; 40];
        out[..8].copy_from_slice(&ts.to_ne_bytes());
        let fields = [h.version, h.width, h.height, h.flags, h.colorspace, h.xfer_func, h.ycbcr_enc, h.quantization];
        for (i, v) in fields.iter().enumerate() {
            out[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_ne_bytes());
        }
        out
    }
}

/// An encoded FWHT segment as the stateless decoder takes it, with what the stateful
/// decoder made of each frame.
pub struct FwhtStream {
    pub frames: Vec<Frame>,
    /// Tightly packed NV12, frame by frame.
    pub expected: Vec<Vec<u8>>,
}

impl RequestStream for FwhtStream {
    fn coded_format(&self) -> u32 {
        PIX_FMT_FWHT_STATELESS
    }

    fn frames(&self) -> usize {
        self.frames.len()
    }

    fn payload(&self, i: usize) -> &[u8] {
        self.frames.get(i).map_or(&[], Frame::payload)
    }

    fn references(&self, i: usize) -> Vec<usize> {
        match self.frames.get(i) {
            Some(f) if i > 0 && !f.is_intra() => vec![i - 1],
            _ => Vec::new(),
        }
    }

    fn controls(&self, i: usize, ts: &dyn Fn(usize) -> Duration) -> Vec<(u32, Vec<u8>)> {
        let reference = self.references(i).first().map(|&r| ts(r));
        self.frames.get(i).map(|f| vec![(CID_STATELESS_FWHT_PARAMS, f.params(reference).to_vec())]).unwrap_or_default()
    }

    fn expected(&self, i: usize) -> Option<&[u8]> {
        self.expected.get(i).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(flags: u32, payload: &[u8]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for v in [3, 64, 48, flags, 8, 0, 0, 0, payload.len() as u32] {
            b.extend_from_slice(&u32::to_be_bytes(v));
        }
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn a_frame_splits_into_header_and_payload() {
        let f = Frame::parse(&encoded(FL_I_FRAME | 7, &[1, 2, 3])).unwrap();
        assert_eq!((f.header.width, f.header.height, f.header.size), (64, 48, 3));
        assert_eq!(f.payload(), &[1, 2, 3]);
        assert!(f.is_intra());
        let p = f.params(Some(Duration::from_millis(5)));
        assert_eq!(u64::from_ne_bytes(p[..8].try_into().unwrap()), 0, "an I frame references nothing");
        assert_eq!(u32::from_ne_bytes(p[8..12].try_into().unwrap()), 3);
        assert_eq!(u32::from_ne_bytes(p[20..24].try_into().unwrap()), FL_I_FRAME | 7);
        let p = Frame::parse(&encoded(0, &[9])).unwrap().params(Some(Duration::from_millis(5)));
        assert_eq!(u64::from_ne_bytes(p[..8].try_into().unwrap()), 5_000_000, "a P frame names its reference in ns");
    }

    #[test]
    fn broken_frames_are_refused() {
        assert!(Frame::parse(&[0x4f; 10]).is_err());
        let mut b = encoded(0, &[1, 2]);
        b[0] = 0;
        assert!(Frame::parse(&b).unwrap_err().contains("magic"));
        let mut b = encoded(0, &[1, 2]);
        b.push(0);
        assert!(Frame::parse(&b).unwrap_err().contains("payload"));
    }
}
