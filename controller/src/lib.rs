//! # coolplane-controller
//!
//! The supervisory controller as a sans-IO state machine: a process image of measurements (each
//! with its timestamp and quality) and the time go in, [`Actions`] come out. The same code runs
//! against the simulated plant in-process and, through the adapters, against real devices.
//!
//! Each [`Controller::tick`]:
//! 1. judges every input's freshness (staleness is data, never a hidden timeout);
//! 2. runs the policy when its slow loop is due (in `auto` mode), and its fast loop every tick
//!    (`auto` and `manual`: the power budget is held whoever holds the cooling setpoints);
//! 3. arbitrates, each stage only narrowing what the earlier allowed: safety envelope (equipment
//!    limits, thermal guard, stale-data fallback to design setpoints) → operator hold (`manual`)
//!    → policy → defaults;
//! 4. rate-limits setpoint moves, writes a setpoint only when it differs from the value the device
//!    reads back by more than a deadband (EEPROM wear), and refreshes every device's heartbeat;
//! 5. explains every change of mode and every safety intervention as an event.
//!
//! Power limits are fail-closed: when GPU telemetry is stale no limit is ever raised. A GPU
//! within `emergency_margin_k` of its slowdown temperature gets an emergency power cap, cut
//! further every tick it stays there and released step by step once it is cool again: the last
//! line of defence when cooling cannot respond (a valve stuck shut, a lost pump).
//!
//! Architecture invariants: no IO, no wall clock, no global random number generator.

pub mod budget;
pub mod ledger;

use coolplane_core::signals::{Actions, CduCommand, FacilityCommand, Measurements, RackPowerLimits, RejectionMode};
use coolplane_core::site::Site;
use coolplane_core::topology::Topology;
use coolplane_policies::{
    Decision, EnergyPlan, PlantLimits, Policy, PolicyInput, Setpoints, TankCrossCheck, TankPressure,
    TANK_CROSSCHECK_KPA, TANK_CROSSCHECK_TAU_S,
};
use serde::{Deserialize, Serialize};

/// Tuning of the controller's own safety behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControllerConfig {
    /// A reading older than this is stale, s.
    pub stale_after_s: f64,
    /// Thermal guard: act when a rack's hottest GPU is within this margin of slowdown, K.
    pub guard_margin_k: f64,
    /// Largest CDU supply setpoint move, K per minute.
    pub supply_rate_k_per_min: f64,
    /// Largest flow setpoint decrease per minute, fraction of design flow (increases are not limited).
    pub flow_down_rate_frac_per_min: f64,
    /// Largest facility supply setpoint move, K per minute.
    pub facility_rate_k_per_min: f64,
    /// Temperature setpoints are written when they differ from the read-back value by more, K.
    pub deadband_k: f64,
    /// Flow setpoints are written when they differ from the read-back value by more, L/min.
    pub deadband_lpm: f64,
    /// A ramp moves a setpoint at most once in this many seconds, by up to its rate times the
    /// time since its last move (EEPROM wear: a 1 K/min ramp at 5 s ticks writes once a minute,
    /// not twelve times). The thermal guard's moves (colder supply, full flow), flow increases and
    /// a facility setpoint following its CDUs' approach are not held. At most 120 s (one step of
    /// a ramp is at most its rate times this), s.
    pub ramp_hold_s: f64,
    /// Period of the slow (cooling setpoint) loop, s.
    pub slow_period_s: f64,
    /// Tank pressure guard (two-phase immersion): act when a tank's pressure reaches this
    /// fraction of its relief pressure (above atmospheric), before the relief vents fluid.
    pub tank_guard_frac: f64,
    /// Emergency power caps: a GPU within this margin of slowdown has its power limit cut, K
    /// (the last line of defence when cooling cannot respond: a stuck valve, a lost pump).
    pub emergency_margin_k: f64,
    /// Emergency power caps: each tick a GPU stays within the margin, its limit drops by this
    /// fraction of the limit in force (twice that at slowdown itself), down to the lowest cap.
    pub emergency_cut_frac: f64,
    /// A hall's heat-rejection mode changes to dry or adiabatic only this many seconds after its
    /// last change (wetting and drying the adiabatic pads cycles them and their water
    /// treatment); a return to auto (stale data, safe mode, a refused dry, the policy's choice)
    /// is never held. The hold also starts when the controller first reads a hall's setpoints
    /// in force back, s.
    pub rejection_mode_hold_s: f64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            stale_after_s: 180.0,
            guard_margin_k: 4.0,
            supply_rate_k_per_min: 1.0,
            flow_down_rate_frac_per_min: 0.1,
            facility_rate_k_per_min: 1.0,
            deadband_k: 0.06,
            deadband_lpm: 1.0,
            ramp_hold_s: 60.0,
            slow_period_s: 60.0,
            tank_guard_frac: 0.8,
            emergency_margin_k: 2.0,
            emergency_cut_frac: 0.15,
            rejection_mode_hold_s: 900.0,
        }
    }
}

impl ControllerConfig {
    /// Allowed range of every field: (field, low, high, low end included). A value outside
    /// (NaN and infinities included) would turn a safety function off, so it is refused.
    pub const RANGES: [(&'static str, f64, f64, bool); 13] = [
        ("stale_after_s", 1.0, 3_600.0, true),
        ("guard_margin_k", 0.5, 30.0, true),
        ("supply_rate_k_per_min", 0.0, 10.0, false),
        ("flow_down_rate_frac_per_min", 0.0, 1.0, false),
        ("facility_rate_k_per_min", 0.0, 10.0, false),
        ("deadband_k", 0.0, 2.0, true),
        ("deadband_lpm", 0.0, 500.0, true),
        ("ramp_hold_s", 0.0, 120.0, true),
        ("slow_period_s", 1.0, 3_600.0, true),
        ("tank_guard_frac", 0.1, 0.99, true),
        ("emergency_margin_k", 0.25, 30.0, true),
        ("emergency_cut_frac", 0.0, 0.5, false),
        ("rejection_mode_hold_s", 0.0, 86_400.0, true),
    ];

    /// Check every field against [`Self::RANGES`]; the error names the field, its value and the
    /// allowed range.
    pub fn validate(&self) -> Result<(), String> {
        let values = [
            self.stale_after_s,
            self.guard_margin_k,
            self.supply_rate_k_per_min,
            self.flow_down_rate_frac_per_min,
            self.facility_rate_k_per_min,
            self.deadband_k,
            self.deadband_lpm,
            self.ramp_hold_s,
            self.slow_period_s,
            self.tank_guard_frac,
            self.emergency_margin_k,
            self.emergency_cut_frac,
            self.rejection_mode_hold_s,
        ];
        for ((field, lo, hi, lo_incl), v) in Self::RANGES.iter().zip(values) {
            let above_lo = if *lo_incl { v >= *lo } else { v > *lo };
            if !(v.is_finite() && above_lo && v <= *hi) {
                let open = if *lo_incl { '[' } else { '(' };
                return Err(format!("controller.{field} = {v}: must be within {open}{lo}, {hi}]"));
            }
        }
        Ok(())
    }

    /// Check the policy against this configuration: a policy that plans two-phase tanks up to a
    /// fraction of their relief pressure ([`Policy::tank_pressure_frac`]) must plan at least
    /// [`TANK_BAND_BELOW_GUARD`] of it below where the tank guard acts, or every plan would run
    /// into the guard. The error names both settings.
    pub fn check_policy(&self, policy: &dyn Policy) -> Result<(), String> {
        match policy.tank_pressure_frac() {
            Some(band) if band > self.tank_guard_frac - TANK_BAND_BELOW_GUARD + 1e-9 => Err(format!(
                "{}: tank-pressure-frac = {band} plans the tanks into the controller's tank guard (controller.tank_guard_frac = {}): keep it at least {TANK_BAND_BELOW_GUARD} below",
                policy.label(),
                self.tank_guard_frac
            )),
            _ => Ok(()),
        }
    }
}

/// How far below the tank guard's fraction of the relief pressure a policy's planning band must
/// stay ([`ControllerConfig::check_policy`]).
pub const TANK_BAND_BELOW_GUARD: f64 = 0.05;

/// Operating mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The policy proposes; the safety envelope narrows.
    Auto,
    /// The operator holds the setpoints; the safety envelope still acts.
    Manual,
    /// Design setpoints everywhere (entered automatically when the process image is stale).
    Safe,
}

/// Severity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Informational.
    Info,
    /// Needs attention.
    Warning,
    /// Safety action taken.
    Critical,
}

/// Something the controller did and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControllerEvent {
    /// When, s.
    pub t_s: f64,
    /// How serious.
    pub severity: Severity,
    /// Explanation for operators.
    pub message: String,
}

/// How a tank's pressure is known to the controller's guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TankPaths {
    /// Gauge and pool thermometer agree.
    Agree,
    /// They are further apart than the cross-check allows.
    Disagree,
    /// Only the pool thermometer is usable.
    GaugeLost,
    /// Only the gauge is usable.
    PoolLost,
    /// Neither is.
    Unknown,
}

/// The supervisory controller.
pub struct Controller {
    cfg: ControllerConfig,
    limits: PlantLimits,
    topo: Topology,
    policy: Box<dyn Policy>,
    mode: Mode,
    requested_mode: Mode,
    proposal: Setpoints,
    commanded: Setpoints,
    last_tick_s: Option<f64>,
    /// Time of the first tick, s (NaN before it).
    started_s: f64,
    last_slow_s: Option<f64>,
    cdu_stale: Vec<bool>,
    cdu_guard: Vec<bool>,
    /// Per CDU: its tank's gauge against its pool thermometer over time, and how its pressure
    /// is known (events on each change).
    tank_checks: Vec<TankCrossCheck>,
    tank_paths: Vec<TankPaths>,
    /// When each ramp last moved its commanded setpoint (per CDU supply, per CDU flow, per hall
    /// facility supply), s; set to the first tick's time (a new controller holds first).
    supply_moved_s: Vec<f64>,
    flow_moved_s: Vec<f64>,
    facility_moved_s: Vec<f64>,
    /// Per hall: when the heat-rejection mode commanded (in `commanded.rejection`) last
    /// changed, s.
    rejection_moved_s: Vec<f64>,
    events: Vec<ControllerEvent>,
    last_reasons: Vec<String>,
    writes: u64,
    operator: OperatorSetpoints,
    /// Per CDU and per hall: whether the setpoints in force have been read back and adopted as
    /// the starting point of the rate limits (at start, and again after the device was stale).
    cdu_adopted: Vec<bool>,
    hall_adopted: Vec<bool>,
    /// Emergency power cap per GPU, W (infinite: none).
    ecap: Vec<f32>,
    /// Racks whose last emitted limits carried an emergency cap.
    ecap_rack: Vec<bool>,
    /// Per CDU: its supply temperature when GPU telemetry was last fresh, °C.
    supply_at_gpu_report: Vec<f64>,
    /// Energy plans the policy made and nobody has taken yet (bounded).
    plans: Vec<EnergyPlan>,
    /// Per rack: the limits the policy last sent (after clamping), the base an emergency cap
    /// falls back to when it is released (not TDP, which would lift a budget cap).
    policy_caps: Vec<Option<Vec<f32>>>,
    /// Per rack: a raise the policy asked for was held back on stale data.
    raise_pending: Vec<bool>,
}

/// Setpoints an operator holds (leases kept by the runtime): each replaces the policy's proposal
/// for its equipment while the data is fresh and the mode is not `Safe`; the thermal guard,
/// equipment limits and rate limits still apply to it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorSetpoints {
    /// Per CDU: supply temperature, °C.
    pub cdu_supply_c: Vec<Option<f64>>,
    /// Per CDU: secondary flow, L/min.
    pub cdu_flow_lpm: Vec<Option<f64>>,
    /// Per hall: facility water supply temperature, °C.
    pub facility_supply_c: Vec<Option<f64>>,
}

/// Which operator setpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorPoint {
    /// CDU supply temperature, °C.
    CduSupply(usize),
    /// CDU secondary flow, L/min.
    CduFlow(usize),
    /// Hall facility water supply temperature, °C.
    FacilitySupply(usize),
}

impl Controller {
    /// A controller for a validated site running `policy`.
    pub fn new(site: &Site, mut policy: Box<dyn Policy>, cfg: ControllerConfig) -> Self {
        let topo = Topology::new(site);
        policy.bind(site, &topo);
        let limits = PlantLimits::from_site(site, &topo);
        let design = limits.design_setpoints();
        // Halls and CDUs as the topology expands them (a site entry may stand for several).
        let (n_cdu, n_hall) = (topo.cdus.len(), topo.halls.len());
        let (n_gpu, n_rack) = (topo.gpu_count, topo.racks.len());
        Self {
            cfg,
            cdu_stale: vec![false; topo.cdus.len()],
            cdu_guard: vec![false; topo.cdus.len()],
            tank_checks: vec![TankCrossCheck::default(); topo.cdus.len()],
            tank_paths: vec![TankPaths::Agree; topo.cdus.len()],
            supply_moved_s: vec![f64::NAN; n_cdu],
            flow_moved_s: vec![f64::NAN; n_cdu],
            facility_moved_s: vec![f64::NAN; n_hall],
            rejection_moved_s: vec![f64::NEG_INFINITY; n_hall],
            topo,
            policy,
            mode: Mode::Auto,
            requested_mode: Mode::Auto,
            proposal: design.clone(),
            commanded: Setpoints {
                rejection: vec![RejectionMode::Auto; n_hall],
                ..design
            },
            limits,
            last_tick_s: None,
            started_s: f64::NAN,
            last_slow_s: None,
            events: Vec::new(),
            last_reasons: Vec::new(),
            writes: 0,
            operator: OperatorSetpoints {
                cdu_supply_c: vec![None; n_cdu],
                cdu_flow_lpm: vec![None; n_cdu],
                facility_supply_c: vec![None; n_hall],
            },
            cdu_adopted: vec![false; n_cdu],
            hall_adopted: vec![false; n_hall],
            ecap: vec![f32::INFINITY; n_gpu],
            ecap_rack: vec![false; n_rack],
            supply_at_gpu_report: vec![f64::NAN; n_cdu],
            plans: Vec::new(),
            policy_caps: vec![None; n_rack],
            raise_pending: vec![false; n_rack],
        }
    }

    /// Setpoints operators hold now.
    pub fn operator_setpoints(&self) -> &OperatorSetpoints {
        &self.operator
    }

    /// Hold (`Some`) or release (`None`) an operator setpoint. A value outside the equipment's
    /// range is refused with the range (it is never clamped silently); an accepted value still
    /// passes the thermal guard and the rate limits every tick. Returns the value held.
    pub fn set_operator_setpoint(
        &mut self,
        point: OperatorPoint,
        value: Option<f64>,
        now_s: f64,
    ) -> Result<Option<f64>, String> {
        let (slot, range, unit, what) = match point {
            OperatorPoint::CduSupply(c) => {
                let l = self.limits.cdus.get(c).ok_or_else(|| format!("no CDU {c}"))?;
                (
                    &mut self.operator.cdu_supply_c[c],
                    (l.supply_min_c, l.supply_max_c),
                    "°C",
                    format!("{} supply setpoint", self.topo.cdus[c].name),
                )
            }
            OperatorPoint::CduFlow(c) => {
                let l = self.limits.cdus.get(c).ok_or_else(|| format!("no CDU {c}"))?;
                (
                    &mut self.operator.cdu_flow_lpm[c],
                    (l.flow_min_lpm, l.flow_max_lpm),
                    "L/min",
                    format!("{} flow setpoint", self.topo.cdus[c].name),
                )
            }
            OperatorPoint::FacilitySupply(h) => {
                let l = self.limits.facilities.get(h).ok_or_else(|| format!("no hall {h}"))?;
                (
                    &mut self.operator.facility_supply_c[h],
                    (l.supply_min_c, l.supply_max_c),
                    "°C",
                    format!("{} facility water supply setpoint", self.topo.halls[h].name),
                )
            }
        };
        if let Some(v) = value {
            if !(v.is_finite() && v >= range.0 && v <= range.1) {
                return Err(format!(
                    "{what}: {v} {unit} is outside the equipment range [{}, {}] {unit}",
                    range.0, range.1
                ));
            }
        }
        let old = *slot;
        *slot = value;
        if old != value {
            let msg = match value {
                Some(v) => format!("operator holds {what} at {v} {unit}"),
                None => format!("operator released {what}: back to the policy"),
            };
            self.event(now_s, Severity::Info, msg);
        }
        Ok(value)
    }

    /// Name of the policy in use.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The mode the operator asked for (the mode in force is `Safe` instead while the process
    /// image is stale).
    pub fn requested_mode(&self) -> Mode {
        self.requested_mode
    }

    /// Operator request: `Auto` or `Manual` (holding the setpoints commanded now). `Safe` forces
    /// design setpoints until another mode is requested.
    pub fn set_mode(&mut self, mode: Mode, now_s: f64) {
        if mode != self.requested_mode {
            self.requested_mode = mode;
            self.event(now_s, Severity::Info, format!("operator requested mode {mode:?}"));
        }
    }

    /// Setpoints commanded now.
    pub fn setpoints(&self) -> &Setpoints {
        &self.commanded
    }

    /// Nameplate limits in use.
    pub fn limits(&self) -> &PlantLimits {
        &self.limits
    }

    /// Setpoint writes issued so far.
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// The policy's reasons from its last run.
    pub fn last_reasons(&self) -> &[String] {
        &self.last_reasons
    }

    /// Take the energy plans the policy made since the last call (`coordinated` makes one every
    /// 15 minutes; the harness writes them to `plans.jsonl`, the daemon publishes them).
    pub fn take_plans(&mut self) -> Vec<EnergyPlan> {
        std::mem::take(&mut self.plans)
    }

    /// Take the events raised since the last call.
    pub fn drain_events(&mut self) -> Vec<ControllerEvent> {
        std::mem::take(&mut self.events)
    }

    /// Raise an event when how CDU `c`'s tank pressure is known changes: its two paths come
    /// apart or together ([`TankCrossCheck`]), a path is lost, or both are.
    fn check_tank_paths(&mut self, c: usize, now_s: f64, tank: &TankPressure) {
        let prev = self.tank_paths[c];
        let now = match (tank.gauge_kpa, tank.from_pool_kpa) {
            (None, None) => TankPaths::Unknown,
            (None, Some(_)) => TankPaths::GaugeLost,
            (Some(_), None) => TankPaths::PoolLost,
            (Some(_), Some(_)) if self.tank_checks[c].apart() => TankPaths::Disagree,
            (Some(_), Some(_)) => TankPaths::Agree,
        };
        if now == prev {
            return;
        }
        self.tank_paths[c] = now;
        let name = self.topo.cdus[c].name.clone();
        let (g, p) = (
            tank.gauge_kpa.map_or("unusable".to_string(), |v| format!("{v:.1} kPa")),
            tank.from_pool_kpa
                .map_or("unusable".to_string(), |v| format!("{v:.1} kPa")),
        );
        let (severity, msg) = match now {
            TankPaths::Disagree => (
                Severity::Warning,
                format!(
                    "{name}: tank pressure gauge reads {g}, its pool thermometer {p} through the fluid's saturation curve: \
                     {:.1} kPa apart now, {:.1} kPa smoothed over {:.0} min (tolerance {TANK_CROSSCHECK_KPA} kPa, \
                     {} kPa in one reading), one of them is wrong; the guard acts on the higher (check both)",
                    self.tank_checks[c].last_kpa().abs(),
                    self.tank_checks[c].smoothed_kpa().unwrap_or(f64::NAN).abs(),
                    TANK_CROSSCHECK_TAU_S / 60.0,
                    3.0 * TANK_CROSSCHECK_KPA
                ),
            ),
            TankPaths::GaugeLost => (
                Severity::Warning,
                format!("{name}: tank pressure gauge unusable: the guard reads the pressure from the pool thermometer ({p})"),
            ),
            TankPaths::PoolLost => (
                Severity::Warning,
                format!("{name}: tank pool thermometer unusable: the guard has the gauge alone ({g}), with no cross-check"),
            ),
            TankPaths::Unknown => (
                Severity::Critical,
                format!(
                    "{name}: tank pressure unknown (gauge and pool thermometer unusable): the guard holds what it last decided"
                ),
            ),
            TankPaths::Agree if prev == TankPaths::Disagree => (
                Severity::Info,
                format!("{name}: tank pressure gauge ({g}) and pool thermometer ({p}) agree again"),
            ),
            TankPaths::Agree => (
                Severity::Info,
                format!("{name}: tank pressure gauge ({g}) and pool thermometer ({p}) both usable again"),
            ),
        };
        self.event(now_s, severity, msg);
    }

    fn event(&mut self, t_s: f64, severity: Severity, message: String) {
        // Bounded: an operator reads events, a flood helps nobody.
        if self.events.len() < 10_000 {
            self.events.push(ControllerEvent { t_s, severity, message });
        }
    }

    /// One control tick at time `now_s` on the latest process image.
    pub fn tick(&mut self, now_s: f64, image: &Measurements) -> Actions {
        // A new controller does not know when the setpoints in force last moved: its first tick
        // holds them (no rate budget), later ticks move at the rate limits.
        let dt = self.last_tick_s.map_or(0.0, |t| (now_s - t).max(0.0));
        if self.last_tick_s.is_none() {
            self.started_s = now_s;
            for t in self
                .supply_moved_s
                .iter_mut()
                .chain(&mut self.flow_moved_s)
                .chain(&mut self.facility_moved_s)
            {
                *t = now_s;
            }
        }
        self.last_tick_s = Some(now_s);
        let stale_after = self.cfg.stale_after_s;
        let n_cdu = self.topo.cdus.len();
        let n_hall = self.topo.halls.len();
        if image.cdus.len() != n_cdu || image.facilities.len() != n_hall || image.racks.len() != self.topo.racks.len() {
            // A process image of the wrong shape is a wiring error: hold everything safe.
            self.event(
                now_s,
                Severity::Critical,
                "process image does not match the site topology: safe setpoints".into(),
            );
            return self.safe_actions(now_s);
        }

        // 1. Freshness.
        let gpu_fresh = now_s - image.gpus.t_s <= stale_after && !image.gpus.temp_c.is_empty();
        let mut any_stale = !gpu_fresh;
        for c in 0..n_cdu {
            let m = &image.cdus[c];
            let racks_ok = self.topo.cdus[c]
                .racks
                .clone()
                .all(|r| image.racks[r].gpu_temp_max_c.usable(now_s, stale_after));
            let stale =
                !(m.supply_temp_c.usable(now_s, stale_after) && m.flow_lpm.usable(now_s, stale_after) && racks_ok);
            if stale != self.cdu_stale[c] {
                let msg = if stale {
                    format!(
                        "{}: measurements stale or bad: falling back to design setpoints",
                        self.topo.cdus[c].name
                    )
                } else {
                    format!("{}: measurements fresh again: resuming", self.topo.cdus[c].name)
                };
                self.event(now_s, if stale { Severity::Warning } else { Severity::Info }, msg);
            }
            self.cdu_stale[c] = stale;
            if stale {
                // Read the setpoint in force back again when the device returns: it may have
                // fallen back to its local setpoint meanwhile.
                self.cdu_adopted[c] = false;
            }
            any_stale |= stale;
        }
        let all_stale = !gpu_fresh || self.cdu_stale.iter().all(|s| *s);
        let new_mode = if self.requested_mode == Mode::Safe || all_stale {
            Mode::Safe
        } else {
            self.requested_mode
        };
        if new_mode != self.mode {
            self.event(
                now_s,
                Severity::Warning,
                format!(
                    "mode {:?} → {:?}{}",
                    self.mode,
                    new_mode,
                    if all_stale { " (process image stale)" } else { "" }
                ),
            );
            self.mode = new_mode;
        }

        // 2. Policy on the slow loop.
        let mut decision: Option<Decision> = None;
        let slow_due = self
            .last_slow_s
            .is_none_or(|t| now_s - t >= self.cfg.slow_period_s - 1e-6);
        if slow_due {
            self.last_slow_s = Some(now_s);
            match self.mode {
                Mode::Auto => {
                    let d = self.policy.decide(&PolicyInput {
                        now_s,
                        image,
                        limits: &self.limits,
                        topology: &self.topo,
                        current: &self.commanded,
                    });
                    if d.setpoints.cdus.len() == n_cdu && d.setpoints.facilities.len() == n_hall {
                        let mut p = d.setpoints.clone();
                        // A non-finite proposal is a policy defect: keep what is commanded now.
                        let mut bad = 0usize;
                        for (x, cur) in p.cdus.iter_mut().zip(&self.commanded.cdus) {
                            if !x.supply_c.is_finite() {
                                x.supply_c = cur.supply_c;
                                bad += 1;
                            }
                            if !x.flow_lpm.is_finite() {
                                x.flow_lpm = cur.flow_lpm;
                                bad += 1;
                            }
                        }
                        for (x, cur) in p.facilities.iter_mut().zip(&self.commanded.facilities) {
                            if !x.is_finite() {
                                *x = *cur;
                                bad += 1;
                            }
                        }
                        if bad > 0 {
                            self.event(
                                now_s,
                                Severity::Critical,
                                format!(
                                    "policy {} proposed {bad} non-finite setpoint(s): current setpoints kept",
                                    self.policy.name()
                                ),
                            );
                        }
                        self.proposal = p;
                    } else {
                        self.event(
                            now_s,
                            Severity::Critical,
                            format!(
                                "policy {} proposed setpoints of the wrong shape: ignored",
                                self.policy.name()
                            ),
                        );
                    }
                    self.last_reasons = d.reasons.clone();
                    if let Some(plan) = &d.plan {
                        if self.plans.len() >= 1_000 {
                            self.plans.remove(0);
                        }
                        self.plans.push(plan.clone());
                    }
                    decision = Some(d);
                }
                Mode::Manual => self.proposal = self.commanded.clone(),
                Mode::Safe => self.proposal = self.limits.design_setpoints(),
            }
        }

        // 2b. The policy's fast loop, every tick (auto and manual: the budget is held whoever
        // holds the cooling setpoints; in safe mode nothing new is sent and the caps in force stay).
        let mut fast_limits = Vec::new();
        if self.mode != Mode::Safe {
            let f = self.policy.fast(&PolicyInput {
                now_s,
                image,
                limits: &self.limits,
                topology: &self.topo,
                current: &self.commanded,
            });
            for n in f.notices {
                let sev = if n.warning { Severity::Warning } else { Severity::Info };
                self.event(now_s, sev, n.message);
            }
            fast_limits = f.power_limits;
        }

        // 3. Arbitration and safety envelope, per CDU.
        let design = self.limits.design_setpoints();
        let mut actions = Actions {
            cdus: Vec::with_capacity(n_cdu),
            facilities: Vec::with_capacity(n_hall),
            ..Default::default()
        };
        let minutes = dt / 60.0;
        for c in 0..n_cdu {
            let l = self.limits.cdus[c];
            let mut target = if self.cdu_stale[c] || self.mode == Mode::Safe {
                design.cdus[c]
            } else {
                let mut t = self.proposal.cdus[c];
                if let Some(v) = self.operator.cdu_supply_c[c] {
                    t.supply_c = v;
                }
                if let Some(v) = self.operator.cdu_flow_lpm[c] {
                    t.flow_lpm = v;
                }
                t
            };
            // Thermal guard: a GPU near slowdown overrides any policy.
            let hottest = self.topo.cdus[c]
                .racks
                .clone()
                .filter_map(|r| {
                    let x = image.racks[r].gpu_temp_max_c;
                    x.usable(now_s, stale_after).then_some(x.value)
                })
                .fold(f64::NEG_INFINITY, f64::max);
            // Tank pressure guard: a two-phase immersion tank nearing its relief pressure gets the
            // same response (colder condenser water, full flow) before it vents fluid.
            // Its pressure comes from two independent paths, the gauge and the pool thermometer
            // through the fluid's saturation curve: the guard acts on the gauge while they
            // agree, on the higher when they disagree (a gauge stuck or drifting low must not
            // hide a rising tank), and on the pool alone when the gauge is lost.
            let tank = l.tank_pressure(image.cdus.get(c).and_then(|m| m.tank.as_ref()), now_s, stale_after);
            self.tank_checks[c].update(now_s, &tank);
            let tank_known = self.tank_checks[c].acted_on(&tank);
            let tank_kpa = tank_known.unwrap_or(f64::NEG_INFINITY);
            // (A CDU that stopped answering has its own event; its tank readings went with it.
            // A tank not yet heard from is unknown only once readings had time to arrive.)
            if l.tank_relief_gauge_kpa.is_some()
                && !self.cdu_stale[c]
                && (tank_known.is_some() || now_s - self.started_s >= stale_after)
            {
                self.check_tank_paths(c, now_s, &tank);
            }
            let tank_guard = l
                .tank_relief_gauge_kpa
                .is_some_and(|relief| tank_kpa >= self.cfg.tank_guard_frac * relief);
            // With a rack temperature unusable the guard holds what it last decided: losing the
            // telemetry of a hot rack is no reason to warm its CDU up. So does a tank whose
            // pressure neither path knows.
            let rack_lost = self.topo.cdus[c]
                .racks
                .clone()
                .any(|r| !image.racks[r].gpu_temp_max_c.usable(now_s, stale_after))
                || tank_known.is_none() && l.tank_relief_gauge_kpa.is_some();
            let guard = if rack_lost && self.cdu_guard[c] {
                true
            } else {
                hottest >= self.limits.gpu_slowdown_c - self.cfg.guard_margin_k || tank_guard
            };
            if guard {
                target.supply_c = target
                    .supply_c
                    .min(self.commanded.cdus[c].supply_c - self.cfg.supply_rate_k_per_min * minutes);
                target.flow_lpm = l.flow_max_lpm;
                self.proposal.cdus[c].supply_c = self.proposal.cdus[c].supply_c.min(target.supply_c);
                self.proposal.cdus[c].flow_lpm = l.flow_max_lpm;
            }
            if guard != self.cdu_guard[c] {
                let msg = if guard && tank_guard {
                    let source = match tank.gauge_kpa {
                        Some(g) if g >= tank_kpa => String::new(),
                        Some(g) => format!(" by its pool thermometer (the gauge reads {g:.1} kPa)"),
                        None => " by its pool thermometer (the gauge is unusable)".to_string(),
                    };
                    format!(
                        "{}: tank at {tank_kpa:.1} kPa{source}, {:.0} % of its relief pressure: colder condenser water, full flow",
                        self.topo.cdus[c].name,
                        100.0 * self.cfg.tank_guard_frac
                    )
                } else if guard {
                    format!(
                        "{}: hottest GPU {hottest:.0} °C within {} K of slowdown: colder supply, full flow",
                        self.topo.cdus[c].name, self.cfg.guard_margin_k
                    )
                } else {
                    format!("{}: thermal guard released", self.topo.cdus[c].name)
                };
                self.event(now_s, if guard { Severity::Critical } else { Severity::Info }, msg);
                self.cdu_guard[c] = guard;
            }
            // The starting point of the rate limits is the setpoint in force: read back at start
            // and when the device returns from stale, so a restarted controller or a device that
            // fell back to its local setpoint never sees a jump.
            let m = &image.cdus[c];
            if !self.cdu_adopted[c]
                && !self.cdu_stale[c]
                && m.supply_setpoint_c.usable(now_s, stale_after)
                && m.flow_setpoint_lpm.usable(now_s, stale_after)
            {
                self.cdu_adopted[c] = true;
                let (s0, f0) = (m.supply_setpoint_c.value, m.flow_setpoint_lpm.value);
                let cur = &mut self.commanded.cdus[c];
                if (cur.supply_c - s0).abs() > 1e-6 || (cur.flow_lpm - f0).abs() > 1e-6 {
                    cur.supply_c = s0.clamp(l.supply_min_c, l.supply_max_c);
                    cur.flow_lpm = f0.clamp(l.flow_min_lpm, l.flow_max_lpm);
                    // The device moved (its local fallback): the ramps start a hold from now.
                    self.supply_moved_s[c] = now_s;
                    self.flow_moved_s[c] = now_s;
                    let msg = format!(
                        "{}: setpoints in force read back ({s0:.1} °C, {f0:.0} L/min): moves start from them",
                        self.topo.cdus[c].name
                    );
                    self.event(now_s, Severity::Info, msg);
                }
            }
            // Equipment limits, then rate limits from what is commanded now.
            // Each ramp moves at most once per hold, by its rate times the time since its last
            // move; the guard moves every tick at the rate.
            let cur = self.commanded.cdus[c];
            let s_span = ramp_span_min(now_s, self.supply_moved_s[c], dt, self.cfg.ramp_hold_s, guard);
            let f_span = ramp_span_min(now_s, self.flow_moved_s[c], dt, self.cfg.ramp_hold_s, guard);
            let mut s = target.supply_c.clamp(l.supply_min_c, l.supply_max_c);
            let max_step = self.cfg.supply_rate_k_per_min * s_span;
            s = s.clamp(cur.supply_c - max_step, cur.supply_c + max_step);
            let mut f = target.flow_lpm.clamp(l.flow_min_lpm, l.flow_max_lpm);
            f = f.max(cur.flow_lpm - self.cfg.flow_down_rate_frac_per_min * l.flow_design_lpm * f_span);
            let s = (s * 10.0).round() / 10.0;
            let f = f.round();
            if s != cur.supply_c && now_s.is_finite() {
                self.supply_moved_s[c] = now_s;
            }
            if f != cur.flow_lpm && now_s.is_finite() {
                self.flow_moved_s[c] = now_s;
            }
            self.commanded.cdus[c] = coolplane_policies::CduSetpoint {
                supply_c: s,
                flow_lpm: f,
            };
            // Write on change against the value read back from the device.
            let rb_s = if m.supply_setpoint_c.usable(now_s, stale_after) {
                m.supply_setpoint_c.value
            } else {
                f64::NAN
            };
            let rb_f = if m.flow_setpoint_lpm.usable(now_s, stale_after) {
                m.flow_setpoint_lpm.value
            } else {
                f64::NAN
            };
            // A device on its local fallback reads back its local setpoint; the remote one it
            // returns to when the heartbeat resumes is unknown: write both so it returns to them.
            let write_s = needs_write(s, rb_s, self.cfg.deadband_k) || m.local_fallback;
            let write_f = needs_write(f, rb_f, self.cfg.deadband_lpm) || m.local_fallback;
            self.writes += write_s as u64 + write_f as u64;
            actions.cdus.push(CduCommand {
                supply_temp_setpoint_c: write_s.then_some(s),
                flow_setpoint_lpm: write_f.then_some(f),
                heartbeat: true,
            });
        }
        for h in 0..n_hall {
            let l = self.limits.facilities[h];
            let m = &image.facilities[h];
            let hall_stale = !m.supply_temp_c.usable(now_s, stale_after)
                || self.topo.halls[h].cdus.clone().any(|c| self.cdu_stale[c]);
            let mut target = if hall_stale || self.mode == Mode::Safe {
                design.facilities[h]
            } else {
                self.operator.facility_supply_c[h].unwrap_or(self.proposal.facilities[h])
            };
            // The facility water must stay below the coldest commanded CDU supply minus an approach.
            let coldest = self.topo.halls[h]
                .cdus
                .clone()
                .map(|c| self.commanded.cdus[c].supply_c)
                .fold(f64::INFINITY, f64::min);
            target = target.min(coldest - 2.0);
            if hall_stale {
                self.hall_adopted[h] = false;
            } else if !self.hall_adopted[h] && m.supply_setpoint_c.usable(now_s, stale_after) {
                self.hall_adopted[h] = true;
                // The mode in force too, and its hold starts now (a restarted controller does not
                // change the pads' state seconds after the one before it did).
                if let Some(rb) = m.rejection_mode.filter(|_| l.adiabatic_assist) {
                    if self.commanded.rejection[h] != rb {
                        let msg = format!(
                            "{}: heat-rejection mode in force read back ({}, was commanded {}): it is held from now",
                            self.topo.halls[h].name,
                            rb.name(),
                            self.commanded.rejection[h].name()
                        );
                        self.event(now_s, Severity::Info, msg);
                    }
                    self.commanded.rejection[h] = rb;
                }
                if now_s.is_finite() {
                    self.rejection_moved_s[h] = now_s;
                }
                let s0 = m.supply_setpoint_c.value;
                if (self.commanded.facilities[h] - s0).abs() > 1e-6 {
                    self.commanded.facilities[h] = s0.clamp(l.supply_min_c, l.supply_max_c);
                    self.facility_moved_s[h] = now_s;
                    let msg = format!(
                        "{}: facility setpoint in force read back ({s0:.1} °C): moves start from it",
                        self.topo.halls[h].name
                    );
                    self.event(now_s, Severity::Info, msg);
                }
            }
            // Held like the CDU ramps, except while a CDU of the hall is under the thermal guard
            // or the facility water is warmer than its approach below the coldest CDU allows
            // (a CDU's 1 K step down is then followed in the same tick, not a tick at a time).
            let cur = self.commanded.facilities[h];
            let urgent = coldest - 2.0 < cur || self.topo.halls[h].cdus.clone().any(|c| self.cdu_guard[c]);
            let span = ramp_span_min(now_s, self.facility_moved_s[h], dt, self.cfg.ramp_hold_s, urgent);
            let step = self.cfg.facility_rate_k_per_min * span;
            let s = target
                .clamp(l.supply_min_c, l.supply_max_c)
                .clamp(cur - step, cur + step);
            let s = (s * 10.0).round() / 10.0;
            if s != cur && now_s.is_finite() {
                self.facility_moved_s[h] = now_s;
            }
            self.commanded.facilities[h] = s;
            let rb = if m.supply_setpoint_c.usable(now_s, stale_after) {
                m.supply_setpoint_c.value
            } else {
                f64::NAN
            };
            let write = needs_write(s, rb, self.cfg.deadband_k) || m.local_fallback;
            self.writes += write as u64;
            // Heat-rejection mode: auto when stale or safe (the firmware's own staging), else the
            // policy's where the equipment has the mode. Dry takes a stage away (the assist), so
            // it is refused where no trim chiller stands behind it, and given up for auto while a
            // CDU of the hall is under the thermal guard or the facility water runs more than
            // 2 K above its setpoint. A change to dry or adiabatic waits the hold time since the
            // last change (a return to auto never waits).
            let guard = self.topo.halls[h].cdus.clone().any(|c| self.cdu_guard[c]);
            let warm = m.supply_temp_c.usable(now_s, stale_after) && m.supply_temp_c.value > s + 2.0;
            let proposed = self.proposal.rejection_mode(h);
            let dry_refused = proposed == RejectionMode::Dry && (!l.trim_chiller || guard || warm);
            let want = if hall_stale || self.mode == Mode::Safe || !l.adiabatic_assist || dry_refused {
                RejectionMode::Auto
            } else {
                proposed
            };
            let prev = self.commanded.rejection[h];
            // A clock that is not a number holds (it never releases the hold).
            let since = now_s - self.rejection_moved_s[h];
            let held = want != RejectionMode::Auto && (since.is_nan() || since < self.cfg.rejection_mode_hold_s);
            if want != prev && !held {
                self.commanded.rejection[h] = want;
                if now_s.is_finite() {
                    self.rejection_moved_s[h] = now_s;
                }
                let why = if hall_stale {
                    "the hall's data is stale"
                } else if self.mode == Mode::Safe {
                    "safe mode"
                } else if dry_refused && !l.trim_chiller {
                    "dry refused: no trim chiller behind it"
                } else if dry_refused && guard {
                    "dry refused: a CDU of the hall is under the thermal guard"
                } else if dry_refused {
                    "dry refused: the facility water runs more than 2 K above its setpoint"
                } else {
                    "the policy's choice"
                };
                let msg = format!(
                    "{}: heat-rejection mode {} -> {} ({why})",
                    self.topo.halls[h].name,
                    prev.name(),
                    want.name()
                );
                self.event(now_s, Severity::Info, msg);
            }
            // Written when the device reads back another mode, or after its fallback (it then
            // runs auto and must be told again); a device that reports no mode is written on a
            // change only.
            let mode = self.commanded.rejection[h];
            let write_mode = match m.rejection_mode {
                Some(rb) if !m.local_fallback => rb != mode,
                _ => mode != prev || (m.local_fallback && mode != RejectionMode::Auto),
            };
            self.writes += write_mode as u64;
            actions.facilities.push(FacilityCommand {
                supply_temp_setpoint_c: write.then_some(s),
                rejection_mode: write_mode.then_some(mode),
                heartbeat: true,
            });
        }

        // 4. Power limits: the slow loop's and the fast loop's (the lower wins where both send a
        // rack); clamp to the device range; fail closed (never raise) on stale telemetry.
        let mut proposed = Vec::new();
        let mut newly_held = 0usize;
        if let Some(d) = decision {
            proposed = d.power_limits;
            actions.placement = d.placement;
        }
        for fast in fast_limits {
            match proposed.iter_mut().find(|p: &&mut RackPowerLimits| p.rack == fast.rack) {
                Some(p) => {
                    p.limits_w
                        .resize(fast.limits_w.len().max(p.limits_w.len()), f32::INFINITY);
                    for (w, f) in p.limits_w.iter_mut().zip(&fast.limits_w) {
                        *w = w.min(*f);
                    }
                }
                None => proposed.push(fast),
            }
        }
        for pl in proposed {
            let Some(rack) = self.topo.racks.get(pl.rack as usize) else {
                continue;
            };
            let mut limits_w = pl.limits_w.clone();
            limits_w.truncate(rack.gpus.len());
            let (lo, hi) = (self.limits.gpu_min_cap_w as f32, self.limits.gpu_tdp_w as f32);
            let mut non_finite = 0usize;
            let mut wanted_v = Vec::with_capacity(limits_w.len());
            let mut held = false;
            for (i, w) in limits_w.iter_mut().enumerate() {
                let g = rack.gpus.start + i;
                // The limit in force as telemetry reports it; unknown (missing or not a
                // number) counts as the lowest cap, so that nothing is raised on it.
                let now_limit = reported_limit(image, g).unwrap_or(lo);
                let wanted = if w.is_finite() {
                    *w
                } else {
                    non_finite += 1;
                    now_limit
                };
                let mut x = wanted.clamp(lo, hi);
                wanted_v.push(x);
                if any_stale && x > now_limit {
                    x = now_limit.clamp(lo, hi);
                    held = true;
                }
                *w = x;
            }
            if non_finite > 0 {
                self.event(
                    now_s,
                    Severity::Critical,
                    format!(
                        "policy {} proposed {non_finite} non-finite power limit(s) for rack {}: limits in force kept",
                        self.policy.name(),
                        pl.rack
                    ),
                );
            }
            // What the policy wants stays remembered: a raise held back on stale data is
            // sent once the data is fresh again.
            self.policy_caps[pl.rack as usize] = Some(wanted_v);
            newly_held += (held && !self.raise_pending[pl.rack as usize]) as usize;
            self.raise_pending[pl.rack as usize] = held;
            actions.power_limits.push(RackPowerLimits {
                rack: pl.rack,
                limits_w,
            });
        }
        if newly_held > 0 {
            self.event(
                now_s,
                Severity::Info,
                format!(
                    "policy {} raised power limits on {newly_held} rack(s) while data is stale: limits in force kept, the raise follows when the data is fresh",
                    self.policy.name()
                ),
            );
        }
        if !any_stale {
            for r in 0..self.raise_pending.len() {
                if std::mem::take(&mut self.raise_pending[r])
                    && !actions.power_limits.iter().any(|p| p.rack == r as u32)
                {
                    if let Some(w) = &self.policy_caps[r] {
                        actions.power_limits.push(RackPowerLimits {
                            rack: r as u32,
                            limits_w: w.clone(),
                        });
                    }
                }
            }
        }

        // 5. Emergency power caps (safety envelope, after the policy so nothing can widen them).
        // Sent when they change (they stay in force until then); applied to whatever the policy
        // sent for the same rack. On stale telemetry they are only ever lowered.
        let changed = self.update_emergency_caps(now_s, image, gpu_fresh);
        let (lo, hi) = (self.limits.gpu_min_cap_w as f32, self.limits.gpu_tdp_w as f32);
        for (r, &rack_changed) in changed.iter().enumerate() {
            let gpus = self.topo.racks[r].gpus.clone();
            let policy_sent = actions.power_limits.iter().position(|p| p.rack == r as u32);
            if !(rack_changed || policy_sent.is_some() && self.ecap_rack[r]) {
                continue;
            }
            self.ecap_rack[r] = self.ecap[gpus.clone()].iter().any(|x| x.is_finite());
            let i = match policy_sent {
                Some(i) => i,
                None => {
                    // The rack's other GPUs: on fresh data the policy's last limits (none sent:
                    // TDP); on stale data the limit in force as last reported (unknown: the
                    // lowest cap), never above it.
                    let base = self.policy_caps[r].as_deref();
                    let limits_w = gpus
                        .clone()
                        .enumerate()
                        .map(|(i, g)| {
                            if gpu_fresh {
                                base.and_then(|b| b.get(i).copied()).unwrap_or(hi)
                            } else {
                                reported_limit(image, g).map_or(lo, |x| x.clamp(lo, hi))
                            }
                        })
                        .collect();
                    actions.power_limits.push(RackPowerLimits {
                        rack: r as u32,
                        limits_w,
                    });
                    actions.power_limits.len() - 1
                }
            };
            let limits_w = &mut actions.power_limits[i].limits_w;
            limits_w.resize(gpus.len(), hi);
            for (w, &cap) in limits_w.iter_mut().zip(&self.ecap[gpus]) {
                *w = w.min(cap);
            }
        }
        actions
    }

    /// Cut the power limit of every GPU within `emergency_margin_k` of slowdown, more the closer it
    /// is; release the cut step by step (5 % of TDP a tick) once the GPU is below the thermal
    /// guard's margin and its CDU delivers its setpoint again (supply within 2 K of it: a CDU
    /// that cannot, a valve stuck shut, keeps its GPUs capped).
    ///
    /// On fresh GPU telemetry the measured die temperatures decide. On stale telemetry nothing is
    /// released; each GPU's temperature is then estimated as its last reported one plus the rise
    /// of its CDU's supply temperature (read over Modbus, still fresh) since that report, and caps
    /// are cut on that estimate: blind, the controller only ever lowers power. Returns, per rack,
    /// whether any of its caps changed.
    fn update_emergency_caps(&mut self, now_s: f64, image: &Measurements, gpu_fresh: bool) -> Vec<bool> {
        let stale_after = self.cfg.stale_after_s;
        let n_cdu = self.topo.cdus.len();
        // Per CDU: supply temperature now (NaN: unusable) and whether it misses its setpoint.
        let mut supply = vec![f64::NAN; n_cdu];
        let mut impaired = vec![false; n_cdu];
        for (c, m) in image.cdus.iter().enumerate().take(n_cdu) {
            if m.supply_temp_c.usable(now_s, stale_after) {
                supply[c] = m.supply_temp_c.value;
                let sp = if m.supply_setpoint_c.usable(now_s, stale_after) {
                    m.supply_setpoint_c.value
                } else {
                    self.commanded.cdus[c].supply_c
                };
                impaired[c] = supply[c] > sp + 2.0;
            }
        }
        if gpu_fresh {
            self.supply_at_gpu_report.clone_from(&supply);
        }
        let mut changed = vec![false; self.topo.racks.len()];
        let slow = self.limits.gpu_slowdown_c as f32;
        let margin = self.cfg.emergency_margin_k as f32;
        let release_below = slow - self.cfg.guard_margin_k.max(self.cfg.emergency_margin_k) as f32;
        let (lo, hi) = (self.limits.gpu_min_cap_w as f32, self.limits.gpu_tdp_w as f32);
        let frac = self.cfg.emergency_cut_frac as f32;
        for (r, rack_changed) in changed.iter_mut().enumerate() {
            let gpus = self.topo.racks[r].gpus.clone();
            let c = self.topo.racks[r].cdu;
            // Rise of the supply since the GPU temperatures were reported (0 on fresh data).
            let rise = if gpu_fresh {
                0.0
            } else {
                let d = supply.get(c).copied().unwrap_or(f64::NAN)
                    - self.supply_at_gpu_report.get(c).copied().unwrap_or(f64::NAN);
                if d.is_finite() && d > 0.0 {
                    d as f32
                } else {
                    // Nothing says it got hotter: hold what is in force.
                    continue;
                }
            };
            let hold = impaired.get(c).copied().unwrap_or(false);
            let (mut cut, mut hottest, mut lowest) = (0usize, f32::NEG_INFINITY, f32::INFINITY);
            let was_active = self.ecap[gpus.clone()].iter().any(|x| x.is_finite());
            for g in gpus.clone() {
                let Some(&reported) = image.gpus.temp_c.get(g) else {
                    continue;
                };
                let temp = reported + rise;
                if !temp.is_finite() {
                    continue;
                }
                let e = &mut self.ecap[g];
                let before = *e;
                if temp >= slow - margin {
                    // Unknown limit: TDP on fresh data; on stale data the lowest cap (fail closed).
                    let limit = reported_limit(image, g).unwrap_or(if gpu_fresh { hi } else { lo });
                    let draw = image
                        .gpus
                        .power_w
                        .get(g)
                        .copied()
                        .filter(|x| x.is_finite() && *x > 0.0)
                        .unwrap_or(hi);
                    let depth = (1.0 + (temp - (slow - margin)) / margin).clamp(1.0, 2.0);
                    let base = e.min(limit).min(draw).min(hi);
                    *e = (base * (1.0 - frac * depth)).clamp(lo, hi);
                    cut += 1;
                    hottest = hottest.max(temp);
                    lowest = lowest.min(*e);
                } else if gpu_fresh && !hold && e.is_finite() && temp < release_below {
                    *e += 0.05 * hi;
                    if *e >= hi {
                        *e = f32::INFINITY;
                    }
                }
                *rack_changed |= *e != before;
            }
            let active = self.ecap[gpus].iter().any(|x| x.is_finite());
            let name = &self.topo.racks[r].name;
            if cut > 0 && !was_active {
                let how = if gpu_fresh {
                    String::new()
                } else {
                    format!(" estimated: telemetry stale, CDU supply up {rise:.1} K since it was reported")
                };
                let msg = format!(
                    "{name}: {cut} GPU(s) within {margin} K of slowdown (hottest {hottest:.1} °C{how}): emergency power caps, down to {lowest:.0} W"
                );
                self.event(now_s, Severity::Critical, msg);
            } else if was_active && !active {
                let msg =
                    format!("{name}: GPUs cool again and their CDU holds its setpoint: emergency power caps released");
                self.event(now_s, Severity::Info, msg);
            }
        }
        changed
    }

    fn safe_actions(&mut self, now_s: f64) -> Actions {
        let design = self.limits.design_setpoints();
        self.mode = Mode::Safe;
        let modes = std::mem::replace(
            &mut self.commanded.rejection,
            vec![RejectionMode::Auto; design.facilities.len()],
        );
        for (m, moved) in modes.iter().zip(&mut self.rejection_moved_s) {
            if *m != RejectionMode::Auto {
                *moved = now_s;
            }
        }
        Actions {
            cdus: design
                .cdus
                .iter()
                .map(|c| CduCommand {
                    supply_temp_setpoint_c: Some(c.supply_c),
                    flow_setpoint_lpm: Some(c.flow_lpm),
                    heartbeat: true,
                })
                .collect(),
            facilities: design
                .facilities
                .iter()
                .zip(&modes)
                .map(|(f, m)| FacilityCommand {
                    supply_temp_setpoint_c: Some(*f),
                    // Back to the firmware's own staging (written only if another was commanded:
                    // a device without the mode register is not sent one).
                    rejection_mode: (*m != RejectionMode::Auto).then_some(RejectionMode::Auto),
                    heartbeat: true,
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// GPU `g`'s power limit in force as its telemetry reports it (None: missing or not a number).
fn reported_limit(image: &Measurements, g: usize) -> Option<f32> {
    image.gpus.power_limit_w.get(g).copied().filter(|x| x.is_finite())
}

/// Minutes of rate budget a ramp has this tick. A ramp moves at most once per `hold_s` (1 s of
/// slack for jittery ticks), by at most its rate times the time since its last move, and that
/// time counts at most one move period (the hold rounded up to whole ticks: 60 s at 5 s or 60 s
/// ticks, 80 s at 40 s ticks), so a ramp idle for an hour still moves one step, not a jump.
/// `urgent` ramps are not held (they move every tick, by the same budget). A clock that is not a
/// number or runs backwards gives no budget.
fn ramp_span_min(now_s: f64, moved_s: f64, dt_s: f64, hold_s: f64, urgent: bool) -> f64 {
    let since = now_s - moved_s;
    if !since.is_finite() || since <= 0.0 {
        return 0.0;
    }
    let slack = (0.5 * dt_s).min(1.0);
    if !urgent && since + slack < hold_s {
        return 0.0;
    }
    let period = if dt_s > 0.0 {
        dt_s * ((hold_s - slack).max(0.0) / dt_s).ceil().max(1.0)
    } else {
        hold_s
    };
    since.min(period.max(dt_s)) / 60.0
}

/// A setpoint is written when the device's read-back value is unknown (NaN) or differs from the
/// wanted value by more than the deadband.
fn needs_write(wanted: f64, read_back: f64, deadband: f64) -> bool {
    match (wanted - read_back).abs().partial_cmp(&deadband) {
        Some(std::cmp::Ordering::Greater) | None => true,
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coolplane_core::signals::{
        CduMeasurement, FacilityMeasurement, GpuTelemetry, Quality, RackMeasurement, Reading,
    };
    use coolplane_core::site::builtin_site;
    use coolplane_policies::TrimRespond;

    #[test]
    fn a_tank_band_at_or_above_the_tank_guard_is_refused() {
        let band = |f: &str| coolplane_policies::by_name(&format!("coordinated:tank-pressure-frac={f}")).unwrap();
        let cfg = ControllerConfig::default();
        cfg.check_policy(band("0.75").as_ref()).unwrap();
        cfg.check_policy(&TrimRespond::default()).unwrap();
        let low = ControllerConfig {
            tank_guard_frac: 0.6,
            ..Default::default()
        };
        low.check_policy(band("0.55").as_ref()).unwrap();
        let e = low.check_policy(band("0.56").as_ref()).unwrap_err();
        assert!(
            e.contains("tank-pressure-frac = 0.56") && e.contains("tank_guard_frac = 0.6"),
            "{e}"
        );
        assert!(low
            .check_policy(coolplane_policies::by_name("coordinated").unwrap().as_ref())
            .is_ok());
        let lower = ControllerConfig {
            tank_guard_frac: 0.4,
            ..Default::default()
        };
        assert!(lower
            .check_policy(coolplane_policies::by_name("coordinated").unwrap().as_ref())
            .is_err());
        assert!(lower.check_policy(&TrimRespond::default()).is_ok());
    }

    fn image(topo: &Topology, t: f64, gpu_max: f64) -> Measurements {
        let g = |v| Reading::good(v, t);
        Measurements {
            t_s: t,
            cdus: vec![
                CduMeasurement {
                    supply_temp_c: g(40.0),
                    flow_lpm: g(2160.0),
                    valve_pct: g(50.0),
                    supply_setpoint_c: g(40.0),
                    flow_setpoint_lpm: g(2160.0),
                    ..Default::default()
                };
                topo.cdus.len()
            ],
            facilities: vec![
                FacilityMeasurement {
                    supply_temp_c: g(34.0),
                    supply_setpoint_c: g(34.0),
                    ..Default::default()
                };
                topo.halls.len()
            ],
            racks: vec![
                RackMeasurement {
                    gpu_temp_max_c: g(gpu_max),
                    ..Default::default()
                };
                topo.racks.len()
            ],
            gpus: GpuTelemetry {
                t_s: t,
                temp_c: vec![gpu_max as f32; topo.gpu_count],
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn ctl(policy: &str) -> (Controller, Topology) {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        (
            Controller::new(
                &site,
                coolplane_policies::by_name(policy).unwrap(),
                ControllerConfig::default(),
            ),
            topo,
        )
    }

    #[test]
    fn writes_only_on_change_and_always_heartbeats() {
        let (mut c, topo) = ctl("vendor-default");
        let a = c.tick(0.0, &image(&topo, 0.0, 70.0));
        assert_eq!(
            a.setpoint_writes(),
            0,
            "design setpoints already in force: nothing to write"
        );
        assert!(a.cdus.iter().all(|x| x.heartbeat) && a.facilities.iter().all(|x| x.heartbeat));
        assert_eq!(a.cdus.len(), 12);
    }

    /// A site entry with `count = 10` stands for ten halls: every per-hall slot (operator
    /// setpoints included) follows the topology, not the number of entries in the file.
    #[test]
    fn a_site_whose_hall_entry_repeats_is_controlled_hall_by_hall() {
        let site = builtin_site("campus-100k").unwrap();
        let topo = Topology::new(&site);
        assert!(topo.halls.len() > site.halls.len(), "premise: a repeated hall entry");
        let mut c = Controller::new(&site, Box::new(TrimRespond::default()), ControllerConfig::default());
        for k in 0..3 {
            let t = k as f64 * 60.0;
            let a = c.tick(t, &image(&topo, t, 70.0));
            assert_eq!(a.facilities.len(), topo.halls.len());
        }
        assert_eq!(c.operator_setpoints().facility_supply_c.len(), topo.halls.len());
        assert_eq!(c.operator_setpoints().cdu_supply_c.len(), topo.cdus.len());
    }

    #[test]
    fn stale_cdu_falls_back_to_design_and_says_so() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let mut c = Controller::new(&site, Box::new(TrimRespond::default()), ControllerConfig::default());
        // Let trim-respond raise the setpoints for a while (it trims after three quiet resets,
        // in whole kelvins).
        for k in 0..60 {
            let t = k as f64 * 60.0;
            let mut img = image(&topo, t, 70.0);
            for (i, m) in img.cdus.iter_mut().enumerate() {
                m.supply_setpoint_c = Reading::good(c.setpoints().cdus[i].supply_c, t);
                m.flow_setpoint_lpm = Reading::good(c.setpoints().cdus[i].flow_lpm, t);
            }
            c.tick(t, &img);
        }
        assert!(c.setpoints().cdus[3].supply_c > 41.0, "{:?}", c.setpoints().cdus[3]);
        c.drain_events();
        // CDU 3 stops answering: its readings go bad.
        let t = 60.0 * 60.0;
        let mut img = image(&topo, t, 70.0);
        img.cdus[3].supply_temp_c.quality = Quality::Bad;
        let before = c.setpoints().cdus[3].supply_c;
        c.tick(t, &img);
        let after = c.setpoints().cdus[3].supply_c;
        assert!(after < before, "moves towards design: {before} → {after}");
        assert!((before - after - 1.0).abs() < 0.11, "rate-limited to 1 K/min");
        let ev = c.drain_events();
        assert!(
            ev.iter()
                .any(|e| e.message.contains("cdu-04") && e.message.contains("stale")),
            "{ev:?}"
        );
        // Others keep their policy setpoints.
        assert!(c.setpoints().cdus[2].supply_c > 41.0);
    }

    /// A tank's pressure gauge reading low cannot hide a rising tank: the guard reads the pool
    /// thermometer through the fluid's saturation curve, says so, and says when the two paths
    /// part, when one is lost, when both are, and when they agree again.
    #[test]
    fn a_tank_gauge_reading_low_cannot_hide_a_rising_tank() {
        use coolplane_core::dielectric::{fluid_by_name, P_ATM_PA};
        use coolplane_core::signals::TankMeasurement;
        let site = builtin_site("supernode-2pic").unwrap();
        let topo = Topology::new(&site);
        let mut c = Controller::new(
            &site,
            coolplane_policies::by_name("vendor-default").unwrap(),
            ControllerConfig::default(),
        );
        let relief = c.limits.cdus[0].tank_relief_gauge_kpa.expect("a tank site");
        let design = c.limits.design_setpoints();
        let fluid = fluid_by_name(&site.halls[0].immersion.as_ref().unwrap().fluid).unwrap();
        // The pool temperature of a tank at `kpa` above atmospheric.
        let pool_at = |kpa: f64| fluid.t_sat_c(P_ATM_PA + 1000.0 * kpa);
        // Tank 0's gauge and pool thermometer as given (`None`: bad quality); every other tank
        // at 1 kPa on both.
        let img = |c: &Controller, t: f64, gauge: Option<f64>, pool_kpa: Option<f64>| {
            let mut img = image(&topo, t, 70.0);
            for (i, m) in img.cdus.iter_mut().enumerate() {
                let sp = c.setpoints().cdus[i];
                m.supply_temp_c = Reading::good(sp.supply_c, t);
                m.supply_setpoint_c = Reading::good(sp.supply_c, t);
                m.flow_lpm = Reading::good(sp.flow_lpm, t);
                m.flow_setpoint_lpm = Reading::good(sp.flow_lpm, t);
                let (g, p) = if i == 0 {
                    (gauge, pool_kpa)
                } else {
                    (Some(1.0), Some(1.0))
                };
                let r = |v: Option<f64>| match v {
                    Some(v) => Reading::good(v, t),
                    None => Reading {
                        value: 0.0,
                        t_s: t,
                        quality: Quality::Bad,
                    },
                };
                m.tank = Some(TankMeasurement {
                    pressure_gauge_kpa: r(g),
                    pool_temp_c: r(p.map(pool_at)),
                    fluid_level_pct: Reading::good(100.0, t),
                    venting: false,
                });
            }
            img
        };
        let tank_events = |c: &mut Controller| {
            c.drain_events()
                .into_iter()
                .filter(|e| e.message.contains("tank") || e.message.contains("guard"))
                .collect::<Vec<_>>()
        };
        // Both paths agree at 1 kPa: no guard, no event.
        c.tick(0.0, &img(&c, 0.0, Some(1.0), Some(1.0)));
        assert!(tank_events(&mut c).is_empty());
        assert_eq!(c.setpoints().cdus[0], design.cdus[0]);
        // The tank rises to 95 % of its relief pressure; the gauge stays at 1 kPa (stuck, or
        // drifted low). The pool thermometer says so: the guard acts on the pool's reading.
        let high = 0.95 * relief;
        c.tick(60.0, &img(&c, 60.0, Some(1.0), Some(high)));
        let ev = tank_events(&mut c);
        assert!(
            ev.iter().any(|e| e.severity == Severity::Warning
                && e.message.contains("gauge reads 1.0 kPa")
                && e.message.contains(&format!("pool thermometer {high:.1} kPa"))
                && e.message.contains("one of them is wrong")),
            "{ev:?}"
        );
        assert!(
            ev.iter().any(|e| e.severity == Severity::Critical
                && e.message
                    .contains(&format!("tank at {high:.1} kPa by its pool thermometer"))
                && e.message.contains("colder condenser water, full flow")),
            "{ev:?}"
        );
        let sp0 = c.setpoints().cdus[0];
        // Full flow, at the flow register's 1 L/min resolution.
        let full = c.limits.cdus[0].flow_max_lpm.round();
        assert_eq!(sp0.flow_lpm, full);
        assert!(sp0.supply_c < design.cdus[0].supply_c, "{sp0:?}");
        // The other tanks are left alone.
        assert_eq!(c.setpoints().cdus[1], design.cdus[1]);
        // The gauge is lost: the pool alone keeps the guard on.
        c.tick(120.0, &img(&c, 120.0, None, Some(high)));
        let ev = tank_events(&mut c);
        assert!(
            ev.iter()
                .any(|e| e.message.contains("gauge unusable") && e.message.contains("pool thermometer")),
            "{ev:?}"
        );
        assert!(c.setpoints().cdus[0].supply_c < sp0.supply_c, "still colder");
        // Both lost: the guard holds what it decided, and the operator hears it.
        c.tick(180.0, &img(&c, 180.0, None, None));
        let ev = tank_events(&mut c);
        assert!(
            ev.iter()
                .any(|e| e.severity == Severity::Critical && e.message.contains("pressure unknown")),
            "{ev:?}"
        );
        assert!(!ev.iter().any(|e| e.message.contains("released")), "{ev:?}");
        assert_eq!(c.setpoints().cdus[0].flow_lpm, full);
        // Back after a minute, both at 1 kPa: the guard releases (neither path says more), but
        // a minute's loss does not wipe what the cross-check learned: the paths stay apart
        // until the smoothed disagreement has decayed, then agree again.
        let mut t = 240.0;
        c.tick(t, &img(&c, t, Some(1.0), Some(1.0)));
        let ev = tank_events(&mut c);
        assert!(ev.iter().any(|e| e.message.contains("guard released")), "{ev:?}");
        assert!(ev.iter().any(|e| e.message.contains("one of them is wrong")), "{ev:?}");
        let agree_again = |c: &mut Controller, t: &mut f64, g: f64, p: f64| {
            for _ in 0..100 {
                *t += 60.0;
                c.tick(*t, &img(c, *t, Some(g), Some(p)));
                if tank_events(c).iter().any(|e| e.message.contains("agree again")) {
                    return true;
                }
            }
            false
        };
        let t0 = t;
        assert!(agree_again(&mut c, &mut t, 1.0, 1.0));
        assert!(t - t0 > 600.0, "together again after {} s", t - t0);
        // A gauge reading high against a cool pool: one reading past 3 kPa is apart at once, and
        // the guard acts on the gauge (the higher), as before the cross-check.
        t += 60.0;
        c.tick(t, &img(&c, t, Some(high), Some(1.0)));
        let ev = tank_events(&mut c);
        assert!(ev.iter().any(|e| e.message.contains("one of them is wrong")), "{ev:?}");
        assert!(
            ev.iter()
                .any(|e| e.message.contains(&format!("tank at {high:.1} kPa,"))),
            "{ev:?}"
        );
        assert!(agree_again(&mut c, &mut t, 1.0, 1.0));
        // A disagreement within the tolerance, held for an hour, is none.
        for _ in 0..60 {
            t += 60.0;
            c.tick(t, &img(&c, t, Some(1.0), Some(1.0 + 0.9 * TANK_CROSSCHECK_KPA)));
        }
        assert!(tank_events(&mut c).is_empty());
        // Past it, held, it is one (with the gauge still in its normal range: a drift).
        let mut named = None;
        for k in 0..60 {
            t += 60.0;
            c.tick(t, &img(&c, t, Some(1.0), Some(1.0 + 1.5 * TANK_CROSSCHECK_KPA)));
            if tank_events(&mut c)
                .iter()
                .any(|e| e.message.contains("one of them is wrong"))
            {
                named = Some(k);
                break;
            }
        }
        assert!(named.is_some_and(|k| k > 0), "named after {named:?} ticks");
        assert!(agree_again(&mut c, &mut t, 1.0, 1.0));
        // A gauge 2 kPa low under a tank at 85 % of its relief pressure that drops out one tick in
        // five: once apart the guard stays on, gauge or no gauge, and the operator hears of each
        // loss of the gauge and each return, not of a flapping guard.
        let (truth, low) = (0.85 * relief, 0.85 * relief - 2.0);
        let mut guard_events = 0;
        let mut on_at = None;
        for k in 0..120 {
            t += 60.0;
            let gauge = (k % 5 != 4).then_some(low);
            c.tick(t, &img(&c, t, gauge, Some(truth)));
            let ev = tank_events(&mut c);
            guard_events += ev
                .iter()
                .filter(|e| {
                    e.message.contains("colder condenser water, full flow") || e.message.contains("guard released")
                })
                .count();
            if on_at.is_none() && ev.iter().any(|e| e.message.contains("colder condenser water")) {
                on_at = Some(k);
            }
        }
        assert!(on_at.is_some_and(|k| k < 15), "guard on after {on_at:?} ticks");
        assert_eq!(guard_events, 1, "the guard flapped");
        assert_eq!(c.setpoints().cdus[0].flow_lpm, full);
        assert!(agree_again(&mut c, &mut t, 1.0, 1.0));
        // Readings either side of the one-reading trigger, every 5 s: apart once, not every tick.
        let mut parted = 0;
        for k in 0..20 {
            t += 5.0;
            let d = if k % 2 == 0 { 3.1 } else { 2.9 } * TANK_CROSSCHECK_KPA;
            c.tick(t, &img(&c, t, Some(1.0), Some(1.0 + d)));
            parted += tank_events(&mut c)
                .iter()
                .filter(|e| e.message.contains("one of them is wrong") || e.message.contains("agree again"))
                .count();
        }
        assert_eq!(parted, 1);
    }

    #[test]
    fn all_stale_enters_safe_mode() {
        let (mut c, topo) = ctl("trim-respond");
        let mut img = image(&topo, 0.0, 70.0);
        img.gpus.t_s = -1000.0;
        c.tick(0.0, &img);
        assert_eq!(c.mode(), Mode::Safe);
        let img = image(&topo, 60.0, 70.0);
        c.tick(60.0, &img);
        assert_eq!(c.mode(), Mode::Auto);
    }

    #[test]
    fn thermal_guard_overrides_policy() {
        let (mut c, topo) = ctl("vendor-default");
        c.tick(-60.0, &image(&topo, -60.0, 70.0));
        let mut img = image(&topo, 0.0, 70.0);
        img.racks[0].gpu_temp_max_c = Reading::good(86.0, 0.0);
        let a = c.tick(0.0, &img);
        assert_eq!(a.cdus[0].supply_temp_setpoint_c, Some(39.0));
        assert_eq!(a.cdus[0].flow_setpoint_lpm, Some(2376.0));
        assert_eq!(a.cdus[1].supply_temp_setpoint_c, None);
        assert!(c.drain_events().iter().any(|e| e.severity == Severity::Critical));
    }

    #[test]
    fn operator_setpoint_is_range_checked_rate_limited_guarded_and_released() {
        let (mut c, topo) = ctl("vendor-default");
        let e = c
            .set_operator_setpoint(OperatorPoint::CduSupply(0), Some(90.0), 0.0)
            .unwrap_err();
        assert!(e.contains("outside the equipment range"), "{e}");
        assert_eq!(
            c.operator_setpoints().cdu_supply_c[0],
            None,
            "a refused value is not held"
        );
        c.set_operator_setpoint(OperatorPoint::CduSupply(0), Some(42.0), 0.0)
            .unwrap();
        c.tick(-60.0, &image(&topo, -60.0, 70.0));
        let before = c.setpoints().cdus[0].supply_c;
        c.tick(0.0, &image(&topo, 0.0, 70.0));
        let after = c.setpoints().cdus[0].supply_c;
        assert!(
            after > before && after - before <= 1.0 + 1e-9,
            "rate-limited: {before} → {after}"
        );
        for k in 1..10 {
            c.tick(k as f64 * 60.0, &image(&topo, k as f64 * 60.0, 70.0));
        }
        assert_eq!(c.setpoints().cdus[0].supply_c, 42.0, "held by the operator");
        assert!(c.setpoints().cdus[1].supply_c < 42.0, "other CDUs untouched");
        // The thermal guard still acts on an operator's setpoint.
        let mut img = image(&topo, 600.0, 70.0);
        img.racks[0].gpu_temp_max_c = Reading::good(86.0, 600.0);
        c.tick(600.0, &img);
        assert!(c.setpoints().cdus[0].supply_c < 42.0);
        // Released: back to the policy (design for vendor-default).
        c.set_operator_setpoint(OperatorPoint::CduSupply(0), None, 660.0)
            .unwrap();
        for k in 11..30 {
            c.tick(k as f64 * 60.0, &image(&topo, k as f64 * 60.0, 70.0));
        }
        assert_eq!(c.setpoints().cdus[0].supply_c, before);
        let ev = c.drain_events();
        assert!(ev.iter().any(|e| e.message.contains("operator holds")), "{ev:?}");
        assert!(ev.iter().any(|e| e.message.contains("operator released")), "{ev:?}");
    }

    #[test]
    fn a_ramp_at_5s_ticks_writes_once_a_minute_but_the_guard_moves_every_tick() {
        let (mut c, topo) = ctl("vendor-default");
        let start = c.setpoints().cdus[0].supply_c;
        c.set_operator_setpoint(OperatorPoint::CduSupply(0), Some(start + 3.0), 0.0)
            .unwrap();
        // The device reads back what was last written.
        let mut writes = Vec::new();
        let mut in_force = start;
        for k in 0..=60 {
            let t = k as f64 * 5.0;
            let mut img = image(&topo, t, 70.0);
            img.cdus[0].supply_setpoint_c = Reading::good(in_force, t);
            let a = c.tick(t, &img);
            if let Some(s) = a.cdus[0].supply_temp_setpoint_c {
                writes.push((t, s));
                in_force = s;
            }
        }
        assert_eq!(c.setpoints().cdus[0].supply_c, start + 3.0, "reached in 5 min");
        // A new controller holds its first tick; then one 1 K step a minute: 3 writes, not 36.
        assert_eq!(writes.len(), 3, "{writes:?}");
        for w in writes.windows(2) {
            assert!(w[1].0 - w[0].0 >= 60.0 - 1e-9, "{writes:?}");
            assert!((w[1].1 - w[0].1).abs() <= 1.0 + 1e-9, "{writes:?}");
        }
        // The thermal guard is not held: colder every tick, by the rate times the tick.
        let mut before = c.setpoints().cdus[0].supply_c;
        for k in 61..=64 {
            let t = k as f64 * 5.0;
            let mut img = image(&topo, t, 70.0);
            img.cdus[0].supply_setpoint_c = Reading::good(before, t);
            img.racks[0].gpu_temp_max_c = Reading::good(86.0, t);
            let a = c.tick(t, &img);
            let now = c.setpoints().cdus[0].supply_c;
            assert!(
                now < before && before - now <= 1.0 / 12.0 + 0.05 + 1e-9,
                "{before} → {now}"
            );
            assert_eq!(a.cdus[0].supply_temp_setpoint_c, Some(now));
            before = now;
        }
    }

    #[test]
    fn the_facility_setpoint_follows_a_cdu_step_in_the_same_tick_when_the_approach_binds() {
        let (mut c, topo) = ctl("vendor-default");
        let (cdu0, fac0) = (c.setpoints().cdus[0].supply_c, c.setpoints().facilities[0]);
        // Warm the facility water to 0.1 K under its approach limit (coldest CDU − 2 K).
        let near = cdu0 - 2.1;
        c.set_operator_setpoint(OperatorPoint::FacilitySupply(0), Some(near), 0.0)
            .unwrap();
        let mut t = 0.0;
        let mut in_force = (cdu0, fac0);
        let tick = |c: &mut Controller, t: f64, in_force: &mut (f64, f64)| {
            let mut img = image(&topo, t, 70.0);
            img.cdus[0].supply_setpoint_c = Reading::good(in_force.0, t);
            img.facilities[0].supply_setpoint_c = Reading::good(in_force.1, t);
            let a = c.tick(t, &img);
            if let Some(s) = a.cdus[0].supply_temp_setpoint_c {
                in_force.0 = s;
            }
            if let Some(s) = a.facilities[0].supply_temp_setpoint_c {
                in_force.1 = s;
            }
            a
        };
        while t < 900.0 {
            tick(&mut c, t, &mut in_force);
            t += 5.0;
        }
        assert!((c.setpoints().facilities[0] - near).abs() < 1e-9, "{:?}", c.setpoints());
        // Now CDU 0 goes 3 K colder: each of its 1 K steps is followed by the facility water in the
        // same tick, one write each, never outside the approach.
        c.set_operator_setpoint(OperatorPoint::CduSupply(0), Some(cdu0 - 3.0), t)
            .unwrap();
        let mut fac_writes = 0;
        while t < 1200.0 {
            let a = tick(&mut c, t, &mut in_force);
            fac_writes += a.facilities[0].supply_temp_setpoint_c.is_some() as usize;
            let sp = c.setpoints();
            assert!(sp.facilities[0] <= sp.cdus[0].supply_c - 2.0 + 1e-9, "t {t}: {sp:?}");
            t += 5.0;
        }
        assert_eq!(c.setpoints().cdus[0].supply_c, cdu0 - 3.0);
        assert!(fac_writes <= 3, "{fac_writes} facility writes for three CDU steps");
    }

    #[test]
    fn wrong_shape_image_is_safe_not_a_panic() {
        let (mut c, _topo) = ctl("trim-respond");
        let a = c.tick(0.0, &Measurements::default());
        assert_eq!(c.mode(), Mode::Safe);
        assert_eq!(a.cdus.len(), 12);
    }

    /// A restarted controller (or one meeting a device back from its local fallback) starts its
    /// rate limits from the setpoint the device works to, not from design: no jump.
    #[test]
    fn a_new_controller_moves_from_the_setpoint_in_force() {
        let (mut c, topo) = ctl("vendor-default");
        let mut img = image(&topo, 0.0, 70.0);
        for m in &mut img.cdus {
            m.supply_setpoint_c = Reading::good(45.0, 0.0);
        }
        let a = c.tick(0.0, &img);
        assert_eq!(a.setpoint_writes(), 0, "the first tick holds what is in force");
        for m in &mut img.cdus {
            m.supply_setpoint_c.t_s = 60.0;
            m.supply_temp_c.t_s = 60.0;
            m.flow_lpm.t_s = 60.0;
            m.flow_setpoint_lpm.t_s = 60.0;
        }
        img.gpus.t_s = 60.0;
        for r in &mut img.racks {
            r.gpu_temp_max_c.t_s = 60.0;
        }
        let a = c.tick(60.0, &img);
        let design = c.limits.design_setpoints().cdus[0].supply_c;
        assert!(design < 44.0, "premise: design {design} °C is more than a tick away");
        assert_eq!(
            a.cdus[0].supply_temp_setpoint_c,
            Some(44.0),
            "one rate-limited step from 45 °C"
        );
        assert!(c.drain_events().iter().any(|e| e.message.contains("read back")));
        // A CDU that went stale is read back again when it returns, here on its local setpoint.
        let mut t = 120.0;
        let mut bad = image(&topo, t, 70.0);
        bad.cdus[0].supply_temp_c.quality = Quality::Bad;
        c.tick(t, &bad);
        t += 60.0;
        let mut back = image(&topo, t, 70.0);
        back.cdus[0].supply_setpoint_c = Reading::good(44.5, t);
        back.cdus[0].local_fallback = true;
        let a = c.tick(t, &back);
        let s = a.cdus[0]
            .supply_temp_setpoint_c
            .expect("written while the device is on its fallback");
        assert!((s - 44.5).abs() <= 1.0 + 1e-9, "from the setpoint in force: {s}");
        assert!(a.cdus[0].flow_setpoint_lpm.is_some());
    }

    fn hot_gpu_image(topo: &Topology, t: f64, gpu: usize, temp: f32) -> Measurements {
        let mut img = image(topo, t, 70.0);
        img.gpus.temp_c[gpu] = temp;
        img.gpus.power_w = vec![900.0; topo.gpu_count];
        img.gpus.power_limit_w = vec![1000.0; topo.gpu_count];
        img
    }

    /// The last line of defence: a GPU near slowdown that cooling cannot save (a valve stuck
    /// shut) has its power cut tick by tick, and gets it back once cool; never on stale data.
    #[test]
    fn emergency_caps_cut_a_gpu_near_slowdown_and_release_it_when_cool() {
        let (mut c, topo) = ctl("vendor-default");
        let slow = c.limits.gpu_slowdown_c as f32;
        let (lo, tdp) = (c.limits.gpu_min_cap_w as f32, c.limits.gpu_tdp_w as f32);
        let g = topo.racks[1].gpus.start + 3;
        let a = c.tick(0.0, &hot_gpu_image(&topo, 0.0, g, slow - 1.0));
        let pl = a.power_limits.iter().find(|p| p.rack == 1).expect("rack 1 capped");
        let cap = pl.limits_w[3];
        assert!(
            cap <= 900.0 * (1.0 - 0.15 * 1.5) + 0.01,
            "cut from the power drawn: {cap}"
        );
        assert!(
            pl.limits_w.iter().enumerate().all(|(i, w)| i == 3 || *w == tdp),
            "only the hot GPU"
        );
        assert!(a.power_limits.iter().all(|p| p.rack == 1), "other racks untouched");
        assert!(c
            .drain_events()
            .iter()
            .any(|e| e.severity == Severity::Critical && e.message.contains("emergency")));
        // Still hot: cut again, never below the lowest cap.
        let mut last = cap;
        for k in 1..20 {
            let t = k as f64 * 60.0;
            let mut img = hot_gpu_image(&topo, t, g, slow + 1.0);
            img.gpus.power_limit_w[g] = last;
            img.gpus.power_w[g] = last;
            let a = c.tick(t, &img);
            // Sent when it changes; at the lowest cap it stays.
            let w = a
                .power_limits
                .iter()
                .find(|p| p.rack == 1)
                .map_or(last, |p| p.limits_w[3]);
            assert!(w <= last && w >= lo, "{last} → {w}");
            last = w;
        }
        assert_eq!(last, lo);
        // Telemetry goes stale while capped: nothing is raised.
        let mut stale = hot_gpu_image(&topo, 1200.0, g, 50.0);
        stale.gpus.t_s = 0.0;
        let a = c.tick(1260.0, &stale);
        assert!(a.power_limits.is_empty(), "caps held as they are: {:?}", a.power_limits);
        // Cool again: released 5 % of TDP a tick, then a last message at TDP, then silence.
        let mut t = 1320.0;
        let mut seen = Vec::new();
        for _ in 0..30 {
            let a = c.tick(t, &hot_gpu_image(&topo, t, g, 60.0));
            if let Some(p) = a.power_limits.iter().find(|p| p.rack == 1) {
                seen.push(p.limits_w[3]);
            }
            t += 60.0;
        }
        assert!(seen.windows(2).all(|w| w[1] > w[0]), "{seen:?}");
        assert_eq!(*seen.last().unwrap(), tdp);
        assert_eq!(seen.len() as f32, ((tdp - lo) / (0.05 * tdp)).ceil(), "{seen:?}");
        assert!(c.drain_events().iter().any(|e| e.message.contains("released")));
    }

    /// Blind but not deaf: with GPU telemetry stale, a CDU whose supply temperature (still read
    /// over Modbus) rose since the GPUs last reported gets its GPUs' temperatures estimated from
    /// that rise, and capped when the estimate nears slowdown; nothing is released blind.
    #[test]
    fn emergency_caps_on_stale_telemetry_follow_the_cdu_supply_rise() {
        let (mut c, topo) = ctl("vendor-default");
        let slow = c.limits.gpu_slowdown_c as f32;
        let g = topo.racks[1].gpus.start + 3;
        assert_eq!(topo.racks[1].cdu, 0);
        let a = c.tick(0.0, &hot_gpu_image(&topo, 0.0, g, slow - 4.0));
        assert!(a.power_limits.is_empty(), "4 K from slowdown: no cap yet");
        // Telemetry stops at t = 0; CDU 0's supply climbs 3 K.
        let mut img = hot_gpu_image(&topo, 0.0, g, slow - 4.0);
        img.t_s = 300.0;
        img.cdus[0].supply_temp_c = Reading::good(43.0, 300.0);
        img.cdus[0].flow_lpm = Reading::good(2160.0, 300.0);
        c.drain_events();
        let a = c.tick(300.0, &img);
        let pl = a.power_limits.iter().find(|p| p.rack == 1).expect("capped blind");
        assert!(pl.limits_w[3] < 900.0, "{:?}", pl.limits_w[3]);
        assert!(
            a.power_limits.iter().all(|p| topo.racks[p.rack as usize].cdu == 0),
            "only CDU 0's racks"
        );
        assert!(c.drain_events().iter().any(|e| e.message.contains("estimated")));
        // The supply falls back, still blind: the cap is held, not released.
        img.cdus[0].supply_temp_c = Reading::good(40.0, 360.0);
        img.cdus[0].flow_lpm = Reading::good(2160.0, 360.0);
        let a = c.tick(360.0, &img);
        assert!(a.power_limits.is_empty(), "{:?}", a.power_limits);
    }

    /// Rack temperatures lost while the thermal guard acts: the guard holds (colder supply, full
    /// flow) instead of releasing for want of data.
    #[test]
    fn the_thermal_guard_holds_when_the_rack_data_goes_stale() {
        let (mut c, topo) = ctl("vendor-default");
        c.tick(-60.0, &image(&topo, -60.0, 70.0));
        let mut img = image(&topo, 0.0, 70.0);
        img.racks[0].gpu_temp_max_c = Reading::good(86.0, 0.0);
        c.tick(0.0, &img);
        let mut img = image(&topo, 60.0, 70.0);
        img.racks[0].gpu_temp_max_c = Reading::good(86.0, 0.0);
        img.racks[0].gpu_temp_max_c.quality = Quality::Bad;
        c.drain_events();
        let a = c.tick(60.0, &img);
        assert_eq!(
            a.cdus[0].flow_setpoint_lpm.or(Some(c.setpoints().cdus[0].flow_lpm)),
            Some(2376.0)
        );
        assert!(
            c.setpoints().cdus[0].supply_c <= 38.0 + 1e-9,
            "{:?}",
            c.setpoints().cdus[0]
        );
        assert!(!c.drain_events().iter().any(|e| e.message.contains("released")));
    }

    /// A policy that holds the setpoints in force and proposes one heat-rejection mode.
    struct ModeScript(RejectionMode);

    impl Policy for ModeScript {
        fn name(&self) -> &'static str {
            "mode-script"
        }
        fn decide(&mut self, input: &PolicyInput<'_>) -> Decision {
            let mut sp = input.current.clone();
            sp.rejection = vec![self.0; sp.facilities.len()];
            Decision {
                setpoints: sp,
                power_limits: Vec::new(),
                placement: None,
                reasons: Vec::new(),
                plan: None,
            }
        }
    }

    /// The heat-rejection mode: held from the first read-back, written on change and on a
    /// read-back that differs, never again once the device reads it back, given up for auto at
    /// once when the facility water runs warm under dry, refused without a trim chiller, and
    /// auto in safe mode.
    #[test]
    fn the_heat_rejection_mode_is_held_written_on_read_back_and_given_up_when_unsafe() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let cfg = ControllerConfig::default();
        let mut c = Controller::new(&site, Box::new(ModeScript(RejectionMode::Dry)), cfg);
        let mut rb = RejectionMode::Auto;
        let tick = |c: &mut Controller, t: f64, rb: RejectionMode, supply: f64| {
            let mut img = image(&topo, t, 70.0);
            img.facilities[0].rejection_mode = Some(rb);
            img.facilities[0].supply_temp_c = Reading::good(supply, t);
            c.tick(t, &img).facilities[0].rejection_mode
        };
        // Held for the hold time from the first read-back (a restart does not flip the pads).
        for k in 0..15 {
            let t = k as f64 * 60.0;
            assert_eq!(tick(&mut c, t, rb, 34.0), None, "t={t}");
            assert_eq!(c.setpoints().rejection_mode(0), RejectionMode::Auto);
        }
        let t0 = cfg.rejection_mode_hold_s;
        assert_eq!(tick(&mut c, t0, rb, 34.0), Some(RejectionMode::Dry));
        assert!(c.drain_events().iter().any(|e| e
            .message
            .contains("heat-rejection mode auto -> dry (the policy's choice)")));
        // The device has not taken it yet: written again; then read back: not written.
        assert_eq!(tick(&mut c, t0 + 60.0, rb, 34.0), Some(RejectionMode::Dry));
        rb = RejectionMode::Dry;
        assert_eq!(tick(&mut c, t0 + 120.0, rb, 34.0), None);
        // The facility water 2.5 K above its setpoint: dry is given up for auto at once.
        assert_eq!(tick(&mut c, t0 + 180.0, rb, 36.5), Some(RejectionMode::Auto));
        assert!(c.drain_events().iter().any(|e| e.message.contains("dry refused")));
        rb = RejectionMode::Auto;
        // Back to normal: dry again only a hold time after that change.
        assert_eq!(tick(&mut c, t0 + 240.0, rb, 34.0), None);
        assert_eq!(tick(&mut c, t0 + 180.0 + t0 - 60.0, rb, 34.0), None);
        assert_eq!(tick(&mut c, t0 + 180.0 + t0, rb, 34.0), Some(RejectionMode::Dry));
        rb = RejectionMode::Dry;
        // Safe mode: auto at once, whatever the hold.
        let t1 = t0 + 180.0 + t0 + 60.0;
        c.set_mode(Mode::Safe, t1);
        assert_eq!(tick(&mut c, t1, rb, 34.0), Some(RejectionMode::Auto));

        // Without a trim chiller behind the dry coolers, dry is never commanded.
        let mut bare = site.clone();
        bare.halls[0].facility.chiller = None;
        let mut c = Controller::new(&bare, Box::new(ModeScript(RejectionMode::Dry)), cfg);
        for k in 0..40 {
            let t = k as f64 * 60.0;
            let mut img = image(&topo, t, 70.0);
            img.facilities[0].rejection_mode = Some(RejectionMode::Auto);
            assert_eq!(c.tick(t, &img).facilities[0].rejection_mode, None, "t={t}");
        }
        // Adiabatic is (the assist adds cooling).
        let mut c = Controller::new(&bare, Box::new(ModeScript(RejectionMode::Adiabatic)), cfg);
        let mut wrote = None;
        for k in 0..40 {
            let t = k as f64 * 60.0;
            let mut img = image(&topo, t, 70.0);
            img.facilities[0].rejection_mode = Some(RejectionMode::Auto);
            wrote = wrote.or(c.tick(t, &img).facilities[0].rejection_mode);
        }
        assert_eq!(wrote, Some(RejectionMode::Adiabatic));

        // A controller started while the pads run adopts the mode read back and says so; one
        // that reads back what it would command stays quiet.
        for (rb, said) in [(RejectionMode::Adiabatic, true), (RejectionMode::Auto, false)] {
            let mut c = Controller::new(&site, Box::new(ModeScript(RejectionMode::Dry)), cfg);
            let mut img = image(&topo, 0.0, 70.0);
            img.facilities[0].rejection_mode = Some(rb);
            c.tick(0.0, &img);
            assert_eq!(c.setpoints().rejection_mode(0), rb);
            let events = c.drain_events();
            assert_eq!(
                events.iter().any(|e| e
                    .message
                    .contains("heat-rejection mode in force read back (adiabatic, was commanded auto)")),
                said,
                "{rb:?}: {events:?}"
            );
        }
    }

    /// A policy whose fast loop asks for a cap on rack 0 (600 W) until `lift` is set, then TDP.
    struct FastScript {
        n: usize,
        calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
        lift: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl Policy for FastScript {
        fn name(&self) -> &'static str {
            "fast-script"
        }
        fn decide(&mut self, input: &PolicyInput<'_>) -> Decision {
            Decision {
                setpoints: input.current.clone(),
                power_limits: Vec::new(),
                placement: None,
                reasons: Vec::new(),
                plan: None,
            }
        }
        fn fast(&mut self, _input: &PolicyInput<'_>) -> coolplane_policies::dvfs::FastDecision {
            use std::sync::atomic::Ordering::SeqCst;
            let n = self.calls.fetch_add(1, SeqCst);
            let w = if self.lift.load(SeqCst) { 1000.0 } else { 600.0 };
            coolplane_policies::dvfs::FastDecision {
                power_limits: vec![RackPowerLimits {
                    rack: 0,
                    limits_w: vec![w; self.n],
                }],
                notices: (n == 0)
                    .then(|| coolplane_policies::dvfs::Notice {
                        warning: true,
                        message: "budget: shedding".into(),
                    })
                    .into_iter()
                    .collect(),
            }
        }
    }

    #[test]
    fn the_fast_loop_runs_every_tick_and_a_raise_held_on_stale_data_follows_when_fresh() {
        use std::sync::atomic::Ordering::SeqCst;
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let lift = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let policy = FastScript {
            n: topo.racks[0].gpus.len(),
            calls: calls.clone(),
            lift: lift.clone(),
        };
        let mut c = Controller::new(&site, Box::new(policy), ControllerConfig::default());
        let n = topo.racks[0].gpus.len();
        let with_limits = |t: f64, w: f32| {
            let mut m = image(&topo, t, 70.0);
            m.gpus.power_limit_w = vec![1000.0; topo.gpu_count];
            m.gpus.power_limit_w[..n].iter_mut().for_each(|x| *x = w);
            m
        };
        // Every tick, not only on the slow loop; its notice becomes an event.
        let a = c.tick(0.0, &with_limits(0.0, 1000.0));
        assert_eq!(a.power_limits[0].limits_w, vec![600.0; n]);
        assert!(c
            .drain_events()
            .iter()
            .any(|e| e.severity == Severity::Warning && e.message == "budget: shedding"));
        c.tick(5.0, &with_limits(5.0, 600.0));
        assert_eq!(calls.load(SeqCst), 2);
        // A lift asked for while a CDU's data is stale is held at the limit in force ...
        lift.store(true, SeqCst);
        let mut m = with_limits(10.0, 600.0);
        m.cdus[3].supply_temp_c.t_s = -1_000.0;
        let a = c.tick(10.0, &m);
        assert_eq!(a.power_limits[0].limits_w, vec![600.0; n]);
        assert!(
            c.drain_events()
                .iter()
                .any(|e| e.message.contains("while data is stale")),
            "a held raise is said"
        );
        // ... and sent once the data is fresh again, even by a tick whose policy sends nothing new.
        lift.store(false, SeqCst);
        calls.store(100, SeqCst);
        let a = c.tick(15.0, &with_limits(15.0, 600.0));
        // The policy now asks for 600 W again: what it asks wins over the held raise.
        assert_eq!(a.power_limits[0].limits_w, vec![600.0; n]);
        lift.store(true, SeqCst);
        let mut m = with_limits(20.0, 600.0);
        m.cdus[3].supply_temp_c.t_s = -1_000.0;
        assert_eq!(c.tick(20.0, &m).power_limits[0].limits_w, vec![600.0; n]);
        // Safe mode: the fast loop is not run; the held raise waits for fresh data.
        c.set_mode(Mode::Safe, 25.0);
        let before = calls.load(SeqCst);
        let a = c.tick(25.0, &with_limits(25.0, 600.0));
        assert_eq!(calls.load(SeqCst), before, "fast loop ran in safe mode");
        assert_eq!(a.power_limits.len(), 1, "the held raise is sent on fresh data");
        assert_eq!(a.power_limits[0].limits_w, vec![1000.0; n]);
    }
}
