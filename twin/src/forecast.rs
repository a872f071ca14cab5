//! Load forecasting: IT power of any aggregate (rack, CDU, site) over 15 min to a few hours,
//! p50 and p90, from lagged load, calendar, the weather forecast and what the scheduler already
//! knows (GPUs of admitted/running jobs expected to still run at the target time).
//!
//! One ridge regression (`linfa-elasticnet`) per horizon predicts the *change* from the current
//! load; p50 and p90 add the empirical residual quantiles of the training set. Persistence and
//! seasonal-naive (same time yesterday) are always computed beside it, and skill is
//! `1 − MAE / MAE(persistence)`.

use crate::regress::{quantile, LinearFit, Samples};
use serde::{Deserialize, Serialize};

/// What is known at forecast time besides the load history, for one target time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Exogenous {
    /// Weather forecast of the outdoor dry-bulb at the target time, °C.
    pub dry_bulb_c: f64,
    /// GPUs the scheduler expects busy at the target time (running jobs not yet ending, admitted jobs starting).
    pub committed_gpus: f64,
    /// GPUs busy now.
    pub busy_gpus_now: f64,
}

/// Number of features of [`features`].
pub const N_FEATURES: usize = 11;

/// Features at history index `k` (the present) for a target `h` steps ahead; `None` when the
/// history is too short. `hist` is sampled every `step_s`, `t_s` is the time of `hist[k]`.
pub fn features(hist: &[f64], k: usize, h: usize, step_s: f64, t_s: f64, ex: &Exogenous) -> Option<[f64; N_FEATURES]> {
    let lag = |s: f64| -> Option<f64> {
        let n = (s / step_s).round() as usize;
        k.checked_sub(n)
            .and_then(|i| hist.get(i))
            .copied()
            .filter(|v| v.is_finite())
    };
    let y0 = *hist.get(k).filter(|v| v.is_finite())?;
    // Mean over the last `s` seconds (the present included): a value off its recent mean tends
    // back to it (a checkpoint dip, a burst).
    let mean = |s: f64| -> Option<f64> {
        let n = ((s / step_s).round() as usize).max(1);
        let w = hist.get(k.checked_sub(n - 1)?..=k)?;
        let (sum, cnt) = w
            .iter()
            .filter(|v| v.is_finite())
            .fold((0.0, 0usize), |(a, c), v| (a + v, c + 1));
        (cnt > 0).then(|| sum / cnt as f64)
    };
    let y15 = lag(900.0)?;
    let y60 = lag(3600.0)?;
    let day = 86_400.0;
    let ys = lag(day - h as f64 * step_s)?;
    let tt = t_s + h as f64 * step_s;
    let ph = 2.0 * std::f64::consts::PI * (tt.rem_euclid(day) / day);
    let weekend = if ((tt / day).floor() as i64).rem_euclid(7) >= 5 {
        1.0
    } else {
        0.0
    };
    let sched = if ex.busy_gpus_now > 0.0 {
        ex.committed_gpus / ex.busy_gpus_now - 1.0
    } else {
        0.0
    };
    Some([
        y0 - y15,
        y0 - y60,
        y0 - mean(900.0)?,
        y0 - mean(3600.0)?,
        ys - y0,
        ph.sin() * y0,
        ph.cos() * y0,
        weekend * y0,
        ex.dry_bulb_c,
        sched * y0,
        ex.committed_gpus - ex.busy_gpus_now,
    ])
}

/// A forecast for one horizon.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// Horizon, s.
    pub horizon_s: f64,
    /// Median, in the unit of the series.
    pub p50: f64,
    /// 90th percentile (headroom), same unit.
    pub p90: f64,
    /// Persistence (current value).
    pub persistence: f64,
    /// Seasonal-naive (value 24 h before the target).
    pub seasonal_naive: f64,
}

/// The model of one horizon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HorizonModel {
    /// Horizon in steps.
    pub steps: usize,
    /// Ridge fit of `y(t+h) − y(t)`.
    pub fit: LinearFit,
    /// Residual median.
    pub q50: f64,
    /// Residual 90th percentile.
    pub q90: f64,
}

/// A forecaster for one series at a fixed sampling step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forecaster {
    /// Sampling step, s.
    pub step_s: f64,
    /// One model per horizon.
    pub models: Vec<HorizonModel>,
}

/// Training failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ForecastError(pub String);

impl std::fmt::Display for ForecastError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "forecaster: {}", self.0)
    }
}
impl std::error::Error for ForecastError {}

impl Forecaster {
    /// Train on a history sampled every `step_s` starting at `t0_s`, for the given horizons (s).
    /// `exo(k, h)` gives the exogenous knowledge at index `k` for a target `h` steps ahead.
    pub fn train(
        hist: &[f64],
        step_s: f64,
        t0_s: f64,
        horizons_s: &[f64],
        exo: &dyn Fn(usize, usize) -> Exogenous,
    ) -> Result<Self, ForecastError> {
        if step_s.is_nan() || step_s <= 0.0 {
            return Err(ForecastError(format!("step {step_s} s must be positive")));
        }
        let mut models = Vec::new();
        for &hs in horizons_s {
            let h = (hs / step_s).round().max(1.0) as usize;
            let mut s = Samples::new(N_FEATURES, 200_000);
            for k in 0..hist.len().saturating_sub(h) {
                let t = t0_s + k as f64 * step_s;
                if let (Some(x), Some(y)) = (features(hist, k, h, step_s, t, &exo(k, h)), hist.get(k + h)) {
                    s.push(&x, y - hist[k]);
                }
            }
            let fit = s.fit(1e-3).map_err(|e| ForecastError(format!("horizon {hs} s: {e}")))?;
            let res: Vec<f64> = (0..s.len())
                .map(|i| s.y[i] - fit.predict(&s.x[i * N_FEATURES..(i + 1) * N_FEATURES]))
                .collect();
            models.push(HorizonModel {
                steps: h,
                q50: quantile(&res, 0.5),
                q90: quantile(&res, 0.9),
                fit,
            });
        }
        Ok(Self { step_s, models })
    }

    /// Forecast every horizon at history index `k` (the present, at time `t_s`).
    pub fn forecast(
        &self,
        hist: &[f64],
        k: usize,
        t_s: f64,
        exo: &dyn Fn(usize, usize) -> Exogenous,
    ) -> Vec<Option<Forecast>> {
        self.models
            .iter()
            .map(|m| {
                let x = features(hist, k, m.steps, self.step_s, t_s, &exo(k, m.steps))?;
                let base = hist[k] + m.fit.predict(&x);
                let day = (86_400.0 / self.step_s).round() as usize;
                let sn = (k + m.steps)
                    .checked_sub(day)
                    .and_then(|i| hist.get(i))
                    .copied()
                    .unwrap_or(f64::NAN);
                Some(Forecast {
                    horizon_s: m.steps as f64 * self.step_s,
                    p50: base + m.q50,
                    p90: base + m.q90,
                    persistence: hist[k],
                    seasonal_naive: sn,
                })
            })
            .collect()
    }
}

/// A series of fixed-step means built from irregular samples (a controller's ticks), bounded
/// to the last `cap` steps, for [`Forecaster::train`] and [`Forecaster::forecast`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadHistory {
    /// Step of the means, s.
    pub step_s: f64,
    /// Start time of `vals[0]`'s step, s.
    pub t0_s: f64,
    /// One mean per completed step (NaN where no sample fell in it).
    pub vals: Vec<f64>,
    /// Steps kept at most.
    pub cap: usize,
    /// Empty steps of at most this many in a row take the last mean (a sampler slower than the
    /// step leaves them); longer gaps are NaN.
    pub hold_steps: usize,
    cur: Option<(i64, f64, u32)>,
}

impl LoadHistory {
    /// An empty history of `step_s` means keeping at most `cap` of them.
    pub fn new(step_s: f64, cap: usize) -> Self {
        Self {
            step_s: if step_s.is_finite() && step_s > 0.0 {
                step_s
            } else {
                300.0
            },
            t0_s: 0.0,
            vals: Vec::new(),
            cap: cap.max(2),
            hold_steps: 0,
            cur: None,
        }
    }

    /// The same, holding the last mean over gaps of at most `steps` empty steps.
    pub fn with_hold(mut self, steps: usize) -> Self {
        self.hold_steps = steps;
        self
    }

    /// Add a sample taken at `t_s`. Samples that are not finite or run backwards in time are
    /// ignored; a step is completed when the first sample of a later one arrives, and steps
    /// with no sample between them are NaN.
    pub fn push(&mut self, t_s: f64, v: f64) {
        if !(t_s.is_finite() && v.is_finite()) {
            return;
        }
        let b = (t_s / self.step_s).floor() as i64;
        match self.cur {
            None => {
                self.t0_s = b as f64 * self.step_s;
                self.cur = Some((b, v, 1));
            }
            Some((cb, sum, n)) if b == cb => self.cur = Some((cb, sum + v, n + 1)),
            Some((cb, sum, n)) if b > cb => {
                let mean = sum / n as f64;
                self.vals.push(mean);
                let gap = ((b - cb - 1).min(self.cap as i64)) as usize;
                let fill = if gap <= self.hold_steps { mean } else { f64::NAN };
                self.vals.extend(std::iter::repeat_n(fill, gap));
                self.cur = Some((b, v, 1));
                if self.vals.len() > self.cap {
                    let drop = self.vals.len() - self.cap;
                    self.vals.drain(..drop);
                }
                self.t0_s = (b - self.vals.len() as i64) as f64 * self.step_s;
            }
            Some(_) => {}
        }
    }

    /// Length of the completed history, s.
    pub fn span_s(&self) -> f64 {
        self.vals.len() as f64 * self.step_s
    }

    /// Time covered by steps that have a value, s.
    pub fn known_s(&self) -> f64 {
        self.vals.iter().filter(|v| v.is_finite()).count() as f64 * self.step_s
    }
}

/// Mean absolute errors of a forecaster over a test history, per horizon: (model p50,
/// persistence, seasonal-naive, fraction of actuals ≤ p90).
pub fn evaluate(
    f: &Forecaster,
    hist: &[f64],
    t0_s: f64,
    exo: &dyn Fn(usize, usize) -> Exogenous,
) -> Vec<ForecastScore> {
    let mut acc = vec![(0.0, 0.0, 0.0, 0.0, 0usize); f.models.len()];
    for k in 0..hist.len() {
        let fc = f.forecast(hist, k, t0_s + k as f64 * f.step_s, exo);
        for (i, (m, o)) in f.models.iter().zip(fc).enumerate() {
            let (Some(o), Some(&y)) = (o, hist.get(k + m.steps)) else {
                continue;
            };
            if !(y.is_finite() && o.seasonal_naive.is_finite()) {
                continue;
            }
            let a = &mut acc[i];
            a.0 += (o.p50 - y).abs();
            a.1 += (o.persistence - y).abs();
            a.2 += (o.seasonal_naive - y).abs();
            a.3 += (y <= o.p90) as u8 as f64;
            a.4 += 1;
        }
    }
    f.models
        .iter()
        .zip(acc)
        .map(|(m, a)| {
            let n = a.4.max(1) as f64;
            ForecastScore {
                horizon_s: m.steps as f64 * f.step_s,
                mae: a.0 / n,
                mae_persistence: a.1 / n,
                mae_seasonal_naive: a.2 / n,
                p90_coverage: a.3 / n,
                skill: 1.0 - (a.0 / n) / (a.1 / n),
                n: a.4,
            }
        })
        .collect()
}

/// Scores of one horizon.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ForecastScore {
    /// Horizon, s.
    pub horizon_s: f64,
    /// MAE of p50.
    pub mae: f64,
    /// MAE of persistence.
    pub mae_persistence: f64,
    /// MAE of seasonal-naive.
    pub mae_seasonal_naive: f64,
    /// Fraction of actuals at or below p90.
    pub p90_coverage: f64,
    /// 1 − MAE / MAE(persistence).
    pub skill: f64,
    /// Forecasts scored.
    pub n: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Means per step from irregular samples; an empty step is NaN; the cap drops the oldest
    /// and moves the start time with it; out-of-order and non-finite samples change nothing.
    #[test]
    fn load_history_keeps_step_means_within_its_cap() {
        let mut h = LoadHistory::new(300.0, 4);
        h.push(10.0, 1.0);
        h.push(250.0, 3.0);
        assert!(h.vals.is_empty(), "the first step is not complete yet");
        h.push(310.0, 10.0);
        assert_eq!(h.vals, vec![2.0]);
        assert_eq!(h.t0_s, 0.0);
        h.push(200.0, 99.0);
        h.push(320.0, f64::NAN);
        h.push(950.0, 7.0);
        assert_eq!(h.vals.len(), 3);
        assert_eq!(h.vals[1], 10.0);
        assert!(h.vals[2].is_nan(), "600–900 s had no sample");
        h.push(1210.0, 1.0);
        h.push(1510.0, 1.0);
        assert_eq!(h.vals.len(), 4, "capped");
        assert_eq!(h.vals[0], 10.0, "the oldest step went first");
        assert_eq!(h.t0_s, 300.0);
        assert_eq!(h.span_s(), 1200.0);
        assert_eq!(h.known_s(), 900.0);
        // The last completed step starts at t0 + (len − 1)·step.
        assert_eq!(h.t0_s + (h.vals.len() - 1) as f64 * h.step_s, 1200.0);
        // A sampler every 600 s with a hold of 2 steps leaves no NaN; a 20-minute silence does.
        let mut h = LoadHistory::new(300.0, 100).with_hold(2);
        for k in 0..6 {
            h.push(k as f64 * 600.0, k as f64);
        }
        assert_eq!(h.vals, vec![0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
        h.push(3600.0 + 1200.0 + 1.0, 9.0);
        assert!(
            h.vals[10] == 5.0 && h.vals[11..].iter().all(|v| v.is_nan()) && h.vals.len() == 16,
            "{:?}",
            h.vals
        );
    }

    #[test]
    fn beats_persistence_on_a_diurnal_series_and_p90_covers() {
        let step = 300.0;
        let n = 14 * 288;
        let y: Vec<f64> = (0..n)
            .map(|k| {
                let t = k as f64 * step;
                1000.0 + 200.0 * (2.0 * std::f64::consts::PI * t / 86_400.0).sin() + ((k * 7919) % 17) as f64
            })
            .collect();
        let ex = |_k: usize, _h: usize| Exogenous {
            dry_bulb_c: 20.0,
            committed_gpus: 100.0,
            busy_gpus_now: 100.0,
        };
        let f = Forecaster::train(&y[..7 * 288], step, 0.0, &[3600.0], &ex).unwrap();
        let s = evaluate(&f, &y[7 * 288..], 7.0 * 86_400.0, &ex);
        assert!(s[0].skill > 0.5, "{s:?}");
        assert!(s[0].p90_coverage > 0.8, "{s:?}");
    }
}
