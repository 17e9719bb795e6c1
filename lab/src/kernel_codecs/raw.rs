//! Raw frames as the kernel's codecs lay them out: NV12 in one buffer (chroma right after
//! the luma rows, at the driver's `bytesperline`), the moving frames the stream is made
//! of, and the timestamps that name frames across a codec's queues.

use std::time::Duration;

use super::VicodecError;

/// `V4L2_PIX_FMT_NV12`: the raw format of every queue here (single-planar: chroma follows
/// luma in the one buffer).
pub const PIX_FMT_NV12: u32 = u32::from_le_bytes(*b"NV12");

/// How long one frame may take through a codec (the lab's kernel runs under TCG).
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// A raw NV12 queue's layout as the driver chose it: the rows' pitch and how many rows each
/// plane has (single-planar: chroma starts right after the luma rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawLayout {
    pub width: u32,
    pub height: u32,
    pub bytesperline: u32,
    pub sizeimage: u32,
}

impl RawLayout {
    pub fn of_format(f: &dmabridge::interop::peers::v4l2::V4l2PlaneFormat) -> Result<RawLayout, VicodecError> {
        let p = f.planes.first().ok_or_else(|| VicodecError::Driver("a raw format with no plane".into()))?;
        let l = RawLayout { width: f.width, height: f.height, bytesperline: p.bytesperline, sizeimage: p.sizeimage };
        let needed = u64::from(l.bytesperline) * u64::from(l.height) * 3 / 2;
        if l.width == 0 || l.height == 0 || l.bytesperline < l.width || u64::from(l.sizeimage) < needed {
            return Err(VicodecError::Driver(format!("NV12 {}x{}: bytesperline {} and sizeimage {} cannot hold it", l.width, l.height, l.bytesperline, l.sizeimage)));
        }
        Ok(l)
    }

    /// The byte offset of row `y` of plane `plane` (0 luma, 1 chroma).
    pub fn row(&self, plane: usize, y: u32) -> usize {
        let base = if plane == 0 { 0 } else { self.bytesperline as usize * self.height as usize };
        base + y as usize * self.bytesperline as usize
    }

    /// The tightly packed frame (`width` bytes per row) out of a buffer in this layout.
    pub fn pack(&self, buf: &[u8], width: u32, height: u32) -> Result<Vec<u8>, VicodecError> {
        let mut out = Vec::with_capacity(width as usize * height as usize * 3 / 2);
        for (plane, rows) in [(0, height), (1, height / 2)] {
            for y in 0..rows {
                let at = self.row(plane, y);
                let row = buf.get(at..at + width as usize).ok_or_else(|| VicodecError::Driver(format!("a {}-byte buffer ends before row {y} of plane {plane}", buf.len())))?;
                out.extend_from_slice(row);
            }
        }
        Ok(out)
    }

    /// Writes the tightly packed `frame` into `buf` in this layout.
    pub fn unpack(&self, frame: &[u8], buf: &mut [u8]) -> Result<(), VicodecError> {
        let w = self.width as usize;
        let rows = frame.chunks_exact(w).take(self.height as usize * 3 / 2);
        for (i, src) in rows.enumerate() {
            let (plane, y) = if i < self.height as usize { (0, i as u32) } else { (1, (i - self.height as usize) as u32) };
            let (at, len) = (self.row(plane, y), buf.len());
            buf.get_mut(at..at + w).ok_or_else(|| VicodecError::Driver(format!("a {len}-byte buffer ends before row {y} of plane {plane}")))?.copy_from_slice(src);
        }
        Ok(())
    }
}

/// Frame `n` of a `width` x `height` NV12 stream, tightly packed (luma rows, then the
/// interleaved chroma rows): diagonal luma bands moving 3 pixels a frame, a square that
/// moves across them, and chroma that changes with `n`, so consecutive frames differ
/// everywhere a little and somewhere a lot.
pub fn synthetic_nv12(n: u32, width: u32, height: u32) -> Vec<u8> {
    let (w, h) = (width as usize, height as usize);
    let mut out = vec![0u8; w * h * 3 / 2];
    let (luma, chroma) = out.split_at_mut(w * h);
    let square = ((n as usize * 7) % w.max(1), (n as usize * 5) % h.max(1));
    for (y, row) in luma.chunks_exact_mut(w).enumerate() {
        for (x, p) in row.iter_mut().enumerate() {
            let inside = x.wrapping_sub(square.0) < w / 6 && y.wrapping_sub(square.1) < h / 6;
            *p = if inside { 235 } else { (16 + (x + y + 3 * n as usize) % 200) as u8 };
        }
    }
    for (y, row) in chroma.chunks_exact_mut(w).enumerate() {
        for (x, p) in row.iter_mut().enumerate() {
            *p = if x % 2 == 0 { (64 + (y + n as usize) % 128) as u8 } else { (96 + (x / 2 + 2 * n as usize) % 96) as u8 };
        }
    }
    out
}

/// The timestamp frame `n` is queued with (the decoders copy it to the decoded frame): 1 ms
/// apart, and never 0, which a driver may read as "no timestamp".
pub fn timestamp(n: u32) -> Duration {
    Duration::from_millis(u64::from(n) + 1)
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_frames_move() {
        let (a, b) = (synthetic_nv12(0, 64, 48), synthetic_nv12(1, 64, 48));
        assert_eq!(a.len(), 64 * 48 * 3 / 2);
        assert_ne!(a, b);
        assert_eq!(a, synthetic_nv12(0, 64, 48));
    }

    #[test]
    fn a_padded_layout_packs_and_unpacks() {
        let l = RawLayout { width: 4, height: 2, bytesperline: 8, sizeimage: 24 };
        let frame: Vec<u8> = (1..=12).collect();
        let mut buf = vec![0u8; 24];
        l.unpack(&frame, &mut buf).unwrap();
        assert_eq!(&buf[..12], &[1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 7, 8]);
        assert_eq!(&buf[16..20], &[9, 10, 11, 12]);
        assert_eq!(l.pack(&buf, 4, 2).unwrap(), frame);
        assert!(l.pack(&buf[..18], 4, 2).is_err(), "a buffer too short is an error");
    }
}
