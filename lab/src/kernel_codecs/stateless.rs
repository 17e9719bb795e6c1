//! A stateless decoder (vicodec's, visl) driven through the request API, decoding into
//! buffers of a dmabridge buffer collection (seed 002 against a real driver). What the
//! stream is (its format, controls, references and expected frames) is a
//! [`RequestStream`]: FWHT for vicodec ([`super::fwht::FwhtStream`]), MPEG-2 for visl
//! ([`super::visl::Mpeg2Stream`]).
//!
//! Per segment (one resolution):
//! - The decoder is a participant whose constraints come from the driver: the `CAPTURE`
//!   format's `bytesperline` (its stride alignment) and `sizeimage` (the least buffer),
//!   the queue's minimum buffer count, plus what decoding needs: [`DPB`] frames kept for
//!   reference and [`IN_FLIGHT`] requests queued at once. The Vulkan device joins read-only.
//!   The collection reconciles both and allocates on the device; the layout it placed must
//!   be the driver's, or the segment stops naming both.
//! - `CAPTURE` is `V4L2_MEMORY_DMABUF`: collection buffer `i` is always V4L2 buffer `i`, so
//!   the driver's view of a buffer (its mapping, and the timestamp it is referenced by) is
//!   the collection's.
//! - Each frame is a request: its FWHT parameters (naming the reference frame's timestamp)
//!   set in the request, its payload queued into it, the request queued, up to
//!   [`IN_FLIGHT`] at once, so a P frame is often queued while its reference is still
//!   being decoded.
//! - The buffer rule (the collection's decoder rule): a buffer is decoded into only when it
//!   is not queued and the frame it holds is no longer referenced, that is once the frame
//!   after it has been decoded. `break_references` breaks the rule on purpose (each P
//!   frame's reference buffer is handed to another writer, which fills it grey, before the
//!   frame is decoded), to show the comparison catches it. (Decoding a P frame into its
//!   own reference's buffer is not a break vicodec shows: FWHT reads each reference block
//!   before it writes that block, so the in-place decode comes out right.)
//! - Every decoded frame is imported into the Vulkan device ([`ImportCache`]), read back
//!   and compared byte for byte with the stateful decoder's frame.
//! - Drain: once the last request is queued, every request in flight completes and its
//!   frame is verified; a segment ends with nothing queued and every frame accounted for.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use dmabridge::ash::vk;
use dmabridge::interop::dmabuf::{write_planes, DmaBuf};
use dmabridge::interop::negotiate::{Constraints, Domain, ExtentRange, Participant};
use dmabridge::interop::peers::v4l2_device::{Direction, MappedBuffer, MediaDevice, MediaRequest, Memory, QueueParams, V4l2Device};
use dmabridge::interop::{Format, FormatSet, Fourcc};
use dmabridge::interop::dmabuf::fd_count;
use dmabridge::{DeviceAllocator, Engine, EngineOptions, ImageUse, ImportCache, ParticipantRequest};

use super::raw::{timestamp, RawLayout, FRAME_TIMEOUT, PIX_FMT_NV12};
use super::VicodecError;
use crate::local_collection::LocalCollection;

/// Frames kept for reference: MPEG-2's B frame references two (FWHT's P frame one).
pub const DPB: u32 = 2;
/// Requests queued at once.
pub const IN_FLIGHT: usize = 2;
const USAGE: vk::ImageUsageFlags = vk::ImageUsageFlags::from_raw(vk::ImageUsageFlags::SAMPLED.as_raw() | vk::ImageUsageFlags::TRANSFER_SRC.as_raw());

/// A stream a stateless decoder takes, frame by frame in decode order: what each request
/// carries, and what each frame must decode to where that is known.
pub trait RequestStream {
    /// The `OUTPUT` queue's pixel format (`SFWH`, `MG2S`).
    fn coded_format(&self) -> u32;
    /// How many frames the stream has.
    fn frames(&self) -> usize;
    /// Frame `i`'s bitstream: what its `OUTPUT` buffer holds.
    fn payload(&self, i: usize) -> &[u8];
    /// The frames (indices in this stream, each before `i`) frame `i` references.
    fn references(&self, i: usize) -> Vec<usize>;
    /// Frame `i`'s controls for its request, each `(id, payload)`, naming each reference by
    /// the timestamp `ts` gives its index.
    fn controls(&self, i: usize, ts: &dyn Fn(usize) -> Duration) -> Vec<(u32, Vec<u8>)>;
    /// What frame `i` must decode to (tightly packed NV12); `None` where no decoder says
    /// (visl draws a test pattern): the frame must then be one the driver wrote.
    fn expected(&self, i: usize) -> Option<&[u8]>;
}

/// One resolution's frames.
pub struct Segment<'a> {
    pub width: u32,
    pub height: u32,
    /// The stream's frame number of the segment's first frame.
    pub first: u32,
    pub stream: &'a dyn RequestStream,
}

impl Segment<'_> {
    fn ts(&self, i: usize) -> Duration {
        timestamp(self.first + i as u32)
    }

    /// Whether frame `f` is still referenced once the frames before `done` are decoded.
    fn referenced(&self, f: usize, done: usize) -> bool {
        (done..self.stream.frames()).any(|g| self.stream.references(g).contains(&f))
    }
}

/// What one segment did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SegmentReport {
    pub size: String,
    pub first_frame: u32,
    pub frames: u32,
    pub intra_frames: u32,
    /// P frames decoded while their reference stayed in its buffer, untouched.
    pub references_honoured: u32,
    /// Frames read back through the device equal to the stateful decoder's.
    pub verified: u32,
    /// Frames that differed: (frame, bytes that differ).
    pub mismatches: Vec<(u32, usize)>,
    /// Most requests that were queued at once.
    pub most_in_flight: usize,
    pub buffer_count: usize,
    pub bytes_per_buffer: u64,
    pub planes: Vec<(u64, u64)>,
    pub participants: Vec<String>,
    pub import_path: String,
    /// What the collection's server reported once every holder had closed.
    pub collection: String,
}

/// The stateless decoder: its node's two queues (one context) and its media device.
pub struct Stateless {
    output: V4l2Device,
    capture: V4l2Device,
    media: MediaDevice,
    pub break_references: bool,
}

/// What a buffer of the segment's collection is doing.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The frame it holds (decoded, or being decoded).
    frame: Option<u32>,
    queued: bool,
}

impl Stateless {
    pub fn open(path: &Path) -> Result<Stateless, VicodecError> {
        let output = V4l2Device::open(path, Some(Direction::Output))?;
        let capture = output.other_queue()?;
        let media = MediaDevice::find(&output)?;
        Ok(Stateless { output, capture, media, break_references: false })
    }

    pub fn media_path(&self) -> &Path {
        self.media.path()
    }

    /// The decoder's participant for `layout`, from what the driver said.
    fn participant(&self, layout: &RawLayout) -> Result<Participant, VicodecError> {
        let name = format!("{} stateless decoder", self.capture.driver());
        let device = self.capture.participant(&name)?;
        let nv12: FormatSet = [Format::linear(Fourcc::NV12)].into_iter().collect();
        let stride_align = 1u64 << layout.bytesperline.trailing_zeros().min(12);
        Ok(Participant::new(name, nv12).with_sync(device.sync).with_constraints(Constraints {
            width: ExtentRange::exactly(layout.width),
            height: ExtentRange::exactly(layout.height),
            min_buffers: device.constraints.min_buffers.max(DPB + IN_FLIGHT as u32),
            stride_align: device.constraints.stride_align.max(stride_align),
            min_size: u64::from(layout.sizeimage),
            // The driver writes each frame through the kernel's mapping and reads its
            // reference back the same way.
            domain: Domain::System,
            ..Constraints::default()
        }))
    }

    /// Decodes one segment into a new collection and verifies every frame.
    pub fn decode(&mut self, engine: &Engine, seg: &Segment<'_>, timeout: Duration) -> Result<SegmentReport, VicodecError> {
        let (w, h) = (seg.width, seg.height);
        // OUTPUT first: a decoder may reset its CAPTURE format to match (visl does).
        let coded = self.output.set_format(seg.stream.coded_format(), w, h)?;
        let layout = RawLayout::of_format(&self.capture.set_format(PIX_FMT_NV12, w, h)?)?;
        let room = coded.planes.first().map_or(0, |p| p.sizeimage as usize);
        let largest = (0..seg.stream.frames()).map(|i| seg.stream.payload(i).len()).max().unwrap_or(0);
        if room < largest {
            return Err(VicodecError::Driver(format!("OUTPUT buffers of {room} bytes, a frame of {largest}")));
        }

        // The collection: the decoder's constraints and the Vulkan device's, reconciled.
        let decoder = self.participant(&layout)?;
        let gpu = engine
            // Where the device cannot alias an NV12 dma-buf (lavapipe has no NV12 modifier),
            // it still takes LINEAR by copying it into an image of its own on import.
            .participant(&ParticipantRequest {
                copy_import: true,
                ..ParticipantRequest::new("vulkan", ImageUse::new(USAGE), dmabridge::Direction::Import).with_fourccs(&[Fourcc::NV12])
            })?
            .constrain(|c| c.min_buffers = 1);
        let collection = LocalCollection::negotiate(&format!("{}-{w}x{h}", self.capture.driver()), Box::new(DeviceAllocator::new(engine, ImageUse::new(USAGE))), &decoder, gpu, timeout)?;
        let got = &collection.buffers;
        let bufs = &got.buffers;
        check_layout(bufs, &layout)?;

        let mut report = SegmentReport {
            size: format!("{w}x{h}"),
            first_frame: seg.first,
            frames: seg.stream.frames() as u32,
            intra_frames: (0..seg.stream.frames()).filter(|&i| seg.stream.references(i).is_empty()).count() as u32,
            references_honoured: 0,
            verified: 0,
            mismatches: Vec::new(),
            most_in_flight: 0,
            buffer_count: bufs.len(),
            bytes_per_buffer: got.reconciled.outputs.as_ref().map_or(0, |o| o.size()),
            planes: bufs.first().map(|b| b.planes().map(|p| (p.offset, p.stride)).collect()).unwrap_or_default(),
            participants: got.reconciled.participants.clone(),
            import_path: String::new(),
            collection: String::new(),
        };

        let run = self.run_segment(engine, seg, bufs, &layout, &mut report);
        // Whatever happened: the queues stop and give every buffer back before the
        // collection's buffers go.
        let _ = self.output.stream_off();
        let _ = self.capture.stream_off();
        let _ = self.capture.request_buffers(0, Memory::DmaBuf);
        let _ = self.output.request_buffers(0, Memory::Mmap);
        run?;
        report.collection = collection.finish()?.to_string();
        Ok(report)
    }

    fn run_segment(&mut self, engine: &Engine, seg: &Segment<'_>, bufs: &[DmaBuf], layout: &RawLayout, report: &mut SegmentReport) -> Result<(), VicodecError> {
        let granted = self.capture.request_buffers(bufs.len() as u32, Memory::DmaBuf)?;
        if granted as usize != bufs.len() {
            return Err(VicodecError::Driver(format!("REQBUFS of {} DMABUF buffers granted {granted}", bufs.len())));
        }
        self.output.request_buffers(IN_FLIGHT as u32, Memory::Mmap)?;
        let mut coded: Vec<MappedBuffer> = (0..IN_FLIGHT as u32).map(|i| self.output.map_buffer(i)).collect::<Result<_, _>>()?;
        let requests: Vec<MediaRequest> = (0..IN_FLIGHT).map(|_| self.media.alloc_request()).collect::<Result<_, _>>()?;
        self.output.stream_on()?;
        self.capture.stream_on()?;

        let mut cache = ImportCache::new(engine, bufs.len());
        let mut slots = vec![Slot::default(); bufs.len()];
        let n_frames = seg.stream.frames();
        let (mut next, mut done) = (0usize, 0usize);
        while done < n_frames {
            while next < n_frames && next - done < IN_FLIGHT {
                let Some(slot) = self.pick(&slots, done, seg) else { break };
                let refs = seg.stream.references(next);
                if !refs.is_empty() && self.break_references {
                    // Breaking the rule: the references' buffers go to another writer (a
                    // grey frame) before the frame that references them is decoded. Only
                    // once they are decoded, so the driver is not writing them too.
                    if next != done {
                        break;
                    }
                    for r in &refs {
                        if let Some(i) = slots.iter().position(|s| s.frame == Some(*r as u32)) {
                            write_planes(&bufs[i], &vec![128u8; (layout.width * layout.height * 3 / 2) as usize])?;
                            slots[i].frame = None;
                        }
                    }
                } else if !refs.is_empty() && refs.iter().all(|r| slots.iter().any(|s| s.frame == Some(*r as u32))) {
                    // Every reference is still where the driver will look for it.
                    report.references_honoured += 1;
                }
                let request = &requests[next % IN_FLIGHT];
                let coded_buf = &mut coded[next % IN_FLIGHT];
                let payload = seg.stream.payload(next);
                coded_buf.plane_mut(0).and_then(|p| p.get_mut(..payload.len())).ok_or_else(|| VicodecError::Driver("an OUTPUT buffer shorter than a frame".into()))?.copy_from_slice(payload);
                for (id, bytes) in seg.stream.controls(next, &|i| seg.ts(i)) {
                    self.output.set_compound_control(id, &bytes, Some(request.as_fd()))?;
                }
                let fd = bufs[slot].plane(0).map(|p| p.fd).ok_or_else(|| VicodecError::Stream("a buffer with no plane".into()))?;
                self.capture.queue_dmabuf(slot as u32, &[fd], &[layout.sizeimage])?;
                let params = QueueParams { bytesused: Some(payload.len() as u32), timestamp: Some(seg.ts(next)), request: Some(request.as_fd()) };
                self.output.queue_mmap_with((next % IN_FLIGHT) as u32, &params)?;
                request.queue()?;
                slots[slot] = Slot { frame: Some(next as u32), queued: true };
                next += 1;
                report.most_in_flight = report.most_in_flight.max(next - done);
            }
            if next == done {
                return Err(VicodecError::Stream(format!("no buffer free for frame {} with {} buffers (the collection's count is too small)", seg.first as usize + next, bufs.len())));
            }
            // The oldest request completes first: the driver runs them in order.
            let request = &requests[done % IN_FLIGHT];
            request.wait(FRAME_TIMEOUT)?;
            self.output.dequeue(FRAME_TIMEOUT)?;
            let got = self.capture.dequeue(FRAME_TIMEOUT)?;
            request.reinit()?;
            let want_ts = seg.ts(done);
            if got.timestamp != want_ts {
                return Err(VicodecError::Stream(format!("frame {} came back with timestamp {:?}, queued with {want_ts:?}", seg.first as usize + done, got.timestamp)));
            }
            let slot = got.index as usize;
            match slots.get_mut(slot) {
                Some(s) if s.frame == Some(done as u32) => s.queued = false,
                _ => return Err(VicodecError::Stream(format!("frame {} came back in buffer {slot}, which does not hold it", seg.first as usize + done))),
            }
            if got.error {
                report.mismatches.push((seg.first + done as u32, usize::MAX));
            } else {
                self.verify(&mut cache, &bufs[slot], seg, done, report)?;
            }
            done += 1;
        }
        report.import_path = {
            let st = cache.stats();
            format!("{} (import cache: {} hits, {} misses)", report.import_path, st.hits, st.misses)
        };
        Ok(())
    }

    /// The buffer the next frame is decoded into: one not queued whose frame is no longer
    /// referenced (no frame still to decode references it), the empty ones first.
    fn pick(&self, slots: &[Slot], done: usize, seg: &Segment<'_>) -> Option<usize> {
        slots
            .iter()
            .position(|s| s.frame.is_none() && !s.queued)
            .or_else(|| slots.iter().position(|s| !s.queued && s.frame.is_some_and(|f| !seg.referenced(f as usize, done))))
    }

    fn verify(&self, cache: &mut ImportCache, buf: &DmaBuf, seg: &Segment<'_>, i: usize, report: &mut SegmentReport) -> Result<(), VicodecError> {
        let image = cache.import(buf.try_clone()?, ImageUse::new(USAGE))?;
        if report.import_path.is_empty() {
            report.import_path = image.path().to_string();
        }
        let pixels = image.read_back()?;
        let differ = match seg.stream.expected(i) {
            Some(expected) => pixels.iter().zip(expected).filter(|(a, b)| a != b).count() + pixels.len().abs_diff(expected.len()),
            // No decoder says what it must be: the driver must have written it (the
            // allocation is zeroed, and a grey overwrite is uniform).
            None => usize::from(pixels.iter().all(|&p| p == 0) || pixels.iter().all(|&p| p == 128)) * pixels.len(),
        };
        match differ {
            0 => report.verified += 1,
            n => report.mismatches.push((seg.first + i as u32, n)),
        }
        Ok(())
    }
}

/// What a run on a stateless decoder left behind, beside its own result.
pub struct Accounted<T> {
    pub value: T,
    /// The decoder's media device.
    pub media: String,
    /// What the validation layer said.
    pub validation: Vec<String>,
    /// fds open after the run that were not before it.
    pub leaked: usize,
}

/// Opens a Vulkan device (the validation layer on with `validation`) and the stateless
/// decoder at `node`, runs `body` with them and closes both: fds are counted around the
/// device's whole life (its driver's threads open files while it lives).
pub fn on_decoder<T>(
    node: &Path,
    validation: bool,
    body: impl FnOnce(&Engine, &mut Stateless) -> Result<T, VicodecError>,
) -> Result<Accounted<T>, VicodecError> {
    let before = fd_count()?;
    let engine = Engine::new(&EngineOptions { validation, ..EngineOptions::from_env() })?;
    let mut decoder = Stateless::open(node)?;
    let media = decoder.media_path().display().to_string();
    let value = body(&engine, &mut decoder)?;
    let validation = engine.validation().map(|v| v.problems()).unwrap_or_default().iter().map(|p| p.to_string()).collect();
    drop(decoder);
    drop(engine);
    let leaked = fd_count()?.saturating_sub(before);
    Ok(Accounted { value, media, validation, leaked })
}

/// The collection's layout must be the driver's: one file (a single-planar queue takes one
/// dma-buf), luma at 0 with the driver's `bytesperline`, chroma right after the luma rows,
/// and room for `sizeimage`.
fn check_layout(bufs: &[DmaBuf], layout: &RawLayout) -> Result<(), VicodecError> {
    for (i, b) in bufs.iter().enumerate() {
        let planes: Vec<_> = b.planes().collect();
        let want = [(0, u64::from(layout.bytesperline)), (u64::from(layout.bytesperline) * u64::from(layout.height), u64::from(layout.bytesperline))];
        let got: Vec<(u64, u64)> = planes.iter().map(|p| (p.offset, p.stride)).collect();
        let one_file = planes.windows(2).all(|w| w[0].file == w[1].file);
        if got != want || !one_file {
            return Err(VicodecError::Layout(format!(
                "buffer {i}: the collection placed planes (offset, stride) {got:?}{}, the driver's NV12 {}x{} is {want:?} in one buffer",
                if one_file { "" } else { " in separate files" },
                layout.width,
                layout.height
            )));
        }
    }
    Ok(())
}
