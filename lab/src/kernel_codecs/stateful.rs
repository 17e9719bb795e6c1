//! vicodec's stateful codecs, which make the stream and say what it decodes to: the
//! encoder (NV12 frames in, FWHT frames out, an I frame every `gop` frames and P frames
//! referencing the frame before), and the stateful decoder, whose output every stateless
//! decode is compared with. Both run one frame at a time on `MMAP` buffers.

use std::path::Path;

use dmabridge::interop::peers::v4l2_device::{Direction, Memory, QueueParams, V4l2Device};

use super::fwht::{Frame, CID_MPEG_VIDEO_GOP_SIZE, PIX_FMT_FWHT};
use super::raw::{timestamp, RawLayout, FRAME_TIMEOUT, PIX_FMT_NV12};
use super::VicodecError;

/// Opens the m2m node `path` on its `OUTPUT` queue, with its `CAPTURE` queue beside it.
fn open_pair(path: &Path) -> Result<(V4l2Device, V4l2Device), VicodecError> {
    let output = V4l2Device::open(path, Some(Direction::Output))?;
    let capture = output.other_queue()?;
    Ok((output, capture))
}

/// Encodes `frames` (tightly packed NV12, `width` x `height`) with the stateful encoder at
/// `path`, an I frame every `gop` frames.
pub fn encode(path: &Path, width: u32, height: u32, gop: u32, frames: &[Vec<u8>]) -> Result<Vec<Frame>, VicodecError> {
    let (output, capture) = open_pair(path)?;
    output.set_control(CID_MPEG_VIDEO_GOP_SIZE, gop as i32)?;
    let layout = RawLayout::of_format(&output.set_format(PIX_FMT_NV12, width, height)?)?;
    capture.set_format(PIX_FMT_FWHT, width, height)?;
    output.request_buffers(1, Memory::Mmap)?;
    capture.request_buffers(1, Memory::Mmap)?;
    let mut raw = output.map_buffer(0)?;
    let coded = capture.map_buffer(0)?;
    output.stream_on()?;
    capture.stream_on()?;
    let mut out = Vec::with_capacity(frames.len());
    for (n, frame) in frames.iter().enumerate() {
        let plane = raw.plane_mut(0).ok_or_else(|| VicodecError::Driver("the encoder's OUTPUT buffer is not writable".into()))?;
        layout.unpack(frame, plane)?;
        output.queue_mmap_with(0, &QueueParams { bytesused: Some(layout.sizeimage), timestamp: Some(timestamp(n as u32)), request: None })?;
        capture.queue_mmap(0)?;
        let done = capture.dequeue(FRAME_TIMEOUT)?;
        output.dequeue(FRAME_TIMEOUT)?;
        if done.error {
            return Err(VicodecError::Driver(format!("the encoder failed frame {n}")));
        }
        let used = done.bytesused.first().copied().unwrap_or(0) as usize;
        let bytes = coded.plane(0).and_then(|p| p.get(..used)).ok_or_else(|| VicodecError::Driver(format!("frame {n}: {used} bytes used of a shorter buffer")))?;
        out.push(Frame::parse(bytes).map_err(|e| VicodecError::Driver(format!("the encoder's frame {n}: {e}")))?);
    }
    Ok(out)
}

/// Decodes `frames` with the stateful decoder at `path`, as its documented start: the first
/// frame queued on `OUTPUT` alone (the driver reads its header and sets the `CAPTURE`
/// format), then `CAPTURE` set up as NV12 and started. Returns each frame tightly packed.
pub fn reference_decode(path: &Path, width: u32, height: u32, frames: &[Frame]) -> Result<Vec<Vec<u8>>, VicodecError> {
    let (output, capture) = open_pair(path)?;
    let largest = frames.iter().map(|f| f.bytes.len()).max().unwrap_or(0);
    let out_format = output.set_format(PIX_FMT_FWHT, width, height)?;
    let room = out_format.planes.first().map_or(0, |p| p.sizeimage as usize);
    if room < largest {
        return Err(VicodecError::Driver(format!("the stateful decoder's OUTPUT buffers hold {room} bytes, a frame has {largest}")));
    }
    output.request_buffers(1, Memory::Mmap)?;
    let mut coded = output.map_buffer(0)?;
    output.stream_on()?;
    let mut decoded = Vec::with_capacity(frames.len());
    let mut layout = None;
    let mut raw = None;
    for (n, frame) in frames.iter().enumerate() {
        let plane = coded.plane_mut(0).ok_or_else(|| VicodecError::Driver("the decoder's OUTPUT buffer is not writable".into()))?;
        let len = plane.len();
        plane
            .get_mut(..frame.bytes.len())
            .ok_or_else(|| VicodecError::Driver(format!("the decoder's {len}-byte OUTPUT buffer cannot hold frame {n} ({} bytes)", frame.bytes.len())))?
            .copy_from_slice(&frame.bytes);
        output.queue_mmap_with(0, &QueueParams { bytesused: Some(frame.bytes.len() as u32), timestamp: Some(timestamp(n as u32)), request: None })?;
        if layout.is_none() {
            let l = RawLayout::of_format(&capture.set_format(PIX_FMT_NV12, width, height)?)?;
            capture.request_buffers(1, Memory::Mmap)?;
            raw = Some(capture.map_buffer(0)?);
            capture.stream_on()?;
            layout = Some(l);
        }
        let (Some(l), Some(raw)) = (layout, raw.as_ref()) else {
            return Err(VicodecError::Driver("the stateful decoder's CAPTURE queue was not set up".into()));
        };
        capture.queue_mmap(0)?;
        let done = capture.dequeue(FRAME_TIMEOUT)?;
        output.dequeue(FRAME_TIMEOUT)?;
        if done.error || done.last {
            return Err(VicodecError::Driver(format!("the stateful decoder gave no frame {n} (error {}, last {})", done.error, done.last)));
        }
        decoded.push(l.pack(raw.plane(0).unwrap_or_default(), width, height)?);
    }
    Ok(decoded)
}
