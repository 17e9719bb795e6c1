//! Whole-frame conversions, bytes in and bytes out, on the path the cost model
//! ([`crate::cost`]) picks: the CPU fast path, the GPU compute shaders (detile and colour
//! fused in one shader), or GPU copy commands for the layout steps with the colour shader
//! as a second pass. Every path writes the same bytes; the tests force each and compare.
//!
//! ```no_run
//! # fn f(engine: &dmabridge::Engine, tiled: &[u8]) -> Result<(), dmabridge::ConvertError> {
//! use dmabridge::interop::tiling::FrameConversion;
//! use dmabridge::interop::{Fourcc, TileLayout};
//! let conv = dmabridge::Converter::new(engine)?;
//! // A decoder's tiled NV12 to the XR24 a display scans out, in one pass.
//! let c = FrameConversion::new((TileLayout::Samsung64x32, Fourcc::NV12), (TileLayout::Linear, Fourcc::XRGB8888), 3840, 2160);
//! let (xr24, choice) = conv.convert_frame(&c, None, tiled)?;
//! println!("{}", choice.explain()); // e.g. "path cpu (the fastest, measured now; ...)"
//! # Ok(()) }
//! ```

use std::time::Instant;

use dmabridge_interop::tiling::{default_threads, FrameConversion, Step, TiledFrame};
use dmabridge_interop::TileLayout;

use crate::convert::converter::Converter;
use crate::convert::ConvertError;
use crate::cost::{fastest, key, Choice, ChoiceReason, ConvertPath, Measured, SizeClass};

impl Converter {
    /// The paths that can run `c`: the CPU and the compute shaders always; copy commands
    /// when a layout step has tiles copy commands can move (wide row-major tiles). The
    /// compute shaders may still refuse a frame at run time (one larger than the device
    /// binds, [`ConvertError::BindingTooLarge`]): [`Converter::convert_frame`] then falls
    /// back, and the cost model drops them for the combination.
    pub fn paths(&self, c: &FrameConversion) -> Result<Vec<ConvertPath>, ConvertError> {
        let steps = c.steps()?;
        let mut paths = vec![ConvertPath::Cpu, ConvertPath::Gpu];
        let copyable = |layout: TileLayout, fourcc| self.has_copy_blocks(layout, fourcc, (c.width, c.height));
        let layout_step = steps.iter().any(|s| match *s {
            Step::Detile(l) => copyable(l, c.from),
            Step::Tile(l) => copyable(l, c.to),
            Step::YuvToRgb { layout, from, .. } => layout != TileLayout::Linear && copyable(layout, from),
            Step::RgbToNv12 { .. } | Step::Copy => false,
        });
        if layout_step {
            paths.push(ConvertPath::CopyCommands);
        }
        Ok(paths)
    }

    /// The path for `c`: `path` if given, else the engine's forced path, else the fastest
    /// as measured (now, once per combination and size class, or earlier; see
    /// [`Converter::calibrate`] to measure ahead of time).
    pub fn choose(&self, c: &FrameConversion, path: Option<ConvertPath>) -> Result<Choice, ConvertError> {
        let model = &self.engine().cost();
        if let Some(path) = path.or_else(|| model.forced()) {
            let class = SizeClass::of(c.width, c.height);
            return Ok(Choice { path, reason: ChoiceReason::Forced, size_class: class, candidates: model.get(&key(c, class)).unwrap_or_default() });
        }
        self.measured_choice(c)
    }

    /// Measures each of `conversions` now unless its figures are known already (this
    /// process or the disk cache), whatever path the engine forces, so that a later
    /// [`Converter::choose`] picks without measuring. Returns the fastest path of each.
    pub fn calibrate(&self, conversions: &[FrameConversion]) -> Result<Vec<Choice>, ConvertError> {
        conversions.iter().map(|c| self.measured_choice(c)).collect()
    }

    /// What [`Converter::choose`] would answer without measuring: the engine's forced path,
    /// or the fastest as measured earlier; `None` when it would have to measure (a caller
    /// with a latency budget then calibrates elsewhere, on a worker).
    pub fn known(&self, c: &FrameConversion) -> Result<Option<Choice>, ConvertError> {
        if self.engine().cost().forced().is_some() {
            return self.choose(c, None).map(Some);
        }
        self.known_choice(c)
    }

    /// The fastest runnable path for `c` as measured earlier. A figure for a path that
    /// cannot run `c` here (a cache written for another extent of the class, or by another
    /// build), or that failed the combination at run time in this process, is set aside;
    /// with none left, `None`.
    fn known_choice(&self, c: &FrameConversion) -> Result<Option<Choice>, ConvertError> {
        let class = SizeClass::of(c.width, c.height);
        let k = key(c, class);
        let model = &self.engine().cost();
        let Some(known) = model.get(&k) else { return Ok(None) };
        let runnable = self.paths(c)?;
        let usable: Vec<Measured> = known.into_iter().filter(|m| runnable.contains(&m.path) && !model.has_failed(&k, m.path)).collect();
        match fastest(&usable) {
            Some(path) => Ok(Some(Choice { path, reason: ChoiceReason::Cached, size_class: class, candidates: usable })),
            None => {
                tracing::debug!(conversion = %c, "cost model: no cached figure for a path this conversion can run");
                Ok(None)
            }
        }
    }

    /// The fastest path for `c` as known, or as measured now when nothing is known.
    fn measured_choice(&self, c: &FrameConversion) -> Result<Choice, ConvertError> {
        if let Some(choice) = self.known_choice(c)? {
            return Ok(choice);
        }
        let class = SizeClass::of(c.width, c.height);
        let model = &self.engine().cost();
        let k = key(c, class);
        let runnable = self.paths(c)?;
        let (w, h) = class.representative();
        let sample = FrameConversion { width: w, height: h, ..*c };
        let (in_size, out_size) = sample.sizes()?;
        let input = vec![0u8; in_size as usize];
        let mut out = vec![0u8; out_size as usize];
        let mut measured = Vec::new();
        // Only what runs both `c` and the sample (copy commands depend on the extent).
        let sample_paths = self.paths(&sample)?;
        for p in runnable.into_iter().filter(|p| sample_paths.contains(p) && !model.has_failed(&k, *p)) {
            // One warm-up (pipelines, scratch, page faults), then the best of two.
            let timed = (|| {
                self.convert_frame_into(&sample, p, &input, &mut out)?;
                let mut best = f64::MAX;
                for _ in 0..2 {
                    let t = Instant::now();
                    self.convert_frame_into(&sample, p, &input, &mut out)?;
                    best = best.min(t.elapsed().as_secs_f64());
                }
                Ok::<f64, ConvertError>(best)
            })();
            match timed {
                Ok(best) => measured.push(Measured { path: p, gbps: out_size as f64 / best.max(1e-9) / 1e9 }),
                // A path the device cannot run on this sample is no candidate; the CPU runs
                // every sample, so an error there is the conversion's own.
                Err(e) if p != ConvertPath::Cpu && e.is_path_failure() => {
                    tracing::warn!(conversion = %c, path = %p, error = %e, "cost model: a path failed its measurement and is no candidate")
                }
                Err(e) => return Err(e),
            }
        }
        tracing::debug!(conversion = %c, ?measured, "cost model measured");
        model.put(k, measured.clone());
        let path = fastest(&measured).unwrap_or(ConvertPath::Gpu);
        Ok(Choice { path, reason: ChoiceReason::Measured, size_class: class, candidates: measured })
    }

    /// Converts a whole frame (buffers by the tiled-buffer conventions, linear ones tightly
    /// packed) on `path`, or where [`Converter::choose`] says. Blocks until it is done.
    ///
    /// Where the path the cost model chose (measured or cached, not forced) fails for want
    /// of what the device can do (a limit the measured frames stayed inside, memory, the
    /// driver: not bad input), the CPU converts the frame, the model drops that path for
    /// the combination in memory and in its cache file, and the returned [`Choice`] says so
    /// ([`ChoiceReason::FellBack`], with the path that ran): later frames go to the paths
    /// that work. The failure is logged (`tracing`, warning).
    pub fn convert_frame(&self, c: &FrameConversion, path: Option<ConvertPath>, input: &[u8]) -> Result<(Vec<u8>, Choice), ConvertError> {
        let choice = self.choose(c, path)?;
        let (_, out_size) = c.sizes()?;
        let mut out = vec![0u8; out_size as usize];
        match self.convert_frame_into(c, choice.path, input, &mut out) {
            Ok(()) => Ok((out, choice)),
            Err(error) => {
                let ((), ran) = self.fall_back(c, &choice, error, |path| self.convert_frame_into(c, path, input, &mut out))?;
                Ok((out, ran))
            }
        }
    }

    /// After `choice`'s path failed `c` with `error`: where the cost model made the choice
    /// (not a caller), the path is not the CPU and the error is the path's own
    /// ([`ConvertError::is_path_failure`]), runs the frame on the CPU with `run`; where that
    /// works, drops the failed path for `c`'s combination (keeping the CPU's time on this
    /// frame as its figure where it had none) and returns what `run` returned with the
    /// choice that ran. Otherwise, or when the CPU fails too (the input is at fault then, and
    /// the model is left alone), returns `error`.
    pub(crate) fn fall_back<T>(
        &self,
        c: &FrameConversion,
        choice: &Choice,
        error: ConvertError,
        run: impl FnOnce(ConvertPath) -> Result<T, ConvertError>,
    ) -> Result<(T, Choice), ConvertError> {
        if choice.reason == ChoiceReason::Forced || choice.path == ConvertPath::Cpu || !error.is_path_failure() {
            return Err(error);
        }
        let t = Instant::now();
        let ran = match run(ConvertPath::Cpu) {
            Ok(ran) => ran,
            Err(cpu) => {
                tracing::debug!(conversion = %c, path = %choice.path, %error, %cpu, "the CPU failed the frame too: the input is at fault, the cost model is left alone");
                return Err(error);
            }
        };
        let secs = t.elapsed().as_secs_f64();
        let (_, out_size) = c.sizes()?;
        let cpu = Measured { path: ConvertPath::Cpu, gbps: out_size as f64 / secs.max(1e-9) / 1e9 };
        let class = SizeClass::of(c.width, c.height);
        tracing::warn!(
            conversion = %c,
            path = %choice.path,
            %error,
            "cost model: the path it chose failed at run time; dropped for this combination, and the CPU converted the frame"
        );
        let candidates = self.engine().cost().drop_failed(&key(c, class), choice.path, cpu);
        Ok((ran, Choice { path: ConvertPath::Cpu, reason: ChoiceReason::FellBack { failed: choice.path }, size_class: class, candidates }))
    }

    /// Converts a whole frame on exactly `path`, into `out` (at least the output frame's
    /// size; bytes after it are left alone).
    pub fn convert_frame_into(&self, c: &FrameConversion, path: ConvertPath, input: &[u8], out: &mut [u8]) -> Result<(), ConvertError> {
        let steps = c.steps()?;
        let (in_size, out_size) = c.sizes()?;
        if (input.len() as u64) < in_size {
            return Err(ConvertError::InputSize { what: c.to_string(), expected: in_size, got: input.len() as u64 });
        }
        if (out.len() as u64) < out_size {
            return Err(ConvertError::InputSize { what: format!("output of {c}"), expected: out_size, got: out.len() as u64 });
        }
        if path == ConvertPath::Cpu {
            // The CPU path writes straight into `out` when it is one step.
            return Ok(c.run_cpu_into(input, &mut out[..out_size as usize], default_threads())?);
        }
        if !self.paths(c)?.contains(&path) {
            return Err(ConvertError::PathUnavailable { path, conversion: c.to_string() });
        }
        let copy = path == ConvertPath::CopyCommands;
        let extent = (c.width, c.height);
        let mut data: Vec<u8> = Vec::new();
        for step in steps {
            let src: &[u8] = if data.is_empty() { &input[..in_size as usize] } else { &data };
            data = match step {
                Step::Copy => src.to_vec(),
                Step::Detile(l) => self.layout_bytes(l, TileLayout::Linear, c.from, extent, src, copy)?,
                Step::Tile(l) => self.layout_bytes(TileLayout::Linear, l, c.to, extent, src, copy)?,
                // Copy commands detile first, then the colour shader reads linear rows: the
                // two-pass alternative to the fused shader.
                Step::YuvToRgb { layout, from, to } if copy && layout != TileLayout::Linear => {
                    let linear = self.layout_bytes(layout, TileLayout::Linear, from, extent, src, true)?;
                    self.yuv_to_rgb(TiledFrame { layout: TileLayout::Linear, fourcc: from, extent }, to, (c.matrix, c.range), &linear)?
                }
                Step::YuvToRgb { layout, from, to } => self.yuv_to_rgb(TiledFrame { layout, fourcc: from, extent }, to, (c.matrix, c.range), src)?,
                Step::RgbToNv12 { from } => self.rgb_to_nv12(from, (c.matrix, c.range), extent, src)?,
            };
        }
        out[..out_size as usize].copy_from_slice(&data[..out_size as usize]);
        Ok(())
    }
}
