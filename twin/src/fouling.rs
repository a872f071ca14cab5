//! HX fouling detection: the apparent UA loss against the calibrated heat-exchanger model, with
//! a confidence interval, and an alarm only when the interval excludes the clean baseline for
//! long enough.
//!
//! The heat-exchanger model is a sum of resistances, linear in its unknowns:
//!
//! `LMTD / Q = r₀ + α·(ṁ_sec/ṁ_d)^−0.8 + β·(ṁ_fac/ṁ_d)^−0.8 + δ / Q`
//!
//! (wall and design fouling, the two film resistances scaling with their Reynolds number, and a
//! constant temperature-sensor offset δ that shows up as `δ/Q` in the apparent resistance, so that a
//! biased sensor does not read as fouling when the load moves). The relative UA loss of one sample
//! is `ℓ = 1 − R_model / R_apparent`: a fouling resistance `r_f` gives exactly `r_f / (R + r_f)`.
//!
//! Over one learning window the features are nearly collinear (the facility valve opens with the
//! load), so the terms cannot be fitted apart: a regression can give the facility film a negative
//! slope, which then reads a fouled exchanger's opening valve as a higher clean resistance. The
//! twin's reference therefore fixes the terms instead: the window's mean apparent resistance with
//! equal film shares scaled by the features, `r₀ = δ = 0` (see `estimate.rs`).
//!
//! One sample is noisy (0.1 K quantisation on a few kelvin of LMTD, loop storage during load
//! steps), so the detector works on hourly means. The noise of an hourly mean is estimated online
//! from the differences of successive hourly means (median absolute difference: robust to a level
//! shift, which is what fouling is). Over a sliding day of hourly means the interval is
//! `mean ± z·√(σ²·κ/n + σ_model²)`, with `κ` for the autocorrelation of hourly means and
//! `σ_model` for what the model cannot know (operating points outside its commissioning window).
//! The alarm is raised when the interval's lower end stays above the loss threshold for
//! `persist_h` consecutive hours, and re-armed when the day's mean falls below half of it.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Tuning of the fouling detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FoulingConfig {
    /// Relative UA loss the interval's lower end must exceed (0.10 = 10 %).
    pub threshold: f64,
    /// Hours of hourly means in the sliding window.
    pub window_h: usize,
    /// Valid hours the window needs before a verdict.
    pub min_hours: usize,
    /// Consecutive hours the interval must exclude the threshold.
    pub persist_h: u32,
    /// z of the one-sided interval (1.645: 95 %).
    pub z: f64,
    /// Variance inflation of the hourly means' average for their autocorrelation.
    pub autocorr_inflation: f64,
    /// Model uncertainty of the day's mean loss, as a fraction (0.02 = 2 %).
    pub model_sd: f64,
    /// Samples an hour needs to count.
    pub min_samples_per_hour: usize,
}

impl Default for FoulingConfig {
    fn default() -> Self {
        Self {
            threshold: 0.10,
            window_h: 24,
            min_hours: 16,
            persist_h: 6,
            z: 1.645,
            autocorr_inflation: 4.0,
            model_sd: 0.02,
            min_samples_per_hour: 3,
        }
    }
}

/// The detector's current view of one heat exchanger.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UaLoss {
    /// Mean relative UA loss over the window (0.2 = 20 % less UA than commissioned).
    pub mean: f64,
    /// Lower end of the interval.
    pub lo: f64,
    /// Upper end of the interval.
    pub hi: f64,
    /// Hourly means it came from.
    pub hours: usize,
}

/// State of one heat exchanger's detector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FoulingDetector {
    bin_sum: f64,
    bin_n: usize,
    bin_t: f64,
    hours: VecDeque<f64>,
    prev_hour: f64,
    abs_diffs: VecDeque<f64>,
    above_h: u32,
    flagged: bool,
    last: Option<UaLoss>,
}

/// Bound on the successive-difference history (two weeks of hours).
const DIFF_CAP: usize = 336;

impl FoulingDetector {
    /// The latest window verdict (None until the window has enough hours).
    pub fn loss(&self) -> Option<UaLoss> {
        self.last
    }
    /// Whether an alarm is in force.
    pub fn flagged(&self) -> bool {
        self.flagged
    }
    /// Noise of one hourly mean, from the median absolute successive difference (NaN until 12).
    pub fn hourly_sd(&self) -> f64 {
        if self.abs_diffs.len() < 12 {
            return f64::NAN;
        }
        let mut v: Vec<f64> = self.abs_diffs.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let med = v[v.len() / 2];
        // |d| of two independent N(0, σ²): median = 0.6745·√2·σ.
        med / (0.6745 * std::f64::consts::SQRT_2)
    }

    /// Feed one tick: `loss_sample` is this tick's relative UA loss (NaN when the sample was not
    /// usable), `dt_s` the time since the previous tick. Returns the window's verdict when an
    /// alarm is raised on this tick.
    pub fn update(&mut self, cfg: &FoulingConfig, loss_sample: f64, dt_s: f64) -> Option<UaLoss> {
        if loss_sample.is_finite() {
            self.bin_sum += loss_sample;
            self.bin_n += 1;
        }
        self.bin_t += dt_s.max(0.0);
        if self.bin_t < 3600.0 {
            return None;
        }
        let h = if self.bin_n >= cfg.min_samples_per_hour {
            self.bin_sum / self.bin_n as f64
        } else {
            f64::NAN
        };
        self.bin_sum = 0.0;
        self.bin_n = 0;
        self.bin_t -= 3600.0 * (self.bin_t / 3600.0).floor();
        if h.is_finite() && self.prev_hour.is_finite() {
            if self.abs_diffs.len() >= DIFF_CAP {
                self.abs_diffs.pop_front();
            }
            self.abs_diffs.push_back((h - self.prev_hour).abs());
        }
        self.prev_hour = h;
        if self.hours.len() >= cfg.window_h {
            self.hours.pop_front();
        }
        self.hours.push_back(h);
        let valid: Vec<f64> = self.hours.iter().copied().filter(|v| v.is_finite()).collect();
        let sd = self.hourly_sd();
        if valid.len() < cfg.min_hours || !sd.is_finite() {
            self.above_h = 0;
            return None;
        }
        let n = valid.len() as f64;
        let mean = valid.iter().sum::<f64>() / n;
        let half = cfg.z * (sd * sd * cfg.autocorr_inflation / n + cfg.model_sd * cfg.model_sd).sqrt();
        let v = UaLoss {
            mean,
            lo: mean - half,
            hi: mean + half,
            hours: valid.len(),
        };
        self.last = Some(v);
        if v.lo > cfg.threshold {
            self.above_h += 1;
        } else {
            self.above_h = 0;
        }
        if self.flagged {
            if mean < 0.5 * cfg.threshold {
                self.flagged = false;
            }
            return None;
        }
        if self.above_h >= cfg.persist_h {
            self.flagged = true;
            return Some(v);
        }
        None
    }
}

/// Features of the apparent-resistance model `[(ṁ_sec/ṁ_d)^−0.8, (ṁ_fac/ṁ_d)^−0.8, 1/Q]`
/// (`Q` in kW, flows in kg/s, `ṁ_d` the CDU's design secondary flow).
#[inline]
pub fn hx_features(m_sec_kg_s: f64, m_fac_kg_s: f64, q_kw: f64, m_design_kg_s: f64) -> [f64; 3] {
    [
        (m_sec_kg_s / m_design_kg_s).max(1e-3).powf(-0.8),
        (m_fac_kg_s / m_design_kg_s).max(1e-3).powf(-0.8),
        1.0 / q_kw,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic noise in [−1, 1].
    fn noise(k: u64) -> f64 {
        let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        x ^= x >> 29;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 32;
        (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    fn run(loss_after: impl Fn(f64) -> f64, hours: f64, slow_wander: f64) -> (Option<f64>, Option<UaLoss>) {
        let cfg = FoulingConfig::default();
        let mut d = FoulingDetector::default();
        let mut first = None;
        let steps = (hours * 60.0) as u64;
        for k in 0..steps {
            let t_h = k as f64 / 60.0;
            // 5 % sample noise and a slow ±wander (operating point) on top of the true loss.
            let l = loss_after(t_h) + 0.05 * noise(k) + slow_wander * (t_h / 7.0).sin();
            if d.update(&cfg, l, 60.0).is_some() && first.is_none() {
                first = Some(t_h);
            }
        }
        (first, d.loss())
    }

    #[test]
    fn a_clean_exchanger_with_noise_and_wander_raises_nothing() {
        let (first, v) = run(|_| 0.0, 24.0 * 60.0, 0.04);
        assert_eq!(first, None, "false alarm");
        let v = v.unwrap();
        assert!(
            v.lo < 0.0 && v.hi > 0.0,
            "interval must cover the clean baseline: {v:?}"
        );
    }

    #[test]
    fn a_20_percent_loss_is_flagged_within_two_days_and_estimated() {
        let (first, v) = run(|t| if t >= 48.0 { 0.2 } else { 0.0 }, 24.0 * 6.0, 0.02);
        let at = first.expect("20 % loss must be flagged");
        assert!(at > 48.0 && at < 96.0, "flagged at {at} h");
        let v = v.unwrap();
        assert!(v.lo < 0.2 && v.hi > 0.2, "interval must cover the true 20 %: {v:?}");
    }

    #[test]
    fn an_eleven_percent_wobble_is_not_fouling() {
        // A day at an apparent 11 %: inside the band the model cannot vouch for.
        let (first, _) = run(|t| if (48.0..72.0).contains(&t) { 0.11 } else { 0.0 }, 24.0 * 5.0, 0.0);
        assert_eq!(first, None);
    }

    #[test]
    fn features_scale_with_reynolds() {
        let f = hx_features(10.0, 5.0, 100.0, 10.0);
        assert!((f[0] - 1.0).abs() < 1e-12);
        assert!((f[1] - 2f64.powf(0.8)).abs() < 1e-12);
        assert!((f[2] - 0.01).abs() < 1e-12);
    }
}
