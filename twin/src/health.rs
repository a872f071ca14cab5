//! Sensor plausibility: stuck, drifting, out of range, dropped out, disagreeing with the energy
//! balance of their loop.
//!
//! Every tracked sensor has a *redundant estimate* built from other, independent sensors (a CDU's
//! supply temperature against the mean inlet temperature of its racks; its return against their
//! outlets; its flow against its pump speed (affinity law); a facility supply against the CDUs'
//! facility-inlet temperatures; a GPU's die temperature against its rack inlet plus a per-GPU
//! thermal resistance learned online; a CDU loop's heat `ṁ·c_p·ΔT` against its racks' meters; a
//! two-phase immersion tank's pressure gauge against its pool thermometer read through the
//! fluid's saturation curve).
//! During a learning window the residual's mean and spread are learned; afterwards a slow
//! exponentially weighted mean of the residual that leaves its band is a drift, a value that is
//! bit-for-bit unchanged while its redundant estimate moves is stuck.

use serde::{Deserialize, Serialize};

/// Which sensor (or loop) an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "point", content = "index")]
pub enum SensorId {
    /// Supply temperature of CDU n.
    CduSupplyTemp(u32),
    /// Return temperature of CDU n.
    CduReturnTemp(u32),
    /// Secondary flow of CDU n.
    CduFlow(u32),
    /// The energy balance of CDU n's secondary loop (flow, supply, return against the rack meters).
    CduLoop(u32),
    /// Facility supply temperature of hall n.
    FacilitySupplyTemp(u32),
    /// Die temperature of GPU n.
    GpuTemp(u32),
    /// Pressure gauge of the two-phase immersion tank served by CDU n.
    TankPressure(u32),
}

/// What is wrong with a sensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SensorIssue {
    /// No fresh value (quality bad or older than the staleness limit).
    Dropout,
    /// Not finite, a sentinel, flagged uncertain by the device, or outside the physical range.
    OutOfRange,
    /// Bit-for-bit unchanged while its redundant estimate moved.
    Stuck,
    /// Its residual against the redundant estimate left the learned band.
    Drifting,
    /// The loop's energy balance no longer closes as learned.
    EnergyBalance,
}

/// Tuning of the plausibility checks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HealthConfig {
    /// A reading older than this is a dropout, s.
    pub stale_s: f64,
    /// Unchanged for this long (while the redundant estimate moved) is stuck, s.
    pub stuck_s: f64,
    /// ... and the redundant estimate must have moved at least this much (in sensor units).
    pub stuck_min_move: f64,
    /// Time constant of the residual's slow mean, s.
    pub ewma_tau_s: f64,
    /// Band: this many standard deviations of the learned residual ...
    pub band_sigmas: f64,
    /// ... and never tighter than this (sensor units).
    pub band_min: f64,
    /// Plausible range (sensor units).
    pub range: (f64, f64),
    /// An issue clears after this long without it, s.
    pub clear_s: f64,
}

/// State of one tracked scalar sensor.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Track {
    last: f64,
    same_since_s: f64,
    red_min: f64,
    red_max: f64,
    n: f64,
    mean: f64,
    m2: f64,
    ewma: f64,
    ewma_t: f64,
    ewma_init: bool,
    /// Issue in force, if any.
    pub issue: Option<SensorIssue>,
    ok_since_s: f64,
}

/// What one update of a track decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed.
    None,
    /// An issue began.
    Raised(SensorIssue),
    /// The issue in force cleared.
    Cleared,
}

impl Track {
    /// Learned residual mean.
    pub fn residual_mean(&self) -> f64 {
        self.mean
    }
    /// Learned residual standard deviation.
    pub fn residual_sd(&self) -> f64 {
        if self.n > 1.0 {
            (self.m2 / (self.n - 1.0)).sqrt()
        } else {
            f64::NAN
        }
    }
    /// Whether a baseline has been learned.
    pub fn has_baseline(&self) -> bool {
        self.n >= 30.0
    }

    /// Update with one reading. `fresh`: quality good-or-uncertain and young enough;
    /// `device_flagged`: the device itself marked it uncertain; `redundant`: the estimate from
    /// other sensors (NaN when none); `learning`: still learning the residual's baseline;
    /// `issue_kind`: what a residual excursion is called for this sensor.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        cfg: &HealthConfig,
        now_s: f64,
        dt_s: f64,
        value: f64,
        fresh: bool,
        device_flagged: bool,
        redundant: f64,
        learning: bool,
        issue_kind: SensorIssue,
    ) -> Transition {
        let mut issue = None;
        if !fresh {
            issue = Some(SensorIssue::Dropout);
        } else if device_flagged || !value.is_finite() || value < cfg.range.0 || value > cfg.range.1 {
            issue = Some(SensorIssue::OutOfRange);
        } else {
            // Stuck: bit-identical value while the redundant estimate moved.
            if value.to_bits() == self.last.to_bits() {
                if redundant.is_finite() {
                    self.red_min = self.red_min.min(redundant);
                    self.red_max = self.red_max.max(redundant);
                }
                if now_s - self.same_since_s >= cfg.stuck_s && self.red_max - self.red_min >= cfg.stuck_min_move {
                    issue = Some(SensorIssue::Stuck);
                }
            } else {
                self.last = value;
                self.same_since_s = now_s;
                self.red_min = redundant;
                self.red_max = redundant;
                if !redundant.is_finite() {
                    self.red_min = f64::INFINITY;
                    self.red_max = f64::NEG_INFINITY;
                }
            }
            let r = value - redundant;
            if r.is_finite() {
                if learning {
                    self.n += 1.0;
                    let d = r - self.mean;
                    self.mean += d / self.n;
                    self.m2 += d * (r - self.mean);
                }
                if self.ewma_init {
                    let a = 1.0 - (-(dt_s.max(0.0)) / cfg.ewma_tau_s).exp();
                    self.ewma += a * (r - self.ewma);
                    self.ewma_t += dt_s;
                } else {
                    self.ewma = r;
                    self.ewma_t = 0.0;
                    self.ewma_init = true;
                }
                if !learning && self.has_baseline() && issue.is_none() && self.ewma_t >= cfg.ewma_tau_s {
                    let sd = self.residual_sd();
                    let band = (cfg.band_sigmas * sd).max(cfg.band_min);
                    if (self.ewma - self.mean).abs() > band {
                        issue = Some(issue_kind);
                    }
                }
            }
        }
        match (self.issue, issue) {
            (None, Some(i)) => {
                self.issue = Some(i);
                Transition::Raised(i)
            }
            (Some(_), Some(i)) => {
                // Still faulty; keep the first name unless it got more specific.
                if self.issue == Some(SensorIssue::Drifting) && i == SensorIssue::Stuck {
                    self.issue = Some(i);
                }
                self.ok_since_s = now_s;
                Transition::None
            }
            (Some(_), None) => {
                if now_s - self.ok_since_s >= cfg.clear_s {
                    self.issue = None;
                    Transition::Cleared
                } else {
                    Transition::None
                }
            }
            (None, None) => {
                self.ok_since_s = now_s;
                Transition::None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> HealthConfig {
        HealthConfig {
            stale_s: 300.0,
            stuck_s: 900.0,
            stuck_min_move: 0.5,
            ewma_tau_s: 600.0,
            band_sigmas: 5.0,
            band_min: 0.5,
            range: (0.0, 100.0),
            clear_s: 600.0,
        }
    }

    #[test]
    fn flags_a_drift_after_learning_and_clears_when_it_ends() {
        let c = cfg();
        let mut t = Track::default();
        let mut raised = None;
        for k in 0..2000 {
            let now = k as f64 * 60.0;
            let truth = 40.0 + (k as f64 * 0.01).sin();
            let noise = ((k * 7919) % 13) as f64 * 0.01;
            let drift = if k > 1000 { (k - 1000) as f64 * 0.01 } else { 0.0 };
            let tr = t.update(
                &c,
                now,
                60.0,
                truth + noise + drift,
                true,
                false,
                truth,
                k < 600,
                SensorIssue::Drifting,
            );
            if let Transition::Raised(i) = tr {
                assert!(k > 1000, "false alarm at {k}");
                raised.get_or_insert((k, i));
            }
        }
        let (k, i) = raised.expect("a 0.6 K/h drift must be flagged");
        assert_eq!(i, SensorIssue::Drifting);
        assert!(k < 1200, "flagged too late: {k}");
    }

    #[test]
    fn flags_stuck_only_when_the_redundant_estimate_moves() {
        let c = cfg();
        let mut t = Track::default();
        for k in 0..100 {
            let tr = t.update(
                &c,
                k as f64 * 60.0,
                60.0,
                40.0,
                true,
                false,
                40.0,
                false,
                SensorIssue::Drifting,
            );
            assert_eq!(tr, Transition::None, "a steady plant is not a stuck sensor");
        }
        let mut hit = false;
        for k in 100..200 {
            let tr = t.update(
                &c,
                k as f64 * 60.0,
                60.0,
                40.0,
                true,
                false,
                40.0 + (k - 100) as f64 * 0.05,
                false,
                SensorIssue::Drifting,
            );
            hit |= tr == Transition::Raised(SensorIssue::Stuck);
        }
        assert!(hit);
    }

    #[test]
    fn dropout_and_range() {
        let c = cfg();
        let mut t = Track::default();
        assert_eq!(
            t.update(
                &c,
                0.0,
                60.0,
                40.0,
                false,
                false,
                f64::NAN,
                false,
                SensorIssue::Drifting
            ),
            Transition::Raised(SensorIssue::Dropout)
        );
        let mut t = Track::default();
        assert_eq!(
            t.update(
                &c,
                0.0,
                60.0,
                f64::NAN,
                true,
                false,
                f64::NAN,
                false,
                SensorIssue::Drifting
            ),
            Transition::Raised(SensorIssue::OutOfRange)
        );
    }
}
