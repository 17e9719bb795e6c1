//! The statistics the demos and the benchmark report: medians, percentiles, spreads and
//! GB/s samples.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Median and 99th percentile of per-frame times, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub median: f64,
    pub p99: f64,
}

impl Percentiles {
    pub fn of(samples: &[f64]) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        Percentiles { median: at(0.5), p99: at(0.99) }
    }
}

/// Output GB/s of `run`, `bytes` bytes a call: `warmups` untimed calls (at least one), then
/// `reps` timed ones (at least one), a sample each. The first error ends it.
pub fn gbps_samples<E>(bytes: u64, (warmups, reps): (usize, usize), mut run: impl FnMut() -> Result<(), E>) -> Result<Vec<f64>, E> {
    for _ in 0..warmups.max(1) {
        run()?;
    }
    (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            run()?;
            Ok(bytes as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9)
        })
        .collect()
}

/// The mean of `v` in milliseconds (0 for an empty sample).
pub fn mean_ms(v: &[std::time::Duration]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().map(|d| d.as_secs_f64() * 1e3).sum::<f64>() / v.len() as f64
}

/// Median of a sample.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The noise of a sample: its interquartile range relative to its median (0 for fewer than
/// two samples). What `--compare` widens its band by.
pub fn spread(v: &mut [f64]) -> f64 {
    let m = median(v);
    if v.len() < 2 || m <= 0.0 {
        return 0.0;
    }
    let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
    (q(0.75) - q(0.25)) / m
}
