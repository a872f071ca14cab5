//! A seeded fault campaign in the style of deterministic simulation testing.
//!
//! Each seed draws a random fault schedule (sensor stuck / NaN / dropout / drift, pump trip, CDU
//! loss, stuck valve, Modbus timeouts, broker outage, controller restart, heat wave, budget cut,
//! load storm) and runs the in-process loop (plant + scheduler with power leases through the
//! budget ledger + controller) over it, checking invariants on every tick and at the end:
//!
//! * `no-throttling`: no GPU is throttled in the scored window;
//! * `budget`: the site meter is never above the power budget for longer than
//!   [`BUDGET_EXCEED_MAX_S`] at a stretch;
//! * `safe-mode`: when the process image is stale (GPU telemetry older than the controller's
//!   `stale_after_s`, or no CDU with a usable supply temperature), the controller is in `Safe`
//!   mode within one tick;
//! * `setpoint-limits`: every setpoint written lies within the equipment limits of the site, and
//!   every power limit within the GPU's cap range;
//! * `setpoint-rate`: a written CDU or facility supply setpoint never lies further from the
//!   setpoint the device works to at that moment than the controller's rate limit allows over
//!   the time since that setpoint was last moved by a write, counted over at most the
//!   controller's ramp hold plus one tick (a restarted controller and a device back from its
//!   local fallback included);
//! * `no-raise-on-stale`: while telemetry is stale, no power limit above the one last sent to
//!   the GPU (the limit in force; the image's copy is as old as the rest of the data);
//! * `energy-ledger`: the plant's energy ledger closes within [`ENERGY_LEDGER_TOLERANCE_PCT`].
//!
//! Broker outages and controller restarts are faults of the control side, so the harness plays
//! them: during an outage the controller sees the rack and GPU telemetry it had when the broker
//! went away (old time stamps, as the daemon's process image holds them); a restart replaces the
//! controller by a new one mid-run. Every other fault is the plant's ([`FaultKind`]).
//!
//! The same seed always gives the same schedule and the same result; a failing seed is replayed
//! by `coolplane scenario campaign --seeds 1 --first-seed <seed>`.
//!
//! A subset runs over the wire with real processes (`scripts/ci/wire_campaign.py`, in `.ci/run`):
//! the simulated plant, the daemon and a Mosquitto broker, the daemon and the broker killed and
//! restarted on a seeded schedule, invariants checked from the plant's KPIs and the daemon's log.

// `!(x <= limit)` on purpose throughout: a NaN figure must count as a violation.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::budget::LedgerGate;
use crate::run::ENERGY_LEDGER_TOLERANCE_PCT;
use crate::spec::{BudgetSpec, EventSpec, ScenarioSpec};
use coolplane_controller::{Controller, ControllerConfig, Mode};
use coolplane_core::signals::{Actions, Measurements};
use coolplane_core::site::{builtin_site, Site};
use coolplane_core::topology::Topology;
use coolplane_policies::PlantLimits;
use coolplane_sim_plant::cluster::Cluster;
use coolplane_sim_plant::faults::{FaultKind, SensorFailure, SensorPoint};
use coolplane_sim_plant::kpi::Kpis;
use coolplane_sim_plant::Plant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Longest the site meter may stay above the budget at a stretch, s.
pub const BUDGET_EXCEED_MAX_S: f64 = 5.0;

/// The invariants a campaign checks, by name.
pub const INVARIANTS: [&str; 7] = [
    "no-throttling",
    "budget",
    "safe-mode",
    "setpoint-limits",
    "setpoint-rate",
    "no-raise-on-stale",
    "energy-ledger",
];

/// The fault kinds a campaign draws, by name.
pub const FAULT_KINDS: [&str; 14] = [
    "sensor-stuck",
    "sensor-nan",
    "sensor-dropout",
    "sensor-drift",
    "pump-trip",
    "cdu-loss",
    "valve-stuck",
    "modbus-timeout",
    "broker-outage",
    "controller-restart",
    "heat-wave",
    "budget-cut",
    "load-storm",
    "fan-failure",
];

/// A deliberate defect, for proving that each invariant can fail. Never used by the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injection {
    /// Rewrite the first CDU's supply setpoint 5 K above its limit once, an hour into the run.
    SetpointOutOfLimits,
    /// The controller believes nothing is ever stale (`stale_after_s` = 10⁹ s).
    ControllerIgnoresStale,
    /// The scheduler's power leases are not applied to the racks (power limits dropped).
    IgnoreBudget,
    /// Raise every GPU's power limit to TDP on every tick, stale telemetry or not.
    RaiseLimitsAlways,
    /// Write the first CDU's supply setpoint 3 K away from the last write, an hour into the run.
    SetpointJump,
}

/// How each run of a campaign is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct CampaignOptions {
    /// Built-in site name or site file.
    pub site: String,
    /// Scored hours per run (after one hour of warm-up).
    pub hours: f64,
    /// Plant and controller step, s.
    pub step_s: f64,
    /// Policy name.
    pub policy: String,
    /// Controller tuning (the invariants use its `stale_after_s` and rate limits).
    pub controller: ControllerConfig,
    /// A deliberate defect (tests only).
    pub inject: Option<Injection>,
}

impl Default for CampaignOptions {
    fn default() -> Self {
        Self {
            site: "hall-10k".into(),
            hours: 6.0,
            step_s: 60.0,
            policy: "trim-respond".into(),
            controller: ControllerConfig::default(),
            inject: None,
        }
    }
}

/// Warm-up before the scored window, h (no faults in it).
pub const WARMUP_H: f64 = 1.0;

/// A fault schedule: plant faults as scenario events, plus the control side's faults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schedule {
    /// Plant faults and external events (hours after the scored window begins).
    pub events: Vec<EventSpec>,
    /// Broker outages: (start, end), hours after the scored window begins.
    pub broker_outages: Vec<(f64, f64)>,
    /// Controller restarts, hours after the scored window begins.
    pub restarts: Vec<f64>,
    /// Kind name of every fault drawn, one entry per fault.
    pub kinds: Vec<&'static str>,
}

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    /// Invariant name (one of [`INVARIANTS`]).
    pub invariant: &'static str,
    /// Plant time, h after the scored window begins.
    pub t_h: f64,
    /// What was seen.
    pub detail: String,
}

/// The outcome of one seed.
#[derive(Debug, Clone)]
pub struct SeedResult {
    /// The seed.
    pub seed: u64,
    /// What was injected.
    pub schedule: Schedule,
    /// Broken invariants (at most [`MAX_VIOLATIONS_PER_RUN`] kept; `violations_total` counts all).
    pub violations: Vec<Violation>,
    /// Every violation seen, kept or not.
    pub violations_total: u64,
    /// The plant's KPIs over the scored window.
    pub kpis: Kpis,
    /// Ticks the controller spent in Safe mode.
    pub safe_ticks: u64,
}

/// Violations kept per run (all are counted).
pub const MAX_VIOLATIONS_PER_RUN: usize = 20;

/// A campaign could not run (bad site or options), as opposed to a run that broke an invariant.
#[derive(Debug, thiserror::Error)]
#[error("campaign: {0}")]
pub struct CampaignError(pub String);

/// Load the site a campaign runs on.
pub fn campaign_site(name: &str) -> Result<Site, CampaignError> {
    match builtin_site(name) {
        Ok(s) => Ok(s),
        Err(_) if name.ends_with(".toml") => {
            let text = std::fs::read_to_string(Path::new(name)).map_err(|e| CampaignError(format!("{name}: {e}")))?;
            Site::from_toml_str(name, &text).map_err(|e| CampaignError(e.to_string()))
        }
        Err(e) => Err(CampaignError(e.to_string())),
    }
}

/// Draw the fault schedule of `seed` for a site over `hours` of scored time: two to six faults of
/// kinds, targets, times and sizes drawn from the seed.
pub fn draw_schedule(seed: u64, site: &Site, hours: f64) -> Schedule {
    let topo = Topology::new(site);
    let n_cdu = topo.cdus.len().max(1) as u32;
    let n_hall = topo.halls.len().max(1) as u32;
    let n_gpu = topo.gpu_count.max(1) as u32;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x00c0_01b1_a7e0_0000);
    let mut s = Schedule::default();
    let n = rng.random_range(2..=6);
    for _ in 0..n {
        let kind = FAULT_KINDS[rng.random_range(0..FAULT_KINDS.len())];
        let start = rng.random_range(0.0..hours * 0.8);
        // Most faults are repaired within the run; some last to its end.
        let dur = rng.random_range(0.05..hours * 0.5);
        let end = if rng.random_bool(0.8) { Some(start + dur) } else { None };
        let cdu = rng.random_range(0..n_cdu);
        let sensor_point = match rng.random_range(0..4) {
            0 => SensorPoint::CduSupplyTemp(cdu),
            1 => SensorPoint::CduReturnTemp(cdu),
            2 => SensorPoint::CduFlow(cdu),
            _ => SensorPoint::GpuTemp(rng.random_range(0..n_gpu)),
        };
        let fault = match kind {
            "sensor-stuck" => FaultKind::Sensor {
                point: sensor_point,
                failure: SensorFailure::Stuck,
            },
            "sensor-nan" => FaultKind::Sensor {
                point: sensor_point,
                failure: SensorFailure::Sentinel,
            },
            "sensor-dropout" => FaultKind::Sensor {
                point: sensor_point,
                failure: SensorFailure::Dropout,
            },
            "sensor-drift" => FaultKind::Sensor {
                point: sensor_point,
                failure: SensorFailure::Drift {
                    rate_per_h: rng.random_range(-3.0..3.0),
                },
            },
            "pump-trip" => FaultKind::PumpTrip { cdu },
            "cdu-loss" => FaultKind::CduOffline { cdu },
            "valve-stuck" => FaultKind::ValveStuck {
                cdu,
                position: rng.random_range(0.3..1.0),
            },
            "modbus-timeout" => {
                // A device that stops answering for 30 s to 3 min, then answers again.
                let secs = rng.random_range(30.0..180.0);
                s.events.push(EventSpec {
                    start_h: start,
                    end_h: Some(start + secs / 3600.0),
                    fault: FaultKind::CduOffline { cdu },
                });
                s.kinds.push(kind);
                continue;
            }
            "broker-outage" => {
                let secs = rng.random_range(60.0..1800.0);
                s.broker_outages.push((start, start + secs / 3600.0));
                s.kinds.push(kind);
                continue;
            }
            "controller-restart" => {
                s.restarts.push(start);
                s.kinds.push(kind);
                continue;
            }
            "heat-wave" => FaultKind::HeatWave {
                offset_k: rng.random_range(2.0..12.0),
            },
            "budget-cut" => FaultKind::BudgetCut {
                budget_kw: site.site.power_budget_kw * rng.random_range(0.6..0.9),
            },
            "load-storm" => FaultKind::LoadStorm {
                util: rng.random_range(0.8..1.0),
            },
            _ => FaultKind::FanFailure {
                hall: rng.random_range(0..n_hall),
                fraction: rng.random_range(0.1..0.5),
            },
        };
        s.events.push(EventSpec {
            start_h: start,
            end_h: end,
            fault,
        });
        s.kinds.push(kind);
    }
    s
}

/// The scenario one seed runs: synthetic weather on a day drawn from the seed, one hour of
/// warm-up, the scheduler leasing power through the ledger (cuts announced 5 minutes ahead).
pub fn campaign_spec(seed: u64, opts: &CampaignOptions, schedule: &Schedule) -> ScenarioSpec {
    let mut spec = ScenarioSpec::default_for_site(&opts.site);
    spec.scenario.name = format!("campaign-{seed}");
    spec.scenario.seed = seed;
    spec.scenario.step_s = opts.step_s;
    spec.scenario.warmup_h = WARMUP_H;
    spec.weather.start_day = Some((seed % 365) as f64);
    spec.weather.days = Some(opts.hours / 24.0);
    spec.events = schedule.events.clone();
    spec.budget = Some(BudgetSpec {
        notice_s: 300.0,
        ..BudgetSpec::default()
    });
    spec
}

/// Run one seed: draw its schedule and run it.
pub fn run_seed(seed: u64, opts: &CampaignOptions) -> Result<SeedResult, CampaignError> {
    let site = campaign_site(&opts.site)?;
    let schedule = draw_schedule(seed, &site, opts.hours);
    run_schedule(seed, opts, schedule)
}

/// Whether the process image is stale as the invariants define it: GPU telemetry older than
/// `stale_after_s`, or no CDU with a usable supply temperature.
pub fn image_stale(now_s: f64, img: &Measurements, stale_after_s: f64) -> bool {
    let gpus_stale = !(now_s - img.gpus.t_s <= stale_after_s) || img.gpus.temp_c.is_empty();
    let no_cdu = !img.cdus.iter().any(|c| c.supply_temp_c.usable(now_s, stale_after_s));
    gpus_stale || no_cdu
}

/// The end-of-run invariants on the plant's KPIs.
pub fn check_kpis(k: &Kpis, t_end_h: f64) -> Vec<Violation> {
    let mut v = Vec::new();
    if !(k.throttle_gpu_s == 0.0) {
        v.push(Violation {
            invariant: "no-throttling",
            t_h: t_end_h,
            detail: format!(
                "{:.0} GPU-s throttled, hottest GPU {:.1} °C",
                k.throttle_gpu_s, k.gpu_temp_max_c
            ),
        });
    }
    if !(k.budget_exceed_longest_s <= BUDGET_EXCEED_MAX_S) {
        v.push(Violation {
            invariant: "budget",
            t_h: t_end_h,
            detail: format!(
                "site meter above budget for {:.0} s at a stretch (limit {BUDGET_EXCEED_MAX_S} s), {:.2} kWh over",
                k.budget_exceed_longest_s, k.budget_exceed_kwh
            ),
        });
    }
    if !(k.energy_balance_error_pct <= ENERGY_LEDGER_TOLERANCE_PCT) {
        v.push(Violation {
            invariant: "energy-ledger",
            t_h: t_end_h,
            detail: format!(
                "energy ledger error {:.6} % (tolerance {ENERGY_LEDGER_TOLERANCE_PCT} %)",
                k.energy_balance_error_pct
            ),
        });
    }
    v
}

/// Per-tick checks of what the controller emitted against the site's limits.
struct TickChecker {
    limits: PlantLimits,
    stale_after_s: f64,
    supply_rate_k_per_min: f64,
    facility_rate_k_per_min: f64,
    /// Supply setpoint each CDU works to before this tick's writes (the plant's truth), °C.
    cdu_in_force: Vec<f64>,
    /// Facility supply setpoint each hall works to before this tick's writes, °C.
    fac_in_force: Vec<f64>,
    /// The controller's ramp hold, s: a ramp's move counts at most this plus one tick.
    ramp_hold_s: f64,
    /// Plant time each CDU's / hall's supply setpoint was last moved by a write, s.
    cdu_moved_s: Vec<f64>,
    fac_moved_s: Vec<f64>,
    /// Plant time of the previous tick, s.
    last_t: Option<f64>,
    /// Power limit last sent to each GPU, W.
    last_limit: Vec<f32>,
    stale_ticks: u64,
    /// First GPU index of each rack.
    rack_first_gpu: Vec<usize>,
}

impl TickChecker {
    fn check(
        &mut self,
        t: f64,
        img: &Measurements,
        mode: Mode,
        a: &Actions,
        out: &mut dyn FnMut(&'static str, String),
    ) {
        const TOL: f64 = 1e-6;
        let tick_s = self.last_t.map_or(60.0, |t0| (t - t0).max(0.0));
        self.last_t = Some(t);
        // Safe mode within one tick of stale data.
        if image_stale(t, img, self.stale_after_s) {
            self.stale_ticks += 1;
            if self.stale_ticks >= 2 && mode != Mode::Safe {
                out(
                    "safe-mode",
                    format!(
                        "process image stale for {} ticks (GPU telemetry {:.0} s old) and the controller is in {mode:?}",
                        self.stale_ticks,
                        t - img.gpus.t_s
                    ),
                );
            }
        } else {
            self.stale_ticks = 0;
        }
        for (c, cmd) in a.cdus.iter().enumerate() {
            let Some(l) = self.limits.cdus.get(c) else {
                out(
                    "setpoint-limits",
                    format!("command for CDU {c}, which the site does not have"),
                );
                continue;
            };
            if let Some(s) = cmd.supply_temp_setpoint_c {
                if !(s >= l.supply_min_c - TOL && s <= l.supply_max_c + TOL) {
                    out(
                        "setpoint-limits",
                        format!(
                            "CDU {c} supply setpoint {s} °C outside [{}, {}]",
                            l.supply_min_c, l.supply_max_c
                        ),
                    );
                }
                let prev = self.cdu_in_force[c];
                let span_s = (t - self.cdu_moved_s[c]).min(self.ramp_hold_s + tick_s);
                // 0.05 K: the setpoint is rounded to 0.1 K after the rate limit.
                let allowed = self.supply_rate_k_per_min * span_s / 60.0 + 0.05 + TOL;
                if !prev.is_nan() && !((s - prev).abs() <= allowed) {
                    out(
                        "setpoint-rate",
                        format!("CDU {c} supply setpoint in force {prev} °C, written {s} °C (at most {allowed:.2} K over the {span_s:.0} s since its last move)"),
                    );
                }
                // A write that reaches no device (NaN in force) moves nothing.
                if prev.is_finite() && s != prev {
                    self.cdu_moved_s[c] = t;
                }
            }
            if let Some(f) = cmd.flow_setpoint_lpm {
                if !(f >= l.flow_min_lpm - 0.5 && f <= l.flow_max_lpm + 0.5) {
                    out(
                        "setpoint-limits",
                        format!(
                            "CDU {c} flow setpoint {f} L/min outside [{}, {}]",
                            l.flow_min_lpm, l.flow_max_lpm
                        ),
                    );
                }
            }
        }
        for (h, cmd) in a.facilities.iter().enumerate() {
            let (Some(l), Some(s)) = (self.limits.facilities.get(h), cmd.supply_temp_setpoint_c) else {
                continue;
            };
            if !(s >= l.supply_min_c - TOL && s <= l.supply_max_c + TOL) {
                out(
                    "setpoint-limits",
                    format!(
                        "hall {h} facility supply setpoint {s} °C outside [{}, {}]",
                        l.supply_min_c, l.supply_max_c
                    ),
                );
            }
            let prev = self.fac_in_force[h];
            let span_s = (t - self.fac_moved_s[h]).min(self.ramp_hold_s + tick_s);
            let allowed = self.facility_rate_k_per_min * span_s / 60.0 + 0.05 + TOL;
            if !prev.is_nan() && !((s - prev).abs() <= allowed) {
                out(
                    "setpoint-rate",
                    format!(
                        "hall {h} facility setpoint in force {prev} °C, written {s} °C (at most {allowed:.2} K over the {span_s:.0} s since its last move)"
                    ),
                );
            }
            if prev.is_finite() && s != prev {
                self.fac_moved_s[h] = t;
            }
        }
        let gpu_stale = !(t - img.gpus.t_s <= self.stale_after_s);
        let (lo, hi) = (self.limits.gpu_min_cap_w as f32, self.limits.gpu_tdp_w as f32);
        for pl in &a.power_limits {
            for (i, &w) in pl.limits_w.iter().enumerate() {
                if !(w >= lo - 0.5 && w <= hi + 0.5) {
                    out(
                        "setpoint-limits",
                        format!("rack {} GPU {i} power limit {w} W outside [{lo}, {hi}]", pl.rack),
                    );
                }
            }
        }
        if gpu_stale {
            self.check_no_raise(a, out);
        }
        for pl in &a.power_limits {
            let Some(&g0) = self.rack_first_gpu.get(pl.rack as usize) else {
                continue;
            };
            for (i, &w) in pl.limits_w.iter().enumerate() {
                if let Some(l) = self.last_limit.get_mut(g0 + i) {
                    *l = w;
                }
            }
        }
    }

    fn check_no_raise(&self, a: &Actions, out: &mut dyn FnMut(&'static str, String)) {
        let topo_first = |rack: u32| -> Option<usize> { self.rack_first_gpu.get(rack as usize).copied() };
        for pl in &a.power_limits {
            let Some(g0) = topo_first(pl.rack) else { continue };
            for (i, &w) in pl.limits_w.iter().enumerate() {
                // The limit in force is the last one sent (the image's copy is as old as the data).
                let now = self.last_limit.get(g0 + i).copied().unwrap_or(f32::NAN);
                if !(w <= now + 0.5) {
                    out(
                        "no-raise-on-stale",
                        format!("rack {} GPU {i}: limit {now} W → {w} W on stale telemetry", pl.rack),
                    );
                    return;
                }
            }
        }
    }
}

/// Run one fault schedule under `seed` and check every invariant.
pub fn run_schedule(seed: u64, opts: &CampaignOptions, schedule: Schedule) -> Result<SeedResult, CampaignError> {
    let spec = campaign_spec(seed, opts, &schedule);
    let scenario = spec.resolve(Path::new(".")).map_err(|e| CampaignError(e.to_string()))?;
    let site = &scenario.site;
    let dt = opts.step_s;
    let mut plant = Plant::new(site, seed).map_err(|e| CampaignError(e.to_string()))?;
    for e in &scenario.events {
        plant.schedule_fault(*e);
    }
    let mut cluster = Cluster::new(&plant);
    let mut ctl_cfg = opts.controller;
    if opts.inject == Some(Injection::ControllerIgnoresStale) {
        ctl_cfg.stale_after_s = 1e9;
    }
    let new_controller = || -> Result<Controller, CampaignError> {
        let policy = coolplane_policies::by_name(&opts.policy).map_err(|e| CampaignError(e.to_string()))?;
        ctl_cfg.check_policy(policy.as_ref()).map_err(CampaignError)?;
        Ok(Controller::new(site, policy, ctl_cfg))
    };
    let mut controller = new_controller()?;
    let topo = plant.topology().clone();
    let mut gate = scenario
        .spec
        .budget
        .map(|b| LedgerGate::new(site, b).with_announced(&scenario.events));
    let warmup_s = scenario.warmup_s;
    let to_plant_s = |h: f64| warmup_s + h * 3600.0;
    let outages: Vec<(f64, f64)> = schedule
        .broker_outages
        .iter()
        .map(|&(a, b)| (to_plant_s(a), to_plant_s(b)))
        .collect();
    let mut restarts: Vec<f64> = schedule.restarts.iter().map(|&h| to_plant_s(h)).collect();
    restarts.sort_by(f64::total_cmp);
    let mut next_restart = 0usize;
    let mut checker = TickChecker {
        limits: PlantLimits::from_site(site, &topo),
        stale_after_s: opts.controller.stale_after_s,
        supply_rate_k_per_min: opts.controller.supply_rate_k_per_min,
        facility_rate_k_per_min: opts.controller.facility_rate_k_per_min,
        cdu_in_force: vec![f64::NAN; topo.cdus.len()],
        fac_in_force: vec![f64::NAN; topo.halls.len()],
        ramp_hold_s: opts.controller.ramp_hold_s,
        cdu_moved_s: vec![f64::NEG_INFINITY; topo.cdus.len()],
        fac_moved_s: vec![f64::NEG_INFINITY; topo.halls.len()],
        last_t: None,
        last_limit: vec![site.gpu.tdp_w as f32; topo.gpu_count],
        stale_ticks: 0,
        rack_first_gpu: topo.racks.iter().map(|r| r.gpus.start).collect(),
    };
    let steps = (scenario.end_s() / dt).round().max(1.0) as u64;
    let score_step = (scenario.scoring_start_s() / dt).round() as u64;
    let mut violations = Vec::new();
    let mut total = 0u64;
    let mut safe_ticks = 0u64;
    let mut advice = None;
    // The telemetry the controller last received before a broker outage.
    let mut held: Option<Measurements> = None;
    let inject_at = (to_plant_s(1.0) / dt).round() as u64;
    for k in 0..steps {
        let t = k as f64 * dt;
        if k == score_step {
            plant.start_scoring();
        }
        if next_restart < restarts.len() && t >= restarts[next_restart] {
            // A restarted controller: a new process with no memory of what it commanded.
            controller = new_controller()?;
            next_restart += 1;
        }
        let in_outage = outages.iter().any(|&(a, b)| t >= a && t < b);
        let image: Measurements = if in_outage {
            // Rack and GPU telemetry arrive over MQTT: during the outage the process image keeps
            // the last values with their old time stamps; Modbus readings stay fresh.
            let h = held.get_or_insert_with(|| plant.measurements().clone());
            let mut img = plant.measurements().clone();
            img.racks = h.racks.clone();
            img.gpus = h.gpus.clone();
            img
        } else {
            held = None;
            plant.measurements().clone()
        };
        // The budget ledger is fed the same process image as the controller.
        if let Some(g) = gate.as_mut() {
            g.begin_step(t, &image);
        }
        let g = gate
            .as_mut()
            .map(|g| g as &mut dyn coolplane_sim_plant::cluster::PowerGate);
        cluster.advance_gated(t, &scenario.workload, &mut plant, advice.as_ref(), g);
        // A write to a device that does not answer never arrives: only writes that reach one
        // are held to the rate limit (NaN: not judged).
        for (c, x) in checker.cdu_in_force.iter_mut().enumerate() {
            *x = if plant.cdu_reachable(c) {
                plant.cdu_supply_setpoint_in_force_c(c)
            } else {
                f64::NAN
            };
        }
        for (h, x) in checker.fac_in_force.iter_mut().enumerate() {
            *x = if plant.facility_reachable() {
                plant.facility_setpoint_in_force_c(h)
            } else {
                f64::NAN
            };
        }
        let mut actions = controller.tick(t, &image);
        if let Some(g) = gate.as_mut() {
            if opts.inject != Some(Injection::IgnoreBudget) {
                g.apply(&mut actions);
            }
        }
        match opts.inject {
            Some(Injection::SetpointOutOfLimits) if k == inject_at => {
                actions.cdus[0].supply_temp_setpoint_c = Some(checker.limits.cdus[0].supply_max_c + 5.0);
            }
            Some(Injection::SetpointJump) if k == inject_at => {
                actions.cdus[0].supply_temp_setpoint_c = Some(checker.cdu_in_force[0] - 3.0);
            }
            Some(Injection::RaiseLimitsAlways) => {
                actions.power_limits = topo
                    .racks
                    .iter()
                    .enumerate()
                    .map(|(r, rack)| coolplane_core::signals::RackPowerLimits {
                        rack: r as u32,
                        limits_w: vec![checker.limits.gpu_tdp_w as f32; rack.gpus.len()],
                    })
                    .collect();
            }
            _ => {}
        }
        if controller.mode() == Mode::Safe {
            safe_ticks += 1;
        }
        checker.check(t, &image, controller.mode(), &actions, &mut |inv, detail| {
            total += 1;
            if violations.len() < MAX_VIOLATIONS_PER_RUN {
                violations.push(Violation {
                    invariant: inv,
                    t_h: (t - warmup_s) / 3600.0,
                    detail,
                });
            }
        });
        if actions.placement.is_some() {
            advice = actions.placement.clone();
        }
        let _ = controller.drain_events();
        let ambient = scenario.weather.sample(scenario.weather_time_s(t));
        plant.step(dt, &ambient, &actions);
    }
    if score_step >= steps {
        plant.start_scoring();
    }
    let kpis = plant.kpis();
    for v in check_kpis(&kpis, opts.hours) {
        total += 1;
        if violations.len() < MAX_VIOLATIONS_PER_RUN {
            violations.push(v);
        }
    }
    Ok(SeedResult {
        seed,
        schedule,
        violations,
        violations_total: total,
        kpis,
        safe_ticks,
    })
}

/// What a campaign found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CampaignSummary {
    /// Runs (seeds) done.
    pub runs: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Invariant violations, by invariant (every invariant listed, 0 included).
    pub violations: BTreeMap<&'static str, u64>,
    /// Seeds with at least one violation.
    pub failing_seeds: Vec<u64>,
}

impl CampaignSummary {
    /// An empty summary listing every invariant and fault kind at 0.
    pub fn new() -> Self {
        Self {
            runs: 0,
            faults: FAULT_KINDS.iter().map(|k| (*k, 0)).collect(),
            violations: INVARIANTS.iter().map(|k| (*k, 0)).collect(),
            failing_seeds: Vec::new(),
        }
    }

    /// Count one run's result.
    pub fn add(&mut self, r: &SeedResult) {
        self.runs += 1;
        for k in &r.schedule.kinds {
            *self.faults.entry(k).or_default() += 1;
        }
        let mut seen = BTreeMap::<&'static str, u64>::new();
        for v in &r.violations {
            *seen.entry(v.invariant).or_default() += 1;
        }
        // Violations beyond those kept are counted against the first kept invariant's total.
        let extra = r.violations_total.saturating_sub(r.violations.len() as u64);
        if let Some(first) = r.violations.first() {
            *seen.entry(first.invariant).or_default() += extra;
        }
        for (k, n) in seen {
            *self.violations.entry(k).or_default() += n;
        }
        if r.violations_total > 0 {
            self.failing_seeds.push(r.seed);
        }
    }

    /// Violations in all.
    pub fn violations_total(&self) -> u64 {
        self.violations.values().sum()
    }

    /// Faults in all.
    pub fn faults_total(&self) -> u64 {
        self.faults.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> CampaignOptions {
        CampaignOptions {
            site: "supernode-640".into(),
            hours: 3.0,
            ..CampaignOptions::default()
        }
    }

    fn only(events: Vec<EventSpec>) -> Schedule {
        Schedule {
            kinds: vec!["test"; events.len()],
            events,
            ..Schedule::default()
        }
    }

    fn count(r: &SeedResult, inv: &str) -> usize {
        r.violations.iter().filter(|v| v.invariant == inv).count()
    }

    #[test]
    fn schedules_are_deterministic_and_varied() {
        let site = builtin_site("hall-10k").unwrap();
        assert_eq!(draw_schedule(7, &site, 6.0), draw_schedule(7, &site, 6.0));
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let s = draw_schedule(seed, &site, 6.0);
            assert!((2..=6).contains(&s.kinds.len()));
            kinds.extend(s.kinds);
        }
        assert_eq!(
            kinds.len(),
            FAULT_KINDS.len(),
            "every kind drawn in 200 seeds: {kinds:?}"
        );
    }

    #[test]
    fn a_clean_run_breaks_no_invariant() {
        let r = run_schedule(3, &small(), Schedule::default()).unwrap();
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.safe_ticks, 0);
    }

    #[test]
    fn setpoint_limits_check_fails_on_an_injected_out_of_range_write() {
        let o = CampaignOptions {
            inject: Some(Injection::SetpointOutOfLimits),
            ..small()
        };
        let r = run_schedule(3, &o, Schedule::default()).unwrap();
        assert!(count(&r, "setpoint-limits") >= 1, "{:?}", r.violations);
    }

    #[test]
    fn setpoint_rate_check_fails_on_an_injected_jump() {
        let o = CampaignOptions {
            inject: Some(Injection::SetpointJump),
            ..small()
        };
        let r = run_schedule(3, &o, Schedule::default()).unwrap();
        assert!(count(&r, "setpoint-rate") >= 1, "{:?}", r.violations);
    }

    #[test]
    fn safe_mode_check_fails_when_the_controller_ignores_stale_data() {
        let outage = Schedule {
            broker_outages: vec![(0.5, 1.5)],
            kinds: vec!["broker-outage"],
            ..Schedule::default()
        };
        let ok = run_schedule(3, &small(), outage.clone()).unwrap();
        assert_eq!(count(&ok, "safe-mode"), 0, "{:?}", ok.violations);
        assert!(
            ok.safe_ticks >= 50,
            "the outage puts the controller in Safe mode: {}",
            ok.safe_ticks
        );
        let o = CampaignOptions {
            inject: Some(Injection::ControllerIgnoresStale),
            ..small()
        };
        let bad = run_schedule(3, &o, outage).unwrap();
        assert!(count(&bad, "safe-mode") >= 1, "{:?}", bad.violations);
    }

    #[test]
    fn no_raise_check_fails_when_limits_are_raised_on_stale_telemetry() {
        let site = builtin_site("supernode-640").unwrap();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let tdp = limits.gpu_tdp_w as f32;
        let mut checker = TickChecker {
            limits,
            stale_after_s: 180.0,
            supply_rate_k_per_min: 1.0,
            facility_rate_k_per_min: 1.0,
            cdu_in_force: vec![f64::NAN; topo.cdus.len()],
            fac_in_force: vec![f64::NAN; topo.halls.len()],
            ramp_hold_s: 60.0,
            cdu_moved_s: vec![f64::NEG_INFINITY; topo.cdus.len()],
            fac_moved_s: vec![f64::NEG_INFINITY; topo.halls.len()],
            last_t: None,
            last_limit: vec![tdp; topo.gpu_count],
            stale_ticks: 0,
            rack_first_gpu: topo.racks.iter().map(|r| r.gpus.start).collect(),
        };
        let mut img = Measurements::default();
        img.gpus.t_s = 0.0;
        img.gpus.temp_c = vec![60.0; topo.gpu_count];
        img.gpus.power_limit_w = vec![tdp * 0.7; topo.gpu_count];
        let n = topo.racks[0].gpus.len();
        let raise = Actions {
            power_limits: vec![coolplane_core::signals::RackPowerLimits {
                rack: 0,
                limits_w: vec![tdp; n],
            }],
            ..Actions::default()
        };
        let run = |checker: &mut TickChecker, t: f64, a: &Actions| {
            let mut seen = Vec::new();
            checker.check(t, &img, Mode::Safe, a, &mut |inv, _| seen.push(inv));
            seen
        };
        let hold = Actions {
            power_limits: vec![coolplane_core::signals::RackPowerLimits {
                rack: 0,
                limits_w: vec![tdp * 0.7; n],
            }],
            ..Actions::default()
        };
        // Fresh telemetry: raising is allowed, and so is lowering.
        assert!(!run(&mut checker, 60.0, &raise).contains(&"no-raise-on-stale"));
        assert!(!run(&mut checker, 120.0, &hold).contains(&"no-raise-on-stale"));
        // Stale telemetry: a raise above the limit last sent is a violation; holding it is not.
        assert!(run(&mut checker, 600.0, &raise).contains(&"no-raise-on-stale"));
        assert!(!run(&mut checker, 660.0, &hold).contains(&"no-raise-on-stale"));
    }

    #[test]
    fn budget_check_fails_when_leases_are_not_applied() {
        let site = builtin_site("supernode-640").unwrap();
        let s = only(vec![
            EventSpec {
                start_h: 0.0,
                end_h: None,
                fault: FaultKind::LoadStorm { util: 1.0 },
            },
            EventSpec {
                start_h: 0.5,
                end_h: Some(2.0),
                fault: FaultKind::BudgetCut {
                    budget_kw: site.site.power_budget_kw * 0.1,
                },
            },
        ]);
        let o = CampaignOptions {
            inject: Some(Injection::IgnoreBudget),
            ..small()
        };
        let bad = run_schedule(3, &o, s).unwrap();
        assert!(
            count(&bad, "budget") >= 1,
            "{:?} {:?}",
            bad.violations,
            bad.kpis.budget_exceed_longest_s
        );
    }

    #[test]
    fn throttling_check_fails_when_heat_rejection_is_lost() {
        let site = builtin_site("supernode-640").unwrap();
        let n_cdu = Topology::new(&site).cdus.len() as u32;
        // Every facility valve stuck shut: no heat leaves the CDUs.
        let mut events: Vec<EventSpec> = (0..n_cdu)
            .map(|cdu| EventSpec {
                start_h: 0.0,
                end_h: None,
                fault: FaultKind::ValveStuck { cdu, position: 0.0 },
            })
            .collect();
        events.extend(vec![
            EventSpec {
                start_h: 0.0,
                end_h: None,
                fault: FaultKind::LoadStorm { util: 1.0 },
            },
            EventSpec {
                start_h: 0.0,
                end_h: None,
                fault: FaultKind::FanFailure { hall: 0, fraction: 1.0 },
            },
            EventSpec {
                start_h: 0.0,
                end_h: None,
                fault: FaultKind::HeatWave { offset_k: 20.0 },
            },
        ]);
        let s = only(events);
        let r = run_schedule(3, &small(), s).unwrap();
        assert!(
            count(&r, "no-throttling") >= 1,
            "{:?} {:?}",
            r.violations,
            r.kpis.gpu_temp_max_c
        );
    }

    /// Seed 89's faults: a valve stuck almost shut under a load storm, then a heat wave. Cooling
    /// cannot respond (the CDU's supply climbs ≈ 13 K in minutes); the controller's emergency
    /// power caps must keep every GPU off slowdown.
    #[test]
    fn a_valve_stuck_under_load_is_held_off_slowdown_by_emergency_caps() {
        let s = only(vec![
            EventSpec {
                start_h: 0.2,
                end_h: None,
                fault: FaultKind::ValveStuck { cdu: 8, position: 0.25 },
            },
            EventSpec {
                start_h: 0.1,
                end_h: None,
                fault: FaultKind::LoadStorm { util: 0.95 },
            },
            EventSpec {
                start_h: 0.5,
                end_h: None,
                fault: FaultKind::HeatWave { offset_k: 6.7 },
            },
        ]);
        let o = CampaignOptions {
            site: "hall-10k".into(),
            hours: 2.0,
            // The daemon's default tick (the fast loop): a one-minute loop is too slow for a
            // supply that climbs 13 K in a minute (1,905 GPU-s throttled at 60 s).
            step_s: 10.0,
            ..CampaignOptions::default()
        };
        let r = run_schedule(89, &o, s).unwrap();
        let slow = builtin_site("hall-10k").unwrap().gpu.slowdown_c;
        assert!(
            r.kpis.gpu_temp_max_c >= slow - o.controller.emergency_margin_k,
            "premise: GPUs reached the emergency band ({} °C)",
            r.kpis.gpu_temp_max_c
        );
        assert_eq!(r.kpis.throttle_gpu_s, 0.0, "hottest {} °C", r.kpis.gpu_temp_max_c);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }

    fn clean_kpis() -> Kpis {
        run_schedule(3, &small(), Schedule::default()).unwrap().kpis
    }

    #[test]
    fn kpi_checks_fail_on_each_broken_kpi() {
        let clean = clean_kpis();
        assert!(check_kpis(&clean, 1.0).is_empty());
        let leak = Kpis {
            energy_balance_error_pct: 0.3,
            ..clean.clone()
        };
        assert_eq!(check_kpis(&leak, 1.0)[0].invariant, "energy-ledger");
        let nan = Kpis {
            energy_balance_error_pct: f64::NAN,
            ..clean.clone()
        };
        assert_eq!(check_kpis(&nan, 1.0)[0].invariant, "energy-ledger");
        let over = Kpis {
            budget_exceed_longest_s: 6.0,
            ..clean.clone()
        };
        assert_eq!(check_kpis(&over, 1.0)[0].invariant, "budget");
        let hot = Kpis {
            throttle_gpu_s: 60.0,
            ..clean
        };
        assert_eq!(check_kpis(&hot, 1.0)[0].invariant, "no-throttling");
    }

    #[test]
    fn summary_counts_runs_faults_and_violations() {
        let mut s = CampaignSummary::new();
        let r = SeedResult {
            seed: 9,
            schedule: Schedule {
                kinds: vec!["pump-trip", "heat-wave", "pump-trip"],
                ..Schedule::default()
            },
            violations: vec![Violation {
                invariant: "budget",
                t_h: 1.0,
                detail: String::new(),
            }],
            violations_total: 1,
            kpis: clean_kpis(),
            safe_ticks: 0,
        };
        s.add(&r);
        assert_eq!(s.runs, 1);
        assert_eq!(s.faults["pump-trip"], 2);
        assert_eq!(s.faults_total(), 3);
        assert_eq!(s.violations["budget"], 1);
        assert_eq!(s.violations["safe-mode"], 0);
        assert_eq!(s.failing_seeds, vec![9]);
    }
}
