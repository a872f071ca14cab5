//! The twin proper: state estimation with quality, sensor plausibility events, online
//! calibration with confidence intervals, and drift (maintenance) detection, all updated from
//! one [`Measurements`] snapshot per tick.

use crate::fouling::{hx_features, FoulingConfig, FoulingDetector, UaLoss};
use crate::health::{HealthConfig, SensorId, SensorIssue, Track, Transition};
use crate::nameplate::Nameplate;
use crate::regress::{LinearFit, Samples};
use coolplane_core::fluid::{pg25_lpm_to_kg_s, water_lpm_to_kg_s, PG25_CP_J_KG_K, WATER_CP_J_KG_K};
use coolplane_core::signals::{Measurements, Quality, Reading};
use serde::{Deserialize, Serialize};

/// Share of the HX resistance in the secondary film at the learning window's mean flows (the rest
/// in the facility film). A clean plate exchanger's wall is thin next to its two films; the two are
/// taken as equal, which the window cannot refute (its flows move together with the load).
const HX_SEC_FILM_SHARE: f64 = 0.5;

/// The fouling detector's reference resistance `R̄·(s·x₀/x̄₀ + (1 − s)·x₁/x̄₁)`, K/kW: the learning
/// window's mean apparent resistance `R̄`, with each film scaled by its flow's Reynolds feature
/// (`x` from [`hx_features`], means over the window) and no fitted slopes, as a [`LinearFit`]
/// (coefficient intervals NaN: fixed, not fitted; `rmse` its residual on the window).
fn film_scaled_reference(s: &Samples, r_mean: f64) -> LinearFit {
    let n = s.len().max(1) as f64;
    let p = s.p;
    let mean = |j: usize| (0..s.len()).map(|i| s.x[i * p + j]).sum::<f64>() / n;
    let (m0, m1) = (mean(0), mean(1));
    let mut coef = vec![0.0; p];
    coef[0] = HX_SEC_FILM_SHARE * r_mean / m0;
    coef[1] = (1.0 - HX_SEC_FILM_SHARE) * r_mean / m1;
    let mut f = LinearFit {
        intercept: 0.0,
        coef,
        ci: vec![(f64::NAN, f64::NAN); p],
        rmse: 0.0,
        n: s.len(),
    };
    f.rmse = ((0..s.len())
        .map(|i| (s.y[i] - f.predict(&s.x[i * p..(i + 1) * p])).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    f
}

/// Tuning of the twin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TwinConfig {
    /// Learning window from the first snapshot: residual baselines and the first calibration, s.
    pub learn_s: f64,
    /// Recalibrate every this many seconds after learning, s.
    pub recalibrate_every_s: f64,
    /// A reading older than this is stale, s.
    pub stale_s: f64,
    /// Time constant of the maintenance (fouling, pump wear) detectors, s.
    pub drift_tau_s: f64,
    /// HX fouling detection (loss threshold, window, persistence, interval).
    pub fouling: FoulingConfig,
    /// Relative flow-per-speed loss flagged as pump wear.
    pub pump_wear_threshold: f64,
    /// Bound on queued events (older are dropped and counted).
    pub max_events: usize,
}

impl Default for TwinConfig {
    fn default() -> Self {
        Self {
            learn_s: 24.0 * 3600.0,
            recalibrate_every_s: 6.0 * 3600.0,
            stale_s: 300.0,
            drift_tau_s: 4.0 * 3600.0,
            fouling: FoulingConfig::default(),
            pump_wear_threshold: 0.08,
            max_events: 10_000,
        }
    }
}

/// How an estimate was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum EstQuality {
    /// From a plausible, fresh sensor (possibly with a calibrated model).
    Measured,
    /// Gap filled from the model (sensor missing or implausible).
    Modelled,
    /// Neither a plausible sensor nor a calibrated model.
    #[default]
    Unavailable,
}

/// One estimated value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Estimate {
    /// Value, in the unit of the field name.
    pub value: f64,
    /// How it was obtained.
    pub quality: EstQuality,
}

impl Estimate {
    fn new(value: f64, quality: EstQuality) -> Self {
        if value.is_finite() {
            Self { value, quality }
        } else {
            Self {
                value: f64::NAN,
                quality: EstQuality::Unavailable,
            }
        }
    }
}

/// Estimated state of one rack.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct RackEstimate {
    /// IT power, kW.
    pub it_kw: Estimate,
    /// Heat into the liquid, kW.
    pub heat_to_liquid_kw: Estimate,
    /// Coolant flow, L/min.
    pub flow_lpm: Estimate,
    /// Coolant inlet (supply) temperature, °C.
    pub supply_c: Estimate,
    /// Coolant outlet (return) temperature, °C.
    pub return_c: Estimate,
    /// Hottest GPU temperature, °C.
    pub gpu_max_c: Estimate,
    /// Thermal margin of the rack's GPU group: slowdown − hottest GPU, K.
    pub margin_k: Estimate,
}

/// Estimated state of one CDU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct CduEstimate {
    /// Heat into the liquid from its racks, kW.
    pub heat_to_liquid_kw: Estimate,
    /// Secondary flow, L/min.
    pub flow_lpm: Estimate,
    /// Supply temperature, °C.
    pub supply_c: Estimate,
    /// Return temperature, °C.
    pub return_c: Estimate,
    /// Apparent heat-exchanger UA, kW/K.
    pub ua_kw_per_k: Estimate,
}

/// Estimated state of one hall.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct HallEstimate {
    /// IT power, kW.
    pub it_kw: Estimate,
    /// Heat into the liquid, kW.
    pub heat_to_liquid_kw: Estimate,
    /// Facility supply temperature, °C.
    pub facility_supply_c: Estimate,
    /// Smallest GPU-group margin in the hall, K.
    pub margin_k: Estimate,
}

/// The whole estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct StateEstimate {
    /// Time of the snapshot, s.
    pub t_s: f64,
    /// Per rack.
    pub racks: Vec<RackEstimate>,
    /// Per CDU.
    pub cdus: Vec<CduEstimate>,
    /// Per hall.
    pub halls: Vec<HallEstimate>,
}

/// A calibrated parameter with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Param {
    /// Point estimate.
    pub value: f64,
    /// Lower end of the interval.
    pub lo: f64,
    /// Upper end of the interval.
    pub hi: f64,
    /// Samples it came from.
    pub n: usize,
}

impl Param {
    fn from_coef(f: &LinearFit, j: usize) -> Self {
        Self {
            value: f.coef[j],
            lo: f.ci[j].0,
            hi: f.ci[j].1,
            n: f.n,
        }
    }
}

/// The calibrated parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Calibration {
    /// Per rack: cold-plate thermal resistance of the hottest GPU at the nameplate design flow, K/W.
    pub rack_cold_plate_k_per_w: Vec<Param>,
    /// Per rack: fit of hottest-GPU rise over inlet: `[p, p·(q/q_design)^-0.8]` with p the rack's
    /// hottest-GPU power, W.
    pub rack_thermal: Vec<Option<LinearFit>>,
    /// Per rack: manifold pick-up, inlet − CDU supply, K.
    pub rack_pickup_k: Vec<f64>,
    /// Per CDU: heat-to-liquid fraction (slope of loop heat over rack IT power).
    pub cdu_heat_to_liquid: Vec<Param>,
    /// Per CDU: HX UA at the mean secondary and facility flows of the learning window, kW/K
    /// (interval from the fit's residual spread; it does not include the temperature sensors'
    /// offsets, which move the estimate by up to ≈ 30 % over a 4–6 K log-mean difference).
    pub cdu_ua_kw_per_k: Vec<Param>,
    /// Per CDU: the fouling detector's reference apparent HX resistance `LMTD/Q`, K/kW, over the
    /// features of [`crate::fouling::hx_features`]: the learning window's mean with fixed film
    /// scaling (`r₀ = 0`, `δ = 0`, film slopes from an equal film split; not a regression, whose
    /// slopes are not identifiable over one window).
    pub cdu_ua_fit: Vec<Option<LinearFit>>,
    /// Per CDU: pump power at full design flow, kW (from `cdu_pump_fit`).
    pub cdu_pump_kw_at_design: Vec<Param>,
    /// Per CDU: pump power fit `P = c0 + k (q/q_design)^3`, kW.
    pub cdu_pump_fit: Vec<Option<LinearFit>>,
    /// Per CDU: flow per pump speed, L/min per %.
    pub cdu_flow_per_speed: Vec<Param>,
    /// Per hall: heat-rejection fan power at 100 % speed, kW (`P = k s^3`).
    pub hall_fan_kw_at_full: Vec<Param>,
}

/// A maintenance finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Maintenance {
    /// The CDU's HX conducts less than learned (fouling).
    HxFouling,
    /// The CDU's pumps give less flow per speed than learned (wear).
    PumpWear,
}

/// Something the twin found.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum TwinEventKind {
    /// A sensor became implausible.
    SensorImplausible {
        /// Which.
        sensor: SensorId,
        /// How.
        issue: SensorIssue,
    },
    /// A sensor is plausible again.
    SensorRecovered {
        /// Which.
        sensor: SensorId,
    },
    /// Equipment needs maintenance.
    Maintenance {
        /// CDU index.
        cdu: u32,
        /// What.
        finding: Maintenance,
        /// Relative loss estimated, 0–1.
        loss: f64,
    },
    /// The first calibration finished (learning window over).
    Calibrated,
}

/// A twin event with its time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TwinEvent {
    /// Plant time, s.
    pub t_s: f64,
    /// What.
    #[serde(flatten)]
    pub kind: TwinEventKind,
}

/// Counters for operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TwinCounters {
    /// Snapshots processed.
    pub updates: u64,
    /// Snapshots rejected (wrong shape).
    pub rejected: u64,
    /// Sensor issues raised.
    pub sensor_issues: u64,
    /// Maintenance events raised.
    pub maintenance: u64,
    /// Calibrations run.
    pub calibrations: u64,
    /// Calibrations that failed (too few samples, solver).
    pub calibration_failures: u64,
    /// Events dropped because the queue was full.
    pub events_dropped: u64,
    /// Sensor issues in force now.
    pub issues_active: u64,
}

#[derive(Debug, Clone, Default)]
struct DriftTrack {
    base: f64,
    ewma: f64,
    init: bool,
    flagged: bool,
    /// Samples since the mean started, as a fraction of its time constant (no verdict before 1).
    warm: f64,
}

impl DriftTrack {
    /// Update with a log-ratio sample; returns the relative loss once it exceeds `threshold`.
    fn update(&mut self, x: f64, a: f64, threshold: f64) -> Option<f64> {
        if !x.is_finite() {
            return None;
        }
        if !self.init {
            self.ewma = x;
            self.init = true;
        } else {
            self.ewma += a * (x - self.ewma);
            self.warm += -(1.0 - a).ln();
        }
        let loss = 1.0 - (self.ewma - self.base).exp();
        if self.warm < 1.0 {
            return None;
        }
        if !self.flagged && loss > threshold {
            self.flagged = true;
            return Some(loss);
        }
        if self.flagged && loss < threshold * 0.5 {
            self.flagged = false;
        }
        None
    }
}

/// Calibration sample sets, one per parameter group.
#[derive(Debug, Clone)]
struct SampleSets {
    rack_thermal: Vec<Samples>,
    rack_pickup: Vec<(f64, f64)>,
    cdu_liq: Vec<Samples>,
    cdu_ua: Vec<Samples>,
    cdu_pump: Vec<Samples>,
    cdu_flow_speed: Vec<Samples>,
    hall_fan: Vec<Samples>,
}

/// The digital twin. Feed it every snapshot with [`Twin::update`].
#[derive(Debug, Clone)]
pub struct Twin {
    np: std::sync::Arc<Nameplate>,
    cfg: TwinConfig,
    t0: Option<f64>,
    last_t: f64,
    est: StateEstimate,
    cal: Calibration,
    calibrated: bool,
    last_cal_s: f64,
    samples: SampleSets,
    cdu_tracks: Vec<[Track; 4]>,
    fac_tracks: Vec<Track>,
    gpu_tracks: Vec<Track>,
    /// Per CDU: its tank's pressure gauge (unused on a cold-plate CDU).
    tank_tracks: Vec<Track>,
    gpu_sums: Vec<[f64; 5]>,
    gpu_fit: Vec<(f64, f64)>,
    gpu_relearn_until: f64,
    quiet_until: Vec<f64>,
    ua_drift: Vec<FoulingDetector>,
    pump_drift: Vec<DriftTrack>,
    events: Vec<TwinEvent>,
    counters: TwinCounters,
    temp_cfg: HealthConfig,
    flow_cfg: HealthConfig,
    loop_cfg: HealthConfig,
    gpu_cfg: HealthConfig,
    tank_cfg: HealthConfig,
}

const SAMPLE_CAP: usize = 4096;
/// Per-rack thermal samples are many (one fit per rack): fewer kept, still days of history.
const RACK_SAMPLE_CAP: usize = 1024;

impl Twin {
    /// A twin for a site's nameplate.
    pub fn new(np: Nameplate, cfg: TwinConfig) -> Self {
        let (nr, nc, nh, ng) = (
            np.topo.racks.len(),
            np.topo.cdus.len(),
            np.topo.halls.len(),
            np.topo.gpu_count,
        );
        let temp_cfg = HealthConfig {
            stale_s: cfg.stale_s,
            stuck_s: 1800.0,
            stuck_min_move: 0.6,
            ewma_tau_s: 1800.0,
            band_sigmas: 6.0,
            band_min: 0.8,
            range: (-10.0, 95.0),
            clear_s: 1800.0,
        };
        let flow_cfg = HealthConfig {
            stuck_min_move: 0.03,
            band_min: 0.06,
            range: (-1.0, 1e9),
            ..temp_cfg
        };
        let loop_cfg = HealthConfig {
            stuck_s: f64::INFINITY,
            band_min: 0.08,
            range: (f64::NEG_INFINITY, f64::INFINITY),
            ewma_tau_s: 3600.0,
            ..temp_cfg
        };
        let gpu_cfg = HealthConfig {
            stuck_s: 3600.0,
            stuck_min_move: 4.0,
            band_min: 5.0,
            range: (0.0, 130.0),
            ..temp_cfg
        };
        // Tank gauge, kPa above atmospheric: the pool thermometer's 0.1 K is about 0.36 kPa
        // near the boiling point, so the band is wider than a temperature's in kelvins.
        let tank_cfg = HealthConfig {
            stuck_min_move: 1.5,
            band_min: 1.0,
            range: (-20.0, 300.0),
            ..temp_cfg
        };
        let samples = SampleSets {
            rack_thermal: vec![Samples::new(2, RACK_SAMPLE_CAP); nr],
            rack_pickup: vec![(0.0, 0.0); nr],
            cdu_liq: vec![Samples::new(2, SAMPLE_CAP); nc],
            cdu_ua: vec![Samples::new(3, SAMPLE_CAP); nc],
            cdu_pump: vec![Samples::new(1, SAMPLE_CAP); nc],
            cdu_flow_speed: vec![Samples::new(1, SAMPLE_CAP); nc],
            hall_fan: vec![Samples::new(1, SAMPLE_CAP); nh],
        };
        Self {
            cfg,
            t0: None,
            last_t: f64::NAN,
            est: StateEstimate {
                t_s: 0.0,
                racks: vec![RackEstimate::default(); nr],
                cdus: vec![CduEstimate::default(); nc],
                halls: vec![HallEstimate::default(); nh],
            },
            cal: Calibration {
                rack_cold_plate_k_per_w: vec![Param::default(); nr],
                rack_thermal: vec![None; nr],
                rack_pickup_k: vec![f64::NAN; nr],
                cdu_heat_to_liquid: vec![Param::default(); nc],
                cdu_ua_kw_per_k: vec![Param::default(); nc],
                cdu_ua_fit: vec![None; nc],
                cdu_pump_kw_at_design: vec![Param::default(); nc],
                cdu_pump_fit: vec![None; nc],
                cdu_flow_per_speed: vec![Param::default(); nc],
                hall_fan_kw_at_full: vec![Param::default(); nh],
            },
            calibrated: false,
            last_cal_s: f64::NEG_INFINITY,
            samples,
            cdu_tracks: vec![Default::default(); nc],
            fac_tracks: vec![Track::default(); nh],
            gpu_tracks: vec![Track::default(); ng],
            tank_tracks: vec![Track::default(); nc],
            gpu_sums: vec![[0.0; 5]; ng],
            gpu_fit: vec![(f64::NAN, f64::NAN); ng],
            gpu_relearn_until: f64::NEG_INFINITY,
            quiet_until: vec![f64::NEG_INFINITY; nc],
            ua_drift: vec![FoulingDetector::default(); nc],
            pump_drift: vec![DriftTrack::default(); nc],
            events: Vec::new(),
            counters: TwinCounters::default(),
            temp_cfg,
            flow_cfg,
            loop_cfg,
            gpu_cfg,
            tank_cfg,
            np: std::sync::Arc::new(np),
        }
    }

    /// The nameplate the twin was built from.
    pub fn nameplate(&self) -> &Nameplate {
        &self.np
    }
    /// The latest state estimate.
    pub fn estimate(&self) -> &StateEstimate {
        &self.est
    }
    /// The calibration so far (meaningful once [`Twin::calibrated`]).
    pub fn calibration(&self) -> &Calibration {
        &self.cal
    }
    /// Whether the learning window is over and a calibration exists.
    pub fn calibrated(&self) -> bool {
        self.calibrated
    }
    /// Per CDU: the fouling detector's apparent UA loss over its window, with its interval
    /// (None until a day of hourly means exists after calibration).
    pub fn ua_loss(&self) -> Vec<Option<UaLoss>> {
        self.ua_drift.iter().map(|d| d.loss()).collect()
    }
    /// Counters.
    pub fn counters(&self) -> TwinCounters {
        self.counters
    }
    /// Take the queued events.
    pub fn drain_events(&mut self) -> Vec<TwinEvent> {
        std::mem::take(&mut self.events)
    }
    /// Sensors with an issue in force.
    pub fn active_issues(&self) -> Vec<(SensorId, SensorIssue)> {
        let mut v = Vec::new();
        for (c, t) in self.cdu_tracks.iter().enumerate() {
            let ids = [
                SensorId::CduSupplyTemp(c as u32),
                SensorId::CduReturnTemp(c as u32),
                SensorId::CduFlow(c as u32),
                SensorId::CduLoop(c as u32),
            ];
            for k in 0..4 {
                if let Some(i) = t[k].issue {
                    v.push((ids[k], i));
                }
            }
        }
        for (h, t) in self.fac_tracks.iter().enumerate() {
            if let Some(i) = t.issue {
                v.push((SensorId::FacilitySupplyTemp(h as u32), i));
            }
        }
        for (g, t) in self.gpu_tracks.iter().enumerate() {
            if let Some(i) = t.issue {
                v.push((SensorId::GpuTemp(g as u32), i));
            }
        }
        for (c, t) in self.tank_tracks.iter().enumerate() {
            if let Some(i) = t.issue {
                v.push((SensorId::TankPressure(c as u32), i));
            }
        }
        v
    }

    fn push_event(&mut self, t_s: f64, kind: TwinEventKind) {
        match kind {
            TwinEventKind::SensorImplausible { .. } => self.counters.sensor_issues += 1,
            TwinEventKind::Maintenance { .. } => self.counters.maintenance += 1,
            _ => {}
        }
        if self.events.len() >= self.cfg.max_events {
            self.events.remove(0);
            self.counters.events_dropped += 1;
        }
        self.events.push(TwinEvent { t_s, kind });
    }

    fn fresh(&self, r: &Reading, now: f64) -> bool {
        r.quality != Quality::Bad && r.age_s(now) <= self.cfg.stale_s
    }

    /// Process one snapshot. A snapshot whose shape does not match the site is counted and
    /// ignored (returns false).
    pub fn update(&mut self, m: &Measurements) -> bool {
        let np = self.np.clone();
        let topo = &np.topo;
        if m.cdus.len() != topo.cdus.len()
            || m.racks.len() != topo.racks.len()
            || m.facilities.len() != topo.halls.len()
            || !m.t_s.is_finite()
        {
            self.counters.rejected += 1;
            return false;
        }
        let gpus_ok = m.gpus.temp_c.len() == topo.gpu_count && m.gpus.power_w.len() == topo.gpu_count;
        let now = m.t_s;
        let t0 = *self.t0.get_or_insert(now);
        let dt = if self.last_t.is_finite() {
            (now - self.last_t).max(0.0)
        } else {
            0.0
        };
        self.last_t = now;
        let learning = now - t0 < self.cfg.learn_s;
        self.counters.updates += 1;
        self.est.t_s = now;

        // --- racks: measured values and calibration samples -----------------------------
        let nr = topo.racks.len();
        let mut rack_inlet = vec![f64::NAN; nr];
        let mut rack_outlet = vec![f64::NAN; nr];
        let mut rack_it = vec![f64::NAN; nr];
        let mut rack_pmax = vec![f64::NAN; nr];
        for (r, rm) in m.racks.iter().enumerate() {
            if self.fresh(&rm.inlet_temp_c, now) && rm.inlet_temp_c.value.is_finite() {
                rack_inlet[r] = rm.inlet_temp_c.value;
            }
            if self.fresh(&rm.outlet_temp_c, now) && rm.outlet_temp_c.value.is_finite() {
                rack_outlet[r] = rm.outlet_temp_c.value;
            }
            if self.fresh(&rm.it_power_kw, now) && rm.it_power_kw.value.is_finite() {
                rack_it[r] = rm.it_power_kw.value;
            }
            if gpus_ok {
                let g = &topo.racks[r].gpus;
                rack_pmax[r] = m.gpus.power_w[g.clone()]
                    .iter()
                    .fold(0.0f32, |a, &b| if b.is_finite() { a.max(b) } else { a })
                    as f64;
            }
        }

        // --- CDUs -------------------------------------------------------------------------
        let nc = topo.cdus.len();
        for c in 0..nc {
            let cm = &m.cdus[c];
            let racks = topo.cdus[c].racks.clone();
            let mean = |v: &[f64]| {
                let (s, n) = v[racks.clone()]
                    .iter()
                    .filter(|x| x.is_finite())
                    .fold((0.0, 0), |(s, n), x| (s + x, n + 1));
                if n > 0 {
                    s / n as f64
                } else {
                    f64::NAN
                }
            };
            let inlet_mean = mean(&rack_inlet);
            let outlet_mean = mean(&rack_outlet);
            let it_sum: f64 = racks.clone().map(|r| rack_it[r]).sum();
            let sp = cm.pump_speed_pct;
            let speed_ok = self.fresh(&sp, now) && sp.value > 1.0;
            let design_flow = self.np.cdu_design_flow_lpm[c];
            // Redundant estimates.
            let red_sup = inlet_mean;
            let red_ret = outlet_mean;
            let red_flow_ln = if speed_ok { sp.value.ln() } else { f64::NAN };
            let readings = [cm.supply_temp_c, cm.return_temp_c, cm.flow_lpm];
            let mut trans = [Transition::None; 4];
            for k in 0..3 {
                let r = readings[k];
                let fresh = self.fresh(&r, now);
                let flagged = r.quality == Quality::Uncertain;
                let (cfg, value, red) = match k {
                    0 => (self.temp_cfg, r.value, red_sup),
                    1 => (self.temp_cfg, r.value, red_ret),
                    _ => {
                        let lnv = if r.value > 0.0 { r.value.ln() } else { f64::NAN };
                        // The range check applies to the raw value: a flow must be ≥ 0 and below 3× design.
                        let in_range = r.value.is_finite() && r.value >= 0.0 && r.value <= 3.0 * design_flow;
                        (
                            self.flow_cfg,
                            if in_range {
                                if lnv.is_finite() {
                                    lnv
                                } else {
                                    -1e9
                                }
                            } else {
                                f64::NAN
                            },
                            red_flow_ln,
                        )
                    }
                };
                let value = if k == 2 && value == -1e9 { f64::NAN } else { value };
                // Zero flow with a running pump is out of range; NaN handles it.
                let red = if k == 2 && !value.is_finite() { f64::NAN } else { red };
                trans[k] = self.cdu_tracks[c][k].update(
                    &cfg,
                    now,
                    dt,
                    value,
                    fresh,
                    flagged,
                    red,
                    learning,
                    SensorIssue::Drifting,
                );
            }
            // Loop energy balance: ln(ṁ c_p ΔT) − ln(Σ rack IT).
            let sup_ok = self.cdu_tracks[c][0].issue.is_none() && self.fresh(&cm.supply_temp_c, now);
            let ret_ok = self.cdu_tracks[c][1].issue.is_none() && self.fresh(&cm.return_temp_c, now);
            let flow_ok =
                self.cdu_tracks[c][2].issue.is_none() && self.fresh(&cm.flow_lpm, now) && cm.flow_lpm.value > 0.0;
            let loaded = it_sum.is_finite() && it_sum > 0.2 * self.np.cdu_capacity_kw[c];
            let q_loop_kw = pg25_lpm_to_kg_s(cm.flow_lpm.value)
                * PG25_CP_J_KG_K
                * (cm.return_temp_c.value - cm.supply_temp_c.value)
                / 1e3;
            let loop_ratio = if loaded && q_loop_kw > 0.0 {
                (q_loop_kw / it_sum).ln()
            } else {
                f64::NAN
            };
            trans[3] = if loop_ratio.is_finite() {
                self.cdu_tracks[c][3].update(
                    &self.loop_cfg,
                    now,
                    dt,
                    loop_ratio,
                    true,
                    false,
                    0.0,
                    learning,
                    SensorIssue::EnergyBalance,
                )
            } else {
                Transition::None
            };
            let ids = [
                SensorId::CduSupplyTemp(c as u32),
                SensorId::CduReturnTemp(c as u32),
                SensorId::CduFlow(c as u32),
                SensorId::CduLoop(c as u32),
            ];
            for k in 0..4 {
                self.emit(now, ids[k], trans[k]);
            }
            // A two-phase immersion tank's pressure gauge against its pool thermometer read
            // through the fluid's saturation curve.
            if let (Some(sat), Some(tank)) = (self.np.tank_saturation[c], cm.tank) {
                let g = tank.pressure_gauge_kpa;
                let pool = tank.pool_temp_c;
                let red = if self.fresh(&pool, now) && pool.quality != Quality::Uncertain {
                    sat.tank_gauge_kpa(pool.value)
                } else {
                    f64::NAN
                };
                let g_fresh = self.fresh(&g, now);
                let tr = self.tank_tracks[c].update(
                    &self.tank_cfg,
                    now,
                    dt,
                    g.value,
                    g_fresh,
                    g.quality == Quality::Uncertain,
                    red,
                    learning,
                    SensorIssue::Drifting,
                );
                self.emit(now, SensorId::TankPressure(c as u32), tr);
            }
            // A CDU whose own sensors are (or recently were) implausible cannot judge its
            // equipment: maintenance detection pauses there for 12 h after the last issue.
            if self.cdu_tracks[c].iter().any(|t| t.issue.is_some()) {
                self.quiet_until[c] = now + 12.0 * 3600.0;
            }
            let judge = now >= self.quiet_until[c];

            // Calibration samples (only from plausible sensors).
            if sup_ok && ret_ok && flow_ok && loaded && q_loop_kw > 0.0 {
                // Loop heat = f_liq · rack power + (ΔT sensor offset) · ṁ c_p: the second
                // feature keeps a temperature-sensor offset from leaking into f_liq.
                let mcp_kw = pg25_lpm_to_kg_s(cm.flow_lpm.value) * PG25_CP_J_KG_K / 1e3;
                self.samples.cdu_liq[c].push(&[it_sum, mcp_kw], q_loop_kw);
            }
            let pump_kw = cm.pump_power_kw;
            if speed_ok && self.fresh(&pump_kw, now) && flow_ok {
                let qf = cm.flow_lpm.value / design_flow;
                self.samples.cdu_pump[c].push(&[qf.powi(3)], pump_kw.value);
                self.samples.cdu_flow_speed[c].push(&[sp.value], cm.flow_lpm.value);
                if !learning && self.calibrated && judge {
                    let a = 1.0 - (-dt / self.cfg.drift_tau_s).exp();
                    let x = (cm.flow_lpm.value / sp.value).ln();
                    let loop_fine = self.cdu_tracks[c][3].issue.is_none();
                    if loop_fine {
                        if let Some(loss) = self.pump_drift[c].update(x, a, self.cfg.pump_wear_threshold) {
                            self.push_event(
                                now,
                                TwinEventKind::Maintenance {
                                    cdu: c as u32,
                                    finding: Maintenance::PumpWear,
                                    loss,
                                },
                            );
                        }
                    }
                }
            }
            // Apparent HX resistance from the secondary side and the facility flow split by valve
            // position (the facility valves share the hall's measured flow in proportion to their
            // opening), against the calibrated sum-of-resistances model (see [`crate::fouling`]).
            let h = topo.cdus[c].hall;
            let fm = &m.facilities[h];
            let hall_cdus = topo.halls[h].cdus.clone();
            let valve_sum: f64 = hall_cdus.clone().map(|k| m.cdus[k].valve_pct.value.max(0.0)).sum();
            let fac_in = cm.facility_in_temp_c;
            let mut loss_sample = f64::NAN;
            let ua = if sup_ok
                && ret_ok
                && flow_ok
                && self.fresh(&fac_in, now)
                && self.fresh(&fm.flow_lpm, now)
                && valve_sum > 0.0
                && self.fresh(&cm.valve_pct, now)
                // A valve at its floor is off its characteristic: no UA sample there. A fully open
                // valve is kept: a fouled exchanger is exactly the one that opens its valve fully.
                && cm.valve_pct.value >= 8.0
            {
                let m_fac = water_lpm_to_kg_s(fm.flow_lpm.value) * cm.valve_pct.value.max(0.0) / valve_sum;
                let m_sec = pg25_lpm_to_kg_s(cm.flow_lpm.value);
                let q_w = m_sec * PG25_CP_J_KG_K * (cm.return_temp_c.value - cm.supply_temp_c.value);
                let t_cold_out = fac_in.value + q_w / (m_fac * WATER_CP_J_KG_K).max(1e-6);
                let d1 = cm.return_temp_c.value - t_cold_out;
                let d2 = cm.supply_temp_c.value - fac_in.value;
                let lmtd = if d1 > 0.3 && d2 > 0.3 {
                    if (d1 - d2).abs() < 1e-6 {
                        d1
                    } else {
                        (d1 - d2) / (d1 / d2).ln()
                    }
                } else {
                    f64::NAN
                };
                if lmtd.is_finite() && q_w > 0.25 * self.np.cdu_capacity_kw[c] * 1e3 && m_fac > 0.0 {
                    let q_kw = q_w / 1e3;
                    let r_app = lmtd / q_kw;
                    let m_d = pg25_lpm_to_kg_s(self.np.cdu_design_flow_lpm[c]);
                    let x = hx_features(m_sec, m_fac, q_kw, m_d);
                    if learning {
                        self.samples.cdu_ua[c].push(&x, r_app);
                    }
                    if !learning && self.calibrated && judge {
                        if let Some(f) = &self.cal.cdu_ua_fit[c] {
                            let r_model = f.predict(&x);
                            if r_model > 0.0 {
                                loss_sample = 1.0 - r_model / r_app;
                            }
                        }
                    }
                    1.0 / r_app
                } else {
                    f64::NAN
                }
            } else {
                f64::NAN
            };
            if !learning && self.calibrated {
                // Hours with no usable sample (or while the CDU's sensors are suspect) still pass.
                if let Some(v) = self.ua_drift[c].update(&self.cfg.fouling, loss_sample, dt) {
                    self.push_event(
                        now,
                        TwinEventKind::Maintenance {
                            cdu: c as u32,
                            finding: Maintenance::HxFouling,
                            loss: v.mean,
                        },
                    );
                }
            }

            // Estimates with gap filling.
            let f_liq = self.cal.cdu_heat_to_liquid[c].value;
            let heat = if self.calibrated && it_sum.is_finite() {
                Estimate::new(f_liq * it_sum, EstQuality::Measured)
            } else if sup_ok && ret_ok && flow_ok {
                Estimate::new(q_loop_kw, EstQuality::Measured)
            } else {
                Estimate::default()
            };
            let flow = if flow_ok {
                Estimate::new(cm.flow_lpm.value, EstQuality::Measured)
            } else if speed_ok && self.calibrated {
                let p = self.cal.cdu_flow_per_speed[c].value;
                Estimate::new(p * sp.value, EstQuality::Modelled)
            } else {
                Estimate::default()
            };
            let pick_mean = {
                let v: Vec<f64> = racks
                    .clone()
                    .map(|r| self.cal.rack_pickup_k[r])
                    .filter(|x| x.is_finite())
                    .collect();
                if v.is_empty() {
                    f64::NAN
                } else {
                    v.iter().sum::<f64>() / v.len() as f64
                }
            };
            let supply = if sup_ok {
                Estimate::new(cm.supply_temp_c.value, EstQuality::Measured)
            } else {
                Estimate::new(inlet_mean - pick_mean, EstQuality::Modelled)
            };
            let ret = if ret_ok {
                Estimate::new(cm.return_temp_c.value, EstQuality::Measured)
            } else {
                Estimate::new(outlet_mean, EstQuality::Modelled)
            };
            self.est.cdus[c] = CduEstimate {
                heat_to_liquid_kw: heat,
                flow_lpm: flow,
                supply_c: supply,
                return_c: ret,
                ua_kw_per_k: Estimate::new(ua, EstQuality::Measured),
            };
            // Rack pickup samples.
            if sup_ok {
                for r in racks.clone() {
                    if rack_inlet[r].is_finite() {
                        let s = &mut self.samples.rack_pickup[r];
                        s.0 += rack_inlet[r] - cm.supply_temp_c.value;
                        s.1 += 1.0;
                    }
                }
            }
        }

        // --- facility supply ---------------------------------------------------------------
        for h in 0..topo.halls.len() {
            let fm = &m.facilities[h];
            let cdus = topo.halls[h].cdus.clone();
            let v: Vec<f64> = cdus
                .map(|c| m.cdus[c].facility_in_temp_c)
                .filter(|r| self.fresh(r, now) && r.value.is_finite())
                .map(|r| r.value)
                .collect();
            let red = if v.is_empty() {
                f64::NAN
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            };
            let r = fm.supply_temp_c;
            let fresh = self.fresh(&r, now);
            let tr = self.fac_tracks[h].update(
                &self.temp_cfg,
                now,
                dt,
                r.value,
                fresh,
                r.quality == Quality::Uncertain,
                red,
                learning,
                SensorIssue::Drifting,
            );
            self.emit(now, SensorId::FacilitySupplyTemp(h as u32), tr);
            if self.fresh(&fm.fan_speed_pct, now) && self.fresh(&fm.fan_power_kw, now) {
                let s = fm.fan_speed_pct.value / 100.0;
                self.samples.hall_fan[h].push(&[s.powi(3)], fm.fan_power_kw.value);
            }
            let fac = if self.fac_tracks[h].issue.is_none() && fresh {
                Estimate::new(r.value, EstQuality::Measured)
            } else {
                Estimate::new(red, EstQuality::Modelled)
            };
            self.est.halls[h].facility_supply_c = fac;
        }

        // --- GPUs: plausibility against inlet + learned resistance ---------------------------
        if gpus_ok {
            let gpu_fresh = now - m.gpus.t_s <= self.cfg.stale_s;
            let gpu_learning = learning || now < self.gpu_relearn_until;
            for (r, rack) in topo.racks.iter().enumerate() {
                let tin = rack_inlet[r];
                // No fresh telemetry from the rack at all (agent silent or not yet heard): that is
                // the rack's staleness, which the controller handles, not 72 faulty GPU sensors.
                if !tin.is_finite() && !rack_it[r].is_finite() {
                    continue;
                }
                for g in rack.gpus.clone() {
                    let t = m.gpus.temp_c[g] as f64;
                    let p = m.gpus.power_w[g] as f64;
                    let (a, b) = self.gpu_fit[g];
                    let red = if a.is_finite() && tin.is_finite() && p.is_finite() {
                        tin + a + b * p
                    } else {
                        f64::NAN
                    };
                    if learning && t.is_finite() && tin.is_finite() && p.is_finite() {
                        let s = &mut self.gpu_sums[g];
                        let y = t - tin;
                        s[0] += 1.0;
                        s[1] += p;
                        s[2] += y;
                        s[3] += p * p;
                        s[4] += p * y;
                    }
                    let tr = self.gpu_tracks[g].update(
                        &self.gpu_cfg,
                        now,
                        dt,
                        t,
                        gpu_fresh,
                        false,
                        red,
                        gpu_learning,
                        SensorIssue::Drifting,
                    );
                    if tr != Transition::None {
                        self.emit(now, SensorId::GpuTemp(g as u32), tr);
                    }
                }
            }
        }

        // --- rack estimates and thermal samples -----------------------------------------------
        let slowdown = self.np.gpu_slowdown_c;
        for (r, rack) in topo.racks.iter().enumerate() {
            let c = rack.cdu;
            let n_in_cdu = topo.cdus[c].racks.len().max(1) as f64;
            let cdu_flow = self.est.cdus[c].flow_lpm;
            let flow = Estimate::new(cdu_flow.value / n_in_cdu, EstQuality::Modelled);
            let it = Estimate::new(rack_it[r], EstQuality::Measured);
            let f_liq = if self.calibrated {
                self.cal.cdu_heat_to_liquid[c].value
            } else {
                f64::NAN
            };
            let heat = Estimate::new(f_liq * rack_it[r], EstQuality::Measured);
            let supply = if rack_inlet[r].is_finite() {
                Estimate::new(rack_inlet[r], EstQuality::Measured)
            } else {
                Estimate::new(
                    self.est.cdus[c].supply_c.value + self.cal.rack_pickup_k[r],
                    EstQuality::Modelled,
                )
            };
            let ret = if rack_outlet[r].is_finite() {
                Estimate::new(rack_outlet[r], EstQuality::Measured)
            } else {
                let m_kg = pg25_lpm_to_kg_s(flow.value);
                Estimate::new(
                    supply.value + heat.value * 1e3 / (m_kg * PG25_CP_J_KG_K),
                    EstQuality::Modelled,
                )
            };
            // Hottest GPU from plausible sensors only; model where the rack's GPUs are all implausible.
            let mut gmax = f64::NAN;
            if gpus_ok {
                for g in rack.gpus.clone() {
                    if self.gpu_tracks[g].issue.is_none() {
                        let t = m.gpus.temp_c[g] as f64;
                        if t.is_finite() && (gmax.is_nan() || t > gmax) {
                            gmax = t;
                        }
                    }
                }
            }
            let gpu_max = if gmax.is_finite() {
                Estimate::new(gmax, EstQuality::Measured)
            } else {
                match &self.cal.rack_thermal[r] {
                    Some(f) if rack_pmax[r].is_finite() => {
                        let x = thermal_features(rack_pmax[r], flow.value, self.np.cdu_design_flow_lpm[c] / n_in_cdu);
                        Estimate::new(supply.value + f.predict(&x), EstQuality::Modelled)
                    }
                    _ => Estimate::default(),
                }
            };
            if gmax.is_finite()
                && rack_inlet[r].is_finite()
                && rack_pmax[r].is_finite()
                && cdu_flow.quality == EstQuality::Measured
            {
                let x = thermal_features(rack_pmax[r], flow.value, self.np.cdu_design_flow_lpm[c] / n_in_cdu);
                self.samples.rack_thermal[r].push(&x, gmax - rack_inlet[r]);
            }
            self.est.racks[r] = RackEstimate {
                it_kw: it,
                heat_to_liquid_kw: heat,
                flow_lpm: flow,
                supply_c: supply,
                return_c: ret,
                gpu_max_c: gpu_max,
                margin_k: Estimate::new(slowdown - gpu_max.value, gpu_max.quality),
            };
        }
        for (h, hall) in topo.halls.iter().enumerate() {
            let it: f64 = hall.racks.clone().map(|r| self.est.racks[r].it_kw.value).sum();
            let heat: f64 = hall
                .cdus
                .clone()
                .map(|c| self.est.cdus[c].heat_to_liquid_kw.value)
                .sum();
            let margin = hall
                .racks
                .clone()
                .map(|r| self.est.racks[r].margin_k)
                .filter(|e| e.quality != EstQuality::Unavailable)
                .map(|e| e.value)
                .fold(f64::INFINITY, f64::min);
            let hq = &mut self.est.halls[h];
            hq.it_kw = Estimate::new(it, EstQuality::Measured);
            hq.heat_to_liquid_kw = Estimate::new(
                heat,
                if heat.is_finite() {
                    EstQuality::Measured
                } else {
                    EstQuality::Unavailable
                },
            );
            hq.margin_k = Estimate::new(if margin.is_finite() { margin } else { f64::NAN }, EstQuality::Measured);
        }
        self.counters.issues_active = self.active_issues().len() as u64;

        // --- calibration ------------------------------------------------------------------------
        if !learning && (!self.calibrated || now - self.last_cal_s >= self.cfg.recalibrate_every_s) {
            self.calibrate(now);
        }
        true
    }

    fn emit(&mut self, now: f64, sensor: SensorId, tr: Transition) {
        match tr {
            Transition::None => {}
            Transition::Raised(issue) => self.push_event(now, TwinEventKind::SensorImplausible { sensor, issue }),
            Transition::Cleared => self.push_event(now, TwinEventKind::SensorRecovered { sensor }),
        }
    }

    /// Fit every parameter from the samples gathered so far. Called automatically at the end of
    /// the learning window and every `recalibrate_every_s` after.
    pub fn calibrate(&mut self, now: f64) {
        let first = !self.calibrated;
        self.last_cal_s = now;
        self.counters.calibrations += 1;
        let mut failures = 0u64;
        let pen = 1e-3;
        for r in 0..self.np.topo.racks.len() {
            let c = self.np.topo.racks[r].cdu;
            let n = self.np.topo.cdus[c].racks.len().max(1) as f64;
            match self.samples.rack_thermal[r].fit(pen) {
                Ok(f) => {
                    // R at design flow: d(rise)/dp = c0 + c1 (design flow → feature factor 1).
                    let v = f.coef[0] + f.coef[1];
                    let half = ((f.ci[0].1 - f.ci[0].0).powi(2) + (f.ci[1].1 - f.ci[1].0).powi(2)).sqrt() / 2.0;
                    self.cal.rack_cold_plate_k_per_w[r] = Param {
                        value: v,
                        lo: v - half,
                        hi: v + half,
                        n: f.n,
                    };
                    self.cal.rack_thermal[r] = Some(f);
                }
                Err(_) => failures += 1,
            }
            let _ = n;
            let (s, k) = self.samples.rack_pickup[r];
            if k > 0.0 {
                self.cal.rack_pickup_k[r] = s / k;
            }
        }
        for c in 0..self.np.topo.cdus.len() {
            match self.samples.cdu_liq[c].fit(pen) {
                Ok(f) => {
                    // Heat into liquid ∝ rack power: the slope on rack power is f_liq.
                    self.cal.cdu_heat_to_liquid[c] = Param::from_coef(&f, 0);
                }
                Err(_) => failures += 1,
            }
            match self.samples.cdu_pump[c].fit(pen) {
                Ok(f) => {
                    let mut p = Param::from_coef(&f, 0);
                    p.value += f.intercept;
                    p.lo += f.intercept;
                    p.hi += f.intercept;
                    self.cal.cdu_pump_kw_at_design[c] = p;
                    self.cal.cdu_pump_fit[c] = Some(f);
                }
                Err(_) => failures += 1,
            }
            match self.samples.cdu_flow_speed[c].fit(pen) {
                Ok(f) => {
                    // Flow ∝ speed: report flow per % at the mean speed (slope + intercept/speed).
                    self.cal.cdu_flow_per_speed[c] = Param::from_coef(&f, 0);
                    let s = &self.samples.cdu_flow_speed[c];
                    let ms = s.x.iter().sum::<f64>() / s.len().max(1) as f64;
                    let mf = s.y.iter().sum::<f64>() / s.len().max(1) as f64;
                    if ms > 0.0 {
                        self.cal.cdu_flow_per_speed[c].value = mf / ms;
                    }
                }
                Err(_) => failures += 1,
            }
            if first {
                match self.samples.cdu_ua[c].fit(pen) {
                    Ok(f) => {
                        // UA at the learning window's mean flows: the mean measured resistance.
                        // The fit's features are nearly collinear over one window (flows, valve
                        // split and load move together: facility film vs 1/Q correlate ≈ 0.98), so
                        // its slopes are not trusted to move anything to other flows, not even as
                        // a whole: on hall-10k it learned a negative facility-film slope, so a
                        // fouled exchanger's opening valve raised its predicted resistance and hid
                        // most of the loss (6 % seen of a true 18 %), while a clean CDU whose
                        // valve moved off the window's range read 15–30 % "fouled". The fit only
                        // gives the residual spread; the fouling detector's reference is the
                        // mean resistance with physically fixed film scaling.
                        let s = &self.samples.cdu_ua[c];
                        let n = s.len() as f64;
                        let r = s.y.iter().sum::<f64>() / n;
                        let se = f.rmse / n.sqrt() * 1.645;
                        if r > 0.0 {
                            self.cal.cdu_ua_kw_per_k[c] = Param {
                                value: 1.0 / r,
                                lo: 1.0 / (r + se),
                                hi: 1.0 / (r - se).max(r * 0.5),
                                n: f.n,
                            };
                            self.cal.cdu_ua_fit[c] = Some(film_scaled_reference(s, r));
                        } else {
                            failures += 1;
                        }
                    }
                    Err(_) => failures += 1,
                }
                let s = &self.samples.cdu_flow_speed[c];
                if !s.is_empty() {
                    let base = (0..s.len())
                        .map(|i| (s.y[i] / s.x[i]).ln())
                        .filter(|v| v.is_finite())
                        .sum::<f64>()
                        / s.len() as f64;
                    self.pump_drift[c].base = base;
                }
            }
        }
        for h in 0..self.np.topo.halls.len() {
            match self.samples.hall_fan[h].fit(pen) {
                Ok(f) => self.cal.hall_fan_kw_at_full[h] = Param::from_coef(&f, 0),
                Err(_) => failures += 1,
            }
        }
        if first {
            // Per-GPU die-temperature model `T − T_inlet = a + b·P`, with each GPU's slope shrunk
            // towards its rack's pooled within-GPU slope (a GPU that stayed idle through the
            // learning window has no slope of its own).
            let pooled = |gs: std::ops::Range<usize>, sums: &[[f64; 5]]| {
                let (mut sxy, mut sxx) = (0.0, 0.0);
                for g in gs {
                    let s = sums[g];
                    if s[0] >= 2.0 {
                        sxx += s[3] - s[1] * s[1] / s[0];
                        sxy += s[4] - s[1] * s[2] / s[0];
                    }
                }
                (sxy, sxx)
            };
            let (hxy, hxx) = pooled(0..self.gpu_sums.len(), &self.gpu_sums);
            let b_site = if hxx > 0.0 { hxy / hxx } else { 0.0 };
            for rack in &self.np.topo.racks {
                let (rxy, rxx) = pooled(rack.gpus.clone(), &self.gpu_sums);
                let nr = rack.gpus.len().max(1) as f64;
                // Rack slope itself shrunk to the site's: prior weight of a (100 W)² spread per GPU.
                let prior_r = nr * 1e4 * 50.0;
                let b_rack = (rxy + prior_r * b_site) / (rxx + prior_r);
                for g in rack.gpus.clone() {
                    let s = self.gpu_sums[g];
                    let n = s[0];
                    if n >= 10.0 {
                        let sxx = s[3] - s[1] * s[1] / n;
                        let sxy = s[4] - s[1] * s[2] / n;
                        let lambda = n * 150.0f64.powi(2);
                        let b = (sxy + lambda * b_rack) / (sxx + lambda);
                        let a = (s[2] - b * s[1]) / n;
                        self.gpu_fit[g] = (a, b);
                    }
                }
            }
            // Residual baselines were learned against no redundant estimate for GPUs: relearn
            // them now that the per-GPU fits exist (they learn during the next learning span).
            for t in &mut self.gpu_tracks {
                *t = Track::default();
            }
            self.gpu_relearn_until = now + 6.0 * 3600.0;
            self.calibrated = true;
            self.push_event(now, TwinEventKind::Calibrated);
        }
        self.counters.calibration_failures += failures;
    }
}

/// Features of the hottest-GPU rise over the rack inlet: `[p, p·(q/q_design)^-0.8]`.
#[inline]
pub fn thermal_features(p_w: f64, flow_lpm: f64, design_flow_lpm: f64) -> [f64; 2] {
    let q = (flow_lpm / design_flow_lpm).max(0.05);
    [p_w, p_w * q.powf(-0.8)]
}
