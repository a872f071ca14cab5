//! # coolplane-policies
//!
//! Pure control laws. A [`Policy`] looks at the process image and proposes setpoints, power
//! limits and placement advice; the controller (crate `coolplane-controller`) owns the safety
//! envelope, rate limits, stale-data fallback and arbitration, and may narrow anything a policy
//! proposes. A policy never writes to equipment and never sees the plant's true state.
//!
//! Baselines (honest, good-faith, see `scenarios-kpis.md`):
//! - [`VendorDefault`]: what a site gets out of the box — design CDU supply temperature and design
//!   flow, fixed facility supply setpoint, no power caps, first-fit placement.
//! - [`TrimRespond`]: ASHRAE Guideline 36-style trim-and-respond resets of CDU supply temperature
//!   and flow from "requests" raised by the hottest GPUs, and of the facility supply setpoint from
//!   CDU valve positions — what a competent controls contractor would commission.
//!
//! Architecture invariants: no IO, no wall clock, no global random number generator; time comes in
//! as `now_s`.

use coolplane_core::fluid::pg25_lpm_to_kg_s;
use coolplane_core::signals::{Measurements, PlacementAdvice, RackPowerLimits, RejectionMode, TankMeasurement};
use coolplane_core::site::Site;
use coolplane_core::topology::Topology;
use serde::{Deserialize, Serialize};
use std::fmt;

pub mod coordinated;
pub mod dvfs;
pub use coordinated::{
    Coordinated, CoordinatedParams, EnergyPlan, HeatPumpPlate, PlanPrediction, PlanSetpoints, WriteAllowance, WritePool,
};

/// Equipment limits and design values of one CDU, from the site file (nameplate, not plant truth).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CduLimits {
    /// Lowest supply setpoint the firmware accepts, °C.
    pub supply_min_c: f64,
    /// Highest supply setpoint the firmware accepts, °C.
    pub supply_max_c: f64,
    /// Design supply setpoint (also the local default), °C.
    pub supply_design_c: f64,
    /// Lowest flow setpoint, L/min.
    pub flow_min_lpm: f64,
    /// Highest flow setpoint, L/min.
    pub flow_max_lpm: f64,
    /// Design flow, L/min.
    pub flow_design_lpm: f64,
    /// Relief pressure of the two-phase immersion tank this CDU (condenser-water skid) serves,
    /// kPa above atmospheric; `None` for a CDU of cold-plate racks.
    #[serde(default)]
    pub tank_relief_gauge_kpa: Option<f64>,
    /// Saturation curve of that tank's fluid (nameplate), which reads the tank's pressure from
    /// its pool thermometer: the second, independent path beside the pressure gauge.
    #[serde(default)]
    pub tank_saturation: Option<coolplane_core::dielectric::Saturation>,
}

/// How far a tank's pressure gauge and its pool thermometer (read through the fluid's
/// saturation curve) may disagree, smoothed over [`TANK_CROSSCHECK_TAU_S`], before the two paths
/// are declared apart, kPa: about 0.3 K of pool temperature on Novec 649, more than ten times the
/// smoothed noise of the two sensors (0.1 kPa on the gauge; 0.1 K ≈ 0.36 kPa on the
/// thermometer, each reading). Three times it in a single reading declares them apart at once.
pub const TANK_CROSSCHECK_KPA: f64 = 1.0;
/// Time constant of the smoothed disagreement, s.
pub const TANK_CROSSCHECK_TAU_S: f64 = 600.0;

/// A two-phase immersion tank's pressure from its two independent paths, this tick.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TankPressure {
    /// The pressure gauge, kPa above atmospheric, when usable.
    pub gauge_kpa: Option<f64>,
    /// The pool thermometer through the fluid's saturation curve, kPa above atmospheric (0 for
    /// a subcooled pool), when usable.
    pub from_pool_kpa: Option<f64>,
}

impl TankPressure {
    /// Without a cross-check's history: the gauge, or the pool's reading when the gauge is
    /// unusable; `None` when neither path is.
    pub fn gauge_or_pool(&self) -> Option<f64> {
        self.gauge_kpa.or(self.from_pool_kpa)
    }
}

/// The cross-check of one tank's two pressure paths over time (pure: time is an input).
///
/// The gauge's disagreement with the pool thermometer is smoothed exponentially over
/// [`TANK_CROSSCHECK_TAU_S`] (from zero when the check starts): the paths are *apart* when the
/// smoothed disagreement passes [`TANK_CROSSCHECK_KPA`], or when one reading passes three times
/// it (the smoothed value then starts from that reading, so one reading does not come and go
/// the next tick), and together again only when the smoothed disagreement is back under half
/// of it. A lost path forgets nothing: when both are read again the smoothing moves by the time
/// since they last were, so after a short loss what was learned stands and after a long one the
/// first reading decides (a gauge known to be lying is never trusted again merely because it
/// was away).
/// While the paths are apart the pressure acted on is the higher of the two (a gauge stuck or
/// drifting low cannot hide a rising tank; one reading high costs colder water, not fluid);
/// while they agree it is the gauge, so the sensors' noise changes nothing.
///
/// It assumes the pool thermometer reads the saturation temperature, as one at the liquid's
/// surface does; one deep in the pool reading warm would hold the paths apart (a standing
/// warning and colder water, never a hidden rise).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TankCrossCheck {
    /// (time of the last reading of both paths, smoothed gauge − pool, kPa).
    smoothed: Option<(f64, f64)>,
    /// The last reading's gauge − pool, kPa.
    last_kpa: f64,
    apart: bool,
}

impl TankCrossCheck {
    /// Take this tick's readings at `now_s`.
    pub fn update(&mut self, now_s: f64, p: &TankPressure) {
        let (Some(g), Some(q)) = (p.gauge_kpa, p.from_pool_kpa) else {
            return;
        };
        let r = g - q;
        self.last_kpa = r;
        let (last_s, e) = self.smoothed.unwrap_or((now_s, 0.0));
        let dt = now_s - last_s;
        let mut e = if dt.is_finite() && dt > 0.0 {
            e + (1.0 - (-dt / TANK_CROSSCHECK_TAU_S).exp()) * (r - e)
        } else {
            e
        };
        if r.abs() > 3.0 * TANK_CROSSCHECK_KPA && r.abs() > e.abs() {
            e = r;
        }
        let t = if dt.is_finite() && dt > 0.0 { now_s } else { last_s };
        self.smoothed = Some((t, e));
        if e.abs() > TANK_CROSSCHECK_KPA {
            self.apart = true;
        } else if e.abs() < 0.5 * TANK_CROSSCHECK_KPA {
            self.apart = false;
        }
    }

    /// Gauge and pool thermometer are apart.
    pub fn apart(&self) -> bool {
        self.apart
    }

    /// The smoothed disagreement, gauge less pool, kPa (`None` before both paths were read).
    pub fn smoothed_kpa(&self) -> Option<f64> {
        self.smoothed.map(|(_, e)| e)
    }

    /// The last reading's disagreement, gauge less pool, kPa.
    pub fn last_kpa(&self) -> f64 {
        self.last_kpa
    }

    /// The pressure to act on this tick: the gauge while the paths agree, the higher of the
    /// two while they are apart, the pool's reading when the gauge is unusable; `None` when
    /// neither path is.
    pub fn acted_on(&self, p: &TankPressure) -> Option<f64> {
        match (p.gauge_kpa, p.from_pool_kpa) {
            (Some(g), Some(q)) if self.apart => Some(g.max(q)),
            _ => p.gauge_or_pool(),
        }
    }
}

impl CduLimits {
    /// The pressure of this CDU's tank from the process image: each path counts when its
    /// reading is usable at `now_s` (not bad, finite, no older than `stale_s`). All `None` for a
    /// cold-plate CDU or a tank with no readings.
    pub fn tank_pressure(&self, tank: Option<&TankMeasurement>, now_s: f64, stale_s: f64) -> TankPressure {
        let (Some(_), Some(t)) = (self.tank_relief_gauge_kpa, tank) else {
            return TankPressure::default();
        };
        let gauge_kpa = t
            .pressure_gauge_kpa
            .usable(now_s, stale_s)
            .then_some(t.pressure_gauge_kpa.value);
        let from_pool_kpa = match self.tank_saturation {
            Some(s) if t.pool_temp_c.usable(now_s, stale_s) => {
                Some(s.tank_gauge_kpa(t.pool_temp_c.value)).filter(|v| v.is_finite())
            }
            _ => None,
        };
        TankPressure {
            gauge_kpa,
            from_pool_kpa,
        }
    }
}

/// Limits of one hall's facility water system.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FacilityLimits {
    /// Lowest facility supply setpoint, °C.
    pub supply_min_c: f64,
    /// Highest, the ASHRAE class maximum, °C.
    pub supply_max_c: f64,
    /// Design (local default) setpoint, °C.
    pub supply_design_c: f64,
    /// Whether the dry coolers have adiabatic assist, i.e. whether the dry and adiabatic
    /// heat-rejection modes exist (elsewhere only auto does).
    #[serde(default)]
    pub adiabatic_assist: bool,
    /// Whether a trim chiller backs the heat rejection (the controller refuses the dry mode
    /// without one).
    #[serde(default)]
    pub trim_chiller: bool,
}

/// Everything a policy may assume about the equipment: nameplate limits from the site file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlantLimits {
    /// Per CDU.
    pub cdus: Vec<CduLimits>,
    /// Per hall.
    pub facilities: Vec<FacilityLimits>,
    /// GPU slowdown temperature, °C.
    pub gpu_slowdown_c: f64,
    /// GPU shutdown temperature, °C.
    pub gpu_shutdown_c: f64,
    /// GPU maximum power limit (TDP), W.
    pub gpu_tdp_w: f64,
    /// GPU minimum power limit, W.
    pub gpu_min_cap_w: f64,
}

impl PlantLimits {
    /// Limits from a validated site.
    pub fn from_site(site: &Site, topo: &Topology) -> Self {
        let cdus = topo
            .cdus
            .iter()
            .map(|c| {
                let d = &topo.hall_spec(site, c.hall).cdu;
                let (flow_min_lpm, flow_max_lpm) = d.flow_setpoint_range_lpm();
                CduLimits {
                    supply_min_c: d.supply_setpoint_min_c,
                    supply_max_c: d.supply_setpoint_max_c,
                    supply_design_c: d.supply_setpoint_c,
                    flow_min_lpm,
                    flow_max_lpm,
                    flow_design_lpm: d.design_flow_lpm(),
                    tank_relief_gauge_kpa: topo
                        .hall_spec(site, c.hall)
                        .immersion
                        .as_ref()
                        .map(|im| im.relief_gauge_kpa),
                    tank_saturation: topo
                        .hall_spec(site, c.hall)
                        .immersion
                        .as_ref()
                        .and_then(|im| coolplane_core::dielectric::fluid_by_name(&im.fluid))
                        .map(|f| f.saturation()),
                }
            })
            .collect();
        let facilities = (0..topo.halls.len())
            .map(|h| {
                let f = &topo.hall_spec(site, h).facility;
                FacilityLimits {
                    supply_min_c: f.supply_setpoint_min_c,
                    supply_max_c: f.supply_setpoint_max_c(),
                    supply_design_c: f.supply_setpoint_c,
                    adiabatic_assist: f.dry_coolers.as_ref().is_some_and(|d| d.adiabatic.is_some()),
                    trim_chiller: f.chiller.is_some(),
                }
            })
            .collect();
        Self {
            cdus,
            facilities,
            gpu_slowdown_c: site.gpu.slowdown_c,
            gpu_shutdown_c: site.gpu.shutdown_c,
            gpu_tdp_w: site.gpu.tdp_w,
            gpu_min_cap_w: site.gpu.min_cap_w,
        }
    }

    /// The same setpoints for every CDU and every hall (supply °C, flow as a fraction of each
    /// CDU's design flow, facility supply °C), each clamped to its equipment's range.
    pub fn uniform_setpoints(&self, cdu_supply_c: f64, flow_frac: f64, facility_c: f64) -> Setpoints {
        Setpoints {
            cdus: self
                .cdus
                .iter()
                .map(|c| CduSetpoint {
                    supply_c: cdu_supply_c.clamp(c.supply_min_c, c.supply_max_c),
                    flow_lpm: (flow_frac * c.flow_design_lpm).clamp(c.flow_min_lpm, c.flow_max_lpm),
                })
                .collect(),
            facilities: self
                .facilities
                .iter()
                .map(|f| facility_c.clamp(f.supply_min_c, f.supply_max_c))
                .collect(),
            rejection: Vec::new(),
        }
    }

    /// Design setpoints everywhere (the safe fallback).
    pub fn design_setpoints(&self) -> Setpoints {
        Setpoints {
            cdus: self
                .cdus
                .iter()
                .map(|c| CduSetpoint {
                    supply_c: c.supply_design_c,
                    flow_lpm: c.flow_design_lpm,
                })
                .collect(),
            facilities: self.facilities.iter().map(|f| f.supply_design_c).collect(),
            rejection: Vec::new(),
        }
    }
}

/// Setpoints of one CDU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CduSetpoint {
    /// Supply temperature, °C.
    pub supply_c: f64,
    /// Secondary flow, L/min.
    pub flow_lpm: f64,
}

/// A full set of cooling setpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setpoints {
    /// Per CDU.
    pub cdus: Vec<CduSetpoint>,
    /// Facility supply temperature per hall, °C.
    pub facilities: Vec<f64>,
    /// Heat-rejection mode per hall (empty, or shorter than the halls: `Auto` for the rest, the
    /// firmware staging adiabatic assist itself).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejection: Vec<RejectionMode>,
}

impl Setpoints {
    /// Heat-rejection mode proposed for hall `h`.
    pub fn rejection_mode(&self, h: usize) -> RejectionMode {
        self.rejection.get(h).copied().unwrap_or_default()
    }
}

/// What a policy proposes for this tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Proposed cooling setpoints.
    pub setpoints: Setpoints,
    /// Proposed power-limit changes.
    pub power_limits: Vec<RackPowerLimits>,
    /// Placement advice for the scheduler.
    pub placement: Option<PlacementAdvice>,
    /// Why: one short line per change, for operators.
    pub reasons: Vec<String>,
    /// The energy plan, when the policy made one this tick (`coordinated`, every 15 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<EnergyPlan>,
}

/// What a policy is given each time it runs.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    /// Controller time, s.
    pub now_s: f64,
    /// The latest process image.
    pub image: &'a Measurements,
    /// Nameplate limits.
    pub limits: &'a PlantLimits,
    /// Site topology.
    pub topology: &'a Topology,
    /// Setpoints in force now (as last written by the controller).
    pub current: &'a Setpoints,
}

/// A control law.
pub trait Policy: Send {
    /// Name as used on the command line.
    fn name(&self) -> &'static str;
    /// Name with the parameters that differ from the policy's defaults, as [`by_name`] reads it
    /// back (`coordinated:write-kwh=12`): what reports and tables show.
    fn label(&self) -> String {
        self.name().to_string()
    }
    /// Propose setpoints for this tick.
    fn decide(&mut self, input: &PolicyInput<'_>) -> Decision;
    /// Called once by the controller with the site it controls, before the first tick: a policy
    /// that needs the nameplate (the GPU characterisation, the CDUs' design data) keeps it here.
    fn bind(&mut self, _site: &Site, _topo: &Topology) {}
    /// The fast loop (every controller tick, seconds; in auto and manual mode): power limits to
    /// send now and notices for operators. The baselines do nothing here; `coordinated` holds the
    /// site power budget with DVFS caps ([`dvfs::BudgetGovernor`]).
    fn fast(&mut self, _input: &PolicyInput<'_>) -> dvfs::FastDecision {
        dvfs::FastDecision::default()
    }
    /// Two-phase immersion: the fraction of a tank's relief pressure the policy plans its pools
    /// up to, where it plans them at all (`coordinated`'s `tank-pressure-frac`); the controller
    /// refuses a configuration whose tank guard acts at or below it.
    fn tank_pressure_frac(&self) -> Option<f64> {
        None
    }
}

/// Names of the policies [`by_name`] knows.
pub const POLICY_NAMES: [&str; 5] = [
    "vendor-default",
    "trim-respond",
    "coordinated",
    "coordinated-auto",
    "oracle",
];

/// Policies that need the simulated plant's truth and can never run against real equipment.
pub const SIMULATION_ONLY: [&str; 1] = ["oracle"];

/// Whether the policy `name` (with or without parameters: `oracle:cdu-supply=36`) is one of
/// [`SIMULATION_ONLY`].
pub fn simulation_only(name: &str) -> bool {
    SIMULATION_ONLY.contains(&name.split(':').next().unwrap_or_default().trim())
}

/// A policy name that [`by_name`] cannot build: no policy of that name, or a parameter it does
/// not take or a value out of its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownPolicy {
    /// No policy of that name.
    Name(String),
    /// The policy exists; a parameter is not one it takes, or its value is not allowed.
    Parameter {
        /// The whole name as given.
        given: String,
        /// What was wrong, in words.
        detail: String,
    },
}

impl fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnknownPolicy::Name(n) => write!(f, "unknown policy `{n}` (known: {})", POLICY_NAMES.join(", ")),
            UnknownPolicy::Parameter { given, detail } => write!(f, "policy `{given}`: {detail}"),
        }
    }
}

impl std::error::Error for UnknownPolicy {}

/// Parameters `coordinated` and `coordinated-auto` take after their name, `:key=value` each
/// (`coordinated:write-kwh=12:write-hold-h=4`): the operator's price of a setpoint write, which
/// trades EEPROM wear against energy (`RESULTS.md` measures the trade-off), and a hard weekly
/// allowance of writes (one for all writes, or the CDUs' and the facility water systems' apart),
/// the memory of a facility-water move the plans undid, the settling day, the hours of air
/// ahead, the adiabatic probe, the hold on returning to a heat-rejection mode, the chillers'
/// margin on the CDUs' approach and the tanks' pressure band and heat memory.
pub const COORDINATED_PARAMETERS: [(&str, &str); 14] = [
    (
        "write-kwh",
        "energy a setpoint write is charged, kWh at CDUs of 1,440 kW design (0 to 1000)",
    ),
    (
        "write-hold-h",
        "longest time a move's write charge is spread over, h (1 to 168)",
    ),
    (
        "write-budget",
        "most setpoint writes the policy's moves may take in any 7 days, per CDU (0: no cap; up to 1000)",
    ),
    (
        "facility-write-budget",
        "with write-budget: an allowance of the facility water systems' own (setpoint and heat-rejection mode writes in any 7 days, per hall; write-budget then counts the CDUs' writes only; 0: one allowance for all; up to 1000)",
    ),
    (
        "regret-h",
        "a facility-water move the plans undo within 3 h is not made again (halfway or further) for this long while the outdoor air is as it was, h (0: no such memory; up to 48)",
    ),
    (
        "settle-h",
        "with write-budget: the moves of this long after the first plan out of the learning day are made at the plain price and not counted (0 to 168, default 24)",
    ),
    (
        "ahead-h",
        "hours of outdoor air ahead (yesterday's, corrected by today's difference) a candidate is judged over (0: the air now; up to 24)",
    ),
    (
        "ahead-stages",
        "with ahead-h: 2 (default) judges the CDU setpoints over the hours ahead with the facility setpoint and mode chosen again each hour; 1 holds every setpoint over them",
    ),
    (
        "probe-h",
        "longest time the adiabatic assist is held on to learn what it saves, h (0: never; up to 24)",
    ),
    (
        "mode-return-h",
        "a heat-rejection mode the plan left is not chosen again for this long, h (0: no hold; up to 24)",
    ),
    (
        "chiller-margin-k",
        "while the chillers run, the facility water is kept this far beyond the CDUs' approach, K (1: as without chillers; up to 10)",
    ),
    (
        "tank-pressure-frac",
        "two-phase immersion: a tank at the heat it is planned at may run its pool at the saturation temperature of this fraction of its relief pressure (0.1 to 0.75, default 0.4; the controller's guard acts at 0.8)",
    ),
    (
        "tank-heat-h",
        "two-phase immersion: plan each tank at the highest heat it carried over this many hours, plus 5 %, instead of its design heat (0: design heat; up to 168; default 1)",
    ),
    (
        "tank-full-frac",
        "two-phase immersion, with tank-heat-h: a tank going to its design heat under the plan's setpoints must settle below this fraction of its relief pressure (0.1 to 1, default 0.9)",
    ),
];

/// The `:key=value` parts after a policy's name, each value a finite number.
fn key_values<'a>(given: &str, parts: &[&'a str]) -> Result<Vec<(&'a str, f64)>, UnknownPolicy> {
    let bad = |detail: String| UnknownPolicy::Parameter {
        given: given.to_string(),
        detail,
    };
    parts
        .iter()
        .map(|part| {
            let Some((k, v)) = part.split_once('=') else {
                return Err(bad(format!("`{part}` is not key=value")));
            };
            let (k, v) = (k.trim(), v.trim());
            v.parse()
                .ok()
                .filter(|x: &f64| x.is_finite())
                .map(|x| (k, x))
                .ok_or_else(|| bad(format!("{k}: `{v}` is not a finite number")))
        })
        .collect()
}

/// `coordinated`'s parameters from the `:key=value` parts after its name.
fn coordinated_params(
    given: &str,
    base: CoordinatedParams,
    parts: &[&str],
) -> Result<CoordinatedParams, UnknownPolicy> {
    let bad = |detail: String| UnknownPolicy::Parameter {
        given: given.to_string(),
        detail,
    };
    let mut p = base;
    for (k, x) in key_values(given, parts)? {
        match k {
            "write-kwh" if (0.0..=1000.0).contains(&x) => p.write_cost_kwh = x,
            "write-hold-h" if (1.0..=168.0).contains(&x) => p.write_amortise_max_s = x * 3600.0,
            "write-budget" if (0.0..=1000.0).contains(&x) => p.write_budget_per_cdu_week = x,
            "facility-write-budget" if (0.0..=1000.0).contains(&x) => p.facility_write_budget_per_hall_week = x,
            "settle-h" if (0.0..=168.0).contains(&x) => p.settle_s = x * 3600.0,
            "ahead-h" if (0.0..=24.0).contains(&x) => p.ahead_s = x * 3600.0,
            "ahead-stages" if x == 1.0 || x == 2.0 => p.ahead_two_stage = x == 2.0,
            "probe-h" if (0.0..=24.0).contains(&x) => p.probe_assist_s = x * 3600.0,
            "mode-return-h" if (0.0..=24.0).contains(&x) => p.mode_return_s = x * 3600.0,
            "regret-h" if (0.0..=48.0).contains(&x) => p.fac_regret_s = x * 3600.0,
            "chiller-margin-k" if (1.0..=10.0).contains(&x) => p.chiller_gap_margin_k = x,
            "tank-pressure-frac" if (0.1..=0.75).contains(&x) => p.tank_pressure_frac = x,
            "tank-heat-h" if (0.0..=168.0).contains(&x) => p.tank_heat_memory_s = x * 3600.0,
            "tank-full-frac" if (0.1..=1.0).contains(&x) => p.tank_full_load_frac = x,
            "ahead-stages" => return Err(bad(format!("ahead-stages = {x} is neither 1 nor 2"))),
            "write-kwh"
            | "write-hold-h"
            | "write-budget"
            | "facility-write-budget"
            | "regret-h"
            | "settle-h"
            | "ahead-h"
            | "probe-h"
            | "mode-return-h"
            | "chiller-margin-k"
            | "tank-pressure-frac"
            | "tank-heat-h"
            | "tank-full-frac" => {
                let range = match k {
                    "write-kwh" | "write-budget" | "facility-write-budget" => "[0, 1000]",
                    "write-hold-h" => "[1, 168]",
                    "settle-h" => "[0, 168]",
                    "regret-h" => "[0, 48]",
                    "chiller-margin-k" => "[1, 10]",
                    "tank-pressure-frac" => "[0.1, 0.75]",
                    "tank-heat-h" => "[0, 168]",
                    "tank-full-frac" => "[0.1, 1]",
                    _ => "[0, 24]",
                };
                return Err(bad(format!("{k} = {x} is outside {range}")));
            }
            _ => {
                let known: Vec<&str> = COORDINATED_PARAMETERS.iter().map(|(k, _)| *k).collect();
                return Err(bad(format!("no parameter `{k}` (known: {})", known.join(", "))));
            }
        }
    }
    // The facility's own allowance splits the one allowance: refused without it, not ignored.
    if p.facility_write_budget_per_hall_week > 0.0 && p.write_budget_per_cdu_week <= 0.0 {
        return Err(bad(
            "facility-write-budget splits a write allowance into the CDUs' and the facility's: give it with write-budget".into(),
        ));
    }
    // A settling day only means something to an allowance: refused alone, not ignored.
    if p.settle_s != base.settle_s && p.write_budget_per_cdu_week <= 0.0 {
        return Err(bad(
            "settle-h is the settling day of a write allowance: give it with write-budget".into(),
        ));
    }
    // The full-load limit is the looser one (a tank at design heat settles there only if it
    // went beyond the heat it was planned at): below the band it would be the band at design
    // heat under another name.
    if p.tank_full_load_frac < p.tank_pressure_frac {
        return Err(bad(format!(
            "tank-full-frac = {} is below tank-pressure-frac = {}: a tank going to its design heat may settle at least as high as the band it is planned in",
            p.tank_full_load_frac, p.tank_pressure_frac
        )));
    }
    Ok(p)
}

/// A policy by its command-line name: one of [`POLICY_NAMES`], for `coordinated` and
/// `coordinated-auto` optionally followed by parameters ([`COORDINATED_PARAMETERS`]).
pub fn by_name(name: &str) -> Result<Box<dyn Policy>, UnknownPolicy> {
    let mut parts = name.split(':');
    let base = parts.next().unwrap_or_default().trim();
    let params: Vec<&str> = parts.collect();
    let no_params = || {
        if params.is_empty() {
            Ok(())
        } else {
            Err(UnknownPolicy::Parameter {
                given: name.to_string(),
                detail: format!("`{base}` takes no parameters"),
            })
        }
    };
    match base {
        "vendor-default" => no_params().map(|_| Box::new(VendorDefault) as Box<dyn Policy>),
        "trim-respond" => no_params().map(|_| Box::new(TrimRespond::default()) as Box<dyn Policy>),
        "coordinated" => {
            let p = coordinated_params(name, CoordinatedParams::default(), &params)?;
            Ok(Box::new(Coordinated::new(p)))
        }
        // The same, leaving the heat-rejection mode to the firmware (for comparison).
        "coordinated-auto" => {
            let base = CoordinatedParams {
                choose_rejection_mode: false,
                ..CoordinatedParams::default()
            };
            Ok(Box::new(Coordinated::new(coordinated_params(name, base, &params)?)))
        }
        "oracle" => Oracle::with_params(name, &params).map(|o| Box::new(o) as Box<dyn Policy>),
        _ => Err(UnknownPolicy::Name(name.to_string())),
    }
}

/// The perfect-knowledge reference, **never deployable**: the scenario harness searches, every
/// hour, for the best constant setpoints on copies of the true plant and hands them to this
/// policy with [`Oracle::set`]; on its own (no harness) it holds design setpoints. The daemon
/// refuses it (`SIMULATION_ONLY`).
///
/// `oracle:cdu-supply=S:cdu-flow=Q` is the same search with the CDUs' supply held at `S` °C and
/// their flow at `Q` of design for the whole run (the facility water and the heat-rejection
/// mode still chosen every hour): a reference for a controller that may not move the CDUs
/// (their setpoint writes), to set against the unconstrained one.
#[derive(Debug, Clone, Default)]
pub struct Oracle {
    chosen: std::sync::Arc<std::sync::Mutex<OracleChoice>>,
    /// CDU supply, °C, and flow, fraction of design, held for the whole run (None: searched).
    pub hold_cdu: Option<(f64, f64)>,
}

/// What the harness chose last: the setpoints (none yet: design), and why (handed out once).
#[derive(Debug, Clone, Default)]
struct OracleChoice {
    setpoints: Option<Setpoints>,
    reasons: Vec<String>,
}

impl Oracle {
    /// The oracle of a policy name's parameters (`cdu-supply=S:cdu-flow=Q`, both or neither).
    fn with_params(name: &str, params: &[&str]) -> Result<Self, UnknownPolicy> {
        let err = |detail: String| UnknownPolicy::Parameter {
            given: name.to_string(),
            detail,
        };
        let (mut s, mut q) = (None, None);
        for (k, x) in key_values(name, params)? {
            match k {
                "cdu-supply" if (10.0..=70.0).contains(&x) => s = Some(x),
                "cdu-flow" if (0.1..=1.5).contains(&x) => q = Some(x),
                "cdu-supply" => return Err(err(format!("cdu-supply = {x}: must be within [10, 70] °C"))),
                "cdu-flow" => return Err(err(format!("cdu-flow = {x}: must be within [0.1, 1.5] of design"))),
                other => {
                    return Err(err(format!(
                        "`oracle` takes cdu-supply and cdu-flow (held for the run), not `{other}`"
                    )))
                }
            }
        }
        match (s, q) {
            (Some(s), Some(q)) => Ok(Self {
                hold_cdu: Some((s, q)),
                ..Self::default()
            }),
            (None, None) => Ok(Self::default()),
            _ => Err(err("cdu-supply and cdu-flow are held together: give both".into())),
        }
    }

    /// The oracle a policy label names (`oracle`, `oracle:cdu-supply=36:cdu-flow=0.7`); None for
    /// any other policy or a label that does not parse.
    pub fn from_label(label: &str) -> Option<Self> {
        let mut parts = label.split(':');
        if parts.next()?.trim() != "oracle" {
            return None;
        }
        let params: Vec<&str> = parts.collect();
        Self::with_params(label, &params).ok()
    }

    /// A handle the harness keeps to set the setpoints (shared with the policy it hands over).
    pub fn handle(&self) -> Self {
        self.clone()
    }
    /// Setpoints (and why) held from now until the next call.
    pub fn set(&self, setpoints: Setpoints, reasons: Vec<String>) {
        if let Ok(mut g) = self.chosen.lock() {
            *g = OracleChoice {
                setpoints: Some(setpoints),
                reasons,
            };
        }
    }
}

impl Policy for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }
    fn label(&self) -> String {
        match self.hold_cdu {
            Some((s, q)) => format!("oracle:cdu-supply={s}:cdu-flow={q}"),
            None => "oracle".into(),
        }
    }
    fn decide(&mut self, input: &PolicyInput<'_>) -> Decision {
        let (setpoints, reasons) = match self.chosen.lock() {
            Ok(mut g) => (g.setpoints.clone(), std::mem::take(&mut g.reasons)),
            Err(_) => (None, Vec::new()),
        };
        Decision {
            setpoints: setpoints.unwrap_or_else(|| input.limits.design_setpoints()),
            power_limits: Vec::new(),
            placement: None,
            reasons,
            plan: None,
        }
    }
}

/// Out-of-the-box operation: design setpoints, no caps, first-fit placement.
#[derive(Debug, Clone, Copy, Default)]
pub struct VendorDefault;

impl Policy for VendorDefault {
    fn name(&self) -> &'static str {
        "vendor-default"
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Decision {
        Decision {
            setpoints: input.limits.design_setpoints(),
            power_limits: Vec::new(),
            placement: None,
            reasons: Vec::new(),
            plan: None,
        }
    }
}

/// Parameters of the trim-and-respond resets (ASHRAE Guideline 36 §5.1.14 vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrimRespondParams {
    /// Time between resets, s (G36 `T`).
    pub period_s: f64,
    /// Requests ignored (G36 `I`) for CDU resets.
    pub ignored_requests: u32,
    /// CDU supply trim per period when requests ≤ I, K (towards warmer).
    pub supply_trim_k: f64,
    /// CDU supply respond per request above I, K (towards colder).
    pub supply_respond_k: f64,
    /// Largest CDU supply respond per period, K.
    pub supply_respond_max_k: f64,
    /// Flow trim per period, fraction of design flow (only once supply is at its maximum).
    pub flow_trim_frac: f64,
    /// Flow respond per request above I, fraction of design flow.
    pub flow_respond_frac: f64,
    /// Largest flow respond per period, fraction of design flow.
    pub flow_respond_max_frac: f64,
    /// GPU margin to slowdown at which a rack raises 1 request, K (2 at 2/3, 3 at 1/3 of it).
    pub request_margin_k: f64,
    /// Facility supply trim per period, K (towards warmer).
    pub facility_trim_k: f64,
    /// Facility supply respond per request, K.
    pub facility_respond_k: f64,
    /// Largest facility respond per period, K.
    pub facility_respond_max_k: f64,
    /// CDU valve position above which a CDU raises a facility request, %.
    pub valve_request_pct: f64,
    /// Commissioned upper bound of the CDU supply reset, K above the design setpoint.
    ///
    /// Requests only see today's temperatures; a contractor bounds the reset so that a rack
    /// going from idle to full power at the reset limits still stays below slowdown (with the
    /// cold-plate data of the site file: at design +3 K and 80 % flow a 1,000 W GPU with a
    /// +4 σ cold plate reaches about 83 °C).
    pub supply_max_above_design_k: f64,
    /// Commissioned lower bound of the flow reset, fraction of design flow.
    pub flow_min_frac: f64,
    /// Two-phase immersion: tank pressure, as a fraction of the relief pressure (above
    /// atmospheric), at which a tank raises 1 request (2 at 1.5×, 3 at 2× this fraction). A
    /// tank is commissioned to run near atmospheric pressure: pressure is what the condenser
    /// water is reset on, since the dies sit far below slowdown at any pressure the tank allows.
    pub tank_request_frac: f64,
    /// A facility trim towards warmer water is judged this long after it was made, s: kept if the
    /// measured heat-rejection fans + facility pumps + CDU pumps + chiller power did not rise, else
    /// undone (warmer facility water opens the CDU valves and costs pumping).
    pub facility_probe_settle_s: f64,
    /// After an undone facility trim, no trim towards warmer water for this long, s.
    pub facility_hold_s: f64,
    /// Relative rise of the measured cooling power that undoes a facility trim.
    pub facility_probe_deadband: f64,
    /// Deadband of the CDU resets, K: a CDU trims only while every one of its racks has a GPU
    /// margin to slowdown above `request_margin_k + trim_deadband_k`; between that and the request
    /// margin (or with requests at or below `ignored_requests`) it holds its setpoints.
    pub trim_deadband_k: f64,
    /// A CDU trims only after this many consecutive quiet resets (no request, margin above the
    /// deadband), like G36's requirement that a condition persist before a request changes.
    pub trim_quiet_periods: u32,
    /// A trimmed CDU supply setpoint is written only once it differs from the one written by at
    /// least this much, K (a respond towards colder water is written at once).
    pub min_write_supply_k: f64,
    /// A trimmed CDU flow setpoint is written only once it differs from the one written by at
    /// least this fraction of design flow (a respond towards more flow is written at once).
    pub min_write_flow_frac: f64,
}

impl Default for TrimRespondParams {
    fn default() -> Self {
        Self {
            period_s: 120.0,
            ignored_requests: 2,
            supply_trim_k: 0.2,
            supply_respond_k: 0.3,
            supply_respond_max_k: 1.0,
            flow_trim_frac: 0.02,
            flow_respond_frac: 0.05,
            flow_respond_max_frac: 0.2,
            request_margin_k: 9.0,
            facility_trim_k: 0.2,
            facility_respond_k: 0.3,
            facility_respond_max_k: 1.0,
            valve_request_pct: 92.0,
            supply_max_above_design_k: 3.0,
            flow_min_frac: 0.8,
            tank_request_frac: 0.2,
            facility_probe_settle_s: 600.0,
            facility_hold_s: 3600.0,
            facility_probe_deadband: 0.01,
            trim_deadband_k: 3.0,
            trim_quiet_periods: 3,
            min_write_supply_k: 1.0,
            min_write_flow_frac: 0.1,
        }
    }
}

/// Guideline 36-style trim and respond.
#[derive(Debug, Clone, Default)]
pub struct TrimRespond {
    /// Parameters.
    pub params: TrimRespondParams,
    /// The reset's own setpoints (trims accumulate here).
    state: Option<Setpoints>,
    /// The setpoints last handed out (written).
    written: Option<Setpoints>,
    /// Per CDU: consecutive quiet resets.
    quiet_resets: Vec<u32>,
    last_reset_s: Option<f64>,
    /// Per hall: (measured cooling power before the last trim towards warmer water, kW; when).
    facility_probe: Vec<Option<(f64, f64)>>,
    /// Per hall: no trim towards warmer water before this time, s.
    facility_hold_until: Vec<f64>,
}

impl TrimRespond {
    /// With explicit parameters.
    pub fn new(params: TrimRespondParams) -> Self {
        Self {
            params,
            ..Default::default()
        }
    }

    /// Trim and respond taking over from setpoints already in force (bumpless transfer: from
    /// another policy, without a jump back to design or to an old state of its own).
    pub fn starting_from(params: TrimRespondParams, current: &Setpoints) -> Self {
        Self {
            params,
            state: Some(current.clone()),
            written: Some(current.clone()),
            ..Default::default()
        }
    }

    /// Measured power of everything a facility reset trades, kW: heat-rejection fans, facility
    /// pumps, chiller and the hall's CDU pumps; `None` if a reading is not usable.
    fn hall_cooling_kw(input: &PolicyInput<'_>, h: usize, max_age_s: f64) -> Option<f64> {
        let f = input.image.facilities.get(h)?;
        let mut total = 0.0;
        for r in [&f.fan_power_kw, &f.pump_power_kw, &f.chiller_power_kw] {
            if !r.usable(input.now_s, max_age_s) {
                return None;
            }
            total += r.value;
        }
        for c in input.topology.halls[h].cdus.clone() {
            let r = &input.image.cdus.get(c)?.pump_power_kw;
            if !r.usable(input.now_s, max_age_s) {
                return None;
            }
            total += r.value;
        }
        Some(total)
    }

    /// Requests a CDU's racks raise from their hottest GPU readings (stale or bad readings raise
    /// the maximum: an unknown temperature is treated as a hot one), and whether every rack is
    /// quiet, i.e. more than `trim_deadband_k` beyond the request margin (only then may it trim).
    fn cdu_requests(&self, input: &PolicyInput<'_>, cdu: usize) -> (u32, bool) {
        let m = self.params.request_margin_k;
        let mut req = 0;
        let mut quiet = true;
        for r in input.topology.cdus[cdu].racks.clone() {
            let reading = input.image.racks.get(r).map(|x| x.gpu_temp_max_c);
            let margin = match reading {
                Some(x) if x.usable(input.now_s, 3.0 * self.params.period_s) => input.limits.gpu_slowdown_c - x.value,
                _ => f64::NEG_INFINITY,
            };
            quiet &= margin > m + self.params.trim_deadband_k;
            req += if margin <= m / 3.0 {
                3
            } else if margin <= 2.0 * m / 3.0 {
                2
            } else if margin <= m {
                1
            } else {
                0
            };
        }
        (req, quiet)
    }

    /// Requests a two-phase immersion tank raises from its pressure (0 for a cold-plate CDU).
    fn tank_requests(&self, input: &PolicyInput<'_>, cdu: usize) -> u32 {
        let mut req = 0;
        // A two-phase immersion tank asks for colder condenser water as its pressure rises
        // (the gauge, or the pool thermometer when the gauge is lost; an unknown pressure counts
        // as a high one).
        let l = &input.limits.cdus[cdu];
        if let Some(relief) = l.tank_relief_gauge_kpa {
            let f = self.params.tank_request_frac;
            let frac = l
                .tank_pressure(
                    input.image.cdus.get(cdu).and_then(|m| m.tank.as_ref()),
                    input.now_s,
                    3.0 * self.params.period_s,
                )
                .gauge_or_pool()
                .map_or(f64::INFINITY, |p| p / relief);
            req += if frac >= 2.0 * f {
                3
            } else if frac >= 1.5 * f {
                2
            } else if frac >= f {
                1
            } else {
                0
            };
        }
        req
    }
}

impl Policy for TrimRespond {
    fn name(&self) -> &'static str {
        "trim-respond"
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Decision {
        let p = self.params;
        let limits = input.limits;
        let mut sp = self.state.clone().unwrap_or_else(|| limits.design_setpoints());
        let mut reasons = Vec::new();
        let due = self.last_reset_s.is_none_or(|t| input.now_s - t >= p.period_s - 1e-6);
        if due {
            self.last_reset_s = Some(input.now_s);
            for (c, l) in limits.cdus.iter().enumerate() {
                let tank_req = self.tank_requests(input, c);
                let (gpu_req, quiet) = self.cdu_requests(input, c);
                let req = gpu_req + tank_req;
                self.quiet_resets.resize(limits.cdus.len(), 0);
                self.quiet_resets[c] = if quiet && tank_req == 0 {
                    self.quiet_resets[c].saturating_add(1)
                } else {
                    0
                };
                let trim_ok = self.quiet_resets[c] >= p.trim_quiet_periods;
                let supply_max = l.supply_max_c.min(l.supply_design_c + p.supply_max_above_design_k);
                let flow_min = l.flow_min_lpm.max(p.flow_min_frac * l.flow_design_lpm);
                let s = &mut sp.cdus[c];
                if req > p.ignored_requests {
                    let over = (req - p.ignored_requests) as f64;
                    let d_t = (p.supply_respond_k * over).min(p.supply_respond_max_k);
                    let d_f = (p.flow_respond_frac * over).min(p.flow_respond_max_frac) * l.flow_design_lpm;
                    s.supply_c = (s.supply_c - d_t).max(l.supply_min_c);
                    s.flow_lpm = (s.flow_lpm + d_f).min(l.flow_max_lpm);
                    reasons.push(format!(
                        "cdu {c}: {req} requests from hot GPUs: supply −{d_t:.1} K, flow +{d_f:.0} L/min"
                    ));
                } else if tank_req > 0 || !trim_ok {
                    // A tank inside its pressure band holds its condenser water, and a CDU with
                    // requests at or below the ignored number holds its setpoints (no hunting).
                } else if s.supply_c < supply_max - 1e-9 {
                    s.supply_c = (s.supply_c + p.supply_trim_k).min(supply_max);
                } else {
                    s.flow_lpm = (s.flow_lpm - p.flow_trim_frac * l.flow_design_lpm).max(flow_min);
                }
            }
            self.facility_probe.resize(limits.facilities.len(), None);
            self.facility_hold_until
                .resize(limits.facilities.len(), f64::NEG_INFINITY);
            for (h, l) in limits.facilities.iter().enumerate() {
                let mut req = 0u32;
                for c in input.topology.halls[h].cdus.clone() {
                    let m = &input.image.cdus[c];
                    let valve = m.valve_pct;
                    if !valve.usable(input.now_s, 3.0 * p.period_s) {
                        req += 2;
                        continue;
                    }
                    if valve.value >= 99.0 {
                        req += 2;
                    } else if valve.value >= p.valve_request_pct {
                        req += 1;
                    }
                    if m.supply_temp_c.usable(input.now_s, 3.0 * p.period_s)
                        && m.supply_temp_c.value > sp.cdus[c].supply_c + 1.0
                    {
                        req += 1;
                    }
                }
                let cooling_kw = Self::hall_cooling_kw(input, h, 3.0 * p.period_s);
                let f = &mut sp.facilities[h];
                if req > 0 {
                    let d = (p.facility_respond_k * req as f64).min(p.facility_respond_max_k);
                    *f = (*f - d).max(l.supply_min_c);
                    self.facility_probe[h] = None;
                    reasons.push(format!(
                        "hall {h}: {req} requests from CDU valves: facility supply −{d:.1} K"
                    ));
                } else if let Some((before_kw, at_s)) = self.facility_probe[h] {
                    // Judge the last trim towards warmer water on the measured cooling power.
                    if input.now_s - at_s >= p.facility_probe_settle_s - 1e-6 {
                        self.facility_probe[h] = None;
                        match cooling_kw {
                            Some(now_kw) if now_kw > before_kw * (1.0 + p.facility_probe_deadband) => {
                                *f = (*f - p.facility_trim_k).max(l.supply_min_c);
                                self.facility_hold_until[h] = input.now_s + p.facility_hold_s;
                                reasons.push(format!(
                                    "hall {h}: warmer facility water raised fans + pumps + chiller from {before_kw:.0} to {now_kw:.0} kW: facility supply −{:.1} K, held for {:.0} s",
                                    p.facility_trim_k, p.facility_hold_s
                                ));
                            }
                            Some(_) => {}
                            None => {
                                // Cannot judge it: undo it (fail towards the design side).
                                *f = (*f - p.facility_trim_k).max(l.supply_min_c);
                                self.facility_hold_until[h] = input.now_s + p.facility_hold_s;
                            }
                        }
                    }
                } else if input.now_s >= self.facility_hold_until[h] {
                    // Never ask for facility water warmer than the coldest CDU setpoint of the hall allows.
                    let coldest = input.topology.halls[h]
                        .cdus
                        .clone()
                        .map(|c| sp.cdus[c].supply_c)
                        .fold(f64::INFINITY, f64::min);
                    let before = *f;
                    *f = (*f + p.facility_trim_k)
                        .min(l.supply_max_c)
                        .min(coldest - 2.0)
                        .max(l.supply_min_c);
                    if *f > before + 1e-9 {
                        match cooling_kw {
                            Some(kw) => self.facility_probe[h] = Some((kw, input.now_s)),
                            // Without the power readings a trim cannot be judged: do not make it.
                            None => *f = before,
                        }
                    }
                }
            }
        }
        self.state = Some(sp.clone());
        // Minimum change to write: a trim is handed out only once it has moved the setpoint by
        // `min_write_*` from the one written; a respond (colder, more flow) is handed out at once.
        let mut out = self.written.clone().unwrap_or_else(|| sp.clone());
        for (c, l) in limits.cdus.iter().enumerate() {
            let (want, w) = (sp.cdus[c], &mut out.cdus[c]);
            // A trim that reached its bound is written too (the last step may be small).
            let supply_max = l.supply_max_c.min(l.supply_design_c + p.supply_max_above_design_k);
            let flow_min = l.flow_min_lpm.max(p.flow_min_frac * l.flow_design_lpm);
            if want.supply_c < w.supply_c
                || want.supply_c - w.supply_c >= p.min_write_supply_k - 1e-9
                || want.supply_c >= supply_max - 1e-9
            {
                w.supply_c = want.supply_c;
            }
            let d_f = p.min_write_flow_frac * l.flow_design_lpm;
            if want.flow_lpm > w.flow_lpm
                || w.flow_lpm - want.flow_lpm >= d_f - 1e-9
                || want.flow_lpm <= flow_min + 1e-9
            {
                w.flow_lpm = want.flow_lpm;
            }
        }
        out.facilities.clone_from(&sp.facilities);
        self.written = Some(out.clone());
        Decision {
            setpoints: out,
            power_limits: Vec::new(),
            placement: None,
            reasons,
            plan: None,
        }
    }
}

/// Convert a flow in L/min of PG25 to kg/s (re-exported for policies that reason in mass flow).
pub fn lpm_to_kg_s(lpm: f64) -> f64 {
    pg25_lpm_to_kg_s(lpm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coolplane_core::signals::{CduMeasurement, RackMeasurement, Reading};
    use coolplane_core::site::builtin_site;

    /// A gauge found lying is not trusted again because it was away for an hour: the first
    /// readings after the loss decide. One that comes back honest is together again at once.
    #[test]
    fn a_tank_cross_check_remembers_a_lying_gauge_through_a_loss() {
        let both = |g: f64, p: f64| TankPressure {
            gauge_kpa: Some(g),
            from_pool_kpa: Some(p),
        };
        let mut c = TankCrossCheck::default();
        let mut t = 0.0;
        for _ in 0..30 {
            t += 60.0;
            c.update(t, &both(1.0, 3.0));
        }
        assert!(c.apart());
        assert_eq!(c.acted_on(&both(1.0, 3.0)), Some(3.0));
        // The gauge lost for an hour: the pool alone is acted on, and nothing is forgotten.
        let lost = TankPressure {
            gauge_kpa: None,
            from_pool_kpa: Some(3.0),
        };
        for _ in 0..60 {
            t += 60.0;
            c.update(t, &lost);
            assert_eq!(c.acted_on(&lost), Some(3.0));
        }
        assert!(c.apart());
        // Back, still 2 kPa low: still apart, the higher acted on.
        let mut back = c;
        back.update(t + 60.0, &both(1.0, 3.0));
        assert!(back.apart());
        assert_eq!(back.acted_on(&both(1.0, 3.0)), Some(3.0));
        // Back honest: together at once (after an hour the first reading decides).
        c.update(t + 60.0, &both(3.0, 3.0));
        assert!(!c.apart());
        assert_eq!(c.acted_on(&both(3.0, 3.1)), Some(3.0));
        // Neither path: nothing to act on.
        assert_eq!(c.acted_on(&TankPressure::default()), None);
    }

    fn image(topo: &Topology, gpu_max: f64, valve: f64, t: f64) -> Measurements {
        Measurements {
            t_s: t,
            racks: vec![
                RackMeasurement {
                    gpu_temp_max_c: Reading::good(gpu_max, t),
                    ..Default::default()
                };
                topo.racks.len()
            ],
            cdus: vec![
                CduMeasurement {
                    valve_pct: Reading::good(valve, t),
                    supply_temp_c: Reading::good(40.0, t),
                    ..Default::default()
                };
                topo.cdus.len()
            ],
            ..Default::default()
        }
    }

    #[test]
    fn vendor_default_holds_design() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let cur = limits.design_setpoints();
        let img = image(&topo, 88.0, 100.0, 0.0);
        let d = VendorDefault.decide(&PolicyInput {
            now_s: 0.0,
            image: &img,
            limits: &limits,
            topology: &topo,
            current: &cur,
        });
        assert_eq!(d.setpoints, limits.design_setpoints());
        assert!((d.setpoints.cdus[0].flow_lpm - 2160.0).abs() < 1e-9);
    }

    /// The facility reset towards warmer water is kept only where it saves energy net of pumping:
    /// a trim after which fans + pumps + chiller draw more is undone and held off; one after which
    /// they draw less is kept; without power readings no trim is made.
    #[test]
    fn trim_respond_keeps_a_facility_trim_only_if_it_saves_net_of_pumping() {
        use coolplane_core::signals::FacilityMeasurement;
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let cur = limits.design_setpoints();
        let with_power = |fans_kw: f64, t: f64| {
            let mut m = image(&topo, 70.0, 50.0, t);
            for c in &mut m.cdus {
                c.pump_power_kw = Reading::good(5.0, t);
            }
            m.facilities = vec![
                FacilityMeasurement {
                    fan_power_kw: Reading::good(fans_kw, t),
                    pump_power_kw: Reading::good(40.0, t),
                    chiller_power_kw: Reading::good(0.0, t),
                    ..Default::default()
                };
                topo.halls.len()
            ];
            m
        };
        let decide = |tr: &mut TrimRespond, img: &Measurements, t: f64| {
            tr.decide(&PolicyInput {
                now_s: t,
                image: img,
                limits: &limits,
                topology: &topo,
                current: &cur,
            })
            .setpoints
            .facilities[0]
        };
        let design = cur.facilities[0];
        // Costs more after the trim: undone, then held for facility_hold_s.
        let mut tr = TrimRespond::default();
        let f0 = decide(&mut tr, &with_power(100.0, 0.0), 0.0);
        assert!((f0 - design - 0.2).abs() < 1e-9, "{f0} vs {design}");
        assert_eq!(
            decide(&mut tr, &with_power(200.0, 120.0), 120.0),
            f0,
            "held while judged"
        );
        let f1 = decide(&mut tr, &with_power(200.0, 600.0), 600.0);
        assert!((f1 - design).abs() < 1e-9, "undone: {f1}");
        for t in [720.0, 1800.0, 4000.0] {
            assert!(
                (decide(&mut tr, &with_power(200.0, t), t) - design).abs() < 1e-9,
                "held at {t}"
            );
        }
        assert!(
            decide(&mut tr, &with_power(200.0, 4320.0), 4320.0) > design,
            "trims again after the hold"
        );
        // Saves after the trim: kept, and the next trim follows.
        let mut tr = TrimRespond::default();
        let f0 = decide(&mut tr, &with_power(300.0, 0.0), 0.0);
        let f1 = decide(&mut tr, &with_power(250.0, 600.0), 600.0);
        assert_eq!(f1, f0, "kept");
        assert!(
            decide(&mut tr, &with_power(250.0, 720.0), 720.0) > f0 + 0.1,
            "next trim"
        );
        // No power readings: no trim towards warmer water.
        let mut tr = TrimRespond::default();
        let f = decide(&mut tr, &image(&topo, 70.0, 50.0, 0.0), 0.0);
        assert_eq!(f, design);
    }

    #[test]
    fn trim_respond_trims_when_cool_and_responds_when_hot() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let cur = limits.design_setpoints();
        // Trim at the first quiet reset and hand out every change (the deadband and the minimum
        // write are tested below).
        let mut tr = TrimRespond::new(TrimRespondParams {
            trim_quiet_periods: 1,
            min_write_supply_k: 0.0,
            min_write_flow_frac: 0.0,
            ..Default::default()
        });
        let cool = image(&topo, 70.0, 50.0, 0.0);
        let d0 = tr.decide(&PolicyInput {
            now_s: 0.0,
            image: &cool,
            limits: &limits,
            topology: &topo,
            current: &cur,
        });
        assert!(
            (d0.setpoints.cdus[0].supply_c - 40.2).abs() < 1e-9,
            "{:?}",
            d0.setpoints.cdus[0]
        );
        // Not due again before the period has passed.
        let d1 = tr.decide(&PolicyInput {
            now_s: 60.0,
            image: &cool,
            limits: &limits,
            topology: &topo,
            current: &cur,
        });
        assert_eq!(d1.setpoints, d0.setpoints);
        // Hot GPUs (1 K from slowdown) in every rack: 36 requests, capped respond.
        let hot = image(&topo, 88.0, 50.0, 120.0);
        let d2 = tr.decide(&PolicyInput {
            now_s: 120.0,
            image: &hot,
            limits: &limits,
            topology: &topo,
            current: &cur,
        });
        assert!((d2.setpoints.cdus[0].supply_c - 39.2).abs() < 1e-9);
        assert!(
            (d2.setpoints.cdus[0].flow_lpm - 2160.0 * 1.1).abs() < 1e-6,
            "flow capped at max"
        );
        assert!(!d2.reasons.is_empty());
    }

    /// Guideline 36 deadband: hottest GPUs wandering just outside the request margin (9.5 and 11.5 K
    /// from slowdown, the margin is 9 K and the deadband 3 K) leave the setpoints alone, where the
    /// reset without a deadband trims at every period; a clearly cool hall is trimmed after three
    /// quiet resets, handed out only in steps of `min_write_supply_k` (and at its bound); hot GPUs
    /// are answered at once.
    #[test]
    fn trim_respond_has_a_deadband_and_a_minimum_write() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let cur = limits.design_setpoints();
        let slow = limits.gpu_slowdown_c;
        let p = TrimRespondParams::default();
        let decide = |tr: &mut TrimRespond, gpu: f64, t: f64| {
            tr.decide(&PolicyInput {
                now_s: t,
                image: &image(&topo, gpu, 50.0, t),
                limits: &limits,
                topology: &topo,
                current: &cur,
            })
            .setpoints
            .cdus[0]
        };
        let changes = |tr: &mut TrimRespond| {
            let mut last = decide(tr, slow - 9.5, 0.0);
            let mut n = 0;
            for k in 1..100 {
                let gpu = if k % 2 == 0 { slow - 9.5 } else { slow - 11.5 };
                let out = decide(tr, gpu, k as f64 * p.period_s);
                if out != last {
                    n += 1;
                    last = out;
                }
            }
            n
        };
        assert_eq!(
            changes(&mut TrimRespond::default()),
            0,
            "setpoints moved inside the deadband"
        );
        // The check can fail: without the deadband and the minimum write the same GPUs move the
        // setpoints at every reset until the trims reach their bounds.
        let mut old = TrimRespond::new(TrimRespondParams {
            trim_deadband_k: 0.0,
            trim_quiet_periods: 0,
            min_write_supply_k: 0.0,
            min_write_flow_frac: 0.0,
            ..p
        });
        assert!(changes(&mut old) >= 20, "without the deadband");
        // Clearly cool: trims of 0.2 K per period after 3 quiet resets, written in steps of ≥ 1 K,
        // up to the bound.
        let mut tr = TrimRespond::default();
        let design = cur.cdus[0].supply_c;
        let bound = limits.cdus[0].supply_max_c.min(design + p.supply_max_above_design_k);
        let mut written = vec![decide(&mut tr, slow - 20.0, 0.0).supply_c];
        assert_eq!(written[0], design, "no trim before three quiet resets");
        for k in 1..40 {
            let s = decide(&mut tr, slow - 20.0, k as f64 * p.period_s).supply_c;
            if s != *written.last().unwrap() {
                written.push(s);
            }
        }
        assert!((written.last().unwrap() - bound).abs() < 1e-9, "{written:?}");
        assert!(written.len() <= 4, "{written:?}");
        for w in written.windows(2) {
            let d = w[1] - w[0];
            assert!(
                d >= p.min_write_supply_k - 1e-9 || (w[1] - bound).abs() < 1e-9,
                "{written:?}"
            );
        }
        // Hot: answered at the next reset, colder by the capped respond.
        let hot = decide(&mut tr, slow - 1.0, 40.0 * p.period_s).supply_c;
        assert!((hot - (bound - p.supply_respond_max_k)).abs() < 1e-9, "{hot}");
    }

    #[test]
    fn unknown_policy_lists_known_ones() {
        let e = by_name("pid").err().unwrap().to_string();
        assert!(e.contains("pid") && e.contains("trim-respond"));
    }

    #[test]
    fn coordinated_takes_a_write_price_and_names_it_back() {
        assert_eq!(by_name("coordinated").unwrap().label(), "coordinated");
        // Defaults given explicitly are not repeated in the label.
        assert_eq!(by_name("coordinated:write-kwh=1.5").unwrap().label(), "coordinated");
        let given = "coordinated:write-kwh=12:write-hold-h=8";
        let p = by_name(given).unwrap();
        assert_eq!((p.name(), p.label().as_str()), ("coordinated", given));
        assert_eq!(by_name(&p.label()).unwrap().label(), given);
        let auto = by_name("coordinated-auto:write-kwh=25").unwrap();
        assert_eq!(auto.label(), "coordinated-auto:write-kwh=25");
        // Spaces around the parts are tolerated (a TOML value written by hand).
        assert_eq!(
            by_name("coordinated: write-kwh = 6").unwrap().label(),
            "coordinated:write-kwh=6"
        );
    }

    #[test]
    fn the_oracle_holds_the_cdus_where_asked_and_names_it_back() {
        let held = by_name("oracle: cdu-supply = 36 : cdu-flow=0.7").unwrap();
        assert_eq!(
            (held.name(), held.label().as_str()),
            ("oracle", "oracle:cdu-supply=36:cdu-flow=0.7")
        );
        let o = Oracle::from_label(&held.label()).unwrap();
        assert_eq!(o.hold_cdu, Some((36.0, 0.7)));
        assert_eq!(Oracle::from_label("oracle").unwrap().hold_cdu, None);
        assert!(Oracle::from_label("coordinated").is_none());
        assert!(simulation_only("oracle:cdu-supply=36:cdu-flow=0.7") && simulation_only(" oracle"));
        assert!(!simulation_only("coordinated:write-budget=5"));
        let err = |n: &str| by_name(n).err().unwrap().to_string();
        let e = err("oracle:cdu-supply=36");
        assert!(e.contains("give both"), "{e}");
        let e = err("oracle:cdu-supply=36:cdu-flow=3");
        assert!(e.contains("cdu-flow = 3") && e.contains("[0.1, 1.5]"), "{e}");
        let e = err("oracle:cdu-supply=hot:cdu-flow=0.7");
        assert!(e.contains("cdu-supply: `hot` is not a finite number"), "{e}");
        let e = err("oracle:write-kwh=6");
        assert!(e.contains("`write-kwh`"), "{e}");
    }

    #[test]
    fn a_bad_policy_parameter_names_what_was_wrong() {
        let err = |n: &str| by_name(n).err().unwrap().to_string();
        let e = err("coordinated:write-kwh=-1");
        assert!(e.contains("write-kwh = -1") && e.contains("[0, 1000]"), "{e}");
        let e = err("coordinated:write-hold-h=0.5");
        assert!(e.contains("write-hold-h") && e.contains("[1, 168]"), "{e}");
        let e = err("coordinated:probe-h=25");
        assert!(e.contains("probe-h = 25") && e.contains("[0, 24]"), "{e}");
        assert_eq!(
            by_name("coordinated:probe-h=0").unwrap().label(),
            "coordinated:probe-h=0"
        );
        let e = err("coordinated:chiller-margin-k=0.5");
        assert!(e.contains("chiller-margin-k = 0.5") && e.contains("[1, 10]"), "{e}");
        assert_eq!(
            by_name("coordinated:chiller-margin-k=1").unwrap().label(),
            "coordinated:chiller-margin-k=1"
        );
        let e = err("coordinated:tank-pressure-frac=0.8");
        assert!(
            e.contains("tank-pressure-frac = 0.8") && e.contains("[0.1, 0.75]"),
            "{e}"
        );
        assert_eq!(
            by_name("coordinated:tank-pressure-frac=0.6").unwrap().label(),
            "coordinated:tank-pressure-frac=0.6"
        );
        assert_eq!(
            by_name("coordinated:tank-heat-h=4:tank-full-frac=0.85")
                .unwrap()
                .label(),
            "coordinated:tank-heat-h=4:tank-full-frac=0.85"
        );
        assert_eq!(
            by_name("coordinated:tank-heat-h=0").unwrap().label(),
            "coordinated:tank-heat-h=0"
        );
        assert_eq!(by_name("coordinated:tank-heat-h=1").unwrap().label(), "coordinated");
        let e = err("coordinated:tank-heat-h=200");
        assert!(e.contains("tank-heat-h = 200") && e.contains("[0, 168]"), "{e}");
        let e = err("coordinated:tank-pressure-frac=0.6:tank-full-frac=0.5");
        assert!(
            e.contains("tank-full-frac = 0.5 is below tank-pressure-frac = 0.6"),
            "{e}"
        );
        let e = err("coordinated:tank-full-frac=1.2");
        assert!(e.contains("tank-full-frac = 1.2") && e.contains("[0.1, 1]"), "{e}");
        let e = err("coordinated:write-budget=-5");
        assert!(e.contains("write-budget = -5") && e.contains("[0, 1000]"), "{e}");
        assert_eq!(
            by_name("coordinated:write-budget=5").unwrap().label(),
            "coordinated:write-budget=5"
        );
        assert_eq!(by_name("coordinated:write-budget=0").unwrap().label(), "coordinated");
        let e = err("coordinated:settle-h=0");
        assert!(e.contains("give it with write-budget"), "{e}");
        let e = err("coordinated:write-budget=5:settle-h=200");
        assert!(e.contains("settle-h = 200") && e.contains("[0, 168]"), "{e}");
        assert_eq!(
            by_name("coordinated:write-budget=5:settle-h=0").unwrap().label(),
            "coordinated:write-budget=5:settle-h=0"
        );
        let e = err("coordinated:facility-write-budget=50");
        assert!(e.contains("give it with write-budget"), "{e}");
        let e = err("coordinated:write-budget=1:facility-write-budget=1001");
        assert!(
            e.contains("facility-write-budget = 1001") && e.contains("[0, 1000]"),
            "{e}"
        );
        assert_eq!(
            by_name("coordinated:write-budget=1:facility-write-budget=50:regret-h=12")
                .unwrap()
                .label(),
            "coordinated:write-budget=1:facility-write-budget=50:regret-h=12"
        );
        let e = err("coordinated:regret-h=49");
        assert!(e.contains("regret-h = 49") && e.contains("[0, 48]"), "{e}");
        assert_eq!(by_name("coordinated:regret-h=0").unwrap().label(), "coordinated");
        let e = err("coordinated:ahead-stages=3");
        assert!(e.contains("ahead-stages = 3") && e.contains("neither 1 nor 2"), "{e}");
        assert_eq!(
            by_name("coordinated:ahead-h=12:ahead-stages=1").unwrap().label(),
            "coordinated:ahead-h=12:ahead-stages=1"
        );
        assert_eq!(by_name("coordinated:ahead-h=0").unwrap().label(), "coordinated");
        let e = err("coordinated:ahead-h=25");
        assert!(e.contains("ahead-h = 25") && e.contains("[0, 24]"), "{e}");
        assert_eq!(
            by_name("coordinated:write-budget=5:ahead-h=24").unwrap().label(),
            "coordinated:write-budget=5:ahead-h=24"
        );
        let e = err("coordinated:mode-return-h=-1");
        assert!(e.contains("mode-return-h = -1") && e.contains("[0, 24]"), "{e}");
        assert_eq!(
            by_name("coordinated:mode-return-h=0").unwrap().label(),
            "coordinated:mode-return-h=0"
        );
        let e = err("coordinated:write-kwh=NaN");
        assert!(e.contains("not a finite number"), "{e}");
        let e = err("coordinated:write-kwh=lots");
        assert!(e.contains("`lots`"), "{e}");
        let e = err("coordinated:pace=3");
        assert!(
            e.contains("no parameter `pace`") && e.contains("write-kwh, write-hold-h"),
            "{e}"
        );
        let e = err("coordinated:write-kwh");
        assert!(e.contains("not key=value"), "{e}");
        for n in ["trim-respond:write-kwh=6", "vendor-default:x=1"] {
            let e = err(n);
            assert!(e.contains("takes no parameters") && e.contains(n), "{e}");
        }
        assert!(matches!(by_name("pid:write-kwh=6"), Err(UnknownPolicy::Name(_))));
    }
}
