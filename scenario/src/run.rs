//! The harness loop: plant + cluster scheduler + controller, stepped in simulated time.
//!
//! Per step at plant time `t`: the scheduler brings the cluster to `t` (arrivals, completions,
//! failures, placement, utilisations); the controller ticks on the plant's last measurements;
//! the plant steps under the weather at `t` and the controller's actions. Scoring starts after the
//! warm-up; the KPIs come from the plant.
//!
//! The only clock read here is the wall clock around the controller's tick, for the
//! computation-time KPI and the progress ETA; it never feeds the simulation.

use crate::series::{SeriesRow, TimeSeries};
use crate::spec::Scenario;
use coolplane_controller::{Controller, ControllerConfig, ControllerEvent};
use coolplane_core::signals::RejectionMode;
use coolplane_policies::{EnergyPlan, Policy};
use coolplane_sim_plant::cluster::{Cluster, ClusterStats};
use coolplane_sim_plant::kpi::Kpis;
use coolplane_sim_plant::Plant;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Options of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunOptions {
    /// Record a time series.
    pub record: bool,
    /// At most this many rows are recorded (longer runs are sampled evenly).
    pub max_rows: usize,
    /// Controller tuning.
    pub controller: ControllerConfig,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            record: false,
            max_rows: 20_000,
            controller: ControllerConfig::default(),
        }
    }
}

/// Progress of a run, handed to the caller's callback about once per simulated hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Simulated time done, s.
    pub done_s: f64,
    /// Simulated time in all, s.
    pub total_s: f64,
    /// Wall time so far.
    pub elapsed: Duration,
}

impl Progress {
    /// Fraction done, 0–1.
    pub fn fraction(&self) -> f64 {
        if self.total_s > 0.0 {
            (self.done_s / self.total_s).clamp(0.0, 1.0)
        } else {
            1.0
        }
    }
    /// Estimated wall time left.
    pub fn eta(&self) -> Duration {
        let f = self.fraction();
        if f <= 0.0 {
            return Duration::ZERO;
        }
        self.elapsed.mul_f64((1.0 - f) / f)
    }
}

/// Largest energy-ledger error the check accepts, % of heat in. The ledger's terms come from
/// independent paths and close to round-off; a lost pump's heat (≈ 0.3 %) fails it.
pub const ENERGY_LEDGER_TOLERANCE_PCT: f64 = 0.01;
/// Largest |IT meter − rack path| the check accepts, % (the rack path sums GPU telemetry in whole
/// watts, so it differs from the meter by rounding only).
pub const IT_METER_TOLERANCE_PCT: f64 = 0.01;

/// The harness's checks on itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SelfChecks {
    /// The energy ledger of the liquid loops closes within [`ENERGY_LEDGER_TOLERANCE_PCT`].
    pub energy_balance_ok: bool,
    /// PUE ≥ 1 over the window and in every 15-minute window.
    pub pue_at_least_one: bool,
    /// The IT meter and the rack path agree over the window within [`IT_METER_TOLERANCE_PCT`].
    pub it_meter_equals_racks: bool,
}

impl SelfChecks {
    /// All checks hold.
    pub fn all_ok(&self) -> bool {
        self.energy_balance_ok && self.pue_at_least_one && self.it_meter_equals_racks
    }
}

/// Everything a run reports: what was run, the plant's KPIs, and the harness's checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// coolplane version.
    pub version: String,
    /// Site name.
    pub site: String,
    /// Electrical chain as described in the site file.
    pub electrical_chain: String,
    /// Scenario name.
    pub scenario: String,
    /// Weather source.
    pub weather: String,
    /// Scored period.
    pub period: String,
    /// Start of the scored period in the weather year, day of year (0-based).
    pub period_start_day: f64,
    /// Policy.
    pub policy: String,
    /// Seed.
    pub seed: u64,
    /// Step, s.
    pub step_s: f64,
    /// Warm-up, h.
    pub warmup_h: f64,
    /// GPUs on the site.
    pub gpus: usize,
    /// The plant's KPIs.
    #[serde(flatten)]
    pub kpis: Kpis,
    /// Controller computation time per step / simulated step (BOPTEST).
    pub compute_time_ratio: f64,
    /// Wall time of the whole run, s.
    pub wall_time_s: f64,
    /// Jobs started / completed / failed in the scored window and before.
    pub jobs_started: u64,
    /// Jobs that completed.
    pub jobs_completed: u64,
    /// Self-checks.
    pub checks: SelfChecks,
    /// Power leases of the simulated scheduler (scenarios with a `[budget]` table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::BudgetReport>,
    /// Accuracy of the policy's energy plans (policies that make them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_accuracy: Option<PlanAccuracy>,
    /// While a budget cut was in force (scored part; runs with a cut only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_cut: Option<CutReport>,
}

/// How a run held a budget cut (the site budget below the site file's), and the least work any
/// controller could have lost to hold it.
///
/// The least loss is an analytic bound evaluated on the run's own state each step: the GPU power
/// to shed is the excess the facility would show with no cap in force, `F + k·Σ(demand − draw) −
/// budget`, divided by `k = F / IT` (the facility watts per IT watt, taken as the average: the
/// marginal cooling watt is cheaper, so this understates the shed and the bound is low); the
/// least work lost for that shed is the value-optimal split under the site's performance curve
/// ([`coolplane_policies::dvfs::least_loss_shed`], exact for a piecewise-linear curve). Work is
/// counted as the plant counts it, utilisation × relative speed, from each GPU's true die
/// temperature, utilisation and the limit in force, against the same GPU at its default limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct CutReport {
    /// Time under a cut, h.
    pub cut_h: f64,
    /// Separate spells of the facility above the budget.
    pub exceed_events: u64,
    /// Longest spell, s.
    pub exceed_longest_s: f64,
    /// Energy above the budget, kWh.
    pub exceed_kwh: f64,
    /// Time above the budget in steps where neither new load (GPUs busier than the step
    /// before) nor a lower budget arrived: time a controller had to act and did not, s.
    /// A job start or a cut arrives unannounced (no lease asked first) and is over for a step.
    pub exceed_uncorrected_s: f64,
    /// Work the GPUs had to do, GPU-h at full speed.
    pub work_demanded_gpu_h: f64,
    /// Work lost to power caps, GPU-h.
    pub work_lost_gpu_h: f64,
    /// The least work any controller could lose to hold the budget, GPU-h (the bound above).
    pub least_lost_gpu_h: f64,
    /// Work lost beyond the least, % of the work demanded.
    pub excess_lost_pct: f64,
}

/// Accumulates a [`CutReport`] step by step.
struct CutMeter {
    r: CutReport,
    over_s: f64,
    /// Budget of the step before (none: no cut then).
    prev: Option<f64>,
    /// Utilisation of each GPU the step before.
    prev_util: Vec<f64>,
    demands: Vec<coolplane_policies::dvfs::GpuDemand>,
}

impl CutMeter {
    fn new() -> Self {
        Self {
            r: CutReport::default(),
            over_s: 0.0,
            prev: None,
            prev_util: Vec::new(),
            demands: Vec::new(),
        }
    }

    /// After a scored step of `dt` s.
    fn step(&mut self, plant: &Plant, dt: f64) {
        let site = plant.site();
        let m = plant.measurements();
        let budget_w = m.meter.power_budget_kw.value * 1e3;
        // A budget that is not a number is no cut.
        let under_cut = budget_w < site.site.power_budget_kw * 1e3 - 1.0;
        if !under_cut {
            self.over_s = 0.0;
            self.prev = None;
            self.prev_util.clear();
            return;
        }
        let r = &mut self.r;
        r.cut_h += dt / 3600.0;
        let pw = plant.power();
        if pw.facility_w > budget_w {
            if self.over_s == 0.0 {
                r.exceed_events += 1;
            }
            self.over_s += dt;
            r.exceed_longest_s = r.exceed_longest_s.max(self.over_s);
            r.exceed_kwh += (pw.facility_w - budget_w) * dt / 3.6e6;
        } else {
            self.over_s = 0.0;
        }
        let gpu = &site.gpu;
        let t = &m.gpus;
        let temps = plant.true_gpu_temps_c();
        self.demands.clear();
        let (mut shed, mut lost, mut demanded, mut new_load) = (0.0, 0.0, 0.0, 0.0);
        self.prev_util.resize(t.util.len(), f64::INFINITY);
        for (i, &util) in t.util.iter().enumerate() {
            let u = (util as f64).clamp(0.0, 1.0);
            // New load: GPUs busier than the step before (a job started; with the churn of a
            // busy cluster, the sum alone would hide starts behind ends).
            new_load += (u - self.prev_util[i]).max(0.0);
            self.prev_util[i] = u;
            if plant.gpu_is_down(i) || !u.is_finite() {
                self.demands.push(coolplane_policies::dvfs::GpuDemand {
                    demand_w: 0.0,
                    util: 0.0,
                });
                continue;
            }
            // The reference is the GPU at its default limit (TDP): a hot GPU demanding more than
            // TDP already runs a little slow there, with or without a budget.
            let temp = temps[i] as f64;
            let (d, full) = gpu.power_and_speed(temp, u, gpu.tdp_w);
            let (p, speed) = gpu.power_and_speed(temp, u, t.power_limit_w[i] as f64);
            shed += d - p;
            lost += u * (full - speed).max(0.0);
            demanded += u;
            self.demands
                .push(coolplane_policies::dvfs::GpuDemand { demand_w: d, util: u });
        }
        let k = if pw.it_w > 0.0 {
            (pw.facility_w / pw.it_w).max(1.0)
        } else {
            1.0
        };
        let need = ((pw.facility_w + k * shed - budget_w) / k).max(0.0);
        let (_, least) = coolplane_policies::dvfs::least_loss_shed(gpu, gpu.min_cap_w, &self.demands, need);
        let over = pw.facility_w > budget_w;
        let arrived = self.prev.is_none_or(|b| new_load > 0.5 || budget_w < b - 1.0);
        if over && !arrived {
            r.exceed_uncorrected_s += dt;
        }
        self.prev = Some(budget_w);
        r.work_demanded_gpu_h += demanded * dt / 3600.0;
        r.work_lost_gpu_h += lost * dt / 3600.0;
        r.least_lost_gpu_h += least * dt / 3600.0;
        r.excess_lost_pct = if r.work_demanded_gpu_h > 0.0 {
            100.0 * (r.work_lost_gpu_h - r.least_lost_gpu_h) / r.work_demanded_gpu_h
        } else {
            0.0
        };
    }
}

/// Predicted against realised, over each optimised plan's horizon (plans whose horizon ends
/// inside the run): mean facility power and the hottest GPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct PlanAccuracy {
    /// Plans made (optimised and fallback).
    pub plans: u64,
    /// Optimised plans scored.
    pub scored: u64,
    /// Mean absolute error of the mean facility power over the horizon, % of realised.
    pub facility_mape_pct: f64,
    /// Mean signed error (predicted − realised), % of realised.
    pub facility_bias_pct: f64,
    /// Mean absolute error of the hottest GPU over the horizon, K (predicted at today's load
    /// against the true hottest die).
    pub hottest_gpu_mae_k: f64,
    /// Mean signed error of the hottest GPU, K.
    pub hottest_gpu_bias_k: f64,
}

/// Score plans against per-step realised facility power (kW) and hottest die (°C) at times
/// `k·dt`.
pub fn plan_accuracy(plans: &[EnergyPlan], facility_kw: &[f64], hottest_c: &[f64], dt: f64) -> PlanAccuracy {
    let mut a = PlanAccuracy {
        plans: plans.len() as u64,
        ..Default::default()
    };
    for p in plans {
        let Some(pred) = p.predicted.filter(|_| p.status == "optimised") else {
            continue;
        };
        let k0 = (p.t_s / dt).round() as usize;
        let k1 = ((p.t_s + p.horizon_s) / dt).round() as usize;
        if k1 > facility_kw.len() || k1 <= k0 {
            continue;
        }
        let n = (k1 - k0) as f64;
        let fac = facility_kw[k0..k1].iter().sum::<f64>() / n;
        let hot = hottest_c[k0..k1].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !(fac > 0.0 && hot.is_finite() && pred.facility_kw.is_finite()) {
            continue;
        }
        let e = (pred.facility_kw - fac) / fac * 100.0;
        a.facility_mape_pct += e.abs();
        a.facility_bias_pct += e;
        a.hottest_gpu_mae_k += (pred.hottest_gpu_c - hot).abs();
        a.hottest_gpu_bias_k += pred.hottest_gpu_c - hot;
        a.scored += 1;
    }
    if a.scored > 0 {
        let n = a.scored as f64;
        a.facility_mape_pct /= n;
        a.facility_bias_pct /= n;
        a.hottest_gpu_mae_k /= n;
        a.hottest_gpu_bias_k /= n;
    }
    a
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Report with KPIs.
    pub report: RunReport,
    /// Recorded series (empty unless asked for).
    pub series: TimeSeries,
    /// The controller's events.
    pub events: Vec<ControllerEvent>,
    /// Scheduler counters.
    pub cluster: ClusterStats,
    /// The policy's energy plans (`plans.jsonl` under `--out`).
    pub plans: Vec<EnergyPlan>,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The site cannot be built into a plant.
    #[error(transparent)]
    Plant(#[from] coolplane_sim_plant::PlantError),
    /// The controller's configuration is invalid, or the policy cannot run under it (a tank band
    /// planned into the controller's tank guard): the same checks the daemon makes before it
    /// opens a device.
    #[error("controller configuration: {0}")]
    Config(String),
}

/// Run a resolved scenario under `policy`. `progress` is called about once per simulated hour.
/// The controller's configuration and the policy are checked against each other first
/// ([`ControllerConfig::validate`], [`ControllerConfig::check_policy`]), as the daemon does.
pub fn run(
    scenario: &Scenario,
    policy: Box<dyn Policy>,
    opts: &RunOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunResult, RunError> {
    opts.controller.validate().map_err(RunError::Config)?;
    opts.controller
        .check_policy(policy.as_ref())
        .map_err(RunError::Config)?;
    let wall = Instant::now();
    let site = &scenario.site;
    let seed = scenario.spec.scenario.seed;
    let dt = scenario.spec.scenario.step_s;
    let mut plant = Plant::new(site, seed)?;
    for e in &scenario.events {
        plant.schedule_fault(*e);
    }
    let mut cluster = Cluster::new(&plant);
    let policy_name = policy.label();
    // The perfect-knowledge reference: the harness searches copies of the true plant every hour
    // and hands the best setpoints to the policy through a handle of its own.
    let oracle = coolplane_policies::Oracle::from_label(&policy_name);
    let hold_cdu = oracle.as_ref().and_then(|o| o.hold_cdu);
    let policy: Box<dyn Policy> = match &oracle {
        Some(o) => Box::new(o.handle()),
        None => policy,
    };
    let oracle_limits = coolplane_policies::PlantLimits::from_site(site, plant.topology());
    let mut oracle_best: Option<[f64; 4]> = None;
    let mut controller = Controller::new(site, policy, opts.controller);
    let steps = ((scenario.end_s()) / dt).round().max(1.0) as u64;
    let score_step = (scenario.scoring_start_s() / dt).round() as u64;
    let rows_every = (steps / opts.max_rows.max(1) as u64).max(1);
    let mut series = TimeSeries::default();
    let mut events = Vec::new();
    let mut ctl_time = Duration::ZERO;
    let mut ctl_steps = 0u64;
    let hour_steps = ((3600.0 / dt).round() as u64).max(1);
    let slowdown = site.gpu.slowdown_c;
    let mut advice = None;
    let mut plans: Vec<EnergyPlan> = Vec::new();
    let (mut realised_kw, mut realised_hot) = (Vec::new(), Vec::new());
    let has_cut = scenario
        .events
        .iter()
        .any(|e| matches!(e.fault, coolplane_sim_plant::faults::FaultKind::BudgetCut { .. }));
    let mut cut = has_cut.then(CutMeter::new);
    let mut gate = scenario
        .spec
        .budget
        .map(|b| crate::budget::LedgerGate::new(site, b).with_announced(&scenario.events));
    for k in 0..steps {
        let t = k as f64 * dt;
        if k == score_step {
            plant.start_scoring();
        }
        if let Some(g) = gate.as_mut() {
            g.begin_step(t, plant.measurements());
        }
        let g = gate
            .as_mut()
            .map(|g| g as &mut dyn coolplane_sim_plant::cluster::PowerGate);
        cluster.advance_gated(t, &scenario.workload, &mut plant, advice.as_ref(), g);
        if let Some(o) = &oracle {
            if k % hour_steps == 0 {
                let (sp, why, best) = oracle_search(
                    scenario,
                    &plant,
                    &cluster,
                    advice.as_ref(),
                    &oracle_limits,
                    t,
                    oracle_best,
                    opts.controller.tank_guard_frac,
                    hold_cdu,
                );
                oracle_best = Some(best);
                o.set(sp, why);
            }
        }
        let t0 = Instant::now();
        let mut actions = controller.tick(t, plant.measurements());
        if let Some(g) = gate.as_mut() {
            g.apply(&mut actions);
        }
        if k >= score_step {
            ctl_time += t0.elapsed();
            ctl_steps += 1;
        }
        if actions.placement.is_some() {
            advice = actions.placement.clone();
        }
        if events.len() < 100_000 {
            events.extend(controller.drain_events());
        }
        plans.extend(controller.take_plans());
        let ambient = scenario.weather.sample(scenario.weather_time_s(t));
        plant.step(dt, &ambient, &actions);
        if let Some(c) = cut.as_mut().filter(|_| k >= score_step) {
            c.step(&plant, dt);
        }
        if !plans.is_empty() {
            realised_kw.push(plant.power().facility_w / 1e3);
            realised_hot.push(plant.true_gpu_temps_c().iter().copied().fold(f32::MIN, f32::max) as f64);
        } else {
            realised_kw.push(f64::NAN);
            realised_hot.push(f64::NAN);
        }
        if opts.record && (k % rows_every == 0 || k + 1 == steps) {
            series.rows.push(row(
                &plant,
                &controller,
                &cluster,
                (t + dt - scenario.scoring_start_s()) / 3600.0,
                slowdown,
            ));
        }
        if k % hour_steps == 0 || k + 1 == steps {
            progress(Progress {
                done_s: t + dt,
                total_s: scenario.end_s(),
                elapsed: wall.elapsed(),
            });
        }
    }
    if score_step >= steps {
        plant.start_scoring();
    }
    let kpis = plant.kpis();
    let checks = SelfChecks {
        energy_balance_ok: kpis.energy_balance_error_pct <= ENERGY_LEDGER_TOLERANCE_PCT,
        pue_at_least_one: kpis.pue >= 1.0 && (kpis.pue_p95_15min.is_nan() || kpis.pue_p95_15min >= 1.0),
        it_meter_equals_racks: kpis.it_meter_error_pct <= IT_METER_TOLERANCE_PCT,
    };
    let stats = cluster.stats();
    let report = RunReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        site: site.site.name.clone(),
        electrical_chain: site.electrical.chain.clone(),
        scenario: scenario.spec.scenario.name.clone(),
        weather: scenario.weather_name.clone(),
        period: scenario.period_name.clone(),
        period_start_day: scenario.period.start_s / 86_400.0,
        policy: policy_name,
        seed,
        step_s: dt,
        warmup_h: scenario.warmup_s / 3600.0,
        gpus: plant.topology().gpu_count,
        compute_time_ratio: if ctl_steps > 0 {
            ctl_time.as_secs_f64() / (ctl_steps as f64 * dt)
        } else {
            0.0
        },
        kpis,
        wall_time_s: wall.elapsed().as_secs_f64(),
        jobs_started: stats.started,
        jobs_completed: stats.completed,
        checks,
        budget: gate.as_ref().map(|g| g.report()),
        plan_accuracy: (!plans.is_empty()).then(|| plan_accuracy(&plans, &realised_kw, &realised_hot, dt)),
        budget_cut: cut.map(|c| c.r),
    };
    Ok(RunResult {
        report,
        series,
        events,
        cluster: stats,
        plans,
    })
}

/// One candidate of the oracle: the plant and scheduler copied, one hour simulated ahead under
/// constant setpoints (perfect knowledge of weather and jobs): CDU supply °C, flow fraction,
/// facility supply °C and heat-rejection mode code (0 auto, 1 dry, 2 adiabatic; sent only to
/// halls with adiabatic assist). Returns (facility kWh per full-speed GPU-hour of work, hottest
/// die °C, throttle GPU-s, highest tank pressure above atmospheric in kPa, 0 without tanks).
fn oracle_try(
    scenario: &Scenario,
    plant: &Plant,
    cluster: &Cluster,
    advice: Option<&coolplane_core::signals::PlacementAdvice>,
    limits: &coolplane_policies::PlantLimits,
    t0: f64,
    c: [f64; 4],
) -> (f64, f64, f64, f64) {
    use coolplane_core::signals::{Actions, CduCommand, FacilityCommand};
    let mode = RejectionMode::from_code(c[3] as u16).unwrap_or_default();
    let dt = scenario.spec.scenario.step_s;
    let mut p = plant.clone();
    let mut cl = cluster.clone();
    p.start_scoring();
    let sp = limits.uniform_setpoints(c[0], c[1], c[2]);
    let actions = Actions {
        cdus: sp
            .cdus
            .iter()
            .map(|x| CduCommand {
                supply_temp_setpoint_c: Some(x.supply_c),
                flow_setpoint_lpm: Some(x.flow_lpm),
                heartbeat: true,
            })
            .collect(),
        facilities: sp
            .facilities
            .iter()
            .zip(&limits.facilities)
            .map(|(&f, l)| FacilityCommand {
                supply_temp_setpoint_c: Some(f),
                rejection_mode: l.adiabatic_assist.then_some(mode),
                heartbeat: true,
            })
            .collect(),
        ..Default::default()
    };
    let steps = ((3600.0 / dt).round() as u64).max(1);
    for j in 0..steps {
        let t = t0 + j as f64 * dt;
        cl.advance(t, &scenario.workload, &mut p, advice);
        let ambient = scenario.weather.sample(scenario.weather_time_s(t));
        p.step(dt, &ambient, &actions);
    }
    let k = p.kpis();
    (
        k.facility_energy_kwh / (k.work_done_gpu_s / 3600.0).max(1e-9),
        k.gpu_temp_max_c,
        k.throttle_gpu_s,
        k.tank_pressure_max_gauge_kpa,
    )
}

/// How far below the controller's tank guard the oracle's trials must keep every tank's true
/// pressure, kPa: the guard acts on the measured gauge, whose noise (0.1 kPa standard deviation,
/// 0.1 kPa resolution in the plant) would otherwise engage it on an hour planned to just under it.
const ORACLE_TANK_MARGIN_KPA: f64 = 0.5;

/// The oracle's hourly search: coordinate descent over uniform (CDU supply, CDU flow fraction,
/// facility supply, heat-rejection mode where a hall has adiabatic assist) from the last hour's
/// best (design and auto at first), each candidate judged by
/// [`oracle_try`]; a candidate that throttles, takes a die within 3 K of slowdown or (two-phase
/// immersion) a tank to within [`ORACLE_TANK_MARGIN_KPA`] of the controller's pressure guard
/// (`tank_guard_frac` of the relief pressure) is refused: the guard is the plant's protection,
/// not a setpoint the oracle may lean on (its trials run the setpoints without the controller,
/// so the guard would otherwise act only on the real run, against the hour the oracle chose), and
/// it acts on the measured gauge, not on the true pressure the trials see. With `hold_cdu`
/// (`oracle:cdu-supply=S:cdu-flow=Q`) the CDU supply and flow are held there and only the
/// facility water and the mode are searched.
#[allow(clippy::too_many_arguments)]
fn oracle_search(
    scenario: &Scenario,
    plant: &Plant,
    cluster: &Cluster,
    advice: Option<&coolplane_core::signals::PlacementAdvice>,
    limits: &coolplane_policies::PlantLimits,
    t: f64,
    start: Option<[f64; 4]>,
    tank_guard_frac: f64,
    hold_cdu: Option<(f64, f64)>,
) -> (coolplane_policies::Setpoints, Vec<String>, [f64; 4]) {
    let n = limits.cdus.len().max(1) as f64;
    let design_s = limits.cdus.iter().map(|c| c.supply_design_c).sum::<f64>() / n;
    let design_f =
        limits.facilities.iter().map(|f| f.supply_design_c).sum::<f64>() / limits.facilities.len().max(1) as f64;
    let slow = scenario.site.gpu.slowdown_c;
    let mut best = start.unwrap_or([design_s, 1.0, design_f, 0.0]);
    if let Some((s, q)) = hold_cdu {
        best = [s, q, best[2].min(s - 2.0), best[3]];
    }
    let modes: &[f64] = if limits.facilities.iter().any(|f| f.adiabatic_assist) {
        &[0.0, 1.0, 2.0]
    } else {
        &[]
    };
    let tank_limit_kpa = limits
        .cdus
        .iter()
        .filter_map(|c| c.tank_relief_gauge_kpa)
        .fold(f64::INFINITY, f64::min)
        * tank_guard_frac
        - ORACLE_TANK_MARGIN_KPA;
    let (hot_refused, tank_refused) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let score = |c: [f64; 4]| {
        let (j, hot, thr, tank_kpa) = oracle_try(scenario, plant, cluster, advice, limits, t, c);
        hot_refused.set(hot_refused.get() + u32::from(thr > 0.0 || hot > slow - 3.0));
        tank_refused.set(tank_refused.get() + u32::from(tank_kpa >= tank_limit_kpa));
        if thr > 0.0 || hot > slow - 3.0 || tank_kpa >= tank_limit_kpa || !j.is_finite() {
            f64::INFINITY
        } else {
            j
        }
    };
    let mut best_j = score(best);
    let mut tried = 1u32;
    let (supplies, flows): (Vec<f64>, &[f64]) = match hold_cdu {
        Some(_) => (Vec::new(), &[]),
        None => (
            (-6..=3).map(|d| design_s + d as f64).collect(),
            &[0.7, 0.8, 0.9, 1.0, 1.1],
        ),
    };
    for _round in 0..2 {
        for &s in &supplies {
            let c = [s, best[1], best[2].min(s - 2.0), best[3]];
            let j = score(c);
            tried += 1;
            if j < best_j {
                (best, best_j) = (c, j);
            }
        }
        for &q in flows {
            let c = [best[0], q, best[2], best[3]];
            let j = score(c);
            tried += 1;
            if j < best_j {
                (best, best_j) = (c, j);
            }
        }
        for d in [-6.0, -4.0, -2.0, -1.0, 1.0, 2.0] {
            let f = (best[2] + d).min(best[0] - 2.0);
            let c = [best[0], best[1], f, best[3]];
            let j = score(c);
            tried += 1;
            if j < best_j {
                (best, best_j) = (c, j);
            }
        }
        let cur = best[3];
        for &m in modes.iter().filter(|&&m| m != cur) {
            let c = [best[0], best[1], best[2], m];
            let j = score(c);
            tried += 1;
            if j < best_j {
                (best, best_j) = (c, j);
            }
        }
    }
    if !best_j.is_finite() {
        best = match hold_cdu {
            Some((s, q)) => [s, q, design_f.min(s - 2.0), 0.0],
            None => [design_s, 1.0, design_f, 0.0],
        };
    }
    let mut sp = limits.uniform_setpoints(best[0], best[1], best[2]);
    let mode = RejectionMode::from_code(best[3] as u16).unwrap_or_default();
    sp.rejection = limits
        .facilities
        .iter()
        .map(|f| if f.adiabatic_assist { mode } else { RejectionMode::Auto })
        .collect();
    let mut why = vec![format!(
        "oracle (perfect knowledge, never deployable): CDU supply {:.0} °C, flow {:.0} %{}, facility water {:.0} °C, heat rejection {}: best of {tried} hour-ahead trials on copies of the true plant ({:.5} kWh per GPU-h)",
        best[0],
        best[1] * 100.0,
        if hold_cdu.is_some() { " (held for the run)" } else { "" },
        best[2],
        mode.name(),
        best_j
    )];
    if hot_refused.get() > 0 {
        why.push(format!(
            "{} trials refused: throttling or a die within 3 K of slowdown",
            hot_refused.get()
        ));
    }
    if tank_refused.get() > 0 {
        why.push(format!(
            "{} trials refused: a tank within {ORACLE_TANK_MARGIN_KPA} kPa of {:.0} % of its relief pressure, where the controller's guard acts on the gauge",
            tank_refused.get(),
            tank_guard_frac * 100.0
        ));
    }
    (sp, why, best)
}

fn row(plant: &Plant, controller: &Controller, cluster: &Cluster, t_h: f64, slowdown: f64) -> SeriesRow {
    let p = plant.power();
    let topo = plant.topology();
    let n_cdu = topo.cdus.len().max(1) as f64;
    let n_hall = topo.halls.len().max(1) as f64;
    let sup: Vec<f64> = (0..topo.cdus.len()).map(|c| plant.true_cdu_supply_c(c)).collect();
    let meas = plant.measurements();
    SeriesRow {
        t_h,
        it_kw: p.it_w / 1e3,
        facility_kw: p.facility_w / 1e3,
        cooling_kw: p.cooling_w() / 1e3,
        cdu_pumps_kw: p.cdu_pumps_w / 1e3,
        facility_pumps_kw: p.facility_pumps_w / 1e3,
        rejection_fans_kw: p.rejection_fans_w / 1e3,
        chiller_kw: p.chiller_w / 1e3,
        air_handler_kw: p.air_handler_fans_w / 1e3,
        elec_room_cooling_kw: p.elec_room_cooling_w / 1e3,
        electrical_losses_kw: p.electrical_losses_w / 1e3,
        pue: if p.it_w > 0.0 { p.facility_w / p.it_w } else { f64::NAN },
        gpu_temp_max_c: plant.true_gpu_temps_c().iter().copied().fold(f32::MIN, f32::max) as f64,
        gpu_slowdown_c: slowdown,
        cdu_supply_mean_c: sup.iter().sum::<f64>() / n_cdu,
        cdu_supply_max_c: sup.iter().copied().fold(f64::MIN, f64::max),
        cdu_supply_setpoint_mean_c: controller.setpoints().cdus.iter().map(|c| c.supply_c).sum::<f64>() / n_cdu,
        cdu_flow_total_lpm: (0..topo.cdus.len())
            .map(|c| coolplane_core::fluid::pg25_kg_s_to_lpm(plant.true_cdu_flow_kg_s(c)))
            .sum(),
        facility_supply_mean_c: (0..topo.halls.len())
            .map(|h| plant.true_facility_supply_c(h))
            .sum::<f64>()
            / n_hall,
        facility_setpoint_mean_c: meas.facilities.iter().map(|f| f.supply_setpoint_c.value).sum::<f64>() / n_hall,
        // The weather the plant saw (heat-wave offsets applied), not the file's.
        dry_bulb_c: plant.ambient_seen().dry_bulb_c,
        wet_bulb_c: plant.ambient_seen().wet_bulb_c,
        busy_gpus: cluster.stats().busy_gpus as f64,
        budget_kw: meas.meter.power_budget_kw.value,
        adiabatic_on: (0..topo.halls.len()).filter(|&h| plant.adiabatic_on(h)).count() as f64 / n_hall,
        chiller_on: (0..topo.halls.len()).filter(|&h| plant.chiller_on(h)).count() as f64 / n_hall,
    }
}

#[cfg(test)]
mod plan_accuracy_tests {
    use super::*;
    use coolplane_policies::PlanPrediction;

    fn plan(t_s: f64, status: &str, facility_kw: f64, hottest: f64) -> EnergyPlan {
        EnergyPlan {
            t_s,
            policy: "coordinated".into(),
            status: status.into(),
            horizon_s: 600.0,
            predicted: Some(PlanPrediction {
                facility_kw,
                hottest_gpu_c: hottest,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Each optimised plan is scored on the mean facility power and the hottest die over its own
    /// horizon; fallback plans and plans whose horizon runs past the end are not scored.
    #[test]
    fn plans_are_scored_over_their_horizon() {
        // 60 s steps: facility 100 kW for the first 10 steps, then 200 kW; hottest 70 then 80 °C.
        let fac: Vec<f64> = (0..30).map(|k| if k < 10 { 100.0 } else { 200.0 }).collect();
        let hot: Vec<f64> = (0..30).map(|k| if k < 10 { 70.0 } else { 80.0 }).collect();
        let plans = [
            plan(0.0, "optimised", 110.0, 71.0),   // realised 100 kW, 70 °C: +10 %, +1 K
            plan(600.0, "optimised", 180.0, 78.0), // realised 200 kW, 80 °C: −10 %, −2 K
            plan(0.0, "fallback", 1.0, 1.0),       // not scored
            plan(1500.0, "optimised", 1.0, 1.0),   // horizon past the end: not scored
        ];
        let a = plan_accuracy(&plans, &fac, &hot, 60.0);
        assert_eq!((a.plans, a.scored), (4, 2));
        assert!((a.facility_mape_pct - 10.0).abs() < 1e-9, "{a:?}");
        assert!(a.facility_bias_pct.abs() < 1e-9, "{a:?}");
        assert!((a.hottest_gpu_mae_k - 1.5).abs() < 1e-9, "{a:?}");
        assert!((a.hottest_gpu_bias_k + 0.5).abs() < 1e-9, "{a:?}");
    }
}
