//! `coolplane twin eval`: the digital twin trained on one period and tested on another
//! (different seed, period and climate), scored against the plant's truth.
//!
//! Three simulated runs, each plant + scheduler + the baseline controller (`vendor-default`):
//! 1. **train** (train climate, seed, period): the twin learns online; the facility model and the
//!    load forecaster are fitted on it.
//! 2. **test** (test climate, another seed and period, sensor faults injected): a fresh twin
//!    commissions itself online during the warm-up (per-device parameters are the new plant's),
//!    the facility model and forecaster come from training. Scored: facility-power CV-RMSE and
//!    NMBE (ASHRAE Guideline 14, hourly), PUE MAE (hourly), hottest-GPU MAE 15 min ahead (what-if
//!    model under the setpoints in force and the load forecast), forecast skill, sensor-fault
//!    precision and recall, maintenance false alarms. The forecaster is given the scheduler's
//!    outlook ([`Cluster::outlook`]: its running jobs and queue replayed on the run times it
//!    expects, off the truth by [`EvalOptions::runtime_error`]) and, as a bound, the true busy
//!    count at the target time.
//! 3. **fouling** (test climate, another seed): 20 % UA loss on CDU 0 from day 3; days until the
//!    twin flags it.
//!
//! The twin sees only `Measurements`; the truth used for scoring comes from the plant here.

use crate::spec::{EventSpec, Scenario, ScenarioError, ScenarioSpec};
use coolplane_controller::{Controller, ControllerConfig};
use coolplane_core::weather::WeatherSample;
use coolplane_sim_plant::cluster::Cluster;
use coolplane_sim_plant::faults::{FaultKind, SensorFailure, SensorPoint};
use coolplane_sim_plant::Plant;
use coolplane_twin::estimate::Maintenance;
use coolplane_twin::forecast::{evaluate, Exogenous, Forecaster};
use coolplane_twin::health::SensorId;
use coolplane_twin::whatif::{hall_state, Candidate, FacilityModel, HallModel};
use coolplane_twin::{Nameplate, Twin, TwinConfig, TwinEventKind};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalOptions {
    /// Built-in site name or site file.
    pub site: String,
    /// Weather of the training run (`synthetic` or an EPW path).
    pub train_weather: String,
    /// Weather of the test and fouling runs.
    pub test_weather: String,
    /// Seed of the training run (test uses `seed + 1`, fouling `seed + 2`).
    pub seed: u64,
    /// First day of the training period (0-based day of year).
    pub train_start_day: f64,
    /// Days trained.
    pub train_days: f64,
    /// First day of the test period.
    pub test_start_day: f64,
    /// Days tested.
    pub test_days: f64,
    /// Days of the fouling run (0 to skip it).
    pub fouling_days: f64,
    /// Workload: `synthetic`, `helios` or `alibaba-pods`.
    pub workload: String,
    /// Trace file for `helios` / `alibaba-pods`.
    pub trace: Option<String>,
    /// Step, s.
    pub step_s: f64,
    /// Days of an extra clean run (no faults injected; test climate, seed + 3, from
    /// `clean_start_day`) that counts every maintenance and sensor event (0 to skip it).
    pub clean_days: f64,
    /// First day of the clean run.
    pub clean_start_day: f64,
    /// Step of the clean run, s (a year at 60 s is slow; the twin takes any step).
    pub clean_step_s: f64,
    /// Error of the run times the scheduler expects (its duration predictor's, or its users'
    /// estimates): each job's expected run time is its true one times `exp(σ·z)`, `z` standard
    /// normal, seeded per job; this is σ (0: the scheduler knows every run time).
    pub runtime_error: f64,
}

/// The scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Site.
    pub site: String,
    /// Training run.
    pub train: String,
    /// Test run.
    pub test: String,
    /// Workload.
    pub workload: String,
    /// Facility power CV-RMSE, hourly, %.
    pub cv_rmse_pct: f64,
    /// Facility power NMBE, hourly, %.
    pub nmbe_pct: f64,
    /// PUE mean absolute error, hourly: the twin's PUE (its predicted facility power over the
    /// metered IT power it was given) against the plant's true PUE (true facility over true IT).
    pub pue_mae: f64,
    /// The same with the predicted facility power over the plant's *true* IT power: the IT
    /// meter's own error then counts in full, as a facility-power error, where in the twin's
    /// PUE it scales only the overhead (the definition before; kept for comparison).
    #[serde(default)]
    pub pue_mae_over_true_it: f64,
    /// Hottest-GPU temperature MAE 15 min ahead against the plant's true die temperatures (the
    /// model is learned from the GPUs' reports: integer °C with per-GPU bias), K.
    pub hottest_gpu_mae_k: f64,
    /// The same against the hottest GPU *reported* (includes the injected GPU-sensor faults:
    /// a drifting or stuck GPU sensor is in that maximum, so this is not a model error alone), K.
    pub hottest_gpu_mae_reported_k: f64,
    /// Hottest-GPU MAE one plant step ahead at the load of the moment, against the true die:
    /// without the load's change over 15 minutes (which the 15-minute figure also carries). With
    /// the offset-free what-if it is mostly the error of the present reading it is anchored to
    /// (the hottest reported die of each rack), K.
    pub hottest_gpu_mae_next_step_k: f64,
    /// The σ of the scheduler's run-time error the forecast was given ([`EvalOptions::runtime_error`]).
    #[serde(default)]
    pub runtime_error: f64,
    /// Site IT forecast skill at 15 min.
    pub forecast_skill_15min: f64,
    /// Site IT forecast skill at 1 h.
    pub forecast_skill_1h: f64,
    /// Skill of seasonal-naive at 1 h (for reference).
    pub seasonal_naive_skill_1h: f64,
    /// Skill at 1 h of the same forecaster trained and tested with the *true* busy-GPU count at
    /// the target time in place of the scheduler's outlook (every future arrival and end
    /// known): not deployable, it bounds what any knowledge of the job mix can add; the rest of
    /// the error is utilisation within the jobs.
    #[serde(default)]
    pub forecast_skill_1h_known_busy: f64,
    /// p90 coverage at 1 h.
    pub p90_coverage_1h: f64,
    /// Sensor-fault detection precision.
    pub fault_precision: f64,
    /// Sensor-fault detection recall.
    pub fault_recall: f64,
    /// Sensor faults injected.
    pub faults_injected: usize,
    /// Sensor events raised.
    pub sensor_events: usize,
    /// Days from a 20 % UA loss to its flag (NaN: not flagged or not run).
    pub fouling_detect_days: f64,
    /// Maintenance events where nothing was injected (test run + other CDUs of the fouling run).
    pub maintenance_false_alarms: usize,
    /// Days over which those false alarms were counted (CDU-days / CDUs).
    pub false_alarm_days: f64,
    /// Heat-to-liquid fraction calibrated on CDU 0 of the test plant, with interval.
    pub heat_to_liquid_cdu0: (f64, f64, f64),
    /// What-if: candidate 15-minute horizons per second, one core.
    pub whatif_horizons_per_s: f64,
    /// Mean error of the predicted heat-rejection + facility pumps + chiller power, kW.
    pub cooling_rest_bias_kw: f64,
    /// Mean error of the predicted other overhead (electrical losses, air handling, misc), kW.
    pub other_overhead_bias_kw: f64,
    /// The hourly PUE error by part, mean absolute: [heat rejection + facility pumps + chillers,
    /// other overhead against its truth, CDU pumps, and the meters: the overhead they read
    /// (facility − IT) against the true overhead] (each part's error over the hour's IT). The
    /// first three add up to the error of the predicted overhead; the fourth, the error in what
    /// the other overhead is learned from, is for scale and does not add.
    #[serde(default)]
    pub pue_mae_by_part: [f64; 4],
    /// The maintenance events that were false alarms.
    pub false_alarm_events: Vec<String>,
    /// Sensor events by sensor kind and issue.
    pub sensor_events_by_kind: std::collections::BTreeMap<String, usize>,
    /// The clean run (None: not run).
    pub clean: Option<CleanReport>,
    /// Wall time of the evaluation, s.
    pub wall_s: f64,
}

/// A run of the plant with nothing injected: every maintenance event is a false alarm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CleanReport {
    /// Weather, seed and days.
    pub run: String,
    /// Days run (after the twin's commissioning day).
    pub days: f64,
    /// Step, s.
    pub step_s: f64,
    /// Maintenance events (all false alarms).
    pub maintenance_false_alarms: usize,
    /// Those events.
    pub maintenance_events: Vec<String>,
    /// Sensor events raised (all false alarms: no sensor fault injected).
    pub sensor_false_alarms: usize,
    /// Sensor events by kind and issue.
    pub sensor_events_by_kind: std::collections::BTreeMap<String, usize>,
    /// Largest lower end of any CDU's UA-loss interval seen (how close to an alarm it came).
    pub max_ua_loss_lo: f64,
    /// Largest mean UA loss of any CDU's window seen.
    pub max_ua_loss_mean: f64,
    /// The plant's true natural fouling at the end, largest CDU, relative UA loss (for reference;
    /// the threshold is 10 %).
    pub true_natural_fouling_max: f64,
    /// Wall time of the clean run, s.
    pub wall_s: f64,
}

/// Evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A scenario could not be built.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The plant refused the site.
    #[error("plant: {0}")]
    Plant(String),
    /// A model could not be fitted.
    #[error("{0}")]
    Fit(String),
    /// Plot output failed.
    #[error("plot: {0}")]
    Plot(String),
}

fn scenario(
    o: &EvalOptions,
    weather: &str,
    seed: u64,
    start: f64,
    days: f64,
    events: Vec<EventSpec>,
    base: &Path,
) -> Result<Scenario, EvalError> {
    let mut spec = ScenarioSpec::default_for_site(&o.site);
    spec.scenario.name = "twin-eval".into();
    spec.scenario.seed = seed;
    spec.scenario.step_s = o.step_s;
    spec.weather.source = weather.into();
    spec.weather.start_day = Some(start);
    spec.weather.days = Some(days);
    spec.workload.kind = o.workload.clone();
    spec.workload.path = o.trace.clone();
    spec.events = events;
    spec.check()?;
    Ok(spec.resolve(base)?)
}

/// Per-step record of a run.
#[derive(Debug, Default)]
struct Trace {
    t_s: Vec<f64>,
    it_meter_kw: Vec<f64>,
    it_true_kw: Vec<f64>,
    fac_true_kw: Vec<f64>,
    fac_pred_kw: Vec<f64>,
    /// Per scored step (aligned with `fac_pred_kw`): the metered IT power the prediction was
    /// given, kW (NaN where not predicted).
    it_in_kw: Vec<f64>,
    gpu_max_true_c: Vec<f64>,
    gpu_max_meas_c: Vec<f64>,
    dry_bulb_c: Vec<f64>,
    /// GPUs busy (the cluster's count at each step).
    busy: Vec<f64>,
    /// The scheduler's outlook at each step: GPUs it expects busy [`OUTLOOK_S`] ahead.
    outlook: Vec<[f64; 3]>,
    /// (index, predicted hottest GPU at index + 15 min)
    hot_pred: Vec<(usize, f64)>,
    /// (index, predicted hottest GPU one step later at the load of the moment)
    hot_next: Vec<(usize, f64)>,
    /// Sums of (predicted, metered) rest-of-cooling and other overhead, kW, and their count.
    parts: [f64; 5],
    /// Per scored step (aligned with `fac_pred_kw`): predicted − metered rest-of-cooling, other
    /// overhead and CDU pumps, and metered − true facility power, kW (NaN where not predicted).
    part_err_kw: Vec<[f64; 4]>,
}

struct RunOut {
    trace: Trace,
    twin: Twin,
    fac: FacilityModel,
    events: Vec<coolplane_twin::TwinEvent>,
    score_k: usize,
}

/// Horizons of the scheduler's outlook recorded each step, s.
const OUTLOOK_S: [f64; 3] = [900.0, 3600.0, 4.0 * 3600.0];

/// Each job's expected run time, as the scheduler knows it: the true one times `exp(σ·z)`, with
/// `z` standard normal from a hash of the seed and the job (Box–Muller; no global RNG).
fn expected_runtimes(jobs: &[coolplane_sim_plant::workload::JobSpec], sigma: f64, seed: u64) -> Vec<f64> {
    let mix = |mut x: u64| {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    };
    let unit = |x: u64| ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    jobs.iter()
        .enumerate()
        .map(|(i, j)| {
            if sigma <= 0.0 {
                return j.duration_s;
            }
            let a = mix(seed ^ mix(i as u64));
            let b = mix(a);
            let z = (-2.0 * unit(a).ln()).sqrt() * (2.0 * std::f64::consts::PI * unit(b)).cos();
            j.duration_s * (sigma * z).exp()
        })
        .collect()
}

/// What is known at step `k` of a trace about step `k + h`: the weather forecast, and the
/// scheduler's outlook (busy GPUs expected then, interpolated between its horizons) against
/// the GPUs busy now.
fn exogenous(tr: &Trace, k: usize, h: usize, dt: f64) -> Exogenous {
    let busy = tr.busy.get(k).copied().unwrap_or(0.0);
    let hs = h as f64 * dt;
    let committed = tr.outlook.get(k).map_or(busy, |o| {
        let mut prev = (0.0, busy);
        for (&x, &y) in OUTLOOK_S.iter().zip(o) {
            if hs <= x {
                let w = (hs - prev.0) / (x - prev.0);
                return prev.1 + w * (y - prev.1);
            }
            prev = (x, y);
        }
        prev.1
    });
    Exogenous {
        dry_bulb_c: tr
            .dry_bulb_c
            .get(k + h)
            .or(tr.dry_bulb_c.get(k))
            .copied()
            .unwrap_or(f64::NAN),
        committed_gpus: committed,
        busy_gpus_now: busy,
    }
}

#[allow(clippy::too_many_arguments)]
fn simulate(
    sc: &Scenario,
    mut fac: FacilityModel,
    learn_fac: bool,
    forecaster: Option<&Forecaster>,
    weather_noise_seed: u64,
    runtime_error: f64,
) -> Result<RunOut, EvalError> {
    let site = &sc.site;
    let dt = sc.spec.scenario.step_s;
    let mut plant = Plant::new(site, sc.spec.scenario.seed).map_err(|e| EvalError::Plant(e.to_string()))?;
    for e in &sc.events {
        plant.schedule_fault(*e);
    }
    let mut cluster = Cluster::new(&plant);
    let policy = coolplane_policies::by_name("vendor-default").map_err(|e| EvalError::Plant(e.to_string()))?;
    let mut ctl = Controller::new(site, policy, ControllerConfig::default());
    let np = Nameplate::from_site(site);
    let mut twin = Twin::new(
        np,
        TwinConfig {
            learn_s: sc.warmup_s.max(6.0 * 3600.0),
            ..TwinConfig::default()
        },
    );
    let steps = (sc.end_s() / dt).round().max(1.0) as usize;
    let score_k = (sc.scoring_start_s() / dt).round() as usize;
    let mut tr = Trace::default();
    let mut events = Vec::new();
    let mut advice = None;
    let h15 = (900.0 / dt).round().max(1.0) as usize;
    let mut model: Option<HallModel> = None;
    let mut rng = weather_noise_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let jobs = sc.workload.jobs();
    let expected = expected_runtimes(jobs, runtime_error, weather_noise_seed);
    for k in 0..steps {
        let t = k as f64 * dt;
        if k == score_k {
            plant.start_scoring();
        }
        cluster.advance(t, &sc.workload, &mut plant, advice.as_ref());
        let actions = ctl.tick(t, plant.measurements());
        if actions.placement.is_some() {
            advice = actions.placement.clone();
        }
        let _ = ctl.drain_events();
        let m = plant.measurements();
        twin.update(m);
        events.extend(twin.drain_events());
        if learn_fac && k >= score_k {
            fac.observe(m);
        }
        let amb: WeatherSample = sc.weather.sample(sc.weather_time_s(t));
        // Weather forecast: the EPW with seeded noise (σ 1 K), as a forecast service would give it.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let noise = ((rng >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2.0 * 1.7;
        tr.dry_bulb_c.push(amb.dry_bulb_c + noise);
        tr.busy.push(cluster.stats().busy_gpus as f64);
        let o = cluster.outlook(
            &plant,
            t,
            jobs,
            &|j| expected.get(j).copied().unwrap_or(0.0),
            &OUTLOOK_S,
        );
        tr.outlook.push([o[0], o[1], o[2]]);
        if !learn_fac && k >= score_k && twin.calibrated() {
            let cal_model = model.get_or_insert_with(|| HallModel::from_twin(&twin, &fac));
            // Facility power predicted from IT, weather, setpoints and the calibrated pump curve.
            let pred =
                coolplane_twin::whatif::facility_inputs(m).and_then(|[it, db, wb, sp, rest_m, pumps_m, fac_m, hp_m]| {
                    let (rest, other) = fac.predict(it, db, wb, sp, coolplane_twin::whatif::assist_on_fraction(m))?;
                    tr.parts[0] += rest;
                    tr.parts[1] += rest_m;
                    tr.parts[2] += other;
                    tr.parts[3] += fac_m - it - rest_m - pumps_m - hp_m;
                    tr.parts[4] += 1.0;
                    let cal = twin.calibration();
                    let pumps: f64 = (0..m.cdus.len())
                        .map(|c| {
                            let q = twin.estimate().cdus[c].flow_lpm.value / twin.nameplate().cdu_design_flow_lpm[c];
                            cal.cdu_pump_fit[c]
                                .as_ref()
                                .map_or(f64::NAN, |f| f.predict(&[q.powi(3)]))
                        })
                        .sum();
                    let fac_now = plant.power().facility_w / 1e3;
                    let it_now = plant.power().it_w / 1e3;
                    // The other overhead is scored against its truth (the plant's facility − IT
                    // power less the sub-metered loads, which carry no noise), so that the
                    // first three parts add up to the error of the predicted overhead, the
                    // numerator of the twin's PUE − 1. The fourth is the two meters' own error
                    // in the overhead they read (what the other overhead is learned from), for
                    // scale: it does not add.
                    let other_true = fac_now - it_now - rest_m - pumps_m - hp_m;
                    tr.part_err_kw.push([
                        rest - rest_m,
                        other - other_true,
                        pumps - pumps_m,
                        (fac_m - it) - (fac_now - it_now),
                    ]);
                    tr.it_in_kw.push(it);
                    // A metered heat-reuse heat pump is an input, as the IT load is.
                    Some(it + rest + other + pumps + hp_m)
                });
            if pred.is_none() {
                tr.part_err_kw.push([f64::NAN; 4]);
                tr.it_in_kw.push(f64::NAN);
            }
            tr.fac_pred_kw.push(pred.unwrap_or(f64::NAN));
            if k % h15 == 0 {
                let st = hall_state(&twin, m);
                let n = m.cdus.len().max(1) as f64;
                let cand = Candidate {
                    cdu_supply_c: m.cdus.iter().map(|c| c.supply_setpoint_c.value).sum::<f64>() / n,
                    cdu_flow_frac: (0..m.cdus.len())
                        .map(|c| twin.estimate().cdus[c].flow_lpm.value / twin.nameplate().cdu_design_flow_lpm[c])
                        .sum::<f64>()
                        / n,
                    facility_supply_c: m.facilities[0].supply_setpoint_c.value,
                    gpu_cap_w: twin.nameplate().gpu_tdp_w,
                };
                let scale = match forecaster {
                    Some(f) if k as f64 * dt >= 90_000.0 => {
                        let fc = f.forecast(&tr.it_meter_kw, tr.it_meter_kw.len() - 1, t - dt, &|kk, hh| {
                            exogenous(&tr, kk, hh, dt)
                        });
                        fc.first()
                            .copied()
                            .flatten()
                            .map(|f| (f.p50 / f.persistence).clamp(0.5, 1.5))
                            .unwrap_or(1.0)
                    }
                    _ => 1.0,
                };
                let out = cal_model.simulate(&st, &vec![scale; h15], dt, &cand);
                tr.hot_pred.push((tr.t_s.len() + h15, out.hottest_gpu_end_c));
                let next = cal_model.simulate(&st, &[1.0], dt, &cand);
                tr.hot_next.push((tr.t_s.len() + 1, next.hottest_gpu_end_c));
            }
        } else if !learn_fac && k >= score_k {
            tr.fac_pred_kw.push(f64::NAN);
            tr.part_err_kw.push([f64::NAN; 4]);
            tr.it_in_kw.push(f64::NAN);
        }
        plant.step(dt, &amb, &actions);
        tr.t_s.push(t);
        tr.it_meter_kw.push(m_it(&plant));
        tr.it_true_kw.push(plant.power().it_w / 1e3);
        tr.fac_true_kw.push(plant.power().facility_w / 1e3);
        tr.gpu_max_true_c
            .push(plant.true_gpu_temps_c().iter().copied().fold(f32::MIN, f32::max) as f64);
        tr.gpu_max_meas_c.push(
            plant
                .measurements()
                .gpus
                .temp_c
                .iter()
                .copied()
                .filter(|v| v.is_finite())
                .fold(f32::MIN, f32::max) as f64,
        );
    }
    Ok(RunOut {
        trace: tr,
        twin,
        fac,
        events,
        score_k,
    })
}

fn m_it(plant: &Plant) -> f64 {
    let v = plant.measurements().meter.it_power_kw.value;
    if v.is_finite() {
        v
    } else {
        f64::NAN
    }
}

/// The sensor faults injected in the test period; on a two-phase immersion site also a tank's
/// pressure gauge drifting low (the one that would hide a rising tank).
fn sensor_faults(gpus: u32, cdus: u32, tank_cdus: &[u32]) -> Vec<EventSpec> {
    let c = |i: u32| i % cdus.max(1);
    let mk = |s: f64, e: f64, point, failure| EventSpec {
        start_h: s,
        end_h: Some(e),
        fault: FaultKind::Sensor { point, failure },
    };
    let mut v = vec![
        mk(
            8.0,
            40.0,
            SensorPoint::CduSupplyTemp(c(1)),
            SensorFailure::Drift { rate_per_h: 0.3 },
        ),
        mk(14.0, 50.0, SensorPoint::CduReturnTemp(c(2)), SensorFailure::Stuck),
        mk(
            20.0,
            60.0,
            SensorPoint::CduFlow(c(3)),
            SensorFailure::Drift { rate_per_h: 1.0 },
        ),
        mk(
            26.0,
            70.0,
            SensorPoint::FacilitySupplyTemp(0),
            SensorFailure::Drift { rate_per_h: 0.3 },
        ),
        mk(32.0, 80.0, SensorPoint::GpuTemp(gpus / 3), SensorFailure::Stuck),
        mk(
            38.0,
            90.0,
            SensorPoint::GpuTemp(gpus / 2 + 7),
            SensorFailure::Drift { rate_per_h: 0.5 },
        ),
        mk(44.0, 48.0, SensorPoint::CduSupplyTemp(c(5)), SensorFailure::Sentinel),
        mk(50.0, 54.0, SensorPoint::CduFlow(c(7)), SensorFailure::Dropout),
    ];
    if !tank_cdus.is_empty() {
        v.push(mk(
            10.0,
            46.0,
            SensorPoint::TankPressure(tank_cdus[9 % tank_cdus.len()]),
            SensorFailure::Drift { rate_per_h: -0.5 },
        ));
    }
    v
}

fn matches(id: SensorId, p: SensorPoint) -> bool {
    match (id, p) {
        (SensorId::CduSupplyTemp(a), SensorPoint::CduSupplyTemp(b))
        | (SensorId::CduReturnTemp(a), SensorPoint::CduReturnTemp(b))
        | (SensorId::CduFlow(a), SensorPoint::CduFlow(b))
        | (SensorId::FacilitySupplyTemp(a), SensorPoint::FacilitySupplyTemp(b))
        | (SensorId::GpuTemp(a), SensorPoint::GpuTemp(b))
        | (SensorId::TankPressure(a), SensorPoint::TankPressure(b)) => a == b,
        (
            SensorId::CduLoop(a),
            SensorPoint::CduSupplyTemp(b) | SensorPoint::CduReturnTemp(b) | SensorPoint::CduFlow(b),
        ) => a == b,
        _ => false,
    }
}

/// Run the evaluation. `out_dir`: write predicted-vs-actual plots there.
pub fn eval(
    o: &EvalOptions,
    base: &Path,
    out_dir: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<EvalReport, EvalError> {
    let wall = Instant::now();
    // 1. Train.
    progress("train run");
    let train_sc = scenario(
        o,
        &o.train_weather,
        o.seed,
        o.train_start_day,
        o.train_days,
        vec![],
        base,
    )?;
    // The heat-rejection model learns against the coils' air: the pads' nameplate effectiveness.
    let eff = coolplane_twin::whatif::pads_effectiveness(
        &train_sc.site,
        &coolplane_core::topology::Topology::new(&train_sc.site),
    )
    .unwrap_or(0.0);
    let train = simulate(
        &train_sc,
        FacilityModel::with_assist_effectiveness(eff),
        true,
        None,
        o.seed,
        o.runtime_error,
    )?;
    let mut fac = train.fac;
    fac.fit().map_err(|e| EvalError::Fit(format!("facility model: {e}")))?;
    let dt = o.step_s;
    let tt = &train.trace;
    let exo_train = |k: usize, h: usize| exogenous(tt, k, h, dt);
    let forecaster = Forecaster::train(&tt.it_meter_kw, dt, 0.0, &[900.0, 3600.0, 4.0 * 3600.0], &exo_train)
        .map_err(|e| EvalError::Fit(e.to_string()))?;
    // The bound: the true busy count at the target time in place of the outlook.
    let known_busy = |tr: &Trace, k: usize, h: usize| Exogenous {
        committed_gpus: tr.busy.get(k + h).or(tr.busy.get(k)).copied().unwrap_or(0.0),
        ..exogenous(tr, k, h, dt)
    };
    let forecaster_known = Forecaster::train(&tt.it_meter_kw, dt, 0.0, &[3600.0], &|k, h| known_busy(tt, k, h))
        .map_err(|e| EvalError::Fit(e.to_string()))?;

    // 2. Test with sensor faults.
    progress(&format!(
        "test run (train done after {:.1} s)",
        wall.elapsed().as_secs_f64()
    ));
    let np_probe = Nameplate::from_site(&train_sc.site);
    let faults = sensor_faults(
        np_probe.topo.gpu_count as u32,
        np_probe.topo.cdus.len() as u32,
        &np_probe
            .tank_saturation
            .iter()
            .enumerate()
            .filter_map(|(c, s)| s.map(|_| c as u32))
            .collect::<Vec<_>>(),
    );
    let test_sc = scenario(
        o,
        &o.test_weather,
        o.seed + 1,
        o.test_start_day,
        o.test_days,
        faults,
        base,
    )?;
    let test = simulate(
        &test_sc,
        fac.clone(),
        false,
        Some(&forecaster),
        o.seed + 1,
        o.runtime_error,
    )?;
    let t = &test.trace;
    let sk = test.score_k;
    // Hourly facility power.
    let hour = (3600.0 / dt).round() as usize;
    let (mut act_h, mut pred_h, mut pue_err, mut pue_err_true_it) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let n_scored = t.fac_pred_kw.len();
    let mut i = 0;
    while i + hour <= n_scored {
        let a: f64 = (i..i + hour).map(|j| t.fac_true_kw[sk + j]).sum::<f64>() / hour as f64;
        let p: f64 = (i..i + hour).map(|j| t.fac_pred_kw[j]).sum::<f64>() / hour as f64;
        let it: f64 = (i..i + hour).map(|j| t.it_true_kw[sk + j]).sum::<f64>() / hour as f64;
        let it_in: f64 = (i..i + hour).map(|j| t.it_in_kw[j]).sum::<f64>() / hour as f64;
        if p.is_finite() && a.is_finite() && it > 0.0 && it_in > 0.0 {
            act_h.push(a);
            pred_h.push(p);
            // The twin's PUE is its predicted facility power over the metered IT power it was
            // given; the plant's is its true facility power over its true IT power.
            pue_err.push((p / it_in - a / it).abs());
            pue_err_true_it.push((p / it - a / it).abs());
        }
        i += hour;
    }
    let n = act_h.len().max(1) as f64;
    let mean_a = act_h.iter().sum::<f64>() / n;
    let rmse = (act_h.iter().zip(&pred_h).map(|(a, p)| (a - p).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    let cv_rmse_pct = 100.0 * rmse / mean_a;
    let nmbe_pct = 100.0 * act_h.iter().zip(&pred_h).map(|(a, p)| a - p).sum::<f64>() / ((n - 1.0).max(1.0) * mean_a);
    let pue_mae = pue_err.iter().sum::<f64>() / pue_err.len().max(1) as f64;
    let pue_mae_over_true_it = pue_err_true_it.iter().sum::<f64>() / pue_err_true_it.len().max(1) as f64;
    // The same hourly PUE error split by the facility model's parts (where it comes from).
    let mut part_mae = [0.0f64; 4];
    let mut part_n = 0usize;
    let mut i = 0;
    while i + hour <= n_scored {
        let it: f64 = (i..i + hour).map(|j| t.it_true_kw[sk + j]).sum::<f64>() / hour as f64;
        let mean = |c: usize| (i..i + hour).map(|j| t.part_err_kw[j][c]).sum::<f64>() / hour as f64;
        let e = [mean(0), mean(1), mean(2), mean(3)];
        if it > 0.0 && e.iter().all(|x| x.is_finite()) {
            for (m, x) in part_mae.iter_mut().zip(e) {
                *m += (x / it).abs();
            }
            part_n += 1;
        }
        i += hour;
    }
    for m in &mut part_mae {
        *m /= part_n.max(1) as f64;
    }
    // Mean absolute error of (index, prediction) pairs against a series, where both are finite.
    let mae = |pred: &[(usize, f64)], actual: &[f64]| {
        let (sum, n) = pred
            .iter()
            .filter_map(|&(j, p)| actual.get(j).map(|&a| (p, a)))
            .filter(|(p, a)| p.is_finite() && a.is_finite())
            .fold((0.0, 0usize), |(s, n), (p, a)| (s + (p - a).abs(), n + 1));
        sum / n.max(1) as f64
    };
    let hottest_gpu_mae_true_k = mae(&t.hot_pred, &t.gpu_max_true_c);
    let hottest_gpu_mae_next_step_k = mae(&t.hot_next, &t.gpu_max_true_c);
    let hottest_gpu_mae_k = mae(&t.hot_pred, &t.gpu_max_meas_c);
    // Forecast skill on the scored part of the test run.
    // Give the forecaster a day of history before the scored window (the warm-up).
    let hist0 = sk.saturating_sub((86_400.0 / dt) as usize + hour);
    let scores = evaluate(&forecaster, &t.it_meter_kw[hist0..], hist0 as f64 * dt, &|k, h| {
        exogenous(t, hist0 + k, h, dt)
    });
    let scores_known = evaluate(
        &forecaster_known,
        &t.it_meter_kw[hist0..],
        hist0 as f64 * dt,
        &|k, h| known_busy(t, hist0 + k, h),
    );
    // Sensor faults.
    let score_t0 = sk as f64 * dt;
    let injected: Vec<(SensorPoint, f64, f64)> = test_sc
        .events
        .iter()
        .filter_map(|e| match e.fault {
            FaultKind::Sensor { point, .. } => Some((point, e.start_s, e.end_s.unwrap_or(f64::INFINITY))),
            _ => None,
        })
        .collect();
    let sensor_events: Vec<(f64, SensorId)> = test
        .events
        .iter()
        .filter(|e| e.t_s >= score_t0)
        .filter_map(|e| match e.kind {
            TwinEventKind::SensorImplausible { sensor, .. } => Some((e.t_s, sensor)),
            _ => None,
        })
        .collect();
    let matched = |(ts, id): &(f64, SensorId)| {
        injected
            .iter()
            .any(|(p, s, e)| matches(*id, *p) && *ts >= *s && *ts <= *e + 7200.0)
    };
    let mut by_kind = std::collections::BTreeMap::new();
    for e in test.events.iter().filter(|e| e.t_s >= score_t0) {
        if let TwinEventKind::SensorImplausible { sensor, issue } = e.kind {
            let name = format!("{sensor:?}").split('(').next().unwrap_or("?").to_string();
            *by_kind.entry(format!("{name}/{issue:?}")).or_insert(0) += 1;
        }
    }
    let tp = sensor_events.iter().filter(|e| matched(e)).count();
    let fault_precision = if sensor_events.is_empty() {
        f64::NAN
    } else {
        tp as f64 / sensor_events.len() as f64
    };
    let found = injected
        .iter()
        .filter(|(p, s, e)| {
            sensor_events
                .iter()
                .any(|(ts, id)| matches(*id, *p) && *ts >= *s && *ts <= *e + 7200.0)
        })
        .count();
    let fault_recall = found as f64 / injected.len().max(1) as f64;
    let mut maintenance_events: Vec<String> = Vec::new();
    for e in &test.events {
        if let TwinEventKind::Maintenance { cdu, finding, loss } = e.kind {
            maintenance_events.push(format!(
                "test t {:.1} h: CDU {cdu} {finding:?} {:.0} %",
                e.t_s / 3600.0,
                loss * 100.0
            ));
        }
    }
    let mut false_alarms = maintenance_events.len();
    let ncdu = test.twin.nameplate().topo.cdus.len();
    let mut fa_cdu_days = o.test_days * ncdu as f64;
    let h2l = test.twin.calibration().cdu_heat_to_liquid[0];

    // 3. Fouling.
    let mut fouling_detect_days = f64::NAN;
    if o.fouling_days > 0.0 {
        progress(&format!(
            "fouling run (test done after {:.1} s)",
            wall.elapsed().as_secs_f64()
        ));
        let onset_h = 48.0;
        let ev = vec![EventSpec {
            start_h: onset_h,
            end_h: None,
            fault: FaultKind::HxFouling {
                cdu: 0,
                ua_loss_pct: 20.0,
            },
        }];
        let fsc = scenario(
            o,
            &o.test_weather,
            o.seed + 2,
            o.test_start_day,
            o.fouling_days,
            ev,
            base,
        )?;
        let fr = simulate(&fsc, fac.clone(), false, None, o.seed + 2, o.runtime_error)?;
        let onset_s = fsc.scoring_start_s() + onset_h * 3600.0;
        for e in &fr.events {
            if let TwinEventKind::Maintenance { cdu, finding, .. } = e.kind {
                if cdu == 0 && finding == Maintenance::HxFouling && e.t_s >= onset_s && fouling_detect_days.is_nan() {
                    fouling_detect_days = (e.t_s - onset_s) / 86_400.0;
                } else if !(cdu == 0 && e.t_s >= onset_s) {
                    false_alarms += 1;
                    maintenance_events.push(format!("fouling run t {:.1} h: CDU {cdu} {finding:?}", e.t_s / 3600.0));
                }
            }
        }
        fa_cdu_days += o.fouling_days * (ncdu as f64 - 1.0);
    }

    // 4. A clean run: no faults; every maintenance or sensor event is a false alarm.
    let clean = if o.clean_days > 0.0 {
        progress(&format!(
            "clean run, {} days (fouling done after {:.1} s)",
            o.clean_days,
            wall.elapsed().as_secs_f64()
        ));
        Some(clean_run(o, base)?)
    } else {
        None
    };

    // 5. What-if speed: candidate 15-minute horizons at 60 s steps, one core.
    let model = HallModel::from_twin(&test.twin, &fac);
    let m_last = {
        let mut st = coolplane_twin::whatif::HallState {
            rack_it_kw: test.twin.estimate().racks.iter().map(|r| r.it_kw.value).collect(),
            rack_pmax_w: vec![test.twin.nameplate().gpu_tdp_w * 0.9; test.twin.nameplate().topo.racks.len()],
            cdu_supply_c: test.twin.estimate().cdus.iter().map(|c| c.supply_c.value).collect(),
            // The offset-free path is timed too: every rack has a reading now.
            cdu_flow_frac: vec![1.0; test.twin.nameplate().topo.cdus.len()],
            rack_gpu_max_c: vec![70.0; test.twin.nameplate().topo.racks.len()],
            dry_bulb_c: 25.0,
            wet_bulb_c: 20.0,
            assist_on_frac: 0.0,
            heat_pump_kw: 0.0,
        };
        st.rack_it_kw.iter_mut().for_each(|v| {
            if !v.is_finite() {
                *v = 0.0
            }
        });
        st
    };
    let scale = vec![1.0; 15];
    let t0 = Instant::now();
    let mut n_h = 0u64;
    let mut acc = 0.0;
    while t0.elapsed().as_secs_f64() < 1.0 {
        for j in 0..100 {
            let cand = Candidate {
                cdu_supply_c: 30.0 + (j % 15) as f64,
                cdu_flow_frac: 0.6 + (j % 5) as f64 * 0.1,
                facility_supply_c: 25.0 + (j % 7) as f64,
                gpu_cap_w: 600.0 + (j % 4) as f64 * 100.0,
            };
            acc += model.simulate(&m_last, &scale, 60.0, &cand).facility_kw;
            n_h += 1;
        }
    }
    let whatif_horizons_per_s = n_h as f64 / t0.elapsed().as_secs_f64();
    std::hint::black_box(acc);

    let s15 = scores.iter().find(|s| (s.horizon_s - 900.0).abs() < 1.0);
    let s60 = scores.iter().find(|s| (s.horizon_s - 3600.0).abs() < 1.0);
    let report = EvalReport {
        site: o.site.clone(),
        train: format!(
            "{} seed {} days {}+{}",
            train_sc.weather_name, o.seed, o.train_start_day, o.train_days
        ),
        test: format!(
            "{} seed {} days {}+{}",
            test_sc.weather_name,
            o.seed + 1,
            o.test_start_day,
            o.test_days
        ),
        workload: o.workload.clone(),
        cv_rmse_pct,
        nmbe_pct,
        pue_mae,
        pue_mae_over_true_it,
        hottest_gpu_mae_k: hottest_gpu_mae_true_k,
        hottest_gpu_mae_reported_k: hottest_gpu_mae_k,
        hottest_gpu_mae_next_step_k,
        runtime_error: o.runtime_error,
        forecast_skill_15min: s15.map_or(f64::NAN, |s| s.skill),
        forecast_skill_1h: s60.map_or(f64::NAN, |s| s.skill),
        seasonal_naive_skill_1h: s60.map_or(f64::NAN, |s| 1.0 - s.mae_seasonal_naive / s.mae_persistence),
        forecast_skill_1h_known_busy: scores_known.first().map_or(f64::NAN, |s| s.skill),
        p90_coverage_1h: s60.map_or(f64::NAN, |s| s.p90_coverage),
        fault_precision,
        fault_recall,
        faults_injected: injected.len(),
        sensor_events: sensor_events.len(),
        fouling_detect_days,
        maintenance_false_alarms: false_alarms,
        false_alarm_days: fa_cdu_days / ncdu.max(1) as f64,
        heat_to_liquid_cdu0: (h2l.value, h2l.lo, h2l.hi),
        whatif_horizons_per_s,
        cooling_rest_bias_kw: (t.parts[0] - t.parts[1]) / t.parts[4].max(1.0),
        other_overhead_bias_kw: (t.parts[2] - t.parts[3]) / t.parts[4].max(1.0),
        pue_mae_by_part: part_mae,
        false_alarm_events: maintenance_events,
        sensor_events_by_kind: by_kind,
        clean,
        wall_s: wall.elapsed().as_secs_f64(),
    };
    if let Some(dir) = out_dir {
        let hot_pts: Vec<(f64, f64, f64)> = t
            .hot_pred
            .iter()
            .filter_map(|&(j, p)| {
                t.gpu_max_true_c
                    .get(j)
                    .map(|&a| ((j as f64 * dt - score_t0) / 3600.0, p, a))
            })
            .collect();
        let fac_pts: Vec<(f64, f64, f64)> = pred_h
            .iter()
            .zip(&act_h)
            .enumerate()
            .map(|(i, (p, a))| (i as f64, *p, *a))
            .collect();
        plot_pair(
            dir,
            "twin_facility_power.png",
            "Facility power, hourly: twin (blue) vs plant (black), kW",
            &fac_pts,
        )?;
        plot_pair(
            dir,
            "twin_hottest_gpu.png",
            "Hottest GPU 15 min ahead: twin (blue) vs plant (black), °C",
            &hot_pts,
        )?;
    }
    Ok(report)
}

/// The clean run: plant + scheduler + baseline controller + twin, nothing injected.
pub fn clean_run(o: &EvalOptions, base: &Path) -> Result<CleanReport, EvalError> {
    let wall = Instant::now();
    let mut oc = o.clone();
    oc.step_s = o.clean_step_s;
    let sc = scenario(
        &oc,
        &o.test_weather,
        o.seed + 3,
        o.clean_start_day,
        o.clean_days,
        vec![],
        base,
    )?;
    let site = &sc.site;
    let dt = oc.step_s;
    let mut plant = Plant::new(site, sc.spec.scenario.seed).map_err(|e| EvalError::Plant(e.to_string()))?;
    let mut cluster = Cluster::new(&plant);
    let policy = coolplane_policies::by_name("vendor-default").map_err(|e| EvalError::Plant(e.to_string()))?;
    let mut ctl = Controller::new(site, policy, ControllerConfig::default());
    let mut twin = Twin::new(
        Nameplate::from_site(site),
        TwinConfig {
            learn_s: sc.warmup_s.max(6.0 * 3600.0),
            ..TwinConfig::default()
        },
    );
    let steps = (sc.end_s() / dt).round().max(1.0) as usize;
    let mut advice = None;
    let mut maintenance_events = Vec::new();
    let mut by_kind = std::collections::BTreeMap::new();
    let mut sensor = 0usize;
    let (mut max_lo, mut max_mean) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for k in 0..steps {
        let t = k as f64 * dt;
        cluster.advance(t, &sc.workload, &mut plant, advice.as_ref());
        let actions = ctl.tick(t, plant.measurements());
        if actions.placement.is_some() {
            advice = actions.placement.clone();
        }
        let _ = ctl.drain_events();
        twin.update(plant.measurements());
        for e in twin.drain_events() {
            match e.kind {
                TwinEventKind::Maintenance { cdu, finding, loss } => maintenance_events.push(format!(
                    "day {:.2}: CDU {cdu} {finding:?} {:.1} %",
                    e.t_s / 86_400.0,
                    loss * 100.0
                )),
                TwinEventKind::SensorImplausible { sensor: id, issue } => {
                    sensor += 1;
                    let name = format!("{id:?}").split('(').next().unwrap_or("?").to_string();
                    *by_kind.entry(format!("{name}/{issue:?}")).or_insert(0) += 1;
                }
                _ => {}
            }
        }
        if k % ((3600.0 / dt).round().max(1.0) as usize) == 0 {
            for v in twin.ua_loss().into_iter().flatten() {
                max_lo = max_lo.max(v.lo);
                max_mean = max_mean.max(v.mean);
            }
        }
        let amb: WeatherSample = sc.weather.sample(sc.weather_time_s(t));
        plant.step(dt, &amb, &actions);
    }
    let true_fouling = (0..twin.nameplate().topo.cdus.len())
        .map(|c| plant.true_cdu_fouling_frac(c))
        .fold(0.0f64, f64::max);
    Ok(CleanReport {
        run: format!(
            "{} seed {} days {}+{}",
            sc.weather_name,
            o.seed + 3,
            o.clean_start_day,
            o.clean_days
        ),
        days: (sc.end_s() - sc.warmup_s) / 86_400.0,
        step_s: dt,
        maintenance_false_alarms: maintenance_events.len(),
        maintenance_events,
        sensor_false_alarms: sensor,
        sensor_events_by_kind: by_kind,
        max_ua_loss_lo: max_lo,
        max_ua_loss_mean: max_mean,
        true_natural_fouling_max: true_fouling,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

fn plot_pair(dir: &Path, name: &str, title: &str, pts: &[(f64, f64, f64)]) -> Result<PathBuf, EvalError> {
    use plotters::prelude::*;
    crate::plot::ensure_font().map_err(|e| EvalError::Plot(e.to_string()))?;
    if !dir.is_dir() {
        return Err(EvalError::Plot(format!(
            "{} is not an existing directory",
            dir.display()
        )));
    }
    let pts: Vec<_> = pts
        .iter()
        .copied()
        .filter(|(x, p, a)| x.is_finite() && p.is_finite() && a.is_finite())
        .collect();
    if pts.is_empty() {
        return Err(EvalError::Plot(format!("{name}: nothing to plot")));
    }
    let (x0, x1) = (pts[0].0, pts[pts.len() - 1].0.max(pts[0].0 + 1.0));
    let lo = pts.iter().map(|p| p.1.min(p.2)).fold(f64::INFINITY, f64::min);
    let hi = pts.iter().map(|p| p.1.max(p.2)).fold(f64::NEG_INFINITY, f64::max);
    let pad = ((hi - lo) * 0.05).max(0.1);
    let path = dir.join(name);
    let r = (|| -> Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(&path, (1200, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut ch = ChartBuilder::on(&root)
            .caption(title, (crate::plot::FONT, 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, (lo - pad)..(hi + pad))?;
        ch.configure_mesh()
            .x_desc("h")
            .label_style((crate::plot::FONT, 12))
            .draw()?;
        ch.draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.2)), &BLACK))?;
        ch.draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.1)), &BLUE))?;
        root.present()?;
        Ok(())
    })();
    r.map_err(|e| EvalError::Plot(format!("{}: {e}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coolplane_sim_plant::workload::{JobKind, JobSpec, UtilProfile};

    fn job(i: u64, duration_s: f64) -> JobSpec {
        JobSpec {
            id: i,
            arrival_s: 0.0,
            gpus: 8,
            duration_s,
            kind: JobKind::Training,
            priority: 1,
            profile: UtilProfile::Constant(1.0),
        }
    }

    /// σ = 0 gives the true run times; σ = 0.5 gives factors spread like a log-normal of that σ,
    /// the same for the same seed and other for another.
    #[test]
    fn expected_run_times_are_off_by_a_seeded_log_normal_factor() {
        let jobs: Vec<JobSpec> = (0..4000).map(|i| job(i, 3600.0)).collect();
        assert!(expected_runtimes(&jobs, 0.0, 7).iter().all(|&d| d == 3600.0));
        let a = expected_runtimes(&jobs, 0.5, 7);
        assert_eq!(a, expected_runtimes(&jobs, 0.5, 7));
        assert_ne!(a, expected_runtimes(&jobs, 0.5, 8));
        let logs: Vec<f64> = a.iter().map(|d| (d / 3600.0).ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let sd = (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
        assert!(mean.abs() < 0.03, "mean of ln factor {mean}");
        assert!((sd - 0.5).abs() < 0.03, "σ of ln factor {sd}");
    }

    /// The committed GPUs at a horizon between the outlook's are interpolated from the busy count
    /// now; beyond the last they hold it.
    #[test]
    fn the_outlook_is_read_at_any_horizon() {
        let tr = Trace {
            busy: vec![1000.0],
            outlook: vec![[900.0, 600.0, 200.0]],
            dry_bulb_c: vec![20.0],
            ..Trace::default()
        };
        let at = |s: f64| exogenous(&tr, 0, (s / 150.0).round() as usize, 150.0).committed_gpus;
        assert_eq!(at(0.0), 1000.0);
        assert_eq!(at(900.0), 900.0);
        assert!((at(450.0) - 950.0).abs() < 1e-9);
        assert_eq!(at(3600.0), 600.0);
        assert!((at(2250.0) - 750.0).abs() < 1e-9);
        assert_eq!(at(14_400.0), 200.0);
        assert_eq!(at(30_000.0), 200.0);
        assert_eq!(exogenous(&tr, 0, 15, 60.0).busy_gpus_now, 1000.0);
        assert_eq!(exogenous(&tr, 0, 15, 60.0).dry_bulb_c, 20.0);
    }
}
